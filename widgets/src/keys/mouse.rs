//! Mouse events for a child that asked for them (xterm mouse modes 9, 1000,
//! 1002, 1003 with the default, UTF-8 or SGR encoding).

use ratatui::crossterm::event::{KeyModifiers, MouseButton, MouseEvent, MouseEventKind};
use ratatui::layout::{Position, Rect};

use super::{InputModes, MouseProtocolEncoding, MouseProtocolMode};

/// The bytes for `event`, with coordinates relative to `pane` (the pane's
/// inner rectangle). `None` when the child did not ask for this kind of
/// event, when it happened outside the pane, or when the encoding cannot
/// express the position.
pub fn encode_mouse(event: &MouseEvent, pane: Rect, modes: InputModes) -> Option<Vec<u8>> {
    let mode = modes.mouse_mode;
    if mode == MouseProtocolMode::None || !pane.contains(Position::new(event.column, event.row)) {
        return None;
    }
    // (button code, is a release)
    let (button, release) = match event.kind {
        MouseEventKind::Down(b) => (button_code(b), false),
        MouseEventKind::Up(b) if mode != MouseProtocolMode::Press => (button_code(b), true),
        MouseEventKind::Drag(b)
            if matches!(
                mode,
                MouseProtocolMode::ButtonMotion | MouseProtocolMode::AnyMotion
            ) =>
        {
            (button_code(b) + 32, false)
        }
        // Motion with no button held: "button 3" plus the motion bit.
        MouseEventKind::Moved if mode == MouseProtocolMode::AnyMotion => (3 + 32, false),
        MouseEventKind::ScrollUp => (64, false),
        MouseEventKind::ScrollDown => (65, false),
        MouseEventKind::ScrollLeft => (66, false),
        MouseEventKind::ScrollRight => (67, false),
        _ => return None,
    };
    // X10 mode (9) reports no modifiers.
    let modifiers = if mode == MouseProtocolMode::Press {
        0
    } else {
        let m = event.modifiers;
        4 * u16::from(m.contains(KeyModifiers::SHIFT))
            + 8 * u16::from(m.contains(KeyModifiers::ALT))
            + 16 * u16::from(m.contains(KeyModifiers::CONTROL))
    };
    let code = button + modifiers;
    // 1-based, relative to the pane.
    let x = event.column - pane.x + 1;
    let y = event.row - pane.y + 1;

    match modes.mouse_encoding {
        MouseProtocolEncoding::Sgr => {
            let end = if release { 'm' } else { 'M' };
            Some(format!("\x1b[<{code};{x};{y}{end}").into_bytes())
        }
        // The legacy encodings cannot say which button was released.
        MouseProtocolEncoding::Default => {
            let code = if release { 3 + modifiers } else { code };
            let mut out = b"\x1b[M".to_vec();
            for v in [code, x, y] {
                out.push(u8::try_from(v + 32).ok()?);
            }
            Some(out)
        }
        MouseProtocolEncoding::Utf8 => {
            let code = if release { 3 + modifiers } else { code };
            let mut out = String::from("\x1b[M");
            for v in [code, x, y] {
                // xterm's limit: positions up to 2015 fit in two bytes.
                if v + 32 >= 0x800 {
                    return None;
                }
                out.push(char::from_u32(u32::from(v + 32))?);
            }
            Some(out.into_bytes())
        }
    }
}

fn button_code(button: MouseButton) -> u16 {
    match button {
        MouseButton::Left => 0,
        MouseButton::Middle => 1,
        MouseButton::Right => 2,
    }
}
