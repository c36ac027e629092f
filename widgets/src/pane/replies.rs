//! Answers to the queries vt100 leaves unanswered. A child that asks where
//! the cursor is (CSI 6n) or what terminal it runs in (CSI c) waits for the
//! reply; without one, shells and editors stall at start-up.

use std::io::Write as _;

/// Collects the replies for the caller to write back to the PTY.
#[derive(Debug, Default)]
pub(crate) struct Replies {
    pub(crate) pending: Vec<u8>,
}

impl vt100::Callbacks for Replies {
    fn unhandled_csi(
        &mut self,
        screen: &mut vt100::Screen,
        i1: Option<u8>,
        _i2: Option<u8>,
        params: &[&[u16]],
        c: char,
    ) {
        let first = params.first().and_then(|p| p.first()).copied().unwrap_or(0);
        let out = &mut self.pending;
        // Writes to a Vec cannot fail.
        let _ = match (i1, c, first) {
            // DSR: "terminal OK".
            (None, 'n', 5) => out.write_all(b"\x1b[0n"),
            // CPR (and DEC's variant): the cursor, 1-based.
            (None, 'n', 6) => {
                let (row, col) = cursor(screen);
                write!(out, "\x1b[{row};{col}R")
            }
            (Some(b'?'), 'n', 6) => {
                let (row, col) = cursor(screen);
                write!(out, "\x1b[?{row};{col}R")
            }
            // Primary DA: a VT100 with advanced video, which is what vt100
            // emulates.
            (None, 'c', 0) => out.write_all(b"\x1b[?1;2c"),
            // Secondary DA: terminal type 0 (VT100), version 0.
            (Some(b'>'), 'c', 0) => out.write_all(b"\x1b[>0;0;0c"),
            // XTWINOPS 18: the text area size in characters.
            (None, 't', 18) => {
                let (rows, cols) = screen.size();
                write!(out, "\x1b[8;{rows};{cols}t")
            }
            _ => Ok(()),
        };
    }
}

/// The 1-based cursor position; a cursor waiting past the last column
/// (pending wrap) is reported on the last column, as xterm does.
fn cursor(screen: &vt100::Screen) -> (u16, u16) {
    let (row, col) = screen.cursor_position();
    let cols = screen.size().1.get();
    (row + 1, col.min(cols - 1) + 1)
}
