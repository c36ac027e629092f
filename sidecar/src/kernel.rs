//! From the model's table to Linux policy routing, and how to change it.
//!
//! Each table entry becomes one FIB rule (`ip rule`): `to PREFIX prohibit` for
//! a deny, `to PREFIX lookup 200` for an allow, where table 200 holds nothing
//! but the namespace's default routes (`default via GATEWAY dev DEV onlink`).
//! Rules are tried in priority order and the first whose prefix contains the
//! destination decides, so the priority is the prefix length, most specific
//! first: the kernel then does the model's longest-prefix match. A floor rule
//! after them all prohibits whatever falls through, so the main table (with
//! its connected and router-advertised routes) is never consulted.
//!
//! Why rules and not `prohibit` routes in one table (measured on Linux 6.18):
//! a socket that names its device (an IPv6 scope id such as `fe80::2%tap0`,
//! or `SO_BINDTODEVICE`) makes IPv6 skip routes whose device differs, and
//! `prohibit` routes always sit on `lo`; the lookup then fell through to a
//! wider allowed route or to the main table's connected `fe80::/64` and
//! `fd00::/64`, and reached the host alias. A rule matches on the destination
//! alone, whatever device the socket names.
//!
//! The local table (priority 0) still comes first: the namespace's own
//! addresses and loopback are always reachable, as they must be.

use std::collections::BTreeSet;
use std::fmt;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::policy::{Family, Policy, Rule, Verdict};

/// The routing table that holds the gateways; only allow rules look it up.
pub const GATEWAY_TABLE: u32 = 200;
/// The priority of a /32 (IPv4) or /128 (IPv6) rule; a /n rule has
/// `PRIORITY_BASE + (32 or 128) - n`.
pub const PRIORITY_BASE: u32 = 10_000;
/// The floor rule: `prohibit` whatever no other rule of ours decided.
pub const PRIORITY_FLOOR: u32 = 10_999;

/// What a rule does with the destinations it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// `lookup GATEWAY_TABLE`: out through the namespace's gateway.
    Gateway,
    /// `prohibit`: connect fails at once with EACCES. In router mode (`serve
    /// --link`) the rule is `lookup REJECT_TABLE` instead, where netfilter
    /// refuses at once what is forwarded (see [`crate::link`]); the model,
    /// the priorities and the plan are the same.
    Prohibit,
}

impl Action {
    pub fn of(verdict: Verdict) -> Action {
        match verdict {
            Verdict::Allow => Action::Gateway,
            Verdict::Deny => Action::Prohibit,
        }
    }

    pub fn verdict(self) -> Verdict {
        match self {
            Action::Gateway => Verdict::Allow,
            Action::Prohibit => Verdict::Deny,
        }
    }
}

/// One FIB rule the sidecar owns: `PRIORITY: from all to DST ACTION`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KernelRule {
    pub priority: u32,
    pub dst: IpNet,
    pub action: Action,
}

impl KernelRule {
    pub fn for_entry(entry: &Rule) -> KernelRule {
        KernelRule {
            priority: priority(&entry.net),
            dst: entry.net,
            action: Action::of(entry.verdict),
        }
    }

    pub fn floor(family: Family) -> KernelRule {
        KernelRule {
            priority: PRIORITY_FLOOR,
            dst: family.everything(),
            action: Action::Prohibit,
        }
    }

    pub fn is_floor(&self) -> bool {
        self.priority == PRIORITY_FLOOR
    }

    pub fn family(&self) -> Family {
        Family::of_net(&self.dst)
    }
}

impl fmt::Display for KernelRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: to {} ", self.priority, self.dst)?;
        match self.action {
            Action::Gateway => write!(f, "lookup {GATEWAY_TABLE}"),
            Action::Prohibit => f.write_str("prohibit"),
        }
    }
}

/// The priority of the rule for `dst`: longer prefixes first.
pub fn priority(dst: &IpNet) -> u32 {
    PRIORITY_BASE + u32::from(dst.max_prefix_len() - dst.prefix_len())
}

/// The rules that enforce `policy`: one per table entry, and the two floors.
/// In kernel order (priority, then IPv4 before IPv6).
pub fn desired(policy: &Policy) -> Vec<KernelRule> {
    let mut rules: Vec<KernelRule> = policy.table().iter().map(KernelRule::for_entry).collect();
    rules.extend(Family::BOTH.map(KernelRule::floor));
    // The derived order is (priority, IPv4 before IPv6, prefix).
    rules.sort_unstable();
    rules
}

/// The rule that opens one address for a resolved name: the most specific
/// prefix (priority [`PRIORITY_BASE`]), through the gateway.
pub fn name_rule(host: IpNet) -> KernelRule {
    KernelRule {
        priority: priority(&host),
        dst: host,
        action: Action::Gateway,
    }
}

/// [`desired`] plus the name-derived rules for `hosts` (each a /32 or
/// /128 that no policy entry names: see [`Policy::name_route`]).
pub fn desired_with_names(policy: &Policy, hosts: &[IpNet]) -> Vec<KernelRule> {
    let mut rules = desired(policy);
    for host in hosts {
        if policy.entry(host).is_none() {
            rules.push(name_rule(*host));
        }
    }
    rules.sort_unstable();
    rules.dedup();
    rules
}

/// One change to the kernel's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Step {
    Add(KernelRule),
    Delete(KernelRule),
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Add(r) => write!(f, "+ {r}"),
            Step::Delete(r) => write!(f, "- {r}"),
        }
    }
}

/// The steps from `current` to `desired`, ordered so that after every step
/// each address is decided as before the change or as after it, never
/// otherwise (no flow allowed before and after is cut; nothing denied before
/// and after is let through; on the first install, what no rule decides yet
/// is denied):
///
/// 1. the floors first (they only catch what nothing else decides);
/// 2. new rules, most specific first: a new rule never takes over an address
///    while a more specific new rule that should decide it is missing. A rule
///    whose action changes is added anew; the kernel puts it after the old one
///    of the same priority, so the old one still decides until step 3;
/// 3. stale rules, least specific first: an old rule never hands an address
///    to a wider old rule that should no longer decide it.
pub fn plan(current: &[KernelRule], desired: &[KernelRule]) -> Vec<Step> {
    let current: BTreeSet<KernelRule> = current.iter().copied().collect();
    let desired: BTreeSet<KernelRule> = desired.iter().copied().collect();
    // Sets iterate in the derived order: ascending priority.
    let (floors, adds): (Vec<KernelRule>, Vec<KernelRule>) = desired
        .difference(&current)
        .copied()
        .partition(|r| r.is_floor());
    let mut deletes: Vec<KernelRule> = current.difference(&desired).copied().collect();
    deletes.reverse();
    floors
        .into_iter()
        .chain(adds)
        .map(Step::Add)
        .chain(deletes.into_iter().map(Step::Delete))
        .collect()
}
