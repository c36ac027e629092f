//! The Agent Sandbox's writable layer under runc (issue 26 item 8).
//!
//! Under gVisor the root file system's writes live in the sandbox's memory
//! (`--overlay2=root:memory`) and the watchdog counts them. Under runc they
//! go to the container's upper folder in podman's storage, on the host's
//! disk, where rootless podman has no quota. The watchdog holds that folder
//! to the same limit: [`measure`] walks it, and the coordinator stops the
//! domain when it passes the profile's memory limit (teardown removes the
//! container, and with it the layer).
//!
//! The walk runs in the user's podman user namespace ([`LayerWatch`]): the
//! agent is root in its container and can hide files in folders owned by a
//! subordinate id with mode 0700, which the user cannot list from outside.
//! The tree is the agent's: nothing is followed, every folder is opened
//! below its parent's descriptor with `O_NOFOLLOW`, and the walk stops as
//! soon as the total passes the budget, so its work is bounded too.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::dir::{Dir, OwningIter, Type};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, fstatat};

/// Every entry costs at least this much (an inode and a block): a million
/// empty files are not free.
pub const ENTRY_COST: u64 = 4096;
/// Deeper folders than this are taken as an attack on the walk itself.
pub const MAX_DEPTH: usize = 256;

/// What one walk of the layer found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerUsage {
    /// Allocated bytes, each entry at least [`ENTRY_COST`], hard links once.
    pub bytes: u64,
    pub entries: u64,
    /// `false`: the walk stopped early, at the budget or at [`MAX_DEPTH`].
    pub complete: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    #[error("cannot read {path}: {error}")]
    Read { path: String, error: nix::Error },
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// One open folder of the walk: a descriptor to look up names below it,
/// and a reader of its entries (a duplicate of the same descriptor).
struct Level {
    fd: OwnedFd,
    entries: OwningIter,
}

fn level(fd: OwnedFd) -> nix::Result<Level> {
    let dup = fd
        .try_clone()
        .map_err(|e| nix::Error::from_raw(e.raw_os_error().unwrap_or(nix::libc::EMFILE)))?;
    Ok(Level {
        fd,
        entries: Dir::from_fd(dup)?.into_iter(),
    })
}

/// Walks `root` and adds up what it holds on disk, stopping once the total
/// passes `budget`. Entries that vanish during the walk are skipped.
pub fn measure(root: &Path, budget: u64) -> Result<LayerUsage, LayerError> {
    let read_err = |path: &dyn std::fmt::Display, error| LayerError::Read {
        path: path.to_string(),
        error,
    };
    let top = nix::fcntl::open(root, dir_flags(), Mode::empty())
        .and_then(level)
        .map_err(|e| read_err(&root.display(), e))?;
    let mut usage = LayerUsage {
        bytes: 0,
        entries: 0,
        complete: true,
    };
    let mut seen_links = std::collections::HashSet::new();
    // One open folder per level, each opened below the one before it.
    let mut stack: Vec<Level> = vec![top];
    while !stack.is_empty() {
        let depth = stack.len();
        let here = stack.last_mut().expect("not empty");
        let Some(entry) = here.entries.next() else {
            stack.pop();
            continue;
        };
        let entry = entry.map_err(|e| read_err(&root.display(), e))?;
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let st = match fstatat(&here.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(nix::Error::ENOENT) => continue,
            Err(e) => return Err(read_err(&name.to_string_lossy(), e)),
        };
        let is_dir = (st.st_mode & nix::libc::S_IFMT) == nix::libc::S_IFDIR;
        if st.st_nlink > 1 && !is_dir && !seen_links.insert((st.st_dev, st.st_ino)) {
            continue;
        }
        usage.entries += 1;
        usage.bytes += (st.st_blocks as u64 * 512).max(ENTRY_COST);
        if usage.bytes > budget {
            usage.complete = false;
            return Ok(usage);
        }
        if !is_dir && entry.file_type() != Some(Type::Directory) {
            continue;
        }
        if depth >= MAX_DEPTH {
            usage.complete = false;
            return Ok(usage);
        }
        match nix::fcntl::openat(&here.fd, name, dir_flags(), Mode::empty()).and_then(level) {
            Ok(next) => stack.push(next),
            // Replaced by a symlink or removed since the stat.
            Err(nix::Error::ENOENT | nix::Error::ELOOP | nix::Error::ENOTDIR) => {}
            Err(e) => return Err(read_err(&name.to_string_lossy(), e)),
        }
    }
    Ok(usage)
}

/// The line `lazaret layer-usage` prints: `BYTES ENTRIES complete|partial`.
pub fn format_usage(u: &LayerUsage) -> String {
    let how = if u.complete { "complete" } else { "partial" };
    format!("{} {} {how}", u.bytes, u.entries)
}

pub fn parse_usage(line: &str) -> Option<LayerUsage> {
    let mut w = line.split_whitespace();
    let bytes = w.next()?.parse().ok()?;
    let entries = w.next()?.parse().ok()?;
    let complete = match w.next()? {
        "complete" => true,
        "partial" => false,
        _ => return None,
    };
    Some(LayerUsage {
        bytes,
        entries,
        complete,
    })
}

/// Measures a container's layer from inside the user namespace its conmon
/// runs in (the user's rootless podman namespace, where the user is root
/// and may read what subordinate ids own).
#[derive(Debug)]
pub struct LayerWatch {
    /// The container's upper folder, as podman names it.
    pub upper: PathBuf,
    /// The user namespace, held open from the watch's start.
    userns: OwnedFd,
    /// This program, run as `lazaret layer-usage`.
    program: PathBuf,
}

impl LayerWatch {
    /// `conmon` is the container's conmon (Lazaret's, not the agent's).
    pub fn new(upper: PathBuf, conmon: i32) -> std::io::Result<LayerWatch> {
        let userns = std::fs::File::open(format!("/proc/{conmon}/ns/user"))?.into();
        Ok(LayerWatch {
            upper,
            userns,
            program: std::env::current_exe()?,
        })
    }

    /// One walk, in a child process of its own (a multi-threaded process
    /// cannot enter a user namespace), bounded by `budget` and `timeout`.
    pub fn measure(&self, budget: u64, timeout: std::time::Duration) -> Result<LayerUsage, String> {
        use std::os::unix::process::CommandExt;
        use wait_timeout::ChildExt;
        let mut cmd = std::process::Command::new(&self.program);
        cmd.arg("layer-usage")
            .arg("--budget")
            .arg(budget.to_string())
            .arg("--")
            .arg(&self.upper)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let ns = self.userns.as_raw_fd();
        // SAFETY: between fork and exec the child only makes one system
        // call, which is async-signal-safe; the descriptor stays open in
        // `self` for the whole spawn.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(move || {
                let fd = BorrowedFd::borrow_raw(ns);
                nix::sched::setns(fd, nix::sched::CloneFlags::CLONE_NEWUSER)
                    .map_err(std::io::Error::from)
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start the layer walk: {e}"))?;
        let status = match child.wait_timeout(timeout) {
            Ok(Some(s)) => s,
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the layer walk took longer than {} s",
                    timeout.as_secs()
                ));
            }
            Err(e) => return Err(format!("cannot wait for the layer walk: {e}")),
        };
        let mut out = String::new();
        let mut err = String::new();
        if let Some(mut o) = child.stdout.take() {
            let _ = std::io::Read::read_to_string(&mut o, &mut out);
        }
        if let Some(mut e) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        match parse_usage(out.trim()) {
            Some(u) if status.success() => Ok(u),
            _ => Err(format!(
                "the layer walk failed ({status}): {}",
                err.trim().chars().take(300).collect::<String>()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_blocks_entries_and_hard_links_once() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("a/b/c")).unwrap();
        std::fs::write(d.join("a/b/c/data"), vec![7u8; 1 << 20]).unwrap();
        std::fs::hard_link(d.join("a/b/c/data"), d.join("a/link")).unwrap();
        std::fs::write(d.join("empty"), b"").unwrap();
        std::os::unix::fs::symlink("/", d.join("a/root")).unwrap();
        let u = measure(d, u64::MAX).unwrap();
        // a, b, c, data, empty, root (the link to data once).
        assert_eq!(u.entries, 6);
        assert!(u.complete);
        assert!(u.bytes >= (1 << 20) + 5 * ENTRY_COST, "{u:?}");
        assert!(u.bytes < (1 << 20) + 64 * ENTRY_COST, "{u:?}");
        // The symlink to `/` was not followed.
        assert!(u.bytes < 8 << 20);
    }

    #[test]
    fn stops_at_the_budget_and_at_the_depth_bound() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..100 {
            std::fs::write(dir.path().join(i.to_string()), b"").unwrap();
        }
        let u = measure(dir.path(), 10 * ENTRY_COST).unwrap();
        assert!(!u.complete);
        assert_eq!(u.entries, 11);

        let deep = tempfile::tempdir().unwrap();
        let mut p = deep.path().to_path_buf();
        for _ in 0..MAX_DEPTH + 4 {
            p.push("d");
        }
        std::fs::create_dir_all(&p).unwrap();
        let u = measure(deep.path(), u64::MAX).unwrap();
        assert!(!u.complete);
    }

    #[test]
    fn usage_lines_round_trip() {
        let u = LayerUsage {
            bytes: 12288,
            entries: 3,
            complete: false,
        };
        assert_eq!(parse_usage(&format_usage(&u)), Some(u));
        assert_eq!(parse_usage("12 3 maybe"), None);
        assert_eq!(parse_usage(""), None);
    }
}
