//! The Session Coordinator's log: `tracing` events in
//! `{domain_root}/coordinator.log`, bounded in size. When the file would
//! pass the bound it becomes `coordinator.log.1` (replacing the older one)
//! and a new file starts, so a domain's logs never take more than twice the
//! bound. The process's stderr follows the current file, so a panic lands
//! there too. `lazaret logs [PROFILE]` shows it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Bytes a log file may reach before it rotates.
pub const DEFAULT_MAX_BYTES: u64 = 1024 * 1024;
/// Overrides [`DEFAULT_MAX_BYTES`] (tests and debugging); at least 256.
pub const MAX_BYTES_ENV: &str = "LAZARET_LOG_MAX_BYTES";

/// The previous file of `log`.
pub fn rotated(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(".1");
    PathBuf::from(name)
}

/// A file writer that rotates by size.
#[derive(Debug)]
pub struct RotatingFile {
    path: PathBuf,
    max_bytes: u64,
    file: File,
    len: u64,
    /// Point fd 2 at each new file.
    follow_stderr: bool,
}

impl RotatingFile {
    pub fn open(path: &Path, max_bytes: u64, follow_stderr: bool) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let len = file.metadata()?.len();
        let mut f = RotatingFile {
            path: path.to_path_buf(),
            max_bytes: max_bytes.max(256),
            file,
            len,
            follow_stderr,
        };
        f.point_stderr();
        Ok(f)
    }

    fn point_stderr(&mut self) {
        if self.follow_stderr {
            let _ = nix::unistd::dup2_stderr(&self.file);
        }
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        std::fs::rename(&self.path, rotated(&self.path))?;
        self.file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.len = 0;
        self.point_stderr();
        Ok(())
    }
}

impl Write for RotatingFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.len > 0 && self.len + buf.len() as u64 > self.max_bytes {
            // A failed rotation must not lose the line: keep appending.
            let _ = self.rotate();
        }
        let n = self.file.write(buf)?;
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// The bound for this process: [`MAX_BYTES_ENV`] or the default.
pub fn max_bytes() -> u64 {
    std::env::var(MAX_BYTES_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_MAX_BYTES)
}

/// Sends this process's `tracing` events (and its stderr) to `path`.
pub fn init(path: &Path) -> std::io::Result<()> {
    let writer = RotatingFile::open(path, max_bytes(), true)?;
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_target(false)
        .with_writer(std::sync::Mutex::new(writer))
        .finish();
    // A second init (tests) keeps the first subscriber.
    let _ = tracing::subscriber::set_global_default(subscriber);
    Ok(())
}

/// The last `lines` lines of the log and its rotated predecessor, oldest
/// first, as stored (the caller makes them visible).
pub fn tail(path: &Path, lines: usize) -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    for p in [rotated(path), path.to_path_buf()] {
        if let Ok(bytes) = std::fs::read(&p) {
            all.extend(String::from_utf8_lossy(&bytes).lines().map(str::to_string));
        }
    }
    let skip = all.len().saturating_sub(lines);
    all.split_off(skip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_at_the_bound_and_keeps_one_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("coordinator.log");
        let mut w = RotatingFile::open(&log, 300, false).unwrap();
        for i in 0..100 {
            writeln!(w, "line {i:03} {}", "x".repeat(40)).unwrap();
        }
        let cur = std::fs::metadata(&log).unwrap().len();
        let old = std::fs::metadata(rotated(&log)).unwrap().len();
        assert!(cur <= 300 && old <= 300, "{cur} {old}");
        assert!(!dir.path().join("coordinator.log.2").exists());
        let t = tail(&log, 3);
        assert_eq!(t.len(), 3);
        assert!(t[2].starts_with("line 099"), "{t:?}");
    }
}
