//! A thin, typed way to run `podman` (always rootless, as the calling user).
//!
//! Every call has a deadline and returns podman's own error text, so a
//! failure says what podman said rather than "exit status 125".

use std::ffi::OsStr;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use wait_timeout::ChildExt;

#[derive(Debug, thiserror::Error)]
pub enum PodmanError {
    #[error("cannot run podman: {0}; is it installed? (`lazaret doctor` checks)")]
    Spawn(std::io::Error),
    #[error("`podman {args}` failed ({status}): {stderr}")]
    Failed {
        args: String,
        status: String,
        stderr: String,
    },
    #[error("`podman {args}` did not finish within {secs} s")]
    Timeout { args: String, secs: u64 },
}

/// How long ordinary podman calls may take; image work passes its own.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The podman executable and the deadline for its calls.
#[derive(Debug, Clone)]
pub struct Podman {
    program: String,
}

impl Default for Podman {
    fn default() -> Self {
        Podman {
            program: "podman".into(),
        }
    }
}

impl Podman {
    /// The podman executable, for calls that stream their output.
    pub fn program(&self) -> &str {
        &self.program
    }

    /// Runs podman and returns its stdout (trimmed of the final newline).
    pub fn run<I, S>(&self, args: I) -> Result<String, PodmanError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.run_with(args, DEFAULT_TIMEOUT, None)
    }

    /// Like [`Podman::run`], with a deadline and optional bytes for stdin.
    pub fn run_with<I, S>(
        &self,
        args: I,
        limit: Duration,
        stdin: Option<&std::path::Path>,
    ) -> Result<String, PodmanError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let shown = args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        let mut cmd = Command::new(&self.program);
        cmd.args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match stdin {
            Some(path) => {
                let f = std::fs::File::open(path).map_err(PodmanError::Spawn)?;
                cmd.stdin(f);
            }
            None => {
                cmd.stdin(Stdio::null());
            }
        }
        let mut child = cmd.spawn().map_err(PodmanError::Spawn)?;
        // Drain both pipes on threads so a chatty podman cannot block on a
        // full pipe while we wait for it.
        let mut out_pipe = child.stdout.take().expect("piped");
        let mut err_pipe = child.stderr.take().expect("piped");
        let out_reader = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = out_pipe.read_to_end(&mut s);
            s
        });
        let err_reader = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = err_pipe.read_to_end(&mut s);
            s
        });
        let status = match child.wait_timeout(limit).map_err(PodmanError::Spawn)? {
            Some(status) => status,
            None => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(PodmanError::Timeout {
                    args: shown,
                    secs: limit.as_secs(),
                });
            }
        };
        let stdout = String::from_utf8_lossy(&out_reader.join().unwrap_or_default()).into_owned();
        let stderr = String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).into_owned();
        if status.success() {
            Ok(stdout.strip_suffix('\n').unwrap_or(&stdout).to_string())
        } else {
            Err(PodmanError::Failed {
                args: shown,
                status: status.to_string(),
                stderr: meaningful_stderr(&stderr),
            })
        }
    }

    /// The command for an interactive or streaming call (`exec -it`, ...).
    pub fn command(&self) -> Command {
        Command::new(&self.program)
    }

    /// Names of containers carrying `label=value` (running or not).
    pub fn containers_with_label(
        &self,
        label: &str,
        value: &str,
    ) -> Result<Vec<String>, PodmanError> {
        Ok(self
            .containers_with_label_running(label, value)?
            .into_iter()
            .map(|(name, _)| name)
            .collect())
    }

    /// Containers carrying `label=value` (running or not), each with
    /// whether it runs: one podman call where a name check each would be
    /// several.
    pub fn containers_with_label_running(
        &self,
        label: &str,
        value: &str,
    ) -> Result<Vec<(String, bool)>, PodmanError> {
        let out = self.run([
            "ps",
            "-a",
            "--filter",
            &format!("label={label}={value}"),
            "--format",
            "{{.Names}}\t{{.State}}",
        ])?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_once('\t'))
            // podman 4 prints "Up 3 minutes ago", later ones "running".
            .map(|(n, s)| (n.to_string(), s.starts_with("Up") || s == "running"))
            .collect())
    }

    /// `true` when the named container exists and is running.
    pub fn is_running(&self, name: &str) -> Result<bool, PodmanError> {
        match self.run([
            "container",
            "inspect",
            "--format",
            "{{.State.Running}}",
            name,
        ]) {
            Ok(s) => Ok(s.trim() == "true"),
            Err(PodmanError::Failed { stderr, .. }) if stderr.contains("no such container") => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Removes a container at once (no stop grace period); missing is fine.
    pub fn remove(&self, name: &str) -> Result<(), PodmanError> {
        self.run(["rm", "--force", "--time", "0", "--ignore", name])
            .map(drop)
    }

    /// `true` when the image exists in local storage.
    pub fn image_exists(&self, image: &str) -> Result<bool, PodmanError> {
        match self.run(["image", "exists", image]) {
            Ok(_) => Ok(true),
            Err(PodmanError::Failed { status, .. }) if status.contains("exit status: 1") => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

/// Runs `cmd` (output discarded) until it exits or `limit` passes, calling
/// `beat` every `every` meanwhile. `Ok(true)` when it exited successfully;
/// past the limit it is killed and `Ok(false)` returned.
pub fn run_with_heartbeat(
    mut cmd: Command,
    limit: Duration,
    every: Duration,
    beat: &mut dyn FnMut(),
) -> std::io::Result<bool> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.wait_timeout(every)? {
            return Ok(status.success());
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(false);
        }
        beat();
    }
}

/// podman prints warnings (e.g. "/ is not a shared mount") before the error;
/// keep the lines that say what went wrong.
fn meaningful_stderr(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.contains("level=warning"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    if lines.is_empty() {
        stderr.trim().to_string()
    } else {
        lines.join(" | ")
    }
}

/// The complete stdout lines of a container log in podman's k8s-file
/// format (`TIME STREAM P|F TEXT`; `P` lines are parts of a longer one).
/// A container started with `--log-driver k8s-file --log-opt path=FILE`
/// reports through FILE without a podman call to read it.
pub fn log_stdout_lines(log: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut partial = String::new();
    for l in log.lines() {
        let mut f = l.splitn(4, ' ');
        let (Some(_), Some(stream), Some(tag)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if stream != "stdout" {
            continue;
        }
        partial.push_str(f.next().unwrap_or(""));
        if tag == "F" {
            lines.push(std::mem::take(&mut partial));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_work_beats_while_it_runs() {
        let mut beats = 0;
        let mut cmd = Command::new("sleep");
        cmd.arg("0.45");
        let ok = run_with_heartbeat(
            cmd,
            Duration::from_secs(10),
            Duration::from_millis(100),
            &mut || beats += 1,
        )
        .unwrap();
        assert!(ok);
        assert!(beats >= 3, "{beats} beats");
        let mut cmd = Command::new("sleep");
        cmd.arg("5");
        let ok = run_with_heartbeat(
            cmd,
            Duration::from_millis(200),
            Duration::from_millis(50),
            &mut || {},
        )
        .unwrap();
        assert!(!ok, "killed at its limit");
    }

    #[test]
    fn log_lines_join_parts_and_skip_stderr() {
        let log = "2026-12-01T10:00:00Z stdout P {\"a\":\n2026-12-01T10:00:00Z stderr F noise\n2026-12-01T10:00:01Z stdout F 1}\n2026-12-01T10:00:02Z stdout F second\n";
        assert_eq!(log_stdout_lines(log), ["{\"a\":1}", "second"]);
    }

    #[test]
    fn warnings_are_dropped_from_errors() {
        let e = "time=\"x\" level=warning msg=\"/ is not a shared mount\"\nError: no such container foo\n";
        assert_eq!(meaningful_stderr(e), "Error: no such container foo");
    }
}
