//! A real Escalation Socket server for tests, built only from the
//! library's public API the way the Session Coordinator will use it: a
//! tokio UNIX listener, `server::accept` (mTLS + identity), strict decoding,
//! session lookup, `verify_request`, a seen-id set, `map_cwd`, `classify`,
//! a scripted "human", and real execution of approved commands.
//!
//! Every connection ends in exactly one [`Outcome`], which tests read with
//! a deadline.

#![allow(dead_code)] // each test file uses a different part

pub mod corpus;

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use ed25519_dalek::VerifyingKey;
use lazaret_escalate::classify::{self, AutoApproveRules, Decision};
use lazaret_escalate::protocol::{self, ProtocolError, Request, Response};
use lazaret_escalate::server::{self, AcceptError};
use lazaret_escalate::signing::{self, SessionCredential, SessionKey, VerifyContext, VerifyError};
use lazaret_escalate::trust::{ClientMaterial, IdentityError, SandboxIdentity, TrustAnchor};

pub const BIN: &str = env!("CARGO_BIN_EXE_lazaret-escalate");
pub const HOUR: Duration = Duration::from_secs(3600);
/// How long a test waits for anything before failing.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// What the scripted human answers.
#[derive(Debug, Clone)]
pub enum Answer {
    Approve,
    Deny(String),
    Edit(String),
}

/// How one connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Handshake(String),
    Alpn,
    Identity(IdentityError),
    Frame(FrameKind),
    UnknownSession,
    Verify(VerifyError),
    Replay,
    Cwd(String),
    /// A human was asked and said no.
    Denied(Decision),
    /// The command ran (auto-approved or approved by the human).
    Ran {
        decision: Decision,
        exit: i32,
    },
}

/// [`ProtocolError`] without its payloads, comparable in tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameKind {
    Closed,
    TruncatedHeader,
    Oversized,
    Empty,
    Truncated,
    InvalidUtf8,
    Json,
    DuplicateKey(String),
    NotAnObject,
    MissingVersion,
    UnsupportedVersion,
    Schema,
    InvalidField(&'static str),
    Inconsistent,
    Io,
}

pub fn frame_kind(e: &ProtocolError) -> FrameKind {
    match e {
        ProtocolError::Closed => FrameKind::Closed,
        ProtocolError::TruncatedHeader { .. } => FrameKind::TruncatedHeader,
        ProtocolError::Oversized { .. } => FrameKind::Oversized,
        ProtocolError::Empty => FrameKind::Empty,
        ProtocolError::Truncated { .. } => FrameKind::Truncated,
        ProtocolError::InvalidUtf8 { .. } => FrameKind::InvalidUtf8,
        ProtocolError::Json(_) => FrameKind::Json,
        ProtocolError::DuplicateKey(k) => FrameKind::DuplicateKey(k.clone()),
        ProtocolError::NotAnObject => FrameKind::NotAnObject,
        ProtocolError::MissingVersion => FrameKind::MissingVersion,
        ProtocolError::UnsupportedVersion(_) => FrameKind::UnsupportedVersion,
        ProtocolError::Schema(_) => FrameKind::Schema,
        ProtocolError::InvalidField { field, .. } => FrameKind::InvalidField(field),
        ProtocolError::Inconsistent(_) => FrameKind::Inconsistent,
        ProtocolError::Io(_) => FrameKind::Io,
    }
}

type Human = dyn Fn(&Request, &Decision) -> Answer + Send + Sync;

struct State {
    acceptor: tokio_rustls::TlsAcceptor,
    identity: SandboxIdentity,
    sessions: HashMap<String, VerifyingKey>,
    seen: Mutex<HashSet<[u8; 16]>>,
    rules: AutoApproveRules,
    human: Box<Human>,
    sandbox_workspace: String,
    host_workspace: PathBuf,
    max_response: usize,
}

/// Server options.
pub struct Options {
    pub rules: Vec<Vec<String>>,
    pub human: Box<Human>,
    pub max_response: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            rules: ["touch", "echo", "true", "false", "ls", "printf"]
                .iter()
                .map(|p| vec![p.to_string(), "*".to_string()])
                .collect(),
            human: Box::new(|_, _| Answer::Approve),
            max_response: protocol::MAX_RESPONSE_FRAME,
        }
    }
}

impl Options {
    pub fn human(f: impl Fn(&Request, &Decision) -> Answer + Send + Sync + 'static) -> Self {
        Options {
            human: Box::new(f),
            ..Options::default()
        }
    }

    pub fn deny_all() -> Self {
        Self::human(|_, _| Answer::Deny("the test human says no".into()))
    }
}

/// One sandbox's worth of host state and its running server.
pub struct Harness {
    pub dir: tempfile::TempDir,
    /// The client's cwd and the host workspace (the same folder here).
    pub workspace: PathBuf,
    pub socket: PathBuf,
    /// Valid client material for this sandbox.
    pub certs: PathBuf,
    pub anchor: TrustAnchor,
    pub identity: SandboxIdentity,
    pub session: SessionKey,
    pub session_id: String,
    pub credential: SessionCredential,
    /// A second registered session.
    pub other_session: SessionKey,
    pub other_session_id: String,
    outcomes: mpsc::Receiver<Outcome>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub fn new_dir(parent: &Path, name: &str) -> PathBuf {
    let p = parent.join(name);
    std::fs::create_dir_all(&p).unwrap();
    p
}

impl Harness {
    pub fn start() -> Harness {
        Self::with(Options::default())
    }

    pub fn with(opts: Options) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let workspace = new_dir(dir.path(), "workspace").canonicalize().unwrap();
        let socket = dir.path().join("escalate.sock");
        let certs = new_dir(dir.path(), "certs");

        let anchor = TrustAnchor::generate(HOUR).unwrap();
        let identity = SandboxIdentity::new("dev", "0123456789ab").unwrap();
        anchor
            .issue_client(&identity, HOUR)
            .unwrap()
            .write_to(&certs)
            .unwrap();
        let server_cert = anchor.issue_server(HOUR).unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(anchor.server_config(&server_cert).unwrap());

        let session = SessionKey::generate().unwrap();
        let session_id = signing::new_id();
        let credential = session
            .delegate(&session_id, signing::unix_now() + 3600)
            .unwrap();
        let other_session = SessionKey::generate().unwrap();
        let other_session_id = signing::new_id();
        let mut sessions = HashMap::new();
        sessions.insert(session_id.clone(), session.public_key());
        sessions.insert(other_session_id.clone(), other_session.public_key());

        let (rules, errors) = AutoApproveRules::new(&opts.rules);
        assert!(errors.is_empty(), "{errors:?}");
        let state = Arc::new(State {
            acceptor,
            identity: identity.clone(),
            sessions,
            seen: Mutex::new(HashSet::new()),
            rules,
            human: opts.human,
            sandbox_workspace: workspace.to_str().unwrap().to_string(),
            host_workspace: workspace.clone(),
            max_response: opts.max_response,
        });

        // Bound before start() returns: no test can race the listener.
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        listener.set_nonblocking(true).unwrap();
        let (tx, outcomes) = mpsc::channel();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::UnixListener::from_std(listener).unwrap();
                loop {
                    tokio::select! {
                        _ = &mut stopped => break,
                        accepted = listener.accept() => {
                            let Ok((io, _)) = accepted else { continue };
                            let state = state.clone();
                            let tx = tx.clone();
                            tokio::spawn(async move {
                                let outcome = handle(&state, io).await;
                                let _ = tx.send(outcome);
                            });
                        }
                    }
                }
            });
        });

        Harness {
            dir,
            workspace,
            socket,
            certs,
            anchor,
            identity,
            session,
            session_id,
            credential,
            other_session,
            other_session_id,
            outcomes,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The next connection's outcome; fails the test after [`PATIENCE`].
    pub fn outcome(&self) -> Outcome {
        self.outcomes
            .recv_timeout(PATIENCE)
            .expect("the server reported no outcome in time")
    }

    /// No further outcome arrived (checked after the client finished).
    pub fn no_more_outcomes(&self) {
        if let Ok(o) = self.outcomes.try_recv() {
            panic!("unexpected extra outcome {o:?}");
        }
    }

    /// Files in the workspace: approved commands are the only writers, so
    /// any entry here means something ran.
    pub fn workspace_entries(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.workspace)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    pub fn clear_workspace(&self) {
        for e in std::fs::read_dir(&self.workspace).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                std::fs::remove_dir_all(&p).unwrap();
            } else {
                std::fs::remove_file(&p).unwrap();
            }
        }
    }

    /// The client binary with this session's environment, in the workspace.
    pub fn client(&self) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.current_dir(&self.workspace)
            .env_clear()
            .env(lazaret_escalate::env::SESSION_ID, &self.session_id)
            .env(
                lazaret_escalate::env::SESSION_CREDENTIAL,
                self.credential.to_env_value(),
            )
            .env(lazaret_escalate::env::PROFILE, self.identity.profile())
            .env(lazaret_escalate::env::SOCKET, &self.socket)
            .env(lazaret_escalate::env::CERTS_DIR, &self.certs)
            .stdin(Stdio::null());
        cmd
    }

    /// A well-formed request signed by this session's credential.
    pub fn signed(&self, command: &str) -> Request {
        let mut req = self.unsigned(command);
        self.credential.sign(&mut req);
        req
    }

    pub fn unsigned(&self, command: &str) -> Request {
        Request {
            version: protocol::PROTOCOL_VERSION,
            request_id: signing::new_id(),
            session_id: self.session_id.clone(),
            profile: self.identity.profile().to_string(),
            timestamp: signing::unix_now(),
            cwd: self.workspace.to_str().unwrap().to_string(),
            command: command.to_string(),
            justification: "test".into(),
            delegation: String::new(),
            signature: String::new(),
        }
    }

    /// Valid client material for this sandbox, freshly issued.
    pub fn material(&self) -> ClientMaterial {
        self.anchor.issue_client(&self.identity, HOUR).unwrap()
    }

    /// Sends raw bytes over mTLS with `config`, closes the sending side,
    /// and reads one response frame (or the error ending the read).
    pub fn raw(
        &self,
        config: Arc<rustls::ClientConfig>,
        bytes: &[u8],
        close: bool,
    ) -> Result<Response, ProtocolError> {
        raw_exchange(&self.socket, config, bytes, close)
    }

    /// [`raw`](Self::raw) with valid material and one encoded request.
    pub fn send(&self, req: &Request) -> Result<Response, ProtocolError> {
        let body = protocol::encode(req).unwrap();
        self.raw(
            self.material().client_config().unwrap(),
            &frame(&body),
            true,
        )
    }
}

pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut v = (body.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(body);
    v
}

pub fn raw_exchange(
    socket: &Path,
    config: Arc<rustls::ClientConfig>,
    bytes: &[u8],
    close: bool,
) -> Result<Response, ProtocolError> {
    let sock = UnixStream::connect(socket)?;
    sock.set_read_timeout(Some(PATIENCE))?;
    let conn =
        rustls::ClientConnection::new(config, lazaret_escalate::trust::server_name()).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    tls.write_all(bytes)?;
    tls.flush()?;
    if close {
        // A bare half-close, no close_notify: rustls would retry a
        // close_notify that failed (the server may have answered and hung
        // up already) on every later read. The server sees the same end of
        // input either way.
        let _ = tls.sock.shutdown(std::net::Shutdown::Write);
    }
    protocol::read_response(&mut tls)
}

async fn handle(state: &State, io: tokio::net::UnixStream) -> Outcome {
    let mut tls = match server::accept(&state.acceptor, io, &state.identity).await {
        Ok(t) => t,
        Err(AcceptError::Handshake(e)) => return Outcome::Handshake(e.to_string()),
        Err(AcceptError::Alpn) => return Outcome::Alpn,
        Err(AcceptError::Identity(e)) => return Outcome::Identity(e),
    };
    let req = match protocol::read_request_async(&mut tls).await {
        Ok(r) => r,
        Err(e) => {
            let kind = frame_kind(&e);
            reply(&mut tls, Response::error("", format!("bad request: {e}"))).await;
            return Outcome::Frame(kind);
        }
    };
    let Some(key) = state.sessions.get(&req.session_id) else {
        reply(
            &mut tls,
            Response::error(&req.request_id, "unknown session"),
        )
        .await;
        return Outcome::UnknownSession;
    };
    let ctx = VerifyContext::new(key, state.identity.profile());
    let verified = match signing::verify_request(&req, &ctx) {
        Ok(v) => v,
        Err(e) => {
            reply(&mut tls, Response::error(&req.request_id, e.to_string())).await;
            return Outcome::Verify(e);
        }
    };
    if !state.seen.lock().unwrap().insert(verified.replay_key()) {
        reply(
            &mut tls,
            Response::error(&req.request_id, "replayed request"),
        )
        .await;
        return Outcome::Replay;
    }
    let cwd = match protocol::map_cwd(&req.cwd, &state.sandbox_workspace, &state.host_workspace) {
        Ok(c) => c,
        Err(e) => {
            reply(&mut tls, Response::error(&req.request_id, e.to_string())).await;
            return Outcome::Cwd(e.to_string());
        }
    };
    let decision = classify::classify(&req.command, &state.rules);
    let (to_run, edited) = match &decision {
        Decision::AutoApprove { .. } => (decision.clone(), None),
        Decision::NeedsHuman { .. } => match (state.human)(&req, &decision) {
            Answer::Approve => (decision.clone(), None),
            Answer::Deny(reason) => {
                reply(&mut tls, Response::denied(&req.request_id, reason)).await;
                return Outcome::Denied(decision);
            }
            Answer::Edit(cmd) => {
                // An edit is re-checked; the human approved it either way.
                (classify::classify(&cmd, &state.rules), Some(cmd))
            }
        },
    };
    let text = edited.clone().unwrap_or_else(|| req.command.clone());
    let run = to_run.clone();
    let output = tokio::task::spawn_blocking(move || execute(&run, &text, &cwd))
        .await
        .unwrap();
    let (exit, mut resp) = match output {
        Ok(out) => {
            let exit = out.status.code().unwrap_or(128);
            let resp = Response::approved(
                &req.request_id,
                exit,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            );
            (exit, resp)
        }
        Err(e) => (
            127,
            Response::approved(&req.request_id, 127, "", e.to_string()),
        ),
    };
    if let Some(cmd) = edited {
        resp = resp.with_edited_command(cmd);
    }
    resp.fit_to(state.max_response).unwrap();
    reply(&mut tls, resp).await;
    Outcome::Ran {
        decision: to_run,
        exit,
    }
}

fn execute(decision: &Decision, text: &str, cwd: &Path) -> std::io::Result<Output> {
    let mut cmd = match decision {
        Decision::AutoApprove { argv, program_path } => {
            let mut c = Command::new(program_path);
            c.arg0(&argv[0]).args(&argv[1..]);
            c
        }
        Decision::NeedsHuman {
            via_shell: true, ..
        } => {
            let mut c = Command::new("/bin/sh");
            c.arg("-c").arg(text);
            c
        }
        Decision::NeedsHuman {
            argv: Some(argv), ..
        } => {
            let program =
                classify::resolve_program(&argv[0]).unwrap_or_else(|| PathBuf::from(&argv[0]));
            let mut c = Command::new(program);
            c.arg0(&argv[0]).args(&argv[1..]);
            c
        }
        Decision::NeedsHuman { .. } => return Err(std::io::Error::other("nothing to run")),
    };
    cmd.current_dir(cwd)
        .env_clear()
        .env("PATH", classify::TRUSTED_PATH.join(":"))
        .stdin(Stdio::null())
        .output()
}

async fn reply(tls: &mut tokio_rustls::server::TlsStream<tokio::net::UnixStream>, resp: Response) {
    use tokio::io::AsyncWriteExt;
    // The client may be gone (it timed out or was refused): not our failure.
    let _ = protocol::write_response_async(tls, &resp).await;
    let _ = tls.shutdown().await;
}

/// Runs a command to completion, failing the test after [`PATIENCE`].
pub fn run(mut cmd: Command) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        out.read_to_end(&mut v).unwrap();
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        err.read_to_end(&mut v).unwrap();
        v
    });
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the client did not finish within {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
