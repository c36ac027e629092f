//! The Host Escalation protocol (spec §4.3.5 Step 3, §5; decisions.md D3–D5),
//! shared by the in-sandbox `lazaret-escalate` client and the host's Session
//! Coordinator.
//!
//! - [`protocol`]: length-prefixed frames and strictly decoded JSON bodies
//!   ([`Request`], [`Response`]).
//! - [`signing`]: the Session Anchor: session keys, per-exec delegated
//!   credentials, canonical signed bytes and their verification.
//! - [`trust`]: the Trust Anchor: the in-memory CA, certificates, rustls
//!   configurations and the post-handshake identity check.
//! - [`server`]: the host's accept step (handshake, then identity) over tokio.
//! - [`classify`]: the metacharacter check, shell-words parsing and the
//!   auto-approve argv-prefix matcher.
//! - [`client`]: the blocking client used by the binary.
//! - [`selftest`]: the in-sandbox self-test run at every sandbox start.
//! - [`session_host`]: the process in the sandbox that holds the domain's
//!   sessions in PTYs, and its wire format.
//!
//! The binary is built static and mounted read-only into every Agent
//! Sandbox; code it does not call is dropped at link time.

pub mod classify;
pub mod client;
pub mod confine;
mod hex;
pub mod protocol;
pub mod selftest;
pub mod server;
pub mod session_host;
pub mod signing;
pub mod trust;

pub use protocol::{Request, Response, Status};

// The crates in the public API, so the host uses exactly these versions.
pub use {ed25519_dalek, rcgen, rustls, tokio_rustls};

/// Where the Escalation Client and its socket live inside every sandbox.
pub const SANDBOX_DIR: &str = "/run/lazaret";
/// The Escalation Socket inside the sandbox.
pub const SOCKET_PATH: &str = "/run/lazaret/escalate.sock";
/// Trust Anchor client material inside the sandbox (read-only tmpfs).
pub const CERTS_DIR: &str = "/run/lazaret/certs";
/// The client binary inside the sandbox.
pub const BINARY_PATH: &str = "/run/lazaret/escalate";
/// Written by the host (read-only inside) once the sandbox passed its
/// self-test: a session's confined exec waits for it before its command
/// runs, so a session may be started while the sandbox is still checked.
pub const READY_MARKER: &str = "/run/lazaret/certs/ready";
/// Its name in the host's certs folder.
pub const READY_MARKER_NAME: &str = "ready";
/// In `--version`: this build's confined exec waits for [`READY_MARKER`],
/// and it runs the Session Host (`session-host`, version 3: spare
/// sessions). The host refuses a build without it, whose sessions would not
/// wait or could not live in the domain.
pub const SESSION_GATE: &str = "session-gate/3";
/// The agent's guide inside the sandbox; the host writes [`GUIDE`] there.
pub const GUIDE_PATH: &str = "/run/lazaret/README.md";
/// The Agent Workspace inside the sandbox; request `cwd`s must lie under it.
pub const WORKSPACE_DIR: &str = "/workspace";

/// Environment variables the client reads. The host sets the session ones
/// on each `podman exec`, only for that process tree.
pub mod env {
    /// The Client Session's id (a canonical lowercase UUID).
    pub const SESSION_ID: &str = "LAZARET_SESSION_ID";
    /// The delegated per-exec credential, see
    /// [`SessionCredential::to_env_value`](crate::signing::SessionCredential::to_env_value).
    pub const SESSION_CREDENTIAL: &str = "LAZARET_SESSION_CREDENTIAL";
    /// The sandbox's profile (set on the container by the engine).
    pub const PROFILE: &str = "LAZARET_PROFILE";
    /// Overrides [`SOCKET_PATH`](crate::SOCKET_PATH) (tests).
    pub const SOCKET: &str = "LAZARET_ESCALATION_SOCKET";
    /// Overrides [`CERTS_DIR`](crate::CERTS_DIR) (tests).
    pub const CERTS_DIR: &str = "LAZARET_CERTS_DIR";
    /// Where the agent's guide is; the host may set it to
    /// [`GUIDE_PATH`](crate::GUIDE_PATH) so agents find it.
    pub const GUIDE: &str = "LAZARET_GUIDE";
}

/// The client's exit codes besides the host command's own.
///
/// A host command may itself exit with one of these numbers; the client
/// then prints nothing of its own, while for its own outcomes it always
/// writes a line starting with `lazaret-escalate:` to stderr.
pub mod exit {
    /// Bad command line (sysexits EX_USAGE).
    pub const USAGE: u8 = 64;
    /// No answer could be had: socket missing, TLS or identity failure,
    /// connection dropped, malformed answer (EX_UNAVAILABLE).
    pub const UNAVAILABLE: u8 = 69;
    /// The host answered `error`: it refused the request as invalid or
    /// could not run it; nothing ran (EX_SOFTWARE).
    pub const HOST_ERROR: u8 = 70;
    /// A human or the policy denied the request; nothing ran (EX_NOPERM).
    pub const DENIED: u8 = 77;
    /// This process has no usable session credential, profile or
    /// certificates: it was not started by a Lazaret session (EX_CONFIG).
    pub const NO_CREDENTIAL: u8 = 78;
    /// `--timeout` passed without an answer (as timeout(1)).
    pub const TIMEOUT: u8 = 124;
}

/// The guide for agents: printed by `--help`, and written by the host to
/// [`GUIDE_PATH`].
pub const GUIDE: &str = include_str!("guide.md");
