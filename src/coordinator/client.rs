//! The session side: find or start the domain's coordinator (hold-to-bind),
//! register, and wait for the domain to be up.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::net::UnixStream;

use super::lock::{self, Role};
use super::protocol::{
    ClientMsg, CoordMsg, DomainStatus, FrameError, PROTOCOL_VERSION, read_frame, write_frame,
};
use crate::domain::DomainAnchor;
use crate::rundir::RuntimeDir;

/// How long a leader waits for a new coordinator's socket (spec: 10 s).
pub const BIND_DEADLINE: Duration = Duration::from_secs(10);
/// How long a handshake (before boot progress starts) may take.
const HELLO_DEADLINE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Lock(#[from] lock::LockError),
    #[error("cannot start the Session Coordinator: {0}")]
    Spawn(std::io::Error),
    #[error(
        "the Session Coordinator did not open its socket {socket} within {secs} s. Its log ({log}; `lazaret logs {profile}` shows it all) ends with:\n{tail}"
    )]
    NoSocket {
        socket: PathBuf,
        secs: u64,
        log: PathBuf,
        profile: String,
        tail: String,
    },
    #[error("the Session Coordinator refused: {0}")]
    Refused(String),
    #[error("talking to the Session Coordinator failed: {0}")]
    Protocol(#[from] FrameError),
    #[error("the Session Coordinator kept shutting down while we connected; try again")]
    Busy,
    #[error("no Session Coordinator runs for domain {0}")]
    NotRunning(String),
}

/// Everything a session needs to reach one domain's coordinator.
#[derive(Debug, Clone)]
pub struct DomainContext {
    pub anchor: DomainAnchor,
    pub control_socket: PathBuf,
    pub lock_file: PathBuf,
    pub domain_root: PathBuf,
    pub log: PathBuf,
    /// `--config FILE` to pass on to a coordinator we start.
    pub config: Option<PathBuf>,
    /// The sandbox's client material (memory-backed, mounted read-only in
    /// the sandbox), where sessions publish their credentials.
    pub certs_dir: PathBuf,
}

impl DomainContext {
    pub fn new(
        anchor: DomainAnchor,
        data_root: &Path,
        rundir: &RuntimeDir,
        config: Option<PathBuf>,
    ) -> Self {
        let domain_root = anchor.domain_root(data_root);
        DomainContext {
            control_socket: anchor.control_socket(rundir),
            lock_file: anchor.lock_file(rundir),
            certs_dir: anchor.certs_dir(rundir),
            log: domain_root.join("coordinator.log"),
            domain_root,
            anchor,
            config,
        }
    }
}

/// What a session says about itself.
#[derive(Debug, Clone)]
pub struct Hello {
    /// `Some` for a session that holds the domain up.
    pub session_id: Option<String>,
    pub session_key: Option<String>,
    pub purpose: String,
    /// A human at a terminal answers escalation prompts for this session.
    pub interactive: bool,
}

/// A live connection to a coordinator.
#[derive(Debug)]
pub struct Client {
    pub stream: UnixStream,
    pub domain: DomainStatus,
}

impl Client {
    /// Sends a request and reads its answer.
    pub async fn call(&mut self, msg: &ClientMsg) -> Result<CoordMsg, ClientError> {
        write_frame(&mut self.stream, msg).await?;
        Ok(read_frame(&mut self.stream).await?)
    }
}

async fn try_connect(socket: &Path) -> Option<UnixStream> {
    UnixStream::connect(socket).await.ok()
}

/// The log's last lines, agent-controlled text made visible.
fn log_tail(log: &Path) -> String {
    super::log::tail(log, 12)
        .iter()
        .map(|l| lazaret_widgets::visible::visible(l))
        .collect::<Vec<_>>()
        .join("\n")
}

fn spawn_coordinator(ctx: &DomainContext) -> Result<(), ClientError> {
    use std::os::unix::fs::OpenOptionsExt;
    crate::rundir::create_private_dir(&ctx.domain_root).map_err(ClientError::Spawn)?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&ctx.log)
        .map_err(ClientError::Spawn)?;
    let exe = std::env::current_exe().map_err(ClientError::Spawn)?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("coordinator")
        .arg("--profile")
        .arg(ctx.anchor.name())
        .arg("--workspace")
        .arg(ctx.anchor.workspace());
    if crate::config::allow_broad_workspace() {
        cmd.arg("--allow-broad-workspace");
    }
    if let Some(c) = &ctx.config {
        cmd.arg("--config").arg(c);
    }
    if crate::engine::selftest::allow_degraded() {
        cmd.arg("--allow-degraded");
    }
    cmd.stdin(std::process::Stdio::null())
        .stdout(log.try_clone().map_err(ClientError::Spawn)?)
        .stderr(log);
    // The child starts the real coordinator and exits at once (a double
    // fork): the coordinator is then nobody's child here, and never a zombie
    // of this session. It calls setsid() itself.
    let status = cmd.status().map_err(ClientError::Spawn)?;
    if !status.success() {
        return Err(ClientError::Spawn(std::io::Error::other(format!(
            "the coordinator launcher exited with {status}; see its log: `lazaret logs {}` ({})",
            ctx.anchor.name(),
            ctx.log.display()
        ))));
    }
    Ok(())
}

/// Finds the coordinator (starting it if needed, spec §4.3.5 Step 1) and
/// connects, without the handshake.
pub async fn open_socket(ctx: &DomainContext, start: bool) -> Result<UnixStream, ClientError> {
    for _ in 0..5 {
        let role = {
            let path = ctx.lock_file.clone();
            tokio::task::spawn_blocking(move || lock::acquire(&path))
                .await
                .map_err(|e| ClientError::Spawn(std::io::Error::other(e)))??
        };
        match role {
            Role::Leader(guard) => {
                if let Some(s) = try_connect(&ctx.control_socket).await {
                    drop(guard);
                    return Ok(s);
                }
                if !start {
                    return Err(ClientError::NotRunning(ctx.anchor.hash().to_string()));
                }
                // A socket nobody accepts on is a dead coordinator's.
                let _ = std::fs::remove_file(&ctx.control_socket);
                spawn_coordinator(ctx)?;
                let deadline = Instant::now() + BIND_DEADLINE;
                loop {
                    if let Some(s) = try_connect(&ctx.control_socket).await {
                        drop(guard);
                        return Ok(s);
                    }
                    if Instant::now() > deadline {
                        return Err(ClientError::NoSocket {
                            socket: ctx.control_socket.clone(),
                            secs: BIND_DEADLINE.as_secs(),
                            log: ctx.log.clone(),
                            profile: ctx.anchor.name(),
                            tail: log_tail(&ctx.log),
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            Role::Follower => {
                if let Some(s) = try_connect(&ctx.control_socket).await {
                    return Ok(s);
                }
                if !start {
                    return Err(ClientError::NotRunning(ctx.anchor.hash().to_string()));
                }
                // The leader's coordinator died already: lead ourselves.
            }
        }
    }
    Err(ClientError::Busy)
}

/// Connects as `hello`, starting the domain if needed; `progress` sees the
/// boot steps. Returns once the domain is up.
/// [`connect`] after the coordinator died under a running session: the
/// new coordinator adopts the running domain, which on a loaded host can
/// outlast one connect's wait, and sessions of one UI race to start it.
/// A few tries before the session gives up on its domain.
pub async fn reconnect(ctx: &DomainContext, hello: &Hello) -> Result<Client, ClientError> {
    let mut tries = 0;
    loop {
        match connect(ctx, hello, true, &mut |_| {}).await {
            Err(_) if tries < 2 => {
                tries += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            done => return done,
        }
    }
}

pub async fn connect(
    ctx: &DomainContext,
    hello: &Hello,
    start: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<Client, ClientError> {
    match connect_as(ctx, hello, start, false, progress).await? {
        Connected::Up(client) => Ok(*client),
        Connected::Checking(_) => Err(ClientError::Refused(
            "unexpected answer SandboxStarted".into(),
        )),
    }
}

/// How [`connect_early`] ended.
#[derive(Debug)]
pub enum Connected {
    /// The domain is up.
    Up(Box<Client>),
    /// The Agent Sandbox runs and is being checked: a session may start its
    /// exec (whose command waits inside for the self-test), then
    /// [`Checking::welcome`] waits for the domain.
    Checking(Checking),
}

/// A connection whose domain is being checked.
#[derive(Debug)]
pub struct Checking {
    stream: UnixStream,
}

impl Checking {
    /// Waits for the domain to be up.
    pub async fn welcome(mut self, progress: &mut dyn FnMut(&str)) -> Result<Client, ClientError> {
        match boot_news(&mut self.stream, false, progress).await? {
            BootNews::Welcome(domain) => Ok(Client {
                stream: self.stream,
                domain: *domain,
            }),
            _ => Err(ClientError::Refused(
                "the domain stopped while its sandbox was checked".into(),
            )),
        }
    }
}

/// [`connect`], returning as soon as the Agent Sandbox runs, before its
/// self-test is done: the time a session's `podman exec` takes to start
/// then overlaps the check.
pub async fn connect_early(
    ctx: &DomainContext,
    hello: &Hello,
    progress: &mut dyn FnMut(&str),
) -> Result<Connected, ClientError> {
    connect_as(ctx, hello, true, true, progress).await
}

async fn connect_as(
    ctx: &DomainContext,
    hello: &Hello,
    start: bool,
    early: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<Connected, ClientError> {
    for _ in 0..10 {
        let mut stream = open_socket(ctx, start).await?;
        let msg = ClientMsg::Hello {
            version: PROTOCOL_VERSION,
            session_id: hello.session_id.clone(),
            session_key: hello.session_key.clone(),
            pid: std::process::id(),
            purpose: hello.purpose.clone(),
            interactive: hello.interactive,
        };
        write_frame(&mut stream, &msg).await?;
        match boot_news(&mut stream, early, progress).await? {
            BootNews::Welcome(domain) => {
                return Ok(Connected::Up(Box::new(Client {
                    stream,
                    domain: *domain,
                })));
            }
            BootNews::Started => return Ok(Connected::Checking(Checking { stream })),
            // Torn down under us: the next attempt starts a new one.
            BootNews::Gone => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(ClientError::Busy)
}

/// Where a boot stands for a waiting session.
enum BootNews {
    Welcome(Box<DomainStatus>),
    /// The sandbox runs (only when asked for).
    Started,
    /// The coordinator went away or is shutting down.
    Gone,
}

/// Reads boot progress until the domain is up, or its sandbox runs when
/// `until_started`.
async fn boot_news(
    stream: &mut UnixStream,
    until_started: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<BootNews, ClientError> {
    loop {
        let reply =
            tokio::time::timeout(HELLO_DEADLINE * 12, read_frame::<_, CoordMsg>(stream)).await;
        match reply {
            Ok(Ok(CoordMsg::Progress { step })) => progress(&step),
            Ok(Ok(CoordMsg::SandboxStarted)) if until_started => return Ok(BootNews::Started),
            Ok(Ok(CoordMsg::SandboxStarted)) => {}
            Ok(Ok(CoordMsg::Welcome { domain })) => return Ok(BootNews::Welcome(Box::new(domain))),
            Ok(Ok(CoordMsg::Error { message })) => return Err(ClientError::Refused(message)),
            Ok(Ok(CoordMsg::ShuttingDown { .. })) | Ok(Err(FrameError::Closed)) => {
                return Ok(BootNews::Gone);
            }
            Ok(Ok(other)) => {
                return Err(ClientError::Refused(format!("unexpected answer {other:?}")));
            }
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => return Err(ClientError::Refused("no answer within two minutes".into())),
        }
    }
}

/// What the coordinator made of a `PolicyChange`.
#[derive(Debug)]
pub enum PolicyAnswer {
    /// In force: the sidecar's table after it.
    Changed(Box<lazaret_sidecar::report::TableReport>),
    /// Nothing changed; why, and whether the next start could take it.
    Refused {
        message: String,
        needs_restart: bool,
    },
}

impl PolicyAnswer {
    /// What became of `net::change` in the sidecar `sidecar`, for people.
    pub fn of(
        changed: Result<lazaret_sidecar::report::TableReport, crate::net::NetError>,
        sidecar: &str,
    ) -> PolicyAnswer {
        match changed {
            Ok(report) => PolicyAnswer::Changed(Box::new(report)),
            Err(e @ crate::net::NetError::NeedsRestart) => PolicyAnswer::Refused {
                message: e.to_string(),
                needs_restart: true,
            },
            Err(e) => PolicyAnswer::Refused {
                message: crate::net::explain(&e, sidecar),
                needs_restart: false,
            },
        }
    }
}

/// Asks the coordinator on `socket` to allow (or deny) `target` live: the
/// one door for policy changes of a running domain (one at a time, each
/// audited with this process as the client). A query connection: it does
/// not hold the domain up.
/// Asks the domain's coordinator to save its running sandbox as
/// checkpoint `name` (its time when `None`): where it is kept, and what.
pub async fn checkpoint(
    socket: &Path,
    name: Option<String>,
) -> Result<(String, crate::checkpoint::Checkpoint), ClientError> {
    let mut c = query(socket).await?;
    match c.call(&ClientMsg::Checkpoint { name }).await? {
        CoordMsg::Checkpointed { path, checkpoint } => Ok((path, checkpoint)),
        CoordMsg::Error { message } => Err(ClientError::Refused(message)),
        other => Err(ClientError::Refused(format!("unexpected answer {other:?}"))),
    }
}

pub async fn change_policy(
    socket: &Path,
    target: &str,
    allow: bool,
    origin: &str,
) -> Result<PolicyAnswer, ClientError> {
    let mut c = query(socket).await?;
    let msg = ClientMsg::PolicyChange {
        target: target.to_string(),
        allow,
        origin: origin.to_string(),
    };
    match c.call(&msg).await? {
        CoordMsg::PolicyChanged { report } => Ok(PolicyAnswer::Changed(Box::new(report))),
        CoordMsg::PolicyRefused {
            message,
            needs_restart,
        } => Ok(PolicyAnswer::Refused {
            message,
            needs_restart,
        }),
        CoordMsg::Error { message } => Err(ClientError::Refused(message)),
        CoordMsg::ShuttingDown { .. } => Err(ClientError::Refused(
            "the domain is shutting down; nothing was changed".into(),
        )),
        other => Err(ClientError::Refused(format!(
            "unexpected answer to a policy change: {other:?}"
        ))),
    }
}

/// A query-only connection to a socket (never starts anything).
pub async fn query(socket: &Path) -> Result<Client, ClientError> {
    let mut stream = UnixStream::connect(socket)
        .await
        .map_err(|_| ClientError::NotRunning(socket.display().to_string()))?;
    write_frame(
        &mut stream,
        &ClientMsg::Hello {
            version: PROTOCOL_VERSION,
            session_id: None,
            session_key: None,
            pid: std::process::id(),
            purpose: "query".into(),
            interactive: false,
        },
    )
    .await?;
    loop {
        match tokio::time::timeout(
            Duration::from_secs(30),
            read_frame::<_, CoordMsg>(&mut stream),
        )
        .await
        {
            Ok(Ok(CoordMsg::Progress { .. } | CoordMsg::SandboxStarted)) => {}
            Ok(Ok(CoordMsg::Welcome { domain })) => return Ok(Client { stream, domain }),
            Ok(Ok(CoordMsg::Error { message })) => return Err(ClientError::Refused(message)),
            Ok(Ok(_)) | Ok(Err(_)) => {
                return Err(ClientError::NotRunning(socket.display().to_string()));
            }
            Err(_) => return Err(ClientError::Refused("no answer within 30 s".into())),
        }
    }
}
