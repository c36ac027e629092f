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

/// Reads the regular file `rel` below `root` (see [`open_file`]).
pub fn read(root: &Path, rel: &Path) -> io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let Some(mut f) = open_file(root, rel)? else {
        return Ok(None);
    };
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    Ok(Some(buf))
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
        assert_eq!(read(r, Path::new("a/b/f")).unwrap().unwrap(), b"ok");
        assert!(read(r, Path::new("a/link/secret")).is_err());
        assert!(read(r, Path::new("a/b/s")).is_err());
        assert!(read(r, Path::new("a/b/none")).unwrap().is_none());
        let mut seen = Vec::new();
        walk(r, &mut |p, _, _, _| {
            seen.push(p.display().to_string());
            Descend::Yes
        })
        .unwrap();
        assert_eq!(seen, ["a", "a/b", "a/b/f", "a/b/s", "a/link"]);
    }
}
