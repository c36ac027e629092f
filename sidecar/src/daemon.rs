//! `serve` with state: the policy, the resolver's name-derived rules and the
//! refused names, behind one lock that every change of the kernel's rules
//! takes (decisions.md D11). Threads: the control socket (`apply`/`show`
//! from the host), the resolver (UDP and TCP), and the expiry of name rules.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use lazaret_sidecar::control::{Request, Response};
use lazaret_sidecar::names::{NameLog, now_unix};
use lazaret_sidecar::policy::{NameRoute, Policy, Verdict};
use lazaret_sidecar::report::{
    FailedLookup, NameEntry, REFUSALS_INTERVAL, Refusals, RefusedName, TableReport,
};
use nix::sys::signal::SigSet;

use crate::error::{Context, Error, Result};
use crate::rtnl::{Deny, Netlink};
use crate::{Failure, Options, enforce, print_report, wait_for_signal};

/// The mark the resolver's own upstream sockets carry (SO_MARK needs
/// CAP_NET_ADMIN, which the agent lacks): a rule before the policy's sends
/// them through the gateway, so the upstream needs no rule of the policy
/// and the agent cannot reach it.
pub const UPSTREAM_MARK: u32 = 0x4c5a;
/// The priority of that rule: before the policy's range (10000-10999).
pub const UPSTREAM_RULE_PRIORITY: u32 = 9_000;
/// How many refused names are remembered (the agent chooses them).
const REFUSED_KEPT: usize = 256;
/// How many allowed names whose lookup failed are remembered (under a
/// wildcard the agent chooses them too).
const FAILED_KEPT: usize = 256;

#[derive(Debug, Clone)]
pub struct Settings {
    pub control: Option<String>,
    pub resolver: Vec<SocketAddr>,
    pub upstream: SocketAddr,
    /// Router mode (`--link`).
    pub link: bool,
    pub ttl_floor: Duration,
    pub ttl_cap: Duration,
}

impl Settings {
    pub fn from_options(o: &Options) -> Result<Settings, Failure> {
        if !o.resolver.is_empty() && o.upstream.is_none() {
            return Err(Failure::Usage("--resolver needs --upstream".into()));
        }
        let ttl_floor = o.ttl_floor.unwrap_or(Duration::from_secs(30));
        let ttl_cap = o.ttl_cap.unwrap_or(Duration::from_secs(3600));
        if ttl_cap < ttl_floor {
            return Err(Failure::Usage("--ttl-cap is below --ttl-floor".into()));
        }
        Ok(Settings {
            control: o.control.clone(),
            resolver: o.resolver.clone(),
            link: o.link,
            upstream: o
                .upstream
                .unwrap_or_else(|| SocketAddr::from(([10, 0, 2, 3], 53))),
            ttl_floor,
            ttl_cap,
        })
    }
}

/// One address opened for names.
#[derive(Debug, Clone)]
struct Opened {
    names: Vec<String>,
    until: Instant,
    until_unix: u64,
    held: bool,
}

pub struct State {
    nl: Netlink,
    policy: Policy,
    gateway_wait: Duration,
    opened: BTreeMap<IpAddr, Opened>,
    refused: NameLog<()>,
    /// Allowed names whose lookup failed, with the upstream's last answer.
    failed: NameLog<String>,
    pub settings: Settings,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("opened", &self.opened)
            .finish_non_exhaustive()
    }
}

pub type Shared = Arc<Mutex<State>>;

pub fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    // A panicked thread leaves the state as consistent as the kernel is.
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

impl State {
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Brings the kernel's rules to the policy plus the opened addresses.
    fn sync(&mut self) -> Result<TableReport> {
        let hosts: Vec<IpNet> = self.opened.keys().map(|a| IpNet::from(*a)).collect();
        let wait = std::mem::replace(&mut self.gateway_wait, Duration::ZERO);
        let mut report = enforce(&mut self.nl, &self.policy, wait, &hosts)?;
        self.describe(&mut report);
        Ok(report)
    }

    fn describe(&self, report: &mut TableReport) {
        report.names = self
            .opened
            .iter()
            .map(|(address, o)| NameEntry {
                address: *address,
                names: o.names.clone(),
                expires: o.until_unix,
                held: o.held,
            })
            .collect();
        report.refused = self
            .refused
            .recent()
            .into_iter()
            .map(|(name, e)| RefusedName {
                name: name.to_string(),
                count: e.count,
                last: e.last,
            })
            .collect();
        report.failed = self
            .failed
            .recent()
            .into_iter()
            .map(|(name, e)| FailedLookup {
                name: name.to_string(),
                answer: e.note.clone(),
                count: e.count,
                last: e.last,
            })
            .collect();
        report.resolver =
            (!self.settings.resolver.is_empty()).then(|| self.settings.upstream.to_string());
        report.explain(&self.policy);
    }

    /// In router mode, what is in force of the router, read back.
    fn describe_router(&mut self, report: &mut TableReport) {
        if self.settings.link {
            report.router = Some(crate::router::report(&mut self.nl));
        }
    }

    fn show(&mut self) -> Result<TableReport> {
        let mut report = crate::read_table(&mut self.nl)?;
        self.describe(&mut report);
        self.describe_router(&mut report);
        Ok(report)
    }

    /// A new policy: addresses opened for names it no longer allows, or that
    /// a CIDR rule now decides, are closed at once.
    fn apply(&mut self, policy: Policy) -> Result<TableReport> {
        let old = std::mem::replace(&mut self.policy, policy);
        let policy = &self.policy;
        self.opened.retain(|addr, o| {
            o.names
                .retain(|n| policy.name_decision(n).verdict == Verdict::Allow);
            !o.names.is_empty() && matches!(policy.name_route(*addr), NameRoute::Open(_))
        });
        match self.sync() {
            Ok(mut r) => {
                self.describe_router(&mut r);
                Ok(r)
            }
            Err(e) => {
                self.policy = old;
                Err(e)
            }
        }
    }

    pub fn refuse(&mut self, name: &str) {
        self.refused.record(name, now_unix(), ());
    }

    /// An allowed name's lookup failed: `answer` is what the upstream said
    /// (or why there was no usable answer).
    pub fn failed(&mut self, name: &str, answer: String) {
        self.failed.record(name, now_unix(), answer);
    }

    /// Opens `answers` (address, TTL) of `name` before the answer goes back;
    /// returns the TTL to tell the client (never longer than the rule lives)
    /// and what stays denied.
    pub fn open(
        &mut self,
        name: &str,
        answers: &[(IpAddr, u32)],
    ) -> Result<(u32, Vec<(IpAddr, String)>)> {
        let (floor, cap) = (self.settings.ttl_floor, self.settings.ttl_cap);
        let mut denied = Vec::new();
        let mut changed = false;
        let now = Instant::now();
        let mut client_ttl = u32::try_from(cap.as_secs()).unwrap_or(u32::MAX);
        for (addr, ttl) in answers {
            client_ttl = client_ttl.min(*ttl);
            match self.policy.name_route(*addr) {
                NameRoute::AlreadyAllowed => {}
                NameRoute::Denied(why) => denied.push((*addr, why)),
                NameRoute::Open(net) => {
                    let life = Duration::from_secs(u64::from(*ttl)).clamp(floor, cap);
                    let key = net.addr();
                    let o = self.opened.entry(key).or_insert_with(|| {
                        changed = true;
                        Opened {
                            names: Vec::new(),
                            until: now,
                            until_unix: 0,
                            held: false,
                        }
                    });
                    if !o.names.iter().any(|n| n == name) {
                        o.names.push(name.to_string());
                    }
                    if now + life > o.until {
                        o.until = now + life;
                        o.until_unix = now_unix() + life.as_secs();
                    }
                }
            }
        }
        if changed {
            // Failing here answers SERVFAIL: the address is not in force.
            self.sync()?;
        }
        Ok((client_ttl, denied))
    }

    /// Closes what has expired and has no open connection.
    fn expire(&mut self) -> Result<()> {
        let now = Instant::now();
        if !self.opened.values().any(|o| o.until <= now) {
            return Ok(());
        }
        let mut busy = open_connections();
        if self.settings.link {
            match crate::conntrack::sandbox_destinations() {
                Ok(flows) => busy.extend(flows),
                Err(e) => eprintln!("lazaret-sidecar: cannot read the sandbox's open flows: {e}"),
            }
        }
        let mut closed = false;
        self.opened.retain(|addr, o| {
            if o.until > now {
                return true;
            }
            o.held = busy.contains(addr);
            if !o.held {
                closed = true;
            }
            o.held
        });
        if closed {
            self.sync()?;
        }
        Ok(())
    }
}

/// Remote addresses of the namespace's open TCP connections (and connected
/// UDP sockets, e.g. QUIC), from /proc/net: the sidecar's own, and the
/// agent's when it shares the sidecar's namespace (without `--link`; in
/// router mode conntrack has the agent's flows).
fn open_connections() -> std::collections::BTreeSet<IpAddr> {
    let mut out = std::collections::BTreeSet::new();
    for (file, v6, states) in [
        (
            "/proc/net/tcp",
            false,
            &["01", "02", "03", "04", "05", "08"][..],
        ),
        (
            "/proc/net/tcp6",
            true,
            &["01", "02", "03", "04", "05", "08"][..],
        ),
        ("/proc/net/udp", false, &["01"][..]),
        ("/proc/net/udp6", true, &["01"][..]),
    ] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(state)) = (f.get(2), f.get(3)) else {
                continue;
            };
            if !states.contains(state) {
                continue;
            }
            if let Some(addr) = remote.split(':').next().and_then(|h| proc_addr(h, v6)) {
                out.insert(addr.to_canonical());
            }
        }
    }
    out
}

/// `/proc/net` prints each 32-bit word of an address as a native-endian hex
/// number.
fn proc_addr(hex: &str, v6: bool) -> Option<IpAddr> {
    let word = |i: usize| {
        hex.get(i * 8..i * 8 + 8)
            .and_then(|w| u32::from_str_radix(w, 16).ok())
            .map(u32::to_ne_bytes)
    };
    if v6 {
        let mut b = [0u8; 16];
        for i in 0..4 {
            b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
        }
        Some(IpAddr::from(b))
    } else {
        Some(IpAddr::from(word(0)?))
    }
}

/// Runs `serve` with state until SIGTERM or SIGINT.
pub fn run(
    settings: &Settings,
    policy: Policy,
    gateway_wait: Duration,
    json: bool,
    signals: &SigSet,
) -> Result<(), Failure> {
    let mut nl = Netlink::open()?;
    if settings.link {
        crate::router::setup(&mut nl)?;
        nl.set_deny(Deny::RejectTable);
    }
    if !settings.resolver.is_empty() {
        nl.add_mark_rule(UPSTREAM_RULE_PRIORITY, UPSTREAM_MARK)?;
    }
    let mut state = State {
        nl,
        policy,
        gateway_wait,
        opened: BTreeMap::new(),
        refused: NameLog::new(REFUSED_KEPT),
        failed: NameLog::new(FAILED_KEPT),
        settings: settings.clone(),
    };
    let mut report = state.sync()?;
    state.describe_router(&mut report);
    let shared: Shared = Arc::new(Mutex::new(state));

    // Listening before the report is printed: whoever waits for the report
    // can use both at once.
    if let Some(path) = &settings.control {
        let listener = bind_control(path)?;
        let shared = shared.clone();
        std::thread::spawn(move || control_loop(&listener, &shared));
    }
    for addr in &settings.resolver {
        crate::resolver::start(*addr, shared.clone())?;
    }
    print_report(&report, json)?;
    {
        let link = settings.link;
        std::thread::spawn(move || {
            let mut told = Refusals::default();
            let mut counted = Instant::now();
            loop {
                std::thread::sleep(Duration::from_millis(500));
                if let Err(e) = lock(&shared).expire() {
                    eprintln!("lazaret-sidecar: cannot close expired name rules: {e}");
                }
                if json && counted.elapsed() >= REFUSALS_INTERVAL {
                    counted = Instant::now();
                    // The names under the lock, the kernel's counters
                    // outside it (the resolver waits on the lock).
                    let refused_names = lock(&shared).refused.total();
                    let refused_packets = if link { table_refusals() } else { 0 };
                    let now = Refusals {
                        refused_packets,
                        refused_names,
                    };
                    if now != told && crate::print_json(&now).is_ok() {
                        told = now;
                    }
                }
            }
        });
    }
    eprintln!(
        "lazaret-sidecar: policy applied{}{}; holding the network namespace until SIGTERM or SIGINT",
        if settings.link {
            match &report.router {
                Some(r) if r.in_force() => "; routing for the sandbox's link",
                _ => "; routing for the sandbox's link, NOT fully in force (see the report)",
            }
        } else {
            ""
        },
        if settings.resolver.is_empty() {
            String::new()
        } else {
            format!(
                "; resolving allowed names at {} through {}",
                settings
                    .resolver
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(" and "),
                settings.upstream
            )
        }
    );
    wait_for_signal(signals)?;
    Ok(())
}

fn bind_control(path: &str) -> Result<UnixListener> {
    let p = std::path::Path::new(path);
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let _ = std::fs::remove_file(p);
    UnixListener::bind(p).with_context(|| format!("cannot listen on {path}"))
}

fn control_loop(listener: &UnixListener, shared: &Shared) {
    for stream in listener.incoming().flatten() {
        let shared = shared.clone();
        std::thread::spawn(move || {
            if let Err(e) = serve_control(stream, &shared) {
                eprintln!("lazaret-sidecar: control request failed: {e}");
            }
        });
    }
}

fn serve_control(mut stream: UnixStream, shared: &Shared) -> Result<()> {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut text = String::new();
    (&mut stream)
        .take(1 << 20)
        .read_to_string(&mut text)
        .context("cannot read the request")?;
    let response = match serde_json::from_str::<Request>(&text) {
        Err(e) => Response::Error(format!("unreadable request: {e}")),
        Ok(Request::Show) => match lock(shared).show() {
            Ok(r) => Response::Ok(Box::new(r)),
            Err(e) => Response::Error(e.to_string()),
        },
        Ok(Request::Apply(spec)) => match Policy::new(spec) {
            Err(e) => Response::Error(e.to_string()),
            Ok(policy) => match lock(shared).apply(policy) {
                Ok(r) => Response::Ok(Box::new(r)),
                Err(e) => Response::Error(e.to_string()),
            },
        },
    };
    let line = serde_json::to_string(&response).context("cannot encode the response")?;
    stream
        .write_all(line.as_bytes())
        .context("cannot answer the request")
}

/// `apply`/`show --control PATH`: asks the running `serve`.
pub fn ask(path: &str, request: &Request) -> Result<TableReport> {
    let mut stream = UnixStream::connect(path)
        .with_context(|| format!("cannot reach the running sidecar at {path}"))?;
    let text = serde_json::to_string(request).context("cannot encode the request")?;
    stream
        .write_all(text.as_bytes())
        .context("cannot send the request")?;
    stream
        .shutdown(std::net::Shutdown::Write)
        .context("cannot send the request")?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .context("cannot read the answer")?;
    match serde_json::from_str::<Response>(&answer).context("unreadable answer")? {
        Response::Ok(report) => Ok(*report),
        Response::Error(e) => Err(Error::new(e)),
    }
}

/// The packets the router's table refused (its counters), 0 when they
/// cannot be read.
fn table_refusals() -> u64 {
    match crate::nft::read_back() {
        Ok(Some(read)) => read.refused,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_addresses() {
        // 127.0.0.1 as printed on a little-endian machine.
        if cfg!(target_endian = "little") {
            assert_eq!(
                proc_addr("0100007F", false),
                Some(IpAddr::from([127, 0, 0, 1]))
            );
            assert_eq!(
                proc_addr("00000000000000000000000001000000", true),
                Some("::1".parse().unwrap())
            );
        }
    }
}
