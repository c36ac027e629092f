//! The private per-user runtime folder holding control sockets, lock files and
//! Trust Anchor material (decisions.md D4): mode 0700, owned by the user,
//! never a symlink.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::host::HostEnv;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeDirError {
    #[error("cannot create the runtime folder {path}: {error}")]
    Create {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "security: the runtime folder {0} is a symlink; Lazaret does not follow it. Remove it (rm {0}) and retry"
    )]
    Symlink(PathBuf),
    #[error("security: the runtime folder {0} is not a folder; remove it and retry")]
    NotADirectory(PathBuf),
    #[error(
        "security: the runtime folder {path} belongs to uid {owner}, not to you (uid {uid}); someone else may be intercepting Lazaret's sockets and keys, so Lazaret will not use it. Fix: have it removed (`sudo rm -rf {path}`), or point XDG_RUNTIME_DIR at a private memory-backed folder of yours (a systemd login sets /run/user/{uid}; `sudo loginctl enable-linger $USER` creates it)"
    )]
    Owner { path: PathBuf, owner: u32, uid: u32 },
    #[error(
        "security: the runtime folder {path} has mode {mode:03o}, so others can reach Lazaret's sockets; run `chmod 700 {path}`"
    )]
    Mode { path: PathBuf, mode: u32 },
}

/// Where the runtime folder goes without a usable `XDG_RUNTIME_DIR` (a `su`
/// login, CI): `/dev/shm`, the memory-backed folder every Linux system has,
/// when it is a tmpfs; `/tmp` only where it is not (then `doctor` warns).
/// Both are world-writable with the sticky bit, so [`RuntimeDir::ensure`]'s
/// owner, mode and no-symlink checks are what keep others out.
pub fn fallback_parent() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let memory = nix::sys::statfs::statfs(shm)
        .is_ok_and(|f| f.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
    if memory && std::fs::symlink_metadata(shm).is_ok_and(|m| m.is_dir()) {
        shm.to_path_buf()
    } else {
        PathBuf::from("/tmp")
    }
}

/// A checked private runtime folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeDir {
    path: PathBuf,
}

impl RuntimeDir {
    /// Where the folder is: `$XDG_RUNTIME_DIR/lazaret` when that variable
    /// names a private folder of this user, else `lazaret-{uid}` in a
    /// memory-backed folder ([`fallback_parent`]): keys never reach a disk
    /// (decisions.md D4).
    pub fn locate(env: &dyn HostEnv) -> PathBuf {
        let uid = nix::unistd::geteuid().as_raw();
        let usable = |p: &Path| {
            p.is_absolute()
                && std::fs::symlink_metadata(p)
                    .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
        };
        match env.var("XDG_RUNTIME_DIR").map(PathBuf::from) {
            // A variable inherited across `su`/`runuser` names someone else's
            // folder: fall back rather than fail.
            Some(xdg) if usable(&xdg) => xdg.join("lazaret"),
            _ => fallback_parent().join(format!("lazaret-{uid}")),
        }
    }

    /// The folder at `path` without creating it: only a path to print.
    pub fn unchecked(path: PathBuf) -> Self {
        RuntimeDir { path }
    }

    /// Creates the folder if needed (mode 0700) and checks it: not a
    /// symlink, a folder, owned by this user, no access for others.
    pub fn ensure(path: &Path) -> Result<Self, RuntimeDirError> {
        match std::fs::DirBuilder::new().mode(0o700).create(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => {
                // A dangling symlink makes mkdir fail with EEXIST too; any
                // other error is reported as it is.
                if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
                    return Err(RuntimeDirError::Symlink(path.to_path_buf()));
                }
                return Err(RuntimeDirError::Create {
                    path: path.to_path_buf(),
                    error,
                });
            }
        }
        let meta = std::fs::symlink_metadata(path).map_err(|error| RuntimeDirError::Create {
            path: path.to_path_buf(),
            error,
        })?;
        if meta.file_type().is_symlink() {
            return Err(RuntimeDirError::Symlink(path.to_path_buf()));
        }
        if !meta.is_dir() {
            return Err(RuntimeDirError::NotADirectory(path.to_path_buf()));
        }
        let uid = nix::unistd::geteuid().as_raw();
        if meta.uid() != uid {
            return Err(RuntimeDirError::Owner {
                path: path.to_path_buf(),
                owner: meta.uid(),
                uid,
            });
        }
        let mode = meta.mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(RuntimeDirError::Mode {
                path: path.to_path_buf(),
                mode,
            });
        }
        Ok(RuntimeDir {
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Makes `path` private to the user: mode 0700 for a folder (`dir`), 0600
/// for a file; keeps the execute bit off files. Never follows a symlink and
/// never touches what another user owns. A missing path is fine.
pub fn make_private(path: &Path, dir: bool) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if meta.file_type().is_symlink() || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Ok(());
    }
    let want = if dir { 0o700 } else { 0o600 };
    if ((dir && meta.is_dir()) || (!dir && meta.is_file())) && meta.mode() & 0o7777 != want {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(want))?;
    }
    Ok(())
}

/// Creates `path` and missing parents with mode 0700 (an existing `path`
/// of the user's is made 0700 too).
pub fn create_private_dir(path: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)?;
    make_private(path, true)
}

/// Writes `bytes` to `path` atomically, mode 0600.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("/"));
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("f"),
        std::process::id()
    ));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    std::io::Write::write_all(&mut f, bytes)?;
    std::fs::rename(&tmp, path)
}
