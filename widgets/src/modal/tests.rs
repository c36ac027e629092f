use ratatui::buffer::Buffer;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::Rect;
use ratatui::style::Color;
use ratatui::widgets::StatefulWidget;

use super::*;

fn request(command: &str) -> ApprovalRequest {
    ApprovalRequest {
        id: "req-1".into(),
        profile: "claude".into(),
        justification: "needs the host".into(),
        command: command.into(),
        via_shell: false,
        note: None,
        code: "bcf".into(),
        ..ApprovalRequest::default()
    }
}

fn draw(request: &ApprovalRequest, view: &mut ApprovalView, width: u16, height: u16) -> Buffer {
    let area = Rect::new(0, 0, width, height);
    let mut buf = Buffer::empty(area);
    ApprovalModal::new(request).render(area, &mut buf, view);
    buf
}

fn text(buf: &Buffer) -> String {
    let mut out = String::new();
    for y in 0..buf.area.height {
        for x in 0..buf.area.width {
            out.push_str(buf[(x, y)].symbol());
        }
        out.push('\n');
    }
    out
}

#[test]
fn never_panics_however_small_the_pane() {
    let long = request(&"x".repeat(500));
    for width in 0..=40 {
        for height in 0..=14 {
            let mut view = ApprovalView::new();
            draw(&long, &mut view, width, height);
            let editor = CommandEditor::new(&long.command);
            let area = Rect::new(0, 0, width, height);
            let mut buf = Buffer::empty(area);
            ApprovalModal::new(&long)
                .editing(&editor)
                .render(area, &mut buf, &mut view);
        }
    }
}

#[test]
fn a_request_that_fits_is_seen_at_once() {
    let mut view = ApprovalView::new();
    draw(&request("ls -la"), &mut view, 80, 24);
    assert!(view.seen_whole_request());
    view.scroll_down(5);
    assert_eq!(view.scroll(), 0, "nothing to scroll");
}

#[test]
fn a_long_command_scrolls_and_is_seen_only_at_the_end() {
    let req = request(&format!("echo {}END", "0123456789".repeat(60)));
    let mut view = ApprovalView::new();
    let buf = draw(&req, &mut view, 60, 14);
    assert!(!view.seen_whole_request());
    assert!(text(&buf).contains("[↑↓] scroll"));
    assert!(!text(&buf).contains("END"));
    // Scrolling past the end stops at the end, where END is on screen.
    view.scroll_down(1000);
    let buf = draw(&req, &mut view, 60, 14);
    assert!(view.seen_whole_request());
    assert!(text(&buf).contains("END"));
    // Seen stays seen when scrolling back.
    view.scroll_up(1000);
    draw(&req, &mut view, 60, 14);
    assert_eq!(view.scroll(), 0);
    assert!(view.seen_whole_request());
}

#[test]
fn every_character_of_a_long_command_is_on_screen_somewhere() {
    let command: String = (0..400)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let req = request(&command);
    let mut view = ApprovalView::new();
    let buf = draw(&req, &mut view, 100, 60);
    assert!(view.seen_whole_request());
    // Join the command rows (they start with two spaces of indent).
    let rows: Vec<String> = text(&buf)
        .lines()
        .map(|l| l.trim_matches(|c| c == '┃' || c == ' ').to_string())
        .collect();
    let start = rows.iter().position(|r| r.starts_with("abcdefgh")).unwrap();
    let joined: String = rows[start..]
        .iter()
        .take_while(|r| r.chars().all(|c| c.is_ascii_lowercase()))
        .cloned()
        .collect();
    assert_eq!(joined, command);
}

#[test]
fn placeholders_are_styled_apart_from_literal_text() {
    // The literal "␛" the agent typed and the placeholder for a real ESC
    // look alike; only the placeholder gets the alarm style.
    let req = request("a␛b\u{1b}c");
    let mut view = ApprovalView::new();
    let buf = draw(&req, &mut view, 60, 20);
    let cells: Vec<_> = buf
        .content()
        .iter()
        .filter(|c| c.symbol() == "␛")
        .map(|c| c.bg)
        .collect();
    // The third is the legend of the hidden-characters warning.
    assert_eq!(cells[..2], [Color::DarkGray, Color::Red]);
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

#[test]
fn the_editor_edits_and_submits_the_visible_command() {
    let mut editor = CommandEditor::new("rm -rf /tmp/x\u{1b}[2K");
    assert_eq!(editor.text(), "rm -rf /tmp/x␛[2K");
    assert!(!editor.changed());
    for _ in 0.."␛[2K".chars().count() {
        assert_eq!(
            editor.handle_key(key(KeyCode::Backspace)),
            EditOutcome::Editing
        );
    }
    editor.handle_key(key(KeyCode::Char('y')));
    assert!(editor.changed());
    assert_eq!(
        editor.handle_key(key(KeyCode::Enter)),
        EditOutcome::Submit("rm -rf /tmp/xy".into())
    );
}

#[test]
fn the_editor_cancels_with_esc_and_ignores_releases() {
    let mut editor = CommandEditor::new("ls");
    let release = KeyEvent::new_with_kind(
        KeyCode::Char('x'),
        KeyModifiers::NONE,
        KeyEventKind::Release,
    );
    assert_eq!(editor.handle_key(release), EditOutcome::Editing);
    assert_eq!(editor.text(), "ls");
    assert_eq!(editor.handle_key(key(KeyCode::Esc)), EditOutcome::Cancel);
}

#[test]
fn the_editor_keeps_one_line() {
    let mut editor = CommandEditor::new("ls");
    let ctrl_j = KeyEvent::new(KeyCode::Char('j'), KeyModifiers::CONTROL);
    assert_eq!(editor.handle_key(ctrl_j), EditOutcome::Submit("ls".into()));
    editor.paste(" -l\n\u{202E}x");
    assert_eq!(editor.text(), "ls -l␤<U+202E>x");
}
