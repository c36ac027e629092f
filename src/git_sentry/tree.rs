//! What the agent did to a folder it writes directly, seen without git
//! (decisions.md D8): a metadata snapshot of the workspace taken when the
//! domain first started, compared with the folder now; and the clean-up of
//! filesystem objects that must not survive on the host (set-user-ID and
//! set-group-ID bits, device nodes).
//!
//! Change is judged by `ctime` among others: the agent can set `mtime` but
//! not `ctime`, which every write, chmod or rename moves.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use nix::sys::stat::SFlag;

use super::nofollow::{self, Descend};

/// One entry's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub mode: u32,
    pub size: i64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
    pub ino: u64,
}

impl Stat {
    fn of(st: &nix::sys::stat::FileStat) -> Self {
        Stat {
            mode: st.st_mode,
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
            ino: st.st_ino,
        }
    }

    pub fn kind(&self) -> SFlag {
        SFlag::from_bits_truncate(self.mode) & SFlag::S_IFMT
    }
}

/// Path (relative to the workspace) → metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot(pub BTreeMap<PathBuf, Stat>);

impl Snapshot {
    /// Every entry below `root`, not entering a top-level `.git` folder when
    /// `host_repo` (the host's own repository, read-only in the sandbox).
    pub fn take(root: &Path, host_repo: bool) -> io::Result<Self> {
        let mut map = BTreeMap::new();
        nofollow::walk(root, &mut |rel, st, _, _| {
            map.insert(rel.to_path_buf(), Stat::of(st));
            if host_repo && rel == Path::new(".git") {
                Descend::No
            } else {
                Descend::Yes
            }
        })?;
        Ok(Snapshot(map))
    }

    /// Paths added, removed or changed since `self`.
    pub fn changed_since(&self, now: &Snapshot) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        for (p, s) in &now.0 {
            let same = self.0.get(p).is_some_and(|old| {
                // A folder's own times move whenever an entry is added or
                // removed; those entries are reported themselves.
                old.kind() == s.kind()
                    && old.mode == s.mode
                    && old.ino == s.ino
                    && (s.kind() == SFlag::S_IFDIR
                        || (old.size == s.size && old.mtime == s.mtime && old.ctime == s.ctime))
            });
            if !same {
                out.push(p.clone());
            }
        }
        out.extend(self.0.keys().filter(|p| !now.0.contains_key(*p)).cloned());
        out.sort();
        out
    }

    /// Writes the snapshot to `file` (one entry a line, the path in hex).
    pub fn save(&self, file: &Path) -> io::Result<()> {
        let mut text = String::new();
        for (p, s) in &self.0 {
            let path_hex = hex::encode(p.as_os_str().as_bytes());
            text.push_str(&format!(
                "{} {} {} {} {} {} {} {path_hex}\n",
                s.mode, s.size, s.mtime.0, s.mtime.1, s.ctime.0, s.ctime.1, s.ino
            ));
        }
        let tmp = file.with_extension("tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, file)
    }

    /// Reads a snapshot written by [`Snapshot::save`]; `None` when absent.
    pub fn load(file: &Path) -> io::Result<Option<Self>> {
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let bad = || io::Error::other(format!("{} is damaged", file.display()));
        let mut map = BTreeMap::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() != 8 {
                return Err(bad());
            }
            let n = |i: usize| f[i].parse::<i64>().map_err(|_| bad());
            let bytes: Option<Vec<u8>> = (0..f[7].len())
                .step_by(2)
                .map(|i| u8::from_str_radix(f[7].get(i..i + 2)?, 16).ok())
                .collect();
            let path = PathBuf::from(OsString::from_vec(bytes.ok_or_else(bad)?));
            map.insert(
                path,
                Stat {
                    mode: f[0].parse().map_err(|_| bad())?,
                    size: n(1)?,
                    mtime: (n(2)?, n(3)?),
                    ctime: (n(4)?, n(5)?),
                    ino: f[6].parse().map_err(|_| bad())?,
                },
            );
        }
        Ok(Some(Snapshot(map)))
    }
}

/// A filesystem object that must not survive on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trap {
    /// Set-user-ID or set-group-ID bit; `fixed` when the bit was removed.
    Setuid { path: PathBuf, fixed: bool },
    /// A character or block device; `fixed` when it was removed.
    Device { path: PathBuf, fixed: bool },
}

impl Trap {
    pub fn path(&self) -> &Path {
        match self {
            Trap::Setuid { path, .. } | Trap::Device { path, .. } => path,
        }
    }
    pub fn fixed(&self) -> bool {
        match self {
            Trap::Setuid { fixed, .. } | Trap::Device { fixed, .. } => *fixed,
        }
    }
}

/// Removes set-user-ID/set-group-ID bits and device nodes below `root`,
/// never following a symlink. `overlay_upper` keeps the 0/0 character
/// devices an overlay upper folder uses as whiteouts. Returns what was
/// found (paths relative to `root`); what could not be fixed here (owned by
/// a subordinate id) has `fixed: false`.
pub fn strip(root: &Path, overlay_upper: bool, baseline: Option<&Snapshot>) -> Vec<Trap> {
    let mut traps = Vec::new();
    let _ = nofollow::walk(root, &mut |rel, st, dir, name| {
        let kind = nofollow::kind(st);
        let path = rel.to_path_buf();
        // The user's own, as they were before the domain first started.
        if baseline.is_some_and(|b| b.0.get(rel) == Some(&Stat::of(st))) {
            return Descend::Yes;
        }
        if kind == SFlag::S_IFCHR || kind == SFlag::S_IFBLK {
            let whiteout = kind == SFlag::S_IFCHR && st.st_rdev == 0;
            if !(overlay_upper && whiteout) {
                let fixed = nofollow::unlink_at(dir, name).is_ok();
                traps.push(Trap::Device { path, fixed });
            }
        } else if st.st_mode & 0o6000 != 0 && (kind == SFlag::S_IFREG || kind == SFlag::S_IFDIR) {
            // The bits come from what was opened (the name may have been
            // swapped since the look), and are only ever taken away.
            let fixed = if kind == SFlag::S_IFDIR {
                nofollow::open_dir_at(dir, name)
                    .ok()
                    .is_some_and(|fd| nofollow::strip_setid(&fd).is_ok())
            } else {
                nofollow::open_file_at(dir, name)
                    .ok()
                    .flatten()
                    .is_some_and(|f| nofollow::strip_setid(&f).is_ok())
            };
            traps.push(Trap::Setuid { path, fixed });
        }
        Descend::Yes
    });
    traps
}

/// Strips every host folder of a domain the agent wrote: the direct-mode
/// workspace (only what changed since the start snapshot: the user's own
/// files are theirs), the isolated clone, and the State Anchor's upper
/// folders. Paths in the result are absolute.
pub fn sanitize_domain(domain_root: &Path, workspace: &Path) -> Vec<Trap> {
    let mut roots: Vec<(PathBuf, bool, Option<Snapshot>)> = Vec::new();
    if let Ok(Some(snap)) = Snapshot::load(&domain_root.join(super::SNAPSHOT_FILE)) {
        roots.push((workspace.to_path_buf(), false, Some(snap)));
    }
    let clone = domain_root.join("workspace");
    if std::fs::symlink_metadata(&clone).is_ok_and(|m| m.is_dir()) {
        roots.push((clone, false, None));
    }
    if let Ok(entries) = std::fs::read_dir(domain_root) {
        for e in entries.flatten() {
            let upper = e.file_name().to_string_lossy().ends_with("_changes");
            if upper && e.file_type().is_ok_and(|t| t.is_dir()) {
                roots.push((e.path(), true, None));
            }
        }
    }
    let mut out = Vec::new();
    for (root, upper, snap) in roots {
        for t in strip(&root, upper, snap.as_ref()) {
            out.push(match t {
                Trap::Setuid { path, fixed } => Trap::Setuid {
                    path: root.join(path),
                    fixed,
                },
                Trap::Device { path, fixed } => Trap::Device {
                    path: root.join(path),
                    fixed,
                },
            });
        }
    }
    out
}

/// `name` is a `.git` entry (folder or gitfile) or lies inside one.
pub fn in_git_dir(rel: &Path) -> Option<PathBuf> {
    let mut acc = PathBuf::new();
    for c in rel.components() {
        acc.push(c);
        if c.as_os_str() == std::ffi::OsStr::from_bytes(b".git") {
            return Some(acc);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn snapshot_sees_changes_and_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        std::fs::create_dir_all(r.join(".git/objects")).unwrap();
        std::fs::write(r.join("a"), "1").unwrap();
        std::fs::write(r.join("b\n\u{1b}"), "1").unwrap();
        let before = Snapshot::take(r, true).unwrap();
        assert!(!before.0.contains_key(Path::new(".git/objects")));
        let file = r.join("../snap-test");
        before.save(&file).unwrap();
        assert_eq!(Snapshot::load(&file).unwrap().unwrap(), before);
        std::fs::remove_file(&file).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(10));
        std::fs::write(r.join("a"), "2").unwrap();
        std::fs::create_dir(r.join("sub")).unwrap();
        std::fs::write(r.join("sub/.git"), "gitdir: /x").unwrap();
        let now = Snapshot::take(r, true).unwrap();
        assert_eq!(
            before.changed_since(&now),
            [PathBuf::from("a"), "sub".into(), "sub/.git".into()]
        );
        assert_eq!(in_git_dir(Path::new("sub/.git")), Some("sub/.git".into()));
        assert_eq!(
            in_git_dir(Path::new("x/.git/config")),
            Some("x/.git".into())
        );
        assert_eq!(in_git_dir(Path::new("x/.gitignore")), None);
    }

    #[test]
    fn setuid_bits_are_stripped() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        std::fs::write(r.join("s"), "x").unwrap();
        std::fs::set_permissions(r.join("s"), std::fs::Permissions::from_mode(0o4755)).unwrap();
        std::fs::create_dir(r.join("d")).unwrap();
        std::fs::set_permissions(r.join("d"), std::fs::Permissions::from_mode(0o2775)).unwrap();
        let traps = strip(r, false, None);
        assert_eq!(traps.len(), 2, "{traps:?}");
        assert!(traps.iter().all(Trap::fixed));
        let mode = |p: &str| std::fs::metadata(r.join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode("s"), 0o755);
        assert_eq!(mode("d"), 0o775);
        assert!(strip(r, false, None).is_empty());
    }
}
