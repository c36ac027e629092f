//! Issue 27 item 7: `lazaret shell` on a terminal, end to end in tmux. The
//! session stays on the terminal's normal screen after `exit` (as after
//! `podman exec -it` or ssh), and Ctrl-C while the domain starts cancels
//! the start: exit code 130 at once, a word of what happened, and nothing
//! of that start left once its coordinator has finished.

mod common;

use std::time::Instant;

use common::sandbox::Domain;
use common::{STANDARD_PATH, Tmux, text};

/// After the program in the pane: its exit code, then the pane stays.
const AFTER: &str = "echo EXIT=$?; sleep 600";

#[test]
fn shell_output_stays_on_the_normal_screen() {
    let d = Domain::new("rc");
    let t = d.tmux(100, 30, "shell rc", Some(AFTER));
    t.wait_for(120, "the shell's prompt", |s| s.contains("root@"));
    // A marker the shell prints (computed, so the command line itself
    // does not show it), and a full-screen program that restores the
    // screen under it, as vim does.
    t.line("echo I27-SHELL-$((6*7))-MARK");
    t.wait_for(20, "the marker", |s| s.contains("I27-SHELL-42-MARK"));
    t.line(
        "printf '\\033[?1049h\\033[2J\\033[HI27-APP-%s' $((3*3)); sleep 1; printf '\\033[?1049l'",
    );
    t.wait_for(20, "the full-screen program", |s| s.contains("I27-APP-9"));
    t.wait_for(20, "the screen under it again", |s| {
        s.contains("I27-SHELL-42-MARK") && !s.contains("I27-APP-9")
    });
    t.line("exit");
    let s = t.wait_for(60, "the exit code", |s| s.contains("EXIT=0"));
    eprintln!("after exit:\n{s}");
    assert!(
        s.contains("I27-SHELL-42-MARK"),
        "the session's output is gone from the screen after exit:\n{s}"
    );
    assert!(!s.contains("I27-APP-9"), "{s}");
    // The start's steps stay above the session, and what follows comes
    // below it.
    let row = |marker: &str| s.lines().position(|l| l.contains(marker));
    assert!(row("ready") < row("I27-SHELL-42-MARK"), "{s}");
    assert!(row("I27-SHELL-42-MARK") < row("EXIT=0"), "{s}");
    assert_eq!(
        t.format("#{alternate_on}"),
        "0",
        "left in the alternate screen"
    );
    d.wait_until_gone();
}

/// `domains list` of the test's Storage Root: the line of `hash`, if any.
fn domains_line(d: &Domain) -> Option<String> {
    let out = d
        .cmd_raw(STANDARD_PATH, &["domains", "list"])
        .output()
        .unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    o.lines()
        .find(|l| l.starts_with(&d.hash))
        .map(str::to_string)
}

/// Ctrl-C once the start is under way: 130 within seconds, then the domain
/// goes entirely (no container, no coordinator, not broken).
fn ctrl_c_cancels_the_start(command: &str, what: &str) {
    let d = Domain::new("gv");
    // The shell that runs Lazaret waits for it on Ctrl-C (a handler, not
    // an ignored signal: Lazaret gets the default disposition).
    let t = Tmux::start(
        &d.ws(),
        100,
        30,
        &[("LAZARET_USER_CONFIG", ""), ("LAZARET_TEST_FWD", "x")],
        &format!(
            "sh -c {}",
            common::shell_quote(&format!(
                "trap 'echo TRAPPED' INT; {} --config {} {command}; echo EXIT=$?; sleep 600",
                common::lazaret_bin().display(),
                d.s.path().join("config.toml").display()
            ))
        ),
    );
    t.wait_for(120, "the first step of the start", |s| {
        s.contains("] starting")
    });
    t.send(&["C-c"]);
    let sent = Instant::now();
    let s = t.wait_for(10, "the exit code", |s| s.contains("EXIT="));
    eprintln!("{command}: ended {:?} after Ctrl-C", sent.elapsed());
    assert!(s.contains("EXIT=130"), "{s}");
    assert!(
        s.contains(&format!(
            "interrupted (Ctrl-C) while domain {} was starting; {what} did not run",
            d.hash
        )),
        "{s}"
    );
    assert!(
        !s.contains("root@") && !s.contains("NEVER-RAN"),
        "the session's command ran:\n{s}"
    );
    // Everything of the start goes once its coordinator is done with it.
    d.wait_until_gone();
    assert_eq!(d.status(), None, "status still lists the domain");
    let line = domains_line(&d);
    assert!(
        line.as_ref().is_none_or(|l| l.contains("stopped")),
        "domains list: {line:?}"
    );
    assert_eq!(d.containers(), Vec::<String>::new());
    // And a shell that starts afterwards runs as usual.
    let out = d
        .cmd_raw(STANDARD_PATH, &["exec", "gv", "--", "echo", "AFTER-OK"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(text(&out).0.contains("AFTER-OK"), "{}", text(&out).1);
    d.wait_until_gone();
}

#[test]
fn ctrl_c_during_the_start_of_a_shell_cancels_it() {
    ctrl_c_cancels_the_start("shell gv", "the shell");
}

#[test]
fn ctrl_c_during_the_start_of_an_exec_cancels_it() {
    ctrl_c_cancels_the_start("exec gv -- echo NEVER-RAN", "the command");
}
