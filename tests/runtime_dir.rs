//! The private runtime folder (decisions.md D4): 0700, owned by the user,
//! never a symlink. Each hostile layout is built for real and refused.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use lazaret::host::FixedEnv;
use lazaret::rundir::RuntimeDir;

#[test]
fn creates_a_private_folder() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("rt");
    let rt = RuntimeDir::ensure(&p).unwrap();
    let meta = std::fs::symlink_metadata(rt.path()).unwrap();
    assert!(meta.is_dir());
    assert_eq!(meta.mode() & 0o777, 0o700);
    assert_eq!(meta.uid(), nix::unistd::geteuid().as_raw());
    // Idempotent.
    RuntimeDir::ensure(&p).unwrap();
}

#[test]
fn refuses_a_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = dir.path().join("rt");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let err = RuntimeDir::ensure(&link).unwrap_err().to_string();
    assert!(
        err.contains("is a symlink; Lazaret does not follow it"),
        "{err}"
    );
    // A dangling link is refused too, and nothing is created at its target.
    let dangling = dir.path().join("rt2");
    std::os::unix::fs::symlink(dir.path().join("nothing"), &dangling).unwrap();
    let err = RuntimeDir::ensure(&dangling).unwrap_err().to_string();
    assert!(err.contains("is a symlink"), "{err}");
    assert!(!dir.path().join("nothing").exists());
}

#[test]
fn refuses_loose_permissions_and_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("rt");
    std::fs::create_dir(&p).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = RuntimeDir::ensure(&p).unwrap_err().to_string();
    assert!(
        err.contains("has mode 777") && err.contains("chmod 700"),
        "{err}"
    );
    let f = dir.path().join("file");
    std::fs::write(&f, "").unwrap();
    let err = RuntimeDir::ensure(&f).unwrap_err().to_string();
    assert!(err.contains("is not a folder"), "{err}");
}

/// Someone else's folder at the predictable path is refused. Needs root to
/// create a folder owned by another user; CI runs as root.
#[test]
fn refuses_a_folder_owned_by_someone_else() {
    if !common::is_root() {
        eprintln!("skipped: creating another user's folder needs root (CI runs this)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("rt");
    std::fs::create_dir(&p).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
    nix::unistd::chown(&p, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let err = RuntimeDir::ensure(&p).unwrap_err().to_string();
    assert!(err.contains("belongs to uid 65534, not to you"), "{err}");
}

/// An inherited XDG_RUNTIME_DIR of another user (after `su`) is not used.
#[test]
fn locate_ignores_a_foreign_xdg_runtime_dir() {
    let dir = tempfile::tempdir().unwrap();
    let mine = dir.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o700)).unwrap();
    let env = FixedEnv::default().with("XDG_RUNTIME_DIR", mine.to_str().unwrap());
    assert_eq!(RuntimeDir::locate(&env), mine.join("lazaret"));

    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let env = FixedEnv::default().with("XDG_RUNTIME_DIR", open.to_str().unwrap());
    let uid = nix::unistd::geteuid().as_raw();
    assert_eq!(
        RuntimeDir::locate(&env),
        std::path::PathBuf::from(format!("/tmp/lazaret-{uid}"))
    );
    let env = FixedEnv::default();
    assert_eq!(
        RuntimeDir::locate(&env),
        std::path::PathBuf::from(format!("/tmp/lazaret-{uid}"))
    );
}
