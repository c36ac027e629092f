//! The control protocol between `lazaret` sessions (CLI, UI) and the
//! Session Coordinator: versioned, length-prefixed JSON frames over the
//! control socket. The UI uses these same types.

use lazaret_escalate::protocol::{self as escalate_protocol, ProtocolError};
use serde::{Deserialize, Serialize};
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};

/// Bumped on any incompatible change; a mismatch is refused in the handshake.
pub const PROTOCOL_VERSION: u32 = 8;
/// The reason of a `Withdrawn` whose request another of the user's
/// clients answered: its decision holds (the request did not just go).
pub const ANSWERED_ELSEWHERE: &str = "answered in another client";
/// No control message is anywhere near this; larger frames are refused.
pub const MAX_FRAME: usize = 4 << 20;

/// Client to coordinator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientMsg {
    /// First message of every connection.
    Hello {
        version: u32,
        /// `LAZARET_SESSION_ID`, a UUID v4; `None` for a query-only client
        /// (status, audit), which does not hold the domain up.
        session_id: Option<String>,
        /// The Session Anchor's ed25519 public key, hex.
        session_key: Option<String>,
        pid: u32,
        /// What the session is for, shown by `status` (e.g. "shell").
        purpose: String,
        /// A human at a terminal can answer escalation prompts.
        interactive: bool,
    },
    /// The human's answer to a `Prompt`.
    Decision {
        request_id: String,
        verdict: crate::coordinator::escalation::Verdict,
    },
    Status,
    Audit,
    Verify,
    /// Tear the domain down now, whoever is attached.
    Down,
    /// `doctor --sandbox` starts the self-test: its probe of the Escalation
    /// Socket (a handshake without a certificate) is the self-test's, not a
    /// refusal to audit. Only the user reaches this socket, never the agent.
    SelfTestStart,
    /// The self-test ended, with the names of the checks that failed; the
    /// coordinator audits a `self-test` record.
    SelfTestEnd {
        failed: Vec<String>,
    },
    /// Save the running sandbox, memory and processes, as checkpoint
    /// `name` (its time when `None`); answered `Checkpointed` or `Error`.
    Checkpoint {
        name: Option<String>,
    },
    /// Allow (or deny) egress to `target` (a CIDR, an address or a host
    /// name pattern) in the running domain. The coordinator applies changes
    /// one at a time, audits each (`policy-change`) and answers
    /// `PolicyChanged` or `PolicyRefused`.
    PolicyChange {
        target: String,
        allow: bool,
        /// Kept with the rule, shown beside it (e.g. "lazaret net allow
        /// (live)").
        origin: String,
    },
    /// Start a hosted session (decisions.md D14): `argv` runs in the
    /// sandbox's Session Host, in a PTY of this size, and lives on when
    /// this client goes. This connection is attached to it at once.
    /// Answered `SessionStarted`, then its output.
    SessionStart {
        argv: Vec<String>,
        rows: u16,
        cols: u16,
        purpose: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        term: Option<String>,
        /// Keep a spare session like this one at its prompt for the next
        /// start of the same command (a login shell), so that a new tab
        /// does not wait for it to start.
        #[serde(default)]
        warm: bool,
    },
    /// Attach to a hosted session: answered `Screen`, its open prompts,
    /// then its output as it comes.
    Attach {
        session: u32,
    },
    Detach {
        session: u32,
    },
    /// Keys and pastes for a hosted session (base64).
    Input {
        session: u32,
        data: String,
    },
    /// The session's size from now on (the last client to resize sets
    /// it; the others get the screen redrawn at that size).
    Resize {
        session: u32,
        rows: u16,
        cols: u16,
    },
    /// End a hosted session (SIGHUP to its process group).
    EndSession {
        session: u32,
    },
    /// The domain's hosted sessions: answered `Sessions`.
    Sessions,
    /// The domain's approval inbox: every escalation request waiting for
    /// a human, whichever session asked, now and as they come (`Pending`),
    /// and each one's end (`Withdrawn`); with them, the domain's `Status`
    /// now and after each change, and each live policy change
    /// (`PolicyChanged`), so a dashboard never polls. This connection may then answer
    /// any of them with `Decision`: the first answer from any of the
    /// user's clients wins, and the others are told (decisions.md D10,
    /// widened to the user's own host clients by D14).
    Inbox,
}

/// Coordinator to client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum CoordMsg {
    /// Boot progress, before `Welcome`.
    Progress {
        step: String,
    },
    /// Boot progress: the Agent Sandbox runs and is being checked. A
    /// session may start its exec now; its command waits inside until the
    /// self-test passed (`lazaret_escalate::READY_MARKER`).
    SandboxStarted,
    /// The domain is up.
    Welcome {
        domain: DomainStatus,
    },
    Status {
        domain: DomainStatus,
    },
    Audit {
        records: Vec<crate::coordinator::store::AuditRecord>,
    },
    Verified {
        intact: bool,
        records: u64,
        first_bad: Option<u64>,
        why: Option<String>,
    },
    /// Answers `Checkpoint`: where it is kept, and what it is.
    Checkpointed {
        path: String,
        checkpoint: crate::checkpoint::Checkpoint,
    },
    /// Answers `SelfTestStart` (`escalation_probe` is `None`) and
    /// `SelfTestEnd` (what the socket saw of the probe, when it has one).
    SelfTest {
        escalation_probe: Option<String>,
    },
    /// A `PolicyChange` is in force: the sidecar's table after it, each
    /// entry explained by the policy.
    PolicyChanged {
        report: lazaret_sidecar::report::TableReport,
    },
    /// A `PolicyChange` was not made (nothing changed); the text says why
    /// and what to do. `needs_restart`: the running domain cannot take it,
    /// its next start can (what `--save` is for).
    PolicyRefused {
        message: String,
        needs_restart: bool,
    },
    /// The request failed; the text says why and what to do.
    Error {
        message: String,
    },
    /// The domain is being torn down; connect again to start a new one.
    /// `stopped_by`: the `lazaret down` that asked, if one did.
    ShuttingDown {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stopped_by: Option<StoppedBy>,
    },
    /// An escalation request of this session needs its human.
    Prompt {
        prompt: crate::coordinator::escalation::Prompt,
    },
    /// In the approval inbox: a request waiting for a human, of the
    /// session `asked_by` (its purpose, and its hosted number if it lives
    /// in the domain).
    Pending {
        prompt: crate::coordinator::escalation::Prompt,
        asked_by: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hosted: Option<u32>,
    },
    /// What became of a request this session's human approved.
    Outcome {
        outcome: crate::coordinator::escalation::Outcome,
    },
    /// A `Prompt` sent earlier is void (its requester went away): take it
    /// off the screen; a decision for it is ignored.
    Withdrawn {
        request_id: String,
        reason: String,
    },
    /// Something about the domain the human must know, e.g. the sandbox's
    /// certificate could not be renewed.
    Warning {
        message: String,
    },
    /// A `SessionStart` ran: this connection is attached to it.
    SessionStarted {
        session: crate::coordinator::hosted::HostedInfo,
    },
    /// A hosted session's screen as it is now, to draw on a fresh terminal
    /// of `rows` x `cols`: `history` (scrollback and screen as lines),
    /// then `state` (the exact screen, modes and cursor).
    Screen {
        session: u32,
        rows: u16,
        cols: u16,
        history: String,
        state: String,
        /// The coordinator adopted the session from one that died: the
        /// screen holds only what came since (a client that showed it
        /// before keeps what it has).
        #[serde(default)]
        partial: bool,
    },
    /// Bytes a hosted session wrote (base64): untrusted pane output.
    Output {
        session: u32,
        data: String,
    },
    /// A hosted session ended: its exit code, or minus its signal.
    SessionEnded {
        session: u32,
        code: i32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        why: Option<String>,
    },
    Sessions {
        sessions: Vec<crate::coordinator::hosted::HostedInfo>,
    },
}

/// Who stopped a domain: the process that sent `Down`, from the control
/// socket's peer credentials (not from what the client says of itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoppedBy {
    /// Its command line, as `/proc/PID/cmdline` had it.
    pub command: String,
    pub user: String,
    pub pid: u32,
    /// Seconds since the epoch.
    pub at: u64,
}

/// The exit code of `shell`, `exec` and `ui` when someone else stopped the
/// domain under them: neither Lazaret's own failure (125) nor the
/// command's own exit code, which the stop took away.
pub const EXIT_STOPPED: u8 = 122;

impl std::fmt::Display for StoppedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the domain was stopped by `{}` (user {}, pid {}) at {}",
            lazaret_widgets::visible::visible(&self.command),
            self.user,
            self.pid,
            lazaret_sidecar::names::clock(self.at)
        )
    }
}

/// What `lazaret status` shows for a domain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainStatus {
    pub hash: String,
    pub profile: String,
    pub workspace: String,
    pub sandbox: String,
    pub runtime: String,
    pub gvisor: bool,
    pub workspace_mode: String,
    pub sessions: Vec<SessionInfo>,
    /// Seconds since the coordinator started.
    pub uptime: u64,
    pub coordinator_pid: u32,
    /// The failed start-up self-test checks of a sandbox started with
    /// `--allow-degraded`; `None` when it passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
    /// The sandbox's resource limits, for people (`memory 4 GiB, ...`).
    #[serde(default)]
    pub limits: String,
    /// Limits this host does not apply, with why (never silent).
    #[serde(default)]
    pub limit_gaps: Vec<String>,
    /// The sandbox's memory as the watchdog last measured it (bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used: Option<u64>,
    /// The sandbox's memory limit (bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<u64>,
    /// Under runc, what its root file system's writes hold on the host's
    /// disk, as the layer watch last measured it (bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_used: Option<u64>,
    /// What the Network Sidecar refused the sandbox since it started:
    /// packets its table refused and names its resolver refused
    /// (`None` before anything was refused, or without a sidecar log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_refused: Option<u64>,
    /// Sessions that live in the domain (hosted), attached or not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosted: Vec<crate::coordinator::hosted::HostedInfo>,
    /// Found by its containers' labels with no coordinator answering
    /// (`status` fills it; a coordinator never does).
    #[serde(default)]
    pub orphaned: bool,
    /// The break in the domain's audit chain its state store showed when
    /// the coordinator opened it (or an earlier one did): where, why, and
    /// the record that starts the new segment. `None`: the chain's tail
    /// is intact and it never broke.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_break: Option<crate::coordinator::store::ChainBreak>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub session_id: String,
    pub pid: u32,
    pub purpose: String,
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed")]
    Closed,
    #[error("frame of {0} bytes is over the limit")]
    TooLarge(usize),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed message: {0}")]
    Malformed(String),
}

impl From<ProtocolError> for FrameError {
    fn from(e: ProtocolError) -> FrameError {
        match e {
            ProtocolError::Closed | ProtocolError::TruncatedHeader { .. } => FrameError::Closed,
            ProtocolError::Oversized { len, .. } => FrameError::TooLarge(len),
            ProtocolError::Io(e) => FrameError::Io(e),
            ProtocolError::Truncated { .. } => FrameError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                e.to_string(),
            )),
            other => FrameError::Malformed(other.to_string()),
        }
    }
}

/// Writes one frame: a big-endian u32 length, then JSON (the escalation
/// protocol's framing, one implementation for both sockets).
pub async fn write_frame<W, T>(w: &mut W, msg: &T) -> Result<(), FrameError>
where
    W: tokio::io::AsyncWrite + Unpin,
    T: Serialize,
{
    let body = serde_json::to_vec(msg).map_err(|e| FrameError::Malformed(e.to_string()))?;
    Ok(escalate_protocol::write_frame_async(w, &body, MAX_FRAME).await?)
}

/// Reads one frame; `Closed` on a clean end of stream.
pub async fn read_frame<R, T>(r: &mut R) -> Result<T, FrameError>
where
    R: tokio::io::AsyncRead + Unpin,
    T: serde::de::DeserializeOwned,
{
    let body = escalate_protocol::read_frame_async(r, MAX_FRAME).await?;
    serde_json::from_slice(&body).map_err(|e| FrameError::Malformed(e.to_string()))
}

/// The control stream's frames, read so that waiting for one is safe to
/// cancel: inside `tokio::select!`, a frame half-read when another branch
/// wins stays buffered here and is finished by the next call. (Waiting on
/// [`read_frame`] there loses the bytes already read, and the stream goes
/// out of step: a test read a JSON fragment as a 2 GB frame length.)
pub struct FrameReader<R> {
    frames: FramedRead<R, LengthDelimitedCodec>,
}

impl<R> std::fmt::Debug for FrameReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameReader")
            .field("buffered", &self.frames.read_buffer().len())
            .finish()
    }
}

impl<R: tokio::io::AsyncRead + Unpin> FrameReader<R> {
    pub fn new(r: R) -> Self {
        let codec = LengthDelimitedCodec::builder()
            .big_endian()
            .length_field_length(4)
            .max_frame_length(MAX_FRAME)
            .new_codec();
        FrameReader {
            frames: FramedRead::new(r, codec),
        }
    }

    /// The next whole message; `Closed` on a clean end of stream.
    pub async fn next<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, FrameError> {
        use futures_util::StreamExt;
        match self.frames.next().await {
            None => Err(FrameError::Closed),
            Some(Ok(body)) => {
                serde_json::from_slice(&body).map_err(|e| FrameError::Malformed(e.to_string()))
            }
            Some(Err(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
                // The codec's only InvalidData is a length over the limit.
                Err(FrameError::TooLarge(MAX_FRAME + 1))
            }
            Some(Err(e)) => Err(FrameError::Io(e)),
        }
    }

    pub fn get_ref(&self) -> &R {
        self.frames.get_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// What the coordinator's session loop does: wait for the client's
    /// next frame in a `select!` beside a busy other branch (output, news
    /// for the human), while the client sends a large frame in small
    /// pieces. `reader` gets the chance to lose a half-read frame every
    /// time the other branch wins. Gives the messages read in order, or
    /// the first error.
    async fn interleaved<F, Fut>(mut read: F) -> Result<Vec<ClientMsg>, FrameError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<ClientMsg, FrameError>>,
    {
        let mut got = Vec::new();
        let mut tick = tokio::time::interval(std::time::Duration::from_micros(200));
        while got.len() < 3 {
            tokio::select! {
                m = read() => got.push(m?),
                _ = tick.tick() => {}
            }
        }
        Ok(got)
    }

    fn big_decision(n: usize) -> ClientMsg {
        ClientMsg::Decision {
            request_id: format!("r-{n}"),
            verdict: crate::coordinator::escalation::Verdict::Edit {
                command: "x".repeat(100_000),
            },
        }
    }

    /// Writes three large frames, a few KiB at a time with pauses.
    async fn trickle(mut w: tokio::io::DuplexStream) {
        for n in 0..3 {
            let body = serde_json::to_vec(&big_decision(n)).unwrap();
            let mut frame = (body.len() as u32).to_be_bytes().to_vec();
            frame.extend_from_slice(&body);
            for chunk in frame.chunks(4096) {
                w.write_all(chunk).await.unwrap();
                tokio::task::yield_now().await;
                tokio::time::sleep(std::time::Duration::from_micros(50)).await;
            }
        }
    }

    #[tokio::test]
    async fn a_frame_cut_by_another_branch_is_not_lost() {
        let (a, b) = tokio::io::duplex(8192);
        let writer = tokio::spawn(trickle(a));
        let reader = std::sync::Arc::new(tokio::sync::Mutex::new(FrameReader::new(b)));
        let got = interleaved(|| {
            let reader = reader.clone();
            async move { reader.lock().await.next::<ClientMsg>().await }
        })
        .await
        .expect("every frame read whole");
        writer.await.unwrap();
        assert_eq!(got, (0..3).map(big_decision).collect::<Vec<_>>());

        // The same through the plain reader loses bytes and goes out of step.
        let (a, b) = tokio::io::duplex(8192);
        let writer = tokio::spawn(trickle(a));
        let b = std::sync::Arc::new(tokio::sync::Mutex::new(b));
        let old = interleaved(|| {
            let b = b.clone();
            async move { read_frame::<_, ClientMsg>(&mut *b.lock().await).await }
        })
        .await;
        writer.abort();
        assert!(
            old.as_ref().map_or(true, |got| got
                != &(0..3).map(big_decision).collect::<Vec<_>>()),
            "the plain reader kept step: the test does not exercise cancellation"
        );
    }

    #[tokio::test]
    async fn the_frame_reader_refuses_what_read_frame_refuses() {
        let (mut a, b) = tokio::io::duplex(1 << 16);
        let mut r = FrameReader::new(b);
        a.write_all(&(u32::MAX).to_be_bytes()).await.unwrap();
        assert!(matches!(
            r.next::<ClientMsg>().await,
            Err(FrameError::TooLarge(_))
        ));
        let (mut a, b) = tokio::io::duplex(1 << 16);
        let mut r = FrameReader::new(b);
        write_raw(&mut a, br#"{"type":"nonsense"}"#).await;
        assert!(matches!(
            r.next::<ClientMsg>().await,
            Err(FrameError::Malformed(_))
        ));
        drop(a);
        assert!(matches!(
            r.next::<ClientMsg>().await,
            Err(FrameError::Closed)
        ));
    }

    /// One frame of `body` as it is, unchecked.
    async fn write_raw(a: &mut tokio::io::DuplexStream, body: &[u8]) {
        a.write_all(&(body.len() as u32).to_be_bytes())
            .await
            .unwrap();
        a.write_all(body).await.unwrap();
    }

    /// A policy change and both its answers cross the socket whole, read
    /// the way the coordinator and the client read them; a change with a
    /// field the coordinator does not know is refused, not half-applied.
    #[tokio::test]
    async fn policy_change_round_trips() {
        let (mut a, b) = tokio::io::duplex(1 << 16);
        let mut r = FrameReader::new(b);
        let ask = ClientMsg::PolicyChange {
            target: "192.0.2.7/32".into(),
            allow: true,
            origin: "lazaret net allow (live)".into(),
        };
        write_frame(&mut a, &ask).await.unwrap();
        assert_eq!(r.next::<ClientMsg>().await.unwrap(), ask);
        let report = lazaret_sidecar::report::TableReport {
            gateway_table: 202,
            warnings: vec!["the table after the change".into()],
            ..Default::default()
        };
        for answer in [
            CoordMsg::PolicyChanged { report },
            CoordMsg::PolicyRefused {
                message: "needs a restart".into(),
                needs_restart: true,
            },
        ] {
            write_frame(&mut a, &answer).await.unwrap();
            assert_eq!(r.next::<CoordMsg>().await.unwrap(), answer);
        }
        write_raw(
            &mut a,
            br#"{"type":"policy_change","target":"0.0.0.0/0","allow":true,"origin":"x","skip_audit":true}"#,
        )
        .await;
        assert!(matches!(
            r.next::<ClientMsg>().await,
            Err(FrameError::Malformed(_))
        ));
    }

    #[tokio::test]
    async fn frames_round_trip_and_refuse_garbage() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let msg = ClientMsg::Hello {
            version: PROTOCOL_VERSION,
            session_id: Some("s".into()),
            session_key: None,
            pid: 1,
            purpose: "shell".into(),
            interactive: true,
        };
        write_frame(&mut a, &msg).await.unwrap();
        assert_eq!(read_frame::<_, ClientMsg>(&mut b).await.unwrap(), msg);
        a.write_all(&(u32::MAX).to_be_bytes()).await.unwrap();
        assert!(matches!(
            read_frame::<_, ClientMsg>(&mut b).await,
            Err(FrameError::TooLarge(_))
        ));
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let junk = br#"{"type":"hello","version":1,"session_id":null,"session_key":null,"pid":1,"purpose":"x","interactive":false,"admin":true}"#;
        a.write_all(&(junk.len() as u32).to_be_bytes())
            .await
            .unwrap();
        a.write_all(junk).await.unwrap();
        assert!(matches!(
            read_frame::<_, ClientMsg>(&mut b).await,
            Err(FrameError::Malformed(_))
        ));
        drop(a);
        assert!(matches!(
            read_frame::<_, ClientMsg>(&mut b).await,
            Err(FrameError::Closed)
        ));
    }
}
