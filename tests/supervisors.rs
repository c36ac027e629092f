//! The supervisors the agent can talk to cannot be exhausted (issue 26,
//! items 2 and 3): attacks from inside a real sandbox, under runsc and
//! under runc, then what the user does next.
//!
//! - The Escalation Socket: 2,000 connections held open, no TLS. The
//!   coordinator's descriptors stay bounded, the connections over the
//!   bound are refused and the refusal is audited; a new session attaches
//!   and runs, a legitimate escalation works, the domain stays up.
//! - The sidecar's resolver: 500 TCP connections to port 53, each sending
//!   a byte a second. The sidecar's threads stay under its cap; an allowed
//!   name still resolves, over UDP and over TCP.
//! - A watchdog that cannot read the sandbox (the coordinator out of
//!   descriptors, made so from outside: the agent can no longer do it)
//!   stops the sandbox and says so; it does not take it for gone.
//!
//! Bounded: each attack holds its connections for at most a minute, and
//! the only network traffic is the sandbox's own loopback and a test host
//! in a namespace this test makes (203.0.113.64/28).

mod common;

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::sandbox::Domain;
use common::testnet::{Spec, TestNet};
use common::{ESCALATE as ESC, STANDARD_PATH, podman, text};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use wait_timeout::ChildExt;

/// The connections the attacker opens to the Escalation Socket.
const ESCALATION_FLOOD: usize = 2000;
/// The coordinator's descriptors may grow by at most this much under the
/// flood: its escalation bound (64) at a few descriptors each, and slack
/// for what the domain does meanwhile. Without a bound it is the flood.
const COORDINATOR_GROWTH: usize = 200;
/// The TCP connections the attacker opens to the resolver.
const DNS_FLOOD: usize = 500;
/// The sidecar's threads under the flood: its TCP cap (32) plus its few
/// own threads (main, control, expiry, the two listeners).
const SIDECAR_THREADS: u64 = 32 + 10;

/// One test of this file at a time: each loads the host on purpose.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// A process in the sandbox (`podman exec`), its first line of output
/// awaited: (the child, that line).
fn attack(d: &Domain, script: &str, ready: &str) -> (Child, String) {
    let mut c = common::as_test_user(
        Path::new("/usr/bin/podman"),
        &common::user_home(),
        STANDARD_PATH,
        &[],
    );
    let mut child = c
        .args(["exec", &d.sandbox(), "perl", "-e", script])
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.starts_with(ready) => return (child, line),
            Ok(_) => {}
            Err(_) => {
                let _ = child.kill();
                panic!("the attack never said {ready}");
            }
        }
    }
}

fn end(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
}

/// `lazaret exec PROFILE -- sh -c SCRIPT`, a new session, given `secs` to
/// finish: (exit code, stdout, stderr); `None` when it did not.
fn session(d: &Domain, script: &str, secs: u64) -> Option<(i32, String, String)> {
    let mut child = d
        .cmd_raw(
            STANDARD_PATH,
            &["exec", d.profile, "--", "sh", "-c", script],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let o = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        s
    });
    let e = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    match child.wait_timeout(Duration::from_secs(secs)).unwrap() {
        Some(status) => Some((
            status.code().unwrap_or(-1),
            o.join().unwrap(),
            e.join().unwrap(),
        )),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    }
}

fn coordinator_pid(d: &Domain) -> i32 {
    let status = d.status().expect("the domain is listed");
    i32::try_from(
        status["coordinator_pid"]
            .as_u64()
            .expect("a coordinator pid"),
    )
    .unwrap()
}

fn alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

/// How many descriptors process `pid` holds (`None` once it is gone).
fn descriptors(pid: i32) -> Option<usize> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(Iterator::count)
}

fn log_of(d: &Domain) -> String {
    std::fs::read_to_string(d.domain_root().join("coordinator.log")).unwrap_or_default()
}

/// 2,000 connections to the Escalation Socket, held open, no TLS; then a
/// new session, a legitimate escalation, the domain still up.
fn escalation_flood(profile: &'static str) {
    let _one = one_at_a_time();
    let started = Instant::now();
    let d = Domain::new(profile);
    let holder = d.hold_up();
    let pid = coordinator_pid(&d);
    let before = descriptors(pid).unwrap();
    eprintln!(
        "{profile}: up at {:?}; the coordinator (pid {pid}) holds {before} descriptors",
        started.elapsed()
    );
    let script = format!(
        r#"use IO::Socket::UNIX; use Socket; $| = 1; my @s; my $failed = 0;
        for (1..{ESCALATION_FLOOD}) {{
            my $c = IO::Socket::UNIX->new(Type => SOCK_STREAM, Peer => "/run/lazaret/escalate.sock");
            if ($c) {{ push @s, $c }} else {{ $failed++ }}
        }}
        print "OPEN " . scalar(@s) . " FAILED $failed\n"; sleep 60;"#
    );
    // The flood's connects are watched from outside as they happen.
    let watch = {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let t = std::thread::spawn(move || {
            let mut most = 0;
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                most = most.max(descriptors(pid).unwrap_or(0));
                std::thread::sleep(Duration::from_millis(20));
            }
            most
        });
        (stop, t)
    };
    let (flood, line) = attack(&d, &script, "OPEN ");
    eprintln!("{profile}: the agent: {line} at {:?}", started.elapsed());
    // The barrier: the coordinator's first refusal is audited at once, when
    // its bound is full; the watch goes on until then, so the most it saw
    // is what the flood made it hold, not what it had accepted so far.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !d
        .audit_json()
        .iter()
        .any(|r| r["kind"] == "connections-refused" && r["data"]["listener"] == "Escalation Socket")
    {
        assert!(
            Instant::now() < deadline,
            "the coordinator refused nothing within 60 s of {line}:\n{}",
            log_of(&d)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_millis(200));
    watch.0.store(true, std::sync::atomic::Ordering::Relaxed);
    let most = watch.1.join().unwrap();
    eprintln!(
        "{profile}: the coordinator held at most {most} descriptors during the flood ({before} before)"
    );
    let opened: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        opened >= ESCALATION_FLOOD / 2,
        "the attack itself failed: {line}"
    );

    // The coordinator is alive and its descriptors bounded.
    assert!(alive(pid), "the coordinator died:\n{}", log_of(&d));
    assert!(
        most <= before + COORDINATOR_GROWTH,
        "the coordinator's descriptors grew from {before} to {most} under {opened} connections"
    );

    // What the user does next, with the agent's connections still open on
    // its side: a new session attaches and runs.
    let r = session(&d, "echo attached", 60);
    let (code, out, err) = r.expect("a new session did not finish within 60 s");
    assert_eq!(code, 0, "a new session failed: {out}{err}");
    assert!(out.contains("attached"), "{out}{err}");

    // A legitimate escalation works once the agent's idle connections have
    // had their deadline (10 s from accept, the TLS handshake included);
    // the flood's connections are still open on the agent's side.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = None;
    while Instant::now() < deadline {
        let r = session(&d, &format!("{ESC} -- echo escalated"), 60);
        if let Some((0, out, _)) = &r
            && out.contains("escalated")
        {
            last = None;
            break;
        }
        last = Some(r);
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(
        last.is_none(),
        "no legitimate escalation worked within 30 s: {last:?}"
    );

    // The domain stays up and supervised: not torn down, not "gone".
    assert!(alive(pid), "the coordinator died:\n{}", log_of(&d));
    assert_eq!(d.containers().len(), 2, "{:?}", d.containers());
    assert_eq!(d.sh("echo still").1.trim(), "still");
    let log = log_of(&d);
    assert!(!log.contains("is gone"), "{log}");
    assert!(!log.contains("teardown"), "{log}");

    // The user is told: the refusals are counted in the audit log.
    let records = d.audit_json();
    let refused: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["kind"] == "connections-refused")
        .collect();
    assert!(
        !refused.is_empty(),
        "no connections-refused record: {:?}",
        records.iter().map(|r| &r["kind"]).collect::<Vec<_>>()
    );
    assert_eq!(refused[0]["data"]["listener"], "Escalation Socket");
    assert!(
        refused.len() <= 3,
        "refusals are reported per interval, not per connection: {}",
        refused.len()
    );
    eprintln!(
        "{profile}: refused and audited: {}; done at {:?}",
        refused[0]["data"]["message"],
        started.elapsed()
    );
    end(flood);
    end(holder);
    d.down();
}

#[test]
fn escalation_socket_flood_under_runsc() {
    escalation_flood("gv");
}

#[test]
fn escalation_socket_flood_under_runc() {
    escalation_flood("rc");
}

const DNS: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 66);
const WEB: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 67);

fn zone(name: &str, qtype: RecordType) -> Vec<Record> {
    match (name, qtype) {
        ("web.lazaret.test.", RecordType::A) => vec![Record::from_rdata(
            Name::from_ascii(name).unwrap(),
            30,
            RData::A(A(WEB)),
        )],
        _ => Vec::new(),
    }
}

/// The sidecar's host process and its thread count.
fn sidecar_threads(d: &Domain) -> u64 {
    let out = podman(&["inspect", "--format", "{{.State.Pid}}", &d.sidecar()]);
    let pid = text(&out).0.trim().to_string();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("the sidecar (pid {pid:?}) is not running: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

/// One TCP query for web.lazaret.test from inside: the answer's first
/// address, or what went wrong.
const TCP_QUERY: &str = r#"use IO::Socket::INET; $| = 1;
    my $c = IO::Socket::INET->new(PeerAddr => "100.64.0.1", PeerPort => 53, Proto => "tcp", Timeout => 5)
        or do { print "RESULT connect: $!\n"; exit };
    my $q = pack("n n n n n n", 0x4c5a, 0x0100, 1, 0, 0, 0)
        . join("", map { chr(length $_) . $_ } qw(web lazaret test)) . "\0" . pack("n n", 1, 1);
    print $c pack("n", length $q) . $q;
    local $SIG{ALRM} = sub { print "RESULT timeout\n"; exit }; alarm 10;
    read($c, my $len, 2) == 2 or do { print "RESULT closed\n"; exit };
    read($c, my $a, unpack("n", $len));
    my ($id, $flags, $qd, $an) = unpack("n n n n", $a);
    my $ip = join(".", unpack("C4", substr($a, -4)));
    print "RESULT id=$id rcode=" . ($flags & 15) . " answers=$an last=$ip\n";"#;

fn resolver_flood(profile: &'static str, runtime: &str) {
    if !common::can_run_as_root("making the test's network namespace needs root") {
        return;
    }
    let _one = one_at_a_time();
    let started = Instant::now();
    let _tn = TestNet::start(&Spec {
        tag: "lzs",
        host: &["203.0.113.65/28"],
        inside: vec![IpAddr::V4(DNS), IpAddr::V4(WEB)],
        dns: DNS,
        zone,
    });
    let d = Domain::new(profile);
    let config = std::fs::read_to_string(d.s.path().join("config.toml")).unwrap();
    let config = config.replacen(
        "default_deny = []\n",
        &format!(
            "default_deny = []\ndns_upstream = \"{DNS}:53\"\nallow_domains = [\"web.lazaret.test\"]\n"
        ),
        1,
    );
    d.s.write("config.toml", &config);
    d.add_config(&format!(
        "[profiles.{profile}]\nimage = \"{}\"\nruntime = \"{runtime}\"\n",
        common::sandbox::BASE_IMAGE
    ));
    let holder = d.hold_up();
    let idle = sidecar_threads(&d);
    eprintln!(
        "{profile}: up at {:?}; the sidecar runs {idle} threads",
        started.elapsed()
    );

    // 500 connections to the resolver, each sending a byte of a query a
    // second for 20 s: a connection that trickles is never idle.
    let script = format!(
        r#"use IO::Socket::INET; $| = 1; $SIG{{PIPE}} = "IGNORE"; my @s; my $failed = 0;
        for (1..{DNS_FLOOD}) {{
            my $c = IO::Socket::INET->new(PeerAddr => "100.64.0.1", PeerPort => 53, Proto => "tcp", Timeout => 3);
            if ($c) {{ push @s, $c }} else {{ $failed++ }}
        }}
        print "OPEN " . scalar(@s) . " FAILED $failed\n";
        for (1..20) {{ for my $c (@s) {{ syswrite($c, "\xff") }} sleep 1 }}
        sleep 30;"#
    );
    let (flood, line) = attack(&d, &script, "OPEN ");
    let opened: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(opened >= DNS_FLOOD / 2, "the attack itself failed: {line}");
    let mut most = 0;
    let until = Instant::now() + Duration::from_secs(12);
    while Instant::now() < until {
        most = most.max(sidecar_threads(&d));
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("{profile}: the agent: {line}; the sidecar ran at most {most} threads ({idle} idle)");
    assert!(
        most <= SIDECAR_THREADS,
        "the sidecar ran {most} threads under {opened} TCP connections (cap {SIDECAR_THREADS})"
    );

    // What the user does next, the flood still trickling: an allowed name
    // resolves over UDP ...
    let (_, out, err) = d.sh("getent ahostsv4 web.lazaret.test");
    assert!(out.contains(&WEB.to_string()), "{out}{err}");
    // ... and over TCP, once the flood's connections reached their end.
    let deadline = Instant::now() + Duration::from_secs(30);
    let answer = loop {
        let (_, out, _) = d.sh(&format!("perl -e {}", common::shell_quote(TCP_QUERY)));
        if out.contains(&format!("rcode=0 answers=1 last={WEB}")) {
            break out;
        }
        assert!(
            Instant::now() < deadline,
            "no TCP answer within 30 s: {out}"
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    assert!(answer.contains("id=19546"), "{answer}");
    assert!(
        sidecar_threads(&d) <= SIDECAR_THREADS,
        "{}",
        sidecar_threads(&d)
    );
    eprintln!("{profile}: done at {:?}", started.elapsed());
    end(flood);
    end(holder);
    d.down();
}

#[test]
fn resolver_tcp_flood_under_runsc() {
    resolver_flood("sup", "runsc");
}

#[test]
fn resolver_tcp_flood_under_runc() {
    resolver_flood("suprc", "runc");
}

/// The lowest descriptor number `pid` does not hold.
fn lowest_free(pid: i32) -> u64 {
    // The lowest over a second of looks: a descriptor the coordinator holds
    // for a moment (a file its watchdog reads) would otherwise leave one
    // free under the limit, and the watchdog would never go blind.
    (0..20)
        .map(|_| {
            let held: std::collections::BTreeSet<u64> =
                std::fs::read_dir(format!("/proc/{pid}/fd"))
                    .unwrap()
                    .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect();
            std::thread::sleep(Duration::from_millis(50));
            (0..).find(|n| !held.contains(n)).unwrap()
        })
        .min()
        .unwrap()
}

/// The coordinator can open no descriptor (its soft limit set, from
/// outside, to the lowest one it does not hold: as if the agent had taken
/// them all, which it no longer can): the watchdog cannot read the
/// sandbox, and the coordinator stops the sandbox rather than leaving it
/// unsupervised, and says so.
fn blind_watchdog(profile: &'static str) {
    if !common::can_run_as_root("limiting another user's process needs root") {
        return;
    }
    let _one = one_at_a_time();
    let d = Domain::new(profile);
    let holder = d.hold_up();
    let pid = coordinator_pid(&d);
    let sandbox = d.sandbox();
    let limit = lowest_free(pid);
    // As the coordinator's own user (root here may lack CAP_SYS_RESOURCE).
    let out = common::as_test_user(
        Path::new("/usr/bin/prlimit"),
        &common::user_home(),
        STANDARD_PATH,
        &[],
    )
    .args(["--pid", &pid.to_string(), &format!("--nofile={limit}:")])
    .current_dir("/")
    .output()
    .unwrap();
    assert!(out.status.success(), "prlimit: {}", text(&out).1);
    eprintln!("{profile}: the coordinator (pid {pid}) may now open no descriptor (limit {limit})");

    // Within a minute the sandbox is stopped.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let running = podman(&["ps", "--format", "{{.Names}}"]);
        if !text(&running).0.lines().any(|l| l == sandbox) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sandbox still runs a minute after its supervisor went blind; coordinator alive: {}\n{}",
            alive(pid),
            log_of(&d)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // ... and the audit log and the coordinator's log say why.
    let log = log_of(&d);
    assert!(log.contains("could not read the Agent Sandbox"), "{log}");
    assert!(!log.contains("the Agent Sandbox is gone"), "{log}");
    let records = d.audit_json();
    let lost = records
        .iter()
        .find(|r| r["kind"] == "supervision-lost")
        .unwrap_or_else(|| {
            panic!(
                "no supervision-lost record: {:?}",
                records.iter().map(|r| &r["kind"]).collect::<Vec<_>>()
            )
        });
    assert!(
        lost["data"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("stopping the sandbox")),
        "{lost}"
    );
    end(holder);
    d.wait_until_gone();
}

#[test]
fn a_blind_watchdog_stops_the_sandbox_under_runsc() {
    blind_watchdog("gv");
}

#[test]
fn a_blind_watchdog_stops_the_sandbox_under_runc() {
    blind_watchdog("rc");
}
