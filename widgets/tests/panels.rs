//! Snapshots of every panel on a TestBackend.

mod common;

use std::time::Duration;

use common::{dump, render, row, sessions};
use lazaret_widgets::panels::*;
use ratatui::layout::Rect;
use ratatui::style::Color;

#[test]
fn sessions_panel() {
    let rows = sessions();
    let buf = render(90, 9, |f| {
        f.render_widget(
            SessionsPanel {
                rows: &rows,
                selected: Some(0),
                focused: true,
            },
            f.area(),
        );
    });
    insta::assert_snapshot!(dump(&buf));
    // The non-gVisor runtime is loud: white on red (the second domain, under
    // the first one's three hosted sessions).
    let x = row(&buf, 6).find("NOT gVisor").expect("NOT gVisor shown") as u16;
    let cell = &buf[(x, 6)];
    assert_eq!((cell.fg, cell.bg), (Color::White, Color::Red));
    // A session waiting for an approval says so in words, and so do a
    // shell's command, a shell at its prompt and unseen refusals.
    assert!(row(&buf, 4).contains("WAITING 1"), "{}", dump(&buf));
    assert!(row(&buf, 3).contains("command running"), "{}", dump(&buf));
    assert!(row(&buf, 5).contains("idle at prompt"), "{}", dump(&buf));
    assert!(row(&buf, 2).contains("3 new"), "{}", dump(&buf));
}

#[test]
fn sessions_panel_empty_and_narrow() {
    let buf = render(40, 4, |f| {
        f.render_widget(SessionsPanel::new(&[]), f.area());
    });
    insta::assert_snapshot!(dump(&buf));
    let rows = sessions();
    let buf = render(60, 5, |f| {
        f.render_widget(SessionsPanel::new(&rows), f.area());
    });
    insta::assert_snapshot!("sessions_panel_narrow", dump(&buf));
}

#[test]
fn network_panel() {
    let routes = vec![
        RouteRow {
            prefix: "160.79.104.0/23".into(),
            verdict: Verdict::Allow,
            rule: "profile claude: api.anthropic.com".into(),
        },
        RouteRow {
            prefix: "140.82.112.0/20".into(),
            verdict: Verdict::Allow,
            rule: "live edit 14:02: github.com".into(),
        },
        RouteRow {
            prefix: "10.0.0.0/8".into(),
            verdict: Verdict::Deny,
            rule: "built-in: private ranges".into(),
        },
        RouteRow {
            prefix: "0.0.0.0/0".into(),
            verdict: Verdict::Deny,
            rule: "default".into(),
        },
    ];
    let buf = render(64, 8, |f| {
        f.render_widget(
            NetworkPanel {
                routes: &routes,
                selected: Some(1),
                focused: false,
                waiting: None,
            },
            f.area(),
        );
    });
    insta::assert_snapshot!(dump(&buf));
    let empty = render(40, 3, |f| f.render_widget(NetworkPanel::new(&[]), f.area()));
    insta::assert_snapshot!("network_panel_empty", dump(&empty));
    // No table yet is not an empty table: it says what it waits for.
    let waiting = render(40, 4, |f| {
        f.render_widget(
            NetworkPanel::new(&[]).waiting("reading the live table…"),
            f.area(),
        );
    });
    let text = dump(&waiting);
    assert!(text.contains("reading the live table…"), "{text}");
    assert!(!text.contains("all egress is denied"), "{text}");
    assert!(!text.contains("0 allowed"), "{text}");
}

#[test]
fn escalations_panel() {
    let rows = vec![
        EscalationRow {
            id: "e-17".into(),
            tab: "claude".into(),
            age: Duration::from_secs(75),
            command: "cargo publish --dry-run".into(),
            status: EscalationStatus::Pending,
        },
        EscalationRow {
            id: "e-16".into(),
            tab: "aider".into(),
            age: Duration::from_secs(600),
            // Escape sequences in a command never reach the terminal.
            command: "ls\u{1b}[2J /etc\u{202E}txt".into(),
            status: EscalationStatus::Denied {
                reason: Some("not needed".into()),
            },
        },
        EscalationRow {
            id: "e-15".into(),
            tab: "claude".into(),
            age: Duration::from_secs(4000),
            command: "git push origin main".into(),
            status: EscalationStatus::Finished {
                exit_code: 0,
                output: "Everything up-to-date\n".into(),
            },
        },
        EscalationRow {
            id: "e-14".into(),
            tab: "claude".into(),
            age: Duration::from_secs(5000),
            command: "make test".into(),
            status: EscalationStatus::Finished {
                exit_code: 2,
                output: "make: *** [test] Error 2".into(),
            },
        },
        EscalationRow {
            id: "e-13".into(),
            tab: "shell".into(),
            age: Duration::from_secs(90_000),
            command: "sleep 9999".into(),
            status: EscalationStatus::Failed {
                error: "time limit (60s)".into(),
            },
        },
        EscalationRow {
            id: "e-12".into(),
            tab: "shell".into(),
            age: Duration::from_secs(3),
            command: "date".into(),
            status: EscalationStatus::Running,
        },
    ];
    let buf = render(100, 9, |f| {
        f.render_widget(
            EscalationsPanel {
                rows: &rows,
                selected: None,
                focused: true,
            },
            f.area(),
        );
    });
    insta::assert_snapshot!(dump(&buf));
    assert!(!dump(&buf).contains('\u{1b}'));
}

/// With room, the panel shows the whole output of the selected request
/// (else of the latest one that ended) under the table, made visible.
#[test]
fn escalations_panel_shows_a_result_below_the_table() {
    let rows = vec![
        EscalationRow {
            id: "e-1".into(),
            tab: "claude".into(),
            age: Duration::from_secs(30),
            command: "cargo test".into(),
            status: EscalationStatus::Finished {
                exit_code: 101,
                output: "running 2 tests\ntest a ... ok\ntest b ... \u{1b}[31mFAILED\u{1b}[0m\n"
                    .into(),
            },
        },
        EscalationRow {
            id: "e-2".into(),
            tab: "claude".into(),
            age: Duration::from_secs(5),
            command: "whoami".into(),
            status: EscalationStatus::Finished {
                exit_code: 0,
                output: "ana\n".into(),
            },
        },
        EscalationRow {
            id: "e-3".into(),
            tab: "aider".into(),
            age: Duration::from_secs(2),
            command: "make".into(),
            status: EscalationStatus::Pending,
        },
    ];
    let draw = |selected| {
        render(60, 14, |f| {
            f.render_widget(
                EscalationsPanel {
                    rows: &rows,
                    selected,
                    focused: false,
                },
                f.area(),
            );
        })
    };
    let latest = dump(&draw(None));
    assert!(
        latest.contains("e-2 · exit 0") && latest.contains("|│ana"),
        "{latest}"
    );
    let selected = draw(Some(0));
    insta::assert_snapshot!("escalations_panel_selected_result", dump(&selected));
    assert!(!dump(&selected).contains('\u{1b}'));
}

#[test]
fn audit_panel_follows_the_newest_and_scrolls() {
    let entries: Vec<AuditEntry> = (0..8)
        .map(|i| AuditEntry {
            time: format!("14:0{i}:00"),
            event: ["request", "approved", "denied", "policy"][i % 4].into(),
            detail: format!("entry {i}: e-{i} \u{1b}]0;title\u{7}"),
        })
        .collect();
    let newest = render(60, 5, |f| {
        f.render_widget(AuditPanel::new(&entries), f.area());
    });
    insta::assert_snapshot!("audit_panel_newest", dump(&newest));
    let scrolled = render(60, 5, |f| {
        f.render_widget(
            AuditPanel {
                entries: &entries,
                scroll: 2,
                focused: true,
            },
            f.area(),
        );
    });
    insta::assert_snapshot!("audit_panel_scrolled", dump(&scrolled));
    assert!(row(&scrolled, 1).contains("entry 3"));
}

fn tabs() -> Vec<TabInfo> {
    vec![
        TabInfo {
            title: "claude".into(),
            pending: 0,
            ended: false,
        },
        TabInfo {
            title: "aider".into(),
            pending: 2,
            ended: false,
        },
        TabInfo {
            title: "shell".into(),
            pending: 0,
            ended: true,
        },
        TabInfo {
            title: "codex".into(),
            pending: 1,
            ended: false,
        },
    ]
}

/// A click lands on the tab drawn there, badges included; the gaps and
/// the empty end are no tab.
#[test]
fn tab_bar_clicks_find_their_tab() {
    let tabs = tabs();
    let bar = TabBar::new(&tabs, 0);
    let area = Rect::new(0, 0, 60, 1);
    let hits: Vec<Option<usize>> = [5, 10, 12, 22, 30, 38, 45, 59]
        .iter()
        .map(|x| bar.tab_at(area, *x))
        .collect();
    assert_eq!(
        hits,
        [
            Some(0),
            None,
            Some(1),
            Some(1),
            Some(2),
            Some(2),
            Some(3),
            None
        ]
    );
    // Scrolled so the last one fits: the first shown is after "…".
    let narrow = Rect::new(0, 0, 30, 1);
    let last = TabBar::new(&tabs, 3);
    assert_eq!(last.tab_at(narrow, 0), None);
    assert_eq!(last.tab_at(narrow, 5), Some(3));
}

#[test]
fn tab_bar_with_badges() {
    let tabs = tabs();
    let buf = render(60, 1, |f| f.render_widget(TabBar::new(&tabs, 0), f.area()));
    insta::assert_snapshot!(dump(&buf));
}

#[test]
fn tab_bar_keeps_the_selected_tab_in_view() {
    let tabs = tabs();
    let buf = render(22, 1, |f| f.render_widget(TabBar::new(&tabs, 3), f.area()));
    insta::assert_snapshot!(dump(&buf));
    assert!(row(&buf, 0).contains("4:codex"));
}

#[test]
fn tab_bar_without_tabs_or_with_a_stale_selection_does_not_panic() {
    let buf = render(20, 1, |f| f.render_widget(TabBar::new(&[], 3), f.area()));
    assert_eq!(row(&buf, 0).trim(), "");
    let tabs = tabs();
    // A selection past the end is the last tab.
    let buf = render(20, 1, |f| f.render_widget(TabBar::new(&tabs, 99), f.area()));
    assert!(row(&buf, 0).contains("4:codex"));
}

#[test]
fn status_line() {
    let idle = render(70, 1, |f| {
        f.render_widget(
            StatusLine {
                prefix: "C-a",
                prefix_armed: false,
                waiting: None,
                domain: Some("claude · ~/src/lazaret (3fa9c2)"),
                message: Some("e-17 approved"),
            },
            f.area(),
        );
    });
    insta::assert_snapshot!("status_line_idle", dump(&idle));
    let armed = render(70, 1, |f| {
        f.render_widget(
            StatusLine {
                prefix: "C-a",
                prefix_armed: true,
                waiting: None,
                domain: None,
                message: None,
            },
            f.area(),
        );
    });
    insta::assert_snapshot!("status_line_armed", dump(&armed));
}

#[test]
fn status_line_cuts_or_drops_a_message_rather_than_cover_the_domain() {
    let line = |width| {
        let buf = render(width, 1, |f| {
            f.render_widget(
                StatusLine {
                    prefix: "C-a",
                    prefix_armed: false,
                    waiting: None,
                    domain: Some("claude · ~/src/lazaret"),
                    message: Some("a long message that does not fit"),
                },
                f.area(),
            );
        });
        row(&buf, 0)
    };
    let narrow = line(40);
    assert!(narrow.contains("~/src/lazaret"), "{narrow}");
    assert!(!narrow.contains("message"), "{narrow}");
    // With some room, the message is cut to it, never over the domain.
    let wider = line(60);
    assert!(wider.contains("~/src/lazaret "), "{wider}");
    assert!(wider.ends_with(" a long message that… "), "{wider}");
}

fn help() -> Vec<HelpSection> {
    let b = |keys: &str, action: &str| KeyBinding {
        keys: keys.into(),
        action: action.into(),
    };
    vec![
        HelpSection {
            title: "Tabs".into(),
            bindings: vec![
                b("C-a c", "new tab (pick profile and workspace)"),
                b("C-a x", "close tab"),
                b("C-a n / C-a p", "next / previous tab"),
                b("C-a ,", "rename tab"),
            ],
        },
        HelpSection {
            title: "Panels".into(),
            bindings: vec![
                b("C-a s", "sessions"),
                b("C-a w", "network policy"),
                b("C-a e", "escalation queue"),
                b("C-a l", "audit trail"),
            ],
        },
        HelpSection {
            title: "Approval".into(),
            bindings: vec![
                b("A", "approve & run"),
                b("D", "deny"),
                b("E", "edit, then approve"),
                b("Q", "abort"),
            ],
        },
    ]
}

#[test]
fn help_overlay() {
    let sections = help();
    let buf = render(70, 22, |f| {
        f.render_widget(HelpOverlay::new(&sections), f.area());
    });
    insta::assert_snapshot!(dump(&buf));
}

#[test]
fn help_overlay_in_a_small_terminal_says_what_is_missing() {
    let sections = help();
    let buf = render(30, 8, |f| {
        f.render_widget(HelpOverlay::new(&sections), f.area());
    });
    insta::assert_snapshot!(dump(&buf));
    assert!(dump(&buf).contains("more lines"));
    // And nothing at all does not panic.
    render(1, 1, |f| {
        f.render_widget(HelpOverlay::new(&sections), f.area());
    });
    render(10, 1, |f| {
        f.render_widget(HelpOverlay::new(&sections), Rect::new(0, 0, 0, 0));
    });
}

fn checkpoints() -> Vec<CheckpointRow> {
    vec![
        CheckpointRow {
            name: "before-migration".into(),
            taken: "20261203-121320".into(),
            size: "1.5 MiB".into(),
        },
        CheckpointRow {
            // A name is the human's, but drawn as any outside text.
            name: "x\u{1b}[2Jy".into(),
            taken: "20261203-130002".into(),
            size: "233 KiB".into(),
        },
    ]
}

fn press(form: &mut CheckpointsForm, keys: &str) {
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    for c in keys.chars() {
        form.handle_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
    }
}

#[test]
fn checkpoints_overlay_lists_and_asks() {
    let mut form = CheckpointsForm::new("gv 3f2a9c0d1b2e", checkpoints());
    let buf = render(72, 14, |f| {
        f.render_widget(CheckpointsDialog::new(&form), f.area());
    });
    insta::assert_snapshot!(dump(&buf));
    assert!(!dump(&buf).contains('\u{1b}'));
    assert!(dump(&buf).contains("x␛[2Jy"), "{}", dump(&buf));
    // `r` asks first, saying what becomes of the sessions.
    press(&mut form, "r");
    let buf = render(72, 16, |f| {
        f.render_widget(CheckpointsDialog::new(&form), f.area());
    });
    insta::assert_snapshot!("checkpoints_overlay_restore_question", dump(&buf));
    assert!(dump(&buf).contains("sessions"), "{}", dump(&buf));
    press(&mut form, "n");
    press(&mut form, "ftry2");
    form.set_error("`try2` is taken");
    let buf = render(72, 16, |f| {
        f.render_widget(CheckpointsDialog::new(&form), f.area());
    });
    insta::assert_snapshot!("checkpoints_overlay_fork_name", dump(&buf));
}

#[test]
fn checkpoints_overlay_empty_and_small() {
    let form = CheckpointsForm::new("gv 3f2a9c0d1b2e", Vec::new());
    let buf = render(70, 9, |f| {
        f.render_widget(CheckpointsDialog::new(&form), f.area());
    });
    insta::assert_snapshot!(dump(&buf));
    assert!(dump(&buf).contains("No checkpoints yet"));
    // Too small for everything: nothing panics, the selection stays in view.
    let mut form = CheckpointsForm::new("gv", checkpoints());
    press(&mut form, "r");
    for (w, h) in [(30, 8), (10, 3), (1, 1)] {
        render(w, h, |f| {
            f.render_widget(CheckpointsDialog::new(&form), f.area());
        });
    }
}
