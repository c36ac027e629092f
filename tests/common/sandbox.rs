//! A domain of its own for sandbox tests: scratch Storage Root, workspace
//! and configuration, torn down by exact container names when dropped.

use std::path::PathBuf;
use std::process::Output;

use super::{STANDARD_PATH, Scratch, lazaret_env, podman, text, user_home};

/// Built by scripts/test (`lazaret image build`) before the suite runs.
pub const BASE_IMAGE: &str = "localhost/lazaret/trixie:latest";

pub fn require_base_image() {
    let out = podman(&["image", "exists", BASE_IMAGE]);
    assert!(
        out.status.success(),
        "{BASE_IMAGE} is missing for the test user: run scripts/test, or `lazaret image build` as that user"
    );
}

/// A domain of its own: a scratch Storage Root, workspace and config, torn
/// down (by exact container names) when dropped.
pub struct Domain {
    pub s: Scratch,
    pub profile: &'static str,
    pub hash: String,
}

impl Domain {
    pub fn new(profile: &'static str) -> Self {
        require_base_image();
        let s = Scratch::new();
        let root = s.path();
        s.mkdir("ws");
        s.write(
            "config.toml",
            &format!(
                r#"[storage]
data_root = "{r}/data"
[network]
default_allow = []
default_deny = []
[escalation]
enabled = true
socket_dir = "{r}/sockets"
auto_approve = ["echo", "true", "touch", "ls", "id -un", "pwd"]
[profiles.gv]
image = "{BASE_IMAGE}"
persistent_dirs = ["/usr"]
volumes = [{{ host = "{{profile_dir}}/home", container = "/root/persist" }}]
env = {{ FOO = "bar baz", FWD = "env:LAZARET_TEST_FWD" }}
[profiles.rc]
image = "{BASE_IMAGE}"
runtime = "runc"
persistent_dirs = ["/usr", "/etc"]
volumes = [{{ host = "{{profile_dir}}/home", container = "/root/persist" }}]
env = {{ FOO = "bar baz", FWD = "env:LAZARET_TEST_FWD" }}
[profiles.net]
image = "{BASE_IMAGE}"
allow_egress = ["10.0.2.2/32"]
[profiles.netrc]
image = "{BASE_IMAGE}"
runtime = "runc"
allow_egress = ["10.0.2.2/32"]
[profiles.gvd]
image = "{BASE_IMAGE}"
workspace_mode = "direct"
[profiles.rcd]
image = "{BASE_IMAGE}"
runtime = "runc"
workspace_mode = "direct"
"#,
                r = root.display()
            ),
        );
        let hash = lazaret::domain::DomainAnchor::new(profile, &root.join("ws"))
            .unwrap()
            .hash()
            .to_string();
        Domain { s, profile, hash }
    }

    pub fn sandbox(&self) -> String {
        format!("lazaret-coord-{}", self.hash)
    }

    pub fn sidecar(&self) -> String {
        format!("lazaret-sidecar-{}", self.hash)
    }

    pub fn domain_root(&self) -> PathBuf {
        self.s.path().join("data/domains").join(&self.hash)
    }

    pub fn cmd(&self, path_var: &str, args: &[&str]) -> std::process::Command {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--profile", self.profile]);
        self.cmd_raw(path_var, &all)
    }

    /// `lazaret --config CONFIG ARGS` in the workspace, without `--profile`.
    pub fn cmd_raw(&self, path_var: &str, args: &[&str]) -> std::process::Command {
        let config = self.s.path().join("config.toml");
        let mut all = vec!["--config", config.to_str().unwrap()];
        all.extend_from_slice(args);
        lazaret_env(
            &user_home(),
            &self.s.path().join("ws"),
            path_var,
            &[
                ("LAZARET_USER_CONFIG", ""),
                ("LAZARET_TEST_FWD", "forwarded"),
                ("TERM", "xterm-256color"),
            ],
            &all,
        )
    }

    pub fn lazaret(&self, args: &[&str]) -> Output {
        self.cmd(STANDARD_PATH, args).output().unwrap()
    }

    pub fn up(&self) -> String {
        let out = self.lazaret(&["sandbox", "up"]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "sandbox up failed:\n{stdout}{stderr}");
        stdout
    }

    pub fn down(&self) {
        let out = self.lazaret(&["sandbox", "down"]);
        assert!(
            out.status.success(),
            "sandbox down failed: {}",
            text(&out).1
        );
    }

    /// `sh -c SCRIPT` in the sandbox: (exit code, stdout, stderr).
    pub fn sh(&self, script: &str) -> (i32, String, String) {
        self.sh_env(&[], script)
    }

    /// [`Domain::sh`] with extra `--env` settings for the exec.
    pub fn sh_env(&self, env: &[&str], script: &str) -> (i32, String, String) {
        let mut args: Vec<String> = vec!["exec".into()];
        for e in env {
            args.extend(["--env".to_string(), e.to_string()]);
        }
        args.extend([self.sandbox(), "sh".into(), "-c".into(), script.into()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = podman(&args);
        let (o, e) = text(&out);
        (out.status.code().unwrap_or(-1), o, e)
    }

    /// Containers of this domain that podman still knows.
    pub fn containers(&self) -> Vec<String> {
        let out = podman(&[
            "ps",
            "-a",
            "--filter",
            &format!("label=lazaret.domain={}", self.hash),
            "--format",
            "{{.Names}}",
        ]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// `lazaret audit --json` of this domain.
    pub fn audit_json(&self) -> Vec<serde_json::Value> {
        let out = self
            .cmd_raw(STANDARD_PATH, &["audit", self.profile, "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out).1);
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// The host workspace folder.
    pub fn ws(&self) -> PathBuf {
        self.s.path().join("ws")
    }

    /// Mounts under this domain's root in podman's user namespace.
    pub fn mounts(&self) -> Vec<String> {
        let out = podman(&["unshare", "cat", "/proc/self/mountinfo"]);
        let root = self.domain_root().display().to_string();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| m.starts_with(&root))
            .map(str::to_string)
            .collect()
    }

    pub fn assert_gone(&self) {
        assert_eq!(self.containers(), Vec::<String>::new(), "containers left");
        assert_eq!(self.mounts(), Vec::<String>::new(), "mounts left");
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        // Only what this test started, by exact name; sandbox before sidecar.
        let _ = self
            .cmd_raw(STANDARD_PATH, &["down", self.profile])
            .output();
        let _ = self.lazaret(&["sandbox", "down"]);
        for name in [self.sandbox(), self.sidecar()] {
            let _ = podman(&["rm", "-f", "-t", "0", "--ignore", &name]);
        }
    }
}
