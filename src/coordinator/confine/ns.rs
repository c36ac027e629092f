//! A confined command's own view of the workspace (issue 26 item 4,
//! decisions.md D9): what the sandbox sees read-only stays read-only for
//! the command, and a `.git` the command makes does not stay where host git
//! would obey it.
//!
//! Landlock grants by hierarchy: a right on `sub` covers `sub/.git`, and no
//! rule can take it back. So the command runs in its own user and mount
//! namespace (made in the child between `fork` and `execve`, before
//! Landlock) in which every `.git` folder and gitfile of the workspace is
//! bound read-only over itself, as the sandbox's mount table does
//! (`git_sentry::WorkspaceLayout::mounts`); the top-level `lazaret.toml` and
//! masked folders, which no folder's right covers, stay Landlock's (refused
//! with EACCES). The binds live and die with the
//! command's namespace: nothing is mounted on the host. Landlock then
//! forbids the command to change the mount table.
//!
//! No mount can forbid a *new* name. A `.git` (folder or gitfile) that was
//! not there when the command started is, after it exited, renamed to
//! `.git.lazaret-quarantine[-N]` in the same folder and made unreadable
//! (mode 000: no git finds it, not even as a bare repository, and nothing is
//! lost: `chmod -R u+rwX` and a rename give it back), and the coordinator's
//! log says so. The sandbox itself may make such a folder (the session-end
//! review lists it); a confined command is held tighter because it runs on
//! the host with no review of its own. While the command runs, a new `.git`
//! exists for at most the command's time limit.

use std::collections::HashSet;
use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use lazaret_widgets::visible::visible;
use nix::libc;

use crate::git_sentry::nofollow::{self, Descend};

/// What a quarantined `.git` is renamed to (a suffix when taken).
pub const QUARANTINE: &str = ".git.lazaret-quarantine";

/// An inode, as `(st_dev, st_ino)`.
type Id = (u64, u64);

/// One path bound read-only over itself in the command's namespace.
#[derive(Debug)]
struct Guard {
    /// Relative to the workspace root.
    rel: CString,
    id: Id,
}

/// The workspace as it was when the command was prepared.
#[derive(Debug)]
pub struct View {
    /// The workspace's canonical host path (no symlink in it).
    root: CString,
    root_id: Id,
    guards: Vec<Guard>,
    /// Every `.git` entry of the workspace, wherever it is.
    git_before: HashSet<Id>,
    host: PathBuf,
}

fn id(st: &nix::sys::stat::FileStat) -> Id {
    nofollow::inode(st)
}

impl View {
    /// Scans the workspace at `canonical` for every `.git` entry (not
    /// entered).
    pub fn scan(canonical: &Path) -> io::Result<View> {
        let root_st = nix::sys::stat::lstat(canonical)?;
        let mut guards = Vec::new();
        let mut git_before = HashSet::new();
        nofollow::walk(canonical, &mut |rel, st, _, name| {
            if name != OsStr::new(".git") {
                return Descend::Yes;
            }
            git_before.insert(id(st));
            let kind = nofollow::kind(st);
            if (kind == nix::sys::stat::SFlag::S_IFDIR || kind == nix::sys::stat::SFlag::S_IFREG)
                && let Ok(c) = CString::new(rel.as_os_str().as_bytes())
            {
                guards.push(Guard { rel: c, id: id(st) });
            }
            Descend::No
        })?;
        Ok(View {
            root: CString::new(canonical.as_os_str().as_bytes())
                .map_err(|_| io::Error::other("the workspace path holds a NUL"))?,
            root_id: id(&root_st),
            guards,
            git_before,
            host: canonical.to_path_buf(),
        })
    }

    /// What the child needs to enter the view from `cwd` (an open folder
    /// beneath the workspace).
    pub fn entry(&self, cwd: &std::os::fd::OwnedFd) -> io::Result<Entry> {
        use std::os::fd::AsRawFd;
        let path = std::fs::read_link(format!("/proc/self/fd/{}", cwd.as_raw_fd()))?;
        let rel = path
            .strip_prefix(&self.host)
            .map_err(|_| io::Error::other("the working directory left the workspace"))?;
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        let st = nix::sys::stat::fstat(cwd)?;
        let uid = nix::unistd::getuid().as_raw();
        let gid = nix::unistd::getgid().as_raw();
        Ok(Entry {
            cwd: CString::new(rel.as_os_str().as_bytes())
                .map_err(|_| io::Error::other("the working directory holds a NUL"))?,
            cwd_id: id(&st),
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        })
    }

    /// In the child, between `fork` and `execve` (only system calls, no
    /// allocation): a new user and mount namespace, the guards bound
    /// read-only over themselves, the working directory entered there.
    /// Any failure stops the command from running.
    pub fn enter(&self, entry: &Entry) -> io::Result<()> {
        let last = io::Error::last_os_error;
        // SAFETY: plain system calls on buffers that outlive them.
        #[allow(unsafe_code)]
        unsafe {
            own_namespaces(&entry.uid_map, &entry.gid_map)?;
            let root = libc::open(
                self.root.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            );
            if root < 0 {
                return Err(last());
            }
            let fd = Fd(root);
            if fd_id(fd.0)? != self.root_id {
                return Err(io::Error::from_raw_os_error(libc::ESTALE));
            }
            for g in &self.guards {
                let t = match beneath(fd.0, &g.rel, 0) {
                    Ok(t) => t,
                    // Gone since the scan: nothing there to protect.
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                    Err(e) => return Err(e),
                };
                // Swapped since the scan: refuse rather than guess
                // (ESTALE, which the escalation server tells the agent as
                // "the workspace changed").
                if fd_id(t.0)? != g.id {
                    return Err(io::Error::from_raw_os_error(libc::ESTALE));
                }
                match bind_read_only(t.0) {
                    Ok(()) => {}
                    // Removed between its open and its bind (a mount on
                    // a deleted folder is ENOENT): nothing left there to
                    // protect, and whatever takes its name is new, so the
                    // walk after the command sees it.
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                    Err(e) => return Err(e),
                }
            }
            let cwd = beneath(fd.0, &entry.cwd, libc::O_DIRECTORY)?;
            if fd_id(cwd.0)? != entry.cwd_id {
                return Err(io::Error::from_raw_os_error(libc::ESTALE));
            }
            if libc::fchdir(cwd.0) != 0 {
                return Err(last());
            }
        }
        Ok(())
    }

    /// After the command: every `.git` entry that was not there before is
    /// quarantined. Returns what was found, for people.
    pub fn quarantine_new(&self) -> Vec<String> {
        let mut found = Vec::new();
        let _ = nofollow::walk(&self.host, &mut |rel, st, dir, name| {
            if name != OsStr::new(".git") {
                return Descend::Yes;
            }
            if self.git_before.contains(&id(st)) {
                return Descend::No;
            }
            let shown = visible(&rel.to_string_lossy());
            match quarantine(dir, name) {
                Ok(to) => found.push(format!(
                    "a confined command made {shown}, which host git would obey: moved to {} with mode 000",
                    visible(&rel.with_file_name(to).to_string_lossy())
                )),
                Err(e) => found.push(format!(
                    "a confined command made {shown}, which host git would obey, and it could NOT be moved away ({e}): do not run git there"
                )),
            }
            Descend::No
        });
        found
    }
}

/// Per-command values the child writes.
#[derive(Debug)]
pub struct Entry {
    cwd: CString,
    cwd_id: Id,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

/// Renames `name` in `dir` to a free quarantine name and makes it
/// unreadable; returns the new name. The rename is of a name in `dir`
/// (it never follows a link); the mode is then set through a descriptor
/// of what the new name holds, pinned without following a link, and only
/// if that is not a symlink (issue 40: a `.git` swapped for a symlink
/// between the walk's look and the change had the change land on the
/// link's target outside the workspace). Whatever the agent swaps in
/// meanwhile, what is changed is an entry of `dir`, not a link's target.
fn quarantine(dir: &std::os::fd::OwnedFd, name: &OsStr) -> io::Result<String> {
    use std::os::fd::AsRawFd;
    let from = CString::new(name.as_bytes()).map_err(io::Error::other)?;
    for n in 0..100 {
        let to = if n == 0 {
            QUARANTINE.to_string()
        } else {
            format!("{QUARANTINE}-{n}")
        };
        let c = CString::new(to.as_bytes()).map_err(io::Error::other)?;
        // SAFETY: plain system calls on live C strings and descriptors.
        #[allow(unsafe_code)]
        let r = unsafe {
            libc::renameat2(
                dir.as_raw_fd(),
                from.as_ptr(),
                dir.as_raw_fd(),
                c.as_ptr(),
                libc::RENAME_NOREPLACE,
            )
        };
        if r != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EEXIST) {
                continue;
            }
            return Err(e);
        }
        let moved = nofollow::pin_at(dir, OsStr::new(&to))?;
        let st = nix::sys::stat::fstat(&moved)?;
        if nofollow::kind(&st) != nix::sys::stat::SFlag::S_IFLNK {
            nofollow::chmod_pinned(&moved, nix::sys::stat::Mode::empty()).map_err(|e| {
                io::Error::other(format!("moved to {to}, but not made unreadable: {e}"))
            })?;
        }
        return Ok(to);
    }
    Err(io::Error::other("no free quarantine name"))
}

/// A new user namespace (the caller's own ids mapped to themselves, so
/// nothing gains a capability on the host's files) and mount namespace whose
/// mounts propagate nowhere. Only system calls: safe between fork and exec.
fn own_namespaces(uid_map: &[u8], gid_map: &[u8]) -> io::Result<()> {
    // SAFETY: plain system calls on live buffers.
    #[allow(unsafe_code)]
    unsafe {
        if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
            return Err(io::Error::last_os_error());
        }
        write_file(c"/proc/self/setgroups", b"deny")?;
        write_file(c"/proc/self/uid_map", uid_map)?;
        write_file(c"/proc/self/gid_map", gid_map)?;
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A descriptor closed on drop (no allocation).
struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours.
        #[allow(unsafe_code)]
        unsafe {
            libc::close(self.0);
        }
    }
}

#[allow(unsafe_code)]
unsafe fn write_file(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: see the caller.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = Fd(fd);
        let n = libc::write(fd.0, data.as_ptr().cast(), data.len());
        if n != data.len() as isize {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[allow(unsafe_code)]
fn fd_id(fd: libc::c_int) -> io::Result<Id> {
    // SAFETY: `st` is written by fstat before it is read.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((st.st_dev, st.st_ino))
    }
}

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;

/// `rel` beneath `root`, no symlink followed, as an `O_PATH` descriptor.
fn beneath(root: libc::c_int, rel: &std::ffi::CStr, extra: libc::c_int) -> io::Result<Fd> {
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC | extra) as u64,
        mode: 0,
        resolve: RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: `how` and `rel` outlive the call.
    #[allow(unsafe_code)]
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root,
            rel.as_ptr(),
            &how as *const OpenHow,
            size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Fd(fd as libc::c_int))
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;

/// Binds what `fd` names read-only over itself (the new mount API works
/// on descriptors: no path is looked up again).
fn bind_read_only(fd: libc::c_int) -> io::Result<()> {
    let last = io::Error::last_os_error;
    // SAFETY: plain system calls on live descriptors and structures.
    #[allow(unsafe_code)]
    unsafe {
        let tree = libc::syscall(
            libc::SYS_open_tree,
            fd,
            c"".as_ptr(),
            OPEN_TREE_CLONE
                | libc::O_CLOEXEC as libc::c_uint
                | libc::AT_EMPTY_PATH as libc::c_uint
                | AT_RECURSIVE,
        );
        if tree < 0 {
            return Err(last());
        }
        let tree = Fd(tree as libc::c_int);
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_RDONLY,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        if libc::syscall(
            libc::SYS_mount_setattr,
            tree.0,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint | AT_RECURSIVE,
            &attr as *const MountAttr,
            size_of::<MountAttr>(),
        ) != 0
        {
            return Err(last());
        }
        if libc::syscall(
            libc::SYS_move_mount,
            tree.0,
            c"".as_ptr(),
            fd,
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        ) != 0
        {
            return Err(last());
        }
    }
    Ok(())
}

/// Whether a child can enter a namespace like a confined command's (a new
/// user and mount namespace, a read-only bind over `/usr`): `Err` says why
/// not (e.g. unprivileged user namespaces turned off or stripped of their
/// capabilities by the distribution).
pub fn probe() -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let uid_map = format!("{uid} {uid} 1\n").into_bytes();
    let gid_map = format!("{gid} {gid} 1\n").into_bytes();
    let mut cmd = std::process::Command::new("/bin/true");
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let hook = move || -> io::Result<()> {
        // SAFETY: plain system calls on buffers built in the parent.
        #[allow(unsafe_code)]
        unsafe {
            own_namespaces(&uid_map, &gid_map)?;
            let fd = libc::open(
                c"/usr".as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            );
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let fd = Fd(fd);
            bind_read_only(fd.0)
        }
    };
    // SAFETY: the hook only makes system calls (see above).
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(hook);
    }
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("a namespace test exited with {s}")),
        Err(e) => Err(format!(
            "a confined command's own user and mount namespace cannot be made ({e}); unprivileged user namespaces must be allowed"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    /// Issue 40, the race made certain: the walk saw a `.git` folder, and
    /// before the quarantine acts on it, it is swapped for a symlink to a
    /// canary outside. The symlink is moved away; the canary keeps its
    /// mode.
    #[test]
    fn a_git_swapped_after_the_look_is_not_followed() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let canary = outside.path().join("canary");
        std::fs::create_dir(&canary).unwrap();
        std::fs::set_permissions(&canary, std::fs::Permissions::from_mode(0o755)).unwrap();
        let git = ws.path().join(".git");
        std::fs::create_dir(&git).unwrap();
        let dir = nofollow::open_root(ws.path()).unwrap();
        std::fs::remove_dir(&git).unwrap();
        std::os::unix::fs::symlink(&canary, &git).unwrap();
        let to = quarantine(&dir, OsStr::new(".git")).unwrap();
        assert!(ws.path().join(&to).is_symlink());
        assert_eq!(mode(&canary), 0o755);
        // A folder is quarantined, through its descriptor.
        std::fs::create_dir(&git).unwrap();
        let to = quarantine(&dir, OsStr::new(".git")).unwrap();
        assert_eq!(mode(&ws.path().join(&to)), 0);
        // A gitfile with another name (a hard link) is moved, not changed.
        let linked = ws.path().join("elsewhere");
        std::fs::write(&linked, "gitdir: /x").unwrap();
        std::fs::hard_link(&linked, &git).unwrap();
        let e = quarantine(&dir, OsStr::new(".git")).unwrap_err();
        assert!(e.to_string().contains("hard links"), "{e}");
        assert_eq!(mode(&linked) & 0o777, 0o666 & !umask());
    }

    /// The read-only view guards every `.git` folder and gitfile the scan
    /// finds, at any depth, and nothing else: not a `.git` symlink (its
    /// target is not the workspace's to protect), not what lies beneath a
    /// `.git` (it is covered by its guard).
    #[test]
    fn the_scan_guards_every_git_folder_and_file_and_no_symlink() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path().canonicalize().unwrap();
        for d in [".git/modules/.git", "a/b/.git", "c"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("c/.git"), "gitdir: ../.git/modules/c").unwrap();
        std::fs::create_dir(root.join("d")).unwrap();
        std::os::unix::fs::symlink("/tmp", root.join("d/.git")).unwrap();
        let view = View::scan(&root).unwrap();
        let mut guarded: Vec<_> = view
            .guards
            .iter()
            .map(|g| g.rel.to_str().unwrap().to_string())
            .collect();
        guarded.sort();
        assert_eq!(guarded, [".git", "a/b/.git", "c/.git"]);
        // The symlink is still seen (a new `.git` after the command is
        // what the quarantine looks for), only not guarded.
        assert_eq!(view.git_before.len(), 4);
    }

    fn umask() -> u32 {
        let m = nix::sys::stat::umask(nix::sys::stat::Mode::empty());
        nix::sys::stat::umask(m);
        m.bits()
    }

    /// Issue 40: while the quarantine runs, a racer swaps a new `.git`
    /// folder for a symlink to a canary outside the workspace and back
    /// (an atomic exchange, as fast as it can). Whatever the quarantine
    /// meets, the canaries (a file and a folder) keep their modes.
    #[test]
    fn a_git_swapped_for_a_symlink_never_changes_its_target() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let (file, folder) = (outside.path().join("canary"), outside.path().join("dir"));
        std::fs::write(&file, "keep").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::create_dir(&folder).unwrap();
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755)).unwrap();
        let sub = ws.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let view = View::scan(ws.path()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let racer = {
            let (sub, stop) = (sub.clone(), stop.clone());
            let targets = [file.clone(), folder.clone()];
            std::thread::spawn(move || {
                let (git, swap) = (sub.join(".git"), sub.join("swap"));
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let _ = std::fs::create_dir(&git);
                    let _ = std::os::unix::fs::symlink(&targets[n % 2], &swap);
                    n += 1;
                    // One exchange a round: `.git` is the folder half the
                    // time and the symlink the other half.
                    let _ = nix::fcntl::renameat2(
                        nix::fcntl::AT_FDCWD,
                        &git,
                        nix::fcntl::AT_FDCWD,
                        &swap,
                        nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                    );
                }
                n
            })
        };
        let (mut found, mut refused) = (0, 0);
        for _ in 0..3000 {
            for m in view.quarantine_new() {
                if m.contains("could NOT") {
                    refused += 1;
                } else {
                    found += 1;
                }
            }
            assert_eq!(mode(&file), 0o644, "the canary file's mode changed");
            assert_eq!(mode(&folder), 0o755, "the canary folder's mode changed");
            // Clear the quarantined entries so the race goes on.
            for e in std::fs::read_dir(&sub).unwrap().flatten() {
                let p = e.path();
                if e.file_name().to_string_lossy().starts_with(QUARANTINE) {
                    if e.file_type().unwrap().is_dir() {
                        let _ =
                            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755));
                        let _ = std::fs::remove_dir_all(&p);
                    } else {
                        let _ = std::fs::remove_file(&p);
                    }
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = racer.join().unwrap();
        eprintln!("{swaps} swaps; {found} quarantined, {refused} not");
        assert!(found > 0, "the quarantine met the racer's folders");
    }
}
