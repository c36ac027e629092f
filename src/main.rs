use std::process::ExitCode;

fn main() -> ExitCode {
    match lazaret::cli::run() {
        Ok(code) => code,
        Err(err) => {
            // Errors can quote the agent's text (a workspace file's keys, a
            // name it chose): every error reaches the terminal made visible.
            let message = format!("{err:#}");
            eprintln!(
                "lazaret: {}",
                lazaret_widgets::visible::visible_lines(&message)
            );
            ExitCode::FAILURE
        }
    }
}
