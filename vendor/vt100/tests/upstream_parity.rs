//! The patched scrollback (rows recycled instead of reallocated) against the
//! unpatched crates.io release of the same version: the same input must
//! leave the same scrollback (every row at every scrollback offset, with its
//! attributes, wide characters and wrapping), the same screen, and stream
//! the same rows through `Callbacks::on_scroll`, in the same order.

use std::num::NonZeroU16;

use vt100_upstream as upstream;

/// What a test does to both parsers.
#[derive(Clone, Debug)]
enum Op {
    Bytes(Vec<u8>),
    /// `Parser::set_size` (rows, cols).
    Resize(u16, u16),
    /// `Screen::set_scrollback`: look `n` rows up while output goes on.
    View(usize),
    ClearScrollback,
}

fn text(s: &str) -> Op {
    Op::Bytes(s.as_bytes().to_vec())
}

/// Every row `on_scroll` streamed, in order, as basic formatted text.
#[derive(Default)]
struct Streamed(Vec<String>);

impl vt100::Callbacks for Streamed {
    fn on_scroll(
        &mut self,
        contents: vt100::capture::RowContents<'_>,
        alt: bool,
    ) {
        let mut row = String::new();
        contents
            .write_formatted_basic(&mut row, &mut Default::default())
            .unwrap();
        self.0.push(format!("alt={alt} {row:?}"));
    }
}

impl upstream::Callbacks for Streamed {
    fn on_scroll(
        &mut self,
        contents: upstream::capture::RowContents<'_>,
        alt: bool,
    ) {
        let mut row = String::new();
        contents
            .write_formatted_basic(&mut row, &mut Default::default())
            .unwrap();
        self.0.push(format!("alt={alt} {row:?}"));
    }
}

/// Everything observable about the screen and its scrollback: the whole
/// history, then the visible rows at every scrollback offset (formatted,
/// plain, wrapped flags and every cell), then the cursor. The view is put
/// back where it was (`set_scrollback` is applied to both parsers alike).
macro_rules! observe {
    ($parser:expr) => {{
        let screen = $parser.screen_mut();
        let saved = screen.scrollback();
        let (rows, cols) = screen.size();
        let (rows, cols) = (rows.get(), cols.get());
        let len = screen.scrollback_len();
        let mut out = vec![
            format!(
                "size={rows}x{cols} scrollback_len={len} offset={saved} cursor={:?} alt={}",
                screen.cursor_position(),
                screen.alternate_screen()
            ),
            format!("history {:?}", screen.contents_formatted_basic()),
        ];
        for offset in 0..=len {
            screen.set_scrollback(offset);
            out.push(format!(
                "offset {offset} (clamped {}): {:?}",
                screen.scrollback(),
                screen.contents_formatted()
            ));
            out.push(format!(
                "  plain {:?}",
                screen.rows(0, cols).collect::<Vec<_>>()
            ));
            for row in 0..rows {
                let mut line = format!("  row {row} wrapped={}:", screen.row_wrapped(row));
                for col in 0..cols {
                    let cell = screen.cell(row, col).unwrap();
                    line.push_str(&format!(
                        " {:?}{}{}{:?}{:?}{}{}{}{}{}",
                        cell.contents(),
                        if cell.is_wide() { "W" } else { "" },
                        if cell.is_wide_continuation() { "C" } else { "" },
                        cell.fgcolor(),
                        cell.bgcolor(),
                        u8::from(cell.bold()),
                        u8::from(cell.dim()),
                        u8::from(cell.italic()),
                        u8::from(cell.underline()),
                        u8::from(cell.inverse()),
                    ));
                }
                out.push(line);
            }
        }
        screen.set_scrollback(saved);
        out
    }};
}

macro_rules! apply {
    ($parser:expr, $op:expr) => {
        match $op {
            Op::Bytes(bytes) => $parser.process(bytes),
            Op::Resize(rows, cols) => $parser.set_size(nz(*rows), nz(*cols)),
            Op::View(rows) => $parser.screen_mut().set_scrollback(*rows),
            Op::ClearScrollback => $parser.screen_mut().clear_scrollback(),
        }
    };
}

fn nz(n: u16) -> NonZeroU16 {
    NonZeroU16::new(n).unwrap()
}

/// Runs `ops` through both parsers, comparing after every step.
fn check(rows: u16, cols: u16, capacity: usize, ops: &[Op]) {
    let mut patched = vt100::Parser::new_with_callbacks(
        nz(rows),
        nz(cols),
        capacity,
        Streamed::default(),
    );
    let mut unpatched = upstream::Parser::new_with_callbacks(
        nz(rows),
        nz(cols),
        capacity,
        Streamed::default(),
    );
    for (step, op) in ops.iter().enumerate() {
        apply!(patched, op);
        apply!(unpatched, op);
        let (a, b) = (observe!(patched), observe!(unpatched));
        if a != b {
            let first = a.iter().zip(&b).position(|(x, y)| x != y);
            panic!(
                "{rows}x{cols}, capacity {capacity}: differs after step {step} ({op:?}); first \
                 different line {first:?}:\n patched:   {:?}\n unpatched: {:?}",
                first.map(|i| &a[i]),
                first.map(|i| &b[i]),
            );
        }
        assert_eq!(
            patched.callbacks().0,
            unpatched.callbacks().0,
            "on_scroll rows differ after step {step} ({op:?})"
        );
    }
}

fn numbered_lines(from: usize, to: usize) -> Op {
    let mut out = String::new();
    for i in from..=to {
        out.push_str(&format!("{i}\r\n"));
    }
    text(&out)
}

#[test]
fn lines_pushed_through_a_full_scrollback() {
    for capacity in [0, 1, 3, 10] {
        check(
            5,
            12,
            capacity,
            &[numbered_lines(1, 4), numbered_lines(5, 40)],
        );
        // One line at a time, past the capacity several times over.
        let ops: Vec<Op> =
            (1..=30).map(|i| text(&format!("line {i}\r\n"))).collect();
        check(4, 10, capacity, &ops);
    }
}

#[test]
fn long_short_and_blank_lines_with_attributes() {
    let ops = [
        // A full-width line, one wrapping onto the next, a blank one.
        text("abcdefghij\r\nABCDEFGHIJKLMNO\r\n\r\n"),
        // Coloured trailing spaces are content, not blanks to trim.
        text("\x1b[41mred  \x1b[0m\r\n\x1b[1;4;38;5;208mbold\x1b[0m   \r\n"),
        // A default-coloured line after one that filled its storage.
        text("x\r\n0123456789\r\ny\r\n"),
        // Erased with a background colour (BCE) then scrolled away.
        text("\x1b[44m\x1b[K\x1b[0m\r\nend\r\n"),
        numbered_lines(1, 20),
    ];
    for capacity in [1, 4, 50] {
        check(3, 10, capacity, &ops);
    }
}

#[test]
fn wide_characters_in_scrollback() {
    let ops = [
        // Wide characters, one split at the right edge, combining marks.
        text("日本語テキスト\r\n"),
        text("abcdefghi漢字\r\n"),
        text("e\u{301}\u{308} 🎉🎉🎉🎉🎉🎉 x\r\n"),
        text("ａｂｃｄｅｆｇｈｉｊｋ\r\n"),
        numbered_lines(1, 12),
        text("末尾\r\n"),
    ];
    for capacity in [0, 2, 30] {
        check(4, 10, capacity, &ops);
        check(3, 9, capacity, &ops);
    }
}

#[test]
fn resizes_push_and_pull_scrollback() {
    let ops = [
        numbered_lines(1, 30),
        text("日本語テキスト\x1b[41m  \x1b[0m"),
        // Fewer rows: rows go into the scrollback.
        Op::Resize(3, 12),
        numbered_lines(31, 35),
        // More rows: rows come back out of it.
        Op::Resize(8, 12),
        // Narrower then wider: stored rows keep their cells.
        Op::Resize(8, 5),
        numbered_lines(36, 40),
        Op::Resize(8, 20),
        Op::Resize(2, 20),
        Op::Resize(10, 7),
        text("abcdefghijklmnopqrstuvwxyz\r\n"),
    ];
    for capacity in [0, 3, 12, 100] {
        check(6, 12, capacity, &ops);
    }
}

#[test]
fn scrolling_while_the_user_looks_at_the_scrollback() {
    let ops = [
        numbered_lines(1, 20),
        Op::View(4),
        numbered_lines(21, 25),
        Op::View(100),
        numbered_lines(26, 60),
        Op::View(0),
        numbered_lines(61, 62),
    ];
    for capacity in [2, 10, 40] {
        check(4, 8, capacity, &ops);
    }
}

#[test]
fn multi_row_scrolls_regions_and_clearing() {
    let ops = [
        numbered_lines(1, 8),
        // SU by more rows than the screen and than the scrollback holds.
        text("\x1b[2S"),
        text("\x1b[9S"),
        numbered_lines(9, 14),
        // A scroll region from the top still feeds the scrollback; one
        // lower down does not.
        text("\x1b[1;3r\x1b[3;1Hregion\r\n\r\n\r\n"),
        text("\x1b[2;4r\x1b[4;1Hinner\r\n\r\n"),
        text("\x1b[r"),
        // Reverse index at the top, erase display, erase scrollback (ED 3).
        text("\x1b[H\x1bM\x1bMtop\x1b[2J"),
        numbered_lines(15, 20),
        text("\x1b[3J"),
        numbered_lines(21, 30),
        Op::ClearScrollback,
        numbered_lines(31, 40),
        // The alternate screen has no scrollback of its own.
        text("\x1b[?1049halt\r\n\r\n\r\n\r\n\r\n\x1b[?1049l"),
        numbered_lines(41, 45),
        // Full reset.
        text("\x1bc"),
        numbered_lines(46, 50),
    ];
    for capacity in [0, 1, 5, 40] {
        check(4, 10, capacity, &ops);
    }
}

/// Rows recycled from a full scrollback get lines longer and shorter than
/// the ones they held before, and screen rows blanked after scrolling only
/// as far as they were written must come back fully blank.
#[test]
fn recycled_rows_get_longer_and_shorter_lines() {
    let ops = [
        // Fill the scrollback with short lines, then push longer ones
        // through the recycled rows, then short ones again.
        numbered_lines(1, 12),
        text("a full width line!!\r\n"),
        text("longer than the row, it wraps onto the next one\r\n"),
        numbered_lines(13, 20),
        text("x\r\n\r\nyy\r\n"),
        // A line written at the far right only, then one at the left.
        text("\x1b[15Gright\r\nleft\r\n"),
        // Overwritten with shorter text: the tail must stay.
        text("0123456789abcdefghi\rABC\r\n"),
        numbered_lines(21, 30),
    ];
    for capacity in [1, 3, 8] {
        check(4, 20, capacity, &ops);
    }
}

/// Wide characters ending a row (filling it, or split at the edge) in
/// recycled rows.
#[test]
fn wide_characters_at_the_row_end_through_a_full_scrollback() {
    let ops = [
        numbered_lines(1, 8),
        // Exactly fills 10 columns; then one that does not fit in the last
        // column and wraps; then a short line in the same recycled rows.
        text("日本語テキ\r\n"),
        text("abcdefghi漢字\r\n"),
        text("\x1b[9G語\r\n"),
        text("ab\r\n"),
        text("\x1b[10G🎉\r\n"),
        numbered_lines(9, 16),
    ];
    for capacity in [1, 2, 5] {
        check(3, 10, capacity, &ops);
    }
}

/// Erasing with a background colour makes blank cells that are not
/// default: they must reach the scrollback with their attributes, at any
/// column.
#[test]
fn erase_with_a_coloured_background_through_a_full_scrollback() {
    let ops = [
        numbered_lines(1, 8),
        // EL 0 from the middle, EL 1, EL 2, ECH, ED 0 and ED 2 with
        // background colours, then text over part of them.
        text("abc\x1b[42m\x1b[K\x1b[0m\r\n"),
        text("\x1b[6G\x1b[48;5;208m\x1b[1K\x1b[0mz\r\n"),
        text("\x1b[44m\x1b[2K\x1b[0mover\r\n"),
        text("\x1b[8G\x1b[41m\x1b[2X\x1b[0m\r\n"),
        text("\x1b[43m\x1b[J\x1b[0mtail\r\n"),
        numbered_lines(9, 12),
        text("\x1b[45m\x1b[2J\x1b[0m"),
        numbered_lines(13, 20),
        // The same with default attributes after coloured cells: the
        // cells go back to default and are trimmed again.
        text("\x1b[41mred red red\x1b[0m\r\x1b[K\r\n"),
        text("\x1b[41mred red red\x1b[0m\r\x1b[4X\x1b[3G\x1b[P\r\n"),
        numbered_lines(21, 26),
    ];
    for capacity in [1, 4, 30] {
        check(4, 12, capacity, &ops);
    }
}

/// ICH pushes text (and coloured cells) right, towards and off the row end;
/// DCH pulls it back.
#[test]
fn insert_and_delete_characters_through_a_full_scrollback() {
    let ops = [
        numbered_lines(1, 8),
        text("abcdef\x1b[1G\x1b[4@\r\n"),
        text("abc\x1b[41m \x1b[0m\x1b[1G\x1b[7@\r\n"),
        text("0123456789\x1b[1G\x1b[3@\r\n"),
        text("abcdefghij\x1b[3G\x1b[99@\r\n"),
        text("x\x1b[1G\x1b[@\x1b[@\x1b[@\r\n"),
        text("日本語\x1b[2G\x1b[2@\r\n"),
        text("0123456789\x1b[2G\x1b[4P\r\n"),
        numbered_lines(9, 18),
    ];
    for capacity in [1, 3, 20] {
        check(3, 10, capacity, &ops);
    }
}

/// Narrower then wider while the scrollback is full: stored rows keep
/// their cells, screen rows lose and then regain columns.
#[test]
fn resize_narrower_then_wider_with_a_full_scrollback() {
    let ops = [
        text("\x1b[44m\x1b[2J\x1b[0m"),
        numbered_lines(1, 10),
        text("a line that is fourteen\r\n日本語テキスト\x1b[41m \x1b[0m"),
        Op::Resize(4, 6),
        numbered_lines(11, 14),
        text("abcdefgh"),
        Op::Resize(4, 16),
        numbered_lines(15, 17),
        text("\x1b[10Gwide end 日\r\n"),
        Op::Resize(6, 3),
        Op::Resize(3, 18),
        numbered_lines(18, 24),
    ];
    for capacity in [1, 3, 6] {
        check(4, 14, capacity, &ops);
    }
}

/// A small deterministic generator (xorshift), so that the random cases are
/// the same on every run and need no extra dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const PIECES: &[&str] = &[
    "a",
    "xyz",
    "hello world",
    "0123456789abcdef",
    " ",
    "   ",
    "\r\n",
    "\r\n",
    "\r\n",
    "\n",
    "\r",
    "\t",
    "日",
    "本語",
    "🎉",
    "e\u{301}",
    "ｗｉｄｅ",
    "\x1b[31m",
    "\x1b[0m",
    "\x1b[44m",
    "\x1b[1;7m",
    "\x1b[K",
    "\x1b[1K",
    "\x1b[2K",
    "\x1b[J",
    "\x1b[2J",
    "\x1b[3J",
    "\x1b[H",
    "\x1b[5;3H",
    "\x1b[2A",
    "\x1b[3C",
    "\x1b[S",
    "\x1b[3S",
    "\x1b[T",
    "\x1b[2L",
    "\x1b[M",
    "\x1b[2@",
    "\x1b[@",
    "\x1b[9@",
    "\x1b[P",
    "\x1b[3P",
    "\x1b[X",
    "\x1b[4X",
    "\x1b[42m",
    "\x1b[48;5;208m",
    "\x1b[49m",
    "\x1b[99C",
    "\x1b[G",
    "\x1b[8G",
    "\x1bM",
    "\x1bD",
    "\x1bE",
    "\x1b[2;5r",
    "\x1b[1;4r",
    "\x1b[r",
    "\x1b[?1049h",
    "\x1b[?1049l",
    "\x1b[?7l",
    "\x1b[?7h",
    "\x1b7",
    "\x1b8",
];

#[test]
fn random_output_resizes_and_views() {
    for seed in 1..=400u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let rows = 1 + rng.below(7) as u16;
        let cols = 1 + rng.below(14) as u16;
        let capacity = [0, 1, 2, 5, 17][rng.below(5) as usize];
        let mut ops = Vec::new();
        for _ in 0..40 {
            match rng.below(20) {
                0 => ops.push(Op::Resize(
                    1 + rng.below(8) as u16,
                    1 + rng.below(16) as u16,
                )),
                1 => ops.push(Op::View(rng.below(8) as usize)),
                2 if rng.below(4) == 0 => ops.push(Op::ClearScrollback),
                _ => {
                    let mut bytes = Vec::new();
                    for _ in 0..1 + rng.below(12) {
                        bytes.extend_from_slice(
                            PIECES[rng.below(PIECES.len() as u64) as usize]
                                .as_bytes(),
                        );
                    }
                    ops.push(Op::Bytes(bytes));
                }
            }
        }
        check(rows, cols, capacity, &ops);
    }
}
