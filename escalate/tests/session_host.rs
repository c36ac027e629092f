//! The real `lazaret-escalate session-host` process, started the way a
//! careless parent would start it: with SIGHUP, SIGINT and SIGQUIT ignored
//! (what `nohup` and a non-interactive shell's background jobs hand on),
//! and SIGINT and SIGHUP blocked (what the sandbox's init waits for).
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
            // Blocked as well, as the sandbox's init blocks what it
            // waits for (a mask survives exec).
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGHUP);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
    let mut host = host.spawn().unwrap();
    let (mut conn, _) = listener.accept().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let hello = read_frame(&mut conn).unwrap().unwrap();
    assert_eq!(hello.kind, kind::HELLO);

    // What the session's shell ignores or blocks: nothing. Read by the
    // process the shell becomes (a mask and ignored signals survive
    // exec): the shell itself blocks every signal for a moment while it
    // waits for a child, which a read of its status could meet (seen once
    // under load).
    spawn(
        &mut conn,
        1,
        "exec grep -E '^Sig(Ign|Blk)' /proc/self/status",
    );
    let mut out = Vec::new();
    loop {
        let f = next(&mut conn, 1, &[kind::OUTPUT, kind::EXITED]);
        if f.kind == kind::EXITED {
            break;
        }
        out.extend_from_slice(&f.payload);
    }
    let out = String::from_utf8_lossy(&out);
    let mask = |name: &str| {
        out.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .unwrap_or_else(|| panic!("no {name} line: {out}"))
    };
    // The standard signals (1 to 31; the C library keeps some real-time
    // ones for itself).
    assert_eq!(
        mask("SigIgn:") & 0x7fff_ffff,
        0,
        "the session inherited ignored signals: {out}"
    );
    assert_eq!(
        mask("SigBlk:") & 0x7fff_ffff,
        0,
        "the session inherited blocked signals: {out}"
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

/// A held host (a checkpoint is being taken) lets go of its connection
/// and holds no socket to the coordinator until SIGUSR2 wakes it; then it
/// connects again and announces its session, which ran on meanwhile.
#[test]
fn a_held_host_lets_go_until_woken_and_keeps_its_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let mut host = Command::new(env!("CARGO_BIN_EXE_lazaret-escalate"))
        .args(["session-host", path.to_str().unwrap(), "tok"])
        .spawn()
        .unwrap();
    let (mut conn, _) = listener.accept().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    assert_eq!(read_frame(&mut conn).unwrap().unwrap().kind, kind::HELLO);
    spawn(&mut conn, 1, "exec cat");
    next(&mut conn, 1, &[kind::SPAWNED]);

    // A wake before the hold (the agent can signal the sandbox's init,
    // which passes it on) is not taken for the coordinator's.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(host.id() as i32),
        nix::sys::signal::Signal::SIGUSR2,
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    conn.write_all(&Frame::new(kind::HOLD, 0, Vec::new()).encode())
        .unwrap();
    // The host's end closes: the coordinator reads the end of the stream.
    loop {
        match read_frame(&mut conn) {
            Ok(None) | Err(_) => break,
            Ok(Some(_)) => {}
        }
    }
    // Held: no socket of the host's is connected to anything, and it does
    // not come back by itself.
    let sockets = || {
        std::fs::read_dir(format!("/proc/{}/fd", host.id()))
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|l| l.to_string_lossy().starts_with("socket:"))
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while sockets() > 1 {
        // (One is the Foreground Witness's pair end.)
        assert!(std::time::Instant::now() < deadline, "still connected");
        std::thread::sleep(Duration::from_millis(20));
    }
    listener.set_nonblocking(true).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(listener.accept().is_err(), "came back before it was woken");
    listener.set_nonblocking(false).unwrap();

    // Woken: it connects again and tells what runs.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(host.id() as i32),
        nix::sys::signal::Signal::SIGUSR2,
    )
    .unwrap();
    let (mut conn, _) = listener.accept().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    assert_eq!(read_frame(&mut conn).unwrap().unwrap().kind, kind::HELLO);
    let live = next(&mut conn, 1, &[kind::LIVE]);
    assert!(String::from_utf8_lossy(&live.payload).contains("cat"));
    // Its keys and screen flow again.
    conn.write_all(&Frame::new(kind::INPUT, 1, b"after-the-hold\n".to_vec()).encode())
        .unwrap();
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("after-the-hold") {
        seen.extend(next(&mut conn, 1, &[kind::OUTPUT]).payload);
    }
    let hup = (libc::SIGHUP).to_be_bytes();
    conn.write_all(&Frame::new(kind::SIGNAL, 1, hup.to_vec()).encode())
        .unwrap();
    next(&mut conn, 1, &[kind::EXITED]);
    drop(conn);
    let _ = host.wait();
}
