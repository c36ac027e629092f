//! The Session Coordinator process: boots the domain, serves the control
//! socket, counts sessions, and tears everything down when the last one
//! leaves (or on SIGINT/SIGTERM, or `lazaret down`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;

use super::bounds::{self, Budget, Emergency, Gate};
use super::confine;
use super::escalation::{
    AuditLog, EscalationServer, ExecLimits, Outcome, Prompt, RequestLimits, SessionDirectory,
    Setup, ToHuman, Verdict,
};
use super::hosted::{Attachments, HostEvent, Hosted};
use super::protocol::{
    ClientMsg, CoordMsg, DomainStatus, FrameError, FrameReader, PROTOCOL_VERSION, SessionInfo,
    StoppedBy, read_frame, write_frame,
};
use super::store::{Store, Verification};
use crate::config::ResolvedProfile;
use crate::engine::{Engine, Sandbox, Step};
use crate::git_sentry::sync::Propagator;
use crate::host::HostEnv;
use lazaret_escalate::ed25519_dalek::VerifyingKey;
use tokio::sync::{mpsc, oneshot};

/// With nobody attached this long after start, the coordinator gives up
/// (the session that started it died before connecting).
const ORPHAN_DEADLINE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Boot {
    Booting,
    Ready,
    Failed(String),
}

struct Shared {
    engine: Engine,
    resolved: ResolvedProfile,
    store: Arc<Store>,
    started: Instant,
    boot: watch::Receiver<Boot>,
    /// Every boot step so far: the watch above keeps only the latest, and
    /// a session shows them all, whenever it attached.
    boot_log: Mutex<Vec<Step>>,
    sandbox: Mutex<Option<Sandbox>>,
    /// Live sessions that hold the domain up, by connection number.
    sessions: Mutex<BTreeMap<u64, LiveSession>>,
    /// Escalation requests waiting for a human, by request id.
    pending: Mutex<BTreeMap<String, PendingPrompt>>,
    /// Connections watching the approval inbox (`Inbox`): told of every
    /// pending request and of its end.
    inbox: Mutex<BTreeMap<u64, mpsc::UnboundedSender<CoordMsg>>>,
    /// Counts changes of what `status` shows: inbox watchers are sent the
    /// domain's status after each (never on a timer).
    changes: watch::Sender<u64>,
    /// Fires once: tear down now.
    shutdown: watch::Sender<bool>,
    /// Who asked for the teardown (`lazaret down`), told to every session.
    stopped_by: Mutex<Option<StoppedBy>>,
    /// Limits this host does not apply (filled at boot).
    limit_gaps: Mutex<Vec<String>>,
    /// How many connections each listener may hold (bounds).
    budget: Budget,
    /// Descriptors freed when supervision is lost, to stop the sandbox.
    emergency: Emergency,
    /// The Escalation Socket, once open: a self-test's probe of it is
    /// expected there (`doctor --sandbox`).
    escalation: std::sync::OnceLock<Arc<EscalationServer>>,
    /// Held while a live policy change is applied and audited: one at a
    /// time, so two changes at once never lose one, and the audit log has
    /// them in the order they took effect.
    policy_change: tokio::sync::Mutex<()>,
    /// What the watchdog and the layer watch last measured (bytes).
    memory_used: Mutex<Option<u64>>,
    layer_used: Mutex<Option<u64>>,
    /// The sidecar's refusals as its log last said.
    egress_refused: Mutex<Option<u64>>,
    /// Sessions that live in the domain (decisions.md D14), once the host
    /// socket is open.
    hosted: std::sync::OnceLock<Arc<Hosted>>,
}

/// A connected session that holds the domain up.
struct LiveSession {
    info: SessionInfo,
    key: Option<VerifyingKey>,
    /// Where prompts and outcomes for its human go; `None` when it has no
    /// terminal.
    human: Option<mpsc::UnboundedSender<ToHuman>>,
}

/// A prompt waiting for its human: it belongs to the connection of the
/// session that asked, and dies with it. That connection decides it, or
/// (hosted sessions, the approval inbox) any of the user's clients that
/// was shown it.
struct PendingPrompt {
    conn: u64,
    answer: oneshot::Sender<Verdict>,
    /// What the inbox shows of it.
    shown: CoordMsg,
}

/// The coordinator's sessions, as the Escalation Socket sees them.
struct Directory(Arc<Shared>);

impl SessionDirectory for Directory {
    fn key(&self, session_id: &str) -> Option<VerifyingKey> {
        let sessions = self.0.sessions.lock().expect("lock");
        sessions
            .values()
            .find(|s| s.info.session_id == session_id)
            .and_then(|s| s.key)
    }

    fn ask(&self, prompt: Prompt) -> Option<oneshot::Receiver<Verdict>> {
        // Under the sessions lock: a session that leaves meanwhile either
        // is not found here or finds this prompt when it denies its own.
        let sessions = self.0.sessions.lock().expect("lock");
        let (conn, tx, asked_by) = sessions
            .iter()
            .find(|(_, s)| s.info.session_id == prompt.session_id)
            .and_then(|(conn, s)| Some((*conn, s.human.clone()?, s.info.purpose.clone())))?;
        let (answer_tx, answer_rx) = oneshot::channel();
        let hosted = conn
            .checked_sub(super::hosted::CONN_BASE)
            .and_then(|n| u32::try_from(n).ok());
        let shown = CoordMsg::Pending {
            prompt: prompt.clone(),
            asked_by,
            hosted,
        };
        self.0.tell_inbox(&shown, None);
        self.0.pending.lock().expect("lock").insert(
            prompt.request_id.clone(),
            PendingPrompt {
                conn,
                answer: answer_tx,
                shown,
            },
        );
        tx.send(ToHuman::Prompt(prompt)).ok()?;
        Some(answer_rx)
    }

    fn withdraw(&self, session_id: &str, request_id: &str, reason: &str) {
        if self
            .0
            .pending
            .lock()
            .expect("lock")
            .remove(request_id)
            .is_some()
        {
            self.0.settled(request_id, reason, None);
        }
        let sessions = self.0.sessions.lock().expect("lock");
        if let Some(tx) = sessions
            .values()
            .find(|s| s.info.session_id == session_id)
            .and_then(|s| s.human.as_ref())
        {
            let _ = tx.send(ToHuman::Withdrawn {
                request_id: request_id.to_string(),
                reason: reason.to_string(),
            });
        }
    }

    fn tell(&self, session_id: &str, outcome: Outcome) {
        // The inbox shows what became of what it may have answered.
        self.0.tell_inbox(
            &CoordMsg::Outcome {
                outcome: outcome.clone(),
            },
            None,
        );
        let sessions = self.0.sessions.lock().expect("lock");
        if let Some(tx) = sessions
            .values()
            .find(|s| s.info.session_id == session_id)
            .and_then(|s| s.human.as_ref())
        {
            let _ = tx.send(ToHuman::Outcome(outcome));
        }
    }

    fn warn(&self, message: &str) {
        log(message);
        for tx in self
            .0
            .sessions
            .lock()
            .expect("lock")
            .values()
            .filter_map(|s| s.human.as_ref())
        {
            let _ = tx.send(ToHuman::Warning(message.to_string()));
        }
    }
}

/// How long the status pushed to inbox watchers waits for the changes that
/// come with the first (a session's start is several).
const STATUS_SETTLE: Duration = Duration::from_millis(200);

/// One line of the coordinator's log (coordinator::log).
fn log(msg: &str) {
    tracing::info!("{msg}");
}

impl Shared {
    fn status(&self) -> DomainStatus {
        let sandbox = self.sandbox.lock().expect("lock").clone();
        let anchor = &self.resolved.domain;
        DomainStatus {
            hash: anchor.hash().to_string(),
            profile: anchor.name(),
            workspace: anchor.workspace().display().to_string(),
            sandbox: anchor.sandbox_name(),
            runtime: sandbox
                .as_ref()
                .map_or(self.resolved.profile.runtime.as_str(), |s| {
                    s.runtime.as_str()
                })
                .to_string(),
            gvisor: sandbox.as_ref().is_some_and(Sandbox::is_gvisor),
            workspace_mode: sandbox
                .as_ref()
                .map_or("?", |s| s.layout.mode.as_str())
                .to_string(),
            // A client attached to a hosted session is a view of it, not a
            // session of its own.
            sessions: {
                let views = self
                    .hosted
                    .get()
                    .map(|h| h.viewer_conns())
                    .unwrap_or_default();
                self.sessions
                    .lock()
                    .expect("lock")
                    .iter()
                    .filter(|(conn, _)| !views.contains(conn))
                    .map(|(_, s)| s.info.clone())
                    .collect()
            },
            uptime: self.started.elapsed().as_secs(),
            coordinator_pid: std::process::id(),
            degraded: sandbox.as_ref().and_then(|_| {
                crate::engine::selftest::degraded(&anchor.domain_root(&self.engine.data_root))
            }),
            limits: self.resolved.profile.limits.summary(),
            limit_gaps: self.limit_gaps.lock().expect("lock").clone(),
            memory_used: *self.memory_used.lock().expect("lock"),
            memory_limit: Some(self.resolved.profile.limits.memory),
            layer_used: *self.layer_used.lock().expect("lock"),
            // The agent's: the self-tests' own refusals left out.
            egress_refused: self.egress_refused.lock().expect("lock").map(|total| {
                total.saturating_sub(crate::engine::selftest::refusals_made(
                    &anchor.domain_root(&self.engine.data_root),
                ))
            }),
            hosted: self.hosted.get().map(|h| h.list()).unwrap_or_default(),
            orphaned: false,
            audit_break: self.store.chain_break().cloned(),
        }
    }

    async fn audit(&self, kind: &'static str, data: serde_json::Value) {
        let store = self.store.clone();
        let r = tokio::task::spawn_blocking(move || store.append(kind, data)).await;
        if let Ok(Err(e)) | Err(e) = r.map_err(|e| super::store::StoreError::Corrupt(e.to_string()))
        {
            log(&format!("audit write failed: {e}"));
        }
    }
}

/// Runs the coordinator for `resolved` until the domain is torn down.
/// Blocks; builds its own tokio runtime.
pub fn run(
    engine: Engine,
    resolved: ResolvedProfile,
    env: &dyn HostEnv,
    control_socket: PathBuf,
    owner_lock: &std::path::Path,
    escalation: Option<crate::config::EscalationConfig>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    // Our own session: no controlling terminal, no signals from the shell
    // that started us.
    let _ = nix::unistd::setsid();
    let domain_root = resolved.domain.domain_root(&engine.data_root);
    std::fs::create_dir_all(&domain_root)
        .with_context(|| format!("cannot create {}", domain_root.display()))?;
    // `domains list` names a stopped domain by this record.
    let _ = crate::domain::record_anchor(&domain_root, &resolved.domain);
    let log_path = domain_root.join("coordinator.log");
    super::log::init(&log_path)
        .with_context(|| format!("cannot open the log {}", log_path.display()))?;
    log(&format!(
        "coordinator pid {} for domain {}",
        std::process::id(),
        resolved.domain.hash()
    ));
    // Descriptors first: the agent's connections are bounded within the
    // limit, leaving room for supervision.
    let limit = match bounds::raise_descriptor_limit() {
        Ok(d) => {
            if d.soft != d.was {
                log(&format!(
                    "descriptor limit raised from {} to {}",
                    d.was, d.soft
                ));
            }
            d.soft
        }
        Err(e) => {
            log(&e);
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
                .map_or(1024, |(soft, _)| soft)
        }
    };
    let budget = Budget::for_limit(limit);
    log(&format!(
        "at most {} escalation and {} control connections at once; {} of {limit} descriptors kept for supervision",
        budget.escalation, budget.control, budget.reserve
    ));
    // One coordinator per domain at a time: a predecessor may still be
    // tearing down (it holds this lock until it exits, and the store).
    let _owner = wait_for_owner_lock(owner_lock)?;
    let store = Arc::new(Store::open(&domain_root.join("state.redb"))?);
    if let Some(b) = store.chain_break() {
        // Said at every start while the store holds the break: `status`
        // and the workbench show it too (DomainStatus::audit_break).
        log(&format!(
            "{b} (see `lazaret audit --verify`; move {} aside to start an unbroken log)",
            store.path().display()
        ));
    }
    // The audit store and log are the user's alone (0700/0600).
    engine.secure_domain(&resolved.domain);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // The environment is read now, on this thread; the engine needs it later.
    let env_snapshot = crate::host::FixedEnv {
        vars: ["TERM", "TERMINFO", "TERMINFO_DIRS", "HOME"]
            .iter()
            .filter_map(|k| env.var(k).map(|v| (k.to_string(), v)))
            .collect(),
        passwd_home: env.passwd_home(),
    };
    rt.block_on(serve(
        engine,
        resolved,
        store,
        env_snapshot,
        control_socket,
        escalation,
        budget,
    ))
}

/// How long a new coordinator waits for its predecessor's teardown.
const OWNER_DEADLINE: Duration = Duration::from_secs(60);

fn wait_for_owner_lock(path: &std::path::Path) -> anyhow::Result<nix::fcntl::Flock<std::fs::File>> {
    let deadline = Instant::now() + OWNER_DEADLINE;
    let mut said = false;
    loop {
        if let Some(g) = super::lock::try_exclusive(path)? {
            return Ok(g);
        }
        if !said {
            log("waiting for the previous coordinator of this domain to finish");
            said = true;
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "the previous coordinator of this domain still runs after {} s (it holds {})",
                OWNER_DEADLINE.as_secs(),
                path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

async fn serve(
    engine: Engine,
    resolved: ResolvedProfile,
    store: Arc<Store>,
    env: crate::host::FixedEnv,
    control_socket: PathBuf,
    escalation: Option<crate::config::EscalationConfig>,
    budget: Budget,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let _ = std::fs::remove_file(&control_socket);
    let listener = UnixListener::bind(&control_socket).with_context(|| {
        format!(
            "cannot bind the control socket {}",
            control_socket.display()
        )
    })?;
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&control_socket, std::fs::Permissions::from_mode(0o600));
    }
    log(&format!("listening on {}", control_socket.display()));
    let (boot_tx, boot_rx) = watch::channel(Boot::Booting);
    let (shutdown_tx, mut shutdown_rx) = watch::channel(false);
    let changes = watch::channel(0u64).0;
    let shared = Arc::new(Shared {
        engine,
        resolved,
        store,
        started: Instant::now(),
        boot: boot_rx,
        boot_log: Mutex::new(vec![Step::Starting]),
        sandbox: Mutex::new(None),
        sessions: Mutex::new(BTreeMap::new()),
        pending: Mutex::new(BTreeMap::new()),
        inbox: Mutex::new(BTreeMap::new()),
        changes: changes.clone(),
        shutdown: shutdown_tx,
        stopped_by: Mutex::new(None),
        limit_gaps: Mutex::new(Vec::new()),
        budget,
        emergency: Emergency::open(),
        escalation: std::sync::OnceLock::new(),
        policy_change: tokio::sync::Mutex::new(()),
        memory_used: Mutex::new(None),
        egress_refused: Mutex::new(None),
        layer_used: Mutex::new(None),
        hosted: std::sync::OnceLock::new(),
    });
    shared
        .audit(
            "coordinator-start",
            serde_json::json!({ "pid": std::process::id() }),
        )
        .await;

    // The Escalation Socket exists before the sandbox starts.
    let escalation_task = match &escalation {
        Some(cfg) => {
            Some(start_escalation(&shared, cfg).context("cannot open the Escalation Socket")?)
        }
        None => None,
    };

    // The Session Host's socket too: the sandbox sees the folder as it was
    // when it started.
    {
        let anchor = &shared.resolved.domain;
        let dir = anchor.escalation_dir(&shared.engine.socket_dir);
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let (hosted, mut events) = Hosted::open(
            &dir,
            &anchor.certs_dir(&shared.engine.rundir),
            &anchor.domain_root(&shared.engine.data_root),
            shared.changes.clone(),
        )
        .with_context(|| format!("cannot open the Session Host's socket in {}", dir.display()))?;
        let weak = Arc::downgrade(&shared);
        hosted.set_taken(Box::new(move |id: &str| {
            weak.upgrade().is_some_and(|s| {
                s.sessions
                    .lock()
                    .expect("lock")
                    .values()
                    .any(|l| l.info.session_id == id)
            })
        }));
        let _ = shared.hosted.set(hosted);
        let shared = shared.clone();
        tokio::spawn(async move {
            while let Some(e) = events.recv().await {
                match e {
                    HostEvent::Ended {
                        id,
                        session_id,
                        code,
                    } => shared.hosted_ended(id, &session_id, Some(code)).await,
                    HostEvent::Adopted(started) => shared.hosted_adopted(*started).await,
                    HostEvent::Refused(message) => {
                        log(&message);
                        shared
                            .audit(
                                "session-host-refused",
                                serde_json::json!({ "message": message }),
                            )
                            .await;
                    }
                }
            }
        });
    }

    // The self-test probes the Escalation Socket without a certificate.
    let probed = escalation_task
        .as_ref()
        .map(|(_, server, _)| server.clone());
    if let Some(server) = &probed {
        let _ = shared.escalation.set(server.clone());
    }
    // Boot on the blocking pool, streaming steps to waiting sessions.
    let (stop_sync_tx, stop_sync_rx) = std::sync::mpsc::channel::<()>();
    let (stop_watch_tx, stop_watch_rx) = std::sync::mpsc::channel::<()>();
    {
        let shared = shared.clone();
        tokio::spawn(async move {
            let s2 = shared.clone();
            let tx = boot_tx.clone();
            let result = tokio::task::spawn_blocking(move || {
                // `podman info` (slow) beside the boot, which asks for the
                // same answer only when it starts the sandbox (cached).
                let s3 = s2.clone();
                std::thread::spawn(move || {
                    let host = s3.engine.host_support();
                    let profile = &s3.resolved.profile;
                    let gaps = crate::engine::limits::Enforcement::of(
                        &profile.limits,
                        profile.runtime,
                        &host,
                    )
                    .gaps(&host);
                    for g in &gaps {
                        log(g);
                    }
                    *s3.limit_gaps.lock().expect("lock") = gaps;
                });
                if let Some(server) = &probed {
                    // Open for the whole start; closed right after it.
                    server.expect_selftest_probe(Duration::from_secs(24 * 3600));
                }
                let up = s2.engine.up(&s2.resolved, &env, &mut |step| {
                    // Logged before the wake-up, so a woken session finds it.
                    s2.boot_log.lock().expect("lock").push(step);
                    let _ = tx.send(Boot::Booting);
                });
                let grace = if up.is_ok() {
                    super::escalation::PROBE_GRACE
                } else {
                    Duration::ZERO
                };
                let probe = probed
                    .as_ref()
                    .map(|server| server.selftest_probe_seen(grace));
                up.map(|sandbox| (sandbox, probe))
            })
            .await;
            match result {
                Ok(Ok((sandbox, probe))) => {
                    log(&format!(
                        "domain up: {} under {}",
                        sandbox.name,
                        sandbox.runtime.as_str()
                    ));
                    if let Some(p) = Propagator::for_layout(&sandbox.layout) {
                        std::thread::spawn(move || {
                            let r = p.watch(&stop_sync_rx, &mut |r| match r {
                                Ok(Some(oid)) => log(&format!("{} -> {oid}", p.branch)),
                                Ok(None) => {}
                                Err(e) => log(&format!("branch sync failed: {e}")),
                            });
                            if let Err(e) = r {
                                log(&format!("cannot watch the agent's refs: {e}"));
                            }
                        });
                    }
                    start_watchdog(&shared, &sandbox, stop_watch_rx);
                    let mut up = serde_json::json!({ "sandbox": sandbox.name, "runtime": sandbox.runtime.as_str(), "image": sandbox.image });
                    // The self-test's own handshake without a certificate,
                    // recorded here rather than as an agent's refusal.
                    if let Some(seen) = probe {
                        up["escalation_probe"] = probe_outcome(seen).into();
                    }
                    if let Some(r) = &sandbox.restored {
                        up["restored"] = true.into();
                        up["checkpoint"] = r.checkpoint.clone().into();
                        if let Some(from) = &r.forked_from {
                            up["forked_from"] = from.clone().into();
                        }
                    }
                    shared.audit("domain-up", up).await;
                    if let Some(hosted) = shared.hosted.get() {
                        hosted.set_sandbox(&sandbox.name);
                        if sandbox.restored.is_some() {
                            // The restored Session Host was held at the
                            // save: woken, and its sessions adopted, before
                            // the first client is let in (they hold the
                            // domain up once it leaves).
                            match hosted.wake(&sandbox.name, true).await {
                                // Long under load: a domain let in before
                                // its sessions are adopted has none, and
                                // goes down when its first client leaves.
                                Ok(()) => hosted.await_sessions(Duration::from_secs(30)).await,
                                Err(e) => log(&format!("the restored Session Host: {e}")),
                            }
                        }
                        let hosted = hosted.clone();
                        tokio::spawn(async move { hosted.await_returning().await });
                    }
                    *shared.sandbox.lock().expect("lock") = Some(sandbox);
                    let _ = boot_tx.send(Boot::Ready);
                    shared.changed();
                }
                Ok(Err(e)) => {
                    log(&format!("boot failed: {e}"));
                    let _ = boot_tx.send(Boot::Failed(e.to_string()));
                    let _ = shared.shutdown.send(true);
                }
                Err(e) => {
                    let _ = boot_tx.send(Boot::Failed(e.to_string()));
                    let _ = shared.shutdown.send(true);
                }
            }
        });
    }

    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let orphan = tokio::time::sleep(ORPHAN_DEADLINE);
    tokio::pin!(orphan);
    let mut ever_attached = false;
    let mut next_conn = 0u64;
    // Only the user's own processes can reach this socket (0600, outside
    // the sandbox); it is bounded all the same, within the descriptors.
    let gate = Gate::new("control socket", shared.budget.control);
    let mut flush = tokio::time::interval(bounds::REPORT_INTERVAL);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                match accepted {
                    Ok((stream, _)) => match gate.admit() {
                        Ok(permit) => {
                            next_conn += 1;
                            ever_attached = true;
                            let shared = shared.clone();
                            let conn = next_conn;
                            tokio::spawn(async move {
                                handle(shared, stream, conn).await;
                                drop(permit);
                            });
                        }
                        Err(due) => {
                            drop(stream);
                            if let Some(r) = due {
                                log(&r.message());
                                shared.audit("connections-refused", r.record()).await;
                            }
                        }
                    },
                    // Out of descriptors: the connection stays queued.
                    Err(_) => tokio::time::sleep(bounds::ACCEPT_BACKOFF).await,
                }
            }
            _ = flush.tick() => {
                if let Some(r) = gate.pending_report() {
                    log(&r.message());
                    shared.audit("connections-refused", r.record()).await;
                }
            }
            _ = shutdown_rx.changed() => break,
            _ = sigterm.recv() => { log("SIGTERM"); break }
            _ = sigint.recv() => { log("SIGINT"); break }
            _ = &mut orphan, if !ever_attached => { log("nobody attached; giving up"); break }
        }
    }

    // Teardown: no new sessions (socket gone first), then sandbox, sidecar,
    // State Anchor (Engine::down), then the branch watcher.
    let _ = std::fs::remove_file(&control_socket);
    drop(listener);
    let _ = shared.shutdown.send(true);
    // Never tear down under a boot still in progress.
    let mut boot = shared.boot.clone();
    let _ = tokio::time::timeout(Duration::from_secs(300), async {
        while matches!(*boot.borrow_and_update(), Boot::Booting) {
            if boot.changed().await.is_err() {
                break;
            }
        }
    })
    .await;
    let s2 = shared.clone();
    let anchor = s2.resolved.domain.clone();
    let down = tokio::task::spawn_blocking(move || s2.engine.down(&anchor)).await;
    let _ = stop_sync_tx.send(());
    let _ = stop_watch_tx.send(());
    if let Some((t, server, gate)) = escalation_task {
        t.abort();
        // Refusals counted but not yet audited are not lost with it.
        if let Some(r) = gate.last_report() {
            shared.audit("connections-refused", r.record()).await;
        }
        tokio::task::spawn_blocking(move || server.flush_refusals(true))
            .await
            .ok();
    }
    let _ = std::fs::remove_file(
        shared
            .resolved
            .domain
            .escalation_dir(&shared.engine.socket_dir)
            .join("escalate.sock"),
    );
    if let Some(hosted) = shared.hosted.get() {
        hosted.forget();
    }
    // The Trust Anchor's client material dies with the domain.
    let _ = std::fs::remove_dir_all(shared.resolved.domain.certs_dir(&shared.engine.rundir));
    // The record says whether the teardown was verified complete.
    let outcome = match down {
        Ok(Ok(())) => {
            log("domain down");
            serde_json::json!({})
        }
        Ok(Err(e)) => {
            log(&format!("teardown incomplete: {e}"));
            serde_json::json!({ "incomplete": e.to_string() })
        }
        Err(e) => {
            log(&format!("teardown panicked: {e}"));
            serde_json::json!({ "incomplete": e.to_string() })
        }
    };
    shared.audit("domain-down", outcome).await;
    Ok(())
}

impl Shared {
    /// Takes a session off the table: whether it was there, how many
    /// remain, and its prompts still waiting (for the caller to deny).
    fn remove_session(&self, conn: u64) -> (bool, usize, Vec<PendingPrompt>) {
        let mut s = self.sessions.lock().expect("lock");
        let removed = s.remove(&conn).is_some();
        if removed {
            self.changed();
        }
        // Under the sessions lock: `Directory::ask` holds it too.
        let orphans = self.take_prompts(conn);
        (removed, s.len(), orphans)
    }

    /// The prompts waiting for a human that belong to `conn` (the inbox
    /// is told they are gone: the caller denies them).
    fn take_prompts(&self, conn: u64) -> Vec<PendingPrompt> {
        let taken: Vec<(String, PendingPrompt)> = {
            let mut pending = self.pending.lock().expect("lock");
            let ids: Vec<String> = pending
                .iter()
                .filter(|(_, p)| p.conn == conn)
                .map(|(id, _)| id.clone())
                .collect();
            ids.into_iter()
                .filter_map(|id| pending.remove(&id).map(|p| (id, p)))
                .collect()
        };
        for (id, _) in &taken {
            self.settled(id, "its session ended", None);
        }
        taken.into_iter().map(|(_, p)| p).collect()
    }

    /// A prompt of the client session on `conn` was answered in another
    /// client: off its screen.
    fn withdraw_from(&self, conn: u64, request_id: &str) {
        if let Some(tx) = self
            .sessions
            .lock()
            .expect("lock")
            .get(&conn)
            .and_then(|s| s.human.as_ref())
        {
            let _ = tx.send(ToHuman::Withdrawn {
                request_id: request_id.to_string(),
                reason: super::protocol::ANSWERED_ELSEWHERE.into(),
            });
        }
    }

    /// What `status` shows changed.
    fn changed(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    /// Tells the approval inbox (but `except`, which caused it).
    fn tell_inbox(&self, msg: &CoordMsg, except: Option<u64>) {
        // Pending counts are in the status too.
        self.changed();
        self.inbox
            .lock()
            .expect("lock")
            .retain(|conn, tx| Some(*conn) == except || tx.send(msg.clone()).is_ok());
    }

    /// A request no longer waits: off every inbox but `except`'s.
    fn settled(&self, request_id: &str, reason: &str, except: Option<u64>) {
        self.tell_inbox(
            &CoordMsg::Withdrawn {
                request_id: request_id.to_string(),
                reason: reason.to_string(),
            },
            except,
        );
    }

    /// A hosted session in the coordinator's table: it holds the domain
    /// up, and the Escalation Socket knows its key and where its prompts go.
    fn hold_hosted(&self, started: &super::hosted::Started, purpose: &str) {
        self.changed();
        let id = started.info.id;
        self.sessions.lock().expect("lock").insert(
            super::hosted::CONN_BASE + u64::from(id),
            LiveSession {
                info: SessionInfo {
                    session_id: started.session_id.clone(),
                    pid: 0,
                    purpose: format!("{purpose} (hosted {id})"),
                },
                key: Some(started.key),
                human: Some(started.human.clone()),
            },
        );
    }

    /// A session that outlived the coordinator before this one holds the
    /// domain up again, and its escalations are heard.
    async fn hosted_adopted(&self, started: super::hosted::Started) {
        let id = started.info.id;
        self.hold_hosted(&started, "adopted");
        log(&format!(
            "hosted session {id} adopted from the Session Host"
        ));
        self.audit(
            "session-adopt",
            serde_json::json!({ "session_id": started.session_id, "hosted": id, "argv": started.info.argv }),
        )
        .await;
    }

    /// A hosted session ended (or never started): it no longer holds the
    /// domain up, its unanswered prompts are denied, and the last session
    /// of the domain takes it down. Idempotent.
    async fn hosted_ended(&self, id: u32, session_id: &str, code: Option<i32>) {
        let conn = super::hosted::CONN_BASE + u64::from(id);
        let (removed, remaining, orphans) = self.remove_session(conn);
        for p in orphans {
            let _ = p.answer.send(Verdict::Deny {
                reason: Some("the session ended before its human decided".into()),
            });
        }
        if !removed {
            return;
        }
        if remaining == 0 {
            log("last session ended");
            let _ = self.shutdown.send(true);
        }
        self.audit(
            "session-end",
            serde_json::json!({ "session_id": session_id, "hosted": id, "code": code }),
        )
        .await;
    }

    /// A `PolicyChange` from `by`: applied in the Network Sidecar (under
    /// `policy_change`), audited as `policy-change` whatever became of it,
    /// and answered with the table after it or why nothing changed.
    /// Saves the running sandbox as a checkpoint (one at a time, as
    /// policy changes are), audited either way.
    async fn checkpoint(&self, name: Option<String>, by: StoppedBy) -> CoordMsg {
        let _one_at_a_time = self.policy_change.lock().await;
        let result = self.take_checkpoint(name).await;
        let (record, reply) = match result {
            Ok((path, checkpoint)) => (
                serde_json::json!({
                    "name": checkpoint.name, "bytes": checkpoint.bytes,
                    "held_ms": checkpoint.held_ms, "paused_ms": checkpoint.paused_ms,
                    "by": by.command, "pid": by.pid,
                }),
                CoordMsg::Checkpointed { path, checkpoint },
            ),
            Err(message) => (
                serde_json::json!({ "refused": message, "by": by.command, "pid": by.pid }),
                CoordMsg::Error { message },
            ),
        };
        self.audit("checkpoint", record).await;
        reply
    }

    async fn take_checkpoint(
        &self,
        name: Option<String>,
    ) -> Result<(String, crate::checkpoint::Checkpoint), String> {
        use crate::checkpoint;
        let Some(sandbox) = self.sandbox.lock().expect("lock").clone() else {
            return Err("the sandbox is still starting; try again when it is up".into());
        };
        if !sandbox.is_gvisor() {
            return Err(format!(
                "profile {} runs under {}: only gVisor (runsc) can save a sandbox's memory and processes",
                self.resolved.profile.name,
                sandbox.runtime.as_str()
            ));
        }
        let name = match name {
            Some(n) => {
                checkpoint::check_name(&n)?;
                n
            }
            None => checkpoint::default_name(std::time::SystemTime::now()),
        };
        let root = self.resolved.domain.domain_root(&self.engine.data_root);
        let dir = checkpoint::dir(&root, &name);
        if dir.exists() {
            return Err(format!(
                "the domain has a checkpoint named {name} already; give another name (--name)"
            ));
        }
        // What gVisor cannot bring back, or save.
        let views = self
            .hosted
            .get()
            .map(|h| h.viewer_conns())
            .unwrap_or_default();
        let plain: Vec<String> = self
            .sessions
            .lock()
            .expect("lock")
            .iter()
            .filter(|(conn, _)| **conn < super::hosted::CONN_BASE && !views.contains(conn))
            .map(|(_, s)| format!("{} (pid {})", s.info.purpose, s.info.pid))
            .collect();
        if !plain.is_empty() {
            return Err(format!(
                "sessions started with `podman exec` run in the sandbox ({}); gVisor cannot bring them back from a checkpoint: end them, or work in the workbench's sessions, which can",
                plain.join(", ")
            ));
        }
        if !self.pending.lock().expect("lock").is_empty() {
            return Err(
                "an escalation request waits for an answer (its connection to the host cannot be saved): answer it first"
                    .into(),
            );
        }
        let hosted = self.hosted.get().cloned();
        let started = Instant::now();
        let held = match &hosted {
            Some(h) => h.hold().await,
            None => Ok(false),
        };
        let saved = match &held {
            Err(e) => Err(e.clone()),
            Ok(_) => {
                let podman = self.engine.podman.clone();
                let (name, wrapper, root, dir) = (
                    sandbox.name.clone(),
                    sandbox.runtime_path.clone(),
                    root.clone(),
                    dir.clone(),
                );
                tokio::task::spawn_blocking(move || {
                    checkpoint::save(&podman, &name, &wrapper, &root, &dir)
                })
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r)
            }
        };
        let held_ms = started.elapsed().as_millis() as u64;
        let woke = match &hosted {
            Some(h) => h.wake(&sandbox.name, held == Ok(true)).await,
            None => Ok(()),
        };
        let (bytes, paused_ms) = match saved {
            Ok(saved) => saved,
            Err(e) => {
                let (podman, dir) = (self.engine.podman.clone(), dir.clone());
                let _ =
                    tokio::task::spawn_blocking(move || checkpoint::remove(&podman, &dir)).await;
                return Err(e);
            }
        };
        woke.map_err(|e| format!("the checkpoint {name} was saved, but {e}"))?;
        let made = checkpoint::Checkpoint {
            name,
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            bytes,
            held_ms,
            paused_ms,
            host_token: hosted.and_then(|h| h.token()).unwrap_or_default(),
            // As the engine chose it when it started the sandbox.
            term: std::env::var("TERM").unwrap_or_else(|_| crate::engine::DEFAULT_TERM.into()),
        };
        let json = serde_json::to_string_pretty(&made).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("checkpoint.json"), json)
            .map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
        Ok((dir.display().to_string(), made))
    }

    async fn change_policy(
        &self,
        target: String,
        allow: bool,
        origin: String,
        by: StoppedBy,
    ) -> CoordMsg {
        use super::client::PolicyAnswer;
        use crate::net;
        let _one_at_a_time = self.policy_change.lock().await;
        let answer = match net::Target::parse(&target) {
            Err(e) => PolicyAnswer::Refused {
                message: format!("`{target}`: {e}"),
                needs_restart: false,
            },
            Ok(parsed) => {
                let podman = self.engine.podman.clone();
                let root = self.resolved.domain.domain_root(&self.engine.data_root);
                let configured = self.resolved.network.clone();
                let sidecar = self.resolved.domain.sidecar_name();
                let origin = origin.clone();
                tokio::task::spawn_blocking(move || {
                    let changed = net::change(
                        &podman,
                        &sidecar,
                        &root,
                        &configured,
                        &parsed,
                        allow,
                        &origin,
                    );
                    PolicyAnswer::of(changed.map(|(_, r)| r), &sidecar)
                })
                .await
                .unwrap_or_else(|e| PolicyAnswer::Refused {
                    message: format!("the change stopped half-way: {e}"),
                    needs_restart: false,
                })
            }
        };
        let effect = match &answer {
            PolicyAnswer::Changed(report) => format!(
                "in force: the sidecar's table has {} rule(s)",
                report.entries.len()
            ),
            PolicyAnswer::Refused { message, .. } => format!("nothing changed: {message}"),
        };
        log(&format!(
            "policy change by `{}` (user {}, pid {}): {} {target}: {effect}",
            lazaret_widgets::visible::visible(&by.command),
            by.user,
            by.pid,
            if allow { "allow" } else { "deny" }
        ));
        self.audit(
            "policy-change",
            serde_json::json!({
                "action": if allow { "allow" } else { "deny" },
                "target": target,
                "origin": origin,
                "by": by.command,
                "user": by.user,
                "pid": by.pid,
                "applied": matches!(answer, PolicyAnswer::Changed(_)),
                "effect": effect,
            }),
        )
        .await;
        match answer {
            PolicyAnswer::Changed(report) => {
                let changed = CoordMsg::PolicyChanged { report: *report };
                // Every watching workbench shows the table after it.
                self.tell_inbox(&changed, None);
                changed
            }
            PolicyAnswer::Refused {
                message,
                needs_restart,
            } => CoordMsg::PolicyRefused {
                message,
                needs_restart,
            },
        }
    }

    /// The teardown notice, with who asked for it when someone did.
    fn shutting_down(&self) -> CoordMsg {
        CoordMsg::ShuttingDown {
            stopped_by: self.stopped_by.lock().expect("lock").clone(),
        }
    }
}

/// The process at the other end of `stream`, from the kernel's peer
/// credentials: its command line, user, pid, and now.
fn stopped_by(stream: &UnixStream) -> StoppedBy {
    let cred = stream.peer_cred().ok();
    let pid = cred.and_then(|c| c.pid()).unwrap_or(0).max(0) as u32;
    let command = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "an unknown process".into());
    let user = cred
        .and_then(|c| nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(c.uid())).ok())
        .flatten()
        .map_or_else(|| "unknown".into(), |u| u.name);
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    StoppedBy {
        command,
        user,
        pid,
        at,
    }
}

/// How often the watchdog looks at the sandbox's processes.
const WATCH_INTERVAL: Duration = Duration::from_millis(300);
/// Checks in a row that may fail to read the sandbox before the
/// coordinator stops it (about 3 s).
const BLIND_CHECKS: u32 = 10;

/// The watchdog can no longer see the sandbox (out of descriptors, say):
/// a sandbox nobody supervises does not run on. Frees the emergency
/// descriptors, says so (log, audit, every attached human) and stops the
/// domain.
fn lose_supervision(
    shared: &Arc<Shared>,
    rt: &tokio::runtime::Handle,
    supervisor: &str,
    why: &str,
) {
    let freed = shared.emergency.release();
    let message = format!("{why}; stopping the sandbox, since nothing supervises it");
    Directory(shared.clone()).warn(&message);
    rt.block_on(shared.audit(
        "supervision-lost",
        serde_json::json!({ "supervisor": supervisor, "reason": why, "freed_descriptors": freed, "message": message }),
    ));
    let _ = shared.shutdown.send(true);
}

/// How often the layer watch walks a runc sandbox's writable layer, at
/// the least: a walk that took long waits four times as long before the
/// next, so the walks cost at most a fifth of one CPU.
const LAYER_INTERVAL: Duration = Duration::from_secs(2);
/// The longest one walk may take (it stops at the limit, so only a slow
/// disk or a stopped walker takes this long).
const LAYER_TIMEOUT: Duration = Duration::from_secs(30);
/// Walks in a row that may fail before the coordinator stops the sandbox.
const LAYER_BLIND_WALKS: u32 = 3;

/// Holds a runc sandbox's root file system writes (its container layer,
/// on the host's disk) to `limit`: over it, or nested past what a walk
/// measures, the domain is stopped and the layer removed with it. Runs
/// until the returned sender is dropped.
fn start_layer_watch(
    shared: &Arc<Shared>,
    watch: crate::engine::layer::LayerWatch,
    limit: u64,
) -> std::sync::mpsc::Sender<()> {
    use crate::engine::limits::show_size;
    let (alive, stop) = std::sync::mpsc::channel::<()>();
    let shared = shared.clone();
    let rt = tokio::runtime::Handle::current();
    std::thread::spawn(move || {
        let mut pause = LAYER_INTERVAL;
        let mut blind = 0u32;
        loop {
            if !matches!(
                stop.recv_timeout(pause),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout)
            ) {
                return;
            }
            let started = Instant::now();
            let usage = match watch.measure(limit, LAYER_TIMEOUT) {
                Ok(u) => u,
                Err(why) => {
                    blind += 1;
                    log(&format!("cannot measure the sandbox's layer: {why}"));
                    if blind >= LAYER_BLIND_WALKS {
                        lose_supervision(
                            &shared,
                            &rt,
                            "layer watch",
                            &format!(
                                "the root file system of the Agent Sandbox could not be measured {blind} times in a row ({why})"
                            ),
                        );
                        return;
                    }
                    continue;
                }
            };
            blind = 0;
            pause = LAYER_INTERVAL.max(started.elapsed() * 4);
            let before = shared.layer_used.lock().expect("lock").replace(usage.bytes);
            if before.is_none_or(|b| b.abs_diff(usage.bytes) >= b / 16) {
                shared.changed();
            }
            if usage.complete && usage.bytes <= limit {
                continue;
            }
            let message = if usage.bytes > limit {
                format!(
                    "the sandbox wrote more than {} to its root file system (outside /tmp, the workspace and persistent folders), its memory limit: stopping the domain, which removes those files",
                    show_size(limit)
                )
            } else {
                format!(
                    "the sandbox nested folders more than {} deep in its root file system, which cannot be measured: stopping the domain",
                    crate::engine::layer::MAX_DEPTH
                )
            };
            Directory(shared.clone()).warn(&message);
            rt.block_on(shared.audit(
                "limit-disk",
                serde_json::json!({
                    "limit": limit, "bytes": usage.bytes, "entries": usage.entries,
                    "layer": watch.upper, "message": message,
                }),
            ));
            let _ = shared.shutdown.send(true);
            return;
        }
    });
    alive
}

/// Enforces the profile's memory and process limits where no cgroup does
/// (engine::limits), and tears the domain down when its sandbox is gone.
fn start_watchdog(shared: &Arc<Shared>, sandbox: &Sandbox, stop: std::sync::mpsc::Receiver<()>) {
    use crate::engine::limits::{Verdict, show_size};
    let profile = &shared.resolved.profile;
    let dog = match shared
        .engine
        .watchdog(sandbox, profile.limits, profile.runtime)
    {
        Ok(d) => d,
        Err(e) => {
            log(&format!(
                "cannot watch the sandbox's memory, stopping the domain: {e}"
            ));
            let _ = shared.shutdown.send(true);
            return;
        }
    };
    // Under runc the root file system's writes land on the host's disk:
    // the same limit holds them (gVisor counts them as memory).
    let layer_alive = if profile.runtime == crate::config::Runtime::Runc {
        match shared.engine.layer_watch(sandbox) {
            Ok(watch) => Some(start_layer_watch(shared, watch, profile.limits.memory)),
            Err(e) => {
                // Fail closed: writes nothing holds are not allowed to run.
                let message = e.to_string();
                Directory(shared.clone()).warn(&message);
                let s = shared.clone();
                tokio::spawn(async move {
                    s.audit(
                        "supervision-lost",
                        serde_json::json!({ "supervisor": "layer watch", "reason": message, "message": message }),
                    )
                    .await;
                });
                let _ = shared.shutdown.send(true);
                return;
            }
        }
    } else {
        None
    };
    let shared = shared.clone();
    let rt = tokio::runtime::Handle::current();
    let mut refusals = RefusalLog::new(crate::engine::sidecar_log(
        &shared.resolved.domain.domain_root(&shared.engine.data_root),
    ));
    std::thread::spawn(move || {
        // Dropped when this thread ends: the layer watch ends with it.
        let _layer_alive = layer_alive;
        // Checks in a row that could not read the sandbox's processes.
        let mut blind = 0u32;
        loop {
            if !matches!(
                stop.recv_timeout(WATCH_INTERVAL),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout)
            ) {
                return;
            }
            let verdict = dog.check();
            if let Verdict::Unmeasured(why) = &verdict {
                blind += 1;
                if blind == 1 {
                    log(&format!("the watchdog cannot read the sandbox: {why}"));
                }
                if blind < BLIND_CHECKS {
                    continue;
                }
                lose_supervision(
                    &shared,
                    &rt,
                    "watchdog",
                    &format!(
                        "the watchdog could not read the Agent Sandbox for {:.0} s ({why})",
                        (WATCH_INTERVAL * BLIND_CHECKS).as_secs_f64()
                    ),
                );
                return;
            }
            blind = 0;
            // The sidecar's news of refusals, on the same beat (a file's
            // size most of the time: the sidecar writes only on news).
            if let Some(total) = refusals.news() {
                *shared.egress_refused.lock().expect("lock") = Some(total);
                shared.changed();
            }
            let (event, detail) = match verdict {
                Verdict::Within(usage) => {
                    let before = shared.memory_used.lock().expect("lock").replace(usage.rss);
                    // A move of a sixteenth or more is news for the panels.
                    if before.is_none_or(|b| b.abs_diff(usage.rss) >= b / 16) {
                        shared.changed();
                    }
                    continue;
                }
                Verdict::Unmeasured(_) => continue,
                Verdict::Gone => {
                    log("the Agent Sandbox is gone; tearing the domain down");
                    let _ = shared.shutdown.send(true);
                    return;
                }
                Verdict::OverMemory { usage, killed } => (
                    "limit-memory",
                    serde_json::json!({
                        "limit": dog.limits.memory, "rss": usage.rss, "killed_pid": killed,
                        "message": format!(
                            "the sandbox used {} of its {} memory limit: killed its biggest process (host pid {killed})",
                            show_size(usage.rss), show_size(dog.limits.memory)
                        ),
                    }),
                ),
                Verdict::OverPids { usage } => (
                    "limit-pids",
                    serde_json::json!({
                        "limit": dog.limits.pids, "processes": usage.processes,
                        "message": format!(
                            "the sandbox ran {} host processes, over its limit of {}: killed them all",
                            usage.processes, dog.limits.pids
                        ),
                    }),
                ),
            };
            log(detail["message"].as_str().unwrap_or(event));
            let s = shared.clone();
            rt.block_on(s.audit(event, detail));
        }
    });
}

/// The Network Sidecar's log, read where the last look stopped: its lines
/// of [`lazaret_sidecar::report::Refusals`] say how often the sandbox was
/// refused.
struct RefusalLog {
    path: PathBuf,
    /// Bytes read up to the end of the last whole line.
    offset: u64,
    told: Option<u64>,
}

impl RefusalLog {
    fn new(path: PathBuf) -> RefusalLog {
        RefusalLog {
            path,
            offset: 0,
            told: None,
        }
    }

    /// The total of refusals when it changed since the last call.
    fn news(&mut self) -> Option<u64> {
        use std::io::{Read, Seek, SeekFrom};
        let size = std::fs::metadata(&self.path).ok()?.len();
        if size < self.offset {
            // A new sidecar (a restart) writes a new log.
            self.offset = 0;
        }
        if size == self.offset {
            return None;
        }
        let mut file = std::fs::File::open(&self.path).ok()?;
        file.seek(SeekFrom::Start(self.offset)).ok()?;
        // A bounded read: the rest waits for the next beat.
        let mut text = Vec::new();
        file.take(1 << 20).read_to_end(&mut text).ok()?;
        let whole = text.iter().rposition(|b| *b == b'\n')? + 1;
        self.offset += whole as u64;
        let text = String::from_utf8_lossy(&text[..whole]);
        let lines = crate::podman::log_stdout_lines(&text);
        let total =
            lazaret_sidecar::report::Refusals::last_in(lines.iter().map(String::as_str))?.total();
        (self.told != Some(total)).then(|| {
            self.told = Some(total);
            total
        })
    }
}

/// The store as the Escalation Socket's audit log, failures logged.
struct LoggedAudit(Arc<Store>);

impl AuditLog for LoggedAudit {
    fn append(&self, kind: &'static str, data: serde_json::Value) -> Result<(), String> {
        AuditLog::append(self.0.as_ref(), kind, data)
            .inspect_err(|e| log(&format!("audit write failed: {e}")))
    }

    fn commit(&self, batch: super::store::Batch) -> Result<bool, String> {
        AuditLog::commit(self.0.as_ref(), batch)
            .inspect_err(|e| log(&format!("audit write failed: {e}")))
    }
}

/// What a self-test record says of the self-test's probe of the
/// Escalation Socket.
fn probe_outcome(seen: bool) -> &'static str {
    if seen {
        "refused without a certificate, as the self-test expects"
    } else {
        "not seen by the socket"
    }
}

fn start_escalation(
    shared: &Arc<Shared>,
    cfg: &crate::config::EscalationConfig,
) -> anyhow::Result<(
    tokio::task::JoinHandle<()>,
    Arc<EscalationServer>,
    Arc<Gate>,
)> {
    let anchor = &shared.resolved.domain;
    let layout = shared.engine.layout(&shared.resolved)?;
    // Confined commands share the profile's memory (issue 26 item 7).
    confine::set_profile_memory(shared.resolved.profile.limits.memory);
    let argvs: Vec<Vec<String>> = cfg.auto_approve.iter().map(|a| a.argv.clone()).collect();
    let network: Vec<Vec<String>> = cfg
        .auto_approve
        .iter()
        .filter(|a| a.network)
        .map(|a| a.argv.clone())
        .collect();
    let server = EscalationServer::new(Setup {
        profile: anchor.profile(),
        domain_hash: anchor.hash(),
        escalation_dir: &anchor.escalation_dir(&shared.engine.socket_dir),
        certs_dir: &anchor.certs_dir(&shared.engine.rundir),
        host_workspace: &layout.workspace_source,
        layout: Some(layout.clone()),
        auto_approve: &argvs,
        auto_approve_network: &network,
        limits: ExecLimits::default(),
        requests: RequestLimits::default(),
        store: shared.store.clone(),
        audit: Arc::new(LoggedAudit(shared.store.clone())),
    })?;
    if let confine::Support::Missing(why) = &server.support {
        log(&format!(
            "auto-approve is off: host commands cannot be confined ({why}); every request goes to a human"
        ));
    }
    log(&format!(
        "escalation socket {} for {}",
        server.socket.display(),
        server.identity.uri()
    ));
    let gate = Gate::new(
        super::escalation::ESCALATION_LISTENER,
        shared.budget.escalation,
    );
    let server = Arc::new(server);
    let task = server
        .clone()
        .serve_bounded(Arc::new(Directory(shared.clone())), gate.clone())?;
    Ok((task, server, gate))
}

async fn handle(shared: Arc<Shared>, mut stream: UnixStream, conn: u64) {
    let hello = match tokio::time::timeout(
        Duration::from_secs(10),
        read_frame::<_, ClientMsg>(&mut stream),
    )
    .await
    {
        Ok(Ok(h)) => h,
        _ => return,
    };
    let ClientMsg::Hello {
        version,
        session_id,
        session_key,
        pid,
        purpose,
        interactive,
    } = hello
    else {
        let _ = write_frame(
            &mut stream,
            &CoordMsg::Error {
                message: "expected hello".into(),
            },
        )
        .await;
        return;
    };
    if version != PROTOCOL_VERSION {
        let _ = write_frame(
            &mut stream,
            &CoordMsg::Error {
                message: format!(
                    "protocol version {version} is not {PROTOCOL_VERSION}: this domain's coordinator is another Lazaret build; `lazaret down` it first"
                ),
            },
        )
        .await;
        return;
    }
    if *shared.shutdown.borrow() {
        let _ = write_frame(&mut stream, &shared.shutting_down()).await;
        return;
    }
    let mut human_rx: Option<mpsc::UnboundedReceiver<ToHuman>> = None;
    // A holding session counts from now: the domain stays up while it waits.
    let holder = session_id.as_ref().map(|id| SessionInfo {
        session_id: id.clone(),
        pid,
        purpose: purpose.clone(),
    });
    if let Some(info) = &holder {
        if uuid::Uuid::parse_str(&info.session_id).map(|u| u.get_version_num()) != Ok(4) {
            let _ = write_frame(
                &mut stream,
                &CoordMsg::Error {
                    message: "session_id must be a UUID v4".into(),
                },
            )
            .await;
            return;
        }
        let key = match session_key.as_deref().map(parse_key) {
            Some(Ok(k)) => Some(k),
            Some(Err(e)) => {
                let _ = write_frame(&mut stream, &CoordMsg::Error { message: e }).await;
                return;
            }
            None => None,
        };
        let human = if interactive {
            let (tx, rx) = mpsc::unbounded_channel();
            human_rx = Some(rx);
            Some(tx)
        } else {
            None
        };
        shared.sessions.lock().expect("lock").insert(
            conn,
            LiveSession {
                info: info.clone(),
                key,
                human,
            },
        );
        shared.changed();
        // The session's row and its audit record: one durable commit.
        let store = shared.store.clone();
        let record = serde_json::json!({ "session_id": info.session_id, "key": session_key, "pid": pid, "purpose": purpose, "started": super::store::now() });
        let batch = super::store::Batch {
            sessions: vec![(info.session_id.clone(), record)],
            audit: vec![(
                "session-start",
                serde_json::json!({ "session_id": info.session_id, "pid": pid, "purpose": purpose }),
            )],
            ..Default::default()
        };
        match tokio::task::spawn_blocking(move || store.commit(batch)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => log(&format!("audit write failed: {e}")),
            Err(e) => log(&format!("audit write failed: {e}")),
        }
    }
    let result = serve_session(&shared, &mut stream, human_rx, conn).await;
    shared.inbox.lock().expect("lock").remove(&conn);
    if let Some(hosted) = shared.hosted.get() {
        hosted.detach_all(conn);
    }
    if let Some(info) = holder {
        let (_, remaining, orphans) = shared.remove_session(conn);
        // Its unanswered prompts are denied (and audited as such by the
        // Escalation Socket): the requester is not left waiting.
        for p in orphans {
            let _ = p.answer.send(Verdict::Deny {
                reason: Some("the session left before its human decided".into()),
            });
        }
        // The last one stops the coordinator before anything else (its
        // control socket goes at once): a client started right after this
        // session ended finds no coordinator about to stop, and starts the
        // next one instead. The teardown that follows outlasts the record.
        if remaining == 0 {
            log("last session left");
            let _ = shared.shutdown.send(true);
        }
        shared
            .audit(
                "session-end",
                serde_json::json!({ "session_id": info.session_id, "pid": info.pid }),
            )
            .await;
    }
    if let Err(e) = result
        && !matches!(e, FrameError::Closed)
    {
        log(&format!("connection {conn}: {e}"));
    }
}

fn parse_key(hex: &str) -> Result<VerifyingKey, String> {
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
        })
        .collect::<Option<_>>()
        .ok_or("the session key is not hex")?;
    let arr: [u8; 32] = bytes
        .try_into()
        .map_err(|_| "the session key is not 32 bytes".to_string())?;
    VerifyingKey::from_bytes(&arr)
        .map_err(|e| format!("the session key is not an ed25519 key: {e}"))
}

async fn serve_session(
    shared: &Arc<Shared>,
    stream: &mut UnixStream,
    mut human: Option<mpsc::UnboundedReceiver<ToHuman>>,
    conn: u64,
) -> Result<(), FrameError> {
    // Wait for the boot, forwarding every step (the state first: a step
    // is logged before the state that follows it is published).
    let mut boot = shared.boot.clone();
    // A session that joins a domain already up is not shown a start that
    // happened before it came (issue 43: every step at `[ 0.0s]`).
    let mut sent = match *boot.borrow() {
        Boot::Ready => shared.boot_log.lock().expect("lock").len(),
        _ => 0,
    };
    loop {
        let state = boot.borrow_and_update().clone();
        let steps: Vec<Step> = shared.boot_log.lock().expect("lock")[sent..].to_vec();
        sent += steps.len();
        for step in steps {
            write_frame(
                stream,
                &CoordMsg::Progress {
                    step: step.to_string(),
                },
            )
            .await?;
            if step == Step::CheckingSandbox {
                write_frame(stream, &CoordMsg::SandboxStarted).await?;
            }
        }
        match state {
            Boot::Ready => break,
            Boot::Failed(message) => {
                write_frame(
                    stream,
                    &CoordMsg::Error {
                        message: format!("the domain could not start: {message}"),
                    },
                )
                .await?;
                return Ok(());
            }
            Boot::Booting => {}
        }
        if boot.changed().await.is_err() {
            return Ok(());
        }
    }
    write_frame(
        stream,
        &CoordMsg::Welcome {
            domain: shared.status(),
        },
    )
    .await?;
    let mut shutdown = shared.shutdown.subscribe();
    // Frames are read through a buffer that outlives each `select!`: news
    // for the human may win while a large frame is half-read.
    let (r, mut w) = stream.split();
    let stream = &mut w;
    let mut frames = FrameReader::new(r);
    // Hosted sessions this connection is attached to send through this.
    let mut attached = Attachments::new();
    // The approval inbox, once asked for; with it, the domain's status
    // after each change (a burst of changes is one message).
    let mut inbox: Option<mpsc::UnboundedReceiver<CoordMsg>> = None;
    let mut changes = shared.changes.subscribe();
    let mut status_due: Option<tokio::time::Instant> = None;
    let mut last_status: Option<DomainStatus> = None;
    loop {
        let msg = tokio::select! {
            m = frames.next::<ClientMsg>() => m?,
            Some(news) = attached.rx.recv() => {
                write_frame(stream, &news).await?;
                while let Ok(news) = attached.rx.try_recv() {
                    write_frame(stream, &news).await?;
                }
                if attached.lagged()
                    && let Some(hosted) = shared.hosted.get()
                {
                    hosted.resync(conn, &attached);
                }
                continue;
            }
            Some(news) = async { match human.as_mut() { Some(h) => h.recv().await, None => None } } => {
                let msg = match news {
                    ToHuman::Prompt(prompt) => CoordMsg::Prompt { prompt },
                    ToHuman::Outcome(outcome) => CoordMsg::Outcome { outcome },
                    ToHuman::Withdrawn { request_id, reason } => {
                        CoordMsg::Withdrawn { request_id, reason }
                    }
                    ToHuman::Warning(message) => CoordMsg::Warning { message },
                };
                write_frame(stream, &msg).await?;
                continue;
            }
            Some(news) = async { match inbox.as_mut() { Some(i) => i.recv().await, None => None } } => {
                write_frame(stream, &news).await?;
                continue;
            }
            Ok(()) = changes.changed(), if inbox.is_some() && status_due.is_none() => {
                status_due = Some(tokio::time::Instant::now() + STATUS_SETTLE);
                continue;
            }
            () = async { tokio::time::sleep_until(status_due.unwrap_or_else(tokio::time::Instant::now)).await }, if status_due.is_some() => {
                status_due = None;
                changes.borrow_and_update();
                let domain = shared.status();
                // Only the clock moved: nothing to tell.
                let unchanged = last_status.as_ref().is_some_and(|last| {
                    *last == DomainStatus { uptime: last.uptime, ..domain.clone() }
                });
                if !unchanged {
                    write_frame(stream, &CoordMsg::Status { domain: domain.clone() }).await?;
                    last_status = Some(domain);
                }
                continue;
            }
            _ = shutdown.changed() => {
                let _ = write_frame(stream, &shared.shutting_down()).await;
                return Ok(());
            }
        };
        let reply = match msg {
            ClientMsg::Status => CoordMsg::Status {
                domain: shared.status(),
            },
            ClientMsg::Audit => {
                let store = shared.store.clone();
                match tokio::task::spawn_blocking(move || store.records()).await {
                    Ok(Ok(records)) => CoordMsg::Audit { records },
                    Ok(Err(e)) => CoordMsg::Error {
                        message: e.to_string(),
                    },
                    Err(e) => CoordMsg::Error {
                        message: e.to_string(),
                    },
                }
            }
            ClientMsg::Verify => {
                let store = shared.store.clone();
                match tokio::task::spawn_blocking(move || store.verify()).await {
                    Ok(Ok(v)) => verified(&v),
                    Ok(Err(e)) => CoordMsg::Error {
                        message: e.to_string(),
                    },
                    Err(e) => CoordMsg::Error {
                        message: e.to_string(),
                    },
                }
            }
            ClientMsg::Down => {
                let by = stopped_by(frames.get_ref().as_ref());
                log(&format!("down requested: {by}"));
                shared
                    .audit(
                        "down-requested",
                        serde_json::to_value(&by).unwrap_or_default(),
                    )
                    .await;
                shared.stopped_by.lock().expect("lock").get_or_insert(by);
                let _ = shared.shutdown.send(true);
                shared.shutting_down()
            }
            ClientMsg::SelfTestStart => {
                if let Some(server) = shared.escalation.get() {
                    server.expect_selftest_probe(super::escalation::PROBE_WINDOW);
                }
                CoordMsg::SelfTest {
                    escalation_probe: None,
                }
            }
            ClientMsg::SelfTestEnd { failed } => {
                let by = stopped_by(frames.get_ref().as_ref());
                let grace = if failed.is_empty() {
                    super::escalation::PROBE_GRACE
                } else {
                    Duration::ZERO
                };
                let probe = match shared.escalation.get().cloned() {
                    Some(server) => {
                        tokio::task::spawn_blocking(move || server.selftest_probe_seen(grace))
                            .await
                            .ok()
                            .map(probe_outcome)
                    }
                    None => None,
                };
                shared
                    .audit(
                        "self-test",
                        serde_json::json!({
                            "by": by.command,
                            "user": by.user,
                            "pid": by.pid,
                            "passed": failed.is_empty(),
                            "failed": failed,
                            "escalation_probe": probe,
                        }),
                    )
                    .await;
                CoordMsg::SelfTest {
                    escalation_probe: probe.map(str::to_string),
                }
            }
            ClientMsg::PolicyChange {
                target,
                allow,
                origin,
            } => {
                let by = stopped_by(frames.get_ref().as_ref());
                shared.change_policy(target, allow, origin, by).await
            }
            ClientMsg::Checkpoint { name } => {
                let by = stopped_by(frames.get_ref().as_ref());
                shared.checkpoint(name, by).await
            }
            ClientMsg::Hello { .. } => CoordMsg::Error {
                message: "already said hello".into(),
            },
            ClientMsg::Inbox => {
                // Its first status now, the next after a change.
                status_due = Some(tokio::time::Instant::now());
                let (tx, rx) = mpsc::unbounded_channel();
                // Under the pending lock: a request asked meanwhile is
                // either listed here or sent after.
                let pending = shared.pending.lock().expect("lock");
                for p in pending.values() {
                    let _ = tx.send(p.shown.clone());
                }
                shared.inbox.lock().expect("lock").insert(conn, tx);
                drop(pending);
                inbox = Some(rx);
                continue;
            }
            ClientMsg::Sessions => CoordMsg::Sessions {
                sessions: shared.hosted.get().map(|h| h.list()).unwrap_or_default(),
            },
            ClientMsg::SessionStart {
                argv,
                rows,
                cols,
                purpose,
                term,
                warm,
            } => {
                let by = stopped_by(frames.get_ref().as_ref());
                let new = super::hosted::NewSession {
                    argv,
                    rows,
                    cols,
                    purpose,
                    term,
                    warm,
                };
                shared.start_hosted(new, conn, &attached, by).await
            }
            ClientMsg::Attach { session } => {
                match shared
                    .hosted
                    .get()
                    .map(|h| h.attach(session, conn, &attached))
                {
                    Some(Ok(())) => continue,
                    Some(Err(message)) => CoordMsg::Error { message },
                    None => no_hosting(),
                }
            }
            ClientMsg::Detach { session } => {
                if let Some(h) = shared.hosted.get() {
                    h.detach(session, conn);
                }
                continue;
            }
            ClientMsg::Input { session, data } => {
                if let (Some(h), Ok(bytes)) = (shared.hosted.get(), super::hosted::decode(&data)) {
                    // A session that ended meanwhile: its keys go nowhere.
                    let _ = h.input(session, &bytes);
                }
                continue;
            }
            ClientMsg::Resize {
                session,
                rows,
                cols,
            } => match shared
                .hosted
                .get()
                .map(|h| h.resize(session, rows, cols, conn))
            {
                // The session keeps its size; its client is told why.
                Some(Err(e @ super::hosted::ResizeError::OverBudget(_))) => CoordMsg::Warning {
                    message: e.to_string(),
                },
                _ => continue,
            },
            ClientMsg::EndSession { session } => match shared.hosted.get() {
                Some(h) => match h.hang_up(session) {
                    Ok(()) => {
                        // Its human closed it: what it asked is denied now,
                        // not when its processes are gone.
                        let conn = super::hosted::CONN_BASE + u64::from(session);
                        for p in shared.take_prompts(conn) {
                            let _ = p.answer.send(Verdict::Deny {
                                reason: Some("its tab was closed".into()),
                            });
                        }
                        continue;
                    }
                    Err(message) => CoordMsg::Error { message },
                },
                None => no_hosting(),
            },
            ClientMsg::Decision {
                request_id,
                verdict,
            } => {
                // The connection the prompt was sent to decides it; a
                // hosted session's prompt, or any prompt once shown in the
                // approval inbox: any of the user's clients (this socket is
                // the user's alone), the first to answer.
                let taken = {
                    let mut pending = shared.pending.lock().expect("lock");
                    let watching = inbox.is_some();
                    match pending.get(&request_id) {
                        Some(p)
                            if p.conn == conn || p.conn >= super::hosted::CONN_BASE || watching =>
                        {
                            pending.remove(&request_id)
                        }
                        _ => None,
                    }
                };
                match taken {
                    Some(p) => {
                        let hosted = p.conn >= super::hosted::CONN_BASE;
                        if hosted && let Some(h) = shared.hosted.get() {
                            h.answered(&request_id, conn);
                        } else if p.conn != conn {
                            shared.withdraw_from(p.conn, &request_id);
                        }
                        shared.settled(
                            &request_id,
                            super::protocol::ANSWERED_ELSEWHERE,
                            Some(conn),
                        );
                        // Which of the user's clients answered, before the
                        // decision's own record.
                        let by = stopped_by(frames.get_ref().as_ref());
                        shared
                            .audit(
                                "answered-by",
                                serde_json::json!({
                                    "request_id": request_id,
                                    "by": by.command,
                                    "user": by.user,
                                    "pid": by.pid,
                                    "hosted": hosted,
                                }),
                            )
                            .await;
                        let _ = p.answer.send(verdict);
                    }
                    None => log(&format!(
                        "connection {conn}: a decision for request {request_id}, which is not pending for it, ignored"
                    )),
                }
                continue;
            }
        };
        write_frame(stream, &reply).await?;
    }
}

fn no_hosting() -> CoordMsg {
    CoordMsg::Error {
        message: "this domain's coordinator cannot host sessions".into(),
    }
}

impl Shared {
    /// A `SessionStart` from `by` (on connection `conn`, attached to it).
    async fn start_hosted(
        &self,
        new: super::hosted::NewSession,
        conn: u64,
        attached: &Attachments,
        by: StoppedBy,
    ) -> CoordMsg {
        let purpose = new.purpose.clone();
        let Some(hosted) = self.hosted.get() else {
            return no_hosting();
        };
        if *self.shutdown.borrow() {
            return self.shutting_down();
        }
        let started = match hosted.start(new, conn, attached).await {
            Ok(s) => s,
            Err(message) => return CoordMsg::Error { message },
        };
        let id = started.info.id;
        self.hold_hosted(&started, &purpose);
        self.audit(
            "session-start",
            serde_json::json!({
                "session_id": started.session_id,
                "hosted": id,
                "argv": started.info.argv,
                "purpose": purpose,
                "by": by.command,
                "pid": by.pid,
            }),
        )
        .await;
        // It may have ended before it was in the table.
        if !hosted.is_live(id) {
            self.hosted_ended(id, &started.session_id, None).await;
        }
        CoordMsg::SessionStarted {
            session: started.info,
        }
    }
}

/// The wire form of a verification result.
pub fn verified(v: &Verification) -> CoordMsg {
    match v {
        Verification::Intact { records, .. } => CoordMsg::Verified {
            intact: true,
            records: *records,
            first_bad: None,
            why: None,
        },
        Verification::Broken { seq, why } => CoordMsg::Verified {
            intact: false,
            records: 0,
            first_bad: Some(*seq),
            why: Some(why.clone()),
        },
    }
}
