//! `lazaret net show|why|allow|deny`: a domain's egress policy, read from
//! and changed in its Network Sidecar, and (`--save`) kept in ./lazaret.toml.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

use super::{NetCommand, current_dir, print_out, resolve};
use crate::config::ResolvedProfile;
use crate::coordinator::client::{self, ClientError, PolicyAnswer};
use crate::host::{HostEnv, SystemEnv};
use crate::net::{self, NetError, Target};
use crate::podman::Podman;
use crate::rundir::RuntimeDir;

pub(super) fn net_command(
    explicit: Option<PathBuf>,
    env: &dyn HostEnv,
    cmd: &NetCommand,
) -> Result<ExitCode> {
    let (d, change) = match cmd {
        NetCommand::Show { domain: d, .. } | NetCommand::Why { domain: d, .. } => (d, None),
        NetCommand::Allow {
            cidr, domain, save, ..
        } => (domain, Some((cidr.clone(), true, *save))),
        NetCommand::Deny {
            cidr, domain, save, ..
        } => (domain, Some((cidr.clone(), false, *save))),
    };
    let (config, resolved) = resolve(explicit, env, d)?;
    let domain_root = resolved.domain.domain_root(&config.data_root);
    let sidecar = resolved.domain.sidecar_name();
    let podman = Podman::default();
    // The live policy (after earlier allow/deny), else the configuration's.
    let spec = net::effective_spec(&domain_root, &resolved.network);
    match cmd {
        NetCommand::Why { target, .. } => {
            let policy = net::policy(spec)?;
            why(&podman, &sidecar, &policy, target)?;
            return Ok(ExitCode::SUCCESS);
        }
        NetCommand::Show { json, .. } => {
            if !running(&podman, &resolved)? {
                bail!(
                    "{}: there is no live table to show. Start it (`lazaret shell {}`), or see what the configuration allows with `lazaret config show`",
                    not_running(&resolved),
                    resolved.profile.name
                );
            }
            let (report, _, in_force) =
                net::show_in_force(&podman, &sidecar, &domain_root, &resolved.network)
                    .map_err(|e| anyhow::anyhow!(net::explain(&e, &sidecar)))?;
            if *json {
                print_out(&format!("{}\n", serde_json::to_string_pretty(&report)?))?;
            } else {
                print_out(&report.to_string())?;
            }
            if !in_force {
                eprintln!("lazaret: warning: the live table differs from the policy");
            }
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    let (raw, allow, save) = change.expect("allow or deny");
    let target = Target::parse(&raw).map_err(|e| anyhow::anyhow!(e))?;
    let saving = save
        .then(|| -> Result<Saving> {
            Ok(Saving::new(
                current_dir()?.join("lazaret.toml"),
                &config,
                &resolved,
                &target,
                allow,
            ))
        })
        .transpose()?;
    // Saving is a file edit: it works whether or not the domain runs. The
    // live change needs the domain's sidecar.
    let up = running(&podman, &resolved).map_err(|e| {
        anyhow::anyhow!(
            "{e}. Nothing was changed{}",
            if saving.is_some() { " or saved" } else { "" }
        )
    })?;
    if !up {
        let Some(saving) = saving else {
            bail!(
                "{}, so there is nothing to change live. Start it (`lazaret shell {}`), or add `--save` to write the rule into ./lazaret.toml for its next start",
                not_running(&resolved),
                resolved.profile.name
            );
        };
        saving.save(&target)?;
        println!(
            "saved {target} to {} ({}); {}: it takes effect at the next start",
            saving.file.display(),
            saving.key_path,
            not_running(&resolved)
        );
        return Ok(ExitCode::SUCCESS);
    }
    // The live change goes through the domain's Session Coordinator: it
    // applies changes one at a time and audits each, naming this process.
    let rundir = RuntimeDir::ensure(&RuntimeDir::locate(env))?;
    let socket = resolved.domain.control_socket(&rundir);
    let origin = format!(
        "lazaret net {} (live)",
        if allow { "allow" } else { "deny" }
    );
    let mut answer = crate::client::session::runtime()?.block_on(client::change_policy(
        &socket,
        &target.to_string(),
        allow,
        &origin,
    ));
    // A domain `lazaret sandbox up` started has no coordinator by design
    // (the engine driven by hand, as `status` says): its sidecar is changed
    // here, under the live policy's lock, and there is no coordinator to
    // audit it.
    if matches!(answer, Err(ClientError::NotRunning(_)))
        && super::session::started_by_sandbox_up(&rundir, resolved.domain.hash())
    {
        let changed = net::change(
            &podman,
            &sidecar,
            &domain_root,
            &resolved.network,
            &target,
            allow,
            &origin,
        );
        answer = Ok(PolicyAnswer::of(changed.map(|(_, r)| r), &sidecar));
    }
    let nothing = if saving.is_some() { " or saved" } else { "" };
    match answer {
        Ok(PolicyAnswer::Changed(report)) => {
            // One line says what changed (issue 43); the table on request.
            println!(
                "{} {target} in domain {} ({}): in force now",
                if allow { "allowed" } else { "denied" },
                resolved.domain.name(),
                resolved.domain.hash()
            );
            if matches!(
                cmd,
                NetCommand::Allow { verbose: true, .. } | NetCommand::Deny { verbose: true, .. }
            ) {
                print!("{report}");
            }
            if let Some(saving) = &saving {
                saving.save(&target)?;
                println!(
                    "saved {target} to {} ({}): it stays after the domain stops",
                    saving.file.display(),
                    saving.key_path
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        // What the running domain cannot take, the next start can: with
        // --save that is what the user asked for, and it is done.
        Ok(PolicyAnswer::Refused {
            needs_restart: true,
            ..
        }) if saving.is_some() => {
            let saving = saving.expect("checked");
            saving.save(&target)?;
            println!(
                "saved {target} to {} ({}); it takes effect at the next start, not now: {}. Restart the domain to use it (`lazaret down {}`, then start it again)",
                saving.file.display(),
                saving.key_path,
                net::NEEDS_RESTART_WHY,
                resolved.profile.name
            );
            Ok(ExitCode::SUCCESS)
        }
        Ok(PolicyAnswer::Refused {
            message,
            needs_restart: true,
        }) => bail!("{message}"),
        Ok(PolicyAnswer::Refused { message, .. }) => bail!(
            "cannot change the policy of the running domain: {message}. Nothing was changed{nothing}"
        ),
        Err(ClientError::NotRunning(_)) => bail!(
            "the Network Sidecar {sidecar} runs, but no Session Coordinator answers for the domain of profile {}, and live changes go through it. Nothing was changed{nothing}. See `lazaret status`; `lazaret down {}` cleans up what is left",
            resolved.profile.name,
            resolved.profile.name
        ),
        Err(e) => bail!(
            "cannot change the policy of the running domain: {e}. Nothing was changed{nothing}"
        ),
    }
}

/// `lazaret net why ADDRESS|NAME`: the policy's decision, and what the
/// running sidecar knows of it (when the domain runs).
fn why(
    podman: &Podman,
    sidecar: &str,
    policy: &lazaret_sidecar::Policy,
    target: &str,
) -> Result<()> {
    let held = |held: bool| {
        if held {
            " (held open by a connection)"
        } else {
            ""
        }
    };
    let clock = lazaret_sidecar::names::clock;
    if let Ok(addr) = target.parse::<std::net::IpAddr>() {
        println!("{}", policy.why(addr));
        if let Some(n) = net::show(podman, sidecar, Some(policy))
            .ok()
            .and_then(|r| r.names.into_iter().find(|n| n.address == addr))
        {
            println!(
                "{addr}: opened by the resolver for {} until {}{}",
                n.names.join(", "),
                clock(n.expires),
                held(n.held)
            );
        }
        return Ok(());
    }
    let name = lazaret_sidecar::names::normalize(target)
        .map_err(|e| anyhow::anyhow!("`{target}` is neither an address nor a host name: {e}"))?;
    println!("{}", policy.name_decision(&name));
    let Ok(report) = net::show(podman, sidecar, Some(policy)) else {
        return Ok(());
    };
    for n in report.names.iter().filter(|n| n.names.contains(&name)) {
        println!(
            "{name}: {} is open until {}{}",
            n.address,
            clock(n.expires),
            held(n.held)
        );
    }
    if let Some(r) = report.refused.iter().find(|r| r.name == name) {
        println!(
            "{name}: refused {} time(s), last at {}",
            r.count,
            clock(r.last)
        );
    }
    if let Some(f) = report.failed.iter().find(|f| f.name == name) {
        println!(
            "{name}: allowed, but its lookup failed {} time(s), last at {}: the upstream{} answered {}: {}",
            f.count,
            clock(f.last),
            report
                .resolver
                .as_deref()
                .map(|u| format!(" {u}"))
                .unwrap_or_default(),
            f.answer,
            f.meaning()
        );
    }
    Ok(())
}

/// Whether the domain's Network Sidecar runs; podman's failure to say is
/// turned into a sentence.
fn running(podman: &Podman, resolved: &ResolvedProfile) -> Result<bool> {
    let sidecar = resolved.domain.sidecar_name();
    podman
        .is_running(&sidecar)
        .map_err(|e| anyhow::anyhow!(net::explain(&NetError::Podman(e), &sidecar)))
}

fn not_running(resolved: &ResolvedProfile) -> String {
    format!(
        "the domain of profile {} for {} is not running",
        resolved.profile.name,
        resolved.domain.workspace().display()
    )
}

/// Where `--save` writes a rule: the file, the key, and the list the key
/// holds now (arrays replace whole across files, so the saved list starts
/// from the effective one and saving one rule never drops the others).
struct Saving {
    file: PathBuf,
    key: &'static str,
    /// `profiles.NAME.allow_egress`, for the user.
    key_path: String,
    base: Vec<String>,
    profile: String,
}

impl Saving {
    fn new(
        file: PathBuf,
        config: &crate::config::Config,
        resolved: &ResolvedProfile,
        target: &Target,
        allow: bool,
    ) -> Saving {
        let p = &resolved.profile;
        let (key, base) = match (target, allow) {
            (Target::Net(_), true) => ("allow_egress", strings(&p.allow_egress)),
            (Target::Net(_), false) => ("default_deny", strings(&config.network.default_deny)),
            (Target::Name(_), true) => ("allow_domains", strings(&p.allow_domains)),
            (Target::Name(_), false) => ("deny_domains", strings(&config.network.deny_domains)),
        };
        let key_path = if allow {
            format!("profiles.{}.{key}", p.name)
        } else {
            format!("network.{key}")
        };
        Saving {
            file,
            key,
            key_path,
            base,
            profile: p.name.clone(),
        }
    }

    fn save(&self, target: &Target) -> Result<()> {
        save_rule(
            &self.file,
            &self.profile,
            &target.to_string(),
            self.key,
            &self.base,
        )
    }
}

fn strings<T: ToString>(v: &[T]) -> Vec<String> {
    v.iter().map(ToString::to_string).collect()
}

/// Adds `cidr` (or a name) to ./lazaret.toml under `key`: the profile's
/// `allow_egress`/`allow_domains`, or `[network]`'s `default_deny`/
/// `deny_domains`, keeping the rest of the file as it is.
fn save_rule(file: &Path, profile: &str, cidr: &str, key: &str, base: &[String]) -> Result<()> {
    let allow = key.starts_with("allow");
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .with_context(|| format!("{} is not valid TOML; fix it first", file.display()))?;
    let array = if allow {
        let profiles = doc.entry("profiles").or_insert(toml_edit::table());
        let p = profiles
            .as_table_mut()
            .context("`profiles` is not a table")?
            .entry(profile)
            .or_insert(toml_edit::table());
        p.as_table_mut()
            .context("the profile is not a table")?
            .entry(key)
            .or_insert(toml_edit::value(toml_edit::Array::new()))
    } else {
        let network = doc.entry("network").or_insert(toml_edit::table());
        network
            .as_table_mut()
            .context("`network` is not a table")?
            .entry(key)
            .or_insert(toml_edit::value(toml_edit::Array::new()))
    };
    let array = array.as_array_mut().context("the key is not an array")?;
    for c in base.iter().map(String::as_str).chain(std::iter::once(cidr)) {
        if !array.iter().any(|v| v.as_str() == Some(c)) {
            array.push(c);
        }
    }
    // The file was trusted (or absent, or empty: a running direct-mode
    // domain leaves an empty one as the mount point that keeps it read-only
    // to the agent) before: what Lazaret writes for the user stays trusted.
    // A file that was not trusted stays untrusted.
    let store = crate::config::trust::TrustStore::locate(&SystemEnv).ok();
    let was_trusted = match &store {
        Some(store) if !text.trim().is_empty() => {
            store.is_trusted(file, &crate::config::trust::sha256_hex(text.as_bytes()))?
        }
        Some(_) => true,
        None => false,
    };
    let new_text = doc.to_string();
    std::fs::write(file, &new_text).with_context(|| format!("cannot write {}", file.display()))?;
    match store {
        Some(store) if was_trusted => {
            store.trust(file, &crate::config::trust::sha256_hex(new_text.as_bytes()))?;
        }
        _ => eprintln!(
            "lazaret: {} was not trusted, so it stays untrusted; read it, then `lazaret trust {}`",
            file.display(),
            file.display()
        ),
    }
    Ok(())
}
