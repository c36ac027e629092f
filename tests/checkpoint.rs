//! Checkpoints of a running sandbox (issue 30), as the user takes them:
//! `lazaret checkpoint` beside a workbench whose shell runs a counter.
//! The sandbox runs on, the shell still answers, the counter still counts;
//! what gVisor could not bring back (a `podman exec` session) and runc are
//! refused with the reason. `lazaret restore` brings the domain back as
//! the checkpoint: the counter counts on from its saved value, a file
//! written after the save is gone, the shell is a session again. A fork
//! runs beside the original with its own files, branch and credentials.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::sandbox::{Domain, wait_domain_gone};
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
    // (Each read is a `podman exec`, seconds apart on a loaded host: the
    // wait is for the counter to move at all, not for its speed.)
    let deadline = Instant::now() + Duration::from_secs(30);
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

    // Pruning (issue 43): checkpoints younger than the age stay; a running
    // domain's older ones stay too unless asked (`--running`), and a dry
    // run removes nothing; the domain stays.
    let out = d.lazaret_raw(&["domains", "prune", "--older-than", "1h", "--force"]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(dir.exists(), "{:?}", text(&out));
    let out = d.lazaret_raw(&["domains", "prune", "--older-than", "0s", "--force"]);
    let (o, e) = text(&out);
    assert!(
        o.contains("checkpoint(s) of running domains (--running"),
        "{o}{e}"
    );
    assert!(
        dir.exists(),
        "a running domain's checkpoint was pruned: {o}"
    );
    let out = d.lazaret_raw(&[
        "domains",
        "prune",
        "--older-than",
        "0s",
        "--running",
        "--dry-run",
    ]);
    let (o, e) = text(&out);
    assert!(
        o.contains("would remove: checkpoint first of domain"),
        "{o}{e}"
    );
    assert!(dir.exists(), "a dry run removed: {o}");
    let out = d.lazaret_raw(&[
        "domains",
        "prune",
        "--older-than",
        "0s",
        "--running",
        "--force",
    ]);
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
    let out = d.lazaret_raw(&["fork", "rc", "any", "--as", "try2"]);
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

/// A fork runs beside the original from the original's checkpoint, with
/// its own files, branch and credentials: the original's session
/// credential and client certificate, which the forked processes still
/// hold in memory, are refused by the fork's coordinator. Then the
/// original is restored: its clone and branch go back to the checkpoint.
/// Last, a restore whose sandbox fails its self-test leaves nothing
/// running.
#[test]
fn a_fork_runs_beside_the_original_with_its_own_identity() {
    let d = Domain::new("gv");
    let ws = d.ws();
    common::git_repo(&ws);
    let ui = d.tmux(120, 30, "ui -p gv", Some("echo EXIT=$?; sleep 600"));
    ui.wait_for(120, "the workbench's shell", |s| s.contains("root@"));
    // In the original's memory: a counter, and its credentials.
    ui.line(
        "clear; (i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.05; done) & \
         cp /run/lazaret/certs/session-$LAZARET_SESSION_ID.cred /tmp/orig.cred && \
         cp -r /run/lazaret/certs /tmp/orig-certs && echo SAVED-$((6*7))",
    );
    ui.wait_for(30, "the original's credentials kept", |s| {
        s.contains("SAVED-42")
    });
    assert_eq!(
        d.sh("cd /workspace && echo orig > who && git add who && git -c user.name=a -c user.email=a@b.invalid commit -qm orig-work").0,
        0
    );
    // The State Anchor's changes (a persistent /usr).
    assert_eq!(d.sh("echo v1 > /usr/local/share/lz-marker").0, 0);
    let out = d.lazaret(&["checkpoint", "--name", "base"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let saved = count(&d);
    // After the checkpoint: not in it.
    assert_eq!(
        d.sh("cd /workspace && echo later > later && git add later && git -c user.name=a -c user.email=a@b.invalid commit -qm later").0,
        0
    );
    let later = d.sh("git -C /workspace rev-parse HEAD").1;
    assert_eq!(d.sh("echo v2 > /usr/local/share/lz-marker").0, 0);

    let fork = d.other("gv@try2");
    let out = d.lazaret_raw(&["fork", "gv", "base", "--as", "try2"]);
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    assert!(o.contains("lazaret/agent-gv-try2"), "{o}");
    assert_ne!(fork.hash(), d.hash);
    // Both run, each its own domain.
    let sh_fork = |script: &str| {
        let out = d.lazaret_raw(&["exec", "-p", "gv@try2", "--", "sh", "-c", script]);
        let (o, e) = text(&out);
        assert!(out.status.success(), "{script}: {o}{e}");
        o
    };
    let forked: u64 = sh_fork("cat /tmp/count").trim().parse().unwrap();
    assert!(
        forked >= saved,
        "the fork counts from {forked}, saved at {saved}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while sh_fork("cat /tmp/count").trim().parse::<u64>().unwrap() <= forked {
        assert!(
            Instant::now() < deadline,
            "the fork's counter does not count"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(d.status().is_some(), "the original stopped");
    // Its own files and branch, from the checkpoint.
    assert_eq!(sh_fork("cat /workspace/who").trim(), "orig");
    assert_eq!(sh_fork("cat /usr/local/share/lz-marker").trim(), "v1");
    assert_eq!(
        sh_fork("test -e /workspace/later || echo gone").trim(),
        "gone"
    );
    assert_eq!(
        sh_fork("git -C /workspace rev-parse --abbrev-ref HEAD").trim(),
        "lazaret/agent-gv-try2"
    );
    sh_fork(
        "cd /workspace && echo fork > who && git -c user.name=a -c user.email=a@b.invalid commit -qam fork-work",
    );
    assert_eq!(d.sh("cat /workspace/who").1.trim(), "orig");
    // The fork's branch reaches the host's repository; the original's is
    // untouched by the fork's commit.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = common::git(&ws, &["log", "--format=%s", "lazaret/agent-gv-try2", "--"]);
        if log.lines().next() == Some("fork-work") {
            break;
        }
        assert!(Instant::now() < deadline, "the fork's branch: {log}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let original_branch = common::git(&ws, &["log", "--format=%s", "-1", "lazaret/agent-gv", "--"]);
    assert_eq!(original_branch.trim(), "later");
    // Its own Trust Anchor.
    let ca = |dir: std::path::PathBuf| std::fs::read(dir.join("ca.pem")).unwrap();
    assert_ne!(
        ca(d.certs_dir()),
        ca(fork.certs_dir(&common::sandbox::runtime_dir()))
    );

    // In the fork's restored shell: the original's credential and client
    // certificate are refused; its own reach the host.
    let attach = d.tmux(
        120,
        30,
        "attach -p gv@try2",
        Some("echo EXIT=$?; sleep 600"),
    );
    // An adopted session starts with an empty screen: the shell answers.
    attach.wait_for(60, "the attached client", |s| s.contains("? help"));
    attach.line("clear; echo READY-$((6*7))");
    attach.wait_for(60, "the fork's shell", |s| s.contains("READY-42"));
    attach.line(
        "clear; LAZARET_SESSION_CREDENTIAL=$(cat /tmp/orig.cred) /run/lazaret/escalate --timeout 20 -- echo x; echo \"ORIG\" \"CRED=$?\"",
    );
    let screen = attach.wait_for(60, "the original's credential", |s| {
        s.contains("ORIG CRED=")
    });
    assert!(screen.contains("ORIG CRED=70"), "{screen}");
    // (The line wraps at the pane's width.)
    assert!(
        screen
            .replace('\n', "")
            .contains("not signed by the session's key"),
        "{screen}"
    );
    attach.line(
        "clear; LAZARET_CERTS_DIR=/tmp/orig-certs /run/lazaret/escalate --timeout 20 -- echo x; echo \"ORIG\" \"CERT=$?\"",
    );
    let screen = attach.wait_for(60, "the original's certificate", |s| {
        s.contains("ORIG CERT=")
    });
    assert!(screen.contains("ORIG CERT=69"), "{screen}");
    attach.line(
        "clear; /run/lazaret/escalate --timeout 20 -- echo OWN-$((6*7)); echo \"OWN\" \"CODE=$?\"",
    );
    let screen = attach.wait_for(60, "the fork's own credential", |s| s.contains("OWN CODE="));
    assert!(
        screen.contains("OWN-42") && screen.contains("OWN CODE=0"),
        "{screen}"
    );
    let up = d
        .audit_json_of("gv@try2")
        .into_iter()
        .rfind(|r| r["kind"] == "domain-up")
        .unwrap();
    assert_eq!(up["data"]["checkpoint"], "base", "{up}");
    assert!(
        up["data"]["forked_from"]
            .as_str()
            .unwrap_or_default()
            .contains(&d.hash),
        "{up}"
    );
    attach.send(&["C-a", "d"]);
    let out = d.lazaret_raw(&["down", "gv@try2"]);
    assert!(out.status.success(), "{:?}", text(&out));
    wait_domain_gone(&fork, Vec::new);
    assert!(d.status().is_some(), "the original went down with the fork");

    // The original restored: its clone and branch are the checkpoint's.
    ui.send(&["C-a", "d"]);
    ui.wait_for(30, "the workbench detached", |s| s.contains("EXIT="));
    // Not without the user's word: the agent's branch in the repository
    // has a commit made since the checkpoint. The domain runs on.
    let out = d.lazaret_raw(&["restore", "gv", "base"]);
    let (o, e) = text(&out);
    assert!(!out.status.success(), "{o}{e}");
    assert!(e.contains("back by 1 commit"), "{e}");
    assert_eq!(d.sh("cat /usr/local/share/lz-marker").1.trim(), "v2");
    let out = d.lazaret_raw(&["restore", "gv", "base", "--force"]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert_eq!(
        d.sh("test -e /workspace/later || echo gone").1.trim(),
        "gone"
    );
    assert_eq!(d.sh("cat /usr/local/share/lz-marker").1.trim(), "v1");
    let head = d.sh("git -C /workspace log --format=%s -1").1;
    assert_eq!(head.trim(), "orig-work");
    assert_ne!(d.sh("git -C /workspace rev-parse HEAD").1, later);
    // The branch in the repository follows.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = common::git(&ws, &["log", "--format=%s", "-1", "lazaret/agent-gv", "--"]);
        if log.trim() == "orig-work" {
            break;
        }
        assert!(Instant::now() < deadline, "the agent's branch: {log}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // A restore whose sandbox fails its self-test: the checkpoint's list
    // of Lazaret's own mount points emptied, the layout expects the
    // masked folders it finds in the clone read-only, and the restored
    // sandbox has them as it was saved (memory-only).
    let points = d.domain_root().join("checkpoints/base/files/mountpoints");
    std::fs::write(&points, "").unwrap();
    let out = d.lazaret_raw(&["restore", "gv", "base"]);
    let (o, e) = text(&out);
    assert!(!out.status.success(), "{o}{e}");
    assert!(e.contains("self-test"), "{e}");
    d.wait_until_gone();
    assert!(d.containers().is_empty(), "{:?}", d.containers());
}

/// Whether the sandbox connects to 10.0.2.2:`port` (the host's loopback).
fn connects(d: &Domain, port: u16) -> bool {
    let (code, out, _) = d.sh(&format!(
        "timeout 5 bash -c 'exec 3<>/dev/tcp/10.0.2.2/{port}' && echo OK"
    ));
    code == 0 && out.contains("OK")
}

/// A restored sandbox meets the policy configured when it is restored,
/// never the one it was saved under: its link is closed at the restore and
/// opened with the current policy once its self-test passed.
#[test]
fn a_restored_sandbox_meets_the_current_policy() {
    let d = Domain::new("net");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || for _ in listener.incoming() {});
    let ui = d.tmux(100, 30, "ui -p net", Some("echo EXIT=$?; sleep 600"));
    ui.wait_for(120, "the workbench's shell", |s| s.contains("root@"));
    assert!(connects(&d, port), "the configured policy allows 10.0.2.2");
    // A connection open (and one just closed, above) during the save:
    // runsc resets them rather than refusing the checkpoint.
    ui.line(&format!(
        "clear; exec 3<>/dev/tcp/10.0.2.2/{port} && echo OPEN-$((6*7))"
    ));
    ui.wait_for(30, "the open connection", |s| s.contains("OPEN-42"));
    let out = d.lazaret(&["checkpoint", "--name", "open"]);
    assert!(out.status.success(), "{:?}", text(&out));
    ui.send(&["C-a", "d"]);
    ui.wait_for(30, "the workbench detached", |s| s.contains("EXIT="));

    // The configuration no longer allows it: the restored sandbox, saved
    // while it was allowed, is refused.
    let config = d.ws().parent().unwrap().join("config.toml");
    let allowing = std::fs::read_to_string(&config).unwrap();
    // (The net profile's rule is the one the netrc profile follows.)
    let denying = allowing.replacen(
        "allow_egress = [\"10.0.2.2/32\"]\n[profiles.netrc]",
        "allow_egress = []\n[profiles.netrc]",
        1,
    );
    assert_ne!(denying, allowing);
    std::fs::write(&config, &denying).unwrap();
    let out = d.lazaret_raw(&["restore", "net", "open"]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(!connects(&d, port), "the saved policy came back");

    // Allowed again: the restored sandbox's link is opened with it.
    std::fs::write(&config, &allowing).unwrap();
    let out = d.lazaret_raw(&["restore", "net", "open"]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(
        connects(&d, port),
        "the link was not opened after the self-test"
    );
    let out = d.lazaret(&["down"]);
    assert!(out.status.success(), "{:?}", text(&out));
    d.wait_until_gone();
}
