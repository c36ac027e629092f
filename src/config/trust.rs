//! Workspace configuration trust (decisions.md D8).
//!
//! A `./lazaret.toml` may have been written by the agent (direct mode),
//! merged in with its branch, or shipped with a cloned repository, so it is
//! untrusted until the user trusts its exact content (`lazaret trust`),
//! direnv-style: the SHA-256 of its bytes is recorded, keyed by its path, in
//! the user's own data (never in the workspace). A trusted file that changes
//! is untrusted again.
//!
//! Untrusted, the file may only *narrow*: every key it sets must leave the
//! merged result allowing a subset of what the configuration without it
//! allows. Only a
//! short list of keys can be proven narrowing (a value equal to the lower
//! layers', a deny list that keeps every lower entry, allow lists and
//! auto-approve lists that drop entries, `escalation.enabled = false`,
//! `runtime = "runsc"`, fewer persistent folders, volumes removed or made
//! read-only); everything else is refused.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::source::Location;
use crate::host::HostEnv;

/// A workspace file larger than this is refused (it is a short TOML file).
const MAX_WORKSPACE_FILE: u64 = 1 << 20;

/// One key of an untrusted workspace file that would widen the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Widening {
    pub key: String,
    pub location: Option<Location>,
    pub why: String,
}

/// The trust state of the workspace file that was read, for `config show`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceTrust {
    pub file: PathBuf,
    pub sha256: String,
    /// `true` when the user trusted this exact content; `false` when it was
    /// applied untrusted because every key it sets narrows.
    pub trusted: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("cannot read {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "{0} is not a regular file; a workspace configuration must be a plain file (remove it, or replace it with one)"
    )]
    NotAFile(PathBuf),
    #[error("{0} is larger than 1 MiB; that is no configuration file")]
    TooLarge(PathBuf),
    #[error("cannot record trust in {path}: {error}")]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "the trust store {path} is damaged ({error}); remove it and trust your workspace files again"
    )]
    Damaged { path: PathBuf, error: String },
    #[error(
        "cannot locate the trust store: neither XDG_DATA_HOME nor HOME is set, and the user has no passwd home"
    )]
    NoHome,
}

/// SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Reads a workspace configuration file without blocking on a FIFO or
/// reading a device: `None` when it does not exist.
pub fn read_workspace_file(path: &Path) -> Result<Option<String>, TrustError> {
    let read = |error| TrustError::Read {
        path: path.to_path_buf(),
        error,
    };
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read(e)),
    };
    let meta = file.metadata().map_err(read)?;
    if !meta.is_file() {
        return Err(TrustError::NotAFile(path.to_path_buf()));
    }
    if meta.len() > MAX_WORKSPACE_FILE {
        return Err(TrustError::TooLarge(path.to_path_buf()));
    }
    let mut text = String::new();
    (&mut file)
        .take(MAX_WORKSPACE_FILE + 1)
        .read_to_string(&mut text)
        .map_err(read)?;
    Ok(Some(text))
}

/// The key a file is recorded under: its folder canonical, its own name
/// kept, so a symlink named `lazaret.toml` never borrows the trust of the
/// file it points to.
pub fn trust_key(file: &Path) -> PathBuf {
    let name = file.file_name().map(PathBuf::from).unwrap_or_default();
    let parent = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    parent
        .canonicalize()
        .unwrap_or_else(|_| std::path::absolute(&parent).unwrap_or(parent))
        .join(name)
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StoreFile {
    /// `trust_key` → SHA-256 of the trusted content.
    files: BTreeMap<PathBuf, Record>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    sha256: String,
    /// Seconds since the epoch.
    trusted_at: u64,
}

/// The user's record of trusted workspace files:
/// `$XDG_DATA_HOME/lazaret/trusted-configs.json` (mode 0600, folder 0700).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustStore {
    path: PathBuf,
}

impl TrustStore {
    pub fn at(path: PathBuf) -> Self {
        TrustStore { path }
    }

    /// The standard place for this user.
    pub fn locate(env: &dyn HostEnv) -> Result<Self, TrustError> {
        let data = env
            .var("XDG_DATA_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| env.home().map(|h| h.join(".local/share")))
            .ok_or(TrustError::NoHome)?;
        Ok(TrustStore {
            path: data.join("lazaret").join("trusted-configs.json"),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> Result<StoreFile, TrustError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| TrustError::Damaged {
                path: self.path.clone(),
                error: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(StoreFile::default()),
            Err(error) => Err(TrustError::Read {
                path: self.path.clone(),
                error,
            }),
        }
    }

    fn write(&self, store: &StoreFile) -> Result<(), TrustError> {
        let write = |error| TrustError::Write {
            path: self.path.clone(),
            error,
        };
        let dir = self.path.parent().unwrap_or(Path::new("/"));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(write)?;
        let tmp = dir.join(format!(".trusted-configs.{}.tmp", std::process::id()));
        let text = serde_json::to_vec_pretty(store).expect("serialisable");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(write)?;
        std::io::Write::write_all(&mut f, &text).map_err(write)?;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(write)?;
        std::fs::rename(&tmp, &self.path).map_err(write)
    }

    /// `true` when `file`'s recorded hash is `sha256`.
    pub fn is_trusted(&self, file: &Path, sha256: &str) -> Result<bool, TrustError> {
        Ok(self
            .read()?
            .files
            .get(&trust_key(file))
            .is_some_and(|r| r.sha256 == sha256))
    }

    /// Records `sha256` as the trusted content of `file`.
    pub fn trust(&self, file: &Path, sha256: &str) -> Result<(), TrustError> {
        let mut store = self.read()?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        store.files.insert(
            trust_key(file),
            Record {
                sha256: sha256.to_string(),
                trusted_at: now,
            },
        );
        self.write(&store)
    }

    /// Forgets `file`; `true` when it was recorded.
    pub fn revoke(&self, file: &Path) -> Result<bool, TrustError> {
        let mut store = self.read()?;
        let had = store.files.remove(&trust_key(file)).is_some();
        if had {
            self.write(&store)?;
        }
        Ok(had)
    }
}

/// Every key of `upper` (an untrusted workspace layer) that is not proven
/// to narrow what `lower` (the configuration without it) allows.
pub fn widening_keys(
    lower: &toml::Table,
    upper: &toml::Table,
    origins: &BTreeMap<String, Location>,
) -> Vec<Widening> {
    let mut out = Vec::new();
    let mut refuse = |key: String, why: &str| {
        out.push(Widening {
            location: origins.get(&key).cloned(),
            key,
            why: why.to_string(),
        });
    };
    for (key, value) in upper {
        let low = lower.get(key);
        match (key.as_str(), value) {
            ("network", toml::Value::Table(t)) => {
                let low_t = low.and_then(toml::Value::as_table);
                for (k, v) in t {
                    let path = format!("network.{k}");
                    let lv = low_t.and_then(|l| l.get(k));
                    match k.as_str() {
                        "default_allow" => {
                            if !is_subset(v, lv, true) {
                                refuse(path, "allows egress your own configuration does not");
                            }
                        }
                        "default_deny" => {
                            if !is_subset(lv.unwrap_or(&empty_array()), Some(v), true) {
                                refuse(path, "drops deny rules of your own configuration");
                            }
                        }
                        _ => {
                            if lv != Some(v) {
                                refuse(path, "is not a narrowing key");
                            }
                        }
                    }
                }
            }
            ("escalation", toml::Value::Table(t)) => {
                let low_t = low.and_then(toml::Value::as_table);
                for (k, v) in t {
                    let path = format!("escalation.{k}");
                    let lv = low_t.and_then(|l| l.get(k));
                    match k.as_str() {
                        "enabled" if v == &toml::Value::Boolean(false) => {}
                        "auto_approve" => {
                            if !is_subset(v, lv, false) {
                                refuse(
                                    path,
                                    "auto-approves commands your own configuration does not",
                                );
                            }
                        }
                        _ => {
                            if lv != Some(v) {
                                refuse(path, "is not a narrowing key");
                            }
                        }
                    }
                }
            }
            ("profiles", toml::Value::Table(t)) => {
                let low_t = low.and_then(toml::Value::as_table);
                for (name, p) in t {
                    let base = format!("profiles.{name}");
                    let Some(low_p) = low_t.and_then(|l| l.get(name)).and_then(|v| v.as_table())
                    else {
                        refuse(base, "defines a profile your own configuration does not");
                        continue;
                    };
                    let Some(p) = p.as_table() else {
                        refuse(base, "is not a narrowing key");
                        continue;
                    };
                    profile_widening(&base, low_p, p, &mut refuse);
                }
            }
            _ => {
                if low != Some(value) {
                    refuse(key.clone(), "is not a narrowing key");
                }
            }
        }
    }
    out
}

fn profile_widening(
    base: &str,
    lower: &toml::Table,
    upper: &toml::Table,
    refuse: &mut dyn FnMut(String, &str),
) {
    for (k, v) in upper {
        let path = format!("{base}.{k}");
        let lv = lower.get(k);
        match k.as_str() {
            "allow_egress" => {
                if !is_subset(v, lv, true) {
                    refuse(path, "allows egress your own configuration does not");
                }
            }
            "persistent_dirs" => {
                if !is_subset(v, lv, false) {
                    refuse(path, "persists folders your own configuration does not");
                }
            }
            "runtime" if v.as_str() == Some("runsc") => {}
            "volumes" => {
                let lows: &[toml::Value] = lv.and_then(|l| l.as_array()).map_or(&[], |a| a);
                let narrows = v.as_array().is_some_and(|ups| {
                    ups.iter()
                        .all(|u| lows.iter().any(|l| volume_narrows(l, u)))
                });
                if !narrows {
                    refuse(
                        path,
                        "mounts host folders (or mounts them with more access) your own configuration does not",
                    );
                }
            }
            "env" => match (v.as_table(), lv.and_then(|l| l.as_table())) {
                (Some(t), low_env) => {
                    for (name, value) in t {
                        if low_env.and_then(|l| l.get(name)) != Some(value) {
                            refuse(
                                format!("{path}.{name}"),
                                "sets or forwards an environment variable",
                            );
                        }
                    }
                }
                (None, _) => refuse(path, "is not a narrowing key"),
            },
            _ => {
                if lv != Some(v) {
                    refuse(
                        path,
                        match k.as_str() {
                            "image" => "changes the image the sandbox runs",
                            "command" => "changes the command a session runs",
                            "runtime" => "leaves gVisor for another runtime",
                            "workspace_mode" => "changes how the workspace is shared",
                            _ => "is not a narrowing key",
                        },
                    );
                }
            }
        }
    }
}

fn empty_array() -> toml::Value {
    toml::Value::Array(Vec::new())
}

/// `true` when `upper` is an array whose every item is in `lower` (an
/// array). CIDRs are compared as networks when `cidr` is set.
fn is_subset(upper: &toml::Value, lower: Option<&toml::Value>, cidr: bool) -> bool {
    let norm = |v: &toml::Value| -> toml::Value {
        match v.as_str() {
            Some(s) if cidr => match lazaret_sidecar::policy::parse_net(s) {
                Ok(n) => toml::Value::String(n.trunc().to_string()),
                Err(_) => v.clone(),
            },
            _ => v.clone(),
        }
    };
    let (Some(up), Some(low)) = (upper.as_array(), lower.and_then(|l| l.as_array())) else {
        // No lower list: only an empty list narrows (nothing allowed either way).
        return upper.as_array().is_some_and(|a| a.is_empty());
    };
    let low: Vec<toml::Value> = low.iter().map(norm).collect();
    up.iter().all(|u| low.contains(&norm(u)))
}

/// `upper` mounts the same host folder at the same place as `lower`, with
/// no more access: read-only if `lower` is, and every restricting option of
/// `lower` kept; relabelling unchanged.
fn volume_narrows(lower: &toml::Value, upper: &toml::Value) -> bool {
    let (Some(l), Some(u)) = (lower.as_table(), upper.as_table()) else {
        return false;
    };
    if u.keys()
        .any(|k| !matches!(k.as_str(), "host" | "container" | "mode"))
    {
        return false;
    }
    if l.get("host") != u.get("host") || l.get("container") != u.get("container") {
        return false;
    }
    let opts = |t: &toml::Table| -> Vec<String> {
        t.get("mode")
            .and_then(|m| m.as_str())
            .map(|m| m.split(',').map(str::to_string).collect())
            .unwrap_or_default()
    };
    let (lo, uo) = (opts(l), opts(u));
    let has = |o: &[String], x: &str| o.iter().any(|s| s == x);
    if has(&lo, "ro") && !has(&uo, "ro") {
        return false;
    }
    for flag in ["nosuid", "nodev", "noexec"] {
        if has(&lo, flag) && !has(&uo, flag) {
            return false;
        }
    }
    for relabel in ["z", "Z"] {
        if has(&lo, relabel) != has(&uo, relabel) {
            return false;
        }
    }
    // Only known options: anything else is not proven narrowing.
    uo.iter()
        .all(|o| super::VOLUME_OPTIONS.contains(&o.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> toml::Table {
        s.parse().unwrap()
    }

    fn keys(lower: &str, upper: &str) -> Vec<String> {
        widening_keys(&t(lower), &t(upper), &BTreeMap::new())
            .into_iter()
            .map(|w| w.key)
            .collect()
    }

    const LOWER: &str = r#"
[network]
default_allow = ["1.2.3.0/24", "5.6.7.0/24"]
default_deny = ["10.0.0.0/8"]
[escalation]
enabled = true
socket_dir = "/s"
auto_approve = ["date", "ls -la"]
[profiles.dev]
image = "img"
allow_egress = ["9.9.9.0/24"]
persistent_dirs = ["/usr", "/etc"]
volumes = [{ host = "/h", container = "/c" }, { host = "/x", container = "/y", mode = "ro" }]
env = { A = "a" }
"#;

    #[test]
    fn narrowing_keys_pass() {
        let up = r#"
[network]
default_allow = ["1.2.3.0/24"]
default_deny = ["10.0.0.0/8", "192.168.0.0/16"]
[escalation]
enabled = false
auto_approve = ["date"]
[profiles.dev]
image = "img"
allow_egress = []
persistent_dirs = ["/usr"]
runtime = "runsc"
volumes = [{ host = "/h", container = "/c", mode = "ro,nosuid" }]
env = { A = "a" }
"#;
        assert_eq!(keys(LOWER, up), Vec::<String>::new());
    }

    /// Mutation check (issue 41, scripts/mutants trust): a network key
    /// other than the two lists, or escalation turned back on, is no
    /// narrowing (the same value is); a bare file name is keyed by the
    /// folder it is in.
    #[test]
    fn other_keys_widen_unless_unchanged_and_a_bare_name_is_keyed_by_its_folder() {
        let lower = "[network]\nallow_domains = [\"a.example\"]\n[escalation]\nenabled = false";
        assert_eq!(
            keys(lower, "[network]\nallow_domains = [\"evil.example\"]"),
            vec!["network.allow_domains".to_string()]
        );
        assert_eq!(
            keys(lower, "[network]\nallow_domains = [\"a.example\"]"),
            Vec::<String>::new()
        );
        assert_eq!(
            keys(lower, "[escalation]\nenabled = true"),
            vec!["escalation.enabled".to_string()]
        );
        assert_eq!(
            keys(lower, "[escalation]\nenabled = false"),
            Vec::<String>::new()
        );
        let here = std::env::current_dir().unwrap().canonicalize().unwrap();
        assert_eq!(
            trust_key(Path::new("lazaret.toml")),
            here.join("lazaret.toml")
        );
    }

    /// The reason a profile key is refused says what it would change (the
    /// runtime's is the one `lazaret` prints when a file leaves gVisor).
    #[test]
    fn a_refused_profile_key_says_what_it_changes() {
        let why = |upper: &str| -> Vec<String> {
            widening_keys(&t(LOWER), &t(upper), &BTreeMap::new())
                .into_iter()
                .map(|w| w.why)
                .collect()
        };
        for (upper, reason) in [
            ("[profiles.dev]\nimage = \"evil\"", "changes the image"),
            ("[profiles.dev]\ncommand = \"sh\"", "changes the command"),
            ("[profiles.dev]\nruntime = \"runc\"", "leaves gVisor"),
            (
                "[profiles.dev]\nworkspace_mode = \"direct\"",
                "changes how the workspace",
            ),
        ] {
            let why = why(upper);
            assert!(why.iter().any(|w| w.contains(reason)), "{upper}: {why:?}");
        }
    }

    #[test]
    fn widening_keys_are_named() {
        let cases = [
            (
                "[network]\ndefault_allow = [\"0.0.0.0/0\"]",
                "network.default_allow",
            ),
            ("[network]\ndefault_deny = []", "network.default_deny"),
            (
                "[escalation]\nauto_approve = [\"date\", \"cp\"]",
                "escalation.auto_approve",
            ),
            (
                "[escalation]\nenabled = true\nsocket_dir = \"/t\"",
                "escalation.socket_dir",
            ),
            ("[storage]\ndata_root = \"/t\"", "storage"),
            ("default_profile = \"dev\"", "default_profile"),
            ("[profiles.dev]\nimage = \"evil\"", "profiles.dev.image"),
            ("[profiles.dev]\ncommand = \"sh\"", "profiles.dev.command"),
            ("[profiles.dev]\nruntime = \"runc\"", "profiles.dev.runtime"),
            (
                "[profiles.dev]\nworkspace_mode = \"direct\"",
                "profiles.dev.workspace_mode",
            ),
            (
                "[profiles.dev]\nallow_egress = [\"0.0.0.0/0\"]",
                "profiles.dev.allow_egress",
            ),
            (
                "[profiles.dev]\npersistent_dirs = [\"/home\"]",
                "profiles.dev.persistent_dirs",
            ),
            (
                "[profiles.dev]\nenv = { K = \"env:SSH_AUTH_SOCK\" }",
                "profiles.dev.env.K",
            ),
            ("[profiles.dev]\nenv = { A = \"b\" }", "profiles.dev.env.A"),
            (
                "[profiles.dev]\nvolumes = [{ host = \"~/.ssh\", container = \"/s\" }]",
                "profiles.dev.volumes",
            ),
            (
                "[profiles.dev]\nvolumes = [{ host = \"/x\", container = \"/y\", mode = \"rw\" }]",
                "profiles.dev.volumes",
            ),
            ("[profiles.new]\nimage = \"img\"", "profiles.new"),
        ];
        for (upper, key) in cases {
            assert_eq!(keys(LOWER, upper), vec![key.to_string()], "{upper}");
        }
    }

    /// What `volume_narrows` decides, one option or path at a time (each
    /// case tells a mutation of one of its conditions from the original).
    #[test]
    fn a_volume_narrows_only_with_the_same_paths_and_no_more_access() {
        let v = |s: &str| -> toml::Value {
            toml::from_str::<toml::Table>(&format!("v = {s}")).unwrap()["v"].clone()
        };
        let lower = v(r#"{ host = "/h", container = "/c", mode = "nosuid" }"#);
        let read_only = v(r#"{ host = "/h", container = "/c", mode = "ro" }"#);
        // Narrowing: the same, a restriction added, `ro` kept or added.
        for upper in [
            r#"{ host = "/h", container = "/c", mode = "nosuid" }"#,
            r#"{ host = "/h", container = "/c", mode = "nosuid,nodev" }"#,
            r#"{ host = "/h", container = "/c", mode = "ro,nosuid" }"#,
        ] {
            assert!(volume_narrows(&lower, &v(upper)), "{upper}");
        }
        assert!(volume_narrows(&read_only, &read_only));
        assert!(volume_narrows(
            &read_only,
            &v(r#"{ host = "/h", container = "/c", mode = "ro,noexec" }"#)
        ));
        // Widening: the same host folder elsewhere in the sandbox, another
        // host folder at the same place, `ro` or a restriction dropped, an
        // unknown option or key, relabelling changed.
        for upper in [
            r#"{ host = "/h", container = "/elsewhere", mode = "nosuid" }"#,
            r#"{ host = "/other", container = "/c", mode = "nosuid" }"#,
            r#"{ host = "/h", container = "/c" }"#,
            r#"{ host = "/h", container = "/c", mode = "nosuid,exec" }"#,
            r#"{ host = "/h", container = "/c", mode = "nosuid", extra = 1 }"#,
            r#"{ host = "/h", container = "/c", mode = "nosuid,Z" }"#,
        ] {
            assert!(!volume_narrows(&lower, &v(upper)), "{upper}");
        }
        assert!(!volume_narrows(
            &read_only,
            &v(r#"{ host = "/h", container = "/c", mode = "rw" }"#)
        ));
        assert!(!volume_narrows(&v("\"/h:/c\""), &v("\"/h:/c\"")));
    }

    /// Egress lists compare as networks, not as text: an address is its
    /// /32 (or /128), and IPv6 may be written in any of its forms.
    #[test]
    fn egress_lists_compare_as_networks() {
        let lower = "[profiles.dev]\nallow_egress = [\"192.0.2.7/32\", \"2001:db8::/32\"]";
        let upper = "[profiles.dev]\nallow_egress = [\"192.0.2.7\", \"2001:0db8:0::/32\"]";
        assert_eq!(keys(lower, upper), Vec::<String>::new());
        // Another network is still refused.
        let wider = "[profiles.dev]\nallow_egress = [\"192.0.2.0/24\"]";
        assert_eq!(keys(lower, wider), vec!["profiles.dev.allow_egress"]);
    }

    #[test]
    fn no_lower_list_means_only_empty_narrows() {
        assert_eq!(
            keys(
                "[profiles.dev]\nimage = \"i\"",
                "[profiles.dev]\nallow_egress = []"
            ),
            Vec::<String>::new()
        );
        assert_eq!(
            keys(
                "[profiles.dev]\nimage = \"i\"",
                "[profiles.dev]\nallow_egress = [\"1.0.0.0/8\"]"
            ),
            vec!["profiles.dev.allow_egress".to_string()]
        );
    }

    #[test]
    fn store_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let store = TrustStore::at(dir.path().join("d/trusted.json"));
        let file = dir.path().join("lazaret.toml");
        std::fs::write(&file, "x").unwrap();
        assert!(!store.is_trusted(&file, "abc").unwrap());
        store.trust(&file, "abc").unwrap();
        assert!(store.is_trusted(&file, "abc").unwrap());
        assert!(!store.is_trusted(&file, "abd").unwrap());
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            std::fs::metadata(store.path()).unwrap().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::metadata(dir.path().join("d")).unwrap().mode() & 0o777,
            0o700
        );
        assert!(store.revoke(&file).unwrap());
        assert!(!store.is_trusted(&file, "abc").unwrap());
        assert!(!store.revoke(&file).unwrap());
    }

    #[test]
    fn fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("lazaret.toml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(matches!(
            read_workspace_file(&fifo),
            Err(TrustError::NotAFile(_))
        ));
        assert!(
            read_workspace_file(&dir.path().join("none"))
                .unwrap()
                .is_none()
        );
    }
}
