//! Input routing: the help overlay, the new-tab dialog, the checkpoints
//! overlay and the status-line prompt take keys first, then the approval
//! modal (first refusal: a key it consumes never reaches the shell), then
//! the prefix key's commands, and only then the focused pane.

use crate::client::approval::{EditEnd, PromptKey, Step};

use super::*;

impl App {
    /// The mouse goes to the child only when it asked for it; otherwise
    /// the wheel scrolls the pane's history.
    pub(super) fn mouse(&mut self, m: &MouseEvent) {
        if self.mode == Mode::Workbench && self.drag_split(m) {
            return;
        }
        if self.mode == Mode::Workbench
            && m.kind == MouseEventKind::Down(ratatui::crossterm::event::MouseButton::Left)
            && self.new_tab.is_none()
            && self.checkpoints.is_none()
            && !self.help
            && self.click(m.column, m.row)
        {
            return;
        }
        let inner = Block::bordered().inner(self.areas(self.size).pane);
        let Some(tab) = self.tabs.get(self.focus) else {
            return;
        };
        if tab.modal_open() || self.help || self.checkpoints.is_some() {
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

    /// The border between the pane and the panels' column, dragged with
    /// the left button, moves the split; where it is let go is kept.
    fn drag_split(&mut self, m: &MouseEvent) -> bool {
        use ratatui::crossterm::event::MouseButton::Left;
        let areas = self.areas(self.size);
        let Some(column) = areas.panels.first().map(|(_, a)| *a) else {
            self.dragging_split = false;
            return false;
        };
        let (left, width) = (areas.pane.x, areas.pane.width + column.width);
        // The pane's right border or the column's left one.
        let on_border = m.column + 1 == column.x || m.column == column.x;
        match m.kind {
            MouseEventKind::Down(Left) if on_border && m.row > areas.tabs.y => {
                self.dragging_split = true;
            }
            MouseEventKind::Drag(Left) if self.dragging_split => {
                self.layout = self.layout.split_at(left, width, m.column);
                self.dirty = true;
            }
            MouseEventKind::Up(Left) if self.dragging_split => {
                self.dragging_split = false;
                self.set_layout(self.layout.split_at(left, width, m.column));
            }
            _ => return false,
        }
        true
    }

    pub(super) fn paste(&mut self, text: &str) {
        self.dirty = true;
        if let Some(form) = self.new_tab.as_mut() {
            form.paste(text);
            return;
        }
        // Only the fork's name takes text; a paste never reaches the
        // shell under the overlay.
        if let Some(o) = self.checkpoints.as_mut() {
            o.form.paste(text);
            return;
        }
        // The status-line prompt ("allow egress to:") is one line: a paste
        // lands in it up to its first line break, never in the shell.
        if let Some(input) = self.input.as_mut() {
            let line = text.split(['\r', '\n']).next().unwrap_or_default();
            input.line.insert(line);
            return;
        }
        let Some(tab) = self.tabs.get_mut(self.focus) else {
            return;
        };
        if let Some(p) = tab.prompts.front_mut().filter(|p| p.approval.is_open()) {
            p.approval.paste(text);
            if let Some(note) = p.approval.note() {
                self.message = Some(note.to_string());
            }
            return;
        }
        let modes = tab.state.input_modes();
        tab.state.scroll_to_bottom();
        tab.write(&encode_paste(text, modes));
    }

    pub(super) fn key(&mut self, key: KeyEvent) {
        self.dirty = true;
        self.message = None;
        if self.help {
            self.help = false;
            return;
        }
        if self.quitting {
            // Leaving with sessions that outlive the workbench: the human
            // says which happens to them.
            self.quitting = false;
            match key.code {
                KeyCode::Char('e' | 'E') => {
                    for t in &self.tabs {
                        t.end_session();
                    }
                    self.quit = true;
                }
                KeyCode::Char('d' | 'D') => {
                    self.detached = true;
                    self.quit = true;
                }
                _ => self.message = Some("not quitting".into()),
            }
            return;
        }
        if let Some(id) = self.closing.take() {
            match (key.code, self.tabs.iter().position(|t| t.id == id)) {
                (KeyCode::Char('y' | 'Y'), Some(i)) => self.close_tab(i),
                _ => self.message = Some("the tab stays open".into()),
            }
            return;
        }
        if self.new_tab.is_some() {
            self.new_tab_key(key);
            return;
        }
        if self.checkpoints.is_some() {
            self.checkpoints_key(key);
            return;
        }
        if let Some(input) = self.input.as_mut() {
            let Some(k) = line_key(&key) else {
                return;
            };
            match input.line.key(k) {
                None => {}
                Some(EditEnd::Cancel) => {
                    self.input = None;
                    self.message = Some("cancelled".into());
                }
                Some(EditEnd::Submit(text)) => {
                    let kind = input.kind;
                    self.input = None;
                    self.submit(kind, text.trim());
                }
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
        if let Some(panel) = self.panel_focus {
            if self.shows(panel) {
                self.panel_key(panel, key);
                return;
            }
            self.panel_focus = None;
        }
        let Some(tab) = self.tabs.get(self.focus) else {
            return;
        };
        // A request that waits does not take the keyboard (decisions.md
        // D15): until the human opens it, every key is the pane's.
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
    pub(super) fn open_new_tab_form(&mut self) {
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
    pub(super) fn new_tab_key(&mut self, key: KeyEvent) {
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
                // Refused in the dialog, at once, before anything starts.
                let launched = crate::client::preboot(
                    &self.launcher.config,
                    &profile,
                    &path,
                    &crate::host::SystemEnv,
                    false,
                )
                .and_then(|()| self.launcher.launch(Some(&profile), &path));
                match launched {
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
    pub(super) fn submit(&mut self, kind: InputKind, text: &str) {
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
    pub(super) fn command(&mut self, key: KeyEvent) {
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
            // Going to a tab is going to its shell.
            self.panel_focus = None;
            if self.shows(Panel::Audit)
                && let Some(t) = self.tabs.get(self.focus)
            {
                t.send(ClientMsg::Audit);
            }
            if self.shows(Panel::Network) {
                self.refresh_network(None);
            }
        }
    }

    pub(super) fn command_key(&mut self, key: KeyEvent, n: usize) {
        if self.mode == Mode::Shell {
            // One pane: no tabs, no panels.
            match key.code {
                KeyCode::Char('?') => self.help = true,
                KeyCode::Char('!') => self.open_oldest_request(),
                KeyCode::Char('q') => self.quit = true,
                KeyCode::Char('d') if self.tabs.iter().any(|t| t.hosted.is_some()) => {
                    self.detached = true;
                    self.quit = true;
                }
                _ => {}
            }
            return;
        }
        let typing = |kind| {
            Some(Input {
                kind,
                line: LineEdit::default(),
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
            KeyCode::Char('x') => self.ask_close(self.focus),
            KeyCode::Char(',') => {
                // The title as a suggestion: typing replaces it.
                let title = self.tabs.get(self.focus).map(|t| t.title.clone());
                self.input = Some(Input {
                    kind: InputKind::Rename,
                    line: LineEdit::suggested(title.as_deref().unwrap_or_default()),
                });
            }
            KeyCode::Char('+') => self.input = typing(InputKind::Allow),
            KeyCode::Char('-') => self.input = typing(InputKind::Deny),
            KeyCode::Char('w') if self.dashboard() => self.panel_focus = Some(Panel::Network),
            KeyCode::Char('w') => self.toggle(Panel::Network),
            KeyCode::Char('?') => self.help = true,
            KeyCode::Char('q') => {
                let running = self.running_hosted().len();
                if running == 0 {
                    self.quit = true;
                } else {
                    self.quitting = true;
                    self.message = Some(format!(
                        "quit? [e] end the {running} session(s) · [d] detach, they run on"
                    ));
                }
            }
            KeyCode::Char('d') => {
                self.detached = true;
                self.quit = true;
            }
            KeyCode::Char('!') => self.open_oldest_request(),
            KeyCode::Char('z') => {
                self.zoom = !self.zoom;
                self.dirty = true;
                if !self.zoom {
                    self.refresh_panel();
                }
            }
            KeyCode::Char('<') => self.set_layout(self.layout.nudged(5)),
            KeyCode::Char('>') => self.set_layout(self.layout.nudged(-5)),
            KeyCode::Char('|') => {
                let mut choice = self.layout;
                choice.dashboard = !choice.dashboard;
                self.set_layout(choice);
            }
            KeyCode::Tab => self.cycle_focus(),
            // In the dashboard they are on screen already: they get the keys.
            KeyCode::Char('s') if self.dashboard() => self.panel_focus = Some(Panel::Sessions),
            KeyCode::Char('e') if self.dashboard() => {
                self.panel_focus = Some(Panel::Escalations);
            }
            KeyCode::Char('s') => self.toggle(Panel::Sessions),
            KeyCode::Char('e') => self.toggle(Panel::Escalations),
            KeyCode::Char('a') => self.toggle(Panel::Audit),
            KeyCode::Char('k') => self.take_checkpoint(),
            KeyCode::Char('K') => self.open_checkpoints(),
            _ => {}
        }
    }

    fn dashboard(&self) -> bool {
        lazaret_widgets::layout::is_dashboard(
            Rect::new(0, 0, self.size.width, self.size.height),
            &self.layout_spec(),
        )
    }

    /// Prefix k: a checkpoint of the focused tab's domain, on a worker
    /// thread; the status line says what became of it.
    pub(super) fn take_checkpoint(&mut self) {
        let Some(tab) = self.tabs.get(self.focus) else {
            return;
        };
        if tab.domain.is_none() {
            self.message = Some("the domain is not up yet; try again when it is".into());
            return;
        }
        let socket = tab.launch.ctx.control_socket.clone();
        let hash = tab.launch.ctx.anchor.hash().to_string();
        self.message = Some(format!("taking a checkpoint of domain {hash}…"));
        let tx = self.tx.clone();
        self.rt.spawn(async move {
            let result = crate::coordinator::client::checkpoint(&socket, None)
                .await
                .map(|(_, c)| {
                    format!(
                        "checkpoint {} of domain {hash} taken: {}, the sandbox held {} ms",
                        c.name,
                        crate::checkpoint::show_bytes(c.bytes),
                        c.held_ms
                    )
                })
                .map_err(|e| format!("no checkpoint of domain {hash}: {e}"));
            let _ = tx.send(Ev::Checkpointed(result));
        });
    }

    /// Prefix x: a tab whose session still runs is closed only once the
    /// human says so, as tmux's kill-pane asks; one whose session ended
    /// closes at once.
    fn ask_close(&mut self, i: usize) {
        let Some(t) = self.tabs.get(i) else {
            return;
        };
        let live = t.phase == Phase::Running && t.hosted.as_ref().is_none_or(|h| !h.ended());
        if !live {
            self.close_tab(i);
            return;
        }
        let running = t
            .hosted
            .as_ref()
            .and_then(|h| h.id())
            .and_then(|n| {
                let hash = t.launch.ctx.anchor.hash();
                let d = self.domains.iter().find(|d| d.hash == hash)?;
                let h = d.hosted.iter().find(|h| h.id == n)?;
                h.busy?
                    .then(|| format!(" (it is running a command in {})", h.argv.join(" ")))
            })
            .unwrap_or_default();
        self.closing = Some(t.id);
        self.message = Some(format!(
            "close tab {}? its session ends{running}: [y] yes · any other key: no",
            t.title
        ));
    }

    /// Prefix Tab: the keys go to the next panel on screen, then back to
    /// the shell.
    fn cycle_focus(&mut self) {
        let shown: Vec<Panel> = self
            .areas(self.size)
            .panels
            .iter()
            .map(|(k, _)| *k)
            .collect();
        let next = match self
            .panel_focus
            .and_then(|p| shown.iter().position(|k| *k == p))
        {
            Some(i) => shown.get(i + 1).copied(),
            None => shown.first().copied(),
        };
        self.panel_focus = next;
        if next.is_none() {
            self.message = Some("keys go to the shell".into());
        }
    }

    /// A key for the focused panel: Up/Down/PgUp/PgDn/Home/End move its
    /// selection, Enter opens what is selected, Esc gives the keys back to
    /// the shell.
    fn panel_key(&mut self, panel: Panel, key: KeyEvent) {
        let rows = match panel {
            Panel::Sessions => self.session_entries().len(),
            Panel::Escalations => self.seen.len(),
            Panel::Network => self.network.as_ref().map_or(0, |(_, t)| t.rows.len()),
            Panel::Audit => self.audit.len(),
        };
        let sel = self.selected.entry(panel).or_insert(0);
        let last = rows.saturating_sub(1);
        match key.code {
            KeyCode::Esc => {
                self.panel_focus = None;
                return;
            }
            KeyCode::Up | KeyCode::Char('k') => *sel = sel.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => *sel = (*sel + 1).min(last),
            KeyCode::PageUp => *sel = sel.saturating_sub(10),
            KeyCode::PageDown => *sel = (*sel + 10).min(last),
            KeyCode::Home => *sel = 0,
            KeyCode::End => *sel = last,
            KeyCode::Enter => {
                let at = (*sel).min(last);
                match panel {
                    Panel::Sessions => {
                        if let Some(entry) = self.session_entries().get(at).copied() {
                            self.open_entry(entry);
                        }
                    }
                    Panel::Escalations => self.open_request(at),
                    Panel::Network | Panel::Audit => {}
                }
                return;
            }
            _ => return,
        }
        *sel = (*sel).min(last);
    }

    /// A left click: on a tab, it is focused; on a row of the sessions or
    /// the escalation panel, that row is opened as Enter would.
    pub(super) fn click(&mut self, column: u16, row: u16) -> bool {
        let areas = self.areas(self.size);
        if row == areas.tabs.y && areas.tabs.width > 0 {
            let infos = self.tab_infos();
            if let Some(i) = TabBar::new(&infos, self.focus).tab_at(areas.tabs, column) {
                self.focus = i;
                self.panel_focus = None;
                self.dirty = true;
            }
            return true;
        }
        for (panel, area) in areas.panels {
            if !area.contains(ratatui::layout::Position::new(column, row)) {
                continue;
            }
            // Inside the border, under the table's header.
            let first = area.y + 2;
            if row >= first && row < area.y + area.height.saturating_sub(1) {
                let at = usize::from(row - first);
                match panel {
                    Panel::Sessions => {
                        if let Some(entry) = self.session_entries().get(at).copied() {
                            self.selected.insert(panel, at);
                            self.open_entry(entry);
                        }
                    }
                    Panel::Escalations => {
                        self.selected.insert(panel, at);
                        self.open_request(at);
                    }
                    _ => self.panel_focus = Some(panel),
                }
            } else {
                self.panel_focus = Some(panel);
            }
            self.dirty = true;
            return true;
        }
        false
    }

    pub(super) fn toggle(&mut self, panel: Panel) {
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

    /// The approval modal of the focused tab gets keys first, once the
    /// human opened it; `true` when it consumed the key. A request that
    /// only waits passes every key on (decisions.md D15).
    pub(super) fn modal_key(&mut self, key: KeyEvent) -> bool {
        let Some(tab) = self.tabs.get_mut(self.focus) else {
            return false;
        };
        let title = tab.title.clone();
        let Some(p) = tab.prompts.front_mut().filter(|p| p.approval.is_open()) else {
            return false;
        };
        let Some(key) = prompt_key(&key, p.approval.mode()) else {
            return false;
        };
        let step = p.approval.key(key, Instant::now());
        if let Some(note) = p.approval.note() {
            self.message = Some(note.to_string());
        }
        let verdict = match step {
            Step::Passed => return false,
            Step::Asking => return true,
            Step::Closed => {
                self.message = Some(format!(
                    "request {} still waits: {} ! opens it again",
                    p.prompt().request_id,
                    self.prefix_text
                ));
                return true;
            }
            Step::Decided(verdict) => verdict,
        };
        let request_id = p.prompt().request_id.clone();
        let domain = p.domain.clone();
        let answered: Vec<String> = p.ids().cloned().collect();
        let route = p.route.clone();
        tab.prompts.pop_front();
        // One decision answers the identical copies too.
        for id in answered {
            let decision = ClientMsg::Decision {
                request_id: id,
                verdict: verdict.clone(),
            };
            match (&route, &self.inbox) {
                (Some(hash), Some(inbox)) => {
                    if !inbox.send(hash, decision) {
                        self.message = Some(format!(
                            "request {request_id}: its domain went down; nothing runs"
                        ));
                        return true;
                    }
                }
                _ => tab.send(decision),
            }
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
        self.set_status(&domain, &request_id, status);
        let whose = match &route {
            Some(_) => format!("request {request_id} (inbox)"),
            None => format!("tab {title}"),
        };
        self.message = Some(match &verdict {
            Verdict::Approve => format!("{whose}: approved"),
            Verdict::Edit { .. } => format!("{whose}: edited and approved"),
            Verdict::Deny { .. } => format!("{whose}: denied"),
            Verdict::Abort if route.is_some() => {
                format!("{whose}: aborted (the asking session is told)")
            }
            Verdict::Abort => format!("{whose}: aborted; its session ends, other tabs stay"),
        });
        // Spec §5.2's abort, as the human chose it: the asking session
        // ends (its other requests are denied by the coordinator), and with
        // the domain's last session the domain goes. Other tabs stay; a
        // request from the inbox is the asking session's to end.
        if verdict == Verdict::Abort && route.is_none() {
            if let Some(t) = self.tabs.get(self.focus) {
                t.end_session();
            }
            if self.mode == Mode::Shell {
                self.quit = true;
            }
        }
        true
    }

    /// What an abort of the focused tab's open request would end, for the
    /// modal to ask about.
    pub(super) fn abort_scope(&self) -> String {
        let Some(t) = self.tabs.get(self.focus) else {
            return "nothing".into();
        };
        match t.prompts.front().and_then(|p| p.route.as_ref()) {
            Some(_) => "the asking session (in its own terminal)".into(),
            None if self.mode == Mode::Shell => "this shell's session".into(),
            None => format!("tab {}'s session (other tabs stay)", t.title),
        }
    }
}

/// The workbench's key as a line editor takes it: a terminal's keys
/// (C-u, C-w, C-a, C-e, M-b, M-f, C-c and Esc to cancel). `None` for a
/// key release.
pub(super) fn line_key(key: &KeyEvent) -> Option<PromptKey> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    if key.modifiers.contains(KeyModifiers::CONTROL) {
        return Some(match key.code {
            KeyCode::Char('u') => PromptKey::Kill,
            KeyCode::Char('w') => PromptKey::KillWord,
            KeyCode::Char('a') => PromptKey::Home,
            KeyCode::Char('e') => PromptKey::End,
            KeyCode::Char('b') => PromptKey::Left,
            KeyCode::Char('f') => PromptKey::Right,
            KeyCode::Char('m' | 'j') => PromptKey::Enter,
            KeyCode::Char('h') => PromptKey::Backspace,
            KeyCode::Char('c') => PromptKey::Cancel,
            KeyCode::Left => PromptKey::WordLeft,
            KeyCode::Right => PromptKey::WordRight,
            // Anything else is swallowed: nothing reaches the shell.
            _ => PromptKey::Other,
        });
    }
    if key.modifiers.contains(KeyModifiers::ALT) {
        return Some(match key.code {
            KeyCode::Char('b') => PromptKey::WordLeft,
            KeyCode::Char('f') => PromptKey::WordRight,
            KeyCode::Backspace => PromptKey::KillWord,
            _ => PromptKey::Other,
        });
    }
    Some(match key.code {
        KeyCode::Char(c) => PromptKey::Char(c),
        KeyCode::Enter => PromptKey::Enter,
        KeyCode::Esc => PromptKey::Cancel,
        KeyCode::Backspace => PromptKey::Backspace,
        KeyCode::Delete => PromptKey::Delete,
        KeyCode::Left => PromptKey::Left,
        KeyCode::Right => PromptKey::Right,
        KeyCode::Home => PromptKey::Home,
        KeyCode::End => PromptKey::End,
        KeyCode::Up => PromptKey::Up,
        KeyCode::Down => PromptKey::Down,
        KeyCode::PageUp => PromptKey::PageUp,
        KeyCode::PageDown => PromptKey::PageDown,
        // Tab, F-keys and the like: swallowed, neither answer nor input.
        _ => PromptKey::Other,
    })
}

/// The workbench's key as the open prompt takes it; `None` for what is
/// not the modal's: Ctrl and Alt chords while reading (the prefix key
/// stays the workbench's), but Ctrl-C, which backs out as Esc does.
fn prompt_key(key: &KeyEvent, mode: &approval::Mode) -> Option<PromptKey> {
    let chord = key
        .modifiers
        .intersects(KeyModifiers::CONTROL | KeyModifiers::ALT);
    let editing = matches!(mode, approval::Mode::Editing(_) | approval::Mode::Reason(_));
    if chord && !editing {
        let ctrl_c =
            key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c');
        return (ctrl_c && key.kind != KeyEventKind::Release).then_some(PromptKey::Cancel);
    }
    line_key(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::approval::{LineEdit, Mode as PromptMode};

    #[test]
    fn chords_stay_the_apps_while_reading_and_edit_the_line_while_editing() {
        let key =
            |c: KeyCode, m: KeyModifiers, mode: &PromptMode| prompt_key(&KeyEvent::new(c, m), mode);
        let reading = PromptMode::Reading;
        let editing = PromptMode::Editing(LineEdit::new("ls"));
        assert_eq!(
            key(KeyCode::Char('a'), KeyModifiers::CONTROL, &reading),
            None
        );
        assert_eq!(
            key(KeyCode::Char('c'), KeyModifiers::CONTROL, &reading),
            Some(PromptKey::Cancel)
        );
        assert_eq!(
            key(KeyCode::Char('w'), KeyModifiers::CONTROL, &editing),
            Some(PromptKey::KillWord)
        );
        assert_eq!(
            key(KeyCode::Char('b'), KeyModifiers::ALT, &editing),
            Some(PromptKey::WordLeft)
        );
        assert_eq!(key(KeyCode::Char('x'), KeyModifiers::ALT, &reading), None);
        assert_eq!(
            key(KeyCode::Char('A'), KeyModifiers::SHIFT, &reading),
            Some(PromptKey::Char('A'))
        );
        assert_eq!(
            key(KeyCode::PageDown, KeyModifiers::NONE, &reading),
            Some(PromptKey::PageDown)
        );
        assert_eq!(
            key(KeyCode::Tab, KeyModifiers::NONE, &reading),
            Some(PromptKey::Other)
        );
        assert_eq!(
            key(KeyCode::Char('u'), KeyModifiers::CONTROL, &editing),
            Some(PromptKey::Kill)
        );
        assert_eq!(
            key(KeyCode::Char('a'), KeyModifiers::CONTROL, &editing),
            Some(PromptKey::Home)
        );
        assert_eq!(
            key(KeyCode::Char('z'), KeyModifiers::CONTROL, &editing),
            Some(PromptKey::Other)
        );
    }
}
