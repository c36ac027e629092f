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
        "checkpoint {} of domain {}: {} in {} (the sandbox was held {} ms, and runs on)",
        checkpoint.name,
        resolved.domain.hash(),
        crate::checkpoint::show_bytes(checkpoint.bytes),
        path,
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
                    "held_ms": c.held_ms,
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
) -> Result<ExitCode> {
    let (config, resolved) = resolve(explicit.clone(), env, d)?;
    if !resolved.profile.runtime.is_gvisor() {
        bail!(
            "profile {} runs under {}: only gVisor (runsc) can restore a checkpoint",
            resolved.profile.name,
            resolved.profile.runtime.as_str()
        );
    }
    crate::checkpoint::check_name(name).map_err(anyhow::Error::msg)?;
    let root = resolved
        .domain
        .domain_root(&engine(&config, env)?.data_root);
    let Some(chosen) = crate::checkpoint::list(&root)
        .into_iter()
        .find(|c| c.name == name)
    else {
        bail!(
            "domain {} has no checkpoint named {name}; `lazaret checkpoints` lists them",
            resolved.domain.hash()
        );
    };
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
    crate::checkpoint::request(&root, &chosen).map_err(anyhow::Error::msg)?;
    let started = std::time::Instant::now();
    let session = crate::client::session::SessionAnchor::new()?;
    let hello = session.hello("restore", false);
    let mut progress = crate::client::session::step_printer();
    let client = rt
        .block_on(crate::coordinator::client::connect(
            &ctx,
            &hello,
            true,
            &mut progress,
        ))
        .with_context(|| format!("cannot restore domain {}", resolved.domain.hash()))?;
    drop(client);
    println!(
        "domain {} is checkpoint {name} again, its processes running ({} ms); `lazaret attach` lists its sessions",
        resolved.domain.hash(),
        started.elapsed().as_millis()
    );
    Ok(ExitCode::SUCCESS)
}
