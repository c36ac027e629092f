//! Git protection (decisions.md D1), attacked for real from inside runsc and
//! runc sandboxes: the host's `.git` stays untouchable, no agent-written code
//! runs when the host uses git, and the agent's commits reach the host on
//! their own branch only.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::sandbox::Domain;
use common::{git, text};

/// Path → (mode, contents) of every file under `root`: a byte-exact picture.
fn snapshot(root: &Path) -> BTreeMap<String, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if meta.is_dir() {
                out.insert(rel, (meta.permissions().mode(), Vec::new()));
                stack.push(p);
            } else if meta.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.insert(
                    rel,
                    (
                        meta.permissions().mode(),
                        t.display().to_string().into_bytes(),
                    ),
                );
            } else {
                out.insert(rel, (meta.permissions().mode(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

/// A host repository with a commit, a submodule's git dir and a worktree
/// entry, so that every place of the attack list exists.
fn host_repo(d: &Domain) {
    let ws = d.ws();
    git(&ws, &["init", "-q", "-b", "main"]);
    git(&ws, &["config", "user.email", "host@example.invalid"]);
    git(&ws, &["config", "user.name", "Host"]);
    d.s.write("ws/README", "hello\n");
    d.s.write("ws/src/lib.rs", "// code\n");
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-qm", "init"]);
    d.s.write("ws/.git/modules/sub/config", "[core]\n\tbare = false\n");
    d.s.write("ws/.git/worktrees/w1/commondir", "../..\n");
    d.s.write("ws/.git/worktrees/w1/gitdir", "/nowhere/.git\n");
    d.s.write("ws/.git/info/attributes", "");
    d.s.write("ws/.git/hooks/pre-commit", "#!/bin/sh\nexit 0\n");
}

/// Everything the agent may try against a read-only host `.git` at `g`:
/// each must fail with exactly the expected error (`mv_error` depends on
/// whether the mount's parent folder is writable), and the host's `.git`
/// (at `host`) must stay byte-identical.
fn attack_host_git(d: &Domain, g: &str, mv_error: &str, host: &Path) {
    let before = snapshot(host);
    let cases: &[(&str, &str)] = &[
        ("mv {g} {g}.moved", mv_error),
        ("truncate -s 0 {g}/HEAD", "Read-only file system"),
        ("echo > {g}/index", "Read-only file system"),
        ("rm -rf {g}", "Read-only file system"),
        (
            "echo '[core] fsmonitor = touch /tmp/pwned' >> {g}/config",
            "Read-only file system",
        ),
        ("echo /tmp/evil > {g}/commondir", "Read-only file system"),
        (
            "echo 'touch /tmp/pwned' > {g}/hooks/post-checkout",
            "Read-only file system",
        ),
        ("rm {g}/hooks/pre-commit", "Read-only file system"),
        (
            "echo '[core] fsmonitor = x' >> {g}/modules/sub/config",
            "Read-only file system",
        ),
        (
            "echo /tmp > {g}/worktrees/w1/commondir",
            "Read-only file system",
        ),
        (
            "echo '* filter=evil' > {g}/info/attributes",
            "Read-only file system",
        ),
        ("mkdir {g}/refs/heads/planted", "Read-only file system"),
        ("ln -s /tmp {g}/hooks2", "Read-only file system"),
    ];
    for (template, expected) in cases {
        let script = template.replace("{g}", g);
        let (code, _, err) = d.sh(&script);
        assert_ne!(code, 0, "`{script}` succeeded");
        assert!(
            err.contains(expected),
            "`{script}`: expected {expected}, got: {err}"
        );
    }
    let after = snapshot(host);
    for (path, entry) in &before {
        assert_eq!(
            after.get(path),
            Some(entry),
            "the host's .git/{path} changed"
        );
    }
    assert_eq!(
        before.len(),
        after.len(),
        "files appeared in the host's .git"
    );
}

const EBUSY: &str = "Device or resource busy";
const EROFS: &str = "Read-only file system";

/// The sync watcher, as the user runs it: `lazaret sandbox sync --watch`.
struct Watcher(std::process::Child);

impl Watcher {
    fn start(d: &Domain) -> Self {
        let mut cmd = d.cmd(common::STANDARD_PATH, &["sandbox", "sync", "--watch"]);
        cmd.process_group(0)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        Watcher(cmd.spawn().unwrap())
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let pg = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::killpg(pg, nix::sys::signal::Signal::SIGTERM);
        let _ = self.0.wait();
    }
}

fn host_ref(d: &Domain, branch: &str) -> Option<String> {
    let out = common::as_test_user(
        Path::new("/usr/bin/git"),
        &common::user_home(),
        common::STANDARD_PATH,
        &[],
    )
    .arg("-C")
    .arg(d.ws())
    .args(["rev-parse", "--verify", "--quiet", branch])
    .output()
    .unwrap();
    out.status
        .success()
        .then(|| text(&out).0.trim().to_string())
}

/// Waits (up to `limit`) for the host branch to reach `oid`; returns how long.
fn wait_for_ref(d: &Domain, branch: &str, oid: &str, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if host_ref(d, branch).as_deref() == Some(oid) {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

fn isolated_mode(profile: &'static str) {
    let d = Domain::new(profile);
    host_repo(&d);
    let ws = d.ws();
    let dotgit = ws.join(".git");
    let canary = d.s.path().join("CANARY");
    let before_tree = snapshot(&ws);
    let index_before = std::fs::read(dotgit.join("index")).unwrap();
    d.up();
    let branch = format!("lazaret/agent-{profile}");

    // The agent works on its own branch, from the host's commit.
    let (code, out, err) = d.sh("cd /workspace && git status --short --branch && cat README");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("## {branch}\nhello\n"));

    // Attacks on both mounts of the host .git, then again after the host
    // rewrote its config by rename (which detaches a file mount, D1).
    let g = dotgit.display().to_string();
    attack_host_git(&d, &g, EBUSY, &dotgit);
    attack_host_git(&d, "/run/lazaret/upstream.git", EROFS, &dotgit);
    git(&ws, &["config", "lazaret.visible", "yes"]);
    attack_host_git(&d, &g, EBUSY, &dotgit);
    attack_host_git(&d, "/run/lazaret/upstream.git", EROFS, &dotgit);
    // ... and the host's config change is visible inside, without a restart.
    let (_, out, _) = d.sh("git config -f /run/lazaret/upstream.git/config lazaret.visible");
    assert_eq!(out.trim(), "yes");

    // Agent-written traps in its own repository and workspace.
    let c = canary.display();
    let (code, _, err) = d.sh(&format!(
        "cd /workspace && git config core.fsmonitor 'touch {c}' && git config core.hooksPath /workspace/.evilhooks \
         && mkdir -p .evilhooks && printf '#!/bin/sh\\ntouch {c}\\n' > .evilhooks/post-checkout && chmod +x .evilhooks/post-checkout \
         && mkdir -p .vscode .devcontainer .claude && echo '{{}}' > .vscode/tasks.json \
         && echo '{{}}' > .devcontainer/devcontainer.json && echo '{{}}' > .claude/settings.json"
    ));
    assert_eq!(code, 0, "{err}");
    for f in [
        ".vscode/tasks.json",
        ".devcontainer/devcontainer.json",
        ".claude/settings.json",
    ] {
        assert!(!ws.join(f).exists(), "{f} reached the host");
    }

    // A commit reaches the host branch, and only that ref.
    let watcher = Watcher::start(&d);
    let (code, _, err) = d.sh(
        "cd /workspace && git -c core.fsmonitor=false config user.email a@x && git config user.name agent \
         && echo agent > agent.txt && blob=$(git hash-object -w agent.txt) \
         && git update-index --add --cacheinfo 100644,$blob,.vscode/settings.json \
         && git add agent.txt && git -c core.hooksPath=/dev/null commit -qm 'agent work' && git rev-parse HEAD",
    );
    assert_eq!(code, 0, "{err}");
    let (_, oid, _) = d.sh("cd /workspace && git rev-parse HEAD");
    let oid = oid.trim().to_string();
    assert!(
        wait_for_ref(&d, &branch, &oid, Duration::from_secs(5)).is_some(),
        "the agent's commit did not reach the host"
    );
    // The host's index is byte-identical (propagation never touches it).
    assert_eq!(std::fs::read(dotgit.join("index")).unwrap(), index_before);
    let refs = git(&ws, &["for-each-ref", "--format=%(refname)"]);
    assert_eq!(refs, format!("refs/heads/{branch}\nrefs/heads/main\n"));

    // A host commit is visible inside without a restart.
    d.s.write("ws/host.txt", "host\n");
    git(&ws, &["add", "host.txt"]);
    git(&ws, &["commit", "-qm", "host work"]);
    let host_head = git(&ws, &["rev-parse", "HEAD"]);
    let (code, out, err) =
        d.sh("cd /workspace && git fetch -q origin && git rev-parse origin/main");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), host_head.trim());

    // Host HEAD, index and working tree are as the host left them: only the
    // host's own commit changed them.
    let after_tree = snapshot(&ws);
    for (path, entry) in &before_tree {
        if path.starts_with(".git") || path == "host.txt" {
            continue;
        }
        assert_eq!(
            after_tree.get(path),
            Some(entry),
            "{path} changed on the host"
        );
    }
    let new_files: Vec<&String> = after_tree
        .keys()
        .filter(|p| !before_tree.contains_key(*p) && !p.starts_with(".git") && *p != "host.txt")
        .collect();
    assert!(
        new_files.is_empty(),
        "files appeared on the host: {new_files:?}"
    );
    assert_eq!(
        git(&ws, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/main"
    );

    // The host uses git as usual on everything the agent did: no canary.
    git(&ws, &["status"]);
    git(&ws, &["log", "-p", &branch]);
    git(&ws, &["diff", &format!("main...{branch}")]);
    git(&ws, &["checkout", "-q", &branch]);
    git(&ws, &["checkout", "-q", "main"]);
    let review = d.lazaret(&["review"]);
    let (rout, rerr) = text(&review);
    assert_eq!(review.status.code(), Some(3), "{rout}{rerr}");
    assert!(
        rout.contains("in a folder masked in the sandbox: .vscode/settings.json"),
        "{rout}"
    );
    assert!(!canary.exists(), "agent-written code ran on the host");

    // Propagation latency: 20 commits, median.
    let mut latencies = Vec::new();
    for i in 0..20 {
        let (code, out, err) = d.sh(&format!(
            "cd /workspace && echo {i} > n.txt && git add n.txt && git -c core.hooksPath=/dev/null commit -qm n{i} && git rev-parse HEAD"
        ));
        assert_eq!(code, 0, "{err}");
        let lat = wait_for_ref(&d, &branch, out.trim(), Duration::from_secs(5))
            .unwrap_or_else(|| panic!("commit {i} did not reach the host within 5 s"));
        latencies.push(lat);
    }
    latencies.sort();
    let median = latencies[latencies.len() / 2];
    eprintln!(
        "[{profile}] propagation latency over 20 commits: median {:.0} ms, max {:.0} ms",
        median.as_secs_f64() * 1000.0,
        latencies.last().unwrap().as_secs_f64() * 1000.0
    );
    assert!(
        median < Duration::from_secs(1),
        "median {median:?} is over a second"
    );
    drop(watcher);
    d.down();
    d.assert_gone();
    assert!(!canary.exists());
}

#[test]
fn isolated_mode_under_runsc() {
    isolated_mode("gv");
}

#[test]
fn isolated_mode_under_runc() {
    isolated_mode("rc");
}

fn direct_mode(profile: &'static str) {
    let d = Domain::new(profile);
    host_repo(&d);
    let ws = d.ws();
    let head_before = std::fs::read(ws.join(".git/HEAD")).unwrap();
    let index_before = std::fs::read(ws.join(".git/index")).unwrap();
    d.up();
    let branch = format!("lazaret/agent-{profile}");
    // /workspace is the host folder; its .git is a read-only directory.
    let dotgit = ws.join(".git");
    attack_host_git(&d, "/workspace/.git", EBUSY, &dotgit);
    attack_host_git(&d, &dotgit.display().to_string(), EBUSY, &dotgit);
    let (code, _, err) =
        d.sh("mkdir -p /workspace/.vscode && echo '{}' > /workspace/.vscode/tasks.json");
    assert_eq!(code, 0, "{err}");
    assert!(
        !ws.join(".vscode/tasks.json").exists(),
        "a masked file reached the host"
    );

    // The agent's git is its own, through GIT_DIR, on its branch.
    let (code, out, err) = d.sh(
        "cd /workspace && echo $GIT_DIR && git config user.email a@x && git config user.name agent \
         && echo agent > agent.txt && git add agent.txt && git commit -qm 'agent work' && git rev-parse HEAD && git symbolic-ref HEAD",
    );
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "/run/lazaret/agent.git");
    assert_eq!(lines[2], format!("refs/heads/{branch}"));
    let sync = d.lazaret(&["sandbox", "sync"]);
    assert!(sync.status.success(), "{}", text(&sync).1);
    assert_eq!(host_ref(&d, &branch).as_deref(), Some(lines[1]));
    // The host's HEAD and index are untouched; the file is in the folder.
    assert_eq!(std::fs::read(ws.join(".git/HEAD")).unwrap(), head_before);
    assert_eq!(std::fs::read(ws.join(".git/index")).unwrap(), index_before);
    assert_eq!(
        std::fs::read_to_string(ws.join("agent.txt")).unwrap(),
        "agent\n"
    );
    // The review lists the working tree's traps.
    let (code, _, err) = d.sh("cd /workspace && mkfifo trap.fifo && ln -s /etc/passwd leak && mkdir -p vendor/x/.git && echo x > Makefile");
    assert_eq!(code, 0, "{err}");
    let review = d.lazaret(&["review"]);
    let (rout, _) = text(&review);
    // gVisor keeps FIFOs inside the sandbox; under runc one lands on the
    // host, and then the review must name it.
    let fifo_on_host = std::fs::symlink_metadata(ws.join("trap.fifo"))
        .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_fifo(&m.file_type()));
    assert_eq!(
        fifo_on_host,
        profile == "rcd",
        "FIFO on host: {fifo_on_host}"
    );
    assert_eq!(
        rout.contains("FIFO (can hang host tools): trap.fifo"),
        fifo_on_host,
        "{rout}"
    );
    for needle in [
        "symlink leaving the workspace: leak -> /etc/passwd",
        "git repository or gitfile made or changed by the agent (host git obeys it): vendor/x/.git",
        "executed by host tools: Makefile",
    ] {
        assert!(rout.contains(needle), "review lacks `{needle}`:\n{rout}");
    }
    d.down();
    d.assert_gone();
}

#[test]
fn direct_mode_under_runsc() {
    direct_mode("gvd");
}

#[test]
fn direct_mode_under_runc() {
    direct_mode("rcd");
}
