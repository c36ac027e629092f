//! `lazaret checkpoint` and `lazaret checkpoints` (issue 30).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

use super::{DomainArgs, engine, resolve};
use crate::host::HostEnv;
use crate::rundir::RuntimeDir;

/// Asks the domain's coordinator to save the running sandbox.
pub fn take(
    explicit: Option<PathBuf>,
    env: &dyn HostEnv,
    d: &DomainArgs,
    name: Option<String>,
) -> Result<ExitCode> {
    let (_, resolved) = resolve(explicit, env, d)?;
    if let Some(n) = &name {
        crate::checkpoint::check_name(n).map_err(anyhow::Error::msg)?;
    }
    let control = resolved
        .domain
        .control_socket(&RuntimeDir::ensure(&RuntimeDir::locate(env))?);
    let rt = crate::client::session::runtime()?;
    if !control.exists() {
        bail!(
            "the domain of profile {} for {} is not running: start it (`lazaret ui`), then take the checkpoint",
            resolved.profile.name,
            resolved.domain.workspace().display()
        );
    }
    let (path, checkpoint) = rt
        .block_on(crate::coordinator::client::checkpoint(&control, name))
        .map_err(|e| anyhow::anyhow!("no checkpoint was taken: {e}"))?;
    println!(
        "checkpoint {} of domain {}: {} in {} (the sandbox was paused {} ms, its Session Host held {} ms, and runs on)",
        checkpoint.name,
        resolved.domain.hash(),
        crate::checkpoint::show_bytes(checkpoint.bytes),
        path,
        checkpoint.paused_ms,
        checkpoint.held_ms
    );
    Ok(ExitCode::SUCCESS)
}

/// Lists the domain's checkpoints.
pub fn list(
    explicit: Option<PathBuf>,
    env: &dyn HostEnv,
    d: &DomainArgs,
    json: bool,
) -> Result<ExitCode> {
    let (config, resolved) = resolve(explicit, env, d)?;
    let root = resolved
        .domain
        .domain_root(&engine(&config, env)?.data_root);
    let all = crate::checkpoint::list(&root);
    if json {
        // The Session Host's token stays in the Domain Root.
        let shown: Vec<serde_json::Value> = all
            .iter()
            .map(|c| {
                serde_json::json!({
                    "name": c.name, "created": c.created, "bytes": c.bytes,
                    "held_ms": c.held_ms, "paused_ms": c.paused_ms,
                    "path": crate::checkpoint::dir(&root, &c.name),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&shown)?);
        return Ok(ExitCode::SUCCESS);
    }
    if all.is_empty() {
        println!(
            "no checkpoints of domain {} (`lazaret checkpoint` takes one)",
            resolved.domain.hash()
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:<24} {:<20} {:>10}", "NAME", "TAKEN (UTC)", "SIZE");
    for c in &all {
        let taken = crate::checkpoint::default_name(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(c.created),
        );
        println!(
            "{:<24} {:<20} {:>10}",
            c.name,
            taken,
            crate::checkpoint::show_bytes(c.bytes)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Brings the domain back as checkpoint `name`: the running domain (if
/// any) is taken down, and its next start restores the checkpoint instead
/// of starting fresh; that start happens now, and this returns once the
/// restored domain is up (its sessions hold it up after).
pub fn restore(
    explicit: &Option<PathBuf>,
    env: &dyn HostEnv,
    d: &DomainArgs,
    name: &str,
    force: bool,
) -> Result<ExitCode> {
    let (config, resolved) = resolve(explicit.clone(), env, d)?;
    let engine = engine(&config, env)?;
    let root = resolved.domain.domain_root(&engine.data_root);
    let chosen = find(&resolved, &root, name)?;
    // The agent's branch in the user's repository follows the restored
    // clone: commits it gained since the checkpoint would leave it.
    // The checkpoint's copy of the branch is the agent's file: one that
    // cannot be read (too large, say) leaves the question open, which
    // --force answers like the other.
    match crate::engine::branch_set_back(
        &engine.data_root,
        &resolved.domain,
        resolved.profile.workspace_mode,
        &chosen.name,
    ) {
        _ if force => {}
        Ok(Some((branch, n))) => bail!(
            "restoring checkpoint {name} sets branch {branch} in {} back by {n} commit(s) the agent made since (your repository's reflog keeps them); restore anyway with --force, or keep them first (e.g. `git branch keep {branch}`)",
            resolved.domain.workspace().display()
        ),
        Ok(None) => {}
        Err(e) => bail!(
            "cannot tell what restoring checkpoint {name} would set back in {}: {e}; restore anyway with --force (the agent's branch there then follows the restored clone)",
            resolved.domain.workspace().display()
        ),
    }
    let (profile, workspace) = (d.profile(), d.workspace.as_deref());
    let (_, ctx, _) = crate::client::context(explicit, env, profile, workspace)?;
    let rt = crate::client::session::runtime()?;
    if rt
        .block_on(crate::client::session::query(&ctx.control_socket))
        .is_ok()
    {
        println!(
            "taking domain {} down: it comes back as checkpoint {name}",
            resolved.domain.hash()
        );
        super::session::down(explicit, env, profile, workspace, false, false)?;
    }
    crate::checkpoint::request(&root, &chosen, None).map_err(anyhow::Error::msg)?;
    let took = start_restored(&ctx)
        .with_context(|| format!("cannot restore domain {}", resolved.domain.hash()))?;
    println!(
        "domain {} is checkpoint {name} again, its processes running ({} ms); `lazaret attach` lists its sessions",
        resolved.domain.hash(),
        took.as_millis()
    );
    Ok(ExitCode::SUCCESS)
}

/// Makes a second domain from checkpoint `name` of the domain `d` names:
/// the fork `PROFILE@NEW`, with its own Domain Anchor (so its own Domain
/// Root, containers, Trust Anchor and session credentials, policy
/// instance) and its own branch `lazaret/agent-PROFILE-NEW`, started now
/// from the checkpoint beside the original (which runs on untouched).
pub fn fork(
    explicit: &Option<PathBuf>,
    env: &dyn HostEnv,
    d: &DomainArgs,
    name: &str,
    new: &str,
) -> Result<ExitCode> {
    let (config, original) = resolve(explicit.clone(), env, d)?;
    crate::domain::validate_fork_name(new).map_err(anyhow::Error::msg)?;
    let engine = engine(&config, env)?;
    let from_root = original.domain.domain_root(&engine.data_root);
    let chosen = find(&original, &from_root, name)?;
    let profile = &original.profile.name;
    // The fork's branch must be no other domain's.
    let clash = format!("{profile}-{new}");
    if config.profiles.contains_key(&clash) {
        bail!(
            "a fork named {new} would use the branch lazaret/agent-{clash}, which profile {clash} uses; choose another name"
        );
    }
    let fork_name = format!("{profile}@{new}");
    let fork_args = DomainArgs {
        profile: Some(fork_name.clone()),
        profile_flag: None,
        workspace: Some(original.domain.workspace().to_path_buf()),
    };
    let (_, forked) = resolve(explicit.clone(), env, &fork_args)?;
    let fork_root = forked.domain.domain_root(&engine.data_root);
    if std::fs::symlink_metadata(&fork_root).is_ok() {
        bail!(
            "domain {fork_name} exists already ({}): `lazaret down {fork_name} --purge` removes it; or choose another name",
            forked.domain.hash()
        );
    }
    let started = std::time::Instant::now();
    let made = make_fork(&engine, &original, &forked, &chosen).and_then(|()| {
        let from = format!("{} ({})", original.domain.name(), original.domain.hash());
        crate::checkpoint::request(&fork_root, &chosen, Some(from)).map_err(anyhow::Error::msg)?;
        let (_, ctx, _) = crate::client::context(
            explicit,
            env,
            Some(&fork_name),
            Some(forked.domain.workspace()),
        )?;
        start_restored(&ctx)
    });
    if let Err(e) = made {
        // Nothing of a fork that did not start is kept: its name is free.
        let _ = engine.purge(&forked.domain);
        return Err(e.context(format!(
            "cannot fork checkpoint {name} of domain {} as {fork_name}",
            original.domain.hash()
        )));
    }
    println!(
        "domain {fork_name} ({}) is a fork of checkpoint {name} of domain {} ({}), its processes running ({} ms); its branch is {}; `lazaret attach -p {fork_name}` lists its sessions",
        forked.domain.hash(),
        original.domain.name(),
        original.domain.hash(),
        started.elapsed().as_millis(),
        forked.domain.agent_branch()
    );
    Ok(ExitCode::SUCCESS)
}

/// The fork's Domain Root: the checkpoint copied in, and in the copy of
/// the agent's git the fork's branch made where the original's was, and
/// checked out.
fn make_fork(
    engine: &crate::engine::Engine,
    original: &crate::config::ResolvedProfile,
    forked: &crate::config::ResolvedProfile,
    chosen: &crate::checkpoint::Checkpoint,
) -> Result<()> {
    let from_root = original.domain.domain_root(&engine.data_root);
    let fork_root = forked.domain.domain_root(&engine.data_root);
    crate::checkpoint::create_private_dir(&fork_root).map_err(anyhow::Error::msg)?;
    crate::domain::record_anchor(&fork_root, &forked.domain)
        .with_context(|| format!("cannot write {}", fork_root.display()))?;
    crate::checkpoint::copy_to(&engine.podman, &from_root, &chosen.name, &fork_root)
        .map_err(anyhow::Error::msg)?;
    let files = crate::checkpoint::dir(&fork_root, &chosen.name).join("files");
    // The mount points the original made in its clone are the fork's now
    // (the saved sandbox's mount table follows them).
    let points = files.join(crate::domain::MOUNTPOINTS_FILE);
    if let Ok(text) = std::fs::read_to_string(&points) {
        let moved: String = text
            .lines()
            .map(|l| match std::path::Path::new(l).strip_prefix(&from_root) {
                Ok(rest) => format!("{}\n", fork_root.join(rest).display()),
                Err(_) => format!("{l}\n"),
            })
            .collect();
        std::fs::write(&points, moved)
            .with_context(|| format!("cannot write {}", points.display()))?;
    }
    let layout = engine.layout(forked)?;
    let Some(gitdir) = layout.agent_gitdir.as_deref() else {
        return Ok(());
    };
    // Where the checkpoint keeps the agent's git of the fork's layout.
    let kept = files.join(gitdir.strip_prefix(&fork_root).unwrap_or(gitdir));
    if !kept.is_dir() {
        return Ok(());
    }
    let branch = original.domain.agent_branch();
    let oid = crate::git_sentry::sync::read_branch(&kept, &branch)?.with_context(|| {
        format!("the checkpoint's copy of the agent's git has no branch {branch}")
    })?;
    crate::git_sentry::sync::point_branch(&kept, &forked.domain.agent_branch(), &oid)?;
    Ok(())
}

/// The checkpoint `name` of the domain `resolved` (gVisor only).
fn find(
    resolved: &crate::config::ResolvedProfile,
    root: &std::path::Path,
    name: &str,
) -> Result<crate::checkpoint::Checkpoint> {
    if !resolved.profile.runtime.is_gvisor() {
        bail!(
            "profile {} runs under {}: only gVisor (runsc) can restore a checkpoint",
            resolved.profile.name,
            resolved.profile.runtime.as_str()
        );
    }
    crate::checkpoint::check_name(name).map_err(anyhow::Error::msg)?;
    crate::checkpoint::list(root)
        .into_iter()
        .find(|c| c.name == name)
        .with_context(|| {
            format!(
                "domain {} has no checkpoint named {name}; `lazaret checkpoints` lists them",
                resolved.domain.hash()
            )
        })
}

/// Starts the domain of `ctx` through its coordinator, which restores the
/// checkpoint its Domain Root asks for; returns once it is up.
fn start_restored(ctx: &crate::coordinator::client::DomainContext) -> Result<std::time::Duration> {
    let rt = crate::client::session::runtime()?;
    let started = std::time::Instant::now();
    let session = crate::client::session::SessionAnchor::new()?;
    let hello = session.hello("restore", false);
    let mut progress = crate::client::session::step_printer();
    let client = rt.block_on(crate::coordinator::client::connect(
        ctx,
        &hello,
        true,
        &mut progress,
    ))?;
    drop(client);
    Ok(started.elapsed())
}
