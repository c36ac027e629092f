//! Every running domain of this user: its Agent Sandbox's runtime (anything
//! but gVisor is shown loudly), Client Sessions and uptime.

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
}

/// The sessions panel.
#[derive(Clone, Copy, Debug)]
pub struct SessionsPanel<'a> {
    pub rows: &'a [SessionRow],
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
        let n = self.rows.len();
        let mut title = format!(" Sessions · {n} domain{} ", if n == 1 { "" } else { "s" });
        if unsafe_count > 0 {
            title = format!("{title}· {unsafe_count} NOT gVisor ");
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
        let runtime_width = self
            .rows
            .iter()
            .map(|r| runtime_label(r).chars().count())
            .max()
            .unwrap_or(0)
            .max(7);
        // In a narrow panel the runtime label is cut before the session
        // count and uptime disappear (its colour still says "not gVisor").
        let others = 12 + 12 + 10 + 8 + 6 + usize::from(SPACING) * 5;
        let runtime_width =
            runtime_width.min(usize::from(inner.width).saturating_sub(others).max(7));
        let fixed = [12, 12, runtime_width, 8, 6];
        let fixed_total: usize = fixed.iter().sum::<usize>() + usize::from(SPACING) * fixed.len();
        let workspace_width = usize::from(inner.width).saturating_sub(fixed_total).max(10);
        let widths = [
            Constraint::Length(12),
            Constraint::Length(12),
            Constraint::Min(10),
            Constraint::Length(u16::try_from(runtime_width).unwrap_or(u16::MAX)),
            Constraint::Length(8),
            Constraint::Length(6),
        ];

        let header = Row::new([
            "DOMAIN",
            "PROFILE",
            "WORKSPACE",
            "RUNTIME",
            "SESSIONS",
            "UPTIME",
        ])
        .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
        let rows = self.rows.iter().map(|r| {
            let runtime = runtime_span(r);
            Row::new([
                Cell::from(shown(&r.domain)),
                Cell::from(shown(&r.profile)),
                Cell::from(keep_end(&shown(&r.workspace), workspace_width)),
                Cell::from(runtime),
                // Right-aligned, not padded: a squeezed column still shows
                // the number rather than the padding.
                Cell::from(Line::from(r.sessions.to_string()).right_aligned()),
                Cell::from(Line::from(format_duration(r.uptime)).right_aligned()),
            ])
        });
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
    for (i, r) in rows.iter().enumerate() {
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
            Span::styled(
                format!(" · {sessions} · up {}", format_duration(r.uptime)),
                Style::new().fg(Color::DarkGray),
            ),
        ]);
        let mut second = Line::from(Span::styled(
            format!(
                "  {}",
                keep_end(&shown(&r.workspace), width.saturating_sub(2))
            ),
            Style::new().fg(Color::DarkGray),
        ));
        if selected == Some(i) {
            first = first.style(selected_style());
            second = second.style(selected_style());
        }
        lines.push(first);
        lines.push(second);
    }
    Paragraph::new(lines).render(area, buf);
}

/// The runtime, green under gVisor, white on red otherwise.
fn runtime_span(row: &SessionRow) -> Span<'static> {
    if row.gvisor {
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
    if row.gvisor {
        shown(&row.runtime)
    } else {
        format!("NOT gVisor: {}", shown(&row.runtime))
    }
}
