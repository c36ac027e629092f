//! `serve --link`: the sidecar as the router between the sandbox's own
//! network namespace and the network (issue 25, D13). The policy's rules
//! stay as they are, since Linux consults them for forwarded packets too;
//! what changes is what a deny does: it looks up [`REJECT_TABLE`], whose only
//! route leads to [`REJECT_DEVICE`], and netfilter answers what is routed
//! there at once (`nft` module). The sandbox's traffic is masqueraded out of
//! the upstream device.
//!
//! The set-up order keeps every step fail-closed: the reject table gets a
//! `prohibit` route first (a deny rule whose table has no route would fall
//! through to the next rule), then its route to the reject device; netfilter
//! comes before the deny rules point there.

use lazaret_sidecar::link::{
    self, LINK_RULE_PRIORITY, REJECT_DEVICE, REJECT_PEER, REJECT_TABLE, SYSCTLS,
};
use lazaret_sidecar::policy::Family;
use lazaret_sidecar::report::RouterReport;
use netlink_packet_route::route::RouteType;

use crate::error::{Context, Error, Result};
use crate::nft;
use crate::rtnl::{DefaultRouteSpec, Netlink, Selector};

/// The metric of the reject table's route to the reject device, and of the
/// `prohibit` route behind it (which decides only if the device is gone).
const REJECT_METRIC: u32 = 1;
const FALLBACK_METRIC: u32 = u32::MAX;

/// Sets up everything router mode needs in the sidecar's namespace. Safe to
/// run again (a second `serve --link`): what is there is kept or replaced.
pub fn setup(nl: &mut Netlink) -> Result<()> {
    for family in Family::BOTH {
        nl.add_default_route(&DefaultRouteSpec {
            family,
            table: REJECT_TABLE,
            kind: RouteType::Prohibit,
            gateway: None,
            ifindex: None,
            metric: Some(FALLBACK_METRIC),
            onlink: false,
        })
        .with_context(|| {
            format!("cannot add the {family} route prohibit default table {REJECT_TABLE}")
        })?;
    }
    if nl.link_index(REJECT_DEVICE)?.is_none() {
        nl.add_veth(REJECT_DEVICE, REJECT_PEER, 1500, None)?;
    }
    let rej0 = nl
        .link_index(REJECT_DEVICE)?
        .ok_or_else(|| Error::new(format!("{REJECT_DEVICE} is missing after creating it")))?;
    // Up, and its peer left down: no carrier, so what netfilter does not
    // answer is dropped there.
    nl.set_up(rej0, REJECT_DEVICE)?;
    for family in Family::BOTH {
        nl.add_default_route(&DefaultRouteSpec {
            family,
            table: REJECT_TABLE,
            kind: RouteType::Unicast,
            gateway: None,
            ifindex: Some(rej0),
            metric: Some(REJECT_METRIC),
            onlink: false,
        })
        .with_context(|| {
            format!(
                "cannot add the {family} route default dev {REJECT_DEVICE} table {REJECT_TABLE}"
            )
        })?;
        nl.add_side_rule(
            family,
            LINK_RULE_PRIORITY,
            Selector::To(link::subnet(family == Family::Ipv6)),
            crate::rtnl::MAIN_TABLE,
        )?;
    }
    nft::install()
}

/// The sysctls the router needs, as read: `unreadable: WHY` when not.
fn sysctls() -> link::Sysctls {
    SYSCTLS
        .iter()
        .map(|(name, _)| {
            let path = format!("/proc/sys/{}", name.replace('.', "/"));
            let value = match std::fs::read_to_string(&path) {
                Ok(v) => v.trim().to_string(),
                Err(e) => format!("unreadable: {e}"),
            };
            (name.to_string(), value)
        })
        .collect()
}

/// Reads router mode back from the kernel; every difference from the design
/// is a problem.
pub fn report(nl: &mut Netlink) -> RouterReport {
    let mut r = RouterReport {
        reject_table: REJECT_TABLE,
        sysctls: sysctls(),
        ..RouterReport::default()
    };
    for (name, want) in SYSCTLS {
        let got = &r.sysctls[*name];
        if got != want {
            r.problems
                .push(format!("sysctl {name} is {got}, not {want}"));
        }
    }
    match nft::read_back() {
        Ok(Some(read)) => {
            r.nft_table = Some(format!("inet {}", link::NFT_TABLE));
            r.nft_chains = read.chains;
            r.refused_packets = read.refused;
            r.problems.extend(read.problems);
        }
        Ok(None) => r.problems.push(format!(
            "the nf_tables table inet {} is missing",
            link::NFT_TABLE
        )),
        Err(e) => r.problems.push(e.to_string()),
    }
    if let Err(e) = read_routing(nl, &mut r) {
        r.problems.push(e.to_string());
    }
    r
}

fn read_routing(nl: &mut Netlink, r: &mut RouterReport) -> Result<()> {
    let rej0 = nl.link(REJECT_DEVICE)?;
    match &rej0 {
        None => r.problems.push(format!("{REJECT_DEVICE} is missing")),
        Some(l) => {
            r.reject_device = Some(format!(
                "{REJECT_DEVICE} {}, {}",
                if l.up { "up" } else { "down" },
                if l.carrier { "carrier" } else { "no carrier" }
            ));
            if !l.up {
                r.problems.push(format!("{REJECT_DEVICE} is down"));
            }
            if l.carrier {
                r.problems.push(format!(
                    "{REJECT_DEVICE} has carrier ({REJECT_PEER} is up): what netfilter does not \
                     answer would not be dropped there"
                ));
            }
        }
    }
    for family in Family::BOTH {
        let mut to_device = false;
        for route in nl.routes(family, REJECT_TABLE)? {
            let text = match (route.kind(), route.ifindex) {
                (RouteType::Unicast, Some(i)) if rej0.as_ref().is_some_and(|l| l.index == i) => {
                    to_device |= route.dst_len() == 0 && route.gateway.is_none();
                    format!("default dev {REJECT_DEVICE}")
                }
                (RouteType::Prohibit, _) => "prohibit default".into(),
                (kind, dev) => format!("{kind:?} dev {dev:?}"),
            };
            let text = match route.dst {
                Some(dst) => format!("{text} to {dst}/{}", route.dst_len()),
                None => text,
            };
            r.reject_routes.push(format!(
                "{family}: {text} table {REJECT_TABLE} metric {}",
                route.metric.unwrap_or(0)
            ));
        }
        if !to_device {
            r.problems.push(format!(
                "table {REJECT_TABLE} has no {family} route default dev {REJECT_DEVICE}"
            ));
        }
        let want = format!(
            "{LINK_RULE_PRIORITY}: to {} lookup main",
            link::subnet(family == Family::Ipv6)
        );
        let rules = nl.side_rules(family, LINK_RULE_PRIORITY)?;
        if rules != [want.clone()] {
            r.problems.push(format!(
                "the {family} rules at {LINK_RULE_PRIORITY} are {rules:?}, not [{want:?}]"
            ));
        }
        r.link_rules.extend(rules);
    }
    Ok(())
}
