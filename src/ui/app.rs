//! The workbench's state, its event handling and its view.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use lazaret_widgets::keys::{encode_key, encode_mouse, encode_paste};
use lazaret_widgets::modal::{ApprovalModal, CommandEditor, EditOutcome};
use lazaret_widgets::pane::TerminalPane;
use lazaret_widgets::panels::{
    AuditEntry, AuditPanel, EscalationRow, EscalationStatus, EscalationsPanel, FormOutcome,
    HelpOverlay, HelpSection, KeyBinding, NetworkPanel, NewTabDialog, NewTabForm, ProfileChoice,
    RouteRow, SessionRow, SessionsPanel, StatusLine, TabBar, TabInfo,
};
use ratatui::Terminal;
use ratatui::backend::Backend;
use ratatui::crossterm::event::{
    Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseEvent, MouseEventKind,
};
use ratatui::layout::{Constraint, Layout, Rect, Size};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, BorderType};

use super::tab::{self, Launch, ModalMode, Pending, Phase, Tab};
use super::{Ev, FRAME, Launcher, NetTable, key_matches};
use crate::coordinator::escalation::Verdict;
use crate::coordinator::protocol::{ClientMsg, CoordMsg, DomainStatus};

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

/// Side panel on the right of the pane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Panel {
    Sessions,
    Network,
    Escalations,
    Audit,
}

/// How often an open sessions or network panel is read again (uptimes,
/// sessions, a table changed by `lazaret net` elsewhere) and the queue's
/// ages move on.
const PANEL_REFRESH: Duration = Duration::from_secs(2);

/// How long the approval modal ignores keys after it comes into view, so
/// that typing meant for the shell (an agent can time its request to catch
/// it) never answers a request.
pub const MODAL_ARM: Duration = Duration::from_millis(800);

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
    text: String,
}

/// The workbench, or `lazaret shell`: the same engine with one pane and
/// no tabs or panels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Workbench,
    Shell,
}

/// A request seen by this UI, for the escalation queue.
#[derive(Debug)]
struct Seen {
    id: String,
    tab: String,
    arrived: Instant,
    command: String,
    status: EscalationStatus,
    /// Identical later requests of the same session, answered with this one.
    copies: usize,
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
    panel: Option<Panel>,
    /// When an open panel is read again.
    next_refresh: Option<Instant>,
    /// When to draw again though nothing changed (a modal arming).
    redraw_at: Option<Instant>,
    /// The modal last drawn: (tab, request); another one is held anew.
    shown_modal: Option<(u64, String)>,
    domains: Vec<DomainStatus>,
    /// The live table of a domain (by hash), for the network panel.
    network: Option<(String, NetTable)>,
    /// How the last shell ended (`lazaret shell` exits with it).
    exit_code: Option<u8>,
    /// `lazaret shell` could not start its session.
    failure: Option<String>,
    seen: Vec<Seen>,
    audit: Vec<AuditEntry>,
    message: Option<String>,
    quit: bool,
    dirty: bool,
    size: Size,
    /// The cursor shape last sent to the terminal.
    cursor_style: Option<ratatui::crossterm::cursor::SetCursorStyle>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("tabs", &self.tabs.len())
            .finish_non_exhaustive()
    }
}

/// Where things go on a screen of `size`.
struct Areas {
    tabs: Rect,
    pane: Rect,
    panel: Option<Rect>,
    status: Rect,
}

/// The status line names each limit this host does not apply.
fn limit_gaps_text(d: &DomainStatus) -> String {
    d.limit_gaps
        .iter()
        .map(|g| format!(" · {}", g.split(':').next().unwrap_or(g)))
        .collect()
}

fn pane_block(title: String, gvisor: Option<bool>, focused: bool) -> Block<'static> {
    let style = match gvisor {
        Some(false) => Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        _ if focused => Style::new().fg(Color::Cyan),
        _ => Style::new().fg(Color::DarkGray),
    };
    Block::bordered()
        .border_type(BorderType::Rounded)
        .border_style(style)
        .title(title)
}

impl App {
    pub fn new(
        launch: Launch,
        prefix_text: String,
        prefix: KeyEvent,
        launcher: Launcher,
        rt: tokio::runtime::Handle,
        tx: Sender<Ev>,
    ) -> App {
        App {
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
            panel: None,
            next_refresh: None,
            redraw_at: None,
            shown_modal: None,
            domains: Vec::new(),
            network: None,
            exit_code: None,
            failure: None,
            seen: Vec::new(),
            audit: Vec::new(),
            message: None,
            quit: false,
            dirty: true,
            cursor_style: None,
            size: Size::new(80, 24),
        }
    }

    fn areas(&self, size: Size) -> Areas {
        let full = Rect::new(0, 0, size.width, size.height);
        if self.mode == Mode::Shell {
            let [pane, status] =
                Layout::vertical([Constraint::Min(1), Constraint::Length(1)]).areas(full);
            return Areas {
                tabs: Rect::default(),
                pane,
                panel: None,
                status,
            };
        }
        let [tabs, body, status] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Min(3),
            Constraint::Length(1),
        ])
        .areas(full);
        let (pane, panel) = match self.panel {
            Some(_) if body.width >= 60 => {
                // The network table's rule column needs the room.
                let share = if self.panel == Some(Panel::Network) {
                    55
                } else {
                    40
                };
                let [p, s] =
                    Layout::horizontal([Constraint::Min(30), Constraint::Percentage(share)])
                        .areas(body);
                (p, Some(s))
            }
            _ => (body, None),
        };
        Areas {
            tabs,
            pane,
            panel,
            status,
        }
    }

    /// The shell's part of the pane (inside the border, if any).
    fn pane_inner(&self) -> Rect {
        let pane = self.areas(self.size).pane;
        match self.mode {
            Mode::Workbench => Block::bordered().inner(pane),
            Mode::Shell => pane,
        }
    }

    /// The PTY size for the current layout.
    fn pane_size(&self) -> (u16, u16) {
        let inner = self.pane_inner();
        (inner.height.max(1), inner.width.max(1))
    }

    /// How the session ended: the shell's exit code, or why it never ran.
    pub fn outcome(&self) -> Result<u8, String> {
        match (&self.failure, self.exit_code) {
            (Some(why), _) => Err(why.clone()),
            (None, code) => Ok(code.unwrap_or(0)),
        }
    }

    /// Opens the first tab, with the launch the UI started with.
    pub fn first_tab(&mut self, size: Size) {
        self.size = size;
        let launch = self.launch.clone();
        self.open_tab(&launch);
    }

    fn open_tab(&mut self, launch: &Launch) {
        let (rows, cols) = self.pane_size();
        let id = self.next_id;
        self.next_id += 1;
        let mut tab = Tab::start(id, launch, rows, cols, self.tx.clone());
        // Tabs of one profile are told apart: claude, claude-2, claude-3.
        let taken = |name: &str| self.tabs.iter().any(|t| t.title == name);
        if taken(&tab.title) {
            let n = (2..).find(|n| !taken(&format!("{}-{n}", tab.title)));
            tab.title = format!("{}-{}", tab.title, n.unwrap_or(2));
        }
        self.tabs.push(tab);
        self.focus = self.tabs.len() - 1;
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
        // Requests it leaves unanswered are denied by the coordinator when
        // the session goes.
        for p in &tab.prompts {
            self.set_status(
                &p.prompt.request_id,
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
        self.refresh_domains();
    }

    /// Ends every shell, then closes every control stream.
    pub fn shutdown(&mut self) {
        for t in &mut self.tabs {
            t.close();
        }
        self.tabs.clear();
    }

    fn refresh_domains(&self) {
        if self.panel != Some(Panel::Sessions) {
            return;
        }
        let tx = self.tx.clone();
        let sockets = crate::cli::session::sockets(&self.launcher.rundir);
        self.rt.spawn(async move {
            let mut domains = Vec::new();
            for socket in sockets {
                if let Ok(mut c) = crate::cli::session::query(&socket).await
                    && let Ok(CoordMsg::Status { domain }) = c.call(&ClientMsg::Status).await
                {
                    domains.push(domain);
                }
            }
            let _ = tx.send(Ev::Domains(domains));
        });
    }

    fn set_status(&mut self, id: &str, status: EscalationStatus) {
        if let Some(s) = self.seen.iter_mut().find(|s| s.id == id) {
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
    fn refresh_panel(&mut self) {
        self.next_refresh = None;
        match self.panel {
            Some(Panel::Sessions) => self.refresh_domains(),
            Some(Panel::Network) => self.refresh_network(None),
            // The ages of pending requests move on.
            Some(Panel::Escalations) => self.dirty = true,
            Some(Panel::Audit) | None => return,
        }
        self.next_refresh = Some(Instant::now() + PANEL_REFRESH);
    }

    /// Reads the sidecar's live table of the focused tab's domain (after
    /// allowing or denying `change` in it, at once), off the UI thread.
    fn refresh_network(&mut self, change: Option<(crate::net::Target, bool)>) {
        if self.panel != Some(Panel::Network) && change.is_none() {
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
            Ev::Signal(sig) => {
                self.exit_code = Some(128u8.saturating_add(sig as u8));
                self.quit = true;
            }
            Ev::Input(Event::Key(key)) => {
                if key.kind != KeyEventKind::Release {
                    self.key(key);
                }
            }
            Ev::Input(Event::Paste(text)) => self.paste(&text),
            Ev::Input(Event::Resize(w, h)) => {
                self.size = Size::new(w, h);
                self.dirty = true;
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
                if let Some(t) = self.tab_mut(id) {
                    t.progress("the domain is up; starting the shell");
                    t.domain = Some(*domain);
                    if let Err(e) = t.spawn_shell(&args, tx) {
                        t.failed(&format!("{e:#}"));
                    }
                }
                self.dirty = true;
                self.refresh_domains();
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
                    // Its prompts died with it (their requesters were told).
                    let gone: Vec<String> = t
                        .prompts
                        .drain(..)
                        .flat_map(|p| p.ids().cloned().collect::<Vec<_>>())
                        .collect();
                    for r in gone {
                        self.set_status(
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
            Ev::Domains(domains) => {
                self.domains = domains;
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
        match msg {
            CoordMsg::Prompt { prompt } => {
                let title = tab.title.clone();
                if let Some(p) = tab.prompts.iter_mut().find(|p| p.is_identical(&prompt)) {
                    // Shown once, with a count: one decision answers all.
                    let first = p.prompt.request_id.clone();
                    p.add_copy(prompt.request_id);
                    if let Some(s) = self.seen.iter_mut().find(|s| s.id == first) {
                        s.copies += 1;
                    }
                    return;
                }
                self.seen.push(Seen {
                    id: prompt.request_id.clone(),
                    tab: title,
                    arrived: Instant::now(),
                    command: prompt.command.clone(),
                    status: EscalationStatus::Pending,
                    copies: 0,
                });
                tab.prompts.push_back(Pending::new(prompt, &tab.title));
                if focused != Some(id) {
                    self.message = Some(format!("tab {} asks for a host command", tab.title));
                }
            }
            CoordMsg::Outcome { outcome } => {
                let status = match (outcome.exit_code, outcome.error) {
                    (Some(exit_code), None) => EscalationStatus::Finished {
                        exit_code,
                        output: outcome.output,
                    },
                    (_, error) => EscalationStatus::Failed {
                        error: error.unwrap_or_else(|| "it did not run".into()),
                    },
                };
                self.set_status(&outcome.request_id, status);
            }
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
                if found {
                    self.message = Some(format!(
                        "tab {title}: request {request_id} withdrawn ({reason}); nothing runs"
                    ));
                }
                self.set_status(
                    &request_id,
                    EscalationStatus::Denied {
                        reason: Some(format!("withdrawn: {reason}")),
                    },
                );
            }
            CoordMsg::Status { domain } => tab.domain = Some(domain),
            CoordMsg::Error { message } => self.message = Some(message),
            CoordMsg::Warning { message } => {
                let title = tab.title.clone();
                self.message = Some(format!("tab {title}: {message}"));
            }
            CoordMsg::ShuttingDown => {
                tab.progress("lazaret: the domain is shutting down");
            }
            _ => {}
        }
        self.dirty = true;
    }

    /// The mouse goes to the child only when it asked for it; otherwise
    /// the wheel scrolls the pane's history.
    fn mouse(&mut self, m: &MouseEvent) {
        let inner = Block::bordered().inner(self.areas(self.size).pane);
        let Some(tab) = self.tabs.get(self.focus) else {
            return;
        };
        if !tab.prompts.is_empty() || self.help {
            return;
        }
        let modes = tab.state.input_modes();
        if let Some(bytes) = encode_mouse(m, inner, modes) {
            tab.write(&bytes);
            return;
        }
        match m.kind {
            MouseEventKind::ScrollUp => {
                tab.state.scroll_up(3);
                self.dirty = true;
            }
            MouseEventKind::ScrollDown => {
                tab.state.scroll_down(3);
                self.dirty = true;
            }
            _ => {}
        }
    }

    fn paste(&mut self, text: &str) {
        self.dirty = true;
        if let Some(form) = self.new_tab.as_mut() {
            form.paste(text);
            return;
        }
        let Some(tab) = self.tabs.get_mut(self.focus) else {
            return;
        };
        if let Some(p) = tab.prompts.front_mut() {
            if let ModalMode::Editing(ed) | ModalMode::Reason(ed) = &mut p.mode {
                ed.paste(text);
            }
            return;
        }
        let modes = tab.state.input_modes();
        tab.state.scroll_to_bottom();
        tab.write(&encode_paste(text, modes));
    }

    fn key(&mut self, key: KeyEvent) {
        self.dirty = true;
        self.message = None;
        if self.help {
            self.help = false;
            return;
        }
        if self.new_tab.is_some() {
            self.new_tab_key(key);
            return;
        }
        if let Some(input) = self.input.as_mut() {
            match key.code {
                KeyCode::Enter => {
                    let kind = input.kind;
                    let text = std::mem::take(&mut input.text);
                    self.input = None;
                    self.submit(kind, text.trim());
                }
                KeyCode::Esc => self.input = None,
                KeyCode::Backspace => {
                    input.text.pop();
                }
                KeyCode::Char(c) if !c.is_control() => input.text.push(c),
                _ => {}
            }
            return;
        }
        if self.armed {
            self.armed = false;
            self.command(key);
            return;
        }
        if self.modal_key(key) {
            return;
        }
        if key_matches(&key, &self.prefix) {
            self.armed = true;
            return;
        }
        let Some(tab) = self.tabs.get(self.focus) else {
            return;
        };
        if !tab.prompts.is_empty() {
            // Nothing reaches the shell under the modal.
            return;
        }
        match (key.code, key.modifiers) {
            (KeyCode::PageUp, KeyModifiers::SHIFT) => {
                let rows = tab.state.size().0 as usize / 2;
                tab.state.scroll_up(rows.max(1));
            }
            (KeyCode::PageDown, KeyModifiers::SHIFT) => {
                let rows = tab.state.size().0 as usize / 2;
                tab.state.scroll_down(rows.max(1));
            }
            _ => {
                tab.state.scroll_to_bottom();
                tab.write(&encode_key(&key, tab.state.input_modes()));
            }
        }
    }

    /// The new-tab dialog, on the focused tab's profile and workspace.
    fn open_new_tab_form(&mut self) {
        let current = self
            .tabs
            .get(self.focus)
            .map_or(&self.launch, |t| &t.launch);
        let profiles: Vec<ProfileChoice> = self
            .launcher
            .config
            .profiles
            .values()
            .map(|p| {
                let gvisor = p.runtime == crate::config::Runtime::Runsc;
                ProfileChoice {
                    name: p.name.clone(),
                    runtime: if gvisor {
                        "gVisor (runsc)".into()
                    } else {
                        p.runtime.as_str().into()
                    },
                    gvisor,
                    command: p
                        .command
                        .as_ref()
                        .map_or_else(|| "login shell".into(), shell_words::join),
                }
            })
            .collect();
        let selected = profiles
            .iter()
            .position(|p| p.name == current.profile)
            .unwrap_or(0);
        let workspace = current.ctx.anchor.workspace().display().to_string();
        self.new_tab = Some(NewTabForm::new(profiles, selected, &workspace));
    }

    /// A key for the open new-tab dialog.
    fn new_tab_key(&mut self, key: KeyEvent) {
        let Some(form) = self.new_tab.as_mut() else {
            return;
        };
        match form.handle_key(key) {
            FormOutcome::Editing => {}
            FormOutcome::Cancel => self.new_tab = None,
            FormOutcome::Submit { profile, workspace } => {
                // `~/x` as a shell would have it.
                let path = match (workspace.strip_prefix("~/"), std::env::var_os("HOME")) {
                    (Some(rest), Some(home)) => std::path::Path::new(&home).join(rest),
                    _ => std::path::PathBuf::from(&workspace),
                };
                match self.launcher.launch(Some(&profile), &path) {
                    Ok(launch) => {
                        self.new_tab = None;
                        self.open_tab(&launch);
                    }
                    Err(e) => form.set_error(format!("{e:#}")),
                }
            }
        }
    }

    /// A line typed in the status line, Enter pressed.
    fn submit(&mut self, kind: InputKind, text: &str) {
        match kind {
            InputKind::Rename => {
                if let Some(t) = self.tabs.get_mut(self.focus)
                    && !text.is_empty()
                {
                    t.title = text.to_string();
                }
            }
            InputKind::Allow | InputKind::Deny => {
                if text.is_empty() {
                    return;
                }
                // A bare address means just that host; a name goes to the
                // sidecar's resolver (decisions.md D11).
                match crate::net::Target::parse(text) {
                    Ok(target) => {
                        self.message = Some(format!("applying {target}…"));
                        self.refresh_network(Some((target, kind == InputKind::Allow)));
                    }
                    Err(e) => self.message = Some(format!("not a network or name: {e}")),
                }
            }
        }
    }

    /// Lazaret's commands, after the prefix.
    fn command(&mut self, key: KeyEvent) {
        if key_matches(&key, &self.prefix) {
            // The prefix twice: the key itself, for the shell.
            if let Some(t) = self.tabs.get(self.focus) {
                t.write(&encode_key(&self.prefix, t.state.input_modes()));
            }
            return;
        }
        let n = self.tabs.len();
        let before = self.focus;
        self.command_key(key, n);
        if self.focus != before {
            match self.panel {
                Some(Panel::Audit) => {
                    if let Some(t) = self.tabs.get(self.focus) {
                        t.send(ClientMsg::Audit);
                    }
                }
                Some(Panel::Network) => self.refresh_network(None),
                _ => {}
            }
        }
    }

    fn command_key(&mut self, key: KeyEvent, n: usize) {
        if self.mode == Mode::Shell {
            // One pane: no tabs, no panels.
            match key.code {
                KeyCode::Char('?') => self.help = true,
                KeyCode::Char('q') => self.quit = true,
                _ => {}
            }
            return;
        }
        let typing = |kind| {
            Some(Input {
                kind,
                text: String::new(),
            })
        };
        match key.code {
            KeyCode::Char('c') => self.open_new_tab_form(),
            KeyCode::Char('n') if n > 0 => self.focus = (self.focus + 1) % n,
            KeyCode::Char('p') if n > 0 => self.focus = (self.focus + n - 1) % n,
            KeyCode::Char(d @ '1'..='9') => {
                let i = d as usize - '1' as usize;
                if i < n {
                    self.focus = i;
                }
            }
            KeyCode::Char('x') => self.close_tab(self.focus),
            KeyCode::Char(',') => self.input = typing(InputKind::Rename),
            KeyCode::Char('+') => self.input = typing(InputKind::Allow),
            KeyCode::Char('-') => self.input = typing(InputKind::Deny),
            KeyCode::Char('w') => self.toggle(Panel::Network),
            KeyCode::Char('?') => self.help = true,
            KeyCode::Char('q') => self.quit = true,
            KeyCode::Char('s') => self.toggle(Panel::Sessions),
            KeyCode::Char('e') => self.toggle(Panel::Escalations),
            KeyCode::Char('a') => self.toggle(Panel::Audit),
            _ => {}
        }
    }

    fn toggle(&mut self, panel: Panel) {
        self.panel = if self.panel == Some(panel) {
            None
        } else {
            Some(panel)
        };
        self.next_refresh = None;
        if let Some(Panel::Audit) = self.panel
            && let Some(t) = self.tabs.get(self.focus)
        {
            t.send(ClientMsg::Audit);
        }
        self.refresh_panel();
    }

    /// The approval modal of the focused tab gets keys first; `true` when
    /// it consumed the key.
    fn modal_key(&mut self, key: KeyEvent) -> bool {
        let Some(tab) = self.tabs.get_mut(self.focus) else {
            return false;
        };
        let title = tab.title.clone();
        let Some(p) = tab.prompts.front_mut() else {
            return false;
        };
        let verdict = match &mut p.mode {
            ModalMode::Editing(ed) => match ed.handle_key(key) {
                EditOutcome::Editing => return true,
                EditOutcome::Cancel => {
                    p.mode = ModalMode::Reading;
                    return true;
                }
                EditOutcome::Submit(text) if text.trim().is_empty() => return true,
                EditOutcome::Submit(text) => {
                    if ed.changed() {
                        Verdict::Edit { command: text }
                    } else {
                        Verdict::Approve
                    }
                }
            },
            ModalMode::Reason(ed) => match ed.handle_key(key) {
                EditOutcome::Editing => return true,
                EditOutcome::Cancel => {
                    p.mode = ModalMode::Reading;
                    return true;
                }
                EditOutcome::Submit(text) => Verdict::Deny {
                    reason: (!text.trim().is_empty()).then_some(text),
                },
            },
            ModalMode::Reading => {
                if key
                    .modifiers
                    .intersects(KeyModifiers::CONTROL | KeyModifiers::ALT)
                {
                    return false;
                }
                if p.opened.is_none_or(|t| t.elapsed() < MODAL_ARM) {
                    // Held: swallowed, neither an answer nor shell input.
                    return true;
                }
                // A and E only once the whole request has been on screen.
                if matches!(key.code, KeyCode::Char('a' | 'A' | 'e' | 'E'))
                    && !p.view.seen_whole_request()
                {
                    self.message = Some(
                        "the request is longer than the modal: scroll to its end (↓ or PgDn) before A or E"
                            .into(),
                    );
                    return true;
                }
                match key.code {
                    KeyCode::Char('a' | 'A') => Verdict::Approve,
                    KeyCode::Char('d' | 'D') => {
                        p.mode = ModalMode::Reason(CommandEditor::reason());
                        return true;
                    }
                    KeyCode::Char('e' | 'E') => {
                        p.mode = ModalMode::Editing(CommandEditor::new(&p.prompt.command));
                        return true;
                    }
                    KeyCode::Char('q' | 'Q') => Verdict::Abort,
                    KeyCode::Up => {
                        p.view.scroll_up(1);
                        return true;
                    }
                    KeyCode::Down => {
                        p.view.scroll_down(1);
                        return true;
                    }
                    KeyCode::PageUp => {
                        p.view.scroll_up(10);
                        return true;
                    }
                    KeyCode::PageDown => {
                        p.view.scroll_down(10);
                        return true;
                    }
                    _ => return true,
                }
            }
        };
        let request_id = p.prompt.request_id.clone();
        let answered: Vec<String> = p.ids().cloned().collect();
        tab.prompts.pop_front();
        // One decision answers the identical copies too.
        for id in answered {
            tab.send(ClientMsg::Decision {
                request_id: id,
                verdict: verdict.clone(),
            });
        }
        let status = match &verdict {
            Verdict::Approve | Verdict::Edit { .. } => EscalationStatus::Running,
            Verdict::Deny { reason } => EscalationStatus::Denied {
                reason: reason.clone(),
            },
            Verdict::Abort => EscalationStatus::Denied {
                reason: Some("aborted".into()),
            },
        };
        self.set_status(&request_id, status);
        self.message = Some(match &verdict {
            Verdict::Approve => format!("tab {title}: approved"),
            Verdict::Edit { .. } => format!("tab {title}: edited and approved"),
            Verdict::Deny { .. } => format!("tab {title}: denied"),
            Verdict::Abort => format!("tab {title}: aborted"),
        });
        if verdict == Verdict::Abort {
            // Spec §5.2: abort ends the orchestrator, gracefully: every
            // session of this UI closes (their other requests are denied by
            // the coordinator), and with the last one the domain goes.
            self.quit = true;
        }
        true
    }

    fn help_sections(&self) -> Vec<HelpSection> {
        let p = &self.prefix_text;
        let b = |keys: String, action: &str| KeyBinding {
            keys,
            action: action.into(),
        };
        let scroll = b(
            "S-PgUp / S-PgDn, wheel".into(),
            "scroll the pane's history (the wheel goes to programs that ask for the mouse)",
        );
        let modal = HelpSection {
            title: "Approval modal".into(),
            bindings: vec![
                b("A".into(), "approve and run"),
                b("D".into(), "deny (type an optional reason, Enter sends)"),
                b(
                    "E".into(),
                    "edit the command, Enter approves it (re-checked)",
                ),
                b(
                    "Q".into(),
                    match self.mode {
                        Mode::Workbench => "abort: deny, then quit (ends every session of this UI)",
                        Mode::Shell => "abort: deny, then end this shell",
                    },
                ),
                b("Up / Down / PgUp / PgDn".into(), "scroll the request"),
            ],
        };
        if self.mode == Mode::Shell {
            return vec![
                HelpSection {
                    title: "Shell".into(),
                    bindings: vec![
                        b(format!("{p} {p}"), "send the prefix key to the shell"),
                        b(format!("{p} q"), "quit (ends this session)"),
                        b(format!("{p} ?"), "this help (any key closes it)"),
                        scroll,
                    ],
                },
                modal,
            ];
        }
        vec![
            HelpSection {
                title: "Tabs".into(),
                bindings: vec![
                    b(format!("{p} c"), "new tab: pick a profile and a workspace"),
                    b(format!("{p} n / {p} p"), "next / previous tab"),
                    b(format!("{p} 1..9"), "go to tab N"),
                    b(format!("{p} x"), "close tab (ends its session)"),
                    b(
                        format!("{p} ,"),
                        "rename tab (Enter to keep, Esc to cancel)",
                    ),
                    b(format!("{p} {p}"), "send the prefix key to the shell"),
                    b(format!("{p} q"), "quit (ends every session of this UI)"),
                    scroll,
                ],
            },
            HelpSection {
                title: "Panels".into(),
                bindings: vec![
                    b(
                        format!("{p} s"),
                        "sessions: every running domain of this user",
                    ),
                    b(
                        format!("{p} w"),
                        "network: the focused domain's live egress table",
                    ),
                    b(
                        format!("{p} + / {p} -"),
                        "allow / deny egress to a network, at once (focused domain)",
                    ),
                    b(format!("{p} e"), "escalation queue, with results"),
                    b(format!("{p} a"), "audit trail of the focused tab's domain"),
                    b(format!("{p} ?"), "this help (any key closes it)"),
                ],
            },
            modal,
        ]
    }

    fn draw<B: Backend>(&mut self, term: &mut Terminal<B>) -> Result<()>
    where
        B::Error: Send + Sync + 'static,
    {
        self.dirty = false;
        if let Ok(size) = term.size() {
            self.size = size;
        }
        let (rows, cols) = self.pane_size();
        for t in &self.tabs {
            t.resize(rows, cols);
        }
        let areas = self.areas(self.size);
        let infos: Vec<TabInfo> = self
            .tabs
            .iter()
            .map(|t| TabInfo {
                title: match &t.domain {
                    Some(d) if d.degraded.is_some() => format!("{} !DEGRADED", t.title),
                    _ => t.title.clone(),
                },
                pending: t.prompts.len(),
            })
            .collect();
        let domain_text = self.tabs.get(self.focus).map(|t| match &t.domain {
            Some(d) if d.degraded.is_some() => format!(
                "{} {} · !! DEGRADED ({}): self-test failed: {} !!",
                d.profile,
                d.hash,
                d.runtime,
                lazaret_widgets::visible::make_visible(d.degraded.as_deref().unwrap_or("")).0
            ),
            Some(d) if d.gvisor => format!(
                "{} {} · gVisor ({}){}",
                d.profile,
                d.hash,
                d.runtime,
                limit_gaps_text(d)
            ),
            Some(d) => format!(
                "{} {} · !! NOT gVisor: {} !! the agent shares the host kernel{}",
                d.profile,
                d.hash,
                d.runtime,
                limit_gaps_text(d)
            ),
            None => match &t.phase {
                Phase::Failed(why) => format!(
                    "{} · FAILED: {}",
                    t.launch.label,
                    why.lines().next().unwrap_or("")
                ),
                _ => format!("{} · starting", t.launch.label),
            },
        });
        let message = match &self.input {
            Some(Input { kind, text }) => Some(match kind {
                InputKind::Rename => format!("rename tab: {text}_"),
                InputKind::Allow => {
                    format!(
                        "allow egress to (address or CIDR; Enter applies, Esc cancels): {text}_"
                    )
                }
                InputKind::Deny => {
                    format!("deny egress to (address or CIDR; Enter applies, Esc cancels): {text}_")
                }
            }),
            None => self.message.clone(),
        };
        // The network panel shows the focused tab's domain only.
        let focused_hash = self
            .tabs
            .get(self.focus)
            .map(|t| t.launch.ctx.anchor.hash().to_string());
        let routes: Option<&[RouteRow]> = match &self.network {
            Some((hash, table)) if Some(hash) == focused_hash.as_ref() => Some(&table.rows),
            _ => None,
        };
        let help = self.help.then(|| self.help_sections());
        let sessions: Vec<SessionRow> = self
            .domains
            .iter()
            .map(|d| SessionRow {
                domain: d.hash.clone(),
                profile: d.profile.clone(),
                workspace: d.workspace.clone(),
                runtime: d.runtime.clone(),
                gvisor: d.gvisor,
                sessions: d.sessions.len(),
                uptime: Duration::from_secs(d.uptime),
            })
            .collect();
        let escalations: Vec<EscalationRow> = self
            .seen
            .iter()
            .map(|s| EscalationRow {
                id: s.id.clone(),
                tab: s.tab.clone(),
                age: s.arrived.elapsed(),
                command: match s.copies {
                    0 => s.command.clone(),
                    n => format!("{}  (×{})", s.command, n + 1),
                },
                status: s.status.clone(),
            })
            .collect();
        let mode = self.mode;
        let typing = self.input.is_some();
        let new_tab = self.new_tab.as_ref();
        let stdout_sync = std::any::type_name::<B>().contains("Crossterm");
        if stdout_sync {
            let _ = ratatui::crossterm::execute!(
                std::io::stdout(),
                ratatui::crossterm::terminal::BeginSynchronizedUpdate
            );
        }
        let focus = self.focus;
        let armed = self.armed;
        let prefix = self.prefix_text.clone();
        let panel = self.panel;
        let audit = &self.audit;
        let tabs = &mut self.tabs;
        let shown_modal = &mut self.shown_modal;
        let redraw_at = &mut self.redraw_at;
        let mut cursor_style = None;
        term.draw(|f| {
            if mode == Mode::Workbench {
                f.render_widget(TabBar::new(&infos, focus), areas.tabs);
            }
            if let Some(tab) = tabs.get_mut(focus) {
                // A degraded sandbox is drawn like one without gVisor: red.
                let gvisor = tab
                    .domain
                    .as_ref()
                    .map(|d| d.gvisor && d.degraded.is_none());
                let title = match (&tab.domain, &tab.phase) {
                    (_, Phase::Failed(_)) => format!(" {} · failed ", tab.title),
                    (Some(d), _) if d.degraded.is_some() => {
                        format!(" {} · DEGRADED: self-test failed ", tab.title)
                    }
                    (Some(d), _) if !d.gvisor => {
                        format!(" {} · NOT gVisor: {} ", tab.title, d.runtime)
                    }
                    (Some(d), _) if d.profile == tab.title => format!(" {} ", tab.title),
                    (Some(d), _) => format!(" {} · {} ", tab.title, d.profile),
                    (None, _) => format!(" {} · booting ", tab.title),
                };
                let modal_open = !tab.prompts.is_empty();
                tab.state.with_screen(|s| {
                    let pane = match mode {
                        Mode::Workbench => {
                            TerminalPane::new(s).block(pane_block(title, gvisor, true))
                        }
                        Mode::Shell => TerminalPane::new(s),
                    };
                    if !modal_open
                        && !self.help
                        && new_tab.is_none()
                        && let Some(pos) = pane.cursor(areas.pane)
                    {
                        f.set_cursor_position(pos);
                        cursor_style = Some(pane.cursor_style());
                    }
                    f.render_widget(pane, areas.pane);
                });
                if let Some(p) = tab.prompts.front_mut() {
                    let key = (tab.id, p.prompt.request_id.clone());
                    if shown_modal.as_ref() != Some(&key) {
                        p.opened = Some(Instant::now());
                        *shown_modal = Some(key);
                    }
                    let held_until = p.opened.map(|t| t + MODAL_ARM);
                    let held = held_until.is_some_and(|t| t > Instant::now());
                    if held {
                        *redraw_at = held_until;
                    }
                    let modal = match &p.mode {
                        ModalMode::Reading => ApprovalModal::new(&p.request).held(held),
                        ModalMode::Editing(ed) => ApprovalModal::new(&p.request).editing(ed),
                        ModalMode::Reason(ed) => ApprovalModal::new(&p.request).denying(ed),
                    };
                    f.render_stateful_widget(modal, areas.pane, &mut p.view);
                } else {
                    *shown_modal = None;
                }
            }
            if let (Some(panel), Some(area)) = (panel, areas.panel) {
                match panel {
                    Panel::Sessions => f.render_widget(SessionsPanel::new(&sessions), area),
                    Panel::Network => f.render_widget(
                        match routes {
                            Some(rows) => NetworkPanel::new(rows),
                            None => NetworkPanel::new(&[]).waiting(
                                "reading the live table of the focused domain (once it is up)…",
                            ),
                        },
                        area,
                    ),
                    Panel::Escalations => {
                        f.render_widget(EscalationsPanel::new(&escalations), area);
                    }
                    Panel::Audit => f.render_widget(AuditPanel::new(audit), area),
                }
            }
            f.render_widget(
                StatusLine {
                    prefix: &prefix,
                    prefix_armed: armed,
                    // While the human types a line, it has the whole width.
                    domain: domain_text.as_deref().filter(|_| !typing),
                    message: message.as_deref(),
                },
                areas.status,
            );
            if let Some(form) = new_tab {
                f.render_widget(NewTabDialog::new(form), f.area());
            }
            if let Some(h) = &help {
                f.render_widget(HelpOverlay::new(h), f.area());
            }
        })?;
        if stdout_sync {
            // The shape the focused child asked for (DECSCUSR).
            if let Some(style) = cursor_style
                && self.cursor_style != Some(style)
            {
                let _ = ratatui::crossterm::execute!(std::io::stdout(), style);
                self.cursor_style = Some(style);
            }
            let _ = ratatui::crossterm::execute!(
                std::io::stdout(),
                ratatui::crossterm::terminal::EndSynchronizedUpdate
            );
        }
        Ok(())
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
