//! The State Anchor (spec §4.3.2–4.3.4): persistent folders of a domain as
//! overlays of the image's folder (lower) and a host folder (upper).
//!
//! The overlays are mounted inside the user's podman user namespace (the
//! pause process's, reached through `podman unshare`), where later
//! `podman run -v MERGED:/usr` sees them; they are invisible from the plain
//! host. Kernel overlay with `userxattr` is tried first (no daemon), then
//! fuse-overlayfs.

use std::path::{Path, PathBuf};

use crate::config::RUNTIME_INJECTED_FILES;
use crate::podman::{Podman, PodmanError};

#[derive(Debug, thiserror::Error)]
pub enum StateAnchorError {
    #[error(transparent)]
    Podman(#[from] PodmanError),
    #[error("cannot prepare {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "cannot mount the State Anchor overlay for {dir}: kernel overlay said `{kernel}`, fuse-overlayfs said `{fuse}`"
    )]
    Mount {
        dir: PathBuf,
        kernel: String,
        fuse: String,
    },
    #[error(
        "the path `{0}` contains `,` or `:`, which overlay mount options cannot carry; choose a data_root without them"
    )]
    BadPath(PathBuf),
}

/// One persistent folder and its three host folders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistentDir {
    /// The folder in the container, e.g. `/usr`.
    pub container: PathBuf,
    pub changes: PathBuf,
    pub work: PathBuf,
    pub merged: PathBuf,
}

/// The host folder names for `container` under the Domain Root: `/usr`
/// gives `usr_changes`, `usr_work`, `usr_merged` as in spec §4.3.2.
pub fn layout(domain_root: &Path, container: &Path) -> PersistentDir {
    let slug: String = container
        .to_string_lossy()
        .trim_matches('/')
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    PersistentDir {
        container: container.to_path_buf(),
        changes: domain_root.join(format!("{slug}_changes")),
        work: domain_root.join(format!("{slug}_work")),
        merged: domain_root.join(format!("{slug}_merged")),
    }
}

/// Mount points under `root` in the podman user namespace's mount table.
pub fn mounted_under(podman: &Podman, root: &Path) -> Result<Vec<PathBuf>, PodmanError> {
    let table = podman.run(["unshare", "cat", "/proc/self/mountinfo"])?;
    Ok(table
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mountinfo)
        .map(PathBuf::from)
        .filter(|p| p.starts_with(root))
        .collect())
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape_mountinfo(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let code: String = chars.by_ref().take(3).collect();
            if let Ok(n) = u8::from_str_radix(&code, 8) {
                out.push(n as char);
                continue;
            }
            out.push('\\');
            out.push_str(&code);
        } else {
            out.push(c);
        }
    }
    out
}

fn prepare(path: &Path) -> Result<(), StateAnchorError> {
    std::fs::create_dir_all(path).map_err(|error| StateAnchorError::Io {
        path: path.to_path_buf(),
        error,
    })
}

/// Mounts every persistent folder of `image` that is not mounted yet and
/// returns them all. Idempotent: a mount that vanished (the pause process
/// restarted) is mounted again.
pub fn mount(
    podman: &Podman,
    domain_root: &Path,
    image: &str,
    dirs: &[PathBuf],
) -> Result<Vec<PersistentDir>, StateAnchorError> {
    if dirs.is_empty() {
        return Ok(Vec::new());
    }
    let root_str = domain_root.to_string_lossy();
    if root_str.contains(',') || root_str.contains(':') {
        return Err(StateAnchorError::BadPath(domain_root.to_path_buf()));
    }
    let mounted = mounted_under(podman, domain_root)?;
    let layouts: Vec<PersistentDir> = dirs.iter().map(|d| layout(domain_root, d)).collect();
    if layouts.iter().all(|l| mounted.contains(&l.merged)) {
        return Ok(layouts);
    }
    prepare(domain_root)?;
    // Record the image before mounting it, so a teardown after a crash
    // anywhere below still releases it.
    let record = domain_root.join("state_anchor.image");
    std::fs::write(&record, image).map_err(|error| StateAnchorError::Io {
        path: record.clone(),
        error,
    })?;
    // The image's root in the user namespace; mounting it again is cheap and
    // returns the same path.
    let image_root = PathBuf::from(
        podman
            .run(["unshare", "podman", "image", "mount", image])?
            .trim(),
    );
    let empty_lower = domain_root.join("empty_lower");
    for l in layouts.iter().filter(|l| !mounted.contains(&l.merged)) {
        for p in [&l.changes, &l.work, &l.merged] {
            prepare(p)?;
        }
        if l.container == Path::new("/etc") {
            drop_runtime_injected(podman, &l.changes)?;
        }
        let mut lower = image_root.join(l.container.strip_prefix("/").unwrap_or(&l.container));
        if lower.to_string_lossy().contains(',') {
            return Err(StateAnchorError::BadPath(lower));
        }
        // A folder the image lacks starts empty.
        if podman
            .run(["unshare", "test", "-d", &lower.to_string_lossy()])
            .is_err()
        {
            prepare(&empty_lower)?;
            lower = empty_lower.clone();
        }
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            lower.display(),
            l.changes.display(),
            l.work.display()
        );
        let merged = l.merged.to_string_lossy().into_owned();
        let kernel = podman.run([
            "unshare",
            "mount",
            "-t",
            "overlay",
            "overlay",
            "-o",
            &format!("userxattr,{opts}"),
            &merged,
        ]);
        if let Err(kernel) = kernel {
            podman
                .run(["unshare", "fuse-overlayfs", "-o", &opts, &merged])
                .map_err(|fuse| StateAnchorError::Mount {
                    dir: l.container.clone(),
                    kernel: kernel.to_string(),
                    fuse: fuse.to_string(),
                })?;
        }
    }
    Ok(layouts)
}

/// Spec §4.3.4: podman writes these files at every start; a persisted copy
/// (or whiteout) in the upper layer must never shadow them.
fn drop_runtime_injected(podman: &Podman, changes: &Path) -> Result<(), PodmanError> {
    let files: Vec<String> = RUNTIME_INJECTED_FILES
        .iter()
        .filter_map(|f| Path::new(f).file_name())
        .map(|n| changes.join(n).to_string_lossy().into_owned())
        .collect();
    let mut args = vec!["unshare".to_string(), "rm".into(), "-f".into(), "--".into()];
    args.extend(files);
    podman.run(args).map(drop)
}

/// Unmounts every overlay under the Domain Root and releases the image
/// mount. Idempotent; safe when nothing is mounted.
pub fn unmount(podman: &Podman, domain_root: &Path) -> Result<(), PodmanError> {
    let mut mounted = mounted_under(podman, domain_root)?;
    // Deepest first, should anything be nested.
    mounted.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for m in mounted {
        podman.run(["unshare", "umount", &m.to_string_lossy()])?;
    }
    // Mount points podman created for its own /etc files are stubs in the
    // upper layer; they are not the agent's state.
    let etc = layout(domain_root, Path::new("/etc")).changes;
    if etc.is_dir() {
        drop_runtime_injected(podman, &etc)?;
    }
    let record = domain_root.join("state_anchor.image");
    if let Ok(image) = std::fs::read_to_string(&record) {
        // Another domain may still use the image; podman counts mounts.
        match podman.run(["unshare", "podman", "image", "unmount", image.trim()]) {
            Ok(_) => {}
            Err(PodmanError::Failed { stderr, .. })
                if stderr.contains("not known") || stderr.contains("no such image") => {}
            Err(e) => return Err(e),
        }
        let _ = std::fs::remove_file(&record);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_follows_the_spec_names() {
        let l = layout(Path::new("/d"), Path::new("/usr"));
        assert_eq!(l.changes, Path::new("/d/usr_changes"));
        assert_eq!(l.work, Path::new("/d/usr_work"));
        assert_eq!(l.merged, Path::new("/d/usr_merged"));
        assert_eq!(
            layout(Path::new("/d"), Path::new("/var/lib/apt")).merged,
            Path::new("/d/var_lib_apt_merged")
        );
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo("/a\\040b"), "/a b");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
    }
}
