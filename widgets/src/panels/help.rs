//! The help overlay: every key binding, given as data by the app (the
//! prefix key is configurable, so the list is too).

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Clear, Paragraph, Widget};

use super::shown;
use crate::layout::centered;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyBinding {
    /// The keys, e.g. `C-a c`.
    pub keys: String,
    pub action: String,
}

/// A titled group of bindings ("Tabs", "Panels", "Approval modal", ...).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HelpSection {
    pub title: String,
    pub bindings: Vec<KeyBinding>,
}

/// The help overlay, drawn centred over the workbench.
#[derive(Clone, Copy, Debug)]
pub struct HelpOverlay<'a> {
    pub sections: &'a [HelpSection],
}

impl<'a> HelpOverlay<'a> {
    pub fn new(sections: &'a [HelpSection]) -> Self {
        Self { sections }
    }
}

impl Widget for HelpOverlay<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let area = area.intersection(buf.area);
        let key_width = self
            .sections
            .iter()
            .flat_map(|s| &s.bindings)
            .map(|b| Span::raw(shown(&b.keys)).width())
            .max()
            .unwrap_or(0);
        let key_style = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);
        let mut lines = Vec::new();
        for (i, section) in self.sections.iter().enumerate() {
            if i > 0 {
                lines.push(Line::default());
            }
            lines.push(Line::from(Span::styled(
                shown(&section.title),
                Style::new()
                    .fg(Color::Cyan)
                    .add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
            )));
            for b in &section.bindings {
                let keys = shown(&b.keys);
                let pad = key_width.saturating_sub(Span::raw(keys.as_str()).width());
                lines.push(Line::from(vec![
                    Span::raw("  "),
                    Span::styled(keys, key_style),
                    Span::raw(" ".repeat(pad + 2)),
                    Span::raw(shown(&b.action)),
                ]));
            }
        }
        let content_width = lines.iter().map(Line::width).max().unwrap_or(0);
        let width = u16::try_from(content_width + 4).unwrap_or(u16::MAX);
        let height = u16::try_from(lines.len() + 2).unwrap_or(u16::MAX);
        let rect = centered(area, width, height);
        let block = Block::bordered()
            .border_type(BorderType::Rounded)
            .border_style(Style::new().fg(Color::Cyan))
            .title(Span::styled(
                " Keys ",
                Style::new().add_modifier(Modifier::BOLD),
            ))
            .title_bottom(Line::from(" any key closes ").right_aligned());
        let inner = block.inner(rect);
        // Too short for everything: the last row says how much is missing.
        if lines.len() > usize::from(inner.height) && inner.height > 0 {
            let shown_rows = usize::from(inner.height) - 1;
            let hidden = lines.len() - shown_rows;
            lines.truncate(shown_rows);
            lines.push(Line::from(Span::styled(
                format!("… {hidden} more lines: enlarge the terminal"),
                Style::new().fg(Color::DarkGray),
            )));
        }
        Clear.render(rect, buf);
        block.render(rect, buf);
        Paragraph::new(lines).render(
            Rect {
                x: inner.x + 1,
                width: inner.width.saturating_sub(1),
                ..inner
            },
            buf,
        );
    }
}
