//! Reading a tree the agent wrote without following its symlinks
//! (decisions.md D8): every path component below a trusted root is opened
//! with `O_NOFOLLOW` relative to its parent's descriptor, so a symlink (or
//! a folder swapped for one while we read) can never lead outside.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat};
use nix::unistd::UnlinkatFlags;

fn err(e: nix::errno::Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// Opens `root` (trusted: the caller's own path) as a directory.
pub fn open_root(root: &Path) -> io::Result<OwnedFd> {
    nix::fcntl::open(root, DIR_FLAGS, Mode::empty()).map_err(err)
}

/// Opens the folder `rel` below `root`, no component a symlink.
pub fn open_dir(root: &Path, rel: &Path) -> io::Result<OwnedFd> {
    let mut fd = open_root(root)?;
    for c in rel.components() {
        match c {
            Component::Normal(name) => fd = open_dir_at(&fd, name)?,
            Component::CurDir => {}
            _ => return Err(io::Error::other("path leaves its root")),
        }
    }
    Ok(fd)
}

/// Opens the folder `name` in `dir`, refusing a symlink.
pub fn open_dir_at(dir: &impl AsFd, name: &OsStr) -> io::Result<OwnedFd> {
    openat(dir, name, DIR_FLAGS, Mode::empty()).map_err(err)
}

/// Opens the regular file `rel` below `root` for reading; `Ok(None)` when
/// it does not exist. A symlink anywhere, or anything but a regular file at
/// the end, is an error.
pub fn open_file(root: &Path, rel: &Path) -> io::Result<Option<File>> {
    let (parent, name) = match (rel.parent(), rel.file_name()) {
        (Some(p), Some(n)) => (p, n),
        _ => return Err(io::Error::other("not a file path")),
    };
    let dir = match open_dir(root, parent) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    open_file_at(&dir, name)
}

/// Opens the regular file `name` in `dir` (non-blocking, so a FIFO cannot
/// hang us; it is refused anyway).
pub fn open_file_at(dir: &impl AsFd, name: &OsStr) -> io::Result<Option<File>> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    let fd = match openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ENOENT) => return Ok(None),
        Err(e) => return Err(err(e)),
    };
    let st = fstat(&fd).map_err(err)?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return Err(io::Error::other("not a regular file"));
    }
    Ok(Some(File::from(fd)))
}

/// How much of one file the agent can write the host reads: its size at
/// the most, and its longest line. Every read of an agent-writable file
/// (its clone, its git directory, a checkpoint's copy of them, the State
/// Anchor's upper folders) goes through [`read`] or [`for_each_line`]
/// with one of these (issue 40: a 1 GiB sparse ref cost the coordinator
/// 1 GiB at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// What the file is, for errors.
    pub what: &'static str,
    pub bytes: u64,
    pub line: usize,
}

/// A loose ref: an object id (SHA-256's 64 digits) or `ref: <name>`.
pub const REF: Bound = Bound {
    what: "a ref",
    bytes: 512,
    line: 512,
};
/// `packed-refs`: a line a ref (some hundred thousand tags fit).
pub const PACKED_REFS: Bound = Bound {
    what: "packed-refs",
    bytes: 64 << 20,
    line: 1024,
};
/// A git configuration file, `.gitmodules`, `lazaret.toml` and the like.
pub const CONFIG: Bound = Bound {
    what: "a configuration file",
    bytes: 1 << 20,
    line: 8192,
};

/// Why an agent-writable file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error(
        "{what} of {size} bytes is larger than the {max} bytes Lazaret reads of it (the agent can write it): not read"
    )]
    TooLarge {
        what: &'static str,
        size: u64,
        max: u64,
    },
    #[error(
        "{what} has a line longer than the {max} bytes Lazaret reads (the agent can write it): not read"
    )]
    LineTooLong { what: &'static str, max: usize },
}

impl From<ReadError> for io::Error {
    fn from(e: ReadError) -> io::Error {
        match e {
            ReadError::Io(e) => e,
            other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
        }
    }
}

/// Opens `rel` below `root` (see [`open_file`]) and refuses it if its
/// size is over `bound` before a byte is read (a sparse file costs
/// nothing to refuse); the reads after are capped too (it may grow).
fn open_bounded(
    root: &Path,
    rel: &Path,
    bound: Bound,
) -> Result<Option<io::Take<File>>, ReadError> {
    use std::io::Read;
    let Some(f) = open_file(root, rel)? else {
        return Ok(None);
    };
    let size = f.metadata()?.len();
    if size > bound.bytes {
        return Err(ReadError::TooLarge {
            what: bound.what,
            size,
            max: bound.bytes,
        });
    }
    Ok(Some(f.take(bound.bytes + 1)))
}

/// Reads the regular file `rel` below `root` (see [`open_file`]), at most
/// `bound.bytes` of it: a larger file is an error, never read whole.
pub fn read(root: &Path, rel: &Path, bound: Bound) -> Result<Option<Vec<u8>>, ReadError> {
    use std::io::Read;
    let Some(mut f) = open_bounded(root, rel, bound)? else {
        return Ok(None);
    };
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    if buf.len() as u64 > bound.bytes {
        return Err(ReadError::TooLarge {
            what: bound.what,
            size: buf.len() as u64,
            max: bound.bytes,
        });
    }
    Ok(Some(buf))
}

/// Hands each line of `rel` below `root` (without its newline) to `line`
/// until it returns `Some`, holding one line at a time: the file at most
/// `bound.bytes`, a line at most `bound.line`. `Ok(None)` when the file
/// does not exist or no line gave an answer.
pub fn for_each_line<T>(
    root: &Path,
    rel: &Path,
    bound: Bound,
    mut line: impl FnMut(&[u8]) -> Option<T>,
) -> Result<Option<T>, ReadError> {
    use std::io::{BufRead, Read};
    let Some(f) = open_bounded(root, rel, bound)? else {
        return Ok(None);
    };
    let mut reader = io::BufReader::new(f);
    let mut buf = Vec::new();
    let mut total = 0u64;
    loop {
        buf.clear();
        let n = (&mut reader)
            .take(bound.line as u64 + 1)
            .read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        total += n as u64;
        if total > bound.bytes {
            return Err(ReadError::TooLarge {
                what: bound.what,
                size: total,
                max: bound.bytes,
            });
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
        } else if n > bound.line {
            return Err(ReadError::LineTooLong {
                what: bound.what,
                max: bound.line,
            });
        }
        if let Some(answer) = line(&buf) {
            return Ok(Some(answer));
        }
    }
}

/// The names in an open folder (without `.` and `..`).
pub fn names(dir: &impl AsFd) -> io::Result<Vec<OsString>> {
    let fd = dir.as_fd().try_clone_to_owned()?;
    let mut d = nix::dir::Dir::from_fd(fd).map_err(err)?;
    let mut out = Vec::new();
    for e in d.iter() {
        let e = e.map_err(err)?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            out.push(OsStr::from_bytes(n).to_os_string());
        }
    }
    Ok(out)
}

/// `lstat` of `name` in `dir`.
pub fn lstat_at(dir: &impl AsFd, name: &OsStr) -> io::Result<FileStat> {
    fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).map_err(err)
}

/// The kind of an entry from its `st_mode`.
pub fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT
}

/// Removes the non-folder `name` in `dir`.
pub fn unlink_at(dir: &impl AsFd, name: &OsStr) -> io::Result<()> {
    nix::unistd::unlinkat(dir, name, UnlinkatFlags::NoRemoveDir).map_err(err)
}

/// Pins the entry `name` in `dir` as it is now, whatever it is (a
/// symlink is pinned itself, not its target): `O_PATH | O_NOFOLLOW`.
/// Every change to it goes through this descriptor, so it lands on the
/// entry that was checked even if the name is swapped meanwhile.
pub fn pin_at(dir: &impl AsFd, name: &OsStr) -> io::Result<OwnedFd> {
    openat(
        dir,
        name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(err)
}

/// Sets the mode of a pinned entry ([`pin_at`]). `fchmod` does not take an
/// `O_PATH` descriptor, so the change goes through `/proc/self/fd`, whose
/// link leads to the pinned inode itself, never to a path looked up
/// again. A pinned symlink is refused (its mode means nothing, and
/// following it is what must never happen), as is a non-folder with other
/// names (a hard link: the change would show under a name outside the
/// tree that was walked).
pub fn chmod_pinned(pinned: &impl AsFd, mode: Mode) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let st = fstat(pinned).map_err(err)?;
    match kind(&st) {
        SFlag::S_IFLNK => return Err(io::Error::other("it is a symlink")),
        SFlag::S_IFDIR => {}
        _ if st.st_nlink > 1 => {
            return Err(io::Error::other(format!(
                "it has {} names (hard links), some maybe outside the workspace",
                st.st_nlink
            )));
        }
        _ => {}
    }
    let via = format!("/proc/self/fd/{}", pinned.as_fd().as_raw_fd());
    nix::sys::stat::fchmodat(
        nix::fcntl::AT_FDCWD,
        via.as_str(),
        mode,
        nix::sys::stat::FchmodatFlags::FollowSymlink,
    )
    .map_err(err)
}

/// Removes `path` (absolute, Lazaret's own record of a mount point it
/// made: no symlink in it) if it is an empty folder or an empty file:
/// every folder on the way is opened without following a symlink, and
/// what is removed is a name in the last of them, so an agent that swapped
/// a folder on the way for a symlink cannot lead the removal outside.
/// `Ok(true)` when it is gone (or was not there).
pub fn remove_if_empty(path: &Path) -> io::Result<bool> {
    let Some((dir, name, st)) = open_parent(path)? else {
        return Ok(true);
    };
    let flag = match kind(&st) {
        SFlag::S_IFDIR => UnlinkatFlags::RemoveDir,
        SFlag::S_IFREG if st.st_size == 0 => UnlinkatFlags::NoRemoveDir,
        _ => return Ok(false),
    };
    Ok(nix::unistd::unlinkat(&dir, name, flag).is_ok())
}

/// The folder holding `path` (absolute, no symlink in it), opened from
/// `/` without following a symlink at any step, the entry's name in it
/// and its `lstat`; `None` when the folder or the entry is not there.
fn open_parent(path: &Path) -> io::Result<Option<(OwnedFd, &OsStr, FileStat)>> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::other("not a path to an entry"));
    };
    let rel = parent
        .strip_prefix("/")
        .map_err(|_| io::Error::other("not an absolute path"))?;
    let dir = match open_dir(Path::new("/"), rel) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match lstat_at(&dir, name) {
        Ok(st) => Ok(Some((dir, name, st))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Takes the set-user-ID and set-group-ID bits off what `fd` holds (the
/// bits read from it, not from an earlier look at its name).
pub fn strip_setid(fd: &impl AsFd) -> io::Result<()> {
    let now = fstat(fd).map_err(err)?;
    nix::sys::stat::fchmod(fd, Mode::from_bits_truncate(now.st_mode & 0o1777)).map_err(err)
}

/// Fixes the trap at `path` (absolute, below a folder of the domain's:
/// no symlink in it) that the walk found and could not fix itself (an
/// entry of a subordinate id): run as root of the user's podman namespace
/// (`podman unshare lazaret strip-trap PATH`). The folder is opened
/// without following a symlink at any step; a device node is unlinked by
/// its name there; set-id bits are taken off through a descriptor of what
/// was opened there. A symlink or anything else is left alone.
pub fn strip_trap(path: &Path) -> io::Result<()> {
    let Some((dir, name, st)) = open_parent(path)? else {
        return Ok(());
    };
    match kind(&st) {
        SFlag::S_IFCHR | SFlag::S_IFBLK => unlink_at(&dir, name),
        SFlag::S_IFDIR => strip_setid(&open_dir_at(&dir, name)?),
        SFlag::S_IFREG => match open_file_at(&dir, name)? {
            Some(f) => strip_setid(&f),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

/// The owner [`reclaim`] leaves alone besides the user: another host
/// user's entry, which the user's namespace shows as the overflow id.
const OVERFLOW_ID: u32 = 65534;

/// Gives the user back what the agent left below `root` owned by its
/// other ids, run as root of the user's podman namespace (`podman unshare
/// lazaret reclaim DIR`), where the user is id 0: every entry owned by
/// neither 0 nor the overflow id is made 0:0 with `fchownat(...,
/// AT_SYMLINK_NOFOLLOW)` on its name in a folder opened without following
/// a symlink (a symlink itself, never its target), and a folder among
/// them gets the user's rwx through a descriptor of it. No other file
/// system is entered. Returns how many entries were changed.
pub fn reclaim(root: &Path) -> io::Result<u64> {
    let root_dev = nix::sys::stat::stat(root).map_err(err)?.st_dev;
    let mut changed = 0;
    walk(root, &mut |_, st, dir, name| {
        if st.st_dev != root_dev {
            return Descend::No;
        }
        if st.st_uid == 0 || st.st_uid == OVERFLOW_ID {
            return Descend::Yes;
        }
        let root_id = Some(nix::unistd::Uid::from_raw(0));
        let root_gid = Some(nix::unistd::Gid::from_raw(0));
        let done = if kind(st) == SFlag::S_IFDIR {
            open_dir_at(dir, name).is_ok_and(|fd| {
                let rwx = fstat(&fd).is_ok_and(|now| {
                    let mode = Mode::from_bits_truncate((now.st_mode & 0o7777) | 0o700);
                    nix::sys::stat::fchmod(&fd, mode).is_ok()
                });
                rwx && nix::unistd::fchown(&fd, root_id, root_gid).is_ok()
            })
        } else {
            nix::unistd::fchownat(
                dir,
                name,
                root_id,
                root_gid,
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .is_ok()
        };
        changed += u64::from(done);
        Descend::Yes
    })?;
    Ok(changed)
}

/// `(st_dev, st_ino)`: whether two looks saw the same entry.
pub fn inode(st: &FileStat) -> (u64, u64) {
    (st.st_dev, st.st_ino)
}

/// What a walk does with a folder it met.
#[derive(Debug)]
pub enum Descend {
    Yes,
    No,
}

/// Visits every entry below `root` (depth first, parents before children),
/// with its path relative to `root`, its `lstat` and the open parent
/// folder. Symlinks are reported, never followed; folders are entered only
/// when `visit` says so. Unreadable folders are skipped.
pub fn walk(
    root: &Path,
    visit: &mut dyn FnMut(&Path, &FileStat, &OwnedFd, &OsStr) -> Descend,
) -> io::Result<()> {
    let fd = open_root(root)?;
    walk_in(&fd, Path::new(""), visit);
    Ok(())
}

fn walk_in(
    dir: &OwnedFd,
    rel: &Path,
    visit: &mut dyn FnMut(&Path, &FileStat, &OwnedFd, &OsStr) -> Descend,
) {
    let Ok(mut list) = names(dir) else { return };
    list.sort();
    for name in list {
        let Ok(st) = lstat_at(dir, &name) else {
            continue;
        };
        let path = rel.join(&name);
        let descend = visit(&path, &st, dir, &name);
        if kind(&st) == SFlag::S_IFDIR
            && matches!(descend, Descend::Yes)
            && let Ok(sub) = open_dir_at(dir, &name)
        {
            walk_in(&sub, &path, visit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process's resident memory in bytes (read here: `git_sentry`
    /// sits below the coordinator, whose reader this is the twin of).
    fn rss() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmRSS in /proc/self/status");
        kib * 1024
    }

    /// Issue 40: a mount point's folder on the way swapped for a symlink
    /// to a folder outside: the empty folder there of the same name stays.
    #[test]
    fn mount_points_are_removed_only_where_they_were_made() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(r.join("ws/a/point")).unwrap();
        std::fs::write(r.join("ws/a/file"), "").unwrap();
        std::fs::write(r.join("ws/a/full"), "x").unwrap();
        assert!(remove_if_empty(&r.join("ws/a/point")).unwrap());
        assert!(remove_if_empty(&r.join("ws/a/file")).unwrap());
        assert!(!remove_if_empty(&r.join("ws/a/full")).unwrap());
        assert!(remove_if_empty(&r.join("ws/a/gone")).unwrap());
        assert!(!r.join("ws/a/point").exists() && !r.join("ws/a/file").exists());
        std::fs::create_dir_all(r.join("outside/point")).unwrap();
        std::fs::create_dir(r.join("ws/b")).unwrap();
        std::fs::remove_dir(r.join("ws/b")).unwrap();
        std::os::unix::fs::symlink(r.join("outside"), r.join("ws/b")).unwrap();
        assert!(remove_if_empty(&r.join("ws/b/point")).is_err());
        assert!(r.join("outside/point").is_dir());
    }

    /// A trap's fix follows no symlink: set-id bits come off the file
    /// itself, and a folder on the way swapped for a symlink is refused.
    #[test]
    fn traps_are_fixed_where_they_were_found() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path().canonicalize().unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        std::fs::create_dir_all(r.join("ws/a")).unwrap();
        std::fs::create_dir_all(r.join("outside")).unwrap();
        for f in ["ws/a/s", "outside/s"] {
            std::fs::write(r.join(f), "").unwrap();
            std::fs::set_permissions(r.join(f), std::fs::Permissions::from_mode(0o4755)).unwrap();
        }
        strip_trap(&r.join("ws/a/s")).unwrap();
        assert_eq!(mode(&r.join("ws/a/s")), 0o755);
        std::os::unix::fs::symlink(r.join("outside"), r.join("ws/b")).unwrap();
        assert!(strip_trap(&r.join("ws/b/s")).is_err());
        std::os::unix::fs::symlink(r.join("outside/s"), r.join("ws/a/l")).unwrap();
        strip_trap(&r.join("ws/a/l")).unwrap();
        assert_eq!(mode(&r.join("outside/s")), 0o4755);
    }

    /// Issue 40: a 1 GiB sparse ref, and a packed-refs of one endless
    /// line, are refused at once, costing no memory; a file that fits is
    /// read, line by line where asked.
    #[test]
    fn agent_files_are_read_within_their_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        let sparse = File::create(r.join("ref")).unwrap();
        sparse.set_len(1 << 30).unwrap();
        let before = rss();
        let e = read(r, Path::new("ref"), REF).unwrap_err();
        assert!(
            e.to_string()
                .contains("1073741824 bytes is larger than the 512"),
            "{e}"
        );
        let e = for_each_line(r, Path::new("ref"), PACKED_REFS, |_| Some(())).unwrap_err();
        assert!(matches!(e, ReadError::TooLarge { .. }), "{e}");
        assert!(rss().saturating_sub(before) < 8 << 20);
        // An endless line within the size bound.
        std::fs::write(r.join("packed"), vec![b'a'; 100_000]).unwrap();
        let e = for_each_line(r, Path::new("packed"), PACKED_REFS, |_| Some(())).unwrap_err();
        assert!(matches!(e, ReadError::LineTooLong { .. }), "{e}");
        // What fits is read.
        std::fs::write(r.join("packed"), "# pack\nabc refs/heads/x\nlast").unwrap();
        let mut seen = Vec::new();
        let none: Option<()> = for_each_line(r, Path::new("packed"), PACKED_REFS, |l| {
            seen.push(String::from_utf8_lossy(l).into_owned());
            None
        })
        .unwrap();
        assert!(none.is_none());
        assert_eq!(seen, ["# pack", "abc refs/heads/x", "last"]);
        std::fs::write(r.join("ref"), "abc\n").unwrap();
        assert_eq!(read(r, Path::new("ref"), REF).unwrap().unwrap(), b"abc\n");
    }

    #[test]
    fn symlinks_are_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        let r = dir.path();
        std::fs::create_dir_all(r.join("a/b")).unwrap();
        std::fs::write(r.join("a/b/f"), "ok").unwrap();
        std::os::unix::fs::symlink(outside.path(), r.join("a/link")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), r.join("a/b/s")).unwrap();
        assert_eq!(read(r, Path::new("a/b/f"), REF).unwrap().unwrap(), b"ok");
        assert!(read(r, Path::new("a/link/secret"), REF).is_err());
        assert!(read(r, Path::new("a/b/s"), REF).is_err());
        assert!(read(r, Path::new("a/b/none"), REF).unwrap().is_none());
        let mut seen = Vec::new();
        walk(r, &mut |p, _, _, _| {
            seen.push(p.display().to_string());
            Descend::Yes
        })
        .unwrap();
        assert_eq!(seen, ["a", "a/b", "a/b/f", "a/b/s", "a/link"]);
    }
}

/// Issue 40: the bounded reader is the only reader of what the agent
/// writes. This test reads Lazaret's own source and fails on any other
/// read of a file whose path names the agent's clone, its git directory,
/// a checkpoint's copy of them or the State Anchor's upper folders.
#[cfg(test)]
mod only_reader {
    use std::path::Path;

    /// Calls that read a file's contents.
    const READS: &[&str] = &[
        "fs::read(",
        "fs::read_to_string(",
        "read_to_end(",
        "read_to_string(",
        "File::open(",
        "BufReader::new(",
        "OpenOptions::new()",
        "mmap",
    ];
    /// What the path of an agent-writable file says.
    const AGENT: &[&str] = &[
        "agent_gitdir",
        "clone_git",
        "workspace/.git",
        "agent.git",
        "packed-refs",
        "refs/heads",
        "_changes",
        "\"HEAD\"",
        "gitdir",
        "kept",
        ".git\"",
        "\"config\"",
        "files.join",
    ];

    /// Reads the words above flag that are of Lazaret's own files, each
    /// with why: (file under src/, the line's text, why).
    const LAZARETS_OWN: &[(&str, &str, &str)] = &[
        (
            "git_sentry/mod.rs",
            "domain_root.join(KIND_FILE)",
            "the Domain Root's own record, beside (not in) the agent's trees",
        ),
        (
            "ui/app.rs",
            "layout_file(data_root)",
            "the workbench's layout, in the Data Root",
        ),
        (
            "cli/checkpoint.rs",
            "read_to_string(&points)",
            "the mount points Lazaret recorded in the Domain Root, as a checkpoint copied them",
        ),
    ];

    fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                sources(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    #[test]
    fn no_other_code_reads_what_the_agent_writes() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        assert!(files.len() > 50, "the source tree was found ({src:?})");
        let mut found = Vec::new();
        for file in files {
            if file.ends_with("git_sentry/nofollow.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            // Tests make their own trees: what they read is theirs.
            let end = lines
                .iter()
                .position(|l| l.trim() == "#[cfg(test)]")
                .unwrap_or(lines.len());
            for (i, line) in lines[..end].iter().enumerate() {
                if line.trim_start().starts_with("//") || !READS.iter().any(|r| line.contains(r)) {
                    continue;
                }
                // The statement: this line and the few before it.
                let window = lines[i.saturating_sub(4)..=i].join("\n");
                let shown = file.strip_prefix(&src).unwrap_or(&file);
                if LAZARETS_OWN
                    .iter()
                    .any(|(f, l, _)| shown == Path::new(f) && line.contains(l))
                {
                    continue;
                }
                if let Some(word) = AGENT.iter().find(|w| window.contains(*w)) {
                    found.push(format!(
                        "{}:{}: reads a file named by `{word}`: {}",
                        shown.display(),
                        i + 1,
                        line.trim()
                    ));
                }
            }
        }
        assert!(
            found.is_empty(),
            "read these through git_sentry::nofollow::read or for_each_line with a Bound:\n{}",
            found.join("\n")
        );
    }
}
