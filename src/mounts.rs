//! The sandbox's mount table, built in one place (decisions.md D1).

use std::path::{Path, PathBuf};

use crate::config::ResolvedVolume;

/// Workspace folders that make a host tool run workspace code: masked with
/// a tmpfs in every sandbox, in both workspace modes (decisions.md D1).
pub const MASKED: &[&str] = &[
    ".git/hooks",
    ".vscode",
    ".idea",
    ".devcontainer",
    ".claude",
    ".codex",
    ".cursor",
    ".gemini",
    ".zed",
    ".husky",
    ".githooks",
];

/// Where the workspace appears in the sandbox.
pub const WORKSPACE: &str = "/workspace";

/// One entry of the mount table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mount {
    Bind {
        host: PathBuf,
        container: PathBuf,
        read_only: bool,
        /// Extra options from a profile volume (`z`, `nodev`, ...).
        options: Vec<String>,
    },
    /// Memory-only, gone with the container.
    Tmpfs { container: PathBuf },
}

impl Mount {
    pub fn bind(host: impl Into<PathBuf>, container: impl Into<PathBuf>, read_only: bool) -> Self {
        Mount::Bind {
            host: host.into(),
            container: container.into(),
            read_only,
            options: Vec::new(),
        }
    }

    pub fn container(&self) -> &Path {
        match self {
            Mount::Bind { container, .. } | Mount::Tmpfs { container } => container,
        }
    }

    /// The `podman run` arguments for this mount.
    pub fn podman_args(&self) -> Result<Vec<String>, String> {
        match self {
            Mount::Bind {
                host,
                container,
                read_only,
                options,
            } => {
                for p in [host.as_path(), container.as_path()] {
                    let s = p.to_string_lossy();
                    if s.contains(':') || s.contains(',') {
                        return Err(format!(
                            "`{s}` contains `:` or `,`, which podman's mount syntax cannot carry; rename it"
                        ));
                    }
                }
                let mut opts: Vec<&str> = vec![if *read_only { "ro" } else { "rw" }];
                opts.extend(
                    options
                        .iter()
                        .map(String::as_str)
                        .filter(|o| *o != "ro" && *o != "rw"),
                );
                Ok(vec![
                    "--volume".into(),
                    format!(
                        "{}:{}:{}",
                        host.display(),
                        container.display(),
                        opts.join(",")
                    ),
                ])
            }
            Mount::Tmpfs { container } => Ok(vec![
                "--tmpfs".into(),
                format!("{}:rw,nosuid,nodev,size=64m,mode=0755", container.display()),
            ]),
        }
    }
}

/// A profile volume as a mount.
pub fn volume(v: &ResolvedVolume) -> Mount {
    Mount::Bind {
        host: v.host.clone(),
        container: v.container.clone(),
        read_only: v.options.iter().any(|o| o == "ro"),
        options: v.options.clone(),
    }
}

/// Masks for the workspace at `host`: a folder the project has is mounted
/// read-only over itself (the agent may read the project's own settings,
/// never write them); a missing one is a tmpfs, so nothing written there
/// reaches the host. `.git/hooks` is masked only where it exists: inside a
/// read-only `.git` no mountpoint can be created. Folders in `created` are
/// mount points Lazaret itself made on an earlier start: still masks.
pub fn masks(host: &Path, created: &[PathBuf]) -> Vec<Mount> {
    MASKED
        .iter()
        .filter(|m| !m.starts_with(".git/") || host.join(m).is_dir())
        .map(|m| {
            let container = Path::new(WORKSPACE).join(m);
            let source = host.join(m);
            let real_dir = std::fs::symlink_metadata(&source).is_ok_and(|md| md.is_dir());
            if real_dir && !m.starts_with(".git/") && !created.contains(&source) {
                Mount::bind(source, container, true)
            } else {
                Mount::Tmpfs { container }
            }
        })
        .collect()
}

/// The host terminfo entry for `term`, if the host has one (NFR-3): the
/// sandbox gets it read-only where ncurses looks first.
pub fn terminfo(term: &str, search: &[PathBuf]) -> Option<Mount> {
    let first = term.chars().next()?;
    if !term
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.+".contains(c))
        || term.starts_with('.')
    {
        return None;
    }
    search
        .iter()
        .flat_map(|dir| {
            [
                dir.join(first.to_string()).join(term),
                dir.join(format!("{:02x}", first as u32)).join(term),
            ]
        })
        .find(|p| p.is_file())
        .map(|host| {
            Mount::bind(
                host,
                PathBuf::from("/etc/terminfo")
                    .join(first.to_string())
                    .join(term),
                true,
            )
        })
}

/// Where the host keeps terminfo: `$TERMINFO`, `~/.terminfo`,
/// `$TERMINFO_DIRS`, then the system folders.
pub fn terminfo_dirs(env: &dyn crate::host::HostEnv) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(t) = env.var("TERMINFO") {
        dirs.push(PathBuf::from(t));
    }
    if let Some(h) = env.home() {
        dirs.push(h.join(".terminfo"));
    }
    if let Some(list) = env.var("TERMINFO_DIRS") {
        dirs.extend(list.split(':').filter(|s| !s.is_empty()).map(PathBuf::from));
    }
    for d in [
        "/etc/terminfo",
        "/lib/terminfo",
        "/usr/share/terminfo",
        "/usr/lib/terminfo",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn podman_args_for_binds_and_tmpfs() {
        let m = Mount::bind("/h/a", "/c/a", true);
        assert_eq!(m.podman_args().unwrap(), vec!["--volume", "/h/a:/c/a:ro"]);
        let m = Mount::Bind {
            host: "/h".into(),
            container: "/c".into(),
            read_only: false,
            options: vec!["rw".into(), "z".into()],
        };
        assert_eq!(m.podman_args().unwrap()[1], "/h:/c:rw,z");
        assert!(Mount::bind("/h:x", "/c", false).podman_args().is_err());
        let t = Mount::Tmpfs {
            container: "/workspace/.vscode".into(),
        };
        assert!(t.podman_args().unwrap()[1].starts_with("/workspace/.vscode:rw,nosuid,nodev"));
    }

    #[test]
    fn terminfo_is_found_in_letter_and_hex_folders() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("x")).unwrap();
        std::fs::write(dir.path().join("x/xterm-ghostty"), "ti").unwrap();
        std::fs::create_dir_all(dir.path().join("6b")).unwrap();
        std::fs::write(dir.path().join("6b/kitty"), "ti").unwrap();
        let dirs = vec![dir.path().to_path_buf()];
        let m = terminfo("xterm-ghostty", &dirs).unwrap();
        assert_eq!(m.container(), Path::new("/etc/terminfo/x/xterm-ghostty"));
        assert!(terminfo("kitty", &dirs).is_some());
        assert!(terminfo("../../etc/passwd", &dirs).is_none());
        assert!(terminfo("alacritty", &dirs).is_none());
    }
}
