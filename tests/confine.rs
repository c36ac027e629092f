//! The confinement of auto-approved host commands (decisions.md D9),
//! driven for real: Landlock and seccomp applied by the coordinator's own
//! `execute`, real files, real sockets. The end-to-end attacks from a
//! sandbox are in tests/escalation.rs.

mod common;

use std::os::unix::net::UnixListener;
use std::path::Path;

use lazaret::coordinator::confine::{Confinement, Support, WorkspaceRoot, probe, seccomp};
use lazaret::coordinator::escalation::{Exec, ExecLimits, execute};

fn sh(
    root: &WorkspaceRoot,
    cwd: &str,
    script: &str,
    confined: bool,
    network: bool,
) -> (i32, String) {
    let pinned = root.pin(Path::new(cwd)).unwrap();
    let confinement = confined.then(|| Confinement {
        ruleset: root.ruleset(network).unwrap(),
        seccomp: seccomp(network).unwrap(),
    });
    let exec = Exec::Direct {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let out = rt
        .block_on(execute(&exec, &pinned, confinement, ExecLimits::default()))
        .unwrap();
    (
        out.code,
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn confined_commands_keep_to_the_workspace() {
    assert!(
        matches!(probe(), Support::Landlock { .. }),
        "this kernel should offer Landlock: {:?}",
        probe()
    );
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let ws = base.join("ws");
    for d in ["ws/sub", "ws/.git/hooks", "ws/.vscode"] {
        std::fs::create_dir_all(base.join(d)).unwrap();
    }
    std::fs::write(base.join("secret"), "CANARY-SECRET-4711").unwrap();
    std::fs::write(ws.join("lazaret.toml"), "# user's").unwrap();
    std::fs::write(ws.join("sub/file"), "inside").unwrap();
    std::os::unix::fs::symlink("../secret", ws.join("sub/out")).unwrap();
    let sock = base.join("control.sock");
    let _listener = UnixListener::bind(&sock).unwrap();
    let root = WorkspaceRoot::open(&ws).unwrap();

    // Unconfined, the same script reads the secret: the checks below are
    // Landlock's doing.
    let (_, out) = sh(&root, "sub", "cat ../../secret", false, false);
    assert!(out.contains("CANARY-SECRET"), "{out}");

    let cases: &[(&str, &str)] = &[
        ("read outside", "exec cat ../../secret"),
        ("read through a symlink", "exec cat out"),
        ("read the home", "exec ls \"$HOME\" /root /tmp"),
        ("write outside", "echo x > ../../written"),
        ("write a hook", "echo x > ../.git/hooks/pre-commit"),
        ("write a masked folder", "echo x > ../.vscode/tasks.json"),
        ("rewrite lazaret.toml", "echo x > ../lazaret.toml"),
        ("new file at the top", "echo x > ../new-top"),
        (
            "unix socket",
            &format!(
                "exec 3<>/dev/null; exec python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"{}\")'",
                sock.display()
            ),
        ),
        (
            "udp",
            "exec python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b\"x\", (\"127.0.0.1\", 9))'",
        ),
        (
            "tcp",
            "exec python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 9), 2)'",
        ),
    ];
    for (what, script) in cases {
        let (code, out) = sh(&root, "sub", script, true, false);
        assert_ne!(code, 0, "{what}: {out}");
        assert!(!out.contains("CANARY-SECRET"), "{what}: {out}");
        // Refused by what is meant, not by the bound on processes.
        assert!(!out.contains("fork"), "{what}: {out}");
    }
    assert!(!base.join("written").exists());
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    assert!(!ws.join(".vscode/tasks.json").exists());
    assert!(!ws.join("new-top").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("lazaret.toml")).unwrap(),
        "# user's"
    );

    // An entry that opted into the network may open TCP connections (here
    // refused by nobody listening, not by the confinement), still no UNIX
    // socket.
    let (_, out) = sh(&root, "sub", cases[10].1, true, true);
    assert!(out.contains("ConnectionRefused"), "{out}");
    let (code, out) = sh(&root, "sub", cases[8].1, true, true);
    assert!(code != 0 && out.contains("PermissionError"), "{out}");

    // (The shell `exec`s each program: a confined command is one process.)
    // Inside the workspace, reading and writing work, and threads (one
    // process: the memory bound holds for the whole command).
    let (code, out) = sh(
        &root,
        "sub",
        "exec python3 -c 'import os, threading
print(open(\"file\").read())
open(\"made\", \"w\").write(\"new\\n\")
os.makedirs(\"d/e\")
open(\"file\", \"a\").write(\"more\\n\")
os.stat(\"/usr/bin/env\")
t = threading.Thread(target=lambda: open(\"threaded\", \"w\").write(\"t\"))
t.start(); t.join()'",
        true,
        false,
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        std::fs::read_to_string(ws.join("sub/made")).unwrap(),
        "new\n"
    );
    assert!(ws.join("sub/d/e").is_dir());
    assert!(ws.join("sub/threaded").exists());
    // A new process is refused (a shell's first of two commands forks).
    let (code, out) = sh(&root, "sub", "/bin/true; /bin/true", true, false);
    assert!(code != 0 && out.contains("fork"), "{code}: {out}");
}

#[test]
fn the_working_directory_is_opened_beneath_the_workspace_and_held() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let ws = base.join("ws");
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::create_dir_all(base.join("home")).unwrap();
    std::fs::write(ws.join("sub/marker"), "original").unwrap();
    std::os::unix::fs::symlink("../home", ws.join("away")).unwrap();
    std::os::unix::fs::symlink(&base, ws.join("abs")).unwrap();
    std::os::unix::fs::symlink("sub", ws.join("inner")).unwrap();
    let root = WorkspaceRoot::open(&ws).unwrap();
    for bad in ["away", "abs", "../", "sub/../../home"] {
        assert!(root.pin(Path::new(bad)).is_err(), "{bad}");
    }
    // A symlink that stays inside is followed, and shown as what it is.
    assert_eq!(root.pin(Path::new("inner")).unwrap().host, ws.join("sub"));

    // Pinned, then swapped for a symlink to "home": it still runs in the
    // folder that was checked.
    let pinned = root.pin(Path::new("sub")).unwrap();
    std::fs::rename(ws.join("sub"), ws.join("sub.old")).unwrap();
    std::os::unix::fs::symlink("../home", ws.join("sub")).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let exec = Exec::Direct {
        program: "/bin/cat".into(),
        args: vec!["marker".into()],
    };
    let out = rt
        .block_on(execute(&exec, &pinned, None, ExecLimits::default()))
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "original");
}

/// `scripts/bench`'s confinement row: an auto-approved command's host side
/// (pin the directory, build the ruleset and filter, spawn, wait) with and
/// without the confinement, alternating, in one run.
#[test]
#[ignore = "a benchmark: run by scripts/bench"]
fn bench_confinement_cost() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    for i in 0..20 {
        std::fs::create_dir_all(ws.join(format!("d{i}"))).unwrap();
    }
    let root = WorkspaceRoot::open(&ws).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let exec = Exec::Direct {
        program: "/bin/true".into(),
        args: vec![],
    };
    let once = |confined: bool| {
        let start = std::time::Instant::now();
        let pinned = root.pin(Path::new("")).unwrap();
        let confinement = confined.then(|| Confinement {
            ruleset: root.ruleset(false).unwrap(),
            seccomp: seccomp(false).unwrap(),
        });
        let out = rt
            .block_on(execute(&exec, &pinned, confinement, ExecLimits::default()))
            .unwrap();
        assert_eq!(out.code, 0);
        start.elapsed().as_micros() as u64
    };
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        with.push(once(true));
        without.push(once(false));
    }
    // Raw samples in ms, for scripts/bench's table (it computes the stats).
    let ms = |v: &[u64]| {
        v.iter()
            .map(|us| format!("{:.3}", *us as f64 / 1000.0))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!("confine-with: {}", ms(&with));
    println!("confine-without: {}", ms(&without));
}

/// A request whose audit record cannot be written does not run: the real
/// Escalation Socket (in process), a real mTLS client, an audit log that
/// fails on demand.
#[test]
fn a_request_that_cannot_be_audited_does_not_run() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use lazaret::coordinator::escalation::{
        AuditLog, EscalationServer, Outcome, Prompt, RequestLimits, SessionDirectory, Setup,
        Verdict,
    };
    use lazaret::coordinator::store::{Batch, Store};
    use lazaret_escalate::client::{Settings, build_request, exchange};
    use lazaret_escalate::ed25519_dalek::VerifyingKey;
    use lazaret_escalate::signing::{self, SessionKey};

    struct Sessions(String, VerifyingKey);
    impl SessionDirectory for Sessions {
        fn key(&self, id: &str) -> Option<VerifyingKey> {
            (id == self.0).then_some(self.1)
        }
        fn ask(&self, _: Prompt) -> Option<tokio::sync::oneshot::Receiver<Verdict>> {
            None
        }
        fn tell(&self, _: &str, _: Outcome) {}
        fn withdraw(&self, _: &str, _: &str, _: &str) {}
    }

    /// The real store, failing on demand.
    struct Failing(Arc<Store>, Arc<AtomicBool>);
    impl AuditLog for Failing {
        fn append(&self, kind: &'static str, data: serde_json::Value) -> Result<(), String> {
            if self.1.load(Ordering::SeqCst) {
                return Err("the disk is full".into());
            }
            AuditLog::append(self.0.as_ref(), kind, data)
        }
        fn commit(&self, batch: Batch) -> Result<bool, String> {
            if self.1.load(Ordering::SeqCst) {
                return Err("the disk is full".into());
            }
            AuditLog::commit(self.0.as_ref(), batch)
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let ws = base.join("ws");
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    let store = Arc::new(Store::open(&base.join("state.redb")).unwrap());
    let failing = Arc::new(AtomicBool::new(true));
    let f = failing.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = EscalationServer::new(Setup {
        profile: "dev",
        domain_hash: "0123456789ab",
        escalation_dir: &base.join("esc"),
        certs_dir: &base.join("certs"),
        host_workspace: &ws,
        layout: None,
        auto_approve: &[vec!["touch".into(), "*".into()]],
        auto_approve_network: &[],
        limits: ExecLimits::default(),
        requests: RequestLimits::default(),
        store: store.clone(),
        audit: Arc::new(Failing(store, f)),
    })
    .unwrap();
    let socket = server.socket.clone();
    let key = SessionKey::generate().unwrap();
    let session = uuid::Uuid::new_v4().to_string();
    let sessions = Arc::new(Sessions(session.clone(), key.public_key()));
    let _enter = rt.enter();
    let _task = Arc::new(server).serve(sessions).unwrap();
    let settings = Settings {
        socket,
        certs_dir: base.join("certs"),
        timeout: Some(std::time::Duration::from_secs(20)),
    };
    let cred = key.delegate(&session, signing::unix_now() + 600).unwrap();
    let send = |command: &str| {
        let req = build_request(&cred, "dev", "/workspace/sub", command, "test").unwrap();
        exchange(&settings, &req).unwrap()
    };
    let r = send("touch unaudited");
    assert_eq!(r.status, lazaret_escalate::Status::Error, "{r:?}");
    assert!(format!("{r:?}").contains("audit log"), "{r:?}");
    assert!(!ws.join("sub/unaudited").exists(), "it ran");
    // The control: with the audit log writable, the same request runs.
    failing.store(false, Ordering::SeqCst);
    let r = send("touch audited");
    assert_eq!(r.status, lazaret_escalate::Status::Approved, "{r:?}");
    assert!(ws.join("sub/audited").exists());
}

/// Runs `program args` in `ws/cwd` under the full confinement.
fn confined(root: &WorkspaceRoot, cwd: &str, program: &str, args: &[&str]) -> (i32, String) {
    let pinned = root.pin(Path::new(cwd)).unwrap();
    let confinement = Confinement {
        ruleset: root.ruleset(false).unwrap(),
        seccomp: seccomp(false).unwrap(),
    };
    let exec = Exec::Direct {
        program: program.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let out = rt
        .block_on(execute(
            &exec,
            &pinned,
            Some(confinement),
            ExecLimits::default(),
        ))
        .unwrap();
    (
        out.code,
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Runs the test `name` alone in a child process of this test binary (it
/// changes process-wide state: the memory share, the running count), and
/// returns `true` in that child.
fn alone(name: &str) -> bool {
    if std::env::var_os("LAZARET_CONFINE_ALONE").is_some() {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("LAZARET_CONFINE_ALONE", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

/// `git status` as the workspace's owner would type it, in `dir`.
fn git_status(home: &Path, dir: &Path) -> String {
    let out = std::process::Command::new("/usr/bin/git")
        .arg("status")
        .current_dir(dir)
        .env_clear()
        .env("HOME", home)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Issue 26 item 4: what the sandbox sees read-only (every `.git` and
/// gitfile, here a nested repository's) stays so for a confined `cp`, and
/// a `.git` folder or gitfile the command makes is quarantined; the user's
/// next `git status` runs nothing of the agent's.
#[test]
fn confined_commands_cannot_plant_git_configuration() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let ws = base.join("ws");
    let home = base.join("home");
    for d in [
        "ws/sub",
        "ws/fresh",
        "ws/fresh2",
        "ws/evil/repo/objects",
        "ws/evil/repo/refs/heads",
        "home",
    ] {
        std::fs::create_dir_all(base.join(d)).unwrap();
    }
    let ran = base.join("canary-ran");
    let canary = base.join("canary.sh");
    std::fs::write(&canary, format!("#!/bin/sh\ntouch {}\n", ran.display())).unwrap();
    std::fs::set_permissions(&canary, std::fs::Permissions::from_mode(0o755)).unwrap();
    for repo in [&ws, &ws.join("sub")] {
        let ok = std::process::Command::new("/usr/bin/git")
            .args(["init", "-q"])
            .current_dir(repo)
            .env("HOME", &home)
            .status()
            .unwrap();
        assert!(ok.success());
    }
    let config = format!("[core]\n\tfsmonitor = {}\n", canary.display());
    std::fs::write(ws.join("evil/config"), &config).unwrap();
    std::fs::write(ws.join("evil/repo/config"), &config).unwrap();
    std::fs::write(ws.join("evil/repo/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(ws.join("evil/gitfile"), "gitdir: ../evil/repo\n").unwrap();
    let before = std::fs::read(ws.join("sub/.git/config")).unwrap();
    let root = WorkspaceRoot::open(&ws).unwrap();

    // The nested repository's config, hooks and the folder itself.
    let (code, out) = confined(
        &root,
        "",
        "/usr/bin/cp",
        &["evil/config", "sub/.git/config"],
    );
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("Read-only file system"), "{out}");
    let (code, out) = confined(&root, "sub", "/usr/bin/mkdir", &[".git/hooks/x"]);
    assert_ne!(code, 0, "{out}");
    let (code, out) = confined(&root, "", "/usr/bin/mv", &["sub/.git", "sub/.git.old"]);
    assert_ne!(code, 0, "{out}");
    assert_eq!(std::fs::read(ws.join("sub/.git/config")).unwrap(), before);

    // New ones: a repository and a gitfile, each quarantined once the
    // command is over.
    let (code, out) = confined(&root, "", "/usr/bin/cp", &["-r", "evil/repo", "fresh/.git"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = confined(&root, "fresh2", "/usr/bin/cp", &["../evil/gitfile", ".git"]);
    assert_eq!(code, 0, "{out}");
    for d in ["fresh", "fresh2"] {
        assert!(
            std::fs::symlink_metadata(ws.join(d).join(".git")).is_err(),
            "{d}/.git stayed"
        );
        let q =
            std::fs::symlink_metadata(ws.join(d).join(lazaret::coordinator::confine::QUARANTINE))
                .unwrap();
        assert_eq!(q.permissions().mode() & 0o7777, 0, "{d}");
    }

    // What the user does next.
    for d in ["sub", "fresh", "fresh2", "evil", ""] {
        let _ = git_status(&home, &ws.join(d));
    }
    assert!(!ran.exists(), "the agent's fsmonitor ran on the host");
    // The control: the same config, where the user wrote it, does run.
    std::fs::write(
        ws.join("sub/.git/config"),
        format!("{}{config}", String::from_utf8_lossy(&before)),
    )
    .unwrap();
    let _ = git_status(&home, &ws.join("sub"));
    assert!(ran.exists(), "the canary is not a working fsmonitor");
}

/// Issue 26 item 7: a confined command's memory is the profile's over the
/// number that may run at once; a `grep` over one long line the agent wrote
/// stops at that bound (the host never gives it more) and says so.
#[test]
fn confined_commands_are_held_to_their_share_of_memory() {
    if !alone("confined_commands_are_held_to_their_share_of_memory") {
        return;
    }
    use lazaret::coordinator::confine::{AT_ONCE, memory_per_command, set_profile_memory};
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    // 160 MiB in one line, no newline: grep holds the whole line.
    let line = vec![b'a'; 160 << 20];
    std::fs::write(ws.join("big"), &line).unwrap();
    drop(line);
    set_profile_memory(512 << 20);
    assert_eq!(memory_per_command(), (512 << 20) / AT_ONCE as u64);
    let root = WorkspaceRoot::open(&ws).unwrap();
    let start = std::time::Instant::now();
    let (code, out) = confined(&root, "", "/usr/bin/grep", &["-c", "b", "big"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("memory exhausted"), "{out}");
    assert!(start.elapsed() < std::time::Duration::from_secs(60));
    // Within the bound it works.
    std::fs::write(ws.join("small"), "a\nb\n").unwrap();
    let (code, out) = confined(&root, "", "/usr/bin/grep", &["-c", "b", "small"]);
    assert_eq!((code, out.trim()), (0, "1"));
}

/// `lazaret exec PROFILE -- sh -c SCRIPT`: the agent's shell in a session
/// that can escalate.
fn agent(d: &common::sandbox::Domain, script: &str) -> (i32, String, String) {
    let out = d
        .cmd_raw(
            common::STANDARD_PATH,
            &["exec", d.profile, "--", "sh", "-c", script],
        )
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let (o, e) = common::text(&out);
    (out.status.code().unwrap_or(-1), o, e)
}

/// A domain whose auto-approve list also has `cp *`, `mkdir *`, `grep *`.
fn domain_with_file_tools(profile: &'static str) -> common::sandbox::Domain {
    let d = common::sandbox::Domain::new(profile);
    let config = d.s.path().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replace(
        r#""id -un", "pwd"]"#,
        r#""id -un", "pwd", "cp *", "mkdir *", "grep *"]"#,
    );
    assert!(text.contains("\"cp *\""));
    d.s.write("config.toml", &text);
    d
}

/// Issue 26 item 4, as the agent does it: from inside a real sandbox, an
/// auto-approved `cp` into a nested repository's config (read-only in the
/// sandbox), and new `.git` folders and gitfiles made by `cp`; then the
/// user's `git status` in each folder and at the top runs nothing, and the
/// coordinator's log tells the human what was quarantined.
fn agent_plants_git_through_confined_commands(profile: &'static str) {
    use std::os::unix::fs::PermissionsExt;
    let d = domain_with_file_tools(profile);
    let ws = d.ws();
    let ran = d.s.path().join("CANARY-RAN");
    let canary = d.s.write(
        "canary.sh",
        &format!("#!/bin/sh\ntouch {}\n", ran.display()),
    );
    std::fs::set_permissions(&canary, std::fs::Permissions::from_mode(0o755)).unwrap();
    let user_git = |dir: &Path, args: &[&str]| {
        let out = common::as_test_user(
            Path::new("/usr/bin/git"),
            &common::user_home(),
            common::STANDARD_PATH,
            &[],
        )
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
        common::text(&out)
    };
    // The user's own nested repository, there before the domain starts.
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    d.s.chown(&ws.join("sub"));
    user_git(&ws.join("sub"), &["init", "-q"]);
    let before = std::fs::read(ws.join("sub/.git/config")).unwrap();
    let esc = common::ESCALATE;
    let script = format!(
        r#"cd /workspace && mkdir -p evil/repo/objects evil/repo/refs/heads fresh fresh2 &&
printf '[core]\n\tfsmonitor = {canary}\n' > evil/config && cp evil/config evil/repo/config &&
echo 'ref: refs/heads/main' > evil/repo/HEAD && echo 'gitdir: ../evil/repo' > evil/gitfile &&
echo x >> sub/.git/config; echo "sandbox=$?"
{esc} -- cp evil/config sub/.git/config; echo "cp-config=$?"
{esc} -- mkdir sub/.git/hooks/x; echo "mkdir-hooks=$?"
{esc} -- cp -r evil/repo fresh/.git; echo "cp-repo=$?"
{esc} -- cp evil/gitfile fresh2/.git; echo "cp-gitfile=$?"
"#,
        canary = canary.display()
    );
    let (_, out, err) = agent(&d, &script);
    eprintln!("{out}{err}");
    for refused in ["sandbox", "cp-config", "mkdir-hooks"] {
        assert!(
            !out.contains(&format!("{refused}=0")),
            "{refused}: {out}{err}"
        );
    }
    assert!(err.contains("Read-only file system"), "{out}{err}");
    assert!(
        out.contains("cp-repo=0") && out.contains("cp-gitfile=0"),
        "{out}{err}"
    );
    assert_eq!(std::fs::read(ws.join("sub/.git/config")).unwrap(), before);
    for d in ["fresh", "fresh2"] {
        assert!(
            std::fs::symlink_metadata(ws.join(d).join(".git")).is_err(),
            "{d}/.git stayed"
        );
        assert!(
            ws.join(d)
                .join(lazaret::coordinator::confine::QUARANTINE)
                .exists()
        );
    }
    // What the user does next.
    for dir in ["sub", "fresh", "fresh2", ""] {
        user_git(&ws.join(dir), &["status"]);
    }
    assert!(!ran.exists(), "the agent's fsmonitor ran on the host");
    // The control: the same line, where the user wrote it, does run.
    std::fs::write(
        ws.join("sub/.git/config"),
        format!(
            "{}[core]\n\tfsmonitor = {}\n",
            String::from_utf8_lossy(&before),
            canary.display()
        ),
    )
    .unwrap();
    user_git(&ws.join("sub"), &["status"]);
    assert!(ran.exists(), "the canary is not a working fsmonitor");
    // The human is told, in the coordinator's log.
    let out = d
        .cmd_raw(common::STANDARD_PATH, &["logs", d.profile, "-n", "0"])
        .output()
        .unwrap();
    let (log, _) = common::text(&out);
    for d in ["fresh/.git", "fresh2/.git"] {
        assert!(
            log.contains(&format!("a confined command made {d}")),
            "{d}: {log}"
        );
    }
}

#[test]
fn agent_plants_git_through_confined_commands_runc() {
    agent_plants_git_through_confined_commands("rcd");
}

#[test]
fn agent_plants_git_through_confined_commands_runsc() {
    agent_plants_git_through_confined_commands("gvd");
}

/// Issue 26 item 7, as the agent does it: an auto-approved `grep` over one
/// line of 450 MiB the agent wrote in the workspace stops at its share of
/// the profile's memory (the default 4 GiB over 10: 409 MiB) and says so;
/// the domain and the next command are fine.
#[test]
fn agent_memory_hog_through_a_confined_command_stops_at_its_bound() {
    let d = domain_with_file_tools("rc");
    let esc = common::ESCALATE;
    let script = format!(
        "cd /workspace && head -c 471859200 /dev/zero | tr '\\0' a > big && {esc} -- grep -c b big; echo \"grep=$?\"; rm -f big; {esc} -- true; echo \"after=$?\""
    );
    let start = std::time::Instant::now();
    let (_, out, err) = agent(&d, &script);
    eprintln!("{out}{err}");
    assert!(out.contains("grep=2"), "{out}{err}");
    assert!(err.contains("memory exhausted"), "{out}{err}");
    assert!(out.contains("after=0"), "{out}{err}");
    assert!(start.elapsed() < std::time::Duration::from_secs(240));
}

/// Issue 26 item 7: the memory share holds because no more than
/// [`AT_ONCE`] confined commands run at once; one more is refused with the
/// reason, and runs again once they are done.
#[test]
fn no_more_than_at_once_confined_commands_run_together() {
    if !alone("no_more_than_at_once_confined_commands_run_together") {
        return;
    }
    use lazaret::coordinator::confine::AT_ONCE;
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let root = Arc::new(WorkspaceRoot::open(&dir.path().canonicalize().unwrap()).unwrap());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let run = |root: Arc<WorkspaceRoot>, secs: &'static str| async move {
        let pinned = root.pin(Path::new("")).unwrap();
        let c = Confinement {
            ruleset: root.ruleset(false).unwrap(),
            seccomp: seccomp(false).unwrap(),
        };
        let exec = Exec::Direct {
            program: "/usr/bin/sleep".into(),
            args: vec![secs.into()],
        };
        execute(&exec, &pinned, Some(c), ExecLimits::default()).await
    };
    let results = rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..AT_ONCE + 3 {
            tasks.push(tokio::spawn(run(root.clone(), "3")));
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    let ran = results.iter().filter(|r| r.is_ok()).count();
    let refused: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(ran <= AT_ONCE, "{ran} ran at once");
    assert!(refused.len() >= 3, "{results:?}");
    assert!(
        refused
            .iter()
            .all(|e| e.contains("confined commands are running already")),
        "{refused:?}"
    );
    // Their places are free again.
    let again = rt.block_on(run(root, "0")).unwrap();
    assert_eq!(again.code, 0);
}
