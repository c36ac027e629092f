//! One tab = one Client Session: its control stream to the domain's
//! Session Coordinator (a tokio task) and its shell, `podman exec -it` in a
//! PTY whose output a reader thread parses into the pane.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use lazaret_widgets::modal::{ApprovalRequest, ApprovalView};
use lazaret_widgets::pane::{FeedSink, PaneState, spawn_feed};
use portable_pty::{Child, CommandBuilder, MasterPty, PtySize};
use tokio::sync::mpsc::UnboundedSender;

use super::Ev;
use crate::client::approval::Approval;
use crate::client::session::SessionAnchor;
use crate::client::terminal::paint;
use crate::client::{Launch, SessionChoice};
use crate::coordinator::client::{self};
use crate::coordinator::escalation::Prompt;
use crate::coordinator::hosted;
use crate::coordinator::protocol::{
    ClientMsg, CoordMsg, DomainStatus, FrameReader, StoppedBy, read_frame, write_frame,
};

/// Rows of scrollback each pane keeps.
const SCROLLBACK: usize = 10_000;

/// The shell of a tab. The writer is never dropped while the shell lives
/// (portable-pty writes "\n" + EOF on drop, which would submit a half-typed
/// line): `Drop` ends the child first.
pub struct Pty {
    master: Box<dyn MasterPty + Send>,
    writer: Arc<Mutex<Box<dyn Write + Send>>>,
    child: Box<dyn Child + Send + Sync>,
}

impl std::fmt::Debug for Pty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pty").finish_non_exhaustive()
    }
}

impl Pty {
    /// Hangs the shell up (SIGHUP), then kills it if it lingers.
    fn end(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = self.child.kill();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_)) | Err(_)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(pid) = self.child.process_id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = self.child.wait();
        }
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        self.end();
    }
}

/// Where a tab's PTY feed reports: replies go back to the shell, the UI is
/// woken at most once per frame however many batches were parsed.
struct PaneSink {
    id: u64,
    woke: Arc<AtomicBool>,
    replies: Arc<Mutex<Box<dyn Write + Send>>>,
    tx: std::sync::mpsc::Sender<Ev>,
}

impl FeedSink for PaneSink {
    fn reply(&mut self, bytes: &[u8]) {
        if let Ok(mut w) = self.replies.lock() {
            let _ = w.write_all(bytes);
            let _ = w.flush();
        }
    }

    fn output(&mut self) {
        // One wake-up in flight at most; the UI clears `woke` when it takes it.
        if !self.woke.swap(true, Ordering::AcqRel) {
            let _ = self.tx.send(Ev::Output(self.id));
        }
    }

    fn ended(&mut self) {
        let _ = self.tx.send(Ev::Exited(self.id));
    }
}

/// Where the tab's session stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    Connecting,
    Running,
    Failed(String),
}

/// A request waiting for this tab's human.
#[derive(Debug)]
pub struct Pending {
    /// The prompt's state and rules, shared with the plain terminal.
    pub approval: Approval,
    /// What the modal shows, and where its last layout left the body.
    pub request: ApprovalRequest,
    pub view: ApprovalView,
    /// Ids of later requests identical to this one (same session, command,
    /// directory): shown once, with their count; one decision answers all.
    pub copies: Vec<String>,
    /// The note without the count.
    note: String,
    /// From the approval inbox (another domain, or a session with no tab
    /// here): the domain whose coordinator takes the answer (its hash).
    pub route: Option<String>,
    /// The domain that asked (its hash): with the request's id, what the
    /// request is known by.
    pub domain: String,
}

impl Pending {
    /// A prompt signed as the session of tab `tab`. Who asked is named:
    /// sessions share one sandbox, so the human should know which
    /// session's credential signed it (threat-model.md).
    pub fn new(prompt: Prompt, tab: &str, domain: &str) -> Self {
        let short: String = prompt.session_id.chars().take(8).collect();
        let signer = format!("tab {tab} (session {short}, a human here)");
        let mut p = Pending::signed(prompt, &signer, None);
        p.domain = domain.to_string();
        p
    }

    /// A prompt of the approval inbox: asked by `asked_by` of the domain
    /// `label`, answered through that domain's coordinator (`hash`).
    pub fn routed(prompt: Prompt, asked_by: &str, label: &str, hash: &str) -> Self {
        let short: String = prompt.session_id.chars().take(8).collect();
        let signer = format!("{asked_by} of {label} (session {short}, not a tab here)");
        let mut p = Pending::signed(prompt, &signer, Some(hash.to_string()));
        p.domain = hash.to_string();
        p
    }

    fn signed(prompt: Prompt, signer: &str, route: Option<String>) -> Self {
        let note = format!("signed as {signer} · in {} · {}", prompt.cwd, prompt.reason);
        let request = ApprovalRequest {
            id: prompt.request_id.clone(),
            profile: prompt.profile.clone(),
            justification: prompt.justification.clone(),
            command: prompt.command.clone(),
            via_shell: prompt.via_shell,
            note: Some(note.clone()),
            reads: prompt.reads.clone(),
            review: prompt.review.clone(),
            ..ApprovalRequest::default()
        };
        // A fresh code per request (decisions.md D15): approving is typing
        // it, which prose does not do by accident.
        let code = crate::client::terminal::approval_code(3);
        Pending {
            approval: Approval::new(prompt, code),
            request,
            view: ApprovalView::new(),
            copies: Vec::new(),
            note,
            route,
            domain: String::new(),
        }
    }

    /// Whether this entry answers request `id` of domain `domain`.
    pub fn is(&self, domain: &str, id: &str) -> bool {
        self.domain == domain && self.ids().any(|i| i == id)
    }

    pub fn prompt(&self) -> &Prompt {
        self.approval.prompt()
    }

    /// Whether `other` asks exactly what this prompt asks, from the same
    /// session (a flood of one request is one decision, issue 13).
    pub fn is_identical(&self, other: &Prompt) -> bool {
        let p = self.prompt();
        p.session_id == other.session_id
            && p.command == other.command
            && p.cwd == other.cwd
            && p.via_shell == other.via_shell
    }

    /// Every request id this entry answers: its own, then its copies.
    pub fn ids(&self) -> impl Iterator<Item = &String> {
        std::iter::once(&self.prompt().request_id).chain(&self.copies)
    }

    pub fn add_copy(&mut self, request_id: String) {
        self.copies.push(request_id);
        self.refresh_note();
    }

    /// Takes `request_id` (withdrawn by its requester) off this entry;
    /// `false` when nothing of the entry is left. A withdrawn first request
    /// hands the modal to its next copy.
    pub fn withdraw(&mut self, request_id: &str) -> bool {
        if let Some(i) = self.copies.iter().position(|c| c == request_id) {
            self.copies.remove(i);
        } else if self.prompt().request_id == request_id {
            if self.copies.is_empty() {
                return false;
            }
            let next = self.copies.remove(0);
            self.approval.set_request_id(next.clone());
            self.request.id = next;
        }
        self.refresh_note();
        true
    }

    fn refresh_note(&mut self) {
        self.request.note = Some(match self.copies.len() {
            0 => self.note.clone(),
            n => format!(
                "×{} identical requests from this session: one decision answers all · {}",
                n + 1,
                self.note
            ),
        });
    }
}

/// A session that connected before the UI took the terminal (`lazaret
/// shell` starts its domain on the plain terminal): its identity, its
/// control stream (out of the runtime that opened it) and its domain.
#[derive(Debug)]
pub struct Preconnected {
    pub session: SessionAnchor,
    pub stream: std::os::unix::net::UnixStream,
    pub domain: DomainStatus,
}

#[derive(Debug)]
pub struct Tab {
    pub id: u64,
    pub title: String,
    pub phase: Phase,
    pub state: Arc<PaneState>,
    /// Set by the reader thread when it has woken the UI; cleared by the UI.
    pub woke: Arc<AtomicBool>,
    pub pty: Option<Pty>,
    /// Messages for the coordinator; dropping it closes the control stream.
    outbound: Option<UnboundedSender<ClientMsg>>,
    control: Option<std::thread::JoinHandle<()>>,
    pub domain: Option<DomainStatus>,
    pub prompts: VecDeque<Pending>,
    /// What the tab runs, and where.
    pub launch: Launch,
    started: Instant,
    /// Who stopped the domain under this tab, set by its control thread as
    /// soon as the coordinator says so (before the shell's end is seen).
    pub stopped_by: Arc<Mutex<Option<StoppedBy>>>,
    /// A hosted session's side of the tab (its shell lives in the domain).
    pub hosted: Option<Arc<HostedPane>>,
    /// This workbench asked the session to end (quit with "end", an abort,
    /// the tab closed): no farewell may say it runs on.
    pub ending: AtomicBool,
}

/// A tab showing a hosted session: which one, the size this client
/// wants, and how the session ended.
#[derive(Debug, Default)]
pub struct HostedPane {
    /// The session's number, once started or attached (0 before).
    pub session: std::sync::atomic::AtomicU32,
    /// The pane's own size; the session may have another client's.
    want: Mutex<(u16, u16)>,
    code: Mutex<Option<i32>>,
}

impl HostedPane {
    pub fn ended(&self) -> bool {
        self.code.lock().expect("lock").is_some()
    }

    pub fn id(&self) -> Option<u32> {
        match self.session.load(Ordering::Acquire) {
            0 => None,
            n => Some(n),
        }
    }
}

impl Tab {
    /// Whether the human opened this tab's front request (its modal has
    /// the keys).
    pub fn modal_open(&self) -> bool {
        self.prompts.front().is_some_and(|p| p.approval.is_open())
    }

    /// Every request of this tab goes back to waiting, closed.
    pub fn close_requests(&mut self) {
        for p in &mut self.prompts {
            p.approval.close();
        }
    }

    /// Who stopped the domain under this tab; a shell killed with it (exit
    /// 125 and up) may end before the notice is read, so that waits a
    /// moment for it.
    pub fn stopped_by(&self, code: Option<u8>) -> Option<StoppedBy> {
        let deadline = Instant::now() + Duration::from_millis(500);
        loop {
            let by = self.stopped_by.lock().expect("lock").clone();
            if by.is_some() || code.is_some_and(|c| c < 125) || Instant::now() > deadline {
                return by;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts connecting (in `rt`); the pane shows the boot progress.
    /// A `preconnected` session skips that: its domain is up.
    pub fn start(
        id: u64,
        launch: &Launch,
        rows: u16,
        cols: u16,
        tx: std::sync::mpsc::Sender<Ev>,
        preconnected: Option<Preconnected>,
    ) -> Tab {
        let (outbound, out_rx) = tokio::sync::mpsc::unbounded_channel();
        let state = Arc::new(PaneState::new(rows.max(1), cols.max(1), SCROLLBACK));
        if preconnected.is_none() {
            state.process(format!("lazaret: connecting to {}\r\n", launch.label).as_bytes());
        }
        // Its own thread and runtime: the connection's progress callback is
        // not `Send`, and a tab's control stream lives as long as the tab.
        let title = launch.profile.clone();
        let launch_copy = launch.clone();
        let launch = launch.clone();
        let failed = tx.clone();
        let stopped_by = Arc::new(Mutex::new(None));
        let stopped = Arc::clone(&stopped_by);
        let hosted = (launch.session != SessionChoice::Exec).then(|| {
            let h = HostedPane::default();
            *h.want.lock().expect("lock") = (rows.max(1), cols.max(1));
            Arc::new(h)
        });
        let woke = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let pane = hosted
            .clone()
            .map(|h| (h, state.clone(), woke.clone(), started));
        let control = std::thread::Builder::new()
            .name(format!("control-{id}"))
            .spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => {
                        rt.block_on(control(id, launch, preconnected, out_rx, tx, stopped, pane));
                    }
                    Err(e) => {
                        let _ = tx.send(Ev::Failed(id, format!("no async runtime: {e}")));
                    }
                }
            });
        let control = match control {
            Ok(handle) => Some(handle),
            Err(e) => {
                let _ = failed.send(Ev::Failed(id, format!("cannot start a thread: {e}")));
                None
            }
        };
        Tab {
            id,
            title,
            phase: Phase::Connecting,
            state,
            woke,
            pty: None,
            outbound: Some(outbound),
            control,
            domain: None,
            prompts: VecDeque::new(),
            launch: launch_copy,
            started: Instant::now(),
            stopped_by,
            hosted,
            ending: AtomicBool::new(false),
        }
    }

    pub fn progress(&self, step: &str) {
        let line = paint(&format!(
            "\x1b[2m[{:>5.1}s]\x1b[0m {}\r\n",
            self.started.elapsed().as_secs_f64(),
            crlf(step)
        ));
        self.state.process(line.as_bytes());
    }

    pub fn failed(&mut self, why: &str) {
        self.state
            .process(paint(&format!("\r\n\x1b[1;31mlazaret: {}\x1b[0m\r\n", crlf(why))).as_bytes());
        self.phase = Phase::Failed(why.to_string());
    }

    /// Runs `podman exec` with `args` in a PTY of the pane's size, and a
    /// reader thread feeding the pane.
    pub fn spawn_shell(
        &mut self,
        spec: &crate::client::session::ExecSpec,
        tx: std::sync::mpsc::Sender<Ev>,
    ) -> Result<()> {
        let (rows, cols) = self.state.size();
        let pair = portable_pty::native_pty_system()
            .openpty(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .map_err(|e| anyhow::anyhow!("cannot open a PTY: {e}"))?;
        let mut cmd = CommandBuilder::new("podman");
        cmd.args(&spec.args);
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        if let Ok(cwd) = std::env::current_dir() {
            cmd.cwd(cwd);
        }
        let child = pair
            .slave
            .spawn_command(cmd)
            .map_err(|e| anyhow::anyhow!("cannot run podman exec: {e}"))?;
        // The slave must go, so that the reader sees the end of the shell.
        drop(pair.slave);
        let id = self.id;
        let reader = pair
            .master
            .try_clone_reader()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let writer = Arc::new(Mutex::new(
            pair.master
                .take_writer()
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        ));
        let sink = PaneSink {
            id,
            woke: self.woke.clone(),
            replies: writer.clone(),
            tx,
        };
        spawn_feed(&format!("pty-{id}"), reader, self.state.clone(), sink)
            .context("cannot start the PTY reader")?;
        self.pty = Some(Pty {
            master: pair.master,
            writer,
            child,
        });
        self.phase = Phase::Running;
        Ok(())
    }

    /// How the shell ended (`podman exec` passes the inner exit code on);
    /// `None` when it never started or is still running after `patience`
    /// (the PTY closes a moment before `podman exec` exits).
    pub fn exit_code(&mut self, patience: Duration) -> Option<u8> {
        if let Some(h) = &self.hosted {
            return h.code.lock().expect("lock").map(|c| match c {
                c if c >= 0 => c.min(255) as u8,
                c => 128u8.saturating_add(c.unsigned_abs().min(127) as u8),
            });
        }
        let child = &mut self.pty.as_mut()?.child;
        let deadline = Instant::now() + patience;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Some(status.exit_code().min(255) as u8),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                _ => return None,
            }
        }
    }

    /// Whether the session command's program is missing from the sandbox.
    /// Under gVisor, `podman exec` of a missing program fails with 255 and
    /// an opaque runtime error; this asks the sandbox's shell instead.
    pub fn command_missing(&self) -> bool {
        if self.hosted.is_some() {
            // The Session Host says so itself, when the start fails.
            return false;
        }
        let (Some(domain), Some(program)) = (&self.domain, self.launch.argv.first()) else {
            return false;
        };
        crate::podman::Podman::default()
            .run([
                "exec",
                domain.sandbox.as_str(),
                "sh",
                "-c",
                "command -v \"$1\" >/dev/null",
                "sh",
                program.as_str(),
            ])
            .is_err_and(|e| e.to_string().contains("exit status: 1"))
    }

    /// Bytes for the shell (typed keys, pastes).
    pub fn write(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if let Some(h) = &self.hosted {
            let Some(session) = h.id() else { return };
            // The client that types sets the session's size (the rule in
            // docs/user-guide.md): take it back if another client changed it.
            let want = *h.want.lock().expect("lock");
            if self.state.size() != want {
                self.state.resize(want.0, want.1);
                self.send(ClientMsg::Resize {
                    session,
                    rows: want.0,
                    cols: want.1,
                });
            }
            self.send(ClientMsg::Input {
                session,
                data: hosted::encode(bytes),
            });
            return;
        }
        if let Some(pty) = &self.pty
            && let Ok(mut w) = pty.writer.lock()
        {
            let _ = w.write_all(bytes);
            let _ = w.flush();
        }
    }

    /// Sizes the parser and the PTY together (the parser lock is held
    /// across both, so the child's redraw is parsed at the new size).
    pub fn resize(&self, rows: u16, cols: u16) {
        let (rows, cols) = (rows.max(1), cols.max(1));
        if let Some(h) = &self.hosted {
            let mut want = h.want.lock().expect("lock");
            if *want == (rows, cols) {
                return;
            }
            *want = (rows, cols);
            self.state.resize(rows, cols);
            if let Some(session) = h.id() {
                self.send(ClientMsg::Resize {
                    session,
                    rows,
                    cols,
                });
            }
            return;
        }
        if self.state.size() == (rows, cols) {
            return;
        }
        match &self.pty {
            Some(pty) => {
                let _ = self.state.resize_with(rows, cols, |r, c| {
                    pty.master.resize(PtySize {
                        rows: r,
                        cols: c,
                        pixel_width: 0,
                        pixel_height: 0,
                    })
                });
            }
            None => self.state.resize(rows, cols),
        }
    }

    pub fn send(&self, msg: ClientMsg) {
        if let Some(out) = &self.outbound {
            let _ = out.send(msg);
        }
    }

    /// Ends a hosted session (the tab is closed, not left).
    pub fn end_session(&self) {
        self.ending.store(true, Ordering::Release);
        if let Some(session) = self.hosted.as_ref().and_then(|h| h.id()) {
            self.send(ClientMsg::EndSession { session });
        }
    }

    /// Ends the shell, then the control stream once what was sent on it
    /// (a last decision) is written: closing it ends the Client Session.
    pub fn close(&mut self) {
        if let Some(mut pty) = self.pty.take() {
            pty.end();
        }
        self.outbound = None;
        if let Some(handle) = self.control.take() {
            if self.phase == Phase::Connecting {
                // Still booting: it closes by itself once connected.
                return;
            }
            let deadline = Instant::now() + Duration::from_secs(2);
            while !handle.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if handle.is_finished() {
                let _ = handle.join();
            }
        }
    }
}

/// The tab's control stream: connect (boot progress to the pane), tell the
/// UI how to run the shell, then relay messages both ways for the tab's
/// life. Ends when the UI drops the tab's sender or the coordinator goes.
async fn control(
    id: u64,
    launch: Launch,
    preconnected: Option<Preconnected>,
    mut out_rx: tokio::sync::mpsc::UnboundedReceiver<ClientMsg>,
    tx: std::sync::mpsc::Sender<Ev>,
    stopped: Arc<Mutex<Option<StoppedBy>>>,
    pane: Option<HostedParts>,
) {
    // `lazaret shell` and `attach` said their steps on the plain terminal.
    let announce = preconnected.is_none();
    let connected = match preconnected {
        Some(p) => tokio::net::UnixStream::from_std(p.stream)
            .map(|stream| {
                let domain = p.domain;
                (p.session, client::Client { stream, domain })
            })
            .map_err(|e| format!("cannot use the control stream: {e}")),
        None => connect(id, &launch, &tx).await,
    };
    let (session, client) = match connected {
        Ok(c) => c,
        Err(why) => {
            let _ = tx.send(Ev::Failed(id, why));
            return;
        }
    };
    if let Some(pane) = pane {
        // The session's credential is the coordinator's to publish; this
        // anchor only says hello again after a coordinator died.
        let why = hosted_session(
            id, &launch, &session, client, out_rx, &tx, &stopped, pane, announce,
        )
        .await;
        if let Err(why) = why {
            let _ = tx.send(Ev::Failed(id, why));
        }
        let _ = tx.send(Ev::ControlClosed(id));
        return;
    }
    // Renewed for as long as the tab's control stream lives.
    let _credential = match session.publish_credential(&launch.ctx.certs_dir) {
        Ok(c) => c,
        Err(e) => {
            let _ = tx.send(Ev::Failed(id, format!("{e:#}")));
            return;
        }
    };
    let args = match session.exec_args(
        &client.domain.sandbox,
        true,
        Some("xterm-256color"),
        &launch.argv,
    ) {
        Ok(a) => a,
        Err(e) => {
            let _ = tx.send(Ev::Failed(id, format!("{e:#}")));
            return;
        }
    };
    let _ = tx.send(Ev::Connected(
        id,
        Box::new(client.domain.clone()),
        Box::new(args),
    ));
    let mut stream = client.stream;
    loop {
        let (mut r, mut w) = stream.into_split();
        // True when the coordinator went away (not the UI).
        // A domain going down says so first: then nothing reconnects.
        let reader = async {
            let mut going_down = false;
            while let Ok(msg) = read_frame::<_, CoordMsg>(&mut r).await {
                if let CoordMsg::ShuttingDown { stopped_by } = &msg {
                    going_down = true;
                    if let Some(by) = stopped_by {
                        *stopped.lock().expect("lock") = Some(by.clone());
                    }
                }
                if tx.send(Ev::Coord(id, Box::new(msg))).is_err() {
                    return false;
                }
            }
            !going_down
        };
        let writer = async {
            while let Some(msg) = out_rx.recv().await {
                if write_frame(&mut w, &msg).await.is_err() {
                    return true;
                }
            }
            false
        };
        let lost = tokio::select! {
            lost = reader => lost,
            lost = writer => lost,
        };
        if !lost || tx.send(Ev::CoordinatorLost(id)).is_err() {
            break;
        }
        // The coordinator died (the sandbox and this tab's shell live on):
        // reconnect as the same session, starting a new coordinator if
        // none is there; it adopts the running domain and counts us.
        let hello = session.hello(launch.purpose, true);
        match client::reconnect(&launch.ctx, &hello).await {
            Ok(c) => {
                stream = c.stream;
                if tx.send(Ev::Reconnected(id)).is_err() {
                    break;
                }
            }
            Err(e) => {
                let _ = tx.send(Ev::Failed(
                    id,
                    format!(
                        "cannot reconnect to domain {}: {e}",
                        launch.ctx.anchor.hash()
                    ),
                ));
                break;
            }
        }
    }
    let _ = tx.send(Ev::ControlClosed(id));
}

/// What the control thread of a hosted tab shares with the tab.
type HostedParts = (Arc<HostedPane>, Arc<PaneState>, Arc<AtomicBool>, Instant);

/// A hosted tab's control stream: start or attach, then the session's
/// screen and output into the pane (parsed here, in order with resizes),
/// the pane's keys out, and the domain's news to the UI. Ends when the
/// session ends, the UI drops the tab, or the coordinator goes.
#[allow(clippy::too_many_arguments)]
async fn hosted_session(
    id: u64,
    launch: &Launch,
    anchor: &SessionAnchor,
    client: client::Client,
    mut out_rx: tokio::sync::mpsc::UnboundedReceiver<ClientMsg>,
    tx: &std::sync::mpsc::Sender<Ev>,
    stopped: &Mutex<Option<StoppedBy>>,
    (pane, state, woke, started): HostedParts,
    announce: bool,
) -> std::result::Result<(), String> {
    let (r, mut w) = client.stream.into_split();
    let mut frames = FrameReader::new(r);

    let lost = |e: crate::coordinator::protocol::FrameError| {
        format!("the connection to the Session Coordinator failed: {e}")
    };
    let (rows, cols) = *pane.want.lock().expect("lock");
    let mut choice = launch.session;
    if choice == SessionChoice::Latest {
        write_frame(&mut w, &ClientMsg::Sessions)
            .await
            .map_err(lost)?;
        choice = loop {
            match frames.next::<CoordMsg>().await.map_err(lost)? {
                CoordMsg::Sessions { sessions } => {
                    break sessions
                        .iter()
                        .filter(|s| s.exited.is_none())
                        .max_by_key(|s| s.id)
                        .map_or(SessionChoice::Start, |s| SessionChoice::Attach(s.id));
                }
                CoordMsg::Error { message } => return Err(message),
                msg => {
                    let _ = tx.send(Ev::Coord(id, Box::new(msg)));
                }
            }
        };
    }
    match choice {
        SessionChoice::Attach(session) => {
            // Sized first, so the screen comes at this pane's size.
            for msg in [
                ClientMsg::Resize {
                    session,
                    rows,
                    cols,
                },
                ClientMsg::Attach { session },
            ] {
                write_frame(&mut w, &msg).await.map_err(lost)?;
            }
            pane.session.store(session, Ordering::Release);
        }
        _ => {
            if announce {
                // In the pane, before the session's first byte can be.
                state.process(
                    paint(&format!(
                        "\x1b[2m[{:>5.1}s]\x1b[0m the domain is up; starting the shell\r\n",
                        started.elapsed().as_secs_f64()
                    ))
                    .as_bytes(),
                );
            }
            let start = ClientMsg::SessionStart {
                argv: launch.argv.clone(),
                rows,
                cols,
                purpose: launch.purpose.to_string(),
                term: Some("xterm-256color".into()),
                // A shell: the next new tab finds one at its prompt.
                warm: launch.argv == crate::client::session::shell_argv(),
            };
            write_frame(&mut w, &start).await.map_err(lost)?;
        }
    }
    let wake = |woke: &AtomicBool| {
        if !woke.swap(true, Ordering::AcqRel) {
            let _ = tx.send(Ev::Output(id));
        }
    };
    let mut up = false;
    // After a reconnection: the new coordinator's screen of an adopted
    // session is partial, and this pane keeps what it showed.
    let mut reattached = false;
    let mut domain = client.domain.clone();
    loop {
        let msg = tokio::select! {
            m = frames.next::<CoordMsg>() => match m {
                Ok(m) => m,
                Err(e) => {
                    // The coordinator died (the session lives on in the
                    // sandbox's Session Host): reconnect to the one that
                    // replaces it, and attach again.
                    let Some(session) = pane.id().filter(|_| up) else {
                        return Err(lost(e));
                    };
                    if tx.send(Ev::CoordinatorLost(id)).is_err() {
                        return Ok(());
                    }
                    let c = client::reconnect(&launch.ctx, &anchor.hello(launch.purpose, true))
                        .await
                        .map_err(|e| {
                            format!("cannot reconnect to domain {}: {e}", launch.ctx.anchor.hash())
                        })?;
                    domain = c.domain.clone();
                    let (r, w2) = c.stream.into_split();
                    frames = FrameReader::new(r);
                    w = w2;
                    let (rows, cols) = *pane.want.lock().expect("lock");
                    // The session comes back once the new coordinator has
                    // adopted it from the Session Host.
                    let deadline = Instant::now() + Duration::from_secs(15);
                    loop {
                        write_frame(&mut w, &ClientMsg::Sessions).await.map_err(lost)?;
                        let known = loop {
                            match frames.next::<CoordMsg>().await.map_err(lost)? {
                                CoordMsg::Sessions { sessions } => {
                                    break sessions.iter().any(|s| s.id == session);
                                }
                                msg => {
                                    let _ = tx.send(Ev::Coord(id, Box::new(msg)));
                                }
                            }
                        };
                        if known {
                            break;
                        }
                        if Instant::now() > deadline {
                            return Err(format!(
                                "session {session} did not come back after the Session Coordinator died"
                            ));
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    for msg in [
                        ClientMsg::Resize { session, rows, cols },
                        ClientMsg::Attach { session },
                    ] {
                        write_frame(&mut w, &msg).await.map_err(lost)?;
                    }
                    reattached = true;
                    let _ = tx.send(Ev::Reconnected(id));
                    continue;
                }
            },
            out = out_rx.recv() => match out {
                Some(msg) => {
                    // A failed write shows as a failed read next.
                    let _ = write_frame(&mut w, &msg).await;
                    continue;
                }
                // The UI let the tab go: the session lives on.
                None => return Ok(()),
            },
        };
        let mine = |s: u32| pane.id() == Some(s);
        match msg {
            CoordMsg::SessionStarted { session } if !up => {
                pane.session.store(session.id, Ordering::Release);
                up = true;
                let _ = tx.send(Ev::Hosted(id, Box::new(domain.clone()), session.id));
            }
            CoordMsg::Screen {
                session,
                rows,
                cols,
                history,
                state: screen,
                partial,
            } if mine(session) => {
                if !(partial && reattached) {
                    // A fresh screen: what it answers to queries is not sent.
                    state.process(b"\x1bc");
                    state.resize(rows, cols);
                    state.process(history.as_bytes());
                    state.process(screen.as_bytes());
                }
                if !up {
                    up = true;
                    let _ = tx.send(Ev::Hosted(id, Box::new(domain.clone()), session));
                }
                wake(&woke);
            }
            CoordMsg::Output { session, data } if mine(session) => {
                let bytes = hosted::decode(&data)?;
                let answer = state.process(&bytes);
                if !answer.is_empty() {
                    let reply = ClientMsg::Input {
                        session,
                        data: hosted::encode(&answer),
                    };
                    let _ = write_frame(&mut w, &reply).await;
                }
                wake(&woke);
            }
            CoordMsg::SessionEnded { session, code, why } if mine(session) => {
                if let Some(why) = why {
                    state.process(paint(&format!("\r\nlazaret: {}\r\n", crlf(&why))).as_bytes());
                }
                *pane.code.lock().expect("lock") = Some(code);
                let _ = tx.send(Ev::Exited(id));
                return Ok(());
            }
            CoordMsg::Error { message } if !up => return Err(message),
            msg => {
                if let CoordMsg::ShuttingDown { stopped_by } = &msg {
                    if let Some(by) = stopped_by {
                        *stopped.lock().expect("lock") = Some(by.clone());
                    }
                    *pane.code.lock().expect("lock") = Some(-9);
                    let _ = tx.send(Ev::Coord(id, Box::new(msg)));
                    let _ = tx.send(Ev::Exited(id));
                    return Ok(());
                }
                if tx.send(Ev::Coord(id, Box::new(msg))).is_err() {
                    return Ok(());
                }
            }
        }
    }
}

/// A new session for the tab, connected once its domain is up (the boot
/// steps go to the pane); or why not.
async fn connect(
    id: u64,
    launch: &Launch,
    tx: &std::sync::mpsc::Sender<Ev>,
) -> Result<(SessionAnchor, client::Client), String> {
    let session = SessionAnchor::new().map_err(|e| format!("{e:#}"))?;
    let progress_tx = tx.clone();
    let client = client::connect(
        &launch.ctx,
        &session.hello(launch.purpose, true),
        true,
        &mut |step| {
            let _ = progress_tx.send(Ev::Progress(id, step.to_string()));
        },
    )
    .await
    .map_err(|e| format!("cannot reach domain {}: {e}", launch.ctx.anchor.hash()))?;
    Ok((session, client))
}

/// Text Lazaret writes into a pane ends its lines with CR LF: a terminal
/// moves down on LF only, so a multi-line error or log tail with bare LFs
/// would be drawn as a staircase.
fn crlf(text: &str) -> String {
    text.replace("\r\n", "\n").replace('\n', "\r\n")
}

/// Why a tab's session command ended, in words: `code` is `podman exec`'s
/// exit status (the command's own, or podman's 125-127 when it never ran).
pub fn exit_reason(argv: &[String], code: Option<u8>) -> String {
    let cmd = if argv.is_empty() {
        "the login shell".to_string()
    } else {
        format!("`{}`", argv.join(" "))
    };
    let program = argv.first().map(String::as_str).unwrap_or("the shell");
    match code {
        Some(127) => format!(
            "{cmd} failed: command not found (exit code 127); `{program}` is not in the profile's image: build the agent's image (`lazaret image build --agent NAME`) or fix the profile's command"
        ),
        Some(126) => format!("{cmd} failed: `{program}` cannot be executed (exit code 126)"),
        Some(125) => format!(
            "{cmd} could not start: podman exec failed (exit code 125); see the lines above"
        ),
        Some(255) => format!(
            "{cmd} ended with exit code 255 (podman exec or the command itself failed; see the lines above)"
        ),
        Some(n) => format!("{cmd} exited with code {n}; its last lines are above"),
        None => format!("{cmd} ended; its exit code is unknown"),
    }
}
