//! Making hostile text visible (decisions.md D5, D8): the one escaping
//! function for every string the agent can influence that Lazaret shows a
//! human, in the approval modal and on a plain terminal alike (review
//! findings, audit records, log tails, status, branch names).
//!
//! Control characters, escape sequences, bidi overrides and zero-width
//! characters could make what a human reads differ from what is there (or
//! erase earlier lines); every such character is shown as a visible
//! placeholder instead.

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
        // Also invisible or layout-changing: soft hyphen, grapheme joiner,
        // Arabic letter mark, blank fillers, line/paragraph separators,
        // deprecated format characters, variation selectors and the tag
        // block (used to smuggle hidden ASCII).
        '\u{00AD}'
        | '\u{034F}'
        | '\u{061C}'
        | '\u{115F}'
        | '\u{1160}'
        | '\u{17B4}'
        | '\u{17B5}'
        | '\u{180E}'
        | '\u{2028}'
        | '\u{2029}'
        | '\u{206A}'..='\u{206F}'
        | '\u{3164}'
        | '\u{FE00}'..='\u{FE0F}'
        | '\u{FFA0}'
        | '\u{E0000}'..='\u{E007F}'
        | '\u{E0100}'..='\u{E01EF}' => Some(format!("<U+{:04X}>", c as u32)),
        // Spaces that are not U+0020 (NBSP, en/em/thin spaces...): a
        // command split on them reads as several words but is one.
        '\u{00A0}'
        | '\u{1680}'
        | '\u{2000}'..='\u{200A}'
        | '\u{202F}'
        | '\u{205F}'
        | '\u{3000}'
        // Private-use characters: any font may draw them as anything.
        | '\u{E000}'..='\u{F8FF}'
        | '\u{F0000}'..='\u{FFFFD}'
        | '\u{100000}'..='\u{10FFFD}'
        // Strong right-to-left letters (Hebrew, Arabic, Syriac, Thaana,
        // N'Ko..., their presentation forms and the historic RTL scripts):
        // they reorder the arguments around them on screen.
        | '\u{0590}'..='\u{08FF}'
        | '\u{FB1D}'..='\u{FDFF}'
        | '\u{FE70}'..='\u{FEFE}'
        | '\u{10800}'..='\u{10FFF}'
        | '\u{1E800}'..='\u{1EFFF}' => Some(format!("<U+{:04X}>", c as u32)),
        _ => None,
    }
}

/// One run of text as it should be shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Characters shown as they are.
    Text(String),
    /// The visible stand-in for one invisible or controlling character; a
    /// widget styles it apart so it cannot pass for literal text.
    Placeholder(String),
}

/// `text` split into literal runs and placeholders, in order.
pub fn visible_pieces(text: &str) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    for c in text.chars() {
        match placeholder(c) {
            Some(p) => {
                if !literal.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut literal)));
                }
                pieces.push(Piece::Placeholder(p));
            }
            None => literal.push(c),
        }
    }
    if !literal.is_empty() {
        pieces.push(Piece::Text(literal));
    }
    pieces
}

/// `text` with every invisible or controlling character replaced by a
/// visible placeholder; returns the text and whether anything was replaced.
pub fn make_visible(text: &str) -> (String, bool) {
    let mut out = String::with_capacity(text.len());
    let mut replaced = false;
    for piece in visible_pieces(text) {
        match piece {
            Piece::Text(t) => out.push_str(&t),
            Piece::Placeholder(p) => {
                out.push_str(&p);
                replaced = true;
            }
        }
    }
    (out, replaced)
}

/// `text` ready for a terminal: [`make_visible`] without the flag. Use it
/// for every agent-influenced string Lazaret prints.
pub fn visible(text: &str) -> String {
    make_visible(text).0
}

/// [`visible`] line by line: the line breaks stay, everything else that
/// could steer a terminal is shown. For Lazaret's own multi-line messages
/// (errors) that may carry agent text.
pub fn visible_lines(text: &str) -> String {
    text.split('\n').map(visible).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    #[test]
    fn lines_keep_their_breaks_and_nothing_else() {
        let text = "key \x1b]52;c;cm0gLXJmIH4=\x07 refused\nnext\r\x1b[2Kline";
        assert_eq!(
            visible_lines(text),
            "key ␛]52;c;cm0gLXJmIH4=^G refused\nnext^M␛[2Kline"
        );
    }

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

    #[test]
    fn fillers_separators_and_tags_become_visible() {
        let (s, r) = make_visible("a\u{2028}b\u{E0041}\u{3164}\u{AD}c");
        assert!(r);
        assert_eq!(s, "a<U+2028>b<U+E0041><U+3164><U+00AD>c");
    }

    #[test]
    fn unicode_spaces_private_use_and_rtl_letters_become_visible() {
        let (s, r) = make_visible("rm\u{A0}-rf\u{2009}x\u{E000}\u{5D0}y");
        assert!(r);
        assert_eq!(s, "rm<U+00A0>-rf<U+2009>x<U+E000><U+05D0>y");
        assert_eq!(make_visible("naïve café ✓").0, "naïve café ✓");
    }

    #[test]
    fn pieces_mark_placeholders_apart_from_literal_text() {
        assert_eq!(
            visible_pieces("a\u{1b}[1m␛b"),
            vec![
                Piece::Text("a".into()),
                Piece::Placeholder("␛".into()),
                Piece::Text("[1m␛b".into()),
            ]
        );
        assert!(visible_pieces("").is_empty());
    }
}
