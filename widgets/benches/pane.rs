//! Parse and render throughput of the terminal pane, each figure next to a
//! baseline measured in the same run:
//!
//! - `seq 1 2000000` output through raw vt100 (the baseline: the patched
//!   copy in vendor/vt100), through the unpatched crates.io release and
//!   without scrollback (before/after the patch), through
//!   `PaneState::process`, through the two-thread PTY feed from a pipe, and
//!   through process + render (every chunk, and capped at one frame per
//!   10 ms as the app does);
//! - one 200x50 frame rendered into a ratatui buffer, against parsing the
//!   bytes that paint that screen and against `Buffer::diff`.
//!
//! Run with `cargo bench -p lazaret-widgets --bench pane`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use nix::sys::resource::{UsageWho, getrusage};

use std::io::Write as _;
use std::sync::{Arc, mpsc};

use lazaret_widgets::pane::{FeedSink, PaneState, TerminalPane, spawn_feed};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::widgets::Widget;

const ROWS: u16 = 50;
const COLS: u16 = 200;
const SCROLLBACK: usize = 10_000;
/// What a PTY reader thread typically gets per read.
const CHUNK: usize = 64 * 1024;

/// Tells the bench when the feed has parsed everything.
struct Ended(mpsc::Sender<()>);

impl FeedSink for Ended {
    fn reply(&mut self, _: &[u8]) {}
    fn output(&mut self) {}
    fn ended(&mut self) {
        let _ = self.0.send(());
    }
}

fn seq_output() -> Vec<u8> {
    let mut out = Vec::with_capacity(16 << 20);
    for i in 1..=2_000_000u32 {
        out.extend_from_slice(i.to_string().as_bytes());
        // The tty's onlcr turns \n into \r\n.
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// A full 200x50 screen of coloured, attributed text, as `ls --color` or a
/// syntax-highlighted editor would paint it.
fn colourful_screen() -> Vec<u8> {
    let mut out = b"\x1b[H\x1b[2J".to_vec();
    for row in 0..ROWS {
        out.extend_from_slice(format!("\x1b[{};1H", row + 1).as_bytes());
        for col in 0..COLS / 10 {
            let colour = (usize::from(row) * 7 + usize::from(col) * 13) % 256;
            out.extend_from_slice(format!("\x1b[1;38;5;{colour}mword{col:02}\x1b[0m ",).as_bytes());
            out.extend_from_slice(b"  ");
        }
        out.truncate(out.len() - 2);
    }
    out
}

/// CPU time the whole process (every thread) has used. The seq figures are
/// CPU time, not wall time: on a shared machine, wall time mostly counts
/// waiting for a core.
struct Cpu(Duration);

impl Cpu {
    fn now() -> Self {
        let usage = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage");
        let micros = |t: nix::sys::time::TimeVal| {
            Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
        };
        Cpu(micros(usage.user_time()) + micros(usage.system_time()))
    }

    fn elapsed(&self) -> Duration {
        Self::now().0.saturating_sub(self.0)
    }
}

fn mb_per_s(bytes: usize, elapsed: Duration) -> f64 {
    bytes as f64 / elapsed.as_secs_f64() / 1e6
}

fn render(state: &PaneState, buf: &mut Buffer) {
    let area = buf.area;
    state.with_screen(|s| TerminalPane::new(s).render(area, buf));
}

/// The fastest of `rounds` interleaved runs of each variant: on a shared
/// machine, other load only ever adds time, and interleaving spreads it
/// over all variants alike.
fn fastest<const N: usize>(
    rounds: usize,
    variants: &mut [&mut dyn FnMut() -> Duration; N],
) -> [Duration; N] {
    let mut best = [Duration::MAX; N];
    for _ in 0..rounds {
        for (b, v) in best.iter_mut().zip(variants.iter_mut()) {
            *b = (*b).min(v());
        }
    }
    best
}

fn seq_through(seq: &[u8], rows: u16, cols: u16) {
    let size = seq.len();
    println!(
        "seq 1 2000000 at {rows}x{cols}: {:.1} MB in {CHUNK}-byte chunks, {SCROLLBACK} rows of scrollback; CPU time, fastest of 3",
        size as f64 / 1e6
    );
    let area = Rect::new(0, 0, cols, rows);
    let mut raw = || {
        let mut parser = vt100::Parser::new(
            rows.try_into().unwrap(),
            cols.try_into().unwrap(),
            SCROLLBACK,
        );
        let start = Cpu::now();
        for chunk in seq.chunks(CHUNK) {
            parser.process(chunk);
        }
        black_box(parser.screen().cursor_position());
        start.elapsed()
    };
    let mut unpatched = || {
        let mut parser = vt100_upstream::Parser::new(
            rows.try_into().unwrap(),
            cols.try_into().unwrap(),
            SCROLLBACK,
        );
        let start = Cpu::now();
        for chunk in seq.chunks(CHUNK) {
            parser.process(chunk);
        }
        black_box(parser.screen().cursor_position());
        start.elapsed()
    };
    let mut no_scrollback = || {
        let mut parser = vt100::Parser::new(rows.try_into().unwrap(), cols.try_into().unwrap(), 0);
        let start = Cpu::now();
        for chunk in seq.chunks(CHUNK) {
            parser.process(chunk);
        }
        black_box(parser.screen().cursor_position());
        start.elapsed()
    };
    let mut fed = || {
        let state = Arc::new(PaneState::new(rows, cols, SCROLLBACK));
        let (reader, mut writer) = std::io::pipe().unwrap();
        let (tx, rx) = mpsc::channel();
        let start = Cpu::now();
        spawn_feed("bench", reader, state, Ended(tx)).unwrap();
        // Small writes, as a PTY delivers them.
        for chunk in seq.chunks(4096) {
            writer.write_all(chunk).unwrap();
        }
        drop(writer);
        rx.recv().unwrap();
        start.elapsed()
    };
    let mut pane = || {
        let state = PaneState::new(rows, cols, SCROLLBACK);
        let start = Cpu::now();
        for chunk in seq.chunks(CHUNK) {
            black_box(state.process(chunk));
        }
        start.elapsed()
    };
    let mut every_chunk = || {
        let state = PaneState::new(rows, cols, SCROLLBACK);
        let mut buf = Buffer::empty(area);
        let start = Cpu::now();
        for chunk in seq.chunks(CHUNK) {
            state.process(chunk);
            render(&state, &mut buf);
        }
        start.elapsed()
    };
    let mut capped_frames = 0;
    let mut capped = || {
        let state = PaneState::new(rows, cols, SCROLLBACK);
        let mut buf = Buffer::empty(area);
        let mut last = Instant::now();
        capped_frames = 0;
        let start = Cpu::now();
        for chunk in seq.chunks(CHUNK) {
            state.process(chunk);
            if last.elapsed() >= Duration::from_millis(10) && state.take_dirty() {
                render(&state, &mut buf);
                capped_frames += 1;
                last = Instant::now();
            }
        }
        render(&state, &mut buf);
        start.elapsed()
    };
    let [
        unpatched,
        no_scrollback,
        raw,
        pane,
        fed,
        every_chunk,
        capped,
    ] = fastest(
        3,
        &mut [
            &mut unpatched,
            &mut no_scrollback,
            &mut raw,
            &mut pane,
            &mut fed,
            &mut every_chunk,
            &mut capped,
        ],
    );
    let report = |what: &str, t: Duration, extra: String| {
        println!(
            "  {what:<36}{:>7.1} ms {:>6.1} MB/s  {:.2}x baseline{extra}",
            t.as_secs_f64() * 1e3,
            mb_per_s(size, t),
            t.as_secs_f64() / raw.as_secs_f64()
        );
    };
    report(
        "unpatched vt100 0.18.1 (crates.io)",
        unpatched,
        String::new(),
    );
    report("vt100 without scrollback", no_scrollback, String::new());
    report("baseline: raw vt100 parse", raw, String::new());
    report("PaneState::process", pane, String::new());
    report("spawn_feed from a pipe (4 KiB writes)", fed, String::new());
    let chunks = size.div_ceil(CHUNK);
    report(
        "process + render every chunk",
        every_chunk,
        format!(", {chunks} frames"),
    );
    report(
        "process + render at most 100 fps",
        capped,
        format!(", {capped_frames} frames in the last run"),
    );
}

fn main() {
    let seq = seq_output();
    seq_through(&seq, 24, 80);
    seq_through(&seq, ROWS, COLS);
    let area = Rect::new(0, 0, COLS, ROWS);

    let screen = colourful_screen();
    const REPS: u32 = 500;
    println!(
        "one {COLS}x{ROWS} frame of coloured text ({} bytes paint it), mean of {REPS}, fastest of 5",
        screen.len()
    );
    let state = PaneState::new(ROWS, COLS, 0);
    state.process(&screen);
    let mut buf = Buffer::empty(area);
    render(&state, &mut buf);
    let full = buf.clone();
    let empty = Buffer::empty(area);
    let mut parse = || {
        let mut parser = vt100::Parser::new(ROWS.try_into().unwrap(), COLS.try_into().unwrap(), 0);
        let start = Instant::now();
        for _ in 0..REPS {
            parser.process(&screen);
        }
        black_box(parser.screen().cursor_position());
        start.elapsed() / REPS
    };
    let mut draw = || {
        let start = Instant::now();
        for _ in 0..REPS {
            render(&state, &mut buf);
            black_box(&buf);
        }
        start.elapsed() / REPS
    };
    let mut diff = || {
        let start = Instant::now();
        for _ in 0..REPS {
            black_box(empty.diff(&full).len());
        }
        start.elapsed() / REPS
    };
    let [parse, draw, diff] = fastest(5, &mut [&mut parse, &mut draw, &mut diff]);
    println!(
        "  baseline: raw vt100 parse of it     {:>7.1} µs",
        parse.as_secs_f64() * 1e6
    );
    println!(
        "  TerminalPane render                 {:>7.1} µs  {:.2}x baseline",
        draw.as_secs_f64() * 1e6,
        draw.as_secs_f64() / parse.as_secs_f64()
    );
    println!(
        "  Buffer::diff, every cell changed    {:>7.1} µs  {:.2}x baseline",
        diff.as_secs_f64() * 1e6,
        diff.as_secs_f64() / parse.as_secs_f64()
    );
}
