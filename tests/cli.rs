//! The `lazaret` binary's configuration commands, run as the user who would
//! run them, against real files.

mod common;

use std::path::PathBuf;

use common::{STANDARD_PATH, Scratch, lazaret, text};

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("example.toml")
}

#[test]
fn example_toml_passes_config_check() {
    let s = Scratch::new();
    let home = s.mkdir("home");
    let ws = s.mkdir("ws");
    let cfg = s.write("example.toml", &std::fs::read_to_string(example()).unwrap());
    let out = lazaret(
        &home,
        &ws,
        STANDARD_PATH,
        &["--config", cfg.to_str().unwrap(), "config", "check"],
    )
    .output()
    .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.starts_with("configuration is valid"), "{stdout}");
    assert!(
        stdout.contains("profiles: aider, claude, codex"),
        "{stdout}"
    );
    // Required variables that are unset are warned about, not fatal here;
    // optional ones (`env?:`, the login profiles) are only noted.
    assert!(
        stdout.contains("warning: profile aider: requires $OPENAI_API_KEY, which is not set here"),
        "{stdout}"
    );
    assert!(
        stdout.contains("note: profile claude: $ANTHROPIC_API_KEY is not set here"),
        "{stdout}"
    );
}

#[test]
fn config_check_reports_every_problem_with_its_location() {
    let s = Scratch::new();
    let home = s.mkdir("home");
    let ws = s.mkdir("ws");
    let cfg = s.write(
        "bad.toml",
        "[storage]\ndata_root = \"/tmp/x/../y\"\n[network]\ndefault_allow = [\"1.2.3.4/8\"]\ndefault_deny = []\n\
         [escalation]\nenabled = true\nsocket_dir = \"/tmp/s\"\nauto_approve = [\"git log\"]\n[profiles.ok]\nimage = \"i\"\n",
    );
    let out = lazaret(
        &home,
        &ws,
        STANDARD_PATH,
        &["--config", cfg.to_str().unwrap(), "config", "check"],
    )
    .output()
    .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let f = cfg.display();
    assert!(
        stderr.contains("3 problems in the configuration:"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{f}:2:13: storage.data_root: security:")),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("{f}:4:18: network.default_allow[0]: `1.2.3.4/8` has host bits set; did you mean 1.0.0.0/8?")), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{f}:9:17: escalation.auto_approve[0]: `git` can run arbitrary"
        )),
        "{stderr}"
    );
}

/// Issue 27 item 9: every misspelled key and wrong type of a file is
/// reported in one run, each with its line and key, by `config check` and by
/// a command that would start something.
#[test]
fn every_schema_error_of_a_file_is_reported_in_one_run() {
    let s = Scratch::new();
    let home = s.mkdir("home");
    let ws = s.mkdir("ws");
    let user = s.write(
        "home/.config/lazaret/config.toml",
        "default_profil = \"dev\"\n\
         [network]\ndefault_alow = []\n\
         [profiles.dev]\nimage = \"img\"\nruntime = \"kata\"\n\
         volumes = [{ host = \"/tmp\", container = \"/x\", readonly = true }]\n",
    );
    let f = user.display();
    for (args, code) in [(&["config", "check"][..], 1), (&["shell", "dev"][..], 125)] {
        let out = lazaret(&home, &ws, STANDARD_PATH, args).output().unwrap();
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(
            stderr.contains("4 problems in the configuration:"),
            "{args:?}: {stderr}"
        );
        for line in [
            format!("{f}:1:1: default_profil: unknown field `default_profil`"),
            format!("{f}:3:1: network.default_alow: unknown field `default_alow`"),
            format!("{f}:6:11: profiles.dev.runtime: unknown variant `kata`"),
            format!("{f}:7:"),
        ] {
            assert!(stderr.contains(&line), "{args:?}: {line}\n{stderr}");
        }
        assert!(
            stderr.contains("unknown field `readonly`"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn syntax_errors_name_file_line_and_column() {
    let s = Scratch::new();
    let home = s.mkdir("home");
    let ws = s.mkdir("ws");
    s.write("ws/lazaret.toml", "[storage]\ndata_root = /no/quotes\n");
    let out = lazaret(&home, &ws, STANDARD_PATH, &["config", "check"])
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.starts_with(&format!(
            "lazaret: {}:2:13: ",
            ws.join("lazaret.toml").display()
        )),
        "{stderr}"
    );
}

/// `config show` prints the merged result and, per value, the file and line
/// that set it: the user file, overridden key by key by ./lazaret.toml.
#[test]
fn config_show_names_the_origin_of_each_value() {
    let s = Scratch::new();
    let home = s.mkdir("home");
    let ws = s.mkdir("ws");
    let user = s.write(
        "home/.config/lazaret/config.toml",
        &std::fs::read_to_string(example()).unwrap(),
    );
    let local = s.write(
        "ws/lazaret.toml",
        "# local override\n[profiles.claude]\nimage = \"localhost/mine:1\"\n",
    );
    // Another image widens: untrusted, the file is refused and says how to
    // trust it; trusted, it applies and `show` says which layer is trusted.
    let out = lazaret(&home, &ws, STANDARD_PATH, &["config", "show"])
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!("`lazaret trust {}`", local.display())),
        "{stderr}"
    );
    let out = lazaret(&home, &ws, STANDARD_PATH, &["trust"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(
        text(&out).0.contains("profiles.claude.image"),
        "{}",
        text(&out).0
    );
    let out = lazaret(&home, &ws, STANDARD_PATH, &["config", "show"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains(&format!(
            "# workspace file: {}, trusted by you",
            local.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "image = \"localhost/mine:1\"  # {}:3",
            local.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "command = \"claude --dangerously-skip-permissions\"  # {}:",
            user.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "# storage root:       {}/.local/share/lazaret",
            home.display()
        )),
        "{stdout}"
    );
    // The round trip: what `show` prints (less comments) is itself valid.
    let shown = s.write("shown.toml", &stdout);
    let out = lazaret(
        &home,
        &ws,
        STANDARD_PATH,
        &["--config", shown.to_str().unwrap(), "config", "check"],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
}

#[test]
fn help_explains_the_commands() {
    let s = Scratch::new();
    let out = lazaret(&s.path(), &s.path(), STANDARD_PATH, &["--help"])
        .output()
        .unwrap();
    let (stdout, _) = text(&out);
    assert!(out.status.success());
    for needle in [
        "config",
        "domain",
        "doctor",
        "~/.config/lazaret/config.toml",
    ] {
        assert!(stdout.contains(needle), "--help lacks {needle}:\n{stdout}");
    }
}

/// Issue 17: `lazaret init` writes the commented example with its agent
/// profiles, says where, and refuses to overwrite without --force. Before
/// it, with no file, the built-in defaults load.
#[test]
fn init_writes_user_config_once() {
    let s = Scratch::new();
    let home = s.mkdir("home");
    let ws = s.mkdir("ws");
    let file = home.join(".config/lazaret/config.toml");
    let out = lazaret(&home, &ws, STANDARD_PATH, &["config", "show"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("# default layer: built into lazaret (trusted)"),
        "{stdout}"
    );
    assert!(stdout.contains("[profiles.shell]"), "{stdout}");

    let out = lazaret(&home, &ws, STANDARD_PATH, &["init"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("wrote {}", file.display())),
        "{stdout}"
    );
    let written = std::fs::read_to_string(&file).unwrap();
    assert_eq!(written, std::fs::read_to_string(example()).unwrap());
    assert!(written.contains("[profiles.claude]"));

    std::fs::write(&file, "# mine\n").unwrap();
    let out = lazaret(&home, &ws, STANDARD_PATH, &["init"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("already exists"), "{stderr}");
    assert!(stderr.contains("--force"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "# mine\n");

    let out = lazaret(&home, &ws, STANDARD_PATH, &["init", "--force"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), written);

    let out = lazaret(&home, &ws, STANDARD_PATH, &["config", "show"])
        .output()
        .unwrap();
    let (stdout, _) = text(&out);
    assert!(stdout.contains("# user file: "), "{stdout}");
}

/// Issue 17: an error known before boot (an unset forwarded variable) is
/// reported by `lazaret ui` at once, before the UI starts anything.
#[test]
fn ui_reports_unset_forwarded_variable_before_boot() {
    let s = Scratch::new();
    let home = s.mkdir("home");
    let ws = s.mkdir("ws");
    let cfg = s.write(
        "c.toml",
        "[profiles.agent]\nimage = \"localhost/lazaret/trixie:latest\"\nenv = { KEY = \"env:H17B_UNSET_KEY\" }\n",
    );
    let started = std::time::Instant::now();
    let out = lazaret(
        &home,
        &ws,
        STANDARD_PATH,
        &["--config", cfg.to_str().unwrap(), "ui"],
    )
    .output()
    .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains("profile agent requires $H17B_UNSET_KEY, not set here"),
        "{stderr}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // Nothing booted: no domain folder was made.
    assert!(!home.join(".local/share/lazaret/domains").exists());
}

/// Every command that works on one domain names it the same way:
/// `[PROFILE]` or `-p PROFILE`, and `-w DIR` (issue 20).
#[test]
fn every_domain_command_takes_the_same_profile_and_workspace_shapes() {
    let s = Scratch::new();
    let home = s.mkdir("home");
    let ws = s.mkdir("ws");
    let commands: &[&[&str]] = &[
        &["shell"],
        &["ui"],
        &["exec"],
        &["down"],
        &["audit"],
        &["logs"],
        &["domain"],
        &["review"],
        &["sandbox", "up"],
        &["sandbox", "down"],
        &["sandbox", "sync"],
        &["net", "show"],
        &["net", "why"],
        &["net", "allow"],
        &["net", "deny"],
    ];
    for cmd in commands {
        let mut args = cmd.to_vec();
        args.push("--help");
        let out = lazaret(&home, &ws, STANDARD_PATH, &args).output().unwrap();
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{cmd:?}: {stderr}");
        for needle in [
            "[PROFILE]",
            "-p, --profile <PROFILE>",
            "-w, --workspace <WORKSPACE>",
        ] {
            assert!(
                stdout.contains(needle),
                "{cmd:?} --help lacks {needle}:\n{stdout}"
            );
        }
    }

    // The three spellings name the same domain; two profiles at once do not.
    let cfg = s.write(
        "c.toml",
        "[profiles.alpha]\nimage = \"localhost/lazaret/trixie:latest\"\n\
         [profiles.beta]\nimage = \"localhost/lazaret/trixie:latest\"\n",
    );
    let other = s.mkdir("other");
    let hash = |args: &[&str]| {
        let mut all = vec!["--config", cfg.to_str().unwrap(), "domain", "--json"];
        all.extend_from_slice(args);
        let out = lazaret(&home, &ws, STANDARD_PATH, &all).output().unwrap();
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{args:?}: {stderr}");
        let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        (
            v["domain_hash"].as_str().unwrap().to_string(),
            v["workspace"].as_str().unwrap_or_default().to_string(),
        )
    };
    let other_s = other.to_str().unwrap();
    let positional = hash(&["beta", "-w", other_s]);
    assert_eq!(positional, hash(&["-p", "beta", "--workspace", other_s]));
    assert_eq!(positional, hash(&["--profile", "beta", "-w", other_s]));
    assert_ne!(positional.0, hash(&["alpha", "-w", other_s]).0);
    assert_ne!(positional.0, hash(&["beta"]).0, "-w changes the domain");
    let out = lazaret(
        &home,
        &ws,
        STANDARD_PATH,
        &[
            "--config",
            cfg.to_str().unwrap(),
            "domain",
            "alpha",
            "-p",
            "beta",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "clap refuses two profiles");
    assert!(
        text(&out).1.contains("cannot be used with"),
        "{}",
        text(&out).1
    );
}

/// `lazaret exec` exits 125 when Lazaret itself fails (here: the domain
/// cannot start, its image does not exist), so a script can tell that from
/// the command's own exit codes, which pass through (tests/coordinator.rs
/// runs `exit 42` and `exit 1` in a real sandbox).
#[test]
fn exec_exits_125_when_the_domain_cannot_start() {
    let s = Scratch::new();
    let home = s.mkdir("home");
    let ws = s.mkdir("ws");
    let cfg = s.write(
        "c.toml",
        "[profiles.ghost]\nimage = \"localhost/lazaret/agent-ghost:latest\"\n",
    );
    for cmd in [
        &["exec", "ghost", "--", "true"][..],
        &["shell", "ghost"][..],
    ] {
        let mut args = vec!["--config", cfg.to_str().unwrap()];
        args.extend_from_slice(cmd);
        let out = lazaret(&home, &ws, STANDARD_PATH, &args).output().unwrap();
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(125), "{cmd:?}: {stdout}{stderr}");
        assert!(
            stderr.contains("localhost/lazaret/agent-ghost:latest"),
            "{stderr}"
        );
    }
}

/// Issue 43 (3): `lazaret down` where nothing of the domain runs is an
/// error that says so (as `podman stop` of a missing container is), not
/// "domain … is down" with exit 0.
#[test]
fn down_where_nothing_runs_says_so_and_fails() {
    let s = Scratch::new();
    let home = s.mkdir("home");
    let ws = s.mkdir("ws");
    let cfg = s.write(
        "c.toml",
        &format!(
            "[storage]\ndata_root = \"{}/data\"\n[profiles.idle]\nimage = \"localhost/lazaret/trixie:latest\"\n",
            s.path().display()
        ),
    );
    let out = lazaret(
        &home,
        &ws,
        STANDARD_PATH,
        &["--config", cfg.to_str().unwrap(), "down", "idle"],
    )
    .output()
    .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(!stdout.contains("is down"), "{stdout}");
    assert!(
        stderr.contains("is running: nothing to bring down"),
        "{stderr}"
    );
}
