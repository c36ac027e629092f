//! Lazaret: rootless, gVisor-sandboxed containers for AI coding agents, with
//! human-approved Host Escalation.
//!
//! This library is the core; it knows nothing of the terminal UI. Modules are
//! named after the specification's glossary.

pub mod agents;
pub mod checkpoint;
pub mod cli;
pub mod client;
pub mod config;
pub mod coordinator;
pub mod doctor;
pub mod domain;
pub mod domains;
pub mod engine;
pub mod git_sentry;
pub mod host;
pub mod install;
pub mod mounts;
pub mod net;
pub mod podman;
pub mod rundir;
pub mod ui;
