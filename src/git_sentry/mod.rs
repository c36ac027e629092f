//! Git protection (decisions.md D1), the successor of the spec's Git Sentry.
//!
//! The host's `.git` is never writable from the sandbox. The agent commits
//! into a git directory of its own under the Domain Root:
//! - **isolated** mode (default for git workspaces): a clone sharing the
//!   host's objects, checked out on `lazaret/agent-<profile>`, is `/workspace`;
//! - **direct** mode: the host folder is `/workspace`, its `.git` read-only,
//!   and `GIT_DIR` points the agent's git at its own directory.
//!
//! In both, the host `.git` is mounted read-only *as a directory* (at its own
//! absolute path, so the alternates resolve, and at
//! `/run/lazaret/upstream.git` to fetch from), and [`sync`] copies the one
//! agent branch into the host repository.

pub mod review;
pub mod sync;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::config::WorkspaceMode;
use crate::engine::mounts::{self, Mount, WORKSPACE};

/// Where the host's `.git` appears in the sandbox for `git fetch`.
pub const UPSTREAM_IN_SANDBOX: &str = "/run/lazaret/upstream.git";
/// The agent's git directory in direct mode.
pub const AGENT_GITDIR_IN_SANDBOX: &str = "/run/lazaret/agent.git";

/// Overrides for every git the host runs: nothing in a repository's config
/// may make the host execute code (fsmonitor, hooks, pagers, external diff
/// and textconv drivers, credential helpers, remote helpers).
pub const HOST_GIT_OVERRIDES: &[&str] = &[
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "core.sshCommand=false",
    "core.askPass=",
    "diff.external=",
    "credential.helper=",
    "protocol.allow=never",
    "protocol.file.allow=always",
    "transfer.fsckObjects=true",
    "fetch.fsckObjects=true",
    "receive.fsckObjects=true",
    "uploadpack.allowAnySHA1InWant=false",
    "gc.auto=0",
    "maintenance.auto=false",
];

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("cannot run git: {0}; install git (sudo apt-get install git)")]
    Spawn(std::io::Error),
    #[error("`git {args}` failed: {stderr}")]
    Failed { args: String, stderr: String },
    #[error(
        "the workspace repository {0} has no commit yet, so the agent's branch has nothing to start from; commit once, or set workspace_mode = \"direct\""
    )]
    NoCommit(PathBuf),
    #[error(
        "{0}/.git is a file (a linked worktree or submodule); isolated mode needs a .git folder: set workspace_mode = \"direct\" for this profile"
    )]
    GitFile(PathBuf),
    #[error("cannot prepare {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("the agent's branch ref `{0}` is not a plain commit id; it is ignored")]
    BadRef(String),
}

/// A `git` run on the host with [`HOST_GIT_OVERRIDES`] and no `GIT_*`
/// variables from our own environment.
pub fn host_git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("GIT_") {
            c.env_remove(&k);
        }
    }
    c.env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0");
    for o in HOST_GIT_OVERRIDES {
        c.args(["-c", o]);
    }
    c.arg("-C").arg(dir);
    c
}

/// Runs a prepared git command, returning stdout.
pub fn run(mut cmd: Command) -> Result<String, GitError> {
    let out: Output = cmd.output().map_err(GitError::Spawn)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .filter(|a| !HOST_GIT_OVERRIDES.contains(&a.as_str()) && a != "-c")
            .collect();
        Err(GitError::Failed {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// How one domain's workspace is shared, decided from the profile and the
/// folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceLayout {
    pub mode: WorkspaceMode,
    /// The host workspace (canonical).
    pub host: PathBuf,
    /// The host repository's `.git` folder, when there is one.
    pub host_dotgit: Option<PathBuf>,
    /// The agent's git directory (isolated: `<clone>/.git`; direct: a
    /// separate directory), when the workspace is a git repository.
    pub agent_gitdir: Option<PathBuf>,
    /// The folder mounted at `/workspace`.
    pub workspace_source: PathBuf,
    /// `lazaret/agent-<profile>`
    pub branch: String,
    /// The Domain Root (holds the agent's git and the sync's shadow).
    pub domain_root: PathBuf,
}

impl WorkspaceLayout {
    /// Decides the layout: isolated by default for git workspaces, direct
    /// when asked or when the folder is not a repository.
    pub fn decide(
        host: &Path,
        domain_root: &Path,
        profile: &str,
        asked: Option<WorkspaceMode>,
    ) -> Result<Self, GitError> {
        let dot_git = host.join(".git");
        let branch = format!("lazaret/agent-{profile}");
        let meta = std::fs::symlink_metadata(&dot_git).ok();
        let is_repo = meta.as_ref().is_some_and(|m| m.is_dir());
        if meta.as_ref().is_some_and(|m| !m.is_dir()) && asked != Some(WorkspaceMode::Direct) {
            return Err(GitError::GitFile(host.to_path_buf()));
        }
        let mode = match (asked, is_repo) {
            (Some(m), true) => m,
            (_, false) => WorkspaceMode::Direct,
            (None, true) => WorkspaceMode::Isolated,
        };
        let (agent_gitdir, workspace_source) = match (mode, is_repo) {
            (WorkspaceMode::Isolated, _) => {
                let clone = domain_root.join("workspace");
                (Some(clone.join(".git")), clone)
            }
            (WorkspaceMode::Direct, true) => {
                (Some(domain_root.join("agent.git")), host.to_path_buf())
            }
            (WorkspaceMode::Direct, false) => (None, host.to_path_buf()),
        };
        Ok(WorkspaceLayout {
            mode,
            host: host.to_path_buf(),
            host_dotgit: is_repo.then_some(dot_git),
            agent_gitdir,
            workspace_source,
            branch,
            domain_root: domain_root.to_path_buf(),
        })
    }

    /// Creates the agent's git directory on first use; later runs reuse it
    /// and run no git in it (its config is the agent's to write).
    pub fn prepare(&self) -> Result<(), GitError> {
        let (Some(dotgit), Some(gitdir)) = (&self.host_dotgit, &self.agent_gitdir) else {
            return Ok(());
        };
        if gitdir.join("HEAD").exists() {
            return Ok(());
        }
        // Start from the agent's earlier branch if the host has it (the
        // clone was deleted), else from the host's current commit.
        let start = match run_rev_parse(&self.host, &format!("refs/heads/{}", self.branch)) {
            Some(sha) => sha,
            None => run_rev_parse(&self.host, "HEAD")
                .ok_or_else(|| GitError::NoCommit(self.host.clone()))?,
        };
        let parent = gitdir.parent().unwrap_or(gitdir);
        std::fs::create_dir_all(parent).map_err(|error| GitError::Io {
            path: parent.to_path_buf(),
            error,
        })?;
        match self.mode {
            WorkspaceMode::Isolated => {
                let clone = &self.workspace_source;
                let mut c = host_git(parent);
                c.args(["clone", "--quiet", "--shared", "--no-checkout"])
                    .arg(dotgit.parent().unwrap_or(&self.host))
                    .arg(clone);
                run(c)?;
                let mut c = host_git(clone);
                c.args(["checkout", "--quiet", "-B", &self.branch, &start]);
                run(c)?;
            }
            WorkspaceMode::Direct => {
                let mut c = host_git(parent);
                c.args(["clone", "--quiet", "--shared", "--bare"])
                    .arg(dotgit)
                    .arg(gitdir);
                run(c)?;
                for args in [
                    vec!["config", "core.bare", "false"],
                    vec!["update-ref", &format!("refs/heads/{}", self.branch), &start],
                    vec![
                        "symbolic-ref",
                        "HEAD",
                        &format!("refs/heads/{}", self.branch),
                    ],
                ] {
                    let mut c = host_git(gitdir);
                    c.args(&args);
                    run(c)?;
                }
                // An index matching the branch, so `git status` inside shows
                // the workspace's changes, not every file as new.
                let mut c = host_git(gitdir);
                c.env("GIT_DIR", gitdir).args(["read-tree", &start]);
                run(c)?;
            }
        }
        // The agent fetches from the read-only host .git.
        let mut c = host_git(&self.workspace_source);
        if self.mode == WorkspaceMode::Direct {
            c = host_git(gitdir);
        }
        c.args(["remote", "set-url", "origin", UPSTREAM_IN_SANDBOX]);
        run(c)?;
        Ok(())
    }

    /// The workspace part of the mount table.
    pub fn mounts(&self) -> Vec<Mount> {
        let mut m = vec![Mount::bind(&self.workspace_source, WORKSPACE, false)];
        if let Some(dotgit) = &self.host_dotgit {
            match self.mode {
                WorkspaceMode::Isolated => {
                    // The clone's own hooks are the agent's; they must not
                    // survive in a folder the host could later run git in.
                    m.push(Mount::Tmpfs {
                        container: Path::new(WORKSPACE).join(".git/hooks"),
                    });
                }
                WorkspaceMode::Direct => {
                    m.push(Mount::bind(dotgit, Path::new(WORKSPACE).join(".git"), true));
                }
            }
            // At its own path (the alternates name it) and for fetching.
            m.push(Mount::bind(dotgit, dotgit, true));
            m.push(Mount::bind(dotgit, UPSTREAM_IN_SANDBOX, true));
            if let (WorkspaceMode::Direct, Some(gitdir)) = (self.mode, &self.agent_gitdir) {
                m.push(Mount::bind(gitdir, AGENT_GITDIR_IN_SANDBOX, false));
                m.push(Mount::Tmpfs {
                    container: Path::new(AGENT_GITDIR_IN_SANDBOX).join("hooks"),
                });
            }
        }
        m.extend(
            mounts::masks(&self.workspace_source)
                .into_iter()
                .filter(|x| !x.container().starts_with(Path::new(WORKSPACE).join(".git"))),
        );
        m
    }

    /// Mount points under `/run/lazaret` this layout needs.
    pub fn run_lazaret_points(&self) -> Vec<&'static str> {
        match (&self.host_dotgit, self.mode) {
            (None, _) => vec![],
            (Some(_), WorkspaceMode::Isolated) => vec!["upstream.git"],
            (Some(_), WorkspaceMode::Direct) => vec!["upstream.git", "agent.git"],
        }
    }

    /// Environment for the sandbox (direct mode points git at the agent's dir).
    pub fn env(&self) -> Vec<(String, String)> {
        match (self.mode, &self.agent_gitdir) {
            (WorkspaceMode::Direct, Some(_)) => vec![
                ("GIT_DIR".into(), AGENT_GITDIR_IN_SANDBOX.into()),
                ("GIT_WORK_TREE".into(), WORKSPACE.into()),
            ],
            _ => vec![],
        }
    }
}

fn run_rev_parse(repo: &Path, rev: &str) -> Option<String> {
    let mut c = host_git(repo);
    c.args([
        "rev-parse",
        "--verify",
        "--quiet",
        &format!("{rev}^{{commit}}"),
    ]);
    run(c)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}
