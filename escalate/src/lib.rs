//! The Host Escalation wire protocol (spec §5.1.2, §5.1.3), shared by the
//! in-sandbox `lazaret-escalate` client and the Session Coordinator.
//!
//! This crate stays small and free of heavy dependencies: its binary is
//! built static and mounted read-only into every Agent Sandbox.

use serde::{Deserialize, Serialize};

/// Where the Escalation Client and its socket live inside every sandbox.
pub const SANDBOX_DIR: &str = "/run/lazaret";
/// The Escalation Socket inside the sandbox.
pub const SOCKET_PATH: &str = "/run/lazaret/escalate.sock";
/// Trust Anchor client material inside the sandbox (read-only tmpfs).
pub const CERTS_DIR: &str = "/run/lazaret/certs";

/// A command request, sandbox to host (spec §5.1.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub request_id: String,
    pub session_id: String,
    pub profile: String,
    /// Seconds since the Unix epoch when the client signed (decisions.md D4).
    pub timestamp: u64,
    /// Working directory inside the sandbox, under `/workspace`.
    pub cwd: String,
    pub command: String,
    pub justification: String,
    /// ed25519 signature over the request's canonical bytes, hex.
    pub signature: String,
}

/// The host's answer (spec §5.1.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Response {
    pub request_id: String,
    pub approved: bool,
    /// Set only when the command ran.
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_round_trips_and_rejects_unknown_fields() {
        let r = Response {
            request_id: "r1".into(),
            approved: false,
            exit_code: None,
            stdout: String::new(),
            stderr: "denied".into(),
        };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<Response>(&text).unwrap(), r);
        let extra = text.replacen('{', "{\"admin\":true,", 1);
        assert!(serde_json::from_str::<Response>(&extra).is_err());
    }
}
