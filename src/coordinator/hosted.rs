//! Hosted sessions (decisions.md D14): a session's process and PTY live in
//! the domain's Session Host inside the sandbox, its screen (grid and
//! bounded scrollback) lives here, and any of the user's clients attaches
//! to it and leaves again; the session runs on without them.
//!
//! The Session Host is inside the agent's reach: what it sends is untrusted
//! pane output, parsed here only into a screen, and handed to clients as
//! bytes for their pane (or the plain terminal's output filter). It holds
//! no authority: each session's escalation credential is published here,
//! by the coordinator, and its prompts go to the user's attached clients.

use std::collections::BTreeMap;
use std::num::NonZeroU16;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use futures_util::StreamExt;
use lazaret_escalate::session_host::{self as wire, Frame, Spawn, kind};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};

use super::anchor::{CredentialFile, SessionAnchor};
use super::escalation::{Prompt, ToHuman};
use super::protocol::CoordMsg;

/// Rows of scrollback kept per session (fewer when the domain's screen
/// budget is short), besides its screen.
pub use super::bounds::SCROLLBACK_ROWS;
use super::bounds::{Rate, ScreenBudget, Sized, clamp_size};
/// Ended sessions whose last screen is kept.
const KEPT_ENDED: usize = 8;
/// Messages queued for one client before it is counted as lagging: it
/// then gets a fresh screen once it has read what was queued.
const VIEWER_QUEUE: usize = 1024;
/// How long the Session Host has to connect after it was started.
const HOST_DEADLINE: Duration = Duration::from_secs(15);
/// How long a new coordinator waits for the Session Host of the one it
/// replaces to come back, before it starts another.
const RETURN_DEADLINE: Duration = Duration::from_secs(3);
/// How long a session's start may take inside the sandbox.
const SPAWN_DEADLINE: Duration = Duration::from_secs(10);
/// A spare session is made this long after the start that asked for it:
/// not while that session's own shell starts.
const SPARE_DELAY: Duration = Duration::from_millis(500);
/// Connections to the host socket that have not yet shown the token: the
/// agent can reach the socket, and may not hold more than this (a new one
/// over it ends the oldest).
const MAX_UNGREETED: usize = 4;
/// How long a connection to the host socket has to show the token (the
/// host sends it as soon as it is connected).
const GREET_DEADLINE: Duration = Duration::from_secs(5);
/// Connection numbers of hosted sessions in the coordinator's session
/// table start here (client connections count up from 1).
pub const CONN_BASE: u64 = 1 << 48;
/// Sessions a Session Host may announce (LIVE) and have adopted at once:
/// a host that comes back to a new coordinator announces all it runs.
const ADOPT_BURST: u32 = wire::MAX_SESSIONS as u32;
/// Then one more adoption per this long: the agent can play the host and
/// announce sessions over and over (each costs audit records).
const ADOPT_EVERY: Duration = Duration::from_secs(30);
/// What an announced session's command line may hold, in all (it is shown
/// in `lazaret sessions` and audited).
pub const ANNOUNCED_ARGV_BYTES: usize = 4096;
/// Its words at the most.
pub const ANNOUNCED_ARGV_WORDS: usize = 64;
/// What a Session Host's refusal to start a session may say.
const SPAWN_FAILED_BYTES: usize = 1024;

/// Base64 for the bytes a JSON frame carries.
pub fn encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn decode(text: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("not base64: {e}"))
}

/// Why a resize was not done.
#[derive(Debug, thiserror::Error)]
pub enum ResizeError {
    /// The session ended, or its host is gone: nothing to tell its client.
    #[error("{0}")]
    NotRunning(String),
    /// The domain's screens would hold too much: the client is told.
    #[error(transparent)]
    OverBudget(#[from] super::bounds::OverBudget),
}

/// What `lazaret sessions` shows of one hosted session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostedInfo {
    /// Small and stable within the domain: `lazaret attach N`.
    pub id: u32,
    pub purpose: String,
    pub argv: Vec<String>,
    /// Seconds since the epoch.
    pub started: u64,
    pub rows: u16,
    pub cols: u16,
    /// Clients attached now.
    pub viewers: u32,
    /// Escalation requests waiting for a human.
    pub pending: u32,
    /// Its exit code, or minus the signal that ended it; `None` while it
    /// runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exited: Option<i32>,
    /// Whether its shell runs a command (`true`) or waits at its prompt,
    /// as the Session Host last saw its terminal's foreground; `None` for
    /// a program that is not a shell (an agent never hands its terminal
    /// over, so "at its prompt" would say nothing) or before it was seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy: Option<bool>,
}

impl HostedInfo {
    /// A session starting now (or adopted now), with no client yet.
    fn running(id: u32, purpose: String, argv: Vec<String>, rows: u16, cols: u16) -> HostedInfo {
        HostedInfo {
            id,
            purpose,
            argv,
            started: super::store::now(),
            rows,
            cols,
            viewers: 0,
            pending: 0,
            exited: None,
            busy: None,
        }
    }
}

/// Whether `argv` runs a shell: only a shell's foreground says "running a
/// command" or "at its prompt".
fn is_shell(argv: &[String]) -> bool {
    let Some(program) = argv.first() else {
        return false;
    };
    let name = program.rsplit('/').next().unwrap_or(program);
    let name = name.strip_prefix('-').unwrap_or(name);
    matches!(
        name,
        "sh" | "bash" | "zsh" | "fish" | "dash" | "ash" | "ksh" | "mksh" | "tcsh" | "csh" | "nu"
    )
}

/// One attached client: its queue, and whether it missed messages.
#[derive(Debug, Clone)]
struct Viewer {
    tx: mpsc::Sender<CoordMsg>,
    lagged: Arc<AtomicBool>,
}

impl Viewer {
    fn send(&self, msg: CoordMsg) {
        if self.lagged.load(Ordering::Acquire) {
            return;
        }
        if self.tx.try_send(msg).is_err() {
            self.lagged.store(true, Ordering::Release);
        }
    }
}

/// A client connection's side of its attachments: messages for it, and
/// whether it fell behind (it then asks [`Hosted::resync`]).
#[derive(Debug)]
pub struct Attachments {
    pub rx: mpsc::Receiver<CoordMsg>,
    viewer: Viewer,
}

impl Attachments {
    pub fn new() -> Attachments {
        let (tx, rx) = mpsc::channel(VIEWER_QUEUE);
        Attachments {
            rx,
            viewer: Viewer {
                tx,
                lagged: Arc::default(),
            },
        }
    }

    pub fn lagged(&self) -> bool {
        self.viewer.lagged.load(Ordering::Acquire)
    }
}

impl Default for Attachments {
    fn default() -> Self {
        Attachments::new()
    }
}

struct Session {
    info: HostedInfo,
    /// Its `LAZARET_SESSION_ID`: the escalation client names it.
    session_id: String,
    parser: vt100::Parser,
    viewers: BTreeMap<u64, Viewer>,
    /// Prompts waiting for a human, shown to every client that attaches.
    prompts: Vec<Prompt>,
    /// Removed (and renewal stopped) when the session ends.
    credential: Option<CredentialFile>,
    /// Taken over from an earlier coordinator: its screen here starts
    /// empty (`Screen.partial`).
    adopted: bool,
    /// Made ahead for the next new tab ([`Hosted::make_spare`]): no client
    /// sees it, attaches to it or types into it, and it holds nothing up,
    /// until a start claims it. Its escalations are refused meanwhile: it
    /// is in no session table yet.
    spare: bool,
}

impl Session {
    fn screen(&self) -> CoordMsg {
        let screen = self.parser.screen();
        let mut history = String::new();
        if !screen.alternate_screen() {
            let _ = screen.write_contents_formatted_basic(
                &mut history,
                vt100::capture::BasicFormattedCaptureRange::Full(&mut Default::default()),
            );
        }
        CoordMsg::Screen {
            session: self.info.id,
            rows: self.info.rows,
            cols: self.info.cols,
            history: history.replace('\n', "\r\n"),
            state: screen.state_formatted(),
            partial: self.adopted,
        }
    }

    fn broadcast(&self, msg: &CoordMsg) {
        for v in self.viewers.values() {
            v.send(msg.clone());
        }
    }
}

#[derive(Default)]
struct State {
    /// Frames for the Session Host, while it is connected.
    link: Option<mpsc::Sender<Frame>>,
    /// What the host we started must say first.
    token: Option<String>,
    /// Counts host connections: a session belongs to the one it started in.
    generation: u64,
    next_id: u32,
    sessions: BTreeMap<u32, Session>,
    spawns: BTreeMap<u32, oneshot::Sender<Result<u32, String>>>,
    /// The spare session, once it runs.
    spare: Option<Spare>,
    making_spare: bool,
    /// The host was asked to let go of its connection for a checkpoint:
    /// its sessions run on, and no other host is started meanwhile.
    held: bool,
    /// What the sessions' screens may hold in memory, all together.
    screens: ScreenBudget,
}

impl State {
    /// A screen for session `id` at (about) `rows` x `cols`: the size
    /// clamped and charged to the domain's budget, with the scrollback
    /// that fits. Every screen is made here.
    fn new_screen(
        &mut self,
        id: u32,
        rows: u16,
        cols: u16,
    ) -> Result<(Sized, vt100::Parser), String> {
        let sized = self
            .screens
            .admit(id, rows, cols)
            .map_err(|e| e.to_string())?;
        let parser = vt100::Parser::new(nonzero(sized.rows), nonzero(sized.cols), sized.scrollback);
        Ok((sized, parser))
    }

    /// Session `id` goes, and its screen's charge with it.
    fn remove(&mut self, id: u32) -> Option<Session> {
        self.screens.release(id);
        self.sessions.remove(&id)
    }
}

/// `argv` as announced by the Session Host (the agent's to forge), cut
/// to [`ANNOUNCED_ARGV_WORDS`] words and [`ANNOUNCED_ARGV_BYTES`] bytes,
/// with a last word saying how much was cut.
pub fn bound_argv(argv: Vec<String>) -> Vec<String> {
    let total: usize = argv.iter().map(String::len).sum();
    if argv.len() <= ANNOUNCED_ARGV_WORDS && total <= ANNOUNCED_ARGV_BYTES {
        return argv;
    }
    let (words, mut left) = (argv.len(), ANNOUNCED_ARGV_BYTES);
    let mut out = Vec::new();
    for mut word in argv.into_iter().take(ANNOUNCED_ARGV_WORDS - 1) {
        if left == 0 {
            break;
        }
        if word.len() > left {
            let mut cut = left;
            while !word.is_char_boundary(cut) {
                cut -= 1;
            }
            word.truncate(cut);
        }
        left -= word.len();
        out.push(word);
    }
    out.push(format!("[cut: {words} words, {total} bytes announced]"));
    out
}

/// What a spare session runs, and at which size it was made.
#[derive(Debug, Clone)]
struct SpareOf {
    argv: Vec<String>,
    term: Option<String>,
    rows: u16,
    cols: u16,
}

#[derive(Debug)]
struct Spare {
    id: u32,
    like: SpareOf,
    key: lazaret_escalate::ed25519_dalek::VerifyingKey,
}

/// What a `SessionStart` asks for.
#[derive(Debug, Clone)]
pub struct NewSession {
    pub argv: Vec<String>,
    pub rows: u16,
    pub cols: u16,
    pub purpose: String,
    pub term: Option<String>,
    /// Keep a spare like it ready for the next start (a login shell).
    pub warm: bool,
}

/// A hosted session's start, for the coordinator's session table: its
/// escalation identity and where its prompts go.
#[derive(Debug)]
pub struct Started {
    pub info: HostedInfo,
    pub session_id: String,
    pub key: lazaret_escalate::ed25519_dalek::VerifyingKey,
    pub human: mpsc::UnboundedSender<ToHuman>,
}

/// What the Session Host's link tells the coordinator's session table.
#[derive(Debug)]
pub enum HostEvent {
    /// A hosted session ended: the coordinator drops it from its table.
    Ended {
        id: u32,
        session_id: String,
        code: i32,
    },
    /// A session that outlived the coordinator before this one, adopted
    /// from the Session Host when it came back.
    Adopted(Box<Started>),
    /// Something the Session Host announced was over a bound and refused
    /// (for the log and the audit log; at most once per report interval
    /// for what recurs).
    Refused(String),
}

/// The domain's hosted sessions and its link to the Session Host.
pub struct Hosted {
    /// The host socket, on the host side (in the escalation folder).
    socket: PathBuf,
    certs_dir: PathBuf,
    sandbox: Mutex<Option<String>>,
    state: Mutex<State>,
    /// One start of the Session Host at a time.
    launching: tokio::sync::Mutex<()>,
    /// The host's generation, once connected.
    connected: watch::Sender<u64>,
    events: mpsc::UnboundedSender<HostEvent>,
    /// The Session Host's token, kept for a coordinator that replaces
    /// this one (the host reconnects to it with the same token).
    token_file: PathBuf,
    /// A token was found there: the host of an earlier coordinator may
    /// come back, and is waited for before another is started.
    returning: AtomicBool,
    /// Whether a session id is in the coordinator's table already (an
    /// adopted session may not take another session's identity).
    taken: std::sync::OnceLock<SessionIdTaken>,
    /// Bumped when what [`Hosted::list`] shows changes (the coordinator's
    /// status watchers).
    changes: watch::Sender<u64>,
    /// Told when a held host has let go of its connection.
    released: tokio::sync::Notify,
    /// How often announced sessions are adopted.
    adoptions: Mutex<Rate>,
}

/// Connections to the host socket that have not greeted yet, oldest
/// first: their number, and what ends one.
type Ungreeted = std::collections::VecDeque<(u64, Arc<tokio::sync::Notify>)>;

/// See [`Hosted::set_taken`].
pub type SessionIdTaken = Box<dyn Fn(&str) -> bool + Send + Sync>;

impl std::fmt::Debug for Hosted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hosted")
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

impl Hosted {
    /// Binds the host socket (before the sandbox starts: the sandbox sees
    /// its folder as it was then) and serves it. Hosted sessions that end
    /// are told on the returned channel.
    pub fn open(
        escalation_dir: &Path,
        certs_dir: &Path,
        domain_root: &Path,
        changes: watch::Sender<u64>,
    ) -> std::io::Result<(Arc<Hosted>, mpsc::UnboundedReceiver<HostEvent>)> {
        let socket = escalation_dir.join(wire::SOCKET_NAME);
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket)?;
        let (events, events_rx) = mpsc::unbounded_channel();
        let token_file = domain_root.join("session-host.token");
        let saved = std::fs::read_to_string(&token_file)
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
        let hosted = Arc::new(Hosted {
            socket,
            certs_dir: certs_dir.to_path_buf(),
            sandbox: Mutex::new(None),
            returning: AtomicBool::new(saved.is_some()),
            state: Mutex::new(State {
                token: saved,
                ..State::default()
            }),
            launching: tokio::sync::Mutex::new(()),
            connected: watch::channel(0).0,
            events,
            token_file,
            taken: std::sync::OnceLock::new(),
            changes,
            released: tokio::sync::Notify::new(),
            adoptions: Mutex::new(Rate::new(
                "sessions announced by the Session Host",
                ADOPT_BURST,
                ADOPT_EVERY,
            )),
        });
        tokio::spawn(hosted.clone().accept(listener));
        Ok((hosted, events_rx))
    }

    /// Asks the Session Host to let go of its connection (a checkpoint
    /// cannot save a connected socket to the host) and waits until it has;
    /// `false` when no host is connected. Until [`Hosted::wake`], no
    /// other host is started.
    pub async fn hold(&self) -> Result<bool, String> {
        let released = self.released.notified();
        tokio::pin!(released);
        released.as_mut().enable();
        let link = {
            let mut state = self.state.lock().expect("lock");
            state.held = true;
            state.link.clone()
        };
        let Some(link) = link else {
            return Ok(false);
        };
        link.send(Frame::new(kind::HOLD, 0, Vec::new()))
            .await
            .map_err(|_| "the Session Host's connection ended".to_string())?;
        tokio::time::timeout(HOST_DEADLINE, released)
            .await
            .map_err(|_| "the Session Host did not let go of its connection".to_string())?;
        Ok(true)
    }

    /// Wakes a held host (init passes SIGUSR2 on to it) and, when `was_held`,
    /// waits until it is connected again.
    pub async fn wake(&self, sandbox: &str, was_held: bool) -> Result<(), String> {
        let mut connected = self.connected.subscribe();
        let before = *connected.borrow_and_update();
        self.state.lock().expect("lock").held = false;
        if !was_held {
            return Ok(());
        }
        let sandbox = sandbox.to_string();
        tokio::task::spawn_blocking(move || {
            crate::podman::Podman::default()
                .run(["kill", "--signal", "USR2", &sandbox])
                .map_err(|e| format!("cannot wake the Session Host: {e}"))
        })
        .await
        .map_err(|e| e.to_string())??;
        tokio::time::timeout(HOST_DEADLINE, async {
            while *connected.borrow_and_update() == before {
                if connected.changed().await.is_err() {
                    break;
                }
            }
        })
        .await
        .map_err(|_| "the Session Host did not come back".to_string())
    }

    /// Waits (up to `patience`) until the host has told of a running
    /// session, or has been connected for a moment without telling of
    /// any (it tells of its sessions as soon as it greets).
    pub async fn await_sessions(&self, patience: Duration) {
        let deadline = tokio::time::Instant::now() + patience;
        let mut connected_at = None;
        while tokio::time::Instant::now() < deadline {
            if *self.connected.borrow() > 0
                && connected_at
                    .get_or_insert_with(tokio::time::Instant::now)
                    .elapsed()
                    > Duration::from_secs(2)
            {
                return;
            }
            let any = self
                .state
                .lock()
                .expect("lock")
                .sessions
                .values()
                .any(|s| s.info.exited.is_none());
            if any {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The token the Session Host greets with.
    pub fn token(&self) -> Option<String> {
        self.state.lock().expect("lock").token.clone()
    }

    /// The domain is down: its socket and the host's token go.
    pub fn forget(&self) {
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(&self.token_file);
        let _ = std::fs::remove_file(self.host_token_file());
    }

    /// The token for the sandbox's init ([`wire::TOKEN_PATH`] inside).
    fn host_token_file(&self) -> PathBuf {
        self.socket.with_file_name(wire::TOKEN_NAME)
    }

    /// How to tell a session id the coordinator knows already.
    pub fn set_taken(&self, taken: SessionIdTaken) {
        let _ = self.taken.set(taken);
    }

    /// The sandbox is up: sessions can start in it.
    pub fn set_sandbox(&self, name: &str) {
        *self.sandbox.lock().expect("lock") = Some(name.to_string());
    }

    /// Client connections attached to some session.
    pub fn viewer_conns(&self) -> std::collections::BTreeSet<u64> {
        let state = self.state.lock().expect("lock");
        state
            .sessions
            .values()
            .flat_map(|s| s.viewers.keys().copied())
            .collect()
    }

    pub fn is_live(&self, id: u32) -> bool {
        let state = self.state.lock().expect("lock");
        state
            .sessions
            .get(&id)
            .is_some_and(|s| s.info.exited.is_none())
    }

    /// After a coordinator's death: waits (a few seconds) for the Session
    /// Host of the one before to come back, so its sessions are adopted
    /// rather than a second host started. Otherwise nothing: the host
    /// starts with the domain's first hosted session, so a domain that
    /// has none (`exec`, `shell`) never pays for it.
    pub async fn await_returning(&self) {
        let _one = self.launching.lock().await;
        if !self.returning.swap(false, Ordering::AcqRel) {
            return;
        }
        let mut connected = self.connected.subscribe();
        let _ = tokio::time::timeout(RETURN_DEADLINE, async {
            while *connected.borrow_and_update() == 0 {
                if connected.changed().await.is_err() {
                    break;
                }
            }
        })
        .await;
    }

    /// A session the host runs from before this coordinator: it gets its
    /// number back, a new key under its id and a new credential, and an
    /// empty screen (what it showed before is gone with the coordinator
    /// that kept it).
    fn adopt(self: &Arc<Self>, id: u32, live: wire::Live) {
        // What a LIVE frame says is the agent's to forge (it can read the
        // token in the sandbox): a session id that is not a UUID v4 (a
        // path for the credential file), one already in use, a number
        // taken by a running session or a 65th session are refused.
        let Some(session_id) = live
            .session_id
            .filter(|s| uuid::Uuid::parse_str(s).is_ok_and(|u| u.get_version_num() == 4))
        else {
            return;
        };
        {
            let state = self.state.lock().expect("lock");
            let running: Vec<&Session> = state
                .sessions
                .values()
                .filter(|s| s.info.exited.is_none())
                .collect();
            if id == 0
                || running.len() >= wire::MAX_SESSIONS
                || running
                    .iter()
                    .any(|s| s.info.id == id || s.session_id == session_id)
            {
                return;
            }
        }
        if self.taken.get().is_some_and(|taken| taken(&session_id)) {
            return;
        }
        let allowed = {
            let mut rate = self.adoptions.lock().expect("lock");
            let allowed = rate.allow();
            if let Some(report) = rate.report() {
                let _ = self.events.send(HostEvent::Refused(report));
            }
            allowed
        };
        if !allowed {
            return;
        }
        let anchor = match SessionAnchor::with_id(session_id.clone()) {
            Ok(a) => a,
            Err(_) => return,
        };
        let Ok(credential) = anchor.publish_credential(&self.certs_dir) else {
            return;
        };
        let key = anchor.public_key();
        let info = {
            let mut state = self.state.lock().expect("lock");
            let (sized, parser) = match state.new_screen(id, live.rows, live.cols) {
                Ok(made) => made,
                Err(why) => {
                    drop(state);
                    let _ = self.events.send(HostEvent::Refused(format!(
                        "session {id} announced by the Session Host was not adopted: {why}"
                    )));
                    return;
                }
            };
            let argv = bound_argv(live.argv);
            let info = HostedInfo::running(id, "adopted".into(), argv, sized.rows, sized.cols);
            state.next_id = state.next_id.max(id);
            state.sessions.insert(
                id,
                Session {
                    info: info.clone(),
                    session_id: session_id.clone(),
                    parser,
                    viewers: BTreeMap::new(),
                    prompts: Vec::new(),
                    credential: Some(credential),
                    adopted: true,
                    spare: false,
                },
            );
            info
        };
        let (human, inbox) = mpsc::unbounded_channel();
        self.spawn_inbox(id, inbox);
        let _ = self.events.send(HostEvent::Adopted(Box::new(Started {
            info,
            session_id,
            key,
            human,
        })));
    }

    pub fn list(&self) -> Vec<HostedInfo> {
        let state = self.state.lock().expect("lock");
        state
            .sessions
            .values()
            .filter(|s| !s.spare)
            .map(|s| {
                let mut info = s.info.clone();
                info.viewers = s.viewers.len() as u32;
                info.pending = s.prompts.len() as u32;
                info
            })
            .collect()
    }

    async fn accept(self: Arc<Self>, listener: UnixListener) {
        // Connections that have not greeted yet, oldest first: a new one
        // over the bound cancels the oldest, so the agent, which can open
        // as many as it likes, never keeps the real host (which greets at
        // once) from being heard.
        let ungreeted: Arc<Mutex<Ungreeted>> = Arc::default();
        let mut count = 0u64;
        loop {
            let stream = match listener.accept().await {
                Ok((s, _)) => s,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            count += 1;
            let (n, evicted) = (count, Arc::new(tokio::sync::Notify::new()));
            {
                let mut waiting = ungreeted.lock().expect("lock");
                waiting.push_back((n, evicted.clone()));
                while waiting.len() > MAX_UNGREETED {
                    if let Some((_, oldest)) = waiting.pop_front() {
                        oldest.notify_one();
                    }
                }
            }
            let me = self.clone();
            let waiting = ungreeted.clone();
            tokio::spawn(async move {
                let (r, w) = stream.into_split();
                let mut frames = FramedRead::new(
                    r,
                    LengthDelimitedCodec::builder()
                        .big_endian()
                        .length_field_length(4)
                        .max_frame_length(wire::MAX_FRAME)
                        .new_codec(),
                );
                let hello = tokio::select! {
                    hello = tokio::time::timeout(GREET_DEADLINE, frames.next()) => hello,
                    _ = evicted.notified() => return,
                };
                waiting.lock().expect("lock").retain(|(id, _)| *id != n);
                let Ok(Some(Ok(body))) = hello else { return };
                let Some(hello) = Frame::decode(&body) else {
                    return;
                };
                let generation = {
                    let mut state = me.state.lock().expect("lock");
                    let expected = state.token.as_deref().map(str::as_bytes);
                    // Not while held for a checkpoint: a socket to the
                    // host must not be open for the save.
                    if hello.kind != kind::HELLO
                        || expected != Some(hello.payload.as_slice())
                        || state.link.is_some()
                        || state.held
                    {
                        return;
                    }
                    // Kept: the host reconnects with it to a coordinator
                    // that replaces this one. Whoever else reads it in the
                    // sandbox finds the place taken (one host at a time).
                    let (tx, rx) = mpsc::channel::<Frame>(VIEWER_QUEUE);
                    state.link = Some(tx);
                    state.generation += 1;
                    tokio::spawn(write_frames(w, rx));
                    state.generation
                };
                let _ = me.connected.send(generation);
                me.read_host(frames).await;
                me.host_gone(generation);
            });
        }
    }

    async fn read_host(
        self: &Arc<Self>,
        mut frames: FramedRead<tokio::net::unix::OwnedReadHalf, LengthDelimitedCodec>,
    ) {
        while let Some(Ok(body)) = frames.next().await {
            let Some(frame) = Frame::decode(&body) else {
                return;
            };
            match frame.kind {
                kind::OUTPUT => {
                    let mut state = self.state.lock().expect("lock");
                    if let Some(s) = state.sessions.get_mut(&frame.session) {
                        s.parser.process(&frame.payload);
                        // A message holds at most what the real host reads
                        // at once: a viewer's queue, bounded in messages,
                        // is then bounded in bytes too (some 43 MiB),
                        // whatever frames an impersonated host sends.
                        for piece in frame.payload.chunks(wire::CHUNK) {
                            s.broadcast(&CoordMsg::Output {
                                session: frame.session,
                                data: encode(piece),
                            });
                        }
                    }
                }
                kind::LIVE => {
                    if let Ok(live) = serde_json::from_slice::<wire::Live>(&frame.payload) {
                        self.adopt(frame.session, live);
                    }
                }
                kind::FOREGROUND => {
                    let busy = frame.payload.first().map(|b| *b != 0);
                    let news = {
                        let mut state = self.state.lock().expect("lock");
                        match state.sessions.get_mut(&frame.session) {
                            Some(s) if is_shell(&s.info.argv) && s.info.busy != busy => {
                                s.info.busy = busy;
                                !s.spare
                            }
                            _ => false,
                        }
                    };
                    if news {
                        self.changed();
                    }
                }
                kind::EXITED => {
                    let code = frame
                        .payload
                        .get(..4)
                        .and_then(|b| b.try_into().ok())
                        .map_or(-1, i32::from_be_bytes);
                    self.end(frame.session, code, None);
                }
                kind::SPAWNED | kind::SPAWN_FAILED => {
                    let answer = if frame.kind == kind::SPAWNED {
                        Ok(frame
                            .payload
                            .get(..4)
                            .and_then(|b| b.try_into().ok())
                            .map_or(0, u32::from_be_bytes))
                    } else {
                        Err(
                            lazaret_widgets::visible::make_visible(&String::from_utf8_lossy(
                                &frame.payload[..frame.payload.len().min(SPAWN_FAILED_BYTES)],
                            ))
                            .0,
                        )
                    };
                    let waiting = self
                        .state
                        .lock()
                        .expect("lock")
                        .spawns
                        .remove(&frame.session);
                    if let Some(tx) = waiting {
                        let _ = tx.send(answer);
                    }
                }
                _ => {}
            }
        }
    }

    /// The host's connection ended: every session it held has ended too.
    fn host_gone(&self, generation: u64) {
        // What the host announced over its rate is told in full as it goes.
        if let Some(report) = self.adoptions.lock().expect("lock").flush() {
            let _ = self.events.send(HostEvent::Refused(report));
        }
        let ids: Vec<u32> = {
            let mut state = self.state.lock().expect("lock");
            if state.generation != generation {
                return;
            }
            state.link = None;
            state.spawns.clear();
            if state.held {
                // Let go on purpose: its sessions are not lost.
                drop(state);
                self.released.notify_waiters();
                return;
            }
            state
                .sessions
                .values()
                .filter(|s| s.info.exited.is_none())
                .map(|s| s.info.id)
                .collect()
        };
        for id in ids {
            self.end(id, -1, Some("the sandbox's Session Host ended".into()));
        }
    }

    fn end(&self, id: u32, code: i32, why: Option<String>) {
        let ended = {
            let mut state = self.state.lock().expect("lock");
            let Some(s) = state.sessions.get_mut(&id) else {
                return;
            };
            if s.info.exited.is_some() {
                return;
            }
            if s.spare {
                // Nobody saw it: it goes without a trace.
                state.remove(id);
                if state.spare.as_ref().is_some_and(|s| s.id == id) {
                    state.spare = None;
                }
                return;
            }
            s.info.exited = Some(code);
            s.info.busy = None;
            s.credential = None;
            s.prompts.clear();
            s.broadcast(&CoordMsg::SessionEnded {
                session: id,
                code,
                why,
            });
            let ended = HostEvent::Ended {
                id,
                session_id: s.session_id.clone(),
                code,
            };
            // Ended sessions stay listed (and attachable, for their last
            // screen) until more than KEPT_ENDED have ended.
            let gone: Vec<u32> = state
                .sessions
                .values()
                .filter(|s| s.info.exited.is_some())
                .map(|s| s.info.id)
                .collect();
            for old in gone.iter().take(gone.len().saturating_sub(KEPT_ENDED)) {
                state.remove(*old);
            }
            ended
        };
        self.changed();
        let _ = self.events.send(ended);
    }

    /// Starts the Session Host in the sandbox unless it is connected, and
    /// waits for it; gives the link to it.
    async fn link(&self) -> Result<mpsc::Sender<Frame>, String> {
        if let Some(link) = self.state.lock().expect("lock").link.clone() {
            return Ok(link);
        }
        let _one = self.launching.lock().await;
        {
            let state = self.state.lock().expect("lock");
            if let Some(link) = state.link.clone() {
                return Ok(link);
            }
            if state.held {
                return Err(
                    "a checkpoint of the sandbox is being taken; try again in a moment".into(),
                );
            }
        }
        let sandbox = self
            .sandbox
            .lock()
            .expect("lock")
            .clone()
            .ok_or("the sandbox is not running yet")?;
        let token = uuid::Uuid::new_v4().simple().to_string();
        // Kept in the Domain Root for a coordinator that replaces this one,
        // and in the escalation folder for the sandbox's init, which starts
        // the host as its own child (so a checkpoint keeps its sessions).
        for file in [&self.token_file, &self.host_token_file()] {
            write_private(file, &token)?;
        }
        let mut connected = self.connected.subscribe();
        let before = *connected.borrow_and_update();
        self.state.lock().expect("lock").token = Some(token.clone());
        let started = tokio::task::spawn_blocking(move || {
            crate::podman::Podman::default()
                .run(["kill", "--signal", "USR1", &sandbox])
                .map_err(|e| format!("cannot ask the sandbox to start its Session Host: {e}"))
        })
        .await
        .map_err(|e| e.to_string())?;
        started?;
        let up = tokio::time::timeout(HOST_DEADLINE, async {
            while *connected.borrow_and_update() == before {
                if connected.changed().await.is_err() {
                    break;
                }
            }
        })
        .await;
        match (up, self.state.lock().expect("lock").link.clone()) {
            (Ok(()), Some(link)) => Ok(link),
            _ => Err(format!(
                "the sandbox's Session Host did not connect within {} s",
                HOST_DEADLINE.as_secs()
            )),
        }
    }

    /// Starts a session running `argv` at the given size, with `conn`
    /// attached to it from its first byte. A `warm` start takes the spare
    /// session made for it if there is one (its shell is at its prompt
    /// already), and leaves another spare behind for the next.
    pub async fn start(
        self: &Arc<Self>,
        new: NewSession,
        conn: u64,
        attachments: &Attachments,
    ) -> Result<Started, String> {
        if new.argv.is_empty() {
            return Err("no command to run".into());
        }
        self.link().await?;
        let (rows, cols) = clamp_size(new.rows, new.cols);
        let like = SpareOf {
            argv: new.argv.clone(),
            term: new.term.clone(),
            rows,
            cols,
        };
        let claimed = if new.warm {
            self.claim(&new, conn, attachments)
        } else {
            None
        };
        let started = match claimed {
            Some(started) => started,
            None => {
                let mut viewers = BTreeMap::new();
                viewers.insert(conn, attachments.viewer.clone());
                let (id, anchor) = self.spawn(&like, &new.purpose, viewers, false).await?;
                let (human, inbox) = mpsc::unbounded_channel();
                self.spawn_inbox(id, inbox);
                let info = self
                    .list()
                    .into_iter()
                    .find(|i| i.id == id)
                    .ok_or("the session ended at once")?;
                Started {
                    info,
                    session_id: anchor.id.clone(),
                    key: anchor.public_key(),
                    human,
                }
            }
        };
        if new.warm {
            self.make_spare(like);
        }
        Ok(started)
    }

    /// Starts `like` in the Session Host (`spare`: hidden until claimed)
    /// with these viewers; its number and Session Anchor once it runs.
    async fn spawn(
        self: &Arc<Self>,
        like: &SpareOf,
        purpose: &str,
        viewers: BTreeMap<u64, Viewer>,
        spare: bool,
    ) -> Result<(u32, SessionAnchor), String> {
        let link = self.link().await?;
        let anchor = SessionAnchor::new().map_err(|e| format!("{e:#}"))?;
        let credential = anchor
            .publish_credential(&self.certs_dir)
            .map_err(|e| format!("{e:#}"))?;
        let (spawned_tx, spawned_rx) = oneshot::channel();
        let (id, rows, cols) = {
            let mut state = self.state.lock().expect("lock");
            let id = state.next_id + 1;
            let (sized, parser) = state.new_screen(id, like.rows, like.cols)?;
            let (rows, cols) = (sized.rows, sized.cols);
            state.next_id = id;
            state.sessions.insert(
                id,
                Session {
                    info: HostedInfo::running(id, purpose.into(), like.argv.clone(), rows, cols),
                    session_id: anchor.id.clone(),
                    parser,
                    viewers,
                    prompts: Vec::new(),
                    credential: Some(credential),
                    adopted: false,
                    spare,
                },
            );
            state.spawns.insert(id, spawned_tx);
            (id, rows, cols)
        };
        let env = vec![
            (
                lazaret_escalate::env::SESSION_ID.to_string(),
                anchor.id.clone(),
            ),
            (
                lazaret_escalate::env::GUIDE.to_string(),
                lazaret_escalate::GUIDE_PATH.to_string(),
            ),
            (
                "TERM".to_string(),
                like.term.clone().unwrap_or_else(|| "xterm-256color".into()),
            ),
        ];
        let spawn = Spawn {
            argv: like.argv.clone(),
            env,
            rows,
            cols,
            spare,
        };
        let body = serde_json::to_vec(&spawn).map_err(|e| e.to_string())?;
        let answer = match link.send(Frame::new(kind::SPAWN, id, body)).await {
            Ok(()) => tokio::time::timeout(SPAWN_DEADLINE, spawned_rx)
                .await
                .map_err(|_| "the session did not start in time".to_string())
                .and_then(|r| r.map_err(|_| "the Session Host went away".to_string()))
                .and_then(|r| r),
            Err(_) => Err("the Session Host went away".into()),
        };
        if let Err(why) = answer {
            self.state.lock().expect("lock").remove(id);
            return Err(format!("the session could not start: {why}"));
        }
        Ok((id, anchor))
    }

    /// Makes a spare like `like` in the background, unless one is there
    /// or being made: the next warm start of the same command takes it.
    fn make_spare(self: &Arc<Self>, like: SpareOf) {
        {
            let mut state = self.state.lock().expect("lock");
            if state.spare.is_some() || state.making_spare {
                return;
            }
            state.making_spare = true;
        }
        let me = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(SPARE_DELAY).await;
            let made = me.spawn(&like, "", BTreeMap::new(), true).await;
            let mut state = me.state.lock().expect("lock");
            state.making_spare = false;
            if let Ok((id, anchor)) = made
                && state
                    .sessions
                    .get(&id)
                    .is_some_and(|s| s.info.exited.is_none())
            {
                state.spare = Some(Spare {
                    id,
                    like,
                    key: anchor.public_key(),
                });
            }
        });
    }

    /// The spare, if it runs `new`'s command with its terminal type: it
    /// becomes `new`'s session, sized to it, with `conn` attached and
    /// shown its screen (the shell's prompt, drawn already).
    fn claim(
        self: &Arc<Self>,
        new: &NewSession,
        conn: u64,
        attachments: &Attachments,
    ) -> Option<Started> {
        let mut state = self.state.lock().expect("lock");
        let link = state.link.clone()?;
        let spare = state.spare.take()?;
        if spare.like.argv != new.argv || spare.like.term != new.term {
            // Not for this command: it goes, and another is made.
            let _ = to_host(&link, hang_up_frame(spare.id));
            return None;
        }
        let s = state.sessions.get_mut(&spare.id)?;
        if s.info.exited.is_some() {
            return None;
        }
        // Sized like any resize: what the budget refuses keeps the size
        // the spare was made at.
        let (rows, cols) = state
            .screens
            .resize(spare.id, new.rows, new.cols)
            .unwrap_or((spare.like.rows, spare.like.cols));
        let s = state.sessions.get_mut(&spare.id)?;
        s.spare = false;
        // What its foreground was is told once: it stays (same command).
        let busy = s.info.busy;
        s.info = HostedInfo::running(spare.id, new.purpose.clone(), new.argv.clone(), rows, cols);
        s.info.busy = busy;
        to_host(&link, Frame::new(kind::CLAIM, spare.id, Vec::new())).ok()?;
        if (spare.like.rows, spare.like.cols) != (rows, cols) {
            s.parser.screen_mut().set_size(nonzero(rows), nonzero(cols));
            let mut size = rows.to_be_bytes().to_vec();
            size.extend_from_slice(&cols.to_be_bytes());
            let _ = to_host(&link, Frame::new(kind::RESIZE, spare.id, size));
        }
        attachments.viewer.send(s.screen());
        s.viewers.insert(conn, attachments.viewer.clone());
        let info = s.info.clone();
        let session_id = s.session_id.clone();
        drop(state);
        let (human, inbox) = mpsc::unbounded_channel();
        self.spawn_inbox(spare.id, inbox);
        Some(Started {
            info,
            session_id,
            key: spare.key,
            human,
        })
    }

    /// Carries a session's escalation news to its attached clients, and
    /// keeps its open prompts for clients that attach later.
    fn spawn_inbox(self: &Arc<Self>, id: u32, mut inbox: mpsc::UnboundedReceiver<ToHuman>) {
        let me = self.clone();
        tokio::spawn(async move {
            while let Some(news) = inbox.recv().await {
                let mut state = me.state.lock().expect("lock");
                let Some(s) = state.sessions.get_mut(&id) else {
                    return;
                };
                let msg = match news {
                    ToHuman::Prompt(prompt) => {
                        s.prompts.push(prompt.clone());
                        CoordMsg::Prompt { prompt }
                    }
                    ToHuman::Withdrawn { request_id, reason } => {
                        s.prompts.retain(|p| p.request_id != request_id);
                        CoordMsg::Withdrawn { request_id, reason }
                    }
                    ToHuman::Outcome(outcome) => CoordMsg::Outcome { outcome },
                    ToHuman::Warning(message) => CoordMsg::Warning { message },
                };
                s.broadcast(&msg);
            }
        });
    }

    /// Attaches `conn`: its first message is the screen as it is now,
    /// then the session's prompts still open, then what follows.
    pub fn attach(&self, id: u32, conn: u64, attachments: &Attachments) -> Result<(), String> {
        let mut state = self.state.lock().expect("lock");
        let s = state
            .sessions
            .get_mut(&id)
            .filter(|s| !s.spare)
            .ok_or_else(|| format!("there is no session {id} in this domain"))?;
        attachments.viewer.send(s.screen());
        for p in &s.prompts {
            attachments
                .viewer
                .send(CoordMsg::Prompt { prompt: p.clone() });
        }
        if let Some(code) = s.info.exited {
            attachments.viewer.send(CoordMsg::SessionEnded {
                session: id,
                code,
                why: None,
            });
        } else {
            s.viewers.insert(conn, attachments.viewer.clone());
        }
        drop(state);
        self.changed();
        Ok(())
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    pub fn detach(&self, id: u32, conn: u64) {
        if let Some(s) = self.state.lock().expect("lock").sessions.get_mut(&id) {
            s.viewers.remove(&conn);
        }
        self.changed();
    }

    /// The connection ended: it is attached nowhere.
    pub fn detach_all(&self, conn: u64) {
        let mut any = false;
        for s in self.state.lock().expect("lock").sessions.values_mut() {
            any |= s.viewers.remove(&conn).is_some();
        }
        if any {
            self.changed();
        }
    }

    /// A client that fell behind: a fresh screen of every session it
    /// views, in place of what it missed.
    pub fn resync(&self, conn: u64, attachments: &Attachments) {
        let state = self.state.lock().expect("lock");
        attachments.viewer.lagged.store(false, Ordering::Release);
        for s in state.sessions.values() {
            if s.viewers.contains_key(&conn) {
                attachments.viewer.send(s.screen());
            }
        }
    }

    /// Typed keys and pastes for a session. Never waits for the host:
    /// one the agent stopped must not hold up the client's connection
    /// (and the prompts on it); what does not fit is dropped.
    pub fn input(&self, id: u32, bytes: &[u8]) -> Result<(), String> {
        let link = self.running_link(id)?;
        for piece in bytes.chunks(wire::CHUNK) {
            to_host(&link, Frame::new(kind::INPUT, id, piece))?;
        }
        Ok(())
    }

    /// The session's size, set by the client that last resized it; the
    /// others get the screen redrawn at that size.
    pub fn resize(&self, id: u32, rows: u16, cols: u16, conn: u64) -> Result<(), ResizeError> {
        let link = self.running_link(id).map_err(ResizeError::NotRunning)?;
        let gone = || ResizeError::NotRunning(format!("there is no session {id} in this domain"));
        let (rows, cols) = {
            let mut state = self.state.lock().expect("lock");
            if !state.sessions.contains_key(&id) {
                return Err(gone());
            }
            let (rows, cols) = state.screens.resize(id, rows, cols)?;
            let s = state.sessions.get_mut(&id).ok_or_else(gone)?;
            if (s.info.rows, s.info.cols) == (rows, cols) {
                return Ok(());
            }
            s.info.rows = rows;
            s.info.cols = cols;
            s.parser.screen_mut().set_size(nonzero(rows), nonzero(cols));
            let screen = s.screen();
            for (c, v) in &s.viewers {
                if *c != conn {
                    v.send(screen.clone());
                }
            }
            (rows, cols)
        };
        let mut size = rows.to_be_bytes().to_vec();
        size.extend_from_slice(&cols.to_be_bytes());
        to_host(&link, Frame::new(kind::RESIZE, id, size)).map_err(ResizeError::NotRunning)
    }

    /// Hangs a session up (SIGHUP to its process group).
    pub fn hang_up(&self, id: u32) -> Result<(), String> {
        let link = self.running_link(id)?;
        to_host(&link, hang_up_frame(id))
    }

    /// A prompt of a hosted session was answered by `conn`: the others
    /// take it off their screens.
    pub fn answered(&self, request_id: &str, conn: u64) {
        let mut state = self.state.lock().expect("lock");
        for s in state.sessions.values_mut() {
            let before = s.prompts.len();
            s.prompts.retain(|p| p.request_id != request_id);
            if s.prompts.len() != before {
                for (c, v) in &s.viewers {
                    if *c != conn {
                        v.send(CoordMsg::Withdrawn {
                            request_id: request_id.to_string(),
                            reason: super::protocol::ANSWERED_ELSEWHERE.into(),
                        });
                    }
                }
            }
        }
    }

    fn running_link(&self, id: u32) -> Result<mpsc::Sender<Frame>, String> {
        let state = self.state.lock().expect("lock");
        match state.sessions.get(&id).filter(|s| !s.spare) {
            None => return Err(format!("there is no session {id} in this domain")),
            Some(s) if s.info.exited.is_some() => return Err(format!("session {id} has ended")),
            Some(_) => {}
        }
        state
            .link
            .clone()
            .ok_or_else(|| "the Session Host is not connected".into())
    }
}

fn hang_up_frame(id: u32) -> Frame {
    Frame::new(
        kind::SIGNAL,
        id,
        (nix::sys::signal::Signal::SIGHUP as i32).to_be_bytes(),
    )
}

/// A frame for the host, unless its queue is full (it stopped reading).
fn to_host(link: &mpsc::Sender<Frame>, frame: Frame) -> Result<(), String> {
    link.try_send(frame).map_err(|e| match e {
        mpsc::error::TrySendError::Full(_) => "the Session Host is not reading".to_string(),
        mpsc::error::TrySendError::Closed(_) => "the Session Host went away".to_string(),
    })
}

fn nonzero(n: u16) -> NonZeroU16 {
    NonZeroU16::new(n).unwrap_or(NonZeroU16::MIN)
}

async fn write_frames(mut w: tokio::net::unix::OwnedWriteHalf, mut rx: mpsc::Receiver<Frame>) {
    while let Some(frame) = rx.recv().await {
        if w.write_all(&frame.encode()).await.is_err() {
            return;
        }
    }
}

/// Writes `text` to `path`, readable by the user alone.
fn write_private(path: &Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A coordinator's hosted sessions in a temporary folder, whose earlier
    /// Session Host had `token`.
    #[allow(clippy::type_complexity)]
    fn open_with_token(
        token: &str,
    ) -> (
        tempfile::TempDir,
        PathBuf,
        (Arc<Hosted>, mpsc::UnboundedReceiver<HostEvent>),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (esc, certs, root) = (
            dir.path().join("esc"),
            dir.path().join("certs"),
            dir.path().join("root"),
        );
        for d in [&esc, &certs, &root] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(root.join("session-host.token"), token).unwrap();
        let opened = Hosted::open(&esc, &certs, &root, watch::channel(0).0).unwrap();
        (dir, certs, opened)
    }

    fn live(session_id: &str) -> Vec<u8> {
        serde_json::to_vec(&wire::Live {
            argv: vec!["/bin/sh".into()],
            session_id: Some(session_id.into()),
            rows: 24,
            cols: 80,
            pid: 7,
        })
        .unwrap()
    }

    /// A Session Host that comes back to a new coordinator is adopted
    /// from what it says, which the agent can forge: a session id that is
    /// a path, not a UUID v4, or another session's, and a number in use,
    /// are refused; nothing is written outside the certs folder.
    #[tokio::test]
    async fn forged_live_sessions_are_refused() {
        let (dir, certs, (hosted, mut events)) = open_with_token("tok");
        let known = uuid::Uuid::new_v4().to_string();
        let k = known.clone();
        hosted.set_taken(Box::new(move |id: &str| id == k));
        let good = uuid::Uuid::new_v4().to_string();
        let mut host = tokio::net::UnixStream::connect(hosted.socket.clone())
            .await
            .unwrap();
        let frames = [
            Frame::new(kind::HELLO, 0, b"tok".to_vec()),
            Frame::new(kind::LIVE, 1, live("../../escaped")),
            Frame::new(kind::LIVE, 2, live("not-a-uuid")),
            Frame::new(kind::LIVE, 3, live(&uuid::Uuid::nil().to_string())),
            Frame::new(kind::LIVE, 4, live(&known)),
            Frame::new(kind::LIVE, 5, live(&good)),
            Frame::new(kind::LIVE, 5, live(&uuid::Uuid::new_v4().to_string())),
            Frame::new(kind::LIVE, 6, live(&good)),
        ];
        for f in frames {
            host.write_all(&f.encode()).await.unwrap();
        }
        let adopted = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .unwrap()
            .unwrap();
        let HostEvent::Adopted(started) = adopted else {
            panic!("{adopted:?}");
        };
        assert_eq!(
            (started.info.id, started.session_id.as_str()),
            (5, good.as_str())
        );
        // Nothing else comes: every other frame was refused.
        assert!(
            tokio::time::timeout(Duration::from_millis(500), events.recv())
                .await
                .is_err()
        );
        let ids: Vec<u32> = hosted.list().iter().map(|s| s.id).collect();
        assert_eq!(ids, vec![5]);
        let written: Vec<String> = std::fs::read_dir(&certs)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            written,
            vec![lazaret_escalate::signing::credential_file_name(&good)]
        );
        assert!(!dir.path().join("escaped.cred").exists());
        assert!(!dir.path().join("session-..").exists());
    }

    fn rss() -> u64 {
        crate::coordinator::bounds::resident_memory().expect("VmRSS in /proc/self/status")
    }

    /// Plays the Session Host as the agent can (it reads the token):
    /// greets, then announces sessions `1..=count` at `rows` x `cols` with
    /// a 200 KiB command line, ending each at once when `end`. Returns the
    /// sessions adopted and the refusals told.
    async fn impersonate(
        hosted: &Hosted,
        events: &mut mpsc::UnboundedReceiver<HostEvent>,
        count: u32,
        (rows, cols): (u16, u16),
        end: bool,
    ) -> (Vec<HostedInfo>, Vec<String>) {
        let mut host = tokio::net::UnixStream::connect(hosted.socket.clone())
            .await
            .unwrap();
        host.write_all(&Frame::new(kind::HELLO, 0, b"tok".to_vec()).encode())
            .await
            .unwrap();
        for id in 1..=count {
            let live = serde_json::to_vec(&wire::Live {
                argv: vec!["A".repeat(200 << 10), "B".into()],
                session_id: Some(uuid::Uuid::new_v4().to_string()),
                rows,
                cols,
                pid: 7,
            })
            .unwrap();
            host.write_all(&Frame::new(kind::LIVE, id, live).encode())
                .await
                .unwrap();
            if end {
                let code = 0i32.to_be_bytes();
                host.write_all(&Frame::new(kind::EXITED, id, code).encode())
                    .await
                    .unwrap();
            }
        }
        let (mut adopted, mut refused) = (Vec::new(), Vec::new());
        while let Ok(Some(e)) = tokio::time::timeout(Duration::from_secs(3), events.recv()).await {
            match e {
                HostEvent::Adopted(s) => adopted.push(s.info),
                HostEvent::Refused(m) => refused.push(m),
                HostEvent::Ended { .. } => {}
            }
        }
        for info in &adopted {
            let bytes: usize = info.argv.iter().map(String::len).sum();
            assert!(
                bytes <= ANNOUNCED_ARGV_BYTES + 64,
                "{bytes} bytes of argv kept"
            );
            assert!(info.rows <= super::super::bounds::MAX_ROWS);
            assert!(info.cols <= super::super::bounds::MAX_COLS);
        }
        (adopted, refused)
    }

    /// Issue 40: an impersonated host announces 64 sessions at
    /// 65535x65535. Each is clamped and charged to the domain's screen
    /// budget; those over it are refused, and the refusal is told. The
    /// coordinator's memory stays within the budget.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_impersonated_host_cannot_size_the_coordinators_memory() {
        let (_dir, _certs, (hosted, mut events)) = open_with_token("tok");
        hosted.set_taken(Box::new(|_: &str| false));
        let before = rss();
        let (adopted, refused) =
            impersonate(&hosted, &mut events, 64, (u16::MAX, u16::MAX), false).await;
        let used = hosted.state.lock().unwrap().screens.used();
        let grown = rss().saturating_sub(before);
        eprintln!(
            "adopted {} of 64 at 65535x65535; screens charged {} MiB; RSS grew {} MiB",
            adopted.len(),
            used >> 20,
            grown >> 20
        );
        assert!(used <= super::super::bounds::SCREEN_BUDGET);
        assert!(adopted.len() >= 2, "the budget holds two such screens");
        assert!(adopted.len() < 64);
        assert!(
            refused.iter().any(|m| m.contains("screen memory")),
            "the refusal was told: {refused:?}"
        );
        // Within the budget, with slack for what other tests hold.
        assert!(
            grown < super::super::bounds::SCREEN_BUDGET + (128 << 20),
            "RSS grew {} MiB",
            grown >> 20
        );
    }

    /// Issue 40: announce-and-exit, over and over (each adoption costs
    /// audit records): adoptions stop at their burst, and the refusal is
    /// told once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn announcements_are_rate_limited() {
        let (_dir, _certs, (hosted, mut events)) = open_with_token("tok");
        hosted.set_taken(Box::new(|_: &str| false));
        let (adopted, refused) = impersonate(&hosted, &mut events, 300, (24, 80), true).await;
        assert_eq!(adopted.len(), ADOPT_BURST as usize);
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(
            refused[0].starts_with("1 sessions announced by the Session Host refused"),
            "{refused:?}"
        );
    }

    #[test]
    fn announced_command_lines_are_cut() {
        let short = vec!["/bin/sh".to_string(), "-l".to_string()];
        assert_eq!(bound_argv(short.clone()), short);
        let long = bound_argv(vec!["x".repeat(1 << 20), "y".into()]);
        assert_eq!(long.len(), 2);
        assert_eq!(long[0].len(), ANNOUNCED_ARGV_BYTES);
        assert!(long[1].contains("2 words, 1048577 bytes"), "{long:?}");
        let many = bound_argv(vec!["w".to_string(); 10_000]);
        assert_eq!(many.len(), ANNOUNCED_ARGV_WORDS);
    }

    fn sh(script: &str) -> Vec<String> {
        vec!["/bin/sh".into(), "-c".into(), script.into()]
    }

    fn new_session(argv: Vec<String>, rows: u16, cols: u16) -> NewSession {
        NewSession {
            argv,
            rows,
            cols,
            purpose: "test".into(),
            term: None,
            warm: true,
        }
    }

    /// The next message for a client with these attachments.
    async fn next(a: &mut Attachments) -> CoordMsg {
        tokio::time::timeout(Duration::from_secs(10), a.rx.recv())
            .await
            .expect("a message within 10 s")
            .expect("the queue is open")
    }

    /// The screen text a client has once `want` shows on it.
    async fn until_shown(a: &mut Attachments, want: &str) -> String {
        let mut parser = vt100::Parser::new(nonzero(24), nonzero(80), 0);
        loop {
            match next(a).await {
                CoordMsg::Screen {
                    rows,
                    cols,
                    history,
                    state,
                    ..
                } => {
                    parser = vt100::Parser::new(nonzero(rows), nonzero(cols), 0);
                    parser.process(history.as_bytes());
                    parser.process(state.as_bytes());
                }
                CoordMsg::Output { data, .. } => parser.process(&decode(&data).unwrap()),
                _ => {}
            }
            let text = parser.screen().contents();
            if text.contains(want) {
                return text;
            }
        }
    }

    async fn spare_id(hosted: &Hosted) -> u32 {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(spare) = hosted.state.lock().unwrap().spare.as_ref() {
                return spare.id;
            }
            assert!(std::time::Instant::now() < deadline, "no spare within 10 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A warm start leaves a spare running the same command, which no
    /// client sees, attaches to or types into; the next warm start of that
    /// command takes it at the new size, its screen already drawn (what it
    /// printed before anyone asked for it is there), and another spare is
    /// made. A start of another command hangs the spare up and starts its
    /// own. Real Session Host code, real PTYs, outside a sandbox.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_warm_start_takes_the_spare_already_at_its_prompt() {
        let (_dir, _certs, (hosted, _events)) = open_with_token("tok");
        hosted.set_sandbox("test");
        let socket = hosted.socket.to_string_lossy().into_owned();
        std::thread::spawn(move || wire::run(&socket, "tok"));
        hosted.await_returning().await;

        let shell = sh("echo started-$$; stty size; read x; echo got:$x; sleep 30");
        let mut first = Attachments::new();
        let one = hosted
            .start(new_session(shell.clone(), 24, 80), 1, &first)
            .await
            .unwrap();
        until_shown(&mut first, "24 80").await;
        let spare = spare_id(&hosted).await;
        assert_ne!(spare, one.info.id);
        let listed: Vec<u32> = hosted.list().iter().map(|s| s.id).collect();
        assert_eq!(listed, vec![one.info.id], "a spare is not listed");
        let mut peek = Attachments::new();
        assert!(hosted.attach(spare, 9, &peek).is_err(), "nor attached to");
        assert!(hosted.input(spare, b"typed\n").is_err(), "nor typed into");
        assert!(hosted.resize(spare, 10, 10, 9).is_err());
        assert!(hosted.hang_up(spare).is_err());
        assert!(peek.rx.try_recv().is_err());

        let mut second = Attachments::new();
        let two = hosted
            .start(new_session(shell.clone(), 30, 100), 2, &second)
            .await
            .unwrap();
        assert_eq!(two.info.id, spare, "the spare was taken");
        assert_eq!((two.info.rows, two.info.cols), (30, 100));
        // Its first message is its screen, drawn before it was asked for.
        let CoordMsg::Screen { history, state, .. } = next(&mut second).await else {
            panic!("the claimed session's screen comes first");
        };
        assert!(
            format!("{history}{state}").contains("started-"),
            "{history:?} {state:?}"
        );
        hosted.input(two.info.id, b"hello\n").unwrap();
        until_shown(&mut second, "got:hello").await;
        let listed: Vec<u32> = hosted.list().iter().map(|s| s.id).collect();
        assert_eq!(listed, vec![one.info.id, two.info.id]);
        let refilled = spare_id(&hosted).await;
        assert!(refilled > two.info.id, "another spare is made");

        // Another command: the spare is not it.
        let mut third = Attachments::new();
        let three = hosted
            .start(new_session(sh("echo other; sleep 30"), 24, 80), 3, &third)
            .await
            .unwrap();
        assert_ne!(three.info.id, refilled);
        until_shown(&mut third, "other").await;
        // Sizes from clients are clamped and charged like any: a third
        // screen of the largest size does not fit beside two.
        use super::super::bounds::{MAX_COLS, MAX_ROWS};
        hosted.resize(one.info.id, u16::MAX, u16::MAX, 1).unwrap();
        hosted.resize(two.info.id, u16::MAX, u16::MAX, 2).unwrap();
        let sizes: Vec<(u16, u16)> = hosted.list().iter().map(|s| (s.rows, s.cols)).collect();
        assert_eq!(sizes[..2], [(MAX_ROWS, MAX_COLS); 2]);
        let refused = hosted.resize(three.info.id, u16::MAX, u16::MAX, 3);
        assert!(
            matches!(refused, Err(ResizeError::OverBudget(_))),
            "{refused:?}"
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while hosted
            .state
            .lock()
            .unwrap()
            .sessions
            .contains_key(&refilled)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the unwanted spare was hung up"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for id in [one.info.id, two.info.id, three.info.id] {
            hosted.hang_up(id).unwrap();
        }
    }

    /// The agent can open as many connections to the host socket as it
    /// likes and never greet: they do not keep the real Session Host out.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_crowd_of_silent_connections_does_not_keep_the_host_out() {
        let (_dir, _certs, (hosted, _events)) = open_with_token("tok");
        hosted.set_sandbox("test");
        let socket = hosted.socket.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let crowd = {
            let (socket, stop) = (socket.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut held = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(c) = std::os::unix::net::UnixStream::connect(&socket) {
                        held.push(c);
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                held.len()
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let s = socket.to_string_lossy().into_owned();
        std::thread::spawn(move || wire::run(&s, "tok"));
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while hosted.state.lock().unwrap().link.is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "the host was kept out by the crowd"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut a = Attachments::new();
        let mut new = new_session(sh("echo crowd-ok; sleep 30"), 24, 80);
        new.warm = false;
        let started = hosted.start(new, 1, &a).await.unwrap();
        until_shown(&mut a, "crowd-ok").await;
        stop.store(true, Ordering::Relaxed);
        let opened = crowd.join().unwrap();
        assert!(opened > 100, "the crowd opened only {opened} connections");
        hosted.hang_up(started.info.id).unwrap();
    }
}
