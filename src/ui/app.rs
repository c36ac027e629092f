//! The workbench's state and its event handling: tabs, coordinator
//! messages, the run loop. Input routing lives in [`input`] (the modal
//! gets first refusal of every key), drawing in [`draw`].

mod checkpoints;
mod draw;
mod input;

use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use lazaret_widgets::keys::{encode_key, encode_mouse, encode_paste};
use lazaret_widgets::modal::{ApprovalModal, CommandEditor};
use lazaret_widgets::pane::TerminalPane;
use lazaret_widgets::panels::{
    AuditEntry, AuditPanel, CheckpointsDialog, EscalationRow, EscalationStatus, EscalationsPanel,
    FormOutcome, HelpOverlay, HelpSection, HostedRow, KeyBinding, NetworkPanel, NewTabDialog,
    NewTabForm, ProfileChoice, RouteRow, SessionRow, SessionsPanel, StatusLine, TabBar, TabInfo,
};
use ratatui::Terminal;
use ratatui::backend::Backend;
use ratatui::crossterm::event::{
    Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseEvent, MouseEventKind,
};
use ratatui::layout::{Constraint, Layout, Rect, Size};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, BorderType};

use super::tab::{self, Pending, Phase, Tab};
use super::{Ev, FRAME, NetTable, key_matches};
use crate::client::approval::{self, LineEdit};
use crate::client::{Launch, Launcher, Mode};
use crate::coordinator::escalation::Verdict;
use crate::coordinator::protocol::{
    ANSWERED_ELSEWHERE, ClientMsg, CoordMsg, DomainStatus, StoppedBy,
};

/// Parses a prefix key written as `C-a`, `C-b`, `M-a`, `F12`.
pub fn parse_prefix(s: &str) -> Result<KeyEvent> {
    let (mods, rest) = if let Some(r) = s.strip_prefix("C-") {
        (KeyModifiers::CONTROL, r)
    } else if let Some(r) = s.strip_prefix("M-") {
        (KeyModifiers::ALT, r)
    } else {
        (KeyModifiers::NONE, s)
    };
    let code = match rest {
        r if r.chars().count() == 1 => {
            KeyCode::Char(r.chars().next().unwrap_or('a').to_ascii_lowercase())
        }
        r if r.starts_with('F') => match r[1..].parse::<u8>() {
            Ok(n) if (1..=12).contains(&n) => KeyCode::F(n),
            _ => bail!("unknown prefix key {s:?}: write it like C-a, M-b or F12"),
        },
        _ => bail!("unknown prefix key {s:?}: write it like C-a, M-b or F12"),
    };
    if mods == KeyModifiers::NONE && matches!(code, KeyCode::Char(_)) {
        bail!("the prefix key {s:?} would be a plain letter: use C-x or M-x");
    }
    Ok(KeyEvent::new(code, mods))
}

/// A side panel beside the pane.
use lazaret_widgets::layout::PanelKind as Panel;

/// How often an open sessions or network panel is read again (uptimes,
/// sessions, a table changed by `lazaret net` elsewhere) and the queue's
/// ages move on.
const PANEL_REFRESH: Duration = Duration::from_secs(2);

/// A line the human is typing in the status line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InputKind {
    Rename,
    /// A network to allow egress to, in the focused tab's domain.
    Allow,
    Deny,
}

#[derive(Debug)]
struct Input {
    kind: InputKind,
    line: LineEdit,
}

/// A request seen by this UI, for the escalation queue.
#[derive(Debug)]
struct Seen {
    /// The domain that asked (its hash) and the request's id: a request
    /// is known by both, as ids are the requester's to choose (a fork and
    /// its original share session ids; issue 40).
    domain: String,
    id: String,
    tab: String,
    arrived: Instant,
    command: String,
    status: EscalationStatus,
    /// Identical later requests of the same session, answered with this one.
    copies: usize,
}

impl Seen {
    fn is(&self, domain: &str, id: &str) -> bool {
        self.domain == domain && self.id == id
    }
}

/// A request of the approval inbox that no tab of this workbench holds.
#[derive(Debug)]
struct Inboxed {
    /// Its domain's hash and `profile · workspace`.
    hash: String,
    label: String,
    prompt: crate::coordinator::escalation::Prompt,
    asked_by: String,
}

pub struct App {
    launch: Launch,
    prefix_text: String,
    prefix: KeyEvent,
    launcher: Launcher,
    rt: tokio::runtime::Handle,
    tx: Sender<Ev>,
    tabs: Vec<Tab>,
    focus: usize,
    next_id: u64,
    armed: bool,
    help: bool,
    mode: Mode,
    /// `Some`: a line being typed in the status line.
    input: Option<Input>,
    /// `Some`: the new-tab dialog is open.
    new_tab: Option<NewTabForm>,
    /// `Some`: the checkpoints overlay is open (prefix K).
    checkpoints: Option<checkpoints::Overlay>,
    /// A restore or fork runs (a child `lazaret`); one at a time.
    cli_running: bool,
    /// The one panel of a narrow terminal (or the audit panel, which the
    /// dashboard adds to its column).
    panel: Option<Panel>,
    /// The dashboard column and its width (kept per user, [`layout_file`]).
    layout: lazaret_widgets::layout::LayoutChoice,
    /// The focused pane has the whole body.
    zoom: bool,
    /// A panel that has the keys (prefix Tab, or prefix s/w/e in the
    /// dashboard) instead of the shell; Esc gives them back.
    panel_focus: Option<Panel>,
    /// The selected row of each panel (sessions: domains and their hosted
    /// sessions, in the order drawn).
    selected: std::collections::HashMap<Panel, usize>,
    /// When an open panel is read again.
    next_refresh: Option<Instant>,
    /// When to draw again though nothing changed (a modal arming).
    redraw_at: Option<Instant>,
    domains: Vec<DomainStatus>,
    /// Each domain's egress refusals (by hash) when the human last had its
    /// network table on screen: the sessions panel shows those since.
    egress_looked: std::collections::HashMap<String, u64>,
    /// When each domain started, by this machine's clock (its status
    /// says how long it had been up when it was sent): the sessions panel
    /// shows the uptime at each draw.
    domain_started: std::collections::HashMap<String, Instant>,
    /// The live table of a domain (by hash), for the network panel.
    network: Option<(String, NetTable)>,
    /// How the last shell ended (`lazaret shell` exits with it).
    exit_code: Option<u8>,
    /// `lazaret shell` could not start its session.
    failure: Option<String>,
    /// Someone else stopped `lazaret shell`'s domain (`lazaret down`).
    pub stopped: Option<StoppedBy>,
    /// The human detached (`prefix d`): hosted sessions run on.
    pub detached: bool,
    /// `prefix q` asked what becomes of the sessions that would outlive
    /// the workbench; the next key answers.
    quitting: bool,
    /// `prefix x` on a tab whose session runs: its id, until the human
    /// answers (tmux's confirm-before).
    closing: Option<u64>,
    /// The border between the pane and the panels is being dragged.
    dragging_split: bool,
    seen: Vec<Seen>,
    /// Where answers to the approval inbox go (the workbench only).
    inbox: Option<super::inbox::Routes>,
    /// Requests of the approval inbox that no tab here holds, oldest first.
    inboxed: Vec<Inboxed>,
    audit: Vec<AuditEntry>,
    message: Option<String>,
    quit: bool,
    dirty: bool,
    size: Size,
    /// The cursor shape last sent to the terminal.
    cursor_style: Option<ratatui::crossterm::cursor::SetCursorStyle>,
    /// Frames (and cursor shapes) go to the real terminal on stdout,
    /// wrapped in synchronized-update markers; off for test backends.
    stdout_terminal: bool,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("tabs", &self.tabs.len())
            .finish_non_exhaustive()
    }
}

impl App {
    /// Declares that frames are drawn on the terminal on stdout: each is
    /// wrapped in synchronized-update markers, and the focused child's
    /// cursor shape is passed on.
    pub fn drawing_on_stdout(&mut self) {
        self.stdout_terminal = true;
    }

    pub fn new(
        launch: Launch,
        prefix_text: String,
        prefix: KeyEvent,
        launcher: Launcher,
        rt: tokio::runtime::Handle,
        tx: Sender<Ev>,
    ) -> App {
        let layout = load_layout(&launcher.config.data_root);
        let inbox = (launcher.mode == Mode::Workbench)
            .then(|| super::inbox::start(&rt, launcher.rundir.clone(), tx.clone()));
        App {
            inbox,
            inboxed: Vec::new(),
            launch,
            prefix_text,
            prefix,
            mode: launcher.mode,
            launcher,
            rt,
            tx,
            tabs: Vec::new(),
            focus: 0,
            next_id: 1,
            armed: false,
            help: false,
            input: None,
            new_tab: None,
            checkpoints: None,
            cli_running: false,
            panel: None,
            layout,
            zoom: false,
            panel_focus: None,
            selected: std::collections::HashMap::new(),
            next_refresh: None,
            redraw_at: None,
            domains: Vec::new(),
            egress_looked: std::collections::HashMap::new(),
            domain_started: std::collections::HashMap::new(),
            network: None,
            exit_code: None,
            stopped: None,
            failure: None,
            seen: Vec::new(),
            audit: Vec::new(),
            message: None,
            quit: false,
            detached: false,
            quitting: false,
            closing: None,
            dragging_split: false,
            dirty: true,
            cursor_style: None,
            stdout_terminal: false,
            size: Size::new(80, 24),
        }
    }

    /// How the session ended: the shell's exit code, or why it never ran.
    pub fn outcome(&self) -> Result<u8, String> {
        match (&self.failure, self.exit_code) {
            (Some(why), _) => Err(why.clone()),
            (None, code) => Ok(code.unwrap_or(0)),
        }
    }

    /// Opens the first tab, with the launch the UI started with (and its
    /// session, when it connected before); returns its pane, which outlives
    /// the tab (`lazaret shell` prints it when it ends).
    pub fn first_tab(
        &mut self,
        size: Size,
        preconnected: Option<tab::Preconnected>,
        reattach: &[Launch],
    ) -> std::sync::Arc<lazaret_widgets::pane::PaneState> {
        self.size = size;
        if !reattach.is_empty() {
            for launch in reattach {
                self.open_tab_with(launch, None);
            }
            self.message = Some(format!(
                "{} session(s) that outlived the last workbench shown again",
                reattach.len()
            ));
            return std::sync::Arc::clone(&self.tabs[self.focus].state);
        }
        let launch = self.launch.clone();
        self.open_tab_with(&launch, preconnected);
        std::sync::Arc::clone(&self.tabs[self.focus].state)
    }

    fn open_tab(&mut self, launch: &Launch) {
        self.open_tab_with(launch, None);
    }

    fn open_tab_with(&mut self, launch: &Launch, preconnected: Option<tab::Preconnected>) {
        let (rows, cols) = self.pane_size();
        let id = self.next_id;
        self.next_id += 1;
        let mut tab = Tab::start(id, launch, rows, cols, self.tx.clone(), preconnected);
        // Tabs of one profile are told apart: claude, claude-2, claude-3.
        let taken = |name: &str| self.tabs.iter().any(|t| t.title == name);
        if taken(&tab.title) {
            let n = (2..).find(|n| !taken(&format!("{}-{n}", tab.title)));
            tab.title = format!("{}-{}", tab.title, n.unwrap_or(2));
        }
        self.tabs.push(tab);
        self.focus = self.tabs.len() - 1;
        self.panel_focus = None;
        self.dirty = true;
    }

    fn tab_mut(&mut self, id: u64) -> Option<&mut Tab> {
        self.tabs.iter_mut().find(|t| t.id == id)
    }

    fn close_tab(&mut self, index: usize) {
        if index >= self.tabs.len() {
            return;
        }
        let mut tab = self.tabs.remove(index);
        // Closing a tab ends its session; leaving the UI does not.
        tab.end_session();
        // Requests it leaves unanswered are denied by the coordinator when
        // the session goes.
        for p in &tab.prompts {
            self.set_status(
                &p.domain,
                &p.prompt().request_id,
                EscalationStatus::Denied {
                    reason: Some("tab closed".into()),
                },
            );
        }
        tab.close();
        drop(tab);
        if self.tabs.is_empty() {
            self.quit = true;
        } else if self.focus >= self.tabs.len() {
            self.focus = self.tabs.len() - 1;
        }
        self.dirty = true;
    }

    /// Hosted sessions the tabs show that still run and that this
    /// workbench did not end (they outlive the UI).
    pub fn running_hosted(&self) -> Vec<(String, u32)> {
        self.hosted_farewells()
            .into_iter()
            .filter(|f| !f.ended)
            .map(|f| (f.title, f.session))
            .collect()
    }

    /// What becomes of each tab's hosted session as the workbench leaves,
    /// with the domain it lives in: the farewell names that domain, not
    /// the workbench's first (issue 43).
    pub fn hosted_farewells(&self) -> Vec<super::Farewell> {
        self.tabs
            .iter()
            .filter_map(|t| {
                let h = t.hosted.as_ref()?;
                let n = h.session.load(Ordering::Acquire);
                (n != 0 && !h.ended()).then(|| super::Farewell {
                    title: t.title.clone(),
                    session: n,
                    anchor: t.launch.ctx.anchor.clone(),
                    config: t.launch.ctx.config.clone(),
                    ended: t.ending.load(Ordering::Acquire),
                })
            })
            .collect()
    }

    /// Ends every shell, then closes every control stream (hosted
    /// sessions run on).
    pub fn shutdown(&mut self) {
        for t in &mut self.tabs {
            t.close();
        }
        self.tabs.clear();
    }

    fn set_status(&mut self, domain: &str, id: &str, status: EscalationStatus) {
        if let Some(s) = self.seen.iter_mut().find(|s| s.is(domain, id)) {
            s.status = status;
        }
    }

    /// The loop: block for events; render when dirty, at most every FRAME.
    /// Idle (nothing dirty, no panel to refresh) it sleeps in `recv`.
    pub fn run<B: Backend>(&mut self, term: &mut Terminal<B>, rx: &Receiver<Ev>) -> Result<()>
    where
        B::Error: Send + Sync + 'static,
    {
        let mut last = Instant::now() - FRAME;
        while !self.quit {
            let frame = self.dirty.then(|| last + FRAME);
            let wake = [frame, self.next_refresh, self.redraw_at]
                .into_iter()
                .flatten()
                .min();
            let ev = match wake {
                Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                    Ok(ev) => Some(ev),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                },
                None => match rx.recv() {
                    Ok(ev) => Some(ev),
                    Err(_) => break,
                },
            };
            match ev {
                Some(ev) => {
                    self.handle(ev);
                    // Take what else is queued before drawing.
                    for _ in 0..256 {
                        match rx.try_recv() {
                            Ok(ev) => self.handle(ev),
                            Err(_) => break,
                        }
                    }
                }
                None => {
                    if self.next_refresh.is_some_and(|t| t <= Instant::now()) {
                        self.refresh_panel();
                    }
                    if self.redraw_at.is_some_and(|t| t <= Instant::now()) {
                        self.redraw_at = None;
                        self.dirty = true;
                    }
                }
            }
            if self.dirty && last + FRAME <= Instant::now() {
                self.draw(term)?;
                last = Instant::now();
            }
        }
        Ok(())
    }

    /// Reads the open panel's data again, and schedules the next time.
    /// Whether `panel` is on screen now.
    pub(super) fn shows(&self, panel: Panel) -> bool {
        self.mode == Mode::Workbench && self.areas(self.size).panel(panel).is_some()
    }

    /// Reads what an opened panel shows. The sessions and network panels
    /// are kept up to date by the domains' events after that (the
    /// approval inbox's connections); only the queue's ages move on a
    /// timer, while a request waits.
    fn refresh_panel(&mut self) {
        self.next_refresh = None;
        if self.shows(Panel::Network) && !self.network_shown_is_focused() {
            self.refresh_network(None);
        }
        if self.shows(Panel::Escalations)
            && self
                .seen
                .iter()
                .any(|s| s.status == EscalationStatus::Pending)
        {
            self.dirty = true;
            self.next_refresh = Some(Instant::now() + PANEL_REFRESH);
        }
    }

    fn refresh_network(&mut self, change: Option<(crate::net::Target, bool)>) {
        if !self.shows(Panel::Network) && change.is_none() {
            return;
        }
        let Some(tab) = self.tabs.get(self.focus) else {
            return;
        };
        if tab.domain.is_none() {
            // Not up yet: nothing to read, nothing to change.
            if change.is_some() {
                self.message = Some("the domain is not up yet; try again when it is".into());
            }
            return;
        }
        let launch = tab.launch.clone();
        let tx = self.tx.clone();
        self.rt.spawn_blocking(move || {
            let hash = launch.ctx.anchor.hash().to_string();
            let result = super::network_table(&launch, change.clone());
            let _ = tx.send(Ev::Network(hash, change, result));
        });
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            // SIGTERM, SIGHUP or SIGINT: leave as the human's quit would,
            // restoring the terminal on the way out.
            Ev::Checkpointed(said) => {
                self.message = Some(said.unwrap_or_else(|e| e));
                self.checkpoints_changed();
                self.dirty = true;
            }
            Ev::CheckpointRan(run) => self.checkpoint_ran(*run),
            Ev::Signal(sig) => {
                self.exit_code = Some(128u8.saturating_add(sig as u8));
                self.quit = true;
            }
            Ev::Inbox { hash, label, msg } => self.inbox_news(hash, label, *msg),
            Ev::InboxGone(hash) => {
                self.domains.retain(|d| d.hash != hash);
                self.domain_started.remove(&hash);
                self.dirty = true;
                let gone: Vec<String> = self
                    .inboxed
                    .iter()
                    .filter(|i| i.hash == hash)
                    .map(|i| i.prompt.request_id.clone())
                    .collect();
                for id in gone {
                    self.inbox_withdrawn(&hash, &id, "its domain went down");
                }
            }
            Ev::Input(Event::Key(key)) => {
                if key.kind != KeyEventKind::Release {
                    self.key(key);
                }
            }
            Ev::Input(Event::Paste(text)) => self.paste(&text),
            Ev::Input(Event::Resize(w, h)) => {
                let had_network = self.shows(Panel::Network);
                self.size = Size::new(w, h);
                self.dirty = true;
                // Wide enough now for the dashboard: its network table is
                // read once, as when the panel is opened.
                if !had_network && self.shows(Panel::Network) {
                    self.refresh_panel();
                }
            }
            Ev::Input(Event::Mouse(m)) => self.mouse(&m),
            Ev::Input(_) => {}
            Ev::Output(id) => {
                if let Some(t) = self.tab_mut(id) {
                    t.woke.store(false, Ordering::Release);
                }
                if self.tabs.get(self.focus).is_some_and(|t| t.id == id) {
                    self.dirty = true;
                }
            }
            Ev::Exited(id) => {
                if let Some(i) = self.tabs.iter().position(|t| t.id == id) {
                    let code = self.tabs[i].exit_code(Duration::from_secs(3));
                    if let Some(code) = code {
                        self.exit_code = Some(code);
                    }
                    // Stopped by someone else: that is the reason, not
                    // how podman exec ended when its container went.
                    if let Some(by) = self.tabs[i].stopped_by(code) {
                        if self.mode == Mode::Shell {
                            self.stopped = Some(by);
                            self.close_tab(i);
                        } else {
                            let prefix = self.prefix_text.clone();
                            self.tabs[i].failed(&format!("{by}; {prefix} x closes this tab"));
                            self.dirty = true;
                        }
                        return;
                    }
                    // A failed session command stays on screen with its
                    // reason (and its last lines above it) until the user
                    // closes the tab: the UI must not vanish without a word.
                    if self.mode != Mode::Shell && code != Some(0) {
                        let prefix = self.prefix_text.clone();
                        let tab = &mut self.tabs[i];
                        let code = if code == Some(255) && tab.command_missing() {
                            Some(127)
                        } else {
                            code
                        };
                        let why = tab::exit_reason(&tab.launch.argv, code);
                        tab.failed(&format!("{why}; {prefix} x closes this tab"));
                        self.dirty = true;
                    } else {
                        self.close_tab(i);
                    }
                }
            }
            Ev::Progress(id, step) => {
                if let Some(t) = self.tab_mut(id) {
                    t.progress(&step);
                }
                self.dirty = true;
            }
            Ev::Connected(id, domain, args) => {
                let tx = self.tx.clone();
                let shell = self.mode == Mode::Shell;
                if let Some(t) = self.tab_mut(id) {
                    // `lazaret shell` said its steps on the plain terminal.
                    if !shell {
                        t.progress("the domain is up; starting the shell");
                    }
                    t.domain = Some(*domain);
                    if let Err(e) = t.spawn_shell(&args, tx) {
                        t.failed(&format!("{e:#}"));
                    }
                }
                self.dirty = true;
                self.domain_up(id);
            }
            Ev::Hosted(id, domain, _session) => {
                if let Some(t) = self.tab_mut(id) {
                    t.domain = Some(*domain);
                    t.phase = Phase::Running;
                }
                self.dirty = true;
                self.domain_up(id);
            }
            Ev::Failed(id, why) => {
                if self.mode == Mode::Shell {
                    // `lazaret shell` says why on the terminal it returns to.
                    self.failure = Some(why);
                    self.quit = true;
                    return;
                }
                if let Some(t) = self.tab_mut(id) {
                    t.failed(&why);
                }
                self.dirty = true;
            }
            Ev::Coord(id, msg) => self.coord(id, *msg),
            Ev::CoordinatorLost(id) => {
                if let Some(t) = self.tab_mut(id) {
                    let title = t.title.clone();
                    let domain = t.launch.ctx.anchor.hash().to_string();
                    // Its prompts died with it (their requesters were told).
                    let gone: Vec<String> = t
                        .prompts
                        .drain(..)
                        .flat_map(|p| p.ids().cloned().collect::<Vec<_>>())
                        .collect();
                    for r in gone {
                        self.set_status(
                            &domain,
                            &r,
                            EscalationStatus::Failed {
                                error: "the Session Coordinator died".into(),
                            },
                        );
                    }
                    self.message = Some(format!(
                        "tab {title}: the Session Coordinator died; reconnecting…"
                    ));
                }
                self.dirty = true;
            }
            Ev::Reconnected(id) => {
                if let Some(t) = self.tab_mut(id) {
                    self.message = Some(format!(
                        "tab {}: reconnected to a new Session Coordinator (same session)",
                        t.title
                    ));
                }
                self.dirty = true;
            }
            Ev::ControlClosed(id) => {
                if let Some(t) = self.tab_mut(id)
                    && t.phase != Phase::Connecting
                {
                    t.progress("lazaret: the Session Coordinator closed this session");
                }
                self.dirty = true;
            }
            Ev::Network(hash, change, result) => {
                match (change.clone(), result) {
                    (_, Ok(table)) => {
                        if let Some((net, allow)) = change {
                            self.message = Some(format!(
                                "{} {net}: in force in domain {}",
                                if allow { "allowed" } else { "denied" },
                                &hash[..hash.len().min(12)]
                            ));
                        } else if let Some(w) = &table.warning {
                            self.message = Some(w.clone());
                        }
                        self.network = Some((hash, table));
                    }
                    (Some((net, _)), Err(e)) => {
                        self.message = Some(format!("cannot change the policy for {net}: {e}"));
                    }
                    (None, Err(e)) => {
                        self.message = Some(format!("cannot read the network table: {e}"));
                    }
                }
                self.dirty = true;
            }
        }
    }

    fn coord(&mut self, id: u64, msg: CoordMsg) {
        let focused = self.tabs.get(self.focus).map(|t| t.id);
        let Some(tab) = self.tabs.iter_mut().find(|t| t.id == id) else {
            return;
        };
        let domain = tab.launch.ctx.anchor.hash().to_string();
        match msg {
            CoordMsg::Prompt { prompt } => {
                let title = tab.title.clone();
                // Seen in the inbox first: this tab holds it now.
                if let Some(i) = self
                    .inboxed
                    .iter()
                    .position(|i| i.hash == domain && i.prompt.request_id == prompt.request_id)
                {
                    self.inboxed.remove(i);
                    self.seen.retain(|s| !s.is(&domain, &prompt.request_id));
                }
                for t in self.tabs.iter_mut() {
                    t.prompts
                        .retain(|p| !(p.route.is_some() && p.is(&domain, &prompt.request_id)));
                }
                let Some(tab) = self.tabs.iter_mut().find(|t| t.id == id) else {
                    return;
                };
                if let Some(p) = tab.prompts.iter_mut().find(|p| p.is_identical(&prompt)) {
                    // Shown once, with a count: one decision answers all.
                    let first = p.prompt().request_id.clone();
                    p.add_copy(prompt.request_id);
                    if let Some(s) = self.seen.iter_mut().find(|s| s.is(&domain, &first)) {
                        s.copies += 1;
                    }
                    return;
                }
                self.seen.push(Seen {
                    domain: domain.clone(),
                    id: prompt.request_id.clone(),
                    tab: title,
                    arrived: Instant::now(),
                    command: prompt.command.clone(),
                    status: EscalationStatus::Pending,
                    copies: 0,
                });
                tab.prompts
                    .push_back(Pending::new(prompt, &tab.title, &domain));
                // Said, never shown over the pane: the keyboard stays with
                // what the human is typing (decisions.md D15).
                self.message = Some(format!(
                    "{} ! to answer: tab {} asks for a host command",
                    self.prefix_text, tab.title
                ));
            }
            CoordMsg::Outcome { outcome } => self.outcome_of(&domain, outcome),
            CoordMsg::Audit { records } if focused == Some(id) => {
                self.audit = records
                    .iter()
                    .map(|r| AuditEntry {
                        time: clock(r.time),
                        event: r.kind.clone(),
                        detail: summary(&r.data),
                    })
                    .collect();
            }
            CoordMsg::Withdrawn { request_id, reason } => {
                // Off the modal and the queue, with a note that stays.
                let mut found = false;
                tab.prompts.retain_mut(|p| {
                    if p.ids().any(|i| *i == request_id) {
                        found = true;
                        p.withdraw(&request_id)
                    } else {
                        true
                    }
                });
                let title = tab.title.clone();
                let elsewhere = reason == ANSWERED_ELSEWHERE;
                if found {
                    self.message = Some(if elsewhere {
                        format!("tab {title}: request {request_id} was answered in another client")
                    } else {
                        format!(
                            "tab {title}: request {request_id} withdrawn ({reason}); nothing runs"
                        )
                    });
                }
                self.set_status(&domain, &request_id, withdrawn_status(&reason));
            }
            CoordMsg::Status { domain } => tab.domain = Some(domain),
            CoordMsg::Error { message } => self.message = Some(message),
            CoordMsg::Warning { message } => {
                let title = tab.title.clone();
                self.message = Some(format!("tab {title}: {message}"));
            }
            CoordMsg::ShuttingDown { stopped_by } => match stopped_by {
                Some(by) => tab.progress(&format!("lazaret: {by}")),
                None => tab.progress("lazaret: the domain is shutting down"),
            },
            _ => {}
        }
        self.dirty = true;
    }
}

/// A row of the sessions panel: a domain (by index) or one of its hosted
/// sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SessionEntry {
    Domain(usize),
    Hosted(usize, u32),
}

impl App {
    /// The sessions panel's rows, in the order drawn.
    pub(super) fn session_entries(&self) -> Vec<SessionEntry> {
        let mut entries = Vec::new();
        for (i, d) in self.domains.iter().enumerate() {
            entries.push(SessionEntry::Domain(i));
            entries.extend(d.hosted.iter().map(|h| SessionEntry::Hosted(i, h.id)));
        }
        entries
    }

    /// Enter on a sessions panel row: a hosted session shown by a tab
    /// here gets the focus; another is attached in a new tab; a domain
    /// gets a new tab (a new session in it).
    pub(super) fn open_entry(&mut self, entry: SessionEntry) {
        let (i, hosted) = match entry {
            SessionEntry::Domain(i) => (i, None),
            SessionEntry::Hosted(i, n) => (i, Some(n)),
        };
        let Some(d) = self.domains.get(i) else {
            return;
        };
        if let Some(n) = hosted
            && let Some(t) = self.tabs.iter().position(|t| {
                t.launch.ctx.anchor.hash() == d.hash
                    && t.hosted.as_ref().and_then(|h| h.id()) == Some(n)
            })
        {
            self.focus = t;
            self.panel_focus = None;
            return;
        }
        if hosted.is_some_and(|n| d.hosted.iter().any(|h| h.id == n && h.exited.is_some())) {
            self.message = Some("that session has ended".into());
            return;
        }
        let (profile, workspace) = (d.profile.clone(), std::path::PathBuf::from(&d.workspace));
        match self.launcher.launch(Some(&profile), &workspace) {
            Ok(mut launch) => {
                if let Some(n) = hosted {
                    launch.session = crate::client::SessionChoice::Attach(n);
                }
                self.panel_focus = None;
                self.open_tab(&launch);
            }
            Err(e) => {
                self.message = Some(format!("cannot open {profile} · {}: {e:#}", d.workspace));
            }
        }
    }

    /// Enter on an escalation queue row: a request still waiting is shown
    /// (its tab focused, or, from the inbox, opened over the pane).
    pub(super) fn open_request(&mut self, row: usize) {
        let Some(seen) = self.seen.get(row) else {
            return;
        };
        if seen.status != EscalationStatus::Pending {
            self.message = Some(format!("request {} no longer waits", seen.id));
            return;
        }
        let (domain, id) = (seen.domain.clone(), seen.id.clone());
        self.panel_focus = None;
        if let Some(t) = self
            .tabs
            .iter()
            .position(|t| t.prompts.iter().any(|p| p.is(&domain, &id)))
        {
            self.focus = t;
            // The chosen request comes first: it is the one opened.
            let prompts = &mut self.tabs[t].prompts;
            if let Some(at) = prompts.iter().position(|p| p.is(&domain, &id)) {
                let chosen = prompts.remove(at).expect("position is in range");
                prompts.push_front(chosen);
            }
        } else if let Some(i) = self
            .inboxed
            .iter()
            .position(|p| p.hash == domain && p.prompt.request_id == id)
        {
            self.show_inboxed(i);
        }
        self.open_front();
        self.dirty = true;
    }

    /// Request `i` of the inbox opens over the focused pane, answered
    /// through its domain's coordinator.
    fn show_inboxed(&mut self, i: usize) {
        let item = self.inboxed.remove(i);
        if let Some(tab) = self.tabs.get_mut(self.focus) {
            tab.prompts.push_front(Pending::routed(
                item.prompt,
                &item.asked_by,
                &item.label,
                &item.hash,
            ));
        }
    }

    /// Tab `id`'s domain is up: a network panel waiting for the focused
    /// tab's table reads it now.
    fn domain_up(&mut self, id: u64) {
        let focused = self.tabs.get(self.focus).is_some_and(|t| t.id == id);
        if focused && !self.network_shown_is_focused() {
            self.refresh_network(None);
        }
    }

    /// Whether the focused tab is in the domain `hash`.
    fn focused_on(&self, hash: &str) -> bool {
        self.tabs
            .get(self.focus)
            .is_some_and(|t| t.launch.ctx.anchor.hash() == hash)
    }

    /// The focused domain's network table is on screen: its refusals so
    /// far count as seen.
    pub(super) fn egress_seen(&mut self) {
        if !self.shows(Panel::Network) || !self.network_shown_is_focused() {
            return;
        }
        let Some((hash, _)) = &self.network else {
            return;
        };
        if let Some(total) = self
            .domains
            .iter()
            .find(|d| d.hash == *hash)
            .and_then(|d| d.egress_refused)
        {
            self.egress_looked.insert(hash.clone(), total);
        }
    }

    /// Whether the network table at hand is the focused tab's domain's
    /// (the panel reads one on a focus change and after each live change,
    /// never on a timer).
    fn network_shown_is_focused(&self) -> bool {
        let focused = self
            .tabs
            .get(self.focus)
            .map(|t| t.launch.ctx.anchor.hash());
        self.network.as_ref().map(|(h, _)| h.as_str()) == focused && focused.is_some()
    }

    /// The human changed the layout: drawn at once, kept for next time.
    pub(super) fn set_layout(&mut self, choice: lazaret_widgets::layout::LayoutChoice) {
        self.layout = choice;
        if let Err(e) = save_layout(&self.launcher.config.data_root, choice) {
            self.message = Some(e);
        }
        self.refresh_panel();
        self.dirty = true;
    }

    /// News of a domain's approval inbox.
    fn inbox_news(&mut self, hash: String, label: String, msg: CoordMsg) {
        match msg {
            CoordMsg::Pending {
                prompt, asked_by, ..
            } => {
                let id = prompt.request_id.clone();
                let held = self
                    .inboxed
                    .iter()
                    .any(|i| i.hash == hash && i.prompt.request_id == id)
                    || self
                        .tabs
                        .iter()
                        .any(|t| t.prompts.iter().any(|p| p.is(&hash, &id)));
                if held {
                    return;
                }
                let tab = format!("{asked_by} · {label}");
                match self.seen.iter_mut().find(|s| s.is(&hash, &id)) {
                    // Listed before its domain's watch was lost and made
                    // again: it waits once more.
                    Some(seen) if matches!(&seen.status, EscalationStatus::Denied { reason: Some(r) } if r.starts_with("withdrawn")) =>
                    {
                        seen.status = EscalationStatus::Pending;
                        seen.tab = tab;
                    }
                    // Answered here already.
                    Some(_) => return,
                    None => self.seen.push(Seen {
                        domain: hash.clone(),
                        id,
                        tab,
                        arrived: Instant::now(),
                        command: prompt.command.clone(),
                        status: EscalationStatus::Pending,
                        copies: 0,
                    }),
                }
                // The key first: the line may be cut at the right.
                self.message = Some(format!(
                    "{} ! to answer: {asked_by} of {label} asks for a host command",
                    self.prefix_text
                ));
                self.inboxed.push(Inboxed {
                    hash,
                    label,
                    prompt,
                    asked_by,
                });
                self.dirty = true;
            }
            CoordMsg::Withdrawn { request_id, reason } => {
                self.inbox_withdrawn(&hash, &request_id, &reason);
            }
            // The sessions panel, from events.
            CoordMsg::Status { domain } => {
                let refused = domain.egress_refused;
                if let Some(started) =
                    Instant::now().checked_sub(Duration::from_secs(domain.uptime))
                {
                    self.domain_started.insert(domain.hash.clone(), started);
                }
                let before = match self.domains.iter_mut().find(|d| d.hash == domain.hash) {
                    Some(d) => std::mem::replace(d, domain).egress_refused,
                    None => {
                        self.domains.push(domain);
                        self.domains.sort_by(|a, b| a.hash.cmp(&b.hash));
                        None
                    }
                };
                // New refusals in the table on screen: read it again
                // (the refused names are listed there).
                let on_screen = self.network.as_ref().is_some_and(|(h, _)| *h == hash);
                if refused != before && on_screen && self.focused_on(&hash) {
                    self.refresh_network(None);
                }
                self.dirty = true;
            }
            // A live change (here or by `lazaret net` anywhere): the
            // network panel reads the focused domain's table again.
            CoordMsg::PolicyChanged { .. } if self.focused_on(&hash) => {
                self.refresh_network(None);
            }
            // Shown where the request is listed, whichever client answered.
            CoordMsg::Outcome { outcome } => {
                let mine = self.seen.iter().any(|s| s.is(&hash, &outcome.request_id));
                if mine {
                    self.outcome_of(&hash, outcome);
                    self.dirty = true;
                }
            }
            _ => {}
        }
    }

    fn outcome_of(&mut self, domain: &str, outcome: crate::coordinator::escalation::Outcome) {
        let status = match (outcome.exit_code, outcome.error) {
            (Some(exit_code), None) => EscalationStatus::Finished {
                exit_code,
                output: outcome.output,
            },
            (_, error) => EscalationStatus::Failed {
                error: error.unwrap_or_else(|| "it did not run".into()),
            },
        };
        self.set_status(domain, &outcome.request_id, status);
    }

    /// A request of the inbox was answered elsewhere or went: off the
    /// inbox and any modal showing it from there. What a tab of this
    /// workbench holds (and answered) is its own to update.
    fn inbox_withdrawn(&mut self, domain: &str, request_id: &str, reason: &str) {
        let inboxed = self
            .inboxed
            .iter()
            .position(|i| i.hash == domain && i.prompt.request_id == request_id)
            .map(|i| self.inboxed.remove(i))
            .is_some();
        let mut shown = false;
        for t in self.tabs.iter_mut() {
            t.prompts.retain_mut(|p| {
                if p.route.is_some() && p.is(domain, request_id) {
                    shown = true;
                    p.withdraw(request_id)
                } else {
                    true
                }
            });
        }
        if inboxed || shown {
            self.set_status(domain, request_id, withdrawn_status(reason));
            if shown && reason != ANSWERED_ELSEWHERE {
                self.message = Some(format!(
                    "request {request_id} withdrawn ({reason}); nothing runs"
                ));
            }
            self.dirty = true;
        }
    }

    /// `prefix !`: the oldest request waiting anywhere. A tab's own is
    /// shown by focusing the tab; one of the inbox opens over the focused
    /// pane, answered through its domain's coordinator.
    pub(super) fn open_oldest_request(&mut self) {
        let arrived = |domain: &str, id: &str| {
            self.seen
                .iter()
                .find(|s| s.is(domain, id))
                .map(|s| s.arrived)
        };
        let oldest_tab = self
            .tabs
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                let p = t.prompts.front()?;
                Some((arrived(&p.domain, &p.prompt().request_id)?, i))
            })
            .min();
        let oldest_inbox = self
            .inboxed
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((arrived(&p.hash, &p.prompt.request_id)?, i)))
            .min();
        match (oldest_tab, oldest_inbox) {
            (Some((t, i)), Some((b, _))) if t <= b => self.focus = i,
            (Some((_, i)), None) => self.focus = i,
            (_, Some((_, i))) => {
                self.show_inboxed(i);
            }
            (None, None) => {
                self.message = Some("no request waits for a human".into());
                return;
            }
        }
        self.open_front();
        self.dirty = true;
    }

    /// The human turned to the focused tab's front request (decisions.md
    /// D15: only ever by such a deliberate act): its modal takes the keys.
    /// Any other open request goes back to waiting.
    pub(super) fn open_front(&mut self) {
        let focus = self.focus;
        for (i, t) in self.tabs.iter_mut().enumerate() {
            if i != focus {
                t.close_requests();
            }
        }
        if let Some(p) = self.tabs.get_mut(focus).and_then(|t| t.prompts.front_mut()) {
            p.approval.open(Instant::now());
            self.redraw_at = p.approval.held_until();
        }
    }
}

/// Where the workbench keeps the human's layout (in the Storage Root).
fn layout_file(data_root: &std::path::Path) -> std::path::PathBuf {
    data_root.join("workbench-layout.toml")
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct SavedLayout {
    dashboard: bool,
    split: u16,
}

/// The layout kept from the last workbench, or the default.
fn load_layout(data_root: &std::path::Path) -> lazaret_widgets::layout::LayoutChoice {
    let default = lazaret_widgets::layout::LayoutChoice::default();
    std::fs::read_to_string(layout_file(data_root))
        .ok()
        .and_then(|t| toml::from_str::<SavedLayout>(&t).ok())
        .map_or(default, |s| {
            lazaret_widgets::layout::LayoutChoice {
                dashboard: s.dashboard,
                split: s.split,
            }
            .nudged(0)
        })
}

/// Keeps the layout for the next workbench; says why not if it cannot.
fn save_layout(
    data_root: &std::path::Path,
    choice: lazaret_widgets::layout::LayoutChoice,
) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let saved = SavedLayout {
        dashboard: choice.dashboard,
        split: choice.split,
    };
    let text = toml::to_string(&saved).map_err(|e| e.to_string())?;
    let path = layout_file(data_root);
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("cannot keep the layout in {}: {e}", path.display()))
}

/// A request that no longer waits: answered in another client, or gone.
fn withdrawn_status(reason: &str) -> EscalationStatus {
    if reason == ANSWERED_ELSEWHERE {
        EscalationStatus::AnsweredElsewhere
    } else {
        EscalationStatus::Denied {
            reason: Some(format!("withdrawn: {reason}")),
        }
    }
}

/// `HH:MM:SS` (UTC) of a Unix time.
fn clock(secs: u64) -> String {
    let s = secs % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

/// One line of an audit record's data.
fn summary(data: &serde_json::Value) -> String {
    match data {
        serde_json::Value::Object(map) => map
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "stdout_sha256" | "stderr_sha256"))
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}={s}"),
                v => format!("{k}={v}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        v => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_keys_parse_and_plain_letters_are_refused() {
        let k = parse_prefix("C-a").unwrap();
        assert_eq!(
            (k.code, k.modifiers),
            (KeyCode::Char('a'), KeyModifiers::CONTROL)
        );
        let k = parse_prefix("M-b").unwrap();
        assert_eq!(
            (k.code, k.modifiers),
            (KeyCode::Char('b'), KeyModifiers::ALT)
        );
        let k = parse_prefix("F12").unwrap();
        assert_eq!((k.code, k.modifiers), (KeyCode::F(12), KeyModifiers::NONE));
        assert!(parse_prefix("a").is_err());
        assert!(parse_prefix("C-").is_err());
        assert!(parse_prefix("F13").is_err());
        // What crossterm reports for Ctrl-a matches the prefix.
        let pressed = KeyEvent::new(KeyCode::Char('a'), KeyModifiers::CONTROL);
        assert!(key_matches(&pressed, &parse_prefix("C-a").unwrap()));
        assert!(!key_matches(&pressed, &parse_prefix("C-b").unwrap()));
    }

    #[test]
    fn audit_data_is_summarised_on_one_line() {
        let v = serde_json::json!({"request_id": "r1", "exit_code": 0, "stdout_sha256": "ab"});
        let s = summary(&v);
        assert!(
            s.contains("request_id=r1") && s.contains("exit_code=0"),
            "{s}"
        );
        assert!(!s.contains("sha256"), "{s}");
        assert_eq!(clock(3600 + 61), "01:01:01");
    }
}
