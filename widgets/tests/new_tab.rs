//! The new-tab dialog: snapshots over a busy workbench, and the form driven
//! key by key.

mod common;

use common::{dump, render, row};
use lazaret_widgets::panels::{FormOutcome, NewTabDialog, NewTabField, NewTabForm, ProfileChoice};
use ratatui::Frame;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier};
use ratatui::widgets::{Paragraph, Widget as _};

fn profiles() -> Vec<ProfileChoice> {
    vec![
        ProfileChoice {
            name: "claude".into(),
            runtime: "gVisor (runsc)".into(),
            gvisor: true,
            command: "claude".into(),
        },
        ProfileChoice {
            name: "aider-runc".into(),
            runtime: "runc".into(),
            gvisor: false,
            command: "aider --model sonnet".into(),
        },
        ProfileChoice {
            name: "shell".into(),
            runtime: "gVisor (runsc)".into(),
            gvisor: true,
            command: "login shell".into(),
        },
    ]
}

fn lazaret_form() -> NewTabForm {
    NewTabForm::new(profiles(), 0, "/home/ana/src/lazaret")
}

/// Dots everywhere, so the snapshots show the dialog clearing what it
/// covers.
fn dialog(f: &mut Frame<'_>, form: &NewTabForm) {
    let area = f.area();
    let dots = vec![".".repeat(usize::from(area.width)); usize::from(area.height)].join("\n");
    Paragraph::new(dots).render(area, f.buffer_mut());
    f.render_widget(NewTabDialog::new(form), area);
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

fn type_str(form: &mut NewTabForm, text: &str) {
    for c in text.chars() {
        assert_eq!(form.handle_key(key(KeyCode::Char(c))), FormOutcome::Editing);
    }
}

#[test]
fn default_form_with_a_runc_profile() {
    let form = lazaret_form();
    let buf = render(80, 16, |f| dialog(f, &form));
    insta::assert_snapshot!(dump(&buf));
    let text = dump(&buf);
    assert!(text.contains("Up/Down profile · Tab field · Enter open · Esc cancel"));
    // The runc profile is loud: white on red, bold.
    let y = (0..16)
        .find(|&y| row(&buf, y).contains("NOT gVisor: runc"))
        .expect("NOT gVisor shown");
    let x = row(&buf, y).find("NOT gVisor").expect("on that row");
    let x = u16::try_from(row(&buf, y)[..x].chars().count()).unwrap();
    let cell = &buf[(x, y)];
    assert_eq!((cell.fg, cell.bg), (Color::White, Color::Red));
    assert!(cell.modifier.contains(Modifier::BOLD));
}

#[test]
fn workspace_field_focused_after_tab() {
    let mut form = lazaret_form();
    form.handle_key(key(KeyCode::Down));
    form.handle_key(key(KeyCode::Tab));
    assert_eq!(form.focus(), NewTabField::Workspace);
    let buf = render(80, 16, |f| dialog(f, &form));
    insta::assert_snapshot!(dump(&buf));
}

#[test]
fn an_error_is_shown_and_the_dialog_stays_open() {
    let mut form = NewTabForm::new(profiles(), 2, "/home/ana/src/lazarte");
    form.handle_key(key(KeyCode::Tab));
    form.set_error("no such directory: /home/ana/src/lazarte");
    let buf = render(80, 16, |f| dialog(f, &form));
    insta::assert_snapshot!(dump(&buf));
    assert!(dump(&buf).contains("! no such directory"));
    // Editing the path clears it.
    form.handle_key(key(KeyCode::Backspace));
    assert_eq!(form.error(), None);
}

#[test]
fn small_terminal_keeps_the_path_end_the_runtime_and_the_error() {
    let mut form = NewTabForm::new(
        profiles(),
        1,
        "/home/ana/work/clients/very-long-customer-name/backend-service",
    );
    form.set_error("no such directory");
    let buf = render(40, 12, |f| dialog(f, &form));
    insta::assert_snapshot!(dump(&buf));
    let text = dump(&buf);
    assert!(text.contains("…"), "the path is cut at its start");
    assert!(text.contains("backend-service"), "and keeps its end");
    assert!(text.contains("NOT gVisor"));
    assert!(text.contains("! no such directory"));
    // The selected runc profile stays white on red, not reversed.
    let x = row(&buf, 3).find("NOT gVisor").expect("NOT gVisor shown");
    let x = u16::try_from(row(&buf, 3)[..x].chars().count()).unwrap();
    let cell = &buf[(x, 3)];
    assert_eq!((cell.fg, cell.bg), (Color::White, Color::Red));
    assert!(!cell.modifier.contains(Modifier::REVERSED));
}

#[test]
fn a_short_list_scrolls_to_the_selection_and_says_where_it_is() {
    let form = NewTabForm::new(profiles(), 2, "/srv");
    let buf = render(60, 8, |f| dialog(f, &form));
    let text = dump(&buf);
    assert!(text.contains("Profile 3/3"), "{text}");
    assert!(text.contains("› shell"), "{text}");
    assert!(!text.contains("claude"), "{text}");
    // Many profiles: the list takes what room there is.
    let many: Vec<ProfileChoice> = profiles().into_iter().cycle().take(40).collect();
    let form = NewTabForm::new(many, 39, "/srv");
    let buf = render(80, 16, |f| dialog(f, &form));
    assert!(dump(&buf).contains("Profile 40/40"));
    assert!(dump(&buf).contains("Esc cancel"));
}

#[test]
fn tiny_terminal_keeps_the_selected_profile_and_the_field() {
    let mut form = NewTabForm::new(profiles(), 2, "/home/ana/src/lazaret");
    form.set_error("no such directory");
    let buf = render(30, 7, |f| dialog(f, &form));
    insta::assert_snapshot!(dump(&buf));
    let text = dump(&buf);
    assert!(text.contains("shell"), "the selected profile stays in view");
    assert!(text.contains("lazaret"));
    // Nothing at all does not panic either.
    for (w, h) in [(1, 1), (2, 2), (5, 3), (12, 4), (30, 1), (200, 3)] {
        render(w, h, |f| dialog(f, &form));
    }
    render(10, 5, |f| {
        f.render_widget(NewTabDialog::new(&form), Rect::new(0, 0, 0, 0));
    });
    let empty = NewTabForm::new(Vec::new(), 0, "");
    let buf = render(60, 12, |f| dialog(f, &empty));
    assert!(dump(&buf).contains("No profiles configured."));
}

#[test]
fn hostile_names_commands_and_paths_are_made_visible() {
    let mut profiles = profiles();
    profiles[0].name = "cla\u{202E}edu".into();
    profiles[0].command = "claude\u{1b}[2J".into();
    let form = NewTabForm::new(profiles, 0, "/tmp/\u{1b}]0;x\u{7}dir");
    let buf = render(80, 16, |f| dialog(f, &form));
    let text = dump(&buf);
    assert!(!text.contains('\u{1b}') && !text.contains('\u{202E}'));
    assert!(text.contains("cla<U+202E>edu"));
    assert!(text.contains("claude␛[2J"));
    assert!(text.contains("/tmp/␛]0;x^Gdir"));
    // What was shown is what is submitted.
    let mut form = form;
    assert_eq!(
        form.handle_key(key(KeyCode::Enter)),
        FormOutcome::Submit {
            profile: "cla\u{202E}edu".into(),
            workspace: "/tmp/␛]0;x^Gdir".into(),
        }
    );
}

#[test]
fn down_selects_the_next_profile_then_moves_to_the_field() {
    let mut form = lazaret_form();
    assert_eq!(form.focus(), NewTabField::Profile);
    assert_eq!(form.handle_key(key(KeyCode::Down)), FormOutcome::Editing);
    assert_eq!(form.selected(), 1);
    form.handle_key(key(KeyCode::Down));
    assert_eq!(form.selected(), 2);
    // Past the last profile, Down moves to the workspace field; Up back.
    form.handle_key(key(KeyCode::Down));
    assert_eq!((form.selected(), form.focus()), (2, NewTabField::Workspace));
    form.handle_key(key(KeyCode::Down));
    assert_eq!((form.selected(), form.focus()), (2, NewTabField::Workspace));
    form.handle_key(key(KeyCode::Up));
    assert_eq!((form.selected(), form.focus()), (2, NewTabField::Profile));
    form.handle_key(key(KeyCode::Up));
    form.handle_key(key(KeyCode::Up));
    form.handle_key(key(KeyCode::Up));
    assert_eq!(form.selected(), 0);
    // Releases do nothing (keyboard enhancement reports them).
    let mut release = key(KeyCode::Down);
    release.kind = KeyEventKind::Release;
    form.handle_key(release);
    assert_eq!(form.selected(), 0);
}

#[test]
fn tab_then_typing_edits_the_path() {
    let mut form = lazaret_form();
    // Typing while the list has the focus edits nothing.
    type_str(&mut form, "x");
    assert_eq!(form.workspace(), "/home/ana/src/lazaret");
    form.handle_key(key(KeyCode::Tab));
    assert_eq!(form.focus(), NewTabField::Workspace);
    // The path filled in is a suggestion: a movement key keeps it.
    form.handle_key(key(KeyCode::End));
    type_str(&mut form, "/widgets");
    assert_eq!(form.workspace(), "/home/ana/src/lazaret/widgets");
    form.handle_key(key(KeyCode::Backspace));
    assert_eq!(form.workspace(), "/home/ana/src/lazaret/widget");
    // Shift-Tab goes back to the list, where Up/Down change the profile.
    form.handle_key(KeyEvent::new(KeyCode::BackTab, KeyModifiers::SHIFT));
    assert_eq!(form.focus(), NewTabField::Profile);
    form.handle_key(key(KeyCode::Down));
    assert_eq!(form.selected(), 1);
    assert_eq!(form.workspace(), "/home/ana/src/lazaret/widget");
}

/// Issue 39: the suggested path is replaced by typing and cleared by
/// C-u; the field has a terminal's line keys; Ctrl-C cancels.
#[test]
fn the_suggested_path_is_replaced_by_typing_and_the_field_edits_like_a_line() {
    let mut form = lazaret_form();
    form.handle_key(key(KeyCode::Tab));
    type_str(&mut form, "/srv");
    assert_eq!(form.workspace(), "/srv");
    let ctrl = |c| KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL);
    let alt = |c| KeyEvent::new(KeyCode::Char(c), KeyModifiers::ALT);
    type_str(&mut form, "/app two");
    form.handle_key(ctrl('w'));
    assert_eq!(form.workspace(), "/srv/app ");
    form.handle_key(ctrl('a'));
    type_str(&mut form, "~");
    assert_eq!(form.workspace(), "~/srv/app ");
    form.handle_key(ctrl('e'));
    form.handle_key(alt('b'));
    form.handle_key(ctrl('u'));
    assert_eq!(form.workspace(), "app ");
    let mut form = lazaret_form();
    form.handle_key(key(KeyCode::Tab));
    form.handle_key(ctrl('u'));
    assert_eq!(form.workspace(), "");
    assert_eq!(form.handle_key(ctrl('c')), FormOutcome::Cancel);
}

#[test]
fn enter_submits_the_profile_and_the_trimmed_path() {
    let mut form = NewTabForm::new(profiles(), 0, "  ");
    form.handle_key(key(KeyCode::Down));
    form.handle_key(key(KeyCode::Tab));
    type_str(&mut form, "/srv/app ");
    assert_eq!(
        form.handle_key(key(KeyCode::Enter)),
        FormOutcome::Submit {
            profile: "aider-runc".into(),
            workspace: "/srv/app".into(),
        }
    );
    // From the list too, and Ctrl+M is Enter.
    let mut form = lazaret_form();
    assert_eq!(
        form.handle_key(KeyEvent::new(KeyCode::Char('m'), KeyModifiers::CONTROL)),
        FormOutcome::Submit {
            profile: "claude".into(),
            workspace: "/home/ana/src/lazaret".into(),
        }
    );
}

#[test]
fn esc_cancels_from_either_field() {
    let mut form = lazaret_form();
    assert_eq!(form.handle_key(key(KeyCode::Esc)), FormOutcome::Cancel);
    form.handle_key(key(KeyCode::Tab));
    assert_eq!(form.handle_key(key(KeyCode::Esc)), FormOutcome::Cancel);
}

#[test]
fn an_empty_path_is_refused_with_an_error() {
    let mut form = NewTabForm::new(profiles(), 0, "   ");
    assert_eq!(form.handle_key(key(KeyCode::Enter)), FormOutcome::Editing);
    assert!(form.error().is_some());
    // The field gets the focus, so typing fixes it.
    assert_eq!(form.focus(), NewTabField::Workspace);
    let buf = render(80, 16, |f| dialog(f, &form));
    assert!(dump(&buf).contains("! Enter the workspace directory."));
    type_str(&mut form, "x");
    assert_eq!(form.error(), None);
}

#[test]
fn paste_goes_to_the_field_without_newlines() {
    let mut form = NewTabForm::new(profiles(), 0, "");
    form.set_error("no such directory");
    form.paste("/home/ana/\r\nsrc\n");
    assert_eq!(form.focus(), NewTabField::Workspace);
    assert_eq!(form.workspace(), "/home/ana/src");
    assert_eq!(form.error(), None);
    form.paste("/\u{202E}x");
    assert_eq!(form.workspace(), "/home/ana/src/<U+202E>x");
}

#[test]
fn set_error_keeps_the_form_and_a_profile_change_clears_it() {
    let mut form = lazaret_form();
    form.set_error("no such directory");
    assert_eq!(form.error(), Some("no such directory"));
    // Moving between fields keeps it; changing the profile clears it.
    form.handle_key(key(KeyCode::Tab));
    form.handle_key(key(KeyCode::Tab));
    assert_eq!(form.error(), Some("no such directory"));
    form.handle_key(key(KeyCode::Down));
    assert_eq!(form.error(), None);
}
