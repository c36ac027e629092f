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
    let out = lazaret_env(
        home,
        ws,
        STANDARD_PATH,
        &[("LAZARET_USER_CONFIG", "")],
        &all,
    )
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
    let run = |args: &[&str]| run_with(&home, &ws, &cfg, args);
    for (hash, how) in [
        (
            "a27a27a27a27",
            vec!["domains", "prune", "--older-than", "30d"],
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
    t.send(&["C-a", "q"]);
    t.wait_exit(30, "lazaret ui");
    d.wait_until_gone();
}
