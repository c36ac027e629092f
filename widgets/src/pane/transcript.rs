//! A pane's text for the terminal it was drawn on, once the pane is gone:
//! what `lazaret shell` leaves on the normal screen when it ends.
//!
//! Only text and plain styling (SGR) are written, made from the cells
//! vt100 parsed: nothing the child wrote reaches the terminal as it was,
//! and symbols are cleaned as when the pane is drawn.

use std::fmt::Write as _;

use super::symbol;

/// The main screen's scrollback, then its rows, oldest first: each row as
/// text with its colours and attributes, ending in CR LF unless the text
/// wrapped onto the next row. Blank rows at the end are left out.
pub(super) fn render(screen: &mut vt100::Screen) -> String {
    let saved = screen.scrollback();
    screen.set_scrollback(usize::MAX);
    let history = screen.scrollback();
    let rows = usize::from(screen.size().0.get());
    let mut lines: Vec<(String, bool)> = Vec::with_capacity(history + rows);
    // A view at offset `o` shows the lines from `history - o` on: read
    // the history a screenful at a time, then the live screen.
    while lines.len() < history + rows {
        let offset = history.saturating_sub(lines.len());
        screen.set_scrollback(offset);
        let first = lines.len() - (history - offset);
        for row in first..rows {
            let row = u16::try_from(row).unwrap_or(u16::MAX);
            lines.push((line(screen, row), screen.row_wrapped(row)));
        }
    }
    screen.set_scrollback(saved);
    while lines.last().is_some_and(|(text, _)| text.is_empty()) {
        lines.pop();
    }
    let mut out = String::new();
    for (text, wrapped) in lines {
        out.push_str(&text);
        if !wrapped {
            out.push_str("\r\n");
        }
    }
    out
}

/// One visible row: its cells up to the last one that shows anything (a
/// row that wraps is kept whole, its spaces are part of the text).
fn line(screen: &vt100::Screen, row: u16) -> String {
    let cols = screen.size().1.get();
    let wrapped = screen.row_wrapped(row);
    let shows = |col: u16| {
        screen.cell(row, col).is_some_and(|c| {
            !(c.contents().trim().is_empty() && sgr(c) == RESET && !c.is_wide_continuation())
        })
    };
    let end = if wrapped {
        cols
    } else {
        (0..cols).rev().find(|&c| shows(c)).map_or(0, |c| c + 1)
    };
    let mut out = String::new();
    let mut style = RESET.to_string();
    for col in 0..end {
        let Some(cell) = screen.cell(row, col) else {
            break;
        };
        if cell.is_wide_continuation() {
            continue;
        }
        let want = sgr(cell);
        if want != style {
            out.push_str(&want);
            style = want;
        }
        out.push_str(&symbol(cell, col + 1 < cols));
    }
    if style != RESET {
        out.push_str(RESET);
    }
    out
}

const RESET: &str = "\x1b[0m";

/// The SGR sequence that sets exactly the cell's style from a reset.
fn sgr(cell: &vt100::Cell) -> String {
    let mut s = String::from("\x1b[0");
    for (on, code) in [
        (cell.bold(), 1),
        (cell.dim(), 2),
        (cell.italic(), 3),
        (cell.underline(), 4),
        (cell.inverse(), 7),
    ] {
        if on {
            let _ = write!(s, ";{code}");
        }
    }
    color(&mut s, cell.fgcolor(), 30, 90, 38);
    color(&mut s, cell.bgcolor(), 40, 100, 48);
    s.push('m');
    s
}

/// Appends a colour's SGR parameters: the 16 base colours as palette
/// colours (the user's theme applies), the rest as 256-colour or RGB.
fn color(s: &mut String, color: vt100::Color, base: u8, bright: u8, extended: u8) {
    match color {
        vt100::Color::Default => {}
        vt100::Color::Idx(i @ 0..=7) => {
            let _ = write!(s, ";{}", base + i);
        }
        vt100::Color::Idx(i @ 8..=15) => {
            let _ = write!(s, ";{}", bright + i - 8);
        }
        vt100::Color::Idx(i) => {
            let _ = write!(s, ";{extended};5;{i}");
        }
        vt100::Color::Rgb(r, g, b) => {
            let _ = write!(s, ";{extended};2;{r};{g};{b}");
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::pane::PaneState;

    #[test]
    fn scrollback_and_screen_in_order() {
        let pane = PaneState::new(4, 20, 100);
        for i in 1..=10 {
            pane.process(format!("line {i}\r\n").as_bytes());
        }
        pane.process(b"$ ");
        let t = pane.transcript();
        let want: String = (1..=10).map(|i| format!("line {i}\r\n")).collect();
        assert_eq!(t, format!("{want}$\r\n"));
        // The view the user scrolled to is kept.
        pane.scroll_up(2);
        let _ = pane.transcript();
        assert_eq!(pane.scrollback_offset(), 2);
    }

    #[test]
    fn styles_are_rebuilt_and_nothing_else_passes() {
        let pane = PaneState::new(5, 30, 10);
        pane.process(
            b"\x1b[1;31mred\x1b[0m plain \x1b]52;c;eHh4\x07\x1b[?1000h\x1b[38;5;200mx\r\n",
        );
        let t = pane.transcript();
        assert_eq!(
            t,
            "\x1b[0;1;31mred\x1b[0m plain \x1b[0;38;5;200mx\x1b[0m\r\n"
        );
    }

    #[test]
    fn a_full_screen_program_leaves_the_main_screen() {
        let pane = PaneState::new(5, 30, 10);
        pane.process(b"before\r\n\x1b[?1049h\x1b[Hvim screen");
        assert_eq!(pane.transcript(), "before\r\n");
    }

    #[test]
    fn wrapped_rows_join() {
        let pane = PaneState::new(5, 4, 10);
        pane.process(b"abcdef\r\n");
        assert_eq!(pane.transcript(), "abcdef\r\n");
    }
}
