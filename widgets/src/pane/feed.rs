//! Feeding a pane from its PTY so that neither parsing nor drawing ever holds
//! back reading: one thread only drains the PTY into a bounded queue, a
//! second parses whatever has queued up in one batch (a few locks of
//! [`BATCH`] bytes each, so the UI can draw in between).
//!
//! With one thread doing both, the child (and `podman exec` relaying it)
//! stalls whenever the parser is busy or the UI holds the screen to draw it:
//! the kernel's PTY buffer is only a few KiB.

use std::io::{self, Read};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use super::PaneState;

/// What the reader may get ahead of the parser. Bounded so that a child
/// flooding the pane still waits for the parser (its `time` stays honest and
/// memory stays flat), large enough to ride out a frame or a slow batch.
const QUEUE_LIMIT: usize = 1 << 20;
/// The most bytes parsed per lock of the screen.
pub const BATCH: usize = 64 * 1024;
/// One read from the PTY.
const READ_SIZE: usize = 64 * 1024;

/// Where the parser thread reports to.
pub trait FeedSink: Send + 'static {
    /// Bytes answering the child's queries (cursor position, device
    /// attributes): write them to the PTY.
    fn reply(&mut self, bytes: &[u8]);
    /// The screen changed: called once per batch, not per read.
    fn output(&mut self);
    /// The PTY closed (or failed) and everything read from it is parsed.
    fn ended(&mut self);
}

#[derive(Default)]
struct Shared {
    bytes: Vec<u8>,
    /// The reader saw the end of the PTY.
    eof: bool,
    /// The parser stopped: the reader must not wait for room.
    stopped: bool,
}

#[derive(Default)]
struct Queue {
    shared: Mutex<Shared>,
    /// Signalled when bytes arrive or the PTY ends.
    data: Condvar,
    /// Signalled when the parser took the bytes.
    room: Condvar,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Marks the parser stopped however its thread ends, so the reader never
/// waits forever for room.
struct StopOnDrop(Arc<Queue>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.lock().stopped = true;
        self.0.room.notify_all();
    }
}

/// Starts the two threads feeding `state` from `reader` (a PTY master);
/// `name` names them in debuggers (`name-read`, `name-parse`).
pub fn spawn_feed(
    name: &str,
    reader: impl Read + Send + 'static,
    state: Arc<PaneState>,
    sink: impl FeedSink,
) -> io::Result<()> {
    let queue = Arc::new(Queue::default());
    let parse_queue = queue.clone();
    std::thread::Builder::new()
        .name(format!("{name}-parse"))
        .spawn(move || parse(&parse_queue, &state, sink))?;
    let spawned = std::thread::Builder::new()
        .name(format!("{name}-read"))
        .spawn({
            let queue = queue.clone();
            move || read(&queue, reader)
        });
    if spawned.is_err() {
        // The parser would wait for bytes forever.
        queue.lock().eof = true;
        queue.data.notify_all();
    }
    spawned.map(drop)
}

fn read(queue: &Queue, mut reader: impl Read) {
    let mut buf = vec![0u8; READ_SIZE];
    loop {
        let n = match reader.read(&mut buf) {
            // portable-pty maps the EIO of a hung-up PTY to Ok(0).
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let mut shared = queue.lock();
        while shared.bytes.len() >= QUEUE_LIMIT && !shared.stopped {
            shared = queue
                .room
                .wait(shared)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if shared.stopped {
            return;
        }
        shared.bytes.extend_from_slice(&buf[..n]);
        drop(shared);
        queue.data.notify_one();
    }
    queue.lock().eof = true;
    queue.data.notify_one();
}

fn parse(queue: &Arc<Queue>, state: &PaneState, mut sink: impl FeedSink) {
    let _stop = StopOnDrop(queue.clone());
    // Double buffering: the reader fills one vector while this thread
    // parses the other; neither is reallocated in the steady state.
    let mut batch = Vec::with_capacity(READ_SIZE);
    loop {
        let eof = {
            let mut shared = queue.lock();
            while shared.bytes.is_empty() && !shared.eof {
                shared = queue
                    .data
                    .wait(shared)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            std::mem::swap(&mut shared.bytes, &mut batch);
            shared.eof
        };
        queue.room.notify_one();
        if batch.is_empty() && eof {
            break;
        }
        for chunk in batch.chunks(BATCH) {
            let replies = state.process(chunk);
            if !replies.is_empty() {
                sink.reply(&replies);
            }
        }
        batch.clear();
        sink.output();
    }
    sink.ended();
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    #[derive(Debug)]
    enum Event {
        Reply(Vec<u8>),
        Output,
        Ended,
    }

    struct Sink(mpsc::Sender<Event>);

    impl FeedSink for Sink {
        fn reply(&mut self, bytes: &[u8]) {
            let _ = self.0.send(Event::Reply(bytes.to_vec()));
        }
        fn output(&mut self) {
            let _ = self.0.send(Event::Output);
        }
        fn ended(&mut self) {
            let _ = self.0.send(Event::Ended);
        }
    }

    fn events_until_end(rx: &mpsc::Receiver<Event>) -> Vec<Event> {
        let mut events = Vec::new();
        loop {
            let event = rx
                .recv_timeout(Duration::from_secs(20))
                .expect("the feed ends after the PTY does");
            let end = matches!(event, Event::Ended);
            events.push(event);
            if end {
                return events;
            }
        }
    }

    #[test]
    fn parses_everything_then_ends_and_answers_queries() {
        let mut bytes = Vec::new();
        for i in 1..=50_000 {
            bytes.extend_from_slice(format!("{i}\r\n").as_bytes());
        }
        bytes.extend_from_slice(b"last\x1b[6n");
        let state = Arc::new(PaneState::new(5, 20, 100));
        let (tx, rx) = mpsc::channel();
        spawn_feed(
            "test",
            io::Cursor::new(bytes.clone()),
            state.clone(),
            Sink(tx),
        )
        .unwrap();
        let events = events_until_end(&rx);
        let direct = PaneState::new(5, 20, 100);
        direct.process(&bytes);
        let contents = |s: &PaneState| s.with_screen(|s| s.contents_formatted());
        assert_eq!(contents(&state), contents(&direct));
        assert!(events.iter().any(|e| matches!(e, Event::Output)));
        let replies: Vec<u8> = events
            .iter()
            .filter_map(|e| match e {
                Event::Reply(r) => Some(r.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(replies, b"\x1b[5;5R");
    }

    /// A frame being drawn (the screen locked) must not stop the PTY from
    /// being drained: far more than a pipe or PTY buffer holds gets through
    /// while the lock is held.
    #[test]
    fn reading_goes_on_while_the_screen_is_locked() {
        let (reader, mut writer) = io::pipe().unwrap();
        let state = Arc::new(PaneState::new(24, 80, 1000));
        let (tx, rx) = mpsc::channel();
        spawn_feed("test", reader, state.clone(), Sink(tx)).unwrap();
        let (done_tx, done_rx) = mpsc::channel();
        let written = 512 * 1024;
        state.with_screen(|_| {
            std::thread::spawn(move || {
                let line = [b'x'; 1023];
                for _ in 0..written / 1024 {
                    writer.write_all(&line).unwrap();
                    writer.write_all(b"\n").unwrap();
                }
                let _ = done_tx.send(writer);
            });
            done_rx
                .recv_timeout(Duration::from_secs(10))
                .expect("the writer finished while the screen was locked")
        });
        // The writer is dropped here: the pipe ends, the feed finishes.
        let events = events_until_end(&rx);
        assert!(matches!(events.last(), Some(Event::Ended)));
        assert!(
            state
                .with_screen(|s| s.contents())
                .contains(&"x".repeat(80))
        );
    }
}
