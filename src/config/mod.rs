//! The configuration contract (spec §3): file hierarchy, schema, expansion
//! and sanitation.
//!
//! Loading happens in three steps:
//! 1. [`source`] reads each file of the hierarchy, type-checks it alone and
//!    merges it per key into one tree that remembers where each value came from;
//! 2. [`Config::from_merged`] checks required fields and every value that can
//!    be checked without a workspace, collecting *all* problems with locations;
//! 3. [`Config::resolve`] binds one profile to one workspace (a Domain Anchor),
//!    expands the tokens, canonicalises host paths and reads `env:` variables.

pub mod expand;
pub mod limits;
pub mod network;
pub mod schema;
pub mod source;
pub mod trust;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use lazaret_sidecar::names::NamePattern;

use crate::domain::{DomainAnchor, validate_profile_name};
use crate::host::HostEnv;
use expand::{Template, TokenValues, canonicalize_lenient};
pub use schema::{Runtime, WorkspaceMode};
use source::{Layer, Location, Merged};

/// Errors of the configuration contract.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{location}: {message}")]
    Syntax { location: Location, message: String },
    #[error("internal error merging configuration files: {message}")]
    Merge { message: String },
    #[error("{}", Problems(.0))]
    Invalid(Vec<Problem>),
    #[error("{}", untrusted_message(.file, .keys))]
    Untrusted {
        file: PathBuf,
        keys: Vec<trust::Widening>,
    },
    #[error(transparent)]
    Trust(#[from] trust::TrustError),
}

/// The one message for an untrusted workspace file that widens (D8).
fn untrusted_message(file: &Path, keys: &[trust::Widening]) -> String {
    let mut s = format!(
        "security: {} is not trusted, and it widens what the sandbox may do:",
        file.display()
    );
    for k in keys {
        // The file's own key names, chosen by whoever wrote it: shown, not
        // obeyed, by the terminal (a newline in a quoted key included).
        let key = lazaret_widgets::visible::visible(&k.key);
        match &k.location {
            Some(loc) => s.push_str(&format!("\n  {loc}: {key}: {}", k.why)),
            None => s.push_str(&format!("\n  {key}: {}", k.why)),
        }
    }
    s.push_str(&format!(
        "\nA workspace file may have been written by the agent or shipped with the project, so \
         untrusted it may only narrow. Read it; if you want what it says, trust this exact content \
         with `lazaret trust {}` (any later change makes it untrusted again), or remove those keys.",
        file.display()
    ));
    s
}

impl ConfigError {
    /// True when any problem is a security refusal (e.g. a `..` segment).
    pub fn is_security(&self) -> bool {
        matches!(self, ConfigError::Invalid(p) if p.iter().any(|p| p.security))
            || matches!(self, ConfigError::Untrusted { .. })
    }
}

/// One thing wrong with the configuration, and where.
#[derive(Debug, Clone)]
pub struct Problem {
    pub location: Option<Location>,
    /// The key path, e.g. `profiles.claude.volumes[0].host`.
    pub key: String,
    pub message: String,
    pub security: bool,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(loc) = &self.location {
            write!(f, "{loc}: ")?;
        }
        // A schema error serde could not tie to a key has none.
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.message)
    }
}

struct Problems<'a>(&'a [Problem]);

impl fmt::Display for Problems<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(
            f,
            "{n} problem{} in the configuration:",
            if n == 1 { "" } else { "s" }
        )?;
        for p in self.0 {
            write!(f, "\n  {p}")?;
        }
        Ok(())
    }
}

/// `--allow-broad-workspace`, for every load of this process.
static ALLOW_BROAD_WORKSPACE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Records that the user passed `--allow-broad-workspace`.
pub fn set_allow_broad_workspace(allow: bool) {
    ALLOW_BROAD_WORKSPACE.store(allow, std::sync::atomic::Ordering::Relaxed);
}

/// Whether the user passed `--allow-broad-workspace` (a coordinator this
/// process starts gets it too).
pub fn allow_broad_workspace() -> bool {
    ALLOW_BROAD_WORKSPACE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Which files to read, in the order of spec §3.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// `~/.config/lazaret/config.toml`; `None` to skip.
    pub user_file: Option<PathBuf>,
    /// `./lazaret.toml` of the current folder; `None` to skip.
    pub workspace_file: Option<PathBuf>,
    /// `--config FILE`; must exist when given.
    pub explicit_file: Option<PathBuf>,
    /// Where trusted workspace files are recorded (decisions.md D8); `None`:
    /// nothing is trusted, so the workspace file may only narrow.
    pub trust_store: Option<trust::TrustStore>,
    /// Leave out an untrusted workspace file that widens, instead of
    /// refusing (for teardown, which needs only the Domain Anchor).
    pub skip_untrusted_workspace: bool,
}

impl LoadOptions {
    /// `$XDG_CONFIG_HOME/lazaret` (or `~/.config/lazaret`).
    pub fn standard_user_dir(env: &dyn HostEnv) -> Option<PathBuf> {
        env.var("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| env.home().map(|h| h.join(".config")))
            .map(|c| c.join("lazaret"))
    }

    /// The standard hierarchy for this user and folder.
    ///
    /// `$LAZARET_USER_CONFIG` replaces the user file's path; set to the empty
    /// string it skips the user file (for scripts and tests that must not
    /// depend on the caller's defaults).
    pub fn standard(env: &dyn HostEnv, cwd: &Path, explicit: Option<PathBuf>) -> Self {
        if let Ok(user) = std::env::var("LAZARET_USER_CONFIG") {
            return LoadOptions {
                user_file: (!user.is_empty()).then(|| PathBuf::from(user)),
                workspace_file: Some(cwd.join("lazaret.toml")),
                explicit_file: explicit,
                trust_store: trust::TrustStore::locate(env).ok(),
                skip_untrusted_workspace: false,
            };
        }
        let config_home = env
            .var("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| env.home().map(|h| h.join(".config")));
        LoadOptions {
            user_file: config_home.map(|c| c.join("lazaret").join("config.toml")),
            workspace_file: Some(cwd.join("lazaret.toml")),
            explicit_file: explicit,
            trust_store: trust::TrustStore::locate(env).ok(),
            skip_untrusted_workspace: false,
        }
    }
}

/// The validated configuration, before a profile is bound to a workspace.
#[derive(Debug, Clone)]
pub struct Config {
    pub default_profile: Option<String>,
    /// The Storage Root, canonical (it may not exist yet).
    pub data_root: PathBuf,
    pub network: NetworkConfig,
    pub escalation: EscalationConfig,
    pub profiles: BTreeMap<String, ProfileConfig>,
    /// The merged files, for `config show` and error locations.
    pub merged: Merged,
    /// The workspace file read, and whether the user trusted it.
    pub workspace_trust: Option<trust::WorkspaceTrust>,
    /// A workspace file left out because it was untrusted and widened
    /// (only with [`LoadOptions::skip_untrusted_workspace`]).
    pub skipped_workspace: Option<PathBuf>,
    /// The user passed `--allow-broad-workspace`: a workspace may be or
    /// contain the home folder or Lazaret's own folders.
    pub allow_broad_workspace: bool,
}

#[derive(Debug, Clone)]
pub struct NetworkConfig {
    pub default_allow: Vec<IpNet>,
    pub default_deny: Vec<IpNet>,
    /// Egress by name (decisions.md D11).
    pub allow_domains: Vec<NamePattern>,
    pub deny_domains: Vec<NamePattern>,
    pub resolver: ResolverConfig,
}

/// How the Network Sidecar resolves allowed names (decisions.md D11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolverConfig {
    pub upstream: std::net::SocketAddr,
    pub ttl_floor: u64,
    pub ttl_cap: u64,
}

impl Default for ResolverConfig {
    fn default() -> Self {
        ResolverConfig {
            // slirp4netns's DNS forwarder.
            upstream: std::net::SocketAddr::from(([10, 0, 2, 3], 53)),
            ttl_floor: 30,
            ttl_cap: 3600,
        }
    }
}

#[derive(Debug, Clone)]
pub struct EscalationConfig {
    pub enabled: bool,
    /// Where per-domain Escalation Socket folders are created (canonical).
    pub socket_dir: PathBuf,
    pub auto_approve: Vec<AutoApprove>,
}

/// One `auto_approve` entry, split into its argument vector (a last word
/// `*` marks a prefix entry, decisions.md D9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoApprove {
    pub raw: String,
    pub argv: Vec<String>,
    /// From `auto_approve_network`: the command may open TCP connections.
    pub network: bool,
}

#[derive(Debug, Clone)]
pub struct ProfileConfig {
    pub name: String,
    pub image: String,
    pub persistent_dirs: Vec<PathBuf>,
    pub allow_egress: Vec<IpNet>,
    pub allow_domains: Vec<NamePattern>,
    pub deny_domains: Vec<NamePattern>,
    pub env: BTreeMap<String, EnvValue>,
    pub volumes: Vec<VolumeTemplate>,
    pub runtime: Runtime,
    /// True when the profile names its runtime (D7: only then may it be non-gVisor).
    pub runtime_explicit: bool,
    /// `None`: isolated for git workspaces, direct otherwise.
    pub workspace_mode: Option<WorkspaceMode>,
    /// argv of the session command; `None` means a login shell.
    pub command: Option<Vec<String>>,
    pub limits: limits::Limits,
}

/// A value of a profile's `env` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvValue {
    Literal(String),
    /// `env:NAME`: read from the host environment when the sandbox starts;
    /// unset, the start is refused.
    FromHost(String),
    /// `env?:NAME`: forwarded when set, left out of the sandbox when not
    /// (as `podman run -e NAME` does): for a key that a login can replace.
    FromHostIfSet(String),
}

#[derive(Debug, Clone)]
pub struct VolumeTemplate {
    pub key: String,
    pub host: Template,
    pub container: Template,
    pub options: Vec<String>,
}

/// A profile bound to a workspace: everything expanded and canonical.
#[derive(Debug, Clone)]
pub struct ResolvedProfile {
    pub profile: ProfileConfig,
    pub domain: DomainAnchor,
    /// `{data_root}/{profile_name}`
    pub profile_dir: PathBuf,
    /// `{data_root}/domains/{domain_hash}`
    pub domain_dir: PathBuf,
    pub volumes: Vec<ResolvedVolume>,
    pub env: BTreeMap<String, String>,
    /// The egress policy: `[network]` plus the profile's `allow_egress`.
    pub network: lazaret_sidecar::policy::PolicySpec,
    /// How the sidecar resolves allowed names.
    pub resolver: ResolverConfig,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedVolume {
    pub host: PathBuf,
    pub container: PathBuf,
    pub options: Vec<String>,
    /// True when the host path lies in the Storage Root and may be created.
    pub in_storage_root: bool,
}

/// Mount options a volume may carry (`z`/`Z` for SELinux relabelling).
pub const VOLUME_OPTIONS: &[&str] = &["ro", "rw", "z", "Z", "nosuid", "nodev", "noexec"];

/// Container paths a volume or persistent dir may not cover: they belong to
/// the kernel, to podman, or to Lazaret's own mounts.
const RESERVED_CONTAINER_PATHS: &[&str] = &["/", "/proc", "/sys", "/dev", "/run/lazaret"];

/// Files podman writes into every container; never persisted (spec §4.3.4).
pub const RUNTIME_INJECTED_FILES: &[&str] = &["/etc/resolv.conf", "/etc/hosts", "/etc/hostname"];

pub use lazaret_escalate::classify::{BANNED_AUTO_APPROVE, banned_auto_approve_reason};

impl Config {
    /// Reads the hierarchy of `opts` and validates it.
    pub fn load(opts: &LoadOptions, env: &dyn HostEnv) -> Result<Config, ConfigError> {
        // The configuration without the workspace file: an untrusted one
        // must allow no more than this.
        let mut base = Merged::with_defaults();
        if let Some(user) = &opts.user_file
            && user.exists()
        {
            base.add_file(Layer::User, user)?;
        }
        if let Some(explicit) = &opts.explicit_file {
            base.add_file(Layer::CommandLine, explicit)?;
        }
        let mut merged = Merged::with_defaults();
        let mut workspace_trust = None;
        let mut skipped_workspace = None;
        for (layer, path, required) in [
            (Layer::User, &opts.user_file, false),
            (Layer::Workspace, &opts.workspace_file, false),
            (Layer::CommandLine, &opts.explicit_file, true),
        ] {
            let Some(path) = path else { continue };
            if layer == Layer::Workspace {
                match Self::workspace_layer(&base, path, opts)? {
                    WorkspaceLayer::Absent => {}
                    WorkspaceLayer::Apply(text, state) => {
                        merged.add_text(layer, path, &text)?;
                        workspace_trust = Some(state);
                    }
                    WorkspaceLayer::Skip => skipped_workspace = Some(path.clone()),
                }
                continue;
            }
            if !required && !path.exists() {
                continue;
            }
            merged.add_file(layer, path)?;
        }
        let mut config = Config::from_merged(merged, env)?;
        config.workspace_trust = workspace_trust;
        config.skipped_workspace = skipped_workspace;
        Ok(config)
    }

    /// Reads the workspace file once (the bytes hashed are the bytes
    /// parsed) and decides whether it may apply (decisions.md D8): trusted,
    /// or every key it sets narrows what `lower` (the configuration without
    /// it) allows.
    fn workspace_layer(
        lower: &Merged,
        path: &Path,
        opts: &LoadOptions,
    ) -> Result<WorkspaceLayer, ConfigError> {
        let Some(text) = trust::read_workspace_file(path)? else {
            return Ok(WorkspaceLayer::Absent);
        };
        let sha256 = trust::sha256_hex(text.as_bytes());
        let trusted = match &opts.trust_store {
            Some(store) => store.is_trusted(path, &sha256)?,
            None => false,
        };
        let state = trust::WorkspaceTrust {
            file: path.to_path_buf(),
            sha256,
            trusted,
        };
        if trusted {
            return Ok(WorkspaceLayer::Apply(text, state));
        }
        // Type-check it alone first: a syntax error points into the file.
        let mut probe = Merged::default();
        probe.add_text(Layer::Workspace, path, &text)?;
        let keys = trust::widening_keys(&lower.table, &probe.table, &probe.origins);
        if keys.is_empty() {
            Ok(WorkspaceLayer::Apply(text, state))
        } else if opts.skip_untrusted_workspace {
            Ok(WorkspaceLayer::Skip)
        } else {
            Err(ConfigError::Untrusted {
                file: path.to_path_buf(),
                keys,
            })
        }
    }

    /// Validates a merged tree; every problem found is reported at once.
    pub fn from_merged(merged: Merged, env: &dyn HostEnv) -> Result<Config, ConfigError> {
        let schema = merged.schema()?;
        let mut v = Validator {
            merged: &merged,
            problems: Vec::new(),
        };
        let home = || env.home();

        let data_root = v
            .required(
                schema.storage.as_ref().and_then(|s| s.data_root.as_ref()),
                "storage.data_root",
            )
            .and_then(|raw| v.host_dir(raw, "storage.data_root", &home));

        let network = schema.network.clone().unwrap_or_default();
        let default_allow = v
            .required(network.default_allow.as_ref(), "network.default_allow")
            .map(|l| v.cidrs(l, "network.default_allow"));
        let default_deny = v
            .required(network.default_deny.as_ref(), "network.default_deny")
            .map(|l| v.cidrs(l, "network.default_deny"));
        let allow_domains = v.names(network.allow_domains.as_deref(), "network.allow_domains");
        let deny_domains = v.names(network.deny_domains.as_deref(), "network.deny_domains");
        let resolver = v.resolver(&network);

        let escalation = schema.escalation.clone().unwrap_or_default();
        let enabled = v.required(escalation.enabled.as_ref(), "escalation.enabled");
        let socket_dir = v
            .required(escalation.socket_dir.as_ref(), "escalation.socket_dir")
            .and_then(|raw| v.host_dir(raw, "escalation.socket_dir", &home));
        let mut auto_approve = escalation
            .auto_approve
            .as_ref()
            .map(|l| v.auto_approve(l, "escalation.auto_approve", false))
            .unwrap_or_default();
        auto_approve.extend(
            escalation
                .auto_approve_network
                .as_ref()
                .map(|l| v.auto_approve(l, "escalation.auto_approve_network", true))
                .unwrap_or_default(),
        );

        let mut profiles = BTreeMap::new();
        for (name, raw) in &schema.profiles {
            if let Some(p) = v.profile(name, raw) {
                profiles.insert(name.clone(), p);
            }
        }
        if let Some(default) = &schema.default_profile
            && !schema.profiles.contains_key(default)
        {
            {
                let known: Vec<&str> = schema.profiles.keys().map(String::as_str).collect();
                v.problem(
                    "default_profile",
                    format!(
                        "names the profile `{default}`, which is not defined (defined: {})",
                        if known.is_empty() {
                            "none".into()
                        } else {
                            known.join(", ")
                        }
                    ),
                );
            }
        }

        match (
            v.problems.is_empty(),
            data_root,
            default_allow,
            default_deny,
            enabled,
            socket_dir,
        ) {
            (
                true,
                Some(data_root),
                Some(default_allow),
                Some(default_deny),
                Some(enabled),
                Some(socket_dir),
            ) => Ok(Config {
                default_profile: schema.default_profile.clone(),
                data_root,
                network: NetworkConfig {
                    default_allow,
                    default_deny,
                    allow_domains,
                    deny_domains,
                    resolver,
                },
                escalation: EscalationConfig {
                    enabled: *enabled,
                    socket_dir,
                    auto_approve,
                },
                profiles,
                merged,
                workspace_trust: None,
                skipped_workspace: None,
                allow_broad_workspace: false,
            }),
            _ => Err(ConfigError::Invalid(v.problems)),
        }
    }

    /// The profile a command should use: the one named, else
    /// `default_profile`, else the only one a configuration file defines,
    /// else (no file defines one) the built-in `shell`.
    pub fn select_profile(&self, name: Option<&str>) -> Result<&ProfileConfig, SelectError> {
        let known = || self.profiles.keys().cloned().collect::<Vec<_>>().join(", ");
        // Profiles a file defines or changes: the built-in one alone does
        // not make a user's single profile ambiguous.
        let from_files: Vec<&str> = self
            .profiles
            .keys()
            .filter(|n| {
                let prefix = format!("profiles.{n}");
                self.merged.origins.iter().any(|(k, loc)| {
                    (k == &prefix || k.starts_with(&format!("{prefix}.")))
                        && loc.file != Path::new(source::DEFAULT_NAME)
                })
            })
            .map(String::as_str)
            .collect();
        // A fork's name, `PROFILE@FORK`, runs its profile's configuration.
        let fork = name.and_then(|n| crate::domain::split_name(n).1);
        if let Some(f) = fork {
            crate::domain::validate_fork_name(f).map_err(SelectError::BadName)?;
        }
        // `@FORK` alone: a fork of the default profile.
        let base = name
            .map(|n| crate::domain::split_name(n).0)
            .filter(|b| !(b.is_empty() && fork.is_some()));
        let name = match base.or(self.default_profile.as_deref()) {
            Some(n) => n,
            None if from_files.len() == 1 => from_files[0],
            None if from_files.is_empty() && self.profiles.len() == 1 => self
                .profiles
                .keys()
                .next()
                .map(String::as_str)
                .unwrap_or_default(),
            None if self.profiles.is_empty() => return Err(SelectError::NoProfiles),
            None => return Err(SelectError::Ambiguous(known())),
        };
        validate_profile_name(name).map_err(SelectError::BadName)?;
        self.profiles
            .get(name)
            .ok_or_else(|| SelectError::Unknown(name.to_string(), known()))
    }

    /// Binds `profile` to `workspace`: computes the Domain Anchor, expands
    /// tokens, canonicalises host paths and reads `env:` values.
    pub fn resolve(
        &self,
        profile: &ProfileConfig,
        workspace: &Path,
        env: &dyn HostEnv,
        host_vars: HostVars,
    ) -> Result<ResolvedProfile, ConfigError> {
        self.resolve_named(&profile.name, profile, workspace, env, host_vars)
    }

    /// [`Config::resolve`] for the domain named `typed` as the user gave
    /// it: `PROFILE@FORK` binds the fork's Domain Anchor.
    pub fn resolve_named(
        &self,
        typed: &str,
        profile: &ProfileConfig,
        workspace: &Path,
        env: &dyn HostEnv,
        host_vars: HostVars,
    ) -> Result<ResolvedProfile, ConfigError> {
        let mut problems = Vec::new();
        let name = crate::domain::name_of(&profile.name, Some(typed));
        let domain = DomainAnchor::new(&name, workspace).map_err(|e| {
            ConfigError::Invalid(vec![Problem {
                location: None,
                key: "workspace".into(),
                message: e.to_string(),
                security: false,
            }])
        })?;
        let internal = self.internal_folders(env);
        let mut lazaret_folders = internal.clone();
        lazaret_folders.push((self.data_root.clone(), "Lazaret's Storage Root"));
        if !self.allow_broad_workspace
            && let Some(message) = broad_workspace(domain.workspace(), env, &lazaret_folders)
        {
            return Err(ConfigError::Invalid(vec![Problem {
                location: None,
                key: "workspace".into(),
                message,
                security: true,
            }]));
        }
        let profile_dir = self.data_root.join(&profile.name);
        let domain_dir = domain.domain_root(&self.data_root);
        let values = TokenValues {
            profile_name: profile.name.clone(),
            profile_dir: profile_dir.clone(),
            domain_hash: domain.hash().to_string(),
            domain_dir: domain_dir.clone(),
            workspace_dir: domain.workspace().to_path_buf(),
        };
        let home = || env.home();
        let mut volumes = Vec::new();
        for vol in &profile.volumes {
            let located = |key: &str, message: String, security: bool| Problem {
                location: self.merged.origin(key).cloned(),
                key: key.to_string(),
                message,
                security,
            };
            let host_key = format!("{}.host", vol.key);
            let host = match vol.host.expand(Some(&values), &home) {
                Ok(p) => p,
                Err(e) => {
                    problems.push(located(
                        &host_key,
                        e.to_string(),
                        matches!(e, expand::ExpandError::DotDot(_)),
                    ));
                    continue;
                }
            };
            if !host.is_absolute() {
                problems.push(located(
                    &host_key,
                    format!("`{}` is not an absolute path", host.display()),
                    false,
                ));
                continue;
            }
            let container = match vol.container.expand(Some(&values), &home) {
                Ok(p) => p,
                Err(e) => {
                    let security = matches!(e, expand::ExpandError::DotDot(_));
                    problems.push(located(
                        &format!("{}.container", vol.key),
                        e.to_string(),
                        security,
                    ));
                    continue;
                }
            };
            match self.canonical_volume_host(&host).and_then(|(c, in_root)| {
                volume_reaches_internal(&c, &domain_dir, &internal)
                    .map_or(Ok((c, in_root)), |m| Err((m, true)))
            }) {
                Ok((canonical, in_storage_root)) => volumes.push(ResolvedVolume {
                    host: canonical,
                    container,
                    options: vol.options.clone(),
                    in_storage_root,
                }),
                Err((message, security)) => problems.push(located(&host_key, message, security)),
            }
        }
        let mut resolved_env = BTreeMap::new();
        for (key, value) in &profile.env {
            match value {
                EnvValue::Literal(s) => {
                    resolved_env.insert(key.clone(), s.clone());
                }
                EnvValue::FromHostIfSet(var) => {
                    if let Some(s) = env.var(var) {
                        resolved_env.insert(key.clone(), s);
                    }
                }
                EnvValue::FromHost(var) => match env.var(var) {
                    Some(s) => {
                        resolved_env.insert(key.clone(), s);
                    }
                    None if host_vars == HostVars::Skip => {}
                    None => {
                        let path = format!("profiles.{}.env.{key}", profile.name);
                        problems.push(Problem {
                            location: self.merged.origin(&path).cloned(),
                            key: path,
                            message: format!(
                                "forwards the host variable {var} (env:{var}), which is not set; export {var}, or write \"env?:{var}\" to start without it"
                            ),
                            security: false,
                        });
                    }
                },
            }
        }
        if !problems.is_empty() {
            return Err(ConfigError::Invalid(problems));
        }
        Ok(ResolvedProfile {
            profile: profile.clone(),
            domain,
            profile_dir,
            domain_dir,
            volumes,
            env: resolved_env,
            network: network::policy_spec(self, profile),
            resolver: self.network.resolver.clone(),
        })
    }

    /// Lazaret's own folders outside a Domain Root, canonical, each with
    /// what it is: no volume may reach them, and no workspace contain them.
    fn internal_folders(&self, env: &dyn HostEnv) -> Vec<(PathBuf, &'static str)> {
        let mut out: Vec<(PathBuf, &'static str)> = crate::domain::STORAGE_ROOT_INTERNAL
            .iter()
            .map(|n| (self.data_root.join(n), "a folder of Lazaret's Storage Root"))
            .collect();
        out.push((
            self.escalation.socket_dir.clone(),
            "the Escalation Socket folder",
        ));
        out.push((
            crate::rundir::RuntimeDir::locate(env),
            "Lazaret's runtime folder",
        ));
        if let Ok(store) = trust::TrustStore::locate(env) {
            out.push((store.path().to_path_buf(), "Lazaret's trust records"));
        }
        if let Some(dir) = LoadOptions::standard_user_dir(env) {
            out.push((dir, "Lazaret's configuration folder"));
        }
        out.into_iter()
            .map(|(p, what)| (canonicalize_lenient(&p).unwrap_or(p), what))
            .collect()
    }

    /// Spec §3.2.3 (3): canonicalise a volume's host path. Paths inside the
    /// Storage Root may not exist yet (Lazaret creates them) but must not
    /// leave it through a symlink; any other host path must exist.
    fn canonical_volume_host(&self, host: &Path) -> Result<(PathBuf, bool), (String, bool)> {
        if host.starts_with(&self.data_root) {
            let canonical = canonicalize_lenient(host)
                .map_err(|e| (format!("cannot resolve `{}`: {e}", host.display()), false))?;
            let root = canonicalize_lenient(&self.data_root)
                .map_err(|e| (format!("cannot resolve the storage root: {e}"), false))?;
            if !canonical.starts_with(&root) {
                return Err((
                    format!(
                        "security: `{}` is inside the storage root but resolves through a symlink to `{}`, outside it; remove the symlink",
                        host.display(),
                        canonical.display()
                    ),
                    true,
                ));
            }
            Ok((canonical, true))
        } else {
            host.canonicalize().map(|c| (c, false)).map_err(|e| {
                (
                    format!(
                        "host path `{}` cannot be used: {e}; create it or change the volume",
                        host.display()
                    ),
                    false,
                )
            })
        }
    }
}

/// Why a volume at canonical `host` is refused: it is, contains or lies in
/// one of Lazaret's own folders. Inside the domain's own root, plain
/// folders that are not Lazaret's are allowed (`{domain_dir}/cache`).
fn volume_reaches_internal(
    host: &Path,
    domain_root: &Path,
    internal: &[(PathBuf, &'static str)],
) -> Option<String> {
    let domain_root = canonicalize_lenient(domain_root).unwrap_or(domain_root.to_path_buf());
    if let Ok(rest) = host.strip_prefix(&domain_root)
        && let Some(first) = rest.components().next()
    {
        let name = first.as_os_str().to_string_lossy();
        return crate::domain::is_domain_root_internal(&name).then(|| {
            format!(
                "security: `{}` is Lazaret's own `{name}` in the Domain Root (state store, logs, the agent's repository or State Anchor layers); mount a folder of its own instead, e.g. {{domain_dir}}/cache",
                host.display()
            )
        });
    }
    internal
        .iter()
        .find(|(dir, _)| host.starts_with(dir) || dir.starts_with(host))
        .map(|(dir, what)| {
            format!(
                "security: `{}` is, contains or lies in {} ({}), which the sandbox must not reach; mount a folder of its own instead, e.g. {{profile_dir}}/NAME or {{domain_dir}}/NAME",
                host.display(),
                what,
                dir.display()
            )
        })
}

/// Why `workspace` (canonical) is too broad to be a workspace: it is or
/// contains the home folder, or is, contains or lies in Lazaret's folders.
fn broad_workspace(
    workspace: &Path,
    env: &dyn HostEnv,
    internal: &[(PathBuf, &'static str)],
) -> Option<String> {
    let hint =
        "run Lazaret in a project folder, or pass --allow-broad-workspace if you really mean this";
    if let Some(home) = env.home().map(|h| h.canonicalize().unwrap_or(h))
        && home.starts_with(workspace)
    {
        return Some(format!(
            "security: the workspace {} is or contains your home folder {}: the agent could read your keys and change your shell's startup files; {hint}",
            workspace.display(),
            home.display()
        ));
    }
    internal
        .iter()
        .find(|(dir, _)| dir.starts_with(workspace) || workspace.starts_with(dir))
        .map(|(dir, what)| {
            format!(
                "security: the workspace {} is, contains or lies in {what} ({}); {hint}",
                workspace.display(),
                dir.display()
            )
        })
}

enum WorkspaceLayer {
    Absent,
    Apply(String, trust::WorkspaceTrust),
    Skip,
}

/// Whether [`Config::resolve`] must find every `env:` variable on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostVars {
    /// Starting a sandbox: an unset variable is an error.
    Require,
    /// Checking the configuration: unset variables are left out.
    Skip,
}

impl ProfileConfig {
    /// Host variables this profile requires (`env:NAME`) that are not set.
    pub fn unset_host_vars(&self, env: &dyn HostEnv) -> Vec<String> {
        self.unset_forwards(env, true)
    }

    /// Host variables this profile forwards only when set (`env?:NAME`)
    /// that are not set: the sandbox starts without them.
    pub fn unset_optional_host_vars(&self, env: &dyn HostEnv) -> Vec<String> {
        self.unset_forwards(env, false)
    }

    fn unset_forwards(&self, env: &dyn HostEnv, required: bool) -> Vec<String> {
        self.env
            .values()
            .filter_map(|v| match (v, required) {
                (EnvValue::FromHost(var), true) | (EnvValue::FromHostIfSet(var), false) => {
                    env.var(var).is_none().then(|| var.clone())
                }
                _ => None,
            })
            .collect()
    }
}

/// Why no profile could be chosen.
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    #[error(
        "no profile is defined; add a [profiles.NAME] table to your configuration (see example.toml)"
    )]
    NoProfiles,
    #[error("several profiles are defined ({0}); name one, or set default_profile")]
    Ambiguous(String),
    #[error("no profile named `{0}` (defined: {1})")]
    Unknown(String, String),
    #[error("{0}")]
    BadName(String),
}

/// Collects problems while checking the merged schema.
struct Validator<'a> {
    merged: &'a Merged,
    problems: Vec<Problem>,
}

impl Validator<'_> {
    fn push(&mut self, key: &str, message: String, security: bool) {
        // Point at the nearest key that has a location.
        let mut probe = key.to_string();
        let location = loop {
            if let Some(loc) = self.merged.origin(&probe) {
                break Some(loc.clone());
            }
            match probe.rfind(['.', '[']) {
                Some(i) => probe.truncate(i),
                None => break None,
            }
        };
        self.problems.push(Problem {
            location,
            key: key.to_string(),
            message,
            security,
        });
    }

    fn problem(&mut self, key: &str, message: String) {
        self.push(key, message, false);
    }

    fn required<'v, T>(&mut self, value: Option<&'v T>, key: &str) -> Option<&'v T> {
        if value.is_none() {
            let read: Vec<String> = self
                .merged
                .sources
                .iter()
                .filter(|s| s.layer != Layer::Default)
                .map(|s| s.path.display().to_string())
                .collect();
            self.problem(
                key,
                if read.is_empty() {
                    "is required, and no configuration file was found; run `lazaret init` to write ~/.config/lazaret/config.toml".into()
                } else {
                    format!("is required but not set in {}", read.join(", "))
                },
            );
        }
        value
    }

    /// A host directory that may use `~` but no tokens.
    fn host_dir(
        &mut self,
        raw: &str,
        key: &str,
        home: &dyn Fn() -> Option<PathBuf>,
    ) -> Option<PathBuf> {
        let template = match Template::parse(raw) {
            Ok(t) => t,
            Err(e) => {
                self.problem(key, e);
                return None;
            }
        };
        match template.expand(None, home) {
            Ok(p) if p.is_absolute() => match canonicalize_lenient(&p) {
                Ok(c) => Some(c),
                Err(e) => {
                    self.problem(key, format!("cannot resolve `{}`: {e}", p.display()));
                    None
                }
            },
            Ok(p) => {
                self.problem(
                    key,
                    format!(
                        "`{}` must be an absolute path (or start with ~/)",
                        p.display()
                    ),
                );
                None
            }
            Err(e) => {
                let security = matches!(e, expand::ExpandError::DotDot(_));
                self.push(key, e.to_string(), security);
                None
            }
        }
    }

    /// Name patterns (decisions.md D11); a malformed one is a problem at its
    /// `file:line:col`.
    fn names(&mut self, list: Option<&[String]>, key: &str) -> Vec<NamePattern> {
        let mut out = Vec::new();
        for (i, raw) in list.unwrap_or_default().iter().enumerate() {
            match NamePattern::parse(raw) {
                Ok(p) => out.push(p),
                Err(e) => self.problem(&format!("{key}[{i}]"), format!("is not a host name: {e}")),
            }
        }
        out
    }

    fn resolver(&mut self, network: &schema::Network) -> ResolverConfig {
        let mut r = ResolverConfig::default();
        if let Some(raw) = &network.dns_upstream {
            match raw.parse::<std::net::SocketAddr>() {
                Ok(a) => r.upstream = a,
                Err(_) => self.problem(
                    "network.dns_upstream",
                    format!("`{raw}` is not ADDRESS:PORT (e.g. 10.0.2.3:53 or [fd00::3]:53)"),
                ),
            }
        }
        if let Some(f) = network.name_ttl_floor {
            r.ttl_floor = f;
        }
        if let Some(c) = network.name_ttl_cap {
            r.ttl_cap = c;
        }
        if r.ttl_cap < r.ttl_floor || r.ttl_cap == 0 {
            self.problem(
                "network.name_ttl_cap",
                format!(
                    "must be at least name_ttl_floor ({}) and above 0",
                    r.ttl_floor
                ),
            );
        }
        r
    }

    fn cidrs(&mut self, list: &[String], key: &str) -> Vec<IpNet> {
        let mut out = Vec::new();
        for (i, raw) in list.iter().enumerate() {
            match parse_cidr(raw) {
                Ok(net) => out.push(net),
                Err(e) => self.problem(&format!("{key}[{i}]"), e),
            }
        }
        out
    }

    fn auto_approve(&mut self, list: &[String], key: &str, network: bool) -> Vec<AutoApprove> {
        let mut out = Vec::new();
        for (i, raw) in list.iter().enumerate() {
            let key = format!("{key}[{i}]");
            match check_auto_approve(raw) {
                Ok(argv) => out.push(AutoApprove {
                    raw: raw.clone(),
                    argv,
                    network,
                }),
                Err(e) => self.push(&key, e, true),
            }
        }
        out
    }

    fn profile(&mut self, name: &str, raw: &schema::Profile) -> Option<ProfileConfig> {
        let base = format!("profiles.{name}");
        if let Err(e) = validate_profile_name(name) {
            self.push(&base, e, true);
            return None;
        }
        if let Some(e) = crate::domain::reserved_profile_name(name) {
            self.push(&base, e, true);
            return None;
        }
        let before = self.problems.len();
        let agent_image = match raw.agent.as_deref() {
            Some(a) if crate::agents::agent_recipe(a).is_none() => {
                self.problem(
                    &format!("{base}.agent"),
                    format!(
                        "`{a}` is not an agent Lazaret builds images for; known: {}",
                        crate::agents::agent_names().join(", ")
                    ),
                );
                None
            }
            Some(a) => Some(crate::agents::agent_image(a)),
            None => None,
        };
        let image = match (raw.image.as_ref(), agent_image) {
            (None, Some(img)) => img,
            _ => self
                .required(raw.image.as_ref(), &format!("{base}.image"))
                .cloned()
                .unwrap_or_default(),
        };
        if raw.image.is_some()
            && (image.trim().is_empty()
                || image.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            self.problem(
                &format!("{base}.image"),
                format!("`{image}` is not an image reference"),
            );
        }
        let mut persistent_dirs = Vec::new();
        for (i, dir) in raw.persistent_dirs.iter().flatten().enumerate() {
            let key = format!("{base}.persistent_dirs[{i}]");
            match container_path(dir, false) {
                Ok(p) if RUNTIME_INJECTED_FILES.iter().any(|f| Path::new(f) == p) => self.problem(
                    &key,
                    format!("`{dir}` is written by podman at every start and cannot be persisted"),
                ),
                Ok(p) => persistent_dirs.push(p),
                Err((e, security)) => self.push(&key, e, security),
            }
        }
        let allow_egress = raw
            .allow_egress
            .as_ref()
            .map(|l| self.cidrs(l, &format!("{base}.allow_egress")))
            .unwrap_or_default();
        let allow_domains = self.names(
            raw.allow_domains.as_deref(),
            &format!("{base}.allow_domains"),
        );
        let deny_domains = self.names(raw.deny_domains.as_deref(), &format!("{base}.deny_domains"));
        let mut env = BTreeMap::new();
        for (k, value) in raw.env.iter().flatten() {
            let key = format!("{base}.env.{k}");
            if !is_env_name(k) {
                self.problem(&key, format!("`{k}` is not a valid environment variable name (letters, digits, _; not starting with a digit)"));
                continue;
            }
            let (prefix, forward) = match value.strip_prefix("env?:") {
                Some(var) => ("env?:", Some((var, false))),
                None => ("env:", value.strip_prefix("env:").map(|v| (v, true))),
            };
            match forward {
                Some((var, required)) if is_env_name(var) => {
                    let var = var.to_string();
                    env.insert(
                        k.clone(),
                        if required {
                            EnvValue::FromHost(var)
                        } else {
                            EnvValue::FromHostIfSet(var)
                        },
                    );
                }
                Some((var, _)) => self.problem(
                    &key,
                    format!("`{prefix}{var}` does not name a valid host variable"),
                ),
                None if value.contains('\0') => {
                    self.problem(&key, "contains a NUL character".into());
                }
                None => {
                    env.insert(k.clone(), EnvValue::Literal(value.clone()));
                }
            }
        }
        let mut volumes = Vec::new();
        for (i, vol) in raw.volumes.iter().flatten().enumerate() {
            let key = format!("{base}.volumes[{i}]");
            if let Some(v) = self.volume(&key, vol) {
                volumes.push(v);
            }
        }
        let command = match &raw.command {
            None => None,
            Some(c) => match shell_words::split(c) {
                Ok(argv) if !argv.is_empty() => Some(argv),
                Ok(_) => {
                    self.problem(
                        &format!("{base}.command"),
                        "is empty; remove it to get a login shell".into(),
                    );
                    None
                }
                Err(e) => {
                    self.problem(
                        &format!("{base}.command"),
                        format!("cannot be split into words: {e}"),
                    );
                    None
                }
            },
        };
        let limits = limits::Limits::from_schema(raw.limits.as_ref()).unwrap_or_else(|problems| {
            for (key, msg) in problems {
                self.problem(&format!("{base}.limits.{key}"), msg);
            }
            Default::default()
        });
        (self.problems.len() == before).then(|| ProfileConfig {
            name: name.to_string(),
            image,
            persistent_dirs,
            allow_egress,
            allow_domains,
            deny_domains,
            env,
            volumes,
            runtime: raw.runtime.unwrap_or_default(),
            runtime_explicit: raw.runtime.is_some(),
            workspace_mode: raw.workspace_mode,
            command,
            limits,
        })
    }

    fn volume(&mut self, key: &str, vol: &schema::Volume) -> Option<VolumeTemplate> {
        let before = self.problems.len();
        let host = Template::parse(&vol.host)
            .map_err(|e| self.problem(&format!("{key}.host"), e))
            .ok();
        if let Some(h) = &host {
            let starts_absolute = h.has_tilde()
                || h.raw().starts_with('/')
                || h.raw().starts_with("{profile_dir}")
                || h.raw().starts_with("{domain_dir}")
                || h.raw().starts_with("{workspace_dir}");
            if !starts_absolute {
                self.problem(
                    &format!("{key}.host"),
                    format!(
                        "`{}` must be absolute: start with /, ~/ or a directory token",
                        h.raw()
                    ),
                );
            }
        }
        let container = match Template::parse(&vol.container) {
            Ok(t) => {
                if let Some(tok) = t.tokens().find(|t| t.is_host_path()) {
                    self.problem(
                        &format!("{key}.container"),
                        format!("{tok} is a host path and cannot name a place in the container"),
                    );
                } else if t.has_tilde() {
                    self.problem(
                        &format!("{key}.container"),
                        "`~` is a host path; write the container path in full".into(),
                    );
                } else if let Err((e, security)) = container_path(t.raw(), true) {
                    self.push(&format!("{key}.container"), e, security);
                }
                Some(t)
            }
            Err(e) => {
                self.problem(&format!("{key}.container"), e);
                None
            }
        };
        let mut options = Vec::new();
        for opt in vol.mode.iter().flat_map(|m| m.split(',')) {
            if !VOLUME_OPTIONS.contains(&opt) {
                self.problem(
                    &format!("{key}.mode"),
                    format!(
                        "`{opt}` is not an allowed mount option (allowed: {})",
                        VOLUME_OPTIONS.join(", ")
                    ),
                );
            } else if !options.iter().any(|o| o == opt) {
                options.push(opt.to_string());
            }
        }
        if options.iter().any(|o| o == "ro") && options.iter().any(|o| o == "rw") {
            self.problem(
                &format!("{key}.mode"),
                "cannot be both `ro` and `rw`".into(),
            );
        }
        match (host, container) {
            (Some(host), Some(container)) if self.problems.len() == before => {
                Some(VolumeTemplate {
                    key: key.to_string(),
                    host,
                    container,
                    options,
                })
            }
            _ => None,
        }
    }
}

fn is_env_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A path inside the container: absolute, no `..`, not a reserved place.
/// `templated` allows the non-path tokens (checked before expansion).
fn container_path(raw: &str, templated: bool) -> Result<PathBuf, (String, bool)> {
    if raw.contains('\0') {
        return Err(("contains a NUL character".into(), false));
    }
    if !templated && (raw.contains('{') || raw.contains('}')) {
        return Err((format!("`{raw}`: tokens are not expanded here"), false));
    }
    let path = PathBuf::from(raw);
    expand::reject_dot_dot(&path).map_err(|e| (e.to_string(), true))?;
    if !path.is_absolute() {
        return Err((
            format!("`{raw}` must be an absolute path inside the container"),
            false,
        ));
    }
    let normal: PathBuf = path.components().collect();
    if RESERVED_CONTAINER_PATHS
        .iter()
        .any(|r| normal == Path::new(r))
        || normal.starts_with("/run/lazaret")
        || normal.starts_with("/proc")
        || normal.starts_with("/sys")
        || normal.starts_with("/dev")
    {
        return Err((
            format!("`{raw}` is reserved (kernel, podman or Lazaret's own mounts)"),
            true,
        ));
    }
    Ok(normal)
}

pub use lazaret_sidecar::policy::parse_cidr;

/// Checks one `auto_approve` entry (decisions.md D5, D9) and returns its
/// argv; a last word `*` (a prefix entry) is kept as the last element.
fn check_auto_approve(raw: &str) -> Result<Vec<String>, String> {
    use lazaret_escalate::classify::PREFIX_MARK;
    // A prefix entry is written explicitly: `ls -la *`.
    let (words, prefix) = match raw.trim_end().strip_suffix(PREFIX_MARK) {
        Some(head) if head.ends_with(' ') && !head.trim().is_empty() => (head, true),
        _ => (raw, false),
    };
    // One definition of "forces a human" for entries and requests alike.
    if lazaret_escalate::classify::has_forcing_characters(words) {
        return Err(format!(
            "`{}` contains shell metacharacters or control characters; auto-approve entries are plain argument vectors",
            raw.escape_debug()
        ));
    }
    let mut argv = shell_words::split(words)
        .map_err(|e| format!("`{raw}` cannot be split into words: {e}"))?;
    let Some(program) = argv.first() else {
        return Err("is empty".into());
    };
    if program.contains('/') {
        return Err(format!(
            "`{program}` is a path; auto-approve entries name a bare program, resolved on a fixed trusted PATH"
        ));
    }
    if program.contains('=') {
        // `FOO=1 cmd` is an environment assignment to a shell; requests run
        // without one, so such an entry could never match: say so.
        return Err(format!(
            "`{program}` is an environment assignment, not a program; auto-approve entries start with a bare program name"
        ));
    }
    if let Some(reason) = banned_auto_approve_reason(program) {
        return Err(format!(
            "`{program}` can run arbitrary or workspace-controlled code ({reason}) and may never be auto-approved; remove it (such requests can still be approved by hand)"
        ));
    }
    if prefix {
        argv.push(PREFIX_MARK.to_string());
    }
    Ok(argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_host_bits() {
        assert!(parse_cidr("10.0.0.0/8").is_ok());
        assert!(parse_cidr("10.0.0.1/8").unwrap_err().contains("10.0.0.0/8"));
        assert!(parse_cidr("::/0").is_ok());
        assert!(parse_cidr("10.0.0.0/33").is_err());
    }

    #[test]
    fn auto_approve_rules() {
        assert_eq!(check_auto_approve("ls -la").unwrap(), vec!["ls", "-la"]);
        // A prefix entry is written with a last word `*`, nowhere else.
        assert_eq!(
            check_auto_approve("ls -la *").unwrap(),
            vec!["ls", "-la", "*"]
        );
        assert!(check_auto_approve("ls * -la").is_err());
        assert!(check_auto_approve("ls -la*").is_err());
        assert!(check_auto_approve("*").is_err());
        assert!(
            check_auto_approve("git status")
                .unwrap_err()
                .contains("never be auto-approved")
        );
        assert!(
            check_auto_approve("./ls")
                .unwrap_err()
                .contains("bare program")
        );
        assert!(
            check_auto_approve("LANG=C ls")
                .unwrap_err()
                .contains("environment assignment")
        );
        // Versioned names of banned programs are banned too; others pass.
        for versioned in [
            "python3.12",
            "perl5.36",
            "lua5.4",
            "gcc-12",
            "node18",
            "pip3.11",
        ] {
            assert!(
                check_auto_approve(versioned)
                    .unwrap_err()
                    .contains("never be auto-approved"),
                "{versioned}"
            );
        }
        for fine in ["sha256sum", "b2sum", "md5sum", "ls", "uname"] {
            assert!(check_auto_approve(fine).is_ok(), "{fine}");
        }
        assert!(check_auto_approve("ls; id").is_err());
        assert!(check_auto_approve("ls\u{202E}").is_err());
    }

    #[test]
    fn programs_that_run_programs_are_refused() {
        for entry in [
            "rg foo",
            "fd -e rs",
            "fdfind x",
            "parallel",
            "flock /tmp/l",
            "script -q",
            "systemd-run --user",
            "unshare -r",
            "nsenter -t 1",
            "chroot /",
            "setpriv",
            "bwrap",
            "awk",
            "sort",
            "zip",
            "ldd",
        ] {
            let err = check_auto_approve(entry).unwrap_err();
            assert!(err.contains("never be auto-approved"), "{entry}: {err}");
        }
        // The reason names what makes the program dangerous.
        assert!(check_auto_approve("rg").unwrap_err().contains("rg --pre"));
        // By path, they are refused as paths (before the list is consulted).
        for entry in ["/usr/bin/rg", "/bin/unshare -r", "./fd"] {
            let err = check_auto_approve(entry).unwrap_err();
            assert!(err.contains("is a path"), "{entry}: {err}");
        }
        // Names are compared exactly: `rgb` or `fdisk`-like names are not rg/fd.
        assert!(check_auto_approve("rgb").is_ok());
        assert!(check_auto_approve("fdupes").is_ok());
    }

    #[test]
    fn banned_programs_are_refused_as_entries() {
        for (_, names) in BANNED_AUTO_APPROVE {
            for name in *names {
                // Each name is something an entry could be, and is refused.
                assert_eq!(check_auto_approve(name).ok(), None, "{name}");
            }
        }
    }

    #[test]
    fn entry_characters_follow_the_request_classifier() {
        // Config uses the escalate crate's definition, so everything that
        // forces a human on a request is refused in an entry too.
        for entry in [
            "ls\u{00A0}-la",
            "ls\u{2028}",
            "ls\u{FE0F}",
            "ls\u{E000}",
            "ls\u{7F}",
            "ls\u{9B}",
            "ls\n-la",
            "ls * -l",
            "ls ~",
            "ls #x",
        ] {
            assert!(
                lazaret_escalate::classify::has_forcing_characters(entry),
                "{entry:?}"
            );
            assert!(
                check_auto_approve(entry)
                    .unwrap_err()
                    .contains("shell metacharacters or control characters"),
                "{entry:?}"
            );
        }
        assert!(check_auto_approve("ls 'a b' \"c\"").is_ok());
    }
}
