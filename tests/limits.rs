//! Resource limits hold on this very host (cgroups v1 rootless, where podman
//! ignores --memory and --pids-limit): a memory hog and a process flood in
//! a sandbox with small limits are refused or killed, the host and this
//! test process are unaffected, and the domain comes down cleanly. Under
//! runsc and under runc.
//!
//! Kept small on purpose (the machine is shared): the hog grows by 1 MiB
//! steps to at most 600 MiB against a 256 MiB limit, and the flood makes at
//! most 2000 attempts against a limit of 128.

mod common;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::sandbox::Domain;
use common::{STANDARD_PATH, podman, text};

const LIMITS: &str = r#"limits = { memory = "256MiB", pids = 128 }"#;

fn hold_up(d: &Domain) -> Child {
    d.cmd_raw(
        STANDARD_PATH,
        &["exec", d.profile, "--", "tail", "-f", "/dev/null"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap()
}

fn wait_up(d: &Domain) {
    let socket = d.control_socket();
    let deadline = Instant::now() + Duration::from_secs(90);
    while d.containers().len() < 2 || !socket.exists() || d.sh("true").0 != 0 {
        assert!(Instant::now() < deadline, "the domain never came up");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn status_of(d: &Domain) -> serde_json::Value {
    d.status()
        .unwrap_or_else(|| panic!("status lacks the domain {}", d.hash))
}

fn audit_kinds(d: &Domain) -> Vec<String> {
    d.audit_json()
        .iter()
        .map(|r| r["kind"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The grows-by-1-MiB hog: `tail` keeps the whole newline-free stream.
/// Prints how many bytes `tail` held at the end (all 600 MiB if unbounded).
const HOG: &str =
    "for i in $(seq 600); do head -c 1048576 /dev/zero; sleep 0.01; done | tail | wc -c";
/// Starts up to 2000 sleeping processes, then counts what runs.
/// Builtins only after the flood: with the limit reached nothing forks.
/// The flood's sleeps are killed at the end (the holder is no `sleep`).
/// In between it holds them a moment (a builtin loop where `sleep` cannot
/// fork), as a real flood would: the watchdog polls, so a flood that is
/// gone within one poll is the kernel limit's alone.
const FLOOD: &str = "(i=0; while [ $i -lt 2000 ]; do sleep 60 & i=$((i+1)); done) 2>/dev/null; sleep 2 2>/dev/null || { i=0; while [ $i -lt 1000000 ]; do i=$((i+1)); done; }; set -- /proc/[0-9]*; n=$#; for p in /proc/[0-9]*; do read -r c < $p/comm && [ \"$c\" = sleep ] && kill ${p#/proc/}; done 2>/dev/null; echo $n";

/// The host is fine: this process runs, memory is available, and a fresh
/// process starts.
fn host_is_fine() {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let avail_kib: u64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemAvailable:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(
        avail_kib > 1024 * 1024,
        "host memory is low: {avail_kib} KiB"
    );
    assert!(
        std::process::Command::new("true")
            .status()
            .unwrap()
            .success()
    );
}

fn limits_hold(profile: &'static str, runtime: &str) {
    let d = Domain::new(profile);
    d.add_config(&format!(
        "[profiles.{profile}]\nimage = \"{}\"\nruntime = \"{runtime}\"\n{LIMITS}\n",
        common::sandbox::BASE_IMAGE
    ));
    // `config check` says what the profile's limits are.
    let check = d
        .cmd_raw(STANDARD_PATH, &["config", "check"])
        .output()
        .unwrap();
    let (out, err) = text(&check);
    assert!(check.status.success(), "{out}{err}");
    assert!(
        out.contains(&format!("limits of {profile}: memory 256 MiB, pids 128")),
        "{out}"
    );

    let mut holder = hold_up(&d);
    wait_up(&d);
    let st = status_of(&d);
    assert!(st["limits"].as_str().unwrap().contains("256 MiB"), "{st}");
    // The kernel's OOM killer picks the sandbox first.
    let pid = text(&podman(&[
        "inspect",
        "--format",
        "{{.State.Pid}}",
        &d.sandbox(),
    ]))
    .0;
    let adj = std::fs::read_to_string(format!("/proc/{}/oom_score_adj", pid.trim())).unwrap();
    assert_eq!(adj.trim(), "1000");
    // /tmp is bounded (half the memory limit), not half the host's RAM.
    let (code, df, e) = d.sh("df -k /tmp | tail -1");
    assert_eq!(code, 0, "{e}");
    let size_kib: u64 = df.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_eq!(size_kib, 128 * 1024, "{df}");

    let flood = || {
        // Refused (gVisor's nproc, the kernel's) or the container killed
        // (watchdog); never 2000 processes.
        let (code, count, err) = d.sh(FLOOD);
        eprintln!("flood: exit {code}, {} processes", count.trim());
        if code == 0 {
            let n: usize = count.trim().parse().unwrap();
            assert!(
                n <= 128 + 8,
                "{n} processes ran under a limit of 128: {err}"
            );
        }
        host_is_fine();
    };
    let hog = || {
        // Refused (rlimit data, runc) or killed (watchdog).
        let t = d.sh("true");
        if t.0 != 0 {
            eprintln!("hog: the sandbox is gone: {t:?}");
            return;
        }
        let started = Instant::now();
        let (code, out, err) = d.sh(HOG);
        eprintln!(
            "hog: exit {code} after {:?}: {} {}",
            started.elapsed(),
            out.trim(),
            err.trim()
        );
        let held: u64 = out.trim().parse().unwrap_or(0);
        assert!(
            code != 0 || held < 256 * 1024 * 1024,
            "the hog got {held} bytes under a 256 MiB limit: {code} {out} {err}"
        );
        assert!(started.elapsed() < Duration::from_secs(60));
        host_is_fine();
    };
    // Under runc the hog is refused and the domain stays; under runsc the
    // watchdog kills the whole sandbox: the hog goes last there.
    if runtime == "runc" {
        hog();
        flood();
    } else {
        flood();
        hog();
    }

    // The domain comes down cleanly (by itself when the sandbox was
    // killed, else on request).
    let _ = d.cmd_raw(STANDARD_PATH, &["down", profile]).output();
    d.wait_until_gone();
    let _ = holder.kill();
    let _ = holder.wait();
    host_is_fine();
    let kinds = audit_kinds(&d);
    eprintln!(
        "coordinator log:\n{}",
        std::fs::read_to_string(d.domain_root().join("coordinator.log")).unwrap_or_default()
    );
    eprintln!("audit: {kinds:?}");
    assert!(
        kinds.iter().any(|k| k.starts_with("limit-")) || runtime == "runc",
        "no limit event in the audit: {kinds:?}"
    );
}

#[test]
fn memory_hog_and_process_flood_are_stopped_under_runsc() {
    limits_hold("lgv", "runsc");
}

#[test]
fn memory_hog_and_process_flood_are_stopped_under_runc() {
    limits_hold("lrc", "runc");
}

/// Host files a process of the container `id` holds for gVisor's root
/// overlay (`.gvisor.filestore.<id>`, on the host's disk).
fn filestores_of(id: &str) -> Vec<String> {
    let mut found = Vec::new();
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                let t = target.to_string_lossy();
                if t.contains(&format!(".gvisor.filestore.{id}")) {
                    found.push(t.into_owned());
                }
            }
        }
    }
    found
}

/// Under gVisor the root file system's writes (`/var/tmp`, `/root`,
/// `/opt`) live in the sandbox's memory and count against its limit: no
/// file on the host's disk backs them, and 600 MiB written to `/var/tmp`
/// with a 256 MiB limit stop the sandbox (issue 26 item 8).
#[test]
fn root_filesystem_writes_count_against_memory_under_runsc() {
    let profile = "lrw";
    let d = Domain::new(profile);
    d.add_config(&format!(
        "[profiles.{profile}]\nimage = \"{}\"\nruntime = \"runsc\"\n{LIMITS}\n",
        common::sandbox::BASE_IMAGE
    ));
    let mut holder = hold_up(&d);
    wait_up(&d);
    let id = text(&podman(&["inspect", "--format", "{{.Id}}", &d.sandbox()]))
        .0
        .trim()
        .to_string();
    assert_eq!(id.len(), 64, "no container id: {id:?}");
    // A small write works and stays (the positive control) ...
    let (code, out, err) =
        d.sh("head -c 8388608 /dev/zero > /var/tmp/small && wc -c < /var/tmp/small");
    assert_eq!((code, out.trim()), (0, "8388608"), "{err}");
    // ... and no host file holds it.
    assert_eq!(filestores_of(&id), Vec::<String>::new());

    let started = Instant::now();
    let (code, out, err) = d.sh(
        "for i in $(seq 600); do head -c 1048576 /dev/zero >> /var/tmp/fill || break; sleep 0.01; done; wc -c < /var/tmp/fill",
    );
    eprintln!(
        "fill: exit {code} after {:?}: {} {}",
        started.elapsed(),
        out.trim(),
        err.trim()
    );
    let held: u64 = out.trim().parse().unwrap_or(0);
    assert!(
        code != 0 || held < 256 * 1024 * 1024,
        "the root file system took {held} bytes under a 256 MiB limit: {code} {out} {err}"
    );
    // The watchdog stopped the sandbox and said so.
    d.wait_until_gone();
    let _ = holder.kill();
    let _ = holder.wait();
    host_is_fine();
    let kinds = audit_kinds(&d);
    assert!(
        kinds.iter().any(|k| k == "limit-memory"),
        "no limit-memory record in the audit: {kinds:?}"
    );
}

/// Under runc the root file system's writes go to the container's layer,
/// on the host's disk: the coordinator's layer watch walks it (from the
/// user's podman user namespace, so a folder the agent gave to another id
/// with mode 0700 hides nothing) and stops the domain past the limit;
/// teardown removes the layer (issue 26 item 8).
#[test]
fn root_filesystem_writes_are_held_to_the_limit_under_runc() {
    let profile = "lrl";
    let d = Domain::new(profile);
    d.add_config(&format!(
        "[profiles.{profile}]\nimage = \"{}\"\nruntime = \"runc\"\n{LIMITS}\n",
        common::sandbox::BASE_IMAGE
    ));
    let mut holder = hold_up(&d);
    wait_up(&d);
    let upper = text(&podman(&[
        "inspect",
        "--format",
        "{{.GraphDriver.Data.UpperDir}}",
        &d.sandbox(),
    ]))
    .0
    .trim()
    .to_string();
    assert!(upper.starts_with('/'), "no upper folder: {upper:?}");
    assert!(std::path::Path::new(&upper).is_dir(), "{upper}");

    // The positive control: a small write stays, the watch measures it
    // (`status --json` shows it) and the domain runs on.
    let (code, out, err) = d.sh(
        "mkdir -m 700 /var/tmp/hidden && chown 65534:65534 /var/tmp/hidden && head -c 8388608 /dev/zero > /var/tmp/hidden/small && wc -c < /var/tmp/hidden/small",
    );
    assert_eq!((code, out.trim()), (0, "8388608"), "{err}");
    // The user cannot list it from outside the namespace: only a walk from
    // inside sees it.
    let listed = common::as_test_user(
        std::path::Path::new("/bin/ls"),
        &common::user_home(),
        STANDARD_PATH,
        &[],
    )
    .arg(format!("{upper}/var/tmp/hidden"))
    .current_dir("/")
    .output()
    .unwrap();
    assert!(!listed.status.success(), "the hidden folder was listable");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let used = status_of(&d)["layer_used"].as_u64().unwrap_or(0);
        if used >= 8 * 1024 * 1024 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the layer watch never measured the 8 MiB: {}",
            status_of(&d)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(d.sh("true").0, 0, "the domain stopped under its limit");

    // The attack: 600 MiB, 1 MiB at a time, in the hidden folder.
    let (code, out, err) = d.sh(
        "for i in $(seq 600); do head -c 1048576 /dev/zero >> /var/tmp/hidden/fill || break; sleep 0.01; done; wc -c < /var/tmp/hidden/fill",
    );
    eprintln!("fill: exit {code}: {} {}", out.trim(), err.trim());
    d.wait_until_gone();
    let _ = holder.kill();
    let _ = holder.wait();
    host_is_fine();
    let audit = d.audit_json();
    let record = audit
        .iter()
        .find(|r| r["kind"] == "limit-disk")
        .unwrap_or_else(|| panic!("no limit-disk record in the audit: {:?}", audit_kinds(&d)));
    let bytes = record["data"]["bytes"].as_u64().unwrap_or(0);
    assert!(bytes > 256 * 1024 * 1024, "{record}");
    // Teardown removed the layer, and with it what the agent wrote.
    assert!(
        !std::path::Path::new(&upper).exists(),
        "the layer {upper} outlived the domain"
    );
}
