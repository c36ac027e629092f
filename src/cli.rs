//! The `lazaret` command line. Each subcommand is a thin layer over the
//! library; errors carry context saying what failed and what to do.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use crate::config::{Config, HostVars, LoadOptions};
use crate::domain::DomainPaths;
use crate::host::{HostEnv, SystemEnv};
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

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check or print the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Show the Domain Anchor of a profile and workspace: its hash and every
    /// host path and container name derived from it.
    Domain {
        /// Profile to use (default: `default_profile`, or the only profile).
        #[arg(long, short)]
        profile: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Workspace folder (default: the current folder).
        path: Option<PathBuf>,
    },
    /// Check that this host can run Lazaret: podman, runc, runsc (gVisor),
    /// user namespaces, devices, storage and limits. Prints a fix for each
    /// problem; exits non-zero when something required is missing.
    Doctor,
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Validate every configuration file and profile; print each problem
    /// with file, line and column.
    Check,
    /// Print the effective configuration and the file each value came from.
    Show,
}

pub fn run() -> Result<ExitCode> {
    let cli = Cli::parse();
    let env = SystemEnv;
    match cli.command {
        Command::Doctor => {
            let checks = crate::doctor::run(&env);
            let (text, failed) = crate::doctor::report(&checks);
            print!("{text}");
            Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Config(ConfigCommand::Check) => {
            let config = load(cli.config, &env)?;
            config_check(&config, &env)
        }
        Command::Config(ConfigCommand::Show) => {
            let config = load(cli.config, &env)?;
            print!("{}", config_show(&config));
            Ok(ExitCode::SUCCESS)
        }
        Command::Domain {
            profile,
            json,
            path,
        } => {
            let config = load(cli.config, &env)?;
            let profile = config.select_profile(profile.as_deref())?;
            let workspace = match path {
                Some(p) => p,
                None => current_dir()?,
            };
            let anchor = crate::domain::DomainAnchor::new(&profile.name, &workspace)?;
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

fn current_dir() -> Result<PathBuf> {
    std::env::current_dir().context("cannot read the current folder (was it deleted?)")
}

fn load(explicit: Option<PathBuf>, env: &dyn HostEnv) -> Result<Config> {
    let cwd = current_dir()?;
    let opts = LoadOptions::standard(env, &cwd, explicit);
    Ok(Config::load(&opts, env)?)
}

fn config_check(config: &Config, env: &dyn HostEnv) -> Result<ExitCode> {
    let cwd = current_dir()?;
    let mut warnings = Vec::new();
    for profile in config.profiles.values() {
        config.resolve(profile, &cwd, env, HostVars::Skip)?;
        for var in profile.unset_host_vars(env) {
            warnings.push(format!(
                "profile {}: forwards ${var}, which is not set here; starting it will fail until you export {var}",
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
    println!("configuration is valid");
    println!("  files:    {}", files.join(", "));
    println!(
        "  profiles: {}",
        config
            .profiles
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    );
    for w in &warnings {
        println!("warning: {w}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The merged configuration as TOML, each value annotated with its origin.
pub fn config_show(config: &Config) -> String {
    let mut out =
        String::from("# effective configuration; `# file:line` says where each value is set\n");
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
