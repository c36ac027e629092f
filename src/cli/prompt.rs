//! The approval prompt of a plain terminal session (`lazaret shell` and
//! `lazaret exec`), until the session runs inside `lazaret ui`'s modal.
//!
//! While the prompt is up, the `podman exec` child is stopped (SIGSTOP), so
//! nothing from the sandbox writes over it and no key reaches the sandbox;
//! it continues (and is told to redraw) afterwards. Everything the agent
//! wrote is shown with control, bidi and zero-width characters made visible.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;

use nix::sys::signal::{Signal, kill};
use nix::sys::termios::{self, SetArg};
use nix::unistd::Pid;

use crate::coordinator::escalation::{Prompt, Verdict};
use lazaret_widgets::visible::make_visible;

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
pub fn render(p: &Prompt) -> String {
    let field = |name: &str, value: &str| {
        let (v, _) = make_visible(value);
        format!("  {name:<10}{v}\r\n")
    };
    let mut s = String::from(
        "\r\n\x1b[1;33m── Lazaret: the agent asks to run a command on the host ──\x1b[0m\r\n",
    );
    s += &field("request", &p.request_id);
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
    s += "  \x1b[1m[A]\x1b[0m approve & run   \x1b[1m[D]\x1b[0m deny   \x1b[1m[E]\x1b[0m edit   \x1b[1m[Q]\x1b[0m abort session\r\n";
    s
}

/// Reads one line in raw mode: printable text, Backspace, Ctrl-U; Enter
/// ends it, Esc cancels (`None`).
fn read_line(tty: &mut File, label: &str, initial: &str) -> Option<String> {
    let mut text = initial.to_string();
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let _ = write!(tty, "\r\x1b[2K{label} {}", make_visible(&text).0);
        let _ = tty.flush();
        let mut b = [0u8; 1];
        if tty.read(&mut b).ok()? == 0 {
            return None;
        }
        match b[0] {
            b'\r' | b'\n' => {
                let _ = write!(tty, "\r\n");
                return Some(text);
            }
            0x1b => return None,
            0x7f | 0x08 => {
                text.pop();
            }
            0x15 => text.clear(),
            c if c < 0x20 => {}
            c => {
                pending.push(c);
                if let Ok(s) = std::str::from_utf8(&pending) {
                    text.push_str(s);
                    pending.clear();
                } else if pending.len() >= 4 {
                    pending.clear();
                }
            }
        }
    }
}

/// `pid` and every process below it. Rootless podman re-executes itself
/// in its user namespace, so the process reading the terminal is a child.
fn process_tree(pid: u32) -> Vec<Pid> {
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
/// meanwhile when given.
pub fn ask(prompt: &Prompt, mut tty: File, child: Option<u32>) -> Verdict {
    let stopped = child.map(process_tree).unwrap_or_default();
    for p in &stopped {
        let _ = kill(*p, Signal::SIGSTOP);
    }
    let verdict = {
        let Some(_raw) = Raw::new(&tty) else {
            return Verdict::Deny {
                reason: Some("the session's terminal could not show the prompt".into()),
            };
        };
        let _ = tty.write_all(render(prompt).as_bytes());
        let _ = tty.flush();
        loop {
            let mut b = [0u8; 1];
            match tty.read(&mut b) {
                Ok(1) => {}
                _ => {
                    break Verdict::Deny {
                        reason: Some("the terminal closed".into()),
                    };
                }
            }
            match b[0].to_ascii_lowercase() {
                b'a' => {
                    let _ = write!(tty, "\r\napproved\r\n");
                    break Verdict::Approve;
                }
                b'd' => {
                    let reason = read_line(&mut tty, "reason (optional, Enter to send):", "");
                    break Verdict::Deny { reason };
                }
                b'e' => {
                    let initial = if make_visible(&prompt.command).1 {
                        ""
                    } else {
                        prompt.command.as_str()
                    };
                    match read_line(&mut tty, "edit, Enter to approve, Esc to go back:", initial) {
                        Some(command) if !command.trim().is_empty() => {
                            break Verdict::Edit { command };
                        }
                        _ => {
                            let _ = write!(tty, "\r\n");
                            let _ = tty.write_all(render(prompt).as_bytes());
                        }
                    }
                }
                b'q' => {
                    let _ = write!(tty, "\r\naborting the session\r\n");
                    break Verdict::Abort;
                }
                _ => {}
            }
        }
    };
    let _ = tty.flush();
    for p in &stopped {
        let _ = kill(*p, Signal::SIGCONT);
    }
    // Ask the program in the sandbox to redraw over the prompt.
    for p in &stopped {
        let _ = kill(*p, Signal::SIGWINCH);
    }
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
        let text = render(&p);
        assert!(!text.contains("\x1b[2J"));
        assert!(text.contains("fine␛[2J␛[Hreally"));
        assert!(text.contains("ls<U+202E>txt.exe"));
    }
}
