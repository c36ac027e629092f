//! Host Escalation, host side (spec §5, decisions.md D3–D5, D9): the Trust
//! Anchor, the Escalation Socket, the policy pipeline and host execution.
//!
//! Per connection: mTLS with the sandbox's certificate (exactly one URI SAN,
//! the identity bound to this socket) → strict request decoding → the
//! session's delegated signature → the session's rate budget → replay and
//! timestamp checks → the working directory opened beneath the workspace
//! (decisions.md D9) → classification (with a symlink probe on that
//! directory) → the audit record → auto-approve, confined
//! ([`confine`](super::confine)), or the human of *that* session (a few
//! pending at most) → execution in the pinned directory → audit. Anything
//! failing before classification, or a request that cannot be audited, gets
//! an `error` answer and nothing runs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lazaret_escalate::classify::{self, AutoApproveRules, Decision};
use lazaret_escalate::ed25519_dalek::VerifyingKey;
use lazaret_escalate::protocol::{self, MAX_RESPONSE_FRAME, Response};
use lazaret_escalate::server::{self, TlsAcceptor};
use lazaret_escalate::signing::{self, VerifyContext};
use lazaret_escalate::trust::{ClientMaterial, SandboxIdentity, TrustAnchor};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;
use tokio::net::UnixListener;

use super::bounds::{self, Gate};
use super::confine::{self, Confinement, PinnedDir, Support, WorkspaceRoot};
use super::store::{Batch, Store};
use crate::git_sentry::WorkspaceLayout;

/// How long the sandbox's and the socket's certificates live; both are
/// renewed at half of it while the coordinator runs (a long day outlasts
/// one).
const CERT_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// [`CERT_LIFETIME`], or shorter for tests: `LAZARET_CERT_LIFETIME_SECS`
/// (at least 2 seconds; it can only shorten it).
pub fn cert_lifetime() -> Duration {
    std::env::var("LAZARET_CERT_LIFETIME_SECS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&s| s >= 2)
        .map_or(CERT_LIFETIME, |s| Duration::from_secs(s).min(CERT_LIFETIME))
}
/// From accept to a decoded request, the TLS handshake included.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// The Escalation Socket's name in reports of refused connections.
pub const ESCALATION_LISTENER: &str = "Escalation Socket";
/// Refusals audited one by one per [`REFUSAL_WINDOW`] and domain; the
/// rest are counted by stage and audited as one
/// `escalation-refused-aggregate` record per window.
pub const REFUSALS_AUDITED: u32 = 60;
pub const REFUSAL_WINDOW: Duration = Duration::from_secs(60);
/// Bytes of a refusal's error (which may hold the agent's own bytes) that
/// its audit record keeps, made visible; the record also gives the size.
pub const REFUSAL_EXCERPT: usize = 200;

/// What an audited refusal keeps of `error`: at most [`REFUSAL_EXCERPT`]
/// bytes of it (cut at a character boundary), made visible, and its size.
pub fn excerpt(error: &str) -> (String, usize) {
    let mut cut = error.len().min(REFUSAL_EXCERPT);
    while !error.is_char_boundary(cut) {
        cut -= 1;
    }
    (
        lazaret_widgets::visible::visible(&error[..cut]),
        error.len(),
    )
}

/// The bound on a domain's refusal records before they reach the store:
/// the first [`REFUSALS_AUDITED`] of each [`REFUSAL_WINDOW`] one by one,
/// then counts by stage, audited once the window has passed.
#[derive(Debug)]
pub struct RefusalLimit(Mutex<RefusalWindow>);

#[derive(Debug)]
struct RefusalWindow {
    started: Instant,
    audited: u32,
    /// Refused past the first ones, by stage.
    counted: std::collections::BTreeMap<&'static str, u64>,
}

impl RefusalLimit {
    pub fn new(now: Instant) -> RefusalLimit {
        RefusalLimit(Mutex::new(RefusalWindow {
            started: now,
            audited: 0,
            counted: Default::default(),
        }))
    }

    /// One refusal at `stage`: whether to audit it one by one, and the
    /// aggregated record of the window before, when one is due.
    pub fn refuse(&self, stage: &'static str, now: Instant) -> (bool, Option<serde_json::Value>) {
        let mut w = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let due = w.close(now, false);
        if w.audited < REFUSALS_AUDITED {
            w.audited += 1;
            return (true, due);
        }
        *w.counted.entry(stage).or_default() += 1;
        (false, due)
    }

    /// The aggregated record of the refusals counted but not audited, once
    /// their window has passed, or at once with `now_anyway` (the domain
    /// is going down).
    pub fn due(&self, now: Instant, now_anyway: bool) -> Option<serde_json::Value> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .close(now, now_anyway)
    }
}

impl RefusalWindow {
    /// Starts a new window when this one has passed (or `force`), and
    /// gives the aggregated record of what it counted, if anything.
    fn close(&mut self, now: Instant, force: bool) -> Option<serde_json::Value> {
        let secs = now.saturating_duration_since(self.started).as_secs();
        if !force && now.saturating_duration_since(self.started) < REFUSAL_WINDOW {
            return None;
        }
        self.started = now;
        self.audited = 0;
        let counted = std::mem::take(&mut self.counted);
        let refused: u64 = counted.values().sum();
        if refused == 0 {
            return None;
        }
        let stages: Vec<String> = counted.iter().map(|(s, n)| format!("{s} {n}")).collect();
        Some(serde_json::json!({
            "refused": refused,
            "by_stage": counted,
            "secs": secs,
            "message": format!(
                "{refused} more escalation requests refused in the last {secs} s, by stage: {} (the first {REFUSALS_AUDITED} of each minute are audited one by one)",
                stages.join(", ")
            ),
        }))
    }
}
/// The PATH approved commands run with (decisions.md D5): the classifier's
/// [`classify::TRUSTED_PATH`], the one list both resolve programs on.
pub fn trusted_path() -> String {
    classify::TRUSTED_PATH.join(":")
}

/// Bounds on the requests of one session (decisions.md D9).
#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    /// Requests a session may send at once before the rate applies.
    pub burst: u32,
    /// Requests per minute a session may send, sustained.
    pub per_minute: u32,
    /// Requests of a session that may wait for its human at once.
    pub pending: usize,
    /// Longer commands and justifications are stored as a hash and a
    /// preview of this many bytes.
    pub stored_text: usize,
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits {
            burst: 10,
            per_minute: 30,
            pending: 4,
            stored_text: 1024,
        }
    }
}

/// A per-session token bucket and pending count.
#[derive(Debug)]
struct Budget {
    tokens: f64,
    at: Instant,
    pending: usize,
}

impl Budget {
    /// A full bucket at `now`.
    fn new(limits: &RequestLimits, now: Instant) -> Budget {
        Budget {
            tokens: f64::from(limits.burst.max(1)),
            at: now,
            pending: 0,
        }
    }

    /// Refills for the time since the last request, then takes one token;
    /// `false` (nothing taken) when less than one is left.
    fn take(&mut self, limits: &RequestLimits, now: Instant) -> bool {
        let burst = f64::from(limits.burst.max(1));
        let refill = now.saturating_duration_since(self.at).as_secs_f64()
            * f64::from(limits.per_minute)
            / 60.0;
        self.tokens = (self.tokens + refill).min(burst);
        self.at = now;
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }
}

/// Limits on what an approved command may do.
#[derive(Debug, Clone, Copy)]
pub struct ExecLimits {
    pub timeout: Duration,
    /// Bytes kept of stdout and of stderr each.
    pub max_output: usize,
}

impl Default for ExecLimits {
    fn default() -> Self {
        ExecLimits {
            timeout: Duration::from_secs(300),
            max_output: 1 << 20,
        }
    }
}

/// What the human of a session is asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prompt {
    pub request_id: String,
    pub session_id: String,
    pub profile: String,
    pub cwd: String,
    pub justification: String,
    pub command: String,
    /// The command would run through the host shell.
    pub via_shell: bool,
    /// Why it was not auto-approved.
    pub reason: String,
    /// Files of the agent's that the command's program would execute or
    /// obey, changed since the agent's branch point (e.g. "Makefile,
    /// changed in ec45301"): approving runs the agent's code.
    #[serde(default)]
    pub reads: Vec<String>,
    /// When `reads` names anything: `lazaret review`'s findings, for the
    /// human to see with one key.
    #[serde(default)]
    pub review: Vec<String>,
}

/// Bytes of output an [`Outcome`] carries back to the human's queue: a
/// preview; the agent gets the whole output.
pub const OUTCOME_PREVIEW: usize = 4096;

/// What became of a request its human approved, for that human's queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub request_id: String,
    /// `None` when the command could not run (`error` says why).
    pub exit_code: Option<i32>,
    /// The head of stdout, then of stderr, at most [`OUTCOME_PREVIEW`] bytes.
    pub output: String,
    pub error: Option<String>,
}

impl Outcome {
    fn of(request_id: &str, resp: &Response) -> Outcome {
        let mut output = resp.stdout.clone();
        if !resp.stderr.is_empty() {
            if !output.is_empty() && !output.ends_with('\n') {
                output.push('\n');
            }
            output.push_str(&resp.stderr);
        }
        if output.len() > OUTCOME_PREVIEW {
            let mut cut = OUTCOME_PREVIEW;
            while !output.is_char_boundary(cut) {
                cut -= 1;
            }
            output.truncate(cut);
            output.push('…');
        }
        Outcome {
            request_id: request_id.to_string(),
            exit_code: resp.exit_code,
            output,
            error: match resp.status {
                protocol::Status::Approved => None,
                _ => Some(resp.stderr.clone()),
            },
        }
    }
}

/// What the coordinator sends to a session's human.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToHuman {
    Prompt(Prompt),
    Outcome(Outcome),
    /// The prompt of this request is void: its requester went away before
    /// the human decided.
    Withdrawn {
        request_id: String,
        reason: String,
    },
    /// Something about the domain the human must know (it does not end
    /// anything by itself).
    Warning(String),
}

/// The human's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    Approve,
    Deny {
        reason: Option<String>,
    },
    /// Approve this edited command instead (re-checked before it runs).
    Edit {
        command: String,
    },
    /// Abort: deny, and the session is closing.
    Abort,
}

/// What the coordinator provides: session keys and a way to ask a
/// session's human.
pub trait SessionDirectory: Send + Sync {
    fn key(&self, session_id: &str) -> Option<VerifyingKey>;
    /// Sends `prompt` to the session's terminal; `None` when that session
    /// is gone or has nobody to ask.
    fn ask(&self, prompt: Prompt) -> Option<tokio::sync::oneshot::Receiver<Verdict>>;
    /// Tells the session's human what became of a request they approved.
    fn tell(&self, session_id: &str, outcome: Outcome);
    /// Tells every attached human something is wrong with the domain
    /// (e.g. the sandbox's certificate could not be renewed).
    fn warn(&self, _message: &str) {}
    /// Takes back the prompt of `request_id` (no decision for it counts
    /// any more) and tells the session's human why.
    fn withdraw(&self, session_id: &str, request_id: &str, reason: &str);
}

/// The Escalation Socket of one domain.
pub struct EscalationServer {
    pub identity: SandboxIdentity,
    /// Replaced when the server certificate is renewed; a handshake takes
    /// the one current at its accept.
    acceptor: Mutex<TlsAcceptor>,
    /// The CA (in memory only) and what it issued, for renewals.
    anchor: TrustAnchor,
    client: Mutex<ClientMaterial>,
    certs_dir: PathBuf,
    cert_lifetime: Duration,
    pub socket: PathBuf,
    host_workspace: PathBuf,
    layout: Option<WorkspaceLayout>,
    rules: AutoApproveRules,
    /// Landlock is there (else `rules` is empty: auto-approve is off).
    pub support: Support,
    limits: ExecLimits,
    requests: RequestLimits,
    budgets: Mutex<HashMap<String, Budget>>,
    refusals: RefusalLimit,
    /// The coordinator's own self-test runs: its one probe without a
    /// certificate is expected, and not an agent's refusal to audit.
    probe: Mutex<ProbeWindow>,
    store: Arc<Store>,
    audit: Arc<dyn AuditLog>,
}

/// While the coordinator runs its self-test (see
/// [`EscalationServer::expect_selftest_probe`]).
#[derive(Debug, Default)]
struct ProbeWindow {
    /// Until when a probe may come (a self-test whose client died must not
    /// leave the window open).
    open: Option<Instant>,
    /// The probe's refusal was seen (at most one is taken per window).
    seen: bool,
}

/// How long a passed self-test waits for its probe's refusal to be taken.
pub const PROBE_GRACE: Duration = Duration::from_secs(2);
/// The longest a `doctor --sandbox` self-test keeps its probe window open.
pub const PROBE_WINDOW: Duration = Duration::from_secs(60);

/// Where the Escalation Socket's records go (the store; a test may make
/// it fail). An error means nothing was written, so nothing may run.
pub trait AuditLog: Send + Sync {
    /// Appends one audit record.
    fn append(&self, kind: &'static str, data: serde_json::Value) -> Result<(), String>;
    /// Writes `batch` in one durable commit, or nothing; `Ok(false)` when
    /// its request was seen before (a replay).
    fn commit(&self, batch: Batch) -> Result<bool, String>;
}

impl AuditLog for Store {
    fn append(&self, kind: &'static str, data: serde_json::Value) -> Result<(), String> {
        Store::append(self, kind, data)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn commit(&self, batch: Batch) -> Result<bool, String> {
        Store::commit(self, batch).map_err(|e| e.to_string())
    }
}

impl std::fmt::Debug for EscalationServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EscalationServer")
            .field("socket", &self.socket)
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("Trust Anchor: {0}")]
    Trust(#[from] lazaret_escalate::trust::TrustError),
    #[error("cannot prepare {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// The parts of a domain the Escalation Socket needs.
#[allow(missing_debug_implementations)]
pub struct Setup<'a> {
    pub profile: &'a str,
    pub domain_hash: &'a str,
    /// Holds the socket; mounted read-only at `/run/lazaret`.
    pub escalation_dir: &'a Path,
    /// Client material; on a tmpfs, mounted read-only at `/run/lazaret/certs`.
    pub certs_dir: &'a Path,
    /// The host folder that is `/workspace` in the sandbox.
    pub host_workspace: &'a Path,
    /// How the workspace is shared: what an approved command would read of
    /// the agent's is found from it.
    pub layout: Option<WorkspaceLayout>,
    /// Entries as argv; a last word `*` makes a prefix entry.
    pub auto_approve: &'a [Vec<String>],
    /// The entries among `auto_approve` that may use TCP.
    pub auto_approve_network: &'a [Vec<String>],
    pub limits: ExecLimits,
    pub requests: RequestLimits,
    /// Read for replays; written only through `audit`.
    pub store: Arc<Store>,
    pub audit: Arc<dyn AuditLog>,
}

impl EscalationServer {
    /// Creates the Trust Anchor (in memory), writes the sandbox's client
    /// material and the agent guide, and returns the server (not yet bound).
    pub fn new(s: Setup<'_>) -> Result<Self, SetupError> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        for dir in [s.escalation_dir, s.certs_dir] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|error| SetupError::Io {
                    path: dir.to_path_buf(),
                    error,
                })?;
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        }
        let cert_lifetime = cert_lifetime();
        // The CA is never renewed: a trust anchor is its name and key
        // (webpki checks no validity on it), so only the certificates it
        // issued need to stay current.
        let anchor = TrustAnchor::generate(cert_lifetime)?;
        let identity = SandboxIdentity::new(s.profile, s.domain_hash)?;
        let client = anchor.issue_client(&identity, cert_lifetime)?;
        client.write_to(s.certs_dir)?;
        let server_cert = anchor.issue_server(cert_lifetime)?;
        let acceptor = TlsAcceptor::from(anchor.server_config(&server_cert)?);
        let guide = s.escalation_dir.join("README.md");
        std::fs::write(&guide, lazaret_escalate::GUIDE)
            .map_err(|error| SetupError::Io { path: guide, error })?;
        // Entries were checked at configuration load; any refused here is
        // left out (and was reported there).
        let (rules, _) = AutoApproveRules::new(s.auto_approve);
        let rules = rules.with_network(s.auto_approve_network);
        // Never unconfined: without Landlock nothing auto-approves.
        let support = confine::probe();
        let rules = if support.available() {
            rules
        } else {
            AutoApproveRules::default()
        };
        Ok(EscalationServer {
            identity,
            acceptor: Mutex::new(acceptor),
            anchor,
            client: Mutex::new(client),
            certs_dir: s.certs_dir.to_path_buf(),
            cert_lifetime,
            socket: s.escalation_dir.join("escalate.sock"),
            host_workspace: s.host_workspace.to_path_buf(),
            layout: s.layout,
            rules,
            support,
            limits: s.limits,
            requests: s.requests,
            budgets: Mutex::new(HashMap::new()),
            refusals: RefusalLimit::new(Instant::now()),
            probe: Mutex::new(ProbeWindow::default()),
            store: s.store,
            audit: s.audit,
        })
    }

    /// Binds the socket and serves until the returned task is aborted, at
    /// most [`bounds::ESCALATION_CONNECTIONS`] connections at once.
    pub fn serve(
        self: Arc<Self>,
        sessions: Arc<dyn SessionDirectory>,
    ) -> std::io::Result<tokio::task::JoinHandle<()>> {
        let gate = Gate::new(ESCALATION_LISTENER, bounds::ESCALATION_CONNECTIONS);
        self.serve_bounded(sessions, gate)
    }

    /// [`EscalationServer::serve`] with the bound `gate`: a connection over
    /// it is closed at once, before any byte of TLS, and counted (reported
    /// in the audit log and to every attached human at most once per
    /// [`bounds::REPORT_INTERVAL`]). Every peer in the sandbox is one to
    /// us (under runsc they are all the gofer), so the bound is the
    /// domain's.
    pub fn serve_bounded(
        self: Arc<Self>,
        sessions: Arc<dyn SessionDirectory>,
        gate: Arc<Gate>,
    ) -> std::io::Result<tokio::task::JoinHandle<()>> {
        let _ = std::fs::remove_file(&self.socket);
        let listener = UnixListener::bind(&self.socket)?;
        Ok(tokio::spawn(async move {
            let report = |r: bounds::Refused| {
                let _ = self.audit("connections-refused", r.record());
                sessions.warn(&r.message());
            };
            let accept = async {
                loop {
                    let stream = match listener.accept().await {
                        Ok((stream, _)) => stream,
                        Err(_) => {
                            tokio::time::sleep(bounds::ACCEPT_BACKOFF).await;
                            continue;
                        }
                    };
                    let permit = match gate.admit() {
                        Ok(p) => p,
                        Err(due) => {
                            drop(stream);
                            if let Some(r) = due {
                                report(r);
                            }
                            continue;
                        }
                    };
                    let me = self.clone();
                    let sessions = sessions.clone();
                    tokio::spawn(async move {
                        me.handle(stream, sessions).await;
                        drop(permit);
                    });
                }
            };
            let flush = async {
                loop {
                    tokio::time::sleep(bounds::REPORT_INTERVAL).await;
                    if let Some(r) = gate.pending_report() {
                        report(r);
                    }
                    self.flush_refusals(false);
                }
            };
            tokio::select! {
                () = accept => {}
                () = flush => {}
                () = self.renew_forever(sessions.as_ref()) => {}
            }
        }))
    }

    /// Renews the certificates at half their lifetime, for as long as the
    /// socket serves. A failure is audited and told to every attached
    /// human (the requests would fail once the old certificate expires),
    /// and retried sooner.
    async fn renew_forever(&self, sessions: &dyn SessionDirectory) {
        let mut wait = self.cert_lifetime / 2;
        loop {
            tokio::time::sleep(wait).await;
            match self.renew() {
                Ok(expires) => {
                    wait = self.cert_lifetime / 2;
                    let _ = self.audit(
                        "certificates-renewed",
                        serde_json::json!({ "identity": self.identity.uri(), "valid_secs": expires.as_secs() }),
                    );
                }
                Err(e) => {
                    wait = (self.cert_lifetime / 8).max(Duration::from_secs(1));
                    let message = format!(
                        "cannot renew the sandbox's escalation certificate ({e}); host escalation stops working when the current one expires"
                    );
                    let _ = self.audit(
                        "certificate-renewal-failed",
                        serde_json::json!({ "identity": self.identity.uri(), "error": e.to_string() }),
                    );
                    sessions.warn(&message);
                }
            }
        }
    }

    /// Issues a new client certificate (same key, so readers never see a
    /// mismatched pair) into the certs folder and a new server certificate
    /// for the next handshakes; gives their validity.
    pub fn renew(&self) -> Result<Duration, SetupError> {
        let mut client = self.client.lock().expect("lock");
        let renewed = self
            .anchor
            .renew_client(&self.identity, &client, self.cert_lifetime)?;
        renewed.write_to(&self.certs_dir)?;
        *client = renewed;
        let server_cert = self.anchor.issue_server(self.cert_lifetime)?;
        let acceptor = TlsAcceptor::from(self.anchor.server_config(&server_cert)?);
        *self.acceptor.lock().expect("lock") = acceptor;
        Ok(self.cert_lifetime)
    }

    fn audit(&self, kind: &'static str, data: serde_json::Value) -> Result<(), String> {
        self.audit.append(kind, data)
    }

    /// The coordinator starts its self-test of the sandbox: the one
    /// handshake without a client certificate it makes is its own probe,
    /// recorded with the self-test instead of as a refusal. Only the
    /// first such handshake is taken: an agent's in the same window is
    /// audited as ever (whichever is taken, the count of refusals audited
    /// is one less than the handshakes, never fewer).
    pub fn expect_selftest_probe(&self, for_at_most: Duration) {
        *self.probe.lock().unwrap_or_else(|e| e.into_inner()) = ProbeWindow {
            open: Some(Instant::now() + for_at_most),
            seen: false,
        };
    }

    /// Closes the window [`Self::expect_selftest_probe`] opened; true when
    /// the probe's refusal was seen. Waits up to `grace` for it (the probe
    /// got its alert just before the task here took its refusal).
    pub fn selftest_probe_seen(&self, grace: Duration) -> bool {
        let deadline = Instant::now() + grace;
        loop {
            let mut w = self.probe.lock().unwrap_or_else(|e| e.into_inner());
            if w.seen || Instant::now() >= deadline {
                let seen = w.seen;
                *w = ProbeWindow::default();
                return seen;
            }
            drop(w);
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Takes a refused handshake as the self-test's probe, if it may be.
    fn is_selftest_probe(&self, e: &server::AcceptError) -> bool {
        let mut w = self.probe.lock().unwrap_or_else(|e| e.into_inner());
        if w.open.is_some_and(|until| Instant::now() < until)
            && !w.seen
            && e.no_client_certificate()
        {
            w.seen = true;
            return true;
        }
        false
    }

    /// Audits a refusal at `stage` within the domain's [`RefusalLimit`],
    /// keeping only an [`excerpt`] of its `error`.
    fn refused(&self, stage: &'static str, error: &str, mut data: serde_json::Value) {
        let (audit_it, due) = self.refusals.refuse(stage, Instant::now());
        if let Some(aggregate) = due {
            let _ = self.audit("escalation-refused-aggregate", aggregate);
        }
        if audit_it {
            let (error, bytes) = excerpt(error);
            data["stage"] = stage.into();
            data["error"] = error.into();
            data["error_bytes"] = bytes.into();
            let _ = self.audit("escalation-refused", data);
        }
    }

    /// Audits the refusals counted but not yet audited: once their window
    /// has passed, or all of them at once with `now_anyway` (the domain
    /// is going down).
    pub fn flush_refusals(&self, now_anyway: bool) {
        if let Some(aggregate) = self.refusals.due(Instant::now(), now_anyway) {
            let _ = self.audit("escalation-refused-aggregate", aggregate);
        }
    }

    /// Takes one request from the session's rate budget.
    fn admit(&self, session: &str) -> Result<(), String> {
        let mut budgets = self.budgets.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let b = budgets
            .entry(session.to_string())
            .or_insert_with(|| Budget::new(&self.requests, now));
        if !b.take(&self.requests, now) {
            return Err(format!(
                "this session sent too many requests (at most {} at once, then {} a minute); nothing ran, try again later",
                self.requests.burst, self.requests.per_minute
            ));
        }
        Ok(())
    }

    /// Counts a request waiting for the session's human; `None` when the
    /// session already has its maximum waiting.
    fn enqueue(&self, session: &str) -> Option<PendingSlot<'_>> {
        let mut budgets = self.budgets.lock().unwrap_or_else(|e| e.into_inner());
        let b = budgets.get_mut(session)?;
        if b.pending >= self.requests.pending {
            return None;
        }
        b.pending += 1;
        Some(PendingSlot {
            server: self,
            session: session.to_string(),
        })
    }

    /// A command or justification as stored: whole when short, else its
    /// hash, length and a preview.
    fn stored(&self, text: &str) -> serde_json::Value {
        bounded(text, self.requests.stored_text)
    }

    async fn handle(&self, stream: tokio::net::UnixStream, sessions: Arc<dyn SessionDirectory>) {
        // mTLS and identity first: on failure the connection is dropped
        // before a byte of payload is read.
        // One deadline from accept to a decoded request, the TLS handshake
        // included: a connection that says nothing holds its slot no longer.
        let deadline = tokio::time::Instant::now() + REQUEST_DEADLINE;
        let acceptor = self.acceptor.lock().expect("lock").clone();
        let mut tls = match tokio::time::timeout_at(
            deadline,
            server::accept(&acceptor, stream, &self.identity),
        )
        .await
        {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                if !self.is_selftest_probe(&e) {
                    self.refused("tls", &e.to_string(), serde_json::json!({}));
                }
                return;
            }
            Err(_) => return,
        };
        let req =
            match tokio::time::timeout_at(deadline, protocol::read_request_async(&mut tls)).await {
                Ok(Ok(req)) => req,
                Ok(Err(e)) => {
                    self.refused("decode", &e.to_string(), serde_json::json!({}));
                    let _ = protocol::write_response_async(
                        &mut tls,
                        &Response::error("", format!("request refused: {e}")),
                    )
                    .await;
                    return;
                }
                Err(_) => return,
            };
        // While the human decides, a requester that hangs up (or writes
        // anything more) withdraws its request (decisions.md D10).
        let gone = async {
            let mut byte = [0u8; 1];
            let _ = tls.read(&mut byte).await;
        };
        let mut outcome = None;
        let mut response = self.judge(req, sessions.as_ref(), gone, &mut outcome).await;
        let _ = response.fit_to(MAX_RESPONSE_FRAME);
        let _ = protocol::write_response_async(&mut tls, &response).await;
        // What the command did is written after the answer: the one
        // durable commit the requester waits for is the decision's, before
        // the command ran.
        if let Some(outcome) = outcome {
            let _ = self.audit("escalation-result", outcome);
        }
    }

    /// Everything after decoding; returns the answer to send.
    /// A command that ran leaves its audit record in `outcome`, for the
    /// caller to write after the answer.
    async fn judge(
        &self,
        req: lazaret_escalate::Request,
        sessions: &dyn SessionDirectory,
        requester_gone: impl Future<Output = ()>,
        outcome: &mut Option<serde_json::Value>,
    ) -> Response {
        let id = req.request_id.clone();
        let refuse = |stage: &'static str, why: String| {
            self.refused(
                stage,
                &why,
                serde_json::json!({ "request_id": id, "session_id": req.session_id }),
            );
            Response::error(&id, format!("request refused: {why}"))
        };
        let Some(key) = sessions.key(&req.session_id) else {
            return refuse(
                "session",
                format!(
                    "session {} is not a live session of this domain",
                    req.session_id
                ),
            );
        };
        let verified =
            match signing::verify_request(&req, &VerifyContext::new(&key, self.identity.profile()))
            {
                Ok(v) => v,
                Err(e) => return refuse("signature", e.to_string()),
            };
        if let Err(why) = self.admit(&req.session_id) {
            return refuse("rate", why);
        }
        // A read here (no write, no fsync): the one commit below marks the
        // request seen, checking again, with its audit records.
        let replay_key = hex::encode(verified.replay_key());
        match self.store.seen(&replay_key) {
            Ok(false) => {}
            Ok(true) => {
                return refuse("replay", format!("request {id} was seen before (replay)"));
            }
            Err(e) => return refuse("store", e.to_string()),
        }
        let cwd = match protocol::map_cwd(
            &req.cwd,
            lazaret_escalate::WORKSPACE_DIR,
            &self.host_workspace,
        ) {
            Ok(c) => c,
            Err(e) => return refuse("cwd", e.to_string()),
        };
        // Opened now, beneath the workspace; the command runs in this
        // directory whatever the path names by the time it runs.
        // (Opened per request: in isolated mode the folder is created
        // after the socket.)
        let root = match WorkspaceRoot::open(&self.host_workspace) {
            Ok(r) => r,
            Err(e) => {
                return refuse(
                    "cwd",
                    format!(
                        "the workspace {} cannot be opened: {e}",
                        self.host_workspace.display()
                    ),
                );
            }
        };
        let relative = cwd
            .strip_prefix(&self.host_workspace)
            .unwrap_or(Path::new(""));
        let pinned = match root.pin(relative) {
            Ok(p) => p,
            Err(e) => return refuse("cwd", e.to_string()),
        };
        let decision = classify::classify_with(&req.command, &self.rules, &root.probe(&pinned));
        // A request that cannot be audited does not run. Its request
        // record, its row, its replay mark and (auto-approved) its decision
        // are one durable commit before anything runs.
        let mut batch = Batch {
            first_sighting: Some(replay_key),
            requests: vec![(
                id.clone(),
                serde_json::json!({
                    "session_id": req.session_id, "command": self.stored(&req.command),
                    "cwd": req.cwd, "justification": self.stored(&req.justification),
                }),
            )],
            decisions: Vec::new(),
            sessions: Vec::new(),
            audit: vec![(
                "escalation-request",
                serde_json::json!({
                    "request_id": id, "session_id": req.session_id, "profile": req.profile,
                    "cwd": req.cwd, "host_cwd": pinned.host, "command": self.stored(&req.command),
                    "justification": self.stored(&req.justification), "timestamp": req.timestamp,
                    "classification": describe(&decision),
                }),
            )],
        };
        if matches!(decision, Decision::AutoApprove { .. }) {
            let record = self.decision_record(&id, "auto-approved", &req.command, None);
            batch.decisions.push((id.clone(), record.clone()));
            batch.audit.push(("escalation-decision", record));
        }
        match self.audit.commit(batch) {
            Ok(true) => {}
            Ok(false) => {
                return refuse("replay", format!("request {id} was seen before (replay)"));
            }
            Err(e) => {
                return Response::error(
                    &id,
                    format!(
                        "request refused: it could not be written to the audit log ({e}); nothing ran"
                    ),
                );
            }
        }
        match decision {
            Decision::AutoApprove { argv, program_path } => {
                let network = self.rules.matching(&argv).is_some_and(|m| m.network);
                let confinement = match root.ruleset(network).and_then(|ruleset| {
                    Ok(Confinement {
                        ruleset,
                        seccomp: confine::seccomp(network)?,
                    })
                }) {
                    Ok(c) => c,
                    Err(e) => {
                        return Response::error(
                            &id,
                            format!(
                                "the auto-approved command was not run: its confinement could not be prepared ({e})"
                            ),
                        );
                    }
                };
                self.run(
                    &id,
                    Exec::Direct {
                        program: program_path,
                        args: argv[1..].to_vec(),
                    },
                    &pinned,
                    Some(confinement),
                    None,
                    outcome,
                )
                .await
            }
            Decision::NeedsHuman {
                reason,
                via_shell,
                argv,
            } => {
                let Some(_slot) = self.enqueue(&req.session_id) else {
                    let why = format!(
                        "this session already has {} requests waiting for its human; wait for an answer before sending more (nothing ran)",
                        self.requests.pending
                    );
                    let _ = self.decided(&id, "denied", &req.command, Some(&why));
                    return Response::denied(&id, why);
                };
                let prompt = Prompt {
                    request_id: id.clone(),
                    session_id: req.session_id.clone(),
                    profile: req.profile.clone(),
                    // The host folder it will run in, as pinned now.
                    cwd: pinned.host.display().to_string(),
                    justification: req.justification.clone(),
                    command: req.command.clone(),
                    via_shell,
                    reason: reason.to_string(),
                    reads: Vec::new(),
                    review: Vec::new(),
                };
                let (reads, review) = self.agent_code_read(argv.as_deref(), &req.command).await;
                let prompt = Prompt {
                    reads,
                    review,
                    ..prompt
                };
                let Some(answer) = sessions.ask(prompt) else {
                    let _ = self.decided(
                        &id,
                        "denied",
                        &req.command,
                        Some("no human is attached to this session"),
                    );
                    return Response::denied(
                        &id,
                        format!(
                            "no human is attached to this session (it has no terminal), so nothing that needs approval can run; this one needs approval because the command {reason}"
                        ),
                    );
                };
                let verdict = tokio::select! {
                    // A decision that has arrived is the human's, even if
                    // the requester went at the same moment (an abort ends
                    // the workbench's sessions right after deciding).
                    biased;
                    v = answer => v.unwrap_or(Verdict::Deny {
                        reason: Some("the session ended before a decision".into()),
                    }),
                    () = requester_gone => {
                        let why = "the requester went away before a decision";
                        sessions.withdraw(&req.session_id, &id, why);
                        // Nothing runs either way; a lost record only loses the note.
                        let _ = self.decided(&id, "withdrawn", &req.command, Some(why));
                        return Response::denied(&id, why);
                    }
                };
                let response = match verdict {
                    Verdict::Approve => {
                        if let Err(e) = self.decided(&id, "approved", &req.command, None) {
                            return Response::error(&id, e);
                        }
                        match exec_for(&req.command, via_shell, argv) {
                            Ok(exec) => self.run(&id, exec, &pinned, None, None, outcome).await,
                            Err(e) => Response::error(&id, e),
                        }
                    }
                    Verdict::Edit { command } => {
                        // Re-checked: the edit decides shell or execve anew.
                        let (via_shell, argv) = match classify::classify(&command, &self.rules) {
                            Decision::AutoApprove { argv, .. } => (false, Some(argv)),
                            Decision::NeedsHuman {
                                via_shell, argv, ..
                            } => (via_shell, argv),
                        };
                        if let Err(e) = self.decided(&id, "edited", &command, None) {
                            return Response::error(&id, e);
                        }
                        match exec_for(&command, via_shell, argv) {
                            Ok(exec) => {
                                self.run(&id, exec, &pinned, None, Some(command), outcome)
                                    .await
                            }
                            Err(e) => Response::error(&id, e),
                        }
                    }
                    Verdict::Deny { reason } => {
                        let reason = reason
                            .filter(|r| !r.trim().is_empty())
                            .unwrap_or_else(|| "denied by the human".into());
                        let _ = self.decided(&id, "denied", &req.command, Some(&reason));
                        return Response::denied(&id, reason);
                    }
                    Verdict::Abort => {
                        let _ = self.decided(
                            &id,
                            "aborted",
                            &req.command,
                            Some("the human aborted the session"),
                        );
                        return Response::denied(&id, "the human aborted the session");
                    }
                };
                sessions.tell(&req.session_id, Outcome::of(&id, &response));
                response
            }
        }
    }

    /// The agent's files the command would execute (issue 39) and, when
    /// there are any, the review's findings; found off the async workers:
    /// it reads files and runs host git.
    async fn agent_code_read(
        &self,
        argv: Option<&[String]>,
        command: &str,
    ) -> (Vec<String>, Vec<String>) {
        let Some(layout) = self.layout.clone() else {
            return (Vec::new(), Vec::new());
        };
        let (argv, command) = (argv.map(<[String]>::to_vec), command.to_string());
        tokio::task::spawn_blocking(move || {
            let reads =
                crate::git_sentry::reads::agent_code_read(&layout, argv.as_deref(), &command);
            let review = if reads.is_empty() {
                Vec::new()
            } else {
                crate::git_sentry::reads::review_lines(&layout)
            };
            (reads, review)
        })
        .await
        .unwrap_or_default()
    }

    /// Records a decision; an error (the audit log could not be written)
    /// means the command must not run, and says so.
    fn decided(
        &self,
        id: &str,
        decision: &str,
        command: &str,
        reason: Option<&str>,
    ) -> Result<(), String> {
        let record = self.decision_record(id, decision, command, reason);
        let batch = Batch {
            decisions: vec![(id.to_string(), record.clone())],
            audit: vec![("escalation-decision", record)],
            ..Batch::default()
        };
        self.audit.commit(batch).map(|_| ()).map_err(|e| {
            format!("the decision could not be written to the audit log ({e}); nothing ran")
        })
    }

    fn decision_record(
        &self,
        id: &str,
        decision: &str,
        command: &str,
        reason: Option<&str>,
    ) -> serde_json::Value {
        // The exact argv when short; a hash and preview otherwise.
        let argv = if command.len() <= self.requests.stored_text {
            serde_json::json!(classify::split(command).ok())
        } else {
            serde_json::Value::Null
        };
        serde_json::json!({
            "request_id": id, "decision": decision, "command": self.stored(command),
            "argv": argv, "reason": reason,
        })
    }

    async fn run(
        &self,
        id: &str,
        exec: Exec,
        cwd: &PinnedDir,
        confinement: Option<Confinement>,
        edited: Option<String>,
        outcome: &mut Option<serde_json::Value>,
    ) -> Response {
        let started = Instant::now();
        let out = execute(&exec, cwd, confinement, self.limits).await;
        let resp = match out {
            Ok(o) => {
                *outcome = Some(serde_json::json!({
                        "request_id": id, "exit_code": o.code, "timed_out": o.timed_out,
                        "stdout_sha256": sha256(&o.stdout), "stderr_sha256": sha256(&o.stderr),
                        "stdout_bytes": o.stdout.len(), "stderr_bytes": o.stderr.len(),
                        "truncated": o.truncated, "millis": started.elapsed().as_millis() as u64,
                }));
                let mut stderr = String::from_utf8_lossy(&o.stderr).into_owned();
                if o.timed_out {
                    stderr.push_str(&format!(
                        "\nlazaret: killed after {} s (the host's time limit)\n",
                        self.limits.timeout.as_secs()
                    ));
                }
                Response::approved(id, o.code, String::from_utf8_lossy(&o.stdout), stderr)
                    .with_truncated(o.truncated)
            }
            Err(e) => {
                *outcome = Some(serde_json::json!({ "request_id": id, "error": e }));
                Response::error(id, format!("the approved command could not run: {e}"))
            }
        };
        match edited {
            Some(c) if resp.approved => resp.with_edited_command(c),
            _ => resp,
        }
    }
}

/// Frees a session's pending slot when its request is answered.
struct PendingSlot<'a> {
    server: &'a EscalationServer,
    session: String,
}

impl Drop for PendingSlot<'_> {
    fn drop(&mut self) {
        let mut budgets = self
            .server
            .budgets
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(b) = budgets.get_mut(&self.session) {
            b.pending = b.pending.saturating_sub(1);
        }
    }
}

/// `text` whole when at most `max` bytes, else its SHA-256, length and
/// the first `max` bytes (cut at a character boundary).
pub fn bounded(text: &str, max: usize) -> serde_json::Value {
    super::bounded::text(text, max)
}

fn describe(d: &Decision) -> serde_json::Value {
    match d {
        Decision::AutoApprove { argv, program_path } => {
            serde_json::json!({ "auto_approve": true, "argv": argv, "program": program_path })
        }
        Decision::NeedsHuman {
            reason, via_shell, ..
        } => {
            serde_json::json!({ "auto_approve": false, "reason": reason.to_string(), "via_shell": via_shell })
        }
    }
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// How an approved command runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exec {
    /// execve, no shell.
    Direct { program: PathBuf, args: Vec<String> },
    /// The host shell, only ever after a human said yes.
    Shell { command: String },
}

fn exec_for(command: &str, via_shell: bool, argv: Option<Vec<String>>) -> Result<Exec, String> {
    if via_shell {
        return Ok(Exec::Shell {
            command: command.to_string(),
        });
    }
    let argv = argv.unwrap_or_default();
    let Some(program) = argv.first() else {
        return Err("the command is empty".into());
    };
    let program = if program.contains('/') {
        PathBuf::from(program)
    } else {
        classify::resolve_program(program)
            .ok_or_else(|| format!("`{program}` is not on the trusted PATH {}", trusted_path()))?
    };
    Ok(Exec::Direct {
        program,
        args: argv[1..].to_vec(),
    })
}

/// What an approved command did.
#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub truncated: bool,
    pub timed_out: bool,
}

/// Runs `exec` in the pinned `cwd` (by descriptor), under `confinement`
/// when given, with a scrubbed environment, a time limit and output caps;
/// the whole process group is killed at the limit.
pub async fn execute(
    exec: &Exec,
    cwd: &PinnedDir,
    confinement: Option<Confinement>,
    limits: ExecLimits,
) -> Result<Output, String> {
    let mut cmd = match exec {
        Exec::Direct { program, args } => {
            let mut c = tokio::process::Command::new(program);
            c.args(args);
            c
        }
        Exec::Shell { command } => {
            let mut c = tokio::process::Command::new("/bin/sh");
            c.arg("-c").arg(command);
            c
        }
    };
    let home = std::env::var("HOME").unwrap_or_else(|_| "/".into());
    let confined = confinement.is_some();
    confine::prepare(&mut cmd, cwd, confinement).map_err(|e| e.to_string())?;
    cmd.env_clear()
        .env("PATH", trusted_path())
        .env("HOME", home)
        .env("LANG", "C.UTF-8")
        .env("TERM", "dumb")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| match e.raw_os_error() {
        Some(nix::libc::EPERM) if confined => {
            "the confinement (Landlock, seccomp) could not be applied, so the command did not run"
                .to_string()
        }
        Some(nix::libc::ESTALE) if confined => {
            "the workspace changed while the command was being started (a `.git` or its working folder was replaced since it was checked), so it did not run; ask again".to_string()
        }
        _ => e.to_string(),
    })?;
    let pid = child.id();
    let out = child.stdout.take().ok_or("no stdout")?;
    let err = child.stderr.take().ok_or("no stderr")?;
    let cap = limits.max_output;
    let read_capped = |mut r: Box<dyn tokio::io::AsyncRead + Unpin + Send>| async move {
        let mut kept = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut truncated = false;
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = cap.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                    truncated |= n > room;
                }
            }
        }
        (kept, truncated)
    };
    let stdout_task = tokio::spawn(read_capped(Box::new(out)));
    let stderr_task = tokio::spawn(read_capped(Box::new(err)));
    let (status, timed_out) = match tokio::time::timeout(limits.timeout, child.wait()).await {
        Ok(s) => (s.map_err(|e| e.to_string())?, false),
        Err(_) => {
            if let Some(pid) = pid {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            (child.wait().await.map_err(|e| e.to_string())?, true)
        }
    };
    let (stdout, t1) = stdout_task.await.map_err(|e| e.to_string())?;
    let (stderr, t2) = stderr_task.await.map_err(|e| e.to_string())?;
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    Ok(Output {
        code,
        stdout,
        stderr,
        truncated: t1 || t2,
        timed_out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The token bucket of decisions.md D9, on a clock the test sets: a
    /// burst at once, then `per_minute` a minute, never more than the burst
    /// saved up.
    #[test]
    fn a_session_sends_its_burst_then_its_rate() {
        let limits = RequestLimits {
            burst: 3,
            per_minute: 6,
            ..RequestLimits::default()
        };
        let t0 = Instant::now();
        let mut b = Budget::new(&limits, t0);
        for i in 0..3 {
            assert!(b.take(&limits, t0), "request {i} of the burst");
        }
        assert!(!b.take(&limits, t0), "a fourth at once");
        // Six a minute: one more after ten seconds, not before.
        assert!(!b.take(&limits, t0 + Duration::from_secs(9)));
        assert!(b.take(&limits, t0 + Duration::from_millis(10_500)));
        assert!(!b.take(&limits, t0 + Duration::from_millis(10_600)));
        // An hour idle saves up the burst, no more.
        let later = t0 + Duration::from_secs(3_600);
        for i in 0..3 {
            assert!(b.take(&limits, later), "request {i} after an hour");
        }
        assert!(!b.take(&limits, later), "more than the burst saved up");
        // A refused request takes nothing: the next is let through when
        // its token has come.
        assert!(!b.take(&limits, later + Duration::from_secs(5)));
        assert!(b.take(&limits, later + Duration::from_secs(10)));
    }

    #[test]
    fn refusals_are_audited_one_by_one_then_counted_by_stage() {
        let t0 = Instant::now();
        let limit = RefusalLimit::new(t0);
        for _ in 0..REFUSALS_AUDITED {
            assert_eq!(limit.refuse("decode", t0), (true, None));
        }
        for i in 0..500 {
            let stage = if i % 2 == 0 { "tls" } else { "decode" };
            assert_eq!(limit.refuse(stage, t0), (false, None));
        }
        // Not before the window has passed...
        assert_eq!(limit.due(t0 + REFUSAL_WINDOW / 2, false), None);
        // ...then one record counts them, and a new window starts.
        let later = t0 + REFUSAL_WINDOW;
        let (audit_it, due) = limit.refuse("tls", later);
        assert!(audit_it);
        let due = due.expect("the aggregate is due");
        assert_eq!(due["refused"], 500);
        assert_eq!(
            due["by_stage"],
            serde_json::json!({ "decode": 250, "tls": 250 })
        );
        assert!(
            due["message"]
                .as_str()
                .unwrap()
                .starts_with("500 more escalation requests refused in the last 60 s, by stage: decode 250, tls 250"),
            "{due}"
        );
        // Nothing counted, nothing to say; forced (the domain goes down),
        // what was counted is said at once.
        assert_eq!(limit.due(later + REFUSAL_WINDOW, false), None);
        let now = later + REFUSAL_WINDOW;
        for _ in 0..=REFUSALS_AUDITED {
            limit.refuse("rate", now);
        }
        assert_eq!(
            limit.due(now, true).unwrap()["by_stage"],
            serde_json::json!({ "rate": 1 })
        );
        assert_eq!(limit.due(now, true), None);
    }

    #[test]
    fn a_refusal_keeps_a_short_visible_excerpt() {
        let hostile = format!(
            "field `\u{1b}]52;c;{}\u{7}` is invalid",
            "é".repeat(1 << 19)
        );
        let (text, bytes) = excerpt(&hostile);
        assert_eq!(bytes, hostile.len());
        assert!(text.starts_with("field `␛]52;c;é"), "{text}");
        assert!(!text.chars().any(char::is_control), "{text}");
        // At most the excerpt's bytes of the agent's text (a placeholder
        // takes a few bytes for one).
        assert!(text.len() <= REFUSAL_EXCERPT + 8, "{}", text.len());
        assert_eq!(excerpt("short").0, "short");
    }
}
