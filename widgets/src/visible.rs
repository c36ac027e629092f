//! Making hostile text visible before a human approves it (decisions.md D5).
//!
//! An escalation request is written by the agent. Control characters, escape
//! sequences, bidi overrides and zero-width characters could make the command
//! a human reads differ from the one that runs; every such character is
//! shown as a visible placeholder instead.

/// How one character should be shown.
fn placeholder(c: char) -> Option<String> {
    match c {
        '\n' => Some("␤".into()),
        '\t' => Some("␉".into()),
        '\u{1b}' => Some("␛".into()),
        '\0' => Some("␀".into()),
        '\u{7f}' => Some("␡".into()),
        c if (c as u32) < 0x20 => Some(format!("^{}", char::from(b'@' + c as u8))),
        c if c.is_control() => Some(format!("<U+{:04X}>", c as u32)),
        '\u{200B}'..='\u{200F}'
        | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{2069}'
        | '\u{FEFF}' => Some(format!("<U+{:04X}>", c as u32)),
        _ => None,
    }
}

/// `text` with every invisible or controlling character replaced by a
/// visible placeholder; returns the text and whether anything was replaced.
pub fn make_visible(text: &str) -> (String, bool) {
    let mut out = String::with_capacity(text.len());
    let mut replaced = false;
    for c in text.chars() {
        match placeholder(c) {
            Some(p) => {
                out.push_str(&p);
                replaced = true;
            }
            None => out.push(c),
        }
    }
    (out, replaced)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_unchanged() {
        assert_eq!(make_visible("ls -la /tmp"), ("ls -la /tmp".into(), false));
    }

    #[test]
    fn escapes_and_controls_become_visible() {
        let (s, r) = make_visible("rm -rf /\u{1b}[2K\rls");
        assert!(r);
        assert_eq!(s, "rm -rf /␛[2K^Mls");
    }

    #[test]
    fn bidi_and_zero_width_become_visible() {
        let (s, r) = make_visible("ls\u{202E}txt.exe\u{200B}");
        assert!(r);
        assert_eq!(s, "ls<U+202E>txt.exe<U+200B>");
    }

    #[test]
    fn c1_controls_become_visible() {
        assert_eq!(make_visible("a\u{9b}b").0, "a<U+009B>b");
    }
}
