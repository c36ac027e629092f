//! A session's Session Anchor: its id and ed25519 key, whose private half
//! never leaves the process holding it, and the delegated, expiring
//! credential it publishes for the sandbox's escalation client (decisions.md
//! D4). Held by a client for the sessions it runs itself (`lazaret exec`),
//! and by the coordinator for the sessions its Session Host runs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use lazaret_escalate::signing::SessionKey;

use super::client::Hello;

/// A Client Session's identity: its id and its Session Anchor key, whose
/// private half never leaves this process; each exec gets a delegated,
/// expiring credential (decisions.md D4). Shared by `lazaret shell`/`exec`
/// and every tab of `lazaret ui`.
pub struct SessionAnchor {
    pub id: String,
    key: Arc<SessionKey>,
}

impl std::fmt::Debug for SessionAnchor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionAnchor")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl SessionAnchor {
    pub fn new() -> Result<Self> {
        Self::with_id(uuid::Uuid::new_v4().to_string())
    }

    /// A new key for a session that runs already under `id` (a hosted
    /// session a new coordinator adopts: the one that keyed it is gone).
    pub fn with_id(id: String) -> Result<Self> {
        Ok(SessionAnchor {
            id,
            key: Arc::new(SessionKey::generate().context("cannot create the Session Anchor key")?),
        })
    }

    /// The Session Anchor's public key.
    pub fn public_key(&self) -> lazaret_escalate::ed25519_dalek::VerifyingKey {
        self.key.public_key()
    }

    /// The handshake of this session.
    pub fn hello(&self, purpose: &str, interactive: bool) -> Hello {
        Hello {
            session_id: Some(self.id.clone()),
            session_key: Some(hex::encode(self.key.public_key().as_bytes())),
            purpose: purpose.into(),
            interactive,
        }
    }

    /// Publishes this session's delegated credential in the domain's
    /// certs folder (memory-backed, read-only in the sandbox), where the
    /// escalation client reads it for every request; renewed at half its
    /// lifetime while the returned guard lives, removed when it drops. The
    /// credential never travels in podman's arguments, environment or
    /// saved container state (decisions.md D4).
    pub fn publish_credential(&self, certs_dir: &Path) -> Result<CredentialFile> {
        let path = certs_dir.join(lazaret_escalate::signing::credential_file_name(&self.id));
        let write = {
            let (key, id, path) = (Arc::clone(&self.key), self.id.clone(), path.clone());
            move || -> Result<()> {
                use std::os::unix::fs::OpenOptionsExt;
                let lifetime = credential_lifetime();
                let expires = lazaret_escalate::signing::unix_now() + lifetime.as_secs();
                let credential = key
                    .delegate(&id, expires)
                    .context("cannot delegate the session credential")?;
                // Written aside and renamed: a reader never sees half of it.
                let tmp = path.with_extension("new");
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&tmp)
                    .with_context(|| format!("cannot write {}", tmp.display()))?;
                f.write_all(credential.to_env_value().as_bytes())?;
                std::fs::rename(&tmp, &path)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                Ok(())
            }
        };
        write()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        std::thread::spawn(move || {
            use std::sync::atomic::Ordering;
            loop {
                let until = Instant::now() + credential_lifetime() / 2;
                while Instant::now() < until {
                    if flag.load(Ordering::Relaxed) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                if flag.load(Ordering::Relaxed) {
                    return;
                }
                if let Err(e) = write() {
                    eprintln!("lazaret: cannot renew the session credential: {e:#}");
                }
            }
        });
        Ok(CredentialFile { path, stop })
    }

    /// The `podman` command that runs `argv` in `sandbox` as this session:
    /// its id (the credential itself is in the file
    /// [`publish_credential`](Self::publish_credential) keeps), the guide,
    /// and TERM.
    pub fn exec_args(
        &self,
        sandbox: &str,
        tty: bool,
        term: Option<&str>,
        argv: &[String],
    ) -> Result<ExecSpec> {
        let mut args = vec!["exec".to_string(), "--interactive".to_string()];
        if tty {
            args.push("--tty".into());
        }
        let env = Vec::new();
        args.push("--env".into());
        args.push(format!("{}={}", lazaret_escalate::env::SESSION_ID, self.id));
        args.push("--env".into());
        args.push(format!(
            "{}={}",
            lazaret_escalate::env::GUIDE,
            lazaret_escalate::GUIDE_PATH
        ));
        if let Some(term) = term {
            args.push("--env".into());
            args.push(format!("TERM={term}"));
        }
        args.push(sandbox.to_string());
        // Every session process under Lazaret's seccomp rules: runsc
        // applies the container's profile to its first process only
        // (decisions.md D8, `lazaret_escalate::confine`).
        args.push(lazaret_escalate::BINARY_PATH.into());
        args.push(lazaret_escalate::confine::FLAG.into());
        args.push("--".into());
        args.extend(argv.iter().cloned());
        Ok(ExecSpec { args, env })
    }
}

/// A session's published credential: renewed while it lives, removed (and
/// renewal stopped) when dropped.
#[derive(Debug)]
pub struct CredentialFile {
    path: PathBuf,
    stop: Arc<AtomicBool>,
}

impl Drop for CredentialFile {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A `podman exec` of a session: its arguments, and environment variables
/// for podman itself that `--env NAME` arguments forward.
#[derive(Clone)]
pub struct ExecSpec {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl std::fmt::Debug for ExecSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecSpec")
            .field("args", &self.args)
            .finish_non_exhaustive()
    }
}

pub fn credential_lifetime() -> Duration {
    std::env::var("LAZARET_CREDENTIAL_LIFETIME_SECS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&s| s >= 2)
        .map_or(Duration::from_secs(12 * 3600), Duration::from_secs)
}
