//! The user's own terminal against a hostile sandbox (decisions.md D10), end
//! to end in tmux, under gVisor and runc: `lazaret exec`'s output filter,
//! the plain approval prompt against overwrite and answerback attacks, and
//! signals restoring the terminal.

mod common;

use std::io::Write;
use std::process::Stdio;

use common::sandbox::Domain;
use common::{
    AFTER_INPUT_CHECK as AFTER, ATTACK, CLEAN_MODES, ESCALATE as ESC, STANDARD_PATH, Tmux, printf,
    shell_quote, terminal_state, text,
};

fn exec_guards_the_terminal(profile: &'static str) {
    let d = Domain::new(profile);
    let script = format!("{}; sleep 3", printf(ATTACK));
    let t = d.tmux(
        100,
        30,
        &format!("exec {profile} -- sh -c {}", shell_quote(&script)),
        Some(AFTER),
    );
    t.tmux(&["set", "-g", "set-clipboard", "on"]);
    let title = t.format("#{pane_title}");
    let s = t.wait_for(120, "the exec's output", |s| s.contains("after-attack"));
    assert!(s.contains("red-text") && s.contains("link"), "{s}");
    // While it still runs: nothing reached the terminal's state.
    assert_eq!(
        terminal_state(&t),
        (CLEAN_MODES.to_string(), title.clone(), String::new())
    );
    let s = t.wait_for(60, "the check of the input", |s| s.contains("INPUT-END"));
    assert!(s.contains("EXIT=0"), "{s}");
    // What follows Lazaret comes below its output, not over it (resetting
    // origin mode alone would have moved the cursor to the top).
    let row = |marker: &str| s.lines().position(|l| l.contains(marker));
    assert!(row("after-attack") < row("EXIT=0"), "{s}");
    assert!(
        !s.contains("INPUT:"),
        "replies reached the host shell:\n{s}"
    );
    assert!(!s.contains("pwned"), "{s}");
    assert_eq!(
        terminal_state(&t),
        (CLEAN_MODES.to_string(), title, String::new())
    );
    drop(t);

    // To a pipe, the same output keeps every byte.
    let out = d
        .cmd_raw(
            STANDARD_PATH,
            &["exec", profile, "--", "sh", "-c", &printf(ATTACK)],
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    assert_eq!(out.stdout, ATTACK);
    d.wait_until_gone();
}

#[test]
fn exec_output_cannot_reach_the_terminal_gvisor() {
    exec_guards_the_terminal("gv");
}

#[test]
fn exec_output_cannot_reach_the_terminal_runc() {
    exec_guards_the_terminal("rc");
}

/// `lazaret exec {profile} -- sh -c SCRIPT` in tmux (`cols` wide), then
/// [`AFTER`]; waits for the plain prompt and gives the pane, the screen
/// and the approval code it shows.
fn exec_until_prompt(d: &Domain, cols: u16, script: &str) -> (Tmux, String, String) {
    let t = d.tmux(
        cols,
        40,
        &format!("exec {} -- sh -c {}", d.profile, shell_quote(script)),
        Some(AFTER),
    );
    let s = t.wait_for(120, "the prompt", |s| {
        s.contains("the agent asks to run a command on the host") && s.contains("code:")
    });
    let code = s
        .split("type the code")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .to_string();
    (t, s, code)
}

/// The plain prompt of `lazaret exec`: the agent keeps redrawing a fake
/// command line and makes the terminal answer queries while it asks.
fn plain_prompt_cannot_be_forged(profile: &'static str) {
    let d = Domain::new(profile);
    let canary = d.s.path().join("prompt-canary");
    let script = format!(
        "( {ESC} --justify make-a-dir -- mkdir {c}; echo ESC-EXIT=$? ) & \
         i=0; while [ $i -lt 40 ]; do i=$((i+1)); \
         printf '\\033[5;1H  command   ls /tmp   \\033]11;?\\007\\033[>0q\\005\\033[c'; \
         printf 'tick %s\\n' $i; sleep 0.1; done; wait",
        c = canary.display()
    );
    let (t, s, code) = exec_until_prompt(&d, 110, &script);
    // The real command, and nothing the agent drew since.
    let command = s
        .lines()
        .find(|l| l.starts_with("  command "))
        .unwrap_or("");
    assert!(
        command.contains(&format!("mkdir {}", canary.display())),
        "{s}"
    );
    assert!(!s.contains("ls /tmp"), "{s}");
    // The session's credential is in no argument list of its processes
    // (other tests' sessions on this host are not ours to judge).
    let commands: Vec<String> = descendants(t.pane_pid())
        .into_iter()
        .filter_map(|p| std::fs::read(format!("/proc/{p}/cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .collect();
    assert!(
        commands.iter().any(|c| c.contains("podman exec")),
        "{commands:?}"
    );
    let leaked: Vec<&String> = commands
        .iter()
        .filter(|c| c.contains("CREDENTIAL="))
        .collect();
    assert!(leaked.is_empty(), "{leaked:?}");
    assert_eq!(code.len(), 3, "{s}");

    // The terminal itself answers queries written to it now (tmux replies
    // to DA, OSC 10/11 and XTVERSION); replies and pastes holding the code,
    // and `a` and Enter, approve nothing. Each step waits for what the
    // prompt shows for it: a counted first letter (see
    // [`first_letter_counted`]), the count starting over, a burst ignored.
    let tty = t.format("#{pane_tty}");
    let mut pane = std::fs::OpenOptions::new().write(true).open(&tty).unwrap();
    pane.write_all(b"\x1b[c\x1b[>c\x1b]10;?\x07\x1b]11;?\x07\x1b[>0q\x05")
        .unwrap();
    first_letter_counted(&t, &code);
    t.send(&["a"]);
    t.wait_for(20, "`a` to start the count over", |s| {
        code_typed(s).as_deref() == Some("")
    });
    for paste in [
        format!("\x1b]11;rgb:0000/0000/0000\x07{code}"),
        code.clone(),
    ] {
        let before = bursts(&t.screen());
        t.send(&["-l", &paste]);
        t.wait_for(20, "the paste to be ignored", |s| bursts(s) > before);
    }
    first_letter_counted(&t, &code);
    t.send(&["Enter"]);
    // The prompt has read every byte sent so far, the last of them the
    // Enter that started the count over: it is still asking, the agent's
    // output still held.
    let s = t.wait_for(20, "Enter to start the count over", |s| {
        code_typed(s).as_deref() == Some("")
    });
    assert!(!s.contains("approved") && !s.contains("tick"), "{s}");
    assert!(!canary.exists(), "approved without the human's keys");

    // The human types the code, key by key: each once the prompt showed
    // the one before counted.
    for i in 0..code.len() {
        t.send(&["-l", &code[i..=i]]);
        let typed = &code[..=i];
        t.wait_for(20, &format!("`{typed}` counted"), |s| {
            code_typed(s).as_deref() == Some(typed) || (typed == code && s.contains("approved"))
        });
    }
    // Then what the agent wrote meanwhile shows, and the command ran.
    let s = t.wait_for(60, "the exec's end", |s| s.contains("INPUT-END"));
    assert!(canary.is_dir(), "the approved command did not run:\n{s}");
    assert!(s.contains("ESC-EXIT=0") && s.contains("tick 40"), "{s}");
    assert!(
        !s.contains("INPUT:"),
        "replies reached the host shell:\n{s}"
    );
    let records = d.audit_json();
    let decisions: Vec<_> = records
        .iter()
        .filter(|r| r["kind"] == "escalation-decision")
        .filter_map(|r| r["data"]["decision"].as_str())
        .collect();
    assert_eq!(decisions, vec!["approved"]);
    drop(t);
    d.wait_until_gone();
}

/// What the plain prompt's code line shows typed so far, while it asks.
fn code_typed(screen: &str) -> Option<String> {
    screen
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("  code:"))
        .map(|typed| typed.trim().to_string())
}

/// How many reads the plain prompt has ignored as bursts (several keys,
/// a paste or a terminal reply at once).
fn bursts(screen: &str) -> usize {
    screen
        .split("(ignored ")
        .nth(1)
        .and_then(|r| r.split(" reads").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Types `code`'s first letter into the plain prompt until the prompt
/// shows it counted, and gives that screen. The prompt reads the
/// terminal's input in order and counts a letter only when a read holds
/// it alone, so everything sent to the terminal before was read by then;
/// and it still asks (one that approved would count nothing more). A
/// letter read together with input still pending (here: the terminal's
/// replies, which alone show nothing) is part of a burst, which the
/// prompt says it ignored, and which took everything before it: the
/// letter is typed again.
fn first_letter_counted(t: &Tmux, code: &str) -> String {
    let first = &code[..1];
    for _ in 0..5 {
        let before = bursts(&t.screen());
        t.send(&["-l", first]);
        let s = t.wait_for(20, "the first letter counted, or ignored", |s| {
            code_typed(s).as_deref() == Some(first) || bursts(s) > before
        });
        if code_typed(&s).as_deref() == Some(first) {
            return s;
        }
    }
    panic!("the prompt never counted `{first}`:\n{}", t.screen());
}

#[test]
fn plain_prompt_cannot_be_forged_gvisor() {
    plain_prompt_cannot_be_forged("gv");
}

#[test]
fn plain_prompt_cannot_be_forged_runc() {
    plain_prompt_cannot_be_forged("rc");
}

/// The plain prompt of `lazaret exec` ends with its request: the requester
/// is killed while the prompt waits for keys, the prompt says the request
/// was withdrawn and stops asking, and the code typed afterwards runs
/// nothing (issue 14).
fn plain_prompt_is_withdrawn_with_its_requester(profile: &'static str) {
    let d = Domain::new(profile);
    let canary = d.s.path().join("withdrawn-canary");
    // The exec lasts until the test has typed (/tmp/typed), so the keys go
    // to the terminal while Lazaret still runs.
    let script = format!(
        "{ESC} --justify step-withdraw -- mkdir {c} & echo $! > /tmp/req.pid; \
         wait; echo REQ-ENDED; i=0; while [ ! -e /tmp/typed ] && [ $i -lt 600 ]; do \
         i=$((i+1)); sleep 0.1; done; echo EXEC-DONE",
        c = canary.display()
    );
    let (t, s, code) = exec_until_prompt(&d, 150, &script);
    let request = s
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("request"))
        .map(|r| r.trim().trim_start_matches('│').to_string())
        .unwrap();
    let (rc, _, err) = d.sh("kill -9 $(cat /tmp/req.pid)");
    assert_eq!(rc, 0, "{err}");
    let s = t.wait_for(20, "the withdrawal", |s| {
        s.contains(&format!("request {request} withdrawn:")) && s.contains("nothing runs")
    });
    assert!(s.contains("the requester went away"), "{s}");
    // The exec's output shows again only after the prompt ended, which
    // gave the terminal back its mode from before (echo on).
    t.wait_for(20, "the exec's output after the prompt", |s| {
        s.contains("REQ-ENDED")
    });
    // The human, late, types the code key by key: it answers nothing.
    // Each key is echoed by the terminal when it arrives (the line after
    // REQ-ENDED): it reached the terminal, and no prompt reads it in raw
    // mode any more.
    for i in 0..code.len() {
        t.send(&["-l", &code[i..=i]]);
        let typed = &code[..=i];
        t.wait_for(20, &format!("the echo of `{typed}`"), |s| {
            s.lines().any(|l| l.trim_end() == typed)
        });
    }
    let (rc, _, err) = d.sh("touch /tmp/typed");
    assert_eq!(rc, 0, "{err}");
    let s = t.wait_for(60, "the exec's end", |s| s.contains("INPUT-END"));
    assert!(s.contains("REQ-ENDED") && s.contains("EXEC-DONE"), "{s}");
    assert!(s.contains("EXIT=0"), "{s}");
    assert!(!s.contains("approved"), "{s}");
    assert!(!s.contains("INPUT:"), "keys reached the host shell:\n{s}");
    assert!(!canary.exists(), "a withdrawn request ran");
    let decisions: Vec<_> = d
        .audit_json()
        .iter()
        .filter(|r| r["kind"] == "escalation-decision")
        .filter_map(|r| r["data"]["decision"].as_str().map(String::from))
        .collect();
    assert_eq!(decisions, vec!["withdrawn"]);
    drop(t);
    d.wait_until_gone();
}

#[test]
fn plain_prompt_is_withdrawn_with_its_requester_gvisor() {
    plain_prompt_is_withdrawn_with_its_requester("gv");
}

#[test]
fn plain_prompt_is_withdrawn_with_its_requester_runc() {
    plain_prompt_is_withdrawn_with_its_requester("rc");
}

/// Issue 26: a long command of plain text whose end looks like a whole
/// prompt for something harmless. The plain prompt never lets the
/// terminal scroll: its first page shows the command's start and no code;
/// the code appears only after paging to the end, and then approves.
fn plain_prompt_shows_a_long_command_whole(profile: &'static str) {
    let d = Domain::new(profile);
    let canary = d.s.path().join("long-canary");
    // The escalation client joins its arguments with single spaces: the
    // padding is a thousand words, the forged end a prompt's words.
    let script = format!(
        "{ESC} --justify long -- mkdir -p {} HIDDEN-START $(yes pad | head -n 1000) \
         ── Lazaret: the agent asks to run a command on the host ── command ls \
         to approve and run, type the code zzz; echo ESC-EXIT=$?",
        canary.display()
    );
    let t = d.tmux(
        100,
        30,
        &format!("exec {} -- sh -c {}", d.profile, shell_quote(&script)),
        Some(AFTER),
    );
    let first = t.wait_for(120, "the prompt", |s| {
        s.contains("the agent asks to run a command on the host") && s.contains("code:")
    });
    // The start is there, with the title above it; no code yet.
    assert!(first.contains("HIDDEN-START"), "{first}");
    assert!(
        first
            .lines()
            .next()
            .unwrap_or("")
            .contains("── Lazaret: the agent asks"),
        "{first}"
    );
    assert!(!first.contains("type the code"), "{first}");
    // A letter typed now counts for nothing and says why (typed again
    // while the prompt still throws away what came before it was armed).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !t.screen().contains("read the whole request first") {
        assert!(std::time::Instant::now() < deadline, "{}", t.screen());
        t.send(&["-l", "z"]);
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // Paging reaches the end, where Lazaret's own row shows the real code.
    let mut s = first;
    for _ in 0..60 {
        if s.contains("to approve & run, type the code") {
            break;
        }
        let before = s.clone();
        t.send(&["PageDown"]);
        s = t.wait_for(20, "the next page", |now| now != before);
    }
    let own: Vec<&str> = s
        .lines()
        .filter(|l| l.starts_with("  to approve & run, type the code"))
        .collect();
    assert_eq!(own.len(), 1, "{s}");
    let code = own[0]
        .split("type the code")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .to_string();
    assert_ne!(
        code, "zzz",
        "the forged code was taken for the real one:\n{s}"
    );
    assert!(!canary.exists());
    for i in 0..code.len() {
        t.send(&["-l", &code[i..=i]]);
        let typed = &code[..=i];
        t.wait_for(20, &format!("`{typed}` counted"), |s| {
            code_typed(s).as_deref() == Some(typed) || (typed == code && s.contains("approved"))
        });
    }
    let s = t.wait_for(60, "the exec's end", |s| s.contains("INPUT-END"));
    assert!(s.contains("ESC-EXIT=0"), "{s}");
    assert!(canary.is_dir(), "the approved command did not run:\n{s}");
    drop(t);
    d.wait_until_gone();
}

#[test]
fn plain_prompt_shows_a_long_command_whole_gvisor() {
    plain_prompt_shows_a_long_command_whole("gv");
}

#[test]
fn plain_prompt_shows_a_long_command_whole_runc() {
    plain_prompt_shows_a_long_command_whole("rc");
}

/// `root` and every process below it (the prompt's own walk).
fn descendants(root: u32) -> Vec<u32> {
    lazaret::client::prompt::process_tree(root)
        .into_iter()
        .map(|p| p.as_raw() as u32)
        .collect()
}

/// The child of `parent` named `name`.
fn child_named(parent: u32, name: &str) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let comm = stat.split_once('(')?.1.rsplit_once(')')?.0;
        let ppid: u32 = stat.rsplit(") ").next()?.split(' ').nth(1)?.parse().ok()?;
        (ppid == parent && comm == name).then_some(pid)
    })
}

/// SIGTERM and SIGHUP to `lazaret ui`: it leaves through its own way out,
/// the terminal restored, its session left running (`down` ends it).
#[test]
fn signals_restore_the_terminal() {
    let d = Domain::new("gv");
    for (sig, code) in [
        (nix::sys::signal::Signal::SIGTERM, 143),
        (nix::sys::signal::Signal::SIGHUP, 129),
    ] {
        let t = d.tmux(100, 30, "ui --profile gv", Some(AFTER));
        t.wait_for(120, "the sandbox shell", |s| s.contains("root@"));
        assert!(t.format("#{alternate_on}") == "1");
        let pid = child_named(t.pane_pid(), "lazaret").expect("no lazaret process");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).unwrap();
        let s = t.wait_for(60, "the UI's exit", |s| s.contains("INPUT-END"));
        assert!(s.contains(&format!("EXIT={code}")), "{s}");
        assert!(!s.contains("INPUT:"), "{s}");
        assert_eq!(terminal_state(&t).0, CLEAN_MODES);
        // A closed terminal leaves the session running (decisions.md D14),
        // and says so.
        assert!(s.contains("keeps running"), "{s}");
        drop(t);
        let status = d.status().expect("the session's domain stays up");
        assert_eq!(status["hosted"][0]["viewers"], 0, "{status}");
        assert!(status["hosted"][0]["exited"].is_null(), "{status}");
        let out = d.cmd_raw(STANDARD_PATH, &["down", "gv"]).output().unwrap();
        assert!(out.status.success(), "{}", text(&out).1);
        d.wait_until_gone();
    }
    // SIGTERM to `lazaret exec`: the exec ends, Lazaret leaves with 143.
    let t = d.tmux(
        100,
        30,
        "exec gv -- sh -c 'echo exec-running; sleep 300'",
        Some(AFTER),
    );
    t.wait_for(120, "the exec", |s| s.contains("exec-running"));
    let pid = child_named(t.pane_pid(), "lazaret").expect("no lazaret process");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let s = t.wait_for(60, "the exec's exit", |s| s.contains("INPUT-END"));
    assert!(s.contains("EXIT=143"), "{s}");
    assert!(!s.contains("INPUT:"), "{s}");
    assert_eq!(terminal_state(&t).0, CLEAN_MODES);
    drop(t);
    d.wait_until_gone();
}

/// A command longer than the modal: before its end was on screen nothing
/// approves (the code is not even shown); after scrolling to the end the
/// code does.
#[test]
fn a_long_request_is_approved_only_after_its_end_was_shown() {
    let d = Domain::new("rc");
    // Wide enough for the status line to show a refusal's note beside the
    // domain (the modal is at most 100 columns: its command still runs
    // past its end).
    let t = d.tmux(200, 18, "shell rc", None);
    t.wait_for(120, "the sandbox shell", |s| s.contains("root@"));
    let dir = d.s.path().join("long-canary");
    t.line(&format!(
        "clear; D={}; {ESC} --justify long-one -- mkdir -p $D $(seq -f \"$D/part-%g\" 0 59); echo L-EXIT=$?",
        dir.display(),
    ));
    // Opened as a human does; its command starts on its first row.
    t.wait_for(20, "the waiting request", common::request_waits);
    t.send(&["C-a", "!"]);
    let s = t.wait_for(20, "the modal, armed", |s| {
        s.contains("Host escalation request") && s.contains("read to the end to approve")
    });
    assert!(s.contains("to the end before approving"), "{s}");
    assert!(
        s.contains("mkdir -p"),
        "the command's start is not on screen:\n{s}"
    );
    // Approving and editing are refused with a note that says why (no
    // decision is sent). Any other key takes the note away, so the second
    // refusal is seen on its own.
    const REFUSED: &str = "read the whole request first";
    t.send(&["a"]);
    t.wait_for(20, "approving refused", |s| s.contains(REFUSED));
    t.send(&["Tab"]);
    t.wait_for(20, "the note gone", |s| !s.contains(REFUSED));
    t.send(&["e"]);
    let s = t.wait_for(20, "E refused", |s| s.contains(REFUSED));
    assert!(s.contains("to the end before approving"), "{s}");
    assert!(!s.contains("Edit command"), "{s}");
    assert!(!dir.exists(), "approved before the end was shown");
    for _ in 0..20 {
        t.send(&["PageDown"]);
    }
    t.wait_for(5, "the end", |s| !s.contains("to the end before approving"));
    common::approve_modal(&t, "long-one");
    t.wait_for(30, "the approved result", |s| s.contains("L-EXIT=0"));
    assert!(dir.join("part-59").is_dir());
    t.line("exit");
    t.wait_exit(30, "lazaret shell");
    d.wait_until_gone();
}

/// A large request arriving while the exec floods the terminal is asked,
/// and the human's answer (with its reason) is what the agent gets. The
/// plain session reads its control frames beside the output through
/// `FrameReader`; whether a frame is cut mid-way here depends on timing
/// (this test passed with the old reader too), so the cut itself is shown
/// in process: `coordinator::protocol`'s
/// `a_frame_cut_by_another_branch_is_not_lost`.
#[test]
fn a_large_request_during_heavy_output_is_asked_and_answered() {
    let d = Domain::new("rc");
    let script = format!(
        "yes 'flood of ordinary output' | head -c 30000000 & \
         {ESC} --justify big-one -- mkdir $(head -c 120000 /dev/zero | tr '\\0' x) >/dev/null 2>/tmp/esc.err; \
         r=$?; wait; grep -o 'REASON-[a-z]*' /tmp/esc.err | head -1; echo ESC-RC=$r"
    );
    let t = d.tmux(
        120,
        40,
        &format!("exec {} -- sh -c {}", d.profile, shell_quote(&script)),
        Some(AFTER),
    );
    let s = t.wait_for(180, "the prompt", |s| {
        (s.contains("the agent asks to run a command on the host") && s.contains("code:"))
            || s.contains("ESC-RC=")
    });
    assert!(!s.contains("ESC-RC="), "no prompt: {s}");
    t.send(&["-l", "d"]);
    t.wait_for(20, "the reason row", |s| s.contains("reason (optional)"));
    // One key per read: the prompt ignores several at once.
    t.send(&["-l", "R"]);
    t.wait_for(20, "R typed", |s| s.contains("Esc to go back: R"));
    for c in "EASON-hm".chars() {
        t.send(&["-l", &c.to_string()]);
        std::thread::sleep(std::time::Duration::from_millis(150));
    }
    t.wait_for(20, "the reason typed", |s| s.contains("REASON-hm"));
    t.send(&["Enter"]);
    let s = t.wait_for(180, "the request's end", |s| s.contains("ESC-RC="));
    assert!(s.contains("ESC-RC=77"), "{s}");
    assert!(s.contains("REASON-hm"), "the human's reason: {s}");
    // The exec's end is the session's end, and the domain's: its audit
    // log is not asked here (the answer above is the human's, with the
    // reason typed).
    drop(t);
    d.wait_until_gone();
}

/// Issue 41 (1), decisions.md D10: keys typed while the plain prompt holds
/// its keys answer nothing. A stray `q` then `y` (abort, confirmed) typed
/// the moment the prompt appears is thrown away: the prompt stays, and the
/// code approves. A wrong letter says so; Ctrl-C denies, saying so.
fn plain_prompt_type_ahead_and_cancel(profile: &'static str) {
    let d = Domain::new(profile);
    let one = d.s.path().join("ahead-one");
    let two = d.s.path().join("ahead-two");
    let script = format!(
        "{ESC} --justify ahead-one -- mkdir {}; echo R1=$?; {ESC} --justify ahead-two -- mkdir {}; echo R2=$?; {ESC} --justify ahead-three -- mkdir {}; echo R3=$?",
        one.display(),
        two.display(),
        two.display()
    );
    let t = d.tmux(
        110,
        40,
        &format!("exec {} -- sh -c {}", d.profile, shell_quote(&script)),
        Some(AFTER),
    );
    // Typed into the hold: the screen still says the keys are held after
    // they were sent, so they certainly came in it (else try again: a
    // loaded machine may draw the prompt late).
    let held = "keys are held a moment";
    t.wait_for(120, "the prompt, holding", |s| s.contains(held));
    t.send(&["-l", "q"]);
    t.send(&["-l", "y"]);
    let s = t.screen();
    assert!(
        s.contains(held),
        "the keys came after the hold (a slow machine): cannot judge\n{s}"
    );
    let s = t.wait_for(20, "the armed prompt", |s| s.contains("code:"));
    assert!(
        !s.contains("abort: deny"),
        "a held key asked to abort:\n{s}"
    );
    assert!(!s.contains("aborting the session"), "{s}");
    let code = s
        .split("type the code")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .to_string();
    for c in code.chars() {
        t.send(&["-l", &c.to_string()]);
        std::thread::sleep(std::time::Duration::from_millis(150));
    }
    // The second prompt follows the first's answer (and pushes its
    // output into the scrollback).
    let s = t.wait_for(30, "the second prompt, armed", |s| {
        s.contains("ahead-two") && s.contains("code:")
    });
    assert!(one.is_dir(), "the approved command did not run");

    // The second: a letter not in the code says so; Ctrl-C denies.
    let code = s
        .split("type the code")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .to_string();
    let wrong = "bcfghjkmnprstuvwxyz"
        .chars()
        .find(|c| !code.contains(*c))
        .unwrap();
    t.send(&["-l", &wrong.to_string()]);
    t.wait_for(20, "the wrong letter, said", |s| {
        s.contains("is not in the code")
    });
    t.send(&["C-c"]);
    // The third prompt follows, the denial in the scrollback above it.
    t.wait_for(30, "the third prompt, armed", |s| {
        s.contains("ahead-three") && s.contains("code:")
    });
    let history = t.tmux(&["capture-pane", "-p", "-J", "-S", "-", "-t", "0"]);
    assert!(history.contains("R2=77"), "{history}");
    assert!(history.contains("denied (Esc / Ctrl-C)"), "{history}");
    assert!(!two.exists(), "a cancelled request ran");
    // The third: q asks, y aborts; the exec ends with 130, saying why
    // (not the 137 of a kill).
    t.send(&["-l", "q"]);
    t.wait_for(20, "the question", |s| {
        s.contains("abort: deny, and end this session?")
    });
    t.send(&["-l", "y"]);
    let s = t.wait_for(30, "the exec's end", |s| s.contains("EXIT="));
    assert!(s.contains("EXIT=130"), "{s}");
    assert!(s.contains("you aborted the session"), "{s}");
    assert!(!s.contains("R3="), "the aborted exec ran on:\n{s}");
    drop(t);
    d.wait_until_gone();
}

#[test]
fn plain_prompt_type_ahead_and_cancel_gvisor() {
    plain_prompt_type_ahead_and_cancel("gv");
}

#[test]
fn plain_prompt_type_ahead_and_cancel_runc() {
    plain_prompt_type_ahead_and_cancel("rc");
}
