//! The Session Host: the one process inside an Agent Sandbox that holds
//! the domain's sessions (decisions.md D14). It runs each session's
//! command in a PTY of the sandbox and carries its bytes to and from the
//! Session Coordinator over one UNIX socket, [`SOCKET_PATH`].
//!
//! It is inside the agent's reach and holds no authority: it gets no
//! escalation credential and decides nothing; what it sends is pane output
//! the host treats as untrusted, and a session it is asked to start could
//! as well have been started by the agent.
//!
//! Wire: frames of `[u32 length][u8 kind][u32 session][payload]`, the
//! length (big-endian, like every number here) counting what follows it.
//! The coordinator reads them with a length-delimited codec.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The socket inside the sandbox (the host creates it before the start).
pub const SOCKET_PATH: &str = "/run/lazaret/sessions.sock";
/// Its name in the host's escalation folder.
pub const SOCKET_NAME: &str = "sessions.sock";
/// Where the sandbox's init reads the token of the Session Host it starts
/// (the coordinator writes it into the host's escalation folder, then
/// sends init SIGUSR1).
pub const TOKEN_PATH: &str = "/run/lazaret/session-host.token";
/// Its name in the host's escalation folder.
pub const TOKEN_NAME: &str = "session-host.token";
/// The largest frame either side sends or accepts.
pub const MAX_FRAME: usize = 256 * 1024;
/// Output is read and sent in pieces of at most this much.
pub const CHUNK: usize = 32 * 1024;
/// Sessions one host runs at once.
pub const MAX_SESSIONS: usize = 64;

/// Frame kinds. Host to coordinator below 16, coordinator to host above.
pub mod kind {
    /// Payload: the token the host was started with.
    pub const HELLO: u8 = 1;
    /// Payload: bytes the session's PTY gave.
    pub const OUTPUT: u8 = 2;
    /// Payload: i32, the exit code, or minus the signal that ended it.
    pub const EXITED: u8 = 3;
    /// Payload: UTF-8, why the session could not start.
    pub const SPAWN_FAILED: u8 = 4;
    /// Payload: u32, the session's process id in the sandbox.
    pub const SPAWNED: u8 = 5;
    /// After HELLO on a reconnection: a session that runs. Payload: JSON
    /// [`Live`].
    pub const LIVE: u8 = 6;
    /// Payload: u8, 1 when another process group than the session's own
    /// holds its terminal's foreground (its shell runs a command), 0 when
    /// its own does (the shell waits at its prompt). Sent when it changes.
    pub const FOREGROUND: u8 = 7;
    /// Payload: JSON [`Spawn`].
    pub const SPAWN: u8 = 16;
    /// Payload: bytes for the session's PTY.
    pub const INPUT: u8 = 17;
    /// Payload: u16 rows, u16 columns.
    pub const RESIZE: u8 = 18;
    /// Payload: i32, a signal for the session's process group.
    pub const SIGNAL: u8 = 19;
    /// No payload: a spare session is a session like the others from now
    /// on (a client asked for one like it).
    pub const CLAIM: u8 = 20;
    /// No payload: let go of this connection and connect again only when
    /// woken (SIGUSR2, which the sandbox's init passes on): a checkpoint
    /// cannot save a connected socket to the host.
    pub const HOLD: u8 = 21;
}

/// What the coordinator asks the host to start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spawn {
    pub argv: Vec<String>,
    /// Set on top of the host's own environment (the container's).
    pub env: Vec<(String, String)>,
    pub rows: u16,
    pub cols: u16,
    /// Started before anyone asked, so that the next new tab finds its
    /// shell already at its prompt: not announced to a coordinator that
    /// replaces this one (nobody opened it), hung up instead, and it does
    /// not keep the host waiting for one.
    #[serde(default)]
    pub spare: bool,
}

/// A session the host still runs when a (new) coordinator connects: the
/// coordinator adopts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Live {
    pub argv: Vec<String>,
    /// Its `LAZARET_SESSION_ID`, if it was started with one.
    pub session_id: Option<String>,
    pub rows: u16,
    pub cols: u16,
    pub pid: u32,
}

/// How long a new host keeps connecting while its coordinator has said
/// nothing yet (the agent can crowd the socket and push a connection out
/// before its greeting is read).
pub const FIRST_CONTACT: Duration = Duration::from_secs(15);

/// How long the host waits for a coordinator after its connection ended,
/// while sessions run (a coordinator that died is replaced within this).
pub const RECONNECT_DEADLINE: Duration = Duration::from_secs(120);

/// One frame, without its length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: u8,
    pub session: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    pub fn new(kind: u8, session: u32, payload: impl Into<Vec<u8>>) -> Frame {
        Frame {
            kind,
            session,
            payload: payload.into(),
        }
    }

    /// The frame with its length in front, ready to write.
    pub fn encode(&self) -> Vec<u8> {
        let len = 5 + self.payload.len();
        let mut out = Vec::with_capacity(4 + len);
        out.extend_from_slice(&(len as u32).to_be_bytes());
        out.push(self.kind);
        out.extend_from_slice(&self.session.to_be_bytes());
        out.extend_from_slice(&self.payload);
        out
    }

    /// A frame from what follows its length; `None` if it is too short.
    pub fn decode(body: &[u8]) -> Option<Frame> {
        if body.len() < 5 {
            return None;
        }
        Some(Frame {
            kind: body[0],
            session: u32::from_be_bytes(body[1..5].try_into().ok()?),
            payload: body[5..].to_vec(),
        })
    }
}

/// Reads one whole frame; `Ok(None)` at the end of the stream.
pub fn read_frame(r: &mut impl Read) -> std::io::Result<Option<Frame>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if !(5..=MAX_FRAME).contains(&len) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {len} bytes"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(Frame::decode(&body))
}

/// The end of a process as the wire says it.
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => -s,
        _ => -1,
    }
}

/// The connection to the coordinator, replaced when a new one connects;
/// `None` between the two (output is then dropped: the session's screen
/// is the coordinator's, and a new one starts from what follows).
type Writer = Arc<Mutex<Option<UnixStream>>>;

fn send(w: &Writer, frame: &Frame) -> std::io::Result<()> {
    let bytes = frame.encode();
    let mut w = w
        .lock()
        .map_err(|_| std::io::Error::other("writer poisoned"))?;
    match w.as_mut() {
        Some(stream) => stream.write_all(&bytes),
        None => Err(std::io::Error::from(std::io::ErrorKind::NotConnected)),
    }
}

struct Session {
    argv: Vec<String>,
    session_id: Option<String>,
    size: (u16, u16),
    master: Arc<OwnedFd>,
    /// To the session's own writer thread: a command that stops reading
    /// blocks only its own input, never the host.
    input: std::sync::mpsc::SyncSender<Vec<u8>>,
    pid: u32,
    spare: bool,
    /// The session's Foreground Witness, when one could be started.
    witness: Option<Arc<OwnedFd>>,
}

/// Pieces of input queued per session before more are dropped.
const INPUT_QUEUE: usize = 256;

/// Runs the host: connects, greets with `token`, and serves the
/// coordinator. When the connection ends while sessions run, it connects
/// again (a coordinator that died is replaced) and announces them; with
/// none running, or no coordinator within [`RECONNECT_DEADLINE`], every
/// session is hung up (SIGHUP to its process group) and the host exits.
pub fn run(socket: &str, token: &str) -> Result<(), String> {
    // SIGUSR2 wakes a held host: blocked here, before any thread starts
    // (they inherit the mask), and waited for where the host is held.
    let wake = nix::sys::signal::SigSet::from(nix::sys::signal::Signal::SIGUSR2);
    wake.thread_block()
        .map_err(|e| format!("cannot block SIGUSR2: {e}"))?;
    let held = std::sync::atomic::AtomicBool::new(false);
    let sessions: Arc<Mutex<HashMap<u32, Session>>> = Arc::default();
    let writer: Writer = Arc::default();
    let (poke, pokes) = std::sync::mpsc::channel();
    {
        let (writer, sessions) = (writer.clone(), sessions.clone());
        std::thread::spawn(move || watch_foreground(&pokes, &writer, &sessions));
    }
    let started = Instant::now();
    // Until the coordinator has said anything, a closed connection may be
    // the agent's crowd of connections pushing this one out: try again.
    let mut heard = false;
    let mut first = true;
    let result = loop {
        let stream = match connect(socket, first, &sessions) {
            Ok(s) => s,
            Err(e) => break Err(e),
        };
        first = false;
        let greeted = (|| -> std::io::Result<()> {
            *writer
                .lock()
                .map_err(|_| std::io::Error::other("writer poisoned"))? = Some(stream.try_clone()?);
            send(&writer, &Frame::new(kind::HELLO, 0, token.as_bytes()))?;
            hang_up_spares(&sessions);
            let live: Vec<(u32, Live)> = sessions
                .lock()
                .map(|all| {
                    all.iter()
                        .filter(|(_, s)| !s.spare)
                        .map(|(id, s)| {
                            let live = Live {
                                argv: s.argv.clone(),
                                session_id: s.session_id.clone(),
                                rows: s.size.0,
                                cols: s.size.1,
                                pid: s.pid,
                            };
                            (*id, live)
                        })
                        .collect()
                })
                .unwrap_or_default();
            for (id, live) in live {
                let body = serde_json::to_vec(&live).map_err(std::io::Error::other)?;
                send(&writer, &Frame::new(kind::LIVE, id, body))?;
            }
            // The new coordinator learns each session's foreground afresh.
            let _ = poke.send(Poke::Retell);
            Ok(())
        })();
        let ended = match greeted {
            Ok(()) => serve(stream, &writer, &sessions, &poke, &mut heard, &held),
            Err(e) => Err(format!("cannot greet the coordinator: {e}")),
        };
        if let Ok(mut w) = writer.lock() {
            *w = None;
        }
        if held.swap(false, std::sync::atomic::Ordering::SeqCst) {
            // Held for a checkpoint: no socket to the host stays open
            // until the coordinator wakes it (after the save, or in the
            // restored sandbox, however long after).
            let _ = wake.wait();
            continue;
        }
        if !heard && started.elapsed() < FIRST_CONTACT {
            first = true;
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        if let Err(e) = &ended
            && first_failure_is_final(&sessions)
        {
            break Err(e.clone());
        }
        if first_failure_is_final(&sessions) {
            break Ok(());
        }
    };
    if let Ok(all) = sessions.lock() {
        for s in all.values() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(s.pid as i32),
                nix::sys::signal::Signal::SIGHUP,
            );
        }
    }
    result
}

/// Takes every pending signal of `set` (blocked) without waiting.
fn drain(set: &nix::sys::signal::SigSet) {
    let none = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: sigtimedwait reads the set and the timeout, which live for
    // the call, and writes nothing (no siginfo asked for).
    #[allow(unsafe_code)]
    while unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &none) } > 0 {}
}

/// With no session running (spares do not count), a lost connection ends
/// the host.
fn first_failure_is_final(sessions: &Mutex<HashMap<u32, Session>>) -> bool {
    sessions
        .lock()
        .map(|s| s.values().all(|s| s.spare))
        .unwrap_or(true)
}

/// A coordinator that did not start the spares would not know them: they
/// go (their exits reach it as sessions it never had, and are ignored).
fn hang_up_spares(sessions: &Mutex<HashMap<u32, Session>>) {
    if let Ok(all) = sessions.lock() {
        for s in all.values().filter(|s| s.spare) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(s.pid as i32),
                nix::sys::signal::Signal::SIGHUP,
            );
        }
    }
}

/// The first connection must succeed at once; a reconnection is tried
/// until [`RECONNECT_DEADLINE`] while sessions run.
fn connect(
    socket: &str,
    first: bool,
    sessions: &Mutex<HashMap<u32, Session>>,
) -> Result<UnixStream, String> {
    let deadline = Instant::now() + RECONNECT_DEADLINE;
    loop {
        match UnixStream::connect(socket) {
            Ok(s) => return Ok(s),
            Err(e) if first => return Err(format!("cannot connect to {socket}: {e}")),
            Err(e) => {
                if Instant::now() > deadline || first_failure_is_final(sessions) {
                    return Err(format!("no coordinator came back at {socket}: {e}"));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// Serves one connection until it ends; `heard` is set by its first frame.
fn serve(
    mut reader: UnixStream,
    writer: &Writer,
    sessions: &Arc<Mutex<HashMap<u32, Session>>>,
    poke: &Sender<Poke>,
    heard: &mut bool,
    held: &std::sync::atomic::AtomicBool,
) -> Result<(), String> {
    loop {
        let frame = match read_frame(&mut reader) {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(()),
            Err(e) => return Err(format!("the coordinator's connection failed: {e}")),
        };
        *heard = true;
        match frame.kind {
            kind::SPAWN => {
                let id = frame.session;
                let answer = match serde_json::from_slice::<Spawn>(&frame.payload) {
                    Err(e) => Err(Failed::Refused(format!("bad spawn request: {e}"))),
                    Ok(_) if sessions.lock().map(|s| s.len()).unwrap_or(0) >= MAX_SESSIONS => Err(
                        Failed::Refused(format!("{MAX_SESSIONS} sessions run already")),
                    ),
                    Ok(_) if sessions.lock().is_ok_and(|s| s.contains_key(&id)) => {
                        Err(Failed::Refused(format!("session {id} exists")))
                    }
                    Ok(spawn) => start(id, &spawn, writer, sessions, poke),
                };
                let replies = match answer {
                    Ok(pid) => vec![Frame::new(kind::SPAWNED, id, pid.to_be_bytes())],
                    // A program that is not there, or cannot run: the
                    // session ends as a shell's command would (127, 126),
                    // saying why on its screen.
                    Err(Failed::Exec(why, code)) => vec![
                        Frame::new(kind::SPAWNED, id, 0u32.to_be_bytes()),
                        Frame::new(kind::OUTPUT, id, format!("{why}\r\n").into_bytes()),
                        Frame::new(kind::EXITED, id, code.to_be_bytes()),
                    ],
                    Err(Failed::Refused(why)) => {
                        vec![Frame::new(kind::SPAWN_FAILED, id, why.into_bytes())]
                    }
                };
                if let Some(e) = replies.iter().find_map(|r| send(writer, r).err()) {
                    return Err(format!("cannot answer the coordinator: {e}"));
                }
            }
            kind::INPUT => {
                if let Some(tx) = sessions
                    .lock()
                    .ok()
                    .and_then(|s| s.get(&frame.session).map(|s| s.input.clone()))
                {
                    let _ = tx.try_send(frame.payload);
                    let _ = poke.send(Poke::Session(frame.session));
                }
            }
            kind::RESIZE if frame.payload.len() == 4 => {
                let rows = u16::from_be_bytes([frame.payload[0], frame.payload[1]]);
                let cols = u16::from_be_bytes([frame.payload[2], frame.payload[3]]);
                if let Ok(mut all) = sessions.lock()
                    && let Some(s) = all.get_mut(&frame.session)
                {
                    s.size = (rows, cols);
                    set_size(&s.master, rows, cols);
                }
            }
            kind::HOLD => {
                // A wake that came before the hold (the agent can signal
                // init too) does not count: taken before the connection
                // closes, so the coordinator's comes after.
                drain(&nix::sys::signal::SigSet::from(
                    nix::sys::signal::Signal::SIGUSR2,
                ));
                held.store(true, std::sync::atomic::Ordering::SeqCst);
                // The writer's copy of the socket goes too.
                if let Ok(mut w) = writer.lock() {
                    *w = None;
                }
                return Ok(());
            }
            kind::CLAIM => {
                if let Ok(mut all) = sessions.lock()
                    && let Some(s) = all.get_mut(&frame.session)
                {
                    s.spare = false;
                }
            }
            kind::SIGNAL if frame.payload.len() == 4 => {
                let sig = i32::from_be_bytes(frame.payload[..4].try_into().unwrap_or([0; 4]));
                if let Some(pid) = sessions
                    .lock()
                    .ok()
                    .and_then(|s| s.get(&frame.session).map(|s| s.pid))
                    && let Ok(sig) = nix::sys::signal::Signal::try_from(sig)
                {
                    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid as i32), sig);
                }
            }
            _ => {}
        }
    }
}

/// News for the foreground watcher.
enum Poke {
    /// The session had input or output: its foreground may have changed.
    Session(u32),
    /// A new coordinator: tell it every session's foreground again.
    Retell,
}

/// When a session's foreground is looked at after its input or output:
/// soon, and once more (a shell hands a command the terminal a moment
/// after echoing the key that started it, and the command may print
/// nothing).
const FOREGROUND_CHECKS: [Duration; 2] = [Duration::from_millis(50), Duration::from_millis(400)];

/// Tells the coordinator ([`kind::FOREGROUND`]) whether each session's
/// shell runs a command or waits at its prompt: looked at only after the
/// session's input or output (a terminal says nothing when its foreground
/// changes), so an idle host makes no calls.
fn watch_foreground(
    pokes: &Receiver<Poke>,
    writer: &Writer,
    sessions: &Mutex<HashMap<u32, Session>>,
) {
    // Due checks per session (a poke while some are due adds none: output
    // that never stops still gets looked at), and what was told.
    let mut due: HashMap<u32, Vec<Instant>> = HashMap::new();
    let mut told: HashMap<u32, bool> = HashMap::new();
    loop {
        let next = due.values().flatten().min().copied();
        let poke = match next {
            None => pokes.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(at) => pokes.recv_timeout(at.saturating_duration_since(Instant::now())),
        };
        let now = Instant::now();
        match poke {
            Ok(Poke::Session(id)) => {
                due.entry(id)
                    .or_insert_with(|| FOREGROUND_CHECKS.iter().map(|d| now + *d).collect());
            }
            Ok(Poke::Retell) => {
                told.clear();
                if let Ok(all) = sessions.lock() {
                    for id in all.keys() {
                        due.entry(*id).or_insert_with(|| vec![now]);
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        for (id, times) in due.iter_mut() {
            if !times.iter().any(|t| *t <= now) {
                continue;
            }
            times.retain(|t| *t > now);
            // Asked outside the lock: the witness may be slow to answer.
            let witness = sessions.lock().ok().and_then(|all| {
                let s = all.get(id)?;
                Some((s.witness.clone()?, s.pid))
            });
            let busy = witness.and_then(|(w, pid)| Some(ask_foreground(&w)? != pid as i32));
            match busy {
                Some(busy) if told.get(id) != Some(&busy) => {
                    if send(writer, &Frame::new(kind::FOREGROUND, *id, [busy as u8])).is_ok() {
                        told.insert(*id, busy);
                    }
                }
                Some(_) => {}
                // Ended: forget it.
                None => {
                    told.remove(id);
                }
            }
        }
        due.retain(|_, times| !times.is_empty());
    }
}

/// How long the host waits for a Foreground Witness's answer.
const WITNESS_PATIENCE: Duration = Duration::from_millis(500);

/// A session's terminal's foreground process group, as its Foreground
/// Witness tells it; `None` when it cannot (the session ended, or the
/// witness is gone or slow). An answer left over from an earlier question
/// is dropped first, so a late one is never taken for this one.
fn ask_foreground(witness: &OwnedFd) -> Option<i32> {
    use nix::sys::socket::{MsgFlags, recv, send};
    let fd = witness.as_raw_fd();
    let mut answer = [0u8; 4];
    while recv(fd, &mut answer, MsgFlags::MSG_DONTWAIT).is_ok_and(|n| n > 0) {}
    send(fd, &[0], MsgFlags::MSG_NOSIGNAL).ok()?;
    let ready = nix::poll::poll(
        &mut [nix::poll::PollFd::new(
            witness.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )],
        nix::poll::PollTimeout::try_from(WITNESS_PATIENCE).ok()?,
    )
    .ok()?;
    if ready == 0 || recv(fd, &mut answer, MsgFlags::MSG_DONTWAIT).ok()? != 4 {
        return None;
    }
    let pgrp = i32::from_ne_bytes(answer);
    (pgrp > 0).then_some(pgrp)
}

/// Starts the session's Foreground Witness, from the session's first
/// process between fork and exec (after `setsid` and `TIOCSCTTY`): a
/// process of the terminal's session, which may therefore ask the
/// terminal its foreground. The host cannot: gVisor refuses TIOCGPGRP on a
/// PTY master to a process outside the terminal's session (Linux allows
/// it), and its /proc gives no tpgid. The witness is forked through a
/// middle process that leaves at once, so it is no child of the session's
/// command (a shell's `wait` would wait for it); it is in a process group
/// of its own, never the terminal's foreground, so job control leaves it
/// alone.
///
/// # Safety
/// Only between fork and exec of a single-threaded child; `fd` is the
/// witness's end of a SOCK_SEQPACKET pair.
#[allow(unsafe_code)]
unsafe fn fork_witness(fd: std::os::fd::RawFd, tty: &std::ffi::CStr) {
    // SAFETY: fork, waitpid and _exit are async-signal-safe; the witness
    // makes only such calls.
    unsafe {
        match libc::fork() {
            0 => {
                if libc::fork() == 0 {
                    witness(fd, tty);
                }
                libc::_exit(0);
            }
            middle if middle > 0 => {
                let mut status = 0;
                libc::waitpid(middle, &mut status, 0);
            }
            // No witness: the session's state stays unknown.
            _ => {}
        }
    }
}

/// The Foreground Witness: answers each byte from the host with the
/// terminal's (`tty`, opened for each answer: gVisor refuses `/dev/tty`)
/// foreground process group (native-endian i32, -1 when it cannot tell);
/// leaves when the host closes its end or the terminal is no longer its
/// session's. Between answers it holds no descriptor but its socket: not
/// the terminal (the host sees the session end when its command's last
/// holder of the terminal closes it), not the host's (its connection to
/// the coordinator, other sessions' terminals).
///
/// # Safety
/// As [`fork_witness`].
#[allow(unsafe_code)]
unsafe fn witness(fd: std::os::fd::RawFd, tty: &std::ffi::CStr) -> ! {
    // SAFETY: async-signal-safe calls only, on memory of this frame.
    unsafe {
        libc::setpgid(0, 0);
        for sig in [
            libc::SIGHUP,
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
            libc::SIGPIPE,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
        let fd = fd as libc::c_uint;
        let closed = fd == 0 || libc::syscall(libc::SYS_close_range, 0, fd - 1, 0) == 0;
        if !closed || libc::syscall(libc::SYS_close_range, fd + 1, libc::c_uint::MAX, 0) != 0 {
            for other in 0..65536 {
                if other != fd {
                    libc::close(other as libc::c_int);
                }
            }
        }
        libc::prctl(libc::PR_SET_NAME, c"lz-fg-witness".as_ptr());
        let fd = fd as libc::c_int;
        let mut byte = [0u8; 1];
        loop {
            let n = libc::read(fd, byte.as_mut_ptr().cast(), 1);
            if n == 0 || (n < 0 && *libc::__errno_location() != libc::EINTR) {
                libc::_exit(0);
            }
            if n < 0 {
                continue;
            }
            let term = libc::open(
                tty.as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            );
            let pgrp: i32 = if term >= 0 {
                let p = libc::tcgetpgrp(term);
                libc::close(term);
                p
            } else {
                -1
            };
            libc::write(fd, (&raw const pgrp).cast(), 4);
            if pgrp < 0 {
                libc::_exit(0);
            }
        }
    }
}

fn set_size(master: &OwnedFd, rows: u16, cols: u16) {
    let ws = libc::winsize {
        ws_row: rows.max(1),
        ws_col: cols.max(1),
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from the pointer, which lives
    // for the call.
    #[allow(unsafe_code)]
    unsafe {
        libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &ws);
    }
}

/// A PTY's two ends.
struct Pty {
    master: OwnedFd,
    slave: OwnedFd,
    /// The terminal's path, `/dev/pts/N`.
    name: std::ffi::CString,
}

/// Opens a PTY of this size with both ends close-on-exec from the start:
/// openpty(3) leaves them inheritable, and a session started before the
/// flag was set would hold this one's master (its keys and screen) and
/// its terminal (so its end would not be seen until the other's).
fn open_pty(rows: u16, cols: u16) -> nix::Result<Pty> {
    use nix::fcntl::OFlag;
    let master = nix::pty::posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    nix::pty::grantpt(&master)?;
    nix::pty::unlockpt(&master)?;
    let name = nix::pty::ptsname_r(&master)?;
    let slave = nix::fcntl::open(
        name.as_str(),
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    let master = OwnedFd::from(master);
    set_size(&master, rows, cols);
    let name = std::ffi::CString::new(name).map_err(|_| nix::errno::Errno::EINVAL)?;
    Ok(Pty {
        master,
        slave,
        name,
    })
}

/// Why a session did not start.
enum Failed {
    /// Its program could not be run: why, and the exit code a shell gives.
    Exec(String, i32),
    /// The host could not or would not start it.
    Refused(String),
}

/// Starts one session: its command in a new PTY, as the leader of a new
/// session with the PTY as its controlling terminal; a thread carries its
/// output and then its exit.
fn start(
    id: u32,
    spawn: &Spawn,
    writer: &Writer,
    sessions: &Arc<Mutex<HashMap<u32, Session>>>,
    poke: &Sender<Poke>,
) -> Result<u32, Failed> {
    let Some((program, args)) = spawn.argv.split_first() else {
        return Err(Failed::Refused("no command".into()));
    };
    let pty = open_pty(spawn.rows.max(1), spawn.cols.max(1))
        .map_err(|e| Failed::Refused(format!("cannot open a PTY: {e}")))?;
    let stdio = |fd: &OwnedFd| -> Result<Stdio, Failed> {
        Ok(Stdio::from(fd.try_clone().map_err(|e| {
            Failed::Refused(format!("cannot share the PTY: {e}"))
        })?))
    };
    let witness = nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
    .ok();
    let witness_end = witness.as_ref().map(|(_, theirs)| theirs.as_raw_fd());
    let tty = pty.name.clone();
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(spawn.env.iter().map(|(k, v)| (k, v)))
        .stdin(stdio(&pty.slave)?)
        .stdout(stdio(&pty.slave)?)
        .stderr(stdio(&pty.slave)?);
    // SAFETY: between fork and exec the child makes only async-signal-safe
    // system calls (signal, sigprocmask, setsid, ioctl, fork).
    #[allow(unsafe_code)]
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            // A terminal's command starts with every signal at its
            // default, however the host was started: an ignored signal
            // survives exec, and a host whose parent ignored SIGHUP or
            // SIGINT (`nohup`, a shell's background job) would hand that
            // on, so a hang-up would not end a session, nor Ctrl-C its
            // command. (std resets the signal mask itself.)
            for sig in 1..=64 {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
            // And none blocked: the sandbox's init, whose child the host
            // is, blocks the signals it waits for, and a blocked mask
            // survives exec too (SIGINT blocked: Ctrl-C would not reach a
            // command).
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            if libc::ioctl(0, libc::TIOCSCTTY as _, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(fd) = witness_end {
                fork_witness(fd, &tty);
            }
            Ok(())
        });
    }
    let mut child: Child = cmd.spawn().map_err(|e| {
        let why = format!("lazaret: cannot start `{program}`: {e}");
        match e.kind() {
            std::io::ErrorKind::NotFound => Failed::Exec(why, 127),
            std::io::ErrorKind::PermissionDenied => Failed::Exec(why, 126),
            _ => Failed::Refused(why),
        }
    })?;
    drop(cmd);
    drop(pty.slave);
    let witness = witness.map(|(ours, _theirs)| Arc::new(ours));
    let pid = child.id();
    let master = Arc::new(pty.master);
    let (input, queued) = std::sync::mpsc::sync_channel::<Vec<u8>>(INPUT_QUEUE);
    let typed_into = master.clone();
    std::thread::spawn(move || {
        for bytes in queued {
            let mut rest = &bytes[..];
            while !rest.is_empty() {
                match nix::unistd::write(&*typed_into, rest) {
                    Ok(n) => rest = &rest[n..],
                    Err(nix::errno::Errno::EINTR) => {}
                    Err(_) => return,
                }
            }
        }
    });
    sessions
        .lock()
        .map_err(|_| Failed::Refused("sessions poisoned".into()))?
        .insert(
            id,
            Session {
                argv: spawn.argv.clone(),
                session_id: spawn
                    .env
                    .iter()
                    .find(|(k, _)| k == crate::env::SESSION_ID)
                    .map(|(_, v)| v.clone()),
                size: (spawn.rows, spawn.cols),
                master: master.clone(),
                input,
                pid,
                spare: spawn.spare,
                witness,
            },
        );
    let (writer, sessions, poke) = (writer.clone(), sessions.clone(), poke.clone());
    let _ = poke.send(Poke::Session(id));
    std::thread::spawn(move || {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match nix::unistd::read(&*master, &mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    // Without a coordinator the bytes are dropped: the
                    // session must not stop for want of a reader.
                    let _ = send(&writer, &Frame::new(kind::OUTPUT, id, &buf[..n]));
                    let _ = poke.send(Poke::Session(id));
                }
                Err(nix::errno::Errno::EINTR) => continue,
                // EIO: every holder of the PTY's other end has gone.
                Err(_) => break,
            }
        }
        let code = child.wait().map(exit_code).unwrap_or(-1);
        if let Ok(mut s) = sessions.lock() {
            s.remove(&id);
        }
        let _ = send(&writer, &Frame::new(kind::EXITED, id, code.to_be_bytes()));
    });
    Ok(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_refuse_bad_lengths() {
        let f = Frame::new(kind::OUTPUT, 7, b"hello".to_vec());
        let bytes = f.encode();
        assert_eq!(&bytes[..4], &10u32.to_be_bytes());
        assert_eq!(read_frame(&mut &bytes[..]).unwrap(), Some(f));
        assert_eq!(read_frame(&mut &b""[..]).unwrap(), None);
        let huge = ((MAX_FRAME + 1) as u32).to_be_bytes();
        assert!(read_frame(&mut &huge[..]).is_err());
        let short = 2u32.to_be_bytes();
        assert!(read_frame(&mut &short[..]).is_err());
    }

    /// A real PTY session through a real socket pair: output, a resize
    /// the command sees, input, and its exit code.
    #[test]
    fn a_session_runs_in_a_pty_and_reports_its_exit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let p = path.to_str().unwrap().to_string();
        let host = std::thread::spawn(move || run(&p, "tok"));
        let (mut conn, _) = listener.accept().unwrap();
        let hello = read_frame(&mut conn).unwrap().unwrap();
        assert_eq!(
            (hello.kind, hello.payload.as_slice()),
            (kind::HELLO, &b"tok"[..])
        );
        let spawn = Spawn {
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                "stty size; read x; echo got:$x; exit 3".into(),
            ],
            env: vec![("TERM".into(), "xterm".into())],
            rows: 30,
            cols: 100,
            spare: false,
        };
        let body = serde_json::to_vec(&spawn).unwrap();
        conn.write_all(&Frame::new(kind::SPAWN, 1, body).encode())
            .unwrap();
        // The session's reader runs from its start: its first output (or a
        // word on its foreground) may come before the answer to the spawn
        // (seen under load), as the coordinator allows.
        let mut out = Vec::new();
        let started = loop {
            let f = read_frame(&mut conn).unwrap().unwrap();
            match f.kind {
                kind::OUTPUT => out.extend_from_slice(&f.payload),
                kind::FOREGROUND => {}
                _ => break f,
            }
        };
        assert_eq!(started.kind, kind::SPAWNED, "{started:?}");
        let mut sent = false;
        let code = loop {
            if !sent && String::from_utf8_lossy(&out).contains("30 100") {
                conn.write_all(&Frame::new(kind::INPUT, 1, b"pong\n".to_vec()).encode())
                    .unwrap();
                sent = true;
            }
            let f = read_frame(&mut conn).unwrap().unwrap();
            match f.kind {
                kind::OUTPUT => out.extend_from_slice(&f.payload),
                kind::EXITED => break i32::from_be_bytes(f.payload[..4].try_into().unwrap()),
                kind::FOREGROUND => {}
                k => panic!("unexpected frame {k}"),
            }
        };
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("30 100"), "{text}");
        assert!(text.contains("got:pong"), "{text}");
        assert_eq!(code, 3);
        drop(conn);
        assert_eq!(host.join().unwrap(), Ok(()));
    }

    /// A host running in a thread, connected to a listener of the test's
    /// and greeted.
    fn greeted_host() -> (
        tempfile::TempDir,
        std::os::unix::net::UnixListener,
        UnixStream,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let p = path.to_str().unwrap().to_string();
        std::thread::spawn(move || run(&p, "tok"));
        let (mut conn, _) = listener.accept().unwrap();
        assert_eq!(read_frame(&mut conn).unwrap().unwrap().kind, kind::HELLO);
        (dir, listener, conn)
    }

    /// The next frame that is not news of a foreground.
    fn next_frame(conn: &mut UnixStream) -> Frame {
        loop {
            let f = read_frame(conn).unwrap().unwrap();
            if f.kind != kind::FOREGROUND {
                return f;
            }
        }
    }

    fn spawn_frame(id: u32, script: &str, spare: bool) -> Vec<u8> {
        let spawn = Spawn {
            argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
            env: vec![],
            rows: 24,
            cols: 80,
            spare,
        };
        Frame::new(kind::SPAWN, id, serde_json::to_vec(&spawn).unwrap()).encode()
    }

    /// Spares are not announced to a coordinator that replaces the one
    /// that made them, and are hung up then; a claimed spare is a session
    /// like the others.
    #[test]
    fn spares_are_hung_up_not_announced_after_a_reconnection() {
        let (_dir, listener, mut conn) = greeted_host();
        for (id, script, spare) in [
            (1, "exec sleep 600", false),
            (2, "exec sleep 600", true),
            (3, "exec sleep 600", true),
        ] {
            conn.write_all(&spawn_frame(id, script, spare)).unwrap();
            let f = next_frame(&mut conn);
            assert_eq!((f.kind, f.session), (kind::SPAWNED, id));
        }
        conn.write_all(&Frame::new(kind::CLAIM, 3, Vec::new()).encode())
            .unwrap();
        // The coordinator dies; its replacement is greeted.
        drop(conn);
        let (mut conn, _) = listener.accept().unwrap();
        assert_eq!(read_frame(&mut conn).unwrap().unwrap().kind, kind::HELLO);
        let mut live = Vec::new();
        for _ in 0..2 {
            let f = next_frame(&mut conn);
            assert_eq!(f.kind, kind::LIVE, "{f:?}");
            live.push(f.session);
        }
        live.sort();
        assert_eq!(live, vec![1, 3]);
        // The spare's exit follows (its id unknown to this coordinator).
        let exited = loop {
            let f = next_frame(&mut conn);
            if f.kind != kind::OUTPUT {
                break f;
            }
        };
        // Nothing else ended meanwhile: the first exit is the spare's.
        assert_eq!((exited.kind, exited.session), (kind::EXITED, 2));
        let code = i32::from_be_bytes(exited.payload[..4].try_into().unwrap());
        assert_eq!(code, -(nix::sys::signal::Signal::SIGHUP as i32), "hung up");
        for id in [1, 3] {
            let hup = (nix::sys::signal::Signal::SIGHUP as i32).to_be_bytes();
            conn.write_all(&Frame::new(kind::SIGNAL, id, hup).encode())
                .unwrap();
        }
        let mut ended = Vec::new();
        while ended.len() < 2 {
            let f = read_frame(&mut conn).unwrap().unwrap();
            if f.kind == kind::EXITED {
                ended.push(f.session);
            }
        }
    }

    /// A session's processes hold no other session's PTY: not its master
    /// (its keys and screen), and not its terminal, which would keep the
    /// other's end from being seen until theirs.
    #[test]
    fn sessions_do_not_inherit_each_others_ptys() {
        let (_dir, _listener, mut conn) = greeted_host();
        conn.write_all(&spawn_frame(1, "read x; exit 3", false))
            .unwrap();
        conn.write_all(&spawn_frame(
            2,
            "echo fds: $(readlink /proc/$$/fd/*); exec sleep 600",
            false,
        ))
        .unwrap();
        let mut out = String::new();
        let mut exited = None;
        let mut typed = false;
        while exited.is_none() {
            let f = read_frame(&mut conn).unwrap().unwrap();
            match f.kind {
                kind::OUTPUT if f.session == 2 => {
                    out.push_str(&String::from_utf8_lossy(&f.payload));
                }
                kind::EXITED if f.session == 1 => {
                    exited = Some(i32::from_be_bytes(f.payload[..4].try_into().unwrap()));
                }
                _ => {}
            }
            if !typed && out.contains('\n') {
                conn.write_all(&Frame::new(kind::INPUT, 1, b"x\n".to_vec()).encode())
                    .unwrap();
                typed = true;
            }
        }
        assert_eq!(exited, Some(3), "session 1's end is seen while 2 runs");
        let fds = out
            .lines()
            .find(|l| l.starts_with("fds:"))
            .unwrap()
            .to_string();
        let ptys: std::collections::BTreeSet<&str> = fds
            .split_whitespace()
            .skip(1)
            .filter(|t| t.starts_with("/dev/pt"))
            .collect();
        assert_eq!(ptys.len(), 1, "only its own terminal: {fds}");
        assert!(!fds.contains("ptmx"), "no PTY master: {fds}");
        let hup = (nix::sys::signal::Signal::SIGHUP as i32).to_be_bytes();
        conn.write_all(&Frame::new(kind::SIGNAL, 2, hup).encode())
            .unwrap();
    }

    /// An interactive shell is told idle at its prompt, busy while a
    /// command it started holds the terminal (which printed nothing), and
    /// idle again when the command ends; a new coordinator is told afresh.
    #[test]
    fn a_shell_is_told_busy_while_its_command_runs_and_idle_at_its_prompt() {
        let (_dir, listener, mut conn) = greeted_host();
        let spawn = Spawn {
            argv: vec![
                "bash".into(),
                "--norc".into(),
                "--noprofile".into(),
                "-i".into(),
            ],
            env: vec![("PS1".into(), "ready$ ".into())],
            rows: 24,
            cols: 80,
            spare: false,
        };
        conn.write_all(&Frame::new(kind::SPAWN, 1, serde_json::to_vec(&spawn).unwrap()).encode())
            .unwrap();
        // Reads until the session's foreground is told as `busy`.
        let told = |conn: &mut UnixStream, busy: bool| loop {
            let f = read_frame(conn).unwrap().unwrap();
            assert_ne!(f.kind, kind::EXITED, "{f:?}");
            if f.kind == kind::FOREGROUND {
                assert_eq!(f.session, 1);
                if f.payload == [busy as u8] {
                    return;
                }
            }
        };
        told(&mut conn, false);
        conn.write_all(&Frame::new(kind::INPUT, 1, b"sleep 600\n".to_vec()).encode())
            .unwrap();
        told(&mut conn, true);
        // Ctrl-C ends the command; the shell has the terminal again.
        conn.write_all(&Frame::new(kind::INPUT, 1, b"\x03".to_vec()).encode())
            .unwrap();
        told(&mut conn, false);
        conn.write_all(&Frame::new(kind::INPUT, 1, b"sleep 600\n".to_vec()).encode())
            .unwrap();
        told(&mut conn, true);
        drop(conn);
        let (mut conn, _) = listener.accept().unwrap();
        assert_eq!(read_frame(&mut conn).unwrap().unwrap().kind, kind::HELLO);
        told(&mut conn, true);
        // The session's Foreground Witness: in the shell's session, no
        // child of it, holding nothing but its socket. (Other tests'
        // witnesses may be about, or their zombies: a test's orphans go to
        // this machine's init, which may not reap; in a sandbox, Lazaret's
        // init does.)
        let witnesses = || -> Vec<(u32, String)> {
            let Ok(dir) = std::fs::read_dir("/proc") else {
                return Vec::new();
            };
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|pid| {
                    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                    let (comm, rest) = stat.split_once(") ")?;
                    let session = rest.split(' ').nth(3)?;
                    let leader = std::fs::read_to_string(format!("/proc/{session}/comm")).ok()?;
                    (comm.ends_with("(lz-fg-witness")
                        && !rest.starts_with('Z')
                        && leader.trim() == "bash")
                        .then(|| (pid, rest.to_string()))
                })
                .collect()
        };
        let shell = {
            let all = witnesses();
            assert_eq!(all.len(), 1, "{all:?}");
            let (pid, stat) = &all[0];
            // state ppid pgrp session ...
            let f: Vec<&str> = stat.split(' ').collect();
            assert_eq!(f[2], pid.to_string(), "a process group of its own: {stat}");
            let fds: Vec<_> = std::fs::read_dir(format!("/proc/{pid}/fd"))
                .unwrap()
                .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .collect();
            assert_eq!(fds.len(), 1, "{fds:?}");
            assert!(fds[0].to_string_lossy().starts_with("socket:"), "{fds:?}");
            let session: u32 = f[3].parse().unwrap();
            assert_ne!(f[1], session.to_string(), "a child of the shell: {stat}");
            session
        };
        let hup = (nix::sys::signal::Signal::SIGHUP as i32).to_be_bytes();
        conn.write_all(&Frame::new(kind::SIGNAL, 1, hup).encode())
            .unwrap();
        // It leaves with the session.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !witnesses().is_empty() {
            assert!(Instant::now() < deadline, "left behind (session {shell})");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
