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

pub mod nofollow;
pub mod reads;
pub mod review;
pub mod sync;
pub mod tree;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::config::WorkspaceMode;
use crate::mounts::{self, Mount, WORKSPACE};

/// Where the host's `.git` appears in the sandbox for `git fetch`.
pub const UPSTREAM_IN_SANDBOX: &str = "/run/lazaret/upstream.git";
/// The agent's git directory in direct mode.
pub const AGENT_GITDIR_IN_SANDBOX: &str = "/run/lazaret/agent.git";

/// Files under the Domain Root that remember the workspace as it was when
/// the domain first started (decisions.md D8).
/// `plain` or `git`: what the folder was at the first start. A `.git` that
/// appears later (the agent's, or a leftover mount point) never makes a
/// plain folder the host's repository.
pub const KIND_FILE: &str = "workspace.kind";
/// Direct mode: the workspace's metadata at the first start ([`tree`]).
pub const SNAPSHOT_FILE: &str = "workspace.snapshot";
pub use crate::domain::MOUNTPOINTS_FILE;
/// An empty folder and file mounted read-only over paths the agent must not
/// create (`/workspace/.git` of a plain folder, `/workspace/lazaret.toml`).
const EMPTY_DIR: &str = "empty.d";
const EMPTY_FILE: &str = "empty.toml";
/// The workspace configuration file the sandbox must not write (its own
/// next start's configuration).
pub const WORKSPACE_CONFIG: &str = "lazaret.toml";

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
    // No recursion into (agent-writable) submodules, no attributes from
    // outside the repository, no index refresh or untracked cache writes.
    "submodule.recurse=false",
    "fetch.recurseSubmodules=false",
    "diff.ignoreSubmodules=all",
    "status.submoduleSummary=false",
    "core.attributesFile=/dev/null",
    "core.untrackedCache=false",
    "core.splitIndex=false",
    "index.skipHash=false",
    "feature.manyFiles=false",
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
    #[error("the agent's {0}; it is ignored")]
    Unreadable(String),
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
    // Only the repository's own configuration: filter, diff and merge
    // drivers defined globally (git-lfs, ...) must not meet attributes the
    // agent wrote.
    c.env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_ATTR_NOSYSTEM", "1")
        .env("GIT_NO_LAZY_FETCH", "1");
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
            // Git repeats names from the agent's tree and refs.
            stderr: lazaret_widgets::visible::visible(String::from_utf8_lossy(&out.stderr).trim()),
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
        branch: &str,
        asked: Option<WorkspaceMode>,
    ) -> Result<Self, GitError> {
        let dot_git = host.join(".git");
        let branch = branch.to_string();
        let meta = std::fs::symlink_metadata(&dot_git).ok();
        let was_plain =
            std::fs::read_to_string(domain_root.join(KIND_FILE)).is_ok_and(|k| k.trim() == "plain");
        // An empty `.git` (the read-only mount point another domain on this
        // plain folder made) is not a repository: git itself needs HEAD.
        let is_repo = !was_plain
            && meta.as_ref().is_some_and(|m| m.is_dir())
            && std::fs::symlink_metadata(dot_git.join("HEAD")).is_ok();
        if !was_plain
            && meta.as_ref().is_some_and(|m| !m.is_dir())
            && asked != Some(WorkspaceMode::Direct)
        {
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
        self.remember_start()?;
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

    /// On the first start: what the folder is (plain or a repository) and,
    /// in direct mode, a metadata snapshot of it for `lazaret review`.
    fn remember_start(&self) -> Result<(), GitError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error| GitError::Io { path, error }
        };
        let root = &self.domain_root;
        std::fs::create_dir_all(root).map_err(io(root))?;
        let kind = root.join(KIND_FILE);
        if !kind.exists() {
            let k = if self.host_dotgit.is_some() {
                "git\n"
            } else {
                "plain\n"
            };
            std::fs::write(&kind, k).map_err(io(&kind))?;
        }
        let snap = root.join(SNAPSHOT_FILE);
        if self.mode == WorkspaceMode::Direct && !snap.exists() {
            tree::Snapshot::take(&self.host, self.host_dotgit.is_some())
                .and_then(|s| s.save(&snap))
                .map_err(io(&snap))?;
        }
        for (p, dir) in [(EMPTY_DIR, true), (EMPTY_FILE, false)] {
            let p = root.join(p);
            if dir {
                std::fs::create_dir_all(&p).map_err(io(&p))?;
            } else if !p.exists() {
                std::fs::write(&p, b"").map_err(io(&p))?;
            }
        }
        Ok(())
    }

    /// `.git` folders and gitfiles below the top of the host folder (the
    /// top one is the host's repository, handled apart); not entered.
    fn nested_git(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let _ = nofollow::walk(&self.host, &mut |rel, _, _, name| {
            if name == ".git" {
                if rel != Path::new(".git") {
                    found.push(rel.to_path_buf());
                }
                return nofollow::Descend::No;
            }
            nofollow::Descend::Yes
        });
        found
    }

    /// Direct mode: what the agent must not write in the host folder. The
    /// configuration of the next start, `.git` of a plain folder, and every
    /// nested `.git` and gitfile (a submodule's) are read-only, present or
    /// not (decisions.md D8).
    fn direct_guards(&self) -> Vec<Mount> {
        let ws = Path::new(WORKSPACE);
        let mut m = Vec::new();
        let config = self.host.join(WORKSPACE_CONFIG);
        if std::fs::symlink_metadata(&config).is_ok() {
            m.push(Mount::bind(&config, ws.join(WORKSPACE_CONFIG), true));
        } else {
            m.push(Mount::bind(
                self.domain_root.join(EMPTY_FILE),
                ws.join(WORKSPACE_CONFIG),
                true,
            ));
        }
        if self.host_dotgit.is_none() {
            let top = self.host.join(".git");
            let source = if std::fs::symlink_metadata(&top).is_ok() {
                top
            } else {
                self.domain_root.join(EMPTY_DIR)
            };
            m.push(Mount::bind(source, ws.join(".git"), true));
        }
        for rel in self.nested_git() {
            m.push(Mount::bind(self.host.join(&rel), ws.join(&rel), true));
        }
        m
    }

    /// Host paths the mount table would create as mount points (they do
    /// not exist yet); teardown removes them again when they are empty.
    pub fn new_mountpoints(&self, table: &[Mount]) -> Vec<PathBuf> {
        table
            .iter()
            .filter_map(|m| m.container().strip_prefix(WORKSPACE).ok())
            .filter(|rel| !rel.as_os_str().is_empty())
            .map(|rel| self.workspace_source.join(rel))
            .filter(|p| std::fs::symlink_metadata(p).is_err())
            .collect()
    }

    /// The workspace part of the mount table.
    pub fn mounts(&self) -> Vec<Mount> {
        let mut m = vec![Mount::bind(&self.workspace_source, WORKSPACE, false)];
        if self.mode == WorkspaceMode::Direct {
            m.extend(self.direct_guards());
        }
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
        // Mount points made by an earlier start (the list is Lazaret's, in
        // the Domain Root) are not the project's folders.
        let created: Vec<PathBuf> =
            std::fs::read_to_string(self.domain_root.join(MOUNTPOINTS_FILE))
                .unwrap_or_default()
                .lines()
                .map(PathBuf::from)
                .collect();
        m.extend(
            mounts::masks(&self.workspace_source, &created)
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

/// The commits the host's branch `branch` has beyond `oid` (which the
/// branch would be set back to), when it has any: their count, or None
/// when `oid` is the branch or ahead of it, or the branch does not exist.
/// `oid` may be unknown to the host (the agent's, never propagated): then
/// every commit is counted as going.
pub fn commits_beyond(host: &Path, branch: &str, oid: &str) -> Option<u64> {
    let tip = run_rev_parse(host, &format!("refs/heads/{branch}"))?;
    if tip == oid {
        return None;
    }
    let mut c = host_git(host);
    c.args(["rev-list", "--count", &tip]);
    if run_rev_parse(host, oid).is_some() {
        c.arg(format!("^{oid}"));
    }
    c.arg("--");
    let n: u64 = run(c).ok()?.trim().parse().ok()?;
    (n > 0).then_some(n)
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
