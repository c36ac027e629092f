//! The Session Coordinator (spec §4.3.5, §4.4): one detached process per
//! Domain Anchor owning the sandbox, the state store and the sockets.

pub mod anchor;
pub mod bounded;
pub mod bounds;
pub mod client;
pub mod confine;
pub mod escalation;
pub mod hosted;
pub mod lock;
pub mod log;
pub mod protocol;
pub mod server;
pub mod store;
