//! Domain Anchor (spec §4.3.1): hash vectors computed independently with
//! coreutils' `sha256sum`, through the library and through `lazaret domain`.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::{STANDARD_PATH, Scratch, lazaret, text};
use lazaret::domain::{DomainAnchor, domain_hash};

/// First 12 hex digits of `sha256sum` over exactly `input`.
fn sha256sum12(input: &str) -> String {
    use std::io::Write;
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum (coreutils) is needed");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()[..12].to_string()
}

#[test]
fn hash_matches_sha256sum_vectors() {
    for (profile, path) in [
        ("claude", "/home/dev/project"),
        ("codex", "/home/dev/project"),
        ("aider", "/srv/with space/and-ünïcödé"),
        ("my_agent-2", "/"),
        ("zz", "/tmp/a:b:c"),
    ] {
        let expected = sha256sum12(&format!("{profile}:{path}"));
        assert_eq!(domain_hash(profile, path), expected, "{profile}:{path}");
        assert_eq!(expected.len(), 12);
        assert!(
            expected
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
    }
}

#[test]
fn anchor_hashes_the_canonical_workspace() {
    let s = Scratch::new();
    let ws = s.mkdir("real workspace");
    std::os::unix::fs::symlink(&ws, s.path().join("link")).unwrap();
    let expected = sha256sum12(&format!("claude:{}", ws.display()));
    for spelling in [
        ws.clone(),
        s.path().join("link"),
        s.path().join("real workspace/./"),
        s.path().join("real workspace/../real workspace"),
    ] {
        let a = DomainAnchor::new("claude", &spelling).unwrap();
        assert_eq!(a.hash(), expected, "{}", spelling.display());
        assert_eq!(a.workspace(), ws.as_path());
    }
    let other = DomainAnchor::new("codex", &ws).unwrap();
    assert_ne!(other.hash(), expected, "another profile is another domain");
    assert_eq!(
        DomainAnchor::new("claude", &ws).unwrap().sandbox_name(),
        format!("lazaret-coord-{expected}")
    );
}

#[test]
fn anchor_refuses_bad_profiles_and_workspaces() {
    let s = Scratch::new();
    let err = DomainAnchor::new("../etc", &s.path())
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("security: profile name `../etc` is not allowed"),
        "{err}"
    );
    let err = DomainAnchor::new("claude", &s.path().join("missing"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("missing` cannot be used: No such file or directory"),
        "{err}"
    );
    let file = s.write("file", "x");
    let err = DomainAnchor::new("claude", &file).unwrap_err().to_string();
    assert!(err.ends_with("is not a folder"), "{err}");
}

fn config_for(s: &Scratch) -> std::path::PathBuf {
    let root = s.path();
    s.write(
        "home/.config/lazaret/config.toml",
        &format!(
            "[storage]\ndata_root = \"{r}/data\"\n[network]\ndefault_allow = []\ndefault_deny = []\n\
             [escalation]\nenabled = true\nsocket_dir = \"{r}/sockets\"\n\
             [profiles.claude]\nimage = \"i\"\n[profiles.codex]\nimage = \"i\"\n",
            r = root.display()
        ),
    );
    root.join("home")
}

/// `lazaret domain` prints the same hash and the paths derived from it.
#[test]
fn domain_command_prints_every_derived_path() {
    let s = Scratch::new();
    let home = config_for(&s);
    let ws = s.mkdir("ws");
    let out = lazaret(
        &home,
        &ws,
        STANDARD_PATH,
        &["domain", "--profile", "codex", "--json"],
    )
    .output()
    .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let hash = sha256sum12(&format!("codex:{}", ws.display()));
    let root = s.path();
    assert_eq!(v["domain_hash"], hash.as_str());
    assert_eq!(
        v["domain_root"],
        format!("{}/data/domains/{hash}", root.display())
    );
    assert_eq!(
        v["usr_changes"],
        format!("{}/data/domains/{hash}/usr_changes", root.display())
    );
    assert_eq!(
        v["escalation_dir"],
        format!("{}/sockets/{hash}", root.display())
    );
    assert_eq!(v["sandbox_container"], format!("lazaret-coord-{hash}"));
    assert_eq!(v["agent_branch"], "lazaret/agent-codex");
    let sock = v["control_socket"].as_str().unwrap();
    assert!(
        sock.ends_with(&format!("/lazaret_coord_{hash}.sock")),
        "{sock}"
    );
    assert!(
        !sock.starts_with("/tmp/lazaret_coord_"),
        "not bare /tmp (decisions.md D4)"
    );
    let lock = v["lock_file"].as_str().unwrap();
    assert_eq!(Path::new(lock).parent(), Path::new(sock).parent());

    // Without --profile and with two profiles, the user is told what to do.
    let out = lazaret(&home, &ws, STANDARD_PATH, &["domain"])
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains(
            "several profiles are defined (claude, codex, shell); name one, or set default_profile"
        ),
        "{stderr}"
    );
}

/// A fork (`lazaret fork`, issue 30) is its own domain: `PROFILE@FORK`
/// hashes as the name it is, runs its profile, has its own branch; no
/// profile can collide with it (`@` is no profile-name character).
#[test]
fn a_fork_is_its_own_domain() {
    let s = Scratch::new();
    let ws = s.mkdir("ws");
    let original = DomainAnchor::new("claude", &ws).unwrap();
    let fork = DomainAnchor::new("claude@plan-b", &ws).unwrap();
    assert_eq!(
        fork.hash(),
        sha256sum12(&format!("claude@plan-b:{}", ws.display()))
    );
    assert_ne!(fork.hash(), original.hash());
    assert_eq!(fork.profile(), "claude");
    assert_eq!(fork.fork(), Some("plan-b"));
    assert_eq!(fork.name(), "claude@plan-b");
    assert_eq!(original.name(), "claude");
    assert_eq!(fork.agent_branch(), "lazaret/agent-claude-plan-b");
    assert_eq!(original.agent_branch(), "lazaret/agent-claude");
    assert_ne!(fork.sandbox_name(), original.sandbox_name());
    for bad in [
        "claude@",
        "claude@../x",
        "claude@a@b",
        "claude@X",
        "@plan-b",
    ] {
        assert!(DomainAnchor::new(bad, &ws).is_err(), "{bad}");
    }
    // `lazaret domain` takes the fork's name where it takes a profile.
    let home = config_for(&s);
    let out = lazaret(
        &home,
        &ws,
        STANDARD_PATH,
        &["domain", "--profile", "codex@plan-b", "--json"],
    )
    .output()
    .unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    let paths: serde_json::Value = serde_json::from_str(&o).unwrap();
    assert_eq!(paths["profile"], "codex@plan-b");
    assert_eq!(paths["agent_branch"], "lazaret/agent-codex-plan-b");
    assert_eq!(
        paths["domain_hash"],
        sha256sum12(&format!("codex@plan-b:{}", ws.display()))
    );
}
