//! Rendering helpers shared by the snapshot tests.

use std::fmt::Write as _;
use std::time::Duration;

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::{Buffer, CellWidth as _};
use ratatui::style::{Color, Modifier};

/// Draws with `draw` on a `width` x `height` TestBackend and returns what
/// the terminal holds.
pub fn render(width: u16, height: u16, draw: impl FnOnce(&mut ratatui::Frame<'_>)) -> Buffer {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test backend");
    terminal.draw(draw).expect("draw");
    terminal.backend().buffer().clone()
}

/// The buffer as text (what a human sees: cells hidden under a wide
/// symbol are skipped), then every run of non-default style, so a snapshot
/// shows colours and attributes too.
pub fn dump(buf: &Buffer) -> String {
    let mut out = String::new();
    let area = buf.area;
    for y in 0..area.height {
        out.push('|');
        let mut skip = 0;
        for x in 0..area.width {
            if skip > 0 {
                skip -= 1;
                continue;
            }
            let symbol = buf[(x, y)].symbol();
            out.push_str(symbol);
            skip = symbol.cell_width().saturating_sub(1);
        }
        out.push_str("|\n");
    }
    let mut styles = String::new();
    for y in 0..area.height {
        let mut runs = Vec::new();
        let mut x = 0;
        while x < area.width {
            let key = style_key(&buf[(x, y)]);
            let start = x;
            while x < area.width && style_key(&buf[(x, y)]) == key {
                x += 1;
            }
            if let Some(key) = key {
                runs.push(format!("{start}..{x} {key}"));
            }
        }
        if !runs.is_empty() {
            let _ = writeln!(styles, "{y:>2}: {}", runs.join("; "));
        }
    }
    if !styles.is_empty() {
        out.push_str("styles:\n");
        out.push_str(&styles);
    }
    out
}

fn style_key(cell: &ratatui::buffer::Cell) -> Option<String> {
    let mut parts = Vec::new();
    if cell.fg != Color::Reset {
        parts.push(format!("fg={:?}", cell.fg));
    }
    if cell.bg != Color::Reset {
        parts.push(format!("bg={:?}", cell.bg));
    }
    if cell.modifier != Modifier::empty() {
        parts.push(format!("{:?}", cell.modifier).to_lowercase());
    }
    (!parts.is_empty()).then(|| parts.join(" "))
}

/// The text of row `y` as a human sees it.
#[allow(dead_code)] // not every test binary uses it
pub fn row(buf: &Buffer, y: u16) -> String {
    dump(buf)
        .lines()
        .nth(usize::from(y))
        .unwrap_or_default()
        .trim_matches('|')
        .to_string()
}

/// Two domains for the sessions panel: one under gVisor with three hosted
/// sessions (a shell running a command, an agent waiting for an approval,
/// a detached shell at its prompt) and refusals the human has not looked
/// at, one not under gVisor with an exited one.
#[allow(dead_code)]
pub fn sessions() -> Vec<lazaret_widgets::panels::SessionRow> {
    use lazaret_widgets::panels::{HostedRow, SessionRow};
    vec![
        SessionRow {
            domain: "3fa9c2e1b7d0".into(),
            profile: "claude".into(),
            workspace: "/home/ana/src/lazaret".into(),
            runtime: "runsc".into(),
            gvisor: true,
            sessions: 2,
            uptime: Duration::from_secs(3 * 3600 + 12 * 60),
            degraded: false,
            memory: Some((1_288_490_188, Some(4 << 30))),
            refused: 3,
            hosted: vec![
                HostedRow {
                    id: 1,
                    command: "/bin/bash -l".into(),
                    clients: 1,
                    pending: 0,
                    exited: None,
                    busy: Some(true),
                },
                HostedRow {
                    id: 2,
                    command: "claude".into(),
                    clients: 0,
                    pending: 1,
                    exited: None,
                    busy: None,
                },
                HostedRow {
                    id: 4,
                    command: "/bin/bash -l".into(),
                    clients: 0,
                    pending: 0,
                    exited: None,
                    busy: Some(false),
                },
            ],
        },
        SessionRow {
            domain: "91bb04aa5e3c".into(),
            profile: "aider".into(),
            workspace: "/home/ana/work/clients/very-long-customer-name/backend-service".into(),
            runtime: "runc".into(),
            gvisor: false,
            sessions: 1,
            uptime: Duration::from_secs(42),
            degraded: false,
            memory: None,
            refused: 0,
            hosted: vec![HostedRow {
                id: 3,
                command: "aider".into(),
                clients: 0,
                pending: 0,
                exited: Some(1),
                busy: None,
            }],
        },
    ]
}
