//! What the sidecar's integration tests share: running a test again in
//! private namespaces, the lab (a namespace like the sidecar's slirp4netns
//! one, and a peer namespace that owns every address the tests reach), and
//! `serve` as a child.
#![allow(dead_code)]

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lazaret_sidecar::{PolicySpec, SpecRule, TableReport};
use nix::errno::Errno;
use nix::sched::CloneFlags;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

pub const SIDECAR: &str = env!("CARGO_BIN_EXE_lazaret-sidecar");
pub const INSIDE: &str = "LAZARET_SIDECAR_TEST_INSIDE";
/// Outside: runs `test` again in private namespaces, asserts it passed there,
/// and returns false. Inside: returns true.
pub fn inside_private_namespaces(test: &str) -> bool {
    if std::env::var(INSIDE).as_deref() == Ok(test) {
        return true;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("unshare")
        .args([
            "--user",
            "--map-root-user",
            "--net",
            "--pid",
            "--fork",
            "--mount-proc",
            "--",
        ])
        .arg(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(INSIDE, test)
        .stdin(Stdio::null())
        .output()
        .expect("cannot run unshare");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Figures a test measured, for `cargo test -- --nocapture`.
    // (The first may follow libtest's "test NAME ... " on its line.)
    for line in stdout
        .lines()
        .filter_map(|l| l.find("measured: ").map(|i| &l[i..]))
    {
        eprintln!("{test}: {line}");
    }
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{test} failed inside its namespaces ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    false
}

pub fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

pub fn must(program: &str, args: &[&str]) -> String {
    let out = run(program, args);
    assert!(
        out.status.success(),
        "{program} {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

pub fn ip(args: &str) -> String {
    must("ip", &args.split_whitespace().collect::<Vec<_>>())
}

pub fn ip_json(args: &str) -> Vec<serde_json::Value> {
    let text = ip(&format!("-j {args}"));
    if text.trim().is_empty() {
        return Vec::new();
    }
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("ip -j {args}: {e}: {text}"))
}

pub fn poll_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// The addresses the peer namespace owns (on its loopback, besides the
/// slirp4netns look-alikes 10.0.2.2, fe80::2 and fd00::2 on `veth1`).
pub const PEER_ADDRESSES: &[&str] = &[
    "192.0.2.1/32",
    "192.0.2.129/32",
    "192.0.2.200/32",
    "198.51.100.7/32",
    "198.51.100.8/32",
    "203.0.113.9/32",
    "2001:db8::7/128",
    "2001:db8:1::9/128",
    "3fff::1/128",
];

/// The lab: this namespace plays the sidecar's, a second one the network
/// behind slirp4netns.
pub struct Lab {
    pub peer: Child,
    pub peer_ns: String,
}

impl Lab {
    pub fn new() -> Lab {
        Lab::with_device("veth0")
    }

    /// The lab with the sidecar's end of the link named `dev`.
    pub fn with_device(dev: &str) -> Lab {
        ip("link set lo up");
        // `cat` holds the peer namespace until its stdin closes.
        let peer = Command::new("unshare")
            .args(["--net", "--", "cat"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("cannot start the peer namespace");
        let peer_ns = format!("/proc/{}/ns/net", peer.id());
        let own = std::fs::read_link("/proc/self/ns/net").unwrap();
        poll_until("the peer namespace", Duration::from_secs(5), || {
            std::fs::read_link(&peer_ns).is_ok_and(|ns| ns != own)
        });
        let lab = Lab { peer, peer_ns };
        ip(&format!(
            "link add {dev} type veth peer name veth1 netns {}",
            lab.peer.id()
        ));
        ip(&format!("addr add 10.0.2.100/24 dev {dev}"));
        ip(&format!("-6 addr add fd00::100/64 dev {dev} nodad"));
        ip(&format!("link set {dev} up"));
        lab.peer_ip("link set lo up");
        lab.peer_ip("link set veth1 up");
        lab.peer_ip("addr add 10.0.2.2/24 dev veth1");
        lab.peer_ip("-6 addr add fe80::2/64 dev veth1 nodad");
        lab.peer_ip("-6 addr add fd00::2/64 dev veth1 nodad");
        for a in PEER_ADDRESSES {
            lab.peer_ip(&format!("addr add {a} dev lo"));
        }
        lab.peer_ip("-6 route add default via fd00::100 dev veth1");
        ip("route add default via 10.0.2.2");
        ip(&format!("-6 route add default via fe80::2 dev {dev}"));
        lab
    }

    pub fn peer_ip(&self, args: &str) {
        let mut argv = vec![format!("--net={}", self.peer_ns), "ip".into()];
        argv.extend(args.split_whitespace().map(String::from));
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        must("nsenter", &argv);
    }

    /// A dual-stack TCP listener in the peer namespace that echoes lines.
    pub fn echo_server(&self) -> u16 {
        let ns = File::open(&self.peer_ns).unwrap();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            // Only this thread moves; the socket stays in the peer namespace.
            nix::sched::setns(ns, CloneFlags::CLONE_NEWNET).expect("setns into the peer");
            let listener = TcpListener::bind("[::]:0").unwrap();
            tx.send(listener.local_addr().unwrap().port()).unwrap();
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                thread::spawn(move || {
                    let mut lines = BufReader::new(conn.try_clone().unwrap()).lines();
                    while let Some(Ok(line)) = lines.next() {
                        if conn.write_all(format!("{line}\n").as_bytes()).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        rx.recv_timeout(Duration::from_secs(5))
            .expect("the echo server did not start")
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.peer.kill();
        let _ = self.peer.wait();
    }
}

pub fn spec(allow: &[&str], deny: &[&str], egress: &[&str]) -> PolicySpec {
    let rules = |l: &[&str]| {
        l.iter()
            .map(|s| SpecRule::new(s.parse().unwrap()))
            .collect()
    };
    PolicySpec {
        default_allow: rules(allow),
        default_deny: rules(deny),
        profile: Some("lab".into()),
        allow_egress: rules(egress),
        ..PolicySpec::default()
    }
}

/// Connects, says a line, and returns the echo; or the error and how long
/// the attempt took.
pub fn talk(to: SocketAddr, port: u16) -> Result<String, (Errno, Duration)> {
    let mut to = to;
    to.set_port(port);
    let started = Instant::now();
    let mut stream = TcpStream::connect_timeout(&to, Duration::from_secs(3)).map_err(|e| {
        (
            Errno::from_raw(e.raw_os_error().unwrap_or(0)),
            started.elapsed(),
        )
    })?;
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    stream.write_all(b"hello\n").unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    Ok(line)
}

pub fn sa(s: &str) -> SocketAddr {
    SocketAddr::new(s.parse().unwrap(), 0)
}

/// Starts `serve` and waits for its report.
pub struct Serve {
    pub child: Child,
    pub report: TableReport,
}

impl Serve {
    pub fn start(spec: &PolicySpec) -> Serve {
        Serve::start_with(spec, &[])
    }

    pub fn start_with(spec: &PolicySpec, extra: &[&str]) -> Serve {
        let mut child = Command::new(SIDECAR)
            .args(["serve", "--json", "--policy", &spec.to_json()])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
        if line.is_empty() {
            let _ = child.kill();
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("serve printed no report; stderr: {err}");
        }
        let report = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        Serve { child, report }
    }

    /// SIGTERM; asserts it exits cleanly and soon.
    pub fn stop(mut self) {
        kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM).unwrap();
        let mut status = None;
        poll_until("serve to exit", Duration::from_secs(5), || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        });
        let status = status.unwrap();
        assert!(
            status.success(),
            "serve exited with {status:?} (signal {:?})",
            status.signal()
        );
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Kills the child if the test fails before it ends.
pub struct Reap(pub Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
