//! The audit trail: what happened, newest at the bottom.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};

use super::{panel_block, shown};

/// One audit record, already formatted by the app.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditEntry {
    /// When, e.g. `14:03:22`.
    pub time: String,
    /// What kind of event: `approved`, `denied`, `policy`, `session`, ...
    pub event: String,
    pub detail: String,
}

/// The audit trail panel. `scroll` is how many entries up from the newest
/// the view is; 0 follows new entries.
#[derive(Clone, Copy, Debug)]
pub struct AuditPanel<'a> {
    pub entries: &'a [AuditEntry],
    pub scroll: usize,
    pub focused: bool,
}

impl<'a> AuditPanel<'a> {
    pub fn new(entries: &'a [AuditEntry]) -> Self {
        Self {
            entries,
            scroll: 0,
            focused: false,
        }
    }
}

fn event_style(event: &str) -> Style {
    match event {
        "denied" | "aborted" | "failed" => Style::new().fg(Color::Red),
        "approved" | "auto-approved" => Style::new().fg(Color::Green),
        "request" | "edited" => Style::new().fg(Color::Yellow),
        _ => Style::new().fg(Color::Cyan),
    }
}

impl Widget for AuditPanel<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let block = panel_block(
            format!(" Audit trail · {} ", self.entries.len()),
            self.focused,
        );
        let inner = block.inner(area);
        block.render(area, buf);
        let height = usize::from(inner.height);
        let scroll = self.scroll.min(self.entries.len().saturating_sub(height));
        let end = self.entries.len() - scroll;
        let start = end.saturating_sub(height);
        // Measured over every entry so the column does not move on scroll.
        let event_width = self
            .entries
            .iter()
            .map(|e| shown(&e.event).chars().count())
            .max()
            .unwrap_or(0);
        let lines: Vec<Line<'_>> = self.entries[start..end]
            .iter()
            .map(|e| {
                let event = shown(&e.event);
                Line::from(vec![
                    Span::styled(shown(&e.time), Style::new().fg(Color::DarkGray)),
                    Span::raw(" "),
                    Span::styled(
                        format!("{event:<event_width$}"),
                        event_style(&event).add_modifier(Modifier::BOLD),
                    ),
                    Span::raw(" "),
                    Span::raw(shown(&e.detail)),
                ])
            })
            .collect();
        Paragraph::new(lines).render(inner, buf);
        if scroll > 0 {
            let badge = format!(" -{scroll} ");
            let width = u16::try_from(badge.len())
                .unwrap_or(u16::MAX)
                .min(inner.width);
            if width > 0 {
                buf.set_stringn(
                    inner.right() - width,
                    inner.y,
                    &badge,
                    usize::from(width),
                    Style::new().fg(Color::Black).bg(Color::Yellow),
                );
            }
        }
    }
}
