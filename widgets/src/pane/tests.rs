use ratatui::buffer::Buffer;
use ratatui::layout::{Position, Rect};
use ratatui::style::{Color, Modifier};
use ratatui::widgets::{Block, Widget};

use super::{PaneState, TerminalPane};
use crate::keys::{InputModes, MouseProtocolEncoding, MouseProtocolMode};

fn render(state: &PaneState, width: u16, height: u16) -> Buffer {
    let area = Rect::new(0, 0, width, height);
    let mut buf = Buffer::empty(area);
    state.with_screen(|screen| TerminalPane::new(screen).render(area, &mut buf));
    buf
}

fn row_text(buf: &Buffer, y: u16) -> String {
    (0..buf.area.width).map(|x| buf[(x, y)].symbol()).collect()
}

#[test]
fn colours_map_to_palette_indexed_and_rgb() {
    let state = PaneState::new(2, 10, 0);
    state.process(b"\x1b[31;42mA\x1b[0;38;5;200mB\x1b[38;2;1;2;3;48;5;9mC\x1b[0mD\x1b[97mE");
    let buf = render(&state, 10, 2);
    let cases = [
        (0, Color::Red, Color::Green),
        (1, Color::Indexed(200), Color::Reset),
        (2, Color::Rgb(1, 2, 3), Color::LightRed),
        (3, Color::Reset, Color::Reset),
        (4, Color::White, Color::Reset),
    ];
    for (x, fg, bg) in cases {
        assert_eq!(buf[(x, 0)].fg, fg, "fg of column {x}");
        assert_eq!(buf[(x, 0)].bg, bg, "bg of column {x}");
    }
}

#[test]
fn attributes_map_to_modifiers() {
    let state = PaneState::new(1, 10, 0);
    state.process(b"\x1b[1mb\x1b[0;2md\x1b[0;3mi\x1b[0;4mu\x1b[0;7mr\x1b[0mn");
    let buf = render(&state, 10, 1);
    let want = [
        Modifier::BOLD,
        Modifier::DIM,
        Modifier::ITALIC,
        Modifier::UNDERLINED,
        Modifier::REVERSED,
        Modifier::empty(),
    ];
    for (x, m) in want.into_iter().enumerate() {
        assert_eq!(buf[(x as u16, 0)].modifier, m, "column {x}");
    }
}

#[test]
fn a_wide_character_fills_its_first_cell_and_resets_the_second() {
    let state = PaneState::new(1, 6, 0);
    state.process("日x".as_bytes());
    // Whatever was drawn underneath must not survive in the second cell.
    let area = Rect::new(0, 0, 6, 1);
    let mut buf = Buffer::filled(area, ratatui::buffer::Cell::new("z"));
    state.with_screen(|screen| TerminalPane::new(screen).render(area, &mut buf));
    assert_eq!(buf[(0, 0)].symbol(), "日");
    assert_eq!(buf[(1, 0)], ratatui::buffer::Cell::EMPTY);
    assert_eq!(buf[(2, 0)].symbol(), "x");
}

/// A one-row model of a real terminal receiving ratatui's diffs: a wide
/// symbol covers the next column, and overwriting either half of a wide
/// symbol blanks the other half.
fn apply_diff(screen: &mut [String], prev: &Buffer, next: &Buffer) {
    use ratatui::buffer::CellWidth as _;
    for (x, _, cell) in prev.diff(next) {
        let x = usize::from(x);
        if screen[x].is_empty() && x > 0 {
            screen[x - 1] = " ".into();
        }
        if screen[x].cell_width() == 2 && x + 1 < screen.len() {
            screen[x + 1] = " ".into();
        }
        screen[x] = cell.symbol().to_string();
        if cell.symbol().cell_width() == 2 && x + 1 < screen.len() {
            screen[x + 1] = String::new();
        }
    }
}

#[test]
fn wide_characters_over_old_text_leave_no_stale_cells_on_screen() {
    let state = PaneState::new(1, 6, 0);
    let mut screen = vec![" ".to_string(); 6];
    let mut prev = Buffer::empty(Rect::new(0, 0, 6, 1));
    for (input, want) in [
        ("abcdef", "abcdef"),
        ("\r日本x", "日本xf"),
        ("\rAb", "Ab本xf"),
        ("\r\x1b[2K\x1b[3C漢", "   漢 "),
    ] {
        state.process(input.as_bytes());
        let next = render(&state, 6, 1);
        apply_diff(&mut screen, &prev, &next);
        assert_eq!(screen.concat(), want, "after {input:?}");
        prev = next;
    }
}

#[test]
fn a_wide_character_cut_by_the_pane_edge_becomes_blank() {
    let state = PaneState::new(1, 4, 0);
    state.process("ab日".as_bytes());
    // The pane is narrower than the screen: the right half would not fit.
    let buf = render(&state, 3, 1);
    assert_eq!(row_text(&buf, 0), "ab ");
}

#[test]
fn bidi_controls_never_reach_the_host_terminal() {
    let state = PaneState::new(1, 6, 0);
    state.process("a\u{202E}b\u{2067}".as_bytes());
    let buf = render(&state, 6, 1);
    assert_eq!(buf[(0, 0)].symbol(), "a");
    assert_eq!(buf[(1, 0)].symbol(), "b");
}

#[test]
fn a_symbol_ratatui_measures_differently_is_replaced() {
    // vt100 gives the halfwidth sound mark one cell, ratatui counts two:
    // drawn as is, it would shift every later cell of the row.
    let state = PaneState::new(1, 6, 0);
    state.process("\u{FF9E}x".as_bytes());
    let buf = render(&state, 6, 1);
    assert_eq!(buf[(0, 0)].symbol(), "\u{FFFD}");
    assert_eq!(buf[(1, 0)].symbol(), "x");
}

#[test]
fn emoji_with_a_presentation_selector_stay_whole() {
    let state = PaneState::new(1, 6, 0);
    state.process("❤\u{FE0F}x".as_bytes());
    let buf = render(&state, 6, 1);
    assert_eq!(buf[(0, 0)].symbol(), "❤\u{FE0F}");
    assert_eq!(buf[(2, 0)].symbol(), "x");
}

#[test]
fn cursor_follows_the_child_inside_the_block() {
    let state = PaneState::new(3, 8, 0);
    state.process(b"ab\r\nc");
    let area = Rect::new(10, 5, 10, 5);
    let cursor = state.with_screen(|s| TerminalPane::new(s).block(Block::bordered()).cursor(area));
    assert_eq!(cursor, Some(Position::new(12, 7)));
}

#[test]
fn cursor_is_hidden_when_the_child_hides_it() {
    let state = PaneState::new(3, 8, 0);
    state.process(b"\x1b[?25l");
    let cursor = state.with_screen(|s| TerminalPane::new(s).cursor(Rect::new(0, 0, 8, 3)));
    assert_eq!(cursor, None);
}

#[test]
fn cursor_waiting_past_the_last_column_shows_on_it() {
    let state = PaneState::new(2, 4, 0);
    state.process(b"abcd");
    let cursor = state.with_screen(|s| TerminalPane::new(s).cursor(Rect::new(0, 0, 4, 2)));
    assert_eq!(cursor, Some(Position::new(3, 0)));
}

#[test]
fn cursor_outside_a_smaller_pane_is_not_placed() {
    let state = PaneState::new(5, 8, 0);
    state.process(b"\x1b[5;1H");
    let cursor = state.with_screen(|s| TerminalPane::new(s).cursor(Rect::new(0, 0, 8, 3)));
    assert_eq!(cursor, None);
}

#[test]
fn cursor_shape_follows_decscusr() {
    use ratatui::crossterm::cursor::SetCursorStyle;
    let state = PaneState::new(1, 4, 0);
    state.process(b"\x1b[6 q");
    let style = state.with_screen(|s| TerminalPane::new(s).cursor_style());
    assert_eq!(
        format!("{style:?}"),
        format!("{:?}", SetCursorStyle::SteadyBar)
    );
}

#[test]
fn scrollback_view_shows_the_offset_badge_and_hides_the_cursor() {
    let state = PaneState::new(4, 10, 100);
    for i in 1..=20 {
        state.process(format!("{i}\r\n").as_bytes());
    }
    assert_eq!(state.scroll_up(5), 5);
    let buf = render(&state, 10, 4);
    assert_eq!(row_text(&buf, 0), "13     -5 ");
    assert_eq!(row_text(&buf, 3), "16        ");
    assert_eq!(buf[(9, 0)].bg, Color::Yellow);
    let cursor = state.with_screen(|s| TerminalPane::new(s).cursor(buf.area));
    assert_eq!(cursor, None);
    // New output keeps the view on the same rows.
    state.process(b"21\r\n");
    assert_eq!(state.scrollback_offset(), 6);
    assert_eq!(state.scroll_down(100), 0);
    assert_eq!(row_text(&render(&state, 10, 4), 0), "19        ");
}

#[test]
fn scrolling_is_clamped_to_the_history() {
    let state = PaneState::new(2, 4, 100);
    state.process(b"1\r\n2\r\n3\r\n");
    assert_eq!(state.scroll_up(50), 2);
    state.scroll_to_bottom();
    assert_eq!(state.scrollback_offset(), 0);
}

#[test]
fn the_alternate_screen_has_no_scrollback() {
    let state = PaneState::new(2, 4, 100);
    state.process(b"1\r\n2\r\n3\r\n\x1b[?1049h");
    assert_eq!(state.scroll_up(1), 0);
    state.process(b"\x1b[?1049l");
    assert_eq!(state.scroll_up(1), 1);
}

#[test]
fn queries_get_replies_for_the_pty() {
    let state = PaneState::new(24, 80, 0);
    let cases: [(&[u8], &[u8]); 8] = [
        (b"\x1b[3;5H\x1b[6n", b"\x1b[3;5R"),
        (b"\x1b[2;7H\x1b[?6n", b"\x1b[?2;7R"),
        (b"\x1b[5n", b"\x1b[0n"),
        (b"\x1b[c", b"\x1b[?1;2c"),
        (b"\x1b[0c", b"\x1b[?1;2c"),
        (b"\x1b[>c", b"\x1b[>0;0;0c"),
        (b"\x1b[18t", b"\x1b[8;24;80t"),
        (b"\x1b[31mplain output\x1b[0m", b""),
    ];
    for (input, reply) in cases {
        assert_eq!(
            state.process(input),
            reply,
            "reply to {:?}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn two_queries_in_one_chunk_get_both_replies_in_order() {
    let state = PaneState::new(24, 80, 0);
    assert_eq!(state.process(b"\x1b[6nab\x1b[6n"), b"\x1b[1;1R\x1b[1;3R");
}

#[test]
fn resize_with_resizes_the_pty_first_and_then_the_parser() {
    let state = PaneState::new(24, 80, 0);
    let mut seen = None;
    let result: Result<(), ()> = state.resize_with(30, 100, |rows, cols| {
        seen = Some((rows, cols));
        Ok(())
    });
    assert_eq!(result, Ok(()));
    assert_eq!(seen, Some((30, 100)));
    assert_eq!(state.size(), (30, 100));
}

#[test]
fn a_refused_pty_resize_leaves_the_parser_alone() {
    let state = PaneState::new(24, 80, 0);
    let result = state.resize_with(30, 100, |_, _| Err("ENOTTY"));
    assert_eq!(result, Err("ENOTTY"));
    assert_eq!(state.size(), (24, 80));
}

#[test]
fn a_zero_size_is_clamped_to_one() {
    let state = PaneState::new(0, 0, 0);
    assert_eq!(state.size(), (1, 1));
    let mut seen = None;
    let _: Result<(), ()> = state.resize_with(0, 5, |rows, cols| {
        seen = Some((rows, cols));
        Ok(())
    });
    assert_eq!(seen, Some((1, 5)));
    state.resize(7, 0);
    assert_eq!(state.size(), (7, 1));
}

#[test]
fn dirty_flag_is_set_by_output_and_cleared_by_taking_it() {
    let state = PaneState::new(2, 4, 10);
    assert!(state.take_dirty(), "a new pane has never been drawn");
    assert!(!state.take_dirty());
    state.process(b"x");
    assert!(state.take_dirty());
    assert!(!state.take_dirty());
    state.scroll_up(1); // nothing to scroll: not dirty
    assert!(!state.take_dirty());
    state.resize(3, 4);
    assert!(state.take_dirty());
}

#[test]
fn input_modes_follow_the_child() {
    let state = PaneState::new(2, 4, 0);
    assert_eq!(state.input_modes(), InputModes::default());
    state.process(b"\x1b[?1h\x1b[?2004h\x1b[?1002h\x1b[?1006h");
    assert_eq!(
        state.input_modes(),
        InputModes {
            application_cursor: true,
            bracketed_paste: true,
            mouse_mode: MouseProtocolMode::ButtonMotion,
            mouse_encoding: MouseProtocolEncoding::Sgr,
        }
    );
}

#[test]
fn the_reader_thread_and_the_ui_share_one_state() {
    let state = std::sync::Arc::new(PaneState::new(5, 20, 0));
    let reader = {
        let state = std::sync::Arc::clone(&state);
        std::thread::spawn(move || {
            for _ in 0..1000 {
                state.process(b"hello ");
            }
        })
    };
    // The UI draws concurrently; it must never block for good or panic.
    while !reader.is_finished() {
        render(&state, 20, 5);
    }
    reader.join().unwrap();
    // 6000 characters on 20 columns: the last row is the stream's tail.
    assert_eq!(row_text(&render(&state, 20, 5), 4), "o hello hello hello ");
}
