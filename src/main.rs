use std::process::ExitCode;

fn main() -> ExitCode {
    match lazaret::cli::run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("lazaret: {err:#}");
            ExitCode::FAILURE
        }
    }
}
