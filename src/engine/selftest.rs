//! The fail-closed self-test of a started domain: before the first session
//! attaches (and on demand, `lazaret doctor --sandbox`), prove that the
//! sandbox is what the UI says it is. A security tool that silently runs
//! with less isolation than the user believes is worse than none.
//!
//! One process inside the sandbox (`/run/lazaret/escalate selftest`, the
//! static binary already mounted there) checks, from the agent's side, the
//! runtime (gVisor where runsc is configured), the read-only git protections
//! and Lazaret's own mounts, the tmpfs masks, that the network namespace
//! holds only loopback and the link to the Network Sidecar, that a denied
//! address fails at once (from sockets bound to each device too), that the sandbox's resolver is the sidecar's and refuses a name
//! the policy denies (and answers one it allows; no query needs an
//! upstream), and that the Escalation Socket refuses a client without the
//! sandbox's certificate. The host adds one check of its own: the sidecar's
//! live table is exactly the domain's policy.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lazaret_escalate::selftest::{Check, Expectations, Report};
use lazaret_sidecar::policy::{Policy, PolicySpec, Verdict};
use lazaret_sidecar::report::TableReport;
use lazaret_widgets::visible::make_visible;

use super::{Engine, EngineError, Sandbox};
use crate::config::ResolvedProfile;
use crate::mounts::Mount;

/// Set by `--allow-degraded` (passed on to the coordinator this process
/// starts): a failed self-test then lets the sandbox start, marked degraded
/// everywhere it is shown.
static ALLOW_DEGRADED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn set_allow_degraded() {
    ALLOW_DEGRADED.store(true, std::sync::atomic::Ordering::SeqCst);
}

pub fn allow_degraded() -> bool {
    ALLOW_DEGRADED.load(std::sync::atomic::Ordering::SeqCst)
}

/// Addresses a failing probe may safely hit: the user-mode network's host
/// aliases (they map to this machine), never anything beyond it.
const PROBES: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(10, 0, 2, 2)),
    IpAddr::V4(Ipv4Addr::new(10, 0, 2, 3)),
];
/// The discard port: nothing listens there, and nothing is sent.
const PROBE_PORT: u16 = 9;
/// A name no policy should allow (`.invalid` is reserved, RFC 2606): the
/// sandbox's resolver must refuse it itself.
const REFUSED_PROBE: &str = "lazaret-selftest.invalid";
/// The first label of the name probed under an allowed `*.SUFFIX`.
const ALLOWED_PROBE_LABEL: &str = "lazaret-selftest";

/// How many egress refusals the domain's self-tests made since its
/// Network Sidecar started (a number): the coordinator leaves them out of
/// the refusals it reports, which are the agent's.
fn refusals_file(domain_root: &Path) -> PathBuf {
    domain_root.join("selftest-refusals")
}

/// The refusals the domain's self-tests made (0 when none is recorded).
pub fn refusals_made(domain_root: &Path) -> u64 {
    std::fs::read_to_string(refusals_file(domain_root))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

/// Records `report`'s refusals: on top of those recorded (`add`), or as
/// the first of a new sidecar's.
pub fn record_refusals(domain_root: &Path, report: &Report, add: bool) {
    let before = if add { refusals_made(domain_root) } else { 0 };
    let _ = std::fs::write(
        refusals_file(domain_root),
        (before + report.refusals()).to_string(),
    );
}

/// Where a degraded domain's failed checks are kept while it runs; the
/// coordinator's status reports them, and the UI marks the sandbox.
pub fn degraded_file(domain_root: &Path) -> PathBuf {
    domain_root.join("degraded")
}

/// The failed checks of a running domain started with `--allow-degraded`.
pub fn degraded(domain_root: &Path) -> Option<String> {
    std::fs::read_to_string(degraded_file(domain_root))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// What the sandbox of `resolved` must show from inside.
pub fn expectations(
    engine: &Engine,
    resolved: &ResolvedProfile,
) -> Result<Expectations, EngineError> {
    let layout = engine.layout(resolved)?;
    let mut read_only = Vec::new();
    let mut masks = Vec::new();
    for m in layout.mounts() {
        match m {
            Mount::Bind {
                container,
                read_only: true,
                ..
            } => read_only.push(container.display().to_string()),
            Mount::Tmpfs { container } => masks.push(container.display().to_string()),
            Mount::Bind { .. } => {}
        }
    }
    // Lazaret's own folders (the escalation binary itself is left out: it
    // is the process running the test, and a write-open says ETXTBSY).
    read_only.push(lazaret_escalate::SANDBOX_DIR.into());
    read_only.push(lazaret_escalate::CERTS_DIR.into());
    let anchor = &resolved.domain;
    let domain_root = anchor.domain_root(&engine.data_root);
    let policy = live_policy(&domain_root, resolved)?;
    let spec = crate::net::effective_spec(&domain_root, &resolved.network);
    let (refused_names, allowed_names) = dns_probes(&policy, &spec);
    let denied = PROBES
        .iter()
        .filter(|a| policy.why(**a).verdict == Verdict::Deny)
        .map(|a| SocketAddr::new(*a, PROBE_PORT).to_string())
        .collect();
    let socket_on_host = anchor
        .escalation_dir(&engine.socket_dir)
        .join("escalate.sock");
    let with_socket = socket_on_host.exists();
    Ok(Expectations {
        runtime: resolved.profile.runtime.as_str().into(),
        host_kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        read_only,
        masks,
        denied,
        links: vec!["lo".into(), lazaret_sidecar::link::SANDBOX_DEVICE.into()],
        socket: with_socket.then(|| lazaret_escalate::SOCKET_PATH.into()),
        certs_dir: with_socket.then(|| lazaret_escalate::CERTS_DIR.into()),
        resolver: Some(format!("{}:53", lazaret_sidecar::link::ROUTER_V4)),
        refused_names,
        allowed_names,
    })
}

/// The names the resolver check asks: one the policy refuses, and one it
/// allows when it allows any (a `*.SUFFIX` pattern gets a name below it).
fn dns_probes(policy: &Policy, spec: &PolicySpec) -> (Vec<String>, Vec<String>) {
    use lazaret_sidecar::names::NamePattern;
    let allowed = |n: &str| policy.name_decision(n).verdict == Verdict::Allow;
    let refused = (!allowed(REFUSED_PROBE))
        .then(|| REFUSED_PROBE.to_string())
        .into_iter()
        .collect();
    let allowed = spec
        .allow_domains
        .iter()
        .map(|n| match &n.pattern {
            NamePattern::Exact(name) => name.clone(),
            NamePattern::Below(suffix) => format!("{ALLOWED_PROBE_LABEL}.{suffix}"),
        })
        .find(|n| allowed(n))
        .into_iter()
        .collect();
    (refused, allowed)
}

/// The policy the domain runs under (its live copy after `lazaret net`).
fn live_policy(domain_root: &Path, resolved: &ResolvedProfile) -> Result<Policy, EngineError> {
    Ok(crate::net::policy(crate::net::effective_spec(
        domain_root,
        &resolved.network,
    ))?)
}

/// Runs the self-test of the running sandbox `sandbox`.
pub fn run(engine: &Engine, resolved: &ResolvedProfile, sandbox: &str) -> Report {
    // The two podman round trips are independent: run them side by side.
    let (mut report, table) = std::thread::scope(|scope| {
        let table = scope.spawn(|| policy_table(engine, resolved));
        let report = match expectations(engine, resolved) {
            Err(e) => Report {
                checks: vec![failed("expectations", format!("cannot compute them: {e}"))],
            },
            Ok(x) => in_sandbox(engine, sandbox, &x),
        };
        let table = table
            .join()
            .unwrap_or_else(|_| failed("policy table", "the check panicked".into()));
        (report, table)
    });
    report.checks.push(table);
    report
}

fn failed(name: &str, detail: String) -> Check {
    Check {
        name: name.into(),
        ok: false,
        detail,
    }
}

/// The one in-sandbox process; anything but a readable report fails.
fn in_sandbox(engine: &Engine, sandbox: &str, x: &Expectations) -> Report {
    let json = serde_json::to_string(x).unwrap_or_default();
    match engine.podman.run([
        "exec",
        sandbox,
        lazaret_escalate::BINARY_PATH,
        "selftest",
        &json,
    ]) {
        Ok(out) => parse_report(&out),
        Err(e) => Report {
            checks: vec![failed(
                "in-sandbox self-test",
                format!(
                    "could not run {} selftest: {e}",
                    lazaret_escalate::BINARY_PATH
                ),
            )],
        },
    }
}

/// The sidecar's live table, read through `podman exec`, must be exactly
/// the domain's policy.
fn policy_table(engine: &Engine, resolved: &ResolvedProfile) -> Check {
    let anchor = &resolved.domain;
    table_check(
        engine,
        resolved,
        crate::net::show(&engine.podman, &anchor.sidecar_name(), None).map_err(|e| e.to_string()),
    )
}

/// The check that `table` (the sidecar's live table) is exactly the
/// domain's policy.
fn table_check(
    engine: &Engine,
    resolved: &ResolvedProfile,
    table: Result<TableReport, String>,
) -> Check {
    let anchor = &resolved.domain;
    let result = live_policy(&anchor.domain_root(&engine.data_root), resolved)
        .map_err(|e| e.to_string())
        .and_then(|policy| {
            let report = table?;
            if crate::net::in_force(&report, &policy) {
                Ok(format!("{} rules, as configured", report.rules().len()))
            } else {
                Err("the sidecar's live table differs from the policy (a rule was added or removed behind Lazaret's back); `lazaret net show` lists it".into())
            }
        });
    match result {
        Ok(d) => Check {
            name: "policy table".into(),
            ok: true,
            detail: d,
        },
        Err(d) => failed("policy table", d),
    }
}

/// The report as text: one line per check, failures marked.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let width = report
        .checks
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(0);
    for c in &report.checks {
        let mark = if c.ok { "ok  " } else { "FAIL" };
        // Text from inside the sandbox is shown, never obeyed (D8).
        let (name, _) = make_visible(&c.name);
        let (detail, _) = make_visible(&c.detail);
        let _ = writeln!(out, "{mark}  {name:width$}  {detail}");
    }
    out
}

/// The names and reasons of the failed checks, on one line.
pub fn summary(report: &Report) -> String {
    report
        .failed()
        .map(|c| format!("{}: {}", make_visible(&c.name).0, make_visible(&c.detail).0))
        .collect::<Vec<_>>()
        .join("; ")
}

pub use lazaret_escalate::selftest::REPORT_MARKER;

/// How long a starting sandbox may take to report.
const REPORT_DEADLINE: Duration = Duration::from_secs(60);

/// The report a starting sandbox's entrypoint writes (see
/// `Engine::start_sandbox`), not read yet.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The sandbox's log file (podman's k8s-file format).
    pub log: PathBuf,
}

impl Pending {
    pub fn new(domain_root: &Path) -> Self {
        Pending {
            log: domain_root.join("sandbox.log"),
        }
    }

    /// Waits for the report. Fails closed: no report, an unreadable one,
    /// or a sandbox that stopped is a failed check.
    fn wait(&self, engine: &Engine, sandbox: &str) -> Report {
        let started = Instant::now();
        let mut checked = Instant::now();
        loop {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            if let Some(line) = crate::podman::log_stdout_lines(&text)
                .into_iter()
                .find_map(|l| l.strip_prefix(REPORT_MARKER).map(str::to_string))
            {
                return parse_report(&line);
            }
            if started.elapsed() > REPORT_DEADLINE {
                return Report {
                    checks: vec![failed(
                        "in-sandbox self-test",
                        format!("no report within {} s", REPORT_DEADLINE.as_secs()),
                    )],
                };
            }
            // A sandbox that died never reports: say so at once.
            if checked.elapsed() > Duration::from_secs(1) {
                checked = Instant::now();
                if !engine.podman.is_running(sandbox).unwrap_or(false) {
                    return Report {
                        checks: vec![failed(
                            "in-sandbox self-test",
                            format!("the sandbox stopped before it reported: {}", text.trim()),
                        )],
                    };
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn parse_report(out: &str) -> Report {
    serde_json::from_str(out.trim()).unwrap_or_else(|e| Report {
        checks: vec![failed(
            "in-sandbox self-test",
            format!(
                "unreadable report ({e}): {}",
                out.chars().take(200).collect::<String>()
            ),
        )],
    })
}

/// The boot step: a failed self-test stops the start (the caller tears the
/// domain down) unless `--allow-degraded` was given; then the domain starts
/// marked degraded. The in-sandbox part is the report of the sandbox's
/// entrypoint (`pending`); the host's part is the sidecar's `table` as it
/// reported it when it became healthy (no podman call).
pub fn gate(
    engine: &Engine,
    resolved: &ResolvedProfile,
    sandbox: &Sandbox,
    pending: &Pending,
    table: &TableReport,
) -> Result<(), EngineError> {
    // A restored sandbox's init is past its self-test: it runs again
    // from outside, in the restored sandbox, before anything is let in.
    let mut report = if sandbox.restored.is_some() {
        run(engine, resolved, &sandbox.name)
    } else {
        let mut report = pending.wait(engine, &sandbox.name);
        report
            .checks
            .push(table_check(engine, resolved, Ok(table.clone())));
        report
    };
    // An empty report from inside proves nothing.
    if report.checks.len() < 2 {
        report.checks.push(failed(
            "in-sandbox self-test",
            "the report holds no check".into(),
        ));
    }
    let root = resolved.domain.domain_root(&engine.data_root);
    record_refusals(&root, &report, false);
    let marker = degraded_file(&root);
    if report.failed().next().is_none() {
        let _ = std::fs::remove_file(&marker);
        return Ok(());
    }
    let summary = summary(&report);
    if allow_degraded() {
        std::fs::write(&marker, &summary).map_err(|error| EngineError::Io {
            path: marker.clone(),
            error,
        })?;
        return Ok(());
    }
    Err(EngineError::SelfTest {
        name: sandbox.name.clone(),
        failed: summary,
        report: render(&report),
    })
}
