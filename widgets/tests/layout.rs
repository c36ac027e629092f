//! Snapshots of the whole workbench frame as `layout::workbench` places it
//! (issue 29): the dashboard column on a wide terminal, one panel (or none)
//! on a narrower one, and the zoomed pane; at 80x24, 120x40 and 200x50.

mod common;

use std::num::NonZeroU16;
use std::time::Duration;

use common::{dump, render, sessions};
use lazaret_widgets::layout::{LayoutSpec, PanelKind, workbench};
use lazaret_widgets::pane::TerminalPane;
use lazaret_widgets::panels::*;
use ratatui::widgets::Block;

fn routes() -> Vec<RouteRow> {
    vec![
        RouteRow {
            prefix: "160.79.104.0/23".into(),
            verdict: Verdict::Allow,
            rule: "api.anthropic.com".into(),
        },
        RouteRow {
            prefix: "0.0.0.0/0".into(),
            verdict: Verdict::Deny,
            rule: "default".into(),
        },
    ]
}

fn escalations() -> Vec<EscalationRow> {
    vec![EscalationRow {
        id: "7".into(),
        tab: "claude-2".into(),
        age: Duration::from_secs(12),
        command: "git push origin agent".into(),
        status: EscalationStatus::Pending,
    }]
}

/// The workbench frame at `width` x `height` under `spec`.
fn frame(width: u16, height: u16, spec: LayoutSpec) -> String {
    let (s, r, e) = (sessions(), routes(), escalations());
    let tabs = vec![
        TabInfo {
            title: "claude".into(),
            pending: 0,
            ended: false,
        },
        TabInfo {
            title: "claude-2".into(),
            pending: 1,
            ended: false,
        },
    ];
    let buf = render(width, height, |f| {
        let areas = workbench(f.area(), &spec);
        f.render_widget(TabBar::new(&tabs, 0), areas.tabs);
        let inner = Block::bordered().inner(areas.pane);
        let mut parser = vt100::Parser::new(
            NonZeroU16::new(inner.height.max(1)).unwrap(),
            NonZeroU16::new(inner.width.max(1)).unwrap(),
            0,
        );
        parser.process(b"root@sandbox:/workspace# cargo test\r\n   Compiling app v0.1.0\r\n");
        f.render_widget(
            TerminalPane::new(parser.screen()).block(Block::bordered().title(" claude ")),
            areas.pane,
        );
        for (kind, area) in areas.panels.iter().copied() {
            match kind {
                PanelKind::Sessions => f.render_widget(SessionsPanel::new(&s), area),
                PanelKind::Network => f.render_widget(NetworkPanel::new(&r), area),
                PanelKind::Escalations => f.render_widget(EscalationsPanel::new(&e), area),
                PanelKind::Audit => f.render_widget(AuditPanel::new(&[]), area),
            }
        }
        f.render_widget(
            StatusLine {
                prefix: "C-a",
                prefix_armed: false,
                waiting: None,
                domain: Some("claude 3fa9c2e1b7d0 · gVisor (runsc)"),
                message: None,
            },
            areas.status,
        );
    });
    dump(&buf)
}

fn spec(panel: Option<PanelKind>, zoom: bool) -> LayoutSpec {
    LayoutSpec::with(panel, zoom)
}

#[test]
fn dashboard_at_200x50_shows_sessions_network_and_queue_at_once() {
    let shot = frame(200, 50, spec(None, false));
    for title in [" Sessions ", " Network", " Escalations "] {
        assert!(shot.contains(title), "{title} missing:\n{shot}");
    }
    insta::assert_snapshot!(shot);
}

#[test]
fn at_120x40_one_panel_at_a_time() {
    let none = frame(120, 40, spec(None, false));
    assert!(!none.contains(" Sessions "));
    insta::assert_snapshot!("at_120x40_no_panel", none);
    let one = frame(120, 40, spec(Some(PanelKind::Escalations), false));
    assert!(one.contains(" Escalations ") && !one.contains(" Sessions "));
    insta::assert_snapshot!("at_120x40_escalations", one);
}

#[test]
fn at_80x24_one_panel_at_a_time() {
    insta::assert_snapshot!(frame(80, 24, spec(Some(PanelKind::Sessions), false)));
}

#[test]
fn zoomed_at_200x50_the_pane_has_the_whole_body() {
    let shot = frame(200, 50, spec(None, true));
    assert!(!shot.contains(" Sessions "));
    insta::assert_snapshot!(shot);
}
