//! The host side of the Network Sidecar (spec FR-3, decisions.md D2): the
//! domain's egress policy from the configuration, sent to the sidecar at
//! start and on every change, read back to prove it is in force.
//!
//! The policy model itself lives in the `lazaret-sidecar` crate, so host and
//! sidecar judge every address with the same code. Updates travel through
//! `podman exec` into the sidecar: a channel the agent (which has no podman
//! and no socket to the sidecar) cannot reach.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use lazaret_sidecar::kernel;
use lazaret_sidecar::policy::{Policy, PolicySpec, SpecRule, Verdict};
use lazaret_sidecar::report::TableReport;

use crate::config::{Config, ProfileConfig};
use crate::engine::podman::{Podman, PodmanError};

/// The slirp4netns address that reaches the host's loopback.
pub const HOST_LOOPBACK_ALIAS: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 2, 2));
/// The sidecar binary inside its image.
const SIDECAR: &str = "/lazaret-sidecar";

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error(transparent)]
    Podman(#[from] PodmanError),
    #[error("the policy is not valid: {0}")]
    Policy(String),
    #[error("the sidecar answered something unreadable: {0}")]
    Report(String),
    #[error("the sidecar's table differs from the policy after applying it: {0}")]
    NotInForce(String),
    #[error("cannot keep the live policy in {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// A configuration's rule list, each rule with the `file:line:col` it came from.
fn spec_rules(config: &Config, key: &str, nets: &[IpNet]) -> Vec<SpecRule> {
    nets.iter()
        .enumerate()
        .map(
            |(i, net)| match config.merged.origin(&format!("{key}[{i}]")) {
                Some(loc) => SpecRule::with_origin(*net, loc.to_string()),
                None => SpecRule::new(*net),
            },
        )
        .collect()
}

/// The effective policy of `profile` (spec §3.1, D2).
pub fn policy_spec(config: &Config, profile: &ProfileConfig) -> PolicySpec {
    PolicySpec {
        default_allow: spec_rules(
            config,
            "network.default_allow",
            &config.network.default_allow,
        ),
        default_deny: spec_rules(config, "network.default_deny", &config.network.default_deny),
        profile: Some(profile.name.clone()),
        allow_egress: spec_rules(
            config,
            &format!("profiles.{}.allow_egress", profile.name),
            &profile.allow_egress,
        ),
    }
}

pub fn policy(spec: PolicySpec) -> Result<Policy, NetError> {
    Policy::new(spec).map_err(|e| NetError::Policy(e.to_string()))
}

/// Whether the sandbox's network should reach the host's loopback at all:
/// only when the policy allows the alias (otherwise slirp4netns is started
/// without it, so not even a device-bound socket can get there).
pub fn needs_host_loopback(policy: &Policy) -> bool {
    policy.why(HOST_LOOPBACK_ALIAS).verdict == Verdict::Allow
}

/// Where the live policy of a domain is kept (it may differ from the
/// configuration after `lazaret net allow|deny`).
pub fn live_policy_file(domain_root: &Path) -> PathBuf {
    domain_root.join("policy.json")
}

pub fn save_live(domain_root: &Path, spec: &PolicySpec) -> Result<(), NetError> {
    let path = live_policy_file(domain_root);
    std::fs::create_dir_all(domain_root).map_err(|error| NetError::Io {
        path: path.clone(),
        error,
    })?;
    std::fs::write(&path, spec.to_json()).map_err(|error| NetError::Io { path, error })
}

pub fn load_live(domain_root: &Path) -> Option<PolicySpec> {
    let text = std::fs::read_to_string(live_policy_file(domain_root)).ok()?;
    Policy::from_json(&text).ok().map(|p| p.spec().clone())
}

fn parse_report(text: &str) -> Result<TableReport, NetError> {
    serde_json::from_str(text).map_err(|e| {
        NetError::Report(format!(
            "{e}: {}",
            text.chars().take(200).collect::<String>()
        ))
    })
}

/// The sidecar's live table, explained against `policy` when given.
pub fn show(
    podman: &Podman,
    sidecar: &str,
    policy: Option<&Policy>,
) -> Result<TableReport, NetError> {
    let out = podman.run(["exec", sidecar, SIDECAR, "show", "--json"])?;
    let mut report = parse_report(&out)?;
    if let Some(p) = policy {
        report.explain(p);
    }
    Ok(report)
}

/// `true` when the sidecar's kernel rules are exactly the policy's.
pub fn in_force(report: &TableReport, policy: &Policy) -> bool {
    report.rules() == kernel::desired(policy)
}

/// Sends `policy` to a running sidecar and checks it took effect.
pub fn apply(podman: &Podman, sidecar: &str, policy: &Policy) -> Result<TableReport, NetError> {
    let dir = tempfile::tempdir().map_err(|error| NetError::Io {
        path: std::env::temp_dir(),
        error,
    })?;
    let file = dir.path().join("policy.json");
    std::fs::write(&file, policy.spec().to_json()).map_err(|error| NetError::Io {
        path: file.clone(),
        error,
    })?;
    let out = podman.run_with(
        [
            "exec", "-i", sidecar, SIDECAR, "apply", "--policy", "-", "--json",
        ],
        Duration::from_secs(30),
        Some(&file),
    )?;
    let mut report = parse_report(&out)?;
    if !in_force(&report, policy) {
        return Err(NetError::NotInForce(format!("{report}")));
    }
    report.explain(policy);
    Ok(report)
}

/// The policy a domain runs under: its live policy (after earlier
/// `allow`/`deny` edits), else the configured one.
pub fn effective_spec(domain_root: &Path, configured: &PolicySpec) -> PolicySpec {
    load_live(domain_root).unwrap_or_else(|| configured.clone())
}

/// Allows (or denies) egress to `net` in a running domain, at once: the
/// live policy gets the rule (replacing an earlier live rule for the same
/// network), the sidecar applies it and proves it in force, and only then
/// is the live policy kept for later commands and restarts of the UI.
pub fn change(
    podman: &Podman,
    sidecar: &str,
    domain_root: &Path,
    configured: &PolicySpec,
    net: IpNet,
    allow: bool,
    origin: &str,
) -> Result<(PolicySpec, TableReport), NetError> {
    let mut spec = effective_spec(domain_root, configured);
    let rule = SpecRule::with_origin(net, origin);
    spec.allow_egress.retain(|r| r.net != net);
    spec.default_deny.retain(|r| r.net != net);
    if allow {
        spec.allow_egress.push(rule);
    } else {
        spec.default_deny.push(rule);
    }
    let policy = policy(spec.clone())?;
    let report = apply(podman, sidecar, &policy)?;
    save_live(domain_root, &spec)?;
    Ok((spec, report))
}
