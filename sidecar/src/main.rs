//! `lazaret-sidecar`: the Network Sidecar's process. It runs as PID 1 of a
//! `FROM scratch` container under runc and owns the sandbox's network
//! namespace; its policy-routing rules are the egress policy (see the
//! `kernel` module of the library, and sidecar/README.md).

mod conntrack;
mod daemon;
mod error;
mod netlink;
mod nft;
mod plumb;
mod resolver;
mod router;
mod rtnl;

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use lazaret_sidecar::kernel::{self, GATEWAY_TABLE, Step};
use lazaret_sidecar::policy::{Family, Policy};
use lazaret_sidecar::report::{Gateway, TableReport};
use nix::sys::signal::{SigSet, Signal};

use error::{Context, Error, Result};
use rtnl::{DefaultRoute, MAIN_TABLE, Netlink, OwnRule};

const USAGE: &str = "\
usage: lazaret-sidecar hold
       lazaret-sidecar serve (--policy JSON | --policy - | --policy-file PATH) [--json] [--gateway-wait-ms MS]
                             [--control PATH] [--resolver ADDR:PORT ... --upstream ADDR:PORT]
                             [--ttl-floor SECS] [--ttl-cap SECS] [--link]
       lazaret-sidecar apply (--policy JSON | --policy - | --policy-file PATH) [--json] [--control PATH]
       lazaret-sidecar show [--json] [--control PATH]
       lazaret-sidecar link --sidecar-pid PID --netns FILE [--json]
       lazaret-sidecar unlink --netns FILE
       lazaret-sidecar --version

Started by Lazaret as the Network Sidecar container; `apply` and `show` are
run by the host through `podman exec`. `--policy -` reads the JSON from stdin.
With --control, `serve` keeps running state (the resolver's name-derived rules)
and `apply`/`show` ask it through that socket. With --resolver, `serve` answers
DNS there: allowed names are forwarded to --upstream, and their answered
addresses are opened for the record's TTL (clamped to --ttl-floor..--ttl-cap);
--resolver may be given more than once. With --link, `serve` is the router
between the sandbox's own network namespace and the network: denied
destinations are refused by netfilter, the sandbox's traffic is masqueraded
out of tap0, and the report says whether all of it is in force.

`link` (run by the host through `podman unshare`) makes a new network
namespace bind-mounted on FILE, and a veth from it (eth0) into the network
namespace of process PID (sbx0), addressed and routed; `unlink` unmounts and
removes FILE.";

/// How long `serve` waits for a default route to take a gateway from, when
/// the policy allows something of that family and none is there yet (an
/// IPv6 router advertisement can come after the container starts).
const SERVE_GATEWAY_WAIT: Duration = Duration::from_secs(3);

#[derive(Debug)]
pub(crate) enum Failure {
    Usage(String),
    Run(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Run(e)
    }
}

#[derive(Debug, Default)]
pub(crate) struct Options {
    policy: Option<PolicyInput>,
    json: bool,
    gateway_wait: Option<Duration>,
    control: Option<String>,
    resolver: Vec<std::net::SocketAddr>,
    upstream: Option<std::net::SocketAddr>,
    link: bool,
    sidecar_pid: Option<u32>,
    netns: Option<String>,
    ttl_floor: Option<Duration>,
    ttl_cap: Option<Duration>,
    positional: Vec<String>,
}

#[derive(Debug)]
enum PolicyInput {
    Inline(String),
    Stdin,
    File(String),
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, Failure> {
        let mut o = Options::default();
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut value = |name: &str| {
                it.next()
                    .cloned()
                    .ok_or_else(|| Failure::Usage(format!("{name} needs a value")))
            };
            match arg.as_str() {
                "--policy" => {
                    let v = value("--policy")?;
                    o.policy = Some(if v == "-" {
                        PolicyInput::Stdin
                    } else {
                        PolicyInput::Inline(v)
                    });
                }
                "--policy-file" => o.policy = Some(PolicyInput::File(value("--policy-file")?)),
                "--json" => o.json = true,
                "--gateway-wait-ms" => {
                    let v = value("--gateway-wait-ms")?;
                    let ms: u64 = v.parse().map_err(|_| {
                        Failure::Usage(format!("--gateway-wait-ms takes milliseconds, not `{v}`"))
                    })?;
                    o.gateway_wait = Some(Duration::from_millis(ms));
                }
                "--control" => o.control = Some(value("--control")?),
                "--link" => o.link = true,
                "--netns" => o.netns = Some(value("--netns")?),
                "--sidecar-pid" => {
                    let v = value("--sidecar-pid")?;
                    o.sidecar_pid = Some(v.parse().map_err(|_| {
                        Failure::Usage(format!("--sidecar-pid takes a process id, not `{v}`"))
                    })?);
                }
                "--resolver" | "--upstream" => {
                    let v = value(arg)?;
                    let addr = v.parse().map_err(|_| {
                        Failure::Usage(format!(
                            "{arg} takes ADDRESS:PORT (e.g. 10.0.2.3:53), not `{v}`"
                        ))
                    })?;
                    if arg == "--resolver" {
                        o.resolver.push(addr);
                    } else {
                        o.upstream = Some(addr);
                    }
                }
                "--ttl-floor" | "--ttl-cap" => {
                    let v = value(arg)?;
                    let secs: u64 = v
                        .parse()
                        .map_err(|_| Failure::Usage(format!("{arg} takes seconds, not `{v}`")))?;
                    if arg == "--ttl-floor" {
                        o.ttl_floor = Some(Duration::from_secs(secs));
                    } else {
                        o.ttl_cap = Some(Duration::from_secs(secs));
                    }
                }
                s if s.starts_with('-') && s != "-" => {
                    return Err(Failure::Usage(format!("unknown option `{s}`")));
                }
                _ => o.positional.push(arg.clone()),
            }
        }
        Ok(o)
    }

    fn no_positional(&self) -> Result<(), Failure> {
        match self.positional.first() {
            Some(p) => Err(Failure::Usage(format!("unexpected argument `{p}`"))),
            None => Ok(()),
        }
    }

    fn policy(&self) -> Result<Policy, Failure> {
        let json = match &self.policy {
            None => {
                return Err(Failure::Usage(
                    "a policy is needed (--policy or --policy-file)".into(),
                ));
            }
            Some(PolicyInput::Inline(s)) => s.clone(),
            Some(PolicyInput::Stdin) => {
                let mut s = String::new();
                std::io::stdin()
                    .read_to_string(&mut s)
                    .context("cannot read the policy from stdin")?;
                s
            }
            Some(PolicyInput::File(path)) => std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the policy file {path}"))?,
        };
        Ok(Policy::from_json(&json)?)
    }
}

impl From<lazaret_sidecar::PolicyError> for Failure {
    fn from(e: lazaret_sidecar::PolicyError) -> Failure {
        Failure::Run(Error::new(e.to_string()))
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (command, rest) = match args.split_first() {
        Some((c, rest)) => (c.as_str(), rest),
        None => ("", &[][..]),
    };
    let result = match command {
        "--version" => {
            println!("lazaret-sidecar {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        "hold" => Options::parse(rest).and_then(|o| {
            o.no_positional()?;
            hold()
        }),
        "serve" => Options::parse(rest).and_then(|o| serve(&o)),
        "apply" => Options::parse(rest).and_then(|o| apply(&o)),
        "show" => Options::parse(rest).and_then(|o| show(&o)),
        "link" => Options::parse(rest).and_then(|o| link(&o)),
        "unlink" => Options::parse(rest).and_then(|o| unlink(&o)),
        "" => Err(Failure::Usage("no command given".into())),
        other => Err(Failure::Usage(format!("unknown command `{other}`"))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(msg)) => {
            eprintln!("lazaret-sidecar: {msg}\n\n{USAGE}");
            ExitCode::from(2)
        }
        Err(Failure::Run(e)) => {
            eprintln!("lazaret-sidecar: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Blocks SIGTERM and SIGINT so that they wait for [`wait_for_signal`]: as
/// PID 1 a signal without a handler is ignored, and blocking them before any
/// set-up means one sent during it is not lost.
pub(crate) fn block_signals() -> Result<SigSet> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.thread_block().context("cannot block signals")?;
    Ok(set)
}

pub(crate) fn wait_for_signal(set: &SigSet) -> Result<()> {
    set.wait().context("waiting for a signal failed")?;
    Ok(())
}

fn hold() -> Result<(), Failure> {
    let set = block_signals()?;
    wait_for_signal(&set)?;
    Ok(())
}

fn serve(o: &Options) -> Result<(), Failure> {
    o.no_positional()?;
    let set = block_signals()?;
    let policy = o.policy()?;
    if o.control.is_some() || !o.resolver.is_empty() || o.link {
        let settings = daemon::Settings::from_options(o)?;
        return daemon::run(
            &settings,
            policy,
            o.gateway_wait.unwrap_or(SERVE_GATEWAY_WAIT),
            o.json,
            &set,
        );
    }
    let mut nl = Netlink::open()?;
    let report = enforce(
        &mut nl,
        &policy,
        o.gateway_wait.unwrap_or(SERVE_GATEWAY_WAIT),
        &[],
    )?;
    print_report(&report, o.json)?;
    eprintln!(
        "lazaret-sidecar: policy applied; holding the network namespace until SIGTERM or SIGINT"
    );
    wait_for_signal(&set)?;
    Ok(())
}

fn apply(o: &Options) -> Result<(), Failure> {
    o.no_positional()?;
    let policy = o.policy()?;
    if let Some(path) = &o.control {
        let request = lazaret_sidecar::control::Request::Apply(policy.spec().clone());
        let report = daemon::ask(path, &request)?;
        print_report(&report, o.json)?;
        return Ok(());
    }
    let mut nl = Netlink::open()?;
    nl.detect_deny()?;
    let report = enforce(
        &mut nl,
        &policy,
        o.gateway_wait.unwrap_or(Duration::ZERO),
        &[],
    )?;
    print_report(&report, o.json)?;
    Ok(())
}

fn show(o: &Options) -> Result<(), Failure> {
    o.no_positional()?;
    if let Some(path) = &o.control {
        let report = daemon::ask(path, &lazaret_sidecar::control::Request::Show)?;
        print_report(&report, o.json)?;
        return Ok(());
    }
    let mut nl = Netlink::open()?;
    nl.detect_deny()?;
    let report = read_table(&mut nl)?;
    print_report(&report, o.json)?;
    Ok(())
}

fn link(o: &Options) -> Result<(), Failure> {
    o.no_positional()?;
    let (Some(pid), Some(netns)) = (o.sidecar_pid, &o.netns) else {
        return Err(Failure::Usage(
            "link needs --sidecar-pid PID and --netns FILE".into(),
        ));
    };
    let report = plumb::link(pid, std::path::Path::new(netns))?;
    if o.json {
        let line = serde_json::to_string(&report).context("cannot encode the report")?;
        println!("{line}");
    } else {
        let end = |e: &lazaret_sidecar::link::LinkEnd| {
            let addresses: Vec<String> = e.addresses.iter().map(|a| a.to_string()).collect();
            format!("{} {}", e.device, addresses.join(" "))
        };
        println!(
            "{} (inode {}): {} via {} and {}; {} in the namespace of process {pid}",
            report.netns,
            report.netns_inode,
            end(&report.sandbox),
            report.sandbox.gateways[0],
            report.sandbox.gateways[1],
            end(&report.router),
        );
    }
    Ok(())
}

fn unlink(o: &Options) -> Result<(), Failure> {
    o.no_positional()?;
    let Some(netns) = &o.netns else {
        return Err(Failure::Usage("unlink needs --netns FILE".into()));
    };
    plumb::unlink(std::path::Path::new(netns))?;
    Ok(())
}

pub(crate) fn print_report(report: &TableReport, json: bool) -> Result<()> {
    if json {
        return print_json(report);
    }
    print_text(&report.to_string())
}

/// One JSON line on standard output (what the host reads from the log).
pub(crate) fn print_json(value: &impl serde::Serialize) -> Result<()> {
    let line = serde_json::to_string(value).context("cannot encode the report")?;
    print_text(&format!("{line}\n"))
}

fn print_text(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("cannot write to stdout")
}

/// Makes the namespace enforce `policy`, and reports the live table.
///
/// 1. The gateway of each family goes into the gateway table, taken from the
///    main table's default route the first time; later calls find it there
///    (the sidecar keeps no other state, and its root is read-only).
/// 2. The rules change in the order of [`kernel::plan`].
/// 3. The main table's default routes go: nothing consults them any more,
///    and `ip route` then shows no way out that the rules do not govern.
pub(crate) fn enforce(
    nl: &mut Netlink,
    policy: &Policy,
    gateway_wait: Duration,
    names: &[ipnet::IpNet],
) -> Result<TableReport> {
    let mut warnings = Vec::new();
    for family in Family::BOTH {
        let needed = policy.allows_any(family);
        let deadline = Instant::now() + if needed { gateway_wait } else { Duration::ZERO };
        loop {
            if !nl.default_routes(family, GATEWAY_TABLE)?.is_empty() {
                break;
            }
            if let Some(route) = preferred(nl.default_routes(family, MAIN_TABLE)?) {
                let gateway = gateway(nl, family, &route);
                nl.set_gateway(&gateway)?;
                break;
            }
            if family == Family::Ipv6
                && nl.router_mode()
                && let Some(ifindex) = nl.link_index(lazaret_sidecar::link::UPSTREAM_DEVICE)?
            {
                nl.set_gateway(&Gateway {
                    family,
                    address: std::net::IpAddr::V6(lazaret_sidecar::link::UPSTREAM_ROUTER_V6),
                    dev: lazaret_sidecar::link::UPSTREAM_DEVICE.into(),
                    ifindex,
                })?;
                break;
            }
            if Instant::now() >= deadline {
                if needed {
                    warnings.push(format!(
                        "the namespace has no {family} default route to take a gateway from: \
                         the allowed {family} prefixes are refused until one appears and the \
                         policy is applied again"
                    ));
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    let mut current = Vec::new();
    let mut foreign = Vec::new();
    for family in Family::BOTH {
        for rule in nl.own_rules(family)? {
            match rule {
                OwnRule::Known(r) => current.push(r),
                OwnRule::Foreign { text, msg } => foreign.push((text, msg)),
            }
        }
    }
    let desired = kernel::desired_with_names(policy, names);
    let steps = kernel::plan(&current, &desired);
    for step in &steps {
        match step {
            Step::Add(r) => nl.add_rule(r)?,
            Step::Delete(r) => nl.delete_rule(r)?,
        }
    }
    for (text, msg) in foreign {
        nl.delete_foreign_rule(&text, msg)?;
    }
    for family in Family::BOTH {
        for route in nl.default_routes(family, MAIN_TABLE)? {
            nl.delete_route(route, &format!("the main table's {family} default route"))?;
        }
    }

    let mut report = read_table(nl)?;
    let mut live = report.rules();
    let mut want = desired;
    live.sort_unstable();
    want.sort_unstable();
    if live != want || !report.foreign.is_empty() {
        return Err(Error::new(format!(
            "after applying the policy the kernel's rules differ from it (another apply at \
             the same time?): missing {:?}, unexpected {:?}, foreign {:?}",
            want.iter()
                .filter(|r| !live.contains(r))
                .map(|r| r.to_string())
                .collect::<Vec<_>>(),
            live.iter()
                .filter(|r| !want.contains(r))
                .map(|r| r.to_string())
                .collect::<Vec<_>>(),
            report.foreign
        )));
    }
    report.changes = steps;
    report.warnings = warnings;
    report.explain(policy);
    Ok(report)
}

/// The default route the kernel would use: the lowest metric.
fn preferred(routes: Vec<DefaultRoute>) -> Option<DefaultRoute> {
    routes.into_iter().min_by_key(|r| r.metric.unwrap_or(0))
}

fn gateway(nl: &mut Netlink, family: Family, route: &DefaultRoute) -> Gateway {
    Gateway {
        family,
        address: route.gateway,
        dev: nl.dev_name(route.ifindex),
        ifindex: route.ifindex,
    }
}

fn read_table(nl: &mut Netlink) -> Result<TableReport> {
    let mut gateways = Vec::new();
    let mut rules = Vec::new();
    let mut foreign = Vec::new();
    for family in Family::BOTH {
        if let Some(route) = preferred(nl.default_routes(family, GATEWAY_TABLE)?) {
            gateways.push(gateway(nl, family, &route));
        }
        for rule in nl.own_rules(family)? {
            match rule {
                OwnRule::Known(r) => rules.push(r),
                OwnRule::Foreign { text, .. } => foreign.push(text),
            }
        }
    }
    rules.sort_unstable();
    let mut report = TableReport::new(gateways, rules);
    report.foreign = foreign;
    Ok(report)
}
