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
//! with control, bidi, zero-width and other hidden characters made visible.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, kill};
use nix::sys::termios::{self, SetArg};
use nix::unistd::Pid;

use super::terminal::{Key, KeyReader, approval_code, flush_input, reset_for_prompt};
use crate::coordinator::escalation::{Prompt, Verdict};
use lazaret_widgets::visible::make_visible;

/// Letters of the approval code.
const CODE_LEN: usize = 3;

/// How long the prompt is on screen before it takes keys.
const ARMING: Duration = Duration::from_millis(300);

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

/// The text of a prompt, lines ending in `\r\n` (the terminal is raw).
pub fn render(p: &Prompt, code: &str) -> String {
    let field = |name: &str, value: &str| {
        let (v, _) = make_visible(value);
        format!("  {name:<10}{v}\r\n")
    };
    let mut s = String::from(
        "\x1b[1;33m── Lazaret: the agent asks to run a command on the host ──\x1b[0m\r\n",
    );
    s += &field("request", &p.request_id);
    s += &field(
        "session",
        &format!(
            "{} (this terminal's session)",
            p.session_id.get(..8).unwrap_or(&p.session_id)
        ),
    );
    s += &field("profile", &p.profile);
    s += &field("in", &p.cwd);
    s += &field("why", &p.justification);
    s += &field("command", &p.command);
    s += &field(
        "runs",
        if p.via_shell {
            "through the host shell (it has shell syntax)"
        } else {
            "directly (execve), no shell"
        },
    );
    s += &field("needs you", &p.reason);
    s += &format!(
        "  to approve & run, type the code \x1b[1;7m {code} \x1b[0m   \x1b[1m[D]\x1b[0m deny   \x1b[1m[E]\x1b[0m edit   \x1b[1m[Q]\x1b[0m abort session\r\n"
    );
    super::terminal::paint(&s)
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

/// Reads one line: printable text, Backspace, Ctrl-U; Enter ends it, Esc
/// cancels (`None`). Bursts (pastes, replies) are ignored.
fn read_line(kb: &mut Keyboard, label: &str, initial: &str) -> Option<String> {
    let mut text = initial.to_string();
    loop {
        let _ = write!(kb.tty, "\r\x1b[2K{label} {}", make_visible(&text).0);
        let _ = kb.tty.flush();
        match kb.next() {
            Input::Gone => return None,
            Input::Key(Key::Enter) => {
                let _ = write!(kb.tty, "\r\n");
                return Some(text);
            }
            Input::Key(Key::Escape) => return None,
            Input::Key(Key::Backspace) => {
                text.pop();
            }
            Input::Key(Key::Kill) => text.clear(),
            Input::Key(Key::Char(c)) if !c.is_control() => text.push(c),
            Input::Key(_) => {}
        }
    }
}

/// Waits for the human to type `code` (`Some(true)`), or to go back with
/// Esc (`Some(false)`); `None` when the terminal is gone.
fn confirm(kb: &mut Keyboard, label: &str, code: &str) -> Option<bool> {
    let mut typed = 0;
    loop {
        let shown: String = code.chars().take(typed).collect();
        let _ = write!(kb.tty, "\r\x1b[2K{label} {shown}");
        let _ = kb.tty.flush();
        match kb.next() {
            Input::Gone => return None,
            Input::Key(Key::Escape) => return Some(false),
            Input::Key(Key::Char(c)) => {
                if code.chars().nth(typed) == Some(c.to_ascii_lowercase()) {
                    typed += 1;
                    if typed == code.len() {
                        return Some(true);
                    }
                } else {
                    typed = 0;
                }
            }
            Input::Key(Key::Backspace) => typed = typed.saturating_sub(1),
            Input::Key(_) => typed = 0,
        }
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
    let rows = ratatui::crossterm::terminal::size().map_or(24, |(_, r)| r);
    let code = approval_code(CODE_LEN);
    let screen = format!("{}{}", reset_for_prompt(rows), render(prompt, &code));
    let _ = tty.write_all(screen.as_bytes());
    let _ = tty.flush();
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
    let label = "  code:";
    let mut typed = 0usize;
    let verdict = loop {
        let shown: String = code.chars().take(typed).collect();
        let _ = write!(tty, "\r\x1b[2K{label} {shown}");
        let _ = tty.flush();
        let key = match kb.next() {
            Input::Gone => break gone(),
            Input::Key(k) => k,
        };
        match key {
            Key::Char(c) if code.chars().nth(typed) == Some(c.to_ascii_lowercase()) => {
                typed += 1;
                if typed == code.len() {
                    let _ = write!(tty, "\r\n  approved\r\n");
                    break Verdict::Approve;
                }
            }
            Key::Char(c) if typed == 0 && c.eq_ignore_ascii_case(&'d') => {
                let _ = write!(tty, "\r\n");
                match read_line(&mut kb, "  reason (optional, Enter to send):", "") {
                    Some(reason) => {
                        break Verdict::Deny {
                            reason: (!reason.trim().is_empty()).then_some(reason),
                        };
                    }
                    None if stop.load(Ordering::Relaxed) || withdrawn(withdrawal).is_some() => {
                        break gone();
                    }
                    None => break Verdict::Deny { reason: None },
                }
            }
            Key::Char(c) if typed == 0 && c.eq_ignore_ascii_case(&'e') => {
                let initial = if make_visible(&prompt.command).1 {
                    ""
                } else {
                    prompt.command.as_str()
                };
                let _ = write!(tty, "\r\n");
                if let Some(command) =
                    read_line(&mut kb, "  edit, Enter when done, Esc to go back:", initial)
                    && !command.trim().is_empty()
                {
                    let _ = write!(tty, "  run  {}\r\n", make_visible(&command).0);
                    let label = format!("  type the code {code} to run it, Esc to go back:");
                    match confirm(&mut kb, &label, &code) {
                        Some(true) => {
                            let _ = write!(tty, "\r\n  approved as edited\r\n");
                            break Verdict::Edit { command };
                        }
                        None => break gone(),
                        Some(false) => {}
                    }
                }
                if stop.load(Ordering::Relaxed) || withdrawn(withdrawal).is_some() {
                    break gone();
                }
                let _ = write!(tty, "\r\n{}", render(prompt, &code));
            }
            Key::Char(c) if typed == 0 && c.eq_ignore_ascii_case(&'q') => {
                let _ = write!(tty, "\r\n  aborting the session\r\n");
                break Verdict::Abort;
            }
            Key::Burst => {
                typed = 0;
                let _ = write!(
                    tty,
                    "\r\x1b[2K  (ignored: several keys at once, a paste or a terminal reply)\r\n"
                );
            }
            _ => typed = 0,
        }
    };
    if let Some(why) = withdrawn(withdrawal) {
        let (id, _) = make_visible(&prompt.request_id);
        let (why, _) = make_visible(&why);
        let _ = write!(
            tty,
            "\r\x1b[2K\x1b[1;33m  request {id} withdrawn: {why}; nothing runs\x1b[0m\r\n"
        );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_is_shown_visibly() {
        let p = Prompt {
            request_id: "r".into(),
            session_id: "s".into(),
            profile: "dev".into(),
            cwd: "/workspace".into(),
            justification: "fine\x1b[2J\x1b[Hreally".into(),
            command: "ls\u{202E}txt.exe".into(),
            via_shell: false,
            reason: "matches no auto-approve entry".into(),
        };
        let text = render(&p, "bcf");
        assert!(text.contains(" bcf "));
        assert!(!text.contains("\x1b[2J"));
        assert!(text.contains("fine␛[2J␛[Hreally"));
        assert!(text.contains("ls<U+202E>txt.exe"));
    }
}
