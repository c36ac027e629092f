//! `lazaret-escalate`: asks the human on the host to run a command there.
//! Usage and exit codes are in `guide.md` (printed by `--help`).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use lazaret_escalate::client::{self, Settings};
use lazaret_escalate::{Status, classify, exit};

struct Args {
    justification: String,
    timeout: Option<Duration>,
    command: String,
}

enum Parsed {
    Run(Args),
    Exit(ExitCode),
}

fn usage_error(msg: &str) -> Parsed {
    eprintln!("lazaret-escalate: {msg}");
    eprintln!("usage: lazaret-escalate [--justify TEXT] [--timeout SECS] -- COMMAND [ARGS...]");
    eprintln!("       lazaret-escalate [--justify TEXT] [--timeout SECS] 'COMMAND STRING'");
    eprintln!("see lazaret-escalate --help");
    Parsed::Exit(ExitCode::from(exit::USAGE))
}

fn parse_timeout(s: &str) -> Option<Option<Duration>> {
    let secs: f64 = s.parse().ok()?;
    let d = Duration::try_from_secs_f64(secs).ok()?;
    Some((!d.is_zero()).then_some(d))
}

fn parse_args(raw: Vec<String>) -> Parsed {
    let mut justification = String::new();
    let mut timeout = None;
    let mut it = raw.into_iter();
    let mut words = Vec::new();
    let mut explicit = false;
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        match name.as_str() {
            "--" => {
                explicit = true;
                words.extend(it.by_ref());
                break;
            }
            "-h" | "--help" => {
                print!("{}", lazaret_escalate::GUIDE);
                return Parsed::Exit(ExitCode::SUCCESS);
            }
            "--version" => {
                println!(
                    "lazaret-escalate {} {}",
                    env!("CARGO_PKG_VERSION"),
                    lazaret_escalate::SESSION_GATE
                );
                return Parsed::Exit(ExitCode::SUCCESS);
            }
            "--justify" | "--timeout" => {
                let Some(value) = inline.or_else(|| it.next()) else {
                    return usage_error(&format!("{name} needs a value"));
                };
                if name == "--justify" {
                    justification = value;
                } else {
                    match parse_timeout(&value) {
                        Some(t) => timeout = t,
                        None => return usage_error(&format!("bad --timeout `{value}`")),
                    }
                }
            }
            s if s.starts_with('-') && s.len() > 1 => {
                return usage_error(&format!("unknown option `{s}`"));
            }
            _ => {
                // Options end at the first word: `lazaret-escalate ls -la` works.
                words.push(arg);
                words.extend(it.by_ref());
                break;
            }
        }
    }
    let command = match words.as_slice() {
        [] => return usage_error("no command given"),
        [one] if !explicit => one.clone(),
        many => classify::join(many),
    };
    Parsed::Run(Args {
        justification,
        timeout,
        command,
    })
}

fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("lazaret-escalate: {msg}");
    ExitCode::from(code)
}

/// `--confined-exec -- COMMAND ARGS...`: seccomp on, then COMMAND.
fn confined_exec(rest: &[std::ffi::OsString]) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let argv = match rest {
        [dd, argv @ ..] if dd == "--" && !argv.is_empty() => argv,
        _ => return fail(exit::USAGE, "usage: --confined-exec -- COMMAND [ARGS...]"),
    };
    // No command of a session before the host declared the sandbox
    // checked (a fixed path: no variable of the session can move it).
    if let Err(e) = wait_until_ready(std::path::Path::new(lazaret_escalate::READY_MARKER)) {
        return fail(exit::UNAVAILABLE, e);
    }
    if let Err(e) = lazaret_escalate::confine::install() {
        return fail(
            exit::USAGE,
            format_args!("cannot install the seccomp filter: {e}"),
        );
    }
    let e = std::process::Command::new(&argv[0]).args(&argv[1..]).exec();
    // As a shell says it: 127 when the command is missing, else 126.
    let code = if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    fail(code, format_args!("{}: {e}", argv[0].to_string_lossy()))
}

/// How long a session waits for its sandbox's self-test: longer than the
/// host's own deadline for it, which tears the sandbox down (and with it
/// this process) when it passes.
const READY_DEADLINE: Duration = Duration::from_secs(180);

/// The longest pause between two looks at the marker: each look is a
/// file-system round trip through the runtime, and a cold start may have
/// many sessions waiting at once while the self-test needs the CPU.
const READY_POLL_MAX: Duration = Duration::from_millis(16);

fn wait_until_ready(marker: &std::path::Path) -> Result<(), String> {
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(1);
    while !marker.exists() {
        if started.elapsed() > READY_DEADLINE {
            return Err(format!(
                "the sandbox was not declared ready within {} s ({} is missing); start the session again",
                READY_DEADLINE.as_secs(),
                marker.display()
            ));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(READY_POLL_MAX);
    }
    Ok(())
}

fn main() -> ExitCode {
    // Lazaret starts every session through this (see `confine`); the
    // command's arguments need not be UTF-8.
    let os: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if os
        .first()
        .is_some_and(|a| a == lazaret_escalate::confine::FLAG)
    {
        return confined_exec(&os[1..]);
    }
    let mut raw = Vec::new();
    for a in std::env::args_os().skip(1) {
        match a.into_string() {
            Ok(s) => raw.push(s),
            Err(_) => return fail(exit::USAGE, "arguments must be valid UTF-8"),
        }
    }
    // The host's self-test of a new sandbox (not for agents): one JSON
    // argument in, one JSON report out.
    if raw.first().map(String::as_str) == Some("selftest") {
        return selftest(raw.get(1).map(String::as_str));
    }
    // The domain's Session Host (started by the coordinator, not for
    // agents): holds the sessions' PTYs until its connection ends.
    if raw.first().map(String::as_str) == Some("session-host") {
        return match (raw.get(1), raw.get(2)) {
            (Some(socket), Some(token)) => {
                match lazaret_escalate::session_host::run(socket, token) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => fail(exit::UNAVAILABLE, e),
                }
            }
            _ => fail(
                exit::USAGE,
                "usage: lazaret-escalate session-host SOCKET TOKEN",
            ),
        };
    }
    // The Agent Sandbox's PID 1 (the host starts every sandbox with it).
    if raw.first().map(String::as_str) == Some("init") {
        return init(raw.get(1).map(String::as_str));
    }
    let args = match parse_args(raw) {
        Parsed::Run(a) => a,
        Parsed::Exit(code) => return code,
    };
    let (cred, profile) = match client::credential_from_env() {
        Ok(c) => c,
        Err(e) => {
            return fail(
                e.exit_code(),
                format_args!("{e}; run this from a shell that `lazaret` started"),
            );
        }
    };
    let cwd = match std::env::current_dir() {
        Ok(p) => match p.into_os_string().into_string() {
            Ok(s) => s,
            Err(_) => return fail(exit::USAGE, "the current directory is not valid UTF-8"),
        },
        Err(e) => return fail(exit::USAGE, format_args!("no current directory: {e}")),
    };
    let req = match client::build_request(&cred, &profile, &cwd, &args.command, &args.justification)
    {
        Ok(r) => r,
        Err(e) => return fail(exit::USAGE, format_args!("cannot send this request: {e}")),
    };
    let resp = match client::exchange(&Settings::from_env(args.timeout), &req) {
        Ok(r) => r,
        Err(e) => return fail(e.exit_code(), e),
    };
    match resp.status {
        Status::Approved => {
            // Output first, so a reader sees the command's own text before ours.
            let _ = std::io::stdout().write_all(resp.stdout.as_bytes());
            let _ = std::io::stdout().flush();
            let _ = std::io::stderr().write_all(resp.stderr.as_bytes());
            let notes = resp.edited_command.is_some() || resp.truncated;
            if notes && !resp.stderr.is_empty() && !resp.stderr.ends_with('\n') {
                eprintln!();
            }
            if let Some(edited) = &resp.edited_command {
                eprintln!("lazaret-escalate: the human edited the command; what ran: {edited}");
            }
            if resp.truncated {
                eprintln!("lazaret-escalate: the host cut the output short (output limit)");
            }
            // Host commands exit 0-255 (128+n for signal n); anything else is
            // a host fault, reported as a plain failure.
            ExitCode::from(
                resp.exit_code
                    .and_then(|c| u8::try_from(c).ok())
                    .unwrap_or(1),
            )
        }
        Status::Denied => fail(
            exit::DENIED,
            format_args!(
                "denied; nothing ran: {}",
                resp.denied_reason.as_deref().unwrap_or("").trim_end()
            ),
        ),
        Status::Error => fail(
            exit::HOST_ERROR,
            format_args!(
                "the host refused or could not run the request; nothing ran: {}",
                resp.stderr.trim_end()
            ),
        ),
    }
}

/// The Agent Sandbox's PID 1: the start-up self-test first, its report on
/// stdout after [`REPORT_MARKER`](lazaret_escalate::selftest::REPORT_MARKER)
/// for the host to read from the sandbox's log; then an init that reaps
/// every orphan re-parented to it until SIGTERM or SIGINT (`podman stop`).
/// On SIGUSR1 it starts the domain's Session Host (with the token the
/// coordinator left in the escalation folder) as its own child, and passes
/// SIGUSR2 on to the hosts it started: a checkpoint of gVisor restores
/// only what descends from the sandbox's first process, not what `podman
/// exec` started.
/// This binary is mounted read-only from the host: nothing the agent
/// writes into the image or a persistent layer stands between the
/// self-test and its report.
fn init(json: Option<&str>) -> ExitCode {
    use lazaret_escalate::selftest;
    use std::io::Write as _;
    let Some(x) = json.and_then(|j| serde_json::from_str::<selftest::Expectations>(j).ok()) else {
        // No report: the host's start fails closed when the sandbox stops.
        return fail(
            exit::USAGE,
            "usage: lazaret-escalate init EXPECTATIONS-JSON",
        );
    };
    // Signals are taken synchronously (sigwait), so a child that ends
    // between two waits is never missed. The mask is this process's own:
    // nothing in the sandbox is its child by fork.
    use nix::sys::signal::{SigSet, Signal};
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let mut set = SigSet::empty();
    for sig in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
    ] {
        set.add(sig);
    }
    let mut hosts: Vec<nix::unistd::Pid> = Vec::new();
    if let Err(e) = set.thread_block() {
        return fail(exit::USAGE, format_args!("cannot block signals: {e}"));
    }
    let report = selftest::run(&x);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{}{}",
        selftest::REPORT_MARKER,
        serde_json::to_string(&report).unwrap_or_else(|_| "{}".into())
    );
    let _ = out.flush();
    drop(out);
    loop {
        match set.wait() {
            // Every child that ended, not one per signal (they coalesce).
            Ok(Signal::SIGCHLD) => {
                while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                    if status == WaitStatus::StillAlive {
                        break;
                    }
                    if let Some(pid) = status.pid() {
                        hosts.retain(|h| *h != pid);
                    }
                }
            }
            Ok(Signal::SIGUSR1) => {
                // One host at a time (the agent can signal init too): the
                // ended ones reaped first, as SIGUSR1 is taken before a
                // SIGCHLD that came with it.
                while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                    match status.pid() {
                        Some(pid) => hosts.retain(|h| *h != pid),
                        None => break,
                    }
                }
                if hosts.is_empty()
                    && let Some(pid) = start_session_host()
                {
                    hosts.push(pid);
                }
            }
            Ok(Signal::SIGUSR2) => {
                for pid in &hosts {
                    let _ = nix::sys::signal::kill(*pid, Signal::SIGUSR2);
                }
            }
            Ok(_) => return ExitCode::SUCCESS,
            Err(_) => {}
        }
    }
}

/// Starts the Session Host as init's child (confined as `podman exec`
/// started it before), its standard streams on /dev/null; `None` when the
/// coordinator left no token or it cannot start.
fn start_session_host() -> Option<nix::unistd::Pid> {
    use lazaret_escalate::session_host::{SOCKET_PATH, TOKEN_PATH};
    let token = std::fs::read_to_string(TOKEN_PATH).ok()?;
    let token = token.trim();
    if token.is_empty() {
        return None;
    }
    let mut host = std::process::Command::new(lazaret_escalate::BINARY_PATH);
    // Not init's blocked signals: the host starts with none blocked.
    // SAFETY: between fork and exec only sigemptyset and pthread_sigmask,
    // async-signal-safe, on memory of this frame.
    #[allow(unsafe_code)]
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut host, || {
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            Ok(())
        });
    }
    let child = host
        .args([
            lazaret_escalate::confine::FLAG,
            "--",
            lazaret_escalate::BINARY_PATH,
            "session-host",
            SOCKET_PATH,
            token,
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    Some(nix::unistd::Pid::from_raw(child.id() as i32))
}

fn selftest(json: Option<&str>) -> ExitCode {
    use lazaret_escalate::selftest;
    let Some(x) = json.and_then(|j| serde_json::from_str::<selftest::Expectations>(j).ok()) else {
        return fail(
            exit::USAGE,
            "usage: lazaret-escalate selftest EXPECTATIONS-JSON",
        );
    };
    let report = selftest::run(&x);
    println!(
        "{}",
        serde_json::to_string(&report).unwrap_or_else(|_| "{}".into())
    );
    // The report is the answer, failed checks included: exit 0 once it is
    // printed, so the host reads it rather than a bare exit status.
    ExitCode::SUCCESS
}
