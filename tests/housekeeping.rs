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
    let socket = d
        .anchor
        .control_socket(&lazaret::rundir::RuntimeDir::unchecked(xdg.join("lazaret")));
    let deadline = Instant::now() + Duration::from_secs(90);
    let (pid, session_pid) = loop {
        if d.containers().len() == 2
            && socket.exists()
            && let Some(st) = status_entry(&d, &env)
            && st["coordinator_pid"].as_i64().unwrap_or(0) > 0
            && let Some(session) = st["sessions"][0]["pid"].as_i64()
        {
            break (
                st["coordinator_pid"].as_i64().unwrap() as i32,
                session as i32,
            );
        }
        assert!(Instant::now() < deadline, "the domain never came up");
        std::thread::sleep(Duration::from_millis(100));
    };
    // The holder's session (the `lazaret` under the test user's wrapper)
    // would start a new coordinator once its own is gone (reconnection).
    // Stopped first, it cannot; killed after, it never did.
    let session = nix::unistd::Pid::from_raw(session_pid);
    nix::sys::signal::kill(session, nix::sys::signal::Signal::SIGSTOP).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    nix::sys::signal::kill(session, nix::sys::signal::Signal::SIGKILL).unwrap();
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
    let left = status_entry(&d, &env);
    assert!(left.is_none(), "{left:?}");
}

/// `lazaret sandbox up`, as the user guide shows it, starts a domain with
/// no coordinator by design: `status` lists it as running with no session
/// (never as orphaned), and `sandbox down` takes it off the list.
#[test]
fn a_domain_sandbox_up_started_runs_and_is_no_orphan() {
    let d = Domain::new("rc");
    d.up();
    let st = d.status().expect("status lists the domain");
    assert_eq!(st["state"], "running", "{st}");
    assert_eq!(st["orphaned"], false, "{st}");
    assert_eq!(st["started_by"], "sandbox up", "{st}");
    assert_eq!(st["sessions"], serde_json::json!([]), "{st}");
    let out = d.cmd_raw(STANDARD_PATH, &["status"]).output().unwrap();
    let o = text(&out).0;
    let (orphaned, rest) = o
        .split_once("orphaned (")
        .map_or(("", o.as_str()), |(_, after)| {
            after.split_once("\n\n").unwrap_or((after, ""))
        });
    assert!(!orphaned.contains(&d.hash), "listed as orphaned:\n{o}");
    let row = rest
        .lines()
        .find(|l| l.starts_with(&d.hash) && l.contains(d.profile))
        .unwrap_or_else(|| panic!("no row for {}:\n{o}", d.hash));
    assert!(row.contains("runc NOT gVisor"), "{row}");
    assert!(
        o.contains(&format!("{}: started by `lazaret sandbox up`", d.hash)),
        "{o}"
    );
    d.down();
    assert_eq!(d.status(), None, "still listed after sandbox down");
}

fn age_folder(root: &std::path::Path) {
    for f in ["coordinator.log", "state.redb", "anchor.json", ""] {
        let p = root.join(f);
        if p.exists() {
            let ok = Command::new("touch")
                .args(["-h", "-d", "10 days ago"])
                .arg(&p)
                .status()
                .unwrap()
                .success();
            assert!(ok);
        }
    }
}

/// `domains prune` removes only stopped domains past the age, and keeps an
/// isolated clone holding commits the host branch lacks (no terminal to
/// ask: the answer is no).
#[test]
fn domains_prune_removes_old_stopped_domains_and_keeps_unpropagated_clones() {
    let d = Domain::new("rc");
    let ws = d.ws();
    common::git(&ws, &["init", "-q", "-b", "main"]);
    common::git(
        &ws,
        &[
            "-c",
            "user.email=t@example.invalid",
            "-c",
            "user.name=t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "init",
        ],
    );
    let rcd = d.other("rcd");
    let netrc = d.other("netrc");
    for p in ["rc", "rcd", "netrc"] {
        let out = d
            .cmd_raw(STANDARD_PATH, &["exec", p, "--", "true"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{p}: {}", text(&out).1);
    }
    for h in [&d.anchor, &rcd, &netrc] {
        common::sandbox::wait_domain_gone(h, Vec::new);
    }
    let domains = d.s.path().join("data/domains");
    // A commit the agent made after the last sync (made here, in the clone).
    common::git(
        &d.domain_root().join("workspace"),
        &[
            "-c",
            "user.email=t@example.invalid",
            "-c",
            "user.name=t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "late",
        ],
    );
    age_folder(&d.domain_root());
    age_folder(&domains.join(rcd.hash()));

    let out = d
        .cmd_raw(STANDARD_PATH, &["domains", "list", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let arr = list.as_array().unwrap();
    assert_eq!(arr.len(), 3, "{list}");
    for e in arr {
        assert_eq!(e["state"], "stopped", "{e}");
        assert!(e["size"].as_u64().unwrap() > 0, "{e}");
    }
    let rc = arr.iter().find(|e| e["hash"] == d.hash.as_str()).unwrap();
    assert_eq!(rc["profile"], "rc");
    assert_eq!(rc["workspace"], ws.to_str().unwrap());

    let out = d
        .cmd_raw(
            STANDARD_PATH,
            &["domains", "prune", "--older-than", "7d", "--force"],
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("removed {}", rcd.hash())),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("kept {}", d.hash)), "{stdout}");
    assert!(
        !domains.join(rcd.hash()).exists(),
        "the old stopped domain is gone"
    );
    assert!(
        d.domain_root().join("workspace/.git").is_dir(),
        "the clone is kept"
    );
    assert!(
        domains.join(netrc.hash()).exists(),
        "a recent domain is kept"
    );
}

/// `image prune` removes Lazaret's images nothing uses and keeps the ones
/// profiles use. Real removal is limited to this test's own repository
/// (the test user's images are shared with other tests).
#[test]
fn image_prune_keeps_images_in_use() {
    let d = Domain::new("rc");
    let repo = format!("localhost/lazaret/prunetest{}", std::process::id());
    let tarball = d.s.path().join("one.tar");
    let ok = Command::new("tar")
        .arg("-C")
        .arg(d.s.path())
        .args(["-cf"])
        .arg(&tarball)
        .arg("config.toml")
        .status()
        .unwrap()
        .success();
    assert!(ok);
    d.s.chown(&tarball);
    let out = common::podman(&["import", tarball.to_str().unwrap(), &format!("{repo}:old")]);
    assert!(out.status.success(), "{}", text(&out).1);
    let base = common::sandbox::BASE_IMAGE;
    let out = common::podman(&["tag", base, &format!("{repo}:inuse")]);
    assert!(out.status.success(), "{}", text(&out).1);

    let all = d
        .cmd_raw(STANDARD_PATH, &["image", "prune", "--dry-run"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&all);
    assert!(all.status.success(), "{stderr}");
    assert!(
        stdout.contains(&format!("would remove {repo}:old")),
        "{stdout}"
    );
    // Line by line: an untagged image left by an earlier build of the base
    // is listed as "would remove untagged ID (was BASE)", rightly.
    let would = |name: &str| stdout.lines().any(|l| l == format!("would remove {name}"));
    assert!(!would(base), "{stdout}");
    assert!(!would(&format!("{repo}:inuse")), "{stdout}");

    let out = d
        .cmd_raw(STANDARD_PATH, &["image", "prune", &repo])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains(&format!("removed {repo}:old")), "{stdout}");
    let exists = |name: &str| common::podman(&["image", "exists", name]).status.success();
    assert!(!exists(&format!("{repo}:old")));
    assert!(exists(&format!("{repo}:inuse")));
    assert!(exists(base));
    let _ = common::podman(&["untag", base, &format!("{repo}:inuse")]);
}

/// `lazaret image list`: `--json` for scripts, and a reader that goes
/// away early (`| head`) is no error.
#[test]
fn image_list_prints_json_and_survives_a_closed_pipe() {
    let d = Domain::new("gv");
    let out = d
        .cmd_raw(STANDARD_PATH, &["image", "list", "--json"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let rows: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let base = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["names"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n == common::sandbox::BASE_IMAGE)
        })
        .unwrap_or_else(|| panic!("no base image in {stdout}"));
    assert!(base["size"].as_u64().unwrap() > 1_000_000, "{base}");
    assert!(base["agent"].is_null(), "{base}");

    // The reader is gone before lazaret writes a byte.
    let mut child = d
        .cmd_raw(STANDARD_PATH, &["image", "list"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(!text(&out).1.contains("panicked"), "{}", text(&out).1);
}
