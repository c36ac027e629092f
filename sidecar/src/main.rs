//! `lazaret-sidecar`: the Network Sidecar's process. It runs as PID 1 of a
//! `FROM scratch` container under runc and owns the sandbox's network
//! namespace. This version holds the namespace until it is told to stop;
//! route management arrives with the netlink router.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--version") => {
            println!("lazaret-sidecar {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Some("hold") => hold(),
        _ => {
            eprintln!(
                "usage: lazaret-sidecar hold | --version\n\n\
                 Started by Lazaret as the Network Sidecar container; not meant to be run by hand."
            );
            ExitCode::from(2)
        }
    }
}

/// Waits for SIGTERM or SIGINT. As PID 1 a signal without a handler is
/// ignored, so the signals are blocked and taken with sigwait.
fn hold() -> ExitCode {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    if let Err(e) = set.thread_block() {
        eprintln!("lazaret-sidecar: cannot block signals: {e}");
        return ExitCode::FAILURE;
    }
    match set.wait() {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lazaret-sidecar: waiting for a signal failed: {e}");
            ExitCode::FAILURE
        }
    }
}
