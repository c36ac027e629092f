//! The sandbox's open flows, as the router's connection tracking sees them:
//! in router mode the agent's sockets live in the sandbox's own namespace,
//! and only conntrack in the sidecar's knows what passes through. Read from
//! `/proc/net/nf_conntrack` when the kernel has it, else over ctnetlink.

use std::collections::BTreeSet;
use std::net::IpAddr;

use lazaret_sidecar::link;
use netlink_sys::protocols::NETLINK_NETFILTER;

use crate::error::{Context, Result};
use crate::netlink::{Channel, Raw, attr};

const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_NEW: u16 = 0;
const IPCTNL_MSG_CT_GET: u16 = 1;
const CTA_TUPLE_ORIG: u16 = 1;
const CTA_PROTOINFO: u16 = 4;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTOINFO_TCP: u16 = 1;
const CTA_PROTOINFO_TCP_STATE: u16 = 1;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

/// TCP states that still carry (or are about to carry) data, by conntrack's
/// names and numbers (`enum tcp_conntrack`): SYN_SENT, SYN_RECV,
/// ESTABLISHED, FIN_WAIT (one side closed), CLOSE_WAIT; and SYN_SENT2.
const OPEN_TCP: &[(&str, u8)] = &[
    ("SYN_SENT", 1),
    ("SYN_RECV", 2),
    ("ESTABLISHED", 3),
    ("FIN_WAIT", 4),
    ("CLOSE_WAIT", 5),
    ("SYN_SENT2", 9),
];

/// The destinations of flows the sandbox opened: TCP connections not yet
/// closed, and UDP flows conntrack still holds (it forgets one 30 s after
/// its last packet, 120 s for a two-way stream).
pub fn sandbox_destinations() -> Result<BTreeSet<IpAddr>> {
    match std::fs::read_to_string("/proc/net/nf_conntrack") {
        Ok(text) => Ok(from_proc(&text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => from_netlink(),
        Err(e) => Err(e).context("cannot read /proc/net/nf_conntrack"),
    }
}

/// `ipv4 2 tcp 6 431999 ESTABLISHED src=100.64.0.2 dst=192.0.2.1 sport=...
/// dport=... src=192.0.2.1 dst=10.0.2.100 ... [ASSURED] mark=0 use=2`:
/// the first src=/dst= are the original direction.
fn from_proc(text: &str) -> BTreeSet<IpAddr> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let open = match f.get(2) {
            Some(&"tcp") => f
                .get(5)
                .is_some_and(|s| OPEN_TCP.iter().any(|(name, _)| name == s)),
            Some(&"udp") => true,
            _ => false,
        };
        let first = |key: &str| {
            f.iter()
                .find_map(|w| w.strip_prefix(key))
                .and_then(|a| a.parse::<IpAddr>().ok())
        };
        if let (true, Some(src), Some(dst)) = (open, first("src="), first("dst="))
            && link::from_sandbox(src)
        {
            out.insert(dst.to_canonical());
        }
    }
    out
}

fn from_netlink() -> Result<BTreeSet<IpAddr>> {
    let mut channel = Channel::open(NETLINK_NETFILTER)?;
    // struct nfgenmsg: every family, version 0, resource 0.
    let request = Raw {
        kind: (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET,
        payload: vec![libc::AF_UNSPEC as u8, 0, 0, 0],
    };
    let answer = channel
        .dump(request)
        .context("cannot list the connections over ctnetlink")?;
    Ok(answer
        .iter()
        .filter(|m| m.kind == (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW)
        .filter_map(|m| flow(m.payload.get(4..)?))
        .filter(|(src, _)| link::from_sandbox(*src))
        .map(|(_, dst)| dst.to_canonical())
        .collect())
}

/// An open flow's original source and destination.
fn flow(attrs: &[u8]) -> Option<(IpAddr, IpAddr)> {
    let orig = attr(attrs, CTA_TUPLE_ORIG)?;
    let ip = attr(orig, CTA_TUPLE_IP)?;
    let proto = attr(orig, CTA_TUPLE_PROTO).and_then(|p| attr(p, CTA_PROTO_NUM))?;
    let addr = |k: u16| -> Option<IpAddr> {
        let v = attr(ip, k)?;
        match v.len() {
            4 => Some(IpAddr::from(<[u8; 4]>::try_from(v).ok()?)),
            16 => Some(IpAddr::from(<[u8; 16]>::try_from(v).ok()?)),
            _ => None,
        }
    };
    let (src, dst) = match (addr(CTA_IP_V4_SRC), addr(CTA_IP_V4_DST)) {
        (Some(s), Some(d)) => (s, d),
        _ => (addr(CTA_IP_V6_SRC)?, addr(CTA_IP_V6_DST)?),
    };
    let open = match *proto.first()? {
        IPPROTO_TCP => {
            let state = attr(attrs, CTA_PROTOINFO)
                .and_then(|p| attr(p, CTA_PROTOINFO_TCP))
                .and_then(|t| attr(t, CTA_PROTOINFO_TCP_STATE))
                .and_then(|s| s.first().copied())?;
            OPEN_TCP.iter().any(|(_, n)| *n == state)
        }
        IPPROTO_UDP => true,
        _ => false,
    };
    open.then_some((src, dst))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_lines() {
        let text = "\
ipv4     2 tcp      6 431999 ESTABLISHED src=100.64.0.2 dst=192.0.2.1 sport=40000 dport=80 src=192.0.2.1 dst=10.0.2.100 sport=80 dport=40000 [ASSURED] mark=0 zone=0 use=2
ipv4     2 tcp      6 119 TIME_WAIT src=100.64.0.2 dst=192.0.2.2 sport=40001 dport=80 src=192.0.2.2 dst=10.0.2.100 sport=80 dport=40001 [ASSURED] mark=0 zone=0 use=2
ipv6     10 udp      17 29 src=fd6c:7a72::2 dst=2001:0db8:0000:0000:0000:0000:0000:0007 sport=5000 dport=443 [UNREPLIED] src=2001:0db8:0000:0000:0000:0000:0000:0007 dst=fd00::100 sport=443 dport=5000 mark=0 zone=0 use=2
ipv4     2 tcp      6 431999 ESTABLISHED src=10.0.2.100 dst=10.0.2.3 sport=40000 dport=53 src=10.0.2.3 dst=10.0.2.100 sport=53 dport=40000 [ASSURED] mark=0 zone=0 use=2
";
        let got: Vec<String> = from_proc(text).iter().map(|a| a.to_string()).collect();
        assert_eq!(got, ["192.0.2.1", "2001:db8::7"]);
    }
}
