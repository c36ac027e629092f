//! Where Lazaret's own helper binaries live on the host.

use std::path::{Path, PathBuf};

/// The static binaries Lazaret puts into containers.
pub const SIDECAR_BINARY: &str = "lazaret-sidecar";
pub const ESCALATE_BINARY: &str = "lazaret-escalate";

/// Folders searched for helper binaries, in order: `$LAZARET_LIBEXEC_DIR`,
/// the folder of the running `lazaret`, then the install locations of
/// `scripts/setup`.
pub fn helper_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("LAZARET_LIBEXEC_DIR") {
        dirs.push(PathBuf::from(d));
    }
    if let Some(d) = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
    {
        dirs.push(d);
    }
    dirs.push(PathBuf::from("/usr/local/lib/lazaret"));
    dirs.push(PathBuf::from("/usr/lib/lazaret"));
    dirs
}

/// The first executable file called `name` in [`helper_dirs`].
pub fn find_helper(name: &str) -> Option<PathBuf> {
    helper_dirs()
        .into_iter()
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

/// Looks `name` up on `$PATH`, like a shell would.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
