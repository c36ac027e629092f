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
    if !common::can_run_as_root("creating another user's folder needs root") {
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
        std::path::PathBuf::from(format!("/dev/shm/lazaret-{uid}"))
    );
    let env = FixedEnv::default();
    assert_eq!(
        RuntimeDir::locate(&env),
        std::path::PathBuf::from(format!("/dev/shm/lazaret-{uid}"))
    );
}

/// Run as a throwaway uid by [`fallback_is_memory_backed_and_a_taken_one_is_refused`]:
/// locates and ensures the runtime folder without XDG_RUNTIME_DIR and prints
/// the outcome.
#[test]
#[ignore = "helper: run only by another test, as another uid"]
fn fallback_child() {
    match RuntimeDir::ensure(&RuntimeDir::locate(&FixedEnv::default())) {
        Ok(rt) => {
            let fs = nix::sys::statfs::statfs(rt.path()).unwrap();
            let tmpfs = fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC;
            println!("OK {} tmpfs={tmpfs}", rt.path().display());
        }
        Err(e) => println!("ERR {e}"),
    }
}

/// Without XDG_RUNTIME_DIR (a `su` login, CI) the runtime folder, where the
/// sandbox's client keys live, is memory-backed; when another local user
/// pre-created it, Lazaret refuses it and the error names the fix.
/// Needs root, to act as two other users.
#[test]
fn fallback_is_memory_backed_and_a_taken_one_is_refused() {
    if !common::can_run_as_root("acting as other users needs root") {
        return;
    }
    // An uid nobody uses, so no real user's folder is touched.
    let uid = 61_000 + std::process::id() % 1000;
    let folder = std::path::PathBuf::from(format!("/dev/shm/lazaret-{uid}"));
    let _ = std::fs::remove_dir_all(&folder);
    // The test binary, where that uid can run it.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.path().join("t");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = || {
        let out = std::process::Command::new("setpriv")
            .args([
                &format!("--reuid={uid}"),
                &format!("--regid={uid}"),
                "--clear-groups",
                "env",
                "-i",
                "PATH=/usr/bin:/bin",
            ])
            .arg(&exe)
            .args(["--exact", "fallback_child", "--ignored", "--nocapture"])
            .current_dir("/")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .find(|l| l.starts_with("OK ") || l.starts_with("ERR "))
            .unwrap_or_else(|| {
                panic!(
                    "child said nothing: {text}{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })
            .to_string()
    };
    // Free: created in memory, private.
    let line = run();
    assert_eq!(line, format!("OK {} tmpfs=true", folder.display()));
    let meta = std::fs::symlink_metadata(&folder).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (uid, 0o700));
    std::fs::remove_dir_all(&folder).unwrap();

    // Taken: another user (here `nobody`) created it first.
    std::fs::create_dir(&folder).unwrap();
    std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o700)).unwrap();
    nix::unistd::chown(&folder, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let line = run();
    std::fs::remove_dir_all(&folder).unwrap();
    assert!(line.starts_with("ERR "), "{line}");
    for part in [
        format!("{} belongs to uid 65534, not to you", folder.display()),
        format!("sudo rm -rf {}", folder.display()),
        "XDG_RUNTIME_DIR".to_string(),
    ] {
        assert!(line.contains(&part), "missing `{part}`: {line}");
    }

    // A symlink planted there is refused and not followed.
    let target = dir.path().join("elsewhere");
    std::os::unix::fs::symlink(&target, &folder).unwrap();
    let line = run();
    std::fs::remove_file(&folder).unwrap();
    assert!(line.contains("is a symlink"), "{line}");
    assert!(!target.exists());
}
