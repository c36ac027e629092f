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

    /// Names the policy's source of each entry that the policy would install.
    pub fn explain(&mut self, policy: &Policy) {
        for entry in &mut self.entries {
            entry.source = if entry.rule.is_floor() {
                None
            } else {
                policy
                    .entry(&entry.rule.dst)
                    .filter(|e| Action::of(e.verdict) == entry.rule.action)
                    .map(|e| e.source.clone())
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
        for w in &self.warnings {
            writeln!(f, "warning: {w}")?;
        }
        Ok(())
    }
}
