//! Hold-to-bind locking (spec §4.3.5 Step 1) on the domain's lock file.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot open the lock file {path}: {error}")]
    Open {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    #[error("cannot lock {path}: {errno}")]
    Flock {
        path: std::path::PathBuf,
        errno: Errno,
    },
}

/// Who we are after trying the lock.
#[derive(Debug)]
pub enum Role {
    /// We hold the exclusive lock: check the socket, spawn the coordinator
    /// if needed, and keep the lock until the socket accepts.
    Leader(Flock<File>),
    /// Someone else led; their setup is finished (we waited for the lock
    /// and released it at once).
    Follower,
}

fn open(path: &Path) -> Result<File, LockError> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        // Never follow a planted symlink (the folder is private, but still).
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)
        .map_err(|error| LockError::Open {
            path: path.to_path_buf(),
            error,
        })
}

/// LOCK_EX | LOCK_NB; on contention, block on LOCK_EX, then LOCK_UN.
pub fn acquire(path: &Path) -> Result<Role, LockError> {
    match Flock::lock(open(path)?, FlockArg::LockExclusiveNonblock) {
        Ok(guard) => Ok(Role::Leader(guard)),
        Err((file, Errno::EWOULDBLOCK)) => {
            let guard = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, errno)| {
                LockError::Flock {
                    path: path.to_path_buf(),
                    errno,
                }
            })?;
            drop(guard);
            Ok(Role::Follower)
        }
        Err((_, errno)) => Err(LockError::Flock {
            path: path.to_path_buf(),
            errno,
        }),
    }
}

/// Blocks until the exclusive lock is ours (for work that must not overlap a
/// leader's start-up, e.g. reading the store with no coordinator running).
pub fn exclusive(path: &Path) -> Result<Flock<File>, LockError> {
    Flock::lock(open(path)?, FlockArg::LockExclusive).map_err(|(_, errno)| LockError::Flock {
        path: path.to_path_buf(),
        errno,
    })
}

/// Non-blocking exclusive lock, `None` when someone holds it.
pub fn try_exclusive(path: &Path) -> Result<Option<Flock<File>>, LockError> {
    match Flock::lock(open(path)?, FlockArg::LockExclusiveNonblock) {
        Ok(g) => Ok(Some(g)),
        Err((_, Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, errno)) => Err(LockError::Flock {
            path: path.to_path_buf(),
            errno,
        }),
    }
}
