use ratatui::crossterm::event::{
    KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseButton, MouseEvent, MouseEventKind,
};
use ratatui::layout::Rect;

use super::*;

const NONE: KeyModifiers = KeyModifiers::NONE;
const SHIFT: KeyModifiers = KeyModifiers::SHIFT;
const CTRL: KeyModifiers = KeyModifiers::CONTROL;
const ALT: KeyModifiers = KeyModifiers::ALT;

fn key(code: KeyCode, modifiers: KeyModifiers) -> KeyEvent {
    KeyEvent::new(code, modifiers)
}

const NORMAL: InputModes = InputModes {
    application_cursor: false,
    bracketed_paste: false,
    mouse_mode: MouseProtocolMode::None,
    mouse_encoding: MouseProtocolEncoding::Default,
};

const APP_CURSOR: InputModes = InputModes {
    application_cursor: true,
    ..NORMAL
};

#[test]
fn keys_encode_like_xterm() {
    use KeyCode::*;
    let cases: &[(KeyCode, KeyModifiers, InputModes, &[u8])] = &[
        // Printable text, with Shift already applied by crossterm.
        (Char('a'), NONE, NORMAL, b"a"),
        (Char('A'), SHIFT, NORMAL, b"A"),
        (Char('?'), SHIFT, NORMAL, b"?"),
        (Char('é'), NONE, NORMAL, "é".as_bytes()),
        (Char('日'), NONE, NORMAL, "日".as_bytes()),
        // Enter, Backspace, Esc.
        (Enter, NONE, NORMAL, b"\r"),
        (Backspace, NONE, NORMAL, b"\x7f"),
        (Esc, NONE, NORMAL, b"\x1b"),
        (Enter, ALT, NORMAL, b"\x1b\r"),
        (Backspace, ALT, NORMAL, b"\x1b\x7f"),
        // Tab and Shift+Tab.
        (Tab, NONE, NORMAL, b"\t"),
        (BackTab, SHIFT, NORMAL, b"\x1b[Z"),
        (Tab, SHIFT, NORMAL, b"\x1b[Z"),
        (Tab, CTRL, NORMAL, b"\x1b[9;5u"),
        (Tab, ALT, NORMAL, b"\x1b\t"),
        // Ctrl+letter is the letter & 0x1f, whatever its case.
        (Char('c'), CTRL, NORMAL, b"\x03"),
        (Char('a'), CTRL, NORMAL, b"\x01"),
        (Char('z'), CTRL, NORMAL, b"\x1a"),
        (Char('C'), CTRL.union(SHIFT), NORMAL, b"\x03"),
        (Char('['), CTRL, NORMAL, b"\x1b"),
        (Char('\\'), CTRL, NORMAL, b"\x1c"),
        (Char(']'), CTRL, NORMAL, b"\x1d"),
        (Char('/'), CTRL, NORMAL, b"\x1f"),
        (Char('2'), CTRL, NORMAL, b"\x00"),
        (Char(' '), CTRL, NORMAL, b"\x00"),
        (Char('?'), CTRL, NORMAL, b"\x7f"),
        // A Ctrl chord with no control code sends the character.
        (Char('1'), CTRL, NORMAL, b"1"),
        // Alt is an ESC prefix.
        (Char('x'), ALT, NORMAL, b"\x1bx"),
        (Char('.'), ALT, NORMAL, b"\x1b."),
        (Char('c'), CTRL.union(ALT), NORMAL, b"\x1b\x03"),
        // Arrows: CSI normally, SS3 in application-cursor mode.
        (Up, NONE, NORMAL, b"\x1b[A"),
        (Down, NONE, NORMAL, b"\x1b[B"),
        (Right, NONE, NORMAL, b"\x1b[C"),
        (Left, NONE, NORMAL, b"\x1b[D"),
        (Up, NONE, APP_CURSOR, b"\x1bOA"),
        (Left, NONE, APP_CURSOR, b"\x1bOD"),
        (Home, NONE, NORMAL, b"\x1b[H"),
        (End, NONE, NORMAL, b"\x1b[F"),
        (Home, NONE, APP_CURSOR, b"\x1bOH"),
        (End, NONE, APP_CURSOR, b"\x1bOF"),
        // Modified arrows are CSI 1;m X in both modes.
        (Up, SHIFT, NORMAL, b"\x1b[1;2A"),
        (Right, ALT, NORMAL, b"\x1b[1;3C"),
        (Left, CTRL, APP_CURSOR, b"\x1b[1;5D"),
        (Down, CTRL.union(SHIFT), NORMAL, b"\x1b[1;6B"),
        (End, CTRL, NORMAL, b"\x1b[1;5F"),
        // The editing block.
        (Insert, NONE, NORMAL, b"\x1b[2~"),
        (Delete, NONE, NORMAL, b"\x1b[3~"),
        (PageUp, NONE, NORMAL, b"\x1b[5~"),
        (PageDown, NONE, NORMAL, b"\x1b[6~"),
        (Delete, CTRL, NORMAL, b"\x1b[3;5~"),
        (PageUp, SHIFT, NORMAL, b"\x1b[5;2~"),
        // Function keys.
        (F(1), NONE, NORMAL, b"\x1bOP"),
        (F(2), NONE, NORMAL, b"\x1bOQ"),
        (F(3), NONE, NORMAL, b"\x1bOR"),
        (F(4), NONE, NORMAL, b"\x1bOS"),
        (F(5), NONE, NORMAL, b"\x1b[15~"),
        (F(6), NONE, NORMAL, b"\x1b[17~"),
        (F(7), NONE, NORMAL, b"\x1b[18~"),
        (F(8), NONE, NORMAL, b"\x1b[19~"),
        (F(9), NONE, NORMAL, b"\x1b[20~"),
        (F(10), NONE, NORMAL, b"\x1b[21~"),
        (F(11), NONE, NORMAL, b"\x1b[23~"),
        (F(12), NONE, NORMAL, b"\x1b[24~"),
        (F(1), SHIFT, NORMAL, b"\x1b[11;2~"),
        (F(5), CTRL, NORMAL, b"\x1b[15;5~"),
        // Keys a terminal does not send.
        (F(13), NONE, NORMAL, b""),
        (CapsLock, NONE, NORMAL, b""),
        (Null, NONE, NORMAL, b""),
    ];
    for (code, modifiers, modes, want) in cases {
        let got = encode_key(&key(*code, *modifiers), *modes);
        assert_eq!(
            got, *want,
            "{code:?} with {modifiers:?} (app cursor: {})",
            modes.application_cursor
        );
    }
}

#[test]
fn key_releases_send_nothing_and_repeats_send_again() {
    let release = KeyEvent::new_with_kind(KeyCode::Char('a'), NONE, KeyEventKind::Release);
    assert_eq!(encode_key(&release, NORMAL), b"");
    let repeat = KeyEvent::new_with_kind(KeyCode::Char('a'), NONE, KeyEventKind::Repeat);
    assert_eq!(encode_key(&repeat, NORMAL), b"a");
}

#[test]
fn paste_is_sanitised_and_bracketed_only_when_asked() {
    let bracketed = InputModes {
        bracketed_paste: true,
        ..NORMAL
    };
    let cases: &[(&str, InputModes, &[u8])] = &[
        ("ls -la", NORMAL, b"ls -la"),
        ("ls -la", bracketed, b"\x1b[200~ls -la\x1b[201~"),
        // A paste that tries to end the bracket early and run a command.
        (
            "x\x1b[201~rm -rf ~\n",
            bracketed,
            b"\x1b[200~x [201~rm -rf ~\n\x1b[201~",
        ),
        // Line feeds are Enter without brackets.
        ("a\nb\r\nc", NORMAL, b"a\rb\rc"),
        // Tabs and printable Unicode pass.
        ("a\tb 日本", NORMAL, "a\tb 日本".as_bytes()),
    ];
    for (text, modes, want) in cases {
        assert_eq!(encode_paste(text, *modes), *want, "paste {text:?}");
    }
}

#[test]
fn every_listed_control_becomes_a_space() {
    let dangerous = "\x00\x08\x05\x04\x1b\x7f\x03\x1c\x15\x1a\x11\x13\x17\x16\x12\x0f";
    assert_eq!(sanitize_paste(dangerous), " ".repeat(dangerous.len()));
    // Controls not on the list are left alone (Tab, LF, CR, BEL).
    assert_eq!(sanitize_paste("\t\n\r\x07"), "\t\n\r\x07");
}

fn mouse(kind: MouseEventKind, column: u16, row: u16, modifiers: KeyModifiers) -> MouseEvent {
    MouseEvent {
        kind,
        column,
        row,
        modifiers,
    }
}

fn modes(mode: MouseProtocolMode, encoding: MouseProtocolEncoding) -> InputModes {
    InputModes {
        mouse_mode: mode,
        mouse_encoding: encoding,
        ..NORMAL
    }
}

#[test]
fn mouse_is_encoded_only_when_the_child_asked_and_relative_to_the_pane() {
    use MouseEventKind::*;
    use MouseProtocolEncoding::{Default as Legacy, Sgr, Utf8};
    use MouseProtocolMode::*;
    // The pane's inner rectangle starts at column 10, row 5.
    let pane = Rect::new(10, 5, 300, 20);
    let left = MouseButton::Left;
    let cases: &[(MouseEvent, InputModes, Option<&[u8]>)] = &[
        // Not asked for: the app scrolls its own scrollback instead.
        (
            mouse(Down(left), 10, 5, NONE),
            modes(None, Sgr),
            Option::None,
        ),
        (
            mouse(ScrollUp, 10, 5, NONE),
            modes(None, Legacy),
            Option::None,
        ),
        // Outside the pane.
        (
            mouse(Down(left), 9, 5, NONE),
            modes(PressRelease, Sgr),
            Option::None,
        ),
        (
            mouse(Down(left), 10, 25, NONE),
            modes(PressRelease, Sgr),
            Option::None,
        ),
        // SGR: press M, release m, 1-based pane coordinates.
        (
            mouse(Down(left), 10, 5, NONE),
            modes(PressRelease, Sgr),
            Some(b"\x1b[<0;1;1M"),
        ),
        (
            mouse(Up(MouseButton::Right), 14, 7, NONE),
            modes(PressRelease, Sgr),
            Some(b"\x1b[<2;5;3m"),
        ),
        (
            mouse(ScrollDown, 10, 5, NONE),
            modes(PressRelease, Sgr),
            Some(b"\x1b[<65;1;1M"),
        ),
        (
            mouse(ScrollUp, 10, 5, NONE),
            modes(PressRelease, Sgr),
            Some(b"\x1b[<64;1;1M"),
        ),
        (
            mouse(Down(MouseButton::Middle), 10, 5, CTRL.union(SHIFT)),
            modes(PressRelease, Sgr),
            Some(b"\x1b[<21;1;1M"),
        ),
        // Large coordinates are fine in SGR.
        (
            mouse(Down(left), 309, 5, NONE),
            modes(PressRelease, Sgr),
            Some(b"\x1b[<0;300;1M"),
        ),
        // Legacy: 32 + value bytes; releases are button 3.
        (
            mouse(Down(left), 11, 6, NONE),
            modes(PressRelease, Legacy),
            Some(b"\x1b[M \"\""),
        ),
        (
            mouse(Up(left), 10, 5, NONE),
            modes(PressRelease, Legacy),
            Some(b"\x1b[M#!!"),
        ),
        (
            mouse(Down(left), 10, 5, ALT),
            modes(PressRelease, Legacy),
            Some(b"\x1b[M(!!"),
        ),
        // ... up to column 223, the last that fits in a byte ...
        (
            mouse(Down(left), 10 + 222, 5, NONE),
            modes(PressRelease, Legacy),
            Some(b"\x1b[M \xff!"),
        ),
        // ... and no further.
        (
            mouse(Down(left), 10 + 223, 5, NONE),
            modes(PressRelease, Legacy),
            Option::None,
        ),
        // UTF-8 can, as a two-byte character.
        (
            mouse(Down(left), 10 + 223, 5, NONE),
            modes(PressRelease, Utf8),
            Some("\x1b[M \u{100}!".as_bytes()),
        ),
        // X10 (9): presses only, no modifiers, no releases.
        (
            mouse(Down(left), 10, 5, CTRL),
            modes(Press, Legacy),
            Some(b"\x1b[M !!"),
        ),
        (
            mouse(Up(left), 10, 5, NONE),
            modes(Press, Legacy),
            Option::None,
        ),
        // Motion: drags from 1002 on, any motion only with 1003.
        (
            mouse(Drag(left), 10, 5, NONE),
            modes(PressRelease, Sgr),
            Option::None,
        ),
        (
            mouse(Drag(left), 10, 5, NONE),
            modes(ButtonMotion, Sgr),
            Some(b"\x1b[<32;1;1M"),
        ),
        (
            mouse(Moved, 10, 5, NONE),
            modes(ButtonMotion, Sgr),
            Option::None,
        ),
        (
            mouse(Moved, 10, 5, NONE),
            modes(AnyMotion, Sgr),
            Some(b"\x1b[<35;1;1M"),
        ),
    ];
    for (event, modes, want) in cases {
        let got = encode_mouse(event, pane, *modes);
        assert_eq!(got.as_deref(), *want, "{event:?} in {modes:?}");
    }
}
