//! What an approved host command would read of the agent's (issue 39):
//! `make`, `npm test`, `cargo test`, `pytest` run in the agent's folder and
//! execute files the agent can write. The approval names each such file
//! the agent changed since its branch point, so the human knows that
//! approving runs the agent's code.
//!
//! Like the review, nothing here runs git in a tree the agent wrote: the
//! agent's commits are read as objects from the host repository (its
//! branch is synced there), and its uncommitted files are read without
//! following a link, bounded, and compared with the branch's blobs.

use std::io::Read;
use std::path::Path;

use super::{WorkspaceLayout, host_git, nofollow, run};

/// Programs that execute or obey workspace files, and those files: a
/// name alone matches that name in any folder, a name with `/` matches
/// that path, `*.ext` any file with that extension.
const PROGRAM_FILES: &[(&[&str], &[&str])] = &[
    (
        &["make", "gmake", "remake", "bmake"],
        &["Makefile", "makefile", "GNUmakefile", "*.mk"],
    ),
    (
        &["npm", "npx", "yarn", "pnpm", "node", "bun", "corepack"],
        &[
            "package.json",
            ".npmrc",
            ".yarnrc",
            ".yarnrc.yml",
            ".pnpmfile.cjs",
        ],
    ),
    (
        &["cargo", "rustc", "rustup"],
        &[
            "build.rs",
            "Cargo.toml",
            ".cargo/config.toml",
            ".cargo/config",
            "rust-toolchain",
            "rust-toolchain.toml",
        ],
    ),
    (
        &[
            "pytest", "py.test", "python", "python3", "tox", "nox", "pip", "pip3", "uv", "poetry",
        ],
        &[
            "conftest.py",
            "pytest.ini",
            "pyproject.toml",
            "setup.py",
            "setup.cfg",
            "tox.ini",
            "noxfile.py",
        ],
    ),
    (&["go"], &["go.mod", "*.go"]),
    (
        &["gradle", "gradlew"],
        &[
            "build.gradle",
            "build.gradle.kts",
            "settings.gradle",
            "settings.gradle.kts",
            "gradlew",
        ],
    ),
    (&["mvn"], &["pom.xml"]),
    (&["just"], &["justfile", "Justfile"]),
    (&["task"], &["Taskfile.yml"]),
    (&["rake", "bundle"], &["Rakefile", "Gemfile"]),
    (
        &["cmake", "meson", "ninja"],
        &["CMakeLists.txt", "meson.build"],
    ),
    (&["git"], &[".gitattributes", ".gitmodules", ".githooks/*"]),
    (&["pre-commit"], &[".pre-commit-config.yaml"]),
    (&["direnv"], &[".envrc"]),
    (
        &["docker", "podman", "docker-compose"],
        &[
            "Dockerfile",
            "docker-compose.yml",
            "compose.yaml",
            "compose.yml",
        ],
    ),
];

/// At most this many files are named; the rest are counted.
const MAX_NAMED: usize = 8;
/// A file the agent did not commit is compared up to this size; a larger
/// one is named as changed.
const COMPARE_BYTES: u64 = 1 << 20;

/// The patterns of the files `program` (a bare name or a path) executes.
fn patterns(program: &str) -> &'static [&'static str] {
    let name = program.rsplit('/').next().unwrap_or(program);
    PROGRAM_FILES
        .iter()
        .find(|(programs, _)| programs.contains(&name))
        .map_or(&[], |(_, files)| files)
}

fn matches(pattern: &str, path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    if let Some(dir) = pattern.strip_suffix("/*") {
        return path.starts_with(&format!("{dir}/"));
    }
    if let Some(ext) = pattern.strip_prefix('*') {
        return name.ends_with(ext);
    }
    if pattern.contains('/') {
        return path == pattern;
    }
    name == pattern
}

/// The words of `command` that name programs: argv\[0\], and for a shell
/// command every word after a separator (a best effort: the human reads
/// the command itself too).
fn programs(argv: Option<&[String]>, command: &str) -> Vec<String> {
    if let Some(argv) = argv {
        return argv.first().cloned().into_iter().collect();
    }
    let spaced: String = command
        .chars()
        .map(|c| if ";&|()`$\n".contains(c) { ' ' } else { c })
        .collect();
    shell_words::split(&spaced)
        .unwrap_or_default()
        .into_iter()
        .filter(|w| !w.contains('='))
        .collect()
}

/// What running `command` (split as `argv`, or through the shell) in the
/// agent's workspace would execute of the agent's: one line per file the
/// agent changed, e.g. `Makefile, changed in ec45301`.
pub fn agent_code_read(
    layout: &WorkspaceLayout,
    argv: Option<&[String]>,
    command: &str,
) -> Vec<String> {
    let mut reads = Vec::new();
    let programs = programs(argv, command);
    // A program given as a path inside the workspace is the agent's file.
    if let Some(first) = programs.first()
        && first.contains('/')
        && !first.starts_with('/')
    {
        reads.push(format!("{first}: a program of the workspace itself"));
    }
    let patterns: Vec<&str> = programs.iter().flat_map(|p| patterns(p)).copied().collect();
    if patterns.is_empty() {
        return reads;
    }
    let wanted = |path: &str| patterns.iter().any(|p| matches(p, path));
    if layout.host_dotgit.is_some() {
        committed(layout, &wanted, &mut reads);
        uncommitted(layout, &patterns, &mut reads);
    }
    if reads.len() > MAX_NAMED {
        let more = reads.len() - MAX_NAMED;
        reads.truncate(MAX_NAMED);
        reads.push(format!("and {more} more (lazaret review lists them)"));
    }
    reads
}

/// At most this many lines of the review go with a prompt.
const MAX_REVIEW_LINES: usize = 40;

/// `lazaret review`'s findings as lines (each escapes the agent's names
/// itself), bounded, for the approval to show with one key.
pub fn review_lines(layout: &WorkspaceLayout) -> Vec<String> {
    let r = match super::review::review(layout) {
        Ok(r) => r,
        Err(e) => return vec![format!("the review failed: {e}")],
    };
    let mut lines = vec![format!("{} changed path(s)", r.changed.len())];
    lines.extend(r.findings.iter().map(|f| format!("! {f}")));
    if r.findings.is_empty() {
        lines.push("nothing that host tools would execute, and no filesystem traps".into());
    }
    if lines.len() > MAX_REVIEW_LINES {
        let more = lines.len() - MAX_REVIEW_LINES;
        lines.truncate(MAX_REVIEW_LINES);
        lines.push(format!(
            "and {more} more: run `lazaret review` in the workspace"
        ));
    }
    lines
}

/// Files the agent's branch changed since it forked from the host's HEAD.
fn committed(layout: &WorkspaceLayout, wanted: &dyn Fn(&str) -> bool, reads: &mut Vec<String>) {
    let Ok(Some((base, changed))) = super::review::branch_changes(layout) else {
        return;
    };
    let branch = format!("refs/heads/{}", layout.branch);
    for path in changed.iter().filter(|p| wanted(p)) {
        let mut c = host_git(&layout.host);
        c.args([
            "log",
            "-1",
            "--format=%h",
            &format!("{base}..{branch}"),
            "--",
            path,
        ]);
        let commit = run(c).map(|s| s.trim().to_string()).unwrap_or_default();
        reads.push(match commit.is_empty() {
            true => format!("{path}, changed on the agent's branch"),
            false => format!("{path}, changed in {commit}"),
        });
    }
}

/// Files at the workspace's top the agent changed and did not commit:
/// compared with the branch's own, read without following links.
fn uncommitted(layout: &WorkspaceLayout, patterns: &[&str], reads: &mut Vec<String>) {
    let branch = format!("refs/heads/{}", layout.branch);
    for name in patterns.iter().filter(|p| !p.contains('*')) {
        let rel = Path::new(name);
        let Ok(Some(file)) = nofollow::open_file(&layout.workspace_source, rel) else {
            continue;
        };
        let mut now = Vec::new();
        if file.take(COMPARE_BYTES + 1).read_to_end(&mut now).is_err() {
            continue;
        }
        let mut c = host_git(&layout.host);
        c.args(["cat-file", "blob", &format!("{branch}:{name}")]);
        let committed = c.output().ok().filter(|o| o.status.success());
        let same = committed.is_some_and(|o| o.stdout == now);
        if same || reads.iter().any(|r| r.starts_with(&format!("{name},"))) {
            continue;
        }
        reads.push(format!("{name}, changed and not committed"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_map_to_the_files_they_run() {
        assert!(patterns("make").contains(&"Makefile"));
        assert!(patterns("/usr/bin/make").contains(&"Makefile"));
        assert!(patterns("date").is_empty());
        assert!(matches("build.rs", "crates/x/build.rs"));
        assert!(matches("*.mk", "rules/common.mk"));
        assert!(matches(".cargo/config.toml", ".cargo/config.toml"));
        assert!(!matches(".cargo/config.toml", "x/.cargo/config.toml"));
        assert!(matches(".githooks/*", ".githooks/pre-commit"));
        assert!(!matches("Makefile", "Makefile.orig"));
    }

    #[test]
    fn shell_commands_name_every_program() {
        let p = programs(None, "cd sub && make -n; FOO=1 npm test | tee out");
        assert!(p.contains(&"make".to_string()), "{p:?}");
        assert!(p.contains(&"npm".to_string()), "{p:?}");
        let argv = vec!["./gradlew".to_string(), "test".into()];
        assert_eq!(programs(Some(&argv), "./gradlew test"), vec!["./gradlew"]);
    }
}
