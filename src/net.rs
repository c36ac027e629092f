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
use lazaret_sidecar::names::{NamePattern, SpecName};
use lazaret_sidecar::policy::{Policy, PolicySpec, SpecRule, Verdict};
use lazaret_sidecar::report::TableReport;

use crate::podman::{Podman, PodmanError};

/// The slirp4netns address that reaches the host's loopback.
pub const HOST_LOOPBACK_ALIAS: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 2, 2));
/// The sidecar binary inside its image.
const SIDECAR: &str = "/lazaret-sidecar";
/// Where the running `serve` takes `apply`/`show` (a tmpfs of the sidecar's
/// own; the agent's mount namespace never sees it).
pub const CONTROL_DIR: &str = "/run/lazaret-sidecar";
pub const CONTROL_SOCKET: &str = lazaret_sidecar::control::DEFAULT_SOCKET;

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
    #[error(
        "{NEEDS_RESTART_WHY}. Nothing was changed. To use it, save the rule into \
         ./lazaret.toml (the same `lazaret net allow` with `--save`) and restart the domain \
         (`lazaret down`, then start it again)"
    )]
    NeedsRestart,
    #[error("cannot keep the live policy in {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// Why opening the host's loopback needs a restart of the domain.
pub const NEEDS_RESTART_WHY: &str = "10.0.2.2 (the host's loopback) cannot be opened in a \
     running domain: its network was started without the host alias, and slirp4netns cannot \
     add it live";

/// `e` as a sentence that says what failed and what to do: podman's own
/// words are kept only as the detail of a failure that is not a known one.
pub fn explain(e: &NetError, sidecar: &str) -> String {
    match e {
        NetError::Podman(PodmanError::Failed { stderr, .. })
            if stderr.contains("no such container")
                || stderr.contains("not running")
                || stderr.contains("state improper") =>
        {
            format!(
                "the domain stopped (its Network Sidecar {sidecar} is not running); see `lazaret status`, and start it again"
            )
        }
        NetError::Podman(PodmanError::Failed { stderr, .. }) => format!(
            "podman could not reach the Network Sidecar {sidecar} ({}); check the domain with `lazaret status` and podman with `lazaret doctor`",
            stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no message")
                .trim()
        ),
        NetError::Podman(PodmanError::Timeout { secs, .. }) => format!(
            "podman did not answer within {secs} s while talking to the Network Sidecar {sidecar}; check podman with `lazaret doctor`, then try again"
        ),
        other => other.to_string(),
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
    // Atomic: a reader never sees half a policy (and falls back to the
    // configuration).
    crate::rundir::write_private(&path, spec.to_json().as_bytes())
        .map_err(|error| NetError::Io { path, error })
}

/// Held while a domain's live policy is changed, or compared with the
/// sidecar's table: one change at a time (two at once could lose one), and
/// a comparison never pairs the table of one moment with the saved policy
/// of another (which read as "differs" while a change was being made).
pub fn lock_live_policy(domain_root: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, NetError> {
    let path = domain_root.join("policy.lock");
    let io = |error| NetError::Io {
        path: path.clone(),
        error,
    };
    std::fs::create_dir_all(domain_root).map_err(io)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io)?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| io(std::io::Error::from(errno)))
}

/// The sidecar's table and whether it is the domain's policy in force,
/// read under [`lock_live_policy`].
pub fn show_in_force(
    podman: &Podman,
    sidecar: &str,
    domain_root: &Path,
    configured: &PolicySpec,
) -> Result<(TableReport, Policy, bool), NetError> {
    let _held = lock_live_policy(domain_root)?;
    let policy = policy(effective_spec(domain_root, configured))?;
    let report = show(podman, sidecar, Some(&policy))?;
    let in_force = in_force(&report, &policy);
    Ok((report, policy, in_force))
}

/// Whether the running domain's user-mode network offers the host's
/// loopback alias (decided at start; slirp4netns cannot change it live).
fn host_loopback_file(domain_root: &Path) -> PathBuf {
    domain_root.join("host-loopback")
}

pub fn save_host_loopback(domain_root: &Path, offered: bool) -> Result<(), NetError> {
    let path = host_loopback_file(domain_root);
    std::fs::write(&path, if offered { "yes\n" } else { "no\n" })
        .map_err(|error| NetError::Io { path, error })
}

fn host_loopback_offered(domain_root: &Path) -> bool {
    std::fs::read_to_string(host_loopback_file(domain_root)).is_ok_and(|s| s.trim() == "yes")
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
    let out = podman.run([
        "exec",
        sidecar,
        SIDECAR,
        "show",
        "--json",
        "--control",
        CONTROL_SOCKET,
    ])?;
    let mut report = parse_report(&out)?;
    if let Some(p) = policy {
        report.explain(p);
    }
    Ok(report)
}

/// `true` when the sidecar's kernel rules are exactly the policy's, plus
/// the rules its resolver opened for allowed names (each an address no CIDR
/// rule decides).
pub fn in_force(report: &TableReport, policy: &Policy) -> bool {
    report.router.as_ref().is_some_and(|r| r.in_force())
        && report.policy_rules() == kernel::desired(policy)
        && report.names.iter().all(|n| {
            matches!(
                policy.name_route(n.address),
                lazaret_sidecar::policy::NameRoute::Open(_)
            )
        })
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
            "exec",
            "-i",
            sidecar,
            SIDECAR,
            "apply",
            "--policy",
            "-",
            "--json",
            "--control",
            CONTROL_SOCKET,
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

/// What `lazaret net allow|deny` and the network panel change: a network
/// or a name pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Net(IpNet),
    Name(NamePattern),
}

impl Target {
    /// A CIDR, a bare address (/32 or /128), or a name (`api.example.com`,
    /// `*.example.com`).
    pub fn parse(raw: &str) -> Result<Target, String> {
        let raw = raw.trim();
        if raw.parse::<IpAddr>().is_ok() || raw.contains('/') || raw.contains(':') {
            return lazaret_sidecar::policy::parse_cidr(raw).map(Target::Net);
        }
        NamePattern::parse(raw).map(Target::Name).map_err(|e| {
            format!("{e}; write a CIDR (192.0.2.0/24), an address or a host name (*.example.com)")
        })
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Net(n) => n.fmt(f),
            Target::Name(n) => n.fmt(f),
        }
    }
}

/// Allows (or denies) egress to `target` in a running domain, at once: the
/// live policy gets the rule (replacing an earlier live rule for the same
/// network or name), the sidecar applies it and proves it in force, and only
/// then is the live policy kept for later commands and restarts of the UI.
/// A change the running domain cannot make (opening the host's loopback
/// when its network started without it) fails and says so.
pub fn change(
    podman: &Podman,
    sidecar: &str,
    domain_root: &Path,
    configured: &PolicySpec,
    target: &Target,
    allow: bool,
    origin: &str,
) -> Result<(PolicySpec, TableReport), NetError> {
    let _held = lock_live_policy(domain_root)?;
    let mut spec = effective_spec(domain_root, configured);
    match target {
        Target::Net(net) => {
            let net = *net;
            let rule = SpecRule::with_origin(net, origin);
            spec.allow_egress.retain(|r| r.net != net);
            spec.default_deny.retain(|r| r.net != net);
            if allow {
                spec.allow_egress.push(rule);
            } else {
                spec.default_deny.push(rule);
            }
        }
        Target::Name(pattern) => {
            let name = SpecName::with_origin(pattern.clone(), origin);
            spec.allow_domains.retain(|n| n.pattern != *pattern);
            spec.deny_domains.retain(|n| n.pattern != *pattern);
            if allow {
                spec.allow_domains.push(name);
            } else {
                spec.deny_domains.push(name);
            }
        }
    }
    let policy = policy(spec.clone())?;
    if needs_host_loopback(&policy) && !host_loopback_offered(domain_root) {
        return Err(NetError::NeedsRestart);
    }
    let report = apply(podman, sidecar, &policy)?;
    save_live(domain_root, &spec)?;
    Ok((spec, report))
}
