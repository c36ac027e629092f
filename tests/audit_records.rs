//! Issue 27 item 10: the audit log of a fresh domain holds what happened,
//! not the self-test's own probe of the Escalation Socket as a refusal (at
//! start or from `doctor --sandbox`);
//! an agent's handshake without a certificate is still a refusal; `lazaret
//! audit` shows people RFC 3339 times and `--json` keeps the stored seconds.

mod common;

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use common::sandbox::Domain;
use common::{STANDARD_PATH, text};
use lazaret_escalate::rustls;
use lazaret_escalate::rustls::pki_types::CertificateDer;
use lazaret_escalate::rustls::pki_types::pem::PemObject;
use lazaret_escalate::trust;

/// What an agent can do with the sandbox's CA alone: a TLS handshake with
/// no client certificate. True when the server refused it.
fn handshake_without_certificate(d: &Domain) -> bool {
    let ca = std::fs::read(d.certs_dir().join(trust::CA_CERT_FILE)).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(&ca).unwrap())
        .unwrap();
    let mut cfg = rustls::ClientConfig::builder_with_provider(trust::crypto_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![trust::ALPN.to_vec()];
    let socket =
        d.s.path()
            .join("sockets")
            .join(&d.hash)
            .join("escalate.sock");
    let stream = UnixStream::connect(&socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(cfg), trust::server_name()).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, stream);
    // TLS 1.3: the server judges the missing certificate after the
    // client's Finished, so the refusal arrives on the first read.
    let mut byte = [0u8; 1];
    matches!(tls.read(&mut byte), Ok(0) | Err(_))
}

fn kinds(records: &[serde_json::Value], kind: &str) -> usize {
    records.iter().filter(|r| r["kind"] == kind).count()
}

#[test]
fn the_selftests_probe_is_no_refusal_and_times_read_as_rfc3339() {
    let d = Domain::new("gv");
    let mut holder = d.hold_up();
    let records = d.audit_json();
    assert_eq!(
        kinds(&records, "escalation-refused"),
        0,
        "the self-test's probe was audited as a refusal: {records:#?}"
    );
    let up = records
        .iter()
        .find(|r| r["kind"] == "domain-up")
        .unwrap_or_else(|| panic!("no domain-up record: {records:#?}"));
    assert_eq!(
        up["data"]["escalation_probe"], "refused without a certificate, as the self-test expects",
        "{up:#}"
    );
    // --json keeps the stored value: seconds since the epoch.
    assert!(
        up["time"].as_u64().is_some_and(|t| t > 1_700_000_000),
        "{up:#}"
    );

    // `doctor --sandbox` runs the same self-test on demand: one
    // `self-test` record, its probe in it, no refusal.
    let out = d
        .cmd_raw(STANDARD_PATH, &["doctor", "--sandbox", d.profile])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let records = d.audit_json();
    assert_eq!(kinds(&records, "escalation-refused"), 0, "{records:#?}");
    let test = records
        .iter()
        .find(|r| r["kind"] == "self-test")
        .unwrap_or_else(|| panic!("no self-test record: {records:#?}"));
    assert_eq!(test["data"]["passed"], true, "{test:#}");
    assert_eq!(
        test["data"]["escalation_probe"], "refused without a certificate, as the self-test expects",
        "{test:#}"
    );
    assert!(
        test["data"]["by"]
            .as_str()
            .is_some_and(|by| by.contains("doctor --sandbox")),
        "{test:#}"
    );

    // The same handshake from anyone else is a refusal, audited.
    assert!(
        handshake_without_certificate(&d),
        "the handshake was not refused"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let records = loop {
        let records = d.audit_json();
        if kinds(&records, "escalation-refused") > 0 || std::time::Instant::now() > deadline {
            break records;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let refused: Vec<_> = records
        .iter()
        .filter(|r| r["kind"] == "escalation-refused")
        .collect();
    assert_eq!(refused.len(), 1, "{records:#?}");
    assert_eq!(refused[0]["data"]["stage"], "tls", "{:#}", refused[0]);

    // People read RFC 3339 times in UTC.
    let out = d
        .cmd_raw(STANDARD_PATH, &["audit", d.profile])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.lines().count() >= 3, "{stdout}");
    for line in stdout.lines() {
        let time = line.split_whitespace().nth(1).unwrap_or_default();
        let shape: String = time
            .chars()
            .map(|c| if c.is_ascii_digit() { '9' } else { c })
            .collect();
        assert_eq!(shape, "9999-99-99T99:99:99Z", "{line}\n{stdout}");
    }
    let _ = holder.kill();
    let _ = holder.wait();
}
