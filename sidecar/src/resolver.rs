//! The sandbox's resolver (decisions.md D11), on UDP and TCP in the shared
//! network namespace. For a name the policy allows, the query goes to the
//! upstream on a marked socket (the sidecar's own traffic); from the answer
//! only the records of the asked name and of the CNAME chain that starts at
//! it are kept, their A/AAAA addresses are opened (unless a CIDR rule or the
//! rebinding guard denies them) and only then is the answer returned. Any
//! other name gets REFUSED and never leaves the namespace.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use lazaret_sidecar::names;
use lazaret_sidecar::policy::Verdict;
use std::os::fd::AsRawFd;

use nix::sys::socket::{
    AddressFamily, Backlog, SockFlag, SockType, SockaddrStorage, bind, connect, listen, setsockopt,
    socket, sockopt,
};

use crate::daemon::{Shared, UPSTREAM_MARK, lock};
use crate::error::{Context, Result};

/// UDP queries answered at once (a thread each); more are dropped, as a
/// busy resolver drops them, and the client asks again.
const IN_FLIGHT: usize = 64;
/// TCP connections served at once (a thread each). The agent chooses how
/// many it opens, and these threads are the user's, outside the sandbox's
/// limits: one over the cap is closed at once.
pub const TCP_CONNECTIONS: usize = 32;
/// How long a TCP connection may wait for its next byte.
const TCP_IDLE: Duration = Duration::from_secs(3);
/// How long a TCP connection may live, whatever it sends (a query being
/// answered when it ends is answered first).
const TCP_LIFETIME: Duration = Duration::from_secs(10);
/// Queries answered on one TCP connection; then it is closed.
const TCP_QUERIES: usize = 16;
/// At most one line a this often about refused connections or queries.
const REFUSAL_REPORT: Duration = Duration::from_secs(10);
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest CNAME chain followed.
const MAX_CHAIN: usize = 16;

// IPV6_FREEBIND, which nix does not name.
use nix::{getsockopt_impl, setsockopt_impl, sockopt_impl};
sockopt_impl!(
    Ipv6Freebind,
    Both,
    libc::IPPROTO_IPV6,
    libc::IPV6_FREEBIND,
    bool
);

/// A socket bound to `addr` even while no device has that address (the
/// link's addresses appear only when the host runs `link`).
fn bind_free(addr: SocketAddr, kind: SockType) -> Result<OwnedFd> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let fd = socket(family, kind, SockFlag::SOCK_CLOEXEC, None).context("cannot open a socket")?;
    match addr {
        SocketAddr::V4(_) => setsockopt(&fd, sockopt::IpFreebind, &true),
        SocketAddr::V6(_) => setsockopt(&fd, sockopt::Ipv6V6Only, &true)
            .and_then(|()| setsockopt(&fd, Ipv6Freebind, &true)),
    }
    .context("cannot set IP_FREEBIND")?;
    if kind == SockType::Stream {
        // As std's TcpListener::bind does (not for UDP: a second socket
        // could then share the port).
        setsockopt(&fd, sockopt::ReuseAddr, &true).context("cannot set SO_REUSEADDR")?;
    }
    bind(fd.as_raw_fd(), &SockaddrStorage::from(addr)).context("cannot bind")?;
    if kind == SockType::Stream {
        listen(&fd, Backlog::new(128).unwrap_or(Backlog::MAXCONN)).context("cannot listen")?;
    }
    Ok(fd)
}

pub fn start(addr: SocketAddr, shared: Shared) -> Result<()> {
    let udp = UdpSocket::from(
        bind_free(addr, SockType::Datagram)
            .with_context(|| format!("cannot serve DNS on udp {addr}"))?,
    );
    let tcp = TcpListener::from(
        bind_free(addr, SockType::Stream)
            .with_context(|| format!("cannot serve DNS on tcp {addr}"))?,
    );
    {
        let shared = shared.clone();
        spawn("dns-udp", move || udp_loop(&udp, &shared))
            .context("cannot start the UDP resolver")?;
    }
    spawn("dns-tcp", move || tcp_loop(&tcp, &shared)).context("cannot start the TCP resolver")?;
    Ok(())
}

/// A named thread; failing to start one is an error, not a panic (the
/// user's process limit may be reached by the user's other processes).
fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(drop)
}

/// Counts what was refused and says so at most once per
/// [`REFUSAL_REPORT`] (the agent chooses how often).
struct Refusals {
    what: String,
    count: u64,
    since_report: u64,
    reported: Option<Instant>,
}

impl Refusals {
    fn new(what: String) -> Refusals {
        Refusals {
            what,
            count: 0,
            since_report: 0,
            reported: None,
        }
    }

    fn one(&mut self) {
        self.count += 1;
        self.since_report += 1;
        if self.reported.is_none_or(|t| t.elapsed() >= REFUSAL_REPORT) {
            eprintln!(
                "lazaret-sidecar: {} {} refused since the last report ({} in all)",
                self.since_report, self.what, self.count
            );
            self.since_report = 0;
            self.reported = Some(Instant::now());
        }
    }
}

/// A slot of a bounded count, given back on drop.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(count: &Arc<AtomicUsize>, cap: usize) -> Option<Slot> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < cap).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(count.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn udp_loop(udp: &UdpSocket, shared: &Shared) {
    let busy = Arc::new(AtomicUsize::new(0));
    let mut refused = Refusals::new(format!("UDP queries (over {IN_FLIGHT} in flight)"));
    let mut buf = [0u8; 4096];
    loop {
        let Ok((len, peer)) = udp.recv_from(&mut buf) else {
            continue;
        };
        let Some(slot) = Slot::take(&busy, IN_FLIGHT) else {
            refused.one();
            continue;
        };
        let packet = buf[..len].to_vec();
        let (Ok(udp), shared) = (udp.try_clone(), shared.clone()) else {
            continue;
        };
        let started = spawn("dns-query", move || {
            let _slot = slot;
            if let Some(answer) = handle(&packet, &shared, true) {
                let _ = udp.send_to(&answer, peer);
            }
        });
        if started.is_err() {
            refused.one();
        }
    }
}

fn tcp_loop(tcp: &TcpListener, shared: &Shared) {
    let open = Arc::new(AtomicUsize::new(0));
    let mut refused = Refusals::new(format!("TCP connections (over {TCP_CONNECTIONS} open)"));
    loop {
        let stream = match tcp.accept() {
            Ok((s, _)) => s,
            Err(_) => {
                // Out of descriptors, say: the pending connection stays in
                // the queue, so wait instead of spinning on it.
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        // Over the cap the connection is closed at once: the agent holds no
        // thread of the host's for it.
        let Some(slot) = Slot::take(&open, TCP_CONNECTIONS) else {
            drop(stream);
            refused.one();
            continue;
        };
        let shared = shared.clone();
        let started = spawn("dns-tcp-conn", move || {
            let _slot = slot;
            tcp_client(stream, &shared);
        });
        if started.is_err() {
            refused.one();
        }
    }
}

/// Serves one TCP connection: at most [`TCP_QUERIES`] queries, each byte
/// within [`TCP_IDLE`] of the last, all within [`TCP_LIFETIME`].
fn tcp_client(mut stream: TcpStream, shared: &Shared) {
    let end = Instant::now() + TCP_LIFETIME;
    // Each read waits at most until the connection's end.
    let read = |stream: &mut TcpStream, buf: &mut [u8]| -> bool {
        let mut got = 0;
        while got < buf.len() {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() || stream.set_read_timeout(Some(left.min(TCP_IDLE))).is_err() {
                return false;
            }
            match stream.read(&mut buf[got..]) {
                Ok(0) | Err(_) => return false,
                Ok(n) => got += n,
            }
        }
        true
    };
    let _ = stream.set_write_timeout(Some(TCP_IDLE));
    for _ in 0..TCP_QUERIES {
        let mut len = [0u8; 2];
        if !read(&mut stream, &mut len) {
            return;
        }
        let mut packet = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if !read(&mut stream, &mut packet) {
            return;
        }
        let Some(answer) = handle(&packet, shared, false) else {
            return;
        };
        let Ok(n) = u16::try_from(answer.len()) else {
            return;
        };
        let mut framed = n.to_be_bytes().to_vec();
        framed.extend_from_slice(&answer);
        if stream.write_all(&framed).is_err() {
            return;
        }
    }
}

/// A name as the policy compares it; `None` for what no pattern can name.
fn plain(name: &Name) -> Option<String> {
    names::normalize(&name.to_ascii()).ok()
}

fn reply(query: &Message, code: ResponseCode) -> Message {
    let mut m = Message::error_msg(query.metadata.id, OpCode::Query, code);
    m.metadata.recursion_desired = query.metadata.recursion_desired;
    m.metadata.recursion_available = true;
    m.queries = query.queries.clone();
    m
}

/// The answer to one query, as bytes; `None` drops it (not a query at all).
fn handle(packet: &[u8], shared: &Shared, udp: bool) -> Option<Vec<u8>> {
    let query = Message::from_vec(packet).ok()?;
    if query.metadata.message_type != MessageType::Query {
        return None;
    }
    let answer = decide(&query, shared);
    let limit = if udp {
        query
            .edns
            .as_ref()
            .map_or(512, |e| e.max_payload().max(512))
    } else {
        u16::MAX
    };
    let mut bytes = answer.to_vec().ok()?;
    if bytes.len() > usize::from(limit) {
        bytes = answer.truncate().to_vec().ok()?;
    }
    Some(bytes)
}

/// The one question of a standard query; anything else is answered
/// NOTIMP (a query of no question or of several is the agent's to send).
fn the_question(query: &Message) -> Option<&Query> {
    match &query.queries[..] {
        [q] if query.metadata.op_code == OpCode::Query => Some(q),
        _ => None,
    }
}

/// Only addresses are looked up for the sandbox: other types of an
/// allowed name (TXT, HTTPS, ...) get an empty answer.
fn asks_for_addresses(q: &Query) -> bool {
    q.query_class() == DNSClass::IN && matches!(q.query_type(), RecordType::A | RecordType::AAAA)
}

fn decide(query: &Message, shared: &Shared) -> Message {
    let Some(q) = the_question(query) else {
        return reply(query, ResponseCode::NotImp);
    };
    let Some(name) = plain(q.name()) else {
        lock(shared).refuse(&q.name().to_ascii());
        return reply(query, ResponseCode::Refused);
    };
    let (decision, upstream) = {
        let state = lock(shared);
        (state.policy().name_decision(&name), state.settings.upstream)
    };
    if decision.verdict != Verdict::Allow {
        lock(shared).refuse(&name);
        eprintln!("lazaret-sidecar: refused {}", names::escape(&name));
        return reply(query, ResponseCode::Refused);
    }
    if !asks_for_addresses(q) {
        return reply(query, ResponseCode::NoError);
    }
    let upstream_answer = match forward(upstream, q) {
        Ok(m) => m,
        Err(e) => {
            eprintln!(
                "lazaret-sidecar: {}: the upstream {upstream} did not answer: {e}",
                names::escape(&name)
            );
            lock(shared).failed(&name, format!("no answer: {e}"));
            return reply(query, ResponseCode::ServFail);
        }
    };
    let code = upstream_answer.metadata.response_code;
    if code != ResponseCode::NoError {
        // The agent sees ENOTFOUND or EAI_AGAIN; the user sees why here.
        lock(shared).failed(&name, code_name(code));
        return reply(query, code);
    }
    let (records, addresses) = chain(q, &upstream_answer.answers);
    let opened = lock(shared).open(&name, &addresses);
    let client_ttl = match opened {
        Ok((ttl, denied)) => {
            for (addr, why) in denied {
                eprintln!(
                    "lazaret-sidecar: {} answered {addr}, which stays denied: {why}",
                    names::escape(&name)
                );
            }
            ttl
        }
        Err(e) => {
            eprintln!(
                "lazaret-sidecar: {}: cannot open the answered addresses: {e}",
                names::escape(&name)
            );
            lock(shared).failed(&name, format!("not opened: {e}"));
            return reply(query, ResponseCode::ServFail);
        }
    };
    let mut m = reply(query, ResponseCode::NoError);
    m.answers = records
        .into_iter()
        .map(|mut r| {
            r.ttl = r.ttl.min(client_ttl.max(1));
            r
        })
        .collect();
    if query.edns.is_some() {
        let mut edns = Edns::new();
        edns.set_max_payload(1232);
        m.edns = Some(edns);
    }
    m
}

/// An answer code by its usual name (as `dig` prints it).
fn code_name(code: ResponseCode) -> String {
    match code {
        ResponseCode::FormErr => "FORMERR".into(),
        ResponseCode::ServFail => "SERVFAIL".into(),
        ResponseCode::NXDomain => "NXDOMAIN".into(),
        ResponseCode::NotImp => "NOTIMP".into(),
        ResponseCode::Refused => "REFUSED".into(),
        other => format!("RCODE{} ({})", u16::from(other), other.to_str()),
    }
}

/// The records of the answer that belong to the asked name: the CNAME chain
/// that starts at it and the A/AAAA records of the chain's names. Records
/// for any other name are dropped and open nothing.
fn chain(q: &Query, answers: &[Record]) -> (Vec<Record>, Vec<(IpAddr, u32)>) {
    let Some(first) = plain(q.name()) else {
        return (Vec::new(), Vec::new());
    };
    let mut targets = vec![first];
    let mut taken = vec![false; answers.len()];
    let mut out = Vec::new();
    loop {
        let mut grew = false;
        for (i, r) in answers.iter().enumerate() {
            if taken[i] || targets.len() > MAX_CHAIN {
                continue;
            }
            if let RData::CNAME(target) = &r.data
                && plain(&r.name).is_some_and(|n| targets.contains(&n))
                && let Some(t) = plain(&target.0)
            {
                taken[i] = true;
                out.push(r.clone());
                if !targets.contains(&t) {
                    targets.push(t);
                }
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    let mut addresses = Vec::new();
    for (i, r) in answers.iter().enumerate() {
        if taken[i] || !plain(&r.name).is_some_and(|n| targets.contains(&n)) {
            continue;
        }
        let addr = match (&r.data, q.query_type()) {
            (RData::A(a), RecordType::A) => IpAddr::V4(a.0),
            (RData::AAAA(a), RecordType::AAAA) => IpAddr::V6(a.0),
            _ => continue,
        };
        out.push(r.clone());
        addresses.push((addr, r.ttl));
    }
    (out, addresses)
}

/// A socket of the sidecar's own, marked so that it leaves through the
/// gateway whatever the policy says (see `daemon::UPSTREAM_MARK`).
fn marked(upstream: SocketAddr, kind: SockType) -> Result<OwnedFd> {
    let family = match upstream {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let fd = socket(family, kind, SockFlag::SOCK_CLOEXEC, None)
        .context("cannot open a socket to the upstream")?;
    setsockopt(&fd, sockopt::Mark, &UPSTREAM_MARK).context("cannot mark the upstream socket")?;
    Ok(fd)
}

fn upstream_query(q: &Query) -> Message {
    let mut m = Message::query();
    m.metadata.recursion_desired = true;
    let mut edns = Edns::new();
    edns.set_max_payload(1232);
    m.edns = Some(edns);
    // In lower case: the agent's letter case would be a bit per letter it
    // could send to the name's servers. The answer to the agent keeps the
    // question as asked.
    m.add_query(Query::query(q.name().to_lowercase(), q.query_type()));
    m
}

fn matches(sent: &Message, got: &Message) -> bool {
    got.metadata.id == sent.metadata.id
        && got.metadata.message_type == MessageType::Response
        && got.queries.len() == 1
        && got.queries[0].query_type() == sent.queries[0].query_type()
        && plain(got.queries[0].name()) == plain(sent.queries[0].name())
}

fn forward(upstream: SocketAddr, q: &Query) -> Result<Message> {
    let sent = upstream_query(q);
    let bytes = sent.to_vec().context("cannot encode the query")?;
    let udp = UdpSocket::from(marked(upstream, SockType::Datagram)?);
    udp.connect(upstream).context("cannot reach the upstream")?;
    udp.set_read_timeout(Some(UPSTREAM_TIMEOUT))
        .context("cannot set a timeout")?;
    let mut buf = [0u8; 4096];
    for _ in 0..2 {
        udp.send(&bytes).context("cannot send the query")?;
        while let Ok(n) = udp.recv(&mut buf) {
            let Ok(got) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            if !matches(&sent, &got) {
                continue;
            }
            if got.metadata.truncation {
                return forward_tcp(upstream, &sent, &bytes);
            }
            return Ok(got);
        }
    }
    Err(crate::error::Error::new(format!(
        "no answer in {} s",
        2 * UPSTREAM_TIMEOUT.as_secs()
    )))
}

fn forward_tcp(upstream: SocketAddr, sent: &Message, bytes: &[u8]) -> Result<Message> {
    let fd = marked(upstream, SockType::Stream)?;
    connect(fd.as_raw_fd(), &SockaddrStorage::from(upstream))
        .context("cannot reach the upstream over TCP")?;
    let mut tcp = TcpStream::from(fd);
    tcp.set_read_timeout(Some(UPSTREAM_TIMEOUT))
        .context("cannot set a timeout")?;
    let len = u16::try_from(bytes.len()).unwrap_or(u16::MAX);
    let mut framed = len.to_be_bytes().to_vec();
    framed.extend_from_slice(bytes);
    tcp.write_all(&framed).context("cannot send the query")?;
    let mut len = [0u8; 2];
    tcp.read_exact(&mut len).context("no answer over TCP")?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    tcp.read_exact(&mut buf)
        .context("a short answer over TCP")?;
    let got = Message::from_vec(&buf).context("an unreadable answer")?;
    if !matches(sent, &got) {
        return Err(crate::error::Error::new(
            "the TCP answer does not match the query",
        ));
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::rdata::{A, CNAME};

    fn rec(name: &str, data: RData) -> Record {
        Record::from_rdata(Name::from_ascii(name).unwrap(), 60, data)
    }

    #[test]
    fn only_the_asked_names_chain_counts() {
        let q = Query::query(
            Name::from_ascii("Api.Example.test.").unwrap(),
            RecordType::A,
        );
        let answers = vec![
            rec(
                "api.example.test.",
                RData::CNAME(CNAME(Name::from_ascii("edge.cdn.test.").unwrap())),
            ),
            rec("edge.cdn.test.", RData::A(A([198, 51, 100, 7].into()))),
            // Not asked, not in the chain: dropped.
            rec("other.test.", RData::A(A([198, 51, 100, 9].into()))),
            rec(
                "x.test.",
                RData::CNAME(CNAME(Name::from_ascii("api.example.test.").unwrap())),
            ),
        ];
        let (records, addrs) = chain(&q, &answers);
        assert_eq!(records.len(), 2);
        assert_eq!(addrs, vec![(IpAddr::from([198, 51, 100, 7]), 60)]);
    }

    /// Mutation check (issue 41, scripts/mutants sidecar): a chain is
    /// followed through several names up to its bound, and IPv6 answers
    /// count for an AAAA question only.
    #[test]
    fn chains_are_followed_to_their_bound() {
        let name = |i: usize| format!("n{i}.chain.test.");
        let cname = |i: usize| {
            rec(
                &name(i),
                RData::CNAME(CNAME(Name::from_ascii(name(i + 1)).unwrap())),
            )
        };
        let ask = Query::query(Name::from_ascii(name(0)).unwrap(), RecordType::A);
        for (links, counted) in [(2, true), (MAX_CHAIN, true), (MAX_CHAIN + 1, false)] {
            let mut answers: Vec<Record> = (0..links).map(cname).collect();
            answers.push(rec(&name(links), RData::A(A([198, 51, 100, 1].into()))));
            let (_, addrs) = chain(&ask, &answers);
            assert_eq!(!addrs.is_empty(), counted, "{links} links: {addrs:?}");
            // In any order: a pass that took a link looks again.
            answers.reverse();
            let (_, addrs) = chain(&ask, &answers);
            assert_eq!(!addrs.is_empty(), counted, "{links} links reversed");
        }
        let v6: std::net::Ipv6Addr = "2001:db8::7".parse().unwrap();
        let answers = vec![rec("v6.test.", RData::AAAA(v6.into()))];
        let aaaa = Query::query(Name::from_ascii("v6.test.").unwrap(), RecordType::AAAA);
        assert_eq!(chain(&aaaa, &answers).1, vec![(IpAddr::V6(v6), 60)]);
        let a = Query::query(Name::from_ascii("v6.test.").unwrap(), RecordType::A);
        assert!(chain(&a, &answers).1.is_empty());
    }

    /// Only the upstream's answer to the query sent is taken: its id, kind,
    /// and its one question, type and name (case aside).
    #[test]
    fn only_the_answer_to_the_query_sent_is_taken() {
        let q = Query::query(
            Name::from_ascii("Api.Example.test.").unwrap(),
            RecordType::A,
        );
        let sent = upstream_query(&q);
        let answer = |edit: &dyn Fn(&mut Message)| {
            let mut got = sent.clone();
            got.metadata.message_type = MessageType::Response;
            edit(&mut got);
            matches(&sent, &got)
        };
        assert!(answer(&|_| {}));
        assert!(!answer(&|m| m.metadata.id = m.metadata.id.wrapping_add(1)));
        assert!(!answer(&|m| m.metadata.message_type = MessageType::Query));
        assert!(!answer(&|m| {
            m.add_query(Query::query(
                Name::from_ascii("x.test.").unwrap(),
                RecordType::A,
            ));
        }));
        assert!(!answer(&|m| {
            m.queries[0] = Query::query(
                Name::from_ascii("api.example.test.").unwrap(),
                RecordType::AAAA,
            );
        }));
        assert!(!answer(&|m| {
            m.queries[0] = Query::query(
                Name::from_ascii("other.example.test.").unwrap(),
                RecordType::A,
            );
        }));
        assert!(answer(&|m| {
            m.queries[0] = Query::query(
                Name::from_ascii("API.EXAMPLE.TEST.").unwrap(),
                RecordType::A,
            );
        }));
    }

    /// Mutation check (issue 41): a query is answered only when it is a
    /// standard query of exactly one question, and looked up only for A
    /// and AAAA of class IN.
    #[test]
    fn only_one_standard_question_is_looked_up_and_only_for_addresses() {
        let q = |t: RecordType| Query::query(Name::from_ascii("a.test.").unwrap(), t);
        let mut m = Message::query();
        assert!(the_question(&m).is_none(), "no question");
        m.add_query(q(RecordType::A));
        assert!(the_question(&m).is_some());
        m.metadata.op_code = OpCode::Notify;
        assert!(the_question(&m).is_none(), "not a standard query");
        m.metadata.op_code = OpCode::Query;
        m.add_query(q(RecordType::AAAA));
        assert!(the_question(&m).is_none(), "two questions");
        assert!(asks_for_addresses(&q(RecordType::A)));
        assert!(asks_for_addresses(&q(RecordType::AAAA)));
        assert!(!asks_for_addresses(&q(RecordType::TXT)));
        let mut chaos = q(RecordType::A);
        chaos.set_query_class(DNSClass::CH);
        assert!(!asks_for_addresses(&chaos));
    }

    #[test]
    fn answer_codes_read_as_dig_prints_them() {
        assert_eq!(code_name(ResponseCode::NXDomain), "NXDOMAIN");
        assert_eq!(code_name(ResponseCode::ServFail), "SERVFAIL");
        assert_eq!(code_name(ResponseCode::Refused), "REFUSED");
        assert!(code_name(ResponseCode::NotAuth).starts_with("RCODE9 "));
    }
}
