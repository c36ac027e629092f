//! `lazaret init`: writes the commented example as the user configuration
//! and says what it changes compared with what was in force before, as
//! `git` and `podman` users expect of a command that edits their settings:
//! on a machine with no file, the built-in behaviour stays (same default
//! profile, the `shell` profile under gVisor) and only agent profiles are
//! added; over an existing file (`--force`), the old one is kept beside it.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

use crate::config::{Config, LoadOptions, ProfileConfig};
use crate::host::HostEnv;

/// The commented configuration `lazaret init` writes: the source tree's
/// example, embedded because only the binary is installed.
const EXAMPLE_TOML: &str = include_str!("../../example.toml");

pub(super) fn init_command(env: &dyn HostEnv, force: bool) -> Result<ExitCode> {
    let cwd = std::env::current_dir().context("cannot read the current folder")?;
    let Some(file) = LoadOptions::standard(env, &cwd, None).user_file else {
        bail!("cannot tell where your configuration goes: set HOME (or XDG_CONFIG_HOME)");
    };
    let existed = file.exists();
    if existed && !force {
        bail!(
            "{} already exists; left unchanged. Edit it, or run `lazaret init --force` to replace it with the commented example (your file is kept as a backup beside it)",
            file.display()
        );
    }
    if existed
        && std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?
            == EXAMPLE_TOML.as_bytes()
    {
        println!(
            "{} is already the commented example; left unchanged",
            file.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    // What was in force: the built-in defaults and the old file, without a
    // workspace's lazaret.toml (init writes the user-wide layer only).
    let before = user_wide(env, &file);
    let backup = if existed {
        Some(keep_backup(&file)?)
    } else {
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        None
    };
    write_replacing(&file, EXAMPLE_TOML)?;
    let after = user_wide(env, &file).with_context(|| {
        format!(
            "wrote {}, but it does not load here; run `lazaret config check` to see why",
            file.display()
        )
    })?;
    let mut out = String::new();
    if let Some(b) = &backup {
        let _ = writeln!(out, "kept your old file as {}", b.display());
    }
    let _ = writeln!(out, "wrote {}", file.display());
    let before = match (before, existed) {
        (Ok(c), true) => {
            let _ = writeln!(out, "compared with your old file:");
            c
        }
        (Ok(c), false) => {
            let _ = writeln!(
                out,
                "compared with what was in force before (the built-in defaults):"
            );
            c
        }
        (Err(e), _) => {
            let first = format!("{e:#}");
            let first = first.lines().next().unwrap_or_default().to_string();
            let _ = writeln!(
                out,
                "your old file did not load ({first}), so nothing could start with it; compared with the built-in defaults:"
            );
            user_wide(env, Path::new("/nonexistent/lazaret/config.toml"))?
        }
    };
    for line in differences(&before, &after) {
        let _ = writeln!(out, "  {line}");
    }
    let _ = writeln!(out, "edit it, then check it with `lazaret config check`");
    if let Some(b) = &backup {
        let _ = writeln!(out, "to go back: mv {} {}", b.display(), file.display());
    }
    super::print_out(&out)
}

/// The configuration of the built-in defaults and `file` (when it exists).
fn user_wide(env: &dyn HostEnv, file: &Path) -> Result<Config> {
    Ok(Config::load(
        &LoadOptions {
            user_file: Some(file.to_path_buf()),
            ..LoadOptions::default()
        },
        env,
    )?)
}

/// Copies `file` to a backup beside it that did not exist (`NAME.bak`,
/// then `NAME.bak.2`, ...): an earlier backup is never overwritten.
fn keep_backup(file: &Path) -> Result<PathBuf> {
    use std::io::Write as _;
    let content = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for n in 1.. {
        let suffix = if n == 1 {
            ".bak".to_string()
        } else {
            format!(".bak.{n}")
        };
        let backup = file.with_file_name(format!("{name}{suffix}"));
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&backup);
        match created {
            Ok(mut f) => {
                // As private as the file it keeps.
                let mode = std::fs::metadata(file).map(|m| m.permissions());
                mode.and_then(|m| f.set_permissions(m))
                    .and_then(|()| f.write_all(&content))
                    .and_then(|()| f.sync_all())
                    .with_context(|| {
                        format!(
                            "cannot write the backup {}; {} is left unchanged",
                            backup.display(),
                            file.display()
                        )
                    })?;
                return Ok(backup);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "cannot create the backup {}; {} is left unchanged",
                        backup.display(),
                        file.display()
                    )
                });
            }
        }
    }
    unreachable!("an unbounded range ends only by returning")
}

/// Replaces `file` with `text` at once (a temporary file renamed over it),
/// so an interrupted write leaves the old file or the new, never half.
/// A replaced file keeps its permissions (a private one stays private).
fn write_replacing(file: &Path, text: &str) -> Result<()> {
    let tmp = file.with_extension("toml.tmp");
    let mode = std::fs::metadata(file).ok().map(|m| m.permissions());
    std::fs::write(&tmp, text)
        .and_then(|()| match mode {
            Some(m) => std::fs::set_permissions(&tmp, m),
            None => Ok(()),
        })
        .and_then(|()| std::fs::rename(&tmp, file))
        .with_context(|| format!("cannot write {}", file.display()))
}

/// The default profile's name, or why there is none.
fn default_profile(c: &Config) -> String {
    match c.select_profile(None) {
        Ok(p) => p.name.clone(),
        Err(e) => format!("none ({e})"),
    }
}

fn runtime(p: &ProfileConfig) -> String {
    if p.runtime.is_gvisor() {
        "runsc (gVisor)".into()
    } else {
        format!("{} (NOT gVisor)", p.runtime.as_str())
    }
}

/// What a profile may reach: (allowed, refused), rules and names.
fn reach(c: &Config, p: &ProfileConfig) -> (BTreeSet<String>, BTreeSet<String>) {
    fn texts<'a, A: ToString + 'a, B: ToString + 'a>(
        nets: impl Iterator<Item = &'a A>,
        names: impl Iterator<Item = &'a B>,
    ) -> BTreeSet<String> {
        nets.map(ToString::to_string)
            .chain(names.map(ToString::to_string))
            .collect()
    }
    let n = &c.network;
    (
        texts(
            n.default_allow.iter().chain(&p.allow_egress),
            n.allow_domains.iter().chain(&p.allow_domains),
        ),
        texts(
            n.default_deny.iter(),
            n.deny_domains.iter().chain(&p.deny_domains),
        ),
    )
}

fn list(set: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    set.into_iter()
        .map(|s| s.as_ref().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One line per difference in behaviour between `before` and `after`.
fn differences(before: &Config, after: &Config) -> Vec<String> {
    let mut lines = Vec::new();
    let (db, da) = (default_profile(before), default_profile(after));
    if db == da {
        lines.push(format!("default profile: {da} (unchanged)"));
    } else {
        lines.push(format!("default profile: {da} (was {db})"));
    }
    if before.data_root != after.data_root {
        lines.push(format!(
            "storage root: {} (was {}; what was kept there, such as agents' logins, stays there)",
            after.data_root.display(),
            before.data_root.display()
        ));
    }
    let approve = |c: &Config| -> BTreeSet<String> {
        c.escalation
            .auto_approve
            .iter()
            .map(|a| a.raw.clone())
            .collect()
    };
    let (ab, aa) = (approve(before), approve(after));
    if ab != aa {
        lines.push(format!(
            "host commands approved without asking: [{}] instead of [{}]",
            list(&aa),
            list(&ab)
        ));
    }
    if before.escalation.enabled != after.escalation.enabled {
        lines.push(format!(
            "Host Escalation: {} instead of {}",
            on_off(after.escalation.enabled),
            on_off(before.escalation.enabled)
        ));
    }
    for (name, a) in &after.profiles {
        let Some(b) = before.profiles.get(name) else {
            continue;
        };
        let mut changes = Vec::new();
        if b.runtime != a.runtime {
            changes.push(format!("runtime {} instead of {}", runtime(a), runtime(b)));
        }
        if b.image != a.image {
            changes.push(format!("image {} instead of {}", a.image, b.image));
        }
        let ((allowed_b, refused_b), (allowed_a, refused_a)) = (reach(before, b), reach(after, a));
        for (what, set) in [
            ("now allows", allowed_a.difference(&allowed_b)),
            ("no longer allows", allowed_b.difference(&allowed_a)),
            ("now refuses", refused_a.difference(&refused_b)),
            ("no longer refuses", refused_b.difference(&refused_a)),
        ] {
            let set: Vec<&String> = set.collect();
            if !set.is_empty() {
                changes.push(format!("network {what} {}", list(set)));
            }
        }
        if changes.is_empty() {
            let net = if allowed_a.is_empty() {
                "no network".to_string()
            } else {
                format!("network {}", list(&allowed_a))
            };
            lines.push(format!(
                "profile {name}: unchanged: {}, image {}, {net}",
                runtime(a),
                a.image
            ));
        } else {
            lines.push(format!("profile {name}: {}", changes.join("; ")));
        }
    }
    let only_in = |x: &'_ Config, y: &Config| -> Vec<String> {
        x.profiles
            .keys()
            .filter(|n| !y.profiles.contains_key(*n))
            .cloned()
            .collect()
    };
    let removed = only_in(before, after);
    if !removed.is_empty() {
        lines.push(format!(
            "profiles removed: {} (their settings are in the backup)",
            list(removed)
        ));
    }
    let added = only_in(after, before);
    if !added.is_empty() {
        let agents = added.iter().any(|n| {
            crate::agents::agent_names()
                .into_iter()
                .any(|a| crate::agents::agent_image(a) == after.profiles[n].image)
        });
        let build = if agents {
            " (run one by name, e.g. `lazaret shell claude`, after building its agent's image once: `lazaret image build --agent NAME`)"
        } else {
            ""
        };
        lines.push(format!("profiles added: {}{build}", list(added)));
    }
    lines
}

fn on_off(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}
