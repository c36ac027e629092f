//! Egress by name (decisions.md D11), on a real agent under runsc and runc.
//!
//! The test makes its own network namespace with a test host on TEST-NET-2
//! (198.51.100.0/24, 2001:db8:100::/64) behind a veth pair, checks that the
//! host routes those ranges into it before any traffic, and runs there the
//! upstream DNS server (names under the reserved `lazaret.test`, counting the
//! queries it gets) and TCP listeners. The sandbox reaches them through
//! slirp4netns like any outside address. Nothing resolves or contacts any
//! other name or address.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use common::sandbox::Domain;
use common::testnet::{Spec, TestNet};
use common::{STANDARD_PATH, text};
use hickory_proto::rr::rdata::{A, AAAA, CNAME};
use hickory_proto::rr::{Name, RData, Record, RecordType};

const DNS: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
const WEB: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 3);
const WILD: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 4);
const LIAR: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 6);
/// Carried in the liar's answer for a name that was not asked.
const SMUGGLED: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
const CHAINED: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 8);
const LATE: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 9);
const WEB6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 3);
const TTL: u32 = 5;

/// The zone the test's upstream serves: (name, type) -> answer records.
fn zone(name: &str, qtype: RecordType) -> Vec<Record> {
    let n = |s: &str| Name::from_ascii(s).unwrap();
    let a = |s: &str, ip: Ipv4Addr| Record::from_rdata(n(s), TTL, RData::A(A(ip)));
    match (name, qtype) {
        ("web.lazaret.test.", RecordType::A) => vec![a(name, WEB)],
        ("x.wild.lazaret.test.", RecordType::A) => vec![a(name, WILD)],
        ("bad.wild.lazaret.test.", RecordType::A) => vec![a(name, WILD)],
        ("notallowed.lazaret.test.", RecordType::A) => vec![a(name, WEB)],
        ("late.lazaret.test.", RecordType::A) => vec![a(name, LATE)],
        ("v6.lazaret.test.", RecordType::AAAA) => {
            vec![Record::from_rdata(n(name), TTL, RData::AAAA(AAAA(WEB6)))]
        }
        // Rebinding: an allowed name pointing at the host's loopback alias.
        ("private.lazaret.test.", RecordType::A) => vec![a(name, Ipv4Addr::new(10, 0, 2, 2))],
        ("private.lazaret.test.", RecordType::AAAA) => vec![Record::from_rdata(
            n(name),
            TTL,
            RData::AAAA(AAAA("fd00::2".parse().unwrap())),
        )],
        // An answer that also carries a record for a name nobody asked.
        ("liar.lazaret.test.", RecordType::A) => {
            vec![a(name, LIAR), a("smuggled.lazaret.test.", SMUGGLED)]
        }
        ("cname.lazaret.test.", RecordType::A) => vec![
            Record::from_rdata(
                n(name),
                TTL,
                RData::CNAME(CNAME(n("edge.cdn.lazaret.test."))),
            ),
            a("edge.cdn.lazaret.test.", CHAINED),
        ],
        _ => Vec::new(),
    }
}

/// The test host, serving [`zone`] and a TCP listener on port 80 of each
/// web address (each connection stays open until the peer closes it).
fn test_net() -> TestNet {
    let web = [
        IpAddr::V4(WEB),
        IpAddr::V4(WILD),
        IpAddr::V4(LIAR),
        IpAddr::V4(SMUGGLED),
        IpAddr::V4(CHAINED),
        IpAddr::V4(LATE),
        IpAddr::V6(WEB6),
    ];
    let mut inside = vec![IpAddr::V4(DNS)];
    inside.extend(web);
    let tn = TestNet::start(&Spec {
        tag: "lzd",
        host: &["198.51.100.1/24", "2001:db8:100::1/64"],
        inside,
        dns: DNS,
        zone,
    });
    for a in web {
        let l = tn.listen(SocketAddr::new(a, 80));
        std::thread::spawn(move || {
            for mut s in l.incoming().flatten() {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut s, &mut std::io::sink());
                });
            }
        });
    }
    tn
}

fn net(d: &Domain, args: &[&str]) -> (bool, String) {
    let mut all = vec!["net"];
    all.extend_from_slice(args);
    let out = d.cmd(STANDARD_PATH, &all).output().unwrap();
    let (o, e) = text(&out);
    (out.status.success(), format!("{o}{e}"))
}

/// `getent ahostsv4|ahostsv6 NAME` in the sandbox: the addresses, or none.
fn resolve(d: &Domain, family: &str, name: &str) -> Vec<String> {
    let (_, out, _) = d.sh(&format!("getent {family} {name}"));
    let mut v: Vec<String> = out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    v.dedup();
    v
}

/// Connects from inside, by name or address: `(ok, millis, error)`.
fn connect(d: &Domain, host: &str) -> (bool, u64, String) {
    let script = format!(
        "s=${{EPOCHREALTIME/./}}; if exec 3<>/dev/tcp/{host}/80; then r=OK; else r=FAIL; fi 2>/tmp/err; \
         e=${{EPOCHREALTIME/./}}; echo \"$r $(( (e - s) / 1000 )) $(cat /tmp/err)\""
    );
    let (_, out, _) = d.sh(&format!(
        "timeout 10 bash -c {}",
        common::shell_quote(&script)
    ));
    let mut parts = out.trim().splitn(3, ' ');
    let ok = parts.next() == Some("OK");
    let ms = parts
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(u64::MAX);
    (ok, ms, parts.next().unwrap_or_default().to_string())
}

fn assert_denied(d: &Domain, addr: &str) {
    let (ok, ms, err) = connect(d, addr);
    assert!(!ok, "{addr} was reached");
    assert!(
        // The Network Sidecar answers a denied connect with a reset.
        err.contains("Connection refused"),
        "ECONNREFUSED expected for {addr}: {err}"
    );
    assert!(ms < 500, "refusing {addr} took {ms} ms");
}

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn names_by_name(profile: &'static str, runtime: &str) {
    if !common::can_run_as_root("making the test's network namespace needs root") {
        return;
    }
    let started = Instant::now();
    let tn = test_net();
    let d = Domain::new(profile);
    let config = std::fs::read_to_string(d.s.path().join("config.toml")).unwrap();
    let config = config.replacen(
        "default_deny = []\n",
        &format!(
            "default_deny = []\n\
             dns_upstream = \"{DNS}:53\"\n\
             name_ttl_floor = 1\n\
             name_ttl_cap = {TTL}\n\
             allow_domains = [\"web.lazaret.test\", \"*.wild.lazaret.test\", \"v6.lazaret.test\", \
             \"private.lazaret.test\", \"liar.lazaret.test\"]\n\
             deny_domains = [\"bad.wild.lazaret.test\"]\n"
        ),
        1,
    );
    d.s.write("config.toml", &config);
    d.add_config(&format!(
        "[profiles.{profile}]\nimage = \"{}\"\nruntime = \"{runtime}\"\nallow_domains = [\"cname.lazaret.test\"]\n",
        common::sandbox::BASE_IMAGE
    ));
    d.up();
    eprintln!("{profile}: up at {:?}", started.elapsed());

    // The sandbox asks the sidecar.
    let (_, conf, _) = d.sh("cat /etc/resolv.conf");
    assert!(conf.contains("nameserver 100.64.0.1"), "{conf}");

    // An allowed name resolves, and its address is reachable at once.
    assert_eq!(
        resolve(&d, "ahostsv4", "web.lazaret.test"),
        vec![WEB.to_string()]
    );
    let (ok, _, err) = connect(&d, "web.lazaret.test");
    assert!(ok, "web.lazaret.test allowed but not reached: {err}");
    let (_, show) = net(&d, &["show"]);
    assert!(show.contains("web.lazaret.test"), "{show}");
    assert!(show.contains(&WEB.to_string()), "{show}");

    // A name not allowed is refused inside and never leaves.
    assert!(resolve(&d, "ahostsv4", "notallowed.lazaret.test").is_empty());
    assert_eq!(tn.asked("notallowed.lazaret.test"), 0);
    let (_, show) = net(&d, &["show"]);
    assert!(
        show.contains("notallowed.lazaret.test"),
        "refused names listed: {show}"
    );
    let (_, why) = net(&d, &["why", "notallowed.lazaret.test"]);
    assert!(why.contains("refused"), "{why}");

    // Wildcards, and a deny that beats them.
    assert_eq!(
        resolve(&d, "ahostsv4", "x.wild.lazaret.test"),
        vec![WILD.to_string()]
    );
    assert!(connect(&d, "x.wild.lazaret.test").0);
    assert!(resolve(&d, "ahostsv4", "bad.wild.lazaret.test").is_empty());
    assert_eq!(tn.asked("bad.wild.lazaret.test"), 0);
    assert!(resolve(&d, "ahostsv4", "wild.lazaret.test").is_empty());

    // IPv6: the AAAA answer is opened as a /128.
    assert_eq!(
        resolve(&d, "ahostsv6", "v6.lazaret.test"),
        vec![WEB6.to_string()]
    );
    let (_, show) = net(&d, &["show"]);
    assert!(show.contains(&format!("{WEB6}/128")), "{show}");
    let (ok6, _, err6) = connect(&d, &WEB6.to_string());
    assert!(ok6, "{WEB6} opened by name but not reached: {err6}");

    // Rebinding: an allowed name answering with a denied address opens nothing.
    assert_eq!(
        resolve(&d, "ahostsv4", "private.lazaret.test"),
        vec!["10.0.2.2"]
    );
    assert_denied(&d, "10.0.2.2");
    resolve(&d, "ahostsv6", "private.lazaret.test");
    assert_denied(&d, "fd00::2");

    // Records for a name nobody asked open nothing; the asked one does.
    assert_eq!(
        resolve(&d, "ahostsv4", "liar.lazaret.test"),
        vec![LIAR.to_string()]
    );
    assert_denied(&d, &SMUGGLED.to_string());
    // A CNAME chain inside the asked name's answer is followed.
    assert_eq!(
        resolve(&d, "ahostsv4", "cname.lazaret.test"),
        vec![CHAINED.to_string()]
    );
    assert!(connect(&d, &CHAINED.to_string()).0);

    // A live allow of a name from the CLI: refused, then resolved.
    assert!(resolve(&d, "ahostsv4", "late.lazaret.test").is_empty());
    assert_eq!(tn.asked("late.lazaret.test"), 0);
    let (ok, out) = net(&d, &["allow", "late.lazaret.test"]);
    assert!(ok, "{out}");
    assert_eq!(
        resolve(&d, "ahostsv4", "late.lazaret.test"),
        vec![LATE.to_string()]
    );
    assert!(connect(&d, "late.lazaret.test").0);
    let (_, why) = net(&d, &["why", "late.lazaret.test"]);
    assert!(why.contains("lazaret net allow"), "{why}");
    // ... and a live deny closes its address at once, before the TTL.
    let (ok, out) = net(&d, &["deny", "late.lazaret.test", "--verbose"]);
    assert!(ok, "{out}");
    assert!(
        out.starts_with("denied late.lazaret.test in domain "),
        "{out}"
    );
    assert!(out.contains(&format!("- 10000: to {LATE}/32")), "{out}");
    assert!(
        !out.lines()
            .any(|l| l.contains(&LATE.to_string()) && !l.trim_start().starts_with('-')),
        "{out}"
    );
    assert_denied(&d, &LATE.to_string());
    assert!(resolve(&d, "ahostsv4", "late.lazaret.test").is_empty());
    eprintln!("{profile}: names checked at {:?}", started.elapsed());

    // An open connection keeps its address past the TTL; once it closes,
    // the rule goes, and a direct connect fails at once.
    let hold = {
        let sandbox = d.sandbox();
        std::thread::spawn(move || {
            common::podman(&[
                "exec",
                &sandbox,
                "bash",
                "-c",
                "exec 3<>/dev/tcp/web.lazaret.test/80 && sleep 8 && echo hi >&3 && echo SENT",
            ])
        })
    };
    std::thread::sleep(Duration::from_millis(TTL as u64 * 1000 + 2500));
    let (_, why) = net(&d, &["why", &WEB.to_string()]);
    assert!(why.contains("held open by a connection"), "{why}");
    let out = hold.join().unwrap();
    assert!(text(&out).0.contains("SENT"), "{:?}", text(&out));
    wait_until("the expired rules to go", Duration::from_secs(10), || {
        !net(&d, &["show"]).1.contains("opened by name")
    });
    assert_denied(&d, &WEB.to_string());
    assert_denied(&d, &WILD.to_string());
    let (_, why) = net(&d, &["why", &WEB.to_string()]);
    assert!(why.contains("denied by"), "{why}");

    eprintln!("{profile}: expiry checked at {:?}", started.elapsed());
    d.down();
    d.assert_gone();
}

#[test]
fn names_under_runsc() {
    names_by_name("dns", "runsc");
}

#[test]
fn names_under_runc() {
    names_by_name("dnsrc", "runc");
}

/// Opening the host's loopback in a domain whose network started without
/// it cannot take effect live: the change says so and changes nothing.
#[test]
fn a_live_change_that_needs_a_restart_says_so() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let d = Domain::new("gv");
    d.up();
    let (ok, out) = net(&d, &["allow", "10.0.2.2/32"]);
    assert!(!ok, "reported success: {out}");
    assert!(out.contains("restart"), "{out}");
    let (_, why) = net(&d, &["why", "10.0.2.2"]);
    assert!(why.contains("denied by"), "{why}");
    let (ok, ..) = connect_port(&d, "10.0.2.2", port);
    assert!(!ok);
    d.down();
}

fn connect_port(d: &Domain, host: &str, port: u16) -> (bool, String) {
    let (code, out, err) = d.sh(&format!(
        "timeout 5 bash -c 'exec 3<>/dev/tcp/{host}/{port}' && echo OK"
    ));
    (code == 0 && out.contains("OK"), err)
}

/// An upstream DNS server on this machine's loopback, which the sidecar
/// reaches as 10.0.2.2:PORT (slirp4netns's alias of the host's loopback):
/// `ok.lazaret.test` has an address, `gone.lazaret.test` does not exist
/// (NXDOMAIN), `broken.lazaret.test` fails (SERVFAIL). Returns the port.
fn loopback_dns() -> u16 {
    use hickory_proto::op::ResponseCode;
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = udp.local_addr().unwrap().port();
    std::thread::spawn(move || {
        common::testnet::serve_udp(&udp, |name, qtype| match (name, qtype) {
            ("gone.lazaret.test.", _) => (ResponseCode::NXDomain, Vec::new()),
            ("broken.lazaret.test.", _) => (ResponseCode::ServFail, Vec::new()),
            ("ok.lazaret.test.", RecordType::A) => (
                ResponseCode::NoError,
                vec![Record::from_rdata(
                    Name::from_ascii(name).unwrap(),
                    TTL,
                    RData::A(A(WEB)),
                )],
            ),
            _ => (ResponseCode::NoError, Vec::new()),
        });
    });
    port
}

/// Issue 27 item 6 (a, b): `net show` lists the allowed names, each with
/// where it came from (the profile's file and line, or a live `net allow`),
/// and the lookups of allowed names that failed upstream, with the
/// upstream's answer (NXDOMAIN, SERVFAIL), a count and the last time;
/// `net why NAME` says it too. Names are answered by a test DNS server on
/// this machine's loopback, reached as 10.0.2.2.
#[test]
fn allowed_names_and_failed_lookups_are_shown() {
    let port = loopback_dns();
    let d = Domain::new("names27");
    let config = std::fs::read_to_string(d.s.path().join("config.toml")).unwrap();
    d.s.write(
        "config.toml",
        &config.replacen(
            "default_deny = []\n",
            &format!("default_deny = []\ndns_upstream = \"10.0.2.2:{port}\"\n"),
            1,
        ),
    );
    d.add_config(&format!(
        "[profiles.names27]\nimage = \"{}\"\n\
         allow_domains = [\"ok.lazaret.test\", \"gone.lazaret.test\", \"broken.lazaret.test\"]\n",
        common::sandbox::BASE_IMAGE
    ));
    d.up();
    let (ok, out) = net(&d, &["allow", "live.lazaret.test"]);
    assert!(ok, "{out}");

    // (a) Every allowed name, configured or live, with where it came from.
    let (ok, show) = net(&d, &["show"]);
    assert!(ok, "{show}");
    let config = d.s.path().join("config.toml");
    for name in [
        "ok.lazaret.test",
        "gone.lazaret.test",
        "broken.lazaret.test",
    ] {
        assert!(
            show.lines().any(|l| l.trim_start().starts_with("allow")
                && l.contains(name)
                && l.contains(&format!("profile: {}:", config.display()))),
            "{name} not listed with its file:\n{show}"
        );
    }
    assert!(
        show.lines().any(|l| l.contains("live.lazaret.test")
            && l.contains("live: lazaret net allow, until the domain stops")),
        "the live name not listed as live:\n{show}"
    );

    // (b) Lookups that fail upstream, as the agent sees them, then shown.
    assert_eq!(
        resolve(&d, "ahostsv4", "ok.lazaret.test"),
        vec![WEB.to_string()]
    );
    assert!(resolve(&d, "ahostsv4", "gone.lazaret.test").is_empty());
    assert!(resolve(&d, "ahostsv4", "broken.lazaret.test").is_empty());
    let (_, show) = net(&d, &["show"]);
    assert!(
        show.contains("failed lookups of allowed names (the upstream's answer, count, last):"),
        "{show}"
    );
    let failed = |name: &str, answer: &str| {
        show.lines()
            .any(|l| l.starts_with(&format!("  {name}  {answer}  ")) && l.contains(" x, last "))
    };
    assert!(failed("gone.lazaret.test", "NXDOMAIN"), "{show}");
    assert!(failed("broken.lazaret.test", "SERVFAIL"), "{show}");
    assert!(
        !show.lines().any(|l| l.starts_with("  ok.lazaret.test  ")),
        "a lookup that worked is listed as failed:\n{show}"
    );
    let (_, why) = net(&d, &["why", "gone.lazaret.test"]);
    assert!(
        why.contains("gone.lazaret.test: allowed, but its lookup failed")
            && why.contains(&format!("the upstream 10.0.2.2:{port} answered NXDOMAIN"))
            && why.contains("does not exist upstream"),
        "{why}"
    );
    // The JSON report carries them for scripts.
    let (_, json) = net(&d, &["show", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let answers: Vec<(&str, &str)> = report["failed"]
        .as_array()
        .unwrap_or_else(|| panic!("no failed lookups in the JSON: {json}"))
        .iter()
        .map(|f| (f["name"].as_str().unwrap(), f["answer"].as_str().unwrap()))
        .collect();
    assert!(
        answers.contains(&("gone.lazaret.test", "NXDOMAIN")),
        "{json}"
    );
    assert!(
        answers.contains(&("broken.lazaret.test", "SERVFAIL")),
        "{json}"
    );
    d.down();
    d.assert_gone();
}
