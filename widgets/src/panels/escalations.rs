//! The escalation queue: pending Host Escalation requests of every tab with
//! their age, and what became of the others.

use std::time::Duration;

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, StatefulWidget, Table, TableState, Widget, Wrap};

use super::{format_duration, panel_block, selected_style, shown};

/// Where a request stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum EscalationStatus {
    /// Waiting for a human.
    #[default]
    Pending,
    /// Approved (by a human or the whitelist) and running on the host.
    Running,
    Denied {
        reason: Option<String>,
    },
    /// Ran to the end.
    Finished {
        exit_code: i32,
        /// Its output, or the start of it.
        output: String,
    },
    /// Could not run or was stopped (time limit, output limit, ...).
    Failed {
        error: String,
    },
    /// Answered in another of the user's clients (its outcome is shown
    /// there).
    AnsweredElsewhere,
}

/// One request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EscalationRow {
    pub id: String,
    /// The tab (Client Session) that asked.
    pub tab: String,
    /// Time since it arrived.
    pub age: Duration,
    pub command: String,
    pub status: EscalationStatus,
}

/// The escalation queue panel.
#[derive(Clone, Copy, Debug)]
pub struct EscalationsPanel<'a> {
    pub rows: &'a [EscalationRow],
    pub selected: Option<usize>,
    pub focused: bool,
}

impl<'a> EscalationsPanel<'a> {
    pub fn new(rows: &'a [EscalationRow]) -> Self {
        Self {
            rows,
            selected: None,
            focused: false,
        }
    }
}

fn status_span(status: &EscalationStatus) -> Span<'static> {
    match status {
        EscalationStatus::Pending => Span::styled(
            "PENDING",
            Style::new()
                .fg(Color::Black)
                .bg(Color::Yellow)
                .add_modifier(Modifier::BOLD),
        ),
        EscalationStatus::Running => Span::styled("running", Style::new().fg(Color::Cyan)),
        EscalationStatus::Denied { reason } => {
            let text = match reason {
                Some(r) => format!("denied: {}", shown(r)),
                None => "denied".to_string(),
            };
            Span::styled(text, Style::new().fg(Color::Red))
        }
        EscalationStatus::Finished { exit_code, output } => {
            let color = if *exit_code == 0 {
                Color::Green
            } else {
                Color::Red
            };
            let output = shown(output.trim_end());
            let text = if output.is_empty() {
                format!("exit {exit_code}")
            } else {
                format!("exit {exit_code} · {output}")
            };
            Span::styled(text, Style::new().fg(color))
        }
        EscalationStatus::Failed { error } => Span::styled(
            format!("failed: {}", shown(error)),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        ),
        EscalationStatus::AnsweredElsewhere => Span::styled(
            "answered in another client",
            Style::new().fg(Color::DarkGray),
        ),
    }
}

impl Widget for EscalationsPanel<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let pending = self
            .rows
            .iter()
            .filter(|r| r.status == EscalationStatus::Pending)
            .count();
        let block = panel_block(format!(" Escalations · {pending} pending "), self.focused);
        let inner = block.inner(area);
        block.render(area, buf);
        if self.rows.is_empty() {
            Paragraph::new(Line::from(Span::styled(
                "No requests yet.",
                Style::new().fg(Color::DarkGray),
            )))
            .render(inner, buf);
            return;
        }
        // The status gets as much room as the command: "exit 127" must
        // never be cut to "exit 12".
        let widths = [
            Constraint::Length(8),
            Constraint::Length(9),
            Constraint::Length(6),
            Constraint::Fill(1),
            Constraint::Fill(1),
        ];
        let header = Row::new(["ID", "TAB", "AGE", "COMMAND", "STATUS"])
            .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
        let rows = self.rows.iter().map(|r| {
            Row::new([
                Cell::from(shown(&r.id)),
                Cell::from(shown(&r.tab)),
                Cell::from(format!("{:>6}", format_duration(r.age))),
                Cell::from(shown(&r.command)),
                Cell::from(status_span(&r.status)),
            ])
        });
        let table = Table::new(rows, widths)
            .header(header)
            .row_highlight_style(selected_style());
        let mut state = TableState::default().with_selected(self.selected);
        // Below the table, when there is room: the whole output of the
        // selected request, or else of the latest one that ended.
        let shown_result = self
            .selected
            .and_then(|i| self.rows.get(i))
            .or_else(|| self.rows.iter().rev().find(|r| result_text(r).is_some()))
            .and_then(|r| result_text(r).map(|t| (r, t)));
        let (table_area, detail_area) = match shown_result {
            Some(_) if inner.height >= 8 => {
                let table_rows = u16::try_from(self.rows.len() + 1)
                    .unwrap_or(u16::MAX)
                    .min(inner.height / 2);
                let [t, d] =
                    Layout::vertical([Constraint::Length(table_rows), Constraint::Fill(1)])
                        .areas(inner);
                (t, Some(d))
            }
            _ => (inner, None),
        };
        StatefulWidget::render(table, table_area, buf, &mut state);
        if let (Some(area), Some((row, (title, body)))) = (detail_area, shown_result) {
            let mut lines = vec![Line::from(Span::styled(
                format!(
                    "── {} · {title} ",
                    shown(&row.id).chars().take(8).collect::<String>()
                ),
                Style::new().add_modifier(Modifier::BOLD),
            ))];
            lines.extend(body.lines().map(|l| Line::raw(shown(l))));
            Paragraph::new(lines)
                .wrap(Wrap { trim: false })
                .render(area, buf);
        }
    }
}

/// The heading and text of a request's result, once it has one.
fn result_text(row: &EscalationRow) -> Option<(String, String)> {
    match &row.status {
        EscalationStatus::Finished { exit_code, output } => Some((
            format!("exit {exit_code}"),
            if output.trim().is_empty() {
                "(no output)".to_string()
            } else {
                output.trim_end().to_string()
            },
        )),
        EscalationStatus::Failed { error } => Some(("failed".into(), error.clone())),
        _ => None,
    }
}
