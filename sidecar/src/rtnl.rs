//! rtnetlink, synchronously, through netlink-sys and netlink-packet-route:
//! the rules, the gateway table and the main table's default routes.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use lazaret_sidecar::kernel::{
    self, Action, GATEWAY_TABLE, KernelRule, PRIORITY_BASE, PRIORITY_FLOOR,
};
use lazaret_sidecar::policy::Family;
use lazaret_sidecar::report::Gateway;
use netlink_packet_core::{
    DecodeError, Emitable, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE,
    NLM_F_REQUEST, NetlinkDeserializable, NetlinkHeader, NetlinkMessage, NetlinkPayload,
    NetlinkSerializable, NlasIterator, Parseable, parse_ip, parse_string, parse_u32,
};
use netlink_packet_route::AddressFamily;
use netlink_packet_route::link::LinkHeader;
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteProtocol, RouteScope,
    RouteType,
};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleFlags, RuleHeader, RuleMessage};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};
use nix::errno::Errno;

use crate::error::{Context, Error, Result};

/// The main routing table, where the namespace's default routes start out.
pub const MAIN_TABLE: u32 = libc::RT_TABLE_MAIN as u32;
/// The interface name attribute of a link message (linux/if_link.h).
const IFLA_IFNAME: u16 = 3;

/// The only rtnetlink messages the sidecar sends or reads. The crate's
/// `RouteNetlinkMessage` covers every message type, and decoding through it
/// would link the decoders of links, traffic control, tunnels, MPLS and
/// segment routing into the static binary; so rules go through the crate's
/// rule types, and routes and links that the kernel reports are kept as
/// their header and raw attributes, read with the crate's attribute iterator.
#[derive(Debug, Clone)]
enum Msg {
    NewRule(RuleMessage),
    DelRule(RuleMessage),
    GetRule(RuleMessage),
    NewRoute(RouteMessage),
    DelRoute(RouteMessage),
    /// A route dump request: the header alone.
    GetRoute(RouteHeader),
    /// A request for one link: the header alone.
    GetLink(LinkHeader),
    /// A route the kernel reported.
    Route(RouteHeader, Vec<u8>),
    /// A link the kernel reported.
    Link(LinkHeader, Vec<u8>),
}

impl NetlinkSerializable for Msg {
    fn message_type(&self) -> u16 {
        match self {
            Msg::NewRule(_) => libc::RTM_NEWRULE,
            Msg::DelRule(_) => libc::RTM_DELRULE,
            Msg::GetRule(_) => libc::RTM_GETRULE,
            Msg::NewRoute(_) | Msg::Route(..) => libc::RTM_NEWROUTE,
            Msg::DelRoute(_) => libc::RTM_DELROUTE,
            Msg::GetRoute(_) => libc::RTM_GETROUTE,
            Msg::GetLink(_) => libc::RTM_GETLINK,
            Msg::Link(..) => libc::RTM_NEWLINK,
        }
    }

    fn buffer_len(&self) -> usize {
        match self {
            Msg::NewRule(m) | Msg::DelRule(m) | Msg::GetRule(m) => m.buffer_len(),
            Msg::NewRoute(m) | Msg::DelRoute(m) => m.buffer_len(),
            Msg::GetRoute(h) => h.buffer_len(),
            Msg::GetLink(h) => h.buffer_len(),
            Msg::Route(h, attrs) => h.buffer_len() + attrs.len(),
            Msg::Link(h, attrs) => h.buffer_len() + attrs.len(),
        }
    }

    fn serialize(&self, buffer: &mut [u8]) {
        match self {
            Msg::NewRule(m) | Msg::DelRule(m) | Msg::GetRule(m) => m.emit(buffer),
            Msg::NewRoute(m) | Msg::DelRoute(m) => m.emit(buffer),
            Msg::GetRoute(h) => h.emit(buffer),
            Msg::GetLink(h) => h.emit(buffer),
            Msg::Route(h, attrs) => {
                h.emit(buffer);
                buffer[h.buffer_len()..].copy_from_slice(attrs);
            }
            Msg::Link(h, attrs) => {
                h.emit(buffer);
                buffer[h.buffer_len()..].copy_from_slice(attrs);
            }
        }
    }
}

impl NetlinkDeserializable for Msg {
    type Error = DecodeError;

    fn deserialize(
        header: &NetlinkHeader,
        payload: &[u8],
    ) -> std::result::Result<Msg, DecodeError> {
        match header.message_type {
            libc::RTM_NEWRULE => Ok(Msg::NewRule(RuleMessage::parse(payload)?)),
            libc::RTM_NEWROUTE => {
                let h = RouteHeader::parse(payload)?;
                let attrs = payload.get(h.buffer_len()..).unwrap_or_default().to_vec();
                Ok(Msg::Route(h, attrs))
            }
            libc::RTM_NEWLINK => {
                let h = LinkHeader::parse(payload)?;
                let attrs = payload.get(h.buffer_len()..).unwrap_or_default().to_vec();
                Ok(Msg::Link(h, attrs))
            }
            other => Err(DecodeError::from(format!(
                "unexpected rtnetlink message type {other}"
            ))),
        }
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

/// A rule in the sidecar's priority range, as the kernel reported it.
#[derive(Debug, Clone)]
pub enum OwnRule {
    /// One the sidecar makes.
    Known(KernelRule),
    /// Something else: the next `apply` deletes it.
    Foreign { text: String, msg: RuleMessage },
}

/// A unicast default route the kernel reported.
#[derive(Debug, Clone)]
pub struct DefaultRoute {
    pub gateway: IpAddr,
    pub ifindex: u32,
    pub metric: Option<u32>,
    table: u32,
    header: RouteHeader,
}

#[derive(Debug)]
pub struct Netlink {
    socket: Socket,
    seq: u32,
    capped_acks: bool,
}

impl Netlink {
    pub fn open() -> Result<Netlink> {
        let mut socket = Socket::new(NETLINK_ROUTE).context("cannot open a netlink socket")?;
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
        Ok(Netlink {
            socket,
            seq: 0,
            capped_acks,
        })
    }

    /// Sends one request; returns the messages of a dump or of a get, or
    /// nothing for an acknowledged change.
    fn exchange(&mut self, msg: Msg, flags: u16) -> Result<Vec<Msg>> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags;
        header.sequence_number = seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
        packet.finalize();
        let mut buf = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut buf);
        self.socket
            .send(&buf, 0)
            .context("cannot send to the kernel over netlink")?;

        let mut out = Vec::new();
        loop {
            let (data, _) = self
                .socket
                .recv_from_full()
                .context("cannot read the kernel's netlink answer")?;
            let mut offset = 0;
            while offset < data.len() {
                let bytes = &data[offset..];
                let message = NetlinkMessage::<Msg>::deserialize(bytes)
                    .context("cannot decode the kernel's netlink answer")?;
                let len = message.header.length as usize;
                if len == 0 {
                    break;
                }
                // Messages in one datagram are 4-byte aligned.
                offset += (len + 3) & !3;
                if message.header.sequence_number != seq {
                    continue;
                }
                match message.payload {
                    NetlinkPayload::InnerMessage(inner) => {
                        out.push(inner);
                        if flags & (NLM_F_DUMP | NLM_F_ACK) == 0 {
                            // A plain get has one answer and no end marker.
                            return Ok(out);
                        }
                    }
                    NetlinkPayload::Done(done) if done.code != 0 => {
                        return Err(kernel_error(done.code, None));
                    }
                    NetlinkPayload::Done(_) => return Ok(out),
                    NetlinkPayload::Error(e) => match e.code {
                        None => return Ok(out),
                        Some(code) => {
                            let text = ext_ack_message(&e.header, self.capped_acks);
                            return Err(kernel_error(code.get(), text));
                        }
                    },
                    _ => {}
                }
            }
        }
    }

    fn dump(&mut self, msg: Msg) -> Result<Vec<Msg>> {
        self.exchange(msg, NLM_F_DUMP)
    }

    fn change(&mut self, msg: Msg, flags: u16) -> Result<()> {
        self.exchange(msg, NLM_F_ACK | flags).map(|_| ())
    }

    /// The name of an interface, for output only: `if<N>` when unknown.
    pub fn dev_name(&mut self, ifindex: u32) -> String {
        let request = LinkHeader {
            index: ifindex,
            ..LinkHeader::default()
        };
        let answer = self.exchange(Msg::GetLink(request), 0).unwrap_or_default();
        answer
            .iter()
            .find_map(|m| match m {
                Msg::Link(h, attrs) if h.index == ifindex => NlasIterator::new(attrs.as_slice())
                    .find_map(|nla| {
                        let nla = nla.ok()?;
                        (nla.kind() == IFLA_IFNAME)
                            .then(|| parse_string(nla.value()).ok())
                            .flatten()
                    }),
                _ => None,
            })
            .unwrap_or_else(|| format!("if{ifindex}"))
    }

    /// The rules in the sidecar's priority range, for one family.
    pub fn own_rules(&mut self, family: Family) -> Result<Vec<OwnRule>> {
        let mut request = RuleMessage::default();
        request.header.family = address_family(family);
        let answer = self
            .dump(Msg::GetRule(request))
            .with_context(|| format!("cannot list the {family} rules"))?;
        Ok(answer
            .into_iter()
            .filter_map(|m| match m {
                Msg::NewRule(rule) => own_rule(family, rule),
                _ => None,
            })
            .collect())
    }

    pub fn add_rule(&mut self, rule: &KernelRule) -> Result<()> {
        self.change(Msg::NewRule(rule_message(rule)), NLM_F_CREATE | NLM_F_EXCL)
            .with_context(|| format!("cannot add rule {rule}"))
    }

    /// `PRIORITY: from all fwmark MARK lookup 200`, for both families: the
    /// sidecar's own marked sockets (its resolver's upstream queries) go out
    /// through the gateway whatever the policy says.
    pub fn add_mark_rule(&mut self, priority: u32, mark: u32) -> Result<()> {
        for family in Family::BOTH {
            let mut msg = RuleMessage::default();
            msg.header = RuleHeader {
                family: address_family(family),
                table: GATEWAY_TABLE as u8,
                action: RuleAction::ToTable,
                ..RuleHeader::default()
            };
            msg.attributes.push(RuleAttribute::Priority(priority));
            msg.attributes.push(RuleAttribute::FwMark(mark));
            msg.attributes.push(RuleAttribute::Table(GATEWAY_TABLE));
            msg.attributes
                .push(RuleAttribute::Protocol(RouteProtocol::Static));
            match self.change(Msg::NewRule(msg), NLM_F_CREATE | NLM_F_EXCL) {
                Err(e) if e.to_string().contains("EEXIST") => {}
                other => other.with_context(|| {
                    format!(
                        "cannot add the {family} rule for the resolver's own queries                          ({priority}: fwmark {mark:#x} lookup {GATEWAY_TABLE})"
                    )
                })?,
            }
        }
        Ok(())
    }

    pub fn delete_rule(&mut self, rule: &KernelRule) -> Result<()> {
        self.change(Msg::DelRule(rule_message(rule)), 0)
            .with_context(|| format!("cannot delete rule {rule}"))
    }

    pub fn delete_foreign_rule(&mut self, text: &str, msg: RuleMessage) -> Result<()> {
        self.change(Msg::DelRule(msg), 0)
            .with_context(|| format!("cannot delete the foreign rule {text}"))
    }

    /// The unicast default routes of `table`.
    pub fn default_routes(&mut self, family: Family, table: u32) -> Result<Vec<DefaultRoute>> {
        let request = RouteHeader {
            address_family: address_family(family),
            ..RouteHeader::default()
        };
        let answer = self
            .dump(Msg::GetRoute(request))
            .with_context(|| format!("cannot list the {family} routes"))?;
        Ok(answer
            .into_iter()
            .filter_map(|m| match m {
                Msg::Route(h, attrs) => default_route(h, &attrs, table),
                _ => None,
            })
            .collect())
    }

    /// Sets the gateway table's default route for the gateway's family.
    pub fn set_gateway(&mut self, gateway: &Gateway) -> Result<()> {
        let mut msg = RouteMessage::default();
        msg.header = RouteHeader {
            address_family: address_family(gateway.family),
            destination_prefix_length: 0,
            table: GATEWAY_TABLE as u8,
            protocol: RouteProtocol::Static,
            scope: RouteScope::Universe,
            kind: RouteType::Unicast,
            // No route to the gateway is needed: the main table's connected
            // routes are never consulted.
            flags: RouteFlags::Onlink,
            ..RouteHeader::default()
        };
        msg.attributes = vec![
            RouteAttribute::Table(GATEWAY_TABLE),
            RouteAttribute::Gateway(RouteAddress::from(gateway.address)),
            RouteAttribute::Oif(gateway.ifindex),
        ];
        self.change(Msg::NewRoute(msg), NLM_F_CREATE | NLM_F_REPLACE)
            .with_context(|| {
                format!(
                    "cannot set the {} gateway route: default via {} dev {} onlink table {GATEWAY_TABLE}",
                    gateway.family, gateway.address, gateway.dev
                )
            })
    }

    pub fn delete_route(&mut self, route: DefaultRoute, what: &str) -> Result<()> {
        let mut msg = RouteMessage::default();
        msg.header = route.header;
        msg.attributes = vec![
            RouteAttribute::Table(route.table),
            RouteAttribute::Gateway(RouteAddress::from(route.gateway)),
            RouteAttribute::Oif(route.ifindex),
        ];
        if let Some(metric) = route.metric {
            msg.attributes.push(RouteAttribute::Priority(metric));
        }
        self.change(Msg::DelRoute(msg), 0)
            .with_context(|| format!("cannot delete {what}: default via {}", route.gateway))
    }
}

fn kernel_error(code: i32, message: Option<String>) -> Error {
    Error::new(
        KernelError {
            errno: Errno::from_raw(-code),
            message,
        }
        .to_string(),
    )
}

fn address_family(family: Family) -> AddressFamily {
    match family {
        Family::Ipv4 => AddressFamily::Inet,
        Family::Ipv6 => AddressFamily::Inet6,
    }
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

fn rule_message(rule: &KernelRule) -> RuleMessage {
    let mut msg = RuleMessage::default();
    let (action, table) = match rule.action {
        Action::Gateway => (RuleAction::ToTable, GATEWAY_TABLE),
        Action::Prohibit => (RuleAction::Prohibit, 0),
    };
    msg.header = RuleHeader {
        family: address_family(rule.family()),
        dst_len: rule.dst.prefix_len(),
        table: table as u8,
        action,
        ..RuleHeader::default()
    };
    msg.attributes.push(RuleAttribute::Priority(rule.priority));
    if rule.dst.prefix_len() > 0 {
        msg.attributes
            .push(RuleAttribute::Destination(rule.dst.network()));
    }
    if rule.action == Action::Gateway {
        msg.attributes.push(RuleAttribute::Table(GATEWAY_TABLE));
    }
    msg.attributes
        .push(RuleAttribute::Protocol(RouteProtocol::Static));
    msg
}

/// `None` for rules outside the sidecar's range.
fn own_rule(family: Family, msg: RuleMessage) -> Option<OwnRule> {
    let priority = msg.attributes.iter().find_map(|a| match a {
        RuleAttribute::Priority(p) => Some(*p),
        _ => None,
    })?;
    if !(PRIORITY_BASE..=PRIORITY_FLOOR).contains(&priority) {
        return None;
    }
    match parse_own_rule(family, priority, &msg) {
        Ok(rule) => Some(OwnRule::Known(rule)),
        Err(why) => Some(OwnRule::Foreign {
            text: format!("priority {priority} ({family}): {why}"),
            msg,
        }),
    }
}

fn parse_own_rule(
    family: Family,
    priority: u32,
    msg: &RuleMessage,
) -> std::result::Result<KernelRule, String> {
    let h = &msg.header;
    if h.src_len != 0 || h.tos != 0 || h.flags.intersects(RuleFlags::Invert) {
        return Err("it has a source, TOS or `not` selector".into());
    }
    let mut dst_addr = None;
    let mut table = u32::from(h.table);
    for attr in &msg.attributes {
        match attr {
            RuleAttribute::Priority(_) | RuleAttribute::Protocol(_) => {}
            RuleAttribute::Destination(a) => dst_addr = Some(*a),
            RuleAttribute::Table(t) => table = *t,
            // The kernel reports these unset values on some versions.
            RuleAttribute::SuppressPrefixLen(u32::MAX)
            | RuleAttribute::SuppressIfGroup(u32::MAX) => {}
            other => {
                return Err(format!(
                    "it has a selector the sidecar does not use: {other:?}"
                ));
            }
        }
    }
    let action = match (h.action, table) {
        (RuleAction::ToTable, GATEWAY_TABLE) => Action::Gateway,
        (RuleAction::Prohibit, _) => Action::Prohibit,
        (action, table) => return Err(format!("its action is {action:?} (table {table})")),
    };
    let dst = match dst_addr {
        None if h.dst_len == 0 => family.everything(),
        Some(addr) => IpNet::new(addr, h.dst_len).map_err(|e| format!("destination: {e}"))?,
        None => return Err("it has a prefix length without an address".into()),
    };
    let rule = KernelRule {
        priority,
        dst,
        action,
    };
    let expected = if priority == PRIORITY_FLOOR && dst.prefix_len() == 0 {
        KernelRule::floor(family)
    } else {
        KernelRule {
            priority: kernel::priority(&dst),
            ..rule
        }
    };
    if rule != expected {
        return Err(format!("`{rule}` is not at the priority of its prefix"));
    }
    Ok(rule)
}

fn default_route(header: RouteHeader, attrs: &[u8], table: u32) -> Option<DefaultRoute> {
    if header.destination_prefix_length != 0 || header.kind != RouteType::Unicast {
        return None;
    }
    let mut route_table = u32::from(header.table);
    let (mut gateway, mut ifindex, mut metric) = (None, None, None);
    for nla in NlasIterator::new(attrs) {
        // A route whose attributes do not decode is not one to use.
        let nla = nla.ok()?;
        let value = nla.value();
        match nla.kind() {
            libc::RTA_TABLE => route_table = parse_u32(value).ok()?,
            libc::RTA_GATEWAY => gateway = Some(parse_ip(value).ok()?),
            libc::RTA_OIF => ifindex = Some(parse_u32(value).ok()?),
            libc::RTA_PRIORITY => metric = Some(parse_u32(value).ok()?),
            _ => {}
        }
    }
    (route_table == table).then_some(())?;
    Some(DefaultRoute {
        gateway: gateway?,
        ifindex: ifindex?,
        metric,
        table,
        header,
    })
}
