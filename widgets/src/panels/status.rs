//! The status line: Lazaret's prefix key, the focused domain and a message.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::shown;

/// The status line, one row high.
#[derive(Clone, Copy, Debug, Default)]
pub struct StatusLine<'a> {
    /// The prefix key as the user writes it, e.g. `C-a`.
    pub prefix: &'a str,
    /// The prefix was pressed and the next key is a Lazaret command.
    pub prefix_armed: bool,
    /// Requests that wait for the human, e.g. `⚑ 1 request waits · C-a !`:
    /// shown for as long as they wait, right after the prefix.
    pub waiting: Option<&'a str>,
    /// The focused tab's domain, e.g. `claude · ~/src/app`.
    pub domain: Option<&'a str>,
    /// A transient message, right-aligned.
    pub message: Option<&'a str>,
}

impl Widget for StatusLine<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let area = area.intersection(buf.area);
        if area.is_empty() {
            return;
        }
        let bar = Style::new().fg(Color::White).bg(Color::DarkGray);
        buf.set_style(Rect { height: 1, ..area }, bar);
        // The prefix chip reads together with what follows: "C-a ? help".
        let prefix = shown(self.prefix);
        let mut spans = Vec::new();
        if self.prefix_armed {
            spans.push(Span::styled(
                format!(" {prefix} "),
                Style::new()
                    .fg(Color::Black)
                    .bg(Color::Yellow)
                    .add_modifier(Modifier::BOLD),
            ));
            spans.push(Span::styled(" command key? (? help, Esc cancel) ", bar));
        } else {
            spans.push(Span::styled(
                format!(" {prefix} "),
                Style::new()
                    .fg(Color::Black)
                    .bg(Color::Cyan)
                    .add_modifier(Modifier::BOLD),
            ));
            spans.push(Span::styled(" ? help ", bar));
        }
        if let Some(waiting) = self.waiting {
            spans.push(Span::styled(
                format!(" {} ", shown(waiting)),
                Style::new()
                    .fg(Color::Black)
                    .bg(Color::Yellow)
                    .add_modifier(Modifier::BOLD),
            ));
            spans.push(Span::styled(" ", bar));
        }
        if let Some(domain) = self.domain {
            spans.push(Span::styled("│ ", bar));
            spans.push(Span::styled(
                shown(domain),
                bar.add_modifier(Modifier::BOLD),
            ));
            spans.push(Span::styled(" ", bar));
        }
        let left = Line::from(spans);
        let left_width = u16::try_from(left.width()).unwrap_or(u16::MAX);
        buf.set_line(area.x, area.y, &left, area.width);
        if let Some(message) = self.message {
            // The message never covers the prefix and the domain: it takes
            // what is left, cut with an ellipsis when it must be.
            let room = usize::from(area.width.saturating_sub(left_width));
            let mut message = format!(" {} ", shown(message));
            if Span::raw(message.as_str()).width() > room {
                if room < 12 {
                    return;
                }
                message = format!(" {}… ", super::keep_start(message.trim(), room - 3));
            }
            let width = u16::try_from(Span::raw(message.as_str()).width()).unwrap_or(u16::MAX);
            buf.set_stringn(
                area.right() - width,
                area.y,
                &message,
                usize::from(width),
                bar,
            );
        }
    }
}
