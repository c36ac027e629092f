//! `lazaret ui`: the full-screen workbench. Each tab is a Client Session
//! (its shell in a PTY pane), with the approval modal over the pane of the
//! session that asked, side panels, a tab bar and a status line.
//!
//! Threads: one blocking reader per PTY (parses into the pane, wakes the
//! UI at most once per frame), one for terminal input, and a small tokio
//! runtime for the control streams. The UI thread blocks on one channel and
//! renders only when something changed, at most every [`FRAME`].

mod app;
mod inbox;
mod tab;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use lazaret_widgets::visible::make_visible;
use ratatui::crossterm::event::{self, KeyCode, KeyEvent, KeyModifiers};
use ratatui::crossterm::{execute, terminal};

use crate::client::Launcher;
use crate::coordinator::protocol::{CoordMsg, DomainStatus};
use crate::host::HostEnv;

pub use crate::client::Mode;
pub use app::parse_prefix;

/// The shortest time between two frames (about 100 fps).
pub const FRAME: std::time::Duration = std::time::Duration::from_millis(10);

/// Everything the UI thread waits for.
#[derive(Debug)]
pub enum Ev {
    Input(event::Event),
    /// A pane has new output (the reader set the tab's `woke` flag).
    Output(u64),
    /// The shell of a tab ended.
    Exited(u64),
    Progress(u64, String),
    /// The domain is up: run the shell with these `podman` arguments.
    #[allow(private_interfaces)]
    Connected(
        u64,
        Box<DomainStatus>,
        Box<crate::client::session::ExecSpec>,
    ),
    Failed(u64, String),
    /// A hosted session shows in the tab (started or attached): its number.
    Hosted(u64, Box<DomainStatus>, u32),
    Coord(u64, Box<CoordMsg>),
    ControlClosed(u64),
    /// The tab's coordinator went away; the tab reconnects.
    CoordinatorLost(u64),
    /// The tab is attached, as the same session, to a new coordinator.
    Reconnected(u64),
    /// The live table of a domain (by hash), read after `change` if any.
    Network(
        String,
        Option<(crate::net::Target, bool)>,
        std::result::Result<NetTable, String>,
    ),
    /// Lazaret was told to stop (SIGTERM, SIGHUP or SIGINT).
    Signal(i32),
    /// News of a domain's approval inbox (`Pending`, `Withdrawn`): the
    /// domain's hash and `profile · workspace`.
    Inbox {
        hash: String,
        label: String,
        msg: Box<CoordMsg>,
    },
    /// A watched domain went down: its requests are void.
    InboxGone(String),
    /// What became of a checkpoint asked for with prefix `k`.
    Checkpointed(std::result::Result<String, String>),
    /// What became of a restore or a fork run from the checkpoints overlay.
    #[allow(private_interfaces)]
    CheckpointRan(Box<CheckpointRun>),
}

/// A `lazaret restore` or `lazaret fork` the workbench ran as a child, and
/// the sessions to show afterwards.
#[derive(Debug)]
pub(crate) struct CheckpointRun {
    /// The child's last word: its report, or its error (made visible).
    pub said: std::result::Result<String, String>,
    /// The domain whose sessions get tabs (`PROFILE` or `PROFILE@FORK`),
    /// and its workspace.
    pub profile: String,
    pub workspace: PathBuf,
    /// Its hosted sessions that run now; empty when none or when it is
    /// not up.
    pub sessions: Vec<u32>,
    /// A fork shows its first session; a restore all of them.
    pub first_only: bool,
}

/// The network panel's view of a domain's live table.
#[derive(Debug, Clone, Default)]
pub struct NetTable {
    pub rows: Vec<lazaret_widgets::panels::RouteRow>,
    /// Set when the live table is not the policy's.
    pub warning: Option<String>,
}

/// Reads (after applying `change`, if any, through the domain's
/// coordinator) the Network Sidecar's live table of `launch`'s domain, each
/// route with the rule behind it. Blocking: call it on a worker thread.
pub fn network_table(
    launch: &crate::client::Launch,
    change: Option<(crate::net::Target, bool)>,
) -> std::result::Result<NetTable, String> {
    use crate::net;
    use lazaret_widgets::panels::{RouteRow, Verdict};
    let podman = crate::podman::Podman::default();
    let sidecar = launch.ctx.anchor.sidecar_name();
    let root = &launch.ctx.domain_root;
    let report = match change {
        Some((target, allow)) => {
            // Through the tab's domain coordinator (one change at a time,
            // audited), on this worker thread, never the UI thread.
            use crate::coordinator::client::{PolicyAnswer, change_policy};
            let origin = format!("lazaret ui {} (live)", if allow { "allow" } else { "deny" });
            let asked = target.to_string();
            let ask = change_policy(&launch.ctx.control_socket, &asked, allow, &origin);
            let answer = match tokio::runtime::Handle::try_current() {
                Ok(rt) => rt.block_on(ask),
                Err(_) => crate::client::session::runtime()
                    .map_err(|e| e.to_string())?
                    .block_on(ask),
            };
            match answer.map_err(|e| e.to_string())? {
                PolicyAnswer::Changed(report) => *report,
                PolicyAnswer::Refused { message, .. } => return Err(message),
            }
        }
        None => {
            let (mut report, _, in_force) =
                net::show_in_force(&podman, &sidecar, root, &launch.network)
                    .map_err(|e| e.to_string())?;
            if !in_force {
                report.warnings.push(
                    "!! the sidecar's live table differs from the policy: check `lazaret net show`"
                        .into(),
                );
            }
            report
        }
    };
    // The name patterns in force, then the live rules, then refused names
    // (the first place to look when the agent cannot reach something).
    let spec = net::effective_spec(root, &launch.network);
    let patterns = spec
        .deny_domains
        .iter()
        .map(|n| (n, Verdict::Deny, "deny_domains"))
        .chain(
            spec.allow_domains
                .iter()
                .map(|n| (n, Verdict::Allow, "allow_domains")),
        )
        .map(|(n, verdict, key)| RouteRow {
            prefix: n.pattern.to_string(),
            verdict,
            rule: match &n.origin {
                Some(o) => format!("{key} · {}", o.rsplit('/').next().unwrap_or(o)),
                None => key.to_string(),
            },
        });
    let refused = report.refused.iter().map(|r| RouteRow {
        prefix: r.name.clone(),
        verdict: Verdict::Deny,
        rule: format!(
            "refused name ×{} · last {}",
            r.count,
            lazaret_sidecar::names::clock(r.last)
                .split(' ')
                .nth(1)
                .unwrap_or_default()
        ),
    });
    let live = report.entries.iter().map(|e| RouteRow {
        prefix: e.rule.dst.to_string(),
        verdict: match e.verdict {
            lazaret_sidecar::policy::Verdict::Allow => Verdict::Allow,
            lazaret_sidecar::policy::Verdict::Deny => Verdict::Deny,
        },
        rule: if e.rule.is_floor() {
            "floor: nothing falls through".into()
        } else {
            e.source
                .as_ref()
                .map_or_else(|| "not from the policy!".into(), rule_text)
        },
    });
    let rows = patterns.chain(live).chain(refused).collect();
    Ok(NetTable {
        rows,
        warning: report.warnings.first().cloned(),
    })
}

/// Restores the terminal: on drop, and from the panic hook.
fn restore_terminal() {
    let _ = terminal::disable_raw_mode();
    let _ = execute!(
        std::io::stdout(),
        event::DisableBracketedPaste,
        event::DisableMouseCapture,
        terminal::LeaveAlternateScreen,
        ratatui::crossterm::cursor::SetCursorStyle::DefaultUserShape,
        ratatui::crossterm::cursor::Show
    );
}

struct TerminalGuard;

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// Runs the workbench (`lazaret ui`), or, in [`Mode::Shell`], one pane
/// (`lazaret shell`), whose exit code it returns.
pub fn run(
    mode: Mode,
    explicit: &Option<PathBuf>,
    env: &dyn HostEnv,
    profile: Option<&str>,
    workspace: Option<&Path>,
    prefix: &str,
    session: crate::client::SessionChoice,
) -> Result<ExitCode> {
    let prefix_key = parse_prefix(prefix)?;
    let launcher = Launcher::new(mode, explicit, env)?;
    let workspace = match workspace {
        Some(p) => p.to_path_buf(),
        None => crate::client::current_dir()?,
    };
    let mut launch = launcher.launch(profile, &workspace)?;
    launch.session = session;
    // What is known now is said now, not after the sandbox fails to boot.
    crate::client::preboot(
        &launcher.config,
        &launch.profile,
        launch.ctx.anchor.workspace(),
        env,
        true,
    )?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // `lazaret shell` starts its domain on the plain terminal, as `exec`
    // does: the steps stay on screen above the session, and Ctrl-C
    // (SIGINT, the terminal is not raw yet) cancels the start.
    let preconnected = match mode {
        Mode::Shell => match connect_first(&launch, &rt)? {
            Ok(p) => Some(p),
            Err(sig) => {
                let hash = launch.ctx.anchor.hash().to_string();
                rt.shutdown_background();
                return Ok(crate::client::session::start_cancelled(
                    &hash,
                    "the shell",
                    sig,
                ));
            }
        },
        Mode::Workbench => None,
    };
    // The workbench shows again the sessions that outlived the last one.
    let reattach: Vec<crate::client::Launch> = match mode {
        Mode::Workbench if session == crate::client::SessionChoice::Start => {
            running_sessions(&launch, &rt)
                .into_iter()
                .map(|n| {
                    let mut l = launch.clone();
                    l.session = crate::client::SessionChoice::Attach(n);
                    l
                })
                .collect()
        }
        _ => Vec::new(),
    };

    let (tx, rx) = std::sync::mpsc::channel();
    // A signal ends the UI through its loop, so the terminal is restored
    // and every session leaves cleanly (not the default: die in raw mode).
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGINT,
    ])
    .context("cannot install the signal handlers")?;
    let signal_tx = tx.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let _ = signal_tx.send(Ev::Signal(sig));
            }
        })
        .context("cannot start the signal thread")?;
    // Terminal set-up, restored on every way out (including a panic).
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore_terminal();
        previous(info);
    }));
    terminal::enable_raw_mode().context("cannot put the terminal in raw mode")?;
    let _guard = TerminalGuard;
    execute!(
        std::io::stdout(),
        terminal::EnterAlternateScreen,
        event::EnableBracketedPaste,
        event::EnableMouseCapture
    )?;
    let mut term =
        ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(std::io::stdout()))?;
    term.clear()?;

    let input_tx = tx.clone();
    std::thread::Builder::new()
        .name("input".into())
        .spawn(move || {
            while let Ok(ev) = event::read() {
                if input_tx.send(Ev::Input(ev)).is_err() {
                    break;
                }
            }
        })
        .context("cannot start the input thread")?;

    let mut app = app::App::new(
        launch,
        prefix.to_string(),
        prefix_key,
        launcher,
        rt.handle().clone(),
        tx,
    );
    app.drawing_on_stdout();
    let size = term.size()?;
    let pane = app.first_tab(size, preconnected, &reattach);
    let result = app.run(&mut term, &rx);
    let outcome = app.outcome();
    let stopped = app.stopped.take();
    let detached = app.detached;
    let farewells = app.hosted_farewells();
    // Shells first (their PTY writers must outlive them), then the control
    // streams: the last session out tears the domain down.
    app.shutdown();
    drop(app);
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    let _ = std::io::stdout().flush();
    result?;
    drop(_guard);
    // What the shell showed stays on the terminal's normal screen and in
    // its scrollback, as after `podman exec -it` or ssh: the pane's text
    // (a full-screen program's own screen is gone, as it would be there).
    if mode == Mode::Shell {
        let mut out = std::io::stdout();
        let _ = out.write_all(pane.transcript().as_bytes());
        let _ = out.flush();
    }
    // Said every time: which sessions run on without this client, each
    // with commands that reach its own domain from any folder.
    for f in &farewells {
        eprintln!("lazaret: {}", f.said());
    }
    if detached {
        return Ok(ExitCode::SUCCESS);
    }
    // Said on the terminal the shell returns to, after its screen is gone.
    if let Some(by) = stopped {
        let code = crate::coordinator::protocol::EXIT_STOPPED;
        eprintln!("lazaret: {by}; the shell was ended (exit code {code})");
        return Ok(ExitCode::from(code));
    }
    match outcome {
        // podman's own failures (125-127) and 255 never pass unexplained.
        Ok(code) if code == 255 || (125..=127).contains(&code) => {
            eprintln!(
                "lazaret: the session's command ended with exit code {code} ({})",
                match code {
                    127 => "command not found in the image",
                    126 => "command not executable",
                    125 => "podman exec failed",
                    _ => "podman exec or the command failed",
                }
            );
            Ok(ExitCode::from(code))
        }
        Ok(code) => Ok(ExitCode::from(code)),
        Err(why) => Err(anyhow::anyhow!(why)),
    }
}

/// A tab's hosted session as the workbench leaves it.
#[derive(Debug, Clone)]
pub struct Farewell {
    pub title: String,
    pub session: u32,
    pub anchor: crate::domain::DomainAnchor,
    /// `--config FILE` when one was given: the hint carries it.
    pub config: Option<PathBuf>,
    /// This workbench ended it.
    pub ended: bool,
}

impl Farewell {
    /// The line printed for it: ended, or running on with the commands
    /// (pasteable from any folder) that return to it and end it.
    pub fn said(&self) -> String {
        let (n, title) = (self.session, make_visible(&self.title).0);
        let name = self.anchor.name();
        let hash = self.anchor.hash();
        if self.ended {
            return format!("session {n} ({title}) of domain {name} ({hash}) ended");
        }
        let quote = |p: &Path| shell_words::quote(&p.display().to_string()).into_owned();
        let ws = quote(self.anchor.workspace());
        let lazaret = match &self.config {
            Some(c) => format!("lazaret --config {}", quote(c)),
            None => "lazaret".to_string(),
        };
        format!(
            "session {n} ({title}) of domain {name} ({hash}) keeps running: `{lazaret} attach -p {name} -w {ws} {n}` returns to it, `{lazaret} down -p {name} -w {ws}` ends it"
        )
    }
}

/// The hosted sessions running in `launch`'s domain, if it is up (a query:
/// it starts nothing).
fn running_sessions(launch: &crate::client::Launch, rt: &tokio::runtime::Runtime) -> Vec<u32> {
    rt.block_on(live_sessions(&launch.ctx.control_socket))
}

/// The hosted sessions still running in the domain of `socket`, oldest
/// first; none when it is not up (a query: it starts nothing).
async fn live_sessions(socket: &Path) -> Vec<u32> {
    use crate::coordinator::protocol::ClientMsg;
    let Ok(mut c) = crate::coordinator::client::query(socket).await else {
        return Vec::new();
    };
    match c.call(&ClientMsg::Sessions).await {
        Ok(CoordMsg::Sessions { sessions }) => sessions
            .iter()
            .filter(|s| s.exited.is_none())
            .map(|s| s.id)
            .collect(),
        _ => Vec::new(),
    }
}

/// `lazaret shell`'s session, connected on the plain terminal (the boot
/// steps on stderr) before the UI takes it over; `Err` with the signal that
/// cancelled the start.
fn connect_first(
    launch: &crate::client::Launch,
    rt: &tokio::runtime::Runtime,
) -> Result<std::result::Result<tab::Preconnected, i32>> {
    use crate::client::session::{SessionAnchor, step_printer, unless_signalled};
    let session = SessionAnchor::new()?;
    let hello = session.hello(launch.purpose, true);
    let mut progress = step_printer();
    let connected = rt.block_on(unless_signalled(crate::coordinator::client::connect(
        &launch.ctx,
        &hello,
        true,
        &mut progress,
    )))?;
    let client = match connected {
        Err(sig) => return Ok(Err(sig)),
        Ok(c) => c.with_context(|| format!("cannot reach domain {}", launch.ctx.anchor.hash()))?,
    };
    let stream = client
        .stream
        .into_std()
        .context("cannot keep the control stream")?;
    Ok(Ok(tab::Preconnected {
        session,
        stream,
        domain: client.domain,
    }))
}

/// The rule behind a route, short enough for a side panel: the key, then
/// where it was written (`config.toml:40:17`, or the live edit that made it).
fn rule_text(source: &lazaret_sidecar::policy::Source) -> String {
    use lazaret_sidecar::policy::Source;
    let with = |origin: &Option<String>, kind: &str| match origin {
        Some(o) => format!("{kind} · {}", o.rsplit('/').next().unwrap_or(o)),
        None => kind.to_string(),
    };
    match source {
        Source::DefaultAllow { origin } => with(origin, "default_allow"),
        Source::DefaultDeny { origin } => with(origin, "default_deny"),
        Source::AllowEgress { origin, .. } => with(origin, "allow_egress"),
        Source::Name { names, expires } => format!(
            "name {} · until {}",
            names.join(", "),
            lazaret_sidecar::names::clock(*expires)
                .split(' ')
                .nth(1)
                .unwrap_or_default()
        ),
        other => other.to_string(),
    }
}

/// A key as the user writes it: `C-a`, `C-b`, `M-x`, `F12`, ...
fn key_matches(key: &KeyEvent, want: &KeyEvent) -> bool {
    let mods = key.modifiers & (KeyModifiers::CONTROL | KeyModifiers::ALT);
    let code = match key.code {
        KeyCode::Char(c) => KeyCode::Char(c.to_ascii_lowercase()),
        c => c,
    };
    code == want.code && mods == want.modifiers
}
