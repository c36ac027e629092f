//! The session-end review (decisions.md D1): what the agent changed that a
//! host tool would execute, and filesystem objects that are traps.

use std::path::{Path, PathBuf};

use lazaret_widgets::visible::visible;
use nix::sys::stat::SFlag;

use super::tree::{self, Snapshot, Trap, in_git_dir};
use super::{
    GitError, MOUNTPOINTS_FILE, SNAPSHOT_FILE, WORKSPACE_CONFIG, WorkspaceLayout, host_git,
    nofollow, run,
};
use crate::config::WorkspaceMode;
use crate::mounts::MASKED;

/// Files that host tools execute or obey (D1, security research §12).
const EXECUTED_FILES: &[&str] = &[
    ".envrc",
    ".env",
    ".gitattributes",
    ".gitmodules",
    "package.json",
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".pnpmfile.cjs",
    ".cargo/config.toml",
    ".cargo/config",
    "rust-toolchain.toml",
    "rust-toolchain",
    "build.rs",
    "Makefile",
    "makefile",
    "GNUmakefile",
    "Justfile",
    "justfile",
    "Taskfile.yml",
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "conftest.py",
    "tox.ini",
    "noxfile.py",
    ".pre-commit-config.yaml",
    "mise.toml",
    ".mise.toml",
    ".tool-versions",
    ".mcp.json",
    "go.mod",
    "build.gradle",
    "build.gradle.kts",
    "settings.gradle",
    "gradlew",
    "pom.xml",
    "Gemfile",
    "Rakefile",
    "Dockerfile",
    "docker-compose.yml",
    "compose.yaml",
    "CMakeLists.txt",
    "meson.build",
];

/// Folders whose contents host tools execute.
const EXECUTED_DIRS: &[&str] = &[
    ".github/workflows",
    ".gitlab-ci.yml",
    ".run",
    ".cargo",
    ".githooks",
    ".husky",
];

/// Why a path deserves a human's look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// A file a host tool executes or obeys was changed.
    Executed(String),
    /// A file under a folder Lazaret masks in the sandbox (an agent can
    /// still commit there with git plumbing).
    Masked(String),
    /// A Lazaret configuration file (the next start's configuration).
    Config(String),
    /// A symlink whose target leaves the workspace.
    SymlinkOut {
        path: String,
        target: String,
    },
    Fifo(String),
    /// A set-user-ID or set-group-ID bit; `fixed` when Lazaret removed it.
    Setuid {
        path: String,
        fixed: bool,
    },
    /// A device node; `fixed` when Lazaret removed it.
    Device {
        path: String,
        fixed: bool,
    },
    /// A nested repository in the agent's branch (a gitlink/submodule).
    NestedRepo(String),
    /// A `.git` folder or gitfile the agent created or changed: host git
    /// (a shell prompt, an IDE) would obey it in that folder.
    GitDir(String),
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Every path here is the agent's choice: shown visibly, so no
        // name can rewrite the terminal (decisions.md D8).
        let v = |s: &str| visible(s);
        let fixed = |x: bool| if x { "removed" } else { "NOT removed" };
        match self {
            Finding::Executed(p) => write!(f, "executed by host tools: {}", v(p)),
            Finding::Masked(p) => write!(f, "in a folder masked in the sandbox: {}", v(p)),
            Finding::Config(p) => write!(f, "Lazaret configuration (its next start): {}", v(p)),
            Finding::SymlinkOut { path, target } => write!(
                f,
                "symlink leaving the workspace: {} -> {}",
                v(path),
                v(target)
            ),
            Finding::Fifo(p) => write!(f, "FIFO (can hang host tools): {}", v(p)),
            Finding::Setuid { path, fixed: x } => {
                write!(f, "setuid/setgid bit ({}): {}", fixed(*x), v(path))
            }
            Finding::Device { path, fixed: x } => {
                write!(f, "device node ({}): {}", fixed(*x), v(path))
            }
            Finding::NestedRepo(p) => write!(f, "nested repository: {}", v(p)),
            Finding::GitDir(p) => write!(
                f,
                "git repository or gitfile made or changed by the agent (host git obeys it): {}",
                v(p)
            ),
        }
    }
}

/// The review of one domain.
#[derive(Debug, Clone, Default)]
pub struct Review {
    /// Every path the agent changed (relative to the workspace).
    pub changed: Vec<String>,
    pub findings: Vec<Finding>,
    /// Commands to inspect the changes on the host.
    pub hints: Vec<String>,
    /// Things the human should know about the review itself.
    pub notes: Vec<String>,
}

fn classify_path(path: &str) -> Option<Finding> {
    let name = path.rsplit('/').next().unwrap_or(path);
    if name == WORKSPACE_CONFIG {
        return Some(Finding::Config(path.to_string()));
    }
    if MASKED
        .iter()
        .any(|m| path == *m || path.starts_with(&format!("{m}/")))
    {
        return Some(Finding::Masked(path.to_string()));
    }
    if EXECUTED_FILES.contains(&path)
        || EXECUTED_FILES.contains(&name)
            && matches!(
                name,
                "Makefile"
                    | "build.rs"
                    | "package.json"
                    | "conftest.py"
                    | ".envrc"
                    | ".gitattributes"
            )
        || EXECUTED_DIRS
            .iter()
            .any(|d| path == *d || path.starts_with(&format!("{d}/")))
        || path.ends_with(".code-workspace")
    {
        return Some(Finding::Executed(path.to_string()));
    }
    None
}

/// Does a symlink at `path` (relative) with `target` leave the workspace?
fn leaves(path: &str, target: &str) -> bool {
    if target.starts_with('/') {
        return true;
    }
    let mut depth: i64 = path.matches('/').count() as i64;
    for part in target.split('/') {
        match part {
            ".." => depth -= 1,
            "." | "" => {}
            _ => depth += 1,
        }
        if depth < 0 {
            return true;
        }
    }
    false
}

/// Reviews the agent's work: its branch against where it forked from the
/// host's HEAD and, in direct mode, the folder against its snapshot from
/// the domain's first start. No git runs in a tree the agent wrote, and
/// every set-user-ID bit and device node the domain left is removed first.
pub fn review(layout: &WorkspaceLayout) -> Result<Review, GitError> {
    let mut r = Review::default();
    if layout.host_dotgit.is_some() {
        branch_review(layout, &mut r)?;
    }
    if layout.mode == WorkspaceMode::Direct {
        direct_review(layout, &mut r)?;
    }
    r.changed.sort();
    r.changed.dedup();
    for p in &r.changed {
        if let Some(f) = classify_path(p) {
            r.findings.push(f);
        }
    }
    for t in tree::sanitize_domain(&layout.domain_root, &layout.host) {
        let path = match t.path().strip_prefix(&layout.host) {
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => t.path().to_string_lossy().into_owned(),
        };
        r.findings.push(match t {
            Trap::Setuid { fixed, .. } => Finding::Setuid { path, fixed },
            Trap::Device { fixed, .. } => Finding::Device { path, fixed },
        });
    }
    Ok(r)
}

/// Where the agent's branch forked from the host's HEAD, and every path
/// it changed since; `None` when the branch does not exist. Read from the
/// host repository as objects only (no working tree, attributes, drivers).
pub(super) fn branch_changes(
    layout: &WorkspaceLayout,
) -> Result<Option<(String, Vec<String>)>, GitError> {
    let branch = format!("refs/heads/{}", layout.branch);
    let mut c = host_git(&layout.host);
    c.args(["merge-base", "HEAD", &branch]);
    let Ok(base) = run(c) else {
        return Ok(None);
    };
    let base = base.trim().to_string();
    let mut c = host_git(&layout.host);
    c.args([
        "diff-tree",
        "-r",
        "--no-ext-diff",
        "--no-textconv",
        "--no-renames",
        "--name-only",
        "-z",
        &base,
        &branch,
    ]);
    let changed = run(c)?
        .split('\0')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    Ok(Some((base, changed)))
}

/// The agent's branch in the host repository: read as objects only (no
/// working tree, no attributes, no drivers).
fn branch_review(layout: &WorkspaceLayout, r: &mut Review) -> Result<(), GitError> {
    let Some((_, changed)) = branch_changes(layout)? else {
        return Ok(());
    };
    let branch = format!("refs/heads/{}", layout.branch);
    r.changed.extend(changed);
    // Modes from the branch's tree: symlinks and gitlinks.
    let mut c = host_git(&layout.host);
    c.args(["ls-tree", "-r", "-z", "--full-tree", &branch]);
    for entry in run(c)?.split('\0').filter(|s| !s.is_empty()) {
        let Some((meta, path)) = entry.split_once('\t') else {
            continue;
        };
        let mut f = meta.split(' ');
        let (mode, _kind, oid) = (f.next().unwrap_or(""), f.next(), f.next().unwrap_or(""));
        match mode {
            "120000" => {
                let mut c = host_git(&layout.host);
                c.args(["cat-file", "blob", oid]);
                let target = run(c)?;
                if leaves(path, &target) {
                    r.findings.push(Finding::SymlinkOut {
                        path: path.into(),
                        target,
                    });
                }
            }
            "160000" => r.findings.push(Finding::NestedRepo(path.into())),
            _ => {}
        }
    }
    r.hints
        .push(format!("git log --oneline HEAD..{}", layout.branch));
    r.hints.push(format!("git diff HEAD...{}", layout.branch));
    Ok(())
}

/// Direct mode: the folder now against its snapshot from the first start,
/// read without following a symlink.
fn direct_review(layout: &WorkspaceLayout, r: &mut Review) -> Result<(), GitError> {
    let host_repo = layout.host_dotgit.is_some();
    let io = |error| GitError::Io {
        path: layout.host.clone(),
        error,
    };
    let now = Snapshot::take(&layout.host, host_repo).map_err(io)?;
    let snap = layout.domain_root.join(SNAPSHOT_FILE);
    let base = match Snapshot::load(&snap).map_err(|error| GitError::Io {
        path: snap.clone(),
        error,
    })? {
        Some(b) => b,
        None => {
            r.notes.push(
                "no snapshot from the domain's first start: every file counts as changed".into(),
            );
            Snapshot::default()
        }
    };
    // Lazaret's own mount points (empty while they are unused) are no
    // change of the agent's.
    let points: Vec<PathBuf> = std::fs::read_to_string(layout.domain_root.join(MOUNTPOINTS_FILE))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| Path::new(l).strip_prefix(&layout.host).ok())
        .map(Path::to_path_buf)
        .collect();
    let empty_point = |p: &Path| {
        points.iter().any(|m| m == p)
            && std::fs::symlink_metadata(layout.host.join(p)).is_ok_and(|m| {
                if m.is_dir() {
                    !now.0.keys().any(|k| k.parent() == Some(p))
                } else {
                    m.is_file() && m.len() == 0
                }
            })
    };
    let mut git_dirs: Vec<PathBuf> = Vec::new();
    for p in base.changed_since(&now) {
        if empty_point(&p) {
            continue;
        }
        if let Some(g) = in_git_dir(&p)
            && !(host_repo && g == Path::new(".git"))
            && !git_dirs.contains(&g)
        {
            git_dirs.push(g);
        }
        let shown = p.to_string_lossy().into_owned();
        let Some(st) = now.0.get(&p) else {
            r.changed.push(shown);
            continue;
        };
        let kind = st.kind();
        // A bare repository (no `.git` in its name): git obeys it for
        // anyone whose shell enters that folder.
        if p.file_name() == Some(std::ffi::OsStr::new("HEAD"))
            && let Some(dir) = p.parent()
            && now.0.contains_key(&dir.join("objects"))
            && now.0.contains_key(&dir.join("refs"))
            && in_git_dir(dir).is_none()
            && !git_dirs.contains(&dir.to_path_buf())
        {
            git_dirs.push(dir.to_path_buf());
        }
        if kind == SFlag::S_IFLNK {
            let target = read_link(&layout.host, &p).unwrap_or_default();
            if leaves(&shown, &target) {
                r.findings.push(Finding::SymlinkOut {
                    path: shown.clone(),
                    target,
                });
            }
        } else if kind == SFlag::S_IFIFO {
            r.findings.push(Finding::Fifo(shown.clone()));
        }
        if kind != SFlag::S_IFDIR || !base.0.contains_key(&p) {
            r.changed.push(shown);
        }
    }
    for g in git_dirs {
        r.findings
            .push(Finding::GitDir(g.to_string_lossy().into_owned()));
    }
    Ok(())
}

/// A symlink's target, its folder opened without following symlinks.
fn read_link(root: &Path, rel: &Path) -> Option<String> {
    let dir = nofollow::open_dir(root, rel.parent()?).ok()?;
    nix::fcntl::readlinkat(&dir, rel.file_name()?)
        .ok()
        .map(|t| t.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlink_escapes() {
        assert!(leaves("a", "/etc/passwd"));
        assert!(leaves("a", "../x"));
        assert!(leaves("d/a", "../../x"));
        assert!(!leaves("d/a", "../x"));
        assert!(!leaves("a", "b/c"));
        assert!(leaves("a", "b/../../c"));
    }

    #[test]
    fn paths_are_classified() {
        assert_eq!(
            classify_path(".vscode/tasks.json"),
            Some(Finding::Masked(".vscode/tasks.json".into()))
        );
        assert_eq!(
            classify_path("sub/Makefile"),
            Some(Finding::Executed("sub/Makefile".into()))
        );
        assert_eq!(
            classify_path(".github/workflows/ci.yml"),
            Some(Finding::Executed(".github/workflows/ci.yml".into()))
        );
        assert_eq!(classify_path("src/main.rs"), None);
        assert_eq!(
            classify_path("sub/lazaret.toml"),
            Some(Finding::Config("sub/lazaret.toml".into()))
        );
    }

    #[test]
    fn agent_names_are_shown_visibly() {
        let f = Finding::Executed("a\u{1b}[2J\u{202e}Makefile".into());
        assert_eq!(
            f.to_string(),
            "executed by host tools: a␛[2J<U+202E>Makefile"
        );
    }
}
