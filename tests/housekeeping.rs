//! Housekeeping with real processes: the coordinator's log is bounded and
//! rotates; `lazaret logs` shows it with control characters made visible.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::sandbox::Domain;
use common::{STANDARD_PATH, lazaret_env, text, user_home};

/// `lazaret --config CONFIG ARGS` in the workspace with extra environment.
fn lazaret_with(d: &Domain, env: &[(&str, &str)], args: &[&str]) -> Command {
    let config = d.s.path().join("config.toml");
    let mut all = vec!["--config", config.to_str().unwrap()];
    all.extend_from_slice(args);
    let mut vars = vec![("LAZARET_USER_CONFIG", ""), ("LAZARET_TEST_FWD", "x")];
    vars.extend_from_slice(env);
    lazaret_env(&user_home(), &d.ws(), STANDARD_PATH, &vars, &all)
}

/// A session under a coordinator whose log may hold `max` bytes.
fn session_with_log_bound(d: &Domain, max: &str) {
    let out = lazaret_with(
        d,
        &[("LAZARET_LOG_MAX_BYTES", max)],
        &["exec", d.profile, "--", "true"],
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

/// `status --json` entries of domain `hash` as seen with `env`.
fn status_entry(d: &Domain, env: &[(&str, &str)]) -> Option<serde_json::Value> {
    let out = lazaret_with(d, env, &["status", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    all.as_array()
        .unwrap()
        .iter()
        .find(|x| x["hash"] == d.hash.as_str())
        .cloned()
}

/// A coordinator killed with SIGKILL and its runtime folder removed: its
/// containers keep running; `status` lists the orphan and `down --all`
/// removes it (containers and State Anchor).
#[test]
fn orphan_of_a_killed_coordinator_is_listed_and_brought_down() {
    use std::os::unix::fs::PermissionsExt;
    let d = Domain::new("rc");
    // A runtime folder of this test's own, so `down --all` reaches no
    // other test's coordinator.
    let xdg = d.s.mkdir("xdg");
    std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o700)).unwrap();
    let xdg_s = xdg.to_str().unwrap().to_string();
    let env = [("XDG_RUNTIME_DIR", xdg_s.as_str())];
    let mut holder = lazaret_with(&d, &env, &["exec", d.profile, "--", "sleep", "300"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let socket = xdg.join(format!("lazaret/lazaret_coord_{}.sock", d.hash));
    let deadline = Instant::now() + Duration::from_secs(90);
    let pid = loop {
        if d.containers().len() == 2
            && socket.exists()
            && let Some(st) = status_entry(&d, &env)
            && st["coordinator_pid"].as_i64().unwrap_or(0) > 0
        {
            break st["coordinator_pid"].as_i64().unwrap() as i32;
        }
        assert!(Instant::now() < deadline, "the domain never came up");
        std::thread::sleep(Duration::from_millis(100));
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = holder.kill();
    let _ = holder.wait();
    std::fs::remove_dir_all(xdg.join("lazaret")).unwrap();
    while std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z")
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        d.containers().len(),
        2,
        "the containers outlive their coordinator"
    );

    let st = status_entry(&d, &env).expect("status lists the orphan");
    assert_eq!(st["orphaned"], true, "{st}");
    assert_eq!(st["profile"], d.profile, "{st}");
    let out = lazaret_with(&d, &env, &["status"]).output().unwrap();
    assert!(text(&out).0.contains("orphaned"), "{}", text(&out).0);

    let out = lazaret_with(&d, &env, &["down", "--all"]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("orphaned domain {} is down", d.hash)),
        "{stdout}"
    );
    d.assert_gone();
    assert!(status_entry(&d, &env).is_none());
}
