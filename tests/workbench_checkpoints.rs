//! Checkpoints from the workbench's keys (issue 30): prefix `K` lists the
//! focused tab's domain's checkpoints; in that overlay `k` takes one, `f`
//! forks one into a new domain (a tab opens on it) and `r` restores one
//! after a y/n question (the domain's tab lets go of its session, and a
//! tab comes back on the restored one). Driven in tmux, as the user would.

mod common;

use std::time::{Duration, Instant};

use common::sandbox::{Domain, wait_domain_gone};
use common::text;

/// The counter's value, read from inside.
fn count(d: &Domain) -> u64 {
    let (_, out, _) = d.sh("cat /tmp/count");
    out.trim().parse().unwrap_or(0)
}

/// The entry of the domain `hash` in `lazaret status --json`, if listed.
fn status_of(d: &Domain, hash: &str) -> Option<serde_json::Value> {
    let out = d.lazaret_raw(&["status", "--json"]);
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    let all: serde_json::Value = serde_json::from_str(&o).unwrap();
    all.as_array()?.iter().find(|x| x["hash"] == hash).cloned()
}

/// The checkpoints overlay is on screen.
fn overlay(s: &str) -> bool {
    s.contains("Checkpoints of gv ")
}

#[test]
fn the_workbench_takes_forks_and_restores_checkpoints() {
    let d = Domain::new("gv");
    // A git project: the agent works in its clone, on its branch.
    let ws = d.ws();
    common::git_repo(&ws);
    let ui = d.tmux(120, 34, "ui -p gv", Some("echo EXIT=$?; sleep 600"));
    ui.wait_for(120, "the workbench's shell", |s| s.contains("root@"));
    ui.line("clear; (i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.05; done) &");
    let deadline = Instant::now() + Duration::from_secs(20);
    while count(&d) < 5 {
        assert!(Instant::now() < deadline, "the counter does not count");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Prefix K: the overlay, with nothing in it yet; `k` takes one and
    // the overlay lists it.
    ui.send(&["C-a", "K"]);
    ui.wait_for(10, "the checkpoints overlay", |s| {
        overlay(s) && s.contains("No checkpoints yet")
    });
    let before_save = count(&d);
    ui.send(&["k"]);
    ui.wait_for(60, "the checkpoint in the overlay", |s| {
        overlay(s) && !s.contains("No checkpoints yet") && s.contains("› ")
    });
    let after_save = count(&d);
    let out = d.lazaret(&["checkpoints", "--json"]);
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    let list: Vec<serde_json::Value> = serde_json::from_str(&o).unwrap();
    assert_eq!(list.len(), 1, "{o}");
    let name = list[0]["name"].as_str().unwrap().to_string();
    let screen = ui.screen();
    assert!(
        screen.contains(&format!("› {name}"))
            && (screen.contains(" KiB") || screen.contains(" MiB")),
        "{screen}"
    );

    // `f` and a name: the fork runs beside the original, in a tab of its
    // own. A name that is no fork name is refused in the overlay.
    let fork = d.other("gv@try2");
    ui.send(&["f"]);
    ui.wait_for(10, "the fork's name asked", |s| s.contains("named:"));
    ui.send(&["-l", "No!"]);
    ui.send(&["Enter"]);
    ui.wait_for(10, "a bad fork name refused", |s| {
        overlay(s) && s.contains("is not a fork name")
    });
    for _ in 0..3 {
        ui.send(&["BSpace"]);
    }
    ui.send(&["-l", "try2"]);
    ui.send(&["Enter"]);
    let screen = ui.wait_for(180, "a tab on the fork", |s| {
        !overlay(s) && s.lines().next().is_some_and(|l| l.contains("gv@try2"))
    });
    assert!(screen.contains("gv"), "{screen}");
    let forked = status_of(&d, fork.hash()).expect("the fork is listed in status");
    assert_eq!(forked["profile"], "gv@try2", "{forked}");
    assert!(d.status().is_some(), "the original stopped");
    // The fork's tab is its restored shell, which answers (its screen
    // starts empty: the fork's coordinator saw none of its output yet).
    ui.line("clear; echo FORK-$((6*7)) $(cat /tmp/count)");
    let screen = ui.wait_for(30, "the fork's shell answers", |s| s.contains("FORK-42"));
    let line = screen.lines().find(|l| l.contains("FORK-42")).unwrap();
    let fork_count: u64 = line
        .split("FORK-42")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.trim_end_matches('│').parse().ok())
        .unwrap_or(0);
    assert!(
        fork_count >= before_save,
        "the fork counts from {fork_count}, saved at {before_save}: {screen}"
    );

    // Back to the original's tab; far enough past the save that the
    // restored count is seen to go back (it counts about twenty a second).
    ui.send(&["C-a", "1"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(&d) < after_save + 200 {
        assert!(Instant::now() < deadline, "the counter is too slow");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The agent commits after the checkpoint; its branch in the repository
    // follows.
    assert_eq!(
        d.sh("cd /workspace && git -c user.name=a -c user.email=a@b.invalid commit -q --allow-empty -m after").0,
        0
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while common::git(&ws, &["log", "--format=%s", "-1", "lazaret/agent-gv", "--"]).trim()
        != "after"
    {
        assert!(
            Instant::now() < deadline,
            "the agent's branch did not follow"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // `r` asks first, and says what becomes of the sessions; then, since
    // the restore sets the agent's branch back, asks again.
    ui.send(&["C-a", "K"]);
    ui.wait_for(10, "the overlay again", |s| {
        overlay(s) && s.contains(&format!("› {name}"))
    });
    ui.send(&["r"]);
    ui.wait_for(10, "the restore question", |s| {
        s.contains(&format!("Restore {name}?")) && s.contains("y restore")
    });
    ui.send(&["y"]);
    ui.wait_for(10, "the question about the branch", |s| {
        let joined = s.replace('\n', " ");
        s.contains(&format!("Restore {name} anyway?"))
            && joined.contains("lazaret/agent-gv")
            && s.contains("y restore anyway")
    });
    let before_restore = count(&d);
    ui.send(&["y"]);
    let screen = ui.wait_for(180, "the domain restored, its tab back", |s| {
        s.contains(&format!("checkpoint {name} again"))
    });
    // No tab reports the restore as a failure.
    assert!(!screen.contains("FAILED"), "{screen}");
    assert!(!screen.contains("failed"), "{screen}");
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
    let up: Vec<_> = d
        .audit_json()
        .into_iter()
        .filter(|r| r["kind"] == "domain-up")
        .collect();
    assert_eq!(up.last().unwrap()["data"]["restored"], true, "{up:?}");
    // The tab opened on it is the restored session, and it answers.
    let status = d.status().expect("the restored domain is listed");
    assert_eq!(
        status["hosted"].as_array().map(Vec::len),
        Some(1),
        "{status}"
    );
    ui.line("clear; echo BACK-$((6*7))");
    let screen = ui.wait_for(30, "the restored shell answers", |s| s.contains("BACK-42"));
    // The fork's tab, and the original's again.
    let tabs: Vec<&str> = screen
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert!(
        tabs.iter().any(|t| t.ends_with(":gv@try2")) && tabs.iter().any(|t| t.ends_with(":gv")),
        "{screen}"
    );

    // The fork goes down as any domain; the original runs on.
    let out = d.lazaret_raw(&["down", "gv@try2"]);
    assert!(out.status.success(), "{:?}", text(&out));
    wait_domain_gone(&fork, Vec::new);
    assert!(d.status().is_some(), "the original went down with the fork");
    ui.quit_ending_sessions();
    ui.wait_for(60, "the workbench left", |s| s.contains("EXIT="));
    d.wait_until_gone();
}
