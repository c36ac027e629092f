//! `lazaret doctor` against this very host, as the unprivileged user who
//! runs Lazaret: every check passes after scripts/setup, and a prerequisite
//! made missing is reported with its fix.

mod common;

use common::{STANDARD_PATH, Scratch, lazaret, text, user_home as home};

#[test]
fn all_checks_pass_on_a_prepared_host() {
    let s = Scratch::new();
    let out = lazaret(&home(), &s.path(), STANDARD_PATH, &["doctor"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "doctor failed on this host (run scripts/setup first):\n{stdout}{stderr}"
    );
    assert!(
        stdout.contains("checks passed: this host can run Lazaret"),
        "{stdout}"
    );
    assert!(!stdout.contains("FAIL"), "{stdout}");
    for name in [
        "podman",
        "runc",
        "runsc flags",
        "subuid",
        "/dev/net/tun",
        "storage driver",
        "rlimits",
        // Auto-approved host commands run under Landlock (decisions.md D9).
        "landlock",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with("ok") && l.contains(name)),
            "no passing `{name}` line:\n{stdout}"
        );
    }
}

/// A PATH that has everything the standard one has, except `missing`.
fn path_without(s: &Scratch, missing: &str) -> String {
    let bin = s.mkdir("bin");
    for dir in STANDARD_PATH.split(':') {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let link = bin.join(&name);
            if name != missing && !link.exists() {
                let _ = std::os::unix::fs::symlink(e.path(), &link);
            }
        }
    }
    bin.display().to_string()
}

#[test]
fn missing_runsc_is_reported_with_its_fix() {
    let s = Scratch::new();
    let path = path_without(&s, "runsc");
    let out = lazaret(&home(), &s.path(), &path, &["doctor"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let line = stdout
        .lines()
        .position(|l| l.starts_with("FAIL") && l.contains("runsc"))
        .unwrap_or_else(|| panic!("no failing runsc line:\n{stdout}"));
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[line].contains("`runsc` (gVisor) is not on PATH"),
        "{stdout}"
    );
    assert!(
        lines[line + 1].contains("fix: sudo scripts/setup"),
        "{stdout}"
    );
    assert!(
        stdout.contains("1 of "),
        "exactly one check fails:\n{stdout}"
    );
}

#[test]
fn missing_fuse_overlayfs_is_reported_with_its_fix() {
    let s = Scratch::new();
    let path = path_without(&s, "fuse-overlayfs");
    let out = lazaret(&home(), &s.path(), &path, &["doctor"])
        .output()
        .unwrap();
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("`fuse-overlayfs` is not on PATH"),
        "{stdout}"
    );
    assert!(
        stdout.contains("fix: sudo apt-get install fuse-overlayfs"),
        "{stdout}"
    );
}

/// The helpers run alone in containers without a dynamic loader: a
/// dynamically linked build first in the search path (as `cargo build`
/// leaves one beside `lazaret`) is passed over for the installed static one.
#[test]
fn dynamic_helper_builds_are_passed_over() {
    let s = Scratch::new();
    let libexec = s.mkdir("libexec");
    // A dynamically linked executable, named like the sidecar.
    std::fs::copy("/bin/true", libexec.join("lazaret-sidecar")).unwrap();
    let mut cmd = lazaret(&home(), &s.path(), STANDARD_PATH, &["doctor"]);
    cmd.env("LAZARET_LIBEXEC_DIR", &libexec);
    let out = cmd.output().unwrap();
    let (stdout, stderr) = text(&out);
    let line = stdout
        .lines()
        .find(|l| l.contains("helper binaries"))
        .unwrap_or_else(|| panic!("no helper line:\n{stdout}{stderr}"));
    assert!(line.starts_with("ok"), "{line}");
    assert!(
        line.contains("/usr/local/lib/lazaret/lazaret-sidecar"),
        "{line}"
    );
    assert!(!line.contains(&libexec.display().to_string()), "{line}");
}
