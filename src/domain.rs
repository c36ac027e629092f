//! The Domain Anchor (spec §4.3.1): the pairing of one agent profile with one
//! canonical workspace, and every host resource named after it.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::rundir::RuntimeDir;

/// Spec §3.2.3 (1): `^[a-z0-9_-]{2,32}$`, checked byte by byte so no Unicode
/// look-alike or normalisation trick gets through.
pub fn validate_profile_name(name: &str) -> Result<(), String> {
    // The same rule the escalation protocol checks on every request.
    if lazaret_escalate::protocol::is_profile_name(name) {
        Ok(())
    } else {
        Err(format!(
            "security: profile name `{}` is not allowed: use 2 to 32 characters from a-z, 0-9, `_` and `-`",
            name.escape_debug()
        ))
    }
}

/// Lazaret's own folders in the Storage Root (the runsc wrapper podman
/// runs, every Domain Root, scratch space). A profile folder is
/// `{data_root}/{profile_name}`, so these names cannot be profile names.
pub const STORAGE_ROOT_INTERNAL: &[&str] = &["runtime", "domains", "tmp"];

/// Why `name` cannot be a profile's name even though it is well-formed.
pub fn reserved_profile_name(name: &str) -> Option<String> {
    STORAGE_ROOT_INTERNAL.contains(&name).then(|| {
        format!(
            "security: profile name `{name}` is reserved: {{data_root}}/{name} holds Lazaret's own files, and the profile's {{profile_dir}} would be that folder; rename the profile (reserved: {}); its new {{profile_dir}} starts empty",
            STORAGE_ROOT_INTERNAL.join(", ")
        )
    })
}

/// Entries of a Domain Root that Lazaret owns: its state store, log, live
/// policy, the agent's repositories, State Anchor layers. A volume may use
/// another plain folder name under `{domain_dir}` (e.g. `cache`), never
/// these. Lazaret's own files all carry a `.` or a State Anchor suffix, so
/// new ones are covered; new plain folder names must be added here.
pub fn is_domain_root_internal(name: &str) -> bool {
    const FOLDERS: &[&str] = &["workspace", "empty_lower", "snapshot"];
    FOLDERS.contains(&name)
        || name.contains('.')
        || name.ends_with("_changes")
        || name.ends_with("_work")
        || name.ends_with("_merged")
}

#[derive(Debug, thiserror::Error)]
pub enum DomainError {
    #[error("{0}")]
    ProfileName(String),
    #[error("workspace `{path}` cannot be used: {error}")]
    Workspace {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("workspace `{0}` is not a folder")]
    NotADirectory(PathBuf),
    #[error("workspace path `{0}` is not valid UTF-8; the Domain Anchor hashes UTF-8 text")]
    NotUtf8(PathBuf),
}

/// One (profile, canonical workspace) pair and its 12-hex-digit hash; for
/// a fork (`lazaret fork`, issue 30), (profile, workspace, fork name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainAnchor {
    profile: String,
    fork: Option<String>,
    workspace: PathBuf,
    hash: String,
}

/// A domain's name: its profile, and for a fork `PROFILE@FORK`. `@` is no
/// profile-name character, so the two never meet.
pub fn split_name(name: &str) -> (&str, Option<&str>) {
    match name.split_once('@') {
        Some((profile, fork)) => (profile, Some(fork)),
        None => (name, None),
    }
}

/// The name of the domain of `profile` that `typed` (a name as the user
/// gave it, perhaps `PROFILE@FORK`) names.
pub fn name_of(profile: &str, typed: Option<&str>) -> String {
    match typed.and_then(|t| split_name(t).1) {
        Some(fork) => format!("{profile}@{fork}"),
        None => profile.to_string(),
    }
}

/// A fork's name follows the profile-name rule (it is part of the branch
/// `lazaret/agent-PROFILE-FORK` and of the domain's name).
pub fn validate_fork_name(name: &str) -> Result<(), String> {
    if lazaret_escalate::protocol::is_profile_name(name) {
        Ok(())
    } else {
        Err(format!(
            "`{}` is not a fork name: use 2 to 32 characters from a-z, 0-9, `_` and `-`",
            name.escape_debug()
        ))
    }
}

/// The domain lock of the domain `hash` (also for a Domain Root that can
/// no longer say whose it is).
pub fn lock_file_of(rundir: &RuntimeDir, hash: &str) -> PathBuf {
    rundir.path().join(format!("lazaret_coord_{hash}.lock"))
}

impl DomainAnchor {
    /// Canonicalises `workspace` (it must be an existing folder) and hashes
    /// `"<name>:<canonical path>"`; `name` is a profile's, or a fork's
    /// `PROFILE@FORK` (see [`split_name`]).
    pub fn new(name: &str, workspace: &Path) -> Result<Self, DomainError> {
        let (profile, fork) = split_name(name);
        validate_profile_name(profile).map_err(DomainError::ProfileName)?;
        if let Some(f) = fork {
            validate_fork_name(f).map_err(DomainError::ProfileName)?;
        }
        let canonical = workspace
            .canonicalize()
            .map_err(|error| DomainError::Workspace {
                path: workspace.to_path_buf(),
                error,
            })?;
        if !canonical.is_dir() {
            return Err(DomainError::NotADirectory(canonical));
        }
        let text = canonical
            .to_str()
            .ok_or_else(|| DomainError::NotUtf8(canonical.clone()))?;
        let hash = domain_hash(name, text);
        Ok(DomainAnchor {
            profile: profile.to_string(),
            fork: fork.map(str::to_string),
            workspace: canonical,
            hash,
        })
    }

    /// The profile whose configuration the domain runs (a fork's too).
    pub fn profile(&self) -> &str {
        &self.profile
    }

    /// The fork's name, for a domain `lazaret fork` made.
    pub fn fork(&self) -> Option<&str> {
        self.fork.as_deref()
    }

    /// The domain's name: the profile's, or `PROFILE@FORK`. Commands take
    /// it where they take a profile, and it is what the domain's labels,
    /// records and status carry.
    pub fn name(&self) -> String {
        match &self.fork {
            Some(fork) => format!("{}@{fork}", self.profile),
            None => self.profile.clone(),
        }
    }

    /// The canonical workspace path.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The `domain_hash`: first 12 hex digits of the SHA-256.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// `{data_root}/domains/{hash}`
    pub fn domain_root(&self, data_root: &Path) -> PathBuf {
        data_root.join("domains").join(&self.hash)
    }

    /// The Agent Sandbox container: `lazaret-coord-{hash}` (spec §4.3.1).
    pub fn sandbox_name(&self) -> String {
        format!("lazaret-coord-{}", self.hash)
    }

    /// The Network Sidecar container of this domain.
    pub fn sidecar_name(&self) -> String {
        format!("lazaret-sidecar-{}", self.hash)
    }

    /// The agent's own branch (decisions.md D1); a fork's is
    /// `lazaret/agent-PROFILE-FORK`.
    pub fn agent_branch(&self) -> String {
        match &self.fork {
            Some(fork) => format!("lazaret/agent-{}-{fork}", self.profile),
            None => format!("lazaret/agent-{}", self.profile),
        }
    }

    pub fn control_socket(&self, rundir: &RuntimeDir) -> PathBuf {
        rundir
            .path()
            .join(format!("lazaret_coord_{}.sock", self.hash))
    }

    pub fn lock_file(&self, rundir: &RuntimeDir) -> PathBuf {
        lock_file_of(rundir, &self.hash)
    }

    /// Held by the live Session Coordinator for its whole life.
    pub fn owner_lock(&self, rundir: &RuntimeDir) -> PathBuf {
        rundir
            .path()
            .join(format!("lazaret_coord_{}.owner", self.hash))
    }

    /// Trust Anchor material; the runtime folder is memory-backed when it is
    /// `$XDG_RUNTIME_DIR` (decisions.md D4).
    pub fn certs_dir(&self, rundir: &RuntimeDir) -> PathBuf {
        rundir.path().join(format!("certs_{}", self.hash))
    }

    /// The folder holding this domain's Escalation Socket; mounted as a
    /// folder so a restarted server is seen (environment notes).
    pub fn escalation_dir(&self, socket_dir: &Path) -> PathBuf {
        socket_dir.join(&self.hash)
    }
}

/// SHA-256 of `"<name>:<workspace>"`, first 12 hex digits (`name` is the
/// profile's, or a fork's `PROFILE@FORK`).
pub fn domain_hash(name: &str, canonical_workspace: &str) -> String {
    let digest = Sha256::digest(format!("{name}:{canonical_workspace}").as_bytes());
    hex::encode(&digest[..6])
}

/// Every derived host path and name of a domain, for `lazaret domain`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DomainPaths {
    pub profile: String,
    pub workspace: PathBuf,
    pub domain_hash: String,
    pub domain_root: PathBuf,
    pub usr_changes: PathBuf,
    pub usr_work: PathBuf,
    pub usr_merged: PathBuf,
    pub state_store: PathBuf,
    pub coordinator_log: PathBuf,
    pub control_socket: PathBuf,
    pub lock_file: PathBuf,
    pub certs_dir: PathBuf,
    pub escalation_dir: PathBuf,
    pub sandbox_container: String,
    pub sidecar_container: String,
    pub agent_branch: String,
}

impl DomainPaths {
    pub fn new(
        anchor: &DomainAnchor,
        data_root: &Path,
        socket_dir: &Path,
        rundir: &RuntimeDir,
    ) -> Self {
        let root = anchor.domain_root(data_root);
        DomainPaths {
            profile: anchor.name(),
            workspace: anchor.workspace().to_path_buf(),
            domain_hash: anchor.hash().to_string(),
            usr_changes: root.join("usr_changes"),
            usr_work: root.join("usr_work"),
            usr_merged: root.join("usr_merged"),
            state_store: root.join("state.redb"),
            coordinator_log: root.join("coordinator.log"),
            domain_root: root,
            control_socket: anchor.control_socket(rundir),
            lock_file: anchor.lock_file(rundir),
            certs_dir: anchor.certs_dir(rundir),
            escalation_dir: anchor.escalation_dir(socket_dir),
            sandbox_container: anchor.sandbox_name(),
            sidecar_container: anchor.sidecar_name(),
            agent_branch: anchor.agent_branch(),
        }
    }
}

/// In each Domain Root: the mount points the sandbox created in the
/// workspace (removed at teardown; a checkpoint keeps the list).
pub const MOUNTPOINTS_FILE: &str = "mountpoints";

/// In each Domain Root: which (profile, workspace) it belongs to, so a
/// stopped domain can be named without its containers.
pub const ANCHOR_FILE: &str = "anchor.json";

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct AnchorRecord {
    /// The domain's name: its profile's, or a fork's `PROFILE@FORK`.
    pub profile: String,
    pub workspace: PathBuf,
}

/// Records which (profile, workspace) `domain_root` belongs to.
pub fn record_anchor(domain_root: &Path, anchor: &DomainAnchor) -> std::io::Result<()> {
    let record = AnchorRecord {
        profile: anchor.name(),
        workspace: anchor.workspace().to_path_buf(),
    };
    let path = domain_root.join(ANCHOR_FILE);
    let text = serde_json::to_string(&record).map_err(std::io::Error::other)?;
    if std::fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
        return Ok(());
    }
    std::fs::create_dir_all(domain_root)?;
    std::fs::write(path, text)
}
