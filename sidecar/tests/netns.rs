//! `lazaret-sidecar` against the real kernel.
//!
//! Each test runs itself again inside new user, network and PID namespaces
//! (`unshare --user --map-root-user --net --pid`, which works for root and
//! for a normal user alike; when the test ends the PID namespace takes every
//! process it started with it). There it builds a lab like the sidecar's
//! slirp4netns namespace: `veth0` with 10.0.2.100/24 and fd00::100/64,
//! default routes via 10.0.2.2 and fe80::2, whose other end `veth1` sits in a
//! second namespace that owns every address the tests connect to. Nothing is
//! ever sent anywhere else: the lab has no way out of the machine, and the
//! checks that sweep many addresses use UDP `connect`, which only asks the
//! kernel for a route and sends nothing.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::time::Duration;

use ipnet::IpNet;
use lazaret_sidecar::kernel::{self, Action, KernelRule, PRIORITY_BASE, PRIORITY_FLOOR};
use lazaret_sidecar::{Policy, PolicySpec, SpecRule, TableReport, Verdict};
use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use common::*;

/// A failed connect must fail this fast to count as "at once"; a timeout
/// takes seconds.
const AT_ONCE: Duration = Duration::from_millis(250);

/// Runs `apply` and returns its report.
fn apply(spec: &PolicySpec) -> TableReport {
    let json = spec.to_json();
    let out = run(SIDECAR, &["apply", "--json", "--policy", &json]);
    assert!(
        out.status.success(),
        "apply failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("apply --json printed no report")
}

fn show() -> TableReport {
    serde_json::from_str(&must(SIDECAR, &["show", "--json"]))
        .expect("show --json printed no report")
}

/// The sidecar's rules as `ip rule` shows them, and every other rule.
fn live_rules() -> (Vec<KernelRule>, Vec<String>) {
    let mut ours = Vec::new();
    let mut others = Vec::new();
    for (family, flag, all) in [("v4", "-4", "0.0.0.0/0"), ("v6", "-6", "::/0")] {
        for r in ip_json(&format!("{flag} rule show")) {
            let priority = r["priority"].as_u64().unwrap() as u32;
            if !(PRIORITY_BASE..=PRIORITY_FLOOR).contains(&priority) {
                others.push(format!(
                    "{family} {priority} {}",
                    r["table"].as_str().unwrap_or("?")
                ));
                continue;
            }
            let dst: IpNet = match (r["dst"].as_str(), r["dstlen"].as_u64()) {
                (None, _) => all.parse().unwrap(),
                (Some(a), Some(len)) => format!("{a}/{len}").parse().unwrap(),
                (Some(a), None) => IpNet::from(a.parse::<IpAddr>().unwrap()),
            };
            let action = match (r["action"].as_str(), r["table"].as_str()) {
                (Some("prohibit"), None) => Action::Prohibit,
                (None, Some("200")) => Action::Gateway,
                other => panic!("unexpected rule {r}: {other:?}"),
            };
            assert_eq!(r["protocol"], "static", "{r}");
            ours.push(KernelRule {
                priority,
                dst,
                action,
            });
        }
    }
    ours.sort_unstable();
    (ours, others)
}

/// Asserts the kernel enforces exactly `policy`: its rules and nothing else,
/// the gateways in table 200, and no default route left in the main table.
fn assert_kernel_enforces(policy: &Policy) {
    let (ours, others) = live_rules();
    assert_eq!(
        ours,
        kernel::desired(policy),
        "the live rules are not the policy's"
    );
    assert_eq!(
        others,
        [
            "v4 0 local",
            "v4 32766 main",
            "v4 32767 default",
            "v6 0 local",
            "v6 32766 main"
        ]
    );
    let v4 = ip_json("-4 route show table 200");
    let v6 = ip_json("-6 route show table 200");
    assert_eq!(v4.len(), 1, "{v4:?}");
    assert_eq!(
        (
            v4[0]["dst"].as_str(),
            v4[0]["gateway"].as_str(),
            v4[0]["dev"].as_str()
        ),
        (Some("default"), Some("10.0.2.2"), Some("veth0"))
    );
    assert_eq!(v6.len(), 1, "{v6:?}");
    assert_eq!(
        (
            v6[0]["dst"].as_str(),
            v6[0]["gateway"].as_str(),
            v6[0]["dev"].as_str()
        ),
        (Some("default"), Some("fe80::2"), Some("veth0"))
    );
    for flag in ["-4", "-6"] {
        let main = ip_json(&format!("{flag} route show table main"));
        assert!(
            main.iter().all(|r| r["dst"] != "default"),
            "a default route is left in main: {main:?}"
        );
    }
}

fn assert_allowed(to: SocketAddr, port: u16) {
    assert_eq!(
        talk(to, port),
        Ok("hello\n".to_string()),
        "{to} should be reachable"
    );
}

fn assert_denied(to: SocketAddr, port: u16) {
    match talk(to, port) {
        Err((Errno::EACCES, took)) => {
            assert!(took < AT_ONCE, "{to}: EACCES took {took:?}, not at once");
        }
        other => panic!("{to} should fail at once with EACCES, got {other:?}"),
    }
}

/// The verdict of the kernel's route lookup for `to`, through a UDP connect
/// (which sends nothing), optionally from a socket bound to `veth0`.
fn route_verdict(to: IpAddr, bind_to_device: bool) -> Result<Verdict, String> {
    let local: SocketAddr = match to {
        IpAddr::V4(_) => "0.0.0.0:0".parse().unwrap(),
        IpAddr::V6(_) => "[::]:0".parse().unwrap(),
    };
    let socket = UdpSocket::bind(local).unwrap();
    if bind_to_device {
        nix::sys::socket::setsockopt(
            &socket,
            nix::sys::socket::sockopt::BindToDevice,
            &"veth0".into(),
        )
        .unwrap();
    }
    match socket.connect(SocketAddr::new(to, 9)) {
        Ok(()) => Ok(Verdict::Allow),
        Err(e) if e.raw_os_error() == Some(Errno::EACCES as i32) => Ok(Verdict::Deny),
        Err(e) => Err(format!("{to}: {e}")),
    }
}

fn lab_policy() -> PolicySpec {
    spec(
        &["192.0.2.0/24", "2001:db8::/32"],
        &["192.0.2.128/25", "10.0.0.0/8"],
        &["192.0.2.200/32", "198.51.100.7/32"],
    )
}

#[test]
fn serve_installs_the_policy_and_the_kernel_enforces_it() {
    if !inside_private_namespaces("serve_installs_the_policy_and_the_kernel_enforces_it") {
        return;
    }
    let lab = Lab::new();
    let port = lab.echo_server();
    // Open before the policy: the lab itself works.
    assert_allowed(sa("203.0.113.9"), port);

    let spec = lab_policy();
    let policy = Policy::new(spec.clone()).unwrap();
    let serve = Serve::start(&spec);
    assert_eq!(serve.report.rules(), kernel::desired(&policy));
    assert_eq!(
        serve.report.changes.len(),
        kernel::desired(&policy).len(),
        "{:?}",
        serve.report.changes
    );
    assert!(
        serve.report.warnings.is_empty(),
        "{:?}",
        serve.report.warnings
    );
    let sources: Vec<String> = serve
        .report
        .entries
        .iter()
        .filter_map(|e| e.source.as_ref().map(|s| format!("{} {}", e.rule.dst, s)))
        .collect();
    assert!(
        sources.contains(&"192.0.2.200/32 profile lab: allow_egress".to_string()),
        "{sources:?}"
    );
    assert_kernel_enforces(&policy);

    for allowed in [
        "192.0.2.1",
        "192.0.2.200",
        "198.51.100.7",
        "2001:db8::7",
        "2001:db8:1::9",
        "::ffff:192.0.2.1",
    ] {
        assert_allowed(sa(allowed), port);
    }
    // Denied by a nested deny, by nothing at all, by the built-in ranges
    // (the slirp4netns host aliases, IPv4 and IPv6: IPv6 is no escape), and
    // as IPv4-mapped IPv6.
    for denied in [
        "192.0.2.129",
        "198.51.100.8",
        "203.0.113.9",
        "3fff::1",
        "10.0.2.2",
        "fd00::2",
        "::ffff:10.0.2.2",
        "::ffff:203.0.113.9",
    ] {
        assert_denied(sa(denied), port);
    }
    // A scope id names the device: IPv6 then skips routes on other devices,
    // which is why deny rules, not prohibit routes, enforce the policy.
    let veth0 = nix::net::if_::if_nametoindex("veth0").unwrap();
    let fe80_2: Ipv6Addr = "fe80::2".parse().unwrap();
    assert_denied(SocketAddr::V6(SocketAddrV6::new(fe80_2, 0, 0, veth0)), port);
    assert_eq!(
        route_verdict("fd00::2".parse().unwrap(), true),
        Ok(Verdict::Deny)
    );
    assert_eq!(
        route_verdict("2001:db8::7".parse().unwrap(), true),
        Ok(Verdict::Allow)
    );

    serve.stop();
}

#[test]
fn apply_changes_the_live_policy_without_cutting_allowed_flows() {
    if !inside_private_namespaces("apply_changes_the_live_policy_without_cutting_allowed_flows") {
        return;
    }
    let lab = Lab::new();
    let port = lab.echo_server();
    let first = lab_policy();
    let serve = Serve::start(&first);

    // An open connection to an allowed address...
    let mut flow = TcpStream::connect_timeout(
        &SocketAddr::new("192.0.2.1".parse().unwrap(), port),
        Duration::from_secs(3),
    )
    .unwrap();
    flow.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut echo = BufReader::new(flow.try_clone().unwrap());
    let mut say = |word: &str| {
        flow.write_all(format!("{word}\n").as_bytes()).unwrap();
        let mut line = String::new();
        echo.read_line(&mut line).unwrap();
        assert_eq!(line, format!("{word}\n"));
    };
    say("before");

    // ...survives an unrelated change, which also takes effect at once.
    let mut second = first;
    second
        .default_deny
        .push(SpecRule::new("2001:db8:1::/48".parse().unwrap()));
    second
        .allow_egress
        .push(SpecRule::new("203.0.113.0/24".parse().unwrap()));
    let report = apply(&second);
    let policy = Policy::new(second.clone()).unwrap();
    assert_eq!(report.rules(), kernel::desired(&policy));
    let changes: Vec<String> = report.changes.iter().map(|c| c.to_string()).collect();
    assert_eq!(
        changes,
        [
            "+ 10008: to 203.0.113.0/24 lookup 200",
            "+ 10080: to 2001:db8:1::/48 prohibit"
        ]
    );
    assert_kernel_enforces(&policy);
    say("after");
    assert_allowed(sa("203.0.113.9"), port);
    assert_denied(sa("2001:db8:1::9"), port);
    assert_allowed(sa("2001:db8::7"), port);

    // A policy that turns things around: the gateway is still known (table
    // 200) although the main table has no default route any more. Allowing
    // exactly the host alias opens it.
    let third = spec(&["198.51.100.0/24"], &[], &["10.0.2.2/32"]);
    let report = apply(&third);
    let policy = Policy::new(third.clone()).unwrap();
    assert_eq!(report.rules(), kernel::desired(&policy));
    assert_kernel_enforces(&policy);
    assert_allowed(sa("10.0.2.2"), port);
    assert_allowed(sa("198.51.100.8"), port);
    assert_denied(sa("192.0.2.1"), port);
    assert_denied(sa("2001:db8::7"), port);

    // show reads the same table back, without the sources it cannot know.
    let shown = show();
    assert_eq!(shown.rules(), kernel::desired(&policy));
    assert_eq!(shown.gateways, report.gateways);
    assert!(shown.entries.iter().all(|e| e.source.is_none()));
    let text = must(SIDECAR, &["show"]);
    assert!(text.contains("IPv4  via 10.0.2.2 dev veth0"), "{text}");
    assert!(text.contains("10000  allow  10.0.2.2/32"), "{text}");

    // Applying the same policy again changes nothing.
    assert!(apply(&third).changes.is_empty());
    serve.stop();
}

#[test]
fn apply_in_a_fresh_namespace_takes_the_gateways_from_the_main_table() {
    if !inside_private_namespaces(
        "apply_in_a_fresh_namespace_takes_the_gateways_from_the_main_table",
    ) {
        return;
    }
    let lab = Lab::new();
    let port = lab.echo_server();
    // A rule in the sidecar's range that it did not make is removed.
    ip("rule add pref 10005 to 203.0.113.0/24 lookup main");
    let spec = spec(&["0.0.0.0/0"], &[], &[]);
    let report = apply(&spec);
    let policy = Policy::new(spec).unwrap();
    assert_eq!(report.gateways.len(), 2, "{:?}", report.gateways);
    assert!(report.foreign.is_empty());
    assert_kernel_enforces(&policy);
    assert_allowed(sa("203.0.113.9"), port);
    assert_denied(sa("10.0.2.2"), port);
    // No IPv6 is allowed, so IPv6 needs no gateway but still has one.
    assert_denied(sa("2001:db8::7"), port);
}

#[test]
fn without_a_gateway_allowed_prefixes_fail_closed_until_one_appears() {
    if !inside_private_namespaces(
        "without_a_gateway_allowed_prefixes_fail_closed_until_one_appears",
    ) {
        return;
    }
    let lab = Lab::new();
    let port = lab.echo_server();
    // As when slirp4netns's router advertisement has not arrived yet.
    ip("-6 route del default via fe80::2 dev veth0");
    let spec = spec(&["2001:db8::/32", "192.0.2.0/24"], &[], &[]);
    let serve = Serve::start_with(&spec, &["--gateway-wait-ms", "300"]);
    assert_eq!(
        serve.report.warnings.len(),
        1,
        "{:?}",
        serve.report.warnings
    );
    assert!(
        serve.report.warnings[0].starts_with("the namespace has no IPv6 default route"),
        "{:?}",
        serve.report.warnings
    );
    let families: Vec<String> = serve
        .report
        .gateways
        .iter()
        .map(|g| g.family.to_string())
        .collect();
    assert_eq!(families, ["IPv4"]);
    assert_allowed(sa("192.0.2.1"), port);
    assert_denied(sa("2001:db8::7"), port);

    ip("-6 route add default via fe80::2 dev veth0");
    let report = apply(&spec);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert!(report.changes.is_empty(), "{:?}", report.changes);
    assert_kernel_enforces(&Policy::new(spec).unwrap());
    assert_allowed(sa("2001:db8::7"), port);
    serve.stop();
}

/// Addresses the local table answers before any rule: loopback, the lab's
/// own addresses and broadcast, multicast, and link-local (which needs a
/// scope id).
fn decided_before_the_rules(a: IpAddr) -> bool {
    match a.to_canonical() {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            o[0] == 0 || o[0] == 127 || o[0] >= 224 || o == [10, 0, 2, 100] || o == [10, 0, 2, 255]
        }
        IpAddr::V6(v6) => {
            v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || v6.is_unicast_link_local()
                || v6 == "fd00::100".parse::<Ipv6Addr>().unwrap()
        }
    }
}

/// xorshift64*, for reproducible addresses without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn offset(a: IpAddr, d: i128) -> IpAddr {
    match a {
        IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(
            (i128::from(u32::from(v4)) + d).rem_euclid(1 << 32) as u32,
        )),
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6).wrapping_add(d as u128))),
    }
}

#[test]
fn the_kernel_decides_every_address_as_why_does() {
    if !inside_private_namespaces("the_kernel_decides_every_address_as_why_does") {
        return;
    }
    let _lab = Lab::new();
    let spec = spec(
        &[
            "0.0.0.0/1",
            "192.0.2.0/24",
            "2001:db8::/32",
            "::/1",
            "fe80::/10",
        ],
        &[
            "64.0.0.0/2",
            "192.0.2.64/26",
            "2001:db8:8000::/33",
            "10.0.2.0/24",
            "::ffff:198.51.100.0/120",
        ],
        &[
            "64.1.0.0/16",
            "192.0.2.96/27",
            "2001:db8:8000:1::/64",
            "100.64.0.0/10",
            "fd00::2/128",
            "4000::/2",
        ],
    );
    let policy = Policy::new(spec.clone()).unwrap();
    apply(&spec);
    assert_kernel_enforces(&policy);

    let mut rng = Rng(0x1a2a_7e70_5eed_0003);
    let mut addrs: Vec<IpAddr> = Vec::new();
    for e in policy.table() {
        let (first, last) = (e.net.network(), e.net.broadcast());
        for a in [
            offset(first, -1),
            first,
            offset(first, 1),
            offset(last, -1),
            last,
            offset(last, 1),
        ] {
            addrs.push(a);
        }
    }
    for _ in 0..1500 {
        addrs.push(IpAddr::V4(Ipv4Addr::from(rng.next() as u32)));
        addrs.push(IpAddr::V6(Ipv6Addr::from(
            (u128::from(rng.next()) << 64) | u128::from(rng.next()),
        )));
    }
    let mapped: Vec<IpAddr> = addrs
        .iter()
        .filter_map(|a| match a {
            IpAddr::V4(v4) => Some(IpAddr::V6(v4.to_ipv6_mapped())),
            IpAddr::V6(_) => None,
        })
        .collect();
    addrs.extend(mapped);

    let mut checked = 0;
    for a in addrs.into_iter().filter(|a| !decided_before_the_rules(*a)) {
        let why = policy.why(a);
        assert_eq!(route_verdict(a, false), Ok(why.verdict), "{a}: {why}");
        if a.is_ipv6() && a.to_canonical().is_ipv6() {
            // Naming the device changes nothing for IPv6.
            assert_eq!(
                route_verdict(a, true),
                Ok(why.verdict),
                "{a} from a socket bound to veth0: {why}"
            );
        }
        checked += 1;
    }
    assert!(checked > 4000, "only {checked} addresses checked");
}

/// Whether `pid` has SIGTERM blocked or is waiting for it in sigtimedwait
/// (which unblocks the signals it waits for): either way a SIGTERM sent now
/// is taken, not fatal.
fn takes_sigterm(pid: u32) -> bool {
    let blocked = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("SigBlk:"))
                .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        })
        .is_some_and(|mask| mask & (1 << (Signal::SIGTERM as i32 - 1)) != 0);
    let waiting = std::fs::read_to_string(format!("/proc/{pid}/wchan"))
        .is_ok_and(|w| w.contains("sigtimedwait"));
    blocked || waiting
}

#[test]
fn hold_waits_for_sigterm() {
    let mut hold = Reap(
        Command::new(SIDECAR)
            .arg("hold")
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = hold.0.id();
    // Not PID 1 here: a SIGTERM before the signals are blocked would kill it.
    poll_until("hold to take SIGTERM", Duration::from_secs(5), || {
        takes_sigterm(pid)
    });
    assert_eq!(hold.0.try_wait().unwrap(), None, "hold exited by itself");
    kill(Pid::from_raw(pid as i32), Signal::SIGTERM).unwrap();
    let mut status = None;
    poll_until("hold to exit", Duration::from_secs(5), || {
        status = hold.0.try_wait().unwrap();
        status.is_some()
    });
    assert!(status.unwrap().success(), "{status:?}");
}

#[test]
fn bad_input_is_refused_before_touching_the_kernel() {
    let out = run(SIDECAR, &["apply", "--policy", r#"{"default_alow": []}"#]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("lazaret-sidecar: invalid policy JSON: unknown field `default_alow`"),
        "{err}"
    );

    let out = run(
        SIDECAR,
        &["apply", "--policy", r#"{"default_deny": ["10.0.0.1/8"]}"#],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("default_deny[0]: 10.0.0.1/8 has host bits set (did you mean 10.0.0.0/8?)"),
        "{err}"
    );

    let out = run(SIDECAR, &["apply"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("a policy is needed"));

    let out = run(
        SIDECAR,
        &["serve", "--policy-file", "/nonexistent/policy.json"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot read the policy file /nonexistent/policy.json: No such file"),
        "{err}"
    );
}

#[test]
fn kernel_errors_name_the_change_and_the_errno() {
    // A new user namespace, but the machine's own network namespace: the
    // kernel refuses every change there (the namespace belongs to the
    // initial user namespace), whoever runs the test, so nothing changes.
    let out = run(
        "unshare",
        &[
            "--user",
            "--map-root-user",
            "--",
            SIDECAR,
            "apply",
            "--policy",
            r#"{"default_allow": ["192.0.2.0/24"]}"#,
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("lazaret-sidecar: cannot "), "{err}");
    assert!(
        err.contains("Operation not permitted (EPERM, errno 1)"),
        "{err}"
    );
}

#[test]
fn the_policy_can_come_from_stdin() {
    if !inside_private_namespaces("the_policy_can_come_from_stdin") {
        return;
    }
    let _lab = Lab::new();
    let spec = spec(&["192.0.2.0/24"], &[], &[]);
    let mut child = Command::new(SIDECAR)
        .args(["apply", "--policy", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(spec.to_json().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("10008  allow  192.0.2.0/24          [network].default_allow"),
        "{text}"
    );
    assert_kernel_enforces(&Policy::new(spec).unwrap());
}
