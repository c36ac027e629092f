//! Commands that go through the Session Coordinator: shell, exec, status,
//! down, audit, and the hidden `coordinator` entry point itself.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::config::{Config, HostVars, ResolvedProfile};
use crate::coordinator::client::{self, ClientError, DomainContext, Hello};
use crate::coordinator::escalation::Verdict;
use crate::coordinator::protocol::{
    ClientMsg, CoordMsg, DomainStatus, PROTOCOL_VERSION, read_frame, write_frame,
};
use crate::coordinator::store::{Store, Verification};
use crate::engine::Engine;
use crate::host::HostEnv;
use crate::rundir::RuntimeDir;
use lazaret_escalate::signing::SessionKey;

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
    key: SessionKey,
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
            key: SessionKey::generate().context("cannot create the Session Anchor key")?,
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

    /// The arguments of `podman` that run `argv` in `sandbox` as this
    /// session: a delegated credential, the guide, and TERM.
    pub(crate) fn exec_args(
        &self,
        sandbox: &str,
        tty: bool,
        term: Option<&str>,
        argv: &[String],
    ) -> Result<Vec<String>> {
        let expires = lazaret_escalate::signing::unix_now() + CREDENTIAL_LIFETIME.as_secs();
        let credential = self
            .key
            .delegate(&self.id, expires)
            .context("cannot delegate the session credential")?;
        let mut args = vec!["exec".to_string(), "--interactive".to_string()];
        if tty {
            args.push("--tty".into());
        }
        for (k, v) in credential.env_vars() {
            args.push("--env".into());
            args.push(format!("{k}={v}"));
        }
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
        args.extend(argv.iter().cloned());
        Ok(args)
    }
}

/// Runs `argv` in the sandbox through `podman exec`, as one Client Session.
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
    let tty = interactive && nix::unistd::isatty(std::io::stdin()).unwrap_or(false);
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
    let mut cmd = tokio::process::Command::new("podman");
    cmd.args(session.exec_args(
        &client.domain.sandbox,
        tty,
        env.var("TERM").as_deref(),
        argv,
    )?);
    let status = rt.block_on(async {
        let mut child = cmd.spawn().context("cannot run podman exec")?;
        let mut listening = true;
        loop {
            tokio::select! {
                status = child.wait() => return status.context("podman exec failed"),
                msg = read_frame::<_, CoordMsg>(&mut client.stream), if listening => match msg {
                    Ok(CoordMsg::Prompt { prompt }) => {
                        let verdict = match super::prompt::open_tty() {
                            Some(t) => super::prompt::ask(&prompt, t, if tty { child.id() } else { None }),
                            None => Verdict::Deny { reason: Some("no terminal to ask on".into()) },
                        };
                        let abort = verdict == Verdict::Abort;
                        let _ = write_frame(&mut client.stream, &ClientMsg::Decision { request_id: prompt.request_id, verdict }).await;
                        if abort {
                            let _ = child.kill().await;
                        }
                    }
                    // The domain is going down, or the coordinator is gone:
                    // the sandbox ends, and with it this exec.
                    Ok(CoordMsg::ShuttingDown) | Err(_) => listening = false,
                    Ok(_) => {}
                },
            }
        }
    })?;
    // Closing the connection ends the session; the last one tears down.
    drop(client);
    drop(rt);
    Ok(exit_code(status))
}

/// How long an exec's delegated credential is valid.
const CREDENTIAL_LIFETIME: Duration = Duration::from_secs(12 * 3600);

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
    let orphans = orphans(&domains);
    if json {
        domains.extend(orphans.iter().map(|o| DomainStatus {
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
            limits: String::new(),
            limit_gaps: Vec::new(),
            orphaned: true,
        }));
        println!("{}", serde_json::to_string_pretty(&domains)?);
        return Ok(ExitCode::SUCCESS);
    }
    if domains.is_empty() && orphans.is_empty() {
        println!("no domain is running");
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
        let runtime = if d.gvisor {
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
            d.workspace
        );
    }
    Ok(ExitCode::SUCCESS)
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
) -> Result<ExitCode> {
    let rt = runtime()?;
    if all {
        let rundir = RuntimeDir::ensure(&RuntimeDir::locate(env))?;
        let mut n = 0;
        for socket in sockets(&rundir) {
            if let Some(hash) = down_socket(&rt, &socket)? {
                println!("domain {hash} is down");
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
        if n == 0 {
            println!("no domain was running");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (config, ctx, rundir) = context(explicit, env, profile, workspace)?;
    if down_socket(&rt, &ctx.control_socket)?.is_none() {
        // No coordinator (it was killed?): clean what it left, holding the
        // domain lock so no new coordinator starts meanwhile.
        let _guard = crate::coordinator::lock::exclusive(&ctx.lock_file)?;
        Engine::new(&config, rundir)
            .down(&ctx.anchor)
            .with_context(|| format!("cannot clean up domain {}", ctx.anchor.hash()))?;
        let _ = std::fs::remove_file(&ctx.control_socket);
    }
    println!("domain {} is down", ctx.anchor.hash());
    Ok(ExitCode::SUCCESS)
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
            println!("{:>5}  {}  {:<20} {}", r.seq, r.time, r.kind, r.data);
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
