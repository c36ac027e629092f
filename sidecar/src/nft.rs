//! The router's nf_tables table `inet lazaret`, over netlink: the sidecar's
//! image is `FROM scratch`, with no `nft` binary. The table is replaced in one
//! transaction (add, delete, add, its chains and rules) and read back for the
//! report. The rules in nft's syntax:
//!
//! ```text
//! table inet lazaret {
//!   chain forward { type filter hook forward priority 0; policy accept;
//!     iifname "sbx0" ip saddr != 100.64.0.2 drop
//!     iifname "sbx0" ip6 saddr != fd6c:7a72::2 drop
//!     oifname "rej0" meta l4proto tcp counter reject with tcp reset
//!     oifname "rej0" counter reject with icmpx admin-prohibited }
//!   chain input { type filter hook input priority 0; policy accept;
//!     iifname "sbx0" icmpv6 type { nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert } accept
//!     iifname "sbx0" ip saddr != 100.64.0.2 drop
//!     iifname "sbx0" ip6 saddr != fd6c:7a72::2 drop
//!     iifname "sbx0" udp dport 53 accept
//!     iifname "sbx0" tcp dport 53 accept
//!     iifname "sbx0" meta l4proto tcp counter reject with tcp reset
//!     iifname "sbx0" drop }
//!   chain postrouting { type nat hook postrouting priority 100; policy accept;
//!     oifname "tap0" ip saddr 100.64.0.0/30 masquerade
//!     oifname "tap0" ip6 saddr fd6c:7a72::/64 masquerade }
//! }
//! ```
//!
//! The anti-spoofing drops come first, so that a packet with a forged
//! source is never answered (a reset, an ICMP error or a DNS answer to an
//! address the sandbox chose; neighbour discovery uses link-local sources and
//! comes before them); in the forward chain then the rejects, before anything that could accept an
//! established flow: a denied flow is reset, never silently dropped. The
//! input chain lets the sandbox reach the sidecar's resolver and neighbour
//! discovery, nothing else (not whatever else listens in the sidecar).

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use lazaret_sidecar::link::{self, NFT_TABLE, REJECT_DEVICE, ROUTER_DEVICE, UPSTREAM_DEVICE};
use lazaret_sidecar::report::NftChain;
use netlink_packet_core::{NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE, NLM_F_EXCL};
use netlink_sys::protocols::NETLINK_NETFILTER;

use crate::error::{Context, Result};
use crate::netlink::{Attrs, Channel, Raw, attr, attrs, be32, be64, string};

const NFPROTO_INET: u8 = 1;
const NFPROTO_IPV4: u8 = 2;
const NFPROTO_IPV6: u8 = 10;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 16;
const NFNL_MSG_BATCH_END: u16 = 17;

const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_GETTABLE: u16 = 1;
const NFT_MSG_DELTABLE: u16 = 2;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_GETCHAIN: u16 = 4;
const NFT_MSG_NEWRULE: u16 = 6;
const NFT_MSG_GETRULE: u16 = 7;

const NFTA_TABLE_NAME: u16 = 1;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;

const NF_INET_LOCAL_IN: u32 = 1;
const NF_INET_FORWARD: u32 = 2;
const NF_INET_POST_ROUTING: u32 = 4;
const NF_DROP: u32 = 0;
const NF_ACCEPT: u32 = 1;

/// The register everything loads into (`reg 1`), and the verdict register.
const REG_1: u32 = 1;
const REG_VERDICT: u32 = 0;

const NFT_META_IIFNAME: u32 = 6;
const NFT_META_OIFNAME: u32 = 7;
const NFT_META_NFPROTO: u32 = 15;
const NFT_META_L4PROTO: u32 = 16;
const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;
const NFT_CMP_EQ: u32 = 0;
const NFT_CMP_NEQ: u32 = 1;
const NFT_REJECT_TCP_RST: u32 = 1;
const NFT_REJECT_ICMPX_UNREACH: u32 = 2;
const NFT_REJECT_ICMPX_ADMIN_PROHIBITED: u8 = 3;

const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const IPPROTO_ICMPV6: u8 = 58;
const ND_ROUTER_SOLICIT: u8 = 133;
const ND_NEIGHBOR_SOLICIT: u8 = 135;
const ND_NEIGHBOR_ADVERT: u8 = 136;
const DNS_PORT: u16 = 53;
/// The kernel's interface names are compared as 16 bytes, NUL-padded.
const IFNAMSIZ: usize = 16;

/// One expression of a rule, as the sidecar writes it and as it decodes the
/// kernel's dump (the same value both ways, so a rule read back compares
/// equal to the one written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    Meta {
        key: u32,
        dreg: u32,
    },
    Cmp {
        sreg: u32,
        op: u32,
        data: Vec<u8>,
    },
    Payload {
        base: u32,
        offset: u32,
        len: u32,
        dreg: u32,
    },
    Bitwise {
        sreg: u32,
        dreg: u32,
        len: u32,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    Reject {
        kind: u32,
        code: Option<u8>,
    },
    /// `immediate reg 0 VERDICT`: accept or drop.
    Verdict(u32),
    Masq,
    /// `counter`: written at zero; its counts, read back, are not part of
    /// the rule's identity ([`Counts`] sums them).
    Counter,
    /// Anything else, by its name and attributes (never written).
    Other(String),
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = |d: &[u8]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        match self {
            Expr::Meta { key, dreg } => write!(f, "[meta load {key} => reg {dreg}]"),
            Expr::Cmp { sreg, op, data } => write!(f, "[cmp {op} reg {sreg} 0x{}]", hex(data)),
            Expr::Payload {
                base,
                offset,
                len,
                dreg,
            } => write!(f, "[payload load {len}b @ {base} + {offset} => reg {dreg}]"),
            Expr::Bitwise {
                sreg,
                dreg,
                len,
                mask,
                xor,
            } => write!(
                f,
                "[bitwise reg {dreg} = (reg {sreg} & 0x{}) ^ 0x{} ({len}b)]",
                hex(mask),
                hex(xor)
            ),
            Expr::Reject { kind, code } => write!(f, "[reject type {kind} code {code:?}]"),
            Expr::Verdict(v) => write!(f, "[immediate reg 0 verdict {v}]"),
            Expr::Masq => f.write_str("[masq]"),
            Expr::Counter => f.write_str("[counter]"),
            Expr::Other(s) => write!(f, "[{s}]"),
        }
    }
}

impl Expr {
    fn name(&self) -> &str {
        match self {
            Expr::Meta { .. } => "meta",
            Expr::Cmp { .. } => "cmp",
            Expr::Payload { .. } => "payload",
            Expr::Bitwise { .. } => "bitwise",
            Expr::Reject { .. } => "reject",
            Expr::Verdict(_) => "immediate",
            Expr::Masq => "masq",
            Expr::Counter => "counter",
            Expr::Other(s) => s,
        }
    }

    fn encode(&self) -> Attrs {
        let value = |bytes: &[u8]| {
            let mut a = Attrs::new();
            a.put(NFTA_DATA_VALUE, bytes);
            a
        };
        let mut a = Attrs::new();
        match self {
            Expr::Meta { key, dreg } => {
                a.u32_be(1, *dreg).u32_be(2, *key);
            }
            Expr::Cmp { sreg, op, data } => {
                a.u32_be(1, *sreg).u32_be(2, *op).nested(3, &value(data));
            }
            Expr::Payload {
                base,
                offset,
                len,
                dreg,
            } => {
                a.u32_be(1, *dreg)
                    .u32_be(2, *base)
                    .u32_be(3, *offset)
                    .u32_be(4, *len);
            }
            Expr::Bitwise {
                sreg,
                dreg,
                len,
                mask,
                xor,
            } => {
                a.u32_be(1, *sreg)
                    .u32_be(2, *dreg)
                    .u32_be(3, *len)
                    .nested(4, &value(mask))
                    .nested(5, &value(xor));
            }
            Expr::Reject { kind, code } => {
                a.u32_be(1, *kind);
                if let Some(code) = code {
                    a.put(2, &[*code]);
                }
            }
            Expr::Verdict(v) => {
                let mut code = Attrs::new();
                code.u32_be(NFTA_VERDICT_CODE, *v);
                let mut data = Attrs::new();
                data.nested(NFTA_DATA_VERDICT, &code);
                a.u32_be(1, REG_VERDICT).nested(2, &data);
            }
            Expr::Masq | Expr::Counter | Expr::Other(_) => {}
        }
        a
    }

    fn decode(name: &str, data: &[u8]) -> Expr {
        Expr::try_decode(name, data).unwrap_or_else(|| {
            let attrs: Vec<String> = attrs(data)
                .map(|(k, v)| {
                    format!(
                        "{k}={}",
                        v.iter().map(|b| format!("{b:02x}")).collect::<String>()
                    )
                })
                .collect();
            Expr::Other(format!("{name} {}", attrs.join(" ")).trim_end().to_string())
        })
    }

    fn try_decode(name: &str, data: &[u8]) -> Option<Expr> {
        let n = |k: u16| attr(data, k).and_then(be32);
        let value = |k: u16| {
            attr(data, k)
                .and_then(|v| attr(v, NFTA_DATA_VALUE))
                .map(<[u8]>::to_vec)
        };
        Some(match name {
            "meta" => Expr::Meta {
                dreg: n(1)?,
                key: n(2)?,
            },
            "cmp" => Expr::Cmp {
                sreg: n(1)?,
                op: n(2)?,
                data: value(3)?,
            },
            "payload" => Expr::Payload {
                dreg: n(1)?,
                base: n(2)?,
                offset: n(3)?,
                len: n(4)?,
            },
            // Newer kernels also report the operation: 0 is the boolean one.
            "bitwise" if n(6).unwrap_or(0) == 0 => Expr::Bitwise {
                sreg: n(1)?,
                dreg: n(2)?,
                len: n(3)?,
                mask: value(4)?,
                xor: value(5)?,
            },
            "reject" => Expr::Reject {
                kind: n(1)?,
                code: attr(data, 2).and_then(|c| c.first().copied()),
            },
            "immediate" if n(1)? == REG_VERDICT => {
                let verdict = attr(data, 2).and_then(|d| attr(d, NFTA_DATA_VERDICT))?;
                if attr(verdict, 2).is_some() {
                    return None; // a jump to a chain
                }
                Expr::Verdict(attr(verdict, NFTA_VERDICT_CODE).and_then(be32)?)
            }
            "masq" if data.is_empty() => Expr::Masq,
            "counter" => Expr::Counter,
            _ => return None,
        })
    }
}

fn ifname(key: u32, name: &str) -> [Expr; 2] {
    let mut data = name.as_bytes().to_vec();
    data.resize(IFNAMSIZ, 0);
    [
        Expr::Meta { key, dreg: REG_1 },
        Expr::Cmp {
            sreg: REG_1,
            op: NFT_CMP_EQ,
            data,
        },
    ]
}

fn meta_eq(key: u32, value: u8) -> [Expr; 2] {
    [
        Expr::Meta { key, dreg: REG_1 },
        Expr::Cmp {
            sreg: REG_1,
            op: NFT_CMP_EQ,
            data: vec![value],
        },
    ]
}

fn nfproto(v6: bool) -> [Expr; 2] {
    meta_eq(
        NFT_META_NFPROTO,
        if v6 { NFPROTO_IPV6 } else { NFPROTO_IPV4 },
    )
}

fn l4proto(proto: u8) -> [Expr; 2] {
    meta_eq(NFT_META_L4PROTO, proto)
}

fn load(base: u32, offset: u32, len: u32) -> Expr {
    Expr::Payload {
        base,
        offset,
        len,
        dreg: REG_1,
    }
}

/// The source address's offset in the IPv4 and IPv6 headers.
fn saddr_offset(v6: bool) -> u32 {
    if v6 { 8 } else { 12 }
}

fn octets(addr: IpAddr) -> Vec<u8> {
    match addr {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// `ip saddr != ADDR` / `ip6 saddr != ADDR`.
fn saddr_not(addr: IpAddr) -> Vec<Expr> {
    let v6 = addr.is_ipv6();
    let bytes = octets(addr);
    let mut e = nfproto(v6).to_vec();
    e.push(load(
        NFT_PAYLOAD_NETWORK_HEADER,
        saddr_offset(v6),
        bytes.len() as u32,
    ));
    e.push(Expr::Cmp {
        sreg: REG_1,
        op: NFT_CMP_NEQ,
        data: bytes,
    });
    e
}

/// `ip saddr NET` / `ip6 saddr NET`, as nft writes it: whole bytes of the
/// prefix are compared directly, a partial byte through a mask.
fn saddr_in(net: IpNet) -> Vec<Expr> {
    let v6 = matches!(net, IpNet::V6(_));
    let prefix = usize::from(net.prefix_len());
    let whole = prefix.div_ceil(8);
    let network = octets(net.network());
    let mut e = nfproto(v6).to_vec();
    e.push(load(
        NFT_PAYLOAD_NETWORK_HEADER,
        saddr_offset(v6),
        whole as u32,
    ));
    if prefix % 8 != 0 {
        let mask = octets(net.netmask())[..whole].to_vec();
        e.push(Expr::Bitwise {
            sreg: REG_1,
            dreg: REG_1,
            len: whole as u32,
            mask,
            xor: vec![0; whole],
        });
    }
    e.push(Expr::Cmp {
        sreg: REG_1,
        op: NFT_CMP_EQ,
        data: network[..whole].to_vec(),
    });
    e
}

fn dport(proto: u8, port: u16) -> Vec<Expr> {
    let mut e = l4proto(proto).to_vec();
    e.push(load(NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2));
    e.push(Expr::Cmp {
        sreg: REG_1,
        op: NFT_CMP_EQ,
        data: port.to_be_bytes().to_vec(),
    });
    e
}

fn icmpv6_type(kind: u8) -> Vec<Expr> {
    let mut e = nfproto(true).to_vec();
    e.extend(l4proto(IPPROTO_ICMPV6));
    e.push(load(NFT_PAYLOAD_TRANSPORT_HEADER, 0, 1));
    e.push(Expr::Cmp {
        sreg: REG_1,
        op: NFT_CMP_EQ,
        data: vec![kind],
    });
    e
}

const TCP_RESET: Expr = Expr::Reject {
    kind: NFT_REJECT_TCP_RST,
    code: None,
};

/// A rule: nft's text for it, and its expressions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub text: String,
    pub exprs: Vec<Expr>,
}

fn rule(text: String, parts: &[&[Expr]]) -> Rule {
    Rule {
        text,
        exprs: parts.concat(),
    }
}

/// A base chain of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub name: &'static str,
    pub kind: &'static str,
    pub hook: u32,
    pub priority: i32,
    pub rules: Vec<Rule>,
}

fn hook_name(hook: u32) -> String {
    match hook {
        NF_INET_LOCAL_IN => "input".into(),
        NF_INET_FORWARD => "forward".into(),
        NF_INET_POST_ROUTING => "postrouting".into(),
        other => format!("hook {other}"),
    }
}

/// The table's chains and rules.
pub fn ruleset() -> Vec<Chain> {
    let from_link = ifname(NFT_META_IIFNAME, ROUTER_DEVICE);
    let to_reject = ifname(NFT_META_OIFNAME, REJECT_DEVICE);
    let to_upstream = ifname(NFT_META_OIFNAME, UPSTREAM_DEVICE);
    let (iif, oifr, oifu) = (
        format!("iifname \"{ROUTER_DEVICE}\""),
        format!("oifname \"{REJECT_DEVICE}\""),
        format!("oifname \"{UPSTREAM_DEVICE}\""),
    );
    let anti_spoofing: Vec<Rule> = [false, true]
        .map(|v6| {
            let ip = if v6 { "ip6" } else { "ip" };
            let sandbox = link::sandbox(v6);
            rule(
                format!("{iif} {ip} saddr != {sandbox} drop"),
                &[&from_link, &saddr_not(sandbox), &[Expr::Verdict(NF_DROP)]],
            )
        })
        .to_vec();
    let mut forward = anti_spoofing.clone();
    // Each refusal is counted: the host shows how many the agent met.
    forward.push(rule(
        format!("{oifr} meta l4proto tcp counter reject with tcp reset"),
        &[
            &to_reject,
            &l4proto(IPPROTO_TCP),
            &[Expr::Counter, TCP_RESET],
        ],
    ));
    forward.push(rule(
        format!("{oifr} counter reject with icmpx admin-prohibited"),
        &[
            &to_reject,
            &[
                Expr::Counter,
                Expr::Reject {
                    kind: NFT_REJECT_ICMPX_UNREACH,
                    code: Some(NFT_REJECT_ICMPX_ADMIN_PROHIBITED),
                },
            ],
        ],
    ));

    let mut input = Vec::new();
    for (kind, name) in [
        (ND_ROUTER_SOLICIT, "nd-router-solicit"),
        (ND_NEIGHBOR_SOLICIT, "nd-neighbor-solicit"),
        (ND_NEIGHBOR_ADVERT, "nd-neighbor-advert"),
    ] {
        input.push(rule(
            format!("{iif} icmpv6 type {name} accept"),
            &[&from_link, &icmpv6_type(kind), &[Expr::Verdict(NF_ACCEPT)]],
        ));
    }
    input.extend(anti_spoofing);
    for (proto, name) in [(IPPROTO_UDP, "udp"), (IPPROTO_TCP, "tcp")] {
        input.push(rule(
            format!("{iif} {name} dport {DNS_PORT} accept"),
            &[
                &from_link,
                &dport(proto, DNS_PORT),
                &[Expr::Verdict(NF_ACCEPT)],
            ],
        ));
    }
    input.push(rule(
        format!("{iif} meta l4proto tcp counter reject with tcp reset"),
        &[
            &from_link,
            &l4proto(IPPROTO_TCP),
            &[Expr::Counter, TCP_RESET],
        ],
    ));
    // Not counted: the sandbox's own kernel sends the router multicast
    // (MLD, IGMP) nobody asked for, which is no refusal of the agent's.
    input.push(rule(
        format!("{iif} drop"),
        &[&from_link, &[Expr::Verdict(NF_DROP)]],
    ));

    let mut postrouting = Vec::new();
    for v6 in [false, true] {
        let ip = if v6 { "ip6" } else { "ip" };
        let subnet = link::subnet(v6);
        postrouting.push(rule(
            format!("{oifu} {ip} saddr {subnet} masquerade"),
            &[&to_upstream, &saddr_in(subnet), &[Expr::Masq]],
        ));
    }

    vec![
        Chain {
            name: "forward",
            kind: "filter",
            hook: NF_INET_FORWARD,
            priority: 0,
            rules: forward,
        },
        Chain {
            name: "input",
            kind: "filter",
            hook: NF_INET_LOCAL_IN,
            priority: 0,
            rules: input,
        },
        Chain {
            name: "postrouting",
            kind: "nat",
            hook: NF_INET_POST_ROUTING,
            priority: 100,
            rules: postrouting,
        },
    ]
}

fn message(kind: u16, family: u8, attrs: &Attrs) -> Raw {
    // struct nfgenmsg: family, version (NFNETLINK_V0), resource id (be16).
    let mut payload = vec![family, 0, 0, 0];
    payload.extend_from_slice(attrs.bytes());
    Raw {
        kind: (NFNL_SUBSYS_NFTABLES << 8) | kind,
        payload,
    }
}

fn batch_marker(kind: u16) -> Raw {
    let mut payload = vec![0, 0];
    payload.extend_from_slice(&NFNL_SUBSYS_NFTABLES.to_be_bytes());
    Raw { kind, payload }
}

fn table_attrs() -> Attrs {
    let mut a = Attrs::new();
    a.string(NFTA_TABLE_NAME, NFT_TABLE);
    a
}

/// Replaces the table `inet lazaret` with [`ruleset`], in one transaction:
/// either all of it is in force afterwards or nothing changed.
pub fn install() -> Result<()> {
    let mut channel = Channel::open(NETLINK_NETFILTER)?;
    let ack = NLM_F_ACK;
    let mut batch = vec![
        (batch_marker(NFNL_MSG_BATCH_BEGIN), 0, "begin".to_string()),
        // Add (if missing), delete, add: the old table goes whatever it held.
        (
            message(NFT_MSG_NEWTABLE, NFPROTO_INET, &table_attrs()),
            ack | NLM_F_CREATE,
            format!("add table inet {NFT_TABLE}"),
        ),
        (
            message(NFT_MSG_DELTABLE, NFPROTO_INET, &table_attrs()),
            ack,
            format!("delete table inet {NFT_TABLE}"),
        ),
        (
            message(NFT_MSG_NEWTABLE, NFPROTO_INET, &table_attrs()),
            ack | NLM_F_CREATE | NLM_F_EXCL,
            format!("add table inet {NFT_TABLE}"),
        ),
    ];
    for chain in ruleset() {
        let mut hook = Attrs::new();
        hook.u32_be(NFTA_HOOK_HOOKNUM, chain.hook)
            .u32_be(NFTA_HOOK_PRIORITY, chain.priority as u32);
        let mut a = Attrs::new();
        a.string(NFTA_CHAIN_TABLE, NFT_TABLE)
            .string(NFTA_CHAIN_NAME, chain.name)
            .nested(NFTA_CHAIN_HOOK, &hook)
            .u32_be(NFTA_CHAIN_POLICY, NF_ACCEPT)
            .string(NFTA_CHAIN_TYPE, chain.kind);
        batch.push((
            message(NFT_MSG_NEWCHAIN, NFPROTO_INET, &a),
            ack | NLM_F_CREATE | NLM_F_EXCL,
            format!(
                "add chain {} (type {} hook {} priority {})",
                chain.name,
                chain.kind,
                hook_name(chain.hook),
                chain.priority
            ),
        ));
        for r in &chain.rules {
            let mut list = Attrs::new();
            for e in &r.exprs {
                let mut elem = Attrs::new();
                elem.string(NFTA_EXPR_NAME, e.name())
                    .nested(NFTA_EXPR_DATA, &e.encode());
                list.nested(NFTA_LIST_ELEM, &elem);
            }
            let mut a = Attrs::new();
            a.string(NFTA_RULE_TABLE, NFT_TABLE)
                .string(NFTA_RULE_CHAIN, chain.name)
                .nested(NFTA_RULE_EXPRESSIONS, &list);
            batch.push((
                message(NFT_MSG_NEWRULE, NFPROTO_INET, &a),
                ack | NLM_F_CREATE | NLM_F_APPEND,
                format!("add rule to chain {}: {}", chain.name, r.text),
            ));
        }
    }
    batch.push((batch_marker(NFNL_MSG_BATCH_END), 0, "end".to_string()));
    channel
        .batch(batch)
        .with_context(|| format!("cannot install the nf_tables table inet {NFT_TABLE}"))
}

/// A chain read back, with its rules' expressions.
#[derive(Debug, Clone, Default)]
struct LiveChain {
    kind: String,
    hook: Option<u32>,
    priority: i32,
    policy: Option<u32>,
    rules: Vec<Vec<Expr>>,
}

/// What the kernel holds of the table: `None` when there is no table;
/// otherwise its chains, each compared with [`ruleset`], and the problems.
pub fn read_back() -> Result<Option<ReadBack>> {
    let mut channel = Channel::open(NETLINK_NETFILTER)?;
    let dump = |channel: &mut Channel, kind: u16| -> Result<Vec<Vec<u8>>> {
        Ok(channel
            .dump(message(kind, NFPROTO_INET, &Attrs::new()))?
            .into_iter()
            .filter(|m| m.kind == (NFNL_SUBSYS_NFTABLES << 8) | (kind - 1))
            .filter_map(|m| m.payload.get(4..).map(<[u8]>::to_vec))
            .collect())
    };
    let ours = |a: &[u8], k: u16| attr(a, k).map(string).as_deref() == Some(NFT_TABLE);
    let tables =
        dump(&mut channel, NFT_MSG_GETTABLE).context("cannot list the nf_tables tables")?;
    if !tables.iter().any(|t| ours(t, NFTA_TABLE_NAME)) {
        return Ok(None);
    }
    let mut live: std::collections::BTreeMap<String, LiveChain> = Default::default();
    // The packets the table refused (its counters are all on refusals).
    let mut refused = 0u64;
    for c in dump(&mut channel, NFT_MSG_GETCHAIN).context("cannot list the nf_tables chains")? {
        if !ours(&c, NFTA_CHAIN_TABLE) {
            continue;
        }
        let hook = attr(&c, NFTA_CHAIN_HOOK);
        live.insert(
            attr(&c, NFTA_CHAIN_NAME).map(string).unwrap_or_default(),
            LiveChain {
                kind: attr(&c, NFTA_CHAIN_TYPE).map(string).unwrap_or_default(),
                hook: hook.and_then(|h| attr(h, NFTA_HOOK_HOOKNUM)).and_then(be32),
                priority: hook
                    .and_then(|h| attr(h, NFTA_HOOK_PRIORITY))
                    .and_then(be32)
                    .unwrap_or(0) as i32,
                policy: attr(&c, NFTA_CHAIN_POLICY).and_then(be32),
                rules: Vec::new(),
            },
        );
    }
    for r in dump(&mut channel, NFT_MSG_GETRULE).context("cannot list the nf_tables rules")? {
        if !ours(&r, NFTA_RULE_TABLE) {
            continue;
        }
        let chain = attr(&r, NFTA_RULE_CHAIN).map(string).unwrap_or_default();
        let exprs = attr(&r, NFTA_RULE_EXPRESSIONS)
            .map(|list| {
                attrs(list)
                    .filter(|(k, _)| *k == NFTA_LIST_ELEM)
                    .map(|(_, elem)| {
                        let name = attr(elem, NFTA_EXPR_NAME).map(string).unwrap_or_default();
                        let data = attr(elem, NFTA_EXPR_DATA).unwrap_or_default();
                        if name == "counter" {
                            refused += attr(data, NFTA_COUNTER_PACKETS).and_then(be64).unwrap_or(0);
                        }
                        Expr::decode(&name, data)
                    })
                    .collect()
            })
            .unwrap_or_default();
        live.entry(chain).or_default().rules.push(exprs);
    }
    let (chains, problems) = compare(&ruleset(), live);
    Ok(Some(ReadBack {
        chains,
        problems,
        refused,
    }))
}

/// The table as read back.
pub struct ReadBack {
    pub chains: Vec<NftChain>,
    /// Every difference from [`ruleset`].
    pub problems: Vec<String>,
    /// The packets its counters refused.
    pub refused: u64,
}

/// `NFTA_COUNTER_PACKETS`: a counter's packets, a big-endian u64.
const NFTA_COUNTER_PACKETS: u16 = 2;

/// The live chains as the report shows them, and every difference from
/// `want`.
fn compare(
    want: &[Chain],
    mut live: std::collections::BTreeMap<String, LiveChain>,
) -> (Vec<NftChain>, Vec<String>) {
    let mut chains = Vec::new();
    let mut problems = Vec::new();
    for w in want {
        let Some(l) = live.remove(w.name) else {
            problems.push(format!("nf_tables: the chain {} is missing", w.name));
            continue;
        };
        if l.kind != w.kind || l.hook != Some(w.hook) || l.priority != w.priority {
            problems.push(format!(
                "nf_tables: the chain {} is type {} {} priority {}, not type {} hook {} priority {}",
                w.name,
                l.kind,
                l.hook.map_or("without a hook".into(), hook_name),
                l.priority,
                w.kind,
                hook_name(w.hook),
                w.priority
            ));
        }
        if l.policy != Some(NF_ACCEPT) {
            problems.push(format!(
                "nf_tables: the chain {}'s policy is not accept",
                w.name
            ));
        }
        let rules: Vec<String> = l
            .rules
            .iter()
            .enumerate()
            .map(|(i, exprs)| match w.rules.get(i) {
                Some(r) if r.exprs == *exprs => r.text.clone(),
                _ => format!(
                    "unexpected: {}",
                    exprs.iter().map(|e| e.to_string()).collect::<String>()
                ),
            })
            .collect();
        let expected: Vec<&str> = w.rules.iter().map(|r| r.text.as_str()).collect();
        if rules != expected {
            problems.push(format!(
                "nf_tables: the chain {}'s rules are {rules:?}, not {expected:?}",
                w.name
            ));
        }
        chains.push(NftChain {
            name: w.name.into(),
            kind: l.kind,
            hook: l.hook.map_or(String::new(), hook_name),
            priority: l.priority,
            policy: match l.policy {
                Some(NF_ACCEPT) => "accept".into(),
                Some(NF_DROP) => "drop".into(),
                other => format!("{other:?}"),
            },
            rules,
        });
    }
    for name in live.keys() {
        problems.push(format!("nf_tables: an unexpected chain {name}"));
    }
    (chains, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_expression_decodes_to_itself() {
        for chain in ruleset() {
            for r in chain.rules {
                for e in r.exprs {
                    let encoded = e.encode();
                    assert_eq!(Expr::decode(e.name(), encoded.bytes()), e, "{}", r.text);
                }
            }
        }
    }

    /// A counter read back carries its counts: the rule is still the one
    /// written, and the packets are read as the kernel writes them.
    #[test]
    fn a_counter_with_counts_is_the_counter_written() {
        let mut data = Attrs::new();
        data.put(1, &4096u64.to_be_bytes())
            .put(NFTA_COUNTER_PACKETS, &7u64.to_be_bytes());
        assert_eq!(Expr::decode("counter", data.bytes()), Expr::Counter);
        let packets = attr(data.bytes(), NFTA_COUNTER_PACKETS)
            .and_then(be64)
            .unwrap_or(0);
        assert_eq!(packets, 7);
        let chains = ruleset();
        let refusals = chains
            .iter()
            .flat_map(|c| &c.rules)
            .filter(|r| r.exprs.contains(&Expr::Counter))
            .map(|r| r.text.as_str())
            .collect::<Vec<_>>();
        assert_eq!(refusals.len(), 3, "each reject is counted: {refusals:?}");
        assert!(refusals.iter().all(|t| t.contains("counter reject")));
    }

    #[test]
    fn addresses_compare_as_nft_writes_them() {
        // From `nft --debug=netlink`: ip saddr 100.64.0.0/30 loads 4 bytes
        // and masks them; ip6 saddr fd6c:7a72::/64 loads and compares 8.
        let v4 = saddr_in(link::subnet(false));
        assert_eq!(
            v4[3],
            Expr::Bitwise {
                sreg: 1,
                dreg: 1,
                len: 4,
                mask: vec![255, 255, 255, 252],
                xor: vec![0; 4]
            }
        );
        assert_eq!(
            v4[4],
            Expr::Cmp {
                sreg: 1,
                op: 0,
                data: vec![100, 64, 0, 0]
            }
        );
        let v6 = saddr_in(link::subnet(true));
        assert_eq!(v6[2], load(NFT_PAYLOAD_NETWORK_HEADER, 8, 8));
        assert_eq!(
            v6[3],
            Expr::Cmp {
                sreg: 1,
                op: 0,
                data: vec![0xfd, 0x6c, 0x7a, 0x72, 0, 0, 0, 0]
            }
        );
        // udp dport 53.
        assert_eq!(
            dport(IPPROTO_UDP, 53)[3],
            Expr::Cmp {
                sreg: 1,
                op: 0,
                data: vec![0, 53]
            }
        );
    }

    #[test]
    fn a_changed_rule_is_a_problem() {
        let want = ruleset();
        let mut live = std::collections::BTreeMap::new();
        for c in &want {
            live.insert(
                c.name.to_string(),
                LiveChain {
                    kind: c.kind.into(),
                    hook: Some(c.hook),
                    priority: c.priority,
                    policy: Some(NF_ACCEPT),
                    rules: c.rules.iter().map(|r| r.exprs.clone()).collect(),
                },
            );
        }
        let (chains, problems) = compare(&want, live.clone());
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            chains[0].rules[2],
            "oifname \"rej0\" meta l4proto tcp counter reject with tcp reset"
        );
        live.get_mut("forward").unwrap().rules.remove(2);
        let (_, problems) = compare(&want, live);
        assert_eq!(problems.len(), 1, "{problems:?}");
    }
}
