//! The Network Sidecar's live routing table: each prefix, its verdict and
//! the rule behind it.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, StatefulWidget, Table, TableState, Widget};

use super::{panel_block, selected_style, shown};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    #[default]
    Deny,
}

/// One route of the egress policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteRow {
    /// An address prefix such as `140.82.112.0/20`.
    pub prefix: String,
    pub verdict: Verdict,
    /// The rule that produced the route (a host name, a profile entry, a
    /// live edit).
    pub rule: String,
}

/// The network policy panel.
#[derive(Clone, Copy, Debug)]
pub struct NetworkPanel<'a> {
    pub routes: &'a [RouteRow],
    pub selected: Option<usize>,
    pub focused: bool,
    /// Shown instead of the table while there is none to show yet (the
    /// domain is starting, the table is being read).
    pub waiting: Option<&'a str>,
}

impl<'a> NetworkPanel<'a> {
    pub fn new(routes: &'a [RouteRow]) -> Self {
        Self {
            routes,
            selected: None,
            focused: false,
            waiting: None,
        }
    }

    /// No table yet: `why` instead.
    #[must_use]
    pub fn waiting(mut self, why: &'a str) -> Self {
        self.waiting = Some(why);
        self
    }
}

impl Widget for NetworkPanel<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let allowed = self
            .routes
            .iter()
            .filter(|r| r.verdict == Verdict::Allow)
            .count();
        let title = match self.waiting {
            Some(_) => " Network policy ".to_string(),
            None => format!(
                " Network policy · {allowed} allowed, {} denied ",
                self.routes.len() - allowed
            ),
        };
        let block = panel_block(title, self.focused);
        let inner = block.inner(area);
        block.render(area, buf);
        if let Some(why) = self.waiting {
            Paragraph::new(Line::from(Span::styled(
                shown(why),
                Style::new().fg(Color::DarkGray),
            )))
            .wrap(ratatui::widgets::Wrap { trim: true })
            .render(inner, buf);
            return;
        }
        if self.routes.is_empty() {
            Paragraph::new(Line::from(Span::styled(
                "No routes: all egress is denied.",
                Style::new().fg(Color::DarkGray),
            )))
            .render(inner, buf);
            return;
        }
        let prefix_width = self
            .routes
            .iter()
            .map(|r| shown(&r.prefix).chars().count())
            .max()
            .unwrap_or(0)
            .max(6);
        let widths = [
            Constraint::Length(u16::try_from(prefix_width).unwrap_or(u16::MAX)),
            Constraint::Length(7),
            Constraint::Fill(1),
        ];
        let header = Row::new(["PREFIX", "VERDICT", "RULE"])
            .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
        let rows = self.routes.iter().map(|r| {
            let verdict = match r.verdict {
                Verdict::Allow => Span::styled("allow", Style::new().fg(Color::Green)),
                Verdict::Deny => Span::styled(
                    "deny",
                    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
                ),
            };
            Row::new([
                Cell::from(shown(&r.prefix)),
                Cell::from(verdict),
                Cell::from(shown(&r.rule)),
            ])
        });
        let table = Table::new(rows, widths)
            .header(header)
            .row_highlight_style(selected_style());
        let mut state = TableState::default().with_selected(self.selected);
        StatefulWidget::render(table, inner, buf, &mut state);
    }
}
