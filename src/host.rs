//! The host facts configuration needs: environment variables and the home
//! folder. A trait so tests can state them instead of inheriting the runner's.

use std::path::PathBuf;

pub trait HostEnv {
    /// A variable of the host environment; empty counts as unset.
    fn var(&self, name: &str) -> Option<String>;
    /// The passwd entry's home folder of the current user.
    fn passwd_home(&self) -> Option<PathBuf>;

    /// Spec §3.2.1: `$HOME`, then the passwd entry.
    fn home(&self) -> Option<PathBuf> {
        self.var("HOME")
            .map(PathBuf::from)
            .or_else(|| self.passwd_home())
    }
}

/// The real process environment and `/etc/passwd`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemEnv;

impl HostEnv for SystemEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }

    fn passwd_home(&self) -> Option<PathBuf> {
        nix::unistd::User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten()
            .map(|u| u.dir)
    }
}

/// A stated environment, for tests and for callers that scrub variables.
#[derive(Debug, Clone, Default)]
pub struct FixedEnv {
    pub vars: std::collections::BTreeMap<String, String>,
    pub passwd_home: Option<PathBuf>,
}

impl FixedEnv {
    pub fn with(mut self, name: &str, value: &str) -> Self {
        self.vars.insert(name.to_string(), value.to_string());
        self
    }
}

impl HostEnv for FixedEnv {
    fn var(&self, name: &str) -> Option<String> {
        self.vars.get(name).filter(|v| !v.is_empty()).cloned()
    }

    fn passwd_home(&self) -> Option<PathBuf> {
        self.passwd_home.clone()
    }
}
