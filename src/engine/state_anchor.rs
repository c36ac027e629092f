//! The State Anchor (spec §4.3.2–4.3.4): persistent folders of a domain as
//! overlays of the image's folder (lower) and a host folder (upper).
//!
//! The overlays are mounted inside the user's podman user namespace (the
//! pause process's, reached through `podman unshare`), where later
//! `podman run -v MERGED:/usr` sees them; they are invisible from the plain
//! host. Kernel overlay with `userxattr` is tried first (no daemon), then
//! fuse-overlayfs.
//!
//! The lower folder is the domain's own bind mount of the image's folder
//! (`<dir>_lower`), taken while podman holds the image mounted for a moment:
//! podman counts image mounts per user, not per domain, so a domain that
//! kept the image mounted for its whole life could lose its root to any
//! miscounted unmount of another domain of the same image (one killed
//! mid-start, say). A bind mount keeps the image's file system alive on
//! its own, whatever podman does with the image mount afterwards.

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
    #[error(
        "podman mounted the image at {0}, which does not exist in its user namespace; try again, and if it persists run `podman system migrate`"
    )]
    ImageRootMissing(PathBuf),
}

/// One persistent folder and its three host folders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistentDir {
    /// The folder in the container, e.g. `/usr`.
    pub container: PathBuf,
    /// This domain's bind mount of the image's folder.
    pub lower: PathBuf,
    pub changes: PathBuf,
    pub work: PathBuf,
    pub merged: PathBuf,
}

/// The host folder names for `container` under the Domain Root: `/usr`
/// gives `usr_changes`, `usr_work`, `usr_merged` as in spec §4.3.2 (and
/// `usr_lower`, the image's `/usr`).
pub fn layout(domain_root: &Path, container: &Path) -> PersistentDir {
    let slug: String = container
        .to_string_lossy()
        .trim_matches('/')
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    PersistentDir {
        container: container.to_path_buf(),
        lower: domain_root.join(format!("{slug}_lower")),
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
    let mut mounted = mounted;
    for attempt in 1.. {
        // The image's root in the user namespace, held only until each
        // folder has its own bind mount below.
        let image_root = PathBuf::from(
            podman
                .run(["unshare", "podman", "image", "mount", image])?
                .trim(),
        );
        let result = mount_overlays(podman, domain_root, &image_root, &layouts, &mounted);
        let released = podman.run(["unshare", "podman", "image", "unmount", image]);
        match result {
            // Unmounted in between by someone else: mounted again.
            Err(StateAnchorError::ImageRootMissing(_)) if attempt < 3 => {
                mounted = mounted_under(podman, domain_root)?;
            }
            result => {
                result?;
                released?;
                break;
            }
        }
    }
    Ok(layouts)
}

fn mount_overlays(
    podman: &Podman,
    domain_root: &Path,
    image_root: &Path,
    layouts: &[PersistentDir],
    mounted: &[PathBuf],
) -> Result<(), StateAnchorError> {
    let unshare_ok = |args: &[&str]| {
        let mut all = vec!["unshare"];
        all.extend_from_slice(args);
        podman.run(all).is_ok()
    };
    let image_root_str = image_root.to_string_lossy();
    let root_missing = || {
        (!unshare_ok(&["test", "-d", &image_root_str]))
            .then(|| StateAnchorError::ImageRootMissing(image_root.to_path_buf()))
    };
    if let Some(missing) = root_missing() {
        return Err(missing);
    }
    let empty_lower = domain_root.join("empty_lower");
    for l in layouts.iter().filter(|l| !mounted.contains(&l.merged)) {
        for p in [&l.lower, &l.changes, &l.work, &l.merged] {
            prepare(p)?;
        }
        if l.container == Path::new("/etc") {
            drop_runtime_injected(podman, &l.changes)?;
        }
        let lower_str = l.lower.to_string_lossy().into_owned();
        // A bind left by a start that died before its overlay: taken again.
        if mounted.contains(&l.lower) {
            podman.run(["unshare", "umount", &lower_str])?;
        }
        let source = image_root.join(l.container.strip_prefix("/").unwrap_or(&l.container));
        // A folder the image lacks starts empty.
        let lower = if unshare_ok(&["test", "-d", &source.to_string_lossy()]) {
            let bound = podman.run([
                "unshare",
                "mount",
                "--bind",
                &source.to_string_lossy(),
                &lower_str,
            ]);
            if let Err(e) = bound {
                return Err(root_missing().unwrap_or(e.into()));
            }
            l.lower.clone()
        } else if let Some(missing) = root_missing() {
            return Err(missing);
        } else {
            prepare(&empty_lower)?;
            empty_lower.clone()
        };
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
    Ok(())
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
    // Deepest first, should anything be nested; an overlay before the bind
    // mount it has as its lower folder (which is busy until then).
    mounted.sort_by_key(|p| {
        let lower = p.to_string_lossy().ends_with("_lower");
        (std::cmp::Reverse(p.components().count()), lower)
    });
    // Two teardowns of one domain may meet (the coordinator's and `down`):
    // a mount the other already took is no failure, and one failure does
    // not leave the rest mounted.
    let mut first_error = None;
    for m in mounted {
        match podman.run(["unshare", "umount", &m.to_string_lossy()]) {
            Ok(_) => {}
            Err(PodmanError::Failed { stderr, .. }) if stderr.contains("not mounted") => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    // Mount points podman created for its own /etc files are stubs in the
    // upper layer; they are not the agent's state.
    let etc = layout(domain_root, Path::new("/etc")).changes;
    if etc.is_dir() {
        drop_runtime_injected(podman, &etc)?;
    }
    // A domain started by an older Lazaret held the image mounted for its
    // whole life and recorded which: that one mount is given back.
    let record = domain_root.join("state_anchor.image");
    if let Ok(image) = std::fs::read_to_string(&record) {
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
        assert_eq!(l.lower, Path::new("/d/usr_lower"));
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
