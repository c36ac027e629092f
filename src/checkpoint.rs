//! Checkpoints of a running Agent Sandbox (issue 30): gVisor saves the
//! whole sandbox, every process with its memory and open files, while it
//! keeps running. Each checkpoint lives in the Domain Root,
//! `checkpoints/NAME/` (0700): `memory/` is runsc's image, `checkpoint.json`
//! what Lazaret knows of it.
//!
//! What can be saved (measured with runsc 20240729): processes that
//! descend from the sandbox's first process (the Session Host is init's
//! child for this reason; a `podman exec` process is not brought back by a
//! restore, so a checkpoint refuses while a plain session runs), and no
//! connected socket to the host (the Session Host lets go of its
//! connection for the save, the coordinator refuses while an escalation
//! request is open).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::podman::Podman;

/// What Lazaret records of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub name: String,
    /// Seconds since the Unix epoch.
    pub created: u64,
    /// The size of runsc's image on disk.
    pub bytes: u64,
    /// How long the sandbox was held for it (its Session Host without a
    /// connection, its processes paused by runsc for part of it).
    pub held_ms: u64,
    /// How long runsc held its processes paused (the save of the memory
    /// and the copy of the kept folders).
    #[serde(default)]
    pub paused_ms: u64,
    /// The Session Host's token at the save: the restored host greets
    /// with it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host_token: String,
    /// The sandbox's `TERM` (its terminfo entry is one of its mounts, and
    /// a restore needs the mounts the saved sandbox had).
    #[serde(default)]
    pub term: String,
}

/// What a domain's start must restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restore {
    /// The checkpoint's name.
    #[serde(default)]
    pub checkpoint: String,
    /// runsc's image folder.
    pub memory: PathBuf,
    /// The Domain Root's folders as the checkpoint kept them (see
    /// [`kept_folders`]).
    #[serde(default)]
    pub files: PathBuf,
    /// The `TERM` the saved sandbox was started with.
    pub term: String,
    /// For a fork: the domain it was forked from (its name and hash).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<String>,
}

/// The domain's checkpoints folder.
pub fn root(domain_root: &Path) -> PathBuf {
    domain_root.join("checkpoints")
}

/// A checkpoint's folder.
pub fn dir(domain_root: &Path, name: &str) -> PathBuf {
    root(domain_root).join(name)
}

/// A name the user may give: letters, digits, `.`, `_` and `-`, 1 to 64,
/// not starting with a dot (it names a folder).
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&name.len())
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a checkpoint name: use 1 to 64 letters, digits, `.`, `_` or `-`, not starting with `.`"
        ))
    }
}

/// The name given when none is: the UTC time, to the second.
pub fn default_name(now: std::time::SystemTime) -> String {
    let secs = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// Howard Hinnant's days-to-civil conversion (proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Where `lazaret restore` asks the domain's next start to restore a
/// checkpoint (its name).
fn request_file(domain_root: &Path) -> PathBuf {
    domain_root.join("restore-request")
}

/// Asks the domain's next start to come back from checkpoint `c` (one of
/// this domain's), and the coordinator to take its Session Host back (its
/// token). `forked_from` names the domain a fork comes from.
pub fn request(
    domain_root: &Path,
    c: &Checkpoint,
    forked_from: Option<String>,
) -> Result<(), String> {
    let write = |path: PathBuf, text: &str| {
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    write(domain_root.join("session-host.token"), &c.host_token)?;
    let request = Restore {
        checkpoint: c.name.clone(),
        memory: dir(domain_root, &c.name).join(MEMORY),
        files: dir(domain_root, &c.name).join(FILES),
        term: c.term.clone(),
        forked_from,
    };
    write(
        request_file(domain_root),
        &serde_json::to_string(&request).map_err(|e| e.to_string())?,
    )
}

/// The checkpoint the domain's start must restore, once: the request is
/// gone after this call. None without a request, or when it names no
/// checkpoint of this domain.
pub fn take_request(domain_root: &Path) -> Option<Restore> {
    let file = request_file(domain_root);
    let text = std::fs::read_to_string(&file).ok()?;
    let _ = std::fs::remove_file(&file);
    let request: Restore = serde_json::from_str(&text).ok()?;
    // Only a checkpoint of this domain.
    let root = root(domain_root);
    (request.memory.starts_with(&root)
        && request.memory.is_dir()
        && (request.files.as_os_str().is_empty() || request.files.starts_with(&root)))
    .then_some(request)
}

/// The domain's checkpoints, oldest first.
pub fn list(domain_root: &Path) -> Vec<Checkpoint> {
    let Ok(entries) = std::fs::read_dir(root(domain_root)) else {
        return Vec::new();
    };
    let mut all: Vec<Checkpoint> = entries
        .filter_map(|e| {
            let text = std::fs::read_to_string(e.ok()?.path().join("checkpoint.json")).ok()?;
            serde_json::from_str(&text).ok()
        })
        .collect();
    all.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
    all
}

/// A checkpoint's runsc image, in its folder.
const MEMORY: &str = "memory";
/// A checkpoint's copy of the Domain Root's kept folders, in its folder.
const FILES: &str = "files";

/// What of the Domain Root a checkpoint keeps beside the memory: the
/// agent's clone (`workspace`, isolated mode) or git directory
/// (`agent.git`, direct mode), the State Anchor's upper folders
/// (`*_changes`), and the list of mount points Lazaret made in the
/// workspace (the saved sandbox's mount table follows it). The host folder
/// of direct mode is the user's, and no part of a checkpoint.
pub fn kept_folders(domain_root: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(domain_root) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let kind = e.file_type().ok()?;
            let name = e.file_name().into_string().ok()?;
            let folder = name == "workspace" || name == "agent.git" || name.ends_with("_changes");
            let file = name == crate::domain::MOUNTPOINTS_FILE;
            ((folder && kind.is_dir()) || (file && kind.is_file())).then_some(name)
        })
        .collect();
    names.sort();
    names
}

/// Copying the kept folders may take a while for a big clone.
const COPY_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// Saves the running sandbox `sandbox` into the checkpoint folder `dir`
/// (which must not exist): runsc's own `checkpoint` of its memory and
/// processes, and a copy of the Domain Root's [`kept_folders`], both while
/// runsc holds the sandbox paused, so the files are those the memory
/// knows. Runs through the runtime wrapper podman runs the sandbox with,
/// in the user's namespace (where podman's runsc keeps its state, and
/// where files of the agent's other ids can be copied as they are). The
/// sandbox runs on after, whatever failed. Returns the checkpoint's size
/// and how long the sandbox was paused.
pub fn save(
    podman: &Podman,
    sandbox: &str,
    wrapper: &str,
    domain_root: &Path,
    dir: &Path,
) -> Result<(u64, u64), String> {
    let id = podman
        .run(["inspect", "--format", "{{.Id}}", sandbox])
        .map_err(|e| format!("cannot find the sandbox {sandbox}: {e}"))?;
    let id = id.trim();
    let (memory, files) = (dir.join(MEMORY), dir.join(FILES));
    create_private_dir(&memory)?;
    create_private_dir(&files)?;
    let runsc = |args: &[&str]| {
        let mut all = vec!["unshare", wrapper];
        all.extend_from_slice(args);
        podman.run(all)
    };
    runsc(&["pause", id]).map_err(|e| format!("runsc could not pause the sandbox: {e}"))?;
    let paused = std::time::Instant::now();
    let image = format!("--image-path={}", memory.display());
    let saved = runsc(&["checkpoint", &image, "--leave-running", id])
        .map_err(|e| format!("runsc could not save the sandbox: {e}"))
        .and_then(|_| copy_folders(podman, domain_root, &kept_folders(domain_root), &files));
    let resumed = runsc(&["resume", id]);
    let paused_ms = paused.elapsed().as_millis() as u64;
    saved?;
    resumed.map_err(|e| format!("the sandbox was saved, but runsc could not resume it: {e}"))?;
    Ok((size_of(dir), paused_ms))
}

/// Copies the folders `names` of `from` into `to`, as they are (owners,
/// modes, times), in the user's namespace.
fn copy_folders(podman: &Podman, from: &Path, names: &[String], to: &Path) -> Result<(), String> {
    if names.is_empty() {
        return Ok(());
    }
    let mut args: Vec<std::ffi::OsString> = ["unshare", "cp", "-a", "--reflink=auto", "--"]
        .iter()
        .map(Into::into)
        .collect();
    args.extend(names.iter().map(|n| from.join(n).into_os_string()));
    args.push(to.into());
    podman
        .run_with(args, COPY_LIMIT, None)
        .map(drop)
        .map_err(|e| format!("cannot copy the Domain Root's folders: {e}"))
}

/// Puts the Domain Root's kept folders back as `files` (a checkpoint's)
/// holds them, the domain being down: each is replaced whole, and a State
/// Anchor's overlay work folder is emptied with its upper folder.
pub fn put_back(podman: &Podman, domain_root: &Path, files: &Path) -> Result<(), String> {
    let names = kept_folders(files);
    if names.is_empty() {
        return Ok(());
    }
    let mut gone: Vec<std::ffi::OsString> = ["unshare", "rm", "-rf", "--one-file-system", "--"]
        .iter()
        .map(Into::into)
        .collect();
    for n in &names {
        gone.push(domain_root.join(n).into());
        if let Some(slug) = n.strip_suffix("_changes") {
            gone.push(domain_root.join(format!("{slug}_work")).into());
        }
    }
    podman
        .run_with(gone, COPY_LIMIT, None)
        .map_err(|e| format!("cannot remove the Domain Root's folders: {e}"))?;
    copy_folders(podman, files, &names, domain_root)
}

/// Removes a checkpoint's folder, files of the agent's other ids too (in
/// the user's namespace).
pub fn remove(podman: &Podman, dir: &Path) -> Result<(), String> {
    if std::fs::symlink_metadata(dir).is_err() {
        return Ok(());
    }
    let path = dir.as_os_str();
    podman
        .run_with(
            [
                "unshare".as_ref(),
                "rm".as_ref(),
                "-rf".as_ref(),
                "--one-file-system".as_ref(),
                "--".as_ref(),
                path,
            ],
            COPY_LIMIT,
            None,
        )
        .map(drop)
        .map_err(|e| format!("cannot remove {}: {e}", dir.display()))
}

/// Copies checkpoint `name` of the domain at `from` into the domain at `to`
/// (a fork), as it is.
pub fn copy_to(podman: &Podman, from: &Path, name: &str, to: &Path) -> Result<(), String> {
    let into = root(to);
    create_private_dir(&into)?;
    copy_folders(podman, &root(from), &[name.to_string()], &into)
}

/// Creates `dir` (and its parents) readable by the user alone.
pub fn create_private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

/// A size for people: `812 B`, `233 KiB`, `1.5 MiB`, `2.1 GiB`.
pub fn show_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / f64::from(1u32 << 30)),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20)),
        n if n >= 1 << 10 => format!("{:.0} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

/// Bytes of the files under `path`.
fn size_of(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| size_of(&e.path()))
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_folder_names_and_default_to_the_time() {
        assert!(check_name("before-migration_2.1").is_ok());
        for bad in ["", ".hidden", "a/b", "..", "x y", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_796_300_000);
        assert_eq!(default_name(t), "20261203-121320");
        assert_eq!(default_name(std::time::UNIX_EPOCH), "19700101-000000");
    }
}
