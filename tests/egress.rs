//! Egress the agent cannot route around (issue 25, decisions.md D13): the
//! sandbox's namespace holds only loopback and its link to the Network
//! Sidecar, so every way a program can choose a path meets the same
//! policy, under runc and under runsc, as root and as an ordinary user
//! inside.
//!
//! The probe (tests/fixtures/netprobe.rs, built here with rustc and put in
//! the workspace) tries each mechanism: an ordinary socket,
//! `SO_BINDTODEVICE`, `SO_BINDTOIFINDEX`, `IP_UNICAST_IF`/`IPV6_UNICAST_IF`,
//! `IP_PKTINFO`/`IPV6_PKTINFO` with an interface index, IPv6 scope ids,
//! broadcast, raw and packet sockets. Targets: a test host on TEST-NET-3
//! (203.0.113.128/28) in a namespace this test makes (one address allowed, one denied, and
//! its DNS server, which counts every name it is asked), the host alias
//! 10.0.2.2 (a listener on this machine's loopback counts what reaches
//! it), and the user-mode DNS forwarder 10.0.2.3 (a TCP connect only: no
//! name that could leave the machine is ever sent there).

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use common::sandbox::Domain;
use common::testnet::{Spec, TestNet};
use common::text;
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};

const DNS: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 130);
const ALLOWED: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 131);
const DENIED: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 132);
const ALLOWED6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 3);
const DENIED6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 4);
/// "At once": well under any retransmission or probe timeout.
const AT_ONCE_MS: u64 = 500;

fn zone(name: &str, qtype: RecordType) -> Vec<Record> {
    match (name, qtype) {
        ("mixed.lazaret.test.", RecordType::A) => vec![Record::from_rdata(
            Name::from_ascii(name).unwrap(),
            5,
            RData::A(A(ALLOWED)),
        )],
        _ => Vec::new(),
    }
}

/// A listener that counts the connections it accepts.
fn counting(l: TcpListener) -> Arc<AtomicU32> {
    let n = Arc::new(AtomicU32::new(0));
    let seen = n.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            seen.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut s = s;
                let _ = std::io::copy(&mut s, &mut std::io::sink());
            });
        }
    });
    n
}

/// Builds the probe into the workspace (`/workspace/netprobe` inside).
fn build_probe(ws: &std::path::Path) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let rustc = std::path::Path::new(&cargo).with_file_name("rustc");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/netprobe.rs");
    let out = std::process::Command::new(&rustc)
        .args([
            "--edition",
            "2024",
            "-O",
            "-C",
            "target-feature=+crt-static",
        ])
        .arg(&src)
        .arg("-o")
        .arg(ws.join("netprobe"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", rustc.display()));
    assert!(out.status.success(), "building the probe: {}", text(&out).1);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(ws.join("netprobe"), std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Probes run inside in one `podman exec`, as root or as `nobody`.
struct Probes {
    as_root: bool,
    script: String,
    keys: Vec<String>,
}

impl Probes {
    fn new(as_root: bool) -> Probes {
        Probes {
            as_root,
            script: String::new(),
            keys: Vec::new(),
        }
    }

    /// Queues `netprobe ARGS`; its outcome is found under the returned key.
    fn add(&mut self, args: &[&str]) -> String {
        let key = args.join(" ");
        let user = if self.as_root {
            ""
        } else {
            "setpriv --reuid=65534 --regid=65534 --clear-groups "
        };
        let quoted: Vec<String> = args.iter().map(|a| common::shell_quote(a)).collect();
        self.script.push_str(&format!(
            "printf '%s\\t' {}; {user}/workspace/netprobe {} || echo failed:$?\n",
            common::shell_quote(&key),
            quoted.join(" ")
        ));
        self.keys.push(key.clone());
        key
    }

    /// Runs them all: each key's one-line outcome.
    fn run(self, d: &Domain) -> std::collections::HashMap<String, String> {
        let (code, out, err) = d.sh(&self.script);
        assert_eq!(code, 0, "{out}{err}");
        let got: std::collections::HashMap<String, String> = out
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(k, v)| (k.to_string(), v.trim().to_string()))
            .collect();
        for k in &self.keys {
            assert!(got.contains_key(k), "no outcome for `{k}`:\n{out}{err}");
        }
        got
    }
}

/// `refused:<errno> <N>ms` with N under [`AT_ONCE_MS`], or an error
/// choosing the path (a device that is not there): the attempt failed at
/// once.
fn failed_at_once(outcome: &str) -> bool {
    if outcome.starts_with("error:") {
        return true;
    }
    let Some(rest) = outcome.strip_prefix("refused:") else {
        return false;
    };
    rest.split_whitespace()
        .nth(1)
        .and_then(|ms| ms.strip_suffix("ms"))
        .and_then(|ms| ms.parse::<u64>().ok())
        .is_some_and(|ms| ms < AT_ONCE_MS)
}

fn egress(profile: &'static str, runtime: &str) {
    if !common::can_run_as_root("making the test's network namespace needs root") {
        return;
    }
    let started = Instant::now();
    let tn = TestNet::start(&Spec {
        tag: "lze",
        host: &["203.0.113.129/28", "2001:db8:2::1/64"],
        inside: vec![
            IpAddr::V4(DNS),
            IpAddr::V4(ALLOWED),
            IpAddr::V4(DENIED),
            IpAddr::V6(ALLOWED6),
            IpAddr::V6(DENIED6),
        ],
        dns: DNS,
        zone,
    });
    let allowed = counting(tn.listen(SocketAddr::new(IpAddr::V4(ALLOWED), 80)));
    let denied = counting(tn.listen(SocketAddr::new(IpAddr::V4(DENIED), 80)));
    let allowed6 = counting(tn.listen(SocketAddr::new(IpAddr::V6(ALLOWED6), 80)));
    let denied6 = counting(tn.listen(SocketAddr::new(IpAddr::V6(DENIED6), 80)));
    // The host's loopback, behind slirp4netns's alias 10.0.2.2 (which the
    // policy denies).
    let host_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = host_listener.local_addr().unwrap().port();
    let host = counting(host_listener);

    let d = Domain::new(profile);
    build_probe(&d.s.path().join("ws"));
    let config = std::fs::read_to_string(d.s.path().join("config.toml")).unwrap();
    d.s.write(
        "config.toml",
        &config.replacen(
            "default_deny = []\n",
            &format!(
                "default_deny = []\ndns_upstream = \"{DNS}:53\"\nallow_domains = [\"mixed.lazaret.test\"]\n"
            ),
            1,
        ),
    );
    d.add_config(&format!(
        "[profiles.{profile}]\nimage = \"{}\"\nruntime = \"{runtime}\"\nallow_egress = [\"{ALLOWED}/32\", \"{ALLOWED6}/128\"]\n",
        common::sandbox::BASE_IMAGE
    ));
    let holder = d.hold_up();
    eprintln!("{profile}: up at {:?}", started.elapsed());
    // The sidecar's live table, as `net show --json` reads it (its
    // counters from the kernel, its resolver's refused names).
    let net_show = || -> serde_json::Value {
        let out = d
            .cmd(common::STANDARD_PATH, &["net", "show", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    // Refusals the sidecar counted: its table's packets and its
    // resolver's names.
    let sidecar_total = || -> u64 {
        let report = net_show();
        let names: u64 = report["refused"]
            .as_array()
            .map(|a| a.iter().filter_map(|n| n["count"].as_u64()).sum())
            .unwrap_or(0);
        report["router"]["refused_packets"].as_u64().unwrap_or(0) + names
    };
    // The self-test's: `status` counts the agent's alone, none yet.
    let selftest = sidecar_total();
    assert!(selftest > 0, "the self-test's probes were not counted");

    // The namespace holds loopback and the link, nothing else.
    let mut p = Probes::new(true);
    let devices = p.add(&["devices"]);
    assert_eq!(p.run(&d)[&devices], "eth0,lo");

    let mechanisms = ["plain", "dev=eth0", "ifindex=eth0", "unicast=eth0"];
    let denied_targets = [
        format!("{DENIED}:80"),
        format!("[{DENIED6}]:80"),
        format!("10.0.2.2:{host_port}"),
        "10.0.2.3:53".to_string(),
        "[fd00::2]:80".to_string(),
        "[fd00::3]:53".to_string(),
    ];
    for as_root in [true, false] {
        let who = if as_root { "root" } else { "nobody" };
        let mut p = Probes::new(as_root);
        // An allowed destination still works, whichever path is chosen.
        let mut allowed_probes = Vec::new();
        for mech in mechanisms {
            for target in [format!("{ALLOWED}:80"), format!("[{ALLOWED6}]:80")] {
                allowed_probes.push(p.add(&["tcp", &target, mech]));
            }
        }
        // Denied destinations fail at once, whichever path is chosen.
        let mut denied_probes = Vec::new();
        for target in &denied_targets {
            for mech in mechanisms.iter().chain(&["dev=tap0"]) {
                denied_probes.push(p.add(&["tcp", target, mech]));
            }
        }
        // A scope id names the link: the user-mode network's link-local
        // host alias is not on it.
        let scoped = p.add(&["tcp", "[fe80::2%eth0]:80", "plain"]);
        // A DNS question carrying a name, by every path, to the test
        // host's DNS server (denied), by broadcast and multicast: none
        // may reach it.
        let mut names = Vec::new();
        let mut dns_probes = Vec::new();
        for (i, mech) in mechanisms.iter().chain(&["pktinfo=eth0"]).enumerate() {
            let name = format!("leak{i}-{who}.lazaret.test");
            dns_probes.push(p.add(&["dns", &format!("{DNS}:53"), &name, mech]));
            let v6 = format!("leak{i}-{who}-v6.lazaret.test");
            dns_probes.push(p.add(&["dns", "[2001:db8:2::2]:53", &v6, mech]));
            names.extend([name, v6]);
        }
        for (i, target) in [
            "255.255.255.255:53",
            "100.64.0.3:53",
            "224.0.0.251:53",
            "[ff02::1%eth0]:53",
        ]
        .iter()
        .enumerate()
        {
            let name = format!("cast{i}-{who}.lazaret.test");
            dns_probes.push(p.add(&["dns", target, &name, "broadcast"]));
            names.push(name);
        }
        // Raw and packet sockets: refused (no CAP_NET_RAW), or, where the
        // runtime allows one, what it sends meets the same policy.
        let raw_name = format!("raw-{who}.lazaret.test");
        let raw = p.add(&["raw", &DNS.to_string(), &raw_name]);
        names.push(raw_name);
        let packet = p.add(&["packet"]);

        let got = p.run(&d);
        for k in &allowed_probes {
            assert!(got[k].starts_with("connected"), "{who} {k}: {}", got[k]);
        }
        for k in &denied_probes {
            assert!(
                failed_at_once(&got[k]),
                "{who} {k}: {} (not refused at once)",
                got[k]
            );
        }
        assert!(
            !got[&scoped].starts_with("connected"),
            "{who} {scoped}: {}",
            got[&scoped]
        );
        for k in &dns_probes {
            assert_ne!(got[k], "answer", "{who} {k}: a denied DNS server answered");
        }
        assert!(
            got[&raw].starts_with("refused:") || got[&raw] == "sent",
            "{who} raw: {}",
            got[&raw]
        );
        assert!(
            got[&packet].starts_with("refused:"),
            "{who} packet socket: {}",
            got[&packet]
        );

        // The positive control: the server does count what reaches it (a
        // name asked through the sandbox's own resolver, allowed).
        let (_, out, _) = d.sh("getent ahostsv4 MiXeD.lazaret.test");
        assert!(out.contains(&ALLOWED.to_string()), "{who}: {out}");
        for name in &names {
            assert_eq!(tn.asked(name), 0, "{name} reached the test's DNS server");
        }
    }
    // Names go upstream in lower case: the agent's letter case is not a
    // channel to the name's servers (item 5).
    let asked = tn.names_asked();
    assert!(
        asked.contains(&"mixed.lazaret.test.".to_string()),
        "{asked:?}"
    );
    assert!(
        asked.iter().all(|n| *n == n.to_lowercase()),
        "a name went upstream with its case: {asked:?}"
    );
    assert_eq!(
        denied.load(Ordering::SeqCst),
        0,
        "the denied host was reached"
    );
    assert_eq!(
        denied6.load(Ordering::SeqCst),
        0,
        "the denied IPv6 host was reached"
    );
    assert_eq!(
        host.load(Ordering::SeqCst),
        0,
        "the host's loopback was reached"
    );
    assert!(
        allowed.load(Ordering::SeqCst) >= 8,
        "the allowed host was not reached"
    );
    assert!(
        allowed6.load(Ordering::SeqCst) >= 8,
        "the allowed IPv6 host was not reached"
    );

    // 50 refused connects in a row, each at once (no ICMP rate limit
    // turns one into a timeout).
    for target in [format!("{DENIED}:80"), format!("[{DENIED6}]:80")] {
        let (code, out, err) = d.sh(&format!(
            "for i in $(seq 50); do /workspace/netprobe tcp '{target}' plain; done"
        ));
        assert_eq!(code, 0, "{err}");
        let slow: Vec<&str> = out.lines().filter(|l| !failed_at_once(l)).collect();
        assert_eq!(out.lines().count(), 50, "{out}");
        assert!(slow.is_empty(), "{target}: not refused at once: {slow:?}");
    }

    // Every refusal is counted, and only refusals: the table's counters
    // (read from the kernel through `net show`) grow by one for one
    // refused connect, not for twenty allowed ones, nor for a lookup.
    let counted = || -> u64 {
        let report = net_show();
        report["router"]["refused_packets"]
            .as_u64()
            .unwrap_or_else(|| panic!("no refused_packets in {report}"))
    };
    let before = counted();
    assert!(before >= 100, "the 100 refused connects above: {before}");
    let (code, out, err) = d.sh(&format!(
        "for i in $(seq 20); do /workspace/netprobe tcp '{ALLOWED}:80' plain; done; \
         getent ahostsv4 mixed.lazaret.test; /workspace/netprobe tcp '{DENIED}:80' plain"
    ));
    assert_eq!(code, 0, "{err}");
    let connected = out.lines().filter(|l| l.starts_with("connected")).count();
    assert_eq!(connected, 20, "{out}");
    assert_eq!(counted(), before + 1, "{out}");
    // A refused name counts too, and the coordinator learns the total from
    // the sidecar's log without asking: `status` (what the workbench's
    // sessions panel shows) reaches the agent's refusals within seconds:
    // all the sidecar counted but the self-test's.
    let (_, out, _) = d.sh("getent hosts refused-name.lazaret.test; echo LOOKED=$?");
    assert!(
        !out.contains("LOOKED=0"),
        "the refused name resolved: {out}"
    );
    assert_eq!(tn.asked("refused-name.lazaret.test"), 0);
    let agents = sidecar_total() - selftest;
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let told = d
            .status()
            .and_then(|s| s["egress_refused"].as_u64())
            .unwrap_or(0);
        if told >= agents {
            assert_eq!(
                told, agents,
                "the self-test's {selftest} counted as the agent's"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "status says {told} refusals, the sidecar counted {agents} of the agent's"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }

    let mut holder = holder;
    let _ = holder.kill();
    let _ = holder.wait();
    d.down();
    eprintln!("{profile}: done at {:?}", started.elapsed());
}

#[test]
fn every_path_meets_the_policy_under_runsc() {
    egress("egv", "runsc");
}

#[test]
fn every_path_meets_the_policy_under_runc() {
    egress("erc", "runc");
}
