//! The workbench's panels, each a widget fed plain data: sessions, network
//! policy, escalation queue, audit trail, plus the tab bar, the status line,
//! the help overlay, the new-tab dialog and the checkpoints overlay. Every
//! string from outside (paths, commands, output, names) is made visible
//! before it is drawn.

mod audit;
mod checkpoints;
mod escalations;
mod help;
mod network;
mod new_tab;
mod sessions;
mod status;
mod tabs;

pub use audit::{AuditEntry, AuditPanel};
pub use checkpoints::{CheckpointRow, CheckpointsDialog, CheckpointsForm, CheckpointsOutcome};
pub use escalations::{EscalationRow, EscalationStatus, EscalationsPanel};
pub use help::{HelpOverlay, HelpSection, KeyBinding};
pub use network::{NetworkPanel, RouteRow, Verdict};
pub use new_tab::{FormOutcome, NewTabDialog, NewTabField, NewTabForm, ProfileChoice};
pub use sessions::{HostedRow, SessionRow, SessionsPanel};
pub use status::StatusLine;
pub use tabs::{TabBar, TabInfo};

use std::time::Duration;

use ratatui::buffer::CellWidth;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Span;
use ratatui::widgets::{Block, BorderType};

use crate::visible::make_visible;

/// A short age or uptime: `42s`, `5m07s`, `3h12m`, `2d05h`.
pub fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// The frame of a side panel; the focused one stands out.
fn panel_block(title: String, focused: bool) -> Block<'static> {
    let (border, title_style) = if focused {
        (
            Style::new().fg(Color::Cyan),
            Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
        )
    } else {
        (
            Style::new().fg(Color::DarkGray),
            Style::new().add_modifier(Modifier::BOLD),
        )
    };
    Block::bordered()
        .border_type(if focused {
            BorderType::Thick
        } else {
            BorderType::Plain
        })
        .border_style(border)
        .title(Span::styled(title, title_style))
}

/// Text from outside, safe and readable on one line.
fn shown(text: &str) -> String {
    make_visible(text).0
}

/// The style of the selected row in a list panel.
fn selected_style() -> Style {
    Style::new().add_modifier(Modifier::REVERSED)
}

/// `text` cut to `width` columns from the left, keeping the end, which is
/// the informative part of a path: `…/src/project`. `text` must already be
/// made visible (no control characters).
fn keep_end(text: &str, width: usize) -> String {
    let char_width = |c: char| usize::from(c.encode_utf8(&mut [0; 4]).cell_width());
    if text.chars().map(char_width).sum::<usize>() <= width {
        return text.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut tail = Vec::new();
    let mut used = 1; // the ellipsis
    for c in text.chars().rev() {
        used += char_width(c);
        if used > width {
            break;
        }
        tail.push(c);
    }
    std::iter::once('…').chain(tail.into_iter().rev()).collect()
}

/// `text` cut to at most `width` columns, keeping the start.
fn keep_start(text: &str, width: usize) -> String {
    let mut used = 0;
    text.chars()
        .take_while(|c| {
            used += usize::from(c.encode_utf8(&mut [0; 4]).cell_width());
            used <= width
        })
        .collect()
}

/// A key list (`key action · key action …`) wrapped between items to
/// `width`, after an empty line: the footer of the new-tab and checkpoints
/// overlays.
fn key_footer(keys: &[(&str, &str)], width: usize) -> Vec<ratatui::text::Line<'static>> {
    use ratatui::text::Line;
    let key_style = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);
    let mut lines = vec![Line::default()];
    let mut used = 0;
    for (key, action) in keys {
        let item = key.len() + 1 + action.len();
        if used > 0 && used + 3 + item > width {
            lines.push(Line::default());
            used = 0;
        }
        let line = lines.last_mut().expect("lines starts non-empty");
        if used > 0 {
            line.spans
                .push(Span::styled(" · ", Style::new().fg(Color::DarkGray)));
            used += 3;
        }
        line.spans.push(Span::styled(key.to_string(), key_style));
        line.spans.push(Span::raw(format!(" {action}")));
        used += item;
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_short() {
        for (secs, want) in [
            (0, "0s"),
            (59, "59s"),
            (60, "1m00s"),
            (307, "5m07s"),
            (3600, "1h00m"),
            (11_520, "3h12m"),
            (86_400, "1d00h"),
            (190_800, "2d05h"),
        ] {
            assert_eq!(format_duration(Duration::from_secs(secs)), want, "{secs}s");
        }
    }

    #[test]
    fn keep_end_keeps_the_end() {
        assert_eq!(keep_end("/home/me/src/project", 12), "…src/project");
        assert_eq!(keep_end("short", 12), "short");
        assert_eq!(keep_end("abc", 0), "");
        assert_eq!(keep_end("abc", 1), "…");
        assert_eq!(keep_end("/srv/日本語", 6), "…本語");
    }
}
