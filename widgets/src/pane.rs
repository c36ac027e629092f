//! The terminal pane: a Client Session's vt100 screen drawn into a ratatui
//! buffer, plus [`PaneState`], the parser shared with the PTY reader thread.
//!
//! The app renders a pane with [`PaneState::with_screen`] and
//! [`TerminalPane`], and calls `frame.set_cursor_position` with
//! [`TerminalPane::cursor`] only for the focused pane (and never while a
//! modal owns the keyboard). [`spawn_feed`] feeds a pane from its PTY.

mod feed;
mod replies;
mod state;
mod transcript;

pub use feed::{BATCH, FeedSink, spawn_feed};
pub use state::PaneState;

use std::borrow::Cow;

use ratatui::buffer::{Buffer, CellDiffOption, CellWidth};
use ratatui::crossterm::cursor::SetCursorStyle;
use ratatui::layout::{Position, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Widget};

/// Draws a vt100 screen: colours, attributes, wide characters and, while the
/// user looks at the scrollback, a ` -N ` badge with the offset.
#[derive(Clone, Debug)]
pub struct TerminalPane<'a> {
    screen: &'a vt100::Screen,
    block: Option<Block<'a>>,
}

impl<'a> TerminalPane<'a> {
    pub fn new(screen: &'a vt100::Screen) -> Self {
        Self {
            screen,
            block: None,
        }
    }

    /// Draws `block` around the screen.
    #[must_use]
    pub fn block(mut self, block: Block<'a>) -> Self {
        self.block = Some(block);
        self
    }

    /// Where the screen goes inside `area`: the PTY and the parser must be
    /// sized to exactly this rectangle.
    pub fn inner(&self, area: Rect) -> Rect {
        match &self.block {
            Some(block) => block.inner(area),
            None => area,
        }
    }

    /// Where the terminal cursor belongs when the pane is drawn in `area`;
    /// `None` when the child hid it or the user is looking at the scrollback.
    pub fn cursor(&self, area: Rect) -> Option<Position> {
        if self.screen.hide_cursor() || self.screen.scrollback() > 0 {
            return None;
        }
        let inner = self.inner(area);
        let (row, col) = self.screen.cursor_position();
        let cols = self.screen.size().1.get();
        // After writing the last column the cursor waits past the edge
        // (pending wrap); a real terminal shows it on the last column.
        let col = col.min(cols - 1);
        (row < inner.height && col < inner.width)
            .then(|| Position::new(inner.x + col, inner.y + row))
    }

    /// The cursor shape the child asked for (DECSCUSR), for crossterm.
    pub fn cursor_style(&self) -> SetCursorStyle {
        match self.screen.cursor_style() {
            vt100::CursorStyle::Default => SetCursorStyle::DefaultUserShape,
            vt100::CursorStyle::BlinkBlock => SetCursorStyle::BlinkingBlock,
            vt100::CursorStyle::SteadyBlock => SetCursorStyle::SteadyBlock,
            vt100::CursorStyle::BlinkUnderline => SetCursorStyle::BlinkingUnderScore,
            vt100::CursorStyle::SteadyUnderline => SetCursorStyle::SteadyUnderScore,
            vt100::CursorStyle::BlinkVerticalBar => SetCursorStyle::BlinkingBar,
            vt100::CursorStyle::SteadyVerticalBar => SetCursorStyle::SteadyBar,
        }
    }
}

impl Widget for TerminalPane<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        (&self).render(area, buf);
    }
}

impl Widget for &TerminalPane<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let area = area.intersection(buf.area);
        if let Some(block) = &self.block {
            block.render(area, buf);
        }
        let inner = self.inner(area);
        draw_screen(self.screen, inner, buf);
        draw_scrollback_badge(self.screen.scrollback(), inner, buf);
    }
}

fn draw_screen(screen: &vt100::Screen, inner: Rect, buf: &mut Buffer) {
    let (rows, cols) = screen.size();
    let height = inner.height.min(rows.get());
    let width = inner.width.min(cols.get());
    for row in 0..height {
        // A row of the buffer at a time: this loop runs for every cell of
        // every frame.
        let start = buf.index_of(inner.x, inner.y + row);
        let targets = &mut buf.content[start..start + usize::from(width)];
        for (col, target) in (0..width).zip(targets) {
            match screen.cell(row, col) {
                // Buffer::diff assumes the cell after a wide symbol is
                // blank: the symbol sits in the first cell, the second is
                // reset.
                Some(cell) if !cell.is_wide_continuation() => {
                    let room_for_wide = col + 1 < width;
                    target
                        .set_symbol(&symbol(cell, room_for_wide))
                        .set_style(style(cell))
                        .set_diff_option(CellDiffOption::None);
                }
                _ => target.reset(),
            }
        }
    }
}

/// What one vt100 cell shows. vt100 keeps zero-width characters appended to
/// the cell before them; bidi controls among them would reorder the host
/// terminal's line, and a width ratatui disagrees with would shift every
/// later cell, so both fall back to something safe.
fn symbol(cell: &vt100::Cell, room_for_wide: bool) -> Cow<'_, str> {
    let contents = cell.contents();
    let width = if cell.is_wide() { 2 } else { 1 };
    if contents.is_empty() || (width == 2 && !room_for_wide) {
        return Cow::Borrowed(" ");
    }
    // vt100 never stores C0/C1 controls, so one byte is one printable ASCII.
    if contents.len() == 1 || (!contents.chars().any(hazardous) && contents.cell_width() == width) {
        return Cow::Borrowed(contents);
    }
    let cleaned: String = contents.chars().filter(|c| !hazardous(*c)).collect();
    if !cleaned.is_empty() && cleaned.cell_width() == width {
        return Cow::Owned(cleaned);
    }
    let base: String = contents.chars().take(1).collect();
    if !base.chars().any(hazardous) && base.cell_width() == width {
        return Cow::Owned(base);
    }
    Cow::Borrowed(if width == 2 { "？" } else { "\u{FFFD}" })
}

/// Characters that must never reach the host terminal from a sandbox.
fn hazardous(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

/// The cell's whole style: colours set and every modifier either added or
/// removed, so nothing drawn underneath shows through.
fn style(cell: &vt100::Cell) -> Style {
    let mut modifiers = Modifier::empty();
    if cell.bold() {
        modifiers |= Modifier::BOLD;
    }
    if cell.dim() {
        modifiers |= Modifier::DIM;
    }
    if cell.italic() {
        modifiers |= Modifier::ITALIC;
    }
    if cell.underline() {
        modifiers |= Modifier::UNDERLINED;
    }
    if cell.inverse() {
        modifiers |= Modifier::REVERSED;
    }
    Style::new()
        .fg(color(cell.fgcolor()))
        .bg(color(cell.bgcolor()))
        .remove_modifier(Modifier::all())
        .add_modifier(modifiers)
}

/// vt100 colours as ratatui colours; the 16 base colours stay palette
/// colours so the user's terminal theme still applies.
fn color(color: vt100::Color) -> Color {
    match color {
        vt100::Color::Default => Color::Reset,
        vt100::Color::Idx(i) => match i {
            0 => Color::Black,
            1 => Color::Red,
            2 => Color::Green,
            3 => Color::Yellow,
            4 => Color::Blue,
            5 => Color::Magenta,
            6 => Color::Cyan,
            7 => Color::Gray,
            8 => Color::DarkGray,
            9 => Color::LightRed,
            10 => Color::LightGreen,
            11 => Color::LightYellow,
            12 => Color::LightBlue,
            13 => Color::LightMagenta,
            14 => Color::LightCyan,
            15 => Color::White,
            i => Color::Indexed(i),
        },
        vt100::Color::Rgb(r, g, b) => Color::Rgb(r, g, b),
    }
}

/// The ` -N ` badge (as in mprocs) in the top-right corner: the user is `N`
/// rows up in the scrollback and what they see is not the live screen.
fn draw_scrollback_badge(offset: usize, inner: Rect, buf: &mut Buffer) {
    if offset == 0 || inner.is_empty() {
        return;
    }
    let badge = format!(" -{offset} ");
    let width = u16::try_from(badge.len())
        .unwrap_or(u16::MAX)
        .min(inner.width);
    let style = Style::new()
        .fg(Color::Black)
        .bg(Color::Yellow)
        .add_modifier(Modifier::BOLD);
    buf.set_stringn(
        inner.right() - width,
        inner.y,
        &badge,
        usize::from(width),
        style,
    );
}

#[cfg(test)]
mod tests;
