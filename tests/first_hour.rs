//! Issue 27, "the first hour as a new user": each numbered item, driven
//! through the real binary as the user who would run it.

mod common;

use std::path::{Path, PathBuf};

use common::sandbox::Domain;
use common::{STANDARD_PATH, Scratch, lazaret_env, text};

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("example.toml")
}

/// `lazaret --config CFG ARGS` in `ws` with HOME `home`, no terminal and no
/// user configuration: (exit code, stdout, stderr).
fn run_with(home: &Path, ws: &Path, cfg: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let mut all = vec!["--config", cfg.to_str().unwrap()];
    all.extend_from_slice(args);
    run_env(home, ws, &[("LAZARET_USER_CONFIG", "")], &all)
}

/// `lazaret ARGS` in `ws` with HOME `home`, the variables `extra` and no
/// terminal: (exit code, stdout, stderr).
fn run_env(
    home: &Path,
    ws: &Path,
    extra: &[(&str, &str)],
    args: &[&str],
) -> (Option<i32>, String, String) {
    let out = lazaret_env(home, ws, STANDARD_PATH, extra, args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let (o, e) = text(&out);
    (out.status.code(), o, e)
}

/// Item 1: a key forwarded with `env?:NAME` and unset on the host is left
/// out of the sandbox (podman's `-e NAME`), and the start goes on; set, it
/// is forwarded.
#[test]
fn optional_key_unset_starts_without_it() {
    let d = Domain::new("optkey");
    d.add_config(
        "[profiles.optkey]\nimage = \"localhost/lazaret/trixie:latest\"\nruntime = \"runc\"\n\
         env = { K = \"env?:I27_UNSET_KEY\", S = \"env?:LAZARET_TEST_FWD\" }\n",
    );
    let (code, out, err) = d.exec_sh("echo K=${K-unset} S=${S-unset}");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("K=unset S=forwarded"), "{out}{err}");
}

/// Item 1: the claude profile `lazaret init` writes starts with no
/// ANTHROPIC_API_KEY on the host (the subscription login), as its comment
/// and the guide say; `config check` only notes the missing key.
#[test]
fn init_claude_profile_needs_no_key() {
    let s = Scratch::new();
    let home = s.mkdir("home");
    let ws = s.mkdir("ws");
    let cfg = s.write("c.toml", &std::fs::read_to_string(example()).unwrap());
    let run = |args: &[&str]| run_with(&home, &ws, &cfg, args);
    let (code, out, err) = run(&["config", "check"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("note: profile claude: $ANTHROPIC_API_KEY is not set here; the sandbox starts without it"),
        "{out}"
    );
    assert!(!out.contains("warning: profile claude"), "{out}");
    // Starting it goes past the key: what stops it here, if anything, is
    // the agent's image, which the message says how to build.
    let (code, out, err) = run(&["exec", "claude", "--", "true"]);
    assert!(!err.contains("ANTHROPIC_API_KEY"), "{err}");
    assert!(
        code == Some(0) || err.contains("lazaret image build --agent claude"),
        "{code:?} {out}{err}"
    );
    // A required key is still refused at once, with both ways out.
    let (code, _, err) = run(&["exec", "aider", "--", "true"]);
    assert_ne!(code, Some(0));
    assert!(
        err.contains("profile aider requires $OPENAI_API_KEY, not set here")
            && err.contains("env?:NAME"),
        "{err}"
    );
}

/// Item 3: every refusal Lazaret can know before starting anything (broad
/// workspace, missing key, missing image, bad configuration, unknown
/// profile) comes at once, once, with what to do, and exit code 125 from
/// `shell`, `exec` and `ui` alike; no container, coordinator or domain
/// folder is made.
#[test]
fn known_refusals_come_before_anything_starts() {
    let s = Scratch::new();
    let home = s.mkdir("home");
    let ws = s.mkdir("home/project");
    let data = s.path().join("data");
    let base = format!(
        "[storage]\ndata_root = \"{}\"\n[network]\ndefault_allow = []\ndefault_deny = []\n\
         [escalation]\nenabled = true\nsocket_dir = \"{}/sockets\"\n\
         [profiles.keyed]\nimage = \"localhost/lazaret/trixie:latest\"\nenv = {{ K = \"env:I27_UNSET_KEY\" }}\n\
         [profiles.noimage]\nimage = \"localhost/lazaret/i27-never-built:1\"\n\
         [profiles.plain]\nimage = \"localhost/lazaret/trixie:latest\"\n",
        data.display(),
        s.path().display()
    );
    s.write("good.toml", &base);
    s.write(
        "bad.toml",
        &format!("{base}[profiles.plain.limitz]\nmemory = \"1GiB\"\n"),
    );
    // (what, config, cwd, profile, the message's words)
    let cases: &[(&str, &str, &Path, &str, &str)] = &[
        (
            "home folder",
            "good.toml",
            &home,
            "plain",
            "--allow-broad-workspace",
        ),
        (
            "unset key",
            "good.toml",
            &ws,
            "keyed",
            "requires $I27_UNSET_KEY, not set here",
        ),
        (
            "missing image",
            "good.toml",
            &ws,
            "noimage",
            "does not exist; build it first",
        ),
        ("bad config", "bad.toml", &ws, "plain", "limitz"),
        (
            "unknown profile",
            "good.toml",
            &ws,
            "nosuch",
            "no profile named `nosuch`",
        ),
    ];
    for (what, cfg, cwd, profile, words) in cases {
        let cfg = s.path().join(cfg);
        for cmd in [
            vec!["exec", profile, "--", "true"],
            vec!["shell", profile],
            vec!["ui", profile],
        ] {
            let started = std::time::Instant::now();
            let (code, o, e) = run_with(&home, cwd, &cfg, &cmd);
            let took = started.elapsed();
            let said = format!(
                "{what}, `{}`: exit {code:?} after {took:?}:\n{o}{e}",
                cmd.join(" ")
            );
            assert_eq!(code, Some(125), "{said}");
            assert!(took < std::time::Duration::from_secs(3), "{said}");
            assert_eq!(e.matches(words).count(), 1, "said once: {said}");
            assert!(!e.contains("did not open its socket"), "{said}");
            assert!(
                !data.join("domains").exists(),
                "a domain folder was made: {said}"
            );
            eprintln!("{what}, `{}`: refused in {took:?}", cmd.join(" "));
        }
    }
}

/// Item 3: a domain folder that `domains list` calls broken (a start that
/// failed before it could say whose it is) is removed by `domains prune`
/// and by `down --all`.
#[test]
fn broken_domains_are_pruned_and_brought_down() {
    let s = Scratch::new();
    let home = s.mkdir("home");
    let ws = s.mkdir("ws");
    let data = s.path().join("data");
    let cfg = s.write(
        "c.toml",
        &format!(
            "[storage]\ndata_root = \"{}\"\n[profiles.plain]\nimage = \"localhost/lazaret/trixie:latest\"\n",
            data.display()
        ),
    );
    // A runtime folder of this test's own: `down --all` must reach no
    // other test's coordinator (tests run at once as one user).
    let xdg = s.mkdir("xdg");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let run = |args: &[&str]| {
        let mut all = vec!["--config", cfg.to_str().unwrap()];
        all.extend_from_slice(args);
        let extra = [
            ("LAZARET_USER_CONFIG", ""),
            ("XDG_RUNTIME_DIR", xdg.to_str().unwrap()),
        ];
        run_env(&home, &ws, &extra, &all)
    };
    for (hash, how) in [
        (
            "a27a27a27a27",
            vec!["domains", "prune", "--older-than", "30d", "--force"],
        ),
        ("b27b27b27b27", vec!["down", "--all"]),
    ] {
        s.write(
            &format!("data/domains/{hash}/coordinator.log"),
            "lazaret: the start failed\n",
        );
        let (_, o, e) = run(&["domains", "list"]);
        assert!(
            o.lines()
                .any(|l| l.starts_with(hash) && l.contains("broken")),
            "{o}{e}"
        );
        let (code, o, e) = run(&how);
        assert_eq!(code, Some(0), "{how:?}: {o}{e}");
        assert!(o.contains(hash), "{how:?} says what it removed: {o}{e}");
        assert!(
            !data.join("domains").join(hash).exists(),
            "{how:?} left {hash}: {o}{e}"
        );
        let (_, o, _) = run(&["domains", "list"]);
        assert!(!o.contains(hash), "{o}");
    }
}

/// Item 3: a new tab for a profile whose required key is unset is refused
/// in the dialog at once, and nothing of its domain is made.
#[test]
fn new_tab_refusal_is_said_in_the_dialog_at_once() {
    let d = Domain::new("rc");
    d.add_config(
        "[profiles.aakeyed]\nimage = \"localhost/lazaret/trixie:latest\"\nruntime = \"runc\"\n\
         env = { K = \"env:I27_UNSET_KEY\" }\n",
    );
    let keyed = d.other("aakeyed");
    let t = d.tmux(120, 34, "ui rc", None);
    t.wait_for(120, "the rc tab's shell", |s| s.contains("root@"));
    t.send(&["C-a", "c"]);
    t.wait_for(20, "the new-tab dialog", |s| s.contains("Enter open"));
    t.send(&["Home"]);
    let asked = std::time::Instant::now();
    t.send(&["Enter"]);
    let s = t.wait_for(5, "the refusal in the dialog", |s| {
        s.contains("requires $I27_UNSET_KEY")
    });
    eprintln!("new tab refused in {:?}", asked.elapsed());
    assert!(s.contains("Enter open"), "the dialog stays open:\n{s}");
    assert!(
        !d.s.path().join("data/domains").join(keyed.hash()).exists(),
        "a domain folder was made for the refused tab"
    );
    t.send(&["Escape"]);
    t.quit_ending_sessions();
    t.wait_exit(30, "lazaret ui");
    d.wait_until_gone();
}

/// A throwaway account this test makes (and removes, with the processes
/// it started there), for the first hour of a second user.
struct Account {
    name: String,
    uid: u32,
    home: PathBuf,
    /// Processes of this uid that were not ours (a deleted user's, reused).
    before: Vec<u32>,
}

impl Account {
    /// `name`, created with `create` (the test's own useradd) or already
    /// made by the program under test.
    fn adopt(name: &str) -> Account {
        let u = nix::unistd::User::from_name(name)
            .unwrap()
            .unwrap_or_else(|| panic!("no user {name}"));
        let uid = u.uid.as_raw();
        Account {
            name: name.into(),
            uid,
            home: u.dir,
            before: pids_of(uid),
        }
    }

    fn create(name: &str) -> Account {
        let out = std::process::Command::new("useradd")
            .args(["-m", "-s", "/bin/bash", name])
            .output()
            .unwrap();
        assert!(out.status.success(), "useradd: {}", text(&out).1);
        let a = Account::adopt(name);
        common::clear_uid_leftovers(a.uid);
        a
    }

    /// `program ARGS` as this account, in a login-like environment.
    fn run(&self, program: &Path, args: &[&str]) -> (Option<i32>, String, String) {
        let out = std::process::Command::new("runuser")
            .args(["-u", &self.name, "--", "env", "-i"])
            .arg(format!("HOME={}", self.home.display()))
            .arg(format!("USER={}", self.name))
            .arg(format!("LOGNAME={}", self.name))
            .arg(format!("PATH={STANDARD_PATH}"))
            .arg("LANG=C.UTF-8")
            .arg(program)
            .args(args)
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let (o, e) = text(&out);
        (out.status.code(), o, e)
    }

    fn doctor(&self) -> (Option<i32>, String, String) {
        self.run(&common::lazaret_bin(), &["doctor"])
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        // podman's pause process, and anything else this test started here.
        for pid in pids_of(self.uid) {
            if !self.before.contains(&pid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        let _ = std::process::Command::new("userdel")
            .args(["-f", "-r", &self.name])
            .output();
        common::clear_uid_leftovers(self.uid);
    }
}

fn pids_of(uid: u32) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok().map(|p| (p, e)))
        .filter(|(_, e)| e.metadata().is_ok_and(|m| m.uid() == uid))
        .map(|(p, _)| p)
        .collect()
}

/// `(check, fix)` of every FAIL line of a doctor report.
fn failed_fixes(report: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = report.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if let Some(rest) = l.strip_prefix("FAIL  ") {
            let fix = lines
                .get(i + 1)
                .and_then(|n| n.trim_start().strip_prefix("fix: "))
                .unwrap_or_else(|| panic!("FAIL without a fix:\n{report}"));
            out.push((rest.to_string(), fix.to_string()));
        }
    }
    out
}

/// Item 2: on a fresh account, every fix `lazaret doctor` prints works when
/// pasted as printed, and doctor passes afterwards.
#[test]
fn doctor_fixes_work_pasted_as_printed_on_a_fresh_account() {
    if !common::can_run_as_root("it makes a throwaway account") {
        return;
    }
    let a = Account::create(&format!("lzt27d{}", std::process::id() % 100_000));
    let (_, report, err) = a.doctor();
    let fixes = failed_fixes(&report);
    assert!(
        common::can_run(
            fixes.iter().any(|(c, _)| c.starts_with("storage driver")),
            "podman's rootless default storage here is already overlay: no fix to paste"
        ),
        "{report}{err}"
    );
    for (check, fix) in &fixes {
        // The fix as printed, before any note in parentheses.
        let command = fix.split("   (").next().unwrap();
        let (code, o, e) = a.run(Path::new("/bin/bash"), &["-c", command]);
        assert_eq!(code, Some(0), "`{command}` for {check}: {o}{e}");
        assert_eq!(e, "", "`{command}` for {check} printed errors");
    }
    let (code, report, err) = a.doctor();
    assert_eq!(code, Some(0), "{report}{err}");
    assert!(
        report.contains("ok    storage driver   overlay"),
        "{report}"
    );
}

/// Item 2: one documented command prepares a second account, new or one
/// where podman already ran (and made a vfs store): doctor passes after it.
#[test]
fn add_user_prepares_a_second_account_in_one_command() {
    if !common::can_run_as_root("it makes throwaway accounts") {
        return;
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/add-user");
    let add = |name: &str| {
        let out = std::process::Command::new(&script)
            .arg(name)
            .output()
            .unwrap();
        let (o, e) = text(&out);
        (
            out.status.success(),
            format!("scripts/add-user {name}: {o}{e}"),
        )
    };
    // A new account, made by the script (removed whatever happens next).
    let name = format!("lzt27n{}", std::process::id() % 100_000);
    let (ok, said) = add(&name);
    let fresh = nix::unistd::User::from_name(&name)
        .unwrap()
        .map(|_| Account::adopt(&name));
    assert!(ok && fresh.is_some(), "{said}");
    let fresh = fresh.unwrap();
    assert!(said.contains(&format!("creating user {name}")), "{said}");
    let (code, report, err) = fresh.doctor();
    assert_eq!(code, Some(0), "{report}{err}");
    // An account whose podman already made its store (doctor does).
    let used = Account::create(&format!("lzt27u{}", std::process::id() % 100_000));
    let (_, report, _) = used.doctor();
    assert!(report.contains("FAIL  storage driver"), "{report}");
    let (ok, said) = add(&used.name);
    assert!(ok && said.contains("removed (empty"), "{said}");
    let (code, report, err) = used.doctor();
    assert_eq!(code, Some(0), "{report}{err}");
    // Run again, it changes nothing.
    let (ok, said) = add(&used.name);
    assert!(ok && said.contains("exists: left as it is"), "{said}");
}

/// Item 4: `lazaret down` from another terminal tells each attached client
/// what stopped its domain (the command, user, pid and time, from the
/// coordinator's record), and `exec` and `shell` exit with 122 (neither
/// Lazaret's 125 nor the command's own); a workbench tab says it instead
/// of guessing at the image. The coordinator audits the request.
#[test]
fn a_client_is_told_who_stopped_its_domain() {
    let d = Domain::new("rc");
    let user = common::test_user().map_or_else(
        || {
            nix::unistd::User::from_uid(nix::unistd::getuid())
                .unwrap()
                .unwrap()
                .name
        },
        |u| u.name.clone(),
    );
    let down = || {
        let out = d.cmd_raw(STANDARD_PATH, &["down", "rc"]).output().unwrap();
        assert!(out.status.success(), "down: {}", text(&out).1);
    };
    let said_who = |s: &str| {
        s.contains("the domain was stopped by `")
            && s.contains(" down rc")
            && s.contains(&format!("(user {user}, pid "))
            && s.contains(" UTC")
    };

    // exec, without a terminal.
    let child = d
        .cmd_raw(STANDARD_PATH, &["exec", "rc", "--", "sleep", "600"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while d.sh("pgrep -x sleep").0 != 0 {
        assert!(std::time::Instant::now() < deadline, "the exec never ran");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    down();
    let out = child.wait_with_output().unwrap();
    let err = text(&out).1;
    assert_eq!(out.status.code(), Some(122), "{err}");
    assert!(said_who(&err), "{err}");
    let kinds: Vec<String> = d
        .audit_json()
        .iter()
        .map(|r| r["kind"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(kinds.iter().any(|k| k == "down-requested"), "{kinds:?}");

    // shell, on a terminal: the message and the code on the terminal it
    // returns to.
    let t = d.tmux(120, 34, "shell rc", Some("echo EXIT=$?; sleep 60"));
    t.wait_for(120, "the shell", |s| s.contains("root@"));
    down();
    let s = t.wait_for(30, "the shell's end", |s| s.contains("EXIT="));
    assert!(s.contains("EXIT=122"), "{s}");
    assert!(said_who(&s.replace('\n', "")), "{s}");
    drop(t);

    // A workbench tab says it, and nothing about the image.
    let t = d.tmux(160, 40, "ui rc", None);
    t.wait_for(120, "the tab's shell", |s| s.contains("root@"));
    down();
    let s = t.wait_for(30, "the tab's reason", |s| {
        common::pane_text(s).contains("x closes this tab")
    });
    let pane = common::pane_text(&s);
    assert!(said_who(&pane), "{s}");
    assert!(!pane.contains("not in the profile's image"), "{s}");
    t.quit_ending_sessions();
    t.wait_exit(30, "lazaret ui");
}

/// `lazaret ARGS` in `ws` with HOME `home` and the standard user file
/// (`~/.config/lazaret/config.toml`), no terminal: (exit code, stdout, stderr).
fn run_home(home: &Path, ws: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    run_env(home, ws, &[], args)
}

/// `lazaret config check`'s default profile and the shell profile's runtime.
fn default_and_shell_runtime(home: &Path, ws: &Path) -> (String, String) {
    let (code, o, e) = run_home(home, ws, &["config", "check"]);
    assert_eq!(code, Some(0), "{o}{e}");
    let line = |prefix: &str| {
        o.lines()
            .find_map(|l| l.trim_start().strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` in config check:\n{o}"))
            .to_string()
    };
    (line("default profile: "), line("runtime of shell: "))
}

/// Item 5: `lazaret init` on a machine with no configuration keeps what was
/// in force (the default profile, the shell profile under gVisor) and only
/// adds the agent profiles, and says so.
#[test]
fn init_keeps_what_was_in_force_and_says_what_it_adds() {
    let s = Scratch::new();
    let home = s.mkdir("home");
    let ws = s.mkdir("ws");
    let before = default_and_shell_runtime(&home, &ws);
    assert_eq!(
        before,
        ("shell".to_string(), "runsc (gVisor)".to_string()),
        "the built-in defaults"
    );
    let (code, o, e) = run_home(&home, &ws, &["init"]);
    assert_eq!(code, Some(0), "{o}{e}");
    let file = home.join(".config/lazaret/config.toml");
    assert!(o.contains(&format!("wrote {}", file.display())), "{o}");
    assert!(o.contains("default profile: shell (unchanged)"), "{o}");
    assert!(
        o.contains("profile shell: unchanged: runsc (gVisor), image localhost/lazaret/trixie:latest, no network"),
        "{o}"
    );
    assert!(o.contains("profiles added: aider, claude, codex"), "{o}");
    assert!(!o.contains("instead of"), "nothing changes: {o}");
    assert!(!o.contains("backup") && !o.contains(".bak"), "{o}");
    assert_eq!(default_and_shell_runtime(&home, &ws), before);
    let (_, o, _) = run_home(&home, &ws, &["config", "check"]);
    assert!(o.contains("profiles: aider, claude, codex, shell"), "{o}");
    // No host command is approved without asking, as before.
    let (_, shown, _) = run_home(&home, &ws, &["config", "show"]);
    assert!(shown.contains("auto_approve = []"), "{shown}");
}

/// Item 5: `lazaret init --force` over a file keeps the old one as a backup
/// beside it (and says where), and names each change in behaviour: the
/// default profile, a profile's runtime and network, profiles removed.
#[test]
fn init_force_keeps_a_backup_and_names_the_changes() {
    let s = Scratch::new();
    let home = s.mkdir("home");
    let ws = s.mkdir("ws");
    let mine = "default_profile = \"dev\"\n\
                [profiles.dev]\nimage = \"localhost/lazaret/trixie:latest\"\n\
                [profiles.shell]\nimage = \"localhost/lazaret/trixie:latest\"\nruntime = \"runc\"\n\
                allow_egress = [\"192.0.2.0/24\"]\n";
    let file = s.write("home/.config/lazaret/config.toml", mine);
    let (code, _, e) = run_home(&home, &ws, &["init"]);
    assert_ne!(code, Some(0));
    assert!(e.contains("already exists") && e.contains("--force"), "{e}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), mine);

    let (code, o, e) = run_home(&home, &ws, &["init", "--force"]);
    assert_eq!(code, Some(0), "{o}{e}");
    let backup = home.join(".config/lazaret/config.toml.bak");
    assert_eq!(std::fs::read_to_string(&backup).unwrap(), mine);
    assert!(
        o.contains(&format!("kept your old file as {}", backup.display())),
        "{o}"
    );
    for change in [
        "default profile: shell (was dev)",
        "profile shell: runtime runsc (gVisor) instead of runc (NOT gVisor)",
        "network no longer allows 192.0.2.0/24",
        "profiles removed: dev",
        "profiles added: aider, claude, codex",
    ] {
        assert!(o.contains(change), "`{change}` not said:\n{o}");
    }
    assert_eq!(
        default_and_shell_runtime(&home, &ws),
        ("shell".to_string(), "runsc (gVisor)".to_string())
    );
    // Again: the file is already the example; nothing is replaced or kept.
    let (code, o, e) = run_home(&home, &ws, &["init", "--force"]);
    assert_eq!(code, Some(0), "{o}{e}");
    assert!(o.contains("already the commented example"), "{o}");
    // A later replacement never overwrites an earlier backup.
    std::fs::write(&file, "# mine again\n").unwrap();
    let (code, o, e) = run_home(&home, &ws, &["init", "--force"]);
    assert_eq!(code, Some(0), "{o}{e}");
    assert_eq!(std::fs::read_to_string(&backup).unwrap(), mine);
    let second = home.join(".config/lazaret/config.toml.bak.2");
    assert_eq!(std::fs::read_to_string(&second).unwrap(), "# mine again\n");
    assert!(o.contains(&second.display().to_string()), "{o}");
}

/// Lines that look like an error: a step may print one only when the guide
/// shows that exact line for it.
fn error_lines<'a>(out: &'a str, guide_shows: &[&str]) -> Vec<&'a str> {
    const WORDS: [&str; 6] = [
        "error",
        "failed",
        "panicked",
        "cannot",
        "not found",
        "traceback",
    ];
    out.lines()
        .map(str::trim_end)
        .filter(|l| {
            let low = l.to_lowercase();
            WORDS.iter().any(|w| low.contains(w))
        })
        .filter(|l| !guide_shows.iter().any(|g| l.contains(g)))
        .collect()
}

/// The first hour of a new account, in one terminal, as the README and the
/// user guide walk it.
struct FirstHour {
    t: common::Tmux,
    /// The account's fresh home (no Lazaret configuration yet).
    home: PathBuf,
    ws: PathBuf,
}

impl FirstHour {
    /// The whole scrollback of window `w` of the session, lines joined.
    fn text_of(&self, w: &str) -> String {
        self.t
            .tmux(&["capture-pane", "-p", "-J", "-S", "-", "-t", w])
    }

    /// Runs `command` at the prompt of the first window after clearing its
    /// history; waits for it to end; returns (exit code, what it printed).
    /// Fails when it printed an error line that `guide_shows` lacks.
    fn step(&self, command: &str, secs: u64, guide_shows: &[&str]) -> (i32, String) {
        self.t.tmux(&["clear-history", "-t", "0:0"]);
        // Markers printed by printf, so the typed line never holds them;
        // numbered, so the last step's end, still on screen until the
        // shell runs `clear`, is not taken for this one's (seen under load).
        static STEPS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = STEPS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let (begin, end) = (format!("STEP-{n}-BEGIN"), format!("STEP-{n}-END rc="));
        self.t.line(&format!(
            "clear; printf 'STEP-%s-%s\\n' {n} BEGIN; {command}; printf 'STEP-%s-%s rc=%s\\n' {n} END $?"
        ));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            let all = self.text_of("0:0");
            if let Some(rc) = all
                .lines()
                .find_map(|l| l.strip_prefix(end.as_str()))
                .and_then(|r| r.trim().parse::<i32>().ok())
            {
                let printed: String = all
                    .lines()
                    .skip_while(|l| l.trim_end() != begin)
                    .skip(1)
                    .take_while(|l| !l.starts_with(end.as_str()))
                    .map(|l| format!("{l}\n"))
                    .collect();
                let bad = error_lines(&printed, guide_shows);
                assert!(
                    bad.is_empty(),
                    "`{command}` printed error lines the guide does not show for it: {bad:#?}\n{printed}"
                );
                eprintln!("$ {command}\n{printed}(exit {rc})");
                return (rc, printed);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "`{command}` did not end within {secs} s:\n{all}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// Issue 27, "Checked by": a new account (a home with no configuration)
/// walks the README's and the user guide's first hour in one terminal:
/// doctor, init, config check, a shell and the workbench with `-p shell`
/// (a second tab), a name allowed live and answered by a test DNS server on
/// this machine's loopback (10.0.2.2 from the sandbox), a refused name, net
/// show, review, down and prune. Every step shows its own outcome, and none
/// prints an error line that the guide does not show for it.
#[test]
fn first_hour_walk_of_a_new_account() {
    common::sandbox::require_base_image();
    let dns_port = first_hour_dns();
    let s = Scratch::new();
    let home = s.mkdir("home");
    let ws = s.mkdir("home/project");
    // The account is new to Lazaret; podman's store is the one set-up
    // prepared for it (with the base image), as on the machine it set up.
    for sub in [".config/containers", ".local/share/containers"] {
        s.mkdir(&format!(
            "home/{}",
            Path::new(sub).parent().unwrap().display()
        ));
        std::os::unix::fs::symlink(common::user_home().join(sub), home.join(sub)).unwrap();
        if let Some(u) = common::test_user() {
            std::os::unix::fs::lchown(home.join(sub), Some(u.uid), Some(u.gid)).unwrap();
        }
    }
    // A git project, as the guide's review expects.
    common::git(&ws, &["init", "-q", "-b", "main"]);
    s.write("home/project/README", "a project\n");
    common::git(&ws, &["add", "README"]);
    common::git(
        &ws,
        &[
            "-c",
            "user.name=dev",
            "-c",
            "user.email=dev@example.invalid",
            "commit",
            "-qm",
            "first",
        ],
    );
    let bin_dir = common::lazaret_bin().parent().unwrap().to_path_buf();
    let path = format!("{}:{STANDARD_PATH}", bin_dir.display());
    let t = common::Tmux::start(
        &ws,
        200,
        50,
        &[
            ("HOME", home.to_str().unwrap()),
            ("PATH", &path),
            ("PS1", "$ "),
            // No history file: bash would write it after the folder is gone.
            ("HISTFILE", ""),
        ],
        "bash --norc --noprofile",
    );
    let w = FirstHour { t, home, ws };
    let _down = DownOnDrop(&w);

    // README: every check passes.
    let (rc, out) = w.step("lazaret doctor", 60, &[]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.contains("checks passed: this host can run Lazaret")
            || out.contains("warning(s): this host can run Lazaret"),
        "{out}"
    );
    assert!(!out.contains("FAIL "), "{out}");

    // The guide's "Configuration": init, an edit, config check.
    let (rc, out) = w.step("lazaret init", 20, &[]);
    let file = w.home.join(".config/lazaret/config.toml");
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains(&format!("wrote {}", file.display())), "{out}");
    assert!(
        out.contains("edit it, then check it with `lazaret config check`"),
        "{out}"
    );
    // The edit: names are resolved by the test's DNS server (the sandbox
    // reaches this machine's loopback as 10.0.2.2).
    let cfg = std::fs::read_to_string(&file).unwrap();
    assert!(cfg.contains("\n[network]\n"), "{cfg}");
    s.write(
        "home/.config/lazaret/config.toml",
        &cfg.replacen(
            "\n[network]\n",
            &format!("\n[network]\ndns_upstream = \"10.0.2.2:{dns_port}\"\n"),
            1,
        ),
    );
    let (rc, out) = w.step("lazaret config check", 20, &[]);
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains("configuration is valid"), "{out}");
    assert!(out.contains("default profile: shell"), "{out}");
    assert!(
        out.contains("profiles: aider, claude, codex, shell"),
        "{out}"
    );

    // "Sessions": a shell; a command, its output, exit.
    w.t.tmux(&["clear-history", "-t", "0:0"]);
    w.t.line("clear; lazaret shell -p shell; echo \"SHELL-END rc=$?\"");
    w.t.wait_for(120, "the sandbox's shell", |s| s.contains("root@"));
    // What an agent does: a file, committed on its branch.
    w.t.line(
        "echo agent > agent-note.txt && git add agent-note.txt && \
         git -c user.name=agent -c user.email=agent@example.invalid commit -qm note && \
         echo SHELL-$((6*7))",
    );
    w.t.wait_for(20, "the command's output", |s| s.contains("SHELL-42"));
    w.t.line("exit");
    w.t.wait_for(60, "the shell's end", |s| s.contains("SHELL-END rc="));
    let out = w.text_of("0:0");
    assert!(out.contains("SHELL-END rc=0"), "{out}");
    let bad = error_lines(&out, &[]);
    assert!(bad.is_empty(), "`lazaret shell -p shell`: {bad:#?}\n{out}");

    // "The workbench": the first tab's shell, a second tab (prefix, c;
    // Enter opens the focused tab's profile and workspace), quit (prefix, q).
    w.t.tmux(&["clear-history", "-t", "0:0"]);
    w.t.line("clear; lazaret ui -p shell; echo \"UI-END rc=$?\"");
    w.t.wait_for(120, "the first tab's shell", |s| s.contains("root@"));
    w.t.line("echo TAB1-$((6*7))");
    w.t.wait_for(20, "the first tab's output", |s| s.contains("TAB1-42"));
    w.t.send(&["C-a", "c"]);
    w.t.wait_for(20, "the new-tab dialog", |s| s.contains("Enter open"));
    w.t.send(&["Enter"]);
    w.t.wait_for(60, "the second tab", |s| {
        s.contains("2:shell") && s.contains("root@") && !s.contains("TAB1-42")
    });
    w.t.line("echo TAB2-$((6*7))");
    let screen =
        w.t.wait_for(20, "the second tab's output", |s| s.contains("TAB2-42"));
    let bad = error_lines(&screen, &[]);
    assert!(bad.is_empty(), "`lazaret ui -p shell`: {bad:#?}\n{screen}");
    w.t.quit_ending_sessions();
    w.t.wait_for(60, "the workbench's end", |s| s.contains("UI-END rc="));
    let out = w.text_of("0:0");
    assert!(out.contains("UI-END rc=0"), "{out}");
    let bad = error_lines(&out, &[]);
    assert!(bad.is_empty(), "after `lazaret ui`: {bad:#?}\n{out}");

    // "Network", with a shell in another terminal holding the domain up.
    // A new window has the tmux server's environment: the account's own
    // HOME and PATH, as in the first terminal.
    let hold = format!(
        "export HOME={} PATH={}; lazaret shell -p shell; echo \"HOLD-END rc=$?\"; sleep 600",
        common::shell_quote(w.home.to_str().unwrap()),
        common::shell_quote(&path)
    );
    w.t.tmux(&[
        "new-window",
        "-d",
        "-t",
        "0:1",
        "-c",
        w.ws.to_str().unwrap(),
        &hold,
    ]);
    let other = |what: &str, pred: &dyn Fn(&str) -> bool| -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let s = w.text_of("0:1");
            if pred(&s) {
                return s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what} in the other terminal:\n{s}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let type_other = |line: &str| {
        w.t.tmux(&["send-keys", "-t", "0:1", "-l", line]);
        w.t.tmux(&["send-keys", "-t", "0:1", "Enter"]);
    };
    other("the shell", &|s| s.contains("root@"));
    let (rc, out) = w.step("lazaret net allow ok.lazaret.test --profile shell", 30, &[]);
    assert_eq!(rc, 0, "{out}");
    type_other("getent hosts ok.lazaret.test; printf 'OK-%s rc=%s\\n' LOOKUP $?");
    let s = other("the allowed lookup", &|s| s.contains("OK-LOOKUP rc="));
    assert!(s.contains("OK-LOOKUP rc=0"), "{s}");
    assert!(s.contains("198.51.100.3"), "{s}");
    type_other("getent hosts denied.lazaret.test; printf 'DENIED-%s rc=%s\\n' LOOKUP $?");
    let s = other("the refused lookup", &|s| s.contains("DENIED-LOOKUP rc="));
    assert!(
        s.contains("DENIED-LOOKUP rc=2"),
        "a refused name has no address:\n{s}"
    );
    let (rc, out) = w.step("lazaret net show --profile shell", 30, &[]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.lines().any(|l| l.trim_start().starts_with("allow")
            && l.contains("ok.lazaret.test")
            && l.contains("live: lazaret net allow, until the domain stops")),
        "the allowed name is not listed:\n{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("denied.lazaret.test") && l.contains(" x, last ")),
        "the refused name is not listed:\n{out}"
    );
    let (_, out) = w.step(
        "lazaret net why denied.lazaret.test --profile shell",
        30,
        &[],
    );
    assert!(
        out.contains("denied.lazaret.test: refused by the sidecar's resolver"),
        "{out}"
    );

    // "The agent's branch": review what the agent changed.
    let (rc, out) = w.step("lazaret review --profile shell", 30, &[]);
    assert!(rc == 0 || rc == 3, "{out}");
    assert!(
        out.contains("agent branch lazaret/agent-shell")
            && out.contains("review: 0 finding(s), 1 changed path(s)"),
        "{out}"
    );

    // `lazaret down` from this terminal; the other one is told who.
    let (rc, out) = w.step("lazaret down shell", 60, &[]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("domain ") && l.ends_with(" is down")),
        "{out}"
    );
    let s = other("the other shell's end", &|s| s.contains("HOLD-END rc="));
    assert!(s.contains("HOLD-END rc=122"), "{s}");
    assert!(
        s.replace('\n', "")
            .contains("lazaret: the domain was stopped by `lazaret down shell`"),
        "{s}"
    );

    // "Housekeeping": the stopped domain's folder goes.
    let domains = w.home.join(".local/share/lazaret/domains");
    let (rc, out) = w.step("lazaret domains prune --older-than 0s --force", 60, &[]);
    assert_eq!(rc, 0, "{out}");
    let left: Vec<_> = std::fs::read_dir(&domains)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "prune left {left:?}:\n{out}");
}

/// Takes the walk's domain down whatever happened (only its own profile
/// and workspace: other tests share this account).
struct DownOnDrop<'a>(&'a FirstHour);

impl Drop for DownOnDrop<'_> {
    fn drop(&mut self) {
        let _ = lazaret_env(
            &self.0.home,
            &self.0.ws,
            STANDARD_PATH,
            &[],
            &["down", "shell"],
        )
        .stdin(std::process::Stdio::null())
        .output();
    }
}

/// The test's DNS server on this machine's loopback (the sandbox's
/// 10.0.2.2): `ok.lazaret.test` is 198.51.100.3 (TEST-NET-2, which nothing
/// contacts), every other name has no address. Returns the port.
fn first_hour_dns() -> u16 {
    use hickory_proto::op::ResponseCode;
    use hickory_proto::rr::rdata::A;
    use hickory_proto::rr::{Name, RData, Record, RecordType};
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = udp.local_addr().unwrap().port();
    std::thread::spawn(move || {
        common::testnet::serve_udp(&udp, |name, qtype| match (name, qtype) {
            ("ok.lazaret.test.", RecordType::A) => (
                ResponseCode::NoError,
                vec![Record::from_rdata(
                    Name::from_ascii(name).unwrap(),
                    5,
                    RData::A(A(std::net::Ipv4Addr::new(198, 51, 100, 3))),
                )],
            ),
            _ => (ResponseCode::NoError, Vec::new()),
        });
    });
    port
}
