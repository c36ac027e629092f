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
//!   for entries without network no socket at all (UDP, netlink, raw).

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

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
    /// leads out of the workspace. A path that does not exist yet is
    /// judged by the part of it that does.
    fn leads_out(&self, cwd: &Path, candidate: &str) -> bool {
        let mut path = cwd.join(candidate);
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        loop {
            let rel = if path.as_os_str().is_empty() {
                Path::new(".")
            } else {
                &path
            };
            match openat2(self.fd.as_fd(), rel, how) {
                Ok(_) => return false,
                Err(Errno::EXDEV | Errno::ELOOP) => return true,
                Err(Errno::ENOENT) if path.pop() => continue,
                Err(_) => return false,
            }
        }
    }

    /// A [`PathProbe`] for arguments of a command running in `cwd`.
    pub fn probe<'a>(&'a self, cwd: &'a PinnedDir) -> impl PathProbe + 'a {
        Probe { root: self, cwd }
    }

    /// The Landlock ruleset for a confined command in this workspace.
    pub fn ruleset(&self, network: bool) -> Result<RulesetCreated, String> {
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

/// Everything the child applies to itself before `execve`.
#[derive(Debug)]
pub struct Confinement {
    pub ruleset: RulesetCreated,
    pub seccomp: BpfProgram,
}

/// Makes `cmd` start in `cwd` (by descriptor) and, with `confine`, under
/// Landlock and seccomp. The child fails to start (and nothing runs) when
/// either cannot be applied.
pub fn prepare(
    cmd: &mut tokio::process::Command,
    cwd: &PinnedDir,
    confine: Option<Confinement>,
) -> std::io::Result<()> {
    // The hook owns a duplicate, closed in the parent once it is dropped.
    let dir = cwd.fd.try_clone()?;
    let mut confine = confine;
    let hook = move || -> std::io::Result<()> {
        nix::unistd::fchdir(&dir)?;
        if let Some(c) = confine.take() {
            match c.ruleset.restrict_self() {
                Ok(s) if s.ruleset != RulesetStatus::NotEnforced => {}
                _ => return Err(std::io::Error::from_raw_os_error(nix::libc::EPERM)),
            }
            seccompiler::apply_filter(&c.seccomp)
                .map_err(|_| std::io::Error::from_raw_os_error(nix::libc::EPERM))?;
        }
        Ok(())
    };
    // SAFETY: the hook runs between fork and exec and only makes system
    // calls (fchdir, prctl, landlock_restrict_self, seccomp); the ruleset
    // and filter were built, and their memory allocated, in the parent.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(hook);
    }
    Ok(())
}
