//! Issue 28 (decisions.md D14): sessions that live in the domain, end to
//! end in tmux under runc and under runsc. A long job runs on while its
//! client is killed with SIGKILL; its output is all there when a client
//! attaches again; an escalation raised while nobody was attached is shown
//! on attach and runs exactly once; two clients on one session see the
//! same screen; detaching leaves the session running; its end ends the
//! domain. One approval inbox: a request of another domain is answered in
//! the workbench.

mod common;

use common::sandbox::Domain;
use common::{
    AFTER_INPUT_CHECK, ATTACK, CLEAN_MODES, ESCALATE, STANDARD_PATH, Tmux, printf, shell_quote,
    terminal_state, text,
};

/// After the program in the pane: its exit code, then the pane stays.
const AFTER: &str = "echo EXIT=$?; sleep 600";

/// The hosted sessions `lazaret sessions --json` lists for this domain.
fn sessions(d: &Domain) -> Vec<serde_json::Value> {
    let out = d
        .cmd_raw(STANDARD_PATH, &["sessions", "--json"])
        .output()
        .unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    let all: Vec<serde_json::Value> = serde_json::from_str(&o).unwrap();
    all.into_iter()
        .filter(|s| s["domain"] == d.hash.as_str())
        .collect()
}

/// The `lazaret` process a tmux pane runs (the pane's shell's child).
fn client_pid(t: &Tmux) -> i32 {
    let shell = t.pane_pid();
    let children =
        std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap_or_default();
    let pid = children
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
        .find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.contains("attach"))
        });
    pid.unwrap_or_else(|| panic!("no lazaret attach under the pane's shell {shell}"))
}

fn outlives_its_client(profile: &'static str) {
    let d = Domain::new(profile);
    let count = d.ws().join("h28-count");
    let attach = format!("attach -p {profile}");
    let t = d.tmux(100, 30, &attach, Some(AFTER));
    t.wait_for(120, "the shell's prompt", |s| s.contains("root@"));
    // A job that runs past the client's end, then asks the host for
    // something (a command that counts its runs) while nobody is attached.
    t.line(&format!(
        "clear; for i in $(seq 1 40); do echo H28-LINE-$((i*1)); sleep 0.1; done; \
         echo H28-DONE-$((40+2)); {ESCALATE} --justify h28-detached 'echo once >> {}'; \
         echo ESC=$?",
        count.display()
    ));
    t.wait_for(20, "the job's first lines", |s| s.contains("H28-LINE-3"));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(client_pid(&t)),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    t.wait_for(20, "the client's end", |s| s.contains("EXIT=137"));
    drop(t);

    // Listed, running, with nobody attached; the prompt waits for a human.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let listed = loop {
        let list = sessions(&d);
        if list.len() == 1 && list[0]["pending"] == 1 {
            break list;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the session's request never waited: {list:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let n = listed[0]["id"].as_u64().unwrap();
    assert_eq!(listed[0]["state"], "detached", "{listed:?}");
    assert!(listed[0]["exited"].is_null(), "{listed:?}");
    assert!(!count.exists(), "the request ran with nobody to approve it");
    let status = d.status().expect("the domain stays up for its session");
    assert_eq!(status["hosted"][0]["viewers"], 0, "{status}");

    // Attach again: the screen as the job left it, then the request.
    let t = d.tmux(100, 30, &format!("{attach} {n}"), Some(AFTER));
    t.wait_for(30, "the request on attach", common::request_waits);
    let s = common::open_request_by_bang(&t, "h28-detached");
    eprintln!("on attach:\n{s}");
    common::approve_modal(&t, "h28-detached");
    let s = t.wait_for(30, "the request's end", |s| s.contains("ESC=0"));
    assert!(
        s.contains("H28-LINE-40") && s.contains("H28-DONE-42"),
        "output made while detached is missing:\n{s}"
    );
    assert_eq!(
        std::fs::read_to_string(&count).unwrap(),
        "once\n",
        "the approved request did not run exactly once"
    );

    // A second client on the same session sees what the first types.
    let t2 = d.tmux(100, 30, &format!("{attach} {n}"), Some(AFTER));
    t2.wait_for(30, "the second client's screen", |s| s.contains("ESC=0"));
    assert_eq!(sessions(&d)[0]["viewers"], 2);
    t.line("echo TWO-$((2*21))");
    t2.wait_for(20, "the first client's typing", |s| s.contains("TWO-42"));

    // Detaching leaves it running; its end takes the domain down.
    t2.send(&["C-a", "d"]);
    let s = t2.wait_for(20, "the detach", |s| s.contains("EXIT=0"));
    assert!(s.contains("keeps running"), "{s}");
    assert_eq!(sessions(&d).len(), 1);
    t.line("exit 7");
    t.wait_for(30, "the session's exit code", |s| s.contains("EXIT=7"));
    d.wait_until_gone();
    let ends: Vec<_> = d
        .audit_json()
        .into_iter()
        .filter(|r| r["kind"] == "session-end" && r["data"]["hosted"] == n)
        .collect();
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(ends[0]["data"]["code"], 7, "{ends:?}");
    // The audit log names the client that answered the request.
    let records = d.audit_json();
    let answered: Vec<_> = records
        .iter()
        .filter(|r| r["kind"] == "answered-by" && r["data"]["hosted"] == true)
        .collect();
    assert_eq!(answered.len(), 1, "{answered:?}");
    let by = answered[0]["data"]["by"].as_str().unwrap_or_default();
    assert!(by.contains(&format!("attach -p {profile} {n}")), "{by}");
}

#[test]
fn a_hosted_session_outlives_its_client_under_runc() {
    outlives_its_client("rc");
}

#[test]
fn a_hosted_session_outlives_its_client_under_runsc() {
    outlives_its_client("gv");
}

/// One approval inbox (issue 28 item 2): a plain `lazaret exec` of another
/// domain asks for a host command; the workbench of this domain lists it,
/// `prefix !` opens it there, and its approval runs it exactly once. The
/// plain prompt is told it was answered in another client, and the other
/// domain's audit log names the workbench as the client that answered.
fn one_inbox(profile: &'static str, other: &'static str) {
    let d = Domain::new(profile);
    let _ = d.other(other);
    let count = d.ws().join("h28-inbox-count");
    let ui = d.tmux(150, 40, &format!("ui -p {profile}"), Some(AFTER));
    ui.wait_for(120, "the workbench's shell", |s| s.contains("root@"));
    let script = format!(
        "{ESCALATE} --justify h28-inbox 'echo once >> {}'; echo ESC=$?",
        count.display()
    );
    let exec = d.tmux(
        120,
        40,
        &format!("exec {other} -- sh -c {}", shell_quote(&script)),
        Some(AFTER),
    );
    exec.wait_for(120, "the plain prompt", |s| {
        s.contains("the agent asks to run a command on the host")
    });
    ui.wait_for(30, "the inbox's note", |s| {
        s.contains("C-a ! to answer: exec")
    });
    assert!(!count.exists(), "it ran before anyone answered");
    let s = common::open_request_by_bang(&ui, "h28-inbox");
    assert!(
        common::modal_says(&s, "not a tab here"),
        "who asked is named:\n{s}"
    );
    common::approve_modal(&ui, "h28-inbox");
    let s = exec.wait_for(30, "the request's end", |s| s.contains("ESC=0"));
    assert!(
        s.contains("answered in another of your clients"),
        "the plain prompt is told:\n{s}"
    );
    exec.wait_for(30, "the exec's end", |s| s.contains("EXIT=0"));
    assert_eq!(
        std::fs::read_to_string(&count).unwrap(),
        "once\n",
        "the approved request did not run exactly once"
    );
    // The workbench's queue shows what became of it.
    ui.send(&["C-a", "e"]);
    ui.wait_for(20, "the outcome in the queue", |s| s.contains("exit 0"));
    let other_audit = d.audit_json_of(other);
    let answered: Vec<_> = other_audit
        .iter()
        .filter(|r| r["kind"] == "answered-by")
        .collect();
    assert_eq!(answered.len(), 1, "{answered:?}");
    let by = answered[0]["data"]["by"].as_str().unwrap_or_default();
    assert!(by.contains(&format!("ui -p {profile}")), "{by}");
    ui.quit_ending_sessions();
}

#[test]
fn one_approval_inbox_across_domains_under_runc() {
    one_inbox("rc", "rcd");
}

#[test]
fn one_approval_inbox_across_domains_under_runsc() {
    one_inbox("gv", "gvd");
}

/// The agent's crowd at the Session Host's socket: a connection every 5 ms,
/// each held (the last 200), every third sending a greeting with a wrong
/// token; it counts its connections in /tmp/crowd, for two minutes.
const CROWD: &str = r#"perl -MIO::Socket::UNIX -e '
    my (@held, $n); my $end = time + 120;
    while (time < $end) {
        my $s = IO::Socket::UNIX->new(Peer => "/run/lazaret/sessions.sock");
        if ($s) {
            $n++;
            print $s pack("NCN", 13, 1, 0) . "wrongtok" if $n % 3 == 0;
            push @held, $s; shift @held if @held > 200;
            if ($n % 20 == 0) { open(my $f, ">", "/tmp/crowd"); print $f $n; close $f }
        }
        select(undef, undef, undef, 0.005);
    }' </dev/null >/dev/null 2>&1 &"#;

/// Played as the agent against hosted sessions (issue 28 item 5): it
/// crowds the Session Host's socket before any host runs, and keeps at it,
/// and a session still starts; it writes escape sequences into its session
/// (clipboard, title, hyperlink, mouse and paste modes, device queries) and
/// switches to the alternate screen, then the client detaches and another
/// attaches: the outer terminal's modes, title and clipboard stay as they
/// were, and no reply reached the shell under it as typed input.
fn the_agent_against_hosting(profile: &'static str) {
    let d = Domain::new(profile);
    let mut holder = d.hold_up();
    let (code, _, e) = d.sh(CROWD);
    assert_eq!(code, 0, "{e}");
    let crowd = || {
        d.sh("cat /tmp/crowd 2>/dev/null")
            .1
            .trim()
            .parse::<u64>()
            .unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while crowd() < 40 {
        assert!(
            std::time::Instant::now() < deadline,
            "the crowd never reached the socket"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let (t, title) = watched_client(&d, &format!("attach --new -p {profile}"));
    t.wait_for(120, "the session's prompt despite the crowd", |s| {
        s.contains("root@")
    });
    let during = crowd();
    t.line(&format!(
        "clear; {}; printf '\\033[?1049hALT-SCREEN-%s' $((6*7))",
        printf(ATTACK)
    ));
    t.wait_for(20, "the attack's output", |s| s.contains("ALT-SCREEN-42"));
    untouched(&t, &title);
    detach_cleanly(&t, title);
    drop(t);

    let listed = sessions(&d);
    assert_eq!(listed.len(), 1, "{listed:?}");
    let n = listed[0]["id"].as_u64().unwrap();
    let (t, title) = watched_client(&d, &format!("attach -p {profile} {n}"));
    t.wait_for(30, "the screen the agent left", |s| {
        s.contains("ALT-SCREEN-42")
    });
    untouched(&t, &title);
    detach_cleanly(&t, title);
    assert!(crowd() > during, "the crowd kept at it meanwhile");
    let _ = holder.kill();
    let _ = holder.wait();
}

/// `lazaret ARGS` in a terminal that lets programs set its clipboard, then
/// checks what reached its input; and the terminal's own title.
fn watched_client(d: &Domain, args: &str) -> (Tmux, String) {
    let t = d.tmux(100, 30, args, Some(AFTER_INPUT_CHECK));
    t.tmux(&["set", "-g", "set-clipboard", "on"]);
    let title = t.format("#{pane_title}");
    (t, title)
}

/// While a client runs: the outer terminal's title is its own and nothing
/// was put on its clipboard.
fn untouched(t: &Tmux, title: &str) {
    assert_eq!(t.format("#{pane_title}"), title);
    assert_eq!(t.tmux(&["list-buffers"]), "");
}

/// Detaches; then nothing was typed into the shell under the client, and
/// the terminal's modes, title and clipboard are as they were.
fn detach_cleanly(t: &Tmux, title: String) {
    t.send(&["C-a", "d"]);
    let s = t.wait_for(30, "the check of the input", |s| s.contains("INPUT-END"));
    assert!(
        !s.contains("INPUT:"),
        "replies reached the host shell:\n{s}"
    );
    assert_eq!(
        terminal_state(t),
        (CLEAN_MODES.to_string(), title, String::new())
    );
}

#[test]
fn the_agent_cannot_crowd_out_or_steer_hosting_under_runc() {
    the_agent_against_hosting("rc");
}

#[test]
fn the_agent_cannot_crowd_out_or_steer_hosting_under_runsc() {
    the_agent_against_hosting("gv");
}

/// The farewell's hint, joined across the rows it wrapped over: the
/// command between the backticks after `what`.
fn hinted(t: &Tmux, what: &str) -> String {
    let joined = t
        .tmux(&["capture-pane", "-p", "-J", "-t", "0"])
        .replace('\n', "");
    let at = joined
        .find(what)
        .unwrap_or_else(|| panic!("no `{what}` in:\n{joined}"));
    let start = joined[..at].rfind('`').expect("an opening backtick") + 1;
    joined[start..at].trim_end_matches('`').trim().to_string()
}

/// Issue 43 (1, 2), under gVisor: a farewell is true and its hint works as
/// printed. Detaching says the session keeps running with a command that,
/// pasted in another folder, attaches to that very session; quitting the
/// workbench with "end" says the session ended, and nothing of it runs.
#[test]
fn farewells_are_true_and_their_hints_work_from_any_folder() {
    let d = Domain::new("gv");
    let t = d.tmux(120, 30, "attach -p gv", Some(AFTER));
    t.wait_for(120, "the shell's prompt", |s| s.contains("root@"));
    t.line("clear; echo MARK-$((6*7))");
    t.wait_for(20, "the mark", |s| s.contains("MARK-42"));
    t.send(&["C-a", "d"]);
    t.wait_for(20, "the detach", |s| s.contains("EXIT=0"));
    let hint = hinted(&t, "` returns to it");
    assert!(hint.contains("attach -p gv -w "), "{hint}");
    drop(t);
    // Pasted from another folder (the test's binary for `lazaret`).
    let bin = common::lazaret_bin().display().to_string();
    let pasted = hint.replacen("lazaret", &bin, 1);
    let t = Tmux::start(
        std::path::Path::new("/"),
        120,
        30,
        &[("LAZARET_USER_CONFIG", ""), ("LAZARET_TEST_FWD", "x")],
        &format!("sh -c {}", shell_quote(&format!("{pasted}; {AFTER}"))),
    );
    t.wait_for(30, "the same session, attached", |s| s.contains("MARK-42"));
    assert_eq!(sessions(&d).len(), 1);
    t.line("exit");
    let s = t.wait_for(30, "the session's end", |s| s.contains("EXIT="));
    // Joining a domain that was up replayed no start on the terminal
    // (issue 43 item 4: every step at `[ 0.0s]`).
    assert!(!s.contains("starting the Agent Sandbox"), "{s}");
    drop(t);
    d.wait_until_gone();
    // The workbench, quit with "end": the farewell says the session
    // ended, and nothing of it runs.
    let t = d.tmux(120, 30, "ui --profile gv", Some(AFTER));
    t.wait_for(120, "the tab's shell", |s| s.contains("root@"));
    t.quit_ending_sessions();
    let s = t.wait_for(30, "the farewell", |s| s.contains("EXIT="));
    let joined = s.replace('\n', "");
    assert!(
        joined.contains("(gv) of domain gv") && joined.contains("ended"),
        "{s}"
    );
    assert!(!joined.contains("keeps running"), "{s}");
    d.wait_until_gone();
}
