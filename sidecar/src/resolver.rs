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
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use lazaret_sidecar::names;
use lazaret_sidecar::policy::Verdict;
use nix::sys::socket::{
    AddressFamily, SockFlag, SockType, SockaddrStorage, connect, setsockopt, socket, sockopt,
};

use crate::daemon::{Shared, UPSTREAM_MARK, lock};
use crate::error::{Context, Result};

/// Queries answered at once; more wait in the socket's buffer.
const IN_FLIGHT: usize = 64;
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest CNAME chain followed.
const MAX_CHAIN: usize = 16;

pub fn start(addr: SocketAddr, shared: Shared) -> Result<()> {
    let udp = UdpSocket::bind(addr).with_context(|| format!("cannot serve DNS on udp {addr}"))?;
    let tcp = TcpListener::bind(addr).with_context(|| format!("cannot serve DNS on tcp {addr}"))?;
    let busy = Arc::new(AtomicUsize::new(0));
    {
        let shared = shared.clone();
        std::thread::spawn(move || udp_loop(&udp, &shared, &busy));
    }
    std::thread::spawn(move || {
        for stream in tcp.incoming().flatten() {
            let shared = shared.clone();
            std::thread::spawn(move || tcp_client(stream, &shared));
        }
    });
    Ok(())
}

fn udp_loop(udp: &UdpSocket, shared: &Shared, busy: &Arc<AtomicUsize>) {
    let mut buf = [0u8; 4096];
    loop {
        let Ok((len, peer)) = udp.recv_from(&mut buf) else {
            continue;
        };
        if busy.load(Ordering::Relaxed) >= IN_FLIGHT {
            continue;
        }
        let packet = buf[..len].to_vec();
        let (Ok(udp), shared, busy) = (udp.try_clone(), shared.clone(), busy.clone()) else {
            continue;
        };
        busy.fetch_add(1, Ordering::Relaxed);
        std::thread::spawn(move || {
            if let Some(answer) = handle(&packet, &shared, true) {
                let _ = udp.send_to(&answer, peer);
            }
            busy.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

fn tcp_client(mut stream: TcpStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    loop {
        let mut len = [0u8; 2];
        if stream.read_exact(&mut len).is_err() {
            return;
        }
        let mut packet = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if stream.read_exact(&mut packet).is_err() {
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

fn decide(query: &Message, shared: &Shared) -> Message {
    if query.metadata.op_code != OpCode::Query || query.queries.len() != 1 {
        return reply(query, ResponseCode::NotImp);
    }
    let q = &query.queries[0];
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
    // Only addresses are looked up for the sandbox: other types of an
    // allowed name (TXT, HTTPS, ...) get an empty answer.
    if q.query_class() != DNSClass::IN
        || !matches!(q.query_type(), RecordType::A | RecordType::AAAA)
    {
        return reply(query, ResponseCode::NoError);
    }
    let upstream_answer = match forward(upstream, q) {
        Ok(m) => m,
        Err(e) => {
            eprintln!(
                "lazaret-sidecar: {}: the upstream {upstream} did not answer: {e}",
                names::escape(&name)
            );
            return reply(query, ResponseCode::ServFail);
        }
    };
    let code = upstream_answer.metadata.response_code;
    if code != ResponseCode::NoError {
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
    m.add_query(Query::query(q.name().clone(), q.query_type()));
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
    connect(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrStorage::from(upstream),
    )
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
}
