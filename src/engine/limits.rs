//! Resource limits of an Agent Sandbox: memory, processes, CPU and the size
//! of its `/tmp`.
//!
//! Measured on cgroups v1 rootless hosts (Debian 12): podman ignores
//! `--memory`, `--pids-limit` and `--cpus` with a warning, `--ulimit data=`
//! stops a hog under runc but not under runsc, and gVisor's own `/tmp` is a
//! tmpfs sized at half the host's RAM. So a limit is applied by every
//! mechanism the host offers, and the one that always holds is the Session
//! Coordinator's [`Watchdog`]: it sums what the container's host processes
//! cost (their proportional share of mapped memory, plus the memfd in which
//! `runsc-sandbox` keeps all of the agent's memory, `/tmp` included) and
//! kills over the limit, like the kernel's OOM killer would. Where a limit is not applied at all
//! ([`Enforcement`]), `doctor`, `config check` and the status line say so.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::config::Runtime;

use crate::config::limits::KIB;
pub use crate::config::limits::{
    DEFAULT_MEMORY, DEFAULT_PIDS, Limits, LimitsSchema, parse_size, show_size,
};

/// Room under runc for tasks the user's other containers start after this
/// one (they share the kernel's count); the watchdog holds the sandbox
/// itself to `pids`.
const RUNC_NPROC_SLACK: u64 = 512;

/// Set on the sandbox's processes: the kernel's OOM killer picks them first.
pub const OOM_SCORE_ADJ: i32 = 1000;

/// What the host's podman can enforce (`podman info`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSupport {
    /// `v1` or `v2`.
    pub cgroups: String,
    /// Controllers delegated to this user (empty on cgroups v1 rootless).
    pub controllers: Vec<String>,
}

impl HostSupport {
    pub fn detect(podman: &crate::podman::Podman) -> Result<HostSupport, super::PodmanError> {
        let out = podman.run([
            "info",
            "--format",
            "{{.Host.CgroupsVersion}}|{{range .Host.CgroupControllers}}{{.}} {{end}}",
        ])?;
        Ok(Self::parse(&out))
    }

    /// [`HostSupport::detect`], remembered in the runtime folder until the
    /// machine boots again or podman changes: `podman info` costs a few
    /// hundred milliseconds of CPU at every domain start, and what it says
    /// here does not change in between. Nothing when podman cannot say.
    pub fn cached(rundir: &Path, podman: &crate::podman::Podman) -> HostSupport {
        #[derive(Serialize, Deserialize)]
        struct Cached {
            key: String,
            support: HostSupport,
        }
        let file = rundir.join("host-support.json");
        let key = Self::cache_key(podman);
        if let Some(key) = &key
            && let Some(c) = std::fs::read(&file)
                .ok()
                .and_then(|b| serde_json::from_slice::<Cached>(&b).ok())
            && c.key == *key
        {
            return c.support;
        }
        let Ok(support) = Self::detect(podman) else {
            return HostSupport::default();
        };
        if let Some(key) = key
            && let Ok(text) = serde_json::to_vec(&Cached {
                key,
                support: support.clone(),
            })
        {
            let _ = crate::rundir::write_private(&file, &text);
        }
        support
    }

    /// This boot and this podman binary (path, size, change time).
    fn cache_key(podman: &crate::podman::Podman) -> Option<String> {
        use std::os::unix::fs::MetadataExt;
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let program = crate::install::which(podman.program())?;
        let meta = std::fs::metadata(&program).ok()?;
        Some(format!(
            "{} {} {} {}.{}",
            boot.trim(),
            program.display(),
            meta.len(),
            meta.ctime(),
            meta.ctime_nsec()
        ))
    }

    fn parse(out: &str) -> HostSupport {
        let (version, controllers) = out.trim().split_once('|').unwrap_or((out.trim(), ""));
        HostSupport {
            cgroups: version.trim().to_string(),
            controllers: controllers.split_whitespace().map(str::to_string).collect(),
        }
    }

    fn has(&self, controller: &str) -> bool {
        self.cgroups == "v2" && self.controllers.iter().any(|c| c == controller)
    }
}

/// How each limit is applied on this host, for `doctor`, `config check` and
/// the status line. `None` in a field: that limit is not applied here.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Enforcement {
    pub memory: Option<String>,
    pub pids: Option<String>,
    pub cpus: Option<String>,
    pub tmp: Option<String>,
}

impl Enforcement {
    pub fn of(limits: &Limits, runtime: Runtime, host: &HostSupport) -> Enforcement {
        let mut memory = vec![];
        if host.has("memory") {
            memory.push("cgroup");
        }
        if runtime == Runtime::Runc {
            memory.push("rlimit data per process");
        }
        memory.push("coordinator watchdog");
        let pids = if host.has("pids") {
            "cgroup"
        } else if runtime.is_gvisor() {
            "rlimit nproc, counted by gVisor"
        } else {
            "rlimit nproc (shared by your runc containers) and coordinator watchdog"
        };
        Enforcement {
            memory: Some(memory.join(" + ")),
            pids: Some(pids.into()),
            cpus: match (limits.cpus, host.has("cpu")) {
                (None, _) => Some("no limit asked".into()),
                (Some(_), true) => Some("cgroup".into()),
                (Some(_), false) => None,
            },
            tmp: Some("sized tmpfs".into()),
        }
    }

    /// The limits this host does not apply, with why: empty when all hold.
    pub fn gaps(&self, host: &HostSupport) -> Vec<String> {
        let why = if host.cgroups == "v2" {
            "the cgroup controller is not delegated to your user"
        } else {
            "cgroups v1 rootless has no resource control"
        };
        let mut gaps = Vec::new();
        for (name, e) in [
            ("memory", &self.memory),
            ("pids", &self.pids),
            ("cpus", &self.cpus),
            ("tmp", &self.tmp),
        ] {
            if e.is_none() {
                gaps.push(format!("{name} limit not applied: {why}"));
            }
        }
        gaps
    }

    /// Short form for the status line.
    pub fn short(&self) -> String {
        if self.cpus.is_none() {
            "cpus NOT limited".into()
        } else {
            "limits on".into()
        }
    }
}

/// `podman run` arguments that apply `limits` under `runtime`.
pub fn podman_args(limits: &Limits, runtime: Runtime, host: &HostSupport) -> Vec<String> {
    // Under runsc the count is the sandbox's own (gVisor checks it). Under
    // runc rootless the kernel counts every task of the user namespace's
    // root: all of this user's containers, gVisor's threads included. Those
    // running now are added so the sandbox still gets its own `pids`; the
    // watchdog holds the sandbox itself to `pids`.
    let nproc = match runtime {
        Runtime::Runsc => u64::from(limits.pids),
        Runtime::Runc => u64::from(limits.pids) + own_tasks(Path::new("/proc")) + RUNC_NPROC_SLACK,
    };
    let mut args = vec![
        "--oom-score-adj".to_string(),
        OOM_SCORE_ADJ.to_string(),
        "--ulimit".into(),
        format!("nproc={nproc}:{nproc}"),
        // gVisor's own /tmp is sized at half the host's RAM: replace it.
        "--mount".into(),
        format!(
            "type=tmpfs,destination=/tmp,tmpfs-size={},tmpfs-mode=1777",
            limits.tmp
        ),
    ];
    if runtime == Runtime::Runc {
        // The kernel refuses a single process more: the watchdog catches
        // the sum. gVisor does not apply RLIMIT_DATA (measured).
        args.extend(["--ulimit".into(), format!("data={0}:{0}", limits.memory)]);
    }
    if host.has("memory") {
        args.extend([
            "--memory".into(),
            limits.memory.to_string(),
            "--memory-swap".into(),
            limits.memory.to_string(),
        ]);
    }
    if host.has("pids") {
        args.extend(["--pids-limit".into(), limits.pids.to_string()]);
    }
    if let Some(c) = limits.cpus
        && host.has("cpu")
    {
        args.extend(["--cpus".into(), c.to_string()]);
    }
    args
}

/// Tasks (threads included) of processes owned by this user.
fn own_tasks(proc_root: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let uid = nix::unistd::getuid().as_raw();
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
        .map(|e| std::fs::read_dir(e.path().join("task")).map_or(1, |t| t.count() as u64))
        .sum()
}

/// What the watchdog saw of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    /// Memory the container's host processes cost: their proportional
    /// share of mapped memory plus the memfds they hold (gVisor's memory).
    pub rss: u64,
    /// How many host processes the container has.
    pub processes: usize,
    /// The process holding the most memory, and how much.
    pub biggest: Option<(i32, u64)>,
}

/// What the watchdog did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Within(Usage),
    /// No process of the container is left (it exited or was killed).
    Gone,
    /// The container's processes could not be read (out of descriptors,
    /// say): nothing is known, neither that it runs nor that it is gone.
    Unmeasured(String),
    /// Over the memory limit: `killed` got SIGKILL.
    OverMemory {
        usage: Usage,
        killed: i32,
    },
    /// Over the process limit: every process of the container got SIGKILL.
    OverPids {
        usage: Usage,
    },
}

/// Watches one container's host processes: the conmon processes podman
/// starts for it (`-c <id>`, one for the container and one per `exec`) and
/// everything below them.
#[derive(Debug)]
pub struct Watchdog {
    pub container_id: String,
    pub limits: Limits,
    pub runtime: Runtime,
    /// The container's main host process (runc: its PID 1; runsc: the
    /// sandbox): when it is gone, so is the container, even while `exec`
    /// sessions' conmons linger.
    pub main_pid: Option<i32>,
    proc_root: std::path::PathBuf,
}

#[derive(Debug, Clone)]
struct Proc {
    ppid: i32,
    rss: u64,
    /// Its command name, from stat (cheap: no extra read per process).
    comm: String,
}

/// `true` for a failed read of a process's file that says the process is
/// gone or not ours to read; any other failure (out of descriptors or
/// memory) says nothing of the process.
fn vanished(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
    ) || e.raw_os_error() == Some(nix::errno::Errno::ESRCH as i32)
}

/// `r`, with a vanished process's failure as `None` and any other as the
/// error.
fn present<T>(r: std::io::Result<T>) -> std::io::Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if vanished(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

fn read_procs(root: &Path) -> std::io::Result<BTreeMap<i32, Proc>> {
    let mut procs = BTreeMap::new();
    for e in std::fs::read_dir(root)? {
        let e = e?;
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Some(stat) = present(std::fs::read_to_string(e.path().join("stat")))? else {
            continue;
        };
        // Fields after the command name, which may hold spaces and ')'.
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let comm = head.split_once('(').map_or("", |(_, c)| c).to_string();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // state ppid ... rss is field 24 of stat (index 21 after the name).
        let ppid = fields.get(1).and_then(|f| f.parse().ok()).unwrap_or(0);
        let pages: u64 = fields.get(21).and_then(|f| f.parse().ok()).unwrap_or(0);
        procs.insert(
            pid,
            Proc {
                ppid,
                rss: pages * page_size(),
                comm,
            },
        );
    }
    Ok(procs)
}

fn page_size() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .map_or(4096, |v| v as u64)
}

/// A process's share of mapped memory without shared memory (`Pss` minus
/// `Pss_Shmem` of smaps_rollup): shared libraries are split among the
/// processes mapping them, so a sum over a hundred processes of one binary
/// is not a hundred times the binary. Shared memory is counted once, by
/// [`memfd_bytes`].
fn private_memory(dir: &Path) -> std::io::Result<Option<u64>> {
    let Some(text) = present(std::fs::read_to_string(dir.join("smaps_rollup")))? else {
        return Ok(None);
    };
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    Ok(field("Pss:").map(|pss| pss.saturating_sub(field("Pss_Shmem:").unwrap_or(0)) * KIB))
}

/// A process's share of all the memory it maps (`Pss` of smaps_rollup).
fn proportional_memory(dir: &Path) -> std::io::Result<Option<u64>> {
    let Some(text) = present(std::fs::read_to_string(dir.join("smaps_rollup")))? else {
        return Ok(None);
    };
    Ok(text
        .lines()
        .find(|l| l.starts_with("Pss:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map(|kib| kib * KIB))
}

/// Bytes allocated in the memfds `dir`'s process holds that no earlier
/// process of the container held. gVisor keeps all of the agent's memory,
/// its tmpfs and page cache included, in one memfd (`runsc-memory`): its
/// allocated size is what the sandbox costs the host, mapped or not.
/// `None` when the process's descriptors cannot be read.
fn memfd_bytes(
    dir: &Path,
    seen: &mut std::collections::BTreeSet<(u64, u64)>,
) -> std::io::Result<Option<u64>> {
    use std::os::unix::fs::MetadataExt;
    let Some(fds) = present(std::fs::read_dir(dir.join("fd")))? else {
        return Ok(None);
    };
    let mut total = 0;
    for fd in fds {
        let Some(fd) = present(fd)? else {
            continue;
        };
        let is_memfd = present(std::fs::read_link(fd.path()))?
            .is_some_and(|t| t.to_string_lossy().starts_with("/memfd:"));
        if !is_memfd {
            continue;
        }
        if let Some(m) = present(std::fs::metadata(fd.path()))?
            && seen.insert((m.dev(), m.ino()))
        {
            total += m.blocks() * 512;
        }
    }
    Ok(Some(total))
}

/// `true` when `cmdline` (NUL-separated) is a conmon for container `id`.
fn is_conmon_of(cmdline: &[u8], id: &str) -> bool {
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let is_conmon = args
        .first()
        .is_some_and(|a| a.ends_with(b"conmon") || a.ends_with(b"/conmon"));
    is_conmon
        && args
            .windows(2)
            .any(|w| (w[0] == b"-c" || w[0] == b"--cid") && w[1] == id.as_bytes())
}

impl Watchdog {
    pub fn new(container_id: &str, limits: Limits, runtime: Runtime) -> Watchdog {
        Watchdog {
            container_id: container_id.to_string(),
            limits,
            runtime,
            main_pid: None,
            proc_root: "/proc".into(),
        }
    }

    /// The container's host processes below its conmons, with their memory.
    fn members(&self) -> std::io::Result<Vec<(i32, u64)>> {
        let procs = read_procs(&self.proc_root)?;
        let mut conmons = Vec::new();
        for (pid, p) in &procs {
            if p.comm != "conmon" {
                continue;
            }
            let cmdline = present(std::fs::read(
                self.proc_root.join(pid.to_string()).join("cmdline"),
            ))?;
            if cmdline.is_some_and(|c| is_conmon_of(&c, &self.container_id)) {
                conmons.push(*pid);
            }
        }
        let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        for (pid, p) in &procs {
            children.entry(p.ppid).or_default().push(*pid);
        }
        let mut members = Vec::new();
        let mut stack: Vec<i32> = conmons
            .iter()
            .flat_map(|c| children.get(c).cloned().unwrap_or_default())
            .collect();
        while let Some(pid) = stack.pop() {
            if let Some(p) = procs.get(&pid) {
                members.push((pid, p.rss));
            }
            stack.extend(children.get(&pid).cloned().unwrap_or_default());
        }
        Ok(members)
    }

    /// What the container's processes use; `Ok(None)` when it has none,
    /// `Err` when they could not be read (which says nothing of them).
    pub fn usage(&self) -> std::io::Result<Option<Usage>> {
        let members = self.members()?;
        if members.is_empty() {
            return Ok(None);
        }
        let mut seen_memfds = std::collections::BTreeSet::new();
        let mut charged: Vec<(i32, u64)> = Vec::with_capacity(members.len());
        for &(pid, rss) in &members {
            let dir = self.proc_root.join(pid.to_string());
            let own = match memfd_bytes(&dir, &mut seen_memfds)? {
                Some(memfds) => private_memory(&dir)?.unwrap_or(rss) + memfds,
                // Its descriptors are not ours to read: runsc's sandbox
                // with its own network stack runs as another id of the
                // user's namespace. Its share of every mapping then,
                // shared memory included: gVisor's memory file is mapped
                // by the sentry and its stubs, each page counted once
                // across them.
                None => proportional_memory(&dir)?.unwrap_or(rss),
            };
            charged.push((pid, own));
        }
        Ok(Some(Usage {
            rss: charged.iter().map(|(_, r)| r).sum(),
            processes: members.len(),
            biggest: charged.iter().copied().max_by_key(|(_, r)| *r),
        }))
    }

    /// Looks once and acts: over the memory limit the biggest process is
    /// killed (as the kernel's OOM killer would; under runsc that is the
    /// sandbox itself); over the process limit the whole container is.
    /// A failure to read is [`Verdict::Unmeasured`], never [`Verdict::Gone`].
    pub fn check(&self) -> Verdict {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        if let Some(pid) = self.main_pid {
            let stat = self.proc_root.join(pid.to_string()).join("stat");
            match present(std::fs::read_to_string(&stat)) {
                Ok(Some(s)) if !s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')) => {}
                Ok(_) => return Verdict::Gone,
                Err(e) => {
                    return Verdict::Unmeasured(format!("cannot read {}: {e}", stat.display()));
                }
            }
        }
        let usage = match self.usage() {
            Ok(Some(usage)) => usage,
            Ok(None) => return Verdict::Gone,
            Err(e) => {
                return Verdict::Unmeasured(format!(
                    "cannot read the sandbox's processes in {}: {e}",
                    self.proc_root.display()
                ));
            }
        };
        if usage.rss > self.limits.memory
            && let Some((pid, _)) = usage.biggest
        {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            return Verdict::OverMemory { usage, killed: pid };
        }
        // Under runsc the sandbox's processes are not host processes (gVisor
        // counts them against its nproc); the host sees about two stubs per
        // sandbox process, so only a clear excess counts.
        let host_pids = match self.runtime {
            Runtime::Runc => self.limits.pids as usize,
            Runtime::Runsc => self.limits.pids as usize * 4 + 64,
        };
        if usage.processes > host_pids {
            for (pid, _) in self.members().unwrap_or_default() {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            return Verdict::OverPids { usage };
        }
        Verdict::Within(usage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroups_v1_rootless_reports_cpus_as_not_applied() {
        let v1 = HostSupport::parse("v1|");
        let limits = Limits {
            cpus: Some(1.0),
            ..Limits::default()
        };
        let e = Enforcement::of(&limits, Runtime::Runsc, &v1);
        assert!(e.memory.as_deref().unwrap().contains("watchdog"));
        assert_eq!(e.gaps(&v1).len(), 1);
        assert!(e.gaps(&v1)[0].starts_with("cpus"));
        let args = podman_args(&limits, Runtime::Runsc, &v1);
        assert!(!args.iter().any(|a| a == "--memory" || a == "--cpus"));
        assert!(
            args.iter()
                .any(|a| a.starts_with("type=tmpfs,destination=/tmp"))
        );
        let v2 = HostSupport::parse("v2|cpu memory pids ");
        let args = podman_args(&limits, Runtime::Runc, &v2);
        for flag in ["--memory", "--pids-limit", "--cpus"] {
            assert!(args.iter().any(|a| a == flag), "{flag} in {args:?}");
        }
        assert!(
            Enforcement::of(&limits, Runtime::Runc, &v2)
                .gaps(&v2)
                .is_empty()
        );
    }

    #[test]
    fn conmon_is_matched_by_exact_container_id() {
        let c = b"/usr/bin/conmon\0--api-version\x001\0-c\0abc\0-u\0x\0";
        assert!(is_conmon_of(c, "abc"));
        assert!(!is_conmon_of(c, "ab"));
        assert!(!is_conmon_of(b"/bin/sh\0-c\0abc\0", "abc"));
    }

    /// The watchdog finds this very process tree's memory when pointed at
    /// a fake conmon: a shell named conmon with a child.
    #[test]
    fn watchdog_sums_a_real_process_tree() {
        let dir = tempfile::tempdir().unwrap();
        let conmon = dir.path().join("conmon");
        std::os::unix::fs::symlink("/bin/sh", &conmon).unwrap();
        let mut child = std::process::Command::new(&conmon)
            .args(["-c", "sleep 30; :", "-c", "fakeid"])
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let w = Watchdog::new("fakeid", Limits::default(), Runtime::Runc);
        let usage = w.usage().unwrap().expect("the sleep is found");
        assert_eq!(usage.processes, 1);
        assert!(usage.rss > 0);
        assert!(matches!(w.check(), Verdict::Within(_)));
        let tight = Watchdog::new(
            "fakeid",
            Limits {
                memory: 1,
                ..Limits::default()
            },
            Runtime::Runc,
        );
        assert!(matches!(tight.check(), Verdict::OverMemory { .. }));
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(w.check(), Verdict::Gone);
    }

    /// A watchdog that cannot read says so; it never takes that for a
    /// sandbox that is gone.
    #[test]
    fn a_failed_read_is_not_a_gone_sandbox() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Watchdog::new("fakeid", Limits::default(), Runtime::Runsc);
        // /proc itself unreadable (here: not a folder).
        let not_a_dir = dir.path().join("file");
        std::fs::write(&not_a_dir, "").unwrap();
        w.proc_root = not_a_dir;
        assert!(
            matches!(w.check(), Verdict::Unmeasured(_)),
            "{:?}",
            w.check()
        );
        // A readable /proc without the container: gone.
        w.proc_root = dir.path().to_path_buf();
        assert_eq!(w.check(), Verdict::Gone);
        // The main process's stat unreadable for another reason than its
        // absence (here: a folder where the file should be).
        std::fs::create_dir_all(dir.path().join("4242/stat")).unwrap();
        w.main_pid = Some(4242);
        assert!(
            matches!(w.check(), Verdict::Unmeasured(_)),
            "{:?}",
            w.check()
        );
    }
}
