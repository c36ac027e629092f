//! The tab bar: one tab per Client Session, with a badge on tabs that have
//! pending escalation requests, and one on tabs whose session ended.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::shown;

/// One tab.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TabInfo {
    pub title: String,
    /// Pending escalation requests from this tab.
    pub pending: usize,
    /// Its command ended (and failed: a clean end closes the tab), or its
    /// domain went: the tab stays for its last screen.
    pub ended: bool,
}

/// The tab bar, one row high.
#[derive(Clone, Copy, Debug)]
pub struct TabBar<'a> {
    pub tabs: &'a [TabInfo],
    pub selected: usize,
}

impl<'a> TabBar<'a> {
    pub fn new(tabs: &'a [TabInfo], selected: usize) -> Self {
        Self { tabs, selected }
    }
}

/// The spans of tab `i` and their width.
fn tab_spans(i: usize, tab: &TabInfo, selected: bool) -> (Vec<Span<'static>>, usize) {
    let style = if selected {
        Style::new()
            .fg(Color::Black)
            .bg(Color::Cyan)
            .add_modifier(Modifier::BOLD)
    } else {
        Style::new().fg(Color::Gray)
    };
    let label = format!(" {}:{} ", i + 1, shown(&tab.title));
    let mut width = Span::raw(label.as_str()).width();
    let mut spans = vec![Span::styled(label, style)];
    if tab.ended {
        // A word, not a colour: NO_COLOR keeps it.
        let badge = " ended ";
        width += badge.len();
        spans.push(Span::styled(
            badge,
            Style::new().fg(Color::White).bg(Color::DarkGray),
        ));
    }
    if tab.pending > 0 {
        let badge = format!(" !{} ", tab.pending);
        width += badge.len();
        spans.push(Span::styled(
            badge,
            Style::new()
                .fg(Color::Black)
                .bg(Color::Yellow)
                .add_modifier(Modifier::BOLD),
        ));
    }
    (spans, width)
}

impl TabBar<'_> {
    /// Each tab's spans and width, and the first one shown: tabs are
    /// skipped from the left until the selected one fits ("…" says some
    /// are hidden).
    #[allow(clippy::type_complexity)]
    fn placed(&self, width: usize) -> (Vec<(Vec<Span<'static>>, usize)>, usize) {
        let selected = self.selected.min(self.tabs.len().saturating_sub(1));
        let tabs: Vec<_> = self
            .tabs
            .iter()
            .enumerate()
            .map(|(i, t)| tab_spans(i, t, i == selected))
            .collect();
        let mut first = 0;
        let fits = |first: usize| {
            let lead = usize::from(first > 0);
            lead + tabs[first..=selected]
                .iter()
                .map(|(_, w)| w + 1)
                .sum::<usize>()
                <= width
        };
        while first < selected && !fits(first) {
            first += 1;
        }
        (tabs, first)
    }

    /// The tab drawn at `column` of `area` (a mouse click), if any.
    pub fn tab_at(&self, area: Rect, column: u16) -> Option<usize> {
        if self.tabs.is_empty() || column < area.x {
            return None;
        }
        let (tabs, first) = self.placed(usize::from(area.width));
        let mut x = usize::from(area.x) + usize::from(first > 0);
        let column = usize::from(column);
        for (i, (_, w)) in tabs.iter().enumerate().skip(first) {
            if column >= x && column < x + w {
                return Some(i);
            }
            x += w + 1;
        }
        None
    }
}

impl Widget for TabBar<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let area = area.intersection(buf.area);
        if area.is_empty() || self.tabs.is_empty() {
            return;
        }
        let (tabs, first) = self.placed(usize::from(area.width));
        let mut spans = Vec::new();
        if first > 0 {
            spans.push(Span::styled("…", Style::new().fg(Color::DarkGray)));
        }
        for (tab, _) in tabs.into_iter().skip(first) {
            spans.extend(tab);
            spans.push(Span::raw(" "));
        }
        buf.set_line(area.x, area.y, &Line::from(spans), area.width);
    }
}
