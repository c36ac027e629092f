//! The sandbox engine: turns a resolved profile and workspace (a Domain
//! Anchor) into a running Network Sidecar and Agent Sandbox, and back into
//! nothing.
//!
//! Start order (FR-3): sidecar (runc, owns the user-mode network) → healthy →
//! State Anchor overlays → the sandbox's own network namespace, linked to
//! the sidecar's (the router, decisions.md D13) → Agent Sandbox (runsc). Teardown runs the other way and always completes: every step
//! is attempted and idempotent, and leftovers of a killed process are found
//! by name.

pub mod images;
pub mod layer;
pub mod limits;
pub mod link;
pub mod seccomp;
pub mod selftest;
pub mod state_anchor;
pub mod teardown;
pub mod wrapper;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::{ResolvedProfile, Runtime};
use crate::domain::DomainAnchor;
use crate::git_sentry::WorkspaceLayout;
use crate::host::HostEnv;
use crate::install::{ESCALATE_BINARY, find_helper};
use crate::mounts::{self, Mount};
use crate::podman::{self, Podman, PodmanError};
use crate::rundir::RuntimeDir;
use lazaret_sidecar::report::TableReport;

/// Labels put on every container Lazaret starts.
pub const LABEL_DOMAIN: &str = "lazaret.domain";
pub const LABEL_ROLE: &str = "lazaret.role";
pub const LABEL_RUNTIME: &str = "lazaret.runtime";
pub const LABEL_PROFILE: &str = "lazaret.profile";
pub const LABEL_WORKSPACE: &str = "lazaret.workspace";

/// A domain as its containers' labels describe it (engine-side view, no
/// coordinator needed): how `status` and `down --all` find orphans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelledDomain {
    pub hash: String,
    pub profile: String,
    pub workspace: String,
    pub runtime: String,
    /// Container names, sandbox first (the order teardown needs).
    pub containers: Vec<String>,
    /// Every one of them runs.
    pub running: bool,
}

/// Every domain with a container podman knows, by its labels.
pub fn labelled_domains(podman: &Podman) -> Result<Vec<LabelledDomain>, PodmanError> {
    let format = [
        LABEL_DOMAIN,
        LABEL_ROLE,
        LABEL_PROFILE,
        LABEL_WORKSPACE,
        LABEL_RUNTIME,
    ]
    .iter()
    .map(|l| format!("{{{{index .Labels \"{l}\"}}}}"))
    .collect::<Vec<_>>()
    .join("\t");
    let out = podman.run([
        "ps",
        "-a",
        "--filter",
        &format!("label={LABEL_DOMAIN}"),
        "--format",
        &format!("{{{{.Names}}}}\t{{{{.State}}}}\t{format}"),
    ])?;
    let mut domains: Vec<LabelledDomain> = Vec::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let [name, state, hash, role, profile, workspace, runtime] = f[..] else {
            continue;
        };
        let i = match domains.iter().position(|d| d.hash == hash) {
            Some(i) => i,
            None => {
                domains.push(LabelledDomain {
                    hash: hash.into(),
                    profile: profile.into(),
                    workspace: workspace.into(),
                    runtime: String::new(),
                    containers: Vec::new(),
                    running: true,
                });
                domains.len() - 1
            }
        };
        let d = &mut domains[i];
        // podman 4 prints "Up 3 minutes ago", later ones "running".
        d.running &= state.starts_with("Up") || state == "running";
        if role == "sandbox" {
            d.runtime = runtime.into();
            d.containers.insert(0, name.into());
        } else {
            d.containers.push(name.into());
        }
    }
    domains.sort_by(|a, b| a.hash.cmp(&b.hash));
    Ok(domains)
}

/// How long an image pull may take.
const PULL_DEADLINE: Duration = Duration::from_secs(1800);
/// How often long work reports that it is still going.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// How long the sidecar may take to become healthy.
const SIDECAR_DEADLINE: Duration = Duration::from_secs(30);

/// Where the Network Sidecar's output goes (its report, then its errors).
pub fn sidecar_log(domain_root: &Path) -> PathBuf {
    domain_root.join("sidecar.log")
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Podman(#[from] PodmanError),
    #[error(transparent)]
    Image(#[from] images::ImageError),
    #[error(transparent)]
    Wrapper(#[from] wrapper::WrapperError),
    #[error(transparent)]
    StateAnchor(#[from] state_anchor::StateAnchorError),
    #[error(transparent)]
    Seccomp(#[from] seccomp::SeccompError),
    #[error("cannot prepare {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "image `{0}` is not in local storage and could not be pulled; build it with `lazaret image build` or fix the profile's image"
    )]
    NoImage(String),
    #[error(
        "the {agent} agent image `{image}` is not built yet; build it with `lazaret image build --agent {agent}` (a few minutes, needs the package registries)"
    )]
    NoAgentImage { agent: String, image: String },
    #[error("mount table: {0}")]
    Mount(String),
    #[error("the Network Sidecar {name} did not become healthy within {secs} s: {detail}")]
    SidecarUnhealthy {
        name: String,
        secs: u64,
        detail: String,
    },
    #[error(
        "the Agent Sandbox {name} runs under `{actual}`, not the expected `{expected}`; it was stopped"
    )]
    RuntimeMismatch {
        name: String,
        expected: String,
        actual: String,
    },
    #[error(
        "the self-test of the Agent Sandbox {name} failed, so it was stopped: {failed}. Fix the cause (`lazaret doctor` helps), or start anyway with --allow-degraded (the sandbox is then marked degraded)\n{report}"
    )]
    SelfTest {
        name: String,
        failed: String,
        report: String,
    },
    #[error("{0}")]
    Teardown(String),
    #[error("cannot restore checkpoint {checkpoint}: {reason}")]
    Restore { checkpoint: String, reason: String },
    #[error(
        "security: {path} belongs to uid {owner}, not to you (uid {uid}); Lazaret's Storage Root must be yours alone (another user could replace the runtime podman runs). Choose another [storage] data_root, or fix the owner"
    )]
    StorageOwner { path: PathBuf, owner: u32, uid: u32 },
    #[error(transparent)]
    Git(#[from] crate::git_sentry::GitError),
    #[error(transparent)]
    Net(#[from] crate::net::NetError),
    #[error("{0}")]
    Link(String),
    #[error(
        "cannot find the Agent Sandbox {name}'s writable layer ({detail}), so its writes could not be held to the profile's limit; it was stopped. Lazaret needs podman's overlay storage driver: `lazaret doctor` says how"
    )]
    NoLayer { name: String, detail: String },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> EngineError + '_ {
    move |error| EngineError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// Where the engine keeps its host-side files.
#[derive(Debug, Clone)]
pub struct Engine {
    pub podman: Podman,
    /// The Storage Root.
    pub data_root: PathBuf,
    /// `[escalation].socket_dir`.
    pub socket_dir: PathBuf,
    pub rundir: RuntimeDir,
    /// What this host lets podman enforce, asked once (`podman info` is
    /// one of the slowest podman calls, and a boot needs it twice).
    host: std::sync::Arc<std::sync::OnceLock<limits::HostSupport>>,
}

/// The sandbox's `TERM` when the starting client has none.
pub const DEFAULT_TERM: &str = "xterm-256color";

/// A running domain, as the engine started (or found) it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub name: String,
    pub sidecar: String,
    pub image: String,
    pub sidecar_image: String,
    /// The runtime the sandbox really runs under (checked after start).
    pub runtime: Runtime,
    /// The `--runtime` podman was given (the wrapper for runsc).
    pub runtime_path: String,
    pub persistent: Vec<state_anchor::PersistentDir>,
    /// How the workspace is shared (and where the agent's git lives).
    pub layout: WorkspaceLayout,
    /// The container as podman reported it when this process started it
    /// (none when the domain was found running).
    pub started: Option<teardown::Inspected>,
    /// Brought back from a checkpoint by this start (`lazaret restore`,
    /// `lazaret fork`).
    pub restored: Option<crate::checkpoint::Restore>,
}

impl Sandbox {
    pub fn is_gvisor(&self) -> bool {
        self.runtime.is_gvisor()
    }
}

/// Steps of `up`, for a progress display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The coordinator began (the first step every session sees).
    Starting,
    /// A pull in progress, repeated every [`HEARTBEAT`]: each one reaches
    /// every waiting session, so no client deadline fires meanwhile.
    PullingImage {
        image: String,
        secs: u64,
    },
    CleaningLeftovers,
    PreparingWorkspace,
    SidecarImage,
    StartingSidecar,
    MountingStateAnchor,
    StartingSandbox,
    /// The sandbox runs and is being checked: a session may start its
    /// exec now, which waits inside for [`lazaret_escalate::READY_MARKER`].
    CheckingSandbox,
    Ready,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Step::PullingImage { image, secs } = self {
            return write!(f, "pulling image {image} ({secs} s so far)");
        }
        f.write_str(match self {
            Step::Starting => "starting",
            Step::PullingImage { .. } => "pulling an image",
            Step::CleaningLeftovers => "removing leftovers of an earlier run",
            Step::PreparingWorkspace => "preparing the agent's workspace and branch",
            Step::SidecarImage => "preparing the Network Sidecar image",
            Step::StartingSidecar => "starting the Network Sidecar (runc)",
            Step::MountingStateAnchor => "mounting the State Anchor",
            Step::StartingSandbox => "starting the Agent Sandbox",
            Step::CheckingSandbox => "checking the Agent Sandbox from inside (self-test)",
            Step::Ready => "ready",
        })
    }
}

impl Engine {
    pub fn new(config: &crate::config::Config, rundir: RuntimeDir) -> Self {
        Engine {
            podman: Podman::default(),
            data_root: config.data_root.clone(),
            socket_dir: config.escalation.socket_dir.clone(),
            rundir,
            host: Default::default(),
        }
    }

    fn domain_root(&self, anchor: &DomainAnchor) -> PathBuf {
        anchor.domain_root(&self.data_root)
    }

    /// Starts the domain of `resolved`, or returns it when it already runs.
    ///
    /// Independent steps run side by side (the images, the host's limits,
    /// the workspace; then the sidecar and the State Anchor), and each
    /// step's time goes to the log (`boot ...: N ms`, see [`BootClock`]).
    pub fn up(
        &self,
        resolved: &ResolvedProfile,
        env: &dyn HostEnv,
        progress: &mut dyn FnMut(Step),
    ) -> Result<Sandbox, EngineError> {
        let anchor = &resolved.domain;
        let profile = &resolved.profile;
        let mut clock = BootClock::start();
        self.check_storage_root()?;
        // `lazaret restore` left a request: the sandbox comes back from
        // that checkpoint instead of starting fresh. Taken now, once: a
        // start that fails before the sandbox does not leave it for the
        // next one, which starts fresh.
        let restore = crate::checkpoint::take_request(&self.domain_root(anchor));
        // Decide the runtime first: with runsc missing this fails before
        // anything starts (decisions.md D7).
        let runtime_path = match profile.runtime {
            Runtime::Runsc => wrapper::ensure(&self.data_root.join("runtime"))?
                .to_string_lossy()
                .into_owned(),
            Runtime::Runc => "runc".to_string(),
        };
        let layout = self.layout(resolved)?;
        let _ = crate::domain::record_anchor(&self.domain_root(anchor), anchor);
        clock.mark("storage root, runtime wrapper, layout");
        // Side by side, all read-only: what of the domain runs or is left
        // over (one podman call) and the two images. (The host's limits,
        // `podman info`, are asked beside the boot by the coordinator and
        // waited for only when the sandbox starts.)
        let (containers, image_there, sidecar_image) = std::thread::scope(|scope| {
            let sidecar = scope.spawn(|| {
                let t = Instant::now();
                let r = images::ensure_sidecar_image(&self.podman);
                BootClock::took("sidecar image (concurrent)", t);
                r
            });
            let image = scope.spawn(|| {
                let t = Instant::now();
                let r = self.podman.image_exists(&profile.image);
                BootClock::took("agent image exists (concurrent)", t);
                r
            });
            let containers = self
                .podman
                .containers_with_label_running(LABEL_DOMAIN, anchor.hash());
            BootClock::took(
                "containers of the domain, podman ps (concurrent)",
                clock.last,
            );
            (
                containers,
                image.join().expect("image thread"),
                sidecar.join().expect("sidecar image thread"),
            )
        });
        clock.mark("containers and images");
        let containers = containers?;
        let running = |name: String| containers.iter().any(|(n, r)| *n == name && *r);
        if running(anchor.sandbox_name())
            && running(anchor.sidecar_name())
            && let Ok(s) = self.describe(resolved, &runtime_path, &layout)
        {
            // It passed its self-test when it started (a marker lost
            // since would hold every new session).
            self.declare_ready(anchor)?;
            progress(Step::Ready);
            return Ok(s);
        }
        if !containers.is_empty() || teardown::marker(&self.rundir, anchor.hash()).exists() {
            progress(Step::CleaningLeftovers);
            self.down(anchor)?;
            clock.mark("leftovers removed");
        }
        if !image_there? {
            // Absent: pulled (with progress) or refused.
            self.ensure_image(&profile.image, progress)?;
        }
        progress(Step::PreparingWorkspace);
        if let Some(r) = &restore
            && r.files.is_dir()
        {
            // The agent's clone or git and the State Anchor's changes as
            // the checkpoint kept them (the domain is down: nothing has
            // them open or mounted).
            crate::checkpoint::put_back(&self.podman, &self.domain_root(anchor), &r.files)
                .map_err(|reason| EngineError::Restore {
                    checkpoint: r.checkpoint.clone(),
                    reason,
                })?;
            clock.mark("checkpoint's files put back");
        }
        let prepared = layout.prepare();
        progress(Step::SidecarImage);
        prepared?;
        let sidecar_image = sidecar_image?;
        clock.mark("workspace and branch");

        progress(Step::StartingSidecar);
        progress(Step::MountingStateAnchor);
        // The State Anchor needs only the image: mounted while the sidecar
        // starts and becomes healthy.
        let (sidecar, persistent) = std::thread::scope(|scope| {
            let mount = scope.spawn(|| {
                let t = Instant::now();
                let r = state_anchor::mount(
                    &self.podman,
                    &self.domain_root(anchor),
                    &profile.image,
                    &profile.persistent_dirs,
                );
                BootClock::took("State Anchor (concurrent)", t);
                r
            });
            let sidecar = self.start_sidecar(
                anchor,
                &sidecar_image,
                &resolved.network,
                &resolved.resolver,
                restore.is_some(),
            );
            (sidecar, mount.join().expect("State Anchor thread"))
        });
        clock.mark("sidecar healthy and State Anchor mounted");
        let result = sidecar
            .and_then(|table| Ok((table, persistent?)))
            .and_then(|(table, persistent)| {
                progress(Step::StartingSandbox);
                // A marker left by an earlier boot must not let a session
                // of this one run before its self-test passed.
                let marker = self.ready_marker(anchor);
                match std::fs::remove_file(&marker) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(EngineError::Io {
                            path: marker,
                            error: e,
                        });
                    }
                    _ => {}
                }
                let report = self.start_sandbox(
                    resolved,
                    env,
                    &runtime_path,
                    &persistent,
                    &layout,
                    restore.as_ref(),
                )?;
                clock.mark("sandbox started (podman run)");
                progress(Step::CheckingSandbox);
                let s = Sandbox {
                    name: anchor.sandbox_name(),
                    sidecar: anchor.sidecar_name(),
                    image: profile.image.clone(),
                    sidecar_image: sidecar_image.clone(),
                    runtime: profile.runtime,
                    runtime_path: runtime_path.clone(),
                    persistent,
                    layout: layout.clone(),
                    started: None,
                    restored: restore.clone(),
                };
                Ok((s, report, table))
            })
            .and_then(|(mut s, report, table)| {
                // Fail closed: prove from inside what the UI will claim.
                // The runtime check, the sidecar's table and the sandbox's
                // own report (written by its entrypoint) side by side.
                // The footprint (for a teardown podman cannot help) is
                // recorded meanwhile.
                let direct = (layout.mode == crate::config::WorkspaceMode::Direct)
                    .then_some(layout.host.as_path());
                let started = std::thread::scope(|scope| {
                    let started = scope.spawn(|| self.inspect_started(anchor, &s, direct));
                    let gate = selftest::gate(self, resolved, &s, &report, &table);
                    let started = started.join().expect("inspect thread")?;
                    gate.map(|()| started)
                })?;
                s.started = Some(started);
                clock.mark("runtime verified, footprint recorded, self-test passed");
                if restore.is_some() {
                    self.open_link(anchor, &resolved.network)?;
                    clock.mark("the restored sandbox's link opened");
                }
                Ok(s)
            });
        match result {
            Ok(s) => {
                self.secure_domain(anchor);
                if let Err(e) = self.declare_ready(anchor) {
                    let _ = self.down(anchor);
                    return Err(e);
                }
                clock.mark("domain secured, sessions let in");
                clock.total();
                progress(Step::Ready);
                Ok(s)
            }
            Err(e) => {
                // Nothing half-started is left behind; the start error wins.
                let _ = self.down(anchor);
                Err(e)
            }
        }
    }

    /// The host's side of the sandbox's [`lazaret_escalate::READY_MARKER`].
    fn ready_marker(&self, anchor: &DomainAnchor) -> PathBuf {
        anchor
            .certs_dir(&self.rundir)
            .join(lazaret_escalate::READY_MARKER_NAME)
    }

    /// Lets the sessions' commands run: the sandbox passed its self-test.
    fn declare_ready(&self, anchor: &DomainAnchor) -> Result<(), EngineError> {
        let marker = self.ready_marker(anchor);
        if marker.exists() {
            return Ok(());
        }
        crate::rundir::write_private(&marker, b"").map_err(io_err(&marker))
    }

    /// Puts `spec` in force in the domain's sidecar, whose link a restore
    /// kept closed until the self-test passed (the host's current policy,
    /// never the one the checkpoint was taken under).
    fn open_link(
        &self,
        anchor: &DomainAnchor,
        spec: &lazaret_sidecar::policy::PolicySpec,
    ) -> Result<(), EngineError> {
        let policy = crate::net::policy(spec.clone())?;
        crate::net::apply(&self.podman, &anchor.sidecar_name(), &policy)?;
        crate::net::save_live(&self.domain_root(anchor), spec)?;
        Ok(())
    }

    /// How `resolved`'s workspace is shared (decisions.md D1).
    pub fn layout(&self, resolved: &ResolvedProfile) -> Result<WorkspaceLayout, EngineError> {
        Ok(WorkspaceLayout::decide(
            resolved.domain.workspace(),
            &self.domain_root(&resolved.domain),
            &resolved.domain.agent_branch(),
            resolved.profile.workspace_mode,
        )?)
    }

    /// A running domain's description, from podman's own records.
    fn describe(
        &self,
        resolved: &ResolvedProfile,
        runtime_path: &str,
        layout: &WorkspaceLayout,
    ) -> Result<Sandbox, EngineError> {
        let anchor = &resolved.domain;
        let actual = self.podman.run([
            "container",
            "inspect",
            "--format",
            "{{.OCIRuntime}}",
            &anchor.sandbox_name(),
        ])?;
        if actual.trim() != runtime_path {
            return Err(EngineError::RuntimeMismatch {
                name: anchor.sandbox_name(),
                expected: runtime_path.into(),
                actual,
            });
        }
        let sidecar_image = self.podman.run([
            "container",
            "inspect",
            "--format",
            "{{.ImageName}}",
            &anchor.sidecar_name(),
        ])?;
        Ok(Sandbox {
            name: anchor.sandbox_name(),
            sidecar: anchor.sidecar_name(),
            image: resolved.profile.image.clone(),
            sidecar_image,
            runtime: resolved.profile.runtime,
            runtime_path: runtime_path.to_string(),
            persistent: resolved
                .profile
                .persistent_dirs
                .iter()
                .map(|d| state_anchor::layout(&self.domain_root(anchor), d))
                .collect(),
            layout: layout.clone(),
            started: None,
            restored: None,
        })
    }

    fn ensure_image(&self, image: &str, progress: &mut dyn FnMut(Step)) -> Result<(), EngineError> {
        if self.podman.image_exists(image)? {
            return Ok(());
        }
        if let Some(agent) = crate::agents::agent_of_image(image) {
            return Err(EngineError::NoAgentImage {
                agent: agent.to_string(),
                image: image.to_string(),
            });
        }
        if image.starts_with("localhost/") {
            return Err(EngineError::NoImage(image.to_string()));
        }
        let started = Instant::now();
        progress(Step::PullingImage {
            image: image.to_string(),
            secs: 0,
        });
        let mut cmd = self.podman.command();
        cmd.args(["pull", "--quiet", image]);
        let ok = podman::run_with_heartbeat(cmd, PULL_DEADLINE, HEARTBEAT, &mut || {
            progress(Step::PullingImage {
                image: image.to_string(),
                secs: started.elapsed().as_secs(),
            });
        });
        match ok {
            Ok(true) => Ok(()),
            _ => Err(EngineError::NoImage(image.to_string())),
        }
    }

    fn labels(anchor: &DomainAnchor, role: &str, runtime: &str) -> Vec<String> {
        [
            (LABEL_DOMAIN, anchor.hash().to_string()),
            (LABEL_ROLE, role.to_string()),
            (LABEL_RUNTIME, runtime.to_string()),
            (LABEL_PROFILE, anchor.name()),
            (LABEL_WORKSPACE, anchor.workspace().display().to_string()),
        ]
        .into_iter()
        .flat_map(|(k, v)| ["--label".to_string(), format!("{k}={v}")])
        .collect()
    }

    fn start_sidecar(
        &self,
        anchor: &DomainAnchor,
        image: &str,
        spec: &lazaret_sidecar::policy::PolicySpec,
        resolver: &crate::config::ResolverConfig,
        closed: bool,
    ) -> Result<TableReport, EngineError> {
        let name = anchor.sidecar_name();
        // A restored sandbox's processes run from the first instant: its
        // link stays closed (nothing allowed, no name answered) until its
        // self-test has passed, then `open_link` puts `spec` in force.
        let enforced = if closed {
            lazaret_sidecar::policy::PolicySpec {
                profile: spec.profile.clone(),
                ..Default::default()
            }
        } else {
            spec.clone()
        };
        let policy = crate::net::policy(enforced.clone())?;
        // The configuration decides at start; `lazaret net` changes the live copy.
        crate::net::save_live(&self.domain_root(anchor), &enforced)?;
        // The host's loopback is reachable only when the policy allows it at
        // all (or the resolver's upstream is there): a device-bound socket
        // skips the sidecar's rules (measured under runc), so slirp4netns
        // must not offer the alias otherwise. Decided on the policy to come.
        let host_loopback = crate::net::needs_host_loopback(&crate::net::policy(spec.clone())?)
            || resolver.upstream.ip() == crate::net::HOST_LOOPBACK_ALIAS;
        crate::net::save_host_loopback(&self.domain_root(anchor), host_loopback)?;
        let network = if host_loopback {
            "slirp4netns:allow_host_loopback=true"
        } else {
            "slirp4netns:allow_host_loopback=false"
        };
        let mut args: Vec<String> = vec![
            "run".into(),
            "--detach".into(),
            "--name".into(),
            name.clone(),
            "--runtime".into(),
            "runc".into(),
            // It needs exactly one capability: to change its own rules.
            "--cap-drop".into(),
            "all".into(),
            "--cap-add".into(),
            "NET_ADMIN".into(),
            // ... and its resolver's port 53 (decisions.md D11).
            "--cap-add".into(),
            "NET_BIND_SERVICE".into(),
            "--security-opt".into(),
            "no-new-privileges".into(),
            "--read-only".into(),
            // The control socket of `apply`/`show`: its own, never the agent's.
            "--tmpfs".into(),
            format!("{}:rw,mode=0700,size=64k", crate::net::CONTROL_DIR),
            "--dns".into(),
            lazaret_sidecar::link::ROUTER_V4.to_string(),
            "--network".into(),
            network.into(),
        ];
        // The router (decisions.md D13): it forwards the sandbox's link
        // into slirp4netns; refusals are answered at once (destination
        // unreachable is kept out of the ICMP rate limits); IPv6 keeps its
        // default route with forwarding on. Set here: /proc/sys is
        // read-only inside, so the sidecar cannot change them afterwards.
        for (name, value) in lazaret_sidecar::link::SYSCTLS {
            args.push("--sysctl".into());
            args.push(format!("{name}={value}"));
        }
        // Its report (the live table, once the policy is in force and the
        // control socket listens) goes to a file the host reads without a
        // podman call: each `podman exec` costs hundreds of milliseconds.
        let log = sidecar_log(&self.domain_root(anchor));
        let _ = std::fs::remove_file(&log);
        args.extend(Self::log_args(&log));
        args.extend(Self::labels(anchor, "sidecar", "runc"));
        args.push(image.to_string());
        args.extend([
            "serve".into(),
            "--json".into(),
            "--policy".into(),
            enforced.to_json(),
            "--gateway-wait-ms".into(),
            "3000".into(),
            "--control".into(),
            crate::net::CONTROL_SOCKET.into(),
            "--link".into(),
            "--upstream".into(),
            resolver.upstream.to_string(),
            "--ttl-floor".into(),
            resolver.ttl_floor.to_string(),
            "--ttl-cap".into(),
            resolver.ttl_cap.to_string(),
        ]);
        // The resolver answers on the sidecar's end of the sandbox's link.
        for a in lazaret_sidecar::link::resolver_addresses() {
            args.extend(["--resolver".into(), a.to_string()]);
        }
        self.podman.run(&args)?;
        // Healthy means: running, and its table is exactly the policy. Its
        // state is asked only when the report is slow to come.
        let started = Instant::now();
        let mut checked = Instant::now();
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let report = podman::log_stdout_lines(&text)
                .iter()
                .find_map(|l| serde_json::from_str::<TableReport>(l).ok());
            match report {
                Some(r) if crate::net::in_force(&r, &policy) => return Ok(r),
                Some(r) => {
                    return Err(EngineError::SidecarUnhealthy {
                        name,
                        secs: SIDECAR_DEADLINE.as_secs(),
                        detail: format!("its table is not the policy:\n{r}"),
                    });
                }
                None => {}
            }
            let timed_out = started.elapsed() > SIDECAR_DEADLINE;
            if timed_out || checked.elapsed() > Duration::from_secs(1) {
                checked = Instant::now();
                let state = self.podman.run([
                    "container",
                    "inspect",
                    "--format",
                    "{{.State.Status}}",
                    &name,
                ])?;
                if timed_out || state.trim() == "exited" {
                    return Err(EngineError::SidecarUnhealthy {
                        name,
                        secs: SIDECAR_DEADLINE.as_secs(),
                        detail: format!("state {}; log: {}", state.trim(), text.trim()),
                    });
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// podman arguments that send a container's output to `log` (k8s-file
    /// format, bounded), read back with [`crate::podman::log_stdout_lines`].
    fn log_args(log: &Path) -> [String; 6] {
        [
            "--log-driver".into(),
            "k8s-file".into(),
            "--log-opt".into(),
            format!("path={}", log.display()),
            "--log-opt".into(),
            "max-size=1mb".into(),
        ]
    }

    /// The host folders `/run/lazaret` is made of: the domain's escalation
    /// folder (holding the socket), the escalation binary and the certs.
    fn prepare_run_lazaret(
        &self,
        anchor: &DomainAnchor,
        extra_points: &[&str],
    ) -> Result<Vec<Mount>, EngineError> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let esc = anchor.escalation_dir(&self.socket_dir);
        let certs = anchor.certs_dir(&self.rundir);
        for dir in [&self.socket_dir, &esc, &certs] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io_err(dir))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(io_err(dir))?;
        }
        // Mount points for the nested mounts must exist: the folder itself
        // is mounted read-only, so none can be created inside it.
        let bin_point = esc.join("escalate");
        if !bin_point.exists() {
            std::fs::write(&bin_point, b"").map_err(io_err(&bin_point))?;
        }
        for point in std::iter::once(&"certs").chain(extra_points) {
            let p = esc.join(point);
            std::fs::create_dir_all(&p).map_err(io_err(&p))?;
        }
        let escalate = find_helper(ESCALATE_BINARY)
            .ok_or(images::ImageError::MissingHelper(ESCALATE_BINARY))?;
        // Sessions may start before the self-test ends only because this
        // binary holds their commands back: an older build would not.
        if !crate::install::has_session_gate(&escalate) {
            return Err(images::ImageError::StaleHelper {
                path: escalate,
                feature: lazaret_escalate::SESSION_GATE,
            }
            .into());
        }
        Ok(vec![
            Mount::bind(&esc, escalate_sys::SANDBOX_DIR, true),
            Mount::bind(
                escalate,
                format!("{}/escalate", escalate_sys::SANDBOX_DIR),
                true,
            ),
            Mount::bind(&certs, escalate_sys::CERTS_DIR, true),
        ])
    }

    fn start_sandbox(
        &self,
        resolved: &ResolvedProfile,
        env: &dyn HostEnv,
        runtime_path: &str,
        persistent: &[state_anchor::PersistentDir],
        layout: &WorkspaceLayout,
        restore: Option<&crate::checkpoint::Restore>,
    ) -> Result<selftest::Pending, EngineError> {
        let anchor = &resolved.domain;
        // What the sandbox must show from inside, known before it starts:
        // its entrypoint runs the self-test before anything else.
        let expectations = selftest::expectations(self, resolved)?;
        let mut table: Vec<Mount> = layout.mounts();
        table.extend(self.prepare_run_lazaret(anchor, &layout.run_lazaret_points())?);
        for p in persistent {
            table.push(Mount::bind(&p.merged, &p.container, false));
        }
        // A restored sandbox needs the mounts it was saved with: its TERM's
        // terminfo entry among them.
        let term = match restore {
            Some(r) if !r.term.is_empty() => r.term.clone(),
            _ => env.var("TERM").unwrap_or_else(|| DEFAULT_TERM.into()),
        };
        if let Some(m) = mounts::terminfo(&term, &mounts::terminfo_dirs(env)) {
            table.push(m);
        }
        for v in &resolved.volumes {
            if v.in_storage_root {
                std::fs::create_dir_all(&v.host).map_err(io_err(&v.host))?;
            }
            table.push(mounts::volume(v));
        }
        // Mount points the sandbox creates in the host folder, removed
        // again at teardown (no empty masked folder is left behind).
        let domain_root = self.domain_root(anchor);
        record_mountpoints(&domain_root, &layout.new_mountpoints(&table))?;
        let seccomp = domain_root.join("seccomp.json");
        std::fs::write(&seccomp, seccomp::profile()?).map_err(io_err(&seccomp))?;
        // Its own network namespace, fresh, linked to the sidecar's.
        let netns = link::netns_file(&domain_root);
        link::make(&self.podman, &anchor.sidecar_name(), &netns)?;
        let mut args: Vec<String> = vec![
            "run".into(),
            "--detach".into(),
            "--name".into(),
            anchor.sandbox_name(),
            "--runtime".into(),
            runtime_path.into(),
            "--security-opt".into(),
            format!("seccomp={}", seccomp.display()),
            "--network".into(),
            format!("ns:{}", netns.display()),
            "--dns".into(),
            lazaret_sidecar::link::ROUTER_V4.to_string(),
            "--security-opt".into(),
            "no-new-privileges".into(),
            "--workdir".into(),
            mounts::WORKSPACE.into(),
            "--env".into(),
            format!("TERM={term}"),
            "--env".into(),
            format!("LAZARET_PROFILE={}", anchor.profile()),
            "--env".into(),
            format!("LAZARET_DOMAIN={}", anchor.hash()),
            // Where an agent learns what the sandbox is and how to ask.
            "--env".into(),
            format!("LAZARET_GUIDE={}", lazaret_escalate::GUIDE_PATH),
        ];
        let layout_env = layout.env();
        let env_pairs = layout_env.iter().map(|(k, v)| (k, v)).chain(&resolved.env);
        for (k, v) in env_pairs {
            args.push("--env".into());
            args.push(format!("{k}={v}"));
        }
        args.extend(Self::labels(
            anchor,
            "sandbox",
            resolved.profile.runtime.as_str(),
        ));
        args.extend(limits::podman_args(
            &resolved.profile.limits,
            resolved.profile.runtime,
            &self.host_support(),
        ));
        for m in &table {
            args.extend(m.podman_args().map_err(EngineError::Mount)?);
        }
        // The entrypoint's output (the self-test report) goes to a file
        // the host reads without a podman call.
        let pending = selftest::Pending::new(&domain_root);
        let _ = std::fs::remove_file(&pending.log);
        args.extend(Self::log_args(&pending.log));
        // Restored, not started: the runtime wrapper reads this (the same
        // mounts, the same kind of link; init is past its self-test, which
        // the gate runs again from outside).
        if let Some(r) = restore {
            args.push("--annotation".into());
            args.push(format!(
                "{}={}",
                wrapper::RESTORE_ANNOTATION,
                r.memory.display()
            ));
        }
        // PID 1 is the static escalation binary, read-only from the host
        // (never the image's `sh`, which the agent can replace in a
        // persistent /usr): first the self-test, its report on stdout (one
        // line after a marker; no `podman exec` round trip), then an init
        // that reaps the orphans of the agent's processes (unreaped zombies
        // would hold the pids limit forever).
        args.extend([
            "--entrypoint".into(),
            lazaret_escalate::BINARY_PATH.into(),
            resolved.profile.image.clone(),
            "init".into(),
            serde_json::to_string(&expectations).unwrap_or_default(),
        ]);
        self.podman.run(&args)?;
        Ok(pending)
    }

    /// What this host lets podman enforce; nothing when podman cannot say
    /// (every limit then falls back to what holds without cgroups).
    pub fn host_support(&self) -> limits::HostSupport {
        self.host
            .get_or_init(|| limits::HostSupport::cached(self.rundir.path(), &self.podman))
            .clone()
    }

    /// The watchdog for `sandbox`, asking podman for its container only
    /// when this process did not start it.
    pub fn watchdog(
        &self,
        sandbox: &Sandbox,
        limits: limits::Limits,
        runtime: Runtime,
    ) -> Result<limits::Watchdog, EngineError> {
        let started = match &sandbox.started {
            Some(s) => s.clone(),
            None => self
                .inspect_containers(std::slice::from_ref(&sandbox.name))?
                .into_iter()
                .next()
                .ok_or_else(|| PodmanError::Failed {
                    args: format!("container inspect {}", sandbox.name),
                    status: "no output".into(),
                    stderr: String::new(),
                })?,
        };
        let mut dog = limits::Watchdog::new(&started.id, limits, runtime);
        dog.main_pid = started.pid;
        Ok(dog)
    }

    /// What holds a runc sandbox's root file system writes to its limit:
    /// the container's upper folder, walked from the user namespace its
    /// conmon runs in (engine::layer).
    pub fn layer_watch(&self, sandbox: &Sandbox) -> Result<layer::LayerWatch, EngineError> {
        let no_layer = |detail: String| EngineError::NoLayer {
            name: sandbox.name.clone(),
            detail,
        };
        let out = self.podman.run([
            "container",
            "inspect",
            "--format",
            "{{.State.ConmonPid}} {{.GraphDriver.Data.UpperDir}}",
            &sandbox.name,
        ])?;
        let (conmon, upper) = out
            .trim()
            .split_once(' ')
            .ok_or_else(|| no_layer(format!("podman said `{}`", out.trim())))?;
        let conmon: i32 = conmon
            .parse()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| no_layer(format!("no conmon process: `{conmon}`")))?;
        let upper = PathBuf::from(upper.trim());
        if !upper.is_absolute() {
            return Err(no_layer(format!(
                "podman names no upper folder (`{}`)",
                upper.display()
            )));
        }
        layer::LayerWatch::new(upper, conmon).map_err(|e| no_layer(e.to_string()))
    }

    /// One look at the started domain's containers: the sandbox must run
    /// under the runtime asked for (a silent downgrade of isolation is
    /// never acceptable), and their footprint is recorded for a teardown
    /// that podman cannot help with.
    fn inspect_started(
        &self,
        anchor: &DomainAnchor,
        s: &Sandbox,
        direct: Option<&Path>,
    ) -> Result<teardown::Inspected, EngineError> {
        let inspected = self.inspect_containers(&[s.name.clone(), s.sidecar.clone()])?;
        self.record_footprint(anchor, &inspected, direct);
        let sandbox = inspected.into_iter().next();
        match sandbox {
            Some(c) if c.runtime == s.runtime_path => Ok(c),
            other => Err(EngineError::RuntimeMismatch {
                name: s.name.clone(),
                expected: s.runtime_path.clone(),
                actual: other.map(|c| c.runtime).unwrap_or_default(),
            }),
        }
    }

    /// Stops and removes the sandbox, then the sidecar, then unmounts the
    /// State Anchor. Every step is attempted even when one fails; the
    /// report lists what failed. Safe to call on a domain that is not up.
    pub fn down(&self, anchor: &DomainAnchor) -> Result<(), EngineError> {
        // Taken first: once podman forgets a container, its ID is gone.
        let (footprint, known) = self.teardown_footprint(anchor);
        let mut failures = Vec::new();
        // Dependants first: podman refuses to remove the namespace owner
        // while the sandbox uses it.
        let mut names = vec![anchor.sandbox_name(), anchor.sidecar_name()];
        for other in known.unwrap_or_default() {
            if !names.contains(&other) {
                names.insert(0, other);
            }
        }
        for name in &names {
            if let Err(e) = self.podman.remove(name) {
                failures.push(format!("removing {name}: {e}"));
            }
        }
        // The sandbox's namespace, once nothing runs in it.
        if let Err(e) = link::remove(&self.podman, &link::netns_file(&self.domain_root(anchor))) {
            failures.push(e.to_string());
        }
        let unmounted = state_anchor::unmount(&self.podman, &self.domain_root(anchor));
        if let Err(e) = &unmounted {
            failures.push(format!("unmounting the State Anchor: {e}"));
        }
        // The truth is what remains, not what the steps said (decisions.md D8).
        let remaining = self
            .podman
            .containers_with_label(LABEL_DOMAIN, anchor.hash())
            .map_err(|e| e.to_string());
        let mut left = self.leftovers(anchor, &footprint, &remaining, unmounted.is_err());
        // With no container left, nothing can race these.
        if left.is_empty()
            && let Err(e) = self.clean_host(anchor, &self.domain_root(anchor))
        {
            left.push(e);
        }
        if left.is_empty()
            && let Some(ws) = &footprint.direct
            && let Err(e) = self.reclaim(ws)
        {
            left.push(format!(
                "files the agent left in {} owned by other ids could not be given back to you ({e})",
                ws.display()
            ));
        }
        self.record_teardown(anchor, &left);
        if left.is_empty() {
            return Ok(());
        }
        Err(EngineError::Teardown(teardown::not_down_message(
            anchor, &left, &failures,
        )))
    }

    /// The Storage Root and its internal folders, where they exist, must
    /// be the user's own (their modes are tightened by [`Engine::secure_domain`]).
    fn check_storage_root(&self) -> Result<(), EngineError> {
        use std::os::unix::fs::MetadataExt;
        let uid = nix::unistd::geteuid().as_raw();
        let internal = crate::domain::STORAGE_ROOT_INTERNAL
            .iter()
            .map(|n| self.data_root.join(n));
        for path in std::iter::once(self.data_root.clone()).chain(internal) {
            if let Ok(meta) = std::fs::symlink_metadata(&path)
                && meta.uid() != uid
            {
                return Err(EngineError::StorageOwner {
                    path,
                    owner: meta.uid(),
                    uid,
                });
            }
        }
        crate::rundir::create_private_dir(&self.data_root).map_err(io_err(&self.data_root))
    }

    /// Makes the Storage Root, its internal folders, this Domain Root and
    /// the files Lazaret keeps in it private to the user (0700/0600). Best
    /// effort: a folder that is not the user's is left as it is.
    pub fn secure_domain(&self, anchor: &DomainAnchor) {
        use crate::rundir::make_private;
        let _ = make_private(&self.data_root, true);
        for name in crate::domain::STORAGE_ROOT_INTERNAL {
            let _ = make_private(&self.data_root.join(name), true);
        }
        let root = self.domain_root(anchor);
        let _ = make_private(&root, true);
        if let Ok(entries) = std::fs::read_dir(&root) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_file()) {
                    let _ = make_private(&e.path(), false);
                }
            }
        }
    }
}

impl Engine {
    /// After the containers are gone: set-user-ID bits and device nodes the
    /// domain left are removed (through the user's podman namespace for
    /// files owned by a subordinate id), and the mount points the sandbox
    /// created in the host folder are removed when empty and no other
    /// domain on the same folder still runs.
    fn clean_host(&self, anchor: &DomainAnchor, root: &Path) -> Result<(), String> {
        let mut left = Vec::new();
        // Fixed again as root of the user's namespace, by Lazaret itself:
        // `chmod` and `rm` would follow a symlink another domain on the
        // same folder put on the way meanwhile.
        let me = std::env::current_exe().map(|p| p.to_string_lossy().into_owned());
        for t in crate::git_sentry::tree::sanitize_domain(root, anchor.workspace()) {
            if t.fixed() {
                continue;
            }
            let p = t.path().to_string_lossy().into_owned();
            let fix = match &me {
                Ok(me) => self
                    .podman
                    .run(["unshare", me.as_str(), "strip-trap", "--", &p])
                    .map(drop)
                    .map_err(|e| e.to_string()),
                Err(e) => Err(format!("cannot find the lazaret program: {e}")),
            };
            if fix.is_err() {
                left.push(p);
            }
        }
        let others = self
            .podman
            .containers_with_label(LABEL_WORKSPACE, &anchor.workspace().display().to_string())
            .unwrap_or_default();
        if others.is_empty() {
            remove_mountpoints(root);
        }
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "could not remove set-user-ID bits or device nodes from: {}",
                left.join(", ")
            ))
        }
    }
}

/// Times a boot's steps into the log (the coordinator's log file): one
/// `boot STEP: N ms` line per step, whose sum is the boot.
struct BootClock {
    start: Instant,
    last: Instant,
}

impl BootClock {
    fn start() -> Self {
        let now = Instant::now();
        BootClock {
            start: now,
            last: now,
        }
    }

    /// The step that just ended.
    fn mark(&mut self, step: &str) {
        let now = Instant::now();
        tracing::info!("boot {step}: {} ms", (now - self.last).as_millis());
        self.last = now;
    }

    /// A step that ran beside others, since `since`.
    fn took(step: &str, since: Instant) {
        tracing::info!("boot {step}: {} ms", since.elapsed().as_millis());
    }

    fn total(&self) {
        tracing::info!("boot total: {} ms", self.start.elapsed().as_millis());
    }
}

/// Adds `points` to the Domain Root's list of created mount points.
fn record_mountpoints(root: &Path, points: &[PathBuf]) -> Result<(), EngineError> {
    let file = root.join(crate::git_sentry::MOUNTPOINTS_FILE);
    let mut text = std::fs::read_to_string(&file).unwrap_or_default();
    for p in points {
        let line = p.to_string_lossy();
        if !line.contains('\n') && !text.lines().any(|l| l == line) {
            text.push_str(&line);
            text.push('\n');
        }
    }
    std::fs::write(&file, text).map_err(io_err(&file))
}

/// What a restore of checkpoint `name` would set back in the user's
/// repository: the agent's branch (the restored clone's branch is
/// propagated there) and how many commits it has beyond the checkpoint's
/// copy of it; None when it has none (or the workspace has no agent git).
/// Only host git on the host's own repository runs; the checkpoint's copy
/// is read without git.
pub fn branch_set_back(
    data_root: &Path,
    anchor: &DomainAnchor,
    mode: Option<crate::config::WorkspaceMode>,
    name: &str,
) -> Result<Option<(String, u64)>, EngineError> {
    let root = anchor.domain_root(data_root);
    let branch = anchor.agent_branch();
    let layout = WorkspaceLayout::decide(anchor.workspace(), &root, &branch, mode)?;
    let (Some(gitdir), Some(_)) = (&layout.agent_gitdir, &layout.host_dotgit) else {
        return Ok(None);
    };
    let kept = crate::checkpoint::dir(&root, name)
        .join("files")
        .join(gitdir.strip_prefix(&root).unwrap_or(gitdir));
    if !kept.is_dir() {
        return Ok(None);
    }
    let Some(saved) = crate::git_sentry::sync::read_branch(&kept, &branch)? else {
        return Ok(None);
    };
    Ok(crate::git_sentry::commits_beyond(&layout.host, &branch, &saved).map(|n| (branch, n)))
}

/// Removes the recorded mount points that are an empty folder or an empty
/// file (anything else is the user's or the agent's now: kept, and
/// `lazaret review` reports what the agent made), without following a
/// symlink the agent put on the way.
fn remove_mountpoints(root: &Path) {
    let file = root.join(crate::git_sentry::MOUNTPOINTS_FILE);
    let Ok(text) = std::fs::read_to_string(&file) else {
        return;
    };
    let mut kept = String::new();
    // Deepest first: a folder empties when its mount points are gone.
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_by_key(|l| std::cmp::Reverse(l.len()));
    for line in lines {
        let removed =
            crate::git_sentry::nofollow::remove_if_empty(Path::new(line)).unwrap_or(false);
        if !removed {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    let _ = if kept.is_empty() {
        std::fs::remove_file(&file)
    } else {
        std::fs::write(&file, kept)
    };
}

/// In-sandbox paths, shared with the escalation client.
mod escalate_sys {
    pub use lazaret_escalate::{CERTS_DIR, SANDBOX_DIR};
}
