//! Shared helpers for integration tests.
//!
//! Lazaret is used rootless, so tests that run `lazaret` (or podman through
//! it) do so as an unprivileged user. A developer runs the suite as their
//! own user; CI runs as root and names a test user in `LAZARET_TEST_USER`
//! (scripts/test creates it), and commands are then run through `runuser`.

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The user tests run Lazaret as, when the suite itself runs as root.
pub struct TestUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// `None` when the suite runs unprivileged (then Lazaret runs as us).
pub fn test_user() -> Option<&'static TestUser> {
    static USER: OnceLock<Option<TestUser>> = OnceLock::new();
    USER.get_or_init(|| {
        if !is_root() {
            return None;
        }
        let name = std::env::var("LAZARET_TEST_USER").expect(
            "the tests run as root: set LAZARET_TEST_USER to an unprivileged user \
             (scripts/test creates `lazaret-test`), or run them as a normal user",
        );
        let user = nix::unistd::User::from_name(&name)
            .expect("passwd lookup")
            .unwrap_or_else(|| panic!("LAZARET_TEST_USER={name} does not exist"));
        Some(TestUser {
            name,
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            home: user.dir,
        })
    })
    .as_ref()
}

/// A copy of the `lazaret` binary that the test user can execute (the
/// build folder may sit under a home the test user cannot enter).
pub fn lazaret_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let built = PathBuf::from(env!("CARGO_BIN_EXE_lazaret"));
        if test_user().is_none() {
            return built;
        }
        let dir = std::env::temp_dir().join(format!("lazaret-test-bin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let copy = dir.join("lazaret");
        std::fs::copy(&built, &copy).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
        copy
    })
    .clone()
}

/// A folder owned by whoever runs Lazaret in the tests, removed on drop.
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lazaret-test-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let s = Scratch { dir };
        s.chown(&s.path());
        s
    }

    /// Canonical path of the folder.
    pub fn path(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    /// Hands `path` to the test user (no-op when not root).
    pub fn chown(&self, path: &Path) {
        if let Some(u) = test_user() {
            nix::unistd::chown(
                path,
                Some(nix::unistd::Uid::from_raw(u.uid)),
                Some(nix::unistd::Gid::from_raw(u.gid)),
            )
            .unwrap();
        }
    }

    /// Creates a folder (and parents) owned by the test user.
    pub fn mkdir(&self, rel: &str) -> PathBuf {
        let p = self.path().join(rel);
        std::fs::create_dir_all(&p).unwrap();
        let mut q = p.clone();
        while q != self.path() {
            self.chown(&q);
            q = q.parent().unwrap().to_path_buf();
        }
        p
    }

    /// Writes a file owned by the test user.
    pub fn write(&self, rel: &str, contents: &str) -> PathBuf {
        let p = self.path().join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
            let mut q = parent.to_path_buf();
            while q.starts_with(self.path()) && q != self.path() {
                self.chown(&q);
                q = q.parent().unwrap().to_path_buf();
            }
        }
        std::fs::write(&p, contents).unwrap();
        self.chown(&p);
        p
    }
}

/// A `lazaret` invocation as the test user, with a clean environment:
/// `HOME` set to `home`, the given PATH, and `cwd`.
pub fn lazaret(home: &Path, cwd: &Path, path_var: &str, args: &[&str]) -> Command {
    let bin = lazaret_bin();
    let mut env: Vec<(String, String)> = vec![
        ("HOME".into(), home.display().to_string()),
        ("PATH".into(), path_var.into()),
        ("LANG".into(), "C.UTF-8".into()),
    ];
    if let Ok(dir) = std::env::var("LAZARET_LIBEXEC_DIR") {
        env.push(("LAZARET_LIBEXEC_DIR".into(), dir));
    }
    let mut cmd = match test_user() {
        Some(u) => {
            let runuser = ["/usr/sbin/runuser", "/sbin/runuser"]
                .into_iter()
                .find(|p| Path::new(p).exists())
                .unwrap_or("runuser");
            let mut c = Command::new(runuser);
            c.args(["-u", &u.name, "--", "env", "-i"]);
            c.arg(format!("USER={}", u.name));
            c.arg(format!("LOGNAME={}", u.name));
            for (k, v) in &env {
                c.arg(format!("{k}={v}"));
            }
            c.arg(&bin);
            c
        }
        None => {
            let mut c = Command::new(&bin);
            c.env_clear();
            c.envs(env);
            c
        }
    };
    cmd.args(args).current_dir(cwd);
    cmd
}

/// The PATH a normal user's shell has on Debian.
pub const STANDARD_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
