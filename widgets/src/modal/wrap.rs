//! Hard wrapping at grapheme boundaries. Word wrapping would move a space to
//! a line end where nobody sees it; a command is wrapped exactly where the
//! width ends, and nothing is ever dropped.

use ratatui::buffer::CellWidth;
use ratatui::style::Style;
use ratatui::text::{Line, Span};

/// `content` wrapped to `width` columns. The first line starts with
/// `first`, every later line with `indent` spaces. A grapheme of zero width
/// (a combining mark with nothing to combine with) would vanish on screen,
/// so it is shown as `<U+XXXX>` in `hidden`; so is a grapheme wider than
/// the whole line, which the buffer would otherwise skip.
pub(crate) fn wrap(
    first: Vec<Span<'static>>,
    content: &[Span<'_>],
    indent: u16,
    width: u16,
    hidden: Style,
) -> Vec<Line<'static>> {
    let indent = if indent >= width { 0 } else { indent };
    let first_width: u16 = first.iter().map(|s| s.content.as_ref().cell_width()).sum();
    let mut lines = Vec::new();
    let mut line = Line::from(first);
    let mut used = first_width;
    let mut line_start = first_width;

    for span in content {
        // A placeholder is read as one token: start it on a new line
        // rather than split it, when it fits on one.
        let span_width = u16::try_from(span.width()).unwrap_or(u16::MAX);
        if span.style == hidden
            && used > line_start
            && used + span_width > width
            && indent + span_width <= width
        {
            lines.push(std::mem::take(&mut line));
            if indent > 0 {
                line.spans.push(Span::raw(" ".repeat(usize::from(indent))));
            }
            used = indent;
            line_start = indent;
        }
        for grapheme in span.styled_graphemes(Style::new()) {
            let mut pieces = Vec::new();
            let w = grapheme.symbol.cell_width();
            if w == 0 || w > width {
                // Spelled out one ASCII character at a time so it wraps.
                for c in grapheme.symbol.chars() {
                    for p in format!("<U+{:04X}>", c as u32).chars() {
                        pieces.push((p.to_string(), hidden));
                    }
                }
            } else {
                pieces.push((grapheme.symbol.to_string(), grapheme.style));
            }
            for (symbol, style) in pieces {
                let w = symbol.as_str().cell_width();
                if used + w > width && used > line_start {
                    lines.push(std::mem::take(&mut line));
                    if indent > 0 {
                        line.spans.push(Span::raw(" ".repeat(usize::from(indent))));
                    }
                    used = indent;
                    line_start = indent;
                }
                push(&mut line, symbol, style);
                used += w;
            }
        }
    }
    lines.push(line);
    lines
}

/// Appends to the last span when the style matches, so a line is a few
/// spans, not one per character.
fn push(line: &mut Line<'static>, symbol: String, style: Style) {
    if let Some(last) = line.spans.last_mut()
        && last.style == style
    {
        last.content.to_mut().push_str(&symbol);
        return;
    }
    line.spans.push(Span::styled(symbol, style));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[Line<'_>]) -> Vec<String> {
        lines.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn wraps_exactly_at_the_width_keeping_spaces() {
        let lines = wrap(
            vec![Span::raw("> ")],
            &[Span::raw("ab  cd efgh")],
            2,
            6,
            Style::new(),
        );
        assert_eq!(text(&lines), ["> ab  ", "  cd e", "  fgh"]);
    }

    #[test]
    fn placeholders_are_not_split_when_they_fit_on_a_line() {
        let hidden = Style::new().red();
        let content = [
            Span::raw("abcd"),
            Span::styled("<U+202E>", hidden),
            Span::raw("x"),
        ];
        let lines = wrap(vec![], &content, 0, 10, hidden);
        assert_eq!(text(&lines), ["abcd", "<U+202E>x"]);
        // Too long for any line: split like text.
        let lines = wrap(vec![], &content, 0, 6, hidden);
        assert_eq!(text(&lines), ["abcd<U", "+202E>", "x"]);
    }

    #[test]
    fn wide_characters_move_whole_to_the_next_line() {
        let lines = wrap(vec![], &[Span::raw("a日本")], 0, 4, Style::new());
        assert_eq!(text(&lines), ["a日", "本"]);
    }

    #[test]
    fn a_lone_combining_mark_is_shown_as_a_code_point() {
        let lines = wrap(vec![], &[Span::raw("\u{301}x")], 0, 40, Style::new());
        assert_eq!(text(&lines), ["<U+0301>x"]);
    }

    #[test]
    fn nothing_is_dropped_when_the_width_is_tiny() {
        let lines = wrap(vec![], &[Span::raw("日x")], 4, 3, Style::new());
        assert_eq!(text(&lines), ["日x"]);
        let lines = wrap(vec![], &[Span::raw("日x")], 4, 1, Style::new());
        assert_eq!(lines.len(), "<U+65E5>x".len());
        assert_eq!(text(&lines).concat(), "<U+65E5>x");
    }
}
