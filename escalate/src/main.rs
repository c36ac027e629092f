//! `lazaret-escalate`: asks the human on the host to run a command there.

use std::process::ExitCode;

const HELP: &str = "\
lazaret-escalate: ask the human on the host to run one command outside this sandbox

usage: lazaret-escalate [--justify TEXT] -- COMMAND [ARGS...]

You are inside a Lazaret sandbox: no host files outside /workspace, no network
unless allowed. A person on the host sees your request, with your
justification, and may approve, edit or deny it.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--help" | "-h") => {
            println!("{HELP}");
            ExitCode::SUCCESS
        }
        Some("--version") => {
            println!("lazaret-escalate {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!(
                "lazaret-escalate: this Lazaret build has no Host Escalation channel yet; nothing was sent to the host"
            );
            // EX_UNAVAILABLE: the service is not there, the request was not judged.
            ExitCode::from(69)
        }
    }
}
