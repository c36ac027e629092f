//! Refusals cannot fill the state store (issue 26 item 5): a flood of
//! garbage frames (the agent's own bytes in the decoder's errors, a
//! megabyte each) and of connect-and-close handshakes against the real
//! Escalation Socket of a real domain. The audit log grows by a bounded
//! number of records and bytes, keeps at most a short visible excerpt of
//! the agent's bytes, counts the refusals it did not record one by one,
//! and still records a legitimate escalation, the session's end and the
//! domain's.
//!
//! The frames come through the raw protocol client with the sandbox's own
//! client material (what an agent holding it can send); the handshakes
//! come from inside the sandbox.

mod common;

use std::path::PathBuf;
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::sandbox::Domain;
use common::{ESCALATE as ESC, STANDARD_PATH, text};
use lazaret::coordinator::escalation::{REFUSAL_EXCERPT, REFUSAL_WINDOW, REFUSALS_AUDITED};
use lazaret_escalate::protocol;
use lazaret_escalate::trust;

/// Frames of each kind the flood sends: half a megabyte of hostile key
/// named twice (a frame just under the 1 MiB limit), 64 KB of hostile
/// unknown field, a header announcing 2 MiB.
const FRAMES_EACH: usize = 100;
/// Handshakes opened and closed (half of them after a few garbage bytes).
const HANDSHAKES: usize = 300;
/// Bytes a refusal record may hold: its excerpt, made visible (a hidden
/// character costs a few bytes to show), and the record's own fields.
const REFUSAL_RECORD_BYTES: usize = 8 * REFUSAL_EXCERPT + 600;

/// The agent's text: escape sequences (OSC 52 to set the clipboard, a
/// screen erase), a bell and a NUL around a long run.
fn hostile(len: usize) -> String {
    format!(
        "\u{1b}]52;c;bHMgLWxh\u{7}\u{1b}[2J\u{0}{}\u{1b}[31m",
        "A".repeat(len)
    )
}

/// Sends `body` behind a header announcing `declared` bytes (or its own
/// length) over mTLS with the sandbox's certificate; true when the
/// coordinator answered.
fn send_frame(
    rt: &tokio::runtime::Runtime,
    socket: &PathBuf,
    config: Arc<lazaret_escalate::rustls::ClientConfig>,
    body: &[u8],
    declared: Option<u32>,
) -> bool {
    rt.block_on(async {
        use tokio::io::AsyncWriteExt;
        let stream = tokio::net::UnixStream::connect(socket).await.ok()?;
        let connector = lazaret_escalate::tokio_rustls::TlsConnector::from(config);
        let mut tls = connector.connect(trust::server_name(), stream).await.ok()?;
        let len = declared.unwrap_or(body.len() as u32);
        tls.write_all(&len.to_be_bytes()).await.ok()?;
        tls.write_all(body).await.ok()?;
        tls.flush().await.ok()?;
        tokio::time::timeout(
            Duration::from_secs(15),
            protocol::read_response_async(&mut tls),
        )
        .await
        .ok()?
        .ok()
    })
    .is_some()
}

/// Every string in `v`, keys included.
fn strings<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a str>) {
    match v {
        serde_json::Value::String(s) => out.push(s),
        serde_json::Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
        serde_json::Value::Object(m) => m.iter().for_each(|(k, v)| {
            out.push(k);
            strings(v, out);
        }),
        _ => {}
    }
}

fn bytes_of(records: &[serde_json::Value]) -> usize {
    records
        .iter()
        .map(|r| serde_json::to_vec(r).unwrap().len())
        .sum()
}

fn refusals_flood(profile: &'static str) {
    let started = Instant::now();
    let d = Domain::new(profile);
    let holder = d.hold_up();
    let store = d.domain_root().join("state.redb");
    let before = d.audit_json();
    let store_before = std::fs::metadata(&store).unwrap().len();

    // The flood: garbage frames through the raw client...
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let socket =
        d.s.path()
            .join("sockets")
            .join(&d.hash)
            .join("escalate.sock");
    let config = trust::load_client_config(&d.certs_dir()).unwrap();
    let key = serde_json::to_string(&hostile(500 << 10)).unwrap();
    let duplicate = format!(r#"{{"version":1,{key}:1,{key}:2}}"#);
    let field = serde_json::to_string(&hostile(64 << 10)).unwrap();
    let unknown = format!(r#"{{"version":1,{field}:1}}"#);
    let mut answered = 0;
    for _ in 0..FRAMES_EACH {
        for (body, declared) in [
            (duplicate.as_bytes(), None),
            (unknown.as_bytes(), None),
            (&b""[..], Some(2 << 20)),
        ] {
            answered += usize::from(send_frame(&rt, &socket, config.clone(), body, declared));
        }
    }
    let frames = 3 * FRAMES_EACH;
    eprintln!(
        "{profile}: {frames} garbage frames sent ({answered} answered) at {:?}",
        started.elapsed()
    );
    assert!(answered >= 2 * FRAMES_EACH, "the attack itself failed");
    // ...and handshakes opened and closed from inside the sandbox (a
    // write to a connection the coordinator has closed already is no
    // failure of the attack: SIGPIPE ignored).
    let script = format!(
        "perl -e 'use IO::Socket::UNIX; use Socket; $SIG{{PIPE}} = \"IGNORE\"; my $ok = 0; \
         for my $i (1..{HANDSHAKES}) {{ \
           my $c = IO::Socket::UNIX->new(Type => SOCK_STREAM, Peer => \"/run/lazaret/escalate.sock\") or next; \
           print $c \"\\x16\\x03\\x01\\x00\\x05\\x1b]52;c;AAAA\\x07\" if $i % 2; close $c; $ok++; \
         }} print \"CLOSED $ok\\n\";'"
    );
    let (code, out, err) = d.sh(&script);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.trim(), format!("CLOSED {HANDSHAKES}"), "{err}");
    let flood_secs = started.elapsed().as_secs();
    eprintln!("{profile}: {HANDSHAKES} handshakes closed at {flood_secs} s");

    // What the user does next: a legitimate escalation works.
    let (code, out, err) = d.exec_sh(&format!("{ESC} -- echo escalated-after-the-flood"));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("escalated-after-the-flood"), "{out}{err}");
    let _ = holder_end(holder);
    d.down();

    // The audit log grew by a bounded number of records and bytes.
    let after = d.audit_json();
    let store_after = std::fs::metadata(&store).unwrap().len();
    let added = &after[before.len()..];
    let windows = (started.elapsed().as_secs() / REFUSAL_WINDOW.as_secs() + 1) as usize;
    let refusals: Vec<&serde_json::Value> = added
        .iter()
        .filter(|r| r["kind"] == "escalation-refused")
        .collect();
    let aggregates: Vec<&serde_json::Value> = added
        .iter()
        .filter(|r| r["kind"] == "escalation-refused-aggregate")
        .collect();
    eprintln!(
        "{profile}: the flood of {} refusals added {} records ({} one by one, {} aggregated), {} bytes of records; the store file {store_before} -> {store_after} bytes",
        frames + HANDSHAKES,
        added.len(),
        refusals.len(),
        aggregates.len(),
        bytes_of(added)
    );
    for a in &aggregates {
        eprintln!("{profile}: {}", a["data"]["message"]);
    }
    assert!(
        refusals.len() <= windows * REFUSALS_AUDITED as usize,
        "{} refusals recorded one by one in {windows} window(s)",
        refusals.len()
    );
    // The refusals, their aggregates, the sessions (the holder, the
    // escalation's), the escalation's records, connections-refused
    // reports, domain-down.
    assert!(
        added.len() <= refusals.len() + 2 * windows + 20,
        "{} records added",
        added.len()
    );
    assert!(
        bytes_of(added) <= refusals.len() * REFUSAL_RECORD_BYTES + 64 * 1024,
        "{} bytes of records added",
        bytes_of(added)
    );
    // No record holds more than the excerpt of the agent's bytes, and
    // none a raw control character.
    for r in &refusals {
        let error = r["data"]["error"].as_str().unwrap();
        assert!(error.len() <= 8 * REFUSAL_EXCERPT, "{r}");
        assert!(r["data"]["error_bytes"].as_u64().is_some(), "{r}");
        assert!(
            serde_json::to_vec(r).unwrap().len() <= REFUSAL_RECORD_BYTES,
            "{r}"
        );
    }
    assert!(
        refusals
            .iter()
            .any(|r| r["data"]["error_bytes"].as_u64() > Some(500 << 10)),
        "the half megabyte's refusal says its size"
    );
    for r in added {
        let mut all = Vec::new();
        strings(r, &mut all);
        for s in all {
            assert!(s.len() <= 8 * REFUSAL_EXCERPT, "{r}");
            assert!(
                !s.chars().any(char::is_control),
                "a raw control character: {r}"
            );
        }
    }
    // An aggregated record counts the rest: every refusal is accounted for.
    assert!(!aggregates.is_empty(), "no aggregated refusal record");
    let counted: u64 = aggregates
        .iter()
        .map(|a| a["data"]["refused"].as_u64().unwrap())
        .sum();
    // Connections over the socket's bound are closed before their
    // handshake, and counted by their own report.
    let over_bound: u64 = added
        .iter()
        .filter(|r| r["kind"] == "connections-refused")
        .map(|r| r["data"]["refused"].as_u64().unwrap())
        .sum();
    eprintln!("{profile}: {over_bound} connections over the socket's bound");
    assert_eq!(
        refusals.len() as u64 + counted + over_bound,
        (frames + HANDSHAKES) as u64,
        "refusals recorded one by one and counted"
    );
    let stages = aggregates.last().unwrap()["data"]["by_stage"].clone();
    assert!(
        stages.get("tls").is_some() || stages.get("decode").is_some(),
        "{stages}"
    );

    // The legitimate escalation is audited, and so are the session's end
    // and the domain's.
    let ran = added.iter().any(|r| {
        r["kind"] == "escalation-request"
            && r["data"]["command"]
                .as_str()
                .is_some_and(|c| c.contains("escalated-after-the-flood"))
    });
    assert!(
        ran,
        "the escalation after the flood is not in the audit log"
    );
    let kinds: Vec<&str> = added.iter().filter_map(|r| r["kind"].as_str()).collect();
    assert!(kinds.contains(&"session-end"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"domain-down"), "{kinds:?}");
    // The chain holds.
    let out = d
        .cmd_raw(STANDARD_PATH, &["audit", profile, "--verify"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    eprintln!("{profile}: done at {:?}", started.elapsed());
}

fn holder_end(mut c: Child) -> std::io::Result<std::process::ExitStatus> {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    c.wait()
}

#[test]
fn refusals_cannot_fill_the_store_under_runsc() {
    refusals_flood("gv");
}

#[test]
fn refusals_cannot_fill_the_store_under_runc() {
    refusals_flood("rc");
}
