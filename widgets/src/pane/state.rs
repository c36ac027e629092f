//! The parser of one pane, shared between the PTY reader thread (which feeds
//! it) and the UI (which draws it when it is dirty).

use std::fmt;
use std::num::NonZeroU16;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::replies::Replies;
use crate::keys::InputModes;

/// A vt100 parser behind a mutex, with a dirty flag the UI polls so it draws
/// at most once per frame however many PTY chunks arrived.
///
/// Share it as `Arc<PaneState>`. The reader thread calls [`process`] and
/// writes the returned bytes back to the PTY; the UI calls [`take_dirty`]
/// and, when it returns true, draws through [`with_screen`].
///
/// [`process`]: PaneState::process
/// [`take_dirty`]: PaneState::take_dirty
/// [`with_screen`]: PaneState::with_screen
pub struct PaneState {
    parser: Mutex<vt100::Parser<Replies>>,
    dirty: AtomicBool,
}

impl fmt::Debug for PaneState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (rows, cols) = self.size();
        f.debug_struct("PaneState")
            .field("rows", &rows)
            .field("cols", &cols)
            .field("dirty", &self.dirty.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A zero size (a pane squeezed to nothing) becomes 1: vt100 needs at least
/// one row and one column.
fn non_zero(n: u16) -> NonZeroU16 {
    NonZeroU16::new(n).unwrap_or(NonZeroU16::MIN)
}

impl PaneState {
    /// A pane of `rows` x `cols` keeping `scrollback_rows` rows of history.
    /// Open the PTY at the same size.
    pub fn new(rows: u16, cols: u16, scrollback_rows: usize) -> Self {
        Self {
            parser: Mutex::new(vt100::Parser::new_with_callbacks(
                non_zero(rows),
                non_zero(cols),
                scrollback_rows,
                Replies::default(),
            )),
            // Nothing has been drawn yet.
            dirty: AtomicBool::new(true),
        }
    }

    /// The parser even if a thread panicked while holding it: the screen is
    /// only ever drawn, so a half-applied chunk is better than a dead UI.
    fn lock(&self) -> MutexGuard<'_, vt100::Parser<Replies>> {
        self.parser.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn mark_dirty(&self) {
        self.dirty.store(true, Ordering::Release);
    }

    /// Feeds output of the child to the parser and returns the replies to
    /// its queries (cursor position, device attributes), which the caller
    /// writes back to the PTY. Feed chunks of a few KiB to keep the lock
    /// short.
    pub fn process(&self, bytes: &[u8]) -> Vec<u8> {
        let replies = {
            let mut parser = self.lock();
            parser.process(bytes);
            std::mem::take(&mut parser.callbacks_mut().pending)
        };
        self.mark_dirty();
        replies
    }

    /// The current size as (rows, cols).
    pub fn size(&self) -> (u16, u16) {
        let (rows, cols) = self.lock().screen().size();
        (rows.get(), cols.get())
    }

    /// Resizes the parser alone; use [`resize_with`](Self::resize_with) when
    /// a PTY is attached.
    pub fn resize(&self, rows: u16, cols: u16) {
        self.lock().set_size(non_zero(rows), non_zero(cols));
        self.mark_dirty();
    }

    /// Resizes the PTY (through `resize_pty`, given the clamped rows and
    /// cols) and then the parser, holding the parser lock throughout: output
    /// the child writes after SIGWINCH must be parsed at the new size. If
    /// the PTY refuses, the parser keeps its size and the error is returned.
    pub fn resize_with<E>(
        &self,
        rows: u16,
        cols: u16,
        resize_pty: impl FnOnce(u16, u16) -> Result<(), E>,
    ) -> Result<(), E> {
        let (rows, cols) = (non_zero(rows), non_zero(cols));
        let mut parser = self.lock();
        resize_pty(rows.get(), cols.get())?;
        parser.set_size(rows, cols);
        drop(parser);
        self.mark_dirty();
        Ok(())
    }

    /// Scrolls the view `rows` further back into the scrollback; returns the
    /// new offset. Does nothing on the alternate screen, which has none.
    pub fn scroll_up(&self, rows: usize) -> usize {
        self.scroll_to(|offset| offset.saturating_add(rows))
    }

    /// Scrolls the view `rows` towards the live screen; returns the new
    /// offset.
    pub fn scroll_down(&self, rows: usize) -> usize {
        self.scroll_to(|offset| offset.saturating_sub(rows))
    }

    /// Back to the live screen (call it when the user types into the pane).
    pub fn scroll_to_bottom(&self) {
        self.scroll_to(|_| 0);
    }

    fn scroll_to(&self, f: impl FnOnce(usize) -> usize) -> usize {
        let mut parser = self.lock();
        let screen = parser.screen_mut();
        let before = screen.scrollback();
        // vt100 clamps the offset to the scrollback it has.
        screen.set_scrollback(f(before));
        let after = screen.scrollback();
        drop(parser);
        if after != before {
            self.mark_dirty();
        }
        after
    }

    /// How many rows up the view is; 0 is the live screen.
    pub fn scrollback_offset(&self) -> usize {
        self.lock().screen().scrollback()
    }

    /// Whether the screen changed since the last call; clears the flag.
    pub fn take_dirty(&self) -> bool {
        self.dirty.swap(false, Ordering::AcqRel)
    }

    /// The modes the child set that decide how keys, pastes and mouse
    /// events are encoded.
    pub fn input_modes(&self) -> InputModes {
        InputModes::of(self.lock().screen())
    }

    /// The pane's text for the terminal it was drawn on, once it is no
    /// longer drawn: the main screen's scrollback and rows as lines of text
    /// with plain styling, made from the parsed cells. A child that ended on the
    /// alternate screen leaves it first, as a terminal shows it.
    pub fn transcript(&self) -> String {
        let mut parser = self.lock();
        if parser.screen().alternate_screen() {
            parser.process(b"\x1b[?1049l");
        }
        super::transcript::render(parser.screen_mut())
    }

    /// Runs `f` on the screen with the parser locked: draw with it, keep the
    /// closure short.
    pub fn with_screen<R>(&self, f: impl FnOnce(&vt100::Screen) -> R) -> R {
        f(self.lock().screen())
    }
}
