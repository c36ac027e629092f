//! decisions.md D8 with real sandboxes: an agent-written ./lazaret.toml
//! cannot widen the next start, Lazaret's folders are private and what the
//! agent leaves can be removed, and a teardown that leaves something says so.

mod common;

use std::os::unix::fs::MetadataExt;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::sandbox::Domain;
use common::{STANDARD_PATH, podman, text};

fn mode(p: &std::path::Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// This domain's entry in `lazaret status --json`, if any.
fn status_of(d: &Domain) -> Option<serde_json::Value> {
    d.status()
}

/// Processes whose command line names one of `ids` (the runtime's).
fn processes_with(ids: &[String]) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let c = String::from_utf8_lossy(&c);
            if ids.iter().any(|id| c.contains(id.as_str())) {
                out.push(pid);
            }
        }
    }
    out
}

fn container_ids(d: &Domain) -> Vec<String> {
    let out = podman(&[
        "ps",
        "-a",
        "--no-trunc",
        "--filter",
        &format!("label={}={}", lazaret::engine::LABEL_DOMAIN, d.hash),
        "--format",
        "{{.ID}}",
    ]);
    text(&out).0.lines().map(str::to_string).collect()
}

/// The agent writes ./lazaret.toml in a direct-mode workspace (or it
/// arrives with the project) asking for a host folder, runc and open
/// egress; the user's next start in that folder refuses it, names the file,
/// the keys and the trust command, and starts nothing.
fn agent_written_config_cannot_widen_the_next_start(profile: &'static str) {
    let d = Domain::new(profile);
    d.up();
    let secret = d.s.mkdir("secret");
    let planted = format!(
        "[profiles.{profile}]\nimage = \"{}\"\nruntime = \"runc\"\nallow_egress = [\"0.0.0.0/0\"]\nvolumes = [{{ host = \"{}\", container = \"/loot\", mode = \"rw\" }}]\n",
        common::sandbox::BASE_IMAGE,
        secret.display()
    );
    // Written from inside, as the agent would (h12b may make it read-only
    // in direct mode: then it arrives with the project instead).
    let (code, _, _) = d.sh(&format!(
        "printf '%s' '{}' > /workspace/lazaret.toml",
        planted.replace('\'', "'\\''")
    ));
    if code != 0 {
        d.s.write("ws/lazaret.toml", &planted);
    }
    d.down();
    let out = d.lazaret(&["sandbox", "up"]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "it started: {stdout}{stderr}");
    let file = d.ws().join("lazaret.toml");
    for needle in [
        format!("{} is not trusted", file.display()),
        format!("profiles.{profile}.allow_egress"),
        format!("profiles.{profile}.volumes"),
        format!("lazaret trust {}", file.display()),
    ] {
        assert!(stderr.contains(&needle), "lacks {needle}: {stderr}");
    }
    // Under gVisor, asking for runc is refused too (for rcd it is no change).
    if profile == "gvd" {
        assert!(
            stderr.contains("profiles.gvd.runtime: leaves gVisor"),
            "{stderr}"
        );
    }
    assert!(d.containers().is_empty(), "{:?}", d.containers());
    assert_eq!(std::fs::read_dir(&secret).unwrap().count(), 0);
    // Teardown still reads that folder (the file is left out, said once):
    // nothing of the domain runs, and `down` says that, not a
    // configuration error (issue 43: a `down` with nothing to end fails).
    let out = d
        .cmd_raw(STANDARD_PATH, &["down", profile])
        .output()
        .unwrap();
    let (_, e) = text(&out);
    assert!(!out.status.success(), "{e}");
    assert!(e.contains("nothing to bring down"), "{e}");
    assert!(e.contains("left out"), "{e}");
    // `config show` names the refusal too; once the user trusts the file
    // it applies, and `config show` says it is trusted.
    let out = d.cmd_raw(STANDARD_PATH, &["trust"]).output().unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    assert!(o.contains(&format!("profiles.{profile}.volumes")), "{o}");
    let out = d
        .cmd_raw(STANDARD_PATH, &["config", "show"])
        .output()
        .unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "{e}");
    assert!(o.contains("trusted by you"), "{o}");
    let out = d
        .cmd_raw(STANDARD_PATH, &["trust", "--revoke"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let out = d.lazaret(&["sandbox", "up"]);
    assert!(!out.status.success(), "revoked, yet it started");
    assert!(d.containers().is_empty());
}

#[test]
fn agent_written_config_cannot_widen_the_next_start_under_runsc() {
    agent_written_config_cannot_widen_the_next_start("gvd");
}

#[test]
fn agent_written_config_cannot_widen_the_next_start_under_runc() {
    agent_written_config_cannot_widen_the_next_start("rcd");
}

/// Storage Root, Domain Roots and the files in them are the user's alone;
/// what the agent leaves owned by another id with mode 000 is removed by
/// `lazaret down --purge`.
#[test]
fn storage_is_private_and_purge_removes_what_the_agent_left() {
    let d = Domain::new("rc");
    // Through a coordinator, so the audit store and log exist.
    let out = d
        .cmd_raw(STANDARD_PATH, &["exec", "rc", "--", "sh", "-c",
            "mkdir -p /usr/trap/deep /workspace/trap/deep && touch /usr/trap/deep/f /workspace/trap/deep/f && chown -R 4242:4242 /usr/trap /workspace/trap && chmod 000 /usr/trap/deep /usr/trap /workspace/trap/deep /workspace/trap"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    d.wait_until_gone();
    let data = d.s.path().join("data");
    let root = d.domain_root();
    for dir in [
        data.clone(),
        data.join("domains"),
        data.join("runtime"),
        root.clone(),
    ] {
        if dir.exists() {
            assert_eq!(mode(&dir), 0o700, "{}", dir.display());
        }
    }
    for f in ["state.redb", "coordinator.log", "policy.json"] {
        let p = root.join(f);
        assert!(p.exists(), "{f} missing");
        assert_eq!(mode(&p), 0o600, "{f}");
    }
    // The trap really is out of the user's reach by plain means.
    let trap = root.join("usr_changes/trap");
    assert!(std::fs::symlink_metadata(&trap).is_ok(), "no trap was left");
    let me = common::test_user().map_or(nix::unistd::geteuid().as_raw(), |u| u.uid);
    assert_ne!(std::fs::symlink_metadata(&trap).unwrap().uid(), me);
    // In the direct-mode workspace, teardown gave such entries back.
    for p in [
        d.ws().join("trap"),
        d.ws().join("trap/deep"),
        d.ws().join("trap/deep/f"),
    ] {
        let meta = std::fs::symlink_metadata(&p).unwrap();
        assert_eq!(meta.uid(), me, "{} is not the user's", p.display());
        if meta.is_dir() {
            assert_eq!(meta.mode() & 0o700, 0o700, "{}", p.display());
        }
    }
    let out = d
        .cmd_raw(STANDARD_PATH, &["down", "rc", "--purge"])
        .output()
        .unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    assert!(o.contains(&format!("removed {}", root.display())), "{o}");
    assert!(!root.exists(), "the Domain Root is still there");
}

fn spawn_session(d: &Domain) -> Child {
    d.cmd_raw(STANDARD_PATH, &["exec", d.profile, "--", "sleep", "120"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// podman loses the runtime of a running gVisor domain: `down` must not
/// say the domain is down, must name what is left, and `status` lists the
/// domain as broken; once the runtime works again, `down` finishes it.
#[test]
fn down_with_a_broken_runtime_names_what_is_left() {
    let d = Domain::new("gv");
    let mut session = spawn_session(&d);
    let socket = d.control_socket();
    let deadline = Instant::now() + Duration::from_secs(90);
    while d.containers().len() < 2 || !socket.exists() || status_of(&d).is_none() {
        assert!(Instant::now() < deadline, "the domain never came up");
        std::thread::sleep(Duration::from_millis(100));
    }
    let ids = container_ids(&d);
    assert!(!processes_with(&ids).is_empty(), "no runtime process found");
    // The wrapper podman calls as this sandbox's runtime now fails.
    let wrapper = d.s.path().join("data/runtime/lazaret-runsc");
    let good = std::fs::read(&wrapper).unwrap();
    std::fs::write(
        &wrapper,
        "#!/bin/sh\necho 'runtime unavailable' >&2\nexit 1\n",
    )
    .unwrap();
    let out = d.cmd_raw(STANDARD_PATH, &["down", "gv"]).output().unwrap();
    let (o, e) = text(&out);
    eprintln!("broken down said:\n{o}{e}");
    assert!(!out.status.success(), "down claimed success: {o}{e}");
    assert!(!o.contains("is down"), "{o}");
    assert!(e.contains(&format!("domain {} is NOT down", d.hash)), "{e}");
    assert!(e.contains("left:"), "{e}");
    assert!(
        e.contains(&format!("lazaret-coord-{}", d.hash)) || e.contains("runtime process"),
        "it does not name what is left: {e}"
    );
    // The coordinator's audit record says its teardown was incomplete.
    let records = d.audit_json();
    let last = records
        .iter()
        .rev()
        .find(|r| r["kind"] == "domain-down")
        .expect("no domain-down record");
    assert!(
        last["data"]["incomplete"]
            .as_str()
            .is_some_and(|s| s.contains("is NOT down")),
        "{last}"
    );
    let st = status_of(&d).expect("status does not list the broken domain");
    assert_eq!(st["state"], "broken", "{st}");
    assert!(!st["left"].as_array().unwrap().is_empty(), "{st}");
    let human = d.cmd_raw(STANDARD_PATH, &["status"]).output().unwrap();
    assert!(
        text(&human).0.contains(&format!("BROKEN {}", d.hash)),
        "{}",
        text(&human).0
    );
    // The runtime works again: `down` completes and says so.
    std::fs::write(&wrapper, &good).unwrap();
    let out = d.cmd_raw(STANDARD_PATH, &["down", "gv"]).output().unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    assert!(o.contains("is down"), "{o}");
    assert!(status_of(&d).is_none(), "still listed");
    assert!(
        processes_with(&ids).is_empty(),
        "runtime processes survived"
    );
    d.assert_gone();
    let _ = session.kill();
    let _ = session.wait();
}

/// A Storage Root that another user owns (who could replace the runtime
/// podman runs) is refused before anything starts.
#[test]
fn storage_root_of_another_user_is_refused() {
    if !common::can_run_as_root("handing the folder to another user needs root") {
        return;
    }
    let d = Domain::new("rc");
    let data = d.s.mkdir("data");
    nix::unistd::chown(&data, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let out = d.lazaret(&["sandbox", "up"]);
    let (o, e) = text(&out);
    assert!(!out.status.success(), "{o}{e}");
    assert!(
        e.contains(&format!("{} belongs to uid 65534", data.display())),
        "{e}"
    );
    assert!(d.containers().is_empty());
}

/// Issue 26 item 6: a workspace file's own key and table names reach the
/// host terminal only made visible. Key names holding OSC 52 (clipboard),
/// a title and an erase are refused and quoted by every command that names
/// them, and no byte of the sequences reaches the terminal.
#[test]
fn a_workspace_files_key_names_cannot_steer_the_terminal() {
    let d = Domain::new("gvd");
    let osc = "\\u001b]52;c;cm0gLXJmIH4vKg==\\u0007\\u001b]0;pwned\\u0007\\u001b[2J\\u001b[H";
    for (what, file) in [
        (
            "a key",
            format!("[profiles.gvd]\n\"x{osc}\" = [\"0.0.0.0/0\"]\n"),
        ),
        (
            "a table",
            format!(
                "[profiles.\"p{osc}\"]\nimage = \"{}\"\n",
                common::sandbox::BASE_IMAGE
            ),
        ),
        (
            "a widening key",
            format!("[profiles.gvd]\nallow_egress = [\"0.0.0.0/0\"]\n\"y{osc}\" = 1\n"),
        ),
    ] {
        d.s.write("ws/lazaret.toml", &file);
        for args in [
            &["sandbox", "up"][..],
            &["config", "show"][..],
            &["trust"][..],
        ] {
            let out = d.lazaret(args);
            let all = [out.stdout.as_slice(), out.stderr.as_slice()].concat();
            let (o, e) = text(&out);
            assert!(
                !all.iter().any(|b| *b == 0x1b || *b == 0x07),
                "{what}, `{}`: a control byte reached the terminal:\n{o:?}\n{e:?}",
                args.join(" ")
            );
            if args[0] == "sandbox" {
                assert!(!out.status.success(), "{what}: it started:\n{o}{e}");
                assert!(e.contains("␛]52;c;"), "{what}: the key is not shown:\n{e}");
            }
        }
        assert!(d.containers().is_empty(), "{:?}", d.containers());
    }
}
