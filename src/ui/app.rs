//! The workbench's state, its event handling and its view.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use lazaret_widgets::keys::{encode_key, encode_mouse, encode_paste};
use lazaret_widgets::modal::{ApprovalModal, CommandEditor, EditOutcome};
use lazaret_widgets::pane::TerminalPane;
use lazaret_widgets::panels::{
    AuditEntry, AuditPanel, EscalationRow, EscalationStatus, EscalationsPanel, HelpOverlay,
    HelpSection, KeyBinding, SessionRow, SessionsPanel, StatusLine, TabBar, TabInfo,
};
use ratatui::Terminal;
use ratatui::backend::Backend;
use ratatui::crossterm::event::{
    Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseEvent, MouseEventKind,
};
use ratatui::layout::{Constraint, Layout, Rect, Size};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, BorderType};

use super::tab::{Launch, ModalMode, Pending, Phase, Tab};
use super::{Ev, FRAME, key_matches};
use crate::coordinator::escalation::Verdict;
use crate::coordinator::protocol::{ClientMsg, CoordMsg, DomainStatus};
use crate::rundir::RuntimeDir;

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
    Escalations,
    Audit,
}

/// A request seen by this UI, for the escalation queue.
#[derive(Debug)]
struct Seen {
    id: String,
    tab_id: u64,
    tab: String,
    arrived: Instant,
    command: String,
    status: EscalationStatus,
}

pub struct App {
    launch: Launch,
    prefix_text: String,
    prefix: KeyEvent,
    rundir: RuntimeDir,
    rt: tokio::runtime::Handle,
    tx: Sender<Ev>,
    tabs: Vec<Tab>,
    focus: usize,
    next_id: u64,
    armed: bool,
    help: bool,
    /// `Some`: renaming the focused tab, the text so far.
    renaming: Option<String>,
    panel: Option<Panel>,
    domains: Vec<DomainStatus>,
    seen: Vec<Seen>,
    audit: Vec<AuditEntry>,
    message: Option<String>,
    quit: bool,
    dirty: bool,
    last_poll: Instant,
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
        rundir: RuntimeDir,
        rt: tokio::runtime::Handle,
        tx: Sender<Ev>,
    ) -> App {
        App {
            launch,
            prefix_text,
            prefix,
            rundir,
            rt,
            tx,
            tabs: Vec::new(),
            focus: 0,
            next_id: 1,
            armed: false,
            help: false,
            renaming: None,
            panel: None,
            domains: Vec::new(),
            seen: Vec::new(),
            audit: Vec::new(),
            message: None,
            quit: false,
            dirty: true,
            last_poll: Instant::now(),
            cursor_style: None,
            size: Size::new(80, 24),
        }
    }

    fn areas(&self, size: Size) -> Areas {
        let full = Rect::new(0, 0, size.width, size.height);
        let [tabs, body, status] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Min(3),
            Constraint::Length(1),
        ])
        .areas(full);
        let (pane, panel) = match self.panel {
            Some(_) if body.width >= 60 => {
                let [p, s] = Layout::horizontal([Constraint::Min(30), Constraint::Percentage(40)])
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

    /// The PTY size for the current layout.
    fn pane_size(&self) -> (u16, u16) {
        let inner = Block::bordered().inner(self.areas(self.size).pane);
        (inner.height.max(1), inner.width.max(1))
    }

    pub fn new_tab(&mut self, size: Size) {
        self.size = size;
        let (rows, cols) = self.pane_size();
        let id = self.next_id;
        self.next_id += 1;
        let tab = Tab::start(id, &self.launch, rows, cols, self.tx.clone());
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
        let sockets = crate::cli::session::sockets(&self.rundir);
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

    /// While the queue panel is open and a request of tab `id` runs, its
    /// result is looked up in the audit trail when the tab's shell shows
    /// output (at most every 300 ms): the coordinator sends results to the
    /// sandbox, not to this session.
    fn poll_results(&mut self, id: u64) {
        let watching = matches!(self.panel, Some(Panel::Escalations | Panel::Audit));
        let running = self
            .seen
            .iter()
            .any(|s| s.tab_id == id && s.status == EscalationStatus::Running);
        if watching && running && self.last_poll.elapsed() > Duration::from_millis(300) {
            self.last_poll = Instant::now();
            if let Some(t) = self.tabs.iter().find(|t| t.id == id) {
                t.send(ClientMsg::Audit);
            }
        }
    }

    fn set_status(&mut self, id: &str, status: EscalationStatus) {
        if let Some(s) = self.seen.iter_mut().find(|s| s.id == id) {
            s.status = status;
        }
    }

    /// The loop: block for events; render when dirty, at most every FRAME.
    pub fn run<B: Backend>(&mut self, term: &mut Terminal<B>, rx: &Receiver<Ev>) -> Result<()>
    where
        B::Error: Send + Sync + 'static,
    {
        let mut last = Instant::now() - FRAME;
        while !self.quit {
            let ev = if self.dirty {
                let wait = (last + FRAME).saturating_duration_since(Instant::now());
                if wait.is_zero() {
                    self.draw(term)?;
                    last = Instant::now();
                    continue;
                }
                match rx.recv_timeout(wait) {
                    Ok(ev) => ev,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match rx.recv() {
                    Ok(ev) => ev,
                    Err(_) => break,
                }
            };
            self.handle(ev);
            // Take what else is queued before drawing.
            for _ in 0..256 {
                match rx.try_recv() {
                    Ok(ev) => self.handle(ev),
                    Err(_) => break,
                }
            }
        }
        Ok(())
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
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
                self.poll_results(id);
                if self.tabs.get(self.focus).is_some_and(|t| t.id == id) {
                    self.dirty = true;
                }
            }
            Ev::Exited(id) => {
                if let Some(i) = self.tabs.iter().position(|t| t.id == id) {
                    self.close_tab(i);
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
                if let Some(t) = self.tab_mut(id) {
                    t.failed(&why);
                }
                self.dirty = true;
            }
            Ev::Coord(id, msg) => self.coord(id, *msg),
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
                self.seen.push(Seen {
                    id: prompt.request_id.clone(),
                    tab_id: id,
                    tab: title,
                    arrived: Instant::now(),
                    command: prompt.command.clone(),
                    status: EscalationStatus::Pending,
                });
                tab.prompts.push_back(Pending::new(prompt));
                if focused != Some(id) {
                    self.message = Some(format!("tab {} asks for a host command", tab.title));
                }
            }
            CoordMsg::Audit { records } => {
                // What became of the requests this UI approved.
                for r in records.iter().filter(|r| r.kind == "escalation-result") {
                    let Some(rid) = r.data["request_id"].as_str() else {
                        continue;
                    };
                    let status = match (r.data["exit_code"].as_i64(), r.data["error"].as_str()) {
                        (_, Some(e)) => EscalationStatus::Failed { error: e.into() },
                        (Some(code), _) => EscalationStatus::Finished {
                            exit_code: code as i32,
                            output: String::new(),
                        },
                        _ => continue,
                    };
                    if let Some(s) = self.seen.iter_mut().find(|s| s.id == rid) {
                        s.status = status;
                    }
                }
                if focused == Some(id) {
                    self.audit = records
                        .iter()
                        .map(|r| AuditEntry {
                            time: clock(r.time),
                            event: r.kind.clone(),
                            detail: summary(&r.data),
                        })
                        .collect();
                }
            }
            CoordMsg::Status { domain } => tab.domain = Some(domain),
            CoordMsg::Error { message } => self.message = Some(message),
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
        if let Some(name) = self.renaming.as_mut() {
            match key.code {
                KeyCode::Enter => {
                    let name = std::mem::take(name);
                    self.renaming = None;
                    if let Some(t) = self.tabs.get_mut(self.focus)
                        && !name.trim().is_empty()
                    {
                        t.title = name;
                    }
                }
                KeyCode::Esc => self.renaming = None,
                KeyCode::Backspace => {
                    name.pop();
                }
                KeyCode::Char(c) if !c.is_control() => name.push(c),
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
        if self.focus != before
            && self.panel == Some(Panel::Audit)
            && let Some(t) = self.tabs.get(self.focus)
        {
            t.send(ClientMsg::Audit);
        }
    }

    fn command_key(&mut self, key: KeyEvent, n: usize) {
        match key.code {
            KeyCode::Char('c') => self.new_tab(self.size),
            KeyCode::Char('n') if n > 0 => self.focus = (self.focus + 1) % n,
            KeyCode::Char('p') if n > 0 => self.focus = (self.focus + n - 1) % n,
            KeyCode::Char(d @ '1'..='9') => {
                let i = d as usize - '1' as usize;
                if i < n {
                    self.focus = i;
                }
            }
            KeyCode::Char('x') => self.close_tab(self.focus),
            KeyCode::Char(',') => self.renaming = Some(String::new()),
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
        match self.panel {
            Some(Panel::Sessions) => self.refresh_domains(),
            Some(Panel::Audit) => {
                if let Some(t) = self.tabs.get(self.focus) {
                    t.send(ClientMsg::Audit);
                }
            }
            Some(Panel::Escalations) => {
                for t in &self.tabs {
                    if self.seen.iter().any(|s| s.tab_id == t.id) {
                        t.send(ClientMsg::Audit);
                    }
                }
            }
            None => {}
        }
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
                match key.code {
                    KeyCode::Char('a' | 'A') => Verdict::Approve,
                    KeyCode::Char('d' | 'D') => {
                        p.mode = ModalMode::Reason(CommandEditor::new(""));
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
        tab.prompts.pop_front();
        tab.send(ClientMsg::Decision {
            request_id: request_id.clone(),
            verdict: verdict.clone(),
        });
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
            self.close_tab(self.focus);
        }
        true
    }

    fn help_sections(&self) -> Vec<HelpSection> {
        let p = &self.prefix_text;
        let b = |keys: String, action: &str| KeyBinding {
            keys,
            action: action.into(),
        };
        vec![
            HelpSection {
                title: "Tabs".into(),
                bindings: vec![
                    b(format!("{p} c"), "new tab (same profile and workspace)"),
                    b(format!("{p} n / {p} p"), "next / previous tab"),
                    b(format!("{p} 1..9"), "go to tab N"),
                    b(format!("{p} x"), "close tab (ends its session)"),
                    b(
                        format!("{p} ,"),
                        "rename tab (Enter to keep, Esc to cancel)",
                    ),
                    b(format!("{p} {p}"), "send the prefix key to the shell"),
                    b(format!("{p} q"), "quit (ends every session of this UI)"),
                    b(
                        "S-PgUp / S-PgDn, wheel".into(),
                        "scroll the pane's history (the wheel goes to programs that ask for the mouse)",
                    ),
                ],
            },
            HelpSection {
                title: "Panels".into(),
                bindings: vec![
                    b(
                        format!("{p} s"),
                        "sessions: every running domain of this user",
                    ),
                    b(format!("{p} e"), "escalation queue"),
                    b(format!("{p} a"), "audit trail of the focused tab's domain"),
                    b(format!("{p} ?"), "this help (any key closes it)"),
                ],
            },
            HelpSection {
                title: "Approval modal".into(),
                bindings: vec![
                    b("A".into(), "approve and run"),
                    b("D".into(), "deny (type an optional reason, Enter sends)"),
                    b(
                        "E".into(),
                        "edit the command, Enter approves it (re-checked)",
                    ),
                    b("Q".into(), "abort: deny and close this tab"),
                    b("Up / Down / PgUp / PgDn".into(), "scroll the request"),
                ],
            },
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
                title: t.title.clone(),
                pending: t.prompts.len(),
            })
            .collect();
        let domain_text = self.tabs.get(self.focus).map(|t| match &t.domain {
            Some(d) if d.gvisor => format!("{} {} · gVisor ({})", d.profile, d.hash, d.runtime),
            Some(d) => format!(
                "{} {} · !! NOT gVisor: {} !! the agent shares the host kernel",
                d.profile, d.hash, d.runtime
            ),
            None => format!("{} · starting", self.launch.label),
        });
        let message = match &self.renaming {
            Some(name) => Some(format!("rename tab: {name}_")),
            None => self.message.clone(),
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
                command: s.command.clone(),
                status: s.status.clone(),
            })
            .collect();
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
        let mut cursor_style = None;
        term.draw(|f| {
            f.render_widget(TabBar::new(&infos, focus), areas.tabs);
            if let Some(tab) = tabs.get_mut(focus) {
                let gvisor = tab.domain.as_ref().map(|d| d.gvisor);
                let title = match (&tab.domain, &tab.phase) {
                    (_, Phase::Failed(_)) => format!(" {} · failed ", tab.title),
                    (Some(d), _) if !d.gvisor => {
                        format!(" {} · NOT gVisor: {} ", tab.title, d.runtime)
                    }
                    (Some(d), _) => format!(" {} · {} ", tab.title, d.profile),
                    (None, _) => format!(" {} · booting ", tab.title),
                };
                let modal_open = !tab.prompts.is_empty();
                tab.state.with_screen(|s| {
                    let pane = TerminalPane::new(s).block(pane_block(title, gvisor, true));
                    if !modal_open
                        && !self.help
                        && let Some(pos) = pane.cursor(areas.pane)
                    {
                        f.set_cursor_position(pos);
                        cursor_style = Some(pane.cursor_style());
                    }
                    f.render_widget(pane, areas.pane);
                });
                if let Some(p) = tab.prompts.front_mut() {
                    let mut request = p.request.clone();
                    let modal = match &p.mode {
                        ModalMode::Reading => ApprovalModal::new(&p.request),
                        ModalMode::Editing(ed) => {
                            request.note = Some(
                                "edit the command: Enter approves it (re-checked), Esc goes back"
                                    .into(),
                            );
                            ApprovalModal::new(&request).editing(ed)
                        }
                        ModalMode::Reason(ed) => {
                            request.note = Some(
                                "deny: type a reason for the agent (optional), Enter sends, Esc goes back"
                                    .into(),
                            );
                            ApprovalModal::new(&request).editing(ed)
                        }
                    };
                    f.render_stateful_widget(modal, areas.pane, &mut p.view);
                }
            }
            if let (Some(panel), Some(area)) = (panel, areas.panel) {
                match panel {
                    Panel::Sessions => f.render_widget(SessionsPanel::new(&sessions), area),
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
                    domain: domain_text.as_deref(),
                    message: message.as_deref(),
                },
                areas.status,
            );
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
