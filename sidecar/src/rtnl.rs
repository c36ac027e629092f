//! rtnetlink, synchronously, through netlink-sys and netlink-packet-route:
//! the rules, the gateway table and the main table's default routes; in
//! router mode also the links, addresses and routes of the sandbox's link
//! and of the reject table.

use std::net::IpAddr;
use std::os::fd::{AsRawFd, BorrowedFd};

use ipnet::IpNet;
use lazaret_sidecar::kernel::{
    self, Action, GATEWAY_TABLE, KernelRule, PRIORITY_BASE, PRIORITY_FLOOR,
};
use lazaret_sidecar::link;
use lazaret_sidecar::policy::Family;
use lazaret_sidecar::report::Gateway;
use netlink_packet_core::{
    DecodeError, Emitable, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE,
    NetlinkDeserializable, NetlinkHeader, NetlinkSerializable, NlasIterator, Parseable, parse_ip,
    parse_string, parse_u32,
};
use netlink_packet_route::AddressFamily;
use netlink_packet_route::link::LinkHeader;
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteProtocol, RouteScope,
    RouteType,
};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleFlags, RuleHeader, RuleMessage};
use netlink_sys::protocols::NETLINK_ROUTE;

use crate::error::{Context, Error, Result};
use crate::netlink::{Attrs, Channel};

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
    /// A request built by hand: its type and payload.
    Raw(u16, Vec<u8>),
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
            Msg::Raw(kind, _) => *kind,
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
            Msg::Raw(_, payload) => payload.len(),
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
            Msg::Raw(_, payload) => buffer.copy_from_slice(payload),
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

/// A rule in the sidecar's priority range, as the kernel reported it.
#[derive(Debug, Clone)]
pub enum OwnRule {
    /// One the sidecar makes.
    Known(KernelRule),
    /// Something else: the next `apply` deletes it.
    Foreign { text: String, msg: RuleMessage },
}

/// What a rule outside the policy's range matches.
#[derive(Debug, Clone, Copy)]
pub enum Selector {
    Mark(u32),
    To(IpNet),
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Selector::Mark(m) => write!(f, "fwmark {m:#x}"),
            Selector::To(net) => write!(f, "to {net}"),
        }
    }
}

/// A default route to add.
#[derive(Debug, Clone)]
pub struct DefaultRouteSpec {
    pub family: Family,
    pub table: u32,
    /// Unicast, or an error route (`prohibit`).
    pub kind: RouteType,
    pub gateway: Option<IpAddr>,
    pub ifindex: Option<u32>,
    pub metric: Option<u32>,
    pub onlink: bool,
}

/// A route the kernel reported.
#[derive(Debug, Clone)]
pub struct RouteInfo {
    pub header: RouteHeader,
    pub table: u32,
    pub dst: Option<IpAddr>,
    pub gateway: Option<IpAddr>,
    pub ifindex: Option<u32>,
    pub metric: Option<u32>,
}

impl RouteInfo {
    pub fn kind(&self) -> RouteType {
        self.header.kind
    }

    pub fn dst_len(&self) -> u8 {
        self.header.destination_prefix_length
    }
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

/// What a deny rule does: `prohibit` (EACCES at once for the namespace's
/// own sockets, but rate-limited for forwarded packets), or, in router mode,
/// `lookup REJECT_TABLE`, whose route leads to netfilter's reject rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deny {
    Prohibit,
    RejectTable,
}

#[derive(Debug)]
pub struct Netlink {
    channel: Channel,
    deny: Deny,
}

impl Netlink {
    pub fn open() -> Result<Netlink> {
        Ok(Netlink {
            channel: Channel::open(NETLINK_ROUTE)?,
            deny: Deny::Prohibit,
        })
    }

    /// A socket in the network namespace `ns` (an open `/proc/PID/ns/net`
    /// or a bind-mounted namespace file): made by a thread that enters it,
    /// since a socket stays in the namespace it was made in and setns moves
    /// only the calling thread.
    pub fn open_in(ns: &std::fs::File, what: &str) -> Result<Netlink> {
        let ns = ns
            .try_clone()
            .with_context(|| format!("cannot use {what}"))?;
        std::thread::scope(|s| {
            s.spawn(|| {
                nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET)
                    .with_context(|| format!("cannot enter {what}"))?;
                Netlink::open()
            })
            .join()
            .unwrap_or_else(|_| {
                Err(Error::new(format!(
                    "cannot enter {what}: the thread failed"
                )))
            })
        })
    }

    /// How deny rules are made and recognised from now on.
    pub fn set_deny(&mut self, deny: Deny) {
        self.deny = deny;
    }

    /// Whether deny rules look up the reject table (router mode).
    pub fn router_mode(&self) -> bool {
        self.deny == Deny::RejectTable
    }

    /// Router mode if the namespace has the reject device (`serve --link`
    /// made it): for `apply` and `show` without `--control`.
    pub fn detect_deny(&mut self) -> Result<()> {
        if self.link_index(link::REJECT_DEVICE)?.is_some() {
            self.deny = Deny::RejectTable;
        }
        Ok(())
    }

    fn exchange(&mut self, msg: Msg, flags: u16) -> Result<Vec<Msg>> {
        self.channel.exchange(msg, flags)
    }

    fn dump(&mut self, msg: Msg) -> Result<Vec<Msg>> {
        self.channel.dump(msg)
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

    /// Every rule of one family.
    fn rules(&mut self, family: Family) -> Result<Vec<RuleMessage>> {
        let mut request = RuleMessage::default();
        request.header.family = address_family(family);
        let answer = self
            .dump(Msg::GetRule(request))
            .with_context(|| format!("cannot list the {family} rules"))?;
        Ok(answer
            .into_iter()
            .filter_map(|m| match m {
                Msg::NewRule(rule) => Some(rule),
                _ => None,
            })
            .collect())
    }

    /// The rules in the sidecar's priority range, for one family.
    pub fn own_rules(&mut self, family: Family) -> Result<Vec<OwnRule>> {
        let deny = self.deny;
        Ok(self
            .rules(family)?
            .into_iter()
            .filter_map(|rule| own_rule(family, rule, deny))
            .collect())
    }

    pub fn add_rule(&mut self, rule: &KernelRule) -> Result<()> {
        self.change(
            Msg::NewRule(rule_message(rule, self.deny)),
            NLM_F_CREATE | NLM_F_EXCL,
        )
        .with_context(|| format!("cannot add rule {rule}"))
    }

    /// `PRIORITY: from all fwmark MARK lookup 200`, for both families: the
    /// sidecar's own marked sockets (its resolver's upstream queries) go out
    /// through the gateway whatever the policy says.
    pub fn add_mark_rule(&mut self, priority: u32, mark: u32) -> Result<()> {
        for family in Family::BOTH {
            self.add_side_rule(family, priority, Selector::Mark(mark), GATEWAY_TABLE)
                .context("cannot add the rule for the resolver's own queries")?;
        }
        Ok(())
    }

    /// A rule outside the policy's range: `PRIORITY: SELECTOR lookup TABLE`
    /// (kept if it is there already).
    pub fn add_side_rule(
        &mut self,
        family: Family,
        priority: u32,
        selector: Selector,
        table: u32,
    ) -> Result<()> {
        let mut msg = RuleMessage::default();
        msg.header = RuleHeader {
            family: address_family(family),
            table: u8::try_from(table).unwrap_or(libc::RT_TABLE_UNSPEC),
            action: RuleAction::ToTable,
            ..RuleHeader::default()
        };
        msg.attributes.push(RuleAttribute::Priority(priority));
        match selector {
            Selector::Mark(mark) => msg.attributes.push(RuleAttribute::FwMark(mark)),
            Selector::To(net) => {
                msg.header.dst_len = net.prefix_len();
                msg.attributes
                    .push(RuleAttribute::Destination(net.network()));
            }
        }
        msg.attributes.push(RuleAttribute::Table(table));
        msg.attributes
            .push(RuleAttribute::Protocol(RouteProtocol::Static));
        match self.change(Msg::NewRule(msg), NLM_F_CREATE | NLM_F_EXCL) {
            Err(e) if e.to_string().contains("EEXIST") => Ok(()),
            other => other.with_context(|| {
                format!("cannot add the {family} rule {priority}: {selector} lookup {table}")
            }),
        }
    }

    /// The rules at `priority`, as `PRIORITY: SELECTOR lookup TABLE` (or
    /// what else they are).
    pub fn side_rules(&mut self, family: Family, priority: u32) -> Result<Vec<String>> {
        Ok(self
            .rules(family)?
            .iter()
            .filter(|rule| rule.attributes.contains(&RuleAttribute::Priority(priority)))
            .map(describe_rule)
            .collect())
    }

    pub fn delete_rule(&mut self, rule: &KernelRule) -> Result<()> {
        self.change(Msg::DelRule(rule_message(rule, self.deny)), 0)
            .with_context(|| format!("cannot delete rule {rule}"))
    }

    pub fn delete_foreign_rule(&mut self, text: &str, msg: RuleMessage) -> Result<()> {
        self.change(Msg::DelRule(msg), 0)
            .with_context(|| format!("cannot delete the foreign rule {text}"))
    }

    /// The unicast default routes of `table`.
    pub fn default_routes(&mut self, family: Family, table: u32) -> Result<Vec<DefaultRoute>> {
        Ok(self
            .routes(family, table)?
            .into_iter()
            .filter_map(default_route)
            .collect())
    }

    /// Sets the gateway table's default route for the gateway's family.
    pub fn set_gateway(&mut self, gateway: &Gateway) -> Result<()> {
        let route = DefaultRouteSpec {
            family: gateway.family,
            table: GATEWAY_TABLE,
            kind: RouteType::Unicast,
            gateway: Some(gateway.address),
            ifindex: Some(gateway.ifindex),
            metric: None,
            // No route to the gateway is needed: the main table's connected
            // routes are never consulted.
            onlink: true,
        };
        self.add_default_route(&route).with_context(|| {
            format!(
                "cannot set the {} gateway route: default via {} dev {} onlink table {GATEWAY_TABLE}",
                gateway.family, gateway.address, gateway.dev
            )
        })
    }

    /// Adds (or replaces) a default route.
    pub fn add_default_route(&mut self, route: &DefaultRouteSpec) -> Result<()> {
        let mut msg = RouteMessage::default();
        msg.header = RouteHeader {
            address_family: address_family(route.family),
            destination_prefix_length: 0,
            table: u8::try_from(route.table).unwrap_or(libc::RT_TABLE_UNSPEC),
            protocol: RouteProtocol::Static,
            scope: if route.kind == RouteType::Unicast && route.gateway.is_none() {
                RouteScope::Link
            } else {
                RouteScope::Universe
            },
            kind: route.kind,
            flags: if route.onlink {
                RouteFlags::Onlink
            } else {
                RouteFlags::empty()
            },
            ..RouteHeader::default()
        };
        msg.attributes.push(RouteAttribute::Table(route.table));
        if let Some(gateway) = route.gateway {
            msg.attributes
                .push(RouteAttribute::Gateway(RouteAddress::from(gateway)));
        }
        if let Some(ifindex) = route.ifindex {
            msg.attributes.push(RouteAttribute::Oif(ifindex));
        }
        if let Some(metric) = route.metric {
            msg.attributes.push(RouteAttribute::Priority(metric));
        }
        self.change(Msg::NewRoute(msg), NLM_F_CREATE | NLM_F_REPLACE)
    }

    /// The routes of `table`.
    pub fn routes(&mut self, family: Family, table: u32) -> Result<Vec<RouteInfo>> {
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
                Msg::Route(h, attrs) => route_info(h, &attrs).filter(|r| r.table == table),
                _ => None,
            })
            .collect())
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

/// A link of the namespace, as the kernel reported it.
#[derive(Debug, Clone)]
pub struct LinkInfo {
    pub index: u32,
    pub name: String,
    pub up: bool,
    /// Whether the link has carrier (`LOWER_UP`).
    pub carrier: bool,
    pub mtu: Option<u32>,
}

/// Link attributes (linux/if_link.h, linux/veth.h) and address attributes
/// (linux/if_addr.h).
const IFLA_MTU: u16 = 4;
const IFLA_LINKINFO: u16 = 18;
const IFLA_NET_NS_FD: u16 = 28;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const VETH_INFO_PEER: u16 = 1;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_FLAGS: u16 = 8;
const IFA_F_NODAD: u32 = 0x02;
const IFF_UP: u32 = libc::IFF_UP as u32;
const IFF_LOWER_UP: u32 = libc::IFF_LOWER_UP as u32;

/// `struct ifinfomsg`.
fn ifinfomsg(index: u32, flags: u32, change: u32) -> Vec<u8> {
    let mut b = vec![libc::AF_UNSPEC as u8, 0, 0, 0];
    b.extend_from_slice(&index.to_ne_bytes());
    b.extend_from_slice(&flags.to_ne_bytes());
    b.extend_from_slice(&change.to_ne_bytes());
    b
}

impl Netlink {
    /// The namespace's links.
    pub fn links(&mut self) -> Result<Vec<LinkInfo>> {
        let answer = self
            .dump(Msg::GetLink(LinkHeader::default()))
            .context("cannot list the links")?;
        Ok(answer
            .into_iter()
            .filter_map(|m| match m {
                Msg::Link(h, attrs) => {
                    let flags = h.flags.bits();
                    Some(LinkInfo {
                        index: h.index,
                        name: crate::netlink::attr(&attrs, IFLA_IFNAME)
                            .map(crate::netlink::string)?,
                        up: flags & IFF_UP != 0,
                        carrier: flags & IFF_LOWER_UP != 0,
                        mtu: crate::netlink::attr(&attrs, IFLA_MTU).and_then(crate::netlink::ne32),
                    })
                }
                _ => None,
            })
            .collect())
    }

    pub fn link(&mut self, name: &str) -> Result<Option<LinkInfo>> {
        Ok(self.links()?.into_iter().find(|l| l.name == name))
    }

    pub fn link_index(&mut self, name: &str) -> Result<Option<u32>> {
        Ok(self.link(name)?.map(|l| l.index))
    }

    /// A veth pair: `name` in this namespace, `peer` in the namespace
    /// `peer_ns` (or this one), both with `mtu`.
    pub fn add_veth(
        &mut self,
        name: &str,
        peer: &str,
        mtu: u32,
        peer_ns: Option<BorrowedFd<'_>>,
    ) -> Result<()> {
        let mut peer_attrs = Attrs::new();
        peer_attrs.string(IFLA_IFNAME, peer).u32_ne(IFLA_MTU, mtu);
        if let Some(fd) = peer_ns {
            peer_attrs.u32_ne(IFLA_NET_NS_FD, fd.as_raw_fd() as u32);
        }
        let mut peer_msg = ifinfomsg(0, 0, 0);
        peer_msg.extend_from_slice(peer_attrs.bytes());
        // As iproute2 sends them: nested attributes without NLA_F_NESTED.
        let mut data = Attrs::new();
        data.put(VETH_INFO_PEER, &peer_msg);
        let mut info = Attrs::new();
        info.string(IFLA_INFO_KIND, "veth")
            .put(IFLA_INFO_DATA, data.bytes());
        let mut attrs = Attrs::new();
        attrs
            .string(IFLA_IFNAME, name)
            .u32_ne(IFLA_MTU, mtu)
            .put(IFLA_LINKINFO, info.bytes());
        let mut payload = ifinfomsg(0, 0, 0);
        payload.extend_from_slice(attrs.bytes());
        self.change(
            Msg::Raw(libc::RTM_NEWLINK, payload),
            NLM_F_CREATE | NLM_F_EXCL,
        )
        .with_context(|| {
            format!(
                "cannot create the veth pair {name}/{peer} (mtu {mtu}){}",
                if peer_ns.is_some() {
                    format!(", {peer} in the other namespace")
                } else {
                    String::new()
                }
            )
        })
    }

    pub fn delete_link(&mut self, index: u32, name: &str) -> Result<()> {
        self.change(Msg::Raw(libc::RTM_DELLINK, ifinfomsg(index, 0, 0)), 0)
            .with_context(|| format!("cannot delete the link {name}"))
    }

    pub fn set_up(&mut self, index: u32, name: &str) -> Result<()> {
        self.change(
            Msg::Raw(libc::RTM_NEWLINK, ifinfomsg(index, IFF_UP, IFF_UP)),
            0,
        )
        .with_context(|| format!("cannot set {name} up"))
    }

    /// Adds `addr` (with its prefix length) to the link; IPv6 without
    /// duplicate address detection (`nodad`), so it is usable at once.
    pub fn add_address(&mut self, index: u32, name: &str, addr: IpNet) -> Result<()> {
        let (family, bytes, flags) = match addr {
            IpNet::V4(n) => (libc::AF_INET, n.addr().octets().to_vec(), 0),
            IpNet::V6(n) => (libc::AF_INET6, n.addr().octets().to_vec(), IFA_F_NODAD),
        };
        // struct ifaddrmsg: family, prefix length, flags, scope, index.
        let mut payload = vec![family as u8, addr.prefix_len(), flags as u8, 0];
        payload.extend_from_slice(&index.to_ne_bytes());
        let mut attrs = Attrs::new();
        attrs
            .put(IFA_LOCAL, &bytes)
            .put(IFA_ADDRESS, &bytes)
            .u32_ne(IFA_FLAGS, flags);
        payload.extend_from_slice(attrs.bytes());
        self.change(
            Msg::Raw(libc::RTM_NEWADDR, payload),
            NLM_F_CREATE | NLM_F_EXCL,
        )
        .with_context(|| format!("cannot add the address {addr} to {name}"))
    }
}

fn address_family(family: Family) -> AddressFamily {
    match family {
        Family::Ipv4 => AddressFamily::Inet,
        Family::Ipv6 => AddressFamily::Inet6,
    }
}

fn rule_message(rule: &KernelRule, deny: Deny) -> RuleMessage {
    let mut msg = RuleMessage::default();
    let (action, table) = match (rule.action, deny) {
        (Action::Gateway, _) => (RuleAction::ToTable, GATEWAY_TABLE),
        (Action::Prohibit, Deny::Prohibit) => (RuleAction::Prohibit, 0),
        (Action::Prohibit, Deny::RejectTable) => (RuleAction::ToTable, link::REJECT_TABLE),
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
    if action == RuleAction::ToTable {
        msg.attributes.push(RuleAttribute::Table(table));
    }
    msg.attributes
        .push(RuleAttribute::Protocol(RouteProtocol::Static));
    msg
}

/// `None` for rules outside the sidecar's range.
fn own_rule(family: Family, msg: RuleMessage, deny: Deny) -> Option<OwnRule> {
    let priority = msg.attributes.iter().find_map(|a| match a {
        RuleAttribute::Priority(p) => Some(*p),
        _ => None,
    })?;
    if !(PRIORITY_BASE..=PRIORITY_FLOOR).contains(&priority) {
        return None;
    }
    match parse_own_rule(family, priority, &msg, deny) {
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
    deny: Deny,
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
    // In router mode a `prohibit` rule is not the sidecar's (the next apply
    // replaces it); otherwise `lookup REJECT_TABLE` is not.
    let action = match (h.action, table, deny) {
        (RuleAction::ToTable, GATEWAY_TABLE, _) => Action::Gateway,
        (RuleAction::Prohibit, _, Deny::Prohibit) => Action::Prohibit,
        (RuleAction::ToTable, link::REJECT_TABLE, Deny::RejectTable) => Action::Prohibit,
        (action, table, _) => return Err(format!("its action is {action:?} (table {table})")),
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

/// `PRIORITY: [to DST] [fwmark M] lookup TABLE`, or the action.
fn describe_rule(rule: &RuleMessage) -> String {
    let mut priority = 0;
    let mut table = u32::from(rule.header.table);
    let mut parts = Vec::new();
    for a in &rule.attributes {
        match a {
            RuleAttribute::Priority(p) => priority = *p,
            RuleAttribute::Table(t) => table = *t,
            RuleAttribute::Destination(d) => {
                parts.push(format!("to {d}/{}", rule.header.dst_len));
            }
            RuleAttribute::FwMark(m) => parts.push(format!("fwmark {m:#x}")),
            _ => {}
        }
    }
    if parts.is_empty() {
        parts.push("from all".into());
    }
    let action = match rule.header.action {
        RuleAction::ToTable if table == MAIN_TABLE => "lookup main".to_string(),
        RuleAction::ToTable => format!("lookup {table}"),
        other => format!("{other:?}").to_lowercase(),
    };
    format!("{priority}: {} {action}", parts.join(" "))
}

fn route_info(header: RouteHeader, attrs: &[u8]) -> Option<RouteInfo> {
    let mut table = u32::from(header.table);
    let (mut dst, mut gateway, mut ifindex, mut metric) = (None, None, None, None);
    for nla in NlasIterator::new(attrs) {
        // A route whose attributes do not decode is not one to use.
        let nla = nla.ok()?;
        let value = nla.value();
        match nla.kind() {
            libc::RTA_TABLE => table = parse_u32(value).ok()?,
            libc::RTA_DST => dst = Some(parse_ip(value).ok()?),
            libc::RTA_GATEWAY => gateway = Some(parse_ip(value).ok()?),
            libc::RTA_OIF => ifindex = Some(parse_u32(value).ok()?),
            libc::RTA_PRIORITY => metric = Some(parse_u32(value).ok()?),
            _ => {}
        }
    }
    Some(RouteInfo {
        header,
        table,
        dst,
        gateway,
        ifindex,
        metric,
    })
}

fn default_route(r: RouteInfo) -> Option<DefaultRoute> {
    if r.header.destination_prefix_length != 0 || r.header.kind != RouteType::Unicast {
        return None;
    }
    Some(DefaultRoute {
        gateway: r.gateway?,
        ifindex: r.ifindex?,
        metric: r.metric,
        table: r.table,
        header: r.header,
    })
}
