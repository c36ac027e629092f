//! The sandbox engine against real rootless podman, under runsc and runc:
//! what the agent sees inside, the State Anchor across lives, and teardown
//! that leaves nothing behind, even after the starting process is killed.

mod common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::sandbox::Domain;
use common::{STANDARD_PATH, Scratch, lazaret_env, podman, text, user_home};

fn host_kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap()
        .trim()
        .to_string()
}

fn inside_view(profile: &'static str, gvisor: bool) {
    let d = Domain::new(profile);
    let summary = d.up();
    if gvisor {
        assert!(summary.contains("runtime   runsc (gVisor)"), "{summary}");
    } else {
        assert!(summary.contains("NOT gVisor-isolated"), "{summary}");
    }
    // The runtime podman recorded for the sandbox is the one asked for.
    let out = podman(&[
        "container",
        "inspect",
        "--format",
        "{{.OCIRuntime}} {{index .Config.Labels \"lazaret.runtime\"}}",
        &d.sandbox(),
    ]);
    let recorded = text(&out).0;
    if gvisor {
        assert!(recorded.contains("lazaret-runsc runsc"), "{recorded}");
    } else {
        assert_eq!(recorded.trim(), "runc runc");
    }

    // Kernel: gVisor's own under runsc, the host's under runc.
    let (_, version, _) = d.sh("cat /proc/version");
    assert_eq!(version.contains(&host_kernel()), !gvisor, "{version}");
    if gvisor {
        let (_, dmesg, _) = d.sh("dmesg 2>&1 | head -3");
        assert!(dmesg.contains("gVisor"), "dmesg: {dmesg}");
    }

    // The escalation client is there, executable and read-only.
    let (code, out, err) =
        d.sh("/run/lazaret/escalate --version && echo x > /run/lazaret/escalate");
    assert!(out.starts_with("lazaret-escalate "), "{out}{err}");
    assert_ne!(code, 0);
    assert!(err.contains("Read-only file system"), "{err}");
    // Certs and the socket folder are read-only.
    for target in ["/run/lazaret/certs/planted", "/run/lazaret/planted.sock"] {
        let (code, _, err) = d.sh(&format!("touch {target}"));
        assert_ne!(code, 0, "{target} was writable");
        assert!(err.contains("Read-only file system"), "{target}: {err}");
    }

    // Masks are tmpfs, and what is written there never reaches the host.
    let (_, mounts, _) = d.sh("cat /proc/mounts");
    for m in lazaret::mounts::MASKED
        .iter()
        .filter(|m| !m.starts_with(".git/"))
    {
        let line = mounts
            .lines()
            .find(|l| l.split(' ').nth(1) == Some(&format!("/workspace/{m}")))
            .unwrap_or_else(|| panic!("no mount at /workspace/{m}:\n{mounts}"));
        assert!(line.contains("tmpfs"), "{line}");
    }
    let (code, _, err) =
        d.sh("mkdir -p /workspace/.vscode && echo '{}' > /workspace/.vscode/tasks.json");
    assert_eq!(code, 0, "{err}");
    assert!(!d.s.path().join("ws/.vscode/tasks.json").exists());
    // The workspace itself is shared read-write.
    let (code, _, err) = d.sh("echo from-agent > /workspace/agent.txt");
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(d.s.path().join("ws/agent.txt")).unwrap(),
        "from-agent\n"
    );

    // Profile env (literal and forwarded) and volumes.
    let (_, env, _) = d.sh("echo \"$FOO|$FWD|$LAZARET_PROFILE|$LAZARET_DOMAIN\"");
    assert_eq!(
        env.trim(),
        format!("bar baz|forwarded|{profile}|{}", d.hash)
    );
    let (code, _, err) = d.sh("echo kept > /root/persist/f");
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(d.s.path().join(format!("data/{profile}/home/f"))).unwrap(),
        "kept\n"
    );

    // No extra capabilities: changing routes is refused.
    let (code, _, err) = d.sh("ip route add 192.0.2.0/24 dev lo");
    assert_ne!(code, 0, "the agent changed a route");
    assert!(
        err.contains("Operation not permitted") || err.contains("Permission denied"),
        "{err}"
    );

    d.down();
    d.assert_gone();
}

#[test]
fn inside_view_under_runsc() {
    inside_view("gv", true);
}

#[test]
fn inside_view_under_runc() {
    inside_view("rc", false);
}

fn state_anchor_persists(profile: &'static str) {
    let d = Domain::new(profile);
    d.up();
    let (code, _, err) =
        d.sh("mkdir -p /usr/local/share/lz && echo pkg > /usr/local/share/lz/marker");
    assert_eq!(code, 0, "{err}");
    d.down();
    d.assert_gone();
    // It landed in usr_changes on the host.
    let on_host = d.domain_root().join("usr_changes/local/share/lz/marker");
    assert_eq!(std::fs::read_to_string(&on_host).unwrap(), "pkg\n");
    // And the next life of the sandbox has it.
    d.up();
    let (code, out, err) = d.sh("cat /usr/local/share/lz/marker && ls /usr/bin/git");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "pkg\n/usr/bin/git\n");
    d.down();
    d.assert_gone();
}

#[test]
fn state_anchor_persists_under_runsc() {
    state_anchor_persists("gv");
}

#[test]
fn state_anchor_persists_under_runc() {
    state_anchor_persists("rc");
}

/// `/etc` can be persisted, but podman's own files in it never are.
#[test]
fn persisted_etc_keeps_podmans_files() {
    let d = Domain::new("rc");
    d.up();
    let (code, _, err) = d.sh(
        "echo 'agent' > /etc/lazaret-agent.conf && cat /etc/hostname /etc/resolv.conf > /dev/null",
    );
    assert_eq!(code, 0, "{err}");
    d.down();
    let changes = d.domain_root().join("etc_changes");
    assert!(changes.join("lazaret-agent.conf").exists());
    for f in ["resolv.conf", "hosts", "hostname"] {
        assert!(!changes.join(f).exists(), "{f} was persisted");
    }
    d.up();
    let (code, out, _) = d.sh("cat /etc/lazaret-agent.conf; grep -c . /etc/hosts");
    assert_eq!(code, 0);
    assert!(out.starts_with("agent\n"), "{out}");
    d.down();
    d.assert_gone();
}

/// `up` twice reuses the running domain; `down` twice is fine.
#[test]
fn up_and_down_are_idempotent() {
    let d = Domain::new("gv");
    d.up();
    let id1 = text(&podman(&["inspect", "--format", "{{.Id}}", &d.sandbox()])).0;
    d.up();
    let id2 = text(&podman(&["inspect", "--format", "{{.Id}}", &d.sandbox()])).0;
    assert_eq!(id1, id2, "a running domain was restarted");
    d.down();
    d.down();
    d.assert_gone();
}

/// Domains of one image start and stop at once, again and again, one of
/// them killed mid-start each round and cleaned by `down` (issue 24): no
/// domain's stop or cleanup can pull the image's root from under another's
/// State Anchor, and each domain sees the image's `/usr` through its own
/// bind mount, not through podman's shared image mount.
#[test]
fn domains_of_one_image_start_and_stop_at_once() {
    let domains: Vec<Domain> = ["gv", "rc", "rc", "gv"].map(Domain::new).into();
    let victim = Domain::new("rc");
    let round = |d: &Domain| {
        d.up();
        let lower = d.domain_root().join("usr_lower").display().to_string();
        assert!(d.mounts().contains(&lower), "no own bind: {:?}", d.mounts());
        let (code, out, err) = d.sh("test -x /usr/bin/ls && ls /usr/bin | wc -l");
        assert_eq!(code, 0, "{out}{err}");
        assert!(
            out.trim().parse::<u32>().unwrap() > 50,
            "an empty /usr: {out}"
        );
        d.down();
        d.assert_gone();
    };
    for _ in 0..3 {
        std::thread::scope(|scope| {
            for d in &domains {
                scope.spawn(|| round(d));
            }
            // A start killed as soon as its sidecar exists, while the others
            // mount: the `down` that cleans it runs while they start.
            let mut cmd = victim.cmd(STANDARD_PATH, &["sandbox", "up"]);
            cmd.process_group(0);
            let child = cmd.spawn().unwrap();
            let deadline = Instant::now() + Duration::from_secs(120);
            while !victim.containers().contains(&victim.sidecar()) {
                assert!(Instant::now() < deadline, "the sidecar never appeared");
                std::thread::sleep(Duration::from_millis(20));
            }
            let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
            nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL).unwrap();
            let _ = child.wait_with_output();
            victim.down();
            victim.assert_gone();
        });
    }
}

/// The starting process is killed with SIGKILL mid-start: the leftovers are
/// found by name and cleaned by the next `down`, and by the next `up`.
#[test]
fn teardown_after_sigkill_of_the_starting_process() {
    let d = Domain::new("gv");
    for recover_with_up in [false, true] {
        let mut cmd = d.cmd(STANDARD_PATH, &["sandbox", "up"]);
        cmd.process_group(0);
        let child = cmd.spawn().unwrap();
        let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
        // Kill as soon as the sidecar exists: the sandbox is not up yet.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !d.containers().contains(&d.sidecar()) {
            assert!(Instant::now() < deadline, "the sidecar never appeared");
            std::thread::sleep(Duration::from_millis(20));
        }
        nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL).unwrap();
        let _ = child.wait_with_output();
        assert!(!d.containers().is_empty(), "nothing was left to clean");
        if recover_with_up {
            d.up();
            let (code, _, _) = d.sh("true");
            assert_eq!(code, 0);
        }
        d.down();
        d.assert_gone();
    }
}

/// D7: a gVisor profile never silently falls back to another runtime.
#[test]
fn refuses_to_start_without_runsc() {
    let d = Domain::new("gv");
    let bin = d.s.mkdir("bin");
    for dir in STANDARD_PATH.split(':') {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let link = bin.join(e.file_name());
            if e.file_name() != "runsc" && !link.exists() {
                let _ = std::os::unix::fs::symlink(e.path(), &link);
            }
        }
    }
    let out = d
        .cmd(bin.to_str().unwrap(), &["sandbox", "up"])
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("gVisor (runsc) is not installed, and the profile asks for it")
            && stderr.contains("runtime = \"runc\""),
        "{stderr}"
    );
    assert_eq!(d.containers(), Vec::<String>::new(), "something started");
    // Naming another runtime explicitly works, and says so loudly.
    let out = d
        .cmd(
            bin.to_str().unwrap(),
            &["sandbox", "up", "--runtime", "runc"],
        )
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("runc   !! NOT gVisor-isolated"), "{stdout}");
    d.down();
    d.assert_gone();
}

/// NFR-3: the host's terminfo entry for the user's terminal reaches the
/// sandbox, read-only.
#[test]
fn host_terminfo_is_mounted_read_only() {
    let d = Domain::new("gv");
    let ti = d.s.mkdir("terminfo/x");
    std::fs::write(ti.join("xterm-lazaret-test"), b"fake compiled entry").unwrap();
    d.s.chown(&ti.join("xterm-lazaret-test"));
    let terminfo = d.s.path().join("terminfo");
    let config = d.s.path().join("config.toml");
    let out = lazaret_env(
        &user_home(),
        &d.s.path().join("ws"),
        STANDARD_PATH,
        &[
            ("LAZARET_USER_CONFIG", ""),
            ("LAZARET_TEST_FWD", "x"),
            ("TERM", "xterm-lazaret-test"),
            ("TERMINFO", terminfo.to_str().unwrap()),
        ],
        &[
            "--config",
            config.to_str().unwrap(),
            "sandbox",
            "up",
            "--profile",
            "gv",
        ],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    let (code, out, err) = d.sh("echo $TERM; cat /etc/terminfo/x/xterm-lazaret-test; echo; echo y > /etc/terminfo/x/xterm-lazaret-test");
    assert_eq!(out, "xterm-lazaret-test\nfake compiled entry\n");
    assert_ne!(code, 0);
    assert!(err.contains("Read-only file system"), "{err}");
    d.down();
    d.assert_gone();
}

/// NFR-1/NFR-4: the sidecar image holds one file, and no shell.
#[test]
fn sidecar_image_is_one_static_file_without_shell() {
    let d = Domain::new("gv");
    d.up();
    let image = text(&podman(&[
        "inspect",
        "--format",
        "{{.ImageName}}",
        &d.sidecar(),
    ]))
    .0;
    let image = image.trim();
    assert!(image.starts_with("localhost/lazaret/sidecar:"), "{image}");
    let listing = podman(&[
        "unshare",
        "sh",
        "-c",
        &format!(
            "m=$(podman image mount {image}) && cd \"$m\" && find . -mindepth 1; podman image unmount {image} >/dev/null"
        ),
    ]);
    let files = text(&listing).0;
    assert_eq!(
        files.trim(),
        "./lazaret-sidecar",
        "the image holds more than the binary"
    );
    let out = podman(&[
        "run",
        "--rm",
        "--runtime",
        "runc",
        "--network",
        "none",
        "--entrypoint",
        "/bin/sh",
        image,
        "-c",
        "true",
    ]);
    assert!(!out.status.success(), "a shell ran in the sidecar image");
    let size = std::fs::metadata(lazaret::install::find_helper("lazaret-sidecar").unwrap())
        .unwrap()
        .len();
    eprintln!(
        "lazaret-sidecar: {size} bytes ({:.2} MiB)",
        size as f64 / 1048576.0
    );
    d.down();
    d.assert_gone();
}

/// `lazaret image build` from nothing: mmdebstrap, import, tags, and the
/// image runs under gVisor with git in it.
#[test]
fn image_build_from_scratch() {
    let s = Scratch::new();
    let tag = format!("localhost/lazaret/test-build:{}", std::process::id());
    let started = Instant::now();
    let out = lazaret_env(
        &user_home(),
        &s.path(),
        STANDARD_PATH,
        &[("LAZARET_USER_CONFIG", "")],
        &["image", "build", "--tag", &tag, "--include", "file"],
    )
    .output()
    .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    eprintln!(
        "image build took {:.1} s:\n{stdout}",
        started.elapsed().as_secs_f64()
    );
    assert!(stdout.contains(&tag), "{stdout}");
    assert!(
        stderr.contains("I: success"),
        "no progress shown:\n{stderr}"
    );
    let main = stdout
        .lines()
        .find_map(|l| l.strip_prefix("built     "))
        .and_then(|l| l.split(", ").next())
        .unwrap()
        .to_string();
    assert!(main.starts_with("localhost/lazaret/trixie:20"), "{main}");
    let digest = text(&podman(&[
        "inspect",
        "--format",
        "{{index .Labels \"lazaret.base.digest\"}}",
        &tag,
    ]))
    .0;
    assert_eq!(&digest.trim()[..12], main.rsplit('-').next().unwrap());
    let wrapper = lazaret::engine::wrapper::script(
        Path::new("/usr/bin/runsc"),
        &["--ignore-cgroups", "--network=none"],
    );
    let wrapper_path = s.write("runsc-none", &wrapper);
    std::fs::set_permissions(
        &wrapper_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = podman(&[
        "run",
        "--rm",
        "--runtime",
        wrapper_path.to_str().unwrap(),
        "--network",
        "none",
        &tag,
        "sh",
        "-c",
        "git --version && file --version && cat /proc/version",
    ]);
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    assert!(o.starts_with("git version"), "{o}");
    assert!(o.contains("Linux version 4.4.0"), "not gVisor: {o}");
    let _ = podman(&["rmi", &tag, &main]);
}

/// Spec §4.3.4: a newer base image becomes the new lower layer of the State
/// Anchor, and what the agent installed before (usr_changes) stays.
#[test]
fn newer_base_image_keeps_usr_changes() {
    let d = Domain::new("gv");
    d.up();
    let (code, _, err) = d.sh("echo mine > /usr/local/share/agent-installed");
    assert_eq!(code, 0, "{err}");
    d.down();
    // A "newer" image: the base plus a file only it has.
    let tag = format!("localhost/lazaret/test-newer:{}", d.hash);
    let builder = format!("lazaret-test-build-{}", d.hash);
    let out = podman(&[
        "run",
        "--name",
        &builder,
        "--runtime",
        "runc",
        "--network",
        "none",
        common::sandbox::BASE_IMAGE,
        "sh",
        "-c",
        "echo v2 > /usr/share/image-v2",
    ]);
    assert!(out.status.success(), "{}", text(&out).1);
    // (export + import: `podman commit` needs a runroot this host's
    // rootless set-up lacks.)
    let tar = d.s.path().join("newer.tar");
    let out = podman(&["export", "-o", tar.to_str().unwrap(), &builder]);
    let _ = podman(&["rm", "-f", &builder]);
    assert!(out.status.success(), "{}", text(&out).1);
    let out = podman(&["import", "--quiet", tar.to_str().unwrap(), &tag]);
    assert!(out.status.success(), "{}", text(&out).1);
    let _ = std::fs::remove_file(&tar);
    // The profile now names it.
    let config = std::fs::read_to_string(d.s.path().join("config.toml")).unwrap();
    let (head, tail) = config.split_once("[profiles.gv]\n").unwrap();
    let tail = tail.replacen(common::sandbox::BASE_IMAGE, &tag, 1);
    d.s.write("config.toml", &format!("{head}[profiles.gv]\n{tail}"));
    d.up();
    let (code, out, err) = d.sh("cat /usr/share/image-v2 /usr/local/share/agent-installed");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "v2\nmine\n");
    d.down();
    d.assert_gone();
    let _ = podman(&["rmi", &tag]);
}
