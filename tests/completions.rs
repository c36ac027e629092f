//! Shell completions and the man page come from the CLI definition itself
//! (clap_complete, clap_mangen), so they list exactly what `lazaret` accepts.

mod common;

use std::path::Path;

use common::{
    STANDARD_PATH, Scratch, as_test_user, can_run, lazaret, lazaret_bin, text, user_home as home,
};

fn run(s: &Scratch, args: &[&str]) -> String {
    let out = lazaret(&home(), &s.path(), STANDARD_PATH, args)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "lazaret {args:?}: {stderr}");
    stdout
}

/// bash completes subcommands and options with the generated script.
#[test]
fn bash_completion_completes_subcommands_and_options() {
    let s = Scratch::new();
    let script = s.write("lazaret.bash", &run(&s, &["completions", "bash"]));
    let complete = |line: &str| {
        let words: Vec<&str> = line.split(' ').collect();
        let probe = format!(
            "source {}; COMP_WORDS=({}); COMP_CWORD={}; COMP_LINE='{line}'; COMP_POINT={}; _lazaret lazaret '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display(),
            words.join(" "),
            words.len() - 1,
            line.len(),
            words[words.len() - 1],
            words[words.len() - 2],
        );
        let out = std::process::Command::new("bash")
            .args(["--norc", "-c", &probe])
            .output()
            .unwrap();
        text(&out).0
    };
    let subs = complete("lazaret doc");
    assert!(subs.lines().any(|l| l == "doctor"), "{subs}");
    let opts = complete("lazaret doctor --sa");
    assert!(opts.lines().any(|l| l == "--sandbox"), "{opts}");
    for (shell, mark) in [("zsh", "#compdef lazaret"), ("fish", "complete -c lazaret")] {
        let out = run(&s, &["completions", shell]);
        assert!(out.contains(mark), "{shell}: {out}");
    }
    let out = lazaret(&home(), &s.path(), STANDARD_PATH, &["completions", "tcsh"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// `lazaret man` is a valid page man can render; --dir writes one page per
/// subcommand.
#[test]
fn man_page_renders_and_lists_subcommands() {
    let s = Scratch::new();
    let page = run(&s, &["man"]);
    assert!(
        page.contains(".TH lazaret 1"),
        "{}",
        &page[..page.len().min(300)]
    );
    let file = s.write("lazaret.1", &page);
    let out = std::process::Command::new("man")
        .args(["-P", "cat", "-l"])
        .arg(&file)
        .env("MANWIDTH", "100")
        .output()
        .unwrap();
    let (rendered, err) = text(&out);
    assert!(out.status.success(), "{err}");
    for word in [
        "NAME",
        "SYNOPSIS",
        "doctor",
        "completions",
        "--allow-degraded",
    ] {
        assert!(rendered.contains(word), "no `{word}` in:\n{rendered}");
    }
    let dir = s.mkdir("man1");
    run(&s, &["man", "--dir", dir.to_str().unwrap()]);
    for f in [
        "lazaret.1",
        "lazaret-doctor.1",
        "lazaret-completions.1",
        "lazaret-sandbox-up.1",
    ] {
        assert!(dir.join(f).is_file(), "{f} missing in {}", dir.display());
    }
}

/// Issue 27: `lazaret completions bash | head` and `lazaret config check |
/// head` panicked when the reader went away. Printing to a pipe nobody reads
/// any more ends the command quietly and successfully.
#[test]
fn printing_into_a_closed_pipe_ends_quietly() {
    let s = Scratch::new();
    let home = s.mkdir("home");
    let ws = s.mkdir("ws");
    for args in [
        &["completions", "bash"][..],
        &["config", "check"],
        &["config", "show"],
        &["man"],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        // The reader is gone before lazaret writes its first byte.
        drop(reader);
        let out = lazaret(&home, &ws, STANDARD_PATH, args)
            .stdout(writer)
            .output()
            .unwrap();
        let (_, stderr) = text(&out);
        assert!(stderr.is_empty(), "lazaret {args:?}: {stderr}");
        assert!(out.status.success(), "lazaret {args:?}: {:?}", out.status);
    }
}

/// Issue 27 item 8: in a login bash, bash-completion (which set-up
/// installs) loads lazaret's script, and `lazaret shell <TAB>` offers the
/// profiles of the configuration read in the current folder.
#[test]
fn a_login_bash_completes_profile_names() {
    const LOADER: &str = "/usr/share/bash-completion/bash_completion";
    if !can_run(
        Path::new(LOADER).exists(),
        "the bash-completion package is not installed (scripts/setup installs it)",
    ) {
        return;
    }
    let s = Scratch::new();
    let home = s.mkdir("home");
    let ws = s.mkdir("ws");
    s.write(
        "home/.config/lazaret/config.toml",
        "[profiles.alpha]\nimage = \"i\"\n[profiles.beta-2]\nimage = \"i\"\n",
    );
    // bash-completion's first place for a command's script; set-up's is
    // /usr/local/share/bash-completion/completions, for the installed binary.
    s.write(
        "home/.local/share/bash-completion/completions/lazaret",
        &run(&s, &["completions", "bash"]),
    );
    // The binary under test comes before an installed one.
    s.mkdir("home/bin");
    std::os::unix::fs::symlink(lazaret_bin(), home.join("bin/lazaret")).unwrap();
    s.write("home/.bash_profile", "PATH=\"$HOME/bin:$PATH\"\n");
    // What a TAB does: bash-completion loads the script on first use
    // (2.11: __load_completion, later _comp_load), then bash calls the
    // function `complete -p` names with COMP_WORDS set.
    let probe = r#"
complete -p lazaret >/dev/null 2>&1 && echo "loaded before first use"
__load_completion lazaret 2>/dev/null || _comp_load lazaret
spec=$(complete -p lazaret) || { echo "no completion for lazaret"; exit 3; }
fn=${spec#*-F }; fn=${fn%% *}
COMP_WORDS=(lazaret shell ''); COMP_CWORD=2; COMP_LINE='lazaret shell '; COMP_POINT=${#COMP_LINE}
"$fn" lazaret '' shell
printf 'reply:%s\n' "${COMPREPLY[@]}"
COMP_WORDS=(lazaret net show -p b); COMP_CWORD=4; COMP_LINE='lazaret net show -p b'; COMP_POINT=${#COMP_LINE}
"$fn" lazaret b -p
printf 'after -p b:%s\n' "${COMPREPLY[@]}"
"#;
    let out = as_test_user(Path::new("/bin/bash"), &home, STANDARD_PATH, &[])
        .args(["-lic", probe])
        .current_dir(&ws)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let replies: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("reply:"))
        .collect();
    // `shell` is the built-in defaults' profile.
    assert_eq!(replies, ["alpha", "beta-2", "shell"], "{stdout}{stderr}");
    assert!(stdout.contains("after -p b:beta-2\n"), "{stdout}{stderr}");
}
