//! The user's own terminal, guarded from the sandbox (decisions.md D10).
//!
//! Output of a plain session (`lazaret exec`) reaches a terminal only
//! through [`OutputFilter`]: text and harmless styling pass, every sequence
//! that could set the clipboard, the title, a hyperlink, a terminal mode,
//! or make the terminal answer (and so type into the user's shell) is
//! dropped. [`KeyReader`] reads the keys of an approval prompt so that
//! nothing a terminal sends on its own (answerback, device attributes,
//! colour and version reports) can pass for a key.

use std::os::fd::AsFd;

use vte::{Params, Parser, Perform};

/// Sandbox output on its way to a terminal; one per stream, as the state of
/// a sequence carries over between reads.
pub struct OutputFilter {
    parser: Parser,
    out: Sink,
}

impl std::fmt::Debug for OutputFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputFilter").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Sink(Vec<u8>);

impl Default for OutputFilter {
    fn default() -> Self {
        OutputFilter {
            parser: Parser::new(),
            out: Sink::default(),
        }
    }
}

impl OutputFilter {
    /// What of `bytes` may reach the terminal.
    pub fn filter(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.parser.advance(&mut self.out, bytes);
        std::mem::take(&mut self.out.0)
    }
}

impl Perform for Sink {
    fn print(&mut self, c: char) {
        let mut b = [0u8; 4];
        self.0.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
    }

    fn execute(&mut self, byte: u8) {
        // Line feed, carriage return, tab, backspace. Not ENQ (answerback),
        // BEL, or SO/SI (a character set that shows other letters).
        if matches!(byte, b'\n' | b'\r' | b'\t' | 0x08) {
            self.0.push(byte);
        }
    }

    fn csi_dispatch(&mut self, params: &Params, intermediates: &[u8], _ignore: bool, action: char) {
        // No private marker (`?`, `>`...) and no intermediate: plain SGR
        // styling, and erasing in the line (progress bars redraw with it).
        if !intermediates.is_empty() {
            return;
        }
        match action {
            'm' => {
                let mut groups = Vec::new();
                for p in params.iter() {
                    // Concealed text would hide what the human reads.
                    if p.first() == Some(&8) {
                        continue;
                    }
                    groups.push(p.iter().map(u16::to_string).collect::<Vec<_>>().join(":"));
                }
                self.0
                    .extend_from_slice(format!("\x1b[{}m", groups.join(";")).as_bytes());
            }
            'K' => {
                let n = params.iter().next().and_then(|p| p.first().copied());
                let n = n.unwrap_or(0).min(2);
                self.0.extend_from_slice(format!("\x1b[{n}K").as_bytes());
            }
            _ => {}
        }
    }
    // OSC (clipboard, title, hyperlinks, colour queries), DCS (XTGETTCAP,
    // DECRQSS...), ESC sequences (charsets, keypad, RIS) and the rest of CSI
    // (modes, queries, cursor movement, scroll regions) are dropped.
}

/// Resets the modes a program may have left on (mouse reporting, focus and
/// paste reports, application keys, hidden cursor, origin mode, scroll
/// region, character sets, styling), without moving the cursor or clearing.
pub const RESET_MODES: &str = concat!(
    "\x1b[0m",
    "\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1005l\x1b[?1006l\x1b[?1015l",
    "\x1b[?1004l\x1b[?2004l\x1b[?1l\x1b>",
    "\x1b[?6l\x1b[?7h\x1b[4l\x1b[?25h",
    "\x1b(B\x0f",
);

/// Before a prompt: [`RESET_MODES`], the whole screen as scroll region,
/// then everything on screen pushed into the scrollback (so nothing drawn
/// before sits next to the prompt) and the cursor at the top.
pub fn reset_for_prompt(rows: u16) -> String {
    let mut s = String::from(RESET_MODES);
    s += "\x1b[r\x1b[999;1H";
    s += &"\n".repeat(usize::from(rows.max(1)));
    s += "\x1b[H\x1b[J";
    s
}

/// Throws away input the terminal holds that nobody has read yet (typed
/// ahead, or a terminal's replies).
pub fn flush_input(tty: &impl AsFd) {
    let _ = nix::sys::termios::tcflush(tty.as_fd(), nix::sys::termios::FlushArg::TCIFLUSH);
}

/// One key of a prompt, as [`KeyReader`] decoded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Enter,
    Backspace,
    /// Ctrl-U: delete to the line's start.
    Kill,
    /// Ctrl-W: delete the word before the cursor.
    KillWord,
    /// Ctrl-A / Ctrl-E: the line's start / end.
    Home,
    End,
    /// Alt-B / Alt-F: a word back / forward.
    WordLeft,
    WordRight,
    /// Esc, or Ctrl-C.
    Escape,
    /// Cursor and page keys, to read a long request.
    Up,
    Down,
    PageUp,
    PageDown,
    /// More than one key in one read (a paste, or a terminal's reply), or
    /// bytes inside an escape sequence: ignored.
    Burst,
}

/// Decodes what one `read()` of the terminal returned into at most one key.
/// Whole escape sequences are parsed and dropped (a cursor key, a focus
/// report, a colour or version reply); a read that holds more than one key
/// is a [`Key::Burst`], as a human's keypress arrives alone.
#[derive(Default)]
pub struct KeyReader {
    parser: Parser,
    keys: Keys,
}

impl std::fmt::Debug for KeyReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyReader").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Keys {
    keys: Vec<Key>,
    sequences: usize,
}

impl Perform for Keys {
    fn print(&mut self, c: char) {
        self.keys.push(Key::Char(c));
    }
    fn execute(&mut self, byte: u8) {
        self.keys.push(match byte {
            b'\r' | b'\n' => Key::Enter,
            0x7f | 0x08 => Key::Backspace,
            0x15 => Key::Kill,
            0x17 => Key::KillWord,
            0x01 => Key::Home,
            0x05 => Key::End,
            0x03 => Key::Escape,
            // ENQ, and any other control: not a key of the prompt.
            _ => Key::Burst,
        });
    }
    fn csi_dispatch(&mut self, params: &Params, intermediates: &[u8], _: bool, action: char) {
        // One parameter at most: a modifier (`1;2A`, Shift-Up) is no key here.
        let first = match params.len() {
            0 => None,
            1 => params.iter().next().and_then(|p| p.first().copied()),
            _ => Some(u16::MAX),
        };
        let key = match (intermediates, action, first) {
            ([], 'A', None | Some(0 | 1)) => Some(Key::Up),
            ([], 'B', None | Some(0 | 1)) => Some(Key::Down),
            ([], '~', Some(5)) => Some(Key::PageUp),
            ([], '~', Some(6)) => Some(Key::PageDown),
            _ => None,
        };
        match key {
            Some(k) => self.keys.push(k),
            None => self.sequences += 1,
        }
    }
    fn esc_dispatch(&mut self, intermediates: &[u8], _: bool, byte: u8) {
        // Alt-B and Alt-F, as a terminal sends them (ESC b, ESC f).
        match (intermediates, byte) {
            ([], b'b') => self.keys.push(Key::WordLeft),
            ([], b'f') => self.keys.push(Key::WordRight),
            _ => self.sequences += 1,
        }
    }
    fn osc_dispatch(&mut self, _: &[&[u8]], _: bool) {
        self.sequences += 1;
    }
    fn hook(&mut self, _: &Params, _: &[u8], _: bool, _: char) {
        self.sequences += 1;
    }
}

impl KeyReader {
    /// The key in `chunk` (one read), if it holds exactly one.
    pub fn decode(&mut self, chunk: &[u8]) -> Option<Key> {
        // A lone ESC is the Esc key (a sequence arrives whole in one read).
        if chunk == [0x1b] {
            self.parser = Parser::new();
            return Some(Key::Escape);
        }
        // DEL is not a C0 control for the parser; it is Backspace here.
        if chunk == [0x7f] {
            return Some(Key::Backspace);
        }
        // Keys inside a sequence that had not ended before this read are
        // not keys: the parser swallows them.
        self.keys = Keys::default();
        self.parser.advance(&mut self.keys, chunk);
        let keys = std::mem::take(&mut self.keys);
        match (keys.keys.len(), keys.sequences) {
            (0, _) => None,
            (1, 0) => keys.keys.into_iter().next(),
            _ => Some(Key::Burst),
        }
    }
}

/// A code of `len` letters for the human to type, from letters that are
/// neither prompt keys nor easily confused (no a, d, e, q, i, l, o).
pub fn approval_code(len: usize) -> String {
    const LETTERS: &[u8] = b"bcfghjkmnprstuvwxyz";
    let mut code = String::new();
    while code.len() < len {
        for b in uuid::Uuid::new_v4().as_bytes() {
            // Rejection sampling keeps every letter equally likely.
            let limit = 256 - 256 % LETTERS.len();
            if usize::from(*b) < limit && code.len() < len {
                code.push(char::from(LETTERS[usize::from(*b) % LETTERS.len()]));
            }
        }
    }
    code
}

/// Whether the user asked for no colour (<https://no-color.org>: the
/// variable is set and not empty).
pub fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// `text` (Lazaret's own styled output) without its colours when
/// [`no_color`]: colour parameters leave each SGR sequence, attributes
/// such as bold and reverse stay.
pub fn paint(text: &str) -> String {
    if no_color() {
        strip_colors(text)
    } else {
        text.to_string()
    }
}

/// Removes colour parameters (30-49, 90-107, with 38/48's extended forms)
/// from every SGR sequence of `text`; a sequence left empty goes.
pub fn strip_colors(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("\x1b[") {
        out.push_str(&rest[..at]);
        let body = &rest[at + 2..];
        let end = body.find(|c: char| !(c.is_ascii_digit() || c == ';'));
        match end {
            Some(end) if body[end..].starts_with('m') => {
                let params: Vec<&str> = body[..end].split(';').collect();
                let mut kept = Vec::new();
                let mut i = 0;
                while i < params.len() {
                    let n: u16 = params[i].parse().unwrap_or(0);
                    match n {
                        38 | 48 => {
                            // 38;5;N or 38;2;R;G;B
                            let skip = match params.get(i + 1).copied() {
                                Some("5") => 2,
                                Some("2") => 4,
                                _ => 0,
                            };
                            i += skip;
                        }
                        30..=37 | 39..=47 | 49 | 90..=97 | 100..=107 => {}
                        _ => kept.push(params[i]),
                    }
                    i += 1;
                }
                // `ESC[m` is a reset (its one parameter is empty): kept.
                if !kept.is_empty() {
                    out.push_str("\x1b[");
                    out.push_str(&kept.join(";"));
                    out.push('m');
                }
                rest = &body[end + 1..];
            }
            _ => {
                out.push_str("\x1b[");
                rest = body;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_go_and_attributes_stay() {
        assert_eq!(
            strip_colors("\x1b[1;33mhi\x1b[0m \x1b[1;7m x \x1b[0m"),
            "\x1b[1mhi\x1b[0m \x1b[1;7m x \x1b[0m"
        );
        assert_eq!(strip_colors("\x1b[31mred\x1b[39m"), "red");
        assert_eq!(strip_colors("\x1b[38;5;196;1mx"), "\x1b[1mx");
        assert_eq!(strip_colors("\x1b[48;2;1;2;3mx"), "x");
        assert_eq!(strip_colors("\x1b[2Kline"), "\x1b[2Kline", "not SGR");
        assert_eq!(strip_colors("plain"), "plain");
        assert_eq!(strip_colors("\x1b[mreset"), "\x1b[mreset");
    }

    fn filtered(bytes: &[u8]) -> String {
        String::from_utf8(OutputFilter::default().filter(bytes)).unwrap()
    }

    #[test]
    fn text_and_styling_pass() {
        assert_eq!(filtered(b"hello\r\n\tworld"), "hello\r\n\tworld");
        assert_eq!(filtered(b"\x1b[1;31mred\x1b[0m"), "\x1b[1;31mred\x1b[0m");
        assert_eq!(filtered(b"\x1b[38:2:1:2:3mx"), "\x1b[38:2:1:2:3mx");
        assert_eq!(filtered(b"50%\r\x1b[K60%"), "50%\r\x1b[0K60%");
        assert_eq!(filtered("héllo ✓".as_bytes()), "héllo ✓");
    }

    #[test]
    fn dangerous_sequences_are_dropped() {
        let attacks: &[&[u8]] = &[
            b"\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07",         // clipboard
            b"\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x1b\\",       // clipboard, ST
            b"\x1b]0;pwned\x07",                           // title
            b"\x1b]2;pwned\x1b\\",                         // title
            b"\x1b]8;;https://evil/\x1b\\",                // hyperlink
            b"\x1b]10;?\x07\x1b]11;?\x07",                 // colour queries
            b"\x1bP+q544e\x1b\\",                          // XTGETTCAP
            b"\x1b[>0q",                                   // XTVERSION
            b"\x1b[c\x1b[>c\x1b[6n\x1b[5n",                // DA, DSR
            b"\x05",                                       // ENQ
            b"\x1b[?1000h\x1b[?1006h\x1b[?25l\x1b[?1049h", // modes
            b"\x1b[5;10r\x1b[2J\x1b[H\x1b[3A",             // region, clear, moves
            b"\x1b(0\x0e",                                 // charsets
            b"\x1bc",                                      // RIS
            b"\x1b[8m",                                    // conceal
            b"\x1b_apc\x1b\\\x1b^pm\x1b\\",                // APC, PM
            b"\x07",                                       // bell
        ];
        for a in attacks {
            let out = filtered(a);
            assert!(
                !out.contains('\x1b') || out == "\x1b[m",
                "{a:?} passed as {out:?}"
            );
            assert!(!out.contains('\x05') && !out.contains('\x07'), "{a:?}");
        }
        // A sequence split across reads is still one sequence.
        let mut f = OutputFilter::default();
        let mut out = f.filter(b"a\x1b]52;c;Y3Vy");
        out.extend(f.filter(b"bA==\x07b"));
        assert_eq!(out, b"ab");
    }

    #[test]
    fn cursor_and_page_keys_scroll() {
        for (bytes, key) in [
            (&b"\x1b[A"[..], Key::Up),
            (b"\x1b[B", Key::Down),
            (b"\x1b[5~", Key::PageUp),
            (b"\x1b[6~", Key::PageDown),
        ] {
            assert_eq!(KeyReader::default().decode(bytes), Some(key));
        }
        // Two at once are a burst, as any two keys are.
        assert_eq!(
            KeyReader::default().decode(b"\x1b[B\x1b[B"),
            Some(Key::Burst)
        );
        // A key with a modifier (Shift-Up) is none of them.
        assert_eq!(KeyReader::default().decode(b"\x1b[1;2A"), None);
    }

    #[test]
    fn terminal_replies_are_not_keys() {
        let replies: &[&[u8]] = &[
            b"\x1b[?62;22c",                              // DA1
            b"\x1b[>84;0;0c",                             // DA2
            b"\x1b]10;rgb:ffff/ffff/ffff\x1b\\",          // OSC 10
            b"\x1b]11;rgb:0000/0000/0000\x07",            // OSC 11
            b"\x1bP>|tmux 3.4\x1b\\",                     // XTVERSION
            b"\x1bP>|XTerm(390)\x1b\\",                   // XTVERSION
            b"PuTTY",                                     // ENQ answerback
            b"\x1b[12;1R",                                // cursor report
            b"\x1b[I",                                    // focus
            b"\x1b[200~bcf\x1b[201~",                     // paste
            b"\x1b]11;rgb:aaaa/aaaa/aaaa\x1b\\\x1b[?62c", // two at once
        ];
        for r in replies {
            let mut k = KeyReader::default();
            let key = k.decode(r);
            assert!(
                matches!(key, None | Some(Key::Burst)),
                "{r:?} decoded as {key:?}"
            );
        }
        // A reply split over two reads: its tail is no key either.
        let mut k = KeyReader::default();
        assert_eq!(k.decode(b"\x1b]11;rgb:aa"), None);
        assert_eq!(k.decode(b"aa/bbbb/cccc\x07"), None);
        assert_eq!(k.decode(b"b"), Some(Key::Char('b')));
        // Keys a human types.
        assert_eq!(k.decode(b"x"), Some(Key::Char('x')));
        assert_eq!(k.decode(b"\r"), Some(Key::Enter));
        assert_eq!(k.decode(b"\x7f"), Some(Key::Backspace));
        assert_eq!(k.decode(b"\x1b"), Some(Key::Escape));
        assert_eq!(k.decode("é".as_bytes()), Some(Key::Char('é')));
        assert_eq!(k.decode(b"\x07"), Some(Key::Burst));
        // A line editor's keys.
        assert_eq!(k.decode(b"\x17"), Some(Key::KillWord));
        assert_eq!(k.decode(b"\x01"), Some(Key::Home));
        assert_eq!(k.decode(b"\x05"), Some(Key::End));
        assert_eq!(k.decode(b"\x1bb"), Some(Key::WordLeft));
        assert_eq!(k.decode(b"\x1bf"), Some(Key::WordRight));
        assert_eq!(k.decode(b"\x03"), Some(Key::Escape));
    }

    #[test]
    fn codes_use_their_alphabet() {
        let c = approval_code(3);
        assert_eq!(c.len(), 3);
        assert!(c.chars().all(|c| "bcfghjkmnprstuvwxyz".contains(c)));
    }
}
