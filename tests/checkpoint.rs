//! Checkpoints of a running sandbox (issue 30), as the user takes them:
//! `lazaret checkpoint` beside a workbench whose shell runs a counter.
//! The sandbox runs on, the shell still answers, the counter still counts;
//! what gVisor could not bring back (a `podman exec` session) and runc are
//! refused with the reason. `lazaret restore` brings the domain back as
//! the checkpoint: the counter counts on from its saved value, a file
//! written after the save is gone, the shell is a session again. Fork is
//! not built yet.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::sandbox::Domain;
use common::text;

/// The counter's value, read from inside.
fn count(d: &Domain) -> u64 {
    let (_, out, _) = d.sh("cat /tmp/count");
    out.trim().parse().unwrap_or(0)
}

#[test]
fn a_checkpoint_saves_the_running_sandbox_and_it_runs_on() {
    let d = Domain::new("gv");
    let ui = d.tmux(120, 30, "ui -p gv", Some("echo EXIT=$?; sleep 600"));
    ui.wait_for(120, "the workbench's shell", |s| s.contains("root@"));
    ui.line("clear; (i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.05; done) &");
    let deadline = Instant::now() + Duration::from_secs(20);
    while count(&d) < 5 {
        assert!(Instant::now() < deadline, "the counter does not count");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The Session Host is the sandbox's init's child: what descends from
    // init is what gVisor restores.
    let (_, ps, _) = d.sh("ps -eo ppid=,args= | grep '[s]ession-host'");
    assert!(
        ps.lines()
            .next()
            .is_some_and(|l| l.trim().starts_with("1 ")),
        "{ps}"
    );

    let before_save = count(&d);
    let out = d.lazaret(&["checkpoint", "--name", "first"]);
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    assert!(
        o.contains("checkpoint first of domain") && o.contains("runs on"),
        "{o}"
    );
    let after_save = count(&d);
    // Written after the save: not in the checkpoint.
    assert_eq!(d.sh("echo later > /tmp/after-the-checkpoint").0, 0);

    // The shell answers, the counter counts on.
    ui.line("clear; echo AFTER-$((6*7))");
    ui.wait_for(30, "the shell after the checkpoint", |s| {
        s.contains("AFTER-42")
    });
    let before = count(&d);
    let deadline = Instant::now() + Duration::from_secs(10);
    while count(&d) <= before {
        assert!(Instant::now() < deadline, "the counter stopped");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Listed, with its size, private to the user.
    let out = d.lazaret(&["checkpoints", "--json"]);
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    let list: Vec<serde_json::Value> = serde_json::from_str(&o).unwrap();
    assert_eq!(list.len(), 1, "{o}");
    assert_eq!(list[0]["name"], "first");
    assert!(list[0]["bytes"].as_u64().unwrap_or(0) > 100_000, "{o}");
    assert!(!o.contains("token"), "{o}");
    let dir = d.domain_root().join("checkpoints/first");
    let mode = std::fs::metadata(dir.join("memory"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
    // From the workbench: prefix k, said on the status line.
    ui.send(&["C-a", "k"]);
    ui.wait_for(60, "the workbench's checkpoint", |s| {
        s.lines()
            .last()
            .is_some_and(|l| l.contains("checkpoint ") && l.contains(" taken: "))
    });
    let out = d.lazaret(&["checkpoints", "--json"]);
    let list: Vec<serde_json::Value> = serde_json::from_str(&text(&out).0).unwrap();
    assert_eq!(list.len(), 2, "{list:?}");
    // The same name again is refused; so is a name that is a path.
    let out = d.lazaret(&["checkpoint", "--name", "first"]);
    assert!(!out.status.success());
    assert!(text(&out).1.contains("already"), "{:?}", text(&out));
    let out = d.lazaret(&["checkpoint", "--name", "../x"]);
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("not a checkpoint name"),
        "{:?}",
        text(&out)
    );

    // A plain `podman exec` session: gVisor could not bring it back.
    let mut holder = d.hold_up();
    let out = d.lazaret(&["checkpoint", "--name", "second"]);
    let (o, e) = text(&out);
    assert!(!out.status.success(), "{o}");
    assert!(e.contains("podman exec"), "{e}");
    let _ = holder.kill();
    let _ = holder.wait();

    let audited: Vec<_> = d
        .audit_json()
        .into_iter()
        .filter(|r| r["kind"] == "checkpoint")
        .collect();
    assert!(audited.len() >= 3, "{audited:?}");
    assert_eq!(audited[0]["data"]["name"], "first");

    // Restore: the workbench leaves its session running; the domain is
    // taken down and comes back as the checkpoint.
    // Far enough past the save that the restored count is seen to go back
    // (it counts about twenty a second).
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(&d) < after_save + 200 {
        assert!(Instant::now() < deadline, "the counter is too slow");
        std::thread::sleep(Duration::from_millis(200));
    }
    let before_restore = count(&d);
    ui.send(&["C-a", "d"]);
    ui.wait_for(30, "the workbench detached", |s| s.contains("EXIT="));
    let out = d.lazaret_raw(&["restore", "first", "-p", "gv"]);
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    assert!(o.contains("is checkpoint first again"), "{o}");
    // The counter counts on from where it was saved, in memory.
    let restored = count(&d);
    assert!(
        restored >= before_save && restored < before_restore,
        "saved between {before_save} and {after_save}, {before_restore} before the restore, restored at {restored}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while count(&d) <= restored {
        assert!(
            Instant::now() < deadline,
            "the restored counter does not count"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, _, _) = d.sh("test -e /tmp/after-the-checkpoint");
    assert_ne!(code, 0, "a file written after the checkpoint is back");
    // Its shell is a session of the domain again, to attach to.
    let status = d.status().expect("the restored domain is listed");
    assert_eq!(
        status["hosted"].as_array().map(Vec::len),
        Some(1),
        "{status}"
    );
    let up: Vec<_> = d
        .audit_json()
        .into_iter()
        .filter(|r| r["kind"] == "domain-up")
        .collect();
    assert_eq!(up.last().unwrap()["data"]["restored"], true, "{up:?}");

    // Pruning: checkpoints younger than the age stay; older ones go, from
    // a running domain too; the domain stays.
    let out = d.lazaret_raw(&["domains", "prune", "--older-than", "1h"]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(dir.exists(), "{:?}", text(&out));
    let out = d.lazaret_raw(&["domains", "prune", "--older-than", "0s"]);
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    assert!(o.contains("removed checkpoint first of domain"), "{o}");
    assert!(!dir.exists(), "{o}");
    assert!(d.status().is_some(), "the running domain was pruned");

    // The restored domain goes down as any other, nothing of it left.
    let out = d.lazaret(&["down"]);
    assert!(out.status.success(), "{:?}", text(&out));
    d.wait_until_gone();
}

#[test]
fn runc_cannot_take_a_checkpoint() {
    let d = Domain::new("rc");
    let mut holder = d.hold_up();
    let out = d.lazaret(&["checkpoint"]);
    let (o, e) = text(&out);
    assert!(!out.status.success(), "{o}");
    assert!(e.contains("only gVisor"), "{e}");
    assert!(!d.domain_root().join("checkpoints").exists());
    let out = d.lazaret_raw(&["restore", "any", "-p", "rc"]);
    assert!(!out.status.success());
    assert!(text(&out).1.contains("only gVisor"), "{:?}", text(&out));
    let _ = holder.kill();
    let _ = holder.wait();
}

/// A restore that cannot come back (here a damaged image) fails with the
/// reason and leaves nothing running; the next start is a fresh one.
#[test]
fn a_restore_that_fails_leaves_nothing_running() {
    let d = Domain::new("gv");
    let ui = d.tmux(100, 30, "ui -p gv", Some("echo EXIT=$?; sleep 600"));
    ui.wait_for(120, "the workbench's shell", |s| s.contains("root@"));
    let out = d.lazaret(&["checkpoint", "--name", "broken"]);
    assert!(out.status.success(), "{:?}", text(&out));
    ui.send(&["C-a", "d"]);
    ui.wait_for(30, "the workbench detached", |s| s.contains("EXIT="));
    let image = d
        .domain_root()
        .join("checkpoints/broken/memory/checkpoint.img");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&image)
        .unwrap();
    file.set_len(4096).unwrap();
    drop(file);

    let out = d.lazaret_raw(&["restore", "broken", "-p", "gv"]);
    let (o, e) = text(&out);
    assert!(!out.status.success(), "{o}{e}");
    assert!(e.contains("cannot restore domain"), "{e}");
    d.wait_until_gone();
    assert!(d.containers().is_empty(), "{:?}", d.containers());

    // The request was taken: the next start is a fresh one.
    let out = d.lazaret_raw(&["exec", "-p", "gv", "--", "true"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let up = d
        .audit_json()
        .into_iter()
        .rfind(|r| r["kind"] == "domain-up")
        .unwrap();
    assert!(up["data"].get("restored").is_none(), "{up}");
}
