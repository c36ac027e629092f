//! The real `lazaret-escalate session-host` process, started the way a
//! careless parent would start it: with SIGHUP, SIGINT and SIGQUIT ignored
//! (what `nohup` and a non-interactive shell's background jobs hand on).
//! Its sessions still start with every signal at its default, so a hang-up
//! ends them and Ctrl-C reaches their commands.

use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use lazaret_escalate::session_host::{Frame, Spawn, kind, read_frame};

fn spawn(conn: &mut UnixStream, id: u32, script: &str) {
    let spawn = Spawn {
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: vec![],
        rows: 24,
        cols: 80,
        spare: false,
    };
    let body = serde_json::to_vec(&spawn).unwrap();
    conn.write_all(&Frame::new(kind::SPAWN, id, body).encode())
        .unwrap();
}

/// The next frame of `session` of one of `kinds`; a read that waits 30 s
/// fails the test instead of hanging it.
fn next(conn: &mut UnixStream, session: u32, kinds: &[u8]) -> Frame {
    loop {
        let f = read_frame(conn)
            .expect("no frame within 30 s")
            .expect("the host hung up");
        if f.session == session && kinds.contains(&f.kind) {
            return f;
        }
    }
}

#[test]
fn sessions_start_with_default_signals_whatever_the_host_inherited() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let mut host = Command::new(env!("CARGO_BIN_EXE_lazaret-escalate"));
    host.args(["session-host", path.to_str().unwrap(), "tok"]);
    // SAFETY: between fork and exec only signal(2), async-signal-safe.
    #[allow(unsafe_code)]
    unsafe {
        host.pre_exec(|| {
            for sig in [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT] {
                libc::signal(sig, libc::SIG_IGN);
            }
            Ok(())
        });
    }
    let mut host = host.spawn().unwrap();
    let (mut conn, _) = listener.accept().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let hello = read_frame(&mut conn).unwrap().unwrap();
    assert_eq!(hello.kind, kind::HELLO);

    // What the session's shell ignores: nothing.
    spawn(&mut conn, 1, "grep '^SigIgn' /proc/$$/status");
    let mut out = Vec::new();
    loop {
        let f = next(&mut conn, 1, &[kind::OUTPUT, kind::EXITED]);
        if f.kind == kind::EXITED {
            break;
        }
        out.extend_from_slice(&f.payload);
    }
    let out = String::from_utf8_lossy(&out);
    let ignored = out
        .trim()
        .strip_prefix("SigIgn:")
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or_else(|| panic!("no SigIgn line: {out}"));
    // The standard signals (1 to 31; the C library keeps some real-time
    // ones for itself).
    assert_eq!(
        ignored & 0x7fff_ffff,
        0,
        "the session inherited ignored signals: {out}"
    );

    // A hang-up ends a session.
    spawn(&mut conn, 2, "exec sleep 600");
    assert_eq!(next(&mut conn, 2, &[kind::SPAWNED]).kind, kind::SPAWNED);
    let hup = libc::SIGHUP.to_be_bytes();
    conn.write_all(&Frame::new(kind::SIGNAL, 2, hup.to_vec()).encode())
        .unwrap();
    let ended = next(&mut conn, 2, &[kind::EXITED]);
    let code = i32::from_be_bytes(ended.payload[..4].try_into().unwrap());
    assert_eq!(code, -libc::SIGHUP, "the hang-up did not end it");

    drop(conn);
    assert!(host.wait().unwrap().success());
}
