//! Housekeeping with real processes: the coordinator's log is bounded and
//! rotates; `lazaret logs` shows it with control characters made visible.

mod common;

use common::sandbox::Domain;
use common::{STANDARD_PATH, lazaret_env, text, user_home};

/// A session under a coordinator whose log may hold `max` bytes.
fn session_with_log_bound(d: &Domain, max: &str) {
    let config = d.s.path().join("config.toml");
    let out = lazaret_env(
        &user_home(),
        &d.ws(),
        STANDARD_PATH,
        &[
            ("LAZARET_USER_CONFIG", ""),
            ("LAZARET_TEST_FWD", "x"),
            ("LAZARET_LOG_MAX_BYTES", max),
        ],
        &[
            "--config",
            config.to_str().unwrap(),
            "exec",
            d.profile,
            "--",
            "true",
        ],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
}

#[test]
fn coordinator_log_rotates_at_its_bound_and_logs_shows_it_visibly() {
    let d = Domain::new("rc");
    let log = d.domain_root().join("coordinator.log");
    let old = d.domain_root().join("coordinator.log.1");
    session_with_log_bound(&d, "400");
    d.wait_until_gone();
    session_with_log_bound(&d, "400");
    d.wait_until_gone();
    assert!(old.exists(), "the log never rotated");
    for f in [&log, &old] {
        let len = std::fs::metadata(f).unwrap().len();
        assert!(
            len <= 400,
            "{} holds {len} bytes, over its bound",
            f.display()
        );
    }
    assert!(!d.domain_root().join("coordinator.log.2").exists());

    // Text the agent chose (a branch name, a command) reaches the log
    // as written; `lazaret logs` shows its control characters visibly.
    let mut text_now = std::fs::read_to_string(&log).unwrap();
    text_now.push_str("agent said \u{1b}]0;owned\u{7} \u{1b}[2J\n");
    std::fs::write(&log, text_now).unwrap();
    let out = d
        .cmd_raw(STANDARD_PATH, &["logs", d.profile])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("domain down"), "{stdout}");
    assert!(stdout.contains("agent said"), "{stdout}");
    assert!(
        !stdout.contains('\u{1b}') && !stdout.contains('\u{7}'),
        "{stdout:?}"
    );
}
