//! `lazaret doctor`: is this host ready to run rootless podman with gVisor?
//!
//! Each check says what it saw and, when something is wrong, the exact fix.
//! Nothing here changes the host except `podman info`, which initialises the
//! user's container storage the way any first podman call would.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use wait_timeout::ChildExt;

use crate::host::HostEnv;
use crate::install::{ESCALATE_BINARY, SIDECAR_BINARY, dynamic_helpers, find_helper, which};
use crate::rundir::RuntimeDir;

/// The oldest runsc build known to work here (decisions.md, environment notes).
pub const MIN_RUNSC_DATE: u32 = 20_240_729;
const SETUP: &str = "sudo scripts/setup   (from the Lazaret source tree)";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Pass(String),
    /// Works, but not as intended; does not fail the run.
    Warn {
        problem: String,
        fix: String,
    },
    Fail {
        problem: String,
        fix: String,
    },
}

#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    /// A failing required check makes `doctor` exit non-zero.
    pub required: bool,
    pub outcome: Outcome,
}

impl Check {
    fn new(name: &'static str, required: bool, outcome: Outcome) -> Self {
        Check {
            name,
            required,
            outcome,
        }
    }

    pub fn failed(&self) -> bool {
        matches!(self.outcome, Outcome::Fail { .. })
    }

    pub fn passed(&self) -> bool {
        matches!(self.outcome, Outcome::Pass(_))
    }
}

fn fail(problem: impl Into<String>, fix: impl Into<String>) -> Outcome {
    Outcome::Fail {
        problem: problem.into(),
        fix: fix.into(),
    }
}

/// What a program printed, kept apart: a query's answer is read from the
/// stream it is printed on only, so a warning on stderr (podman's
/// `"/" is not a shared mount`, say) is never taken for the answer.
struct Captured {
    stdout: String,
    stderr: String,
}

/// Runs a command with a deadline. Both pipes are drained on threads so a
/// chatty program cannot block on a full pipe while it is waited for.
fn run_captured(program: &Path, args: &[&str], limit: Duration) -> Result<Captured, String> {
    use std::io::Read;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("piped")));
    let err = drain(Box::new(child.stderr.take().expect("piped")));
    let status = match child.wait_timeout(limit) {
        Ok(Some(status)) => status,
        Ok(None) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "`{} {}` did not finish within {}s",
                program.display(),
                args.join(" "),
                limit.as_secs()
            ));
        }
        Err(e) => return Err(e.to_string()),
    };
    let captured = Captured {
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    };
    if status.success() {
        Ok(captured)
    } else {
        Err(format!(
            "`{} {}` failed ({status}): {}",
            program.display(),
            args.join(" "),
            captured.stderr.trim().lines().last().unwrap_or("")
        ))
    }
}

/// A query's answer: its stdout only.
fn output(program: &Path, args: &[&str], limit: Duration) -> Result<String, String> {
    run_captured(program, args, limit).map(|c| c.stdout)
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_string()
}

/// A program that must be on PATH and answer `--version`.
fn program(name: &'static str, package: &str, required: bool) -> Check {
    let outcome = match which(name) {
        None => fail(
            format!("`{name}` is not on PATH"),
            format!("{SETUP}, or: sudo apt-get install {package}"),
        ),
        Some(path) => match output(&path, &["--version"], Duration::from_secs(20)) {
            Ok(v) => Outcome::Pass(first_line(&v)),
            Err(e) => fail(
                e,
                format!("reinstall it: sudo apt-get install --reinstall {package}"),
            ),
        },
    };
    Check::new(name, required, outcome)
}

/// Pulls the build date (YYYYMMDD) out of `runsc --version`.
pub fn runsc_build_date(version: &str) -> Option<u32> {
    version
        .split(|c: char| !c.is_ascii_digit())
        .find(|part| part.len() == 8 && part.starts_with("20"))
        .and_then(|d| d.parse().ok())
}

fn runsc_checks() -> Vec<Check> {
    let Some(runsc) = which("runsc") else {
        return vec![Check::new(
            "runsc",
            true,
            fail(
                "`runsc` (gVisor) is not on PATH; without it Lazaret refuses to start gVisor sandboxes",
                format!("{SETUP}, which installs runsc from bookworm-backports"),
            ),
        )];
    };
    let version = match output(&runsc, &["--version"], Duration::from_secs(20)) {
        Ok(v) => v,
        Err(e) => return vec![Check::new("runsc", true, fail(e, SETUP))],
    };
    let version_check = match runsc_build_date(&version) {
        Some(date) if date >= MIN_RUNSC_DATE => Outcome::Pass(first_line(&version)),
        Some(date) => fail(
            format!(
                "runsc build {date} is too old (file metadata calls fail in builds before {MIN_RUNSC_DATE})"
            ),
            "sudo apt-get install -t bookworm-backports runsc",
        ),
        None => Outcome::Warn {
            problem: format!("cannot read a build date from `{}`", first_line(&version)),
            fix: format!("make sure it is gVisor {MIN_RUNSC_DATE} or newer"),
        },
    };
    // `runsc flags` prints its list on stderr: the one answer read there.
    let flags_check = match run_captured(&runsc, &["flags"], Duration::from_secs(20)) {
        Err(e) => fail(e, SETUP),
        Ok(Captured { stdout, stderr }) => {
            let flags = stdout + &stderr;
            let has = |f: &str| {
                flags
                    .lines()
                    .any(|l| l.split_whitespace().next() == Some(f))
            };
            let missing: Vec<&str> = ["-network", "-ignore-cgroups", "-host-uds"]
                .into_iter()
                .filter(|f| !has(f))
                .collect();
            if missing.is_empty() {
                Outcome::Pass(
                    "--network, --ignore-cgroups and --host-uds=open are supported".into(),
                )
            } else {
                fail(
                    format!("this runsc lacks {}", missing.join(", ")),
                    "sudo apt-get install -t bookworm-backports runsc",
                )
            }
        }
    };
    vec![
        Check::new("runsc", true, version_check),
        Check::new("runsc flags", true, flags_check),
    ]
}

/// Subordinate id ranges of `user` (name or uid) in an `/etc/subuid`-style file.
pub fn subid_count(contents: &str, user: &str, uid: u32) -> u64 {
    contents
        .lines()
        .filter_map(|l| {
            let mut f = l.trim().split(':');
            let owner = f.next()?;
            let _start: u64 = f.next()?.parse().ok()?;
            let count: u64 = f.next()?.parse().ok()?;
            (owner == user || owner == uid.to_string()).then_some(count)
        })
        .sum()
}

fn subid_check(name: &'static str, file: &str, user: &str, uid: u32) -> Check {
    let contents = std::fs::read_to_string(file).unwrap_or_default();
    let count = subid_count(&contents, user, uid);
    let outcome = if count >= 65536 {
        Outcome::Pass(format!("{count} ids for {user} in {file}"))
    } else {
        fail(
            format!("{user} has {count} subordinate ids in {file}; rootless podman needs 65536"),
            format!(
                "sudo usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {user}   (pick a range no other user has)"
            ),
        )
    };
    Check::new(name, true, outcome)
}

fn device_check(name: &'static str, dev: &str, why: &str) -> Check {
    use nix::unistd::{AccessFlags, access};
    let outcome = match access(dev, AccessFlags::R_OK | AccessFlags::W_OK) {
        Ok(()) => Outcome::Pass(format!("{dev} is readable and writable")),
        Err(e) => fail(
            format!("{dev} is not usable by this user ({e}); {why} needs it"),
            format!("sudo chmod 666 {dev}   (or {SETUP})"),
        ),
    };
    Check::new(name, true, outcome)
}

fn binary_check(name: &'static str, package: &str, why: &str) -> Check {
    let outcome = match which(name) {
        Some(p) => Outcome::Pass(p.display().to_string()),
        None => fail(
            format!("`{name}` is not on PATH; {why}"),
            format!("sudo apt-get install {package}"),
        ),
    };
    Check::new(name, true, outcome)
}

fn storage_check() -> Check {
    let Some(podman) = which("podman") else {
        return Check::new("storage driver", true, fail("podman is missing", SETUP));
    };
    let outcome = match output(
        &podman,
        &[
            "info",
            "--format",
            "{{.Store.GraphDriverName}}\t{{.Store.GraphRoot}}\t{{.Store.ImageStore.Number}}\t{{.Store.ContainerStore.Number}}",
        ],
        Duration::from_secs(90),
    ) {
        Ok(info) => {
            let f: Vec<&str> = info.trim().split('\t').collect();
            match f[..] {
                ["overlay", ..] => Outcome::Pass("overlay".into()),
                [driver, root, images, containers] => fail(
                    format!(
                        "rootless storage uses `{driver}`: every container start copies the image (seconds instead of 0.3 s)"
                    ),
                    overlay_fix(
                        Path::new(root),
                        images.parse().unwrap_or(1),
                        containers.parse().unwrap_or(1),
                    ),
                ),
                _ => fail(
                    format!("`podman info` answered `{}`", info.trim()),
                    format!("run `podman info` to see why; {SETUP}"),
                ),
            }
        }
        Err(e) => fail(e, format!("run `podman info` to see why; {SETUP}")),
    };
    Check::new("storage driver", true, outcome)
}

/// A command that switches this user's rootless storage to overlay, to be
/// pasted as printed. The store records its driver, so the old one goes:
/// an empty store is simply removed; one with images or containers is
/// reset by podman first, with the old configuration still in place (a
/// reset under the new driver fails on the old store).
fn overlay_fix(graph_root: &Path, images: u64, containers: u64) -> String {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let conf = home
        .as_ref()
        .map(|h| h.join(".config/containers/storage.conf"));
    if conf.as_ref().is_some_and(|c| c.exists()) {
        return format!(
            "set driver = \"overlay\" under [storage] in {}, then: podman system reset --force   (deletes your {images} image(s) and {containers} container(s))",
            conf.unwrap().display()
        );
    }
    let write = "mkdir -p ~/.config/containers && printf '[storage]\\ndriver = \"overlay\"\\n' > ~/.config/containers/storage.conf";
    if images == 0 && containers == 0 {
        let root = graph_root.display().to_string();
        let root = match home.as_ref().and_then(|h| graph_root.strip_prefix(h).ok()) {
            Some(rel) => format!("~/{}", rel.display()),
            None => root,
        };
        format!("{write} && rm -rf {root}   (it holds no image and no container: nothing is lost)")
    } else {
        format!(
            "podman system reset --force && {write}   (the reset deletes your {images} image(s) and {containers} container(s))"
        )
    }
}

/// The containers.conf files podman reads, lowest precedence first: each
/// main file, then its `.d` drop-ins in name order (as podman 4.3 does:
/// `/etc/containers/containers.conf.d` and the per-user one).
/// `CONTAINERS_CONF` replaces them all.
fn containers_confs(env: &dyn HostEnv) -> Vec<PathBuf> {
    if let Some(only) = env.var("CONTAINERS_CONF") {
        return vec![PathBuf::from(only)];
    }
    let dropins = |main: &Path| -> Vec<PathBuf> {
        let mut d: Vec<PathBuf> = std::fs::read_dir(main.with_extension("conf.d"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "conf"))
            .collect();
        d.sort();
        d
    };
    let mut v = vec![PathBuf::from("/usr/share/containers/containers.conf")];
    let etc = PathBuf::from("/etc/containers/containers.conf");
    v.extend(dropins(&etc));
    v.insert(1, etc);
    let config_home = env
        .var("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| env.home().map(|h| h.join(".config")));
    if let Some(c) = config_home {
        let user = c.join("containers/containers.conf");
        v.extend(std::iter::once(user.clone()).chain(dropins(&user)));
    }
    v
}

/// The effective value of `[section] key` across containers.conf files.
fn containers_conf_value(env: &dyn HostEnv, section: &str, key: &str) -> Option<toml::Value> {
    containers_confs(env)
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter_map(|t| t.parse::<toml::Table>().ok())
        .filter_map(|t| t.get(section)?.get(key).cloned())
        .next_back()
}

/// Parses `name=soft:hard` entries of `default_ulimits`.
pub fn parse_ulimit(entry: &str) -> Option<(&str, u64, u64)> {
    let (name, limits) = entry.split_once('=')?;
    let (soft, hard) = limits.split_once(':').unwrap_or((limits, limits));
    Some((
        name.trim(),
        soft.trim().parse().ok()?,
        hard.trim().parse().ok()?,
    ))
}

fn rlimit_check(env: &dyn HostEnv) -> Check {
    use nix::sys::resource::{Resource, getrlimit};
    let fix = "add to a drop-in such as /etc/containers/containers.conf.d/50-lazaret.conf (or ~/.config/containers/containers.conf): [containers] default_ulimits = [\"nofile=20000:20000\", \"nproc=4096:4096\"]   (values at most your hard limits, `ulimit -Hn` / `ulimit -Hu`)";
    let entries: Vec<String> = containers_conf_value(env, "containers", "default_ulimits")
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let mut problems = Vec::new();
    for (name, resource) in [
        ("nofile", Resource::RLIMIT_NOFILE),
        ("nproc", Resource::RLIMIT_NPROC),
    ] {
        let own_hard = getrlimit(resource).map(|(_, h)| h).unwrap_or(u64::MAX);
        match entries.iter().filter_map(|e| parse_ulimit(e)).find(|(n, _, _)| *n == name) {
            None => problems.push(format!("no {name} in default_ulimits: podman would try to raise it and fail without CAP_SYS_RESOURCE")),
            Some((_, _, hard)) if hard > own_hard => {
                problems.push(format!("{name} hard limit {hard} is above this session's {own_hard}"));
            }
            Some(_) => {}
        }
    }
    let outcome = if problems.is_empty() {
        Outcome::Pass(entries.join(", "))
    } else {
        fail(problems.join("; "), fix)
    };
    Check::new("rlimits", true, outcome)
}

fn cgroup_check(env: &dyn HostEnv) -> Check {
    let unified = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let runtime = containers_conf_value(env, "engine", "runtime")
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "crun".into());
    let outcome = if unified || runtime == "runc" {
        Outcome::Pass(format!(
            "cgroups {}, default runtime {runtime}",
            if unified { "v2" } else { "v1/hybrid" }
        ))
    } else {
        fail(
            format!(
                "cgroups are v1/hybrid and podman's default runtime is {runtime}, which fails there"
            ),
            "add to a drop-in such as /etc/containers/containers.conf.d/50-lazaret.conf (or ~/.config/containers/containers.conf): [engine] runtime = \"runc\"   (or run scripts/setup)",
        )
    };
    Check::new("oci runtime", true, outcome)
}

/// Which resource limits this host applies (engine::limits): memory and
/// processes always hold (watchdog, rlimits); CPU needs delegated cgroups.
fn limits_check() -> Check {
    use crate::engine::limits::{Enforcement, HostSupport, Limits};
    let host = match HostSupport::detect(&crate::podman::Podman::default()) {
        Ok(h) => h,
        Err(e) => return Check::new("resource limits", false, fail(e.to_string(), SETUP)),
    };
    let wanted = Limits {
        cpus: Some(1.0),
        ..Limits::default()
    };
    let gaps = Enforcement::of(&wanted, crate::config::Runtime::Runsc, &host).gaps(&host);
    let outcome = if gaps.is_empty() {
        Outcome::Pass(format!("cgroups {}: memory, pids and cpus", host.cgroups))
    } else {
        Outcome::Warn {
            problem: format!(
                "cgroups {} ({}): memory by the coordinator's watchdog and rlimits, pids by rlimits; {}",
                host.cgroups,
                if host.controllers.is_empty() {
                    "no controllers delegated".to_string()
                } else {
                    host.controllers.join(" ")
                },
                gaps.join("; ")
            ),
            fix: "a profile's `limits.cpus` is enforced only on cgroups v2 with the cpu controller delegated to your user (systemd: Delegate=cpu memory pids)".into(),
        }
    };
    Check::new("resource limits", false, outcome)
}

fn helpers_check() -> Check {
    let missing: Vec<&str> = [SIDECAR_BINARY, ESCALATE_BINARY]
        .into_iter()
        .filter(|b| find_helper(b).is_none())
        .collect();
    let stale = find_helper(ESCALATE_BINARY).filter(|p| !crate::install::has_session_gate(p));
    let outcome = if let Some(path) = stale {
        fail(
            format!(
                "{} is an older build than this lazaret (no `{}`): its sessions would not wait for the sandbox's self-test, so no sandbox starts with it",
                path.display(),
                lazaret_escalate::SESSION_GATE
            ),
            SETUP,
        )
    } else if missing.is_empty() {
        let found: Vec<String> = [SIDECAR_BINARY, ESCALATE_BINARY]
            .iter()
            .filter_map(|b| find_helper(b).map(|p| p.display().to_string()))
            .collect();
        Outcome::Pass(found.join(", "))
    } else {
        let passed_over: Vec<String> = missing
            .iter()
            .flat_map(|b| dynamic_helpers(b))
            .map(|p| p.display().to_string())
            .collect();
        let note = if passed_over.is_empty() {
            String::new()
        } else {
            format!(
                "; passed over, dynamically linked: {}",
                passed_over.join(", ")
            )
        };
        fail(
            format!(
                "{} not found as a static binary (looked next to lazaret and in /usr/local/lib/lazaret){note}",
                missing.join(" and ")
            ),
            SETUP,
        )
    };
    Check::new("helper binaries", true, outcome)
}

fn user_check() -> Check {
    let outcome = if nix::unistd::geteuid().is_root() {
        Outcome::Warn {
            problem: "running as root: Lazaret is built for rootless podman as your own user"
                .into(),
            fix: "run lazaret as your normal user".into(),
        }
    } else {
        Outcome::Pass(format!("uid {}", nix::unistd::geteuid()))
    };
    Check::new("rootless", false, outcome)
}

fn rundir_check(env: &dyn HostEnv) -> Check {
    let path = RuntimeDir::locate(env);
    let on_tmpfs = || {
        nix::sys::statfs::statfs(&path)
            .is_ok_and(|f| f.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
    };
    let outcome = match RuntimeDir::ensure(&path) {
        // Trust Anchor keys live here: memory only (decisions.md D4).
        Ok(_) if !on_tmpfs() => Outcome::Warn {
            problem: format!(
                "{} is not on a tmpfs, so the sandbox's client keys would be written to disk",
                path.display()
            ),
            fix: "log in through a systemd session (it sets XDG_RUNTIME_DIR to a tmpfs), or export XDG_RUNTIME_DIR=/run/user/$(id -u)".into(),
        },
        Ok(_) => Outcome::Pass(format!("{} (0700, yours, tmpfs)", path.display())),
        Err(e) => fail(e.to_string(), "follow the advice above"),
    };
    Check::new("runtime folder", true, outcome)
}

/// Runs every check, in the order a person would fix them.
pub fn run(env: &dyn HostEnv) -> Vec<Check> {
    let uid = nix::unistd::getuid().as_raw();
    let user = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |u| u.name);
    let mut checks = vec![
        user_check(),
        program("podman", "podman", true),
        program("runc", "runc", true),
    ];
    checks.extend(runsc_checks());
    checks.extend([
        subid_check("subuid", "/etc/subuid", &user, uid),
        subid_check("subgid", "/etc/subgid", &user, uid),
        binary_check(
            "newuidmap",
            "uidmap",
            "rootless podman maps user ids with it",
        ),
        binary_check(
            "slirp4netns",
            "slirp4netns",
            "the Network Sidecar's user-mode network uses it",
        ),
        binary_check(
            "fuse-overlayfs",
            "fuse-overlayfs",
            "the State Anchor overlay uses it",
        ),
        device_check("/dev/fuse", "/dev/fuse", "fuse-overlayfs (State Anchor)"),
        device_check(
            "/dev/net/tun",
            "/dev/net/tun",
            "slirp4netns (Network Sidecar)",
        ),
        cgroup_check(env),
        rlimit_check(env),
        limits_check(),
        storage_check(),
        program("git", "git", true),
        helpers_check(),
        rundir_check(env),
        landlock_check(),
    ]);
    checks
}

/// Auto-approved host commands run only under Landlock (decisions.md D9).
fn landlock_check() -> Check {
    use crate::coordinator::confine::{Support, probe};
    let outcome = match probe() {
        Support::Landlock { abi, full: true } => Outcome::Pass(format!(
            "Landlock ABI {abi}: auto-approved host commands run confined"
        )),
        Support::Landlock { abi, full: false } => Outcome::Warn {
            problem: format!(
                "Landlock ABI {abi} is older than 6: auto-approved host commands run confined, without the newest restrictions (seccomp still cuts their sockets)"
            ),
            fix: "a Linux kernel >= 6.12 gives the full confinement".into(),
        },
        Support::Missing(why) => Outcome::Warn {
            problem: format!("{why}: auto-approve is off, every host escalation goes to a human"),
            fix: "use a kernel with Landlock enabled (Linux >= 5.13, `lsm=...,landlock`)".into(),
        },
    };
    Check::new("landlock", false, outcome)
}

/// The report as printed, and whether a required check failed.
pub fn report(checks: &[Check]) -> (String, bool) {
    let mut out = String::new();
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for c in checks {
        let (mark, text, fix) = match &c.outcome {
            Outcome::Pass(s) => ("ok  ", s.as_str(), None),
            Outcome::Warn { problem, fix } => ("warn", problem.as_str(), Some(fix)),
            Outcome::Fail { problem, fix } => (
                if c.required { "FAIL" } else { "warn" },
                problem.as_str(),
                Some(fix),
            ),
        };
        let _ = writeln!(out, "{mark}  {:width$}  {text}", c.name);
        if let Some(fix) = fix {
            let _ = writeln!(out, "      {:width$}  fix: {fix}", "");
        }
    }
    let failed = checks.iter().filter(|c| c.failed() && c.required).count();
    // A warning is counted as one, never as passed (issue 43, 48).
    let warned = checks.len() - failed - checks.iter().filter(|c| c.passed()).count();
    let _ = if failed == 0 && warned == 0 {
        writeln!(
            out,
            "\nall {} checks passed: this host can run Lazaret",
            checks.len()
        )
    } else if failed == 0 {
        writeln!(
            out,
            "\n{} checks passed, {warned} warning(s): this host can run Lazaret; the warnings above say what is missing",
            checks.len() - warned
        )
    } else {
        writeln!(
            out,
            "\n{failed} of {} checks failed: fix them and run `lazaret doctor` again",
            checks.len()
        )
    };
    (out, failed > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warning_is_never_counted_as_passed() {
        let checks = [
            Check::new("a", true, Outcome::Pass("fine".into())),
            Check::new(
                "b",
                false,
                Outcome::Warn {
                    problem: "half".into(),
                    fix: "more".into(),
                },
            ),
        ];
        let (out, failed) = report(&checks);
        assert!(!failed);
        assert!(out.contains("1 checks passed, 1 warning(s)"), "{out}");
        assert!(!out.contains("all 2 checks passed"), "{out}");
    }

    #[test]
    fn runsc_dates() {
        assert_eq!(
            runsc_build_date("runsc version 0.0~20240729.0\nspec: 1.0.2-dev"),
            Some(20240729)
        );
        assert_eq!(
            runsc_build_date("runsc version release-20221212.0"),
            Some(20221212)
        );
        assert_eq!(runsc_build_date("runsc version unknown"), None);
    }

    #[test]
    fn subids() {
        let f = "alice:100000:65536\n1001:165536:65536\nbob:231072:1000\n";
        assert_eq!(subid_count(f, "alice", 1000), 65536);
        assert_eq!(subid_count(f, "carol", 1001), 65536);
        assert_eq!(subid_count(f, "bob", 1002), 1000);
        assert_eq!(subid_count(f, "dave", 1003), 0);
    }

    #[test]
    fn ulimits() {
        assert_eq!(
            parse_ulimit("nofile=20000:20000"),
            Some(("nofile", 20000, 20000))
        );
        assert_eq!(parse_ulimit("nproc=4096"), Some(("nproc", 4096, 4096)));
        assert_eq!(parse_ulimit("junk"), None);
    }
}
