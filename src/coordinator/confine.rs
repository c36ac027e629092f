//! Host execution that cannot be turned against the host (decisions.md D9):
//! the pinned working directory, the symlink probe for auto-approve
//! arguments, and the confinement of auto-approved commands.
//!
//! Confinement has two layers, both applied in the child between `fork`
//! and `execve`:
//! - **Landlock**: the system folders read-only, the workspace readable,
//!   its top-level entries read-write except what the sandbox itself sees
//!   read-only or masked (the host `.git`, [`MASKED`] folders,
//!   `lazaret.toml`), nothing else of the user's; no TCP unless the entry
//!   opted in; signals and abstract UNIX sockets scoped to the command.
//! - **seccomp**: no `socket(AF_UNIX)` (Landlock does not cover connecting
//!   to a UNIX socket by path: the coordinator's control socket, D-Bus,
//!   podman's API), no `io_uring` (it creates sockets past seccomp), and
//!   for entries without network no socket at all (UDP, netlink, raw);
//!   no new process (threads are allowed), so the memory bound below holds
//!   for the whole command.
//! - **its own user and mount namespace** ([`ns`]): every `.git` and gitfile
//!   of the workspace, nested ones too, bound read-only over itself, as in
//!   the sandbox (no Landlock rule can take a right back below a folder it
//!   grants); a `.git` the command made is quarantined after it (issue 26
//!   item 4).
//! - **memory and time**: `RLIMIT_AS` of the profile's memory divided by
//!   [`AT_ONCE`], the number of confined commands the coordinator runs at
//!   once (rootless cgroups v1 offer no memory controller; the address
//!   space bound holds everywhere), and the caller's wall-clock limit
//!   (issue 26 item 7).

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, RestrictionStatus, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};
use lazaret_escalate::classify::PathProbe;
use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat, openat2};
use nix::sys::stat::Mode;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

use crate::mounts::MASKED;

mod ns;
pub use ns::QUARANTINE;

/// Confined commands one coordinator (one domain, all its sessions) runs at
/// once; one more is refused until one ends. A session's burst of requests
/// is as large, so everything a session may run at once fits.
pub const AT_ONCE: usize = 10;

/// The profile's memory, which the confined commands share.
static PROFILE_MEMORY: AtomicU64 = AtomicU64::new(crate::config::limits::DEFAULT_MEMORY);
/// Confined commands running now.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Sets the profile's memory limit (bytes), of which each confined command
/// gets [`memory_per_command`].
pub fn set_profile_memory(bytes: u64) {
    PROFILE_MEMORY.store(bytes, Ordering::SeqCst);
}

/// The address space one confined command may use: the profile's memory
/// over [`AT_ONCE`], so that all of them at once fit in it.
pub fn memory_per_command() -> u64 {
    PROFILE_MEMORY.load(Ordering::SeqCst) / AT_ONCE as u64
}

/// The Landlock ABI the rulesets are written for (best effort below it:
/// the parts a kernel lacks are left out, and seccomp still cuts sockets).
const ABI_TARGET: ABI = ABI::V6;

/// Read-only (and executable) for confined commands.
const SYSTEM_READ: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc",
];
/// Devices a command may read and write.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];
/// Top-level workspace entries that stay read-only to a confined command:
/// what the sandbox sees read-only or masked, and what configures the
/// next start.
const WORKSPACE_READ_ONLY: &[&str] = &[".git", "lazaret.toml"];

/// What the kernel offers for confinement, probed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    /// Landlock enforces rulesets; `abi` is what the crate and kernel share.
    Landlock { abi: i32, full: bool },
    /// No Landlock: auto-approve is off.
    Missing(String),
}

impl Support {
    pub fn available(&self) -> bool {
        matches!(self, Support::Landlock { .. })
    }
}

/// Probes Landlock by restricting a throwaway thread (a Landlock domain
/// binds only the thread that takes it).
pub fn probe() -> Support {
    let t = std::thread::spawn(|| -> Result<RestrictionStatus, String> {
        let ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(ABI_TARGET))
            .map_err(|e| e.to_string())?
            .create()
            .map_err(|e| e.to_string())?;
        ruleset.restrict_self().map_err(|e| e.to_string())
    });
    match t.join() {
        Ok(Ok(_)) if let Err(why) = ns::probe() => Support::Missing(why),
        Ok(Ok(status)) => match (status.ruleset, status.landlock) {
            (
                RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced,
                landlock::LandlockStatus::Available {
                    effective_abi,
                    kernel_abi,
                },
            ) => Support::Landlock {
                abi: kernel_abi.unwrap_or(effective_abi as i32),
                full: effective_abi >= ABI_TARGET,
            },
            (_, landlock::LandlockStatus::NotEnabled) => Support::Missing(
                "the kernel has Landlock but it is not enabled (add `landlock` to the `lsm=` boot parameter)".into(),
            ),
            (_, landlock::LandlockStatus::NotImplemented) => {
                Support::Missing("the kernel is built without Landlock (CONFIG_SECURITY_LANDLOCK)".into())
            }
            (s, _) => Support::Missing(format!("a Landlock ruleset was not enforced ({s:?})")),
        },
        Ok(Err(e)) => Support::Missing(format!("Landlock failed: {e}")),
        Err(_) => Support::Missing("the Landlock probe panicked".into()),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("the working directory {0} is outside the workspace (a symlink leads out)")]
    LeadsOut(String),
    #[error("the working directory {path} cannot be opened: {error}")]
    Open { path: String, error: Errno },
}

/// The workspace's host folder, held open for the server's life.
#[derive(Debug)]
pub struct WorkspaceRoot {
    fd: OwnedFd,
    pub host: PathBuf,
}

impl WorkspaceRoot {
    pub fn open(host: &Path) -> std::io::Result<Self> {
        let fd = openat(
            nix::fcntl::AT_FDCWD,
            host,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        Ok(WorkspaceRoot {
            fd,
            host: host.to_path_buf(),
        })
    }

    /// Opens `relative` beneath the workspace: no `..` or symlink may lead
    /// out; symlinks that stay inside are followed.
    pub fn pin(&self, relative: &Path) -> Result<PinnedDir, PinError> {
        let rel = if relative.as_os_str().is_empty() {
            Path::new(".")
        } else {
            relative
        };
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        let shown = self.host.join(relative).display().to_string();
        let fd = openat2(self.fd.as_fd(), rel, how).map_err(|error| match error {
            Errno::EXDEV | Errno::ELOOP => PinError::LeadsOut(shown.clone()),
            error => PinError::Open {
                path: shown.clone(),
                error,
            },
        })?;
        // The folder it is now, for the human to read.
        let host = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .unwrap_or_else(|_| PathBuf::from(&shown));
        Ok(PinnedDir {
            fd,
            host,
            relative: rel.to_path_buf(),
        })
    }

    /// Whether `candidate`, relative to `cwd` (relative to the root),
    /// leads out of the workspace. A path that does not exist yet stays
    /// inside: its resolution stopped at the missing part, beneath the
    /// root (a `..` or symlink out before it is refused first). `O_PATH`
    /// opens nothing: a FIFO the agent names does not block the judge.
    fn leads_out(&self, cwd: &Path, candidate: &str) -> bool {
        let path = cwd.join(candidate);
        let rel = if path.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &path
        };
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        matches!(
            openat2(self.fd.as_fd(), rel, how),
            Err(Errno::EXDEV | Errno::ELOOP)
        )
    }

    /// A [`PathProbe`] for arguments of a command running in `cwd`.
    pub fn probe<'a>(&'a self, cwd: &'a PinnedDir) -> impl PathProbe + 'a {
        Probe { root: self, cwd }
    }

    /// Everything a confined command in this workspace is held to but
    /// seccomp's socket filter: Landlock, its namespace's view of the
    /// workspace, the bound on processes.
    pub fn ruleset(&self, network: bool) -> Result<Rules, String> {
        let canonical = std::fs::read_link(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
            .map_err(|e| format!("cannot resolve the workspace {}: {e}", self.host.display()))?;
        let view = ns::View::scan(&canonical)
            .map_err(|e| format!("cannot read the workspace {}: {e}", self.host.display()))?;
        Ok(Rules {
            landlock: self.landlock(network)?,
            view,
            processes: processes()?,
        })
    }

    /// The Landlock ruleset for a confined command in this workspace.
    fn landlock(&self, network: bool) -> Result<RulesetCreated, String> {
        let abi = ABI_TARGET;
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(abi))
            .map_err(|e| e.to_string())?
            .scope(Scope::from_all(abi))
            .map_err(|e| e.to_string())?;
        if !network {
            ruleset = ruleset
                .handle_access(AccessNet::from_all(abi))
                .map_err(|e| e.to_string())?;
        }
        let mut created = ruleset.create().map_err(|e| e.to_string())?;
        let read = AccessFs::from_read(abi);
        for dir in SYSTEM_READ {
            if let Ok(fd) = open_path(nix::fcntl::AT_FDCWD, Path::new(dir)) {
                created = add(created, fd, read)?;
            }
        }
        for dev in DEVICES {
            if let Ok(fd) = open_path(nix::fcntl::AT_FDCWD, Path::new(dev)) {
                created = add(created, fd, AccessFs::from_file(abi))?;
            }
        }
        let root = self.fd.try_clone().map_err(|e| e.to_string())?;
        created = add(created, root, read)?;
        // Landlock rights are inherited by everything beneath a rule, so
        // write access is granted per top-level entry, leaving out the
        // protected ones (and new files at the top level).
        let entries = std::fs::read_dir(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
            .map_err(|e| format!("cannot list the workspace {}: {e}", self.host.display()))?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            if protected(&name) {
                continue;
            }
            let Ok(fd) = open_path(self.fd.as_fd(), Path::new(&name)) else {
                continue;
            };
            let Ok(st) = nix::sys::stat::fstat(&fd) else {
                continue;
            };
            let kind = st.st_mode & nix::libc::S_IFMT;
            let access = if kind == nix::libc::S_IFDIR {
                AccessFs::from_all(abi)
            } else if kind == nix::libc::S_IFREG {
                AccessFs::from_file(abi)
            } else {
                // Symlinks (their target is judged by its own rule), FIFOs,
                // sockets, devices: no extra rights.
                continue;
            };
            created = add(created, fd, access)?;
        }
        Ok(created)
    }
}

fn protected(name: &OsStr) -> bool {
    let name = name.as_bytes();
    WORKSPACE_READ_ONLY.iter().any(|p| p.as_bytes() == name)
        || MASKED
            .iter()
            .filter_map(|m| m.split('/').next())
            .any(|m| m.as_bytes() == name)
}

/// Opens `path` relative to `dir` without following a last symlink.
fn open_path(dir: impl AsFd, path: &Path) -> nix::Result<OwnedFd> {
    openat(
        dir,
        path,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

fn add(
    created: RulesetCreated,
    fd: OwnedFd,
    access: landlock::BitFlags<AccessFs>,
) -> Result<RulesetCreated, String> {
    created
        .add_rule(landlock::PathBeneath::new(fd, access))
        .map_err(|e| e.to_string())
}

struct Probe<'a> {
    root: &'a WorkspaceRoot,
    cwd: &'a PinnedDir,
}

impl PathProbe for Probe<'_> {
    fn leads_out(&self, relative: &str) -> bool {
        self.root.leads_out(&self.cwd.relative, relative)
    }
}

/// A working directory opened when the request was checked; the command
/// runs in it by descriptor, whatever its path points to later.
#[derive(Debug)]
pub struct PinnedDir {
    pub fd: OwnedFd,
    /// The host folder it was when opened (for the human and the audit).
    pub host: PathBuf,
    /// Its path relative to the workspace root, as requested.
    pub relative: PathBuf,
}

/// The seccomp filter for a confined command.
pub fn seccomp(network: bool) -> Result<BpfProgram, String> {
    use nix::libc;
    let unix = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Eq,
        libc::AF_UNIX as u64,
    )
    .map_err(|e| e.to_string())?;
    let socket = if network {
        vec![SeccompRule::new(vec![unix]).map_err(|e| e.to_string())?]
    } else {
        // Every socket() call.
        vec![]
    };
    let rules = [
        (libc::SYS_socket, socket),
        (libc::SYS_io_uring_setup, vec![]),
    ]
    .into_iter()
    .collect();
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())
}

/// A confined command makes no new process: `fork`, `vfork` and a `clone`
/// without `CLONE_THREAD` fail with EAGAIN (threads share the one address
/// space `RLIMIT_AS` bounds); `clone3`, whose flags seccomp cannot read,
/// fails with ENOSYS, so the C library falls back to `clone`.
fn processes() -> Result<[BpfProgram; 2], String> {
    use nix::libc;
    let arch: seccompiler::TargetArch = std::env::consts::ARCH
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    let not_thread = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(libc::CLONE_THREAD as u64),
        0,
    )
    .map_err(|e| e.to_string())?;
    let build = |rules: Vec<(i64, Vec<SeccompRule>)>, errno: i32| -> Result<BpfProgram, String> {
        SeccompFilter::new(
            rules.into_iter().collect(),
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            arch,
        )
        .map_err(|e| e.to_string())?
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())
    };
    Ok([
        build(
            vec![
                (libc::SYS_fork, vec![]),
                (libc::SYS_vfork, vec![]),
                (
                    libc::SYS_clone,
                    vec![SeccompRule::new(vec![not_thread]).map_err(|e| e.to_string())?],
                ),
            ],
            libc::EAGAIN,
        )?,
        build(vec![(libc::SYS_clone3, vec![])], libc::ENOSYS)?,
    ])
}

/// What [`WorkspaceRoot::ruleset`] prepares for one confined command.
#[derive(Debug)]
pub struct Rules {
    landlock: RulesetCreated,
    view: ns::View,
    processes: [BpfProgram; 2],
}

/// Everything the child applies to itself before `execve`.
#[derive(Debug)]
pub struct Confinement {
    pub ruleset: Rules,
    pub seccomp: BpfProgram,
}

/// Held while a confined command may run: its place among [`AT_ONCE`],
/// and, once it is over (dropped with the command, after the caller waited
/// for it), the quarantine of any `.git` it made.
struct Running {
    view: ns::View,
}

impl Drop for Running {
    fn drop(&mut self) {
        for found in self.view.quarantine_new() {
            tracing::warn!("{found}");
            eprintln!("lazaret: {found}");
        }
        RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Makes `cmd` start in `cwd` (by descriptor) and, with `confine`, in its
/// own namespace under Landlock, seccomp and the memory bound. The child
/// fails to start (and nothing runs) when any of it cannot be applied; a
/// confined command over [`AT_ONCE`] is refused.
pub fn prepare(
    cmd: &mut tokio::process::Command,
    cwd: &PinnedDir,
    confine: Option<Confinement>,
) -> std::io::Result<()> {
    // The hook owns a duplicate, closed in the parent once it is dropped.
    let dir = cwd.fd.try_clone()?;
    let Some(c) = confine else {
        let hook = move || -> std::io::Result<()> {
            nix::unistd::fchdir(&dir)?;
            Ok(())
        };
        // SAFETY: the hook only calls fchdir between fork and exec.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(hook);
        }
        return Ok(());
    };
    let entry = c.ruleset.view.entry(&dir)?;
    if RUNNING.fetch_add(1, Ordering::SeqCst) >= AT_ONCE {
        RUNNING.fetch_sub(1, Ordering::SeqCst);
        return Err(std::io::Error::other(format!(
            "too many requests running at once: {AT_ONCE} confined commands are running already (they share the profile's memory); try again when one is done"
        )));
    }
    let running = Running {
        view: c.ruleset.view,
    };
    let memory = memory_per_command() as nix::libc::rlim_t;
    let mut landlock = Some(c.ruleset.landlock);
    let seccomp = c.seccomp;
    let processes = c.ruleset.processes;
    let eperm = || std::io::Error::from_raw_os_error(nix::libc::EPERM);
    let hook = move || -> std::io::Result<()> {
        // Enters the workspace again in the new namespace, checked to be
        // the pinned directory.
        running.view.enter(&entry)?;
        let _ = &dir;
        let limit = nix::libc::rlimit {
            rlim_cur: memory,
            rlim_max: memory,
        };
        // SAFETY: a plain system call on a local structure.
        #[allow(unsafe_code)]
        if unsafe { nix::libc::setrlimit(nix::libc::RLIMIT_AS, &limit) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Landlock last but seccomp: it also forbids changing the mounts.
        match landlock.take().map(RulesetCreated::restrict_self) {
            Some(Ok(s)) if s.ruleset != RulesetStatus::NotEnforced => {}
            _ => return Err(eperm()),
        }
        for f in std::iter::once(&seccomp).chain(processes.iter()) {
            seccompiler::apply_filter(f).map_err(|_| eperm())?;
        }
        Ok(())
    };
    // SAFETY: the hook runs between fork and exec and only makes system
    // calls (unshare, open, write, mount calls, fchdir, setrlimit, prctl,
    // landlock_restrict_self, seccomp); the ruleset, filters, paths and
    // maps were built, and their memory allocated, in the parent.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(hook);
    }
    Ok(())
}
