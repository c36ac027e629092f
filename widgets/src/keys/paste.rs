//! Pasted text. A paste is data, not keystrokes: characters that a shell or
//! line editor would act on (interrupt, kill line, literal next, an ESC that
//! could end a bracketed paste early) become spaces. The list is the one
//! Ghostty and xterm use since CVE-2026-26982.

use super::InputModes;

/// Whether pasting `c` could make the child act instead of read.
fn unsafe_in_paste(c: char) -> bool {
    matches!(
        c,
        '\x00' // NUL
            | '\x08' // BS
            | '\x05' // ENQ
            | '\x04' // EOT
            | '\x1b' // ESC
            | '\x7f' // DEL
            | '\x03' // ^C
            | '\x1c' // ^\
            | '\x15' // ^U
            | '\x1a' // ^Z
            | '\x11' // ^Q
            | '\x13' // ^S
            | '\x17' // ^W
            | '\x16' // ^V
            | '\x12' // ^R
            | '\x0f' // ^O
    )
}

/// `text` with every character that is unsafe in a paste replaced by a
/// space.
pub fn sanitize_paste(text: &str) -> String {
    text.chars()
        .map(|c| if unsafe_in_paste(c) { ' ' } else { c })
        .collect()
}

/// The bytes for a paste: sanitised, and wrapped in `ESC[200~` ...
/// `ESC[201~` only when the child enabled bracketed paste. Without it, line
/// feeds become carriage returns, as a terminal sends Enter.
pub fn encode_paste(text: &str, modes: InputModes) -> Vec<u8> {
    let clean = sanitize_paste(text);
    if modes.bracketed_paste {
        let mut out = Vec::with_capacity(clean.len() + 12);
        out.extend_from_slice(b"\x1b[200~");
        out.extend_from_slice(clean.as_bytes());
        out.extend_from_slice(b"\x1b[201~");
        out
    } else {
        clean.replace("\r\n", "\r").replace('\n', "\r").into_bytes()
    }
}
