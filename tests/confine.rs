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
    std::fs::write(ws.join("README"), "top\n").unwrap();
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
    // A file at the top that was there before may be written (new ones
    // may not, above).
    let (code, out) = sh(&root, "sub", "echo more >> ../README", true, false);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        std::fs::read_to_string(ws.join("README")).unwrap(),
        "top\nmore\n"
    );
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
    // Only a folder is a working directory: not a file, and not a FIFO
    // (which must not be opened: the judge would wait for a writer).
    nix::unistd::mkfifo(&ws.join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    for not_a_folder in ["sub/marker", "pipe"] {
        let e = root.pin(Path::new(not_a_folder)).unwrap_err();
        assert!(
            e.to_string().contains("Not a directory"),
            "{not_a_folder}: {e}"
        );
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

/// The real Escalation Socket, in process: the coordinator's own
/// `EscalationServer` (classification, the judge's stages, confinement,
/// the audit store) behind real mTLS, reached with the sandbox's real
/// client. What a test chooses: the auto-approve entries without and with
/// the network opt-in, what the human answers, and which audit writes
/// fail.
mod socket {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU8, Ordering};
    use std::sync::{Arc, Mutex};

    use lazaret::config::WorkspaceMode;
    pub use lazaret::coordinator::escalation::Verdict;
    use lazaret::coordinator::escalation::{
        AuditLog, EscalationServer, ExecLimits, Outcome, Prompt, RequestLimits, SessionDirectory,
        Setup,
    };
    use lazaret::coordinator::store::{Batch, Store};
    use lazaret::git_sentry::WorkspaceLayout;
    use lazaret_escalate::Response;
    use lazaret_escalate::client::{Settings, build_request, exchange};
    use lazaret_escalate::ed25519_dalek::VerifyingKey;
    use lazaret_escalate::signing::{self, SessionCredential, SessionKey};

    /// Which of the judge's audit writes fail ("the disk is full").
    pub const WRITES_OK: u8 = 0;
    pub const NO_WRITE: u8 = 1;
    /// The request's own commit goes through; the human's decision, a
    /// commit of its own, does not.
    pub const NO_DECISION: u8 = 2;

    struct Sessions {
        id: String,
        key: VerifyingKey,
        /// What the human answers each prompt; `None`: nobody is attached.
        answer: Option<Verdict>,
        asked: Arc<Mutex<Vec<Prompt>>>,
    }

    impl SessionDirectory for Sessions {
        fn key(&self, id: &str) -> Option<VerifyingKey> {
            (id == self.id).then_some(self.key)
        }
        fn ask(&self, prompt: Prompt) -> Option<tokio::sync::oneshot::Receiver<Verdict>> {
            let answer = self.answer.clone()?;
            self.asked.lock().unwrap().push(prompt);
            let (tx, rx) = tokio::sync::oneshot::channel();
            let _ = tx.send(answer);
            Some(rx)
        }
        fn tell(&self, _: &str, _: Outcome) {}
        fn withdraw(&self, _: &str, _: &str, _: &str) {}
    }

    /// The real store, failing on demand.
    struct Failing(Arc<Store>, Arc<AtomicU8>);

    impl Failing {
        fn fails(&self, batch: Option<&Batch>) -> bool {
            match self.1.load(Ordering::SeqCst) {
                NO_WRITE => true,
                // A decision's own commit: no request in it.
                NO_DECISION => {
                    batch.is_some_and(|b| b.first_sighting.is_none() && !b.decisions.is_empty())
                }
                _ => false,
            }
        }
    }

    impl AuditLog for Failing {
        fn append(&self, kind: &'static str, data: serde_json::Value) -> Result<(), String> {
            if self.fails(None) {
                return Err("the disk is full".into());
            }
            AuditLog::append(self.0.as_ref(), kind, data)
        }
        fn commit(&self, batch: Batch) -> Result<bool, String> {
            if self.fails(Some(&batch)) {
                return Err("the disk is full".into());
            }
            AuditLog::commit(self.0.as_ref(), batch)
        }
    }

    pub struct Socket {
        pub ws: PathBuf,
        /// Which writes fail: [`WRITES_OK`], [`NO_WRITE`], [`NO_DECISION`].
        pub failing: Arc<AtomicU8>,
        /// What the human was asked.
        pub asked: Arc<Mutex<Vec<Prompt>>>,
        pub store: Arc<Store>,
        settings: Settings,
        cred: SessionCredential,
        _task: tokio::task::JoinHandle<()>,
        _rt: tokio::runtime::Runtime,
        _dir: tempfile::TempDir,
    }

    impl Socket {
        pub fn new(auto_approve: &[&str], network: &[&str], answer: Option<Verdict>) -> Socket {
            let argvs = |l: &[&str]| -> Vec<Vec<String>> {
                l.iter()
                    .map(|e| e.split(' ').map(str::to_string).collect())
                    .collect()
            };
            let dir = tempfile::tempdir().unwrap();
            let base = dir.path().canonicalize().unwrap();
            let ws = base.join("ws");
            std::fs::create_dir_all(ws.join("sub")).unwrap();
            let store = Arc::new(Store::open(&base.join("state.redb")).unwrap());
            let failing = Arc::new(AtomicU8::new(WRITES_OK));
            let rt = tokio::runtime::Runtime::new().unwrap();
            let server = EscalationServer::new(Setup {
                profile: "dev",
                domain_hash: "0123456789ab",
                escalation_dir: &base.join("esc"),
                certs_dir: &base.join("certs"),
                host_workspace: &ws,
                // A folder that is no repository, in direct mode: what
                // the agent's programs are is still judged.
                layout: Some(
                    WorkspaceLayout::decide(
                        &ws,
                        &base.join("domain"),
                        "lazaret/agent-dev",
                        Some(WorkspaceMode::Direct),
                    )
                    .unwrap(),
                ),
                // As the coordinator passes them: every entry, and
                // those that opted in again.
                auto_approve: &argvs(&[auto_approve, network].concat()),
                auto_approve_network: &argvs(network),
                limits: ExecLimits::default(),
                requests: RequestLimits::default(),
                store: store.clone(),
                audit: Arc::new(Failing(store.clone(), failing.clone())),
            })
            .unwrap();
            // Without Landlock nothing auto-approves, and the tests would
            // see only humans: that is no test of the confinement.
            assert!(
                server.support.available(),
                "Landlock is missing on this host ({:?}): auto-approved commands cannot be confined, so this test cannot run",
                server.support
            );
            let settings = Settings {
                socket: server.socket.clone(),
                certs_dir: base.join("certs"),
                timeout: Some(std::time::Duration::from_secs(20)),
            };
            let key = SessionKey::generate().unwrap();
            let id = uuid::Uuid::new_v4().to_string();
            let asked = Arc::new(Mutex::new(Vec::new()));
            let sessions = Arc::new(Sessions {
                id: id.clone(),
                key: key.public_key(),
                answer,
                asked: asked.clone(),
            });
            let task = {
                let _enter = rt.enter();
                Arc::new(server).serve(sessions).unwrap()
            };
            Socket {
                ws,
                failing,
                asked,
                store,
                settings,
                cred: key.delegate(&id, signing::unix_now() + 600).unwrap(),
                _task: task,
                _rt: rt,
                _dir: dir,
            }
        }

        /// Sends `command` from `/workspace/sub` and waits for the answer.
        pub fn send(&self, command: &str) -> Response {
            let req = build_request(&self.cred, "dev", "/workspace/sub", command, "test").unwrap();
            exchange(&self.settings, &req).unwrap()
        }

        /// Every prompt the human was asked, in order.
        pub fn prompts(&self) -> Vec<Prompt> {
            self.asked.lock().unwrap().clone()
        }

        /// The commands the human was asked about, in order.
        pub fn asked(&self) -> Vec<String> {
            self.prompts().into_iter().map(|p| p.command).collect()
        }

        pub fn fail(&self, which: u8) {
            self.failing.store(which, Ordering::SeqCst);
        }

        /// The `decision` of every escalation-decision record, in order.
        pub fn decisions(&self) -> Vec<String> {
            self.store
                .records()
                .unwrap()
                .into_iter()
                .filter(|r| r.kind == "escalation-decision")
                .filter_map(|r| r.data["decision"].as_str().map(str::to_string))
                .collect()
        }
    }
}

/// A request whose audit record cannot be written does not run: the real
/// Escalation Socket (in process), a real mTLS client, an audit log that
/// fails on demand.
#[test]
fn a_request_that_cannot_be_audited_does_not_run() {
    let s = socket::Socket::new(&["touch *"], &[], None);
    s.fail(socket::NO_WRITE);
    let r = s.send("touch unaudited");
    assert_eq!(r.status, lazaret_escalate::Status::Error, "{r:?}");
    assert!(format!("{r:?}").contains("audit log"), "{r:?}");
    assert!(!s.ws.join("sub/unaudited").exists(), "it ran");
    // The control: with the audit log writable, the same request runs.
    s.fail(socket::WRITES_OK);
    let r = s.send("touch audited");
    assert_eq!(r.status, lazaret_escalate::Status::Approved, "{r:?}");
    assert!(s.ws.join("sub/audited").exists());
}

/// issue 41: a command the human approves (or edits, then approves) does
/// not run when its decision record cannot be written, though its request
/// was recorded: the judge's human path, over the real socket.
#[test]
fn a_human_approval_that_cannot_be_audited_does_not_run() {
    use lazaret_escalate::Status;
    use socket::Verdict;
    // `touch` is not auto-approved here: every request goes to the human.
    let approving = socket::Socket::new(&["date"], &[], Some(Verdict::Approve));
    approving.fail(socket::NO_DECISION);
    let r = approving.send("touch approved");
    assert_eq!(r.status, Status::Error, "{r:?}");
    assert!(
        r.stderr
            .contains("decision could not be written to the audit log"),
        "{r:?}"
    );
    assert!(!approving.ws.join("sub/approved").exists(), "it ran");
    // The human was asked (the request itself was recorded): it is the
    // decision's record alone that was missing.
    assert_eq!(approving.asked(), vec!["touch approved"]);
    assert!(approving.decisions().is_empty());
    // An edit is a decision too.
    let editing = socket::Socket::new(
        &["date"],
        &[],
        Some(Verdict::Edit {
            command: "touch edited".into(),
        }),
    );
    editing.fail(socket::NO_DECISION);
    let r = editing.send("touch asked");
    assert_eq!(r.status, Status::Error, "{r:?}");
    assert!(!editing.ws.join("sub/edited").exists(), "the edit ran");
    assert!(!editing.ws.join("sub/asked").exists(), "the original ran");
    // The control: with the decision written, both run.
    approving.fail(socket::WRITES_OK);
    let r = approving.send("touch approved");
    assert_eq!(r.status, Status::Approved, "{r:?}");
    assert!(approving.ws.join("sub/approved").exists());
    assert_eq!(approving.decisions(), vec!["approved"]);
    editing.fail(socket::WRITES_OK);
    let r = editing.send("touch asked");
    assert_eq!(r.status, Status::Approved, "{r:?}");
    assert!(editing.ws.join("sub/edited").exists());
    assert_eq!(editing.decisions(), vec!["edited"]);
}

/// An agent's argument that leads out of the workspace through a symlink
/// it planted (or `..`) goes to a human (none here: denied, with why)
/// even under an auto-approve `*` entry; one that stays inside runs. The
/// judge's probe, over the real socket, on the real file system.
#[test]
fn an_argument_leading_out_through_a_symlink_goes_to_a_human() {
    use lazaret_escalate::Status;
    let s = socket::Socket::new(&["cat *"], &[], None);
    let outside = s.ws.parent().unwrap().join("secret");
    std::fs::write(&outside, "CANARY-SECRET").unwrap();
    std::fs::write(s.ws.join("sub/inside"), "inside").unwrap();
    std::os::unix::fs::symlink("../../secret", s.ws.join("sub/link")).unwrap();
    std::os::unix::fs::symlink("..", s.ws.join("sub/up")).unwrap();
    std::os::unix::fs::symlink("inside", s.ws.join("sub/near")).unwrap();
    for command in ["cat link", "cat up/../secret", "cat ../../secret"] {
        let r = s.send(command);
        assert_eq!(r.status, Status::Denied, "{command}: {r:?}");
        assert!(
            r.denied_reason
                .as_deref()
                .is_some_and(|w| w.contains("outside the workspace")),
            "{command}: {r:?}"
        );
        assert!(!r.stdout.contains("CANARY"), "{command}: {r:?}");
    }
    // A symlink that stays inside is the workspace's own.
    let r = s.send("cat near");
    assert_eq!(r.status, Status::Approved, "{r:?}");
    assert_eq!(r.stdout, "inside");
    // A path that does not exist yet is judged by the part that does: out
    // through the symlink, or inside.
    for (command, out) in [
        ("cat link/new", true),
        ("cat up/../../new", true),
        ("cat new/x", false),
    ] {
        let r = s.send(command);
        let refused = r
            .denied_reason
            .as_deref()
            .is_some_and(|w| w.contains("outside the workspace"));
        assert_eq!(refused, out, "{command}: {r:?}");
    }
    // A FIFO the agent names is judged without being opened: the judge
    // does not wait for a writer that never comes (`ls` does not open it).
    let s = socket::Socket::new(&["ls *"], &[], None);
    nix::unistd::mkfifo(&s.ws.join("sub/pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let r = s.send("ls pipe");
    assert_eq!(r.status, Status::Approved, "{r:?}");
    assert_eq!(r.stdout.trim(), "pipe", "{r:?}");
}

/// What the judge asks the human: the reason for asking, what of the
/// agent's the command will run (with the review), a denial's reason as
/// the human wrote it (or a default for a blank one), and the decision's
/// record with the exact argv when the command is short.
#[test]
fn the_human_is_asked_with_what_the_command_runs_of_the_agents() {
    use lazaret_escalate::Status;
    use socket::Verdict;
    let deny = |reason: &str| Verdict::Deny {
        reason: Some(reason.into()),
    };
    let s = socket::Socket::new(&["date"], &[], Some(deny("not now")));
    std::fs::write(s.ws.join("sub/build.sh"), "#!/bin/sh\necho agent\n").unwrap();
    let r = s.send("./build.sh --all");
    assert_eq!(r.status, Status::Denied, "{r:?}");
    assert_eq!(r.denied_reason.as_deref(), Some("not now"), "{r:?}");
    let asked = s.prompts();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(
        asked[0].reads.iter().any(|l| l.contains("./build.sh")),
        "{asked:?}"
    );
    assert!(!asked[0].review.is_empty(), "{asked:?}");
    // A command that runs nothing of the agent's comes without either.
    let _ = s.send("uname -a");
    let asked = s.prompts();
    assert!(
        asked[1].reads.is_empty() && asked[1].review.is_empty(),
        "{asked:?}"
    );

    let blank = socket::Socket::new(&["date"], &[], Some(deny("  ")));
    let r = blank.send("uname");
    assert_eq!(
        r.denied_reason.as_deref(),
        Some("denied by the human"),
        "{r:?}"
    );

    // The decision's record keeps the argv of a short command; a long one
    // is kept as a hash and a preview, with no argv.
    let records = |s: &socket::Socket| -> Vec<serde_json::Value> {
        s.store
            .records()
            .unwrap()
            .into_iter()
            .filter(|r| r.kind == "escalation-decision")
            .map(|r| r.data)
            .collect()
    };
    let argv = &records(&s)[0]["argv"];
    assert_eq!(argv, &serde_json::json!(["./build.sh", "--all"]), "{argv}");
    let long = format!("echo {}", "x".repeat(2000));
    let _ = s.send(&long);
    let last = records(&s).pop().unwrap();
    assert!(last["argv"].is_null(), "{last}");
}

/// A TCP listener on loopback that counts the connections it accepts.
fn counting_listener() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::Write;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    std::thread::spawn(move || {
        for mut conn in l.incoming().flatten() {
            c.fetch_add(1, Ordering::SeqCst);
            let _ = conn.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 7\r\n\r\nreached");
        }
    });
    (port, count)
}

/// issue 41: an auto-approve entry without the network opt-in cannot open
/// a TCP connection, even to loopback; one with it can. Through the judge
/// (which picks the confinement by the matching entry), over the real
/// socket, with a real program and a real listener.
#[test]
fn only_entries_opted_into_the_network_connect() {
    use lazaret_escalate::Status;
    use std::sync::atomic::Ordering;
    assert!(
        Path::new("/usr/bin/curl").exists(),
        "this test needs curl at /usr/bin/curl (apt-get install curl)"
    );
    let (port, accepted) = counting_listener();
    // The URL is the user's word in the entry (an agent's URL argument
    // would go to a human: it names something outside the workspace).
    let quiet = format!("curl --silent --max-time 10 http://127.0.0.1:{port}/");
    let shown = format!("curl --show-error --max-time 10 http://127.0.0.1:{port}/");
    let s = socket::Socket::new(&[&quiet], &[&shown], None);
    let r = s.send(&quiet);
    // Auto-approved (no human here), run, and refused its connection.
    assert_eq!(r.status, Status::Approved, "{r:?}");
    assert_ne!(r.exit_code, Some(0), "curl connected: {r:?}");
    assert!(!r.stdout.contains("reached"), "{r:?}");
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "a connection arrived");
    // The control: the entry that opted in reaches the same listener.
    let r = s.send(&shown);
    assert_eq!(r.status, Status::Approved, "{r:?}");
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    assert_eq!(r.stdout, "reached", "{r:?}");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    assert_eq!(s.decisions(), vec!["auto-approved", "auto-approved"]);
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
