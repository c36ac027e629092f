//! The approval prompt of a plain terminal session (`lazaret exec`, and
//! `lazaret shell` when not on a terminal), decisions.md D10.
//!
//! Nothing from the sandbox reaches the terminal while the prompt is up:
//! an exec's output waits in its pipe (the session reads it only between
//! prompts), and a `--tty` child is stopped (SIGSTOP). The prompt resets the
//! terminal's modes and pushes the screen into the scrollback before it
//! draws, throws away pending input, and arms only after a pause. It
//! approves only when the human types a random code shown in it, one key
//! per read: a terminal's automatic replies (answerback, device
//! attributes, colour and version reports) cannot produce it, and a read
//! holding several keys is ignored. Everything the agent wrote is shown
//! with control, bidi, zero-width and other hidden characters made visible,
//! on a page that fits the terminal ([`PromptPage`]): the code shows only
//! once the human has paged to the request's end.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, kill};
use nix::sys::termios::{self, SetArg};
use nix::unistd::Pid;

use super::approval::{ARMING, Approval, PromptKey, Step};
use super::prompt_page;
use super::terminal::{Key, KeyReader, approval_code, flush_input, reset_for_prompt};
use crate::coordinator::escalation::{Prompt, Verdict};
use lazaret_widgets::visible::make_visible;

/// Letters of the approval code.
const CODE_LEN: usize = 3;

/// The session's terminal, if it has one.
pub fn open_tty() -> Option<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .ok()
}

/// Puts the terminal in raw mode until dropped.
struct Raw {
    tty: File,
    saved: termios::Termios,
}

impl Raw {
    fn new(tty: &File) -> Option<Self> {
        let tty = tty.try_clone().ok()?;
        let saved = termios::tcgetattr(tty.as_fd()).ok()?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(tty.as_fd(), SetArg::TCSANOW, &raw).ok()?;
        Some(Raw { tty, saved })
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(self.tty.as_fd(), SetArg::TCSANOW, &self.saved);
    }
}

/// One thing the human's terminal did.
enum Input {
    Key(Key),
    /// The terminal closed, Lazaret was told to stop, or the request was
    /// withdrawn.
    Gone,
}

/// Why a prompt's request was withdrawn (its requester went away), once
/// it was: set by the session while the prompt waits for keys.
pub type Withdrawal = Mutex<Option<String>>;

fn withdrawn(w: &Withdrawal) -> Option<String> {
    w.lock().map_or(None, |w| w.clone())
}

/// The human's keys, one per read (see [`KeyReader`]).
struct Keyboard<'a> {
    tty: File,
    reader: KeyReader,
    stop: &'a AtomicBool,
    withdrawal: &'a Withdrawal,
}

impl Keyboard<'_> {
    fn next(&mut self) -> Input {
        loop {
            // Checked between reads (at most 200 ms apart): a withdrawn
            // request stops asking before another key counts.
            if self.stop.load(Ordering::Relaxed) || withdrawn(self.withdrawal).is_some() {
                return Input::Gone;
            }
            let mut fds = [PollFd::new(self.tty.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(200u16)) {
                Ok(0) => {
                    // Quiet: whatever sequence was cut off is over.
                    self.reader = KeyReader::default();
                    continue;
                }
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return Input::Gone,
            }
            let mut buf = [0u8; 512];
            match self.tty.read(&mut buf) {
                Ok(0) | Err(_) => return Input::Gone,
                Ok(n) => {
                    if let Some(k) = self.reader.decode(&buf[..n]) {
                        return Input::Key(k);
                    }
                }
            }
        }
    }
}

/// The terminal's key as the prompt's rules take it.
fn prompt_key(key: &Key) -> PromptKey {
    match *key {
        Key::Char(c) => PromptKey::Char(c),
        Key::Enter => PromptKey::Enter,
        Key::Backspace => PromptKey::Backspace,
        Key::Kill => PromptKey::Kill,
        Key::KillWord => PromptKey::KillWord,
        Key::Home => PromptKey::Home,
        Key::End => PromptKey::End,
        Key::WordLeft => PromptKey::WordLeft,
        Key::WordRight => PromptKey::WordRight,
        Key::Escape => PromptKey::Cancel,
        Key::Up => PromptKey::Up,
        Key::Down => PromptKey::Down,
        Key::PageUp => PromptKey::PageUp,
        Key::PageDown => PromptKey::PageDown,
        Key::Burst => PromptKey::Burst,
    }
}

/// `pid` and every process below it. Rootless podman re-executes itself
/// in its user namespace, so the process reading the terminal is a child.
pub fn process_tree(pid: u32) -> Vec<Pid> {
    let mut tree = vec![pid];
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|p| {
                    let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
                    let ppid = stat.rsplit(") ").next()?.split(' ').nth(1)?.parse().ok()?;
                    Some((p, ppid))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    tree.into_iter().map(|p| Pid::from_raw(p as i32)).collect()
}

/// Asks the human at `tty`. `child` (and its process tree) is stopped
/// meanwhile when given (a `--tty` child writes to the terminal itself).
/// `stop` is raised by a signal that ends Lazaret: the request is denied.
/// `withdrawal` is filled when the requester goes away meanwhile: the
/// prompt then says so and stops asking (nothing runs; the verdict is a
/// denial nobody waits for).
pub fn ask(
    prompt: &Prompt,
    tty: File,
    child: Option<u32>,
    stop: &AtomicBool,
    withdrawal: &Withdrawal,
) -> Verdict {
    let stopped = child.map(process_tree).unwrap_or_default();
    for p in &stopped {
        let _ = kill(*p, Signal::SIGSTOP);
    }
    let verdict = ask_armed(prompt, tty, stop, withdrawal);
    for p in &stopped {
        let _ = kill(*p, Signal::SIGCONT);
    }
    // Ask the program in the sandbox to redraw over the prompt.
    for p in &stopped {
        let _ = kill(*p, Signal::SIGWINCH);
    }
    verdict
}

fn ask_armed(
    prompt: &Prompt,
    mut tty: File,
    stop: &AtomicBool,
    withdrawal: &Withdrawal,
) -> Verdict {
    let Some(_raw) = Raw::new(&tty) else {
        return Verdict::Deny {
            reason: Some("the session's terminal could not show the prompt".into()),
        };
    };
    let gone = || match withdrawn(withdrawal) {
        Some(why) => Verdict::Deny {
            reason: Some(format!("withdrawn: {why}")),
        },
        None => Verdict::Deny {
            reason: Some("the terminal closed, or Lazaret was stopped".into()),
        },
    };
    flush_input(&tty);
    let (cols, rows) = ratatui::crossterm::terminal::size().unwrap_or((80, 24));
    let mut approval = Approval::new(prompt.clone(), approval_code(CODE_LEN));
    // Nothing else can be typed to here: the sandbox's output waits (D10),
    // so the request opens at once; type-ahead is flushed after the hold.
    approval.open(std::time::Instant::now());
    // Drawn whole each time: a page never taller or wider than the
    // terminal, so nothing scrolls.
    let draw = |tty: &mut File, approval: &mut Approval| -> Result<(), (u16, u16)> {
        let (cols, rows) = ratatui::crossterm::terminal::size().unwrap_or((cols, rows));
        let screen = prompt_page::screen(approval, cols, rows)?;
        let _ = tty.write_all(super::terminal::paint(&screen).as_bytes());
        let _ = tty.flush();
        Ok(())
    };
    let _ = tty.write_all(reset_for_prompt(rows).as_bytes());
    if let Err((c, r)) = draw(&mut tty, &mut approval) {
        let _ = write!(
            tty,
            "\r\n  lazaret: a request from the sandbox was denied: this terminal ({cols}x{rows}) is too small to show it whole; make it at least {c}x{r}\r\n"
        );
        return Verdict::Deny {
            reason: Some(format!(
                "the human's terminal ({cols}x{rows}) was too small to show the whole request"
            )),
        };
    }
    // Keys typed before the prompt was there are not answers to it.
    std::thread::sleep(ARMING);
    flush_input(&tty);
    let Ok(reader) = tty.try_clone() else {
        return gone();
    };
    let mut kb = Keyboard {
        tty: reader,
        reader: KeyReader::default(),
        stop,
        withdrawal,
    };
    let verdict = loop {
        if draw(&mut tty, &mut approval).is_err() {
            break Verdict::Deny {
                reason: Some("the human's terminal became too small to show the request".into()),
            };
        }
        let key = match kb.next() {
            Input::Gone => break gone(),
            Input::Key(k) => k,
        };
        let step = approval.key(prompt_key(&key), std::time::Instant::now());
        if step == Step::Closed {
            // Esc or Ctrl-C: nothing else can happen to the request here
            // (the sandbox waits for this terminal), so it is denied.
            let _ = write!(tty, "\r\n  denied (Esc / Ctrl-C)\r\n");
            break Verdict::Deny {
                reason: Some("the human cancelled the prompt (Esc / Ctrl-C)".into()),
            };
        }
        if let Step::Decided(verdict) = step {
            let said = match verdict {
                Verdict::Abort => "aborting the session",
                Verdict::Deny { .. } => "denied",
                Verdict::Approve | Verdict::Edit { .. } => "approved",
            };
            let _ = write!(tty, "\r\n  {said}\r\n");
            break verdict;
        }
    };
    if let Some(why) = withdrawn(withdrawal) {
        let (id, _) = make_visible(&prompt.request_id);
        if why == crate::coordinator::protocol::ANSWERED_ELSEWHERE {
            let _ = write!(
                tty,
                "\r\x1b[2K\x1b[1;33m  request {id} was answered in another of your clients (its decision holds)\x1b[0m\r\n"
            );
        } else {
            let (why, _) = make_visible(&why);
            let _ = write!(
                tty,
                "\r\x1b[2K\x1b[1;33m  request {id} withdrawn: {why}; nothing runs\x1b[0m\r\n"
            );
        }
    }
    // Keys typed for a prompt that is gone answer nothing else.
    flush_input(&tty);
    let _ = write!(
        tty,
        "{}",
        super::terminal::paint("\x1b[2m── lazaret: back to the sandbox's output ──\x1b[0m\r\n")
    );
    let _ = tty.flush();
    verdict
}
