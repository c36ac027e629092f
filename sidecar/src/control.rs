//! How `lazaret-sidecar apply|show` reach a running `serve`: one JSON
//! [`Request`] over a UNIX socket in the sidecar's own file system (a tmpfs
//! the agent's mount namespace never sees; not an abstract socket, which the
//! agent would share with the network namespace), one JSON [`Response`] back.
//! `serve` owns the resolver's name-derived rules, so only it changes rules
//! while it runs.

use serde::{Deserialize, Serialize};

use crate::policy::PolicySpec;
use crate::report::TableReport;

/// Where `serve --control` listens by default, inside the sidecar.
pub const DEFAULT_SOCKET: &str = "/run/lazaret-sidecar/control.sock";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    /// Enforce this policy (and keep the name rules it still permits).
    Apply(PolicySpec),
    /// The live table, the name-derived rules and the refused names.
    Show,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    Ok(Box<TableReport>),
    Error(String),
}
