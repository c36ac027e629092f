//! A Client Session's identity (its Session Anchor and delegated
//! credential), connecting to the Session Coordinator, and running the
//! session's command in the sandbox.

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use lazaret_widgets::visible::visible;

use super::context;
pub(crate) use crate::coordinator::anchor::{ExecSpec, SessionAnchor};
use crate::coordinator::client;
use crate::coordinator::escalation::Verdict;
use crate::coordinator::protocol::{
    ClientMsg, CoordMsg, DomainStatus, EXIT_STOPPED, FrameError, FrameReader, write_frame,
};
use crate::host::HostEnv;
use crate::rundir::RuntimeDir;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use tokio::signal::unix::{SignalKind, signal};

use super::terminal::OutputFilter;

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn announce(domain: &DomainStatus) {
    if let Some(failed) = &domain.degraded {
        eprintln!(
            "lazaret: !! sandbox {} is DEGRADED (started with --allow-degraded): its self-test failed: {}",
            domain.sandbox,
            lazaret_widgets::visible::make_visible(failed).0
        );
    }
    for gap in &domain.limit_gaps {
        eprintln!("lazaret: {gap}");
    }
    if !domain.gvisor {
        eprintln!(
            "lazaret: !! sandbox {} runs under {}: NOT gVisor-isolated, the agent shares the host kernel",
            domain.sandbox, domain.runtime
        );
    }
}

/// Prints a start-up step on stderr as `lazaret: [ 1.2s] step`, the time
/// counted from when this printer was made.
pub(crate) fn step_printer() -> impl FnMut(&str) {
    let started = Instant::now();
    move |step: &str| {
        // One write per line (stderr is unbuffered).
        let line = format!(
            "lazaret: [{:>4.1}s] {step}\n",
            started.elapsed().as_secs_f64()
        );
        let _ = std::io::stderr().write_all(line.as_bytes());
    }
}

/// `work`, unless SIGINT, SIGTERM or SIGHUP comes first: then `Err` with
/// the signal, and `work` is dropped (a connection it held closes).
pub(crate) async fn unless_signalled<T>(work: impl Future<Output = T>) -> Result<Result<T, i32>> {
    let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut hup = signal(SignalKind::hangup()).context("cannot watch SIGHUP")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    Ok(tokio::select! {
        done = work => Ok(done),
        _ = int.recv() => Err(SIGINT),
        _ = term.recv() => Err(SIGTERM),
        _ = hup.recv() => Err(SIGHUP),
    })
}

/// Says that a signal (Ctrl-C) cancelled the start of `hash`'s domain
/// before `what` ran, and gives the exit code a shell gives a command
/// ended by that signal (130 for SIGINT).
///
/// This session's connection is closed: the coordinator counts it gone at
/// its next step, and a domain left without sessions is taken down once
/// its start is complete (it never tears down under a start in progress).
pub(crate) fn start_cancelled(hash: &str, what: &str, sig: i32) -> ExitCode {
    let name = match sig {
        SIGINT => "interrupted (Ctrl-C)",
        SIGTERM => "terminated (SIGTERM)",
        _ => "hung up (SIGHUP)",
    };
    eprintln!(
        "lazaret: {name} while domain {hash} was starting; {what} did not run. \
         Unless another session uses the domain, its Session Coordinator completes \
         the start (it never stops one halfway) and then takes down all it made \
         (`lazaret status` lists the domain until then)."
    );
    ExitCode::from(128 + sig as u8)
}

/// Runs `argv` in the sandbox through `podman exec`, as one Client Session.
///
/// Whatever of the exec's stdout and stderr is a terminal is read here and
/// passed through [`OutputFilter`] (decisions.md D10); a pipe or file gets
/// the bytes as they are. An exec (not `--tty`) never reads a terminal: its
/// stdin is then empty, so no key meant for a prompt reaches the sandbox.
pub(crate) fn run_in_sandbox(
    explicit: &Option<PathBuf>,
    env: &dyn HostEnv,
    profile: Option<&str>,
    workspace: Option<&Path>,
    argv: &[String],
    interactive: bool,
    purpose: &str,
) -> Result<ExitCode> {
    let (config, ctx, _) = context(explicit, env, profile, workspace)?;
    // What is known now is said now, not after a coordinator failed.
    super::preboot(
        &config,
        &ctx.anchor.name(),
        ctx.anchor.workspace(),
        env,
        true,
    )?;
    let session = SessionAnchor::new()?;
    let stdin_tty = nix::unistd::isatty(std::io::stdin()).unwrap_or(false);
    let out_tty = nix::unistd::isatty(std::io::stdout()).unwrap_or(false);
    let err_tty = nix::unistd::isatty(std::io::stderr()).unwrap_or(false);
    let tty = interactive && stdin_tty;
    let has_human = super::prompt::open_tty().is_some();
    let rt = runtime()?;
    let mut progress = step_printer();
    let hello = session.hello(purpose, has_human);
    let hash = ctx.anchor.hash().to_string();
    let reach = || format!("cannot reach domain {hash}");
    let what = if purpose == "shell" {
        "the shell"
    } else {
        "the command"
    };
    // Without a terminal to hand over, the exec starts as soon as the
    // sandbox runs and its command waits inside for the self-test (a cold
    // start then does not pay podman's exec after the check). A terminal
    // session waits: `podman exec --tty` takes the terminal at once.
    // A signal meanwhile cancels the start (the connection closes).
    let connected = rt.block_on(unless_signalled(async {
        if tty {
            client::connect(&ctx, &hello, true, &mut progress)
                .await
                .map(|c| client::Connected::Up(Box::new(c)))
        } else {
            client::connect_early(&ctx, &hello, &mut progress).await
        }
    }))?;
    let connected = match connected {
        Ok(c) => c.with_context(reach)?,
        Err(sig) => return Ok(start_cancelled(&hash, what, sig)),
    };
    // From here on a signal that ends Lazaret also ends a prompt (as a
    // denial) and the exec, and the terminal is restored.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [SIGTERM, SIGHUP, SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("cannot install the signal handlers")?;
    }
    let _credential = session.publish_credential(&ctx.certs_dir)?;
    let mut cmd = tokio::process::Command::new("podman");
    let spec = session.exec_args(
        &ctx.anchor.sandbox_name(),
        tty,
        env.var("TERM").as_deref(),
        argv,
    )?;
    cmd.args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)));
    if stdin_tty && !tty {
        cmd.stdin(Stdio::null());
    }
    if out_tty {
        cmd.stdout(Stdio::piped());
    }
    if err_tty {
        cmd.stderr(Stdio::piped());
    }
    let (client, child) = match connected {
        client::Connected::Up(client) => (*client, None),
        client::Connected::Checking(checking) => {
            let child = {
                let _in_runtime = rt.enter();
                cmd.spawn().context("cannot run podman exec")?
            };
            let welcome = rt.block_on(unless_signalled(checking.welcome(&mut progress)))?;
            // Torn down with its sandbox anyway; not left behind.
            let end_exec = |mut child: tokio::process::Child| {
                let _ = rt.block_on(async {
                    let _ = child.start_kill();
                    child.wait().await
                });
            };
            match welcome {
                Ok(Ok(client)) => (client, Some(child)),
                Ok(Err(e)) => {
                    end_exec(child);
                    return Err(anyhow::Error::new(e).context(reach()));
                }
                Err(sig) => {
                    end_exec(child);
                    return Ok(start_cancelled(&hash, what, sig));
                }
            }
        }
    };
    announce(&client.domain);
    let mut control = Control::new(client.stream);
    let mut guard = (out_tty || err_tty).then(TerminalGuard::new);
    let outcome = rt.block_on(async {
        let mut child = match child {
            Some(child) => child,
            None => cmd.spawn().context("cannot run podman exec")?,
        };
        let mut out = child.stdout.take();
        let mut err = child.stderr.take();
        let (mut out_filter, mut err_filter) = (OutputFilter::default(), OutputFilter::default());
        let (mut out_buf, mut err_buf) = (vec![0u8; 16384], vec![0u8; 16384]);
        let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
        let mut hup = signal(SignalKind::hangup()).context("cannot watch SIGHUP")?;
        let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
        let mut status = None;
        // After the exec ends, what it wrote last is still read, briefly.
        let mut drain_until = None;
        let mut listening = true;
        // Messages read while a prompt was up, in order.
        let mut queued = VecDeque::new();
        // Who stopped the domain under this session, if someone did.
        let mut stopped = None;
        loop {
            if let Some(s) = status
                && out.is_none()
                && err.is_none()
            {
                // An exec killed under us (137, or podman's 125-127, 255)
                // may end before the coordinator's notice is read: wait
                // for it briefly. A command's own exit is not delayed.
                if stopped.is_none() && listening && exit_code_of(s) >= 125 {
                    while let Ok(Ok(msg)) = tokio::time::timeout(
                        Duration::from_millis(500),
                        next_msg(&mut queued, &mut control.frames),
                    )
                    .await
                    {
                        if let CoordMsg::ShuttingDown { stopped_by } = msg {
                            stopped = stopped_by;
                            break;
                        }
                    }
                }
                return Ok(match stopped {
                    Some(by) => Ended::Stopped(by),
                    None => Ended::Exited(s),
                });
            }
            // While a prompt is up this task does not read the pipes: the
            // sandbox's output waits there and shows after the answer.
            tokio::select! {
                s = child.wait(), if status.is_none() => {
                    status = Some(s.context("podman exec failed")?);
                    drain_until = Some(tokio::time::Instant::now() + Duration::from_secs(2));
                }
                _ = sleep_until_opt(drain_until) => return Ok(match stopped {
                    Some(by) => Ended::Stopped(by),
                    None => Ended::Exited(status.unwrap_or_default()),
                }),
                n = read_some(&mut out, &mut out_buf) => match n {
                    Ok(n) if n > 0 => pass(&mut std::io::stdout(), &out_filter.filter(&out_buf[..n])),
                    _ => out = None,
                },
                n = read_some(&mut err, &mut err_buf) => match n {
                    Ok(n) if n > 0 => pass(&mut std::io::stderr(), &err_filter.filter(&err_buf[..n])),
                    _ => err = None,
                },
                _ = term.recv() => return Ok(Ended::Signal(child, SIGTERM)),
                _ = hup.recv() => return Ok(Ended::Signal(child, SIGHUP)),
                _ = int.recv() => return Ok(Ended::Signal(child, SIGINT)),
                msg = next_msg(&mut queued, &mut control.frames), if listening => match msg {
                    Ok(CoordMsg::Prompt { prompt }) => {
                        let Some(t) = super::prompt::open_tty() else {
                            let verdict = Verdict::Deny { reason: Some("no terminal to ask on".into()) };
                            let _ = write_frame(&mut control.write, &ClientMsg::Decision { request_id: prompt.request_id, verdict }).await;
                            continue;
                        };
                        let pid = if tty { child.id() } else { None };
                        let Some(verdict) = ask_listening(prompt.clone(), t, pid, &stop, &mut control.frames, &mut queued).await else {
                            // Withdrawn: nobody waits for an answer.
                            continue;
                        };
                        let abort = verdict == Verdict::Abort;
                        let _ = write_frame(&mut control.write, &ClientMsg::Decision { request_id: prompt.request_id, verdict }).await;
                        if abort {
                            let _ = child.kill().await;
                            return Ok(Ended::Aborted);
                        }
                    }
                    // Withdrawn before its prompt was shown (it waited
                    // behind another, and is not asked): a note.
                    Ok(CoordMsg::Withdrawn { request_id, reason }) => {
                        eprint!("\r\nlazaret: request {} withdrawn: {}; nothing runs\r\n", visible(&request_id), visible(&reason));
                    }
                    Ok(CoordMsg::Warning { message }) => eprint!("\r\nlazaret: !! {}\r\n", visible(&message)),
                    // The domain is going down: the sandbox ends, and with
                    // it this exec; who asked is said when it has ended.
                    Ok(CoordMsg::ShuttingDown { stopped_by }) => {
                        stopped = stopped_by;
                        listening = false;
                    }
                    // The coordinator died (the sandbox lives on): attach as
                    // the same session to a new one, which adopts the domain
                    // and counts this session.
                    Err(_) => {
                        let hello = session.hello(purpose, has_human);
                        match client::reconnect(&ctx, &hello).await {
                            Ok(c) => {
                                control = Control::new(c.stream);
                                eprint!("\r\nlazaret: the Session Coordinator died; reconnected to a new one (same session)\r\n");
                            }
                            Err(e) => {
                                eprint!("\r\nlazaret: the Session Coordinator died and none could take over: {e}\r\n");
                                listening = false;
                            }
                        }
                    }
                    Ok(_) => {}
                },
            }
        }
    });
    let code = match outcome {
        Ok(Ended::Exited(status)) => Ok(exit_code(status)),
        Ok(Ended::Aborted) => {
            // Not the 137 of a kill: the human chose this (issue 43).
            eprintln!(
                "lazaret: you aborted the session at its request's prompt; the exec in the sandbox was ended (exit code {EXIT_ABORTED})"
            );
            Ok(ExitCode::from(EXIT_ABORTED))
        }
        Ok(Ended::Stopped(by)) => {
            drop(guard.take());
            eprintln!("lazaret: {by}; the session's command was ended (exit code {EXIT_STOPPED})");
            Ok(ExitCode::from(EXIT_STOPPED))
        }
        Ok(Ended::Signal(mut child, sig)) => {
            // The exec ends with Lazaret; its exit code says which signal.
            if let Some(pid) = child.id() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            rt.block_on(async {
                if tokio::time::timeout(Duration::from_secs(5), child.wait())
                    .await
                    .is_err()
                {
                    let _ = child.kill().await;
                }
            });
            eprintln!("lazaret: stopped by signal {sig}; the exec in the sandbox was ended");
            Ok(ExitCode::from(128 + sig as u8))
        }
        Err(e) => Err(e),
    };
    drop(guard);
    // Closing the connection ends the session; the last one tears down.
    drop(control);
    drop(rt);
    code
}

/// `lazaret exec`'s exit code when the human aborted at its prompt, as a
/// shell's for an interrupted command.
pub const EXIT_ABORTED: u8 = 130;

/// How a plain session's exec ended.
enum Ended {
    Exited(std::process::ExitStatus),
    /// Someone else stopped the domain (`lazaret down`).
    Stopped(crate::coordinator::protocol::StoppedBy),
    Signal(tokio::process::Child, i32),
    /// The human aborted the session at a request's prompt.
    Aborted,
}

/// The next message from the coordinator: one read while a prompt was up
/// first.
async fn next_msg(
    queued: &mut VecDeque<Result<CoordMsg, FrameError>>,
    frames: &mut Frames,
) -> Result<CoordMsg, FrameError> {
    match queued.pop_front() {
        Some(msg) => msg,
        None => frames.next().await,
    }
}

type Frames = FrameReader<tokio::net::unix::OwnedReadHalf>;

/// A plain session's control stream. Its frames are read inside
/// `select!` beside the exec's output: through [`FrameReader`], a large
/// frame half-read when output wins is finished later, not lost.
struct Control {
    frames: Frames,
    write: tokio::net::unix::OwnedWriteHalf,
}

impl Control {
    fn new(stream: tokio::net::UnixStream) -> Self {
        let (read, write) = stream.into_split();
        Control {
            frames: FrameReader::new(read),
            write,
        }
    }
}

/// Asks the human about `prompt` on `tty` while still listening to the
/// coordinator: a withdrawal of this request (its requester went away)
/// ends the prompt with a note and gives `None`, as does losing the
/// coordinator (the answer has nowhere to go). Other messages are kept in
/// `queued`; a queued prompt withdrawn meanwhile is dropped from it.
async fn ask_listening(
    prompt: crate::coordinator::escalation::Prompt,
    tty: std::fs::File,
    child: Option<u32>,
    stop: &Arc<AtomicBool>,
    frames: &mut Frames,
    queued: &mut VecDeque<Result<CoordMsg, FrameError>>,
) -> Option<Verdict> {
    let withdrawal = Arc::new(super::prompt::Withdrawal::default());
    let request_id = prompt.request_id.clone();
    let task = tokio::task::spawn_blocking({
        let (stop, withdrawal) = (Arc::clone(stop), Arc::clone(&withdrawal));
        move || super::prompt::ask(&prompt, tty, child, &stop, &withdrawal)
    });
    tokio::pin!(task);
    let mut reading = true;
    let verdict = loop {
        tokio::select! {
            v = &mut task => break v.unwrap_or(Verdict::Deny {
                reason: Some("the prompt failed".into()),
            }),
            msg = frames.next::<CoordMsg>(), if reading => {
                let why = match msg {
                    Ok(CoordMsg::Withdrawn { request_id: id, reason }) if id == request_id => Some(reason),
                    Ok(CoordMsg::Withdrawn { request_id: id, reason }) => {
                        // Never asked; its note shows after this prompt.
                        queued.retain(|m| !matches!(m, Ok(CoordMsg::Prompt { prompt }) if prompt.request_id == id));
                        queued.push_back(Ok(CoordMsg::Withdrawn { request_id: id, reason }));
                        None
                    }
                    Ok(other) => {
                        queued.push_back(Ok(other));
                        None
                    }
                    Err(e) => {
                        reading = false;
                        queued.push_back(Err(e));
                        Some("the Session Coordinator went away".to_string())
                    }
                };
                if let Some(why) = why
                    && let Ok(mut w) = withdrawal.lock()
                {
                    *w = Some(why);
                }
            }
        }
    };
    let gone = withdrawal.lock().map_or(true, |w| w.is_some());
    (!gone).then_some(verdict)
}

/// Reads what `r` has, or waits forever once it is closed (`None`).
async fn read_some(
    r: &mut Option<impl tokio::io::AsyncRead + Unpin>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    use tokio::io::AsyncReadExt;
    match r {
        Some(r) => r.read(buf).await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Writes filtered output to the terminal.
fn pass(w: &mut impl Write, bytes: &[u8]) {
    let _ = w.write_all(bytes);
    let _ = w.flush();
}

/// While a plain session writes to a terminal: on the way out (also after a
/// signal) its modes are reset and input the terminal holds is thrown away,
/// so nothing left over is read by the user's shell.
struct TerminalGuard;

impl TerminalGuard {
    fn new() -> Self {
        TerminalGuard
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        if let Some(mut tty) = super::prompt::open_tty() {
            // Resetting origin mode moves the cursor to the top left: the
            // cursor is saved around the reset, so the shell's next prompt
            // comes below the output instead of over its first line. The
            // restore brings back the saved colours and character set too:
            // those are reset again after it (neither moves the cursor).
            let _ = tty.write_all(
                format!(
                    "\x1b7{}\x1b8\x1b[0m\x1b(B\x0f",
                    super::terminal::RESET_MODES
                )
                .as_bytes(),
            );
            let _ = tty.flush();
            super::terminal::flush_input(&tty);
        }
    }
}

/// How long a session's delegated credential is valid (it is renewed at
/// half of it); `LAZARET_CREDENTIAL_LIFETIME_SECS` shortens it for tests.
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    ExitCode::from(exit_code_of(status))
}

/// A process's exit status as a shell's `$?` has it.
fn exit_code_of(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c.clamp(0, 255) as u8,
        (None, Some(sig)) => (128 + sig).clamp(0, 255) as u8,
        _ => 1,
    }
}

pub(crate) use crate::coordinator::client::query;

/// What `lazaret shell` runs in the sandbox.
pub(crate) fn shell_argv() -> Vec<String> {
    vec!["/bin/bash".to_string(), "-l".to_string()]
}

/// Control sockets in the runtime folder.
pub(crate) fn sockets(rundir: &RuntimeDir) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(rundir.path())
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("lazaret_coord_") && n.ends_with(".sock"))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}
