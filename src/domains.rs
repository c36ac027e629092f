//! Housekeeping of the Storage Root's domains: what each folder under
//! `{data_root}/domains` is, how big, when last used, and whether it runs;
//! and pruning the stopped ones.
//!
//! A Domain Root holds `anchor.json` (profile and workspace, written when
//! the domain starts) so a stopped domain can be named without its
//! containers.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::domain::{ANCHOR_FILE, AnchorRecord};
use crate::engine::LabelledDomain;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Containers run and a coordinator (or `sandbox up`'s caller) owns them.
    Running,
    /// No container: only its folder remains.
    Stopped,
    /// Containers run but no coordinator does.
    Orphaned,
    /// Its folder cannot say whose it is, or its containers are not running.
    Broken,
}

#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    pub hash: String,
    pub profile: Option<String>,
    pub workspace: Option<PathBuf>,
    pub size: u64,
    /// Seconds since the epoch.
    pub last_used: u64,
    pub state: State,
    pub root: PathBuf,
}

/// Bytes of the files under `dir` (not following symlinks, not even a
/// folder the agent swaps for one while it is walked: every folder is
/// opened by descriptor without following a link; unreadable parts, e.g.
/// State Anchor files of other sub-uids, are skipped).
pub fn size_of(dir: &Path) -> u64 {
    use crate::git_sentry::nofollow;
    let mut total = 0;
    let _ = nofollow::walk(dir, &mut |_, st, _, _| {
        if nofollow::kind(st) != nix::sys::stat::SFlag::S_IFDIR {
            total += u64::try_from(st.st_size).unwrap_or(0);
        }
        nofollow::Descend::Yes
    });
    total
}

fn last_used(root: &Path) -> u64 {
    ["", "coordinator.log", "state.redb", ANCHOR_FILE]
        .iter()
        .filter_map(|f| std::fs::metadata(root.join(f)).ok()?.modified().ok())
        .max()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs())
}

/// Every domain folder of `data_root`, with its state from `labelled`
/// (podman's containers) and `owned` (hashes whose coordinator lives).
pub fn list(data_root: &Path, labelled: &[LabelledDomain], owned: &[String]) -> Vec<Entry> {
    let dir = data_root.join("domains");
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return out;
    };
    for e in entries.flatten() {
        let root = e.path();
        if !root.is_dir() {
            continue;
        }
        let hash = e.file_name().to_string_lossy().into_owned();
        let record: Option<AnchorRecord> = std::fs::read_to_string(root.join(ANCHOR_FILE))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        let containers = labelled.iter().find(|l| l.hash == hash);
        let state = match (containers, &record) {
            (Some(c), _) if !c.running => State::Broken,
            (Some(_), _) if owned.contains(&hash) => State::Running,
            (Some(_), _) => State::Orphaned,
            (None, Some(_)) => State::Stopped,
            (None, None) => State::Broken,
        };
        out.push(Entry {
            profile: record
                .as_ref()
                .map(|r| r.profile.clone())
                .or_else(|| containers.map(|c| c.profile.clone())),
            workspace: record.map(|r| r.workspace),
            size: size_of(&root),
            last_used: last_used(&root),
            state,
            hash,
            root,
        });
    }
    out.sort_by(|a, b| a.hash.cmp(&b.hash));
    out
}

/// A Domain Root left by a start that failed before the coordinator could
/// say whose it is: no containers, no `anchor.json`, nothing but the
/// coordinator's log. Nothing in it is worth keeping but the log's reason.
pub fn failed_start(entry: &Entry, labelled: &[LabelledDomain]) -> bool {
    entry.state == State::Broken
        && entry.workspace.is_none()
        && !labelled.iter().any(|l| l.hash == entry.hash)
        && std::fs::read_dir(&entry.root).is_ok_and(|mut files| {
            files.all(|f| {
                f.is_ok_and(|f| {
                    f.file_name()
                        .to_str()
                        .is_some_and(|n| n.starts_with("coordinator.log"))
                        && f.file_type().is_ok_and(|t| t.is_file())
                })
            })
        })
}

/// The last line of a failed start's log: why it failed. (Read here: the
/// coordinator's log module sits above this one. A log that has just
/// rotated keeps its last line in `coordinator.log.1`.)
pub fn failure_reason(entry: &Entry) -> Option<String> {
    ["coordinator.log", "coordinator.log.1"]
        .iter()
        .find_map(|name| {
            let bytes = std::fs::read(entry.root.join(name)).ok()?;
            String::from_utf8_lossy(&bytes)
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_string)
        })
        .map(|l| lazaret_widgets::visible::visible(&l))
}

/// Parses an age: `30d`, `12h`, `45m`, `10s` (or bare seconds).
pub fn parse_age(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{text}` is not an age such as 30d, 12h or 45m"))?;
    let secs = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        "w" => 7 * 86400,
        _ => return Err(format!("`{text}` has an unknown unit (use s, m, h, d, w)")),
    };
    Ok(Duration::from_secs(n.saturating_mul(secs)))
}

/// The commit of the agent's branch in an isolated clone when the host
/// repository lacks it on `lazaret/agent-<profile>`: deleting the clone
/// would lose it. Git never runs in the clone (the agent wrote it): its ref
/// is read as a file, and the host's own repository answers.
pub fn unpropagated_commit(entry: &Entry) -> Option<String> {
    let (profile, workspace) = (entry.profile.as_ref()?, entry.workspace.as_ref()?);
    let clone_git = entry.root.join("workspace/.git");
    if !clone_git.is_dir() {
        return None;
    }
    let branch = format!("lazaret/agent-{profile}");
    let oid = match crate::git_sentry::sync::read_branch(&clone_git, &branch) {
        Ok(Some(oid)) => oid,
        Ok(None) => return None,
        // A ref we cannot read is not proof that nothing would be lost.
        Err(e) => return Some(e.to_string()),
    };
    let mut c = crate::git_sentry::host_git(workspace);
    c.args([
        "merge-base",
        "--is-ancestor",
        &oid,
        &format!("refs/heads/{branch}"),
    ]);
    let held = c.output().is_ok_and(|o| o.status.success());
    (!held).then_some(oid)
}

/// Deletes a Domain Root; files the sandbox's sub-uids own are removed
/// inside podman's user namespace.
pub fn remove_root(podman: &crate::podman::Podman, root: &Path) -> Result<(), String> {
    if std::fs::remove_dir_all(root).is_ok() || !root.exists() {
        return Ok(());
    }
    podman
        .run_with(
            [
                "unshare".as_ref(),
                "rm".as_ref(),
                "-rf".as_ref(),
                "--".as_ref(),
                root.as_os_str(),
            ],
            Duration::from_secs(120),
            None,
        )
        .map(drop)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_parse() {
        assert_eq!(parse_age("30d").unwrap(), Duration::from_secs(30 * 86400));
        assert_eq!(parse_age("12h").unwrap(), Duration::from_secs(12 * 3600));
        assert_eq!(parse_age("0").unwrap(), Duration::ZERO);
        assert!(parse_age("soon").is_err());
        assert!(parse_age("3y").is_err());
    }

    #[test]
    fn states_come_from_containers_and_the_anchor_record() {
        let dir = tempfile::tempdir().unwrap();
        let domains = dir.path().join("domains");
        for (h, record) in [("aaa", true), ("bbb", true), ("ccc", false), ("ddd", true)] {
            std::fs::create_dir_all(domains.join(h)).unwrap();
            if record {
                std::fs::write(
                    domains.join(h).join(ANCHOR_FILE),
                    r#"{"profile":"p","workspace":"/w"}"#,
                )
                .unwrap();
            }
        }
        let labelled = |hash: &str, running| LabelledDomain {
            hash: hash.into(),
            profile: "p".into(),
            workspace: "/w".into(),
            runtime: "runc".into(),
            containers: vec![format!("lazaret-coord-{hash}")],
            running,
        };
        let got = list(
            dir.path(),
            &[labelled("aaa", true), labelled("ddd", true)],
            &["aaa".to_string()],
        );
        let states: Vec<(&str, State)> = got.iter().map(|e| (e.hash.as_str(), e.state)).collect();
        assert_eq!(
            states,
            [
                ("aaa", State::Running),
                ("bbb", State::Stopped),
                ("ccc", State::Broken),
                ("ddd", State::Orphaned)
            ]
        );
    }
}
