//! ratatui widgets for Lazaret's workbench. This crate depends only on the
//! terminal libraries (ratatui, vt100, ratatui-textarea), never on Lazaret's
//! core: every widget draws plain data it is given.
//!
//! - [`pane`]: the terminal pane of a Client Session (a vt100 screen drawn
//!   into a ratatui buffer) and the state shared with its PTY reader thread;
//! - [`keys`]: crossterm key, paste and mouse events encoded as the bytes a
//!   real terminal would send to the child;
//! - [`modal`]: the approval modal for a Host Escalation request and its
//!   command editor;
//! - [`panels`]: sessions, network policy, escalation queue, audit trail,
//!   tab bar, status line, help overlay, the new-tab dialog (profile
//!   and workspace) and the checkpoints overlay;
//! - [`layout`]: where the workbench puts its shell and panels (the
//!   dashboard column on a wide terminal, one panel on a narrow one, zoom);
//! - [`visible`]: hostile text made visible before a human reads it.

pub mod keys;
pub mod layout;
pub mod modal;
pub mod pane;
pub mod panels;
pub mod visible;

/// The vt100 this crate draws, so the app names the same version.
pub use vt100;
