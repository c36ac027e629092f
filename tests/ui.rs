//! `lazaret ui` end to end: the real binary in a real terminal (tmux),
//! against a real gVisor sandbox and the real Session Coordinator. Every
//! wait is on a marker that only the awaited step can put on screen.

mod common;

use common::sandbox::{Domain, wait_domain_gone};
use common::{ESCALATE as ESC, modal_with};

fn start_ui(d: &Domain, cols: u16, rows: u16) -> common::Tmux {
    d.tmux(cols, rows, &format!("ui --profile {}", d.profile), None)
}

#[test]
fn the_workbench_runs_shells_in_tabs_and_asks_the_human_in_a_modal() {
    let d = Domain::new("gv");
    let t = start_ui(&d, 120, 40);
    // Boot progress shows in the tab, then the shell's prompt.
    let s = t.wait_for(120, "the sandbox shell", |s| {
        s.contains("starting the shell") && s.contains("root@")
    });
    assert!(s.contains("connecting to gv"), "{s}");
    // Every boot step, in order, however fast they came.
    let mut at = 0;
    for step in [
        "starting",
        "preparing the Network Sidecar image",
        "starting the Network Sidecar",
        "mounting the State Anchor",
        "starting the Agent Sandbox",
        "] ready",
        "starting the shell",
    ] {
        let found = s[at..].find(step);
        assert!(found.is_some(), "no step `{step}` after byte {at}:\n{s}");
        at += found.unwrap_or(0) + step.len();
    }
    // The status line shows the prefix and the domain, under gVisor.
    assert!(s.contains("C-a"), "{s}");
    assert!(s.contains(&format!("gv {} · gVisor", d.hash)), "{s}");

    // Typing reaches the shell and its output comes back.
    t.line("clear; echo T1-$((6*7))");
    t.wait_for(20, "the shell's output", |s| s.contains("T1-42"));

    // The pane's inner size is the PTY's: 120x40 minus tab bar, status
    // line and the border.
    t.line("clear; stty size | sed 's/^/SZ=/'");
    t.wait_for(20, "stty size", |s| s.contains("SZ=36 118"));
    t.resize(100, 30);
    t.line("clear; stty size | sed 's/^/SZ2=/'");
    t.wait_for(20, "stty size after a resize", |s| s.contains("SZ2=26 98"));
    t.line("clear");

    // A second tab: the dialog picks profile and workspace, starting from
    // the focused tab's; a workspace that is no folder is refused in place.
    t.send(&["C-a", "c"]);
    let s = t.wait_for(20, "the new-tab dialog", |s| {
        s.contains("New tab") && s.contains("Enter open")
    });
    assert!(s.contains("› gv"), "{s}");
    t.send(&["Tab"]);
    t.send(&["-l", "/nope"]);
    t.send(&["Enter"]);
    // Said by the checks that run before anything starts (issue 27).
    // The dialog wraps it anywhere: read its letters only.
    t.wait_for(20, "the refusal", |s| {
        let letters: String = s.chars().filter(|c| c.is_alphanumeric()).collect();
        letters.contains("isnotadirectory") || letters.contains("cannotbeused")
    });
    // The path filled in was a suggestion that typing replaced: C-u
    // clears the field, and the workspace is typed again.
    t.send(&["C-u"]);
    t.send(&["-l", &d.ws().display().to_string()]);
    t.send(&["Enter"]);
    // It takes the shell kept ready at its prompt: no boot steps show.
    t.wait_for(60, "the second tab's shell", |s| {
        s.contains("2:gv-2") && s.contains("root@")
    });
    t.line("clear; echo T2-$((7*7))");
    t.wait_for(20, "the second shell's output", |s| s.contains("T2-49"));

    // A request never takes the keyboard (decisions.md D15): it waits,
    // said on the pane's border and the status line, until the human opens
    // it with prefix `!`; the code shown in it approves.
    t.line(&format!(
        "clear; {ESC} --justify step-approve -- whoami; echo A-EXIT=$?"
    ));
    let s = t.wait_for(20, "the waiting request", common::request_waits);
    assert!(s.contains("a host request waits"), "{s}");
    // The tab bar carries a badge for the pending request.
    assert!(s.lines().next().unwrap_or("").contains("2:gv-2  !1"), "{s}");
    let s = common::open_request_by_bang(&t, "step-approve");
    assert!(!s.contains("A-EXIT"), "answered before it was opened:\n{s}");
    assert!(s.contains("whoami"), "{s}");
    // `a` is no approval: the modal says what is.
    t.send(&["a"]);
    t.wait_for(20, "the refusal's reason", |s| {
        s.contains("to approve, type the code")
    });
    common::approve_modal(&t, "step-approve");
    let s = t.wait_for(20, "the approved result", |s| s.contains("A-EXIT=0"));
    let expected = common::test_user().map_or_else(
        || std::env::var("USER").unwrap_or_default(),
        |u| u.name.clone(),
    );
    assert!(s.contains(&expected), "whoami's output: {s}");

    // Deny with a reason; edit, and the edit runs instead.
    common::deny_then_edit(&t, &d.s.path().join("edited-canary"));

    // The shell's own end closes its tab; the first tab is still alive.
    t.line("exit");
    t.wait_for(20, "the second tab to close", |s| {
        !s.lines().next().unwrap_or("").contains("2:gv-2")
    });
    t.line("clear; echo BACK-$((8*8))");
    t.wait_for(20, "the first shell again", |s| s.contains("BACK-64"));

    // Quit: every session of this UI ends, and with the last the domain.
    t.quit_ending_sessions();
    t.wait_exit(30, "lazaret ui");
    d.wait_until_gone();
    let decisions = decisions(&d);
    assert_eq!(decisions, vec!["approved", "denied", "edited"]);
}

/// The panels, the prefix key's own commands, and a runtime that is not
/// gVisor shown loudly; q then y in the modal aborts the asking tab's
/// session, and with it its domain, and nothing else.
#[test]
fn panels_show_domains_requests_and_audit_and_abort_closes_the_tab() {
    let d = Domain::new("rc");
    let t = start_ui(&d, 160, 40);
    let s = t.wait_for(120, "the sandbox shell", |s| {
        s.contains("starting the shell") && s.contains("root@")
    });
    // Not gVisor: the status line and the pane say so.
    assert!(s.contains("!! NOT gVisor: runc !!"), "{s}");
    assert!(s.contains("NOT gVisor: runc "), "{s}");

    // 160 columns: the dashboard by default. Prefix `|` turns it off (one
    // panel at a time, as the rest of this test uses them), kept for the
    // next workbench.
    t.wait_for(20, "the dashboard", |s| {
        s.contains("Sessions ·") && s.contains("Network policy · ") && s.contains("Escalations ·")
    });
    t.send(&["C-a", "|"]);
    t.wait_for(20, "the dashboard turned off", |s| {
        s.contains("root@") && !s.contains("Sessions ·") && !s.contains("Escalations ·")
    });
    let kept = d.s.path().join("data/workbench-layout.toml");
    let kept = std::fs::read_to_string(&kept).unwrap_or_default();
    assert!(kept.contains("dashboard = false"), "{kept}");

    // The help overlay lists the bindings; any key closes it.
    t.send(&["C-a", "?"]);
    t.wait_for(20, "the help overlay", |s| {
        s.contains("end the asking tab's session (others stay)")
    });
    t.send(&["Escape"]);
    t.wait_for(20, "the help overlay to close", |s| {
        !s.contains("end the asking tab's session (others stay)")
    });

    // The prefix twice sends it to the shell (Ctrl-a: start of line).
    t.send(&["-l", "echo PFX-$((5*5))"]);
    t.send(&["C-a", "C-a"]);
    t.send(&["-l", "clear; "]);
    t.send(&["Enter"]);
    t.wait_for(20, "the prefix sent through", |s| s.contains("PFX-25"));

    // Shift-PageUp scrolls the pane's history; typing goes back down.
    t.line("clear; seq 1 300 | sed 's/^/L/'");
    t.wait_for(20, "the output", |s| s.contains("L300"));
    t.send(&["S-PPage"]);
    t.wait_for(20, "the history", |s| {
        s.contains("L250") && !s.contains("L300")
    });
    t.line("clear; echo BOTTOM-$((9*9))");
    t.wait_for(20, "the pane back at the bottom", |s| {
        s.contains("BOTTOM-81")
    });

    // Rename the tab.
    t.send(&["C-a", ","]);
    t.send(&["-l", "agent-one"]);
    t.send(&["Enter"]);
    t.wait_for(20, "the renamed tab", |s| {
        s.contains("agent-one") && !s.contains("rename tab:")
    });

    // An approved request: the queue shows it and, later, its exit code.
    t.line(&format!(
        "clear; {ESC} --justify step-queue -- whoami; echo Q-EXIT=$?"
    ));
    common::open_and_approve(&t, "step-queue");
    t.wait_for(20, "the approved result", |s| s.contains("Q-EXIT=0"));
    // The queue shows the result the coordinator sent back: exit code and
    // output.
    let user = common::test_user().map_or_else(
        || std::env::var("USER").unwrap_or_default(),
        |u| u.name.clone(),
    );
    t.send(&["C-a", "e"]);
    t.wait_for(20, "the escalation queue", |s| {
        // The output sits under the table, right of the pane's border
        // (where the shell's own `whoami` output cannot be).
        s.contains("Escalations")
            && s.contains("agent-one")
            && s.contains("· exit 0")
            && s.contains(&format!("││{user}"))
    });
    // The network panel: the live table with the rule behind each route;
    // an allow applies at once, in the sidecar's kernel table.
    t.send(&["C-a", "w"]);
    t.wait_for(30, "the network panel", |s| {
        s.contains("Network policy") && s.contains("floor")
    });
    t.send(&["C-a", "+"]);
    t.send(&["-l", "10.0.2.3"]);
    t.send(&["Enter"]);
    t.wait_for(30, "the allowed route", |s| {
        s.contains("allowed 10.0.2.3/32: in force") && s.contains("lazaret ui allow")
    });
    let out = d.lazaret(&["net", "show"]);
    let (shown, err) = common::text(&out);
    assert!(out.status.success(), "lazaret net show: {shown}{err}");
    assert!(
        shown
            .lines()
            .any(|l| l.contains("allow") && l.contains("10.0.2.3/32")),
        "the sidecar's table lacks the allowed route:\n{shown}"
    );
    // A name goes to the sidecar's resolver policy (decisions.md D11); it is
    // not resolved here (no name leaves the machine in a test).
    t.send(&["C-a", "+"]);
    t.send(&["-l", "ui.lazaret.test"]);
    t.send(&["Enter"]);
    t.wait_for(30, "the allowed name", |s| {
        s.contains("allowed ui.lazaret.test: in force") && s.contains("allow_domains")
    });
    let out = d.lazaret(&["net", "why", "ui.lazaret.test"]);
    let (why, _) = common::text(&out);
    assert!(
        why.contains("resolved by the sidecar") && why.contains("lazaret ui allow"),
        "{why}"
    );
    // A paste while the prompt is open lands in the prompt, not the shell.
    t.send(&["C-a", "+"]);
    t.tmux(&["set-buffer", "-b", "lazaret-paste", "192.0.2.77"]);
    t.tmux(&["paste-buffer", "-p", "-b", "lazaret-paste", "-t", "0"]);
    t.send(&["Enter"]);
    t.wait_for(30, "the pasted route", |s| {
        s.contains("allowed 192.0.2.77/32: in force")
    });
    t.send(&["C-a", "-"]);
    t.send(&["-l", "not a net!"]);
    t.send(&["Enter"]);
    t.wait_for(20, "the refused edit", |s| {
        s.contains("not a network or name")
    });
    // The audit trail of the focused tab's domain.
    t.send(&["C-a", "a"]);
    t.wait_for(20, "the audit trail", |s| s.contains("escalation-decision"));
    // Every running domain of this user, with its runtime.
    t.send(&["C-a", "s"]);
    let s = t.wait_for(20, "the sessions panel", |s| {
        s.contains("Sessions") && s.contains(&d.hash[..8])
    });
    assert!(s.contains("NOT gVisor"), "{s}");
    t.send(&["C-a", "s"]);

    // A second tab on another profile (picked in the dialog): another
    // domain, under gVisor, its runtime in the status line.
    t.send(&["C-a", "c"]);
    t.wait_for(20, "the new-tab dialog", |s| s.contains("Enter open"));
    t.send(&["Home"]);
    t.send(&["Enter"]);
    let gv = d.other("gv");
    t.wait_for(120, "the gv tab's shell", |s| {
        s.lines().next().unwrap_or("").contains("2:gv")
            && s.contains("root@")
            && s.contains(&format!("gv {} · gVisor", gv.hash()))
    });
    // q, then y, aborts (spec §5.2), as far as the human chose: the
    // request is denied and the asking tab's session ends, with it its
    // domain (its last session); the gv tab and its domain stay.
    t.send(&["C-a", "1"]);
    t.line(&format!("clear; {ESC} --justify step-abort -- whoami"));
    common::open_request_by_bang(&t, "step-abort");
    t.send(&["q"]);
    let s = t.wait_for(20, "the question", |s| s.contains("abort: deny, and end"));
    assert!(s.contains("other tabs stay"), "{s}");
    t.send(&["y"]);
    d.wait_until_gone();
    assert!(
        t.alive(),
        "the abort of one tab's request ended the workbench"
    );
    t.send(&["C-a", "2"]);
    t.line("clear; echo GV-$((5*5))");
    t.wait_for(20, "the gv tab, alive", |s| s.contains("GV-25"));
    t.quit_ending_sessions();
    t.wait_exit(30, "lazaret ui");
    wait_domain_gone(&gv, Vec::new);
    // The human's decisions reached the coordinator, the abort included.
    let decisions = decisions(&d);
    assert_eq!(decisions, vec!["approved", "aborted"]);
}

/// A profile's `command` (an agent CLI) is what its tabs run; when it
/// ends, its tab closes and, the last one, the UI and the domain with it.
/// `lazaret shell` on the same profile runs a shell, not the agent.
#[test]
fn tabs_run_the_profiles_command_and_shell_runs_a_shell() {
    let d = Domain::new("gv");
    d.add_config(&format!(
        "[profiles.agent]\nimage = \"{}\"\ncommand = \"/bin/sh -c 'echo AGENT-$((6*7)) up; read x; echo got-$x; exit 5'\"\n",
        common::sandbox::BASE_IMAGE
    ));
    let agent = d.other("agent");
    let t = d.tmux(100, 30, "ui --profile agent", None);
    t.wait_for(120, "the agent", |s| s.contains("AGENT-42 up"));
    t.line("hello");
    // A command that fails stays on screen with its exit code until closed.
    t.wait_for(30, "the failure in the tab", |s| {
        s.contains("got-hello") && s.contains("exited with code 5")
    });
    t.send(&["C-a", "x"]);
    t.wait_exit(30, "lazaret ui after its only tab's command ended");
    wait_domain_gone(&agent, Vec::new);

    let t = d.tmux(100, 30, "shell agent", None);
    let s = t.wait_for(120, "the shell", |s| s.contains("root@"));
    assert!(!s.contains("AGENT-42"), "{s}");
    t.line("exit");
    t.wait_exit(30, "lazaret shell");
    wait_domain_gone(&agent, Vec::new);
}

/// The `decision` of every escalation-decision record of the domain, in order.
fn decisions(d: &Domain) -> Vec<String> {
    d.audit_json()
        .iter()
        .filter(|r| r["kind"] == "escalation-decision")
        .filter_map(|r| r["data"]["decision"].as_str().map(str::to_string))
        .collect()
}

/// [`decisions`] once there are at least `n` (a decision's record may be
/// written just after the requester or the human heard of it).
fn decisions_at_least(d: &Domain, n: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let found = decisions(d);
        if found.len() >= n || std::time::Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Prompts end with what they belong to (decisions.md D10), seen by the
/// human in a real terminal: closing a tab whose request is up denies it
/// (the requester hears the denial, the audit has it); a requester killed
/// while its modal is up withdraws the modal with a note, and the `a`
/// pressed afterwards runs nothing.
#[test]
fn a_closed_tab_denies_its_prompts_and_a_killed_requester_withdraws_its_modal() {
    let d = Domain::new("gv");
    let t = start_ui(&d, 120, 40);
    t.wait_for(120, "the sandbox shell", |s| s.contains("root@"));
    let canary = d.s.path().join("lifecycle-canary");
    let touch = format!("mkdir {}", canary.display());

    // A second tab asks, its requester detached from the tab's shell so it
    // outlives the tab and can report what it was told.
    t.send(&["C-a", "c"]);
    t.wait_for(20, "the new-tab dialog", |s| s.contains("New tab"));
    t.send(&["Enter"]);
    t.wait_for(60, "the second tab's shell", |s| {
        s.lines().next().unwrap_or("").contains("2:gv-2") && s.contains("root@")
    });
    t.line(&format!(
        "clear; (trap '' HUP; {ESC} --justify step-close -- {touch}; echo RC=$? > /tmp/close-rc) </dev/null >/dev/null 2>/tmp/close-err &"
    ));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !common::request_waits(&t.screen()) {
        assert!(
            std::time::Instant::now() < deadline,
            "no request; the requester said: {:?}\n{}",
            d.sh("cat /tmp/close-err; ps -ef; ls -la /tmp"),
            t.screen()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    common::open_request_by_bang(&t, "step-close");
    // The modal names the session that signed the request.
    assert!(t.screen().contains("signed as tab gv-2 (session"));
    // Closing a tab whose session runs asks first (tmux's confirm-before):
    // any key but y keeps it, y closes it.
    t.send(&["C-a", "x"]);
    t.wait_for(20, "the question", |s| {
        s.contains("close tab gv-2? its session ends")
    });
    t.send(&["n"]);
    t.wait_for(20, "the tab kept", |s| s.contains("the tab stays open"));
    assert!(t.screen().lines().next().unwrap_or("").contains("2:gv-2"));
    t.send(&["C-a", "x"]);
    t.wait_for(20, "the question", |s| {
        s.contains("close tab gv-2? its session ends")
    });
    t.send(&["y"]);
    t.wait_for(20, "the second tab to close", |s| {
        !s.lines().next().unwrap_or("").contains("2:gv-2")
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, out, _) = d.sh("cat /tmp/close-rc 2>/dev/null");
        if out.contains("RC=") {
            assert_eq!(out.trim(), "RC=77", "the requester was not denied");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the requester hangs");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }

    // The first tab asks; its requester is killed while the modal is up.
    t.line(&format!(
        "clear; {ESC} --justify step-kill -- {touch} & echo $! > /tmp/req.pid; wait; echo K-DONE"
    ));
    common::open_request_by_bang(&t, "step-kill");
    let (code, _, err) = d.sh("kill -9 $(cat /tmp/req.pid)");
    assert_eq!(code, 0, "{err}");
    let s = t.wait_for(20, "the withdrawal", |s| {
        s.contains("withdrawn") && !s.contains("Host escalation request")
    });
    assert!(s.contains("withdrawn (the r"), "{s}");
    // The `a` pressed now, then the rest of a shell line that shows where
    // it went: with no modal left it is the start of `a=1` in the shell
    // (A-[1]); a modal that took it as an approval leaves the line
    // without it (A-[]). The workbench routes a key to a modal or to the
    // shell, never both, so the shell's answer settles what the `a` did.
    t.send(&["a"]);
    t.line("=1; printf 'A-[%s]\\n' \"$a\"");
    let s = t.wait_for(20, "the line after the `a`", |s| {
        s.contains("A-[1]") || s.contains("A-[]")
    });
    assert!(s.contains("A-[1]"), "the `a` was taken as an answer:\n{s}");
    assert!(!canary.exists(), "a withdrawn request ran");

    let decisions = decisions_at_least(&d, 2);
    assert_eq!(decisions, vec!["denied", "withdrawn"]);
    t.quit_ending_sessions();
    t.wait_exit(30, "lazaret ui");
    d.wait_until_gone();
}

fn status_of(d: &Domain) -> serde_json::Value {
    d.status().unwrap_or(serde_json::Value::Null)
}

/// A long day (issue 14): the Session Coordinator is killed (SIGKILL)
/// under a UI with two tabs. Both tabs say so, reconnect as the same
/// sessions to a new coordinator that counts them, keep their shells, and
/// escalation works again; the sandbox is the same one throughout.
#[test]
fn a_killed_coordinator_is_replaced_under_two_tabs() {
    let d = Domain::new("gv");
    let t = start_ui(&d, 120, 40);
    t.wait_for(120, "the sandbox shell", |s| s.contains("root@"));
    t.send(&["C-a", "c"]);
    t.wait_for(20, "the new-tab dialog", |s| s.contains("New tab"));
    t.send(&["Enter"]);
    t.wait_for(60, "the second tab's shell", |s| {
        s.lines().next().unwrap_or("").contains("2:gv-2") && s.contains("root@")
    });
    // A mark only this sandbox has.
    t.line("clear; echo same > /tmp/sandbox-mark");
    let before = status_of(&d);
    assert_eq!(
        before["sessions"].as_array().map(Vec::len),
        Some(2),
        "{before}"
    );
    let pid = before["coordinator_pid"].as_i64().unwrap() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // Both the new coordinator (counting both tabs) and the notice are
    // waited for, each timed: which of the two is slow, if one is, is in
    // the failure (issue 40: a timeout on a loaded host).
    let killed = std::time::Instant::now();
    let (mut up_after, mut told_after) = (None, None);
    let mut status_lines: Vec<String> = Vec::new();
    let after = loop {
        let s = status_of(&d);
        if up_after.is_none()
            && s["coordinator_pid"]
                .as_i64()
                .is_some_and(|p| p as i32 != pid)
            && s["sessions"].as_array().map(Vec::len) == Some(2)
        {
            up_after = Some(killed.elapsed());
        }
        let screen = t.screen();
        let last = screen.lines().last().unwrap_or("").trim().to_string();
        if status_lines.last() != Some(&last) {
            status_lines.push(last);
        }
        if told_after.is_none() && screen.contains("reconnected to a new Session Coordinator") {
            told_after = Some(killed.elapsed());
        }
        if up_after.is_some() && told_after.is_some() {
            break s;
        }
        assert!(
            killed.elapsed() < std::time::Duration::from_secs(120),
            "after the coordinator was killed: the new one counted both tabs after {up_after:?}, \
             the tab said it reconnected after {told_after:?}; the status line read, in turn: \
             {status_lines:#?}\nthe last status: {s}\nthe screen:\n{screen}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    eprintln!("replaced after {up_after:?}, told after {told_after:?}");
    // Both tabs' shells live on in the same sandbox, and escalate again.
    t.line(&format!(
        "clear; cat /tmp/sandbox-mark; {ESC} -- id -un && echo T2-OK"
    ));
    t.wait_for(30, "the second tab after the crash", |s| {
        s.contains("same") && s.contains("T2-OK")
    });
    t.send(&["C-a", "1"]);
    t.line("clear; echo T1-$((6*7))");
    t.wait_for(30, "the first tab after the crash", |s| s.contains("T1-42"));
    assert_eq!(after["sandbox"], before["sandbox"], "{before} {after}");
    t.quit_ending_sessions();
    t.wait_exit(30, "lazaret ui");
    d.wait_until_gone();
}

/// A flood of one request from one session is one modal with a count, and
/// one decision answers every copy (issue 13): three identical requests
/// show once as "×3", a denial reaches all three requesters, the audit has
/// three denials, and no second modal follows.
#[test]
fn identical_requests_are_one_modal_with_a_count() {
    let d = Domain::new("rc");
    let t = start_ui(&d, 160, 45);
    t.wait_for(120, "the sandbox shell", |s| s.contains("root@"));
    let canary = d.s.path().join("flood-canary");
    t.line(&format!(
        "clear; for i in 1 2 3; do {ESC} --justify flood-same -- mkdir {} & done 2>/dev/null; wait; echo F-DONE",
        canary.display()
    ));
    t.wait_for(30, "the waiting requests", common::request_waits);
    common::open_request_by_bang(&t, "flood-same");
    let s = t.wait_for(30, "one modal counting three", |s| {
        modal_with(s, "flood-same") && s.contains("×3 identical")
    });
    assert!(s.contains("one decision answers all"), "{s}");
    t.send(&["d"]);
    t.send(&["-l", "not three"]);
    t.send(&["Enter"]);
    t.wait_for(30, "every requester answered", |s| s.contains("F-DONE"));
    // A line typed now reaches the shell only if no modal is up or queued
    // (the workbench gives keys to a modal first; the keys are none a
    // modal acts on: no a, d, e or q), and the copies' prompts all came
    // before the one modal counted three.
    t.line("printf 'F-%s\\n' FOLLOW-UP");
    let s = t.wait_for(20, "the shell to take a line", |s| {
        s.contains("F-FOLLOW-UP")
    });
    assert!(
        !s.contains("Host escalation request"),
        "a copy opened its own modal:\n{s}"
    );
    // Each requester's denial is audited before it hears it (F-DONE).
    assert!(!canary.exists(), "a denied copy ran");
    assert_eq!(decisions(&d), vec!["denied", "denied", "denied"]);
}

/// Whether an SGR sequence in `screen` sets a colour (the default
/// colours, 39 and 49, are not one).
fn sets_a_colour(screen: &str) -> bool {
    screen.split("\x1b[").skip(1).any(|seq| {
        let end = seq
            .find(|c: char| !(c.is_ascii_digit() || c == ';'))
            .unwrap_or(seq.len());
        seq[end..].starts_with('m')
            && seq[..end].split(';').any(|p| {
                matches!(
                    p.parse::<u16>(),
                    Ok(30..=38 | 40..=48 | 90..=97 | 100..=107)
                )
            })
    })
}

/// `NO_COLOR=1`: the workbench draws no colour at all (attributes such as
/// reverse stay); the same screen without it has colour (the focused
/// pane's border).
#[test]
fn no_color_means_no_colour_on_screen() {
    let d = Domain::new("gv");
    let run = format!(
        "{} --config {} shell --profile {}",
        common::lazaret_bin().display(),
        d.s.path().join("config.toml").display(),
        d.profile
    );
    let coloured = |env: &[(&str, &str)]| {
        let mut all = vec![("LAZARET_USER_CONFIG", ""), ("LAZARET_TEST_FWD", "x")];
        all.extend_from_slice(env);
        let t = common::Tmux::start(&d.ws(), 100, 30, &all, &run);
        t.wait_for(120, "the shell", |s| s.contains("root@"));
        let screen = t.tmux(&["capture-pane", "-p", "-e", "-t", "0"]);
        t.line("exit");
        t.wait_exit(30, "lazaret shell after exit");
        sets_a_colour(&screen)
    };
    assert!(!coloured(&[("NO_COLOR", "1")]), "colour despite NO_COLOR");
    assert!(coloured(&[]), "the check itself sees colour");
    wait_domain_gone(&d.anchor, Vec::new);
}

/// A long day (issue 14): a sandbox certificate that cannot be renewed is
/// not silent in the workbench: the status line says so (the certs folder
/// is made unwritable for the renewal by a directory where its temporary
/// file goes; the lifetime is 4 s, so a renewal comes every 2 s).
#[test]
fn a_failed_certificate_renewal_shows_in_the_workbench() {
    let d = Domain::new("gv");
    let t = common::Tmux::start(
        &d.ws(),
        200,
        30,
        &[
            ("LAZARET_USER_CONFIG", ""),
            ("LAZARET_TEST_FWD", "x"),
            ("LAZARET_CERT_LIFETIME_SECS", "4"),
        ],
        &format!(
            "{} --config {} ui --profile gv",
            common::lazaret_bin().display(),
            d.s.path().join("config.toml").display()
        ),
    );
    t.wait_for(120, "the sandbox shell", |s| s.contains("root@"));
    let certs = d.certs_dir();
    std::fs::create_dir(certs.join(".ca.pem.tmp")).unwrap();
    let s = t.wait_for(20, "the warning", |s| {
        s.contains("cannot renew the sandbox's escalation certificate")
    });
    assert!(
        s.lines().last().unwrap_or("").contains("cannot renew"),
        "{s}"
    );
    std::fs::remove_dir(certs.join(".ca.pem.tmp")).unwrap();
    t.quit_ending_sessions();
    t.wait_exit(30, "lazaret ui");
    d.wait_until_gone();
}

/// Issue 29: the dashboard at a glance. Three tabs in two domains; a
/// request raised in a background tab is marked in the tab bar (`!1`) and
/// in the sessions panel (`WAITING 1`); prefix `!` opens it; approving
/// clears both marks, and it ran once.
#[test]
fn the_dashboard_marks_a_waiting_request_and_prefix_bang_opens_it() {
    let d = Domain::new("gv");
    let gvd = d.other("gvd");
    let count = d.ws().join("h29-count");
    let t = start_ui(&d, 120, 45);
    t.wait_for(120, "the first shell", |s| s.contains("root@"));
    assert!(!t.screen().contains("Sessions ·"), "{}", t.screen());
    // The dashboard is the default on a terminal wide enough: the
    // terminal grows, the panels come, the network table read.
    t.resize(180, 45);
    let s = t.wait_for(20, "the dashboard", |s| {
        s.contains("Sessions ·") && s.contains("Network policy · ") && s.contains("Escalations ·")
    });
    // The mouse drags the border between the pane and the panels 30
    // columns left (SGR mouse reports: press, drag, release; 1-based),
    // and the split is kept.
    let border = |s: &str| {
        s.lines()
            .nth(1)
            .and_then(|l| l.chars().position(|c| c == '╮'))
    };
    let x = border(&s).expect("the pane's border");
    let report = |code: u8, col: usize, end: char| format!("\x1b[<{code};{};12{end}", col + 1);
    t.send(&["-l", &report(0, x, 'M')]);
    t.send(&["-l", &report(32, x - 15, 'M')]);
    t.send(&["-l", &report(32, x - 30, 'M')]);
    t.send(&["-l", &report(0, x - 30, 'm')]);
    // (The column's width is a whole percentage of the width.)
    t.wait_for(20, "the border dragged", |s| {
        border(s).is_some_and(|b| (x - 32..=x - 30).contains(&b))
    });
    let kept = std::fs::read_to_string(d.s.path().join("data/workbench-layout.toml")).unwrap();
    assert!(
        kept.contains(&format!("split = {}", (180 - (x - 30)) * 100 / 180)),
        "{kept}"
    );
    // A second tab in this domain, a third in another.
    t.send(&["C-a", "c"]);
    t.wait_for(20, "the new-tab dialog", |s| s.contains("Enter open"));
    t.send(&["Enter"]);
    t.wait_for(60, "the second tab's shell", |s| {
        s.contains("2:gv-2") && s.contains("root@")
    });
    t.send(&["C-a", "c"]);
    t.wait_for(20, "the new-tab dialog", |s| s.contains("Enter open"));
    for _ in 0..10 {
        if t.screen().contains("› gvd") {
            break;
        }
        t.send(&["Down"]);
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    t.wait_for(5, "profile gvd picked", |s| s.contains("› gvd"));
    t.send(&["Enter"]);
    // Both domains in the sessions panel (other tests' may be there too:
    // it lists every domain of the user).
    t.wait_for(120, "the third tab's shell, in domain gvd", |s| {
        s.contains("3:gvd") && s.contains("root@") && s.contains(&d.hash) && s.contains(gvd.hash())
    });
    // Tab 1 asks in a moment, while tab 3 has the focus.
    t.send(&["C-a", "1"]);
    t.line(&format!(
        "clear; (sleep 3; {ESC} --justify h29-bg 'echo once >> {}'; echo H29=$?) &",
        count.display()
    ));
    t.send(&["C-a", "3"]);
    let s = t.wait_for(30, "the marks of the waiting request", |s| {
        s.contains("1:gv  !1") && common::domain_rows(s, &d.hash).contains("WAITING 1")
    });
    assert!(
        !modal_with(&s, "h29-bg"),
        "the modal waits in its tab:\n{s}"
    );
    common::open_and_approve(&t, "h29-bg");
    t.wait_for(30, "the marks cleared", |s| {
        s.contains("H29=0")
            && !s.lines().next().unwrap_or("").contains("!1")
            && !common::domain_rows(s, &d.hash).contains("WAITING")
    });
    assert_eq!(std::fs::read_to_string(&count).unwrap(), "once\n");

    // A shell running a command, and idle at its prompt again (under
    // gVisor, told by each session's Foreground Witness).
    t.send(&["C-a", "2"]);
    t.line("clear; sleep 600");
    t.wait_for(30, "tab 2's shell running a command", |s| {
        common::domain_rows(s, &d.hash).contains("command running")
    });
    t.send(&["C-c"]);
    t.wait_for(30, "every shell of gv idle at its prompt", |s| {
        let rows = common::domain_rows(s, &d.hash);
        rows.matches("idle at prompt").count() == 2 && !rows.contains("command running")
    });

    // Refusals the human has not seen: domain gv is refused three times
    // while tab 3 (domain gvd) has the focus; going to a gv tab, its
    // network table is on screen and they count as seen.
    t.send(&["C-a", "2"]);
    t.line(
        "clear; (sleep 2; for i in 1 2 3; do (exec 3<>/dev/tcp/10.0.2.2/9) 2>/dev/null; done) &",
    );
    t.send(&["C-a", "3"]);
    t.wait_for(30, "gv's new refusals marked", |s| {
        common::domain_rows(s, &d.hash).contains(" new")
    });
    t.send(&["C-a", "1"]);
    let s = t.wait_for(30, "gv's refusals seen", |s| {
        s.contains("root@") && !common::domain_rows(s, &d.hash).contains(" new")
    });
    // The uptime is the domain's now, not when its status last changed.
    let rows = common::domain_rows(&s, &d.hash);
    let up = rows
        .split(" · up ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_default();
    let secs: u64 = up
        .strip_suffix('s')
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX);
    assert!(secs >= 8, "up {up} after more than ten seconds:\n{s}");
    t.quit_ending_sessions();
    t.wait_exit(60, "lazaret ui");
}

/// What a human types to the agent, with every decision key in both
/// cases (a A d D e E q Q y Y), punctuation and Enter.
const PROSE: [&str; 3] = [
    "Add a Quick test for the parser, and Deny nothing: Edit the README too.",
    "yes, Yes! Queue it all; do not abort. DEAD keys? never, quietly EQ.",
    "e a d q E A D Q y Y - done and EXACT, Adequately Quoted.",
];

/// Decisions.md D15, issue 39: a request that arrives while the human
/// types to the agent never takes the keyboard. A shell in a tab runs
/// `cat > FILE`; a request arrives four seconds in, mid-sentence; three
/// sentences are typed at a human's speed with pauses. Afterwards nothing
/// ran on the host, no decision is in the audit log, the request still
/// waits, and FILE holds every key typed. Then the deliberate path (prefix
/// `!`, the code) approves it and it runs once.
fn typing_never_answers_a_request(profile: &'static str) {
    let d = Domain::new(profile);
    let t = start_ui(&d, 120, 40);
    t.wait_for(120, "the sandbox shell", |s| s.contains("root@"));
    let canary = d.s.path().join("typed-over");
    t.line(&format!(
        "clear; ( sleep 4; {ESC} --justify typed-over -- mkdir {}; echo REQ=$? > /tmp/req-rc ) </dev/null >/tmp/req-out 2>&1 & cat > /tmp/typed",
        canary.display()
    ));
    let started = std::time::Instant::now();
    let mut typed = String::new();
    for (i, sentence) in PROSE.iter().enumerate() {
        for c in sentence.chars() {
            // tmux takes a lone `;` as its own command separator.
            let key = if c == ';' {
                "\\;".to_string()
            } else {
                c.to_string()
            };
            t.send(&["-l", &key]);
            // 60-130 ms between keys, as people type.
            let gap = 60 + (u64::from(u32::from(c)) * 7) % 70;
            std::thread::sleep(std::time::Duration::from_millis(gap));
        }
        t.send(&["Enter"]);
        typed.push_str(sentence);
        typed.push('\n');
        if i == 0 {
            // The request came while the first sentence was typed.
            let s = t.wait_for(20, "the request, waiting", common::request_waits);
            assert!(
                started.elapsed() < std::time::Duration::from_secs(20),
                "the request came late: {:?}",
                started.elapsed()
            );
            assert!(s.contains("a host request waits"), "{s}");
        }
        // A pause between sentences, as people make.
        std::thread::sleep(std::time::Duration::from_millis(2_000 + 500 * i as u64));
    }
    // End of input for cat.
    t.send(&["C-d"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let file = loop {
        let (_, out, _) = d.sh("pgrep -x cat >/dev/null || cat /tmp/typed");
        if !out.is_empty() || std::time::Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(file, typed, "keys typed for the agent were lost or taken");
    assert!(!canary.exists(), "typing approved a host command");
    assert!(
        decisions(&d).is_empty(),
        "typing decided: {:?}",
        decisions(&d)
    );
    let (_, rc, _) = d.sh("cat /tmp/req-rc 2>/dev/null");
    assert!(rc.is_empty(), "the request was answered: {rc}");
    let s = t.screen();
    assert!(
        common::request_waits(&s),
        "the request no longer waits:\n{s}"
    );

    // The deliberate path: prefix !, then the code.
    common::open_and_approve(&t, "typed-over");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, rc, _) = d.sh("cat /tmp/req-rc 2>/dev/null");
        if rc.contains("REQ=") {
            assert_eq!(rc.trim(), "REQ=0");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the approved request never ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(canary.is_dir(), "the approved command did not run");
    assert_eq!(decisions_at_least(&d, 1), vec!["approved"]);
    t.quit_ending_sessions();
    t.wait_exit(30, "lazaret ui");
    d.wait_until_gone();
}

#[test]
fn typing_never_answers_a_request_under_gvisor() {
    typing_never_answers_a_request("gv");
}

#[test]
fn typing_never_answers_a_request_under_runc() {
    typing_never_answers_a_request("rc");
}

/// Issue 39 at 80x24 with a panel open: the modal takes the width it
/// needs (the panel yields), the command's first word is on its first
/// row, and approving is refused with the reason until its end was seen.
#[test]
fn a_request_at_80x24_with_a_panel_open_is_read_whole_before_approval() {
    let d = Domain::new("gv");
    let t = start_ui(&d, 80, 24);
    t.wait_for(120, "the sandbox shell", |s| s.contains("root@"));
    t.send(&["C-a", "s"]);
    t.wait_for(20, "the sessions panel", |s| s.contains("Sessions"));
    let dir = d.s.path().join("narrow-canary");
    t.line(&format!(
        "clear; D={}; {ESC} --justify narrow-one -- mkdir -p $D $(seq -f \"$D/p-%g\" 0 29); echo N-EXIT=$?",
        dir.display(),
    ));
    t.wait_for(20, "the waiting request", common::request_waits);
    t.send(&["C-a", "!"]);
    let s = t.wait_for(20, "the modal, armed", |s| {
        s.contains("Host escalation request") && s.contains("read to the end to approve")
    });
    let first_row = s
        .lines()
        .skip_while(|l| !l.contains("Command (exactly what runs)"))
        .nth(1)
        .unwrap_or_default();
    assert!(first_row.contains("mkdir -p"), "{s}");
    // Wider than the pane beside the panel was, and over the panel: its
    // top right corner near the screen's right edge.
    let top = s
        .lines()
        .find(|l| l.contains("Host escalation request"))
        .unwrap_or_default();
    let corner = top.chars().position(|c| c == '┓');
    assert!(corner.is_some_and(|c| c >= 74), "{s}");
    // Whole, over any panel: its last row and its keys are on screen.
    assert!(
        s.contains('┛') && s.contains("[d] deny"),
        "the panel is drawn over the modal:\n{s}"
    );
    t.send(&["a"]);
    t.wait_for(20, "approving refused, and why", |s| {
        s.contains("read the whole request first")
    });
    assert!(!dir.exists());
    for _ in 0..30 {
        t.send(&["PageDown"]);
    }
    common::approve_modal(&t, "narrow-one");
    t.wait_for(30, "the approved result", |s| s.contains("N-EXIT=0"));
    assert!(dir.join("p-29").is_dir());
    t.quit_ending_sessions();
    t.wait_exit(30, "lazaret ui");
    d.wait_until_gone();
}
