//! A test host on a documentation range (RFC 5737 / RFC 3849), in a network
//! namespace the test makes: a veth pair whose host end carries the range's
//! `.1`, the namespace end the test's addresses. The sandbox reaches it
//! through slirp4netns like any outside address. Before any traffic the
//! host is checked to route the range into the namespace, never off the
//! machine. The namespace runs the test's upstream DNS server (answering
//! from the test's zone, counting every question); TCP listeners are opened
//! in it with [`TestNet::listen`].

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::os::fd::AsFd;
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::{Record, RecordType};

use super::text;

/// The upstream's answers: (lower-case name with the final dot, type).
pub type Zone = fn(&str, RecordType) -> Vec<Record>;

/// What a test host looks like.
pub struct Spec {
    /// Three letters naming the namespace and interfaces (`{tag}{pid}h`
    /// stays within the 15 bytes an interface name may have).
    pub tag: &'static str,
    /// The host end's addresses with their prefix, e.g. `203.0.113.1/24`.
    pub host: &'static [&'static str],
    /// Addresses inside the namespace (each gets the host's prefix length).
    pub inside: Vec<IpAddr>,
    /// Where the upstream DNS server listens (UDP port 53).
    pub dns: Ipv4Addr,
    pub zone: Zone,
}

/// One test host at a time per test binary: its tests share the addresses.
static ONE_TEST_NET: Mutex<()> = Mutex::new(());

/// The test host, torn down on drop.
pub struct TestNet {
    _one: MutexGuard<'static, ()>,
    ns: String,
    host_if: String,
    queries: Arc<Mutex<HashMap<String, u32>>>,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(out.status.success(), "ip {args:?}: {}", text(&out).1);
}

fn prefix_len(cidr: &str) -> &str {
    cidr.rsplit_once('/').map_or("32", |(_, p)| p)
}

impl TestNet {
    pub fn start(spec: &Spec) -> TestNet {
        let one = ONE_TEST_NET.lock().unwrap_or_else(|p| p.into_inner());
        let id = std::process::id() % 100_000;
        let ns = format!("{}{id}", spec.tag);
        let (host_if, ns_if) = (format!("{}{id}h", spec.tag), format!("{}{id}n", spec.tag));
        remove_stale(spec.tag);
        let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        // A namespace still held by a thread of the previous test outlives
        // `netns del`, and its veth pair with it: remove our end by name.
        let _ = Command::new("ip").args(["link", "del", &host_if]).output();
        ip(&["netns", "add", &ns]);
        let net = TestNet {
            _one: one,
            ns: ns.clone(),
            host_if: host_if.clone(),
            queries: Arc::default(),
        };
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if, "netns", &ns,
        ]);
        let (mut v4_len, mut v6_len) = ("24", "64");
        for cidr in spec.host {
            let mut args = vec!["addr", "add", cidr, "dev", &host_if];
            if cidr.contains(':') {
                v6_len = prefix_len(cidr);
                args.push("nodad");
            } else {
                v4_len = prefix_len(cidr);
            }
            ip(&args);
        }
        ip(&["link", "set", &host_if, "up"]);
        for a in &spec.inside {
            let (cidr, nodad) = match a {
                IpAddr::V4(_) => (format!("{a}/{v4_len}"), None),
                IpAddr::V6(_) => (format!("{a}/{v6_len}"), Some("nodad")),
            };
            let mut args = vec!["-n", &ns, "addr", "add", &cidr, "dev", &ns_if];
            args.extend(nodad);
            ip(&args);
        }
        ip(&["-n", &ns, "link", "set", &ns_if, "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        for target in spec.inside.iter().chain([&IpAddr::V4(spec.dns)]) {
            let out = Command::new("ip")
                .args(["route", "get", &target.to_string()])
                .output()
                .unwrap();
            let route = text(&out).0;
            assert!(
                route.contains(&format!("dev {host_if}")),
                "{target} is not routed into the test namespace: {route}"
            );
        }
        let dns = SocketAddr::from((spec.dns, 53));
        let udp = net.inside(move || UdpSocket::bind(dns).unwrap());
        let (queries, zone) = (net.queries.clone(), spec.zone);
        std::thread::spawn(move || serve_dns(&udp, &queries, zone));
        net
    }

    /// Runs `f` on a thread that entered the namespace (sockets it opens
    /// stay in the namespace).
    fn inside<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let ns = self.ns.clone();
        std::thread::spawn(move || {
            let file = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
            nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            f()
        })
        .join()
        .unwrap()
    }

    /// A TCP listener on `addr` inside the namespace.
    pub fn listen(&self, addr: SocketAddr) -> TcpListener {
        self.inside(move || TcpListener::bind(addr).unwrap())
    }

    /// How often the upstream was asked `name` (any type).
    pub fn asked(&self, name: &str) -> u32 {
        self.queries
            .lock()
            .unwrap()
            .get(&format!("{name}."))
            .copied()
            .unwrap_or(0)
    }

    /// Every name the upstream was asked, with the final dot.
    pub fn names_asked(&self) -> Vec<String> {
        let mut v: Vec<String> = self.queries.lock().unwrap().keys().cloned().collect();
        v.sort();
        v
    }
}

/// Removes the test hosts of `tag` whose test process is gone (killed
/// before its drop ran): their host end would keep the range's route, and
/// every later test host of that range would be refused as unrouted. Only
/// names this module makes (`{tag}{pid}`, `{tag}{pid}h`) are touched.
fn remove_stale(tag: &str) {
    // Names carry the pid modulo 100000: any live process of that rest
    // may own one.
    let live: std::collections::HashSet<u32> = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .map(|pid| pid % 100_000)
                .collect()
        })
        .unwrap_or_default();
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    for line in text(&list).0.lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(id) = name.strip_prefix(tag).and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if live.contains(&id) {
            continue;
        }
        let _ = Command::new("ip").args(["netns", "del", name]).output();
        let _ = Command::new("ip")
            .args(["link", "del", &format!("{name}h")])
            .output();
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        // Deleting the namespace removes its end of the veth pair, and so both.
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
        // The namespace (and so the pair) may be held a moment longer by a
        // thread that entered it: delete the host's end too.
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .output();
    }
}

fn serve_dns(udp: &UdpSocket, queries: &Mutex<HashMap<String, u32>>, zone: Zone) {
    serve_udp(udp, |name, qtype| {
        *queries.lock().unwrap().entry(name.to_string()).or_default() += 1;
        (ResponseCode::NoError, zone(name, qtype))
    });
}

/// Answers the DNS queries that reach `udp` with `answer(name, type)`: the
/// answer code and records (the name in lower case, with the final dot).
pub fn serve_udp(
    udp: &UdpSocket,
    mut answer: impl FnMut(&str, RecordType) -> (ResponseCode, Vec<Record>),
) {
    let mut buf = [0u8; 2048];
    while let Ok((n, peer)) = udp.recv_from(&mut buf) {
        let Ok(q) = Message::from_vec(&buf[..n]) else {
            continue;
        };
        let Some(query) = q.queries.first().cloned() else {
            continue;
        };
        let name = query.name().to_ascii().to_ascii_lowercase();
        let mut r = Message::new(q.metadata.id, MessageType::Response, OpCode::Query);
        r.metadata.recursion_desired = q.metadata.recursion_desired;
        r.metadata.recursion_available = true;
        r.queries = q.queries.clone();
        (r.metadata.response_code, r.answers) = answer(&name, query.query_type());
        let _ = udp.send_to(&r.to_vec().unwrap(), peer);
    }
}
