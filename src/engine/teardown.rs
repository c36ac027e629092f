//! Verified teardown (decisions.md D8): after the containers are removed and
//! the State Anchor unmounted, nothing of the domain may remain: no
//! container podman knows, no runtime process (runsc sandbox and gofer,
//! conmon, a runc container's init), no State Anchor mount. What remains is
//! named, recorded as a broken-domain marker in the runtime folder (for
//! `lazaret status`), and `down` fails.
//!
//! Runtime processes are found by the container IDs in their command lines
//! (runsc and conmon carry them) and by the recorded init PIDs with their
//! start times, from podman now and from a footprint written at start, so
//! processes podman has forgotten are still found.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Engine, LABEL_DOMAIN, state_anchor};
use crate::domain::DomainAnchor;
use crate::rundir::RuntimeDir;

/// What identifies a domain's runtime processes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Footprint {
    /// Full container IDs.
    pub ids: Vec<String>,
    /// (pid, start time in clock ticks since boot) of container inits and conmons.
    pub pids: Vec<(i32, u64)>,
    /// The host workspace was shared read-write (direct mode): the agent
    /// may have left files there owned by subordinate ids.
    #[serde(default)]
    pub direct: Option<PathBuf>,
}

/// One container as `podman container inspect` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspected {
    pub id: String,
    /// Its init process (none once stopped).
    pub pid: Option<i32>,
    pub conmon: Option<i32>,
    /// The `--runtime` it was started with.
    pub runtime: String,
}

/// `ID PID CONMON_PID RUNTIME` lines; the runtime's path may hold spaces.
fn parse_inspected(out: &str) -> Vec<Inspected> {
    out.lines()
        .filter_map(|line| {
            let mut words = line.splitn(4, ' ');
            let id = words.next().filter(|id| !id.is_empty())?.to_string();
            let mut next_pid = || words.next()?.parse::<i32>().ok().filter(|p| *p > 0);
            let (pid, conmon) = (next_pid(), next_pid());
            Some(Inspected {
                id,
                pid,
                conmon,
                runtime: words.next().unwrap_or("").trim().to_string(),
            })
        })
        .collect()
}

impl Footprint {
    /// The IDs of `inspected` and their live processes.
    fn of(inspected: &[Inspected]) -> Footprint {
        let mut fp = Footprint::default();
        for c in inspected {
            fp.ids.push(c.id.clone());
            for pid in [c.pid, c.conmon].into_iter().flatten() {
                if let Some(t) = start_time(pid) {
                    fp.pids.push((pid, t));
                }
            }
        }
        fp
    }

    fn merge(&mut self, other: Footprint) {
        for id in other.ids {
            if !self.ids.contains(&id) {
                self.ids.push(id);
            }
        }
        for p in other.pids {
            if !self.pids.contains(&p) {
                self.pids.push(p);
            }
        }
        if self.direct.is_none() {
            self.direct = other.direct;
        }
    }
}

/// A domain whose teardown left something behind, as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokenDomain {
    pub hash: String,
    pub profile: String,
    pub workspace: String,
    /// What is left, one line each.
    pub left: Vec<String>,
}

/// The footprint file in a Domain Root.
fn footprint_file(domain_root: &Path) -> PathBuf {
    domain_root.join("footprint.json")
}

/// The broken-domain marker of `hash` in the runtime folder.
pub fn marker(rundir: &RuntimeDir, hash: &str) -> PathBuf {
    rundir.path().join(format!("broken_{hash}.json"))
}

/// Every broken-domain marker in the runtime folder.
pub fn broken_domains(rundir: &RuntimeDir) -> Vec<BrokenDomain> {
    let mut out: Vec<BrokenDomain> = std::fs::read_dir(rundir.path())
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.starts_with("broken_") && n.ends_with(".json"))
                })
                .filter_map(|e| std::fs::read(e.path()).ok())
                .filter_map(|b| serde_json::from_slice(&b).ok())
                .collect()
        })
        .unwrap_or_default();
    out.sort_by(|a: &BrokenDomain, b| a.hash.cmp(&b.hash));
    out
}

/// Start time of `pid` (field 22 of /proc/PID/stat), if it lives.
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(") ")?.1;
    let mut fields = rest.split(' ');
    if fields.next()? == "Z" {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// What a process calls itself: argv[0]'s file name (runsc's processes
/// are all `exe` by comm, but `runsc-sandbox`, `runsc-gofer` by argv[0]).
fn comm(pid: i32) -> String {
    let argv0 = std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .and_then(|c| {
            let first = c.split(|b| *b == 0).next()?.to_vec();
            let s = String::from_utf8_lossy(&first).into_owned();
            let name = s.rsplit('/').next()?.to_string();
            (!name.is_empty()).then_some(name)
        });
    argv0.unwrap_or_else(|| {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".into())
    })
}

/// Live processes that belong to `fp`: (pid, name).
pub fn processes(fp: &Footprint) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let by_pid = fp
            .pids
            .iter()
            .any(|(p, t)| *p == pid && start_time(pid) == Some(*t));
        let by_id = !fp.ids.is_empty()
            && std::fs::read(entry.path().join("cmdline")).is_ok_and(|c| {
                let c = String::from_utf8_lossy(&c);
                fp.ids.iter().any(|id| c.contains(id.as_str()))
            });
        if (by_pid || by_id) && start_time(pid).is_some() {
            out.push((pid, comm(pid)));
        }
    }
    out.sort();
    out
}

impl Engine {
    /// What podman says of containers `names_or_ids`, in one call: each
    /// one's full ID, its init and conmon PIDs, and its OCI runtime.
    pub(super) fn inspect_containers(
        &self,
        names_or_ids: &[String],
    ) -> Result<Vec<Inspected>, crate::podman::PodmanError> {
        if names_or_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut args = vec![
            "container".to_string(),
            "inspect".into(),
            "--format".into(),
            "{{.Id}} {{.State.Pid}} {{.State.ConmonPid}} {{.OCIRuntime}}".into(),
        ];
        args.extend(names_or_ids.iter().cloned());
        Ok(parse_inspected(&self.podman.run(&args)?))
    }

    /// Records the footprint of a started domain (its containers as
    /// `inspected`) for a teardown that podman cannot help with.
    pub(super) fn record_footprint(
        &self,
        anchor: &DomainAnchor,
        inspected: &[Inspected],
        direct: Option<&Path>,
    ) {
        let mut fp = Footprint::of(inspected);
        fp.direct = direct.map(Path::to_path_buf);
        let path = footprint_file(&self.domain_root(anchor));
        if let Ok(text) = serde_json::to_vec(&fp) {
            let _ = crate::rundir::write_private(&path, &text);
        }
    }

    /// The domain's containers podman knows: (full ID, name), one call.
    pub(super) fn domain_containers(
        &self,
        anchor: &DomainAnchor,
    ) -> Result<Vec<(String, String)>, crate::podman::PodmanError> {
        let out = self.podman.run([
            "ps",
            "-a",
            "--no-trunc",
            "--filter",
            &format!("label={LABEL_DOMAIN}={}", anchor.hash()),
            "--format",
            "{{.ID}} {{.Names}}",
        ])?;
        Ok(out
            .lines()
            .filter_map(|l| l.trim().split_once(' '))
            .map(|(id, name)| (id.to_string(), name.trim().to_string()))
            .collect())
    }

    /// The footprint to check at teardown: the recorded one plus the IDs
    /// of the containers podman knows now, and those containers' names
    /// (an error when podman cannot say).
    pub(super) fn teardown_footprint(
        &self,
        anchor: &DomainAnchor,
    ) -> (Footprint, Result<Vec<String>, String>) {
        let mut fp: Footprint = std::fs::read(footprint_file(&self.domain_root(anchor)))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let names = match self.domain_containers(anchor) {
            Ok(list) => {
                fp.merge(Footprint {
                    ids: list.iter().map(|(id, _)| id.clone()).collect(),
                    ..Footprint::default()
                });
                Ok(list.into_iter().map(|(_, name)| name).collect())
            }
            Err(e) => Err(e.to_string()),
        };
        (fp, names)
    }

    /// Checks that nothing of the domain remains; kills runtime processes
    /// that podman no longer knows (orphans of a lost runtime), then lists
    /// whatever is still there.
    /// `remaining` is what podman says is left of the domain's containers;
    /// the State Anchor's mounts are checked when `check_mounts` (a clean
    /// unmount of every mount found has just verified them otherwise).
    pub(super) fn leftovers(
        &self,
        anchor: &DomainAnchor,
        fp: &Footprint,
        remaining: &Result<Vec<String>, String>,
        check_mounts: bool,
    ) -> Vec<String> {
        let mut left = Vec::new();
        let podman_knows_some = match remaining {
            Ok(names) => {
                for n in names {
                    left.push(format!("container {n} (podman still has it)"));
                }
                !names.is_empty()
            }
            Err(e) => {
                left.push(format!(
                    "unknown: podman cannot say which containers remain ({e})"
                ));
                true
            }
        };
        let mut procs = processes(fp);
        if !procs.is_empty() && !podman_knows_some {
            // Nobody will ever stop these: they are this domain's, by
            // container ID or recorded PID and start time.
            for (pid, _) in &procs {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            while !procs.is_empty() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
                procs = processes(fp);
            }
        }
        for (pid, name) in procs {
            left.push(format!("runtime process {pid} ({name})"));
        }
        if !check_mounts {
            return left;
        }
        match state_anchor::mounted_under(&self.podman, &self.domain_root(anchor)) {
            Ok(mounts) => {
                for m in mounts {
                    left.push(format!("State Anchor mount {}", m.display()));
                }
            }
            Err(e) => left.push(format!(
                "unknown: the State Anchor mounts cannot be checked ({e})"
            )),
        }
        left
    }

    /// Gives the user back what the agent left in `dir` owned by a
    /// subordinate id (a `chown` inside the sandbox, or a folder made mode
    /// 000), so the user can change or remove it: through the user's podman
    /// namespace, where the user is root, such entries are made the user's,
    /// and folders among them get the user's rwx. Entries of other host
    /// users (unmapped there: the overflow id 65534) and the user's own are
    /// left alone. Symlinks are never followed and no other file system is
    /// entered: Lazaret's own walk does it (`lazaret reclaim`), changing
    /// each entry by its descriptor or with no-follow calls on its name in
    /// a folder opened without following links (`find -exec chmod` would
    /// follow a symlink another domain on the same folder swapped in).
    pub fn reclaim(&self, dir: &Path) -> Result<(), crate::podman::PodmanError> {
        if !dir.is_dir() {
            return Ok(());
        }
        let me = std::env::current_exe().map_err(|e| crate::podman::PodmanError::Failed {
            args: format!("unshare lazaret reclaim -- {}", dir.display()),
            status: "not started".into(),
            stderr: format!("cannot find the lazaret program: {e}"),
        })?;
        let (me, d) = (me.to_string_lossy(), dir.to_string_lossy());
        self.podman.run_with(
            ["unshare", &me, "reclaim", "--", &d],
            Duration::from_secs(600),
            None,
        )?;
        Ok(())
    }

    /// Tears down what [`Engine::down`] leaves and removes the Domain Root
    /// and the domain's escalation folder, through the user's podman
    /// namespace so files owned by subordinate ids or with no permissions
    /// go too.
    pub fn purge(&self, anchor: &DomainAnchor) -> Result<Vec<PathBuf>, super::EngineError> {
        self.down(anchor)?;
        let mut removed = Vec::new();
        for dir in [
            self.domain_root(anchor),
            anchor.escalation_dir(&self.socket_dir),
        ] {
            if std::fs::symlink_metadata(&dir).is_err() {
                continue;
            }
            self.podman.run_with(
                [
                    "unshare",
                    "rm",
                    "-rf",
                    "--one-file-system",
                    "--",
                    &dir.to_string_lossy(),
                ],
                Duration::from_secs(600),
                None,
            )?;
            removed.push(dir);
        }
        Ok(removed)
    }

    /// Checks, after a Session Coordinator's teardown, that nothing of the
    /// domain remains (the same check as [`Engine::down`]'s, without
    /// removing anything podman still has).
    pub fn verify_down(&self, anchor: &DomainAnchor) -> Result<(), super::EngineError> {
        let (fp, remaining) = self.teardown_footprint(anchor);
        let left = self.leftovers(anchor, &fp, &remaining, true);
        self.record_teardown(anchor, &left);
        if left.is_empty() {
            Ok(())
        } else {
            Err(super::EngineError::Teardown(not_down_message(
                anchor,
                &left,
                &[],
            )))
        }
    }

    /// Records the outcome of a teardown: a marker when something is left,
    /// none (and no footprint) when the domain is gone.
    pub(super) fn record_teardown(&self, anchor: &DomainAnchor, left: &[String]) {
        let marker = marker(&self.rundir, anchor.hash());
        if left.is_empty() {
            let _ = std::fs::remove_file(&marker);
            let _ = std::fs::remove_file(footprint_file(&self.domain_root(anchor)));
            return;
        }
        let broken = BrokenDomain {
            hash: anchor.hash().to_string(),
            profile: anchor.name(),
            workspace: anchor.workspace().display().to_string(),
            left: left.to_vec(),
        };
        if let Ok(text) = serde_json::to_vec_pretty(&broken) {
            let _ = crate::rundir::write_private(&marker, &text);
        }
    }
}

/// The one message for a teardown that left something (decisions.md D8).
pub fn not_down_message(anchor: &DomainAnchor, left: &[String], failures: &[String]) -> String {
    let mut msg = format!("domain {} is NOT down; left:", anchor.hash());
    for l in left {
        msg.push_str(&format!("\n  - {l}"));
    }
    if !failures.is_empty() {
        msg.push_str(&format!("\nwhile tearing down: {}", failures.join("; ")));
    }
    msg.push_str(
        "\nFix the cause (`lazaret doctor` checks podman and the runtimes), then run `lazaret down` again; until then `lazaret status` lists the domain as broken.",
    );
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspect_lines_keep_a_runtime_path_with_spaces() {
        let out = "abc 42 41 /home/a b/.local/share/lazaret/runtime/runsc\ndef 0 7 runc\n";
        let got = parse_inspected(out);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].id, "abc");
        assert_eq!((got[0].pid, got[0].conmon), (Some(42), Some(41)));
        assert_eq!(
            got[0].runtime,
            "/home/a b/.local/share/lazaret/runtime/runsc"
        );
        // A stopped container has PID 0: none.
        assert_eq!((got[1].pid, got[1].conmon), (None, Some(7)));
        assert_eq!(got[1].runtime, "runc");
    }

    #[test]
    fn finds_a_process_by_id_in_its_command_line_and_by_pid() {
        let id = "f00dfeedf00dfeedf00dfeedf00dfeedf00dfeedf00dfeedf00dfeedf00dfeed";
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30", id])
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // /proc shows the child once it has exec'd.
        let deadline = Instant::now() + Duration::from_secs(5);
        let fp = Footprint {
            ids: vec![id.into()],
            ..Footprint::default()
        };
        while !processes(&fp).iter().any(|(p, _)| *p == pid) {
            assert!(Instant::now() < deadline, "not found by id");
            std::thread::sleep(Duration::from_millis(20));
        }
        let by_pid = Footprint {
            pids: vec![(pid, start_time(pid).unwrap())],
            ..Footprint::default()
        };
        assert_eq!(processes(&by_pid).len(), 1);
        // A recycled PID (other start time) is not ours.
        let stale = Footprint {
            pids: vec![(pid, start_time(pid).unwrap() + 1)],
            ..Footprint::default()
        };
        assert!(processes(&stale).is_empty());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(processes(&fp).is_empty());
    }
}
