//! What `lazaret-sidecar serve|apply|show` print: the live rules and gateways.
//! With `--json` one line of [`TableReport`], which the host parses.

use std::fmt::{self, Write as _};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::kernel::{Action, GATEWAY_TABLE, KernelRule, Step};
pub use crate::policy::Family;
use crate::policy::{Policy, Source, Verdict};

/// A default route of the gateway table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gateway {
    pub family: Family,
    pub address: IpAddr,
    pub dev: String,
    pub ifindex: u32,
}

/// One live rule; `source` is known when the printer had the policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveEntry {
    #[serde(flatten)]
    pub rule: KernelRule,
    pub verdict: Verdict,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
}

impl LiveEntry {
    pub fn new(rule: KernelRule) -> LiveEntry {
        LiveEntry {
            rule,
            verdict: rule.action.verdict(),
            source: None,
        }
    }
}

/// A live rule the resolver opened for an allowed name's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameEntry {
    pub address: IpAddr,
    /// The names whose answers held the address.
    pub names: Vec<String>,
    /// Seconds since the Unix epoch when the rule goes (if no connection to
    /// the address is open then).
    pub expires: u64,
    /// Whether an open connection keeps it past `expires`.
    #[serde(default)]
    pub held: bool,
}

/// A name the resolver refused, how often, and when last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedName {
    pub name: String,
    pub count: u64,
    /// Seconds since the Unix epoch.
    pub last: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableReport {
    pub gateway_table: u32,
    pub gateways: Vec<Gateway>,
    /// In kernel order: the first entry that contains a destination decides.
    pub entries: Vec<LiveEntry>,
    /// Rules in the sidecar's priority range that it did not make.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub foreign: Vec<String>,
    /// What `serve`/`apply` changed, in the order applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<Step>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The resolver's live name-derived rules (decisions.md D11).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<NameEntry>,
    /// Names the resolver refused, most recent first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<RefusedName>,
    /// The resolver's upstream, when it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolver: Option<String>,
    /// Router mode (`serve --link`): what the sidecar read back of the router
    /// between the sandbox's link and the network. Absent without `--link`.
    /// The sandbox may start only if [`RouterReport::in_force`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<RouterReport>,
}

/// One chain of the nf_tables table `inet lazaret`, as read back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NftChain {
    pub name: String,
    /// `filter` or `nat`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `forward`, `input` or `postrouting`.
    pub hook: String,
    pub priority: i32,
    /// `accept` or `drop`.
    pub policy: String,
    /// The rules in order, in nft's syntax when they are the sidecar's;
    /// anything else as `unexpected: ...` (and a problem).
    pub rules: Vec<String>,
}

/// Router mode, read back from the kernel after the set-up (and on every
/// `show`): the nf_tables table, the reject table and its device, the rules
/// that keep the link reachable, and the sysctls. `problems` lists every
/// difference from the design; the host starts the sandbox only when there is
/// none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouterReport {
    /// `inet lazaret`, when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nft_table: Option<String>,
    pub nft_chains: Vec<NftChain>,
    /// [`crate::link::REJECT_TABLE`]: what every deny rule looks up.
    pub reject_table: u32,
    /// Its routes, read back (`default dev rej0`, IPv4 and IPv6, and the
    /// `prohibit` routes behind them in case rej0 goes).
    pub reject_routes: Vec<String>,
    /// `rej0`'s state (`up, no carrier`), or absent when it does not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reject_device: Option<String>,
    /// The rules before the policy that reach the link
    /// (`9500: to 100.64.0.0/30 lookup main`).
    pub link_rules: Vec<String>,
    /// The sysctls the router needs (see [`crate::link::SYSCTLS`]) as read:
    /// name to value, or `unreadable: ...`.
    pub sysctls: crate::link::Sysctls,
    /// What differs from the design; empty when the router is in force.
    pub problems: Vec<String>,
}

impl RouterReport {
    /// Whether everything the router needs was found in place.
    pub fn in_force(&self) -> bool {
        self.problems.is_empty() && self.nft_table.is_some()
    }
}

impl TableReport {
    pub fn new(gateways: Vec<Gateway>, rules: Vec<KernelRule>) -> TableReport {
        TableReport {
            gateway_table: GATEWAY_TABLE,
            gateways,
            entries: rules.into_iter().map(LiveEntry::new).collect(),
            ..TableReport::default()
        }
    }

    /// The live rules, to compare with [`crate::kernel::desired`].
    pub fn rules(&self) -> Vec<KernelRule> {
        self.entries.iter().map(|e| e.rule).collect()
    }

    /// The live rules that come from the policy: all but the name-derived
    /// ones, to compare with [`crate::kernel::desired`].
    pub fn policy_rules(&self) -> Vec<KernelRule> {
        self.entries
            .iter()
            .filter(|e| self.name_entry(&e.rule).is_none())
            .map(|e| e.rule)
            .collect()
    }

    /// The name-derived rule behind `rule`, if it is one.
    pub fn name_entry(&self, rule: &KernelRule) -> Option<&NameEntry> {
        (rule.action == Action::Gateway && rule.dst.prefix_len() == rule.dst.max_prefix_len())
            .then(|| self.names.iter().find(|n| n.address == rule.dst.addr()))
            .flatten()
    }

    /// Names the policy's source of each entry that the policy would install,
    /// and the resolved names behind name-derived ones.
    pub fn explain(&mut self, policy: &Policy) {
        let names: Vec<Option<Source>> = self
            .entries
            .iter()
            .map(|e| {
                self.name_entry(&e.rule).map(|n| Source::Name {
                    names: n.names.clone(),
                    expires: n.expires,
                })
            })
            .collect();
        for (entry, name) in self.entries.iter_mut().zip(names) {
            entry.source = if entry.rule.is_floor() {
                None
            } else if let Some(policy_entry) = policy
                .entry(&entry.rule.dst)
                .filter(|e| Action::of(e.verdict) == entry.rule.action)
            {
                Some(policy_entry.source.clone())
            } else {
                name
            };
        }
    }
}

impl fmt::Display for TableReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "gateways (table {}):", self.gateway_table)?;
        if self.gateways.is_empty() {
            writeln!(f, "  none: allowed prefixes are refused like denied ones")?;
        }
        for g in &self.gateways {
            writeln!(f, "  {:<5} via {} dev {}", g.family, g.address, g.dev)?;
        }
        writeln!(f, "rules (the first that contains a destination decides):")?;
        for e in &self.entries {
            let mut line = format!(
                "  {:>5}  {:<5}  {:<20}",
                e.rule.priority,
                e.verdict,
                e.rule.dst.to_string()
            );
            if e.rule.is_floor() {
                line.push_str("  floor: nothing falls through to the main table");
            } else if let Some(s) = &e.source {
                let _ = write!(line, "  {s}");
            }
            writeln!(f, "{}", line.trim_end())?;
        }
        for x in &self.foreign {
            writeln!(f, "  foreign rule in the sidecar's range: {x}")?;
        }
        if !self.changes.is_empty() {
            writeln!(f, "changes:")?;
            for c in &self.changes {
                writeln!(f, "  {c}")?;
            }
        }
        if let Some(router) = &self.router {
            write!(f, "{router}")?;
        }
        if let Some(upstream) = &self.resolver {
            writeln!(f, "resolver: allowed names are forwarded to {upstream}")?;
        }
        if !self.names.is_empty() {
            writeln!(f, "opened by name (until, or while a connection is open):")?;
            for n in &self.names {
                writeln!(
                    f,
                    "  {:<20}  {}  until {}{}",
                    n.address.to_string(),
                    n.names.join(", "),
                    crate::names::clock(n.expires),
                    if n.held {
                        " (held open by a connection)"
                    } else {
                        ""
                    }
                )?;
            }
        }
        if !self.refused.is_empty() {
            writeln!(f, "refused names (count, last):")?;
            for r in &self.refused {
                writeln!(
                    f,
                    "  {}  {} x, last {}",
                    crate::names::escape(&r.name),
                    r.count,
                    crate::names::clock(r.last)
                )?;
            }
        }
        for w in &self.warnings {
            writeln!(f, "warning: {w}")?;
        }
        Ok(())
    }
}

impl fmt::Display for RouterReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "router: {}",
            if self.in_force() {
                "in force"
            } else {
                "NOT in force"
            }
        )?;
        writeln!(
            f,
            "  denied destinations: lookup {} ({})",
            self.reject_table,
            self.reject_device.as_deref().unwrap_or("no device")
        )?;
        for r in self.reject_routes.iter().chain(&self.link_rules) {
            writeln!(f, "  {r}")?;
        }
        if let Some(t) = &self.nft_table {
            writeln!(f, "  table {t}")?;
        }
        for c in &self.nft_chains {
            writeln!(
                f,
                "    chain {} (type {} hook {} priority {}; policy {})",
                c.name, c.kind, c.hook, c.priority, c.policy
            )?;
            for r in &c.rules {
                writeln!(f, "      {r}")?;
            }
        }
        for (name, value) in &self.sysctls {
            writeln!(f, "  {name} = {value}")?;
        }
        for p in &self.problems {
            writeln!(f, "  problem: {p}")?;
        }
        Ok(())
    }
}
