//! The Client Session: what the command line (`lazaret shell`, `exec`) and
//! every tab of the workbench share to be a session of a domain: loading
//! the configuration, the runtime folder, checks that can fail before
//! anything boots, connecting to (or starting) the Session Coordinator,
//! the session's identity and credential, running its command in the
//! sandbox, the plain-terminal approval prompt and the output filter.
//!
//! It sits below both `cli` and `ui`: neither imports the other's
//! internals through it, and it imports neither.

pub mod approval;
pub mod prompt;
pub mod prompt_page;
pub mod session;
pub mod terminal;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::config::{Config, LoadOptions};
use crate::coordinator::client::DomainContext;
use crate::engine::images::{self, BaseImageRequest, build_base_image};
use crate::host::HostEnv;
use crate::podman::Podman;
use crate::rundir::RuntimeDir;

/// The workbench, or `lazaret shell`: the same engine with one pane and
/// no tabs or panels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Workbench,
    Shell,
}

/// How a tab's session runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionChoice {
    /// `podman exec` in a PTY of this client: it ends with the client.
    Exec,
    /// A new hosted session (decisions.md D14): it lives in the domain and
    /// outlives this client.
    Start,
    /// Attach to the domain's hosted session with this number.
    Attach(u32),
    /// Attach to the domain's newest running hosted session, or start one.
    Latest,
}

/// What a new tab runs, and where.
#[derive(Debug, Clone)]
pub struct Launch {
    pub ctx: DomainContext,
    /// The session command (the profile's `command`, or a login shell).
    pub argv: Vec<String>,
    /// `profile · workspace`, for titles.
    pub label: String,
    /// The profile: new tabs' default title.
    pub profile: String,
    /// The profile's configured network policy (the live one may differ).
    pub network: lazaret_sidecar::policy::PolicySpec,
    /// What the session is for, as `lazaret status` shows it.
    pub purpose: &'static str,
    pub session: SessionChoice,
}

/// Makes the [`Launch`] of a profile and workspace: for the first tab,
/// and for each new tab the human picks.
#[derive(Debug)]
pub struct Launcher {
    pub mode: Mode,
    pub config: Config,
    pub rundir: RuntimeDir,
    /// `--config FILE`, for the coordinators this UI starts.
    pub explicit: Option<PathBuf>,
}

impl Launcher {
    /// Loads the configuration and makes sure of the runtime folder.
    pub fn new(mode: Mode, explicit: &Option<PathBuf>, env: &dyn HostEnv) -> Result<Launcher> {
        Ok(Launcher {
            mode,
            config: load(explicit.clone(), env)?,
            rundir: RuntimeDir::ensure(&RuntimeDir::locate(env))?,
            explicit: explicit
                .as_ref()
                .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone())),
        })
    }

    /// The domain of `profile` (default: the configuration's) and `workspace`.
    pub fn context(&self, profile: Option<&str>, workspace: &Path) -> Result<DomainContext> {
        let selected = self.config.select_profile(profile)?;
        let name = crate::domain::name_of(&selected.name, profile);
        let anchor = crate::domain::DomainAnchor::new(&name, workspace)?;
        Ok(DomainContext::new(
            anchor,
            &self.config.data_root,
            &self.rundir,
            self.explicit.clone(),
        ))
    }

    pub fn launch(&self, profile: Option<&str>, workspace: &Path) -> Result<Launch> {
        let selected = self.config.select_profile(profile)?;
        if !workspace.is_dir() {
            anyhow::bail!("{} is not a directory", workspace.display());
        }
        let ctx = self.context(profile, workspace)?;
        // `lazaret shell` runs a shell even when the profile runs an agent.
        let argv = match (self.mode, &selected.command) {
            (Mode::Workbench, Some(command)) => command.clone(),
            _ => session::shell_argv(),
        };
        Ok(Launch {
            label: format!(
                "{} · {}",
                ctx.anchor.name(),
                ctx.anchor.workspace().display()
            ),
            profile: ctx.anchor.name(),
            network: crate::config::network::policy_spec(&self.config, selected),
            purpose: match self.mode {
                Mode::Workbench => "ui",
                Mode::Shell => "shell",
            },
            ctx,
            argv,
            // The workbench's tabs live in the domain and outlive it.
            session: match self.mode {
                Mode::Workbench => SessionChoice::Start,
                Mode::Shell => SessionChoice::Exec,
            },
        })
    }
}

pub(crate) fn current_dir() -> Result<PathBuf> {
    std::env::current_dir().context("cannot read the current folder (was it deleted?)")
}

pub(crate) fn load(explicit: Option<PathBuf>, env: &dyn HostEnv) -> Result<Config> {
    load_with(explicit, env, false)
}

/// Like [`load`]; with `skip_untrusted`, an untrusted workspace file that
/// widens is left out with a warning instead of refused (teardown).
pub(crate) fn load_with(
    explicit: Option<PathBuf>,
    env: &dyn HostEnv,
    skip_untrusted: bool,
) -> Result<Config> {
    let cwd = current_dir()?;
    let mut opts = LoadOptions::standard(env, &cwd, explicit);
    opts.skip_untrusted_workspace = skip_untrusted;
    let mut config = Config::load(&opts, env)?;
    config.allow_broad_workspace = crate::config::allow_broad_workspace();
    if let Some(file) = &config.skipped_workspace {
        eprintln!(
            "lazaret: warning: left out {}: it is not trusted and widens the sandbox (`lazaret config check` says how)",
            file.display()
        );
    }
    Ok(config)
}

/// Checks everything that can refuse a start before anything starts (no
/// container, coordinator or domain folder): the profile, host variables it
/// requires, the workspace (not too broad) and every path of the profile
/// resolved as the coordinator will, and its image. With `build_base`, a
/// missing base image is built here, with progress; otherwise (a new tab
/// in the workbench, which owns the screen) the refusal says how.
pub(crate) fn preboot(
    config: &Config,
    profile: &str,
    workspace: &Path,
    env: &dyn HostEnv,
    build_base: bool,
) -> Result<()> {
    let p = config.select_profile(Some(profile))?;
    let unset = p.unset_host_vars(env);
    if !unset.is_empty() {
        bail!(
            "profile {profile} requires {}, not set here; export {}, or forward it only when set (\"env?:NAME\" in the profile's env) and try again",
            unset
                .iter()
                .map(|v| format!("${v}"))
                .collect::<Vec<_>>()
                .join(", "),
            unset.join(", ")
        );
    }
    let resolved =
        config.resolve_named(profile, p, workspace, env, crate::config::HostVars::Require)?;
    // A domain that runs has its image: joining it asks podman nothing.
    let anchor = resolved.domain;
    if let Ok(rundir) = RuntimeDir::ensure(&RuntimeDir::locate(env))
        && anchor.control_socket(&rundir).exists()
    {
        return Ok(());
    }
    let podman = Podman::default();
    if podman.image_exists(&p.image).unwrap_or(true) {
        return Ok(());
    }
    // An agent's image is built from its recipe, never as a base release.
    if let Some(agent) = p
        .image
        .strip_prefix("localhost/lazaret/agent-")
        .and_then(|a| a.split(':').next())
    {
        bail!(
            "profile {profile}: image {} does not exist; build it with `lazaret image build --agent {agent}`",
            p.image
        );
    }
    let release = p
        .image
        .strip_prefix(images::BASE_REPOSITORY)
        .and_then(|r| r.strip_prefix('/'))
        .and_then(|r| r.strip_suffix(":latest"))
        .filter(|r| !r.contains('/') && *r != "sidecar");
    let Some(release) = release else {
        if p.image.starts_with("localhost/") {
            bail!(
                "profile {profile}: image {} does not exist; build it first (`podman images` lists what exists)",
                p.image
            );
        }
        // A registry image: the engine pulls it at start.
        return Ok(());
    };
    if !build_base {
        bail!(
            "profile {profile}: image {} does not exist; build it with `lazaret image build --release {release}`",
            p.image
        );
    }
    eprintln!(
        "{} is missing: building it now (first use, about a minute)",
        p.image
    );
    let req = BaseImageRequest {
        release: release.to_string(),
        mirror: "http://deb.debian.org/debian".into(),
        include: Vec::new(),
        tag: None,
    };
    let started = std::time::Instant::now();
    build_base_image(&podman, &req, &config.data_root.join("tmp"), &mut |line| {
        eprintln!("[{:>5.1}s] {line}", started.elapsed().as_secs_f64());
    })
    .with_context(|| {
        format!(
            "cannot build {}; try `lazaret image build --release {release}` to see why",
            p.image
        )
    })?;
    Ok(())
}

/// The domain of `profile` and `workspace` (default: the current folder).
pub(crate) fn context(
    explicit: &Option<PathBuf>,
    env: &dyn HostEnv,
    profile: Option<&str>,
    workspace: Option<&Path>,
) -> Result<(Config, DomainContext, RuntimeDir)> {
    let launcher = Launcher::new(Mode::Shell, explicit, env)?;
    let workspace = match workspace {
        Some(p) => p.to_path_buf(),
        None => current_dir()?,
    };
    let ctx = launcher.context(profile, &workspace)?;
    Ok((launcher.config, ctx, launcher.rundir))
}
