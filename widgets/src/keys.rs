//! Input for the child: crossterm events encoded as the bytes a real
//! terminal (xterm, as termwiz and mprocs encode it) would send.
//!
//! Everything that is not Lazaret's prefix key goes through
//! [`encode_key`]; pastes through [`encode_paste`]; mouse events through
//! [`encode_mouse`], which returns `None` when the child did not ask for the
//! mouse (the app then scrolls the scrollback with the wheel).

mod mouse;
mod paste;

pub use mouse::encode_mouse;
pub use paste::{encode_paste, sanitize_paste};

use std::fmt::Write as _;

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
pub use vt100::{MouseProtocolEncoding, MouseProtocolMode};

/// The modes a child sets that change how input is encoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InputModes {
    /// DECCKM: arrows, Home and End as SS3 instead of CSI.
    pub application_cursor: bool,
    /// Mode 2004: pastes wrapped in `ESC[200~` ... `ESC[201~`.
    pub bracketed_paste: bool,
    /// Which mouse events the child asked for.
    pub mouse_mode: MouseProtocolMode,
    /// How it wants them encoded.
    pub mouse_encoding: MouseProtocolEncoding,
}

impl InputModes {
    pub fn of(screen: &vt100::Screen) -> Self {
        Self {
            application_cursor: screen.application_cursor(),
            bracketed_paste: screen.bracketed_paste(),
            mouse_mode: screen.mouse_protocol_mode(),
            mouse_encoding: screen.mouse_protocol_encoding(),
        }
    }
}

const ESC: char = '\x1b';

/// The bytes for one key press; empty for releases and for keys a terminal
/// does not send (Caps Lock, media keys, F13 and up, ...).
pub fn encode_key(key: &KeyEvent, modes: InputModes) -> Vec<u8> {
    if key.kind == KeyEventKind::Release {
        return Vec::new();
    }
    let shift = key.modifiers.contains(KeyModifiers::SHIFT);
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    let alt = key
        .modifiers
        .intersects(KeyModifiers::ALT | KeyModifiers::META);
    // xterm's modifier parameter: 1 + (shift 1 | alt 2 | ctrl 4).
    let modifier = 1 + u8::from(shift) + 2 * u8::from(alt) + 4 * u8::from(ctrl);
    let alt_prefix = if alt { "\x1b" } else { "" };

    let mut out = String::new();
    match key.code {
        // Shift is already in the character crossterm reports ('A', '?').
        KeyCode::Char(c) if ctrl => {
            out.push_str(alt_prefix);
            out.push(ctrl_mapping(c).unwrap_or(c));
        }
        KeyCode::Char(c) => {
            out.push_str(alt_prefix);
            out.push(c);
        }
        KeyCode::Enter => {
            out.push_str(alt_prefix);
            out.push('\r');
        }
        KeyCode::Esc => {
            out.push_str(alt_prefix);
            out.push(ESC);
        }
        // The default VERASE, which is DEL, not BS.
        KeyCode::Backspace => {
            out.push_str(alt_prefix);
            out.push('\x7f');
        }
        KeyCode::Tab | KeyCode::BackTab => {
            out.push_str(alt_prefix);
            let shift = shift || key.code == KeyCode::BackTab;
            out.push_str(match (ctrl, shift) {
                (true, false) => "\x1b[9;5u",
                (true, true) => "\x1b[1;5Z",
                (false, true) => "\x1b[Z",
                (false, false) => "\t",
            });
        }
        KeyCode::Up => cursor_key(&mut out, 'A', modifier, modes),
        KeyCode::Down => cursor_key(&mut out, 'B', modifier, modes),
        KeyCode::Right => cursor_key(&mut out, 'C', modifier, modes),
        KeyCode::Left => cursor_key(&mut out, 'D', modifier, modes),
        KeyCode::Home => cursor_key(&mut out, 'H', modifier, modes),
        KeyCode::End => cursor_key(&mut out, 'F', modifier, modes),
        KeyCode::Insert => tilde_key(&mut out, 2, modifier),
        KeyCode::Delete => tilde_key(&mut out, 3, modifier),
        KeyCode::PageUp => tilde_key(&mut out, 5, modifier),
        KeyCode::PageDown => tilde_key(&mut out, 6, modifier),
        // F1-F4 unmodified are SS3 P..S, as on a VT100.
        KeyCode::F(n @ 1..=4) if modifier == 1 => {
            out.push_str("\x1bO");
            out.push(char::from(b'P' + (n - 1)));
        }
        KeyCode::F(n @ 1..=12) => {
            let code = [11, 12, 13, 14, 15, 17, 18, 19, 20, 21, 23, 24][usize::from(n - 1)];
            tilde_key(&mut out, code, modifier);
        }
        _ => {}
    }
    out.into_bytes()
}

/// Arrows, Home and End: SS3 in application-cursor mode, CSI otherwise;
/// with modifiers always `CSI 1 ; m X`.
fn cursor_key(out: &mut String, final_char: char, modifier: u8, modes: InputModes) {
    if modifier > 1 {
        let _ = write!(out, "\x1b[1;{modifier}{final_char}");
    } else if modes.application_cursor {
        let _ = write!(out, "\x1bO{final_char}");
    } else {
        let _ = write!(out, "\x1b[{final_char}");
    }
}

/// Keys sent as `CSI n ~`, or `CSI n ; m ~` with modifiers.
fn tilde_key(out: &mut String, code: u8, modifier: u8) {
    if modifier > 1 {
        let _ = write!(out, "\x1b[{code};{modifier}~");
    } else {
        let _ = write!(out, "\x1b[{code}~");
    }
}

/// Ctrl+key as xterm sends it: letters masked with 0x1f, plus the legacy X11
/// aliases (Ctrl+2 and Ctrl+Space are NUL, Ctrl+/ is 0x1f, ...).
fn ctrl_mapping(c: char) -> Option<char> {
    Some(match c {
        '@' | '`' | ' ' | '2' => '\x00',
        'a'..='z' | 'A'..='Z' => char::from(c as u8 & 0x1f),
        '[' | '3' | '{' => '\x1b',
        '\\' | '4' | '|' => '\x1c',
        ']' | '5' | '}' => '\x1d',
        '^' | '6' | '~' => '\x1e',
        '_' | '7' | '/' => '\x1f',
        '8' | '?' => '\x7f',
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
