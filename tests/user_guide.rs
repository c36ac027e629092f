//! The user guide against the real command line (issue 17): every
//! `lazaret ...` command the guide shows, in its examples and in its text,
//! is accepted by the CLI definition the binary is built from (subcommands,
//! flags and their values), and every subcommand `lazaret --help` lists is
//! in the guide with a help of its own from the real binary. Nothing here
//! starts a sandbox: commands are parsed, not run.

mod common;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, Parser};
use lazaret::cli::Cli;

const GUIDE: &str = include_str!("../docs/user-guide.md");

/// Where a command came from in the guide, for the failure message.
#[derive(Debug)]
struct Example {
    line: usize,
    /// In a code block (a complete command) or in running text (it may
    /// leave out what the text says around it).
    complete: bool,
    text: String,
}

/// The part of `line` that is one `lazaret` command: from `lazaret` up to
/// a comment, pipe, redirection or the next command.
fn command_part(line: &str) -> Option<String> {
    let line = line.trim_start();
    let line = line.strip_prefix("$ ").unwrap_or(line);
    if !line.starts_with("lazaret ") && line != "lazaret" {
        return None;
    }
    let end = ["  #", " #", " | ", " > ", " && ", " ; "]
        .iter()
        .filter_map(|sep| line.find(sep))
        .min()
        .unwrap_or(line.len());
    Some(line[..end].trim_end().to_string())
}

/// Every command in the guide's code blocks and inline code spans.
fn examples() -> Vec<Example> {
    let mut out = Vec::new();
    let mut in_block = false;
    for (i, line) in GUIDE.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            if let Some(text) = command_part(line) {
                out.push(Example {
                    line: i + 1,
                    complete: true,
                    text,
                });
            }
            continue;
        }
    }
    // Inline spans may wrap across lines of the Markdown source.
    let prose: String = {
        let mut in_block = false;
        GUIDE
            .lines()
            .map(|l| {
                if l.trim_start().starts_with("```") {
                    in_block = !in_block;
                    return "\n".to_string();
                }
                if in_block {
                    "\n".to_string()
                } else {
                    format!("{l}\n")
                }
            })
            .collect()
    };
    for (n, span) in prose.split('`').enumerate() {
        if n % 2 == 1
            && let Some(text) = command_part(&span.replace('\n', " "))
        {
            let offset: usize = prose.split('`').take(n).map(|s| s.len() + 1).sum();
            out.push(Example {
                line: prose[..offset].matches('\n').count() + 1,
                complete: false,
                text,
            });
        }
    }
    out
}

/// The words of a command as the shell would pass them; `[--flag]` and
/// `[VALUE...]` (optional parts in running text) count as written.
fn words(text: &str) -> Vec<String> {
    shell_words::split(text)
        .unwrap_or_else(|e| panic!("`{text}` is not shell syntax: {e}"))
        .into_iter()
        .map(|w| {
            w.trim_start_matches('[')
                .trim_end_matches(']')
                .trim_end_matches("...")
                .to_string()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// Every command `text` stands for: a word `a|b|c` (alternatives, in
/// running text) gives one command per alternative.
fn variants(text: &str) -> Vec<Vec<String>> {
    let mut all = vec![Vec::new()];
    for w in words(text) {
        let alternatives: Vec<&str> = w.split('|').collect();
        all = all
            .into_iter()
            .flat_map(|argv: Vec<String>| {
                alternatives.iter().map(move |a| {
                    let mut argv = argv.clone();
                    argv.push(a.to_string());
                    argv
                })
            })
            .collect();
    }
    all
}

/// `LINES`, `PROFILE`: a value the text names rather than gives.
fn placeholder(value: &str) -> bool {
    value.len() > 1
        && value
            .chars()
            .all(|c| c.is_ascii_uppercase() || c == '_' || c == '-')
}

#[test]
fn every_command_in_the_guide_is_accepted_by_the_cli() {
    let examples = examples();
    assert!(
        examples.iter().filter(|e| e.complete).count() >= 20,
        "too few examples found: {examples:?}"
    );
    let mut wrong = Vec::new();
    for e in examples.iter() {
        for argv in variants(&e.text) {
            let Err(err) = Cli::try_parse_from(&argv) else {
                continue;
            };
            let fine = match err.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => true,
                // Running text may name a command without what it needs
                // ("`lazaret net allow|deny`"), or name a value ("-n LINES").
                ErrorKind::MissingRequiredArgument
                | ErrorKind::MissingSubcommand
                | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => !e.complete,
                ErrorKind::InvalidValue | ErrorKind::ValueValidation => {
                    !e.complete
                        && matches!(
                            err.get(ContextKind::InvalidValue),
                            Some(ContextValue::String(v)) if placeholder(v)
                        )
                }
                _ => false,
            };
            if !fine {
                wrong.push(format!(
                    "docs/user-guide.md:{}: `{}`: {}",
                    e.line,
                    argv.join(" "),
                    err.to_string().lines().next().unwrap_or("")
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "commands the CLI refuses:\n{}",
        wrong.join("\n")
    );
}

/// Every subcommand (and sub-subcommand) `lazaret --help` lists is in the
/// guide, and the real binary prints its help.
#[test]
fn every_subcommand_is_in_the_guide_and_has_help() {
    let cli = Cli::command();
    let examples = examples();
    let mut paths = Vec::new();
    for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
        paths.push(vec![sub.get_name().to_string()]);
        for inner in sub.get_subcommands().filter(|s| !s.is_hide_set()) {
            if inner.get_name() != "help" {
                paths.push(vec![
                    sub.get_name().to_string(),
                    inner.get_name().to_string(),
                ]);
            }
        }
    }
    let mut missing = Vec::new();
    for path in &paths {
        if path == &["help"] {
            continue;
        }
        let documented = examples.iter().flat_map(|e| variants(&e.text)).any(|w| {
            // After `lazaret` and its global flags.
            let rest: Vec<&String> = w
                .iter()
                .skip(1)
                .skip_while(|x| x.starts_with('-'))
                .collect();
            rest.len() >= path.len() && rest.iter().zip(path).all(|(a, b)| *a == b)
        });
        if !documented {
            missing.push(path.join(" "));
        }
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lazaret"))
            .args(&args)
            .env("LAZARET_USER_CONFIG", "")
            .output()
            .unwrap();
        let (stdout, stderr) = common::text(&out);
        assert!(
            out.status.success() && stdout.contains("Usage: lazaret"),
            "`lazaret {}`: {stdout}{stderr}",
            args.join(" ")
        );
    }
    assert!(
        missing.is_empty(),
        "subcommands of `lazaret --help` the user guide never shows: {missing:?}"
    );
}

#[test]
fn commands_are_found_in_blocks_and_text() {
    assert_eq!(
        command_part("$ lazaret net allow x --profile c   # now").as_deref(),
        Some("lazaret net allow x --profile c")
    );
    assert_eq!(
        command_part("`lazaret man | man -l -`".trim_matches('`')).as_deref(),
        Some("lazaret man")
    );
    assert_eq!(command_part("ok    runtime"), None);
    assert_eq!(
        words("lazaret domains list [--json]"),
        vec!["lazaret", "domains", "list", "--json"]
    );
    assert_eq!(
        variants("lazaret net allow|deny"),
        vec![
            vec!["lazaret", "net", "allow"],
            vec!["lazaret", "net", "deny"]
        ]
    );
}
