//! Commands that go through the Session Coordinator: shell, exec, status,
//! down, audit, and the hidden `coordinator` entry point itself.

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lazaret_widgets::visible::visible;

use crate::config::{Config, HostVars, ResolvedProfile};
use crate::coordinator::client::{self, ClientError, DomainContext, Hello};
use crate::coordinator::escalation::Verdict;
use crate::coordinator::protocol::{
    ClientMsg, CoordMsg, DomainStatus, FrameError, PROTOCOL_VERSION, read_frame, write_frame,
};
use crate::coordinator::store::{Store, Verification};
use crate::engine::Engine;
use crate::host::HostEnv;
use crate::rundir::RuntimeDir;
use lazaret_escalate::signing::SessionKey;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use tokio::signal::unix::{SignalKind, signal};

use super::terminal::OutputFilter;

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The domain of `profile` and `workspace` (default: the current folder).
pub(crate) fn context(
    explicit: &Option<PathBuf>,
    env: &dyn HostEnv,
    profile: Option<&str>,
    workspace: Option<&Path>,
) -> Result<(Config, DomainContext, RuntimeDir)> {
    let launcher = crate::ui::Launcher::new(crate::ui::Mode::Shell, explicit, env)?;
    let workspace = match workspace {
        Some(p) => p.to_path_buf(),
        None => super::current_dir()?,
    };
    let ctx = launcher.context(profile, &workspace)?;
    Ok((launcher.config, ctx, launcher.rundir))
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

/// A Client Session's identity: its id and its Session Anchor key, whose
/// private half never leaves this process; each exec gets a delegated,
/// expiring credential (decisions.md D4). Shared by `lazaret shell`/`exec`
/// and every tab of `lazaret ui`.
pub(crate) struct SessionAnchor {
    pub(crate) id: String,
    key: Arc<SessionKey>,
}

impl std::fmt::Debug for SessionAnchor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionAnchor")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl SessionAnchor {
    pub(crate) fn new() -> Result<Self> {
        Ok(SessionAnchor {
            id: uuid::Uuid::new_v4().to_string(),
            key: Arc::new(SessionKey::generate().context("cannot create the Session Anchor key")?),
        })
    }

    /// The handshake of this session.
    pub(crate) fn hello(&self, purpose: &str, interactive: bool) -> Hello {
        Hello {
            session_id: Some(self.id.clone()),
            session_key: Some(hex(self.key.public_key().as_bytes())),
            purpose: purpose.into(),
            interactive,
        }
    }

    /// Publishes this session's delegated credential in the domain's
    /// certs folder (memory-backed, read-only in the sandbox), where the
    /// escalation client reads it for every request; renewed at half its
    /// lifetime while the returned guard lives, removed when it drops. The
    /// credential never travels in podman's arguments, environment or
    /// saved container state (decisions.md D4).
    pub(crate) fn publish_credential(&self, certs_dir: &Path) -> Result<CredentialFile> {
        let path = certs_dir.join(lazaret_escalate::signing::credential_file_name(&self.id));
        let write = {
            let (key, id, path) = (Arc::clone(&self.key), self.id.clone(), path.clone());
            move || -> Result<()> {
                use std::os::unix::fs::OpenOptionsExt;
                let lifetime = credential_lifetime();
                let expires = lazaret_escalate::signing::unix_now() + lifetime.as_secs();
                let credential = key
                    .delegate(&id, expires)
                    .context("cannot delegate the session credential")?;
                // Written aside and renamed: a reader never sees half of it.
                let tmp = path.with_extension("new");
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&tmp)
                    .with_context(|| format!("cannot write {}", tmp.display()))?;
                f.write_all(credential.to_env_value().as_bytes())?;
                std::fs::rename(&tmp, &path)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                Ok(())
            }
        };
        write()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        std::thread::spawn(move || {
            use std::sync::atomic::Ordering;
            loop {
                let until = Instant::now() + credential_lifetime() / 2;
                while Instant::now() < until {
                    if flag.load(Ordering::Relaxed) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                if flag.load(Ordering::Relaxed) {
                    return;
                }
                if let Err(e) = write() {
                    eprintln!("lazaret: cannot renew the session credential: {e:#}");
                }
            }
        });
        Ok(CredentialFile { path, stop })
    }

    /// The `podman` command that runs `argv` in `sandbox` as this session:
    /// its id (the credential itself is in the file
    /// [`publish_credential`](Self::publish_credential) keeps), the guide,
    /// and TERM.
    pub(crate) fn exec_args(
        &self,
        sandbox: &str,
        tty: bool,
        term: Option<&str>,
        argv: &[String],
    ) -> Result<ExecSpec> {
        let mut args = vec!["exec".to_string(), "--interactive".to_string()];
        if tty {
            args.push("--tty".into());
        }
        let env = Vec::new();
        args.push("--env".into());
        args.push(format!("{}={}", lazaret_escalate::env::SESSION_ID, self.id));
        args.push("--env".into());
        args.push(format!(
            "{}={}",
            lazaret_escalate::env::GUIDE,
            lazaret_escalate::GUIDE_PATH
        ));
        if let Some(term) = term {
            args.push("--env".into());
            args.push(format!("TERM={term}"));
        }
        args.push(sandbox.to_string());
        // Every session process under Lazaret's seccomp rules: runsc
        // applies the container's profile to its first process only
        // (decisions.md D8, `lazaret_escalate::confine`).
        args.push(lazaret_escalate::BINARY_PATH.into());
        args.push(lazaret_escalate::confine::FLAG.into());
        args.push("--".into());
        args.extend(argv.iter().cloned());
        Ok(ExecSpec { args, env })
    }
}

/// A session's published credential: renewed while it lives, removed (and
/// renewal stopped) when dropped.
pub(crate) struct CredentialFile {
    path: PathBuf,
    stop: Arc<AtomicBool>,
}

impl Drop for CredentialFile {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A `podman exec` of a session: its arguments, and environment variables
/// for podman itself that `--env NAME` arguments forward.
#[derive(Clone)]
pub(crate) struct ExecSpec {
    pub(crate) args: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
}

impl std::fmt::Debug for ExecSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecSpec")
            .field("args", &self.args)
            .finish_non_exhaustive()
    }
}

/// Runs `argv` in the sandbox through `podman exec`, as one Client Session.
///
/// Whatever of the exec's stdout and stderr is a terminal is read here and
/// passed through [`OutputFilter`] (decisions.md D10); a pipe or file gets
/// the bytes as they are. An exec (not `--tty`) never reads a terminal: its
/// stdin is then empty, so no key meant for a prompt reaches the sandbox.
fn run_in_sandbox(
    explicit: &Option<PathBuf>,
    env: &dyn HostEnv,
    profile: Option<&str>,
    workspace: Option<&Path>,
    argv: &[String],
    interactive: bool,
    purpose: &str,
) -> Result<ExitCode> {
    let (_, ctx, _) = context(explicit, env, profile, workspace)?;
    let session = SessionAnchor::new()?;
    let stdin_tty = nix::unistd::isatty(std::io::stdin()).unwrap_or(false);
    let out_tty = nix::unistd::isatty(std::io::stdout()).unwrap_or(false);
    let err_tty = nix::unistd::isatty(std::io::stderr()).unwrap_or(false);
    let tty = interactive && stdin_tty;
    let has_human = super::prompt::open_tty().is_some();
    let rt = runtime()?;
    let started = Instant::now();
    let mut client = rt
        .block_on(client::connect(
            &ctx,
            &session.hello(purpose, has_human),
            true,
            &mut |step| {
                eprintln!(
                    "lazaret: [{:>4.1}s] {step}",
                    started.elapsed().as_secs_f64()
                );
            },
        ))
        .with_context(|| format!("cannot reach domain {}", ctx.anchor.hash()))?;
    announce(&client.domain);
    // From here on a signal that ends Lazaret also ends a prompt (as a
    // denial) and the exec, and the terminal is restored (until here the
    // default action ends Lazaret at once, before anything ran).
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [SIGTERM, SIGHUP, SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("cannot install the signal handlers")?;
    }
    let _credential = session.publish_credential(&ctx.certs_dir)?;
    let mut cmd = tokio::process::Command::new("podman");
    let spec = session.exec_args(
        &client.domain.sandbox,
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
    let guard = (out_tty || err_tty).then(TerminalGuard::new);
    let outcome = rt.block_on(async {
        let mut child = cmd.spawn().context("cannot run podman exec")?;
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
        loop {
            if let Some(s) = status
                && out.is_none()
                && err.is_none()
            {
                return Ok(Ended::Exited(s));
            }
            // While a prompt is up this task does not read the pipes: the
            // sandbox's output waits there and shows after the answer.
            tokio::select! {
                s = child.wait(), if status.is_none() => {
                    status = Some(s.context("podman exec failed")?);
                    drain_until = Some(tokio::time::Instant::now() + Duration::from_secs(2));
                }
                _ = sleep_until_opt(drain_until) => return Ok(Ended::Exited(status.unwrap_or_default())),
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
                msg = next_msg(&mut queued, &mut client.stream), if listening => match msg {
                    Ok(CoordMsg::Prompt { prompt }) => {
                        let Some(t) = super::prompt::open_tty() else {
                            let verdict = Verdict::Deny { reason: Some("no terminal to ask on".into()) };
                            let _ = write_frame(&mut client.stream, &ClientMsg::Decision { request_id: prompt.request_id, verdict }).await;
                            continue;
                        };
                        let pid = if tty { child.id() } else { None };
                        let Some(verdict) = ask_listening(prompt.clone(), t, pid, &stop, &mut client.stream, &mut queued).await else {
                            // Withdrawn: nobody waits for an answer.
                            continue;
                        };
                        let abort = verdict == Verdict::Abort;
                        let _ = write_frame(&mut client.stream, &ClientMsg::Decision { request_id: prompt.request_id, verdict }).await;
                        if abort {
                            let _ = child.kill().await;
                        }
                    }
                    // Withdrawn before its prompt was shown (it waited
                    // behind another, and is not asked): a note.
                    Ok(CoordMsg::Withdrawn { request_id, reason }) => {
                        eprint!("\r\nlazaret: request {} withdrawn: {}; nothing runs\r\n", visible(&request_id), visible(&reason));
                    }
                    Ok(CoordMsg::Warning { message }) => eprint!("\r\nlazaret: !! {}\r\n", visible(&message)),
                    // The domain is going down: the sandbox ends, and with
                    // it this exec.
                    Ok(CoordMsg::ShuttingDown) => listening = false,
                    // The coordinator died (the sandbox lives on): attach as
                    // the same session to a new one, which adopts the domain
                    // and counts this session.
                    Err(_) => {
                        let hello = session.hello(purpose, has_human);
                        match client::reconnect(&ctx, &hello).await {
                            Ok(c) => {
                                client = c;
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
    drop(client);
    drop(rt);
    code
}

/// How a plain session's exec ended.
enum Ended {
    Exited(std::process::ExitStatus),
    Signal(tokio::process::Child, i32),
}

/// The next message from the coordinator: one read while a prompt was up
/// first.
async fn next_msg(
    queued: &mut VecDeque<Result<CoordMsg, FrameError>>,
    stream: &mut tokio::net::UnixStream,
) -> Result<CoordMsg, FrameError> {
    match queued.pop_front() {
        Some(msg) => msg,
        None => read_frame(stream).await,
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
    stream: &mut tokio::net::UnixStream,
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
            msg = read_frame::<_, CoordMsg>(stream), if reading => {
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
fn credential_lifetime() -> Duration {
    std::env::var("LAZARET_CREDENTIAL_LIFETIME_SECS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&s| s >= 2)
        .map_or(Duration::from_secs(12 * 3600), Duration::from_secs)
}

fn hex(bytes: &[u8]) -> String {
    crate::coordinator::store::hex(bytes)
}

fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c.clamp(0, 255) as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
        _ => ExitCode::FAILURE,
    }
}

/// `lazaret shell`: on a terminal, the workbench's pane engine with one
/// pane; otherwise (stdin or stdout redirected) a plain `podman exec`.
pub fn shell(
    explicit: &Option<PathBuf>,
    env: &dyn HostEnv,
    profile: Option<&str>,
    workspace: Option<&Path>,
    prefix: &str,
) -> Result<ExitCode> {
    let terminal = nix::unistd::isatty(std::io::stdin()).unwrap_or(false)
        && nix::unistd::isatty(std::io::stdout()).unwrap_or(false);
    if terminal {
        return crate::ui::run(
            crate::ui::Mode::Shell,
            explicit,
            env,
            profile,
            workspace,
            prefix,
        );
    }
    run_in_sandbox(
        explicit,
        env,
        profile,
        workspace,
        &shell_argv(),
        true,
        "shell",
    )
}

/// What `lazaret shell` runs in the sandbox.
pub(crate) fn shell_argv() -> Vec<String> {
    vec!["/bin/bash".to_string(), "-l".to_string()]
}

pub fn exec(
    explicit: &Option<PathBuf>,
    env: &dyn HostEnv,
    profile: Option<&str>,
    workspace: Option<&Path>,
    argv: &[String],
) -> Result<ExitCode> {
    if argv.is_empty() {
        bail!("nothing to run: give a command after `--`, e.g. lazaret exec -- make test");
    }
    run_in_sandbox(explicit, env, profile, workspace, argv, false, "exec")
}

/// A query-only connection to a socket (never starts anything).
pub(crate) async fn query(socket: &Path) -> Result<client::Client, ClientError> {
    let mut stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|_| ClientError::NotRunning(socket.display().to_string()))?;
    write_frame(
        &mut stream,
        &ClientMsg::Hello {
            version: PROTOCOL_VERSION,
            session_id: None,
            session_key: None,
            pid: std::process::id(),
            purpose: "query".into(),
            interactive: false,
        },
    )
    .await?;
    loop {
        match tokio::time::timeout(
            Duration::from_secs(30),
            read_frame::<_, CoordMsg>(&mut stream),
        )
        .await
        {
            Ok(Ok(CoordMsg::Progress { .. })) => {}
            Ok(Ok(CoordMsg::Welcome { domain })) => return Ok(client::Client { stream, domain }),
            Ok(Ok(CoordMsg::Error { message })) => return Err(ClientError::Refused(message)),
            Ok(Ok(_)) | Ok(Err(_)) => {
                return Err(ClientError::NotRunning(socket.display().to_string()));
            }
            Err(_) => return Err(ClientError::Refused("no answer within 30 s".into())),
        }
    }
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

/// Domains whose containers podman knows but whose coordinator did not
/// answer (crashed, killed, or its runtime folder removed).
/// A coordinator that is alive but unreachable here (another runtime
/// folder) still owns its domain: processes count, not only sockets.
fn orphans(live: &[DomainStatus]) -> Vec<crate::engine::LabelledDomain> {
    let running = coordinator_processes();
    crate::engine::labelled_domains(&crate::engine::podman::Podman::default())
        .unwrap_or_default()
        .into_iter()
        .filter(|d| !live.iter().any(|l| l.hash == d.hash) && !running.contains(&d.hash))
        .collect()
}

/// Domain hashes of this user's running coordinator processes
/// (`lazaret ... coordinator --profile P --workspace W --foreground`).
fn coordinator_processes() -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let uid = nix::unistd::getuid().as_raw();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut hashes = Vec::new();
    for e in entries.flatten() {
        if !e.metadata().is_ok_and(|m| m.uid() == uid) {
            continue;
        }
        let Ok(raw) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let has = |a: &str| args.iter().any(|x| x == a);
        let after = |flag: &str| {
            args.iter()
                .position(|x| x == flag)
                .and_then(|i| args.get(i + 1))
        };
        if !(has("coordinator") && has("--foreground")) {
            continue;
        }
        if let (Some(p), Some(w)) = (after("--profile"), after("--workspace"))
            && let Ok(a) = crate::domain::DomainAnchor::new(p, Path::new(w))
        {
            hashes.push(a.hash().to_string());
        }
    }
    hashes
}

fn print_orphans(orphans: &[crate::engine::LabelledDomain]) {
    if orphans.is_empty() {
        return;
    }
    println!("orphaned (containers without a coordinator; `lazaret down --all` removes them):");
    for o in orphans {
        let (profile, _) = lazaret_widgets::visible::make_visible(&o.profile);
        let (workspace, _) = lazaret_widgets::visible::make_visible(&o.workspace);
        println!(
            "{:<13} {:<12} {:<22} {}  {}",
            o.hash,
            profile,
            o.runtime,
            o.containers.join(","),
            workspace
        );
    }
    println!();
}

/// Removes an orphan: through the engine (containers and State Anchor)
/// when its workspace still names it, else its containers by name.
fn down_orphan(
    config: &Config,
    rundir: &RuntimeDir,
    orphan: &crate::engine::LabelledDomain,
) -> Result<()> {
    let anchor = crate::domain::DomainAnchor::new(&orphan.profile, Path::new(&orphan.workspace))
        .ok()
        .filter(|a| a.hash() == orphan.hash);
    if let Some(anchor) = anchor {
        // No coordinator may start meanwhile.
        let _guard = crate::coordinator::lock::exclusive(&anchor.lock_file(rundir))?;
        Engine::new(config, rundir.clone())
            .down(&anchor)
            .with_context(|| format!("cannot clean up domain {}", orphan.hash))?;
        let _ = std::fs::remove_file(anchor.control_socket(rundir));
        return Ok(());
    }
    let podman = crate::engine::podman::Podman::default();
    for name in &orphan.containers {
        podman
            .remove(name)
            .with_context(|| format!("cannot remove {name} of domain {}", orphan.hash))?;
    }
    Ok(())
}

fn uptime(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

pub fn status(env: &dyn HostEnv, json: bool) -> Result<ExitCode> {
    let rundir = RuntimeDir::ensure(&RuntimeDir::locate(env))?;
    let rt = runtime()?;
    let mut domains = Vec::new();
    for socket in sockets(&rundir) {
        if let Ok(mut c) = rt.block_on(query(&socket))
            && let Ok(CoordMsg::Status { domain }) = rt.block_on(c.call(&ClientMsg::Status))
        {
            domains.push(domain);
        }
    }
    // Domains whose teardown left something (decisions.md D8); one that
    // runs again is listed as running.
    let broken: Vec<_> = crate::engine::teardown::broken_domains(&rundir)
        .into_iter()
        .filter(|b| !domains.iter().any(|d| d.hash == b.hash))
        .collect();
    // A broken domain's containers have no coordinator either: it is
    // listed once, as broken (its teardown left them).
    let mut orphans = orphans(&domains);
    orphans.retain(|o| !broken.iter().any(|b| b.hash == o.hash));
    if json {
        let mut all = Vec::new();
        for d in &domains {
            let mut v = serde_json::to_value(d)?;
            v["state"] = "running".into();
            all.push(v);
        }
        for o in &orphans {
            let mut v = serde_json::to_value(DomainStatus {
                hash: o.hash.clone(),
                profile: o.profile.clone(),
                workspace: o.workspace.clone(),
                sandbox: o.containers.first().cloned().unwrap_or_default(),
                runtime: o.runtime.clone(),
                gvisor: o.runtime == "runsc",
                workspace_mode: String::new(),
                sessions: Vec::new(),
                uptime: 0,
                coordinator_pid: 0,
                degraded: None,
                limits: String::new(),
                limit_gaps: Vec::new(),
                orphaned: true,
            })?;
            v["state"] = "orphaned".into();
            all.push(v);
        }
        for b in &broken {
            let mut v = serde_json::to_value(b)?;
            v["state"] = "broken".into();
            all.push(v);
        }
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(ExitCode::SUCCESS);
    }
    print_broken(&broken);
    if domains.is_empty() && orphans.is_empty() {
        if broken.is_empty() {
            println!("no domain is running");
        }
        return Ok(ExitCode::SUCCESS);
    }
    print_orphans(&orphans);
    if domains.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<13} {:<12} {:<22} {:>8} {:>7}  WORKSPACE",
        "DOMAIN", "PROFILE", "RUNTIME", "SESSIONS", "UPTIME"
    );
    for d in &domains {
        let runtime = if d.degraded.is_some() {
            format!("{} DEGRADED", d.runtime)
        } else if d.gvisor {
            format!("{} (gVisor)", d.runtime)
        } else {
            format!("{} NOT gVisor", d.runtime)
        };
        println!(
            "{:<13} {:<12} {:<22} {:>8} {:>7}  {}",
            d.hash,
            d.profile,
            runtime,
            d.sessions.len(),
            uptime(d.uptime),
            visible(&d.workspace)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Fails, naming what is left, when the teardown of `hash` left a
/// broken-domain marker (decisions.md D8: `down` never claims success it
/// did not verify).
fn verified_down(rundir: &RuntimeDir, hash: &str) -> Result<()> {
    let marker = crate::engine::teardown::marker(rundir, hash);
    let Ok(bytes) = std::fs::read(&marker) else {
        return Ok(());
    };
    let broken: Option<crate::engine::teardown::BrokenDomain> = serde_json::from_slice(&bytes).ok();
    let left = broken.map(|b| b.left).unwrap_or_default();
    let mut msg = format!("domain {hash} is NOT down; left:");
    for l in &left {
        msg.push_str(&format!(
            "\n  - {}",
            lazaret_widgets::visible::make_visible(l).0
        ));
    }
    msg.push_str(
        "\nFix the cause (`lazaret doctor` checks podman and the runtimes), then run `lazaret down` again; until then `lazaret status` lists the domain as broken.",
    );
    bail!("{msg}")
}

fn print_broken(broken: &[crate::engine::teardown::BrokenDomain]) {
    let escape_visible = |s: &str| lazaret_widgets::visible::make_visible(s).0;
    for b in broken {
        println!(
            "BROKEN {}  {}  {}: its teardown left something; fix the cause, then `lazaret down {}` in that folder",
            b.hash,
            b.profile,
            escape_visible(&b.workspace),
            b.profile
        );
        for l in &b.left {
            println!("  left: {}", escape_visible(l));
        }
    }
}

/// Asks one coordinator to tear down and waits until its process is gone.
fn down_socket(rt: &tokio::runtime::Runtime, socket: &Path) -> Result<Option<String>> {
    let Ok(mut c) = rt.block_on(query(socket)) else {
        return Ok(None);
    };
    let pid = c.domain.coordinator_pid;
    let hash = c.domain.hash.clone();
    let profile = c.domain.profile.clone();
    let _ = rt.block_on(c.call(&ClientMsg::Down));
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(120);
    while nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None).is_ok() {
        if Instant::now() > deadline {
            bail!(
                "the coordinator of domain {hash} (pid {pid}) did not finish its teardown within 120 s; see its log: `lazaret logs {profile}`"
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(Some(hash))
}

pub fn down(
    explicit: &Option<PathBuf>,
    env: &dyn HostEnv,
    profile: Option<&str>,
    workspace: Option<&Path>,
    all: bool,
    purge: bool,
) -> Result<ExitCode> {
    let rt = runtime()?;
    if all {
        let rundir = RuntimeDir::ensure(&RuntimeDir::locate(env))?;
        let mut n = 0;
        let mut broken = Vec::new();
        for socket in sockets(&rundir) {
            if let Some(hash) = down_socket(&rt, &socket)? {
                match verified_down(&rundir, &hash) {
                    Ok(()) => println!("domain {hash} is down"),
                    Err(e) => {
                        eprintln!("lazaret: {e}");
                        broken.push(hash);
                    }
                }
                n += 1;
            }
        }
        // Orphans of this configuration's Storage Root: another root's
        // containers (another setup, a test) are not ours to remove.
        let config = crate::ui::Launcher::new(crate::ui::Mode::Shell, explicit, env)
            .map(|l| l.config)
            .context("cannot load the configuration to find orphaned domains")?;
        for orphan in orphans(&[]) {
            if !config.data_root.join("domains").join(&orphan.hash).is_dir() {
                continue;
            }
            down_orphan(&config, &rundir, &orphan)?;
            println!("orphaned domain {} is down", orphan.hash);
            n += 1;
        }
        for b in crate::engine::teardown::broken_domains(&rundir) {
            if !broken.contains(&b.hash) {
                eprintln!(
                    "lazaret: domain {} ({} in {}) is broken: its teardown left something; run `lazaret down {}` in that folder",
                    b.hash,
                    b.profile,
                    lazaret_widgets::visible::make_visible(&b.workspace).0,
                    b.profile
                );
                broken.push(b.hash);
            }
        }
        if n == 0 && broken.is_empty() {
            println!("no domain was running");
        }
        return Ok(if broken.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let (config, ctx, rundir) = down_context(explicit, env, profile, workspace)?;
    let rundir_kept = rundir.clone();
    if down_socket(&rt, &ctx.control_socket)?.is_some() {
        // The coordinator said what it did; check it ourselves, holding the
        // domain lock so no new coordinator starts meanwhile.
        let _guard = crate::coordinator::lock::exclusive(&ctx.lock_file)?;
        Engine::new(&config, rundir)
            .verify_down(&ctx.anchor)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    } else {
        // No coordinator (it was killed?): clean what it left, holding the
        // domain lock so no new coordinator starts meanwhile.
        let _guard = crate::coordinator::lock::exclusive(&ctx.lock_file)?;
        Engine::new(&config, rundir)
            .down(&ctx.anchor)
            .with_context(|| format!("cannot clean up domain {}", ctx.anchor.hash()))?;
        let _ = std::fs::remove_file(&ctx.control_socket);
    }
    println!("domain {} is down", ctx.anchor.hash());
    if purge {
        // No coordinator may start meanwhile, nor still own the store.
        let _guard = crate::coordinator::lock::exclusive(&ctx.lock_file)?;
        let rundir = rundir_kept;
        let _owner = crate::coordinator::lock::exclusive(&ctx.anchor.owner_lock(&rundir))?;
        let removed = Engine::new(&config, rundir)
            .purge(&ctx.anchor)
            .with_context(|| format!("cannot remove the state of domain {}", ctx.anchor.hash()))?;
        for dir in removed {
            println!("removed {}", dir.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// [`context`] for teardown: an untrusted workspace file that widens is
/// left out (with a warning) rather than refused, since tearing down needs
/// only the Domain Anchor.
fn down_context(
    explicit: &Option<PathBuf>,
    env: &dyn HostEnv,
    profile: Option<&str>,
    workspace: Option<&Path>,
) -> Result<(Config, DomainContext, RuntimeDir)> {
    let config = super::load_with(explicit.clone(), env, true)?;
    let rundir = RuntimeDir::ensure(&RuntimeDir::locate(env))?;
    let workspace = match workspace {
        Some(p) => p.to_path_buf(),
        None => super::current_dir()?,
    };
    let selected = config.select_profile(profile)?;
    let anchor = crate::domain::DomainAnchor::new(&selected.name, &workspace)?;
    let ctx = DomainContext::new(
        anchor,
        &config.data_root,
        &rundir,
        explicit
            .as_ref()
            .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone())),
    );
    Ok((config, ctx, rundir))
}

/// `lazaret domains list` and `lazaret domains prune --older-than AGE`.
pub fn domains(
    explicit: &Option<PathBuf>,
    env: &dyn HostEnv,
    json: bool,
    prune: Option<Duration>,
) -> Result<ExitCode> {
    use crate::domains::{State, list, remove_root, unpropagated_commit};
    let config = crate::ui::Launcher::new(crate::ui::Mode::Shell, explicit, env)?.config;
    let rundir = RuntimeDir::ensure(&RuntimeDir::locate(env))?;
    let rt = runtime()?;
    let podman = crate::engine::podman::Podman::default();
    // Owned: a coordinator answers or runs; else a domain whose containers
    // run is orphaned (or started by `sandbox up`).
    let mut owned = coordinator_processes();
    for socket in sockets(&rundir) {
        if let Ok(c) = rt.block_on(query(&socket)) {
            owned.push(c.domain.hash.clone());
        }
    }
    let labelled =
        crate::engine::labelled_domains(&podman).context("cannot list the domains' containers")?;
    let entries = list(&config.data_root, &labelled, &owned);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let Some(age) = prune else {
        if json {
            println!("{}", serde_json::to_string_pretty(&entries)?);
            return Ok(ExitCode::SUCCESS);
        }
        if entries.is_empty() {
            println!("no domain in {}", config.data_root.display());
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "{:<13} {:<12} {:<9} {:>10} {:>10}  WORKSPACE",
            "DOMAIN", "PROFILE", "STATE", "SIZE", "LAST USED"
        );
        for e in &entries {
            let profile = e.profile.as_deref().unwrap_or("?");
            let workspace = e
                .workspace
                .as_ref()
                .map_or("?".into(), |w| w.display().to_string());
            println!(
                "{:<13} {:<12} {:<9} {:>10} {:>10}  {}",
                e.hash,
                lazaret_widgets::visible::make_visible(profile).0,
                serde_json::to_value(e.state)?.as_str().unwrap_or("?"),
                crate::engine::limits::show_size(e.size),
                format!("{} ago", uptime(now.saturating_sub(e.last_used))),
                lazaret_widgets::visible::make_visible(&workspace).0
            );
        }
        return Ok(ExitCode::SUCCESS);
    };
    let mut removed = 0;
    for e in entries {
        if e.state != State::Stopped || now.saturating_sub(e.last_used) < age.as_secs() {
            continue;
        }
        if let Some(commit) = unpropagated_commit(&e) {
            let question = format!(
                "domain {} holds commit {commit} on its agent branch that {} lacks; delete it anyway?",
                e.hash,
                e.workspace
                    .as_ref()
                    .map_or("the host repository".into(), |w| w.display().to_string())
            );
            if !confirm(&question) {
                println!(
                    "kept {}: its clone holds commits not on the host branch",
                    e.hash
                );
                continue;
            }
        }
        remove_root(&podman, &e.root)
            .map_err(|err| anyhow::anyhow!("cannot delete {}: {err}", e.root.display()))?;
        println!(
            "removed {} ({})",
            e.hash,
            crate::engine::limits::show_size(e.size)
        );
        removed += 1;
    }
    if removed == 0 {
        println!("nothing to prune");
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks yes/no on a terminal; without one the answer is no.
fn confirm(question: &str) -> bool {
    use std::io::{BufRead, IsTerminal, Write};
    if !std::io::stdin().is_terminal() {
        eprintln!("{question} (no terminal to ask: no)");
        return false;
    }
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    matches!(line.trim(), "y" | "Y" | "yes")
}

/// `lazaret logs`: the coordinator's log, each line made visible (it holds
/// text the agent chose: branch names, commands).
pub fn logs(
    explicit: &Option<PathBuf>,
    env: &dyn HostEnv,
    profile: Option<&str>,
    workspace: Option<&Path>,
    lines: usize,
) -> Result<ExitCode> {
    let (_, ctx, _) = context(explicit, env, profile, workspace)?;
    let rotated = crate::coordinator::log::rotated(&ctx.log);
    if !ctx.log.exists() && !rotated.exists() {
        bail!(
            "domain {} has no log yet ({}): its coordinator never ran",
            ctx.anchor.hash(),
            ctx.log.display()
        );
    }
    let all = crate::coordinator::log::tail(&ctx.log, if lines == 0 { usize::MAX } else { lines });
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for line in all {
        let (shown, _) = lazaret_widgets::visible::make_visible(&line);
        if writeln!(out, "{shown}").is_err() {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn audit(
    explicit: &Option<PathBuf>,
    env: &dyn HostEnv,
    profile: Option<&str>,
    workspace: Option<&Path>,
    verify: bool,
    json: bool,
) -> Result<ExitCode> {
    let (_, ctx, rundir) = context(explicit, env, profile, workspace)?;
    let rt = runtime()?;
    // Through the coordinator when it runs (it owns the store, §4.4.1);
    // otherwise open the store ourselves, holding the domain lock.
    let (records, verification) = match rt.block_on(query(&ctx.control_socket)) {
        Ok(mut c) => {
            let records = match rt.block_on(c.call(&ClientMsg::Audit))? {
                CoordMsg::Audit { records } => records,
                CoordMsg::Error { message } => bail!("{message}"),
                other => bail!("unexpected answer {other:?}"),
            };
            let v = match rt.block_on(c.call(&ClientMsg::Verify))? {
                CoordMsg::Verified {
                    intact: true,
                    records,
                    ..
                } => Verification::Intact {
                    records,
                    head: String::new(),
                },
                CoordMsg::Verified { first_bad, why, .. } => Verification::Broken {
                    seq: first_bad.unwrap_or(0),
                    why: why.unwrap_or_default(),
                },
                CoordMsg::Error { message } => bail!("{message}"),
                other => bail!("unexpected answer {other:?}"),
            };
            (records, v)
        }
        Err(_) => {
            // No new coordinator may start, and a departing one must have
            // let go of the store (it holds the owner lock until it exits).
            let _guard = crate::coordinator::lock::exclusive(&ctx.lock_file)?;
            let _owner = crate::coordinator::lock::exclusive(&ctx.anchor.owner_lock(&rundir))?;
            let path = ctx.domain_root.join("state.redb");
            if !path.exists() {
                bail!(
                    "domain {} has no state store yet (it never ran)",
                    ctx.anchor.hash()
                );
            }
            let store = Store::open(&path)?;
            let v = store.verify()?;
            // A broken store may not decode; show what can be read.
            (store.records().unwrap_or_default(), v)
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&records)?);
    } else if !verify {
        for r in &records {
            // Records hold the agent's argv, cwd and reasons: escaped.
            println!(
                "{:>5}  {}  {:<20} {}",
                r.seq,
                r.time,
                visible(&r.kind),
                visible(&r.data.to_string())
            );
        }
    }
    match verification {
        Verification::Intact { records, .. } => {
            if verify {
                println!("audit log intact: {records} records, hash chain verified");
            }
            Ok(ExitCode::SUCCESS)
        }
        Verification::Broken { seq, why } => {
            eprintln!("lazaret: audit log BROKEN at record {seq}: {why}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// The launcher: starts `coordinator --foreground` with the same arguments,
/// environment and output, and exits without waiting for it.
pub fn launch_coordinator() -> Result<ExitCode> {
    let exe = std::env::current_exe().context("cannot find the lazaret executable")?;
    Command::new(exe)
        .args(std::env::args_os().skip(1))
        .arg("--foreground")
        .spawn()
        .context("cannot start the Session Coordinator")?;
    Ok(ExitCode::SUCCESS)
}

/// The detached coordinator process (started by a leading session).
pub fn coordinator(
    explicit: &Option<PathBuf>,
    env: &dyn HostEnv,
    profile: &str,
    workspace: &Path,
) -> Result<ExitCode> {
    let config = super::load(explicit.clone(), env)?;
    let profile = config.select_profile(Some(profile))?.clone();
    let resolved: ResolvedProfile = config.resolve(&profile, workspace, env, HostVars::Require)?;
    let rundir = RuntimeDir::ensure(&RuntimeDir::locate(env))?;
    let control_socket = resolved.domain.control_socket(&rundir);
    let owner_lock = resolved.domain.owner_lock(&rundir);
    let escalation = config.escalation.enabled.then(|| config.escalation.clone());
    let engine = Engine::new(&config, rundir);
    crate::coordinator::server::run(
        engine,
        resolved,
        env,
        control_socket,
        &owner_lock,
        escalation,
    )?;
    Ok(ExitCode::SUCCESS)
}
