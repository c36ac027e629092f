//! Parses `seq 1 N` output (with the tty's `\r\n`) in 64 KiB chunks, for
//! counting instructions of the flood parse under callgrind:
//!
//! ```sh
//! cargo build --release -p vt100 --example flood
//! valgrind --tool=callgrind --collect-atstart=no \
//!     --toggle-collect='*parse_flood*' \
//!     target/release/examples/flood 200 10000 2000000
//! ```
//!
//! Arguments: columns, rows of scrollback, number of lines (defaults 80,
//! 10000, 2000000); the screen is 50 rows high.

use std::hint::black_box;

fn seq_output(lines: u32) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 1..=lines {
        out.extend_from_slice(i.to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

#[inline(never)]
fn parse_flood(parser: &mut vt100::Parser, bytes: &[u8]) {
    for chunk in bytes.chunks(64 * 1024) {
        parser.process(chunk);
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut arg = |default: usize| {
        args.next()
            .map_or(default, |a| a.parse().expect("a number"))
    };
    let cols = u16::try_from(arg(80)).expect("columns fit a u16");
    let scrollback = arg(10_000);
    let lines = u32::try_from(arg(2_000_000)).expect("lines fit a u32");
    let bytes = seq_output(lines);
    let mut parser = vt100::Parser::new(
        50.try_into().unwrap(),
        cols.try_into().expect("at least one column"),
        scrollback,
    );
    parse_flood(&mut parser, &bytes);
    black_box(parser.screen().cursor_position());
}
