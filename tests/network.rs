//! The Network Sidecar's policy, enforced on a real agent under runsc
//! (its own network stack) and runc. Targets are only this machine: a listener on
//! the host's loopback reached through slirp4netns's alias 10.0.2.2, the
//! slirp4netns DNS address 10.0.2.3, and its IPv6 addresses; a failing
//! policy sends nothing off the machine.

mod common;

use std::net::TcpListener;

use common::sandbox::Domain;
use common::{STANDARD_PATH, text};

/// Connects from inside; `(ok, millis, error text)`.
fn connect(d: &Domain, host: &str, port: u16) -> (bool, u64, String) {
    // bash: /dev/tcp is bash's own. The clock is bash's too ($EPOCHREALTIME,
    // no fork), so the figure is the connect, not process start-up.
    let script = format!(
        "s=${{EPOCHREALTIME/./}}; if exec 3<>/dev/tcp/{host}/{port}; then r=OK; else r=FAIL; fi 2>/tmp/err; \
         e=${{EPOCHREALTIME/./}}; echo \"$r $(( (e - s) / 1000 )) $(cat /tmp/err)\""
    );
    let (_, out, _) = d.sh(&format!("bash -c {}", common::shell_quote(&script)));
    let mut parts = out.trim().splitn(3, ' ');
    let ok = parts.next() == Some("OK");
    let ms = parts
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(u64::MAX);
    (ok, ms, parts.next().unwrap_or_default().to_string())
}

fn net(d: &Domain, args: &[&str]) -> String {
    let mut all = vec!["net"];
    all.extend_from_slice(args);
    let out = d.cmd(STANDARD_PATH, &all).output().unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "lazaret net {args:?}: {o}{e}");
    o
}

fn assert_denied_at_once(d: &Domain, host: &str, port: u16) {
    let (ok, ms, err) = connect(d, host, port);
    assert!(!ok, "{host}:{port} was reached");
    assert!(
        // The Network Sidecar answers a denied connect with a reset.
        err.contains("Connection refused"),
        "ECONNREFUSED expected for {host}: {err}"
    );
    assert!(ms < 100, "refusing {host} took {ms} ms");
    eprintln!("{}: {host} refused in {ms} ms", d.profile);
}

fn live_policy(profile: &'static str) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let listener6 = TcpListener::bind("[::1]:0").ok();
    let d = Domain::new(profile);
    // A session holds it up: its coordinator reports the refusals.
    let mut holder = d.hold_up();
    // The refusals `status` (and the sessions panel) counts are the
    // agent's: the self-test's own probes (five here) are left out.
    assert_denied_at_once(&d, "10.0.2.3", 53);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let refused = loop {
        let n = d.status().and_then(|s| s["egress_refused"].as_u64());
        if n.is_some_and(|n| n >= 1) || std::time::Instant::now() > deadline {
            break n;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(refused, Some(1), "the agent made one refusal");
    // Allowed by the profile: connects.
    let (ok, _, err) = connect(&d, "10.0.2.2", port);
    assert!(ok, "10.0.2.2 allowed but not reached: {err}");
    // The same host over IPv6 stays denied (built-in fc00::/7).
    if let Some(l6) = &listener6 {
        let port6 = l6.local_addr().unwrap().port();
        assert_denied_at_once(&d, "fd00::2", port6);
    }
    // slirp4netns's DNS address: no rule allows it.
    assert_denied_at_once(&d, "10.0.2.3", 53);
    // Changed while the agent runs: the next connect follows.
    let out = net(&d, &["deny", "10.0.2.2/32"]);
    assert!(out.contains("10.0.2.2/32"), "{out}");
    assert_denied_at_once(&d, "10.0.2.2", port);
    let why = net(&d, &["why", "10.0.2.2"]);
    assert!(why.contains("denied by"), "{why}");
    net(&d, &["allow", "10.0.2.2/32"]);
    let (ok, _, err) = connect(&d, "10.0.2.2", port);
    assert!(ok, "allowed again but not reached: {err}");
    // The live table names the rule behind each entry.
    let show = net(&d, &["show"]);
    assert!(show.contains("10.0.2.2/32"), "{show}");
    // --save keeps it in ./lazaret.toml, without dropping the others.
    net(&d, &["allow", "192.0.2.0/24", "--save"]);
    let saved = std::fs::read_to_string(d.ws().join("lazaret.toml")).unwrap();
    let parsed: toml::Table = saved.parse().unwrap();
    let list = parsed["profiles"][profile]["allow_egress"]
        .as_array()
        .unwrap();
    let list: Vec<&str> = list.iter().filter_map(|v| v.as_str()).collect();
    assert_eq!(list, vec!["10.0.2.2/32", "192.0.2.0/24"], "{saved}");

    // The agent cannot change routing, has no raw sockets, and cannot see
    // the sidecar or its channel.
    let (code, _, err) = d.sh("ip route add 192.0.2.0/24 dev lo");
    assert_ne!(code, 0);
    assert!(
        err.contains("Operation not permitted") || err.contains("Permission denied"),
        "{err}"
    );
    let (code, _, err) = d.sh("ip rule add to 10.0.2.3 lookup main priority 1");
    assert_ne!(code, 0, "the agent added a rule");
    assert!(
        err.contains("Operation not permitted") || err.contains("Permission denied"),
        "{err}"
    );
    let (code, _, err) = d.sh("perl -e 'socket(S, 2, 3, 1) or die \"raw: $!\\n\"'");
    assert_ne!(code, 0, "a raw socket was opened");
    assert!(
        err.contains("raw: Operation not permitted") || err.contains("raw: Permission denied"),
        "{err}"
    );
    let (_, ps, _) = d.sh("ps -eo comm");
    assert!(!ps.contains("lazaret-sidecar"), "{ps}");
    let (_, sockets, _) = d.sh("ls /run/lazaret");
    assert!(!sockets.contains("sidecar"), "{sockets}");
    let _ = holder.kill();
    let _ = holder.wait();
    d.down();
    d.assert_gone();
    drop(listener);
}

/// One change at a time (decisions.md D14): eight `net allow`s from eight
/// terminals at once each land, and the table read meanwhile is never
/// taken for one that differs from the policy.
#[test]
fn changes_at_once_are_all_kept() {
    let d = Domain::new("netrc");
    d.up();
    std::thread::scope(|scope| {
        for i in 1..=8 {
            let d = &d;
            scope.spawn(move || net(d, &["allow", &format!("192.0.2.{i}/32")]));
        }
        scope.spawn(|| {
            for _ in 0..4 {
                let out = d.cmd(STANDARD_PATH, &["net", "show"]).output().unwrap();
                let (_, err) = text(&out);
                assert!(!err.contains("differs"), "{err}");
            }
        });
    });
    let show = net(&d, &["show"]);
    for i in 1..=8 {
        assert!(
            show.contains(&format!("192.0.2.{i}/32")),
            "lost 192.0.2.{i}:\n{show}"
        );
    }
    d.down();
    d.assert_gone();
}

/// One door for every change (issue 28): two `net allow`s for two
/// destinations, started at the same instant from two processes, go
/// through the domain's Session Coordinator: both are in force afterwards,
/// and each has its `policy-change` audit record naming the client that
/// asked (its command line and user, from the socket's peer credentials).
#[test]
fn two_clients_at_once_are_both_in_force_and_audited() {
    let d = Domain::new("netrc");
    // A session holds the domain up: its coordinator is the one door.
    let mut holder = d.hold_up();
    let targets = ["192.0.2.21/32", "198.51.100.0/24"];
    let start = std::sync::Barrier::new(targets.len());
    std::thread::scope(|scope| {
        for target in targets {
            let (d, start) = (&d, &start);
            scope.spawn(move || {
                let mut cmd = d.cmd(STANDARD_PATH, &["net", "allow", target]);
                start.wait();
                let out = cmd.output().unwrap();
                let (o, e) = text(&out);
                assert!(out.status.success(), "net allow {target}: {o}{e}");
                assert!(o.contains(target), "the answer lacks {target}: {o}");
                // One line says what changed (issue 43); the table is --verbose's.
                assert!(
                    o.lines().count() == 1
                        && o.starts_with(&format!("allowed {target} in domain ")),
                    "{o}"
                );
            });
        }
    });
    let show: serde_json::Value = serde_json::from_str(&net(&d, &["show", "--json"])).unwrap();
    for target in targets {
        assert!(
            show["entries"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["dst"] == target
                    && e["verdict"].as_str().map(str::to_lowercase).as_deref() == Some("allow")),
            "{target} is not allowed in the live table: {show:#}"
        );
    }
    // Lazaret runs as the test user (as us when the suite is unprivileged).
    let user = common::test_user().map_or_else(
        || std::env::var("USER").unwrap_or_default(),
        |u| u.name.clone(),
    );
    let records = d.audit_json();
    for target in targets {
        let record = records
            .iter()
            .find(|r| r["kind"] == "policy-change" && r["data"]["target"] == target)
            .unwrap_or_else(|| panic!("no policy-change record for {target}: {records:#?}"));
        let data = &record["data"];
        assert_eq!(data["action"], "allow", "{record}");
        assert_eq!(data["applied"], true, "{record}");
        assert_eq!(data["user"], user.as_str(), "{record}");
        assert!(data["pid"].as_u64().unwrap_or(0) > 0, "{record}");
        let by = data["by"].as_str().unwrap_or_default();
        assert!(
            by.contains("lazaret") && by.contains(&format!("net allow {target}")),
            "the record does not name the client: {record}"
        );
    }
    let out = d
        .cmd_raw(STANDARD_PATH, &["down", d.profile])
        .output()
        .unwrap();
    assert!(out.status.success(), "down: {}", text(&out).1);
    let _ = holder.wait();
    d.wait_until_gone();
}

#[test]
fn live_policy_under_runsc() {
    live_policy("net");
}

#[test]
fn live_policy_under_runc() {
    live_policy("netrc");
}

/// With nothing allowed, nothing leaves: no default route is consulted and
/// even the host-loopback alias is not offered by slirp4netns.
#[test]
fn everything_is_denied_by_default() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let d = Domain::new("gv");
    d.up();
    assert_denied_at_once(&d, "10.0.2.2", port);
    assert_denied_at_once(&d, "10.0.2.3", 53);
    let show = net(&d, &["show"]);
    let allowed: Vec<&str> = show
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some("allow"))
        .collect();
    assert!(allowed.is_empty(), "something is allowed:\n{show}");
    assert!(show.contains("floor: nothing falls through"), "{show}");
    let why = net(&d, &["why", "10.0.2.3"]);
    assert!(why.contains("denied by"), "{why}");
    d.down();
    d.assert_gone();
}

/// `lazaret net ARGS` for `d`'s profile, with `path_var`: (exit code,
/// stdout, stderr).
fn net_run(d: &Domain, path_var: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let mut all = vec!["net"];
    all.extend_from_slice(args);
    let out = d.cmd(path_var, &all).output().unwrap();
    let (o, e) = text(&out);
    (out.status.code(), o, e)
}

/// What a person reads: no run of spaces inside a sentence (a lost `\` at
/// the end of a string's line puts the next line's indentation in it).
fn assert_no_space_runs(said: &str) {
    for line in said.lines() {
        assert!(
            !line.trim().contains("   "),
            "a run of spaces inside: {line:?}"
        );
    }
}

/// The profile's saved `allow_egress` in the workspace's lazaret.toml.
fn saved_allow_egress(d: &Domain) -> Vec<String> {
    let saved = std::fs::read_to_string(d.ws().join("lazaret.toml")).unwrap_or_default();
    let parsed: toml::Table = saved.parse().unwrap();
    parsed
        .get("profiles")
        .and_then(|p| p.get(d.profile))
        .and_then(|p| p.get("allow_egress"))
        .and_then(|a| a.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Issue 27 item 6 (c): opening the host's loopback in a domain whose
/// network started without it. With `--save` the rule is saved, and the
/// message says so and when it takes effect (the next start), exit 0;
/// without, it is refused once with "Nothing was changed", exit 1. No run
/// of spaces in either. After a restart the saved rule is in force.
#[test]
fn saving_what_needs_a_restart_says_when_it_takes_effect() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let d = Domain::new("gv");
    d.up();
    let (code, o, e) = net_run(&d, STANDARD_PATH, &["allow", "10.0.2.2"]);
    let said = format!("{o}{e}");
    assert_eq!(code, Some(1), "{said}");
    assert_eq!(said.matches("Nothing was changed").count(), 1, "{said}");
    assert!(
        said.contains("--save") && said.contains("lazaret down"),
        "{said}"
    );
    assert_no_space_runs(&said);
    assert!(saved_allow_egress(&d).is_empty());

    let (code, o, e) = net_run(&d, STANDARD_PATH, &["allow", "10.0.2.2", "--save"]);
    let said = format!("{o}{e}");
    assert_eq!(code, Some(0), "{said}");
    let file = d.ws().join("lazaret.toml");
    assert!(
        o.contains(&format!(
            "saved 10.0.2.2/32 to {} (profiles.gv.allow_egress); it takes effect at the next start, not now",
            file.display()
        )),
        "{said}"
    );
    assert!(!said.contains("Nothing was changed"), "{said}");
    assert!(!said.contains("lazaret: "), "no error after saving: {said}");
    assert_no_space_runs(&said);
    assert_eq!(saved_allow_egress(&d), vec!["10.0.2.2/32"]);
    // Not live: the running domain still denies it.
    assert_denied_at_once(&d, "10.0.2.2", port);

    // The next start takes it.
    d.down();
    d.up();
    let why = net(&d, &["why", "10.0.2.2"]);
    assert!(why.contains("allowed by"), "{why}");
    let (ok, _, err) = connect(&d, "10.0.2.2", port);
    assert!(ok, "saved, restarted, but not reached: {err}");
    d.down();
    d.assert_gone();
}

/// Issue 27 item 6 (d): with the domain down, `--save` is a file edit that
/// works and says when it takes effect; without `--save`, and for `net
/// show`, the refusal says the domain is not running and what to do, in a
/// sentence of Lazaret's (no podman error); nothing of the domain is made.
/// A podman that fails is reported as what failed and what to do.
#[test]
fn saving_works_while_the_domain_is_down() {
    let d = Domain::new("gv");
    let ws = d.ws();
    let down = format!(
        "the domain of profile gv for {} is not running",
        ws.display()
    );
    let (code, o, e) = net_run(&d, STANDARD_PATH, &["allow", "192.0.2.0/24", "--save"]);
    let said = format!("{o}{e}");
    assert_eq!(code, Some(0), "{said}");
    assert!(
        o.contains(&format!(
            "saved 192.0.2.0/24 to {} (profiles.gv.allow_egress); {down}: it takes effect at the next start",
            ws.join("lazaret.toml").display()
        )),
        "{said}"
    );
    assert!(!said.to_lowercase().contains("podman"), "{said}");
    assert_eq!(saved_allow_egress(&d), vec!["192.0.2.0/24"]);

    for args in [&["allow", "192.0.2.7"][..], &["show"][..]] {
        let (code, o, e) = net_run(&d, STANDARD_PATH, args);
        let said = format!("{o}{e}");
        assert_eq!(code, Some(1), "{args:?}: {said}");
        assert!(e.contains(&down), "{args:?}: {said}");
        assert!(!said.to_lowercase().contains("podman"), "{args:?}: {said}");
        assert_no_space_runs(&said);
    }
    let (_, _, e) = net_run(&d, STANDARD_PATH, &["allow", "192.0.2.7"]);
    assert!(e.contains("`--save`"), "{e}");
    assert_eq!(saved_allow_egress(&d), vec!["192.0.2.0/24"]);
    assert!(
        !d.domain_root().exists(),
        "a domain folder was made for a domain that is down"
    );

    // A podman that fails: what failed and what to do, nothing saved.
    let bin = d.s.mkdir("fakebin");
    let podman = d.s.write(
        "fakebin/podman",
        "#!/bin/sh\necho 'Error: the test podman fails' >&2\nexit 125\n",
    );
    std::fs::set_permissions(&podman, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{STANDARD_PATH}", bin.display());
    let (code, o, e) = net_run(&d, &path, &["allow", "192.0.2.8", "--save"]);
    let said = format!("{o}{e}");
    assert_eq!(code, Some(1), "{said}");
    assert!(
        e.contains(&format!(
            "podman could not reach the Network Sidecar {} (Error: the test podman fails); check the domain with `lazaret status` and podman with `lazaret doctor`. Nothing was changed or saved",
            d.sidecar()
        )),
        "{said}"
    );
    assert!(
        !e.contains("failed (exit status"),
        "podman's raw error: {said}"
    );
    assert_eq!(saved_allow_egress(&d), vec!["192.0.2.0/24"]);
}
