//! Issue 17 item 1, end to end: a brand-new account with no Lazaret
//! configuration runs `lazaret ui` in a git project (in tmux) and gets a
//! working shell in a gVisor sandbox, from the built-in defaults alone.
//!
//! Needs root (it creates and removes a throwaway user). The base image is
//! copied from the test user's storage (`podman save | podman load`) rather
//! than built again, to keep the run short.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{STANDARD_PATH, lazaret_bin, shell_quote};

const BASE_IMAGE: &str = "localhost/lazaret/trixie:latest";

/// A throwaway account prepared as scripts/setup's `prepare_user` does;
/// removed with its storage, ids and processes when dropped.
struct FreshUser {
    name: String,
    uid: u32,
    home: PathBuf,
}

impl FreshUser {
    fn create() -> FreshUser {
        let name = format!("lzfr{}", std::process::id() % 100_000);
        run(Command::new("useradd").args(["-m", "-s", "/bin/bash", &name]));
        let user = nix::unistd::User::from_name(&name).unwrap().unwrap();
        common::clear_uid_leftovers(user.uid.as_raw());
        let u = FreshUser {
            name: name.clone(),
            uid: user.uid.as_raw(),
            home: user.dir,
        };
        for f in ["/etc/subuid", "/etc/subgid"] {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            let start = text
                .lines()
                .filter_map(|l| {
                    let mut p = l.split(':').skip(1);
                    Some(p.next()?.parse::<u64>().ok()? + p.next()?.parse::<u64>().ok()?)
                })
                .fold(100_000, u64::max);
            std::fs::write(f, format!("{text}{name}:{start}:65536\n")).unwrap();
        }
        let conf = u.home.join(".config/containers");
        std::fs::create_dir_all(&conf).unwrap();
        std::fs::write(
            conf.join("storage.conf"),
            "[storage]\ndriver = \"overlay\"\n",
        )
        .unwrap();
        run(Command::new("chown")
            .args(["-R", &format!("{name}:{name}")])
            .arg(u.home.join(".config")));
        u
    }

    /// `program args` as this user, with a login-like clean environment.
    fn cmd(&self, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new("runuser");
        c.args(["-u", &self.name, "--", "env", "-i"])
            .arg(format!("HOME={}", self.home.display()))
            .arg(format!("USER={}", self.name))
            .arg(format!("LOGNAME={}", self.name))
            .arg(format!("PATH={STANDARD_PATH}"))
            .arg("LANG=C.UTF-8")
            .arg("TERM=xterm-256color");
        if let Ok(dir) = std::env::var("LAZARET_LIBEXEC_DIR") {
            c.arg(format!("LAZARET_LIBEXEC_DIR={dir}"));
        }
        c.arg(program).args(args).current_dir("/");
        c
    }

    fn tmux(&self, args: &[&str]) -> String {
        let mut all = vec!["-L", "first-run"];
        all.extend_from_slice(args);
        let out = self.cmd("tmux", &all).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for FreshUser {
    fn drop(&mut self) {
        let _ = self
            .cmd("tmux", &["-L", "first-run", "kill-server"])
            .status();
        let _ = self
            .cmd("podman", &["rm", "--all", "--force", "--time", "0"])
            .status();
        let _ = self.cmd("podman", &["system", "reset", "--force"]).status();
        // Whatever this throwaway user still runs (podman's pause process,
        // a coordinator) was started by this test.
        let _ = Command::new("pkill")
            .args(["-KILL", "-U", &self.uid.to_string()])
            .status();
        std::thread::sleep(Duration::from_millis(500));
        let _ = Command::new("userdel")
            .args(["-r", "-f", &self.name])
            .status();
        common::clear_uid_leftovers(self.uid);
        for f in ["/etc/subuid", "/etc/subgid"] {
            if let Ok(text) = std::fs::read_to_string(f) {
                let prefix = format!("{}:", self.name);
                let kept: String = text
                    .lines()
                    .filter(|l| !l.starts_with(&prefix))
                    .map(|l| format!("{l}\n"))
                    .collect();
                let _ = std::fs::write(f, kept);
            }
        }
    }
}

fn run(c: &mut Command) {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{c:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn new_account_with_no_configuration_gets_a_gvisor_shell() {
    if !common::can_run_as_root("creating a throwaway user needs root") {
        return;
    }
    let started = Instant::now();
    let user = FreshUser::create();
    assert!(!user.home.join(".config/lazaret").exists());

    // The base image, from the test user's storage.
    let mut save = common::as_test_user(
        Path::new("/usr/bin/podman"),
        &common::user_home(),
        STANDARD_PATH,
        &[],
    );
    save.args(["save", BASE_IMAGE])
        .current_dir("/")
        .stdout(Stdio::piped());
    let mut saver = save.spawn().unwrap();
    let mut load = user.cmd("podman", &["load", "--quiet"]);
    load.stdin(saver.stdout.take().unwrap());
    run(&mut load);
    assert!(saver.wait().unwrap().success());

    let proj = user.home.join("proj");
    let script = format!(
        "mkdir -p {p} && cd {p} && git init -q && git -c user.name=t -c user.email=t@t commit -q --allow-empty -m init",
        p = shell_quote(&proj.display().to_string())
    );
    run(&mut user.cmd("sh", &["-c", &script]));

    user.tmux(&[
        "new-session",
        "-d",
        "-x",
        "120",
        "-y",
        "35",
        "sh",
        "-c",
        &format!(
            "cd {} && exec {} ui",
            shell_quote(&proj.display().to_string()),
            shell_quote(&lazaret_bin().display().to_string())
        ),
    ]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut screen = String::new();
    let mut typed = false;
    while Instant::now() < deadline {
        screen = user.tmux(&["capture-pane", "-p", "-J", "-t", "0"]);
        if screen.contains("FAILED") {
            break;
        }
        if !typed && screen.contains('#') && screen.contains("shell") {
            // Prompt visible: ask the kernel who it is.
            user.tmux(&[
                "send-keys",
                "-t",
                "0",
                "-l",
                "dmesg | head -2; echo END-$((6*7))",
            ]);
            user.tmux(&["send-keys", "-t", "0", "Enter"]);
            typed = true;
        }
        if typed && screen.contains("END-42") {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(screen.contains("END-42"), "no shell answered:\n{screen}");
    // gVisor's kernel log opens with "Starting gVisor..." (the UI's own
    // self-test report may name gVisor too, so match the log line).
    assert!(
        screen.contains("Starting gVisor"),
        "not a gVisor sandbox:\n{screen}"
    );
    assert!(!user.home.join(".config/lazaret/config.toml").exists());
    eprintln!("first run to a gVisor shell: {:.1?}", started.elapsed());
}
