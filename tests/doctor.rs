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
        stdout.contains("checks passed: this host can run Lazaret")
            || stdout.contains("warning(s): this host can run Lazaret"),
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
    let libexec_s = libexec.display().to_string();
    // (Over any LAZARET_LIBEXEC_DIR the tests themselves run with.)
    let out = common::lazaret_env(
        &home(),
        &s.path(),
        STANDARD_PATH,
        &[("LAZARET_LIBEXEC_DIR", &libexec_s)],
        &["doctor"],
    )
    .output()
    .unwrap();
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

/// Podman prints warnings on stderr on some correctly configured hosts
/// (`"/" is not a shared mount` under `su`, for one); doctor reads every
/// answer from stdout only, so a warning is never taken for the answer.
#[test]
fn podman_warnings_on_stderr_are_not_answers() {
    let s = Scratch::new();
    let bin = s.mkdir("warnbin");
    let real = STANDARD_PATH
        .split(':')
        .map(|d| std::path::Path::new(d).join("podman"))
        .find(|p| p.exists())
        .expect("podman is installed");
    s.write(
        "warnbin/podman",
        &format!(
            "#!/bin/sh\necho 'time=\"2026-01-01T00:00:00Z\" level=warning msg=\"\\\"/\\\" is not a shared mount, this could cause issues or missing mounts with rootless containers\"' >&2\necho 'WARN[0000] \"/\" is not a shared mount' >&2\nexec {} \"$@\"\n",
            real.display()
        ),
    );
    std::fs::set_permissions(
        bin.join("podman"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let path = format!("{}:{STANDARD_PATH}", bin.display());
    let out = lazaret(&home(), &s.path(), &path, &["doctor"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "doctor failed with podman warning on stderr:\n{stdout}{stderr}"
    );
    let line = stdout
        .lines()
        .find(|l| l.contains("storage driver"))
        .unwrap_or_else(|| panic!("no storage line:\n{stdout}"));
    assert!(
        line.starts_with("ok") && line.trim_end().ends_with("overlay"),
        "{line}"
    );
    let podman = stdout
        .lines()
        .find(|l| l.contains("podman"))
        .unwrap_or_else(|| panic!("no podman line:\n{stdout}"));
    assert!(
        podman.starts_with("ok") && !podman.contains("WARN"),
        "{podman}"
    );
}

/// scripts/setup configures podman through a drop-in, undoes an earlier
/// set-up's replaced containers.conf, and says so; podman (4.3 here) reads
/// the drop-in over the machine's own file, and so does doctor. Run in a
/// private mount namespace over a copy of /etc/containers, so the host's
/// files are never touched. Needs root.
#[test]
fn setup_configures_podman_through_a_dropin_only() {
    if !common::can_run_as_root("a private mount namespace over /etc/containers needs root") {
        return;
    }
    let s = Scratch::new();
    let etc = s.mkdir("etc-containers");
    for e in std::fs::read_dir("/etc/containers").unwrap().flatten() {
        let name = e.file_name();
        if name != "containers.conf" && name != "containers.conf.d" {
            let ok = std::process::Command::new("cp")
                .arg("-a")
                .arg(e.path())
                .arg(etc.join(&name))
                .status()
                .unwrap();
            assert!(ok.success());
        }
    }
    // What an earlier set-up left: its own file, and the machine's, which
    // asks for a runtime that fails on this host's cgroups.
    std::fs::write(
        etc.join("containers.conf"),
        "# lazaret: managed by scripts/setup (the previous file, if any, is *.lazaret-backup)\n[engine]\nruntime = \"runc\"\n",
    )
    .unwrap();
    let machine = "# the machine's own\n[engine]\nruntime = \"crun\"\n";
    std::fs::write(etc.join("containers.conf.lazaret-backup"), machine).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/podman-conf");
    let out = std::process::Command::new(script)
        .arg(&etc)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("50-lazaret.conf"), "{stdout}");
    assert!(stdout.contains("restored"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(etc.join("containers.conf")).unwrap(),
        machine
    );
    assert!(!etc.join("containers.conf.lazaret-backup").exists());
    // Idempotent, and says nothing changed.
    let out = std::process::Command::new(script)
        .arg(&etc)
        .output()
        .unwrap();
    let (again, _) = text(&out);
    assert!(
        again.contains("already configured") && !again.contains("==>"),
        "{again}"
    );

    // podman and doctor see the drop-in's runtime over the machine's crun.
    let doctor = common::lazaret_bin();
    let user_part = match common::test_user() {
        Some(u) => format!(
            "runuser -u {} -- env -i HOME={} PATH={STANDARD_PATH} {} doctor",
            u.name,
            u.home.display(),
            doctor.display()
        ),
        None => format!("{} doctor", doctor.display()),
    };
    let out = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "mount --bind {} /etc/containers && podman info --format '{{{{.Host.OCIRuntime.Name}}}}' && cd / && {user_part}",
            etc.display()
        ))
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(stdout.lines().next(), Some("runc"), "{stdout}{stderr}");
    for name in ["oci runtime", "rlimits"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with("ok") && l.contains(name)),
            "no passing `{name}` line:\n{stdout}"
        );
    }
}
