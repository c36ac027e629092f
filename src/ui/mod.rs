//! `lazaret ui`: the full-screen workbench. Each tab is a Client Session
//! (its shell in a PTY pane), with the approval modal over the pane of the
//! session that asked, side panels, a tab bar and a status line.
//!
//! Threads: one blocking reader per PTY (parses into the pane, wakes the
//! UI at most once per frame), one for terminal input, and a small tokio
//! runtime for the control streams. The UI thread blocks on one channel and
//! renders only when something changed, at most every [`FRAME`].

mod app;
mod tab;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use ratatui::crossterm::event::{self, KeyCode, KeyEvent, KeyModifiers};
use ratatui::crossterm::{execute, terminal};

use crate::coordinator::protocol::{CoordMsg, DomainStatus};
use crate::host::HostEnv;

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
    Connected(u64, Box<DomainStatus>, Vec<String>),
    Failed(u64, String),
    Coord(u64, Box<CoordMsg>),
    ControlClosed(u64),
    /// Every running domain of this user (the sessions panel).
    Domains(Vec<DomainStatus>),
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

pub fn run(
    explicit: &Option<PathBuf>,
    env: &dyn HostEnv,
    profile: Option<&str>,
    workspace: Option<&Path>,
    prefix: &str,
) -> Result<ExitCode> {
    let prefix_key = parse_prefix(prefix)?;
    let (config, ctx, rundir) = crate::cli::session::context(explicit, env, profile, workspace)?;
    let selected = config.select_profile(profile)?;
    let argv = selected
        .command
        .clone()
        .unwrap_or_else(|| vec!["/bin/bash".into(), "-l".into()]);
    let launch = tab::Launch {
        label: format!("{} · {}", selected.name, ctx.anchor.workspace().display()),
        profile: selected.name.clone(),
        ctx,
        argv,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;

    let (tx, rx) = std::sync::mpsc::channel();
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
        rundir,
        rt.handle().clone(),
        tx,
    );
    let size = term.size()?;
    app.new_tab(size);
    let result = app.run(&mut term, &rx);
    // Shells first (their PTY writers must outlive them), then the control
    // streams: the last session out tears the domain down.
    app.shutdown();
    drop(app);
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    let _ = std::io::stdout().flush();
    result.map(|()| ExitCode::SUCCESS)
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
