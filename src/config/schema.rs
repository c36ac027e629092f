//! The configuration file schema of spec §3.1, as it appears in one file.
//!
//! Every field is optional here because any single file may set only part of
//! the configuration; required fields are checked after the merge
//! (see [`super::Config::from_merged`]). Unknown keys are rejected.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Schema {
    /// Profile used when a command names none (a Lazaret addition).
    pub default_profile: Option<String>,
    pub storage: Option<Storage>,
    pub network: Option<Network>,
    pub escalation: Option<Escalation>,
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
}

#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Storage {
    pub data_root: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    pub default_allow: Option<Vec<String>>,
    pub default_deny: Option<Vec<String>>,
    /// Names the sidecar's resolver forwards (decisions.md D11).
    pub allow_domains: Option<Vec<String>>,
    /// Names it refuses; a deny wins over an allow.
    pub deny_domains: Option<Vec<String>>,
    /// Where allowed names are resolved (`ADDRESS:PORT`; default slirp4netns's 10.0.2.3:53).
    pub dns_upstream: Option<String>,
    /// Shortest and longest time a name-derived rule lives, in seconds.
    pub name_ttl_floor: Option<u64>,
    pub name_ttl_cap: Option<u64>,
}

#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Escalation {
    pub enabled: Option<bool>,
    pub socket_dir: Option<String>,
    pub auto_approve: Option<Vec<String>>,
    /// Like `auto_approve`, and the command may open TCP connections.
    pub auto_approve_network: Option<Vec<String>>,
}

#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub image: Option<String>,
    /// The agent this profile runs (`claude`, `codex`, `aider`): its image
    /// `localhost/lazaret/agent-NAME:latest` is the default `image`.
    pub agent: Option<String>,
    pub persistent_dirs: Option<Vec<String>>,
    pub allow_egress: Option<Vec<String>>,
    /// Names this profile's resolver forwards, on top of `[network]`'s.
    pub allow_domains: Option<Vec<String>>,
    pub deny_domains: Option<Vec<String>>,
    pub env: Option<BTreeMap<String, String>>,
    pub volumes: Option<Vec<Volume>>,
    /// OCI runtime of the Agent Sandbox; gVisor unless named (decisions.md D7).
    pub runtime: Option<Runtime>,
    /// How the workspace is shared (decisions.md D1).
    pub workspace_mode: Option<WorkspaceMode>,
    /// What a new session runs, as a shell-words string (default: a login shell).
    pub command: Option<String>,
    /// Memory, processes, CPUs and `/tmp` size of the sandbox.
    pub limits: Option<super::limits::LimitsSchema>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Volume {
    pub host: String,
    pub container: String,
    pub mode: Option<String>,
}

/// The OCI runtime an Agent Sandbox runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// gVisor: a user-space kernel between the agent and the host.
    #[default]
    Runsc,
    /// Plain namespaces and seccomp; the agent shares the host kernel.
    Runc,
}

impl Runtime {
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Runsc => "runsc",
            Runtime::Runc => "runc",
        }
    }

    /// Whether this runtime puts a gVisor kernel between agent and host.
    pub fn is_gvisor(self) -> bool {
        self == Runtime::Runsc
    }
}

/// How the host workspace reaches `/workspace` (decisions.md D1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkspaceMode {
    /// The agent works in its own clone on `lazaret/agent-<profile>`.
    Isolated,
    /// The host folder itself, read-write, with `.git` read-only.
    Direct,
}

impl WorkspaceMode {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkspaceMode::Isolated => "isolated",
            WorkspaceMode::Direct => "direct",
        }
    }
}
