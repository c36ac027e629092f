//! The blocking client: one request over mTLS on a UNIX socket, one
//! answer. Plain rustls over `std::os::unix::net::UnixStream` keeps the
//! static binary free of an async runtime.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::protocol::{self, ProtocolError, Request, Response, Status};
use crate::signing::{self, CredentialError, SessionCredential};
use crate::trust::{self, TrustError};

/// Why the client got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no session credential: {0}")]
    Credential(String),
    #[error("cannot load the client certificates: {0}")]
    Certs(#[from] TrustError),
    #[error("cannot reach the host's Escalation Socket at {path}: {source}")]
    Connect { path: PathBuf, source: io::Error },
    #[error("no answer from the host within the time limit")]
    Timeout,
    #[error("the escalation channel failed: {0}")]
    Channel(String),
    #[error("the host's answer is for request `{got}`, not `{want}`")]
    WrongAnswer { got: String, want: String },
}

impl From<CredentialError> for ClientError {
    fn from(e: CredentialError) -> Self {
        ClientError::Credential(e.to_string())
    }
}

impl ClientError {
    /// The process exit code for this failure (see [`crate::exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Credential(_) | ClientError::Certs(_) => crate::exit::NO_CREDENTIAL,
            ClientError::Timeout => crate::exit::TIMEOUT,
            ClientError::Connect { .. }
            | ClientError::Channel(_)
            | ClientError::WrongAnswer { .. } => crate::exit::UNAVAILABLE,
        }
    }
}

/// Where the client finds the host, and how long it waits.
#[derive(Debug, Clone)]
pub struct Settings {
    pub socket: PathBuf,
    pub certs_dir: PathBuf,
    /// `None`: wait for the human as long as it takes.
    pub timeout: Option<Duration>,
}

impl Settings {
    /// The fixed sandbox paths, overridable by
    /// [`env::SOCKET`](crate::env::SOCKET) and
    /// [`env::CERTS_DIR`](crate::env::CERTS_DIR).
    pub fn from_env(timeout: Option<Duration>) -> Self {
        let var = |name, default: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map_or_else(|| PathBuf::from(default), PathBuf::from)
        };
        Settings {
            socket: var(crate::env::SOCKET, crate::SOCKET_PATH),
            certs_dir: var(crate::env::CERTS_DIR, crate::CERTS_DIR),
            timeout,
        }
    }
}

/// The session credential and profile from this process's environment,
/// checked against each other.
pub fn credential_from_env() -> Result<(SessionCredential, String), ClientError> {
    let get = |name: &str| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| ClientError::Credential(format!("{name} is not set")))
    };
    let session_id = get(crate::env::SESSION_ID)?;
    // The host's file, read afresh per request (it is renewed); the
    // variable remains for callers that hand a credential over directly.
    let text = match get(crate::env::SESSION_CREDENTIAL) {
        Ok(v) => v,
        Err(_) => {
            if !protocol::is_canonical_uuid(&session_id) {
                return Err(ClientError::Credential(format!(
                    "{} is not a session id",
                    crate::env::SESSION_ID
                )));
            }
            let dir = Settings::from_env(None).certs_dir;
            let path = dir.join(signing::credential_file_name(&session_id));
            std::fs::read_to_string(&path).map_err(|e| {
                ClientError::Credential(format!(
                    "cannot read this session's credential {}: {e} (did its session end?)",
                    path.display()
                ))
            })?
        }
    };
    let cred = SessionCredential::from_env_value(text.trim())?;
    if cred.session_id() != session_id {
        return Err(ClientError::Credential(format!(
            "{} does not match the credential's session",
            crate::env::SESSION_ID
        )));
    }
    let profile = get(crate::env::PROFILE)?;
    Ok((cred, profile))
}

/// Builds and signs a request.
pub fn build_request(
    cred: &SessionCredential,
    profile: &str,
    cwd: &str,
    command: &str,
    justification: &str,
) -> Result<Request, ProtocolError> {
    let mut req = Request {
        version: protocol::PROTOCOL_VERSION,
        request_id: signing::new_id(),
        session_id: String::new(),
        profile: profile.to_string(),
        timestamp: signing::unix_now(),
        cwd: cwd.to_string(),
        command: command.to_string(),
        justification: justification.to_string(),
        delegation: String::new(),
        signature: String::new(),
    };
    cred.sign(&mut req);
    req.validate()?;
    Ok(req)
}

/// A socket whose every read and write gives up at one deadline.
struct DeadlineStream {
    sock: UnixStream,
    deadline: Option<Instant>,
}

impl DeadlineStream {
    fn arm(&self, write: bool) -> io::Result<()> {
        let Some(deadline) = self.deadline else {
            return Ok(());
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        if write {
            self.sock.set_write_timeout(Some(left))
        } else {
            self.sock.set_read_timeout(Some(left))
        }
    }
}

fn timed_out(e: io::Error) -> io::Error {
    // A socket timeout surfaces as EAGAIN.
    if e.kind() == io::ErrorKind::WouldBlock {
        io::ErrorKind::TimedOut.into()
    } else {
        e
    }
}

impl Read for DeadlineStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.arm(false)?;
        self.sock.read(buf).map_err(timed_out)
    }
}

impl Write for DeadlineStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.arm(true)?;
        self.sock.write(buf).map_err(timed_out)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.sock.flush()
    }
}

fn hung_up() -> ClientError {
    // What a host does when it refuses this sandbox's identity after the
    // handshake: it says nothing and closes.
    ClientError::Channel(
        "the host closed the connection without answering (certificate or identity refused?)"
            .into(),
    )
}

fn channel_error(e: ProtocolError) -> ClientError {
    match e {
        ProtocolError::Io(io) if io.kind() == io::ErrorKind::TimedOut => ClientError::Timeout,
        ProtocolError::Io(io)
            if matches!(
                io.kind(),
                io::ErrorKind::BrokenPipe
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::UnexpectedEof
            ) =>
        {
            hung_up()
        }
        ProtocolError::Closed | ProtocolError::TruncatedHeader { .. } => hung_up(),
        other => ClientError::Channel(other.to_string()),
    }
}

/// Sends `req` and waits for the host's answer.
pub fn exchange(settings: &Settings, req: &Request) -> Result<Response, ClientError> {
    let deadline = settings.timeout.map(|t| Instant::now() + t);
    let config = trust::load_client_config(&settings.certs_dir)?;
    let sock = UnixStream::connect(&settings.socket).map_err(|source| ClientError::Connect {
        path: settings.socket.clone(),
        source,
    })?;
    let conn = rustls::ClientConnection::new(config, trust::server_name())
        .map_err(|e| ClientError::Channel(e.to_string()))?;
    let mut tls = rustls::StreamOwned::new(conn, DeadlineStream { sock, deadline });
    protocol::write_request(&mut tls, req).map_err(channel_error)?;
    let resp = protocol::read_response(&mut tls).map_err(channel_error)?;
    let anonymous_error = resp.status == Status::Error && resp.request_id.is_empty();
    if resp.request_id != req.request_id && !anonymous_error {
        return Err(ClientError::WrongAnswer {
            got: resp.request_id,
            want: req.request_id.clone(),
        });
    }
    // Best effort: the answer is complete whether or not this arrives.
    tls.conn.send_close_notify();
    let _ = tls.flush();
    Ok(resp)
}
