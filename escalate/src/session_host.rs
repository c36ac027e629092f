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
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

/// The socket inside the sandbox (the host creates it before the start).
pub const SOCKET_PATH: &str = "/run/lazaret/sessions.sock";
/// Its name in the host's escalation folder.
pub const SOCKET_NAME: &str = "sessions.sock";
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
    /// Payload: JSON [`Spawn`].
    pub const SPAWN: u8 = 16;
    /// Payload: bytes for the session's PTY.
    pub const INPUT: u8 = 17;
    /// Payload: u16 rows, u16 columns.
    pub const RESIZE: u8 = 18;
    /// Payload: i32, a signal for the session's process group.
    pub const SIGNAL: u8 = 19;
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
}

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

type Writer = Arc<Mutex<UnixStream>>;

fn send(w: &Writer, frame: &Frame) -> std::io::Result<()> {
    let bytes = frame.encode();
    w.lock()
        .map_err(|_| std::io::Error::other("writer poisoned"))?
        .write_all(&bytes)
}

struct Session {
    master: Arc<OwnedFd>,
    /// To the session's own writer thread: a command that stops reading
    /// blocks only its own input, never the host.
    input: std::sync::mpsc::SyncSender<Vec<u8>>,
    pid: u32,
}

/// Pieces of input queued per session before more are dropped.
const INPUT_QUEUE: usize = 256;

/// Runs the host until the coordinator's connection ends: then every
/// session is hung up (SIGHUP to its process group) and the host exits.
pub fn run(socket: &str, token: &str) -> Result<(), String> {
    let stream =
        UnixStream::connect(socket).map_err(|e| format!("cannot connect to {socket}: {e}"))?;
    let writer: Writer = Arc::new(Mutex::new(
        stream
            .try_clone()
            .map_err(|e| format!("cannot clone the connection: {e}"))?,
    ));
    send(&writer, &Frame::new(kind::HELLO, 0, token.as_bytes()))
        .map_err(|e| format!("cannot greet the coordinator: {e}"))?;
    let sessions: Arc<Mutex<HashMap<u32, Session>>> = Arc::default();
    let mut reader = stream;
    let result = loop {
        let frame = match read_frame(&mut reader) {
            Ok(Some(f)) => f,
            Ok(None) => break Ok(()),
            Err(e) => break Err(format!("the coordinator's connection failed: {e}")),
        };
        match frame.kind {
            kind::SPAWN => {
                let id = frame.session;
                let answer = match serde_json::from_slice::<Spawn>(&frame.payload) {
                    Err(e) => Err(format!("bad spawn request: {e}")),
                    Ok(_) if sessions.lock().map(|s| s.len()).unwrap_or(0) >= MAX_SESSIONS => {
                        Err(format!("{MAX_SESSIONS} sessions run already"))
                    }
                    Ok(_) if sessions.lock().is_ok_and(|s| s.contains_key(&id)) => {
                        Err(format!("session {id} exists"))
                    }
                    Ok(spawn) => start(id, &spawn, &writer, &sessions),
                };
                let reply = match answer {
                    Ok(pid) => Frame::new(kind::SPAWNED, id, pid.to_be_bytes()),
                    Err(why) => Frame::new(kind::SPAWN_FAILED, id, why.into_bytes()),
                };
                if let Err(e) = send(&writer, &reply) {
                    break Err(format!("cannot answer the coordinator: {e}"));
                }
            }
            kind::INPUT => {
                if let Some(tx) = sessions
                    .lock()
                    .ok()
                    .and_then(|s| s.get(&frame.session).map(|s| s.input.clone()))
                {
                    let _ = tx.try_send(frame.payload);
                }
            }
            kind::RESIZE if frame.payload.len() == 4 => {
                let rows = u16::from_be_bytes([frame.payload[0], frame.payload[1]]);
                let cols = u16::from_be_bytes([frame.payload[2], frame.payload[3]]);
                if let Some(m) = sessions
                    .lock()
                    .ok()
                    .and_then(|s| s.get(&frame.session).map(|s| s.master.clone()))
                {
                    set_size(&m, rows, cols);
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

/// Starts one session: its command in a new PTY, as the leader of a new
/// session with the PTY as its controlling terminal; a thread carries its
/// output and then its exit.
fn start(
    id: u32,
    spawn: &Spawn,
    writer: &Writer,
    sessions: &Arc<Mutex<HashMap<u32, Session>>>,
) -> Result<u32, String> {
    let Some((program, args)) = spawn.argv.split_first() else {
        return Err("no command".into());
    };
    let ws = nix::pty::Winsize {
        ws_row: spawn.rows.max(1),
        ws_col: spawn.cols.max(1),
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(Some(&ws), None).map_err(|e| format!("cannot open a PTY: {e}"))?;
    let stdio = |fd: &OwnedFd| -> Result<Stdio, String> {
        Ok(Stdio::from(
            fd.try_clone()
                .map_err(|e| format!("cannot share the PTY: {e}"))?,
        ))
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(spawn.env.iter().map(|(k, v)| (k, v)))
        .stdin(stdio(&pty.slave)?)
        .stdout(stdio(&pty.slave)?)
        .stderr(stdio(&pty.slave)?);
    // SAFETY: between fork and exec the child makes two system calls,
    // both async-signal-safe.
    #[allow(unsafe_code)]
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            if libc::ioctl(0, libc::TIOCSCTTY as _, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child: Child = cmd
        .spawn()
        .map_err(|e| format!("cannot start `{program}`: {e}"))?;
    drop(cmd);
    drop(pty.slave);
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
        .map_err(|_| "sessions poisoned".to_string())?
        .insert(
            id,
            Session {
                master: master.clone(),
                input,
                pid,
            },
        );
    let (writer, sessions) = (writer.clone(), sessions.clone());
    std::thread::spawn(move || {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match nix::unistd::read(&*master, &mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if send(&writer, &Frame::new(kind::OUTPUT, id, &buf[..n])).is_err() {
                        break;
                    }
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
        };
        let body = serde_json::to_vec(&spawn).unwrap();
        conn.write_all(&Frame::new(kind::SPAWN, 1, body).encode())
            .unwrap();
        let started = read_frame(&mut conn).unwrap().unwrap();
        assert_eq!(started.kind, kind::SPAWNED, "{started:?}");
        let mut out = Vec::new();
        let mut sent = false;
        let code = loop {
            let f = read_frame(&mut conn).unwrap().unwrap();
            match f.kind {
                kind::OUTPUT => out.extend_from_slice(&f.payload),
                kind::EXITED => break i32::from_be_bytes(f.payload[..4].try_into().unwrap()),
                k => panic!("unexpected frame {k}"),
            }
            if !sent && String::from_utf8_lossy(&out).contains("30 100") {
                conn.write_all(&Frame::new(kind::INPUT, 1, b"pong\n".to_vec()).encode())
                    .unwrap();
                sent = true;
            }
        };
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("30 100"), "{text}");
        assert!(text.contains("got:pong"), "{text}");
        assert_eq!(code, 3);
        drop(conn);
        assert_eq!(host.join().unwrap(), Ok(()));
    }
}
