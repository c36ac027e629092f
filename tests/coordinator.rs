//! The Session Coordinator with real processes and real podman: hold-to-bind
//! under contention, reference-counted teardown, crash recovery, and the
//! hash-chained audit store.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use common::sandbox::{Domain, wait_domain_gone};
use common::{STANDARD_PATH, podman, text};
use lazaret::coordinator::store::{AuditRecord, Store, StoreError};

fn exec(d: &Domain, argv: &[&str]) -> std::process::Command {
    let mut args = vec!["exec", d.profile, "--"];
    args.extend_from_slice(argv);
    d.cmd_raw(STANDARD_PATH, &args)
}

fn spawn(mut cmd: std::process::Command) -> Child {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn socket(d: &Domain) -> PathBuf {
    d.control_socket()
}

fn wait_for_socket(d: &Domain) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while d.containers().len() < 2 || !socket(d).exists() {
        assert!(Instant::now() < deadline, "the domain never came up");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// This domain's entry in `lazaret status --json`.
/// [`status_of`], or null while the domain is not listed.
fn status_of_opt(d: &Domain) -> serde_json::Value {
    let status = d
        .cmd_raw(STANDARD_PATH, &["status", "--json"])
        .output()
        .unwrap();
    serde_json::from_slice::<serde_json::Value>(&status.stdout)
        .ok()
        .and_then(|all| {
            all.as_array()?
                .iter()
                .find(|x| x["hash"] == d.hash.as_str())
                .cloned()
        })
        .unwrap_or(serde_json::Value::Null)
}

fn status_of(d: &Domain) -> serde_json::Value {
    let status = d
        .cmd_raw(STANDARD_PATH, &["status", "--json"])
        .output()
        .unwrap();
    let domains: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    domains
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["hash"] == d.hash.as_str())
        .unwrap_or_else(|| panic!("status lacks the domain: {domains}"))
        .clone()
}

fn audit(d: &Domain) -> Vec<AuditRecord> {
    serde_json::from_value(serde_json::Value::Array(d.audit_json())).unwrap()
}

fn count(records: &[AuditRecord], kind: &str) -> usize {
    records.iter().filter(|r| r.kind == kind).count()
}

/// A process that exists and is not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(") ").next().map(|r| !r.starts_with('Z')))
        .unwrap_or(false)
}

fn finish(child: Child) -> Output {
    child.wait_with_output().unwrap()
}

/// 8 sessions at the same instant: one coordinator, one sandbox, all 8 run,
/// and nothing is left when they are done.
#[test]
fn eight_concurrent_sessions_share_one_domain() {
    let d = Domain::new("gv");
    let children: Vec<Child> = (0..8)
        .map(|i| {
            spawn(exec(
                &d,
                &[
                    "sh",
                    "-c",
                    &format!("sleep 2; echo session-{i} $LAZARET_SESSION_ID"),
                ],
            ))
        })
        .collect();
    // While they run: exactly one sandbox and one sidecar.
    wait_for_socket(&d);
    let names = d.containers();
    assert_eq!(names.len(), 2, "{names:?}");
    // The socket comes before the sandbox runs: wait until both run (the
    // sessions sleep inside it), and never more than the two.
    let running = || {
        text(&podman(&[
            "ps",
            "--filter",
            &format!("label={}={}", lazaret::engine::LABEL_DOMAIN, d.hash),
            "--format",
            "{{.Names}}",
        ]))
        .0
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut ps = running();
    while ps.lines().count() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        ps = running();
    }
    assert_eq!(ps.lines().count(), 2, "{ps}");
    let mut ids = std::collections::BTreeSet::new();
    for (i, c) in children.into_iter().enumerate() {
        let out = finish(c);
        let (o, e) = text(&out);
        assert!(out.status.success(), "session {i} failed: {o}{e}");
        let line = o.lines().last().unwrap_or_default().to_string();
        assert!(line.starts_with(&format!("session-{i} ")), "{line}");
        ids.insert(line.split(' ').nth(1).unwrap().to_string());
    }
    assert_eq!(ids.len(), 8, "every session has its own LAZARET_SESSION_ID");
    d.wait_until_gone();
    let records = audit(&d);
    assert_eq!(
        count(&records, "coordinator-start"),
        1,
        "more than one coordinator"
    );
    assert_eq!(count(&records, "domain-up"), 1);
    assert_eq!(count(&records, "session-start"), 8);
    assert_eq!(count(&records, "session-end"), 8);
    assert_eq!(count(&records, "domain-down"), 1);
    // The exec's exit code is passed through.
    let out = exec(&d, &["sh", "-c", "exit 42"]).output().unwrap();
    assert_eq!(out.status.code(), Some(42));
    // Exit 1 is the command's, not Lazaret's (which would be 125).
    let out = exec(&d, &["sh", "-c", "exit 1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    d.wait_until_gone();
}

/// The coordinator is killed mid-session; the next session recovers with a
/// new coordinator, no orphan containers, and an intact store.
#[test]
fn recovers_from_a_killed_coordinator() {
    let d = Domain::new("gv");
    let mut long = spawn(exec(&d, &["sleep", "60"]));
    wait_for_socket(&d);
    let mine = status_of(&d);
    assert_eq!(mine["runtime"], "runsc");
    assert_eq!(mine["gvisor"], true);
    assert_eq!(mine["sessions"].as_array().unwrap().len(), 1);
    let pid = mine["coordinator_pid"].as_i64().unwrap() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(Instant::now() < deadline, "coordinator survived SIGKILL");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The surviving session reconnects as itself: a new coordinator
    // counts it (the socket may be the stale one for a moment).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = status_of_opt(&d);
        if s["coordinator_pid"]
            .as_i64()
            .is_some_and(|p| p as i32 != pid)
            && s["sessions"].as_array().map(Vec::len) == Some(1)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the session was not re-counted: {s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        long.try_wait().unwrap().is_none(),
        "the surviving session ended"
    );
    // The next session: a new coordinator, the same (single) sandbox.
    let out = exec(&d, &["sh", "-c", "echo recovered"]).output().unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    assert_eq!(o.trim(), "recovered");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(long.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = finish(long);
    d.wait_until_gone();
    let verify = d
        .cmd_raw(STANDARD_PATH, &["audit", d.profile, "--verify"])
        .output()
        .unwrap();
    assert!(verify.status.success(), "{}", text(&verify).1);
    assert!(text(&verify).0.contains("hash chain verified"));
    assert_eq!(count(&audit(&d), "coordinator-start"), 2);
}

/// SIGTERM to the coordinator tears the domain down cleanly (NFR-2), and
/// `lazaret down` does the same on request.
#[test]
fn sigterm_and_down_tear_down_cleanly() {
    let d = Domain::new("rc");
    let long = spawn(exec(&d, &["sleep", "60"]));
    wait_for_socket(&d);
    let pid = status_of(&d)["coordinator_pid"].as_i64().unwrap() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    d.wait_until_gone();
    let _ = finish(long);
    let records = audit(&d);
    assert_eq!(records.last().unwrap().kind, "domain-down");

    let long = spawn(exec(&d, &["sleep", "60"]));
    wait_for_socket(&d);
    let out = d
        .cmd_raw(STANDARD_PATH, &["down", d.profile])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    // `down` returns once the teardown is complete.
    assert!(d.containers().is_empty(), "{:?}", d.containers());
    d.wait_until_gone();
    let _ = finish(long);
}

/// While the coordinator owns the store, another process cannot open it,
/// and is told so at once.
#[test]
fn store_is_owned_by_the_coordinator() {
    let d = Domain::new("gv");
    let long = spawn(exec(&d, &["sleep", "60"]));
    wait_for_socket(&d);
    let path = d.domain_root().join("state.redb");
    let started = Instant::now();
    let err = Store::open(&path).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "it did not fail fast"
    );
    assert!(matches!(err, StoreError::Locked(_)), "{err}");
    assert!(
        err.to_string()
            .contains("is open in another process (the Session Coordinator owns it)"),
        "{err}"
    );
    // The IPC facade answers meanwhile.
    let out = d
        .cmd_raw(STANDARD_PATH, &["audit", d.profile, "--verify"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    let out = d
        .cmd_raw(STANDARD_PATH, &["down", d.profile])
        .output()
        .unwrap();
    assert!(out.status.success());
    let _ = finish(long);
    d.wait_until_gone();
}

fn edit_store(path: &Path, f: impl FnOnce(&mut redb::Table<u64, &[u8]>)) {
    let db = redb::Database::open(path).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(lazaret::coordinator::store::AUDIT).unwrap();
        f(&mut t);
    }
    tx.commit().unwrap();
}

fn get(t: &redb::Table<u64, &[u8]>, k: u64) -> AuditRecord {
    use redb::ReadableTable;
    serde_json::from_slice(t.get(k).unwrap().unwrap().value()).unwrap()
}

fn put(t: &mut redb::Table<u64, &[u8]>, k: u64, r: &AuditRecord) {
    t.insert(k, serde_json::to_vec(r).unwrap().as_slice())
        .unwrap();
}

/// A store edited by hand (no coordinator running) fails `audit --verify`,
/// which names the first bad record: edited, removed, reordered.
#[test]
fn hand_edited_store_fails_verification() {
    let d = Domain::new("gv");
    let out = exec(&d, &["true"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    let out = exec(&d, &["true"]).output().unwrap();
    assert!(out.status.success());
    d.wait_until_gone();
    let path = d.domain_root().join("state.redb");
    let pristine = std::fs::read(&path).unwrap();
    let verify = || {
        let out = d
            .cmd_raw(STANDARD_PATH, &["audit", d.profile, "--verify"])
            .output()
            .unwrap();
        (out.status.code(), text(&out).1)
    };
    assert_eq!(verify().0, Some(0));

    // Edited: record 2's data changes, its hash does not.
    edit_store(&path, |t| {
        let mut r = get(t, 2);
        r.data = serde_json::json!({ "forged": true });
        put(t, 2, &r);
    });
    let (code, err) = verify();
    assert_eq!(code, Some(1));
    assert!(
        err.contains("BROKEN at record 2: its content does not match its hash (edited)"),
        "{err}"
    );

    // Removed: record 3 is gone.
    std::fs::write(&path, &pristine).unwrap();
    edit_store(&path, |t| {
        t.remove(3).unwrap();
    });
    let (code, err) = verify();
    assert_eq!(code, Some(1));
    assert!(
        err.contains("BROKEN at record 3: record 3 is missing"),
        "{err}"
    );

    // Reordered: records 1 and 2 swap places (each keeps its own seq/hash).
    std::fs::write(&path, &pristine).unwrap();
    edit_store(&path, |t| {
        let (a, b) = (get(t, 1), get(t, 2));
        put(t, 1, &b);
        put(t, 2, &a);
    });
    let (code, err) = verify();
    assert_eq!(code, Some(1));
    assert!(err.contains("BROKEN at record 1"), "{err}");

    // Re-hashed forgery without the chain: record 4 re-hashed on its own.
    std::fs::write(&path, &pristine).unwrap();
    edit_store(&path, |t| {
        let mut r = get(t, 4);
        r.data = serde_json::json!({ "forged": true });
        r.prev_hash = "f".repeat(64);
        r.hash = AuditRecord::compute_hash(r.seq, r.time, &r.kind, &r.data, &r.prev_hash);
        put(t, 4, &r);
    });
    let (code, err) = verify();
    assert_eq!(code, Some(1));
    assert!(
        err.contains("BROKEN at record 4: it does not follow the record before it"),
        "{err}"
    );
}

/// issue 41: a store whose chain broke while its domain was stopped is
/// found broken when the coordinator opens it: `status` (and so the
/// workbench) and the coordinator's log say so, the records the new
/// coordinator writes start a segment that says where the chain broke,
/// and `audit --verify` through the running coordinator reports the break
/// (it once answered "intact" there).
#[test]
fn a_broken_chain_is_reported_by_a_running_coordinator() {
    use lazaret::coordinator::store::{GENESIS, SEGMENT_KIND};
    let d = Domain::new("gv");
    let out = exec(&d, &["true"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    d.wait_until_gone();
    let path = d.domain_root().join("state.redb");
    let before = Store::open(&path).unwrap().records().unwrap().len() as u64;
    assert!(before > 3, "{before} records");
    // Edited while stopped: record 2's data changes, its hash does not.
    edit_store(&path, |t| {
        let mut r = get(t, 2);
        r.data = serde_json::json!({ "forged": true });
        put(t, 2, &r);
    });

    let long = spawn(exec(&d, &["sleep", "60"]));
    wait_for_socket(&d);
    // Status, as JSON (what the workbench reads) and for people.
    let s = status_of(&d);
    let b = &s["audit_break"];
    assert_eq!(b["seq"], 2, "{s}");
    assert_eq!(b["segment"], before, "{s}");
    assert_eq!(
        b["why"], "its content does not match its hash (edited)",
        "{s}"
    );
    let out = d.cmd_raw(STANDARD_PATH, &["status"]).output().unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "{e}");
    assert!(
        o.contains(&format!(
            "{}: audit log BROKEN: the audit chain is broken at record 2",
            d.hash
        )),
        "{o}"
    );
    // The coordinator's log.
    let log = std::fs::read_to_string(d.domain_root().join("coordinator.log")).unwrap();
    assert!(
        log.contains(&format!(
            "the audit chain is broken at record 2: its content does not match its hash (edited); the records from {before} on are a new segment"
        )),
        "{log}"
    );
    // Through the running coordinator (it holds the store).
    assert!(matches!(Store::open(&path), Err(StoreError::Locked(_))));
    let verify = d
        .cmd_raw(STANDARD_PATH, &["audit", d.profile, "--verify"])
        .output()
        .unwrap();
    let (o, e) = text(&verify);
    assert_eq!(verify.status.code(), Some(1), "{o}{e}");
    assert!(
        e.contains("BROKEN at record 2: its content does not match its hash (edited)"),
        "{e}"
    );
    assert!(
        e.contains(&format!(
            "the new segment started at record {before} when the break was found is intact"
        )),
        "{e}"
    );
    // The new segment: its first record says so, and the coordinator's
    // own records chain on from it, not from the broken chain. (`audit`
    // prints them and still fails: the chain is broken.)
    let out = d
        .cmd_raw(STANDARD_PATH, &["audit", d.profile, "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out).1);
    let records: Vec<AuditRecord> = serde_json::from_slice(&out.stdout).unwrap();
    let segment = &records[before as usize];
    assert_eq!(segment.kind, SEGMENT_KIND, "{records:?}");
    assert_eq!(segment.prev_hash, GENESIS);
    assert_eq!(segment.data["broken_at"], 2);
    let next = &records[before as usize + 1];
    assert_eq!(next.kind, "coordinator-start", "{records:?}");
    assert_eq!(next.prev_hash, segment.hash);

    let out = d
        .cmd_raw(STANDARD_PATH, &["down", d.profile])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    let _ = finish(long);
    d.wait_until_gone();
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// §4.4.3: a real version-1 store (made by the first schema's writer and
/// kept as a fixture) is upgraded to version 2 in one transaction, its
/// chain checked before and re-anchored after.
#[test]
fn migrates_a_version_1_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    std::fs::copy(fixture("state-v1.redb"), &path).unwrap();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), 2);
    let records = store.records().unwrap();
    assert_eq!(records.len(), 4, "{records:?}");
    assert_eq!(records[0].kind, "legacy-event");
    assert_eq!(records[0].data["event"], "session 1 started");
    assert_eq!(records[2].data["event"], "approved: ls -la");
    assert_eq!(records[3].kind, "schema-migration");
    assert_eq!(records[3].data["v1_records"], 3);
    assert!(matches!(
        store.verify().unwrap(),
        lazaret::coordinator::store::Verification::Intact { records: 4, .. }
    ));
    // New records chain on.
    store.append("after", serde_json::json!({})).unwrap();
    assert!(matches!(
        store.verify().unwrap(),
        lazaret::coordinator::store::Verification::Intact { records: 5, .. }
    ));
    drop(store);
    // Opening again does not migrate twice.
    assert_eq!(Store::open(&path).unwrap().records().unwrap().len(), 5);

    // A tampered version-1 store is refused, not silently re-chained.
    let bad = dir.path().join("bad.redb");
    std::fs::copy(fixture("state-v1.redb"), &bad).unwrap();
    {
        let db = redb::Database::open(&bad).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx
                .open_table(lazaret::coordinator::store::v1::AUDIT_V1)
                .unwrap();
            let mut r: lazaret::coordinator::store::v1::RecordV1 = {
                use redb::ReadableTable;
                serde_json::from_slice(t.get(1).unwrap().unwrap().value()).unwrap()
            };
            r.event = "approved: rm -rf /".into();
            t.insert(1, serde_json::to_vec(&r).unwrap().as_slice())
                .unwrap();
        }
        tx.commit().unwrap();
    }
    let err = Store::open(&bad).unwrap_err().to_string();
    assert!(
        err.contains("its version 1 audit chain is broken at record 1"),
        "{err}"
    );
}

/// Writes a version-1 store, as Lazaret's first schema did: a test-only
/// writer (the product only reads and migrates version 1).
fn create_v1(path: &Path, events: &[(u64, &str)]) {
    use lazaret::coordinator::store::{GENESIS, META, v1};
    let db = redb::Database::create(path).unwrap();
    let tx = db.begin_write().unwrap();
    {
        tx.open_table(META)
            .unwrap()
            .insert("schema_version", 1)
            .unwrap();
        let mut audit = tx.open_table(v1::AUDIT_V1).unwrap();
        let mut prev = GENESIS.to_string();
        for (seq, (time, event)) in events.iter().enumerate() {
            let seq = seq as u64;
            let hash = v1::hash_v1(seq, *time, event, &prev);
            let r = v1::RecordV1 {
                seq,
                time: *time,
                event: event.to_string(),
                prev: prev.clone(),
                hash: hash.clone(),
            };
            audit
                .insert(seq, serde_json::to_vec(&r).unwrap().as_slice())
                .unwrap();
            prev = hash;
        }
    }
    tx.commit().unwrap();
}

/// The committed version-1 fixture holds what the version-1 writer makes.
/// `LAZARET_WRITE_FIXTURES=1` rewrites it, and then fails: a run that
/// writes the fixture has compared nothing.
#[test]
fn version_1_fixture_is_what_the_v1_writer_makes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.redb");
    create_v1(
        &path,
        &[
            (1_700_000_000, "session 1 started"),
            (1_700_000_010, "escalation: ls -la"),
            (1_700_000_020, "approved: ls -la"),
        ],
    );
    if std::env::var_os("LAZARET_WRITE_FIXTURES").is_some() {
        std::fs::copy(&path, fixture("state-v1.redb")).unwrap();
        panic!(
            "wrote tests/fixtures/state-v1.redb; run again without LAZARET_WRITE_FIXTURES to check it"
        );
    }
    // Same logical content as the committed file.
    let read = |p: &Path| {
        // Never open the committed file in place: redb may write to it.
        let copy = dir.path().join("copy.redb");
        std::fs::copy(p, &copy).unwrap();
        let db = redb::Database::open(&copy).unwrap();
        let tx = redb::ReadableDatabase::begin_read(&db).unwrap();
        let t = tx
            .open_table(lazaret::coordinator::store::v1::AUDIT_V1)
            .unwrap();
        use redb::ReadableTable;
        t.iter()
            .unwrap()
            .map(|x| x.unwrap().1.value().to_vec())
            .collect::<Vec<_>>()
    };
    let written = read(&path);
    assert_eq!(written.len(), 3, "the writer wrote nothing");
    assert_eq!(written, read(&fixture("state-v1.redb")));
}

/// When its domain cannot start, `lazaret shell` gives the terminal back
/// and says why there, with a failing exit code: no full screen left
/// behind, nothing left running.
#[test]
fn shell_that_cannot_start_says_why_on_the_terminal() {
    let d = Domain::new("gv");
    d.add_config("[profiles.missing]\nimage = \"localhost/lazaret/no-such-image:latest\"\n");
    let missing = d.other("missing");
    let t = d.tmux(100, 30, "shell missing", Some("echo RC=$?; sleep 60"));
    let s = t.wait_for(120, "the error on the terminal", |s| s.contains("RC="));
    assert!(s.contains("RC=1"), "{s}");
    assert!(s.contains("no-such-image"), "{s}");
    // Back on the normal screen: the pane's status line is gone.
    assert!(!s.contains("? help"), "{s}");
    // The failed domain left nothing behind.
    wait_domain_gone(&missing, Vec::new);
}

/// `lazaret shell` in a real terminal (tmux): an interactive shell in the
/// sandbox, in Lazaret's pane (the terminal less the status line),
/// following a resize; its exit code is lazaret's, and leaving it tears the
/// domain down.
#[test]
fn shell_is_interactive_and_follows_resizes() {
    let d = Domain::new("gv");
    let rc = d.s.path().join("shell-rc");
    let t = d.tmux(
        100,
        30,
        "shell gv",
        Some(&format!(
            "echo $? > {}",
            common::shell_quote(&rc.display().to_string())
        )),
    );
    t.wait_for(60, "the sandbox shell prompt", |s| {
        s.contains("root@") || s.contains("# ")
    });
    t.line("echo SID=$LAZARET_SESSION_ID; stty size; uname -r");
    let s = t.wait_for(20, "the command output", |s| {
        s.contains("SID=") && s.contains("29 100")
    });
    let sid = s
        .lines()
        .find_map(|l| l.strip_prefix("SID="))
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(
        uuid::Uuid::parse_str(&sid).unwrap().get_version_num(),
        4,
        "{s}"
    );
    t.resize(120, 40);
    t.line("clear; stty size");
    t.wait_for(20, "the new size", |s| s.contains("39 120"));
    t.line("exit 7");
    t.wait_exit(30, "lazaret shell");
    assert_eq!(std::fs::read_to_string(&rc).unwrap().trim(), "7");
    d.wait_until_gone();
}

/// `lazaret shell` without a terminal (stdin a pipe) runs a plain
/// `podman exec`: the shell reads its commands from stdin, and its exit
/// code is lazaret's.
#[test]
fn shell_without_a_terminal_reads_stdin() {
    use std::io::Write;
    let d = Domain::new("gv");
    let mut child = d
        .cmd_raw(STANDARD_PATH, &["shell", "gv"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"echo PIPED-$((6*7)); exit 3\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{stdout}{stderr}");
    assert!(stdout.contains("PIPED-42"), "{stdout}{stderr}");
    d.wait_until_gone();
}
