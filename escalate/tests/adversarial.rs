//! The adversarial corpus: each case is sent to a real mTLS server on a
//! real UNIX socket, by the real client binary where it can express the
//! attack and by a raw rustls client where it cannot. Every case asserts
//! the specific rejection and that nothing ran: the workspace, which only
//! an executed command writes, stays empty. The server whitelists `touch`,
//! and its human approves everything unless a test says otherwise, so a
//! check that failed open would run the canary command.

mod common;

use std::io::{Read, Write};
use std::sync::Arc;

use common::{FrameKind, HOUR, Harness, Options, Outcome, corpus, frame, run, text};
use lazaret_escalate::classify::{self, Decision, HumanReason};
use lazaret_escalate::protocol::{self, MAX_REQUEST_FRAME, Request, Status};
use lazaret_escalate::signing::{self, SessionKey, VerifyError};
use lazaret_escalate::trust::{self, ALPN, IdentityError, SandboxIdentity, TrustAnchor};
use lazaret_escalate::{exit, trust::ClientMaterial};
use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, KeyUsagePurpose, SanType};

const CANARY: &str = "touch canary";

fn now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

fn params(sans: Vec<SanType>, eku: ExtendedKeyUsagePurpose) -> CertificateParams {
    let mut p = CertificateParams::default();
    p.subject_alt_names = sans;
    p.extended_key_usages = vec![eku];
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.not_before = now() - time::Duration::minutes(5);
    p.not_after = now() + time::Duration::hours(1);
    p
}

fn uri(s: &str) -> SanType {
    SanType::URI(s.try_into().unwrap())
}

/// Runs the real client with `material` as its certificates.
fn client_with_certs(h: &Harness, name: &str, material: &ClientMaterial) -> std::process::Output {
    let dir = common::new_dir(h.dir.path(), name);
    material.write_to(&dir).unwrap();
    let mut c = h.client();
    c.env(lazaret_escalate::env::CERTS_DIR, &dir).arg(CANARY);
    run(c)
}

#[test]
fn certificate_attacks_are_dropped_after_the_handshake_at_the_latest() {
    let h = Harness::start();
    let good = h.identity.uri();
    let other_ca = TrustAnchor::generate(HOUR).unwrap();

    let mut expired = params(vec![uri(&good)], ExtendedKeyUsagePurpose::ClientAuth);
    expired.not_before = now() - time::Duration::hours(2);
    expired.not_after = now() - time::Duration::hours(1);
    let mut not_yet = params(vec![uri(&good)], ExtendedKeyUsagePurpose::ClientAuth);
    not_yet.not_before = now() + time::Duration::hours(1);
    not_yet.not_after = now() + time::Duration::hours(2);
    let dns = || SanType::DnsName("lazaret-host.invalid".try_into().unwrap());

    type Check = fn(&Outcome) -> bool;
    let handshake: Check = |o| matches!(o, Outcome::Handshake(_));
    let cases: Vec<(&str, ClientMaterial, Check)> = vec![
        (
            "cert from another CA",
            other_ca.issue_client(&h.identity, HOUR).unwrap(),
            handshake,
        ),
        (
            "expired cert",
            h.anchor.issue_custom(expired).unwrap(),
            handshake,
        ),
        (
            "not yet valid cert",
            h.anchor.issue_custom(not_yet).unwrap(),
            handshake,
        ),
        (
            "server cert presented as client cert",
            h.anchor
                .issue_custom(params(vec![dns()], ExtendedKeyUsagePurpose::ServerAuth))
                .unwrap(),
            handshake,
        ),
        (
            "right SAN but serverAuth only",
            h.anchor
                .issue_custom(params(
                    vec![uri(&good)],
                    ExtendedKeyUsagePurpose::ServerAuth,
                ))
                .unwrap(),
            handshake,
        ),
        (
            "another sandbox's SAN",
            h.anchor
                .issue_client(&SandboxIdentity::new("dev", "ba9876543210").unwrap(), HOUR)
                .unwrap(),
            |o| matches!(o, Outcome::Identity(IdentityError::WrongIdentity { .. })),
        ),
        (
            "another profile's SAN",
            h.anchor
                .issue_client(&SandboxIdentity::new("ops", "0123456789ab").unwrap(), HOUR)
                .unwrap(),
            |o| matches!(o, Outcome::Identity(IdentityError::WrongIdentity { .. })),
        ),
        (
            "SAN with a suffix",
            h.anchor
                .issue_custom(params(
                    vec![uri(&format!("{good}/x"))],
                    ExtendedKeyUsagePurpose::ClientAuth,
                ))
                .unwrap(),
            |o| matches!(o, Outcome::Identity(IdentityError::WrongIdentity { .. })),
        ),
        (
            "two URI SANs, the right one first",
            h.anchor
                .issue_custom(params(
                    vec![uri(&good), uri("lazaret://profile/dev/sandbox/other")],
                    ExtendedKeyUsagePurpose::ClientAuth,
                ))
                .unwrap(),
            |o| matches!(o, Outcome::Identity(IdentityError::NotExactlyOne(2))),
        ),
        (
            "the right URI SAN plus a DNS SAN",
            h.anchor
                .issue_custom(params(
                    vec![uri(&good), dns()],
                    ExtendedKeyUsagePurpose::ClientAuth,
                ))
                .unwrap(),
            |o| matches!(o, Outcome::Identity(IdentityError::NotExactlyOne(2))),
        ),
        (
            "no SAN at all",
            h.anchor
                .issue_custom(params(vec![], ExtendedKeyUsagePurpose::ClientAuth))
                .unwrap(),
            |o| matches!(o, Outcome::Identity(IdentityError::NoSan)),
        ),
    ];
    for (i, (name, material, check)) in cases.iter().enumerate() {
        let out = client_with_certs(&h, &format!("certs{i}"), material);
        assert_eq!(
            out.status.code(),
            Some(i32::from(exit::UNAVAILABLE)),
            "{name}: {}",
            text(&out.stderr)
        );
        let o = h.outcome();
        assert!(check(&o), "{name}: {o:?}");
        if matches!(o, Outcome::Identity(_)) {
            // The handshake succeeded and the host hung up without a word.
            assert!(
                text(&out.stderr).contains("closed the connection without answering"),
                "{name}: {}",
                text(&out.stderr)
            );
        }
        assert!(h.workspace_entries().is_empty(), "{name} ran something");
    }
    h.no_more_outcomes();
}

#[test]
fn transport_attacks_without_a_proper_client_are_dropped() {
    let h = Harness::start();
    let request = protocol::encode(&h.signed(CANARY)).unwrap();

    // No client certificate at all.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(h.anchor.ca_cert_der().clone()).unwrap();
    let mut anon = rustls::ClientConfig::builder_with_provider(trust::crypto_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    anon.alpn_protocols = vec![ALPN.to_vec()];
    assert!(h.raw(Arc::new(anon), &frame(&request), true).is_err());
    assert!(matches!(h.outcome(), Outcome::Handshake(_)));

    // Plain text on the socket, no TLS.
    let mut plain = std::os::unix::net::UnixStream::connect(&h.socket).unwrap();
    plain.write_all(&frame(&request)).unwrap();
    plain.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(!String::from_utf8_lossy(&answer).contains("approved"));
    assert!(matches!(h.outcome(), Outcome::Handshake(_)));

    // A valid certificate, but no ALPN, then a foreign ALPN.
    let mut no_alpn = (*h.material().client_config().unwrap()).clone();
    no_alpn.alpn_protocols.clear();
    assert!(h.raw(Arc::new(no_alpn), &frame(&request), true).is_err());
    assert_eq!(h.outcome(), Outcome::Alpn);
    let mut h2 = (*h.material().client_config().unwrap()).clone();
    h2.alpn_protocols = vec![b"h2".to_vec()];
    assert!(h.raw(Arc::new(h2), &frame(&request), true).is_err());
    assert!(matches!(h.outcome(), Outcome::Handshake(_)));

    assert!(h.workspace_entries().is_empty());
    h.no_more_outcomes();
}

/// Raw bodies and frames over a valid mTLS connection.
#[test]
fn malformed_frames_and_bodies_are_refused_before_verification() {
    let h = Harness::start();
    let good = h.signed(CANARY);
    let json = String::from_utf8(protocol::encode(&good).unwrap()).unwrap();
    let with = |from: &str, to: &str| {
        assert!(json.contains(from), "{from}");
        json.replacen(from, to, 1).into_bytes()
    };
    let cmd_field = format!("\"command\":\"{CANARY}\"");

    let mut invalid_utf8 = json.clone().into_bytes();
    let at = json.find("canary").unwrap();
    invalid_utf8[at] = 0xff;
    let mut surrogate_bytes = json.clone().into_bytes();
    surrogate_bytes.splice(at..at + 3, [0xed, 0xa0, 0x80]);
    let mut overlong = json.clone().into_bytes();
    overlong.splice(at..at + 2, [0xc1, 0xa1]);
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes();

    let cases: Vec<(&str, Vec<u8>, FrameKind)> = vec![
        ("invalid UTF-8", invalid_utf8, FrameKind::InvalidUtf8),
        (
            "UTF-8 encoded surrogate",
            surrogate_bytes,
            FrameKind::InvalidUtf8,
        ),
        ("overlong UTF-8", overlong, FrameKind::InvalidUtf8),
        (
            "lone surrogate escape",
            with("canary", "canary\\ud800"),
            FrameKind::Json,
        ),
        (
            "duplicate command key, harmless first",
            with(&cmd_field, &format!("\"command\":\"true\",{cmd_field}")),
            FrameKind::DuplicateKey("command".into()),
        ),
        (
            "duplicate key spelled with an escape",
            with(
                &cmd_field,
                &format!("{cmd_field},\"comm\\u0061nd\":\"true\""),
            ),
            FrameKind::DuplicateKey("command".into()),
        ),
        (
            "duplicate signature key",
            with("\"signature\":", "\"signature\":\"00\",\"signature\":"),
            FrameKind::DuplicateKey("signature".into()),
        ),
        (
            "unknown field",
            with("{", "{\"admin\":true,"),
            FrameKind::Schema,
        ),
        (
            "unknown nested object",
            with("{", "{\"extra\":{\"a\":1},"),
            FrameKind::Schema,
        ),
        (
            "missing signature field",
            json.replace(&format!(",\"signature\":\"{}\"", good.signature), "")
                .into_bytes(),
            FrameKind::Schema,
        ),
        (
            "command is a number",
            with(&cmd_field, "\"command\":7"),
            FrameKind::Schema,
        ),
        (
            "negative timestamp",
            with(
                &format!("\"timestamp\":{}", good.timestamp),
                "\"timestamp\":-1",
            ),
            FrameKind::Schema,
        ),
        (
            "fractional timestamp",
            with(
                &format!("\"timestamp\":{}", good.timestamp),
                &format!("\"timestamp\":{}.5", good.timestamp),
            ),
            FrameKind::Schema,
        ),
        (
            "version 2",
            with("\"version\":1", "\"version\":2"),
            FrameKind::UnsupportedVersion,
        ),
        (
            "version as a string",
            with("\"version\":1", "\"version\":\"1\""),
            FrameKind::UnsupportedVersion,
        ),
        (
            "no version",
            with("\"version\":1,", ""),
            FrameKind::MissingVersion,
        ),
        (
            "trailing garbage",
            format!("{json}x").into_bytes(),
            FrameKind::Json,
        ),
        (
            "two objects",
            format!("{json}{json}").into_bytes(),
            FrameKind::Json,
        ),
        (
            "byte order mark",
            format!("\u{feff}{json}").into_bytes(),
            FrameKind::Json,
        ),
        (
            "an array",
            format!("[{json}]").into_bytes(),
            FrameKind::NotAnObject,
        ),
        ("deep nesting", deep, FrameKind::Json),
        (
            "NUL in the command",
            with("canary", "canary\\u0000"),
            FrameKind::InvalidField("command"),
        ),
        (
            "empty command",
            with(&cmd_field, "\"command\":\" \""),
            FrameKind::InvalidField("command"),
        ),
        (
            "cwd climbing out with ..",
            with(
                &format!("\"cwd\":\"{}\"", good.cwd),
                "\"cwd\":\"/workspace/../etc\"",
            ),
            FrameKind::InvalidField("cwd"),
        ),
        (
            "relative cwd",
            with(
                &format!("\"cwd\":\"{}\"", good.cwd),
                "\"cwd\":\"workspace\"",
            ),
            FrameKind::InvalidField("cwd"),
        ),
        (
            "uppercase request id",
            with(&good.request_id, &good.request_id.to_uppercase()),
            FrameKind::InvalidField("request_id"),
        ),
        (
            "request id that is not a UUID",
            with(&good.request_id, "1"),
            FrameKind::InvalidField("request_id"),
        ),
    ];
    let config = h.material().client_config().unwrap();
    for (name, body, want) in cases {
        let resp = h.raw(config.clone(), &frame(&body), true);
        let o = h.outcome();
        assert_eq!(o, Outcome::Frame(want), "{name}");
        let resp = resp.unwrap_or_else(|e| panic!("{name}: no error answer: {e}"));
        assert_eq!(resp.status, Status::Error, "{name}");
        assert!(h.workspace_entries().is_empty(), "{name} ran something");
    }

    // A `..` cwd with a valid signature, so only the path rule can stop it.
    let mut req = h.unsigned(CANARY);
    req.cwd = format!("{}/../x", req.cwd);
    h.credential.sign(&mut req);
    let body = serde_json::to_vec(&req).unwrap();
    let _ = h.raw(config, &frame(&body), true);
    assert_eq!(h.outcome(), Outcome::Frame(FrameKind::InvalidField("cwd")));
    assert!(h.workspace_entries().is_empty());
    h.no_more_outcomes();
}

#[test]
fn bad_frame_lengths_are_refused_without_waiting_for_a_body() {
    let h = Harness::start();
    let config = h.material().client_config().unwrap();
    let body = protocol::encode(&h.signed(CANARY)).unwrap();

    // Oversized headers, sent without a body and without closing: only a
    // server that checks the length before reading can answer.
    for len in [MAX_REQUEST_FRAME as u32 + 1, u32::MAX] {
        let resp = h.raw(config.clone(), &len.to_be_bytes(), false);
        assert_eq!(h.outcome(), Outcome::Frame(FrameKind::Oversized), "{len}");
        assert_eq!(resp.unwrap().status, Status::Error);
    }
    let mut cut = frame(&body);
    cut.truncate(cut.len() - 10);
    let cases: Vec<(&str, Vec<u8>, FrameKind)> = vec![
        ("truncated body", cut, FrameKind::Truncated),
        ("truncated header", vec![0, 0], FrameKind::TruncatedHeader),
        ("empty frame", vec![0, 0, 0, 0], FrameKind::Empty),
        ("nothing at all", vec![], FrameKind::Closed),
    ];
    for (name, bytes, want) in cases {
        let _ = h.raw(config.clone(), &bytes, true);
        assert_eq!(h.outcome(), Outcome::Frame(want), "{name}");
    }
    assert!(h.workspace_entries().is_empty());
    h.no_more_outcomes();
}

#[test]
fn forged_tampered_and_misrouted_signatures_are_refused() {
    let h = Harness::start();
    let now = signing::unix_now();
    let resign = |f: &dyn Fn(&mut Request)| {
        let mut r = h.unsigned(CANARY);
        f(&mut r);
        h.credential.sign(&mut r);
        r
    };
    let tamper = |f: &dyn Fn(&mut Request)| {
        let mut r = h.signed(CANARY);
        f(&mut r);
        r
    };
    let second = h.session.delegate(&h.session_id, now + 3600).unwrap();
    let other = h
        .other_session
        .delegate(&h.other_session_id, now + 3600)
        .unwrap();
    let foreign_domain = SessionKey::generate()
        .unwrap()
        .delegate(&h.session_id, now + 3600)
        .unwrap();
    let transplanted = {
        // A genuine signature, but by another key over another delegation.
        let text = second.delegation().to_text();
        let mut parts: Vec<String> = text.split('.').map(String::from).collect();
        let cred = SessionKey::generate()
            .unwrap()
            .delegate(&h.session_id, now + 3600)
            .unwrap();
        parts[4] = cred
            .delegation()
            .to_text()
            .rsplit('.')
            .next()
            .unwrap()
            .into();
        parts.join(".")
    };

    type Check = fn(&Outcome) -> bool;
    let cases: Vec<(&str, Request, Check)> = vec![
        ("empty signature", tamper(&|r| r.signature.clear()), |o| {
            *o == Outcome::Verify(VerifyError::MalformedSignature)
        }),
        (
            "uppercase signature",
            tamper(&|r| r.signature = r.signature.to_uppercase()),
            |o| *o == Outcome::Verify(VerifyError::MalformedSignature),
        ),
        (
            "random signature",
            tamper(&|r| r.signature = "ab".repeat(64)),
            |o| *o == Outcome::Verify(VerifyError::SignatureInvalid),
        ),
        (
            "command changed after signing",
            {
                let mut r = resign(&|r| r.command = "true".into());
                r.command = CANARY.into();
                r
            },
            |o| *o == Outcome::Verify(VerifyError::SignatureInvalid),
        ),
        (
            "cwd changed after signing",
            tamper(&|r| r.cwd.push_str("/sub")),
            |o| *o == Outcome::Verify(VerifyError::SignatureInvalid),
        ),
        (
            "justification changed after signing",
            tamper(&|r| r.justification = "other".into()),
            |o| *o == Outcome::Verify(VerifyError::SignatureInvalid),
        ),
        (
            "timestamp changed after signing",
            tamper(&|r| r.timestamp += 1),
            |o| *o == Outcome::Verify(VerifyError::SignatureInvalid),
        ),
        (
            "request id changed after signing",
            tamper(&|r| r.request_id = signing::new_id()),
            |o| *o == Outcome::Verify(VerifyError::SignatureInvalid),
        ),
        (
            "signed by another exec key of the session",
            {
                let mut r = h.unsigned(CANARY);
                second.sign(&mut r);
                r.delegation = h.credential.delegation().to_text();
                r
            },
            |o| *o == Outcome::Verify(VerifyError::SignatureInvalid),
        ),
        ("no delegation", tamper(&|r| r.delegation.clear()), |o| {
            matches!(o, Outcome::Verify(VerifyError::MalformedDelegation(_)))
        }),
        (
            "delegation for another session",
            {
                let mut r = h.unsigned(CANARY);
                other.sign(&mut r);
                r.session_id.clone_from(&h.session_id);
                r
            },
            |o| {
                matches!(
                    o,
                    Outcome::Verify(VerifyError::DelegationSessionMismatch { .. })
                )
            },
        ),
        (
            "our delegation naming the other session",
            tamper(&|r| r.session_id.clone_from(&h.other_session_id)),
            |o| {
                matches!(
                    o,
                    Outcome::Verify(VerifyError::DelegationSessionMismatch { .. })
                )
            },
        ),
        (
            "delegation signature transplanted from another key",
            {
                let mut r = h.unsigned(CANARY);
                second.sign(&mut r);
                r.delegation.clone_from(&transplanted);
                r
            },
            |o| *o == Outcome::Verify(VerifyError::DelegationSignatureInvalid),
        ),
        (
            "delegation with a later expiry",
            tamper(&|r| {
                let e = h.credential.delegation().expires_at;
                r.delegation = r
                    .delegation
                    .replace(&format!(".{e}."), &format!(".{}.", e + 1));
            }),
            |o| *o == Outcome::Verify(VerifyError::DelegationSignatureInvalid),
        ),
        (
            "session key of another domain",
            {
                let mut r = h.unsigned(CANARY);
                foreign_domain.sign(&mut r);
                r
            },
            |o| *o == Outcome::Verify(VerifyError::DelegationSignatureInvalid),
        ),
        (
            "unknown session",
            {
                let mut r = h.unsigned(CANARY);
                SessionKey::generate()
                    .unwrap()
                    .delegate(&signing::new_id(), now + 3600)
                    .unwrap()
                    .sign(&mut r);
                r
            },
            |o| *o == Outcome::UnknownSession,
        ),
        (
            "stale timestamp",
            resign(&|r| r.timestamp = now - 120),
            |o| matches!(o, Outcome::Verify(VerifyError::TimestampTooOld { .. })),
        ),
        (
            "future timestamp",
            resign(&|r| r.timestamp = now + 120),
            |o| matches!(o, Outcome::Verify(VerifyError::TimestampInFuture { .. })),
        ),
        (
            "another profile",
            resign(&|r| r.profile = "ops".into()),
            |o| matches!(o, Outcome::Verify(VerifyError::ProfileMismatch { .. })),
        ),
        (
            "cwd outside the workspace, validly signed",
            resign(&|r| r.cwd = "/etc".into()),
            |o| matches!(o, Outcome::Cwd(_)),
        ),
    ];
    for (name, req, check) in cases {
        let resp = h.send(&req);
        let o = h.outcome();
        assert!(check(&o), "{name}: {o:?}");
        assert_eq!(resp.unwrap().status, Status::Error, "{name}");
        assert!(h.workspace_entries().is_empty(), "{name} ran something");
    }
    h.no_more_outcomes();
}

#[test]
fn expired_delegation_from_the_real_client_is_refused() {
    let h = Harness::start();
    let expired = h
        .session
        .delegate(&h.session_id, signing::unix_now() - 1)
        .unwrap();
    let mut c = h.client();
    c.env(
        lazaret_escalate::env::SESSION_CREDENTIAL,
        expired.to_env_value(),
    )
    .arg(CANARY);
    let out = run(c);
    assert_eq!(out.status.code(), Some(i32::from(exit::HOST_ERROR)));
    assert!(
        text(&out.stderr).contains("expired"),
        "{}",
        text(&out.stderr)
    );
    assert!(matches!(
        h.outcome(),
        Outcome::Verify(VerifyError::DelegationExpired { .. })
    ));
    assert!(h.workspace_entries().is_empty());
}

#[test]
fn replayed_request_ids_run_once() {
    let h = Harness::start();
    let req = h.signed("touch once");
    let first = h.send(&req).unwrap();
    assert_eq!(first.status, Status::Approved);
    assert!(matches!(h.outcome(), Outcome::Ran { exit: 0, .. }));
    assert_eq!(h.workspace_entries(), ["once"]);
    h.clear_workspace();

    let again = h.send(&req).unwrap();
    assert_eq!(again.status, Status::Error);
    assert_eq!(h.outcome(), Outcome::Replay);

    // Same id, freshly signed with another command: still a replay.
    let mut other = h.unsigned(CANARY);
    other.request_id.clone_from(&req.request_id);
    h.credential.sign(&mut other);
    assert_eq!(h.send(&other).unwrap().status, Status::Error);
    assert_eq!(h.outcome(), Outcome::Replay);
    assert!(h.workspace_entries().is_empty());
}

/// Every character class of spec §5.2.1 and D5, sent by the real client for
/// a whitelisted program: each must reach the human (who denies), never
/// the auto-approve path.
#[test]
fn metacharacters_and_hidden_characters_never_auto_approve() {
    let h = Harness::with(Options::deny_all());
    let cases = corpus::characters();
    for (command, class) in cases {
        let mut c = h.client();
        c.arg(*command);
        let out = run(c);
        assert_eq!(
            out.status.code(),
            Some(i32::from(exit::DENIED)),
            "{command:?}: {}",
            text(&out.stderr)
        );
        match h.outcome() {
            Outcome::Denied(Decision::NeedsHuman {
                reason: HumanReason::Character { class: got, .. },
                via_shell: true,
                argv: None,
            }) => assert_eq!(got, *class, "{command:?}"),
            o => panic!("{command:?}: {o:?}"),
        }
        assert!(h.workspace_entries().is_empty(), "{command:?} ran");
    }
    h.no_more_outcomes();
}

#[test]
fn prefix_and_program_tricks_never_auto_approve() {
    let h = Harness::with(Options {
        rules: corpus::RULES
            .iter()
            .map(|r| classify::split(r).unwrap())
            .collect(),
        ..Options::deny_all()
    });
    let cases = corpus::programs();
    for (args, want) in &cases {
        let mut c = h.client();
        c.args(*args);
        let out = run(c);
        assert_eq!(out.status.code(), Some(i32::from(exit::DENIED)), "{args:?}");
        match h.outcome() {
            Outcome::Denied(Decision::NeedsHuman { reason, .. }) => {
                assert_eq!(reason, *want, "{args:?}");
            }
            o => panic!("{args:?}: {o:?}"),
        }
    }
    // The control: the same server auto-approves the whitelisted forms.
    for args in [
        &["ls -la"][..],
        &["ls", "-la", "."][..],
        &["--", "touch", "ok"][..],
    ] {
        let mut c = h.client();
        c.args(args);
        let out = run(c);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(matches!(
            h.outcome(),
            Outcome::Ran {
                decision: Decision::AutoApprove { .. },
                ..
            }
        ));
    }
    assert_eq!(h.workspace_entries(), ["ok"]);
    h.no_more_outcomes();
}
