//! The session-end review (decisions.md D1): what the agent changed that a
//! host tool would execute, and filesystem objects that are traps.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{GitError, WorkspaceLayout, host_git, run};
use crate::config::WorkspaceMode;
use crate::engine::mounts::MASKED;

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
    /// A symlink whose target leaves the workspace.
    SymlinkOut {
        path: String,
        target: String,
    },
    Fifo(String),
    Setuid(String),
    /// A nested repository (a `.git` folder or a gitlink/submodule).
    NestedRepo(String),
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finding::Executed(p) => write!(f, "executed by host tools: {p}"),
            Finding::Masked(p) => write!(f, "in a folder masked in the sandbox: {p}"),
            Finding::SymlinkOut { path, target } => {
                write!(f, "symlink leaving the workspace: {path} -> {target}")
            }
            Finding::Fifo(p) => write!(f, "FIFO (can hang host tools): {p}"),
            Finding::Setuid(p) => write!(f, "setuid/setgid bit: {p}"),
            Finding::NestedRepo(p) => write!(f, "nested repository: {p}"),
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
}

fn classify_path(path: &str) -> Option<Finding> {
    let name = path.rsplit('/').next().unwrap_or(path);
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
/// host's HEAD and, in direct mode, the working tree itself.
pub fn review(layout: &WorkspaceLayout) -> Result<Review, GitError> {
    let mut r = Review::default();
    if layout.host_dotgit.is_some() {
        let branch = format!("refs/heads/{}", layout.branch);
        let mut c = host_git(&layout.host);
        c.args(["merge-base", "HEAD", &branch]);
        if let Ok(base) = run(c) {
            let base = base.trim().to_string();
            let mut c = host_git(&layout.host);
            c.args([
                "diff",
                "--no-ext-diff",
                "--no-textconv",
                "--no-renames",
                "--name-only",
                "-z",
                &base,
                &branch,
            ]);
            r.changed.extend(
                run(c)?
                    .split('\0')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            );
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
        }
    }
    if layout.mode == WorkspaceMode::Direct {
        scan_tree(&layout.host, Path::new(""), &mut r)?;
        if layout.host_dotgit.is_some() {
            let mut c = host_git(&layout.host);
            c.args([
                "status",
                "--porcelain=v1",
                "-z",
                "--untracked-files=all",
                "--no-renames",
            ]);
            for entry in run(c)?.split('\0').filter(|s| s.len() > 3) {
                let path = entry[3..].to_string();
                if !r.changed.contains(&path) {
                    r.changed.push(path);
                }
            }
            r.hints.push("git status; git diff".into());
        }
    }
    r.changed.sort();
    r.changed.dedup();
    for p in &r.changed {
        if let Some(f) = classify_path(p) {
            r.findings.push(f);
        }
    }
    Ok(r)
}

/// Filesystem objects git cannot carry: FIFOs, setuid bits, nested `.git`,
/// and symlinks leaving the folder (direct mode's working tree).
fn scan_tree(root: &Path, rel: &Path, r: &mut Review) -> Result<(), GitError> {
    let dir = root.join(rel);
    let entries = std::fs::read_dir(&dir).map_err(|error| GitError::Io {
        path: dir.clone(),
        error,
    })?;
    for e in entries.flatten() {
        let name = e.file_name();
        let rel_path: PathBuf = rel.join(&name);
        let shown = rel_path.to_string_lossy().into_owned();
        let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        let ft = meta.file_type();
        if name == ".git" {
            if !rel.as_os_str().is_empty() {
                r.findings.push(Finding::NestedRepo(shown));
            }
            continue;
        }
        if ft.is_symlink() {
            let target = std::fs::read_link(e.path())
                .map(|t| t.to_string_lossy().into_owned())
                .unwrap_or_default();
            if leaves(&shown, &target) {
                r.findings.push(Finding::SymlinkOut {
                    path: shown,
                    target,
                });
            }
        } else if ft.is_fifo() {
            r.findings.push(Finding::Fifo(shown));
        } else if ft.is_dir() {
            scan_tree(root, &rel_path, r)?;
        } else if meta.permissions().mode() & 0o6000 != 0 {
            r.findings.push(Finding::Setuid(shown));
        }
    }
    Ok(())
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
    }
}
