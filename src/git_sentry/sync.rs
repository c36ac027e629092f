//! Branch propagation: the agent's branch reaches the host repository's
//! `refs/heads/lazaret/agent-<profile>`, and only that ref.
//!
//! The host never runs git *in* the agent's git directory (its config,
//! hooks and refs are the agent's to write). Instead Lazaret reads the one
//! ref itself, checks it is a plain object id, copies the agent's objects
//! into a private "shadow" git directory under the Domain Root whose config
//! is Lazaret's, and fetches from there (objects checked by fsck).
//!
//! Everything of the agent's is read without following a symlink anywhere
//! below the Domain Root (decisions.md D8): its `objects` folder or
//! `alternates` could otherwise point at another repository of the user's,
//! and the fetch would copy foreign objects into the host repository, where
//! the agent can fetch them. The agent's `alternates` are never read; the
//! shadow borrows only the host repository's own objects.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use std::ffi::OsStr;

use notify::{RecursiveMode, Watcher};

use super::{GitError, host_git, nofollow, run};

/// Reads `refs/heads/<branch>` of a git directory without running git:
/// the loose ref file, else packed-refs; a symlink anywhere below the
/// git directory's parent (trusted, the Domain Root's) is an error.
pub fn read_branch(gitdir: &Path, branch: &str) -> Result<Option<String>, GitError> {
    let (root, rel) = split_gitdir(gitdir);
    let bad = |what: String| move |e: std::io::Error| GitError::BadRef(format!("{what}: {e}"));
    let loose = rel.join("refs/heads").join(branch);
    let unread = |what: String| {
        move |e: nofollow::ReadError| match e {
            nofollow::ReadError::Io(e) => bad(what)(e),
            e => GitError::Unreadable(format!("{what}: {e}")),
        }
    };
    if let Some(bytes) = nofollow::read(root, &loose, nofollow::REF)
        .map_err(unread(format!("refs/heads/{branch}")))?
    {
        return check_oid(String::from_utf8_lossy(&bytes).trim()).map(Some);
    }
    let want = format!("refs/heads/{branch}");
    let found =
        nofollow::for_each_line(root, &rel.join("packed-refs"), nofollow::PACKED_REFS, |l| {
            let line = String::from_utf8_lossy(l);
            let (oid, name) = line.split_once(' ')?;
            (name == want).then(|| oid.to_string())
        })
        .map_err(unread("packed-refs".into()))?;
    found.map(|oid| check_oid(&oid)).transpose()
}

/// Makes `refs/heads/<branch>` of a git directory `oid` and points its
/// `HEAD` at that branch, without running git (a fork's copy of the
/// agent's git, issue 30): every folder is opened without following a
/// symlink, and both files are created anew (an existing branch of that
/// name is an error).
pub fn point_branch(gitdir: &Path, branch: &str, oid: &str) -> Result<(), GitError> {
    use std::ffi::OsStr;
    use std::io::Write;
    use std::os::fd::AsFd;

    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::Mode;
    let oid = check_oid(oid)?;
    let (root, rel) = split_gitdir(gitdir);
    let bad = |what: String| move |e: std::io::Error| GitError::BadRef(format!("{what}: {e}"));
    let create = |dir: &dyn AsFd, name: &str, text: &str| -> std::io::Result<()> {
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW;
        let fd = openat(
            dir.as_fd(),
            name,
            flags | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        )
        .map_err(std::io::Error::from)?;
        std::fs::File::from(fd).write_all(text.as_bytes())
    };
    let parts: Vec<&str> = branch.split('/').collect();
    let (last, folders) = parts
        .split_last()
        .ok_or_else(|| GitError::BadRef("empty branch".into()))?;
    let mut dir =
        nofollow::open_dir(root, &rel.join("refs/heads")).map_err(bad("refs/heads".into()))?;
    for folder in folders {
        match nix::sys::stat::mkdirat(&dir, *folder, Mode::from_bits_truncate(0o755)) {
            Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
            Err(e) => return Err(bad(format!("refs/heads/{folder}"))(e.into())),
        }
        dir = nofollow::open_dir_at(&dir, OsStr::new(folder))
            .map_err(bad(format!("refs/heads/{folder}")))?;
    }
    create(&dir, last, &format!("{oid}\n")).map_err(bad(format!("refs/heads/{branch}")))?;
    let git = nofollow::open_dir(root, rel).map_err(bad("the git directory".into()))?;
    match nofollow::unlink_at(&git, OsStr::new("HEAD")) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(bad("HEAD".into())(e)),
        _ => {}
    }
    create(&git, "HEAD", &format!("ref: refs/heads/{branch}\n")).map_err(bad("HEAD".into()))
}

/// A git directory as (trusted parent, its own name): the parent is
/// Lazaret's (the Domain Root or the clone's mount root), the rest the
/// agent's.
fn split_gitdir(gitdir: &Path) -> (&Path, &Path) {
    match (gitdir.parent(), gitdir.file_name()) {
        (Some(p), Some(n)) => (p, Path::new(n)),
        _ => (gitdir, Path::new("")),
    }
}

/// Copies the agent's objects (loose objects, packs and their indexes) into
/// `dest` (a shadow's `objects`), without following symlinks and without
/// reading its alternates. Files already there are kept (object and pack
/// names are content hashes).
pub fn copy_objects(gitdir: &Path, dest: &Path) -> Result<usize, GitError> {
    let (root, rel) = split_gitdir(gitdir);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |error| GitError::Io { path, error }
    };
    let objects = match nofollow::open_dir(root, &rel.join("objects")) {
        Ok(fd) => fd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io(gitdir)(e)),
    };
    let mut copied = 0;
    let copy = |dir: &std::os::fd::OwnedFd, name: &OsStr, to: &Path| -> Result<bool, GitError> {
        if to.exists() {
            return Ok(false);
        }
        let Some(mut from) = nofollow::open_file_at(dir, name).map_err(io(to))? else {
            return Ok(false);
        };
        let parent = to.parent().unwrap_or(to);
        std::fs::create_dir_all(parent).map_err(io(parent))?;
        let tmp = parent.join(format!(".tmp-{}", std::process::id()));
        let mut out = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        std::io::copy(&mut from, &mut out).map_err(io(&tmp))?;
        std::fs::rename(&tmp, to).map_err(io(to))?;
        Ok(true)
    };
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    for name in nofollow::names(&objects).map_err(io(gitdir))? {
        let n = name.to_string_lossy().into_owned();
        if hex(&n, 2) {
            let Ok(sub) = nofollow::open_dir_at(&objects, &name) else {
                continue;
            };
            for obj in nofollow::names(&sub).map_err(io(gitdir))? {
                let o = obj.to_string_lossy().into_owned();
                if (hex(&o, 38) || hex(&o, 62)) && copy(&sub, &obj, &dest.join(&n).join(&o))? {
                    copied += 1;
                }
            }
        } else if n == "pack" {
            let Ok(pack) = nofollow::open_dir_at(&objects, &name) else {
                continue;
            };
            let mut names: Vec<String> = nofollow::names(&pack)
                .map_err(io(gitdir))?
                .into_iter()
                .map(|p| p.to_string_lossy().into_owned())
                .filter(|p| p.starts_with("pack-") && (p.ends_with(".pack") || p.ends_with(".idx")))
                .collect();
            // Each .pack before its .idx: git looks for packs by their index.
            names.sort_by_key(|p| p.ends_with(".idx"));
            for p in names {
                if copy(&pack, OsStr::new(&p), &dest.join("pack").join(&p))? {
                    copied += 1;
                }
            }
        }
    }
    Ok(copied)
}

fn check_oid(s: &str) -> Result<String, GitError> {
    if (s.len() == 40 || s.len() == 64)
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        Ok(s.to_string())
    } else {
        let shown: String = s.chars().take(80).collect();
        Err(GitError::BadRef(lazaret_widgets::visible::visible(&shown)))
    }
}

/// Copies the agent's branch into the host repository.
#[derive(Debug, Clone)]
pub struct Propagator {
    /// The host workspace (a git working tree).
    pub host: PathBuf,
    pub agent_gitdir: PathBuf,
    pub branch: String,
    /// Lazaret's own git directory used as the fetch source.
    pub shadow: PathBuf,
}

impl Propagator {
    /// The propagator of a layout; `None` when the workspace is no repository.
    pub fn for_layout(layout: &super::WorkspaceLayout) -> Option<Self> {
        layout.host_dotgit.as_ref()?;
        Some(Propagator {
            host: layout.host.clone(),
            agent_gitdir: layout.agent_gitdir.clone()?,
            branch: layout.branch.clone(),
            shadow: layout.domain_root.join("shadow.git"),
        })
    }

    fn ensure_shadow(&self) -> Result<(), GitError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error| GitError::Io { path, error }
        };
        let info = self.shadow.join("objects/info");
        std::fs::create_dir_all(&info).map_err(io(&info))?;
        std::fs::create_dir_all(self.shadow.join("refs/heads")).map_err(io(&self.shadow))?;
        let files = [
            ("HEAD", format!("ref: refs/heads/{}\n", self.branch)),
            (
                "config",
                "[core]\n\trepositoryformatversion = 0\n\tbare = true\n".to_string(),
            ),
            // The host's own objects only; the agent's are copied in.
            (
                "objects/info/alternates",
                format!("{}\n", self.host.join(".git/objects").display()),
            ),
        ];
        for (name, text) in files {
            let p = self.shadow.join(name);
            std::fs::write(&p, text).map_err(io(&p))?;
        }
        Ok(())
    }

    /// Brings the host ref up to the agent's. Returns the new object id, or
    /// `None` when the agent has no such branch (the host ref is kept).
    pub fn sync(&self) -> Result<Option<String>, GitError> {
        let Some(oid) = read_branch(&self.agent_gitdir, &self.branch)? else {
            return Ok(None);
        };
        let host_ref = format!("refs/heads/{}", self.branch);
        let mut c = host_git(&self.host);
        c.args(["rev-parse", "--verify", "--quiet", &host_ref]);
        if run(c).ok().map(|s| s.trim().to_string()).as_deref() == Some(oid.as_str()) {
            return Ok(Some(oid));
        }
        self.ensure_shadow()?;
        copy_objects(&self.agent_gitdir, &self.shadow.join("objects"))?;
        let shadow_ref = self.shadow.join("refs/heads").join(&self.branch);
        if let Some(parent) = shadow_ref.parent() {
            std::fs::create_dir_all(parent).map_err(|error| GitError::Io {
                path: parent.to_path_buf(),
                error,
            })?;
        }
        std::fs::write(&shadow_ref, format!("{oid}\n")).map_err(|error| GitError::Io {
            path: shadow_ref.clone(),
            error,
        })?;
        let mut c = host_git(&self.host);
        c.args([
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-recurse-submodules",
        ])
        .arg(&self.shadow)
        .arg(format!("+{host_ref}:{host_ref}"));
        run(c)?;
        Ok(Some(oid))
    }

    /// Watches the agent's refs and syncs on every change until `stop`
    /// receives a message (or its sender is dropped). Each sync result is
    /// passed to `report`.
    pub fn watch(
        &self,
        stop: &mpsc::Receiver<()>,
        report: &mut dyn FnMut(Result<Option<String>, GitError>),
    ) -> Result<(), notify::Error> {
        let (tx, rx) = mpsc::channel();
        let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            // Reads (our own fetch reads the agent's objects) are no change.
            if let Ok(ev) = ev
                && !matches!(ev.kind, notify::EventKind::Access(_))
            {
                let _ = tx.send(());
            }
        })?;
        let heads = self.agent_gitdir.join("refs/heads");
        let _ = std::fs::create_dir_all(&heads);
        // refs/heads (loose refs, any depth) and the git dir itself
        // (packed-refs is replaced by rename there).
        watcher.watch(&heads, RecursiveMode::Recursive)?;
        watcher.watch(&self.agent_gitdir, RecursiveMode::NonRecursive)?;
        report(self.sync());
        loop {
            match stop.try_recv() {
                Ok(()) | Err(mpsc::TryRecvError::Disconnected) => return Ok(()),
                Err(mpsc::TryRecvError::Empty) => {}
            }
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(_) => {
                    // Coalesce a burst (a commit touches several files).
                    while rx.recv_timeout(Duration::from_millis(30)).is_ok() {}
                    report(self.sync());
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let g = dir.path();
        std::fs::create_dir_all(g.join("refs/heads/lazaret")).unwrap();
        assert_eq!(read_branch(g, "lazaret/agent-x").unwrap(), None);
        let oid = "0123456789abcdef0123456789abcdef01234567";
        std::fs::write(
            g.join("packed-refs"),
            format!("# pack-refs\n{oid} refs/heads/lazaret/agent-x\n"),
        )
        .unwrap();
        assert_eq!(
            read_branch(g, "lazaret/agent-x").unwrap().as_deref(),
            Some(oid)
        );
        std::fs::write(
            g.join("refs/heads/lazaret/agent-x"),
            "ref: refs/heads/main\n",
        )
        .unwrap();
        assert!(read_branch(g, "lazaret/agent-x").is_err());
        std::fs::remove_file(g.join("refs/heads/lazaret/agent-x")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", g.join("refs/heads/lazaret/agent-x")).unwrap();
        assert!(read_branch(g, "lazaret/agent-x").is_err());
        // Issue 40: a 1 GiB sparse ref, or packed-refs, is refused unread.
        std::fs::remove_file(g.join("refs/heads/lazaret/agent-x")).unwrap();
        let f = std::fs::File::create(g.join("refs/heads/lazaret/agent-x")).unwrap();
        f.set_len(1 << 30).unwrap();
        let e = read_branch(g, "lazaret/agent-x").unwrap_err().to_string();
        assert!(e.contains("larger than the 512 bytes"), "{e}");
        std::fs::remove_file(g.join("refs/heads/lazaret/agent-x")).unwrap();
        let f = std::fs::File::options()
            .write(true)
            .open(g.join("packed-refs"))
            .unwrap();
        f.set_len(1 << 30).unwrap();
        let e = read_branch(g, "lazaret/agent-x").unwrap_err().to_string();
        assert!(e.contains("packed-refs of 1073741824 bytes"), "{e}");
    }

    /// A fork's branch is made in a copy of the agent's git: created anew,
    /// HEAD pointed at it, nothing written through the agent's symlinks.
    #[test]
    fn a_branch_is_pointed_at_without_following_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let g = dir.path().join("agent.git");
        std::fs::create_dir_all(g.join("refs/heads")).unwrap();
        std::fs::write(g.join("HEAD"), "ref: refs/heads/lazaret/agent-x\n").unwrap();
        let oid = "0123456789abcdef0123456789abcdef01234567";
        point_branch(&g, "lazaret/agent-x-fork", oid).unwrap();
        assert_eq!(
            read_branch(&g, "lazaret/agent-x-fork").unwrap().as_deref(),
            Some(oid)
        );
        assert_eq!(
            std::fs::read_to_string(g.join("HEAD")).unwrap(),
            "ref: refs/heads/lazaret/agent-x-fork\n"
        );
        // Made once: an existing branch of that name is not overwritten.
        assert!(point_branch(&g, "lazaret/agent-x-fork", oid).is_err());
        // The agent's `refs/heads/other` is a symlink out of its git.
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, g.join("refs/heads/other")).unwrap();
        assert!(point_branch(&g, "other/agent-x", oid).is_err());
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        // Its HEAD a symlink: replaced by a file, the target untouched.
        let target = dir.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        std::fs::remove_file(g.join("HEAD")).unwrap();
        std::os::unix::fs::symlink(&target, g.join("HEAD")).unwrap();
        point_branch(&g, "lazaret/agent-y", oid).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        assert!(
            !std::fs::symlink_metadata(g.join("HEAD"))
                .unwrap()
                .is_symlink()
        );
        assert!(point_branch(&g, "lazaret/agent-z", "not-an-oid").is_err());
    }
}
