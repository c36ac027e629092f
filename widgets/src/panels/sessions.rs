//! Every running domain of this user: its Agent Sandbox's runtime (anything
//! but gVisor, or a degraded sandbox, is shown loudly), memory against its
//! limit, egress refusals the human has not looked at, Client Sessions and
//! uptime; under each domain its hosted sessions with their state in words
//! (waiting for an approval, attached, detached, exited; a shell running a
//! command or idle at its prompt).

use std::time::Duration;

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, StatefulWidget, Table, TableState, Widget};

use super::{format_duration, keep_end, panel_block, selected_style, shown};

/// One domain (one Domain Anchor).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionRow {
    /// The Domain Anchor, shortened.
    pub domain: String,
    pub profile: String,
    /// The host workspace path.
    pub workspace: String,
    /// The runtime the Agent Sandbox runs under, as podman reports it.
    pub runtime: String,
    /// Whether that runtime is gVisor (runsc); anything else is an alarm.
    pub gvisor: bool,
    /// Client Sessions attached.
    pub sessions: usize,
    pub uptime: Duration,
    /// The sandbox's start-up self-test failed and it runs anyway
    /// (`--allow-degraded`): shown as loudly as a runtime without gVisor.
    pub degraded: bool,
    /// The sandbox's memory as the watchdog measured it, and its limit
    /// (bytes).
    pub memory: Option<(u64, Option<u64>)>,
    /// Egress refusals (packets and names the Network Sidecar refused)
    /// since the human last looked at the domain's network table.
    pub refused: u64,
    /// Its sessions that live in the domain, attached or not.
    pub hosted: Vec<HostedRow>,
}

/// One session that lives in a domain (decisions.md D14).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostedRow {
    /// Its number: `lazaret attach N`.
    pub id: u32,
    pub command: String,
    /// Clients showing it now.
    pub clients: u32,
    /// Escalation requests of it waiting for a human.
    pub pending: u32,
    /// How it ended, while it is still listed.
    pub exited: Option<i32>,
    /// A shell's foreground: running a command (`true`) or idle at its
    /// prompt; `None` for other programs.
    pub busy: Option<bool>,
}

impl HostedRow {
    /// Its state in words (colour only repeats them): waiting for an
    /// approval first, then ended, attached or not.
    fn state(&self) -> Span<'static> {
        if self.pending > 0 {
            return Span::styled(
                format!("WAITING {}", self.pending),
                Style::new()
                    .fg(Color::Black)
                    .bg(Color::Yellow)
                    .add_modifier(Modifier::BOLD),
            );
        }
        match (self.exited, self.clients) {
            (Some(code), _) => {
                Span::styled(format!("exited {code}"), Style::new().fg(Color::DarkGray))
            }
            (None, 0) => Span::styled("detached", Style::new().fg(Color::Cyan)),
            (None, 1) => Span::raw("attached"),
            (None, n) => Span::raw(format!("attached ×{n}")),
        }
    }

    /// What its shell does, while it runs.
    fn activity(&self) -> &'static str {
        match (self.exited, self.busy) {
            (None, Some(true)) => "command running",
            (None, Some(false)) => "idle at prompt",
            _ => "",
        }
    }
}

/// `3 new` in a colour that repeats the words, or nothing.
fn refused_span(row: &SessionRow) -> Span<'static> {
    if row.refused == 0 {
        return Span::raw("");
    }
    Span::styled(
        format!("{} new", row.refused),
        Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
    )
}

/// `1.2 GiB` (binary units, one decimal under 10).
fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value < 10.0 && unit > 0 {
        format!("{value:.1} {}", UNITS[unit])
    } else {
        format!("{value:.0} {}", UNITS[unit])
    }
}

/// `1.2 of 4.0 GiB` (units once when they agree), or what is known of it.
fn memory_text(row: &SessionRow) -> String {
    match row.memory {
        Some((used, Some(limit))) => {
            let (used, limit) = (size(used), size(limit));
            match (used.split_once(' '), limit.split_once(' ')) {
                (Some((u, a)), Some((l, b))) if a == b => format!("{u} of {l} {a}"),
                _ => format!("{used} of {limit}"),
            }
        }
        Some((used, None)) => size(used),
        None => "-".into(),
    }
}

/// The sessions panel.
#[derive(Clone, Copy, Debug)]
pub struct SessionsPanel<'a> {
    pub rows: &'a [SessionRow],
    /// The selected line: domains and their hosted sessions counted in the
    /// order drawn (a domain, then its sessions).
    pub selected: Option<usize>,
    pub focused: bool,
}

impl<'a> SessionsPanel<'a> {
    pub fn new(rows: &'a [SessionRow]) -> Self {
        Self {
            rows,
            selected: None,
            focused: false,
        }
    }
}

const SPACING: u16 = 1;
/// Below this inner width each domain takes two lines instead of a table
/// row, so nothing is cut to unreadable stubs.
const NARROW: u16 = 80;

impl Widget for SessionsPanel<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let unsafe_count = self.rows.iter().filter(|r| !r.gvisor).count();
        let degraded = self.rows.iter().filter(|r| r.degraded).count();
        let n = self.rows.len();
        let mut title = format!(" Sessions · {n} domain{} ", if n == 1 { "" } else { "s" });
        if unsafe_count > 0 {
            title = format!("{title}· {unsafe_count} NOT gVisor ");
        }
        if degraded > 0 {
            title = format!("{title}· {degraded} DEGRADED ");
        }
        let waiting: u32 = self
            .rows
            .iter()
            .flat_map(|r| &r.hosted)
            .map(|h| h.pending)
            .sum();
        if waiting > 0 {
            title = format!("{title}· {waiting} waiting ");
        }
        let refused: u64 = self.rows.iter().map(|r| r.refused).sum();
        if refused > 0 {
            title = format!("{title}· {refused} refused ");
        }
        let block = panel_block(title, self.focused);
        let inner = block.inner(area);
        block.render(area, buf);
        if self.rows.is_empty() {
            Paragraph::new(Line::from(Span::styled(
                "No running domains.",
                Style::new().fg(Color::DarkGray),
            )))
            .render(inner, buf);
            return;
        }

        if inner.width < NARROW {
            render_narrow(self.rows, self.selected, inner, buf);
            return;
        }
        // The column holds a domain's runtime and its sessions' states
        // (`WAITING 2`, `attached ×2`).
        let runtime_width = self
            .rows
            .iter()
            .map(|r| runtime_label(r).chars().count())
            .chain(
                self.rows
                    .iter()
                    .flat_map(|r| &r.hosted)
                    .map(|h| h.state().content.chars().count()),
            )
            .max()
            .unwrap_or(0)
            .max(7);
        // In a narrow panel the runtime label is cut before the session
        // count and uptime disappear (its colour still says "not gVisor").
        let others = 12 + 12 + 10 + 15 + 8 + 8 + 6 + usize::from(SPACING) * 7;
        let runtime_width =
            runtime_width.min(usize::from(inner.width).saturating_sub(others).max(7));
        let fixed = [12, 12, runtime_width, 15, 8, 8, 6];
        let fixed_total: usize = fixed.iter().sum::<usize>() + usize::from(SPACING) * fixed.len();
        let workspace_width = usize::from(inner.width).saturating_sub(fixed_total).max(10);
        let widths = [
            Constraint::Length(12),
            Constraint::Length(12),
            Constraint::Min(10),
            Constraint::Length(u16::try_from(runtime_width).unwrap_or(u16::MAX)),
            Constraint::Length(15),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(6),
        ];

        let header = Row::new([
            "DOMAIN",
            "PROFILE",
            "WORKSPACE",
            "RUNTIME",
            "MEMORY",
            "REFUSED",
            "SESSIONS",
            "UPTIME",
        ])
        .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
        // Each domain, then its hosted sessions under it: the selection
        // counts both.
        let mut rows = Vec::new();
        for r in self.rows {
            rows.push(Row::new([
                Cell::from(shown(&r.domain)),
                Cell::from(shown(&r.profile)),
                Cell::from(keep_end(&shown(&r.workspace), workspace_width)),
                Cell::from(runtime_span(r)),
                Cell::from(memory_text(r)),
                Cell::from(refused_span(r)),
                // Right-aligned, not padded: a squeezed column still shows
                // the number rather than the padding.
                Cell::from(Line::from(r.sessions.to_string()).right_aligned()),
                Cell::from(Line::from(format_duration(r.uptime)).right_aligned()),
            ]));
            for h in &r.hosted {
                rows.push(Row::new([
                    Cell::from(""),
                    Cell::from(format!("  #{}", h.id)),
                    Cell::from(keep_end(&shown(&h.command), workspace_width)),
                    Cell::from(h.state()),
                    Cell::from(h.activity()),
                    Cell::from(""),
                    Cell::from(""),
                    Cell::from(""),
                ]));
            }
        }
        let table = Table::new(rows, widths)
            .header(header)
            .column_spacing(SPACING)
            .row_highlight_style(selected_style());
        let mut state = TableState::default().with_selected(self.selected);
        StatefulWidget::render(table, inner, buf, &mut state);
    }
}

/// Two lines per domain: what it is and how it runs, then its workspace.
fn render_narrow(rows: &[SessionRow], selected: Option<usize>, area: Rect, buf: &mut Buffer) {
    let width = usize::from(area.width);
    let mut lines = Vec::new();
    // The selection counts domains and their hosted sessions, as drawn.
    let mut entry = 0;
    for r in rows {
        let runtime = runtime_span(r);
        let sessions = match r.sessions {
            1 => "1 session".to_string(),
            n => format!("{n} sessions"),
        };
        let mut first = Line::from(vec![
            Span::styled(shown(&r.domain), Style::new().add_modifier(Modifier::BOLD)),
            Span::raw(" "),
            Span::raw(shown(&r.profile)),
            Span::raw(" "),
            runtime,
        ]);
        // Before what is cut first at the right: the session count and
        // the uptime.
        if r.refused > 0 {
            first.push_span(Span::raw(" · refused "));
            first.push_span(refused_span(r));
        }
        first.push_span(Span::styled(
            format!(" · {sessions} · up {}", format_duration(r.uptime)),
            Style::new().fg(Color::DarkGray),
        ));
        let memory = format!("mem {} · ", memory_text(r));
        let mut second = Line::from(Span::styled(
            format!(
                "  {memory}{}",
                keep_end(
                    &shown(&r.workspace),
                    width.saturating_sub(2 + memory.chars().count())
                )
            ),
            Style::new().fg(Color::DarkGray),
        ));
        if selected == Some(entry) {
            first = first.style(selected_style());
            second = second.style(selected_style());
        }
        entry += 1;
        lines.push(first);
        lines.push(second);
        for h in &r.hosted {
            let activity = match h.activity() {
                "" => String::new(),
                a => format!(" · {a}"),
            };
            let room = width.saturating_sub(20 + activity.chars().count());
            let mut line = Line::from(vec![
                Span::raw(format!("  #{} ", h.id)),
                h.state(),
                Span::raw(activity),
                Span::styled(
                    format!(" {}", keep_end(&shown(&h.command), room)),
                    Style::new().fg(Color::DarkGray),
                ),
            ]);
            if selected == Some(entry) {
                line = line.style(selected_style());
            }
            entry += 1;
            lines.push(line);
        }
    }
    Paragraph::new(lines).render(area, buf);
}

/// The runtime, green under gVisor, white on red otherwise.
fn runtime_span(row: &SessionRow) -> Span<'static> {
    if row.gvisor && !row.degraded {
        Span::styled(runtime_label(row), Style::new().fg(Color::Green))
    } else {
        Span::styled(
            runtime_label(row),
            Style::new()
                .fg(Color::White)
                .bg(Color::Red)
                .add_modifier(Modifier::BOLD),
        )
    }
}

fn runtime_label(row: &SessionRow) -> String {
    match (row.gvisor, row.degraded) {
        (_, true) => format!("DEGRADED: {}", shown(&row.runtime)),
        (true, false) => shown(&row.runtime),
        (false, false) => format!("NOT gVisor: {}", shown(&row.runtime)),
    }
}
