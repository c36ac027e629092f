//! The policy pipeline's first half (spec §5.2, §5.2.1; decisions.md D5):
//! character check, then shell-words parsing, then the auto-approve
//! argv-prefix match. [`classify`] returns a [`Decision`].
//!
//! # Characters that force a human
//!
//! A command containing any of these never auto-approves, and if a human
//! approves it, it runs through the host shell (`via_shell`), because the
//! agent wrote shell syntax and a human approved shell syntax:
//!
//! - spec §5.2.1: `;` `|` `&` `$` (so `$(`, `${`, `$VAR`, `$[`) `(` `)`
//!   `` ` `` `>` `<` newline, carriage return, backslash;
//! - globs and brace expansion `*` `?` `[` `]` `{` `}`: a shell would
//!   expand them against agent-written file names (a file named `-rf` or
//!   `--pre=cmd` becomes an option the prefix match never saw);
//! - `~` (expands to the *host* home), `#` (starts a comment, so what runs
//!   differs from what is shown), `!` (negation, history expansion);
//! - every control character (C0 including NUL, TAB and ESC, DEL, C1);
//! - hidden characters: bidi controls, zero-width and other format
//!   characters, non-ASCII spaces and separators, variation selectors, tag
//!   characters, private-use characters and noncharacters. They make the
//!   command a human reads differ from the one that runs.
//!
//! Quotes `'` and `"` do not force a human: resolving them is what the
//! shell-words parser is for, and every character that is special inside
//! double quotes (`$`, `` ` ``, `\`) is already in the list.
//!
//! # Matching
//!
//! The command is split with `shell_words` (POSIX quoting, no expansion);
//! for strings free of the characters above it agrees with `sh` (tested
//! differentially). An entry matches the request's **whole** argv,
//! element by element with whole-string equality (decisions.md D9): entry
//! `ls -la` approves `ls -la` and nothing else, not `ls -la src`, `ls
//! -laR` nor `ls -l -a`. A prefix match is written explicitly, with a
//! last word `*`: entry `ls -la *` approves `ls -la` followed by any
//! arguments. Even then, an argument after the entry's own words that
//! names a path outside the workspace sends the request to a human
//! ([`HumanReason::PathOutsideWorkspace`]): an absolute path, `..`, a URL,
//! a path inside an option (`--file=/x`, `-f/x`, `@/x`, `key=/x`,
//! `host:/x`), and, through the [`PathProbe`] the host passes, a relative
//! path that leads out through a symlink. The ban list of programs that
//! run code (in the configuration) is the second line, not the first.
//!
//! argv\[0\] must be a bare name: a request whose argv\[0\] contains `/`
//! never auto-approves, and one containing `=` is a shell assignment. The
//! entry's program is resolved once, on [`TRUSTED_PATH`], and the request
//! runs that file.

use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Where whitelisted programs are looked up; never the agent's PATH.
pub const TRUSTED_PATH: &[&str] = &["/usr/local/bin", "/usr/bin", "/bin"];

/// Why a character forces a human.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CharClass {
    /// Shell syntax (see the module documentation).
    Metacharacter,
    /// A control character.
    Control,
    /// A character that is invisible or changes how text is laid out.
    Hidden,
}

/// Shell syntax characters (the newline and carriage return of §5.2.1 are
/// here, not under control characters, to name them as the spec does).
pub fn is_shell_metacharacter(c: char) -> bool {
    matches!(
        c,
        ';' | '|'
            | '&'
            | '$'
            | '('
            | ')'
            | '`'
            | '>'
            | '<'
            | '\\'
            | '\n'
            | '\r'
            | '*'
            | '?'
            | '['
            | ']'
            | '{'
            | '}'
            | '~'
            | '#'
            | '!'
    )
}

/// Invisible or layout-changing characters: Unicode format characters
/// (Cf: bidi controls, zero-width characters, ...), other default-ignorable
/// code points, non-ASCII spaces and separators, private-use characters
/// and noncharacters.
pub fn is_hidden_character(c: char) -> bool {
    matches!(
        c,
        // Format characters (Cf).
        '\u{00AD}'
            | '\u{0600}'..='\u{0605}'
            | '\u{061C}'
            | '\u{06DD}'
            | '\u{070F}'
            | '\u{0890}'..='\u{0891}'
            | '\u{08E2}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{110BD}'
            | '\u{110CD}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E007F}'
            // Other default-ignorables: grapheme joiner, fillers,
            // Mongolian selectors, variation selectors.
            | '\u{034F}'
            | '\u{115F}'..='\u{1160}'
            | '\u{17B4}'..='\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FFA0}'
            | '\u{E0100}'..='\u{E01EF}'
            // Spaces and separators other than the ASCII space.
            | '\u{00A0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200A}'
            | '\u{2028}'..='\u{2029}'
            | '\u{202F}'
            | '\u{205F}'
            | '\u{3000}'
            // Private use: renders as anything.
            | '\u{E000}'..='\u{F8FF}'
            | '\u{F0000}'..='\u{10FFFF}'
            // Noncharacters.
            | '\u{FDD0}'..='\u{FDEF}'
    ) || (u32::from(c) & 0xFFFE) == 0xFFFE
}

/// The class of `c` if it forces a human.
pub fn forcing_class(c: char) -> Option<CharClass> {
    if is_shell_metacharacter(c) {
        Some(CharClass::Metacharacter)
    } else if c.is_control() {
        Some(CharClass::Control)
    } else if is_hidden_character(c) {
        Some(CharClass::Hidden)
    } else {
        None
    }
}

/// The first character of `s` that forces a human: byte offset, character
/// and class.
pub fn first_forcing(s: &str) -> Option<(usize, char, CharClass)> {
    s.char_indices()
        .find_map(|(i, c)| forcing_class(c).map(|k| (i, c, k)))
}

/// `s` contains a character that forces a human. The configuration
/// refuses `auto_approve` entries with this same test.
pub fn has_forcing_characters(s: &str) -> bool {
    first_forcing(s).is_some()
}

/// Splits a command into argv with POSIX quoting and no expansions.
pub fn split(command: &str) -> Result<Vec<String>, shell_words::ParseError> {
    shell_words::split(command)
}

/// Joins argv into a command line that [`split`] and `sh` both split back
/// into exactly `argv`, quoting only words that need it (so `--color=auto`
/// stays readable for the human). Used for the client's `-- CMD ARGS` form.
pub fn join<S: AsRef<str>>(argv: &[S]) -> String {
    let mut out = String::new();
    for (i, arg) in argv.iter().enumerate() {
        let arg = arg.as_ref();
        if i > 0 {
            out.push(' ');
        }
        let assignment = i == 0 && arg.contains('=');
        let plain = !arg.is_empty()
            && !assignment
            && arg
                .chars()
                .all(|c| forcing_class(c).is_none() && !matches!(c, ' ' | '\'' | '"'));
        if plain {
            out.push_str(arg);
        } else {
            out.push('\'');
            out.push_str(&arg.replace('\'', "'\\''"));
            out.push('\'');
        }
    }
    out
}

/// Finds `name` (a bare name) on [`TRUSTED_PATH`].
pub fn resolve_program(name: &str) -> Option<PathBuf> {
    let dirs: Vec<&Path> = TRUSTED_PATH.iter().map(Path::new).collect();
    resolve_program_in(name, &dirs)
}

/// Finds `name` in `dirs`: the first regular, executable file that neither
/// group nor others may write.
pub fn resolve_program_in(name: &str, dirs: &[&Path]) -> Option<PathBuf> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return None;
    }
    dirs.iter().map(|d| d.join(name)).find(|p| {
        std::fs::metadata(p).is_ok_and(|m| {
            let mode = m.permissions().mode();
            m.is_file() && mode & 0o111 != 0 && mode & 0o022 == 0
        })
    })
}

/// Why a whitelist entry was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("entry {index} is empty")]
    Empty { index: usize },
    #[error(
        "entry {index} contains {ch:?}, which forces a human (only a last word `*` is allowed: it marks a prefix entry)"
    )]
    ForcingCharacter { index: usize, ch: char },
    #[error("entry {index}: `{program}` is not a bare program name")]
    NotBare { index: usize, program: String },
    #[error("entry {index}: `{program}` is not on the trusted PATH ({})", TRUSTED_PATH.join(":"))]
    NotFound { index: usize, program: String },
}

/// The word that, last in an entry, makes it a prefix entry.
pub const PREFIX_MARK: &str = "*";

#[derive(Debug, Clone)]
struct Rule {
    /// The entry's words, without a trailing [`PREFIX_MARK`].
    argv: Vec<String>,
    /// More arguments may follow `argv`.
    prefix: bool,
    /// The command may use TCP (the entry opted in).
    network: bool,
    program: PathBuf,
}

/// What an entry matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Matched<'a> {
    pub program: &'a Path,
    /// How many leading words the entry fixed; the rest came from the agent.
    pub fixed: usize,
    pub network: bool,
}

/// The auto-approve whitelist, each entry's program resolved once.
#[derive(Debug, Clone, Default)]
pub struct AutoApproveRules {
    rules: Vec<Rule>,
}

impl AutoApproveRules {
    /// Builds the list from argv entries (the configuration's
    /// `auto_approve`, already split; a last word [`PREFIX_MARK`] makes a
    /// prefix entry). Entries that fail the rules are left out and
    /// returned, so the caller decides whether that is fatal.
    pub fn new<I, A, S>(entries: I) -> (Self, Vec<RuleError>)
    where
        I: IntoIterator<Item = A>,
        A: AsRef<[S]>,
        S: AsRef<str>,
    {
        let dirs: Vec<&Path> = TRUSTED_PATH.iter().map(Path::new).collect();
        Self::with_path(entries, &dirs)
    }

    /// [`new`](Self::new) with another trusted PATH (tests).
    pub fn with_path<I, A, S>(entries: I, dirs: &[&Path]) -> (Self, Vec<RuleError>)
    where
        I: IntoIterator<Item = A>,
        A: AsRef<[S]>,
        S: AsRef<str>,
    {
        let mut rules = Vec::new();
        let mut errors = Vec::new();
        for (index, entry) in entries.into_iter().enumerate() {
            let mut argv: Vec<String> = entry
                .as_ref()
                .iter()
                .map(|s| s.as_ref().to_string())
                .collect();
            let prefix = argv.len() > 1 && argv.last().is_some_and(|w| w == PREFIX_MARK);
            if prefix {
                argv.pop();
            }
            match check_rule(index, &argv, dirs) {
                Ok(program) => rules.push(Rule {
                    argv,
                    prefix,
                    network: false,
                    program,
                }),
                Err(e) => errors.push(e),
            }
        }
        (AutoApproveRules { rules }, errors)
    }

    /// Lets the entries among `entries` (argv as given to [`new`](Self::new),
    /// with their [`PREFIX_MARK`]) use TCP.
    pub fn with_network(mut self, entries: &[Vec<String>]) -> Self {
        for r in &mut self.rules {
            let mut words = r.argv.clone();
            if r.prefix {
                words.push(PREFIX_MARK.to_string());
            }
            r.network = entries.contains(&words);
        }
        self
    }

    /// The entry matching `argv`: one that is the whole argv first, else
    /// the first prefix entry whose words lead it.
    pub fn matching(&self, argv: &[String]) -> Option<Matched<'_>> {
        self.rules
            .iter()
            .find(|r| r.argv[..] == argv[..])
            .or_else(|| {
                self.rules.iter().find(|r| {
                    r.prefix && argv.len() > r.argv.len() && r.argv[..] == argv[..r.argv.len()]
                })
            })
            .map(|r| Matched {
                program: &r.program,
                fixed: r.argv.len(),
                network: r.network,
            })
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

fn check_rule(index: usize, argv: &[String], dirs: &[&Path]) -> Result<PathBuf, RuleError> {
    let program = argv.first().ok_or(RuleError::Empty { index })?;
    if let Some((_, ch, _)) = argv.iter().find_map(|a| first_forcing(a)) {
        return Err(RuleError::ForcingCharacter { index, ch });
    }
    if program.is_empty() || program.contains('/') || program.contains('=') {
        return Err(RuleError::NotBare {
            index,
            program: program.clone(),
        });
    }
    resolve_program_in(program, dirs).ok_or_else(|| RuleError::NotFound {
        index,
        program: program.clone(),
    })
}

/// Why a request needs a human.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HumanReason {
    /// Nothing to run.
    Empty,
    /// A character that forces a human; `offset` is its byte offset.
    Character {
        ch: char,
        offset: usize,
        class: CharClass,
    },
    /// Unbalanced quotes.
    Unparseable,
    /// argv\[0\] is a shell variable assignment (`NAME=value`).
    AssignmentAsProgram,
    /// argv\[0\] is a path, not a bare name.
    ProgramHasPath,
    /// No whitelist entry matches the request.
    NotWhitelisted,
    /// A prefix entry matched, but argument `arg` (counting argv\[0\] as 0)
    /// names a path outside the workspace.
    PathOutsideWorkspace { arg: usize, why: OutsideWhy },
}

/// How an argument names a path outside the workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutsideWhy {
    /// It is or contains an absolute path.
    Absolute,
    /// It climbs with `..`.
    DotDot,
    /// It is or contains a URL (`file:///x`, `https://...`).
    Url,
    /// It starts with `~` (the host's home).
    Home,
    /// It leads out of the workspace through a symlink.
    Symlink,
}

impl fmt::Display for HumanReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HumanReason::Empty => f.write_str("the command is empty"),
            HumanReason::Character { ch, offset, class } => {
                let what = match class {
                    CharClass::Metacharacter => "a shell metacharacter",
                    CharClass::Control => "a control character",
                    CharClass::Hidden => "an invisible or layout-changing character",
                };
                // A printable metacharacter reads best as itself; anything
                // else only as its code point (it may be invisible or move
                // the text around it).
                if ch.is_ascii_graphic() {
                    write!(
                        f,
                        "contains {what} `{ch}` (U+{:04X}) at byte {offset}",
                        u32::from(*ch)
                    )
                } else {
                    write!(
                        f,
                        "contains {what} (U+{:04X}) at byte {offset}",
                        u32::from(*ch)
                    )
                }
            }
            HumanReason::Unparseable => f.write_str("has unbalanced quotes"),
            HumanReason::AssignmentAsProgram => f.write_str("starts with a variable assignment"),
            HumanReason::ProgramHasPath => {
                f.write_str("names its program by path, not by bare name")
            }
            HumanReason::NotWhitelisted => f.write_str("matches no auto-approve entry"),
            HumanReason::PathOutsideWorkspace { arg, why } => {
                let what = match why {
                    OutsideWhy::Absolute => "an absolute path",
                    OutsideWhy::DotDot => "`..`",
                    OutsideWhy::Url => "a URL",
                    OutsideWhy::Home => "`~`",
                    OutsideWhy::Symlink => "a symlink that leads out of the workspace",
                };
                write!(
                    f,
                    "has argument {arg} naming a path outside the workspace ({what}); auto-approved commands only touch the workspace"
                )
            }
        }
    }
}

/// What to do with a request's command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run `program_path` with `argv` (argv\[0\] stays the bare name)
    /// directly with execve, no shell, no human.
    AutoApprove {
        argv: Vec<String>,
        program_path: PathBuf,
    },
    /// Ask the human. If approved: when `via_shell`, run the command text
    /// with the host shell; otherwise run `argv` with execve (resolving a
    /// bare argv\[0\] with [`resolve_program`]). `argv` is set exactly when
    /// `via_shell` is false.
    NeedsHuman {
        reason: HumanReason,
        via_shell: bool,
        argv: Option<Vec<String>>,
    },
}

/// Tells whether a relative path (as the command would see it from its
/// working directory) leads out of the workspace through a symlink. The
/// host implements it against the pinned working directory.
pub trait PathProbe {
    fn leads_out(&self, relative: &str) -> bool;
}

/// A probe for callers without a filesystem view: nothing leads out by
/// symlink (the lexical checks still apply).
#[derive(Debug, Clone, Copy, Default)]
pub struct Lexical;

impl PathProbe for Lexical {
    fn leads_out(&self, _: &str) -> bool {
        false
    }
}

/// The strings inside `arg` that a program may take as a path: the whole
/// argument, an option's value (`--file=X`, `-fX`, `-abcX`), and whatever
/// follows `=`, `:`, `@` or `,` (`key=X`, `host:X`, `@X`, `a,X`).
pub fn path_candidates(arg: &str) -> Vec<&str> {
    let mut out = vec![arg];
    // Short options may carry their value glued on, after any cluster of
    // flags: every suffix is a candidate.
    if let Some(rest) = arg.strip_prefix('-').filter(|r| !r.starts_with('-')) {
        out.extend(rest.char_indices().skip(1).map(|(i, _)| &rest[i..]));
    }
    out.extend(
        arg.char_indices()
            .filter(|(_, c)| matches!(c, '=' | ':' | '@' | ','))
            .map(|(i, c)| &arg[i + c.len_utf8()..]),
    );
    out.retain(|c| !c.is_empty());
    out
}

/// Why `arg` names a path outside the workspace, if it does.
pub fn outside_workspace(arg: &str, probe: &dyn PathProbe) -> Option<OutsideWhy> {
    let lower = arg.to_ascii_lowercase();
    if lower.contains("://") || lower.starts_with("file:") || lower.contains("=file:") {
        return Some(OutsideWhy::Url);
    }
    let candidates = path_candidates(arg);
    if candidates.iter().any(|c| c.starts_with('/')) {
        return Some(OutsideWhy::Absolute);
    }
    if candidates.iter().any(|c| c.starts_with('~')) {
        return Some(OutsideWhy::Home);
    }
    if candidates
        .iter()
        .any(|c| c.split('/').any(|part| part == ".."))
    {
        return Some(OutsideWhy::DotDot);
    }
    if candidates.iter().any(|c| probe.leads_out(c)) {
        return Some(OutsideWhy::Symlink);
    }
    None
}

/// Classifies a command (also an edited one: re-classify after every edit)
/// with the lexical path checks only (see [`classify_with`]).
pub fn classify(command: &str, rules: &AutoApproveRules) -> Decision {
    classify_with(command, rules, &Lexical)
}

/// Classifies a command; `probe` finds arguments that lead out of the
/// workspace through symlinks.
pub fn classify_with(command: &str, rules: &AutoApproveRules, probe: &dyn PathProbe) -> Decision {
    let human = |reason, argv: Option<Vec<String>>| Decision::NeedsHuman {
        reason,
        via_shell: argv.is_none(),
        argv,
    };
    if let Some((offset, ch, class)) = first_forcing(command) {
        return human(HumanReason::Character { ch, offset, class }, None);
    }
    let Ok(argv) = split(command) else {
        return human(HumanReason::Unparseable, None);
    };
    let Some(program) = argv.first() else {
        return Decision::NeedsHuman {
            reason: HumanReason::Empty,
            via_shell: false,
            argv: Some(argv),
        };
    };
    if program.contains('=') {
        return human(HumanReason::AssignmentAsProgram, None);
    }
    if program.contains('/') {
        return human(HumanReason::ProgramHasPath, Some(argv));
    }
    let Some(m) = rules.matching(&argv) else {
        return human(HumanReason::NotWhitelisted, Some(argv));
    };
    // The words the user wrote are trusted; the agent's are checked.
    if let Some((arg, why)) = argv
        .iter()
        .enumerate()
        .skip(m.fixed)
        .find_map(|(i, a)| outside_workspace(a, probe).map(|w| (i, w)))
    {
        return human(HumanReason::PathOutsideWorkspace { arg, why }, Some(argv));
    }
    Decision::AutoApprove {
        program_path: m.program.to_path_buf(),
        argv,
    }
}

/// Programs that may never be auto-approved (decisions.md D5, spec §5.2.1),
/// by group, each group with why. A whitelist entry approves every request
/// that starts with it, whatever follows, so a program that can run another
/// program, load code, or leave the confinement through some option is as
/// good as a shell. Names are compared exactly (argv\[0\] must be a bare
/// name; paths are refused before this list is consulted).
pub const BANNED_AUTO_APPROVE: &[(&str, &[&str])] = &[
    (
        "git and its helpers run aliases, hooks and config-named programs",
        &[
            "git",
            "git-shell",
            "git-upload-pack",
            "git-receive-pack",
            "git-upload-archive",
            "gitk",
            "gh",
            "tig",
        ],
    ),
    (
        "shells, multi-call binaries and terminal multiplexers run any command",
        &[
            "sh", "bash", "dash", "zsh", "fish", "ksh", "mksh", "csh", "tcsh", "ash", "yash",
            "rbash", "elvish", "nu", "xonsh", "pwsh", "busybox", "toybox", "tmux", "screen",
            "script",
        ],
    ),
    (
        "shell builtins that run their arguments (some systems ship them as files)",
        &["eval", "exec", "source", "command"],
    ),
    (
        "interpreters and REPLs run any code",
        &[
            "python", "python2", "python3", "pypy", "pypy3", "ipython", "perl", "ruby", "irb",
            "node", "nodejs", "deno", "bun", "tsx", "ts-node", "php", "lua", "luajit", "tclsh",
            "wish", "expect", "R", "Rscript", "julia", "java", "jshell", "guile", "racket", "sbcl",
            "ghci", "runghc", "ocaml", "erl", "escript", "elixir", "iex", "gnuplot",
        ],
    ),
    (
        "database shells have shell escapes (`.shell`, `\\!`)",
        &["sqlite3", "psql", "mysql", "mariadb"],
    ),
    (
        "text tools with a command feature: awk system(), GNU sed `e`, dc `!`, \
         sort --compress-program, split --filter, diff3/sdiff --diff-program",
        &[
            "awk", "gawk", "mawk", "nawk", "sed", "gsed", "dc", "sort", "split", "diff3", "sdiff",
        ],
    ),
    (
        "search and walk tools run programs on what they find: find -exec, xargs, \
         rg --pre, fd --exec, ack --pager, fzf --preview, parallel, entr, watchexec",
        &[
            "find",
            "xargs",
            "rg",
            "fd",
            "fdfind",
            "ack",
            "fzf",
            "parallel",
            "entr",
            "watchexec",
            "run-parts",
        ],
    ),
    (
        "wrappers that run the program named in their arguments",
        &[
            "env",
            "time",
            "timeout",
            "nice",
            "ionice",
            "taskset",
            "chrt",
            "nohup",
            "setsid",
            "stdbuf",
            "flock",
            "prlimit",
            "setarch",
            "linux32",
            "linux64",
            "numactl",
            "unbuffer",
            "rlwrap",
            "watch",
            "chronic",
            "ifne",
            "pee",
            "sshpass",
            "dbus-run-session",
            "xvfb-run",
            "ssh-agent",
            "openvt",
        ],
    ),
    (
        "they change identity or confinement (privileges, namespaces, root, sandbox)",
        &[
            "sudo",
            "sudoedit",
            "su",
            "doas",
            "pkexec",
            "run0",
            "runuser",
            "sg",
            "newgrp",
            "setpriv",
            "capsh",
            "chroot",
            "unshare",
            "nsenter",
            "firejail",
            "bwrap",
            "proot",
            "fakeroot",
            "fakechroot",
            "runcon",
            "systemd-nspawn",
            "machinectl",
        ],
    ),
    (
        "services and schedulers run commands later, outside the time limit",
        &["systemd-run", "systemctl", "at", "batch", "crontab"],
    ),
    (
        "container engines run anything, with host mounts",
        &[
            "docker",
            "podman",
            "buildah",
            "nerdctl",
            "kubectl",
            "runc",
            "crun",
            "runsc",
            "toolbox",
            "distrobox",
            "flatpak",
        ],
    ),
    (
        "Lazaret itself: a sandbox must not drive its own supervisor",
        &["lazaret"],
    ),
    (
        "remote shells and network tools that run commands: ssh, scp/sftp/rsync -e, \
         nc -e, socat EXEC, wget --use-askpass, tcpdump -z, nmap --script",
        &[
            "ssh", "scp", "sftp", "rsync", "mosh", "nc", "ncat", "netcat", "socat", "wget",
            "tcpdump", "nmap",
        ],
    ),
    (
        "build tools, compilers and test runners run workspace build scripts and plugins",
        &[
            "make",
            "gmake",
            "cmake",
            "ninja",
            "meson",
            "scons",
            "bazel",
            "bazelisk",
            "just",
            "gradle",
            "gradlew",
            "mvn",
            "ant",
            "sbt",
            "rake",
            "pytest",
            "tox",
            "nox",
            "pre-commit",
            "dotnet",
            "rustc",
            "cc",
            "gcc",
            "g++",
            "c++",
            "clang",
            "clang++",
        ],
    ),
    (
        "package and toolchain managers run install scripts and workspace-named tools",
        &[
            "npm",
            "npx",
            "pnpm",
            "yarn",
            "corepack",
            "bunx",
            "pip",
            "pip3",
            "pipx",
            "uv",
            "uvx",
            "poetry",
            "pdm",
            "hatch",
            "conda",
            "mamba",
            "gem",
            "bundle",
            "bundler",
            "composer",
            "cpan",
            "cpanm",
            "cargo",
            "rustup",
            "go",
            "apt",
            "apt-get",
            "dpkg",
            "rpm",
            "dnf",
            "yum",
            "pacman",
            "apk",
            "brew",
            "nix",
            "nix-shell",
            "direnv",
            "mise",
            "asdf",
        ],
    ),
    (
        "editors, pagers and mail/ftp clients have shell escapes",
        &[
            "vim",
            "vi",
            "nvim",
            "gvim",
            "ex",
            "view",
            "vimdiff",
            "rvim",
            "rview",
            "nano",
            "ed",
            "emacs",
            "emacsclient",
            "less",
            "more",
            "most",
            "pg",
            "man",
            "pager",
            "editor",
            "sensible-editor",
            "sensible-pager",
            "mail",
            "mailx",
            "ftp",
        ],
    ),
    (
        "archivers with program options: tar --to-command/--checkpoint-action/-I, \
         zip -TT, cpio --rsh-command",
        &["tar", "zip", "cpio"],
    ),
    (
        "debuggers, tracers and loaders start or load the program or library they are given \
         (ldd may run it, ssh-keygen -D and openssl -engine load a library)",
        &[
            "strace",
            "ltrace",
            "gdb",
            "lldb",
            "valgrind",
            "perf",
            "rr",
            "ldd",
            "ssh-keygen",
            "openssl",
        ],
    ),
    (
        "openers run whatever handler a file names (.desktop files run commands)",
        &["xdg-open", "gio", "open"],
    ),
];

/// Why `program` may never be auto-approved, if it is on
/// [`BANNED_AUTO_APPROVE`].
pub fn banned_auto_approve_reason(program: &str) -> Option<&'static str> {
    // Versioned names are the same program: python3.12, perl5.36, gcc-12.
    let unversioned =
        program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.' || c == '-');
    BANNED_AUTO_APPROVE
        .iter()
        .find(|(_, names)| names.contains(&program) || names.contains(&unversioned))
        .map(|(reason, _)| *reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banned_list_keeps_earlier_entries_and_is_well_formed() {
        // Everything banned before the list was grouped is still banned.
        for name in [
            "git", "sh", "bash", "dash", "zsh", "fish", "ksh", "csh", "tcsh", "busybox", "python",
            "python3", "perl", "ruby", "node", "nodejs", "deno", "bun", "php", "lua", "tclsh",
            "env", "xargs", "find", "sudo", "su", "doas", "pkexec", "ssh", "scp", "rsync", "make",
            "cmake", "ninja", "npm", "npx", "pnpm", "yarn", "cargo", "rustc", "go", "pip", "pip3",
            "pipx", "uv", "poetry", "gradle", "gradlew", "mvn", "bundle", "rake", "gem", "docker",
            "podman", "kubectl", "timeout", "nice", "nohup", "setsid", "stdbuf", "strace", "gdb",
            "watch", "awk", "gawk", "sed", "vim", "vi", "nvim", "emacs", "less", "more", "man",
            "tar", "eval", "exec", "source", "lazaret",
        ] {
            assert!(banned_auto_approve_reason(name).is_some(), "{name}");
        }
        let mut seen = std::collections::BTreeSet::new();
        for (reason, names) in BANNED_AUTO_APPROVE {
            assert!(!reason.is_empty() && !names.is_empty());
            for name in *names {
                assert!(seen.insert(*name), "{name} is listed twice");
                assert!(!name.contains('/') && !name.contains(char::is_whitespace));
            }
        }
    }

    #[test]
    fn reasons_show_printable_metacharacters_and_only_code_points_of_the_rest() {
        let amp = HumanReason::Character {
            ch: '&',
            offset: 7,
            class: CharClass::Metacharacter,
        };
        assert_eq!(
            amp.to_string(),
            "contains a shell metacharacter `&` (U+0026) at byte 7"
        );
        let rlo = HumanReason::Character {
            ch: '\u{202E}',
            offset: 2,
            class: CharClass::Hidden,
        };
        let text = rlo.to_string();
        assert!(
            text.contains("(U+202E)") && !text.contains('\u{202E}'),
            "{text}"
        );
    }

    #[test]
    fn join_quotes_only_what_needs_it() {
        assert_eq!(
            join(&["ls", "--color=auto", "a b", ""]),
            "ls --color=auto 'a b' ''"
        );
        assert_eq!(join(&["A=1", "x"]), "'A=1' x");
        assert_eq!(join(&["echo", "it's"]), r"echo 'it'\''s'");
    }

    #[test]
    fn noncharacters_are_hidden() {
        assert!(is_hidden_character('\u{FFFE}'));
        assert!(is_hidden_character('\u{1FFFF}'));
        assert!(!is_hidden_character('é'));
        assert!(!is_hidden_character('\u{FFFD}'));
    }
}
