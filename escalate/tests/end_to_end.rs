//! The real `lazaret-escalate` binary against a real mTLS server on a real
//! UNIX socket: round trips, denial, host errors, timeouts and the exit
//! codes the help text promises.

mod common;

use std::time::{Duration, Instant};

use common::{Answer, Harness, Options, Outcome, run, text};
use lazaret_escalate::classify::{Decision, HumanReason};
use lazaret_escalate::exit;

#[test]
fn auto_approved_command_runs_and_returns_output_and_exit_code() {
    let h = Harness::start();
    let mut c = h.client();
    c.args(["--justify", "greet", "--", "echo", "hello", "world"]);
    let out = run(c);
    assert_eq!(text(&out.stdout), "hello world\n");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    match h.outcome() {
        Outcome::Ran {
            decision: Decision::AutoApprove { argv, program_path },
            exit: 0,
        } => {
            assert_eq!(argv, ["echo", "hello", "world"]);
            assert!(program_path.is_absolute());
        }
        o => panic!("{o:?}"),
    }

    let mut c = h.client();
    c.arg("false");
    let out = run(c);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));
    assert!(matches!(h.outcome(), Outcome::Ran { exit: 1, .. }));
}

#[test]
fn human_approved_shell_command_returns_both_streams_and_its_code() {
    let h = Harness::start();
    let mut c = h.client();
    c.arg("printf out; printf err >&2; exit 3");
    let out = run(c);
    assert_eq!(text(&out.stdout), "out");
    assert_eq!(text(&out.stderr), "err");
    assert_eq!(out.status.code(), Some(3));
    assert!(matches!(
        h.outcome(),
        Outcome::Ran {
            decision: Decision::NeedsHuman {
                via_shell: true,
                ..
            },
            exit: 3
        }
    ));
}

#[test]
fn argv_form_keeps_each_argument_whole() {
    let h = Harness::start();
    let mut c = h.client();
    // Options end at `--`; words with spaces and quotes survive the trip.
    c.args(["--", "printf", "[%s]", "a b", "it's", "--justify"]);
    let out = run(c);
    assert_eq!(text(&out.stdout), "[a b][it's][--justify]");
    assert_eq!(out.status.code(), Some(0));
    // `it's` needs quoting with a backslash, so a human saw it.
    assert!(matches!(
        h.outcome(),
        Outcome::Ran {
            decision: Decision::NeedsHuman { .. },
            ..
        }
    ));
}

#[test]
fn unquoted_words_without_double_dash_are_one_command() {
    let h = Harness::start();
    let mut c = h.client();
    c.args(["echo", "-n", "x"]);
    let out = run(c);
    assert_eq!(text(&out.stdout), "x");
    assert!(matches!(
        h.outcome(),
        Outcome::Ran {
            decision: Decision::AutoApprove { .. },
            ..
        }
    ));
}

#[test]
fn denial_prints_the_reason_and_exits_77() {
    let h = Harness::with(Options::human(|_, _| {
        Answer::Deny("not on a Friday".into())
    }));
    let mut c = h.client();
    c.args(["--justify", "need it", "touch canary; id"]);
    let out = run(c);
    assert_eq!(out.status.code(), Some(i32::from(exit::DENIED)));
    let err = text(&out.stderr);
    assert!(
        err.contains("denied") && err.contains("not on a Friday"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    assert!(matches!(h.outcome(), Outcome::Denied(_)));
    assert!(h.workspace_entries().is_empty());
}

#[test]
fn human_sees_the_justification_and_an_edit_is_reported() {
    let h = Harness::with(Options::human(|req, _| {
        assert_eq!(req.justification, "list things");
        Answer::Edit("echo edited".into())
    }));
    let mut c = h.client();
    c.args(["--justify", "list things", "echo original | cat"]);
    let out = run(c);
    assert_eq!(text(&out.stdout), "edited\n");
    assert!(
        text(&out.stderr).contains("what ran: echo edited"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(matches!(h.outcome(), Outcome::Ran { .. }));
}

#[test]
fn truncated_output_is_flagged() {
    let h = Harness::with(Options {
        max_response: 2000,
        ..Options::default()
    });
    let mut c = h.client();
    c.args(["--", "printf", "%05000d", "0"]);
    let out = run(c);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.len() < 2000 && !out.stdout.is_empty());
    assert!(text(&out.stderr).contains("cut the output short"));
    h.outcome();
}

#[test]
fn host_error_exits_70_and_says_nothing_ran() {
    let h = Harness::start();
    let mut c = h.client();
    // A cwd outside the workspace cannot be mapped to the host.
    c.current_dir(h.dir.path()).arg("touch canary");
    let out = run(c);
    assert_eq!(out.status.code(), Some(i32::from(exit::HOST_ERROR)));
    assert!(text(&out.stderr).contains("nothing ran"));
    assert!(matches!(h.outcome(), Outcome::Cwd(_)));
    assert!(!h.dir.path().join("canary").exists());
}

#[test]
fn silent_host_hits_the_timeout_with_124() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("silent.sock");
    // Accepts and never speaks: the client must give up on its own.
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let h = Harness::start();
    let mut c = h.client();
    c.env(lazaret_escalate::env::SOCKET, &sock)
        .args(["--timeout", "1", "true"]);
    let started = Instant::now();
    let out = run(c);
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(i32::from(exit::TIMEOUT)));
    assert!(took >= Duration::from_secs(1), "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(text(&out.stderr).contains("time limit"));
    drop(listener);
}

#[test]
fn missing_socket_exits_69() {
    let h = Harness::start();
    let mut c = h.client();
    c.env(
        lazaret_escalate::env::SOCKET,
        h.dir.path().join("nope.sock"),
    )
    .arg("true");
    let out = run(c);
    assert_eq!(out.status.code(), Some(i32::from(exit::UNAVAILABLE)));
    assert!(text(&out.stderr).contains("cannot reach"));
}

#[test]
fn missing_or_mismatched_credential_exits_78_before_connecting() {
    let h = Harness::start();
    for (var, value) in [
        (lazaret_escalate::env::SESSION_CREDENTIAL, None),
        (lazaret_escalate::env::SESSION_ID, None),
        (lazaret_escalate::env::PROFILE, None),
        (
            lazaret_escalate::env::SESSION_ID,
            Some(h.other_session_id.clone()),
        ),
        (
            lazaret_escalate::env::SESSION_CREDENTIAL,
            Some("lzc1.garbage".to_string()),
        ),
    ] {
        let mut c = h.client();
        match &value {
            Some(v) => c.env(var, v),
            None => c.env_remove(var),
        };
        c.arg("touch canary");
        let out = run(c);
        assert_eq!(
            out.status.code(),
            Some(i32::from(exit::NO_CREDENTIAL)),
            "{var}={value:?}: {}",
            text(&out.stderr)
        );
    }
    let mut c = h.client();
    c.env(
        lazaret_escalate::env::CERTS_DIR,
        h.dir.path().join("nocerts"),
    )
    .arg("true");
    assert_eq!(run(c).status.code(), Some(i32::from(exit::NO_CREDENTIAL)));
    h.no_more_outcomes();
    assert!(h.workspace_entries().is_empty());
}

#[test]
fn usage_errors_exit_64_and_help_explains_the_sandbox() {
    let h = Harness::start();
    for args in [
        &[][..],
        &["--justify"][..],
        &["--bogus", "ls"][..],
        &["--timeout", "soon", "ls"][..],
        &["--"][..],
    ] {
        let mut c = h.client();
        c.args(args);
        let out = run(c);
        assert_eq!(out.status.code(), Some(i32::from(exit::USAGE)), "{args:?}");
        assert!(text(&out.stderr).contains("usage:"));
    }
    let mut c = h.client();
    c.arg("--help");
    let out = run(c);
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    for needle in [
        "sandbox",
        "--justify",
        "--timeout",
        "Denied",
        "77",
        "69",
        "124",
        "/workspace",
    ] {
        assert!(help.contains(needle), "help lacks {needle}");
    }
    h.no_more_outcomes();
}

#[test]
fn whitelisted_prefix_with_path_program_goes_to_a_human() {
    let h = Harness::with(Options::deny_all());
    let mut c = h.client();
    c.args(["--", "/usr/bin/touch", "canary"]);
    let out = run(c);
    assert_eq!(out.status.code(), Some(i32::from(exit::DENIED)));
    match h.outcome() {
        Outcome::Denied(Decision::NeedsHuman { reason, .. }) => {
            assert_eq!(reason, HumanReason::ProgramHasPath);
        }
        o => panic!("{o:?}"),
    }
    assert!(h.workspace_entries().is_empty());
}
