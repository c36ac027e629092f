//! The link between the Agent Sandbox and the Network Sidecar (issue 25,
//! decisions.md D13): the sandbox's network namespace holds only loopback and
//! [`SANDBOX_DEVICE`], one end of a veth whose other end, [`ROUTER_DEVICE`],
//! sits in the sidecar's namespace. The sidecar forwards what comes over it
//! with the policy applied (`serve --link`); `lazaret-sidecar link` makes the
//! sandbox's namespace and the veth, `unlink` removes the namespace.
//!
//! The link's subnets lie inside ranges the policy always denies
//! (`100.64.0.0/10` and `fc00::/7` are built-in denies), so the link can
//! never shadow an allowed destination; the rule
//! `LINK_RULE_PRIORITY: to LINK_SUBNET lookup main` makes the link itself
//! reachable from the sidecar. No netlink here: the host uses these too.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};

/// The sandbox's end of the veth, in the sandbox's network namespace.
pub const SANDBOX_DEVICE: &str = "eth0";
/// The router's end of the veth, in the sidecar's network namespace.
pub const ROUTER_DEVICE: &str = "sbx0";
/// Both ends' MTU: slirp4netns's, so that a segment crosses the router whole
/// (at 1500 every path through the router ran at 21-70 MB/s; at 65520 it
/// matches the raw slirp4netns path: docs/egress-router.md).
pub const LINK_MTU: u32 = 65520;

/// The sidecar's IPv4 address on the link: the sandbox's gateway and resolver.
pub const ROUTER_V4: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 1);
/// The sandbox's IPv4 address.
pub const SANDBOX_V4: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 2);
/// The prefix length of [`LINK_SUBNET_V4`].
pub const LINK_PREFIX_V4: u8 = 30;
/// The sidecar's IPv6 address on the link.
pub const ROUTER_V6: Ipv6Addr = Ipv6Addr::new(0xfd6c, 0x7a72, 0, 0, 0, 0, 0, 1);
/// The sandbox's IPv6 address.
pub const SANDBOX_V6: Ipv6Addr = Ipv6Addr::new(0xfd6c, 0x7a72, 0, 0, 0, 0, 0, 2);
/// The prefix length of [`LINK_SUBNET_V6`].
pub const LINK_PREFIX_V6: u8 = 64;

/// `100.64.0.0/30`.
pub const LINK_SUBNET_V4: Ipv4Net =
    Ipv4Net::new_assert(Ipv4Addr::new(100, 64, 0, 0), LINK_PREFIX_V4);
/// `fd6c:7a72::/64`.
pub const LINK_SUBNET_V6: Ipv6Net = Ipv6Net::new_assert(
    Ipv6Addr::new(0xfd6c, 0x7a72, 0, 0, 0, 0, 0, 0),
    LINK_PREFIX_V6,
);

/// The priority of `to LINK_SUBNET lookup main`, before the policy's range
/// (10000-10999) and after the resolver's own `fwmark` rule (9000).
pub const LINK_RULE_PRIORITY: u32 = 9_500;

/// The routing table every deny rule looks up in router mode: nothing but
/// `default dev REJECT_DEVICE` (for IPv4 and IPv6). netfilter answers what is
/// routed there (a TCP reset, or ICMP administratively prohibited) at once,
/// whatever the kernel's ICMP rate limits; what it does not answer is dropped
/// on a device without carrier: the design fails closed.
pub const REJECT_TABLE: u32 = 202;
/// The device of [`REJECT_TABLE`]'s routes: a veth end, up.
pub const REJECT_DEVICE: &str = "rej0";
/// Its peer, left down, so that [`REJECT_DEVICE`] has no carrier.
pub const REJECT_PEER: &str = "rej1";

/// The upstream device, slirp4netns's (or pasta's) tap in the sidecar's
/// namespace: the sandbox's traffic is masqueraded out of it.
pub const UPSTREAM_DEVICE: &str = "tap0";

/// slirp4netns's IPv6 router on [`UPSTREAM_DEVICE`] (libslirp's fixed
/// link-local address). With forwarding on, the kernel drops the default
/// route it learned from the router's first advertisement, and the next
/// unsolicited one comes minutes later: router mode takes this gateway
/// when no IPv6 default route is there.
pub const UPSTREAM_ROUTER_V6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2);

/// The nf_tables table the sidecar owns in router mode (family `inet`).
pub const NFT_TABLE: &str = "lazaret";

/// The sysctls of the sidecar's namespace that the router needs, and their
/// values. The sidecar cannot set them (its `/proc/sys` is read-only): the
/// host passes each as `podman run --sysctl NAME=VALUE`, and `serve --link`
/// reads them back into its report ([`crate::report::RouterReport`]).
pub const SYSCTLS: &[(&str, &str)] = &[
    // The router.
    ("net.ipv4.ip_forward", "1"),
    ("net.ipv6.conf.all.forwarding", "1"),
    // With forwarding on, the kernel ignores router advertisements unless
    // accept_ra is 2, and slirp4netns's IPv6 default route would disappear.
    ("net.ipv6.conf.tap0.accept_ra", "2"),
    // Destination unreachable is no longer rate-limited (6168 minus bit 3),
    // so that a refused UDP datagram gets its error at once.
    ("net.ipv4.icmp_ratemask", "6160"),
    ("net.ipv6.icmp.ratelimit", "0"),
    // No strict reverse-path filter: the replies to the sidecar's own
    // upstream queries (from the user-mode DNS forwarder, say, which the
    // policy denies) come in on tap0 while an unmarked route lookup of their
    // source leads to the reject device, so strict filtering (1) drops them
    // and the resolver gets no answer. A forged source from the link is
    // dropped by nf_tables instead (`iifname "sbx0" ip saddr != 100.64.0.2
    // drop`, and the same for IPv6), in the forward and input chains. tap0
    // gets its own value at creation, from `default`, which a new namespace
    // may inherit from the host's: both are set.
    ("net.ipv4.conf.all.rp_filter", "0"),
    ("net.ipv4.conf.tap0.rp_filter", "0"),
];

/// The sidecar's address on the link for `v6`.
pub fn router(v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(ROUTER_V6)
    } else {
        IpAddr::V4(ROUTER_V4)
    }
}

/// The sandbox's address on the link for `v6`.
pub fn sandbox(v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(SANDBOX_V6)
    } else {
        IpAddr::V4(SANDBOX_V4)
    }
}

/// The link's subnet for `v6`.
pub fn subnet(v6: bool) -> IpNet {
    if v6 {
        IpNet::V6(LINK_SUBNET_V6)
    } else {
        IpNet::V4(LINK_SUBNET_V4)
    }
}

/// The resolver's addresses in router mode (port 53): what the host passes
/// as `serve --resolver` and as the sandbox's `--dns`.
pub fn resolver_addresses() -> [std::net::SocketAddr; 2] {
    [
        std::net::SocketAddr::new(router(false), 53),
        std::net::SocketAddr::new(router(true), 53),
    ]
}

/// Whether `addr` is the sandbox's side of the link (a flow the router
/// forwards for the sandbox starts there).
pub fn from_sandbox(addr: IpAddr) -> bool {
    let addr = addr.to_canonical();
    subnet(false).contains(&addr) || subnet(true).contains(&addr)
}

/// One end of the link as `lazaret-sidecar link` made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkEnd {
    pub device: String,
    pub ifindex: u32,
    pub mtu: u32,
    /// With their prefix lengths (`100.64.0.2/30`).
    pub addresses: Vec<IpNet>,
    /// The default routes' gateways (only the sandbox's end has any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateways: Vec<IpAddr>,
}

/// What `lazaret-sidecar link --json` prints: one line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkReport {
    /// The bind-mounted network namespace file (`podman run --network ns:PATH`).
    pub netns: String,
    /// The namespace's inode: a new one on every `link`.
    pub netns_inode: u64,
    /// Whether an earlier namespace was mounted there and was unmounted.
    pub replaced_netns: bool,
    /// Whether a stale router device was deleted first.
    pub replaced_router_device: bool,
    /// In the sandbox's namespace.
    pub sandbox: LinkEnd,
    /// In the sidecar's namespace.
    pub router: LinkEnd,
}

/// The sysctls as `serve --link` read them: name to value, or to
/// `unreadable: WHY`.
pub type Sysctls = BTreeMap<String, String>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Policy, PolicySpec, Verdict};

    #[test]
    fn the_link_is_inside_built_in_denies() {
        // A wide allow never opens a built-in range, so the link's own
        // addresses can never be an allowed destination.
        let spec: PolicySpec =
            serde_json::from_str(r#"{"default_allow": ["0.0.0.0/0", "::/0"]}"#).unwrap();
        let policy = Policy::new(spec).unwrap();
        for v6 in [false, true] {
            for a in [router(v6), sandbox(v6), subnet(v6).network()] {
                assert_eq!(policy.why(a).verdict, Verdict::Deny, "{a}");
                assert!(subnet(v6).contains(&a));
            }
        }
        assert_eq!(LINK_SUBNET_V4.to_string(), "100.64.0.0/30");
        assert_eq!(LINK_SUBNET_V6.to_string(), "fd6c:7a72::/64");
        assert!(from_sandbox("::ffff:100.64.0.2".parse().unwrap()));
        assert!(!from_sandbox("10.0.2.100".parse().unwrap()));
    }
}
