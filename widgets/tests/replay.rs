//! Replay tests: real terminal sessions recorded byte for byte by
//! `tests/fixtures/record.sh` (util-linux `script` on a real PTY, inside a
//! private tmux server for the interactive ones), fed into a pane at the
//! recording's size and snapshotted.

mod common;

use common::{dump, render, row};
use lazaret_widgets::keys::InputModes;
use lazaret_widgets::pane::{PaneState, TerminalPane};
use ratatui::layout::{Position, Rect};
use ratatui::style::{Color, Modifier};

/// Every fixture was recorded at 24x80.
const ROWS: u16 = 24;
const COLS: u16 = 80;

fn replay(bytes: &[u8]) -> PaneState {
    let state = PaneState::new(ROWS, COLS, 1000);
    // Chunked like a PTY reader would deliver it, splitting sequences.
    for chunk in bytes.chunks(7) {
        state.process(chunk);
    }
    state
}

fn draw(state: &PaneState) -> ratatui::buffer::Buffer {
    let (rows, cols) = state.size();
    render(cols, rows, |f| {
        state.with_screen(|s| f.render_widget(TerminalPane::new(s), f.area()));
    })
}

fn cursor(state: &PaneState) -> Option<Position> {
    let (rows, cols) = state.size();
    state.with_screen(|s| TerminalPane::new(s).cursor(Rect::new(0, 0, cols, rows)))
}

#[test]
fn ls_color() {
    let state = replay(include_bytes!("fixtures/ls-color.bin"));
    let buf = draw(&state);
    insta::assert_snapshot!(dump(&buf));
    // Directories bold blue, archives bold red, a broken link red on black.
    let at = |name: &str, y: u16| {
        let x = row(&buf, y).find(name).expect(name) as u16;
        &buf[(x, y)]
    };
    assert_eq!(
        (at("src", 0).fg, at("src", 0).modifier),
        (Color::Blue, Modifier::BOLD)
    );
    assert_eq!(at("data.tar.gz", 0).fg, Color::Red);
    assert_eq!(
        (at("broken-link", 1).fg, at("broken-link", 1).bg),
        (Color::Red, Color::Black)
    );
    assert_eq!(at("README.md", 0).fg, Color::Reset);
    assert_eq!(cursor(&state), Some(Position::new(0, 2)));
}

#[test]
fn wide_characters() {
    let state = replay(include_bytes!("fixtures/wide-chars.bin"));
    let buf = draw(&state);
    insta::assert_snapshot!(dump(&buf));
    assert_eq!(row(&buf, 0), format!("{:<72}", "日本語のテキスト|"));
    // The wide character that no longer fit in column 80 wrapped whole.
    assert_eq!(buf[(79, 4)].symbol(), " ");
    assert_eq!(buf[(0, 5)].symbol(), "漢");
    assert_eq!(buf[(2, 5)].symbol(), "字");
}

#[test]
fn scrollback_of_seq() {
    let state = replay(include_bytes!("fixtures/seq-60.bin"));
    let live = draw(&state);
    assert_eq!(row(&live, 0).trim_end(), "38");
    assert_eq!(row(&live, 22).trim_end(), "60");
    assert_eq!(state.scroll_up(10), 10);
    let scrolled = draw(&state);
    insta::assert_snapshot!(dump(&scrolled));
    assert_eq!(row(&scrolled, 0), format!("{:<75} -10 ", "28"));
    assert_eq!(cursor(&state), None, "no cursor in the scrollback view");
    state.scroll_to_bottom();
    assert_eq!(draw(&state), live);
}

#[test]
fn htop_on_the_alternate_screen_and_back() {
    let state = replay(include_bytes!("fixtures/htop.running.bin"));
    let buf = draw(&state);
    insta::assert_snapshot!(dump(&buf));
    state.with_screen(|s| assert!(s.alternate_screen()));
    assert!(row(&buf, 8).contains("sleep 300"));
    assert_eq!(cursor(&state), None, "htop hides the cursor");
    assert_ne!(
        state.input_modes().mouse_mode,
        Default::default(),
        "htop asks for the mouse"
    );

    for chunk in include_bytes!("fixtures/htop.after.bin").chunks(7) {
        state.process(chunk);
    }
    state.with_screen(|s| assert!(!s.alternate_screen()));
    assert_eq!(
        state.input_modes(),
        InputModes::default(),
        "htop restored every mode"
    );
    assert!(cursor(&state).is_some());
}

#[test]
fn vim_with_syntax_colours_answers_its_queries() {
    let state = PaneState::new(ROWS, COLS, 1000);
    let mut replies = Vec::new();
    for chunk in include_bytes!("fixtures/vim.running.bin").chunks(7) {
        replies.extend(state.process(chunk));
    }
    let buf = draw(&state);
    insta::assert_snapshot!(dump(&buf));
    // vim probes the width of an ambiguous character and of the cursor
    // after a DCS with two CSI 6n; without replies it would wait for them.
    assert_eq!(String::from_utf8_lossy(&replies), "\u{1b}[2;2R\u{1b}[3;1R");
    assert_eq!(
        state.input_modes(),
        InputModes {
            application_cursor: true,
            bracketed_paste: true,
            ..InputModes::default()
        }
    );
    assert_eq!(cursor(&state), Some(Position::new(0, 0)));
    assert_eq!(buf[(0, 0)].fg, Color::Blue, "the comment colour");

    for chunk in include_bytes!("fixtures/vim.after.bin").chunks(7) {
        state.process(chunk);
    }
    state.with_screen(|s| assert!(!s.alternate_screen()));
    assert_eq!(state.input_modes(), InputModes::default());
}

#[test]
fn vim_redraws_after_a_resize() {
    let state = replay(include_bytes!("fixtures/vim-resize.before.bin"));
    let before = draw(&state);
    assert!(row(&before, 22).starts_with("demo.sh"));
    // The window shrank to 50x12: the app resizes the PTY and the parser
    // together, then the child's redraw arrives.
    let mut pty_size = None;
    let resized: Result<(), ()> = state.resize_with(12, 50, |rows, cols| {
        pty_size = Some((rows, cols));
        Ok(())
    });
    assert_eq!(resized, Ok(()));
    assert_eq!(pty_size, Some((12, 50)));
    for chunk in include_bytes!("fixtures/vim-resize.after.bin").chunks(7) {
        state.process(chunk);
    }
    let after = draw(&state);
    insta::assert_snapshot!(dump(&after));
    assert!(
        row(&after, 10).starts_with("demo.sh"),
        "the status line moved up"
    );
    assert!(row(&after, 10).trim_end().ends_with("All"));
}
