//! The binary's error: a message with the context it arose in, outermost
//! first ("cannot add rule 10008: to 192.0.2.0/24 lookup 200: Operation not
//! permitted (EPERM, errno 1)"). A string is all the sidecar does with an
//! error, and anyhow would add to a binary that has to stay small.

use std::fmt;

#[derive(Debug)]
pub struct Error(String);

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(message: impl Into<String>) -> Error {
        Error(message.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

pub trait Context<T> {
    /// Prefixes the error with what was being done.
    fn context(self, what: &str) -> Result<T>;
    fn with_context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: fmt::Display> Context<T> for std::result::Result<T, E> {
    fn context(self, what: &str) -> Result<T> {
        self.map_err(|e| Error(format!("{what}: {e}")))
    }

    fn with_context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error(format!("{}: {e}", what())))
    }
}
