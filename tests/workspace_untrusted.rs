//! The workspace is untrusted (decisions.md D8, issue 12), attacked for real
//! from inside runsc and runc sandboxes: the agent cannot write its next
//! configuration or a `.git` host git would obey at the top or in a
//! submodule, review runs none of its code and shows its names visibly,
//! propagation follows none of its symlinks, and nothing set-user-ID or
//! device-like survives on the host. After each attack the test does what
//! the user does next and checks that no canary ran and that review told.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::sandbox::{BASE_IMAGE, Domain};
use common::{git, podman, text};

/// `git ARGS` in `dir` as the user, whatever its exit code: (code, output).
fn user_git(dir: &Path, args: &[&str]) -> (i32, String) {
    let mut c = common::as_test_user(
        Path::new("/usr/bin/git"),
        &common::user_home(),
        common::STANDARD_PATH,
        &[],
    );
    c.arg("-C").arg(dir).args(args);
    let out = c.output().unwrap();
    let (o, e) = text(&out);
    (out.status.code().unwrap_or(-1), format!("{o}{e}"))
}

/// Runs `script` in the sandbox and asserts it fails with `expected`.
fn refused(d: &Domain, script: &str, expected: &str) {
    let (code, out, err) = d.sh(script);
    assert_ne!(code, 0, "`{script}` succeeded: {out}");
    assert!(
        err.contains(expected),
        "`{script}`: expected {expected}, got: {err}"
    );
}

/// `script` as a session runs it: through the escalation client's
/// seccomp (`lazaret_escalate::confine`).
fn confined(script: &str) -> String {
    format!(
        "{} {} -- sh -c {}",
        lazaret_escalate::BINARY_PATH,
        lazaret_escalate::confine::FLAG,
        common::shell_quote(script)
    )
}

/// Files under `root` (as the user's podman namespace sees them) with a
/// set-user-ID or set-group-ID bit, or that are devices other than
/// overlay whiteouts.
fn suid_or_devices(root: &Path) -> String {
    let out = podman(&[
        "unshare",
        "find",
        &root.display().to_string(),
        "(",
        "-perm",
        "/6000",
        "-o",
        "-type",
        "b",
        ")",
        "-print",
    ]);
    text(&out).0
}

/// Direct mode on a folder that is no repository, with a persistent `/usr`.
fn plain_folder(profile: &'static str, runtime: &str) {
    let d = Domain::new(profile);
    d.add_config(&format!(
        "[profiles.{profile}]\nimage = \"{BASE_IMAGE}\"\nruntime = \"{runtime}\"\nworkspace_mode = \"direct\"\npersistent_dirs = [\"/usr\"]\n"
    ));
    let ws = d.ws();
    let canary = d.s.path().join("CANARY");
    let c = canary.display().to_string();
    d.s.write("ws/.vscode/settings.json", "{\"user\": true}\n");
    d.s.write("ws/src/main.c", "int main() {}\n");
    d.up();

    // 2. Its next configuration: read-only although it does not exist.
    refused(
        &d,
        "echo '[profiles.x]' > /workspace/lazaret.toml",
        "Read-only",
    );
    refused(&d, "rm -f /workspace/lazaret.toml", "");
    // 3. No `.git` at the top, neither a folder nor a gitfile.
    refused(&d, "cd /workspace && git init -q .", "");
    refused(&d, "echo 'gitdir: /x' > /workspace/.git", "");
    refused(&d, "mv /workspace/.git /workspace/.g", "busy");
    refused(&d, "touch /workspace/.git/config", "Read-only");
    // The project's own masked folder is readable, not writable; a missing
    // one is the sandbox's alone.
    let (code, out, _) = d.sh("cat /workspace/.vscode/settings.json");
    assert_eq!((code, out.as_str()), (0, "{\"user\": true}\n"));
    refused(&d, "echo '{}' > /workspace/.vscode/tasks.json", "Read-only");
    let (code, _, err) =
        d.sh("mkdir -p /workspace/.claude && echo '{}' > /workspace/.claude/settings.json");
    assert_eq!(code, 0, "{err}");
    // What no mount can stop: a repository and a gitfile in subfolders, a
    // bare repository, all with the canary as fsmonitor.
    let (code, _, err) = d.sh(&format!(
        "cd /workspace && git init -q deep/nested && git -C deep/nested config core.fsmonitor 'touch {c}' \
         && git init -q --bare evil.git && git -C evil.git config core.fsmonitor 'touch {c}' \
         && mkdir -p src/lib && echo 'gitdir: ../../evil.git' > src/lib/.git"
    ));
    assert_eq!(code, 0, "{err}");
    // 8. Set-user-ID bits and devices. Sessions run through the escalation
    // client's seccomp (what `lazaret shell`/`exec` prefix every command
    // with): refused under both runtimes. runc also filters a bare
    // `podman exec` (the container's profile); runsc does not (measured),
    // so there the bits land and the host must strip them.
    let bare_refused = runtime == "runc";
    for script in [
        "cd /workspace && cp /bin/true suid && chmod 4755 suid",
        "cd /workspace && chmod g+s src",
        "perl -MFcntl -e 'sysopen(F, \"/workspace/o\", O_CREAT|O_WRONLY, 04755) or die \"$!\\n\"'",
        "cp /bin/true /usr/local/bin/t && chmod 4755 /usr/local/bin/t",
        "mknod /workspace/null c 1 3",
    ] {
        refused(&d, &confined(script), "not permitted");
        if bare_refused {
            refused(&d, script, "not permitted");
        } else if !script.starts_with("mknod") {
            let (code, _, err) = d.sh(script);
            assert_eq!(code, 0, "{script}: {err}");
        }
    }
    let prevented = bare_refused;
    // ... and a copy-up of an image's set-user-ID file keeps its bit in the
    // persistent layer until the host strips it.
    let (code, _, err) = d.sh("touch /usr/bin/su");
    assert_eq!(code, 0, "{err}");
    // 5. A file name that would clear the screen and print an all-clear.
    let (code, _, err) = d.sh(
        "mkdir -p /workspace/.github/workflows && touch \"/workspace/.github/workflows/$(printf 'ci\\033[2J\\033[H\\rnothing that host tools would execute')\"",
    );
    assert_eq!(code, 0, "{err}");

    // What the user does next: host git in the folder (no repository there,
    // so nothing of the agent's is read).
    user_git(&ws, &["status"]);
    user_git(&ws.join("src"), &["status"]);
    assert!(!canary.exists(), "agent code ran on `git status`");

    let out = d.lazaret(&["review"]);
    let (rout, _) = text(&out);
    for needle in [
        "host git obeys it): deep/nested/.git",
        "host git obeys it): evil.git",
        "host git obeys it): src/lib/.git",
        "setuid/setgid bit (removed): ",
    ] {
        assert!(rout.contains(needle), "review lacks `{needle}`:\n{rout}");
    }
    assert!(
        !rout.contains(".vscode"),
        "the user's own folder was reported:\n{rout}"
    );
    assert!(!canary.exists(), "review ran agent code");
    if !prevented {
        for needle in [
            "bit (removed): suid
",
            "bit (removed): src
",
        ] {
            assert!(rout.contains(needle), "review lacks `{needle}`:\n{rout}");
        }
    }
    // Review stripped them already: the host folder is clean while the
    // domain still runs.
    assert_eq!(
        suid_or_devices(&ws),
        "",
        "set-user-ID left in the workspace"
    );
    // `lazaret review` on a real terminal.
    let t = d.tmux(
        150,
        50,
        &format!("review --profile {profile}"),
        Some("echo EXIT=$?; sleep 60"),
    );
    let screen = t.wait_for(60, "the review", |s| s.contains("EXIT="));
    let lines: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
    let exit = lines.iter().position(|l| l.starts_with("EXIT=")).unwrap();
    assert_eq!(lines[exit], "EXIT=3", "{screen}");
    assert!(
        lines[exit - 1].starts_with("review: ") && lines[exit - 1].contains("finding(s)"),
        "the count line is not last:\n{screen}"
    );
    assert!(screen.contains("look at these before"), "{screen}");
    assert!(screen.contains("ci␛[2J␛[H^Mnothing that host"), "{screen}");
    drop(t);
    let upper = d.domain_root().join("usr_changes");
    assert_eq!(
        suid_or_devices(&upper),
        "",
        "set-user-ID left in /usr layer"
    );

    d.down();
    d.assert_gone();
    // Nothing of Lazaret's mount points is left in the user's folder.
    for p in [".git", "lazaret.toml", ".claude", ".idea", ".husky"] {
        assert!(
            std::fs::symlink_metadata(ws.join(p)).is_err(),
            "{p} was left in the user's folder"
        );
    }
    assert!(ws.join(".vscode/settings.json").exists());
    assert_eq!(suid_or_devices(&ws), "");
    assert_eq!(suid_or_devices(&upper), "");

    // A `.git` that appears later (here a whole repository with the
    // canary as fsmonitor) does not make the folder the host's repository.
    git(&ws, &["init", "-q"]);
    git(&ws, &["config", "core.fsmonitor", &format!("touch {c}")]);
    d.up();
    let (code, out, _) = d.sh("echo \"[$GIT_DIR]\"");
    assert_eq!((code, out.trim()), (0, "[]"));
    refused(&d, "echo x >> /workspace/.git/config", "Read-only");
    let out = d.lazaret(&["review"]);
    assert!(text(&out).0.contains("(direct mode)"), "{}", text(&out).0);
    d.down();
    assert!(!canary.exists(), "Lazaret ran git in the new .git");
    let mode = std::fs::metadata(ws.join(".git/config"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o6000, 0);
}

#[test]
fn plain_folder_under_runsc() {
    plain_folder("gvu", "runsc");
}

#[test]
fn plain_folder_under_runc() {
    plain_folder("rcu", "runc");
}

/// Direct mode on a repository with a submodule: the submodule's gitfile is
/// read-only; review's own look at the folder runs no filter.
fn submodule(profile: &'static str) {
    let d = Domain::new(profile);
    let ws = d.ws();
    let canary = d.s.path().join("CANARY");
    let c = canary.display().to_string();
    let lib = d.s.mkdir("lib");
    for dir in [&lib, &ws] {
        git(dir, &["init", "-q", "-b", "main"]);
        git(dir, &["config", "user.email", "u@example.invalid"]);
        git(dir, &["config", "user.name", "U"]);
    }
    d.s.write("lib/lib.c", "int f;\n");
    git(&lib, &["add", "-A"]);
    git(&lib, &["commit", "-qm", "lib"]);
    d.s.write("ws/README", "hi\n");
    git(&ws, &["add", "-A"]);
    git(
        &ws,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            &lib.display().to_string(),
            "sub",
        ],
    );
    git(&ws, &["commit", "-qm", "init"]);
    let gitfile = std::fs::read(ws.join("sub/.git")).unwrap();
    d.up();

    // The agent's own repository with a clean filter, fsmonitor and hooks.
    let (code, _, err) = d.sh(&format!(
        "unset GIT_DIR GIT_WORK_TREE; cd /workspace && git init -q --bare /workspace/.cache-evil && git --git-dir=.cache-evil config filter.x.clean 'sh -c \"touch {c}; cat\"' \
         && git --git-dir=.cache-evil config core.fsmonitor 'touch {c}' && echo '* filter=x' > .gitattributes"
    ));
    assert_eq!(code, 0, "{err}");
    refused(
        &d,
        "echo 'gitdir: ../.cache-evil' > /workspace/sub/.git",
        "Read-only",
    );
    refused(&d, "rm -f /workspace/sub/.git", "");
    refused(&d, "mv /workspace/sub/.git /workspace/sub/.g", "busy");
    let (code, _, err) = d.sh("cd /workspace && echo changed > README && mkdir -p other && echo 'gitdir: ../.cache-evil' > other/.git");
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(ws.join("sub/.git")).unwrap(), gitfile);

    // The user's next steps: review, then git status.
    let out = d.lazaret(&["review"]);
    let (rout, rerr) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{rout}{rerr}");
    assert!(!canary.exists(), "review ran the agent's filter");
    for needle in [
        "executed by host tools: .gitattributes",
        "host git obeys it): other/.git",
        "host git obeys it): .cache-evil",
    ] {
        assert!(rout.contains(needle), "review lacks `{needle}`:\n{rout}");
    }
    let (_, status) = user_git(&ws, &["status", "--porcelain"]);
    assert!(status.contains("README"), "{status}");
    assert!(!canary.exists(), "`git status` ran the agent's code");
    d.down();
    d.assert_gone();
}

#[test]
fn submodule_under_runsc() {
    submodule("gvd");
}

#[test]
fn submodule_under_runc() {
    submodule("rcd");
}

/// Isolated mode: the agent points its `objects` (or alternates) at another
/// repository of the user's; propagation must not copy its objects in.
fn foreign_objects(profile: &'static str) {
    let d = Domain::new(profile);
    let ws = d.ws();
    let secret = d.s.mkdir("secret");
    for dir in [&secret, &ws] {
        git(dir, &["init", "-q", "-b", "main"]);
        git(dir, &["config", "user.email", "u@example.invalid"]);
        git(dir, &["config", "user.name", "U"]);
    }
    d.s.write("secret/key", "SECRET\n");
    git(&secret, &["add", "-A"]);
    git(&secret, &["commit", "-qm", "secret"]);
    let oid = git(&secret, &["rev-parse", "HEAD"]).trim().to_string();
    d.s.write("ws/README", "hi\n");
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-qm", "init"]);
    d.up();
    let branch = format!("lazaret/agent-{profile}");
    // 2. A configuration for the next start, committed on the agent's
    // branch: review names it once the branch reached the host.
    let (code, _, err) = d.sh(
        "cd /workspace && git config user.email a@x && git config user.name a \
         && printf '[profiles.x]\\nruntime = \"runc\"\\n' > lazaret.toml && git add lazaret.toml \
         && git -c core.hooksPath=/dev/null commit -qm cfg",
    );
    assert_eq!(code, 0, "{err}");
    let out = d.lazaret(&["sandbox", "sync"]);
    assert!(out.status.success(), "{}", text(&out).1);
    let out = d.lazaret(&["review"]);
    let rout = text(&out).0;
    assert_eq!(out.status.code(), Some(3), "{rout}");
    assert!(
        rout.contains("Lazaret configuration (its next start): lazaret.toml"),
        "{rout}"
    );
    assert!(!ws.join("lazaret.toml").exists());
    let objects = secret.join(".git/objects").display().to_string();
    let attacks = [
        // Alternates pointing at the other repository.
        format!("echo {objects} >> .git/objects/info/alternates"),
        // The whole objects folder a symlink to it.
        format!("mv .git/objects .git/objects.old && ln -s {objects} .git/objects"),
    ];
    for attack in attacks {
        let (code, _, err) = d.sh(&format!(
            "cd /workspace && {attack} && mkdir -p .git/refs/heads/lazaret && echo {oid} > .git/refs/heads/{branch}"
        ));
        assert_eq!(code, 0, "{attack}: {err}");
        let out = d.lazaret(&["sandbox", "sync"]);
        assert!(!out.status.success(), "{attack}: sync succeeded");
        let (code, _) = user_git(&ws, &["cat-file", "-e", &oid]);
        assert_ne!(
            code, 0,
            "{attack}: the other repository's commit reached the host"
        );
    }
    let out = d.lazaret(&["review"]);
    assert!(text(&out).0.contains("review: "), "{}", text(&out).0);
    d.down();
    d.assert_gone();
}

#[test]
fn foreign_objects_under_runsc() {
    foreign_objects("gv");
}

#[test]
fn foreign_objects_under_runc() {
    foreign_objects("rc");
}
