//! Drawing: the layout of a screen, the widgets on it, and the help text.

use ratatui::text::{Line, Span};

use super::*;

/// Where things go on a screen of `size`.
pub(super) type Areas = lazaret_widgets::layout::WorkbenchAreas;

/// The status line names each limit this host does not apply.
pub(super) fn limit_gaps_text(d: &DomainStatus) -> String {
    d.limit_gaps
        .iter()
        .map(|g| format!(" · {}", g.split(':').next().unwrap_or(g)))
        .collect()
}

pub(super) fn pane_block(title: String, gvisor: Option<bool>, focused: bool) -> Block<'static> {
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
    pub(super) fn areas(&self, size: Size) -> Areas {
        let full = Rect::new(0, 0, size.width, size.height);
        if self.mode == Mode::Shell {
            let [pane, status] =
                Layout::vertical([Constraint::Min(1), Constraint::Length(1)]).areas(full);
            return Areas {
                tabs: Rect::default(),
                pane,
                panels: Vec::new(),
                status,
            };
        }
        lazaret_widgets::layout::workbench(full, &self.layout_spec())
    }

    /// What the tab bar shows of each tab.
    pub(super) fn tab_infos(&self) -> Vec<TabInfo> {
        self.tabs
            .iter()
            .map(|t| TabInfo {
                title: match &t.domain {
                    Some(d) if d.degraded.is_some() => format!("{} !DEGRADED", t.title),
                    _ => t.title.clone(),
                },
                pending: t.prompts.len(),
                ended: matches!(t.phase, Phase::Failed(_)),
            })
            .collect()
    }

    pub(super) fn layout_spec(&self) -> lazaret_widgets::layout::LayoutSpec {
        lazaret_widgets::layout::LayoutSpec {
            choice: self.layout,
            panel: self.panel,
            zoom: self.zoom,
        }
    }

    /// The shell's part of the pane (inside the border, if any).
    pub(super) fn pane_inner(&self) -> Rect {
        let pane = self.areas(self.size).pane;
        match self.mode {
            Mode::Workbench => Block::bordered().inner(pane),
            Mode::Shell => pane,
        }
    }

    /// The PTY size for the current layout.
    pub(super) fn pane_size(&self) -> (u16, u16) {
        let inner = self.pane_inner();
        (inner.height.max(1), inner.width.max(1))
    }

    pub(super) fn help_sections(&self) -> Vec<HelpSection> {
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
            title: "Approval modal (a request waits until you open it)".into(),
            bindings: vec![
                b(
                    format!("{p} !"),
                    "open the oldest waiting request (keys stay the pane's until then)",
                ),
                b(
                    "the letters shown".into(),
                    "approve and run: type the request's code, a key at a time",
                ),
                b("d".into(), "deny (type an optional reason, Enter denies)"),
                b(
                    "e".into(),
                    "edit the command; the edit is read and approved with the code",
                ),
                b(
                    "q, then y".into(),
                    match self.mode {
                        Mode::Workbench => {
                            "abort: deny, and end the asking tab's session (others stay)"
                        }
                        Mode::Shell => "abort: deny, then end this shell",
                    },
                ),
                b(
                    "Esc / C-c".into(),
                    "back to the pane; the request still waits",
                ),
                b("Up / Down / PgUp / PgDn".into(), "scroll the request"),
            ],
        };
        if self.mode == Mode::Shell {
            let hosted = self.tabs.iter().any(|t| t.hosted.is_some());
            let mut bindings = vec![b(format!("{p} {p}"), "send the prefix key to the shell")];
            if hosted {
                bindings.push(b(
                    format!("{p} d"),
                    "detach: leave, the session keeps running (`lazaret attach` returns)",
                ));
            }
            bindings.push(b(
                format!("{p} q"),
                if hosted {
                    "quit: leave, the session keeps running"
                } else {
                    "quit (ends this session)"
                },
            ));
            bindings.push(b(format!("{p} ?"), "this help (any key closes it)"));
            bindings.push(scroll);
            return vec![
                HelpSection {
                    title: "Shell".into(),
                    bindings,
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
                    b(
                        format!("{p} x"),
                        "close tab (ends its session; asks first while it runs)",
                    ),
                    b(
                        format!("{p} d"),
                        "detach: leave, every session keeps running",
                    ),
                    b(
                        format!("{p} ,"),
                        "rename tab (Enter to keep, Esc to cancel)",
                    ),
                    b(format!("{p} {p}"), "send the prefix key to the shell"),
                    b(
                        format!("{p} q"),
                        "quit: asks whether to end this UI's sessions or leave them running",
                    ),
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
                    b(
                        format!("{p} e"),
                        "escalation queue of every domain of this user, with results",
                    ),
                    b(
                        format!("{p} !"),
                        "answer the oldest waiting request, whichever domain asked",
                    ),
                    b(format!("{p} a"), "audit trail of the focused tab's domain"),
                    b(
                        format!("{p} k"),
                        "checkpoint the focused tab's domain (gVisor; `lazaret restore` brings it back)",
                    ),
                    b(
                        format!("{p} K"),
                        "its checkpoints: k take, r restore (asks y/n), f fork (asks a name), Esc",
                    ),
                    b(
                        format!("{p} Tab"),
                        "keys to the next panel on screen (Up/Down, Enter opens, Esc back to the shell)",
                    ),
                    b(
                        format!("{p} z"),
                        "zoom: the shell takes the whole screen, and back",
                    ),
                    b(
                        format!("{p} < / {p} >"),
                        "widen / narrow the panels' column (kept for next time)",
                    ),
                    b(
                        format!("{p} |"),
                        "the dashboard column on a wide terminal: on / off (kept)",
                    ),
                    b(format!("{p} ?"), "this help (any key closes it)"),
                ],
            },
            modal,
        ]
    }

    /// The status line's domain part: the focused tab's domain and its
    /// runtime, loud when it is not gVisor or degraded.
    fn domain_text(&self) -> Option<String> {
        self.tabs.get(self.focus).map(|t| match &t.domain {
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
        })
    }

    /// The status line's message: the line being typed, with its cursor,
    /// else the last message.
    fn status_message(&self) -> Option<String> {
        match &self.input {
            Some(Input { kind, line }) => {
                // The cursor as a block where it is.
                let text = line.text();
                let at = text
                    .char_indices()
                    .nth(line.cursor())
                    .map_or(text.len(), |(i, _)| i);
                let text = format!("{}▏{}", &text[..at], &text[at..]);
                let hint = if line.is_suggestion() {
                    "typing replaces it; Enter keeps, Esc cancels"
                } else {
                    "Enter applies, Esc cancels"
                };
                Some(match kind {
                    InputKind::Rename => format!("rename tab ({hint}): {text}"),
                    InputKind::Allow => {
                        format!("allow egress to (address or CIDR; {hint}): {text}")
                    }
                    InputKind::Deny => {
                        format!("deny egress to (address or CIDR; {hint}): {text}")
                    }
                })
            }
            None => self.message.clone(),
        }
    }

    /// Requests that wait for this human, said on the status line for as
    /// long as they wait: they never take the keyboard (decisions.md D15).
    fn waiting_text(&self) -> Option<String> {
        let waiting_here = self.tabs.get(self.focus).map_or(0, |t| t.prompts.len());
        let waiting_all: usize =
            self.tabs.iter().map(|t| t.prompts.len()).sum::<usize>() + self.inboxed.len();
        let waits = |n: usize| match n {
            1 => "1 request waits".to_string(),
            n => format!("{n} requests wait"),
        };
        (waiting_all > 0).then(|| match waiting_here {
            0 => format!("⚑ {} · {} !", waits(waiting_all), self.prefix_text),
            n if n == waiting_all => format!("⚑ {} here · {} !", waits(n), self.prefix_text),
            n => format!(
                "⚑ {} here ({waiting_all} in all) · {} !",
                waits(n),
                self.prefix_text
            ),
        })
    }

    pub(super) fn draw<B: Backend>(&mut self, term: &mut Terminal<B>) -> Result<()>
    where
        B::Error: Send + Sync + 'static,
    {
        self.dirty = false;
        if let Ok(size) = term.size() {
            self.size = size;
        }
        self.egress_seen();
        let (rows, cols) = self.pane_size();
        for t in &self.tabs {
            t.resize(rows, cols);
        }
        let areas = self.areas(self.size);
        // Everything between the tab bar and the status line.
        let body_area = match self.mode {
            Mode::Shell => areas.pane,
            Mode::Workbench => {
                let top = areas.tabs.bottom();
                Rect::new(0, top, self.size.width, areas.status.y.saturating_sub(top))
            }
        };
        let infos = self.tab_infos();
        let domain_text = self.domain_text();
        let message = self.status_message();
        let waiting = self.waiting_text();
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
                uptime: self
                    .domain_started
                    .get(&d.hash)
                    .map_or(Duration::from_secs(d.uptime), |t| t.elapsed()),
                degraded: d.degraded.is_some(),
                memory: d.memory_used.map(|used| (used, d.memory_limit)),
                refused: d
                    .egress_refused
                    .unwrap_or(0)
                    .saturating_sub(self.egress_looked.get(&d.hash).copied().unwrap_or(0)),
                hosted: d
                    .hosted
                    .iter()
                    .map(|h| HostedRow {
                        id: h.id,
                        command: h.argv.join(" "),
                        clients: h.viewers,
                        pending: h.pending,
                        exited: h.exited,
                        busy: h.busy,
                    })
                    .collect(),
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
        // A line being typed, or a question waiting for its answer, has
        // the whole width.
        let typing = self.input.is_some() || self.closing.is_some() || self.quitting;
        let new_tab = self.new_tab.as_ref();
        let checkpoints = self.checkpoints.as_ref().map(|o| &o.form);
        let stdout_sync = self.stdout_terminal;
        if stdout_sync {
            let _ = ratatui::crossterm::execute!(
                std::io::stdout(),
                ratatui::crossterm::terminal::BeginSynchronizedUpdate
            );
        }
        let focus = self.focus;
        // Switching tabs puts an open request back to waiting.
        for (i, t) in self.tabs.iter_mut().enumerate() {
            if i != focus && t.modal_open() {
                t.close_requests();
            }
        }
        let abort_scope = self.abort_scope();
        let armed = self.armed;
        let prefix = self.prefix_text.clone();
        let audit = &self.audit;
        let panel_focus = self.panel_focus;
        let selections = self.selected.clone();
        let tabs = &mut self.tabs;
        let redraw_at = &mut self.redraw_at;
        let mut cursor_style = None;
        let no_color = crate::client::terminal::no_color();
        term.draw(|f| {
            if mode == Mode::Workbench {
                f.render_widget(TabBar::new(&infos, focus), areas.tabs);
            }
            // The panels first: an open modal is drawn over them.
            for (panel, area) in areas.panels.iter().copied() {
                // A focused panel shows its selection.
                let focused = panel_focus == Some(panel);
                let selected = selections.get(&panel).copied().filter(|_| focused);
                match panel {
                    Panel::Sessions => f.render_widget(
                        SessionsPanel {
                            rows: &sessions,
                            selected,
                            focused,
                        },
                        area,
                    ),
                    Panel::Network => f.render_widget(
                        match routes {
                            Some(rows) => NetworkPanel {
                                selected,
                                focused,
                                ..NetworkPanel::new(rows)
                            },
                            None => NetworkPanel::new(&[]).waiting(
                                "reading the live table of the focused domain (once it is up)…",
                            ),
                        },
                        area,
                    ),
                    Panel::Escalations => f.render_widget(
                        EscalationsPanel {
                            rows: &escalations,
                            selected,
                            focused,
                        },
                        area,
                    ),
                    Panel::Audit => f.render_widget(AuditPanel::new(audit), area),
                }
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
                let modal_open = tab.modal_open();
                let waits = !tab.prompts.is_empty() && !modal_open;
                tab.state.with_screen(|s| {
                    let pane = match mode {
                        Mode::Workbench => {
                            let mut block = pane_block(title, gvisor, true);
                            if waits {
                                // On the border, not over the shell's text.
                                block = block.title_bottom(
                                    Line::from(Span::styled(
                                        format!(" ⚑ a host request waits · {prefix} ! to answer "),
                                        Style::new()
                                            .fg(Color::Black)
                                            .bg(Color::Yellow)
                                            .add_modifier(Modifier::BOLD),
                                    ))
                                    .right_aligned(),
                                );
                            }
                            TerminalPane::new(s).block(block)
                        }
                        Mode::Shell => TerminalPane::new(s),
                    };
                    if !modal_open
                        && !self.help
                        && new_tab.is_none()
                        && checkpoints.is_none()
                        && let Some(pos) = pane.cursor(areas.pane)
                    {
                        f.set_cursor_position(pos);
                        cursor_style = Some(pane.cursor_style());
                    }
                    f.render_widget(pane, areas.pane);
                });
                if let Some(p) = tab.prompts.front_mut().filter(|p| p.approval.is_open()) {
                    // The modal takes the width it needs: panels yield
                    // while it is open (issue 39: 80x24 with a panel open).
                    draw_modal(f, p, body_area, &abort_scope, redraw_at);
                }
            }
            f.render_widget(
                StatusLine {
                    prefix: &prefix,
                    prefix_armed: armed,
                    waiting: waiting.as_deref(),
                    // While the human types a line, it has the whole width.
                    domain: domain_text.as_deref().filter(|_| !typing),
                    message: message.as_deref(),
                },
                areas.status,
            );
            if let Some(form) = new_tab {
                f.render_widget(NewTabDialog::new(form), f.area());
            }
            if let Some(form) = checkpoints {
                f.render_widget(CheckpointsDialog::new(form), f.area());
            }
            if let Some(h) = &help {
                f.render_widget(HelpOverlay::new(h), f.area());
            }
            if no_color {
                // NO_COLOR: every colour goes, attributes (bold, reverse)
                // stay, so focus and the modal still stand out.
                for cell in f.buffer_mut().content.iter_mut() {
                    cell.set_fg(Color::Reset).set_bg(Color::Reset);
                }
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

/// An open request's modal over `area`, from its approval state; tells the
/// approval which rows it showed, and when a held modal must be drawn
/// again.
fn draw_modal(
    f: &mut ratatui::Frame<'_>,
    p: &mut Pending,
    area: Rect,
    abort_scope: &str,
    redraw_at: &mut Option<Instant>,
) {
    let held = p.approval.held(Instant::now());
    if held {
        *redraw_at = p.approval.held_until();
    }
    // What the modal shows follows the state: the human's
    // edit, once submitted, is the command to read.
    p.request.command = p.approval.command().to_string();
    p.request.edited = p.approval.edited().is_some();
    p.request.code = p.approval.code().to_string();
    p.request.review_shown = p.approval.review_shown();
    let editor = match p.approval.mode() {
        approval::Mode::Reading | approval::Mode::ConfirmAbort => None,
        approval::Mode::Editing(line) => {
            Some((CommandEditor::showing(&line.text(), line.cursor()), false))
        }
        approval::Mode::Reason(line) => Some((
            CommandEditor::reason_showing(&line.text(), line.cursor()),
            true,
        )),
    };
    let note = p.approval.note();
    let mut modal = match &editor {
        None => ApprovalModal::new(&p.request)
            .held(held)
            .typed(p.approval.typed())
            .note(note),
        Some((ed, false)) => ApprovalModal::new(&p.request).editing(ed),
        Some((ed, true)) => ApprovalModal::new(&p.request).denying(ed),
    };
    if p.approval.mode() == &approval::Mode::ConfirmAbort {
        modal = modal.confirming_abort(abort_scope);
    }
    let row = u16::try_from(p.approval.scroll()).unwrap_or(u16::MAX);
    p.view.set_scroll(row);
    // The modal takes the width it needs: panels yield
    // while it is open (issue 39: 80x24 with a panel open).
    f.render_stateful_widget(modal, area, &mut p.view);
    if editor.is_none() {
        p.approval.showed(
            usize::from(p.view.scroll()),
            usize::from(p.view.window()),
            usize::from(p.view.total()),
        );
    }
}
