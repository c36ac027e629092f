//! The `lazaret` command line. Each subcommand is a thin layer over the
//! library; errors carry context saying what failed and what to do.

mod checkpoint;
mod complete;
mod init;
mod network;
pub(crate) mod session;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use crate::client::{current_dir, load, load_with};
use crate::config::{Config, HostVars, LoadOptions};
use crate::domain::DomainPaths;
use crate::engine::Engine;
use crate::engine::images::{
    self, AgentImageRequest, BaseImageRequest, build_agent_image, build_base_image,
};
use crate::git_sentry::WorkspaceLayout;
use crate::git_sentry::sync::Propagator;
use crate::host::{HostEnv, SystemEnv};
use crate::podman::Podman;
use crate::rundir::RuntimeDir;

/// Run AI coding agents in gVisor sandboxes, with a human approving every
/// host command they ask for.
#[derive(Debug, Parser)]
#[command(name = "lazaret", version, about, long_about = None)]
#[command(after_help = "\
Configuration is read from ~/.config/lazaret/config.toml, then ./lazaret.toml,
then --config FILE; later files override earlier ones key by key.
Start with `lazaret doctor`, then `lazaret config check`.")]
pub struct Cli {
    /// Read this configuration file last, over the user and workspace files.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,

    /// Accept a workspace that is or contains your home folder, or is,
    /// contains or lies in Lazaret's own folders (refused otherwise).
    #[arg(long, global = true)]
    allow_broad_workspace: bool,
    /// Start a sandbox even when its start-up self-test fails; it is then
    /// marked degraded in the status line and its tab.
    #[arg(long, global = true)]
    allow_degraded: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write a commented user configuration to ~/.config/lazaret/config.toml
    /// to start from: the built-in gVisor shell profile stays the default,
    /// agent profiles (claude, codex, aider) are added, and what changed is
    /// printed. Lazaret works without one.
    Init {
        /// Replace an existing user configuration (kept as NAME.bak beside
        /// it); the changes in behaviour are printed.
        #[arg(long)]
        force: bool,
    },
    /// Check or print the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Trust the exact content of a workspace's lazaret.toml, so it may
    /// widen what the sandbox can do; any change makes it untrusted again.
    /// Untrusted, a workspace file may only narrow.
    Trust {
        /// The file, or the folder holding lazaret.toml (default: ./lazaret.toml).
        path: Option<PathBuf>,
        /// Forget the file instead: it is untrusted from now on.
        #[arg(long)]
        revoke: bool,
    },
    /// Show the Domain Anchor of a profile and workspace: its hash and every
    /// host path and container name derived from it.
    Domain {
        #[command(flatten)]
        domain: DomainArgs,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Open an interactive shell in the sandbox of PROFILE for the current
    /// folder, starting the domain if needed. The domain stays up while any
    /// session is attached and is torn down when the last one leaves.
    ///
    /// On a terminal it runs in Lazaret's own terminal pane, so requests
    /// for the host open the approval modal over it; press the prefix key
    /// then `?` for the bindings.
    Shell {
        #[command(flatten)]
        domain: DomainArgs,
        /// Lazaret's prefix key, e.g. `C-a` (default) or `C-b`.
        #[arg(long, default_value = "C-a")]
        prefix: String,
    },
    /// The full-screen workbench: tabbed sandbox shells (one Client
    /// Session each), the approval modal and side panels. Press the prefix
    /// key (default Ctrl-a) then `?` for every binding.
    Ui {
        /// The first tab's (and new tabs' default) profile and workspace.
        #[command(flatten)]
        domain: DomainArgs,
        /// Lazaret's prefix key, e.g. `C-a` (default) or `C-b`.
        #[arg(long, default_value = "C-a")]
        prefix: String,
    },
    /// Run one command in the sandbox, non-interactively; its exit code is
    /// lazaret's.
    Exec {
        #[command(flatten)]
        domain: DomainArgs,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Attach this terminal to a session that lives in the domain: session
    /// N (see `lazaret sessions`), the newest one, or a new shell when none
    /// runs. Prefix then `d` detaches: the session runs on.
    Attach {
        /// The session's number in its domain.
        session: Option<u32>,
        /// The profile (default: `default_profile`, or the only profile).
        #[arg(long, short = 'p')]
        profile: Option<String>,
        /// Workspace folder (default: the current folder).
        #[arg(long, short)]
        workspace: Option<PathBuf>,
        /// Start a new session even when one runs.
        #[arg(long, conflicts_with = "session")]
        new: bool,
        /// Lazaret's prefix key, e.g. `C-a` (default) or `C-b`.
        #[arg(long, default_value = "C-a")]
        prefix: String,
    },
    /// List the sessions that live in this user's running domains (they
    /// outlive the clients that show them), attached or not.
    Sessions {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List every running domain of this user: profile, workspace, runtime,
    /// sessions, uptime. Works from any folder.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Save the running domain's sandbox (every process, its memory, its
    /// open files; gVisor only) under the Domain Root; the sandbox runs on.
    Checkpoint {
        #[command(flatten)]
        domain: DomainArgs,
        /// Its name (letters, digits, `.`, `_`, `-`); the time by default.
        #[arg(long)]
        name: Option<String>,
    },
    /// Bring the domain back as checkpoint NAME (gVisor only): the running
    /// domain is taken down, the sandbox restored with its processes, and
    /// the agent's clone (or git directory) and State Anchor put back as
    /// they were. A direct-mode workspace folder (the host's) is left as
    /// it is now.
    Restore {
        /// [PROFILE] NAME: the profile (default: `default_profile`, or the
        /// only profile) and the checkpoint (`lazaret checkpoints`).
        #[arg(value_name = "NAME", num_args = 1..=2, required = true)]
        names: Vec<String>,
        /// Profile (same as the positional PROFILE).
        #[arg(long, short = 'p', value_name = "PROFILE")]
        profile: Option<String>,
        /// Workspace folder (default: the current folder).
        #[arg(long, short)]
        workspace: Option<PathBuf>,
        /// Restore even when the agent's branch in your repository has
        /// commits made since the checkpoint (it is set back; the reflog
        /// keeps them).
        #[arg(long)]
        force: bool,
    },
    /// Start a second domain from checkpoint NAME (gVisor only), beside
    /// the first: the fork PROFILE@NEW, with its own Domain Root,
    /// credentials, network policy and branch lazaret/agent-PROFILE-NEW.
    /// Name it with PROFILE@NEW in other commands (`lazaret attach -p
    /// PROFILE@NEW`, `lazaret down PROFILE@NEW`).
    Fork {
        /// [PROFILE] NAME: the profile (default: `default_profile`, or the
        /// only profile) and the checkpoint (`lazaret checkpoints`).
        #[arg(value_name = "NAME", num_args = 1..=2, required = true)]
        names: Vec<String>,
        /// The fork's name (2 to 32 of a-z, 0-9, `_`, `-`).
        #[arg(long = "as", value_name = "NEW")]
        new: String,
        /// Profile (same as the positional PROFILE).
        #[arg(long, short = 'p', value_name = "PROFILE")]
        profile: Option<String>,
        /// Workspace folder (default: the current folder).
        #[arg(long, short)]
        workspace: Option<PathBuf>,
    },
    /// List the domain's checkpoints: name, when, size.
    Checkpoints {
        #[command(flatten)]
        domain: DomainArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Tear down the domain of PROFILE (current folder), or all domains.
    Down {
        #[command(flatten)]
        domain: DomainArgs,
        /// Every running domain of this user.
        #[arg(long, conflicts_with_all = ["profile", "profile_flag", "workspace"])]
        all: bool,
        /// Also remove the domain's stored state (its Domain Root: State
        /// Anchor layers, the agent's clone, audit store), including files
        /// the agent left owned by other ids.
        #[arg(long, conflicts_with = "all")]
        purge: bool,
    },
    /// Print the domain's audit log; --verify checks its hash chain and
    /// names the first bad record.
    Audit {
        #[command(flatten)]
        domain: DomainArgs,
        /// Check the hash chain instead of printing; exit 1 at the first
        /// bad record.
        #[arg(long)]
        verify: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the Session Coordinator's log of the domain of PROFILE
    /// (current folder), with control characters made visible.
    Logs {
        #[command(flatten)]
        domain: DomainArgs,
        /// How many of the last lines (0: all that is kept).
        #[arg(long, short = 'n', default_value_t = 200)]
        lines: usize,
    },
    /// The domains of this Storage Root: list them, prune stopped ones.
    #[command(subcommand)]
    Domains(DomainsCommand),
    /// (internal) The detached Session Coordinator of one domain.
    #[command(hide = true)]
    Coordinator {
        /// The domain's profile.
        #[arg(long)]
        profile: String,
        /// The domain's workspace (canonical).
        #[arg(long)]
        workspace: PathBuf,
        /// Run here instead of starting a detached copy and exiting.
        #[arg(long)]
        foreground: bool,
    },
    /// (internal) Walks a runc sandbox's writable layer and prints
    /// `BYTES ENTRIES complete|partial` (engine::layer), stopping past
    /// `--budget` bytes.
    #[command(hide = true)]
    LayerUsage {
        /// Stop counting once this many bytes are found.
        #[arg(long)]
        budget: u64,
        /// The container's upper folder to measure.
        dir: PathBuf,
    },
    /// (internal) Fixes one set-id bit or device node a domain left,
    /// without following a symlink (`git_sentry::nofollow::strip_trap`),
    /// run in the user's podman namespace for entries of subordinate ids.
    #[command(hide = true)]
    StripTrap {
        /// The entry, absolute, below one of the domain's folders.
        path: PathBuf,
    },
    /// (internal) Gives the user back what the agent left in a folder
    /// owned by its other ids, without following a symlink
    /// (`git_sentry::nofollow::reclaim`), run in the user's podman
    /// namespace.
    #[command(hide = true)]
    Reclaim {
        /// The folder (the direct-mode workspace).
        dir: PathBuf,
    },
    /// The egress policy of a domain: show the live table, explain a
    /// decision, or change it while the sandbox runs.
    #[command(subcommand)]
    Net(NetCommand),
    /// Build the images sandboxes run from.
    #[command(subcommand)]
    Image(ImageCommand),
    /// Start or stop a domain's containers directly (the engine, without a
    /// Session Coordinator): Network Sidecar, State Anchor, Agent Sandbox.
    #[command(subcommand)]
    Sandbox(SandboxCommand),
    /// List what the agent changed that a host tool would execute, and
    /// filesystem traps (symlinks leaving the workspace, FIFOs, setuid bits,
    /// nested repositories), with git commands to inspect it all.
    Review(DomainArgs),
    /// Check that this host can run Lazaret: podman, runc, runsc (gVisor),
    /// user namespaces, devices, storage and limits. Prints a fix for each
    /// problem; exits non-zero when something required is missing.
    ///
    /// With --sandbox, instead run the self-test of the running domain of
    /// PROFILE (current folder; starts none): runtime, git protections and
    /// masks, egress policy, Escalation Socket.
    Doctor {
        /// Self-test the running sandbox of this profile (default profile
        /// when no name is given).
        #[arg(long, value_name = "PROFILE", num_args = 0..=1, default_missing_value = "")]
        sandbox: Option<String>,
        /// Workspace folder of --sandbox (default: the current folder).
        #[arg(long, short, requires = "sandbox")]
        workspace: Option<PathBuf>,
    },
    /// Print a shell completion script, e.g.
    /// `lazaret completions bash > ~/.local/share/bash-completion/completions/lazaret`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (`lazaret man | man -l -`), or with --dir write
    /// lazaret.1 and one page per subcommand there.
    Man {
        /// Write the pages into this folder instead of printing one.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum ImageCommand {
    /// Build a Debian base image for agents, rootless (mmdebstrap, then
    /// podman import). Tagged localhost/lazaret/RELEASE:DATE-DIGEST and :latest.
    Build {
        /// Debian release to build (default: trixie; with --agent, the
        /// release its recipe builds FROM, built first when missing).
        #[arg(long)]
        release: Option<String>,
        /// Extra packages, comma-separated (git, ca-certificates, procps,
        /// iproute2, ncurses and less are always included).
        #[arg(long, value_delimiter = ',')]
        include: Vec<String>,
        /// Debian mirror.
        #[arg(long, default_value = "http://deb.debian.org/debian")]
        mirror: String,
        /// Also tag the image with this name.
        #[arg(long)]
        tag: Option<String>,
        /// Build an agent's image instead (claude, codex, aider): its recipe
        /// from assets/agents/NAME, FROM the base image, with podman build.
        /// Tagged localhost/lazaret/agent-NAME:VERSION and :latest. Prints
        /// one line per step; podman's output goes to a log in
        /// ~/.local/state/lazaret/logs, whose path it prints.
        #[arg(long)]
        agent: Option<String>,
        /// With --agent: the agent version to install (default: the newest).
        #[arg(long = "agent-version", default_value = "latest", requires = "agent")]
        agent_version: String,
    },
    /// Remove Lazaret's images (localhost/lazaret/...) that no profile, no
    /// container and not the current Network Sidecar uses, and the untagged
    /// images Lazaret's builds left (told by Lazaret's labels).
    Prune {
        /// Only print what would be removed.
        #[arg(long)]
        dry_run: bool,
        /// Only these repositories (e.g. localhost/lazaret/trixie).
        repositories: Vec<String>,
    },
    /// List Lazaret's images: base, agent (with its version) and sidecar,
    /// and the untagged ones Lazaret's builds left.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Which domain: a profile and a workspace folder, written the same way by
/// every command: `lazaret CMD [PROFILE] [-w DIR]`, or `-p PROFILE`.
#[derive(Debug, Default, clap::Args)]
struct DomainArgs {
    /// Profile (default: `default_profile`, or the only profile).
    #[arg(value_name = "PROFILE", conflicts_with = "profile_flag")]
    profile: Option<String>,
    /// The profile, as an option (same as the positional PROFILE).
    #[arg(
        long = "profile",
        short = 'p',
        id = "profile_flag",
        value_name = "PROFILE"
    )]
    profile_flag: Option<String>,
    /// Workspace folder (default: the current folder).
    #[arg(long, short)]
    workspace: Option<PathBuf>,
}

impl DomainArgs {
    fn profile(&self) -> Option<&str> {
        self.profile.as_deref().or(self.profile_flag.as_deref())
    }

    fn workspace(&self) -> Option<&Path> {
        self.workspace.as_deref()
    }
}

#[derive(Debug, Subcommand)]
enum DomainsCommand {
    /// Profile, workspace, size, last use and state (running, stopped,
    /// orphaned, broken) of every domain folder.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete stopped domains unused for longer than AGE (e.g. 30d, 12h),
    /// and their checkpoints older than AGE. Lists what it will remove
    /// and asks first (`--force` does not ask, `--dry-run` only lists).
    /// Never a running domain, nor its checkpoints unless `--running`;
    /// asks before deleting an isolated clone that holds commits the
    /// host's `lazaret/agent-*` branch lacks.
    Prune {
        /// Age since last use: 30d, 12h, 90m.
        #[arg(long, value_name = "AGE")]
        older_than: String,
        /// List what would be removed; remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// Remove without asking (the list is printed first all the same).
        #[arg(long, short)]
        force: bool,
        /// Also the old checkpoints of running domains (left alone
        /// otherwise: they belong to something in use).
        #[arg(long)]
        running: bool,
    },
}

#[derive(Debug, Subcommand)]
enum SandboxCommand {
    /// Start the domain's containers (or report them if they run).
    Up {
        #[command(flatten)]
        domain: DomainArgs,
        /// Run the Agent Sandbox under this runtime instead of the
        /// profile's. `runc` means no gVisor isolation.
        #[arg(long, value_parser = ["runsc", "runc"])]
        runtime: Option<String>,
    },
    /// Remove the domain's containers and unmount its State Anchor.
    Down(DomainArgs),
    /// Copy the agent's branch into the host repository
    /// (refs/heads/lazaret/agent-PROFILE, and only that ref).
    Sync {
        #[command(flatten)]
        domain: DomainArgs,
        /// Keep watching the agent's refs and copy every change at once,
        /// until interrupted.
        #[arg(long)]
        watch: bool,
    },
}

#[derive(Debug, Subcommand)]
enum NetCommand {
    /// Print the sidecar's live rules and the configuration rule behind each.
    Show {
        #[command(flatten)]
        domain: DomainArgs,
        /// Print JSON: the live routes, name rules and refused names.
        #[arg(long)]
        json: bool,
    },
    /// Say whether an address is reachable, or a name resolved, and which
    /// rule decides it.
    Why {
        /// An address (192.0.2.7) or a host name (api.example.com).
        target: String,
        #[command(flatten)]
        domain: DomainArgs,
    },
    /// Allow a network or a host name now (and, with --save, in ./lazaret.toml).
    Allow {
        /// A CIDR (192.0.2.0/24), an address, or a name (api.example.com, *.example.com).
        cidr: String,
        #[command(flatten)]
        domain: DomainArgs,
        /// Also write the rule into ./lazaret.toml's profile.
        #[arg(long)]
        save: bool,
        /// Also print the whole live table after the change.
        #[arg(long, short)]
        verbose: bool,
    },
    /// Deny a network or a host name now (and, with --save, in ./lazaret.toml).
    Deny {
        /// A CIDR (192.0.2.0/24), an address, or a name (api.example.com, *.example.com).
        cidr: String,
        #[command(flatten)]
        domain: DomainArgs,
        /// Also write the rule into ./lazaret.toml's profile.
        #[arg(long)]
        save: bool,
        /// Also print the whole live table after the change.
        #[arg(long, short)]
        verbose: bool,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Validate every configuration file and profile; print each problem
    /// with file, line and column.
    Check,
    /// Print the effective configuration and the file each value came from.
    Show,
    /// Print the name of every profile, one a line (for scripts; bash
    /// completion offers them).
    Profiles,
}

/// What `exec` and `shell` exit with when Lazaret itself fails (the
/// domain cannot start, the configuration is wrong, ...), as podman does;
/// otherwise they exit with the command's own code.
pub const OWN_FAILURE: u8 = 125;

/// For commands whose exit code is the sandboxed command's: Lazaret's own
/// failure is reported and becomes [`OWN_FAILURE`], so a script can tell it
/// from the command's exit 1.
fn passing_codes_through(result: Result<ExitCode>) -> Result<ExitCode> {
    result.or_else(|err| {
        eprintln!("lazaret: {err:#}");
        Ok(ExitCode::from(OWN_FAILURE))
    })
}

pub fn run() -> Result<ExitCode> {
    let cli = Cli::parse();
    let env = SystemEnv;
    crate::config::set_allow_broad_workspace(cli.allow_broad_workspace);
    if cli.allow_degraded {
        crate::engine::selftest::set_allow_degraded();
    }
    match cli.command {
        Command::Init { force } => init::init_command(&env, force),
        Command::Trust { path, revoke } => trust_command(&env, cli.config.as_deref(), path, revoke),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut cmd = Cli::command();
            print_out(&complete::script(shell, &mut cmd))
        }
        Command::Man { dir } => {
            use clap::CommandFactory;
            let cmd = Cli::command();
            match dir {
                Some(d) => {
                    std::fs::create_dir_all(&d)
                        .with_context(|| format!("cannot create {}", d.display()))?;
                    clap_mangen::generate_to(cmd, &d)
                        .with_context(|| format!("cannot write man pages into {}", d.display()))?;
                }
                None => {
                    let mut page = Vec::new();
                    clap_mangen::Man::new(cmd)
                        .render(&mut page)
                        .context("cannot render the man page")?;
                    return print_out(&String::from_utf8_lossy(&page));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Doctor {
            sandbox: Some(profile),
            workspace,
        } => {
            let d = DomainArgs {
                profile: (!profile.is_empty()).then_some(profile),
                workspace,
                ..DomainArgs::default()
            };
            doctor_sandbox(cli.config, &env, &d)
        }
        Command::Doctor { sandbox: None, .. } => {
            let checks = crate::doctor::run(&env);
            let (text, failed) = crate::doctor::report(&checks);
            print_out(&text)?;
            Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Shell { domain, prefix } => passing_codes_through(session::shell(
            &cli.config,
            &env,
            domain.profile(),
            domain.workspace(),
            &prefix,
        )),
        Command::Ui { domain, prefix } => passing_codes_through(crate::ui::run(
            crate::client::Mode::Workbench,
            &cli.config,
            &env,
            domain.profile(),
            domain.workspace(),
            &prefix,
            crate::client::SessionChoice::Start,
        )),
        Command::Attach {
            session,
            profile,
            workspace,
            new,
            prefix,
        } => passing_codes_through(session::attach(
            &cli.config,
            &env,
            profile.as_deref(),
            workspace.as_deref(),
            session,
            new,
            &prefix,
        )),
        Command::Sessions { json } => session::sessions(&env, json),
        Command::Exec { domain, command } => passing_codes_through(session::exec(
            &cli.config,
            &env,
            domain.profile(),
            domain.workspace(),
            &command,
        )),
        Command::Status { json } => session::status(&env, json),
        Command::Checkpoint { domain, name } => checkpoint::take(cli.config, &env, &domain, name),
        Command::Checkpoints { domain, json } => checkpoint::list(cli.config, &env, &domain, json),
        Command::Restore {
            names,
            profile,
            workspace,
            force,
        } => {
            let (domain, name) = profile_and_name(names, profile, workspace)?;
            checkpoint::restore(&cli.config, &env, &domain, &name, force)
        }
        Command::Fork {
            names,
            new,
            profile,
            workspace,
        } => {
            let (domain, name) = profile_and_name(names, profile, workspace)?;
            checkpoint::fork(&cli.config, &env, &domain, &name, &new)
        }
        Command::Down { domain, all, purge } => session::down(
            &cli.config,
            &env,
            domain.profile(),
            domain.workspace(),
            all,
            purge,
        ),
        Command::Audit {
            domain,
            verify,
            json,
        } => session::audit(
            &cli.config,
            &env,
            domain.profile(),
            domain.workspace(),
            verify,
            json,
        ),
        Command::Domains(c) => {
            let json = matches!(c, DomainsCommand::List { json: true });
            let prune = match c {
                DomainsCommand::Prune {
                    older_than,
                    dry_run,
                    force,
                    running,
                } => Some(session::Prune {
                    age: crate::domains::parse_age(&older_than)
                        .map_err(|e| anyhow::anyhow!("--older-than: {e}"))?,
                    dry_run,
                    force,
                    running,
                }),
                DomainsCommand::List { .. } => None,
            };
            session::domains(&cli.config, &env, json, prune)
        }
        Command::Logs { domain, lines } => session::logs(
            &cli.config,
            &env,
            domain.profile(),
            domain.workspace(),
            lines,
        ),
        Command::Coordinator {
            profile,
            workspace,
            foreground: true,
        } => session::coordinator(&cli.config, &env, &profile, &workspace),
        Command::Coordinator { .. } => session::launch_coordinator(),
        Command::LayerUsage { budget, dir } => {
            let usage = crate::engine::layer::measure(&dir, budget)?;
            print_out(&format!("{}\n", crate::engine::layer::format_usage(&usage)))
        }
        Command::Reclaim { dir } => {
            crate::git_sentry::nofollow::reclaim(&dir)
                .with_context(|| format!("cannot give back what is in {}", dir.display()))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::StripTrap { path } => {
            crate::git_sentry::nofollow::strip_trap(&path)
                .with_context(|| format!("cannot fix {}", path.display()))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Net(cmd) => network::net_command(cli.config, &env, &cmd),
        Command::Config(ConfigCommand::Check) => {
            let config = load(cli.config, &env)?;
            config_check(&config, &env)
        }
        Command::Config(ConfigCommand::Profiles) => {
            let config = load(cli.config, &env)?;
            print_out(
                &config
                    .profiles
                    .keys()
                    .map(|name| format!("{name}\n"))
                    .collect::<String>(),
            )
        }
        Command::Config(ConfigCommand::Show) => {
            let config = load(cli.config, &env)?;
            print_out(&config_show(&config))
        }
        Command::Image(ImageCommand::Build {
            release,
            agent: Some(agent),
            agent_version,
            ..
        }) => image_build_agent(cli.config, &env, release, agent, agent_version),
        Command::Image(ImageCommand::Build {
            release,
            include,
            mirror,
            tag,
            agent: None,
            ..
        }) => image_build(
            cli.config,
            &env,
            release.unwrap_or_else(|| "trixie".into()),
            include,
            mirror,
            tag,
        ),
        Command::Image(ImageCommand::Prune {
            dry_run,
            repositories,
        }) => image_prune(&cli.config, &env, dry_run, &repositories),
        Command::Image(ImageCommand::List { json }) => image_list(json),
        Command::Sandbox(SandboxCommand::Up { domain, runtime }) => {
            sandbox_up(cli.config, &env, &domain, runtime.as_deref())
        }
        Command::Sandbox(SandboxCommand::Down(d)) => sandbox_down(cli.config, &env, &d),
        Command::Sandbox(SandboxCommand::Sync { domain, watch }) => {
            sandbox_sync(cli.config, &env, &domain, watch)
        }
        Command::Review(d) => review(cli.config, &env, &d),
        Command::Domain { domain, json } => {
            let config = load(cli.config, &env)?;
            let profile = config.select_profile(domain.profile())?;
            let workspace = match domain.workspace() {
                Some(p) => p.to_path_buf(),
                None => current_dir()?,
            };
            let name = crate::domain::name_of(&profile.name, domain.profile());
            let anchor = crate::domain::DomainAnchor::new(&name, &workspace)?;
            let rundir = RuntimeDir::unchecked(RuntimeDir::locate(&env));
            let paths = DomainPaths::new(
                &anchor,
                &config.data_root,
                &config.escalation.socket_dir,
                &rundir,
            );
            if json {
                println!("{}", serde_json::to_string_pretty(&paths)?);
            } else {
                print!("{}", domain_text(&paths));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `lazaret trust [PATH] [--revoke]` (decisions.md D8).
fn trust_command(
    env: &dyn HostEnv,
    explicit: Option<&Path>,
    path: Option<PathBuf>,
    revoke: bool,
) -> Result<ExitCode> {
    use crate::config::source::{Layer, Merged};
    use crate::config::trust::{TrustStore, read_workspace_file, sha256_hex, widening_keys};
    let cwd = current_dir()?;
    let file = match path {
        None => cwd.join("lazaret.toml"),
        Some(p) => {
            let p = if p.is_absolute() { p } else { cwd.join(p) };
            if p.is_dir() {
                p.join("lazaret.toml")
            } else {
                p
            }
        }
    };
    let store = TrustStore::locate(env)?;
    if revoke {
        if store.revoke(&file)? {
            println!("{} is no longer trusted", file.display());
        } else {
            println!("{} was not trusted; nothing to revoke", file.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let text = read_workspace_file(&file)?
        .with_context(|| format!("{} does not exist; nothing to trust", file.display()))?;
    // Type-check it first: trusting a file that cannot load helps nobody.
    let mut upper = Merged::default();
    upper.add_text(Layer::Workspace, &file, &text)?;
    let mut lower = Merged::with_defaults();
    if let Some(user) = LoadOptions::standard(env, &cwd, None).user_file
        && user.exists()
    {
        lower.add_file(Layer::User, &user)?;
    }
    if let Some(explicit) = explicit {
        lower.add_file(Layer::CommandLine, explicit)?;
    }
    let sha = sha256_hex(text.as_bytes());
    store.trust(&file, &sha)?;
    println!("trusted {}", file.display());
    println!("  sha256 {sha} (any change makes it untrusted again)");
    let keys = widening_keys(&lower.table, &upper.table, &upper.origins);
    if keys.is_empty() {
        println!("  it only narrows your configuration");
    } else {
        println!("  it may now widen what the sandbox can do:");
        for k in keys {
            println!("    {}: {}", k.key, k.why);
        }
    }
    println!("  undo with `lazaret trust --revoke {}`", file.display());
    Ok(ExitCode::SUCCESS)
}

/// `[PROFILE] NAME` (and `-p PROFILE`) as the domain and a name.
fn profile_and_name(
    mut names: Vec<String>,
    profile: Option<String>,
    workspace: Option<PathBuf>,
) -> Result<(DomainArgs, String)> {
    let name = names.pop().unwrap_or_default();
    let positional = names.pop();
    if positional.is_some() && profile.is_some() {
        bail!("name the profile once: as PROFILE or with --profile");
    }
    let domain = DomainArgs {
        profile: positional,
        profile_flag: profile,
        workspace,
    };
    Ok((domain, name))
}

/// Loads the configuration and binds the chosen profile to the workspace.
fn resolve(
    explicit: Option<PathBuf>,
    env: &dyn HostEnv,
    d: &DomainArgs,
) -> Result<(Config, crate::config::ResolvedProfile)> {
    let config = load(explicit, env)?;
    let profile = config.select_profile(d.profile())?.clone();
    let workspace = match &d.workspace {
        Some(p) => p.clone(),
        None => current_dir()?,
    };
    let resolved = config.resolve_named(
        d.profile().unwrap_or_default(),
        &profile,
        &workspace,
        env,
        HostVars::Require,
    )?;
    Ok((config, resolved))
}

fn engine(config: &Config, env: &dyn HostEnv) -> Result<Engine> {
    let rundir = RuntimeDir::ensure(&RuntimeDir::locate(env))?;
    Ok(Engine::new(config, rundir))
}

fn sandbox_up(
    explicit: Option<PathBuf>,
    env: &dyn HostEnv,
    d: &DomainArgs,
    runtime: Option<&str>,
) -> Result<ExitCode> {
    let (config, mut resolved) = resolve(explicit, env, d)?;
    // An explicit flag is as explicit as the profile (decisions.md D7).
    match runtime {
        Some("runc") => resolved.profile.runtime = crate::config::Runtime::Runc,
        Some(_) => resolved.profile.runtime = crate::config::Runtime::Runsc,
        None => {}
    }
    let engine = engine(&config, env)?;
    let started = std::time::Instant::now();
    let sandbox = engine
        .up(&resolved, env, &mut |step| {
            eprintln!("[{:>5.1}s] {step}", started.elapsed().as_secs_f64());
        })
        .with_context(|| {
            format!(
                "cannot start domain {} ({})",
                resolved.domain.hash(),
                resolved.profile.name
            )
        })?;
    // No coordinator watches this domain: `status` is told it runs so.
    session::record_sandbox_up(
        &engine.rundir,
        resolved.domain.hash(),
        &[sandbox.name.clone(), sandbox.sidecar.clone()],
    );
    println!("sandbox   {}", sandbox.name);
    println!("sidecar   {}", sandbox.sidecar);
    println!("image     {}", sandbox.image);
    if sandbox.is_gvisor() {
        println!("runtime   runsc (gVisor)");
    } else {
        println!(
            "runtime   {}   !! NOT gVisor-isolated: the agent shares the host kernel",
            sandbox.runtime.as_str()
        );
    }
    for p in &sandbox.persistent {
        println!(
            "persists  {} -> {}",
            p.container.display(),
            p.changes.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `lazaret doctor --sandbox`: the start-up self-test, on demand, of a
/// domain that runs.
fn doctor_sandbox(
    explicit: Option<PathBuf>,
    env: &dyn HostEnv,
    d: &DomainArgs,
) -> Result<ExitCode> {
    use crate::coordinator::protocol::{ClientMsg, CoordMsg};
    use crate::engine::selftest;
    let (config, resolved) = resolve(explicit, env, d)?;
    let engine = engine(&config, env)?;
    let name = resolved.domain.sandbox_name();
    if !engine.podman.is_running(&name)? {
        bail!(
            "the sandbox of profile {} for {} is not running; start it (`lazaret ui`, `lazaret shell`) and run this again",
            resolved.profile.name,
            resolved.domain.workspace().display()
        );
    }
    // The coordinator is told, so that the self-test's own probe of the
    // Escalation Socket is recorded as the self-test's (`self-test` in the
    // audit log), not as a refusal. Without an answer the self-test runs
    // all the same, and the probe is audited as any refusal.
    let rt = crate::client::session::runtime()?;
    let control = resolved
        .domain
        .control_socket(&RuntimeDir::ensure(&RuntimeDir::locate(env))?);
    let mut coordinator = rt.block_on(crate::client::session::query(&control)).ok();
    if let Some(c) = &mut coordinator
        && !matches!(
            rt.block_on(c.call(&ClientMsg::SelfTestStart)),
            Ok(CoordMsg::SelfTest { .. })
        )
    {
        coordinator = None;
    }
    let report = selftest::run(&engine, &resolved, &name);
    selftest::record_refusals(
        &resolved.domain.domain_root(&engine.data_root),
        &report,
        true,
    );
    if let Some(mut c) = coordinator {
        let failed = report.failed().map(|c| c.name.clone()).collect();
        let _ = rt.block_on(c.call(&ClientMsg::SelfTestEnd { failed }));
    }
    print!("{}", selftest::render(&report));
    let failed = report.failed().count();
    if failed == 0 {
        println!("\nself-test passed: {name} is what Lazaret says it is");
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "\n{failed} of {} checks failed: {name} is NOT as configured",
            report.checks.len()
        );
        Ok(ExitCode::FAILURE)
    }
}

fn sandbox_down(explicit: Option<PathBuf>, env: &dyn HostEnv, d: &DomainArgs) -> Result<ExitCode> {
    // Teardown must work even when the configuration no longer resolves
    // (e.g. an env: variable is unset now, or an untrusted workspace file
    // widens): only the Domain Anchor is needed.
    let config = load_with(explicit, env, true)?;
    let profile = config.select_profile(d.profile())?;
    let workspace = match &d.workspace {
        Some(p) => p.clone(),
        None => current_dir()?,
    };
    let name = crate::domain::name_of(&profile.name, d.profile());
    let anchor = crate::domain::DomainAnchor::new(&name, &workspace)?;
    let engine = engine(&config, env)?;
    engine
        .down(&anchor)
        .with_context(|| format!("cannot tear down domain {}", anchor.hash()))?;
    session::forget_sandbox_up(&engine.rundir, anchor.hash());
    println!("domain {} is down", anchor.hash());
    Ok(ExitCode::SUCCESS)
}

fn layout_of(
    explicit: Option<PathBuf>,
    env: &dyn HostEnv,
    d: &DomainArgs,
) -> Result<WorkspaceLayout> {
    let (config, resolved) = resolve(explicit, env, d)?;
    Ok(engine(&config, env)?.layout(&resolved)?)
}

fn sandbox_sync(
    explicit: Option<PathBuf>,
    env: &dyn HostEnv,
    d: &DomainArgs,
    watch: bool,
) -> Result<ExitCode> {
    let layout = layout_of(explicit, env, d)?;
    use lazaret_widgets::visible::visible;
    let Some(propagator) = Propagator::for_layout(&layout) else {
        bail!(
            "{} is not a git repository: there is no agent branch to copy",
            layout.host.display()
        );
    };
    let print = |r: Result<Option<String>, crate::git_sentry::GitError>| match r {
        Ok(Some(oid)) => println!("{} -> {oid}", visible(&propagator.branch)),
        Ok(None) => println!(
            "the agent has no branch {} yet",
            visible(&propagator.branch)
        ),
        Err(e) => eprintln!("lazaret: sync failed: {}", visible(&e.to_string())),
    };
    if !watch {
        let r = propagator.sync()?;
        print(Ok(r));
        return Ok(ExitCode::SUCCESS);
    }
    let stop = stop_on_signal()?;
    propagator
        .watch(&stop, &mut |r| print(r))
        .context("cannot watch the agent's refs")?;
    Ok(ExitCode::SUCCESS)
}

/// A receiver that gets a message on SIGINT or SIGTERM.
fn stop_on_signal() -> Result<std::sync::mpsc::Receiver<()>> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    // Blocked here, so every thread started later inherits the mask and
    // only the waiter below takes the signal.
    set.thread_block().context("cannot block signals")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if set.wait().is_ok() {
            let _ = tx.send(());
        }
    });
    Ok(rx)
}

fn review(explicit: Option<PathBuf>, env: &dyn HostEnv, d: &DomainArgs) -> Result<ExitCode> {
    use lazaret_widgets::visible::visible;
    let layout = layout_of(explicit, env, d)?;
    let r = crate::git_sentry::review::review(&layout)?;
    println!(
        "workspace {} ({} mode), agent branch {}",
        visible(&layout.host.to_string_lossy()),
        layout.mode.as_str(),
        visible(&layout.branch)
    );
    for n in &r.notes {
        println!("note: {n}");
    }
    println!("{} changed path(s)", r.changed.len());
    if r.findings.is_empty() {
        println!("nothing that host tools would execute, and no filesystem traps");
    } else {
        println!("look at these before you run anything in this workspace:");
        // Each finding escapes the agent's names itself (Finding's Display).
        for f in &r.findings {
            println!("  ! {f}");
        }
    }
    for h in &r.hints {
        println!("  $ {}", visible(h));
    }
    // Last, after only escaped output: nothing printed before can hide it.
    println!(
        "review: {} finding(s), {} changed path(s)",
        r.findings.len(),
        r.changed.len()
    );
    Ok(if r.findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}

fn image_build_agent(
    explicit: Option<PathBuf>,
    env: &dyn HostEnv,
    release: Option<String>,
    agent: String,
    version: String,
) -> Result<ExitCode> {
    let scratch = match load(explicit, env) {
        Ok(c) => c.data_root.join("tmp"),
        Err(_) => std::env::temp_dir(),
    };
    let release = match (release, crate::agents::agent_recipe(&agent)) {
        (Some(r), _) => r,
        (None, Some(recipe)) => recipe.release.to_string(),
        (None, None) => "trixie".into(),
    };
    let podman = Podman::default();
    let base = format!("{}/{release}:latest", images::BASE_REPOSITORY);
    if !podman.image_exists(&base).unwrap_or(true) {
        eprintln!("{base} is missing: building it first (about a minute)");
        let req = BaseImageRequest {
            release: release.clone(),
            mirror: "http://deb.debian.org/debian".into(),
            include: Vec::new(),
            tag: None,
        };
        let started = std::time::Instant::now();
        build_base_image(&podman, &req, &scratch, &mut |line| {
            eprintln!("[{:>5.1}s] {line}", started.elapsed().as_secs_f64());
        })
        .with_context(|| format!("cannot build {base}, the base of the {agent} image"))?;
    }
    let req = AgentImageRequest {
        agent,
        base: format!("{}/{release}:latest", images::BASE_REPOSITORY),
        version,
    };
    let log = agent_build_log(env, &scratch, &req.agent);
    eprintln!(
        "lazaret: building the {} agent image from {} (rootless podman build, a few minutes); one line per step of its recipe, podman's whole output in {}",
        req.agent,
        req.base,
        log.display()
    );
    let mut step = crate::client::session::step_printer();
    let built = build_agent_image(&Podman::default(), &req, &scratch, &log, &mut step)
        .context("agent image build failed")?;
    println!("built     {}", built.tags.join(", "));
    println!("agent     {} {}", req.agent, built.version);
    println!("size      {:.1} MiB", built.size_bytes as f64 / 1048576.0);
    println!("time      {:.1} s", built.build_time.as_secs_f64());
    println!("log       {}", log.display());
    Ok(ExitCode::SUCCESS)
}

/// Where an agent image build writes podman's output: the user's state
/// folder (`$XDG_STATE_HOME/lazaret/logs`, or `~/.local/state/...`), one
/// file per agent, replaced by the next build; `scratch` without a home.
fn agent_build_log(env: &dyn HostEnv, scratch: &Path, agent: &str) -> PathBuf {
    let state = env
        .var("XDG_STATE_HOME")
        .filter(|v| v.starts_with('/'))
        .map(PathBuf::from)
        .or_else(|| env.home().map(|h| h.join(".local/state")));
    let dir = match state {
        Some(s) => s.join("lazaret/logs"),
        None => scratch.to_path_buf(),
    };
    let name: String = agent
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    dir.join(format!("image-build-agent-{name}.log"))
}

fn image_list(json: bool) -> Result<ExitCode> {
    let rows = images::list_images(&Podman::default()).context("cannot list images")?;
    if json {
        let rows: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "id": r.id,
                    "names": r.names,
                    "agent": r.agent(),
                    "version": r.version(),
                    "created": r.created,
                    "size": r.size,
                    "dangling": r.dangling(),
                    "was": r.was(),
                })
            })
            .collect();
        return print_out(&format!("{}\n", serde_json::to_string_pretty(&rows)?));
    }
    let mut out = String::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let _ = writeln!(
        out,
        "{:<48} {:<8} {:<12} {:>8} {:>10}",
        "IMAGE", "AGENT", "VERSION", "AGE", "SIZE"
    );
    let untagged = rows.iter().filter(|r| r.dangling()).count();
    for row in rows {
        let name = row
            .names
            .iter()
            .find(|n| !n.ends_with(":latest"))
            .or(row.names.first())
            .cloned()
            .unwrap_or_else(|| {
                let id: String = row.id.chars().take(12).collect();
                match row.repository() {
                    Some(repo) => format!("<untagged {id}> {repo}"),
                    None => format!("<untagged {id}>"),
                }
            });
        let age = (now - row.created).max(0);
        let age = if age < 3600 {
            format!("{}m", age / 60)
        } else if age < 86_400 {
            format!("{}h", age / 3600)
        } else {
            format!("{}d", age / 86_400)
        };
        let _ = writeln!(
            out,
            "{:<48} {:<8} {:<12} {:>8} {:>7.1} MB",
            name,
            row.agent().unwrap_or_else(|| "-".into()),
            row.version().unwrap_or_else(|| "-".into()),
            age,
            row.size as f64 / 1e6
        );
    }
    if untagged > 0 {
        let _ = writeln!(
            out,
            "{untagged} untagged: left by an earlier build (a rebuilt tag, or a build that stopped); `lazaret image prune` removes them"
        );
    }
    print_out(&out)
}

/// Prints `text` on stdout; a reader that went away (`| head`) is not an
/// error, as for any Unix tool.
fn print_out(text: &str) -> Result<ExitCode> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(e).context("cannot write to standard output")
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}

fn image_build(
    explicit: Option<PathBuf>,
    env: &dyn HostEnv,
    release: String,
    include: Vec<String>,
    mirror: String,
    tag: Option<String>,
) -> Result<ExitCode> {
    // Scratch space on the Storage Root's disk: the rootfs is hundreds of MB.
    let scratch = match load(explicit, env) {
        Ok(c) => c.data_root.join("tmp"),
        Err(_) => std::env::temp_dir(),
    };
    let req = BaseImageRequest {
        release,
        mirror,
        include,
        tag,
    };
    let started = std::time::Instant::now();
    eprintln!(
        "building a Debian {} base image (rootless, mmdebstrap)",
        req.release
    );
    let built = build_base_image(&Podman::default(), &req, &scratch, &mut |line| {
        eprintln!("[{:>5.1}s] {line}", started.elapsed().as_secs_f64());
    })
    .context("image build failed")?;
    println!("built     {}", built.tags.join(", "));
    println!("digest    sha256:{}", built.digest);
    println!(
        "size      {:.1} MiB (rootfs tarball)",
        built.tar_bytes as f64 / 1048576.0
    );
    println!(
        "time      {:.1} s bootstrap + {:.1} s import",
        built.bootstrap_time.as_secs_f64(),
        built.import_time.as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

fn image_prune(
    explicit: &Option<PathBuf>,
    env: &dyn HostEnv,
    dry_run: bool,
    repositories: &[String],
) -> Result<ExitCode> {
    use crate::engine::images;
    let config = crate::client::Launcher::new(crate::client::Mode::Shell, explicit, env)?.config;
    let podman = Podman::default();
    let mut keep: Vec<String> = config.profiles.values().map(|p| p.image.clone()).collect();
    // The sidecar image of this build (its tag is the helper's digest).
    if let Some(bin) = crate::install::find_helper(crate::install::SIDECAR_BINARY)
        && let Ok(digest) = images::file_sha256(&bin)
    {
        keep.push(format!("{}:{}", images::SIDECAR_REPOSITORY, &digest[..12]));
    }
    let in_use = images::images_in_use(&podman, &keep)?;
    let all = images::local_images(&podman)?;
    let doomed = images::prune_candidates(&all, &in_use, repositories);
    // Untagged images Lazaret left (by its labels only), nothing runs.
    let untagged: Vec<images::ImageRow> = images::list_images(&podman)
        .context("cannot list images")?
        .into_iter()
        .filter(|r| r.dangling())
        .filter(|r| !in_use.iter().any(|u| r.id.starts_with(u.as_str())))
        .filter(|r| {
            repositories.is_empty()
                || r.repository()
                    .is_some_and(|repo| repositories.contains(&repo))
        })
        .collect();
    if doomed.is_empty() && untagged.is_empty() {
        println!("nothing to prune");
    }
    for i in &doomed {
        if dry_run {
            println!("would remove {}", i.name);
            continue;
        }
        // A tag of an image that keeps other tags is only untagged.
        podman
            .run(["rmi", &i.name])
            .with_context(|| format!("cannot remove {}", i.name))?;
        println!("removed {}", i.name);
    }
    for r in &untagged {
        let id: String = r.id.chars().take(12).collect();
        let what = match r.was() {
            Some(was) => format!("untagged {id} (was {was})"),
            None => format!("untagged {id}"),
        };
        if dry_run {
            println!("would remove {what}");
            continue;
        }
        podman
            .run(["rmi", &r.id])
            .with_context(|| format!("cannot remove {what}"))?;
        println!("removed {what}");
    }
    Ok(ExitCode::SUCCESS)
}

fn config_check(config: &Config, env: &dyn HostEnv) -> Result<ExitCode> {
    let cwd = current_dir()?;
    let mut warnings = Vec::new();
    let mut notes = Vec::new();
    for profile in config.profiles.values() {
        config.resolve(profile, &cwd, env, HostVars::Skip)?;
        for var in profile.unset_host_vars(env) {
            warnings.push(format!(
                "profile {}: requires ${var}, which is not set here; starting it will fail until you export {var}",
                profile.name
            ));
        }
        for var in profile.unset_optional_host_vars(env) {
            notes.push(format!(
                "profile {}: ${var} is not set here; the sandbox starts without it",
                profile.name
            ));
        }
    }
    let files: Vec<String> = config
        .merged
        .sources
        .iter()
        .map(|s| format!("{} ({})", s.path.display(), s.layer))
        .collect();
    let mut out = String::new();
    let _ = writeln!(out, "configuration is valid");
    let _ = writeln!(out, "  files:    {}", files.join(", "));
    let _ = writeln!(
        out,
        "  profiles: {}",
        config
            .profiles
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    );
    // What a command that names no profile runs, and under which kernel.
    let default = match config.select_profile(None) {
        Ok(p) => p.name.clone(),
        Err(e) => format!("none: {e}"),
    };
    let _ = writeln!(out, "  default profile: {default}");
    // Limits are part of what a profile promises: say how each holds here.
    let host = crate::engine::limits::HostSupport::detect(&Podman::default()).unwrap_or_default();
    for p in config.profiles.values() {
        let kernel = if p.runtime.is_gvisor() {
            "gVisor"
        } else {
            "NOT gVisor: shares the host kernel"
        };
        let _ = writeln!(
            out,
            "  runtime of {}: {} ({kernel})",
            p.name,
            p.runtime.as_str()
        );
        let _ = writeln!(out, "  limits of {}: {}", p.name, p.limits.summary());
        let e = crate::engine::limits::Enforcement::of(&p.limits, p.runtime, &host);
        for gap in e.gaps(&host) {
            warnings.push(format!("profile {}: {gap}", p.name));
        }
    }
    for n in &notes {
        let _ = writeln!(out, "note: {n}");
    }
    for w in &warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    print_out(&out)
}

/// The merged configuration as TOML, each value annotated with its origin.
pub fn config_show(config: &Config) -> String {
    let mut out =
        String::from("# effective configuration; `# file:line` says where each value is set\n");
    for source in &config.merged.sources {
        let trust = match (&config.workspace_trust, source.layer) {
            (Some(t), crate::config::source::Layer::Workspace) if t.trusted => {
                ", trusted by you (sha256 ".to_string() + &t.sha256[..12] + "...)"
            }
            (Some(_), crate::config::source::Layer::Workspace) => {
                ", NOT trusted: applied because it only narrows".to_string()
            }
            _ => String::new(),
        };
        if source.layer == crate::config::source::Layer::Default {
            let _ = writeln!(out, "# default layer: built into lazaret (trusted)");
            continue;
        }
        let _ = writeln!(
            out,
            "# {} file: {}{trust}",
            source.layer,
            source.path.display()
        );
    }
    if let Some(file) = &config.skipped_workspace {
        let _ = writeln!(
            out,
            "# workspace file LEFT OUT (untrusted, widens): {}",
            file.display()
        );
    }
    show_table(&mut out, config, &config.merged.table, "");
    let _ = writeln!(out, "\n# resolved");
    let _ = writeln!(out, "# storage root:       {}", config.data_root.display());
    let _ = writeln!(
        out,
        "# escalation sockets: {}",
        config.escalation.socket_dir.display()
    );
    for p in config.profiles.values() {
        let _ = writeln!(
            out,
            "# profile {}: runtime {}{}, workspace mode {}",
            p.name,
            p.runtime.as_str(),
            if p.runtime_explicit { "" } else { " (default)" },
            p.workspace_mode
                .map_or("isolated for git workspaces, else direct (default)", |m| m
                    .as_str())
        );
    }
    out
}

fn show_table(out: &mut String, config: &Config, table: &toml::Table, prefix: &str) {
    let path_of = |key: &str| {
        if prefix.is_empty() {
            key.to_string()
        } else {
            format!("{prefix}.{key}")
        }
    };
    for (key, value) in table.iter().filter(|(_, v)| !v.is_table()) {
        let origin = config
            .merged
            .origin(&path_of(key))
            .map(|l| format!("  # {}:{}", l.file.display(), l.line))
            .unwrap_or_default();
        let _ = writeln!(out, "{} = {value}{origin}", toml_key(key));
    }
    for (key, value) in table.iter() {
        if let toml::Value::Table(t) = value {
            let path = path_of(key);
            if t.values().any(|v| !v.is_table()) {
                let header: Vec<String> = path.split('.').map(toml_key).collect();
                let _ = writeln!(out, "\n[{}]", header.join("."));
            }
            show_table(out, config, t, &path);
        }
    }
}

fn toml_key(key: &str) -> String {
    if !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        key.to_string()
    } else {
        format!("{key:?}")
    }
}

fn domain_text(p: &DomainPaths) -> String {
    let rows: [(&str, &Path); 11] = [
        ("workspace", &p.workspace),
        ("domain root", &p.domain_root),
        ("usr_changes", &p.usr_changes),
        ("usr_work", &p.usr_work),
        ("usr_merged", &p.usr_merged),
        ("state store", &p.state_store),
        ("coordinator log", &p.coordinator_log),
        ("control socket", &p.control_socket),
        ("lock file", &p.lock_file),
        ("certs folder", &p.certs_dir),
        ("escalation dir", &p.escalation_dir),
    ];
    let mut out = String::new();
    let _ = writeln!(out, "{:<17}{}", "profile", p.profile);
    let _ = writeln!(
        out,
        "{:<17}{}   (sha256 of \"{}:{}\", first 12 hex digits)",
        "domain hash",
        p.domain_hash,
        p.profile,
        p.workspace.display()
    );
    for (name, path) in rows {
        let _ = writeln!(out, "{name:<17}{}", path.display());
    }
    let _ = writeln!(out, "{:<17}{}", "sandbox", p.sandbox_container);
    let _ = writeln!(out, "{:<17}{}", "sidecar", p.sidecar_container);
    let _ = writeln!(out, "{:<17}{}", "agent branch", p.agent_branch);
    out
}

#[cfg(test)]
mod help_tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every argument of every subcommand says what it is for.
    #[test]
    fn every_argument_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "lazaret", &mut missing);
        assert!(missing.is_empty(), "arguments without help: {missing:?}");
    }
}
