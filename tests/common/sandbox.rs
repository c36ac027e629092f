//! A domain of its own for sandbox tests: scratch Storage Root, workspace
//! and configuration, torn down by exact container names when dropped.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lazaret::domain::DomainAnchor;
use lazaret::rundir::RuntimeDir;

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
    pub anchor: DomainAnchor,
    pub hash: String,
    /// Other profiles a test started on this workspace (see [`Domain::other`]).
    others: Mutex<Vec<&'static str>>,
}

/// The runtime folder of the user the tests run Lazaret as (it has no
/// XDG_RUNTIME_DIR in the tests' environment).
pub fn rundir() -> PathBuf {
    let uid = match super::test_user() {
        Some(u) => u.uid,
        None => nix::unistd::geteuid().as_raw(),
    };
    lazaret::rundir::fallback_parent().join(format!("lazaret-{uid}"))
}

/// [`rundir`] as the product names files in it.
pub fn runtime_dir() -> RuntimeDir {
    RuntimeDir::unchecked(rundir())
}

/// `true` when nobody holds `path`'s lock (or it does not exist).
pub fn lock_is_free(path: &Path) -> bool {
    lazaret::coordinator::lock::try_exclusive(path).is_ok_and(|g| g.is_some())
}

/// Containers of domain `hash` that podman still knows.
pub fn containers_of(hash: &str) -> Vec<String> {
    let out = podman(&[
        "ps",
        "-a",
        "--filter",
        &format!("label={}={hash}", lazaret::engine::LABEL_DOMAIN),
        "--format",
        "{{.Names}}",
    ]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Polls until the domain of `anchor` is entirely gone: no containers, no
/// control socket, no certificates, no coordinator holding its lock, and
/// nothing `leftovers` reports (its mounts). The file names are the
/// product's own ([`DomainAnchor`]), so a rename cannot make this vacuous.
pub fn wait_domain_gone(anchor: &DomainAnchor, leftovers: impl Fn() -> Vec<String>) {
    let rt = runtime_dir();
    let hash = anchor.hash();
    let socket = anchor.control_socket(&rt);
    let certs = anchor.certs_dir(&rt);
    let owner = anchor.owner_lock(&rt);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let gone = containers_of(hash).is_empty()
            && leftovers().is_empty()
            && !socket.exists()
            && !certs.exists()
            && (!owner.exists() || lock_is_free(&owner));
        if gone {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "domain {hash} was not torn down: containers {:?}, left {:?}, socket {}, certs {}, lock held {}",
            containers_of(hash),
            leftovers(),
            socket.exists(),
            certs.exists(),
            !lock_is_free(&owner)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
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
auto_approve = ["echo *", "true", "touch *", "ls *", "id -un", "pwd"]
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
        let anchor = DomainAnchor::new(profile, &root.join("ws")).unwrap();
        Domain {
            s,
            profile,
            hash: anchor.hash().to_string(),
            anchor,
            others: Mutex::new(Vec::new()),
        }
    }

    pub fn sandbox(&self) -> String {
        self.anchor.sandbox_name()
    }

    pub fn sidecar(&self) -> String {
        self.anchor.sidecar_name()
    }

    /// The Session Coordinator's control socket.
    pub fn control_socket(&self) -> PathBuf {
        self.anchor.control_socket(&runtime_dir())
    }

    /// The Trust Anchor's certificate folder.
    pub fn certs_dir(&self) -> PathBuf {
        self.anchor.certs_dir(&runtime_dir())
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
        self.cmd_raw_env(path_var, &[], args)
    }

    /// This domain's entry in `lazaret status --json` (run with `env`), if
    /// it is listed.
    pub fn status_with(&self, env: &[(&str, &str)]) -> Option<serde_json::Value> {
        let out = self
            .cmd_raw_env(STANDARD_PATH, env, &["status", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out).1);
        let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        all.as_array()
            .unwrap()
            .iter()
            .find(|x| x["hash"] == self.hash.as_str())
            .cloned()
    }

    /// [`Domain::status_with`] in the tests' own environment.
    pub fn status(&self) -> Option<serde_json::Value> {
        self.status_with(&[])
    }

    /// [`Domain::cmd_raw`] with `extra` environment variables for Lazaret.
    pub fn cmd_raw_env(
        &self,
        path_var: &str,
        extra: &[(&str, &str)],
        args: &[&str],
    ) -> std::process::Command {
        let config = self.s.path().join("config.toml");
        let mut all = vec!["--config", config.to_str().unwrap()];
        all.extend_from_slice(args);
        let mut env = vec![
            ("LAZARET_USER_CONFIG", ""),
            ("LAZARET_TEST_FWD", "forwarded"),
            ("TERM", "xterm-256color"),
        ];
        env.extend_from_slice(extra);
        lazaret_env(
            &user_home(),
            &self.s.path().join("ws"),
            path_var,
            &env,
            &all,
        )
    }

    pub fn lazaret(&self, args: &[&str]) -> Output {
        self.cmd(STANDARD_PATH, args).output().unwrap()
    }

    /// [`Domain::lazaret`] without the `--profile` it adds.
    pub fn lazaret_raw(&self, args: &[&str]) -> Output {
        self.cmd_raw(STANDARD_PATH, args).output().unwrap()
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

    /// `lazaret exec PROFILE -- sh -c SCRIPT` as a new session:
    /// (exit code, stdout, stderr).
    pub fn exec_sh(&self, script: &str) -> (i32, String, String) {
        let out = self
            .cmd_raw(
                STANDARD_PATH,
                &["exec", self.profile, "--", "sh", "-c", script],
            )
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let (o, e) = text(&out);
        (out.status.code().unwrap_or(-1), o, e)
    }

    /// A session that holds the domain up until it is killed; returned
    /// once the domain is up, listed and runs commands.
    pub fn hold_up(&self) -> std::process::Child {
        use std::process::Stdio;
        let child = self
            .cmd_raw(STANDARD_PATH, &["exec", self.profile, "--", "sleep", "600"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.containers().len() < 2 || self.sh("true").0 != 0 || self.status().is_none() {
            assert!(Instant::now() < deadline, "the domain never came up");
            std::thread::sleep(Duration::from_millis(200));
        }
        child
    }

    /// Containers of this domain that podman still knows.
    pub fn containers(&self) -> Vec<String> {
        containers_of(&self.hash)
    }

    /// Polls until this domain is entirely gone, its mounts included.
    pub fn wait_until_gone(&self) {
        wait_domain_gone(&self.anchor, || self.mounts());
    }

    /// Appends `toml` (e.g. another profile) to this domain's configuration.
    pub fn add_config(&self, toml: &str) {
        let config = self.s.path().join("config.toml");
        let text = std::fs::read_to_string(&config).unwrap();
        self.s.write("config.toml", &format!("{text}{toml}"));
    }

    /// `lazaret --config CONFIG ARGS` in a terminal (tmux) of `cols` x
    /// `rows`, in the workspace; then the shell command `after`, if any
    /// (the pane stays while it runs).
    pub fn tmux(&self, cols: u16, rows: u16, args: &str, after: Option<&str>) -> super::Tmux {
        let run = format!(
            "{} --config {} {args}",
            super::lazaret_bin().display(),
            self.s.path().join("config.toml").display()
        );
        let command = match after {
            Some(after) => format!("sh -c {}", super::shell_quote(&format!("{run}; {after}"))),
            None => run,
        };
        super::Tmux::start(
            &self.ws(),
            cols,
            rows,
            &[("LAZARET_USER_CONFIG", ""), ("LAZARET_TEST_FWD", "x")],
            &command,
        )
    }

    /// The Domain Anchor of `profile` on this workspace, which the test is
    /// about to start: it is torn down with this one when dropped.
    pub fn other(&self, profile: &'static str) -> DomainAnchor {
        self.others.lock().unwrap().push(profile);
        self.anchor_of(profile)
    }

    /// The Domain Anchor of `profile` on this workspace.
    fn anchor_of(&self, profile: &str) -> DomainAnchor {
        DomainAnchor::new(profile, &self.ws()).unwrap()
    }

    /// `lazaret audit --json` of this domain.
    pub fn audit_json(&self) -> Vec<serde_json::Value> {
        self.audit_json_of(self.profile)
    }

    /// `lazaret audit PROFILE --json` of another profile on this workspace.
    pub fn audit_json_of(&self, profile: &str) -> Vec<serde_json::Value> {
        let out = self
            .cmd_raw(STANDARD_PATH, &["audit", profile, "--json"])
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
        let others = std::mem::take(&mut *self.others.lock().unwrap());
        for profile in others {
            let _ = self.cmd_raw(STANDARD_PATH, &["down", profile]).output();
            let anchor = self.anchor_of(profile);
            for name in [anchor.sandbox_name(), anchor.sidecar_name()] {
                let _ = podman(&["rm", "-f", "-t", "0", "--ignore", &name]);
            }
        }
    }
}
