//! A netlink socket to the kernel, synchronously: one request and its
//! answer, a dump, or a batch (nf_tables changes are one transaction). Shared
//! by rtnetlink (`rtnl`), nf_tables (`nft`) and conntrack (`conntrack`).
//! Attributes the crates have no types for are built by hand ([`Attrs`]) and
//! read with netlink-packet-core's iterator ([`attrs`]).

use std::fmt;
use std::time::Duration;

use netlink_packet_core::{
    DecodeError, NLA_F_NESTED, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NetlinkDeserializable,
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NetlinkSerializable, NlaBuffer, NlasIterator,
    parse_string,
};
use netlink_sys::{Socket, SocketAddr};
use nix::errno::Errno;
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

use crate::error::{Context, Error, Result};

/// How long an answer may take: the kernel answers at once, and a socket in
/// a namespace that went away must not hang the sidecar.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// A message as a type and its payload's bytes, for the families whose
/// messages the crates do not model (nf_tables, ctnetlink) and for requests
/// built by hand.
#[derive(Debug, Clone)]
pub struct Raw {
    pub kind: u16,
    pub payload: Vec<u8>,
}

impl NetlinkSerializable for Raw {
    fn message_type(&self) -> u16 {
        self.kind
    }

    fn buffer_len(&self) -> usize {
        self.payload.len()
    }

    fn serialize(&self, buffer: &mut [u8]) {
        buffer.copy_from_slice(&self.payload);
    }
}

impl NetlinkDeserializable for Raw {
    type Error = DecodeError;

    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Raw, DecodeError> {
        Ok(Raw {
            kind: header.message_type,
            payload: payload.to_vec(),
        })
    }
}

/// A request the kernel refused: its errno and, when the kernel gave one,
/// its extended-ack message ("Nexthop has invalid gateway", ...).
#[derive(Debug)]
pub struct KernelError {
    pub errno: Errno,
    pub message: Option<String>,
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = format!("{:?}, errno {}", self.errno, self.errno as i32);
        match &self.message {
            Some(m) => write!(f, "{m} ({}; {code})", self.errno.desc()),
            None => write!(f, "{} ({code})", self.errno.desc()),
        }
    }
}

/// One netlink socket, bound and connected to the kernel.
#[derive(Debug)]
pub struct Channel {
    socket: Socket,
    seq: u32,
    capped_acks: bool,
}

impl Channel {
    /// A socket of `protocol` (`NETLINK_ROUTE`, `NETLINK_NETFILTER`) in the
    /// calling thread's network namespace, where it stays.
    pub fn open(protocol: isize) -> Result<Channel> {
        let mut socket = Socket::new(protocol).context("cannot open a netlink socket")?;
        socket
            .bind_auto()
            .context("cannot bind the netlink socket")?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .context("cannot connect the netlink socket to the kernel")?;
        // Readable kernel messages in errors; without them there is still
        // the errno.
        let _ = socket.set_ext_ack(true);
        let capped_acks = socket.set_cap_ack(true).is_ok();
        let timeout = TimeVal::new(ANSWER_TIMEOUT.as_secs() as _, 0);
        setsockopt(&socket, sockopt::ReceiveTimeout, &timeout)
            .context("cannot set the netlink socket's timeout")?;
        Ok(Channel {
            socket,
            seq: 0,
            capped_acks,
        })
    }

    fn packet<M: NetlinkSerializable>(&mut self, msg: M, flags: u16) -> (u32, Vec<u8>) {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags;
        header.sequence_number = self.seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
        packet.finalize();
        let mut buf = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut buf);
        (self.seq, buf)
    }

    fn send(&self, buf: &[u8]) -> Result<()> {
        self.socket
            .send(buf, 0)
            .context("cannot send to the kernel over netlink")
            .map(drop)
    }

    /// Reads the kernel's messages and hands those of the sequence numbers
    /// `wanted` accepts to `each`, until `each` says it has them all.
    fn receive<M>(
        &self,
        wanted: impl Fn(u32) -> bool,
        mut each: impl FnMut(u32, NetlinkPayload<M>) -> Result<bool>,
    ) -> Result<()>
    where
        M: NetlinkDeserializable,
        M::Error: fmt::Display,
    {
        loop {
            let (data, _) = self
                .socket
                .recv_from_full()
                .context("cannot read the kernel's netlink answer")?;
            let mut offset = 0;
            while offset < data.len() {
                let message = NetlinkMessage::<M>::deserialize(&data[offset..])
                    .context("cannot decode the kernel's netlink answer")?;
                let len = message.header.length as usize;
                if len == 0 {
                    break;
                }
                // Messages in one datagram are 4-byte aligned.
                offset += (len + 3) & !3;
                let seq = message.header.sequence_number;
                if wanted(seq) && each(seq, message.payload)? {
                    return Ok(());
                }
            }
        }
    }

    /// Sends one request; returns the messages of a dump or of a get, or
    /// nothing for an acknowledged change.
    pub fn exchange<M>(&mut self, msg: M, flags: u16) -> Result<Vec<M>>
    where
        M: NetlinkSerializable + NetlinkDeserializable,
        M::Error: fmt::Display,
    {
        let (seq, buf) = self.packet(msg, flags);
        self.send(&buf)?;
        let capped = self.capped_acks;
        let mut out = Vec::new();
        self.receive(
            |s| s == seq,
            |_, payload| match payload {
                NetlinkPayload::InnerMessage(inner) => {
                    out.push(inner);
                    // A plain get has one answer and no end marker.
                    Ok(flags & (NLM_F_DUMP | NLM_F_ACK) == 0)
                }
                NetlinkPayload::Done(done) if done.code != 0 => Err(kernel_error(done.code, None)),
                NetlinkPayload::Done(_) => Ok(true),
                NetlinkPayload::Error(e) => match e.code {
                    None => Ok(true),
                    Some(code) => Err(kernel_error(code.get(), ext_ack_message(&e.header, capped))),
                },
                _ => Ok(false),
            },
        )?;
        Ok(out)
    }

    pub fn dump<M>(&mut self, msg: M) -> Result<Vec<M>>
    where
        M: NetlinkSerializable + NetlinkDeserializable,
        M::Error: fmt::Display,
    {
        self.exchange(msg, NLM_F_DUMP)
    }

    /// Sends `messages` in one datagram, each with `NLM_F_ACK` and its own
    /// flags, and waits for every acknowledgement. An error names the
    /// message's description. (nf_tables takes the messages between its
    /// batch markers as one transaction.)
    pub fn batch(&mut self, messages: Vec<(Raw, u16, String)>) -> Result<()> {
        let mut buf = Vec::new();
        let mut pending = Vec::new();
        for (msg, flags, what) in messages {
            let acked = flags & NLM_F_ACK != 0;
            let (seq, bytes) = self.packet(msg, flags);
            buf.extend_from_slice(&bytes);
            if acked {
                pending.push((seq, what));
            }
        }
        if pending.is_empty() {
            return self.send(&buf);
        }
        self.send(&buf)?;
        let (first, last) = (pending[0].0, pending[pending.len() - 1].0);
        let capped = self.capped_acks;
        self.receive::<Raw>(
            |s| (first..=last).contains(&s),
            |seq, payload| {
                if let NetlinkPayload::Error(e) = payload {
                    let what = pending
                        .iter()
                        .find(|(s, _)| *s == seq)
                        .map(|(_, w)| w.clone())
                        .unwrap_or_default();
                    if let Some(code) = e.code {
                        return Err(Error::new(format!(
                            "{what}: {}",
                            kernel_error(code.get(), ext_ack_message(&e.header, capped))
                        )));
                    }
                    pending.retain(|(s, _)| *s != seq);
                }
                Ok(pending.is_empty())
            },
        )
    }
}

pub fn kernel_error(code: i32, message: Option<String>) -> Error {
    Error::new(
        KernelError {
            errno: Errno::from_raw(-code),
            message,
        }
        .to_string(),
    )
}

/// NLMSGERR_ATTR_MSG from the attributes after the echoed request.
fn ext_ack_message(payload: &[u8], capped: bool) -> Option<String> {
    const NLMSGERR_ATTR_MSG: u16 = 1;
    let echoed = if capped {
        16
    } else {
        u32::from_ne_bytes(payload.get(..4)?.try_into().ok()?) as usize
    };
    let attrs = payload.get((echoed + 3) & !3..)?;
    NlasIterator::new(attrs).find_map(|nla| {
        let nla = nla.ok()?;
        (nla.kind() == NLMSGERR_ATTR_MSG)
            .then(|| parse_string(nla.value()).ok())
            .flatten()
            .map(|s| s.trim_end_matches('\0').to_string())
    })
}

/// Netlink attributes built by hand: each is its length and type (native
/// endian), its value, and padding to 4 bytes.
#[derive(Debug, Clone, Default)]
pub struct Attrs(Vec<u8>);

impl Attrs {
    pub fn new() -> Attrs {
        Attrs::default()
    }

    pub fn put(&mut self, kind: u16, value: &[u8]) -> &mut Attrs {
        let len = u16::try_from(4 + value.len()).expect("a netlink attribute over 64 KiB");
        self.0.extend_from_slice(&len.to_ne_bytes());
        self.0.extend_from_slice(&kind.to_ne_bytes());
        self.0.extend_from_slice(value);
        self.0.resize((self.0.len() + 3) & !3, 0);
        self
    }

    /// A string with its terminating NUL, as the kernel expects.
    pub fn string(&mut self, kind: u16, value: &str) -> &mut Attrs {
        let mut bytes = value.as_bytes().to_vec();
        bytes.push(0);
        self.put(kind, &bytes)
    }

    pub fn u32_ne(&mut self, kind: u16, value: u32) -> &mut Attrs {
        self.put(kind, &value.to_ne_bytes())
    }

    /// nf_tables' numbers are big-endian.
    pub fn u32_be(&mut self, kind: u16, value: u32) -> &mut Attrs {
        self.put(kind, &value.to_be_bytes())
    }

    pub fn nested(&mut self, kind: u16, inner: &Attrs) -> &mut Attrs {
        self.put(kind | NLA_F_NESTED, &inner.0)
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The attributes in `bytes` as (type without flags, value); a malformed
/// one ends the list.
pub fn attrs(bytes: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    NlasIterator::new(bytes).map_while(|nla| {
        let nla: NlaBuffer<&[u8]> = nla.ok()?;
        let kind = nla.kind();
        let value = nla.into_inner();
        // The value without the 4-byte header and without padding.
        let len = u16::from_ne_bytes([value[0], value[1]]) as usize;
        Some((kind, value.get(4..len)?))
    })
}

/// The first attribute of type `kind`.
pub fn attr(bytes: &[u8], kind: u16) -> Option<&[u8]> {
    attrs(bytes).find(|(k, _)| *k == kind).map(|(_, v)| v)
}

pub fn be32(value: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(value.get(..4)?.try_into().ok()?))
}

pub fn be64(value: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(value.get(..8)?.try_into().ok()?))
}

pub fn ne32(value: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(value.get(..4)?.try_into().ok()?))
}

/// A NUL-terminated string attribute.
pub fn string(value: &[u8]) -> String {
    let end = value.iter().position(|b| *b == 0).unwrap_or(value.len());
    String::from_utf8_lossy(&value[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip() {
        let mut inner = Attrs::new();
        inner.u32_be(1, 7).string(2, "eth0");
        let mut outer = Attrs::new();
        outer.put(5, &[1, 2, 3]).nested(4, &inner);
        let all: Vec<(u16, Vec<u8>)> = attrs(outer.bytes()).map(|(k, v)| (k, v.to_vec())).collect();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0], (5, vec![1, 2, 3]));
        assert_eq!(all[1].0, 4);
        assert_eq!(attr(&all[1].1, 1).and_then(be32), Some(7));
        assert_eq!(attr(&all[1].1, 2).map(string).as_deref(), Some("eth0"));
    }
}
