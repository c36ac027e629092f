//! The fail-closed self-test (issue 17): every sandbox start proves from
//! inside that the sandbox is what Lazaret says it is, and `lazaret doctor
//! --sandbox` does the same on demand. Each test breaks one protection for
//! real and checks the start (or the doctor) refuses, naming the check.

mod common;

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::sandbox::Domain;
use common::{STANDARD_PATH, Scratch, Tmux, podman, text};

fn doctor_sandbox(d: &Domain, profile: &str) -> (bool, String) {
    let out = d
        .cmd_raw(STANDARD_PATH, &["doctor", "--sandbox", profile])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    (out.status.success(), format!("{stdout}{stderr}"))
}

fn line<'a>(report: &'a str, mark: &str, name: &str) -> &'a str {
    report
        .lines()
        .find(|l| l.starts_with(mark) && l.contains(name))
        .unwrap_or_else(|| panic!("no `{mark}` line for `{name}`:\n{report}"))
}

/// A folder holding a `runsc` that really runs runc (a broken or swapped
/// gVisor install): podman is told runsc, the sandbox gets the host kernel.
fn fake_runsc(s: &Scratch) -> String {
    let bin = s.mkdir("fakebin");
    let runsc = STANDARD_PATH
        .split(':')
        .map(|d| std::path::Path::new(d).join("runsc"))
        .find(|p| p.exists())
        .expect("runsc is installed")
        .display()
        .to_string();
    s.write(
        "fakebin/runsc",
        &format!(
            r#"#!/bin/sh
case "$1" in flags|--version) exec {runsc} "$@";; esac
for a in "$@"; do
  shift
  case "$a" in --ignore-cgroups|--network=*|--host-uds=*|--directfs=*|--fsgofer-host-uds|--oci-seccomp|--overlay2=*|--net-disconnect-ok) ;; *) set -- "$@" "$a";; esac
done
exec runc "$@"
"#
        ),
    );
    std::fs::set_permissions(
        bin.join("runsc"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    format!("{}:{STANDARD_PATH}", bin.display())
}

/// gVisor: the start passes its self-test; `doctor --sandbox` shows every
/// check; a rule removed from the sidecar's table behind Lazaret's back is
/// caught. (The denied probe itself may still be refused: slirp4netns does
/// not offer the host alias to a domain whose policy denies it.)
#[test]
fn gvisor_sandbox_passes_and_a_removed_rule_is_caught() {
    let d = Domain::new("gv");
    // Through the coordinator, so the Escalation Socket exists: the start
    // itself runs the self-test, socket included.
    let mut session = d
        .cmd_raw(STANDARD_PATH, &["exec", "gv", "--", "sleep", "120"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !(podman(&["container", "exists", &d.sandbox()])
        .status
        .success()
        && d.sh("pgrep -x sleep").0 == 0)
    {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "the domain did not come up"
        );
        assert!(session.try_wait().unwrap().is_none(), "exec ended early");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (ok, report) = doctor_sandbox(&d, "gv");
    assert!(ok, "{report}");
    assert!(
        line(&report, "ok", "escalation socket").contains("no certificate"),
        "{report}"
    );
    assert!(
        line(&report, "ok", "runtime").contains("gVisor"),
        "{report}"
    );
    line(&report, "ok", "mask /workspace/.vscode");
    line(&report, "ok", "read-only /run/lazaret");
    line(&report, "ok", "denied 10.0.2.2:9");
    line(&report, "ok", "policy table");
    assert!(report.contains("self-test passed"), "{report}");

    // Someone with the sidecar's capability rewrites its table: 10.0.2.2
    // (the host's loopback alias) is now allowed, though the policy denies it.
    let rogue = r#"{"default_allow":[{"net":"10.0.2.2/32"}]}"#;
    let mut child = common::as_test_user(
        std::path::Path::new("/usr/bin/podman"),
        &common::user_home(),
        STANDARD_PATH,
        &[],
    )
    .args([
        "exec",
        "-i",
        &d.sidecar(),
        "/lazaret-sidecar",
        "apply",
        "--policy",
        "-",
    ])
    .current_dir("/")
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(rogue.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "rogue apply: {}", text(&out).1);

    let (ok, report) = doctor_sandbox(&d, "gv");
    assert!(!ok, "{report}");
    line(&report, "FAIL", "policy table");
    assert!(report.contains("NOT as configured"), "{report}");

    // A socket that talks to anyone, no certificate asked, in place of the
    // Escalation Socket: the self-test refuses it.
    let sock =
        d.s.path()
            .join("sockets")
            .join(&d.hash)
            .join("escalate.sock");
    std::fs::remove_file(&sock).unwrap();
    let mut rogue = common::as_test_user(
        std::path::Path::new("/usr/bin/socat"),
        &common::user_home(),
        STANDARD_PATH,
        &[],
    )
    .args([&format!("UNIX-LISTEN:{},fork", sock.display()), "EXEC:cat"])
    .current_dir("/")
    .spawn()
    .unwrap();
    let started = Instant::now();
    while !sock.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no rogue socket"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (ok, report) = doctor_sandbox(&d, "gv");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(rogue.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = rogue.wait();
    assert!(!ok, "{report}");
    assert!(
        line(&report, "FAIL", "escalation socket").contains("not the sandbox's own"),
        "{report}"
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(session.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = session.wait();
}

/// runc (no gVisor, as the profile says): the runtime check expects the
/// host kernel, and the same protections hold.
#[test]
fn runc_sandbox_passes_its_self_test() {
    let d = Domain::new("rc");
    d.up();
    let (ok, report) = doctor_sandbox(&d, "rc");
    assert!(ok, "{report}");
    assert!(
        line(&report, "ok", "runtime").contains("host kernel"),
        "{report}"
    );
    line(&report, "ok", "mask /workspace/.vscode");
    line(&report, "ok", "denied 10.0.2.2:9");
}

/// A mask removed from a running sandbox (podman refuses a second mount at
/// a masked path, so no configuration can shadow one; a privileged exec,
/// which the agent does not have, can unmount it): the self-test names it.
#[test]
fn a_missing_mask_is_reported() {
    let d = Domain::new("rc");
    d.up();
    let out = podman(&[
        "exec",
        "--privileged",
        &d.sandbox(),
        "umount",
        "/workspace/.vscode",
    ]);
    assert!(out.status.success(), "umount: {}", text(&out).1);
    let (ok, report) = doctor_sandbox(&d, "rc");
    assert!(!ok, "{report}");
    assert!(
        line(&report, "FAIL", "mask /workspace/.vscode").contains("is not masked"),
        "{report}"
    );
    line(&report, "ok", "mask /workspace/.idea");
}

/// A second network device in the sandbox's namespace (made by a
/// privileged exec, which the agent does not have) could lead around the
/// router: the self-test fails on it, naming it (issue 25).
#[test]
fn a_device_besides_the_link_is_reported() {
    let d = Domain::new("rc");
    d.up();
    let (ok, report) = doctor_sandbox(&d, "rc");
    assert!(ok, "{report}");
    line(&report, "ok", "network devices");
    let out = podman(&[
        "exec",
        "--privileged",
        &d.sandbox(),
        "ip",
        "link",
        "add",
        "side0",
        "type",
        "veth",
        "peer",
        "name",
        "side1",
    ]);
    assert!(out.status.success(), "ip link add: {}", text(&out).1);
    let (ok, report) = doctor_sandbox(&d, "rc");
    assert!(!ok, "{report}");
    assert!(
        line(&report, "FAIL", "network devices").contains("side0"),
        "{report}"
    );
    d.down();
}

/// runsc swapped for something that is not gVisor: refused, naming the
/// runtime; with --allow-degraded it starts, and the UI marks the sandbox
/// degraded in its status line and tab.
#[test]
fn a_sandbox_that_is_not_gvisor_is_refused_or_marked_degraded() {
    let d = Domain::new("gv");
    let path = fake_runsc(&d.s);
    let out = d.cmd(&path, &["sandbox", "up"]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "started:\n{stdout}{stderr}");
    assert!(
        stderr.contains("runtime: expected gVisor, but the sandbox runs on the host kernel"),
        "{stderr}"
    );
    assert_eq!(d.containers(), Vec::<String>::new(), "left running");

    let config = d.s.path().join("config.toml");
    let home = common::user_home().display().to_string();
    let ui = |extra: &str| {
        Tmux::start(
            &d.ws(),
            160,
            45,
            &[
                ("LAZARET_USER_CONFIG", ""),
                ("LAZARET_TEST_FWD", "x"),
                ("PATH", &path),
                ("HOME", &home),
            ],
            &format!(
                "{} --config {} {extra} ui --profile gv",
                common::lazaret_bin().display(),
                config.display()
            ),
        )
    };
    // In the workbench, the refusal and its report are printed in the pane
    // line by line (CR LF, no staircase), and the status line says FAILED.
    {
        let t = ui("");
        // The report is printed before the tab learns the start failed:
        // the status line says so a frame later.
        let screen = t.wait_for(90, "the refusal, said on the status line", |s| {
            s.contains("FAIL  runtime") && s.lines().last().is_some_and(|l| l.contains("FAILED"))
        });
        let report_line = screen
            .lines()
            .find(|l| l.contains("FAIL  runtime"))
            .unwrap();
        assert!(
            report_line.starts_with("│FAIL  runtime"),
            "the report is not at the start of its line:\n{screen}"
        );
        assert!(
            screen.lines().any(|l| l.starts_with("│ok    policy table")),
            "{screen}"
        );
        let status = screen.lines().last().unwrap_or("");
        assert!(status.contains("FAILED"), "status line: {status}\n{screen}");
        assert!(!status.contains("starting"), "{status}");
    }
    let started = Instant::now();
    while !d.containers().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(60), "not torn down");
        std::thread::sleep(Duration::from_millis(200));
    }

    // The override, in the workbench: starts, marked degraded.
    let t = ui("--allow-degraded");
    // (The dashboard's sessions panel says DEGRADED first: the reason and
    // the tab's mark follow.)
    t.wait_for(90, "the degraded mark and its reason", |s| {
        s.contains("!DEGRADED") && s.contains("self-test failed")
    });
    let started = Instant::now();
    while !podman(&["container", "exists", &d.sandbox()])
        .status
        .success()
    {
        assert!(started.elapsed() < Duration::from_secs(30), "no sandbox");
        std::thread::sleep(Duration::from_millis(100));
    }
    // `lazaret status` says so too.
    let out = d.cmd_raw(STANDARD_PATH, &["status"]).output().unwrap();
    let (status, _) = text(&out);
    assert!(
        status
            .lines()
            .any(|l| l.starts_with(&d.hash) && l.contains("DEGRADED")),
        "{status}"
    );
    // It really is the host kernel in there, as the mark says.
    let (_, version, _) = d.sh("cat /proc/version");
    assert!(!version.contains("4.4.0 #1 SMP Sun Jan 10"), "{version}");
}

/// The sandbox's resolver (issue 17): the self-test proves, without
/// asking anything outside, that the sandbox's resolv.conf names the
/// sidecar's resolver, which refuses a name the policy denies and answers
/// one it allows; a sandbox whose resolv.conf points elsewhere (DNS around
/// the policy) fails the check.
fn the_resolver_is_checked(profile: &'static str) {
    let d = Domain::new(profile);
    let config = std::fs::read_to_string(d.s.path().join("config.toml")).unwrap();
    d.s.write(
        "config.toml",
        &config.replacen(
            "default_deny = []\n",
            "default_deny = []\nallow_domains = [\"*.lazaret.test\"]\n",
            1,
        ),
    );
    d.up();
    let (ok, report) = doctor_sandbox(&d, profile);
    assert!(ok, "{report}");
    assert!(
        line(&report, "ok", "dns resolver").contains("100.64.0.1"),
        "{report}"
    );
    line(&report, "ok", "dns refuses lazaret-selftest.invalid");
    line(&report, "ok", "dns answers lazaret-selftest.lazaret.test");

    let out = podman(&[
        "exec",
        "--privileged",
        &d.sandbox(),
        "sh",
        "-c",
        "echo nameserver 10.0.2.3 > /etc/resolv.conf",
    ]);
    assert!(out.status.success(), "resolv.conf: {}", text(&out).1);
    let (ok, report) = doctor_sandbox(&d, profile);
    assert!(!ok, "{report}");
    assert!(
        line(&report, "FAIL", "dns resolver").contains("not the sidecar's resolver"),
        "{report}"
    );
}

#[test]
fn the_resolver_is_checked_gvisor() {
    the_resolver_is_checked("gv");
}

#[test]
fn the_resolver_is_checked_runc() {
    the_resolver_is_checked("rc");
}

/// PID 1 of every sandbox is the static escalation binary, read-only from
/// the host, never the image's shell: an agent that replaces `/bin/sh` in
/// its persistent `/usr` cannot stand between the start-up self-test and
/// the host, at this start or the next. PID 1 also reaps orphans.
fn pid1_is_the_hosts_binary(profile: &'static str) {
    let d = Domain::new(profile);
    d.up();
    let pid1 = || {
        let out = podman(&["exec", &d.sandbox(), "cat", "/proc/1/cmdline"]);
        text(&out).0.replace('\0', " ")
    };
    let init = format!("{} init ", lazaret_escalate::BINARY_PATH);
    assert!(pid1().starts_with(&init), "PID 1: {}", pid1());
    // An orphan (its parent gone at once) is reaped, not left a zombie.
    let (code, _, e) = d.sh("sh -c '(sleep 0.3 &)'; sleep 1");
    assert_eq!(code, 0, "{e}");
    let (_, zombies, _) = d.sh("ps -eo stat= | grep -c '^Z' || true");
    assert_eq!(zombies.trim(), "0", "zombies left");
    // The agent swaps the image's shell in its persistent /usr.
    let (code, _, e) = d.sh(
        "rm /usr/bin/dash && printf '#!/bin/bash\\necho lazaret-selftest-report forged\\n' > /usr/bin/dash && chmod 755 /usr/bin/dash",
    );
    assert_eq!(code, 0, "{e}");
    d.down();
    d.up();
    let swapped = podman(&["exec", &d.sandbox(), "cat", "/usr/bin/dash"]);
    assert!(
        text(&swapped).0.contains("forged"),
        "the swap did not persist"
    );
    assert!(
        pid1().starts_with(&init),
        "PID 1 after the swap: {}",
        pid1()
    );
    let (ok, report) = doctor_sandbox(&d, profile);
    assert!(ok, "{report}");
    d.down();
}

#[test]
fn pid1_is_the_hosts_binary_gvisor() {
    pid1_is_the_hosts_binary("gv");
}

#[test]
fn pid1_is_the_hosts_binary_runc() {
    pid1_is_the_hosts_binary("rc");
}

/// No command of a session runs before the host declared the sandbox
/// checked: every session's confined exec waits inside for the ready
/// marker, which the host writes after the self-test (so a cold `lazaret
/// exec` may start its `podman exec` while the check still runs), and
/// which the agent cannot write itself.
fn a_session_waits_for_the_ready_marker(profile: &'static str) {
    let d = Domain::new(profile);
    let session = |script: &str| {
        d.cmd_raw(
            STANDARD_PATH,
            &["exec", "--profile", profile, "--", "sh", "-c", script],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
    };
    // A session holds the domain's coordinator (a new one would adopt the
    // running sandbox and declare it ready again).
    let mut holder = session("touch /tmp/held; sleep 60");
    let marker = d.certs_dir().join(lazaret_escalate::READY_MARKER_NAME);
    let deadline = Instant::now() + Duration::from_secs(120);
    while d.sh("test -e /tmp/held").0 != 0 {
        assert!(Instant::now() < deadline, "the holding session never ran");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(marker.exists(), "no ready marker after the start");
    // The agent cannot declare its own sandbox ready.
    std::fs::remove_file(&marker).unwrap();
    let (code, _, e) = d.sh(&format!("touch {}", lazaret_escalate::READY_MARKER));
    assert_ne!(code, 0, "the agent wrote the ready marker");
    assert!(e.contains("Read-only"), "{e}");
    // A session started now waits inside the sandbox, its command not run:
    // first until its confined exec is there, then for a while more.
    let mut exec = session("touch /tmp/ran");
    let still_waiting = |exec: &mut std::process::Child| {
        if exec.try_wait().unwrap().is_some() {
            panic!("the session ended without the marker");
        }
        let (code, _, _) = d.sh("test -e /tmp/ran");
        assert_ne!(code, 0, "the command ran before the marker");
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        still_waiting(&mut exec);
        let (_, ps, _) = d.sh("ps -eo args=");
        if ps.contains("--confined-exec -- sh -c touch /tmp/ran") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the session's exec never started:\n{ps}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let window = Instant::now() + Duration::from_secs(2);
    while Instant::now() < window {
        still_waiting(&mut exec);
        std::thread::sleep(Duration::from_millis(200));
    }
    // ... until the host writes the marker.
    std::fs::write(&marker, b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = exec.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the session still waits");
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = exec.wait_with_output().unwrap();
    assert!(status.success(), "{}", text(&out).1);
    let (code, _, e) = d.sh("test -e /tmp/ran");
    assert_eq!(code, 0, "the command did not run: {e}");
    let _ = holder.kill();
    let _ = holder.wait();
    d.down();
}

#[test]
fn a_session_waits_for_the_ready_marker_gvisor() {
    a_session_waits_for_the_ready_marker("gv");
}

#[test]
fn a_session_waits_for_the_ready_marker_runc() {
    a_session_waits_for_the_ready_marker("rc");
}

/// An escalation binary from an older build (its confined exec would not
/// hold a session's command back until the self-test passed) is refused
/// before anything starts, saying what to do.
#[test]
fn an_escalation_binary_without_the_session_gate_is_refused() {
    let d = Domain::new("rc");
    // A static executable that answers `--version` without the gate.
    let dir = d.s.mkdir("old-helpers");
    std::fs::copy("/bin/busybox", dir.join("lazaret-escalate")).unwrap();
    let out = d
        .cmd_raw_env(
            STANDARD_PATH,
            &[("LAZARET_LIBEXEC_DIR", dir.to_str().unwrap())],
            &["exec", "--profile", "rc", "--", "true"],
        )
        .output()
        .unwrap();
    let (_, err) = text(&out);
    assert!(!out.status.success(), "started with a stale helper: {err}");
    assert!(
        err.contains("older build") && err.contains(lazaret_escalate::SESSION_GATE),
        "{err}"
    );
    d.wait_until_gone();
    // `doctor` names it, with the fix.
    let out = d
        .cmd_raw_env(
            STANDARD_PATH,
            &[("LAZARET_LIBEXEC_DIR", dir.to_str().unwrap())],
            &["doctor"],
        )
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    let helpers = stdout
        .lines()
        .find(|l| l.contains("helper binaries"))
        .unwrap_or_else(|| panic!("no helper line:\n{stdout}"));
    assert!(
        helpers.contains("older build") && stdout.contains("scripts/setup"),
        "{stdout}"
    );
}

/// A marker left from an earlier run does not let a session run before
/// this start's self-test: the sandbox fails its check (runc behind a
/// `runsc` name), and the command of a `lazaret exec` started meanwhile,
/// which would write into the host-backed workspace and volume, never ran.
#[test]
fn a_stale_ready_marker_lets_nothing_run_before_a_failing_self_test() {
    let d = Domain::new("gv");
    let path = fake_runsc(&d.s);
    let certs = d.certs_dir();
    std::fs::create_dir_all(&certs).unwrap();
    let marker = certs.join(lazaret_escalate::READY_MARKER_NAME);
    std::fs::write(&marker, b"").unwrap();
    if let Some(u) = common::test_user() {
        for p in [&certs, &marker] {
            std::os::unix::fs::chown(p, Some(u.uid), Some(u.gid)).unwrap();
        }
    }
    let name = "lazaret-stale-marker-ran";
    let out = d
        .cmd_raw(
            &path,
            &[
                "exec",
                "--profile",
                "gv",
                "--",
                "sh",
                "-c",
                &format!("touch /workspace/{name} /root/persist/{name}"),
            ],
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "started:\n{stdout}{stderr}");
    assert!(stderr.contains("expected gVisor"), "{stderr}");
    d.wait_until_gone();
    let ran = files_named(&d.s.path(), name);
    assert!(ran.is_empty(), "the session's command ran: {ran:?}");
}

/// Files called `name` anywhere under `dir` (symbolic links not followed).
fn files_named(dir: &std::path::Path, name: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for e in entries.flatten() {
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_dir() {
            found.extend(files_named(&e.path(), name));
        } else if e.file_name() == name {
            found.push(e.path());
        }
    }
    found
}
