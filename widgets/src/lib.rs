//! ratatui widgets for Lazaret's workbench. This crate depends only on the
//! terminal libraries, never on Lazaret's core.

pub mod visible;
