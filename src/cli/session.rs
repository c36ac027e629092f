//! Commands about sessions and domains: `shell`, `exec` (both run through
//! the Client Session), `status`, `down`, `domains`, `logs`, `audit`, and
//! the hidden `coordinator` entry point itself.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lazaret_widgets::visible::visible;

use crate::client::context;
use crate::client::session::{query, run_in_sandbox, runtime, shell_argv, sockets};
use crate::config::{Config, HostVars, ResolvedProfile};
use crate::coordinator::client::DomainContext;
use crate::coordinator::protocol::{ClientMsg, CoordMsg, DomainStatus};
use crate::coordinator::store::{Store, Verification};
use crate::engine::Engine;
use crate::host::HostEnv;
use crate::rundir::RuntimeDir;

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
            crate::client::Mode::Shell,
            explicit,
            env,
            profile,
            workspace,
            prefix,
            crate::client::SessionChoice::Exec,
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

/// Domains whose containers podman knows but whose coordinator did not
/// answer (crashed, killed, or its runtime folder removed).
/// A coordinator that is alive but unreachable here (another runtime
/// folder) still owns its domain: processes count, not only sockets.
fn orphans(live: &[DomainStatus]) -> Vec<crate::engine::LabelledDomain> {
    let running = coordinator_processes();
    crate::engine::labelled_domains(&crate::podman::Podman::default())
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

/// What `lazaret sandbox up` records of a domain it started, in the
/// runtime folder: that domain has no coordinator by design, and `status`
/// tells it from the leftovers of a coordinator that died by its
/// containers' ids (a coordinator that starts the domain again makes new
/// ones).
#[derive(serde::Serialize, serde::Deserialize)]
struct ManualStart {
    ids: Vec<String>,
    /// Unix seconds.
    started: u64,
}

fn manual_marker(rundir: &RuntimeDir, hash: &str) -> PathBuf {
    rundir
        .path()
        .join(format!("lazaret_sandbox_up_{hash}.json"))
}

/// The ids of `containers`, sorted; `None` if one is missing.
fn container_ids(containers: &[String]) -> Option<Vec<String>> {
    if containers.is_empty() {
        return None;
    }
    let mut args = vec!["container", "inspect", "--format", "{{.Id}}"];
    args.extend(containers.iter().map(String::as_str));
    let out = crate::podman::Podman::default().run(args).ok()?;
    let mut ids: Vec<String> = out.lines().map(str::to_string).collect();
    ids.sort();
    (ids.len() == containers.len()).then_some(ids)
}

/// Notes that `lazaret sandbox up` started `containers` for domain `hash`.
pub(crate) fn record_sandbox_up(rundir: &RuntimeDir, hash: &str, containers: &[String]) {
    let Some(ids) = container_ids(containers) else {
        return;
    };
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if let Ok(bytes) = serde_json::to_vec(&ManualStart { ids, started }) {
        let _ = crate::rundir::write_private(&manual_marker(rundir, hash), &bytes);
    }
}

/// Whether `lazaret sandbox up` started domain `hash` (so it has no
/// coordinator by design).
pub(crate) fn started_by_sandbox_up(rundir: &RuntimeDir, hash: &str) -> bool {
    manual_marker(rundir, hash).exists()
}

/// Forgets what [`record_sandbox_up`] noted (the domain is down).
pub(crate) fn forget_sandbox_up(rundir: &RuntimeDir, hash: &str) {
    let _ = std::fs::remove_file(manual_marker(rundir, hash));
}

/// When `domain`'s containers are the ones `lazaret sandbox up` started
/// (and all run), the seconds they have been up.
fn sandbox_up_uptime(rundir: &RuntimeDir, domain: &crate::engine::LabelledDomain) -> Option<u64> {
    let bytes = std::fs::read(manual_marker(rundir, &domain.hash)).ok()?;
    let start: ManualStart = serde_json::from_slice(&bytes).ok()?;
    if !domain.running || container_ids(&domain.containers)? != start.ids {
        return None;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Some(now.saturating_sub(start.started))
}

/// A domain that runs without a coordinator, from its containers' labels.
fn labelled_status(d: &crate::engine::LabelledDomain, uptime: u64, orphaned: bool) -> DomainStatus {
    DomainStatus {
        hash: d.hash.clone(),
        profile: d.profile.clone(),
        workspace: d.workspace.clone(),
        sandbox: d.containers.first().cloned().unwrap_or_default(),
        runtime: d.runtime.clone(),
        gvisor: d.runtime == "runsc",
        workspace_mode: String::new(),
        sessions: Vec::new(),
        uptime,
        coordinator_pid: 0,
        degraded: None,
        limits: String::new(),
        limit_gaps: Vec::new(),
        memory_used: None,
        memory_limit: None,
        layer_used: None,
        egress_refused: None,
        hosted: Vec::new(),
        orphaned,
        audit_break: None,
    }
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
        forget_sandbox_up(rundir, &orphan.hash);
        return Ok(());
    }
    let podman = crate::podman::Podman::default();
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
    let mut domains = running_domains(&rt, &rundir);
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
    // Domains `lazaret sandbox up` started have no coordinator by design:
    // they run, with no session, rather than being left over.
    let mut manual = Vec::new();
    orphans.retain(|o| match sandbox_up_uptime(&rundir, o) {
        Some(uptime) => {
            manual.push(labelled_status(o, uptime, false));
            false
        }
        None => true,
    });
    if json {
        let mut all = Vec::new();
        for d in &domains {
            let mut v = serde_json::to_value(d)?;
            v["state"] = "running".into();
            all.push(v);
        }
        for d in &manual {
            let mut v = serde_json::to_value(d)?;
            v["state"] = "running".into();
            v["started_by"] = "sandbox up".into();
            all.push(v);
        }
        for o in &orphans {
            let mut v = serde_json::to_value(labelled_status(o, 0, true))?;
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
    if domains.is_empty() && orphans.is_empty() && manual.is_empty() {
        if broken.is_empty() {
            println!("no domain is running");
        }
        return Ok(ExitCode::SUCCESS);
    }
    print_orphans(&orphans);
    if domains.is_empty() && manual.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    let manual_hashes: Vec<String> = manual.iter().map(|d| d.hash.clone()).collect();
    domains.extend(manual);
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
    // Sessions that live in a domain run whether or not a client shows
    // them: say which have none.
    for d in &domains {
        let live: Vec<_> = d.hosted.iter().filter(|h| h.exited.is_none()).collect();
        if live.is_empty() {
            continue;
        }
        let detached = live.iter().filter(|h| h.viewers == 0).count();
        println!(
            "{}: {} hosted session(s), {detached} with no client attached (`lazaret sessions` lists them)",
            d.hash,
            live.len()
        );
    }
    // A broken audit chain is said for as long as the store holds it.
    for d in &domains {
        if let Some(b) = &d.audit_break {
            println!(
                "{}: audit log BROKEN: {} (`lazaret audit {} --verify` in {} checks all of it)",
                d.hash,
                visible(&b.to_string()),
                visible(&d.profile),
                visible(&d.workspace)
            );
        }
    }
    for hash in &manual_hashes {
        println!(
            "{hash}: started by `lazaret sandbox up`, with no Session Coordinator (so no sessions); `lazaret sandbox down` in its folder stops it"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What every running domain's coordinator says of it.
fn running_domains(rt: &tokio::runtime::Runtime, rundir: &RuntimeDir) -> Vec<DomainStatus> {
    let mut domains = Vec::new();
    for socket in sockets(rundir) {
        if let Ok(mut c) = rt.block_on(query(&socket))
            && let Ok(CoordMsg::Status { domain }) = rt.block_on(c.call(&ClientMsg::Status))
        {
            domains.push(domain);
        }
    }
    domains
}

/// `lazaret sessions`: every hosted session of this user's running
/// domains (decisions.md D14), attached or not.
pub fn sessions(env: &dyn HostEnv, json: bool) -> Result<ExitCode> {
    let rundir = RuntimeDir::ensure(&RuntimeDir::locate(env))?;
    let rt = runtime()?;
    let domains = running_domains(&rt, &rundir);
    if json {
        let mut all = Vec::new();
        for d in &domains {
            for h in &d.hosted {
                let mut v = serde_json::to_value(h)?;
                v["domain"] = d.hash.clone().into();
                v["profile"] = d.profile.clone().into();
                v["workspace"] = d.workspace.clone().into();
                v["state"] = if h.exited.is_some() {
                    "exited"
                } else if h.viewers == 0 {
                    "detached"
                } else {
                    "attached"
                }
                .into();
                all.push(v);
            }
        }
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(ExitCode::SUCCESS);
    }
    if domains.iter().all(|d| d.hosted.is_empty()) {
        println!("no hosted session runs (`lazaret attach` starts one in this folder's domain)");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<13} {:<12} {:>3}  {:<10} {:>8} {:>7}  COMMAND",
        "DOMAIN", "PROFILE", "N", "STATE", "CLIENTS", "PENDING"
    );
    for d in &domains {
        for h in &d.hosted {
            let state = match h.exited {
                Some(code) => format!("exited {code}"),
                None if h.viewers == 0 => "detached".into(),
                None => "attached".into(),
            };
            println!(
                "{:<13} {:<12} {:>3}  {:<10} {:>8} {:>7}  {}",
                d.hash,
                visible(&d.profile),
                h.id,
                state,
                h.viewers,
                h.pending,
                visible(&lazaret_escalate::classify::join(&h.argv))
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `lazaret attach [N]`: this terminal shows hosted session N of the
/// domain (or its newest, or a new shell when none runs), until the
/// session ends or the human detaches (prefix, then `d`).
pub fn attach(
    explicit: &Option<PathBuf>,
    env: &dyn HostEnv,
    profile: Option<&str>,
    workspace: Option<&Path>,
    session: Option<u32>,
    new: bool,
    prefix: &str,
) -> Result<ExitCode> {
    let terminal = nix::unistd::isatty(std::io::stdin()).unwrap_or(false)
        && nix::unistd::isatty(std::io::stdout()).unwrap_or(false);
    if !terminal {
        bail!(
            "`lazaret attach` needs a terminal (stdin and stdout); `lazaret exec` runs a command without one"
        );
    }
    let choice = match (session, new) {
        (Some(n), _) => crate::client::SessionChoice::Attach(n),
        (None, true) => crate::client::SessionChoice::Start,
        (None, false) => crate::client::SessionChoice::Latest,
    };
    crate::ui::run(
        crate::client::Mode::Shell,
        explicit,
        env,
        profile,
        workspace,
        prefix,
        choice,
    )
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
        let config = crate::client::Launcher::new(crate::client::Mode::Shell, explicit, env)
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
        let podman = crate::podman::Podman::default();
        let labelled = crate::engine::labelled_domains(&podman)
            .context("cannot list the domains' containers")?;
        // What podman's namespace has mounted: a broken domain's State
        // Anchor or network namespace would be there.
        let mounts = podman
            .run(["unshare", "cat", "/proc/self/mountinfo"])
            .context("cannot read podman's mount table")?;
        for b in crate::engine::teardown::broken_domains(&rundir) {
            let mounted = mounts.contains(&format!("/domains/{}/", b.hash));
            if !broken.contains(&b.hash) && !mounted && !labelled.iter().any(|d| d.hash == b.hash) {
                // Its record says what could not be checked then (its
                // folder may be gone since); nothing of it is left now.
                let _ = std::fs::remove_file(crate::engine::teardown::marker(&rundir, &b.hash));
                println!(
                    "broken domain {} is down: no container or mount of it is left",
                    b.hash
                );
                n += 1;
                continue;
            }
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
        // Folders of starts that failed are broken too, with nothing to
        // bring down: they go, so `domains list` shows no broken domain.
        let entries = crate::domains::list(&config.data_root, &labelled, &coordinator_processes());
        n += remove_failed_starts(&entries, &labelled, &rundir, &podman)?;
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
        println!("domain {} is down", ctx.anchor.hash());
    } else if !leaves_something(&ctx.anchor)? {
        // Nothing of it runs: an error, as `podman stop` of a missing
        // container is (issue 43), unless its state is to go.
        if !purge {
            anyhow::bail!(
                "no domain {} ({} in {}) is running: nothing to bring down; `lazaret status` lists the running domains",
                ctx.anchor.hash(),
                ctx.anchor.name(),
                lazaret_widgets::visible::make_visible(
                    &ctx.anchor.workspace().display().to_string()
                )
                .0
            );
        }
    } else {
        // No coordinator (it was killed?): clean what it left, holding the
        // domain lock so no new coordinator starts meanwhile.
        let _guard = crate::coordinator::lock::exclusive(&ctx.lock_file)?;
        Engine::new(&config, rundir)
            .down(&ctx.anchor)
            .with_context(|| format!("cannot clean up domain {}", ctx.anchor.hash()))?;
        let _ = std::fs::remove_file(&ctx.control_socket);
        println!("domain {} is down", ctx.anchor.hash());
    }
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

/// Whether anything of the domain is left to bring down without its
/// coordinator: a container labelled with it, or a mount of its Domain
/// Root in podman's namespace.
fn leaves_something(anchor: &crate::domain::DomainAnchor) -> Result<bool> {
    let podman = crate::podman::Podman::default();
    let labelled =
        crate::engine::labelled_domains(&podman).context("cannot list the domains' containers")?;
    if labelled.iter().any(|d| d.hash == anchor.hash()) {
        return Ok(true);
    }
    let mounts = podman
        .run(["unshare", "cat", "/proc/self/mountinfo"])
        .context("cannot read podman's mount table")?;
    Ok(mounts.contains(&format!("/domains/{}/", anchor.hash())))
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
    let config = crate::client::load_with(explicit.clone(), env, true)?;
    let rundir = RuntimeDir::ensure(&RuntimeDir::locate(env))?;
    let workspace = match workspace {
        Some(p) => p.to_path_buf(),
        None => crate::client::current_dir()?,
    };
    let selected = config.select_profile(profile)?;
    let name = crate::domain::name_of(&selected.name, profile);
    let anchor = crate::domain::DomainAnchor::new(&name, &workspace)?;
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

/// What `lazaret domains prune` was asked to do.
#[derive(Debug, Clone, Copy)]
pub struct Prune {
    pub age: Duration,
    pub dry_run: bool,
    pub force: bool,
    /// Also the old checkpoints of running domains.
    pub running: bool,
}

/// `lazaret domains list` and `lazaret domains prune --older-than AGE`.
pub fn domains(
    explicit: &Option<PathBuf>,
    env: &dyn HostEnv,
    json: bool,
    prune: Option<Prune>,
) -> Result<ExitCode> {
    use crate::domains::{State, list, remove_root, unpropagated_commit};
    let config = crate::client::Launcher::new(crate::client::Mode::Shell, explicit, env)?.config;
    let rundir = RuntimeDir::ensure(&RuntimeDir::locate(env))?;
    let rt = runtime()?;
    let podman = crate::podman::Podman::default();
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
    let Some(prune) = prune else {
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
    let age = prune.age.as_secs();
    // The plan, said whole before anything goes (podman's prune lists
    // what it removes; docker's asks).
    let old_checkpoints: Vec<(&crate::domains::Entry, crate::checkpoint::Checkpoint)> = entries
        .iter()
        .filter(|e| prune.running || e.state == State::Stopped)
        .flat_map(|e| {
            crate::checkpoint::list(&e.root)
                .into_iter()
                .filter(|c| now.saturating_sub(c.created) >= age)
                .map(move |c| (e, c))
        })
        .collect();
    let old_domains: Vec<&crate::domains::Entry> = entries
        .iter()
        .filter(|e| e.state == State::Stopped && now.saturating_sub(e.last_used) >= age)
        .collect();
    let failed: Vec<&crate::domains::Entry> = entries
        .iter()
        .filter(|e| crate::domains::failed_start(e, &labelled))
        .collect();
    let kept_running = entries
        .iter()
        .filter(|e| e.state != State::Stopped && !prune.running)
        .map(|e| crate::checkpoint::list(&e.root).len())
        .sum::<usize>();
    let verb = if prune.dry_run {
        "would remove"
    } else {
        "to remove"
    };
    for e in &failed {
        println!("{verb}: {} (a start that failed)", e.hash);
    }
    for (e, c) in &old_checkpoints {
        println!("{verb}: checkpoint {} of domain {}", c.name, e.hash);
    }
    for e in &old_domains {
        println!(
            "{verb}: domain {} ({}, stopped)",
            e.hash,
            crate::engine::limits::show_size(e.size)
        );
    }
    if kept_running > 0 {
        println!(
            "kept: {kept_running} checkpoint(s) of running domains (--running removes the old ones too)"
        );
    }
    let planned = failed.len() + old_checkpoints.len() + old_domains.len();
    if planned == 0 {
        println!("nothing to prune");
        return Ok(ExitCode::SUCCESS);
    }
    if prune.dry_run {
        println!("dry run: nothing was removed");
        return Ok(ExitCode::SUCCESS);
    }
    if !prune.force && !confirm(&format!("remove these {planned}?")) {
        println!("nothing was removed (--force removes without asking)");
        return Ok(ExitCode::FAILURE);
    }
    let mut removed = remove_failed_starts(&entries, &labelled, &rundir, &podman)?;
    for (e, c) in &old_checkpoints {
        let dir = crate::checkpoint::dir(&e.root, &c.name);
        match crate::checkpoint::remove(&podman, &dir) {
            Ok(()) => println!("removed checkpoint {} of domain {}", c.name, e.hash),
            Err(err) => eprintln!("lazaret: {err}"),
        }
    }
    for e in old_domains {
        if let Some(commit) = unpropagated_commit(e) {
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
    if removed == 0 && old_checkpoints.is_empty() {
        println!("nothing was removed");
    }
    Ok(ExitCode::SUCCESS)
}

/// Removes the Domain Roots that failed starts left (see
/// [`crate::domains::failed_start`]), whatever their age: `domains list`
/// calls them broken and nothing else would ever remove them. One whose
/// domain lock is held is starting now, and is left alone.
fn remove_failed_starts(
    entries: &[crate::domains::Entry],
    labelled: &[crate::engine::LabelledDomain],
    rundir: &RuntimeDir,
    podman: &crate::podman::Podman,
) -> Result<usize> {
    let mut removed = 0;
    for e in entries {
        if !crate::domains::failed_start(e, labelled) {
            continue;
        }
        let lock = crate::domain::lock_file_of(rundir, &e.hash);
        let Some(_guard) = crate::coordinator::lock::try_exclusive(&lock)? else {
            continue;
        };
        let why = crate::domains::failure_reason(e);
        crate::domains::remove_root(podman, &e.root)
            .map_err(|err| anyhow::anyhow!("cannot delete {}: {err}", e.root.display()))?;
        let _ = std::fs::remove_file(&lock);
        match why {
            Some(why) => println!("removed {} (a start that failed: {why})", e.hash),
            None => println!("removed {} (a start that failed)", e.hash),
        }
        removed += 1;
    }
    Ok(removed)
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
    // All is read: from here on this only prints (a closed pipe is quiet).
    if json {
        // The stored record as it is: `time` stays seconds since the epoch.
        super::print_out(&format!("{}\n", serde_json::to_string_pretty(&records)?))?;
    } else if !verify {
        let mut out = String::new();
        for r in &records {
            // Records hold the agent's argv, cwd and reasons: escaped.
            out.push_str(&format!(
                "{:>5}  {}  {:<20} {}\n",
                r.seq,
                rfc3339(r.time),
                visible(&r.kind),
                visible(&r.data.to_string())
            ));
        }
        super::print_out(&out)?;
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

/// Seconds since the epoch as RFC 3339 in UTC (`2026-12-02T13:58:07Z`),
/// for people; the sidecar's clock does the calendar.
fn rfc3339(unix: u64) -> String {
    // `YYYY-MM-DD HH:MM:SS UTC`
    let clock = lazaret_sidecar::names::clock(unix);
    format!("{}T{}Z", &clock[..10], &clock[11..19])
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
    let config = crate::client::load(explicit.clone(), env)?;
    let name = profile;
    let profile = config.select_profile(Some(name))?.clone();
    let resolved: ResolvedProfile =
        config.resolve_named(name, &profile, workspace, env, HostVars::Require)?;
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
