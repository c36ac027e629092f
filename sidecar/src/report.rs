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

/// A lookup of an allowed name that the agent got an error for: the
/// upstream answered an error code, did not answer, or its addresses could
/// not be opened. How often, when last, and the last answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedLookup {
    pub name: String,
    /// `NXDOMAIN`, `SERVFAIL`, `REFUSED`, ... as the upstream answered;
    /// `no answer: ...` when it did not; `not opened: ...` when the
    /// sidecar could not open the answered addresses (the agent got
    /// SERVFAIL).
    pub answer: String,
    pub count: u64,
    /// Seconds since the Unix epoch.
    pub last: u64,
}

impl FailedLookup {
    /// What the answer means for the user, and what to do.
    pub fn meaning(&self) -> &'static str {
        match self.answer.split(':').next().unwrap_or_default() {
            "NXDOMAIN" => "the name does not exist upstream (misspelt, or gone)",
            "SERVFAIL" => {
                "the upstream could not resolve it (its servers failed or are unreachable)"
            }
            "REFUSED" => "the upstream refused to resolve it",
            "no answer" => {
                "the upstream did not answer (check `dns_upstream` and the host's network)"
            }
            "not opened" => {
                "the sidecar could not open the answered addresses (see `lazaret logs`)"
            }
            _ => "the upstream answered an error",
        }
    }
}

/// A name pattern of the policy in force: the resolver answers names an
/// allow pattern names and no deny pattern does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameRule {
    pub pattern: String,
    pub verdict: Verdict,
    /// Where it was written (`file:line:col`), or `... (live)` for a
    /// change made while the domain runs (`lazaret net allow|deny`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

impl NameRule {
    /// Whether it was added while the domain runs (gone when it stops).
    pub fn is_live(&self) -> bool {
        self.origin
            .as_deref()
            .is_some_and(|o| o.ends_with("(live)"))
    }

    /// Where it came from, for a person: the configuration or a live change.
    pub fn came_from(&self) -> String {
        match &self.origin {
            Some(o) if self.is_live() => format!(
                "live: {}, until the domain stops",
                o.trim_end_matches("(live)").trim_end()
            ),
            Some(o) => format!("profile: {o}"),
            None => "profile".to_string(),
        }
    }
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
    /// Allowed names whose lookup failed upstream, most recent first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<FailedLookup>,
    /// The policy's name patterns (allow, then deny), with where each was
    /// written; filled by [`TableReport::explain`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub name_rules: Vec<NameRule>,
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
    /// Packets of the sandbox the table refused since it was made (its
    /// counters: connections reset, datagrams answered unreachable).
    #[serde(default)]
    pub refused_packets: u64,
}

/// What `serve --json` prints on its standard output whenever the count of
/// refusals changed (at most every [`REFUSALS_INTERVAL`]): the host reads
/// its log to show the human how often the agent was refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Refusals {
    /// Packets the table refused since the sidecar started.
    pub refused_packets: u64,
    /// Names the resolver refused since the sidecar started.
    pub refused_names: u64,
}

impl Refusals {
    pub fn total(&self) -> u64 {
        self.refused_packets.saturating_add(self.refused_names)
    }

    /// The last line of `log` that is one, if any.
    pub fn last_in<'a>(lines: impl DoubleEndedIterator<Item = &'a str>) -> Option<Refusals> {
        lines
            .rev()
            .find_map(|l| serde_json::from_str::<Refusals>(l.trim()).ok())
    }
}

/// How often `serve` looks at its counters.
pub const REFUSALS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

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
        let spec = policy.spec();
        self.name_rules = spec
            .allow_domains
            .iter()
            .map(|n| (n, Verdict::Allow))
            .chain(spec.deny_domains.iter().map(|n| (n, Verdict::Deny)))
            .map(|(n, verdict)| NameRule {
                pattern: n.pattern.to_string(),
                verdict,
                origin: n.origin.clone(),
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
            if !self.name_rules.iter().any(|n| n.verdict == Verdict::Allow) {
                writeln!(
                    f,
                    "names: none allowed: every name is refused (`lazaret net allow NAME`)"
                )?;
            }
        }
        if !self.name_rules.is_empty() {
            writeln!(
                f,
                "names (an allowed name is resolved; any other is refused):"
            )?;
            for n in &self.name_rules {
                writeln!(
                    f,
                    "  {:<5}  {:<20}  {}",
                    n.verdict,
                    n.pattern,
                    n.came_from()
                )?;
            }
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
        if !self.failed.is_empty() {
            writeln!(
                f,
                "failed lookups of allowed names (the upstream's answer, count, last):"
            )?;
            for l in &self.failed {
                writeln!(
                    f,
                    "  {}  {}  {} x, last {}: {}",
                    crate::names::escape(&l.name),
                    l.answer,
                    l.count,
                    crate::names::clock(l.last),
                    l.meaning()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A report from a sidecar built before failed lookups and name rules
    /// were reported still reads, and a new one reads back the same.
    #[test]
    fn failed_lookups_and_name_rules_are_optional_in_json() {
        let old: TableReport = serde_json::from_str(
            r#"{"gateway_table":200,"gateways":[],"entries":[],"refused":[{"name":"x.test","count":2,"last":5}]}"#,
        )
        .unwrap();
        assert!(old.failed.is_empty() && old.name_rules.is_empty());
        let new = TableReport {
            failed: vec![FailedLookup {
                name: "gone.lazaret.test".into(),
                answer: "NXDOMAIN".into(),
                count: 3,
                last: 1_796_106_605,
            }],
            name_rules: vec![NameRule {
                pattern: "*.lazaret.test".into(),
                verdict: Verdict::Allow,
                origin: Some("lazaret net allow (live)".into()),
            }],
            resolver: Some("10.0.2.2:5353".into()),
            ..old
        };
        let json = serde_json::to_string(&new).unwrap();
        assert_eq!(serde_json::from_str::<TableReport>(&json).unwrap(), new);
        let text = new.to_string();
        assert!(
            text.contains(
                "  gone.lazaret.test  NXDOMAIN  3 x, last 2026-12-01 06:30:05 UTC: the name does not exist upstream"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "  allow  *.lazaret.test        live: lazaret net allow, until the domain stops"
            ),
            "{text}"
        );
        assert!(!text.contains("none allowed"), "{text}");
    }
}
