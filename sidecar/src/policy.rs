//! The egress policy model (spec §1.1, decisions.md D2).
//!
//! Rules are CIDRs with a verdict and a source: `[network].default_allow` and
//! a profile's `allow_egress` allow, `[network].default_deny` and the
//! [`BuiltIn`] ranges deny. For an address:
//!
//! 1. the most specific rule that contains it decides;
//! 2. between rules of the same prefix, a configured deny beats a configured
//!    allow, and any configured rule beats a built-in one (so the only way to
//!    open a built-in range is to name exactly it, e.g. `10.0.2.2/32`; a wider
//!    allow such as `0.0.0.0/0` never does);
//! 3. an address no rule contains is denied (for IPv4 and IPv6 alike);
//! 4. an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is judged as `a.b.c.d`,
//!    because Linux sends a socket's traffic to such an address through IPv4
//!    routing. A rule written in that form is an IPv4 rule.
//!
//! [`Policy::why`] applies these rules directly; [`Policy::table`] turns them
//! into one entry per prefix, which [`crate::kernel`] installs. The tests check
//! that a kernel-style lookup over the table agrees with `why` everywhere.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::names::{NameDecision, SpecName};

/// Allow or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Deny,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
        })
    }
}

/// IPv4 or IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Ipv4,
    Ipv6,
}

impl Family {
    pub const BOTH: [Family; 2] = [Family::Ipv4, Family::Ipv6];

    pub fn of_net(net: &IpNet) -> Family {
        match net {
            IpNet::V4(_) => Family::Ipv4,
            IpNet::V6(_) => Family::Ipv6,
        }
    }

    pub fn of_addr(addr: &IpAddr) -> Family {
        match addr {
            IpAddr::V4(_) => Family::Ipv4,
            IpAddr::V6(_) => Family::Ipv6,
        }
    }

    /// `0.0.0.0/0` or `::/0`.
    pub fn everything(self) -> IpNet {
        match self {
            Family::Ipv4 => IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::UNSPECIFIED, 0)),
            Family::Ipv6 => IpNet::V6(Ipv6Net::new_assert(Ipv6Addr::UNSPECIFIED, 0)),
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Family::Ipv4 => "IPv4",
            Family::Ipv6 => "IPv6",
        })
    }
}

/// The ranges every policy denies on top of `default_deny` (D2). Each is a
/// way out of the sandbox that no ordinary egress rule means to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BuiltIn {
    /// 169.254.0.0/16.
    LinkLocalV4,
    /// 100.64.0.0/10.
    Cgnat,
    /// 10.0.2.2/32.
    SlirpHostLoopback,
    /// fe80::/10.
    LinkLocalV6,
    /// fc00::/7.
    UniqueLocal,
    /// `::ffff:0:0/96`: not a rule but a guard in the IPv6 table; addresses
    /// in it are judged as IPv4 (see the module documentation).
    V4Mapped,
}

impl BuiltIn {
    /// The built-in deny rules, in the order `why` lists them.
    pub const DENY_RULES: [BuiltIn; 5] = [
        BuiltIn::LinkLocalV4,
        BuiltIn::Cgnat,
        BuiltIn::SlirpHostLoopback,
        BuiltIn::LinkLocalV6,
        BuiltIn::UniqueLocal,
    ];

    pub fn net(self) -> IpNet {
        let v4 = |a, b, c, d, len| IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len));
        let v6 = |addr: Ipv6Addr, len| IpNet::V6(Ipv6Net::new_assert(addr, len));
        match self {
            BuiltIn::LinkLocalV4 => v4(169, 254, 0, 0, 16),
            BuiltIn::Cgnat => v4(100, 64, 0, 0, 10),
            BuiltIn::SlirpHostLoopback => v4(10, 0, 2, 2, 32),
            BuiltIn::LinkLocalV6 => v6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10),
            BuiltIn::UniqueLocal => v6(Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7),
            BuiltIn::V4Mapped => v6(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96),
        }
    }

    /// Why the range is denied, for `lazaret net why`.
    pub fn why(self) -> &'static str {
        match self {
            BuiltIn::LinkLocalV4 => {
                "IPv4 link-local: cloud metadata services (169.254.169.254) hand out \
                 credentials here, and pasta's alias of the host's loopback is 169.254.1.2"
            }
            BuiltIn::Cgnat => {
                "carrier-grade NAT space: Tailscale and other overlay VPNs put the \
                 user's own machines here"
            }
            BuiltIn::SlirpHostLoopback => {
                "slirp4netns's alias of the host's loopback (127.0.0.1): every service \
                 the host binds to localhost"
            }
            BuiltIn::LinkLocalV6 => {
                "IPv6 link-local: slirp4netns answers fe80::2 as the host's loopback (::1)"
            }
            BuiltIn::UniqueLocal => {
                "IPv6 unique local addresses: private networks and VPNs; slirp4netns \
                 answers fd00::2 as the host's loopback"
            }
            BuiltIn::V4Mapped => {
                "IPv4-mapped IPv6: judged as the IPv4 address; never routed as IPv6"
            }
        }
    }
}

/// Where a rule comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// `[network].default_allow`.
    DefaultAllow {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<String>,
    },
    /// `[network].default_deny`.
    DefaultDeny {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<String>,
    },
    /// The profile's `allow_egress`.
    AllowEgress {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        profile: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<String>,
    },
    /// A range of D2 that every policy denies.
    BuiltIn { range: BuiltIn },
    /// No rule contains the address: denied.
    NoRule,
    /// Opened by the sidecar's resolver for an allowed name's answer, until
    /// `expires` (seconds since the Unix epoch), or longer while a connection
    /// to the address is open (decisions.md D11). Never part of a policy.
    Name { names: Vec<String>, expires: u64 },
}

impl Source {
    pub fn verdict(&self) -> Verdict {
        match self {
            Source::DefaultAllow { .. } | Source::AllowEgress { .. } | Source::Name { .. } => {
                Verdict::Allow
            }
            Source::DefaultDeny { .. } | Source::BuiltIn { .. } | Source::NoRule => Verdict::Deny,
        }
    }

    /// Between rules of the same prefix the higher one decides.
    fn precedence(&self) -> u8 {
        match self {
            Source::DefaultDeny { .. } => 3,
            Source::DefaultAllow { .. } | Source::AllowEgress { .. } | Source::Name { .. } => 2,
            Source::BuiltIn { .. } => 1,
            Source::NoRule => 0,
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = |f: &mut fmt::Formatter<'_>, origin: &Option<String>| match origin {
            Some(o) => write!(f, " ({o})"),
            None => Ok(()),
        };
        match self {
            Source::DefaultAllow { origin } => {
                f.write_str("[network].default_allow")?;
                at(f, origin)
            }
            Source::DefaultDeny { origin } => {
                f.write_str("[network].default_deny")?;
                at(f, origin)
            }
            Source::AllowEgress { profile, origin } => {
                match profile {
                    Some(p) => write!(f, "profile {p}: allow_egress")?,
                    None => f.write_str("the profile's allow_egress")?,
                }
                at(f, origin)
            }
            Source::BuiltIn { range } => write!(f, "built-in: {}", range.why()),
            Source::NoRule => f.write_str("no rule matches: whatever is not allowed is denied"),
            Source::Name { names, expires } => write!(
                f,
                "resolved name {} (until {}, or while a connection is open)",
                names.join(", "),
                crate::names::clock(*expires)
            ),
        }
    }
}

/// A CIDR with its verdict and source. Also one entry of [`Policy::table`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Rule {
    pub net: IpNet,
    pub verdict: Verdict,
    pub source: Source,
}

impl Rule {
    fn new(net: IpNet, source: Source) -> Rule {
        Rule {
            net,
            verdict: source.verdict(),
            source,
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.verdict, self.net, self.source)
    }
}

/// How a policy decides one address: the verdict, the rule's prefix and its
/// source. `judged_as` differs from `address` for IPv4-mapped IPv6.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub address: IpAddr,
    pub judged_as: IpAddr,
    pub verdict: Verdict,
    pub rule: IpNet,
    pub source: Source,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = match self.verdict {
            Verdict::Allow => "allowed",
            Verdict::Deny => "denied",
        };
        write!(f, "{}", self.address)?;
        if self.judged_as != self.address {
            write!(f, " (judged as {})", self.judged_as)?;
        }
        write!(f, ": {verb} by {}, {}", self.rule, self.source)
    }
}

/// One CIDR as the host sends it, with where it was written (`file:line:col`)
/// for explanations. In JSON either `"192.0.2.0/24"` or
/// `{"net": "192.0.2.0/24", "origin": "..."}`; a bare address means /32 or /128.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SpecRule {
    pub net: IpNet,
    pub origin: Option<String>,
}

impl SpecRule {
    pub fn new(net: IpNet) -> SpecRule {
        SpecRule { net, origin: None }
    }

    pub fn with_origin(net: IpNet, origin: impl Into<String>) -> SpecRule {
        SpecRule {
            net,
            origin: Some(origin.into()),
        }
    }
}

impl From<IpNet> for SpecRule {
    fn from(net: IpNet) -> SpecRule {
        SpecRule::new(net)
    }
}

/// The one reading of a network everywhere a person or a file writes one
/// (configuration, `lazaret net`, the UI's `+`, policy JSON): a CIDR, or a
/// bare address meaning that one host (/32 or /128). Host bits are left
/// for [`parse_cidr`] (or [`Policy::new`], which names the rule's origin).
pub fn parse_net(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| {
            format!("`{s}` is not a CIDR network (write e.g. 10.0.0.0/8, fd00::/8 or one address)")
        })
}

/// [`parse_net`], refusing host bits so a rule means what it says.
pub fn parse_cidr(s: &str) -> Result<IpNet, String> {
    let net = parse_net(s)?;
    if net.trunc() != net {
        return Err(format!(
            "`{}` has host bits set; did you mean {}?",
            s.trim(),
            net.trunc()
        ));
    }
    Ok(net)
}

impl Serialize for SpecRule {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.origin {
            None => s.collect_str(&self.net),
            Some(origin) => {
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("net", &self.net.to_string())?;
                map.serialize_entry("origin", origin)?;
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for SpecRule {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SpecRule, D::Error> {
        struct SpecRuleVisitor;
        impl<'de> Visitor<'de> for SpecRuleVisitor {
            type Value = SpecRule;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"a CIDR such as "192.0.2.0/24", or {"net": CIDR, "origin": TEXT}"#)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<SpecRule, E> {
                parse_net(s).map(SpecRule::new).map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<SpecRule, A::Error> {
                #[derive(Deserialize)]
                #[serde(deny_unknown_fields)]
                struct Full {
                    net: String,
                    #[serde(default)]
                    origin: Option<String>,
                }
                let full = Full::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let net = parse_net(&full.net).map_err(de::Error::custom)?;
                Ok(SpecRule {
                    net,
                    origin: full.origin,
                })
            }
        }
        d.deserialize_any(SpecRuleVisitor)
    }
}

/// The configured part of a policy: what the host sends to the sidecar. The
/// built-in ranges are not part of it; both sides add them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default_allow: Vec<SpecRule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default_deny: Vec<SpecRule>,
    /// The profile whose `allow_egress` this is, for explanations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_egress: Vec<SpecRule>,
    /// Names the sidecar's resolver forwards (`[network]` and the profile's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_domains: Vec<SpecName>,
    /// Names it refuses even when an allow pattern matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_domains: Vec<SpecName>,
}

impl PolicySpec {
    /// The JSON the sidecar takes with `--policy`.
    pub fn to_json(&self) -> String {
        // A struct of strings and lists always serialises.
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{list}[{index}]{at}: {net} has host bits set (did you mean {suggestion}?)")]
    HostBits {
        list: &'static str,
        index: usize,
        /// ` (origin)` or empty.
        at: String,
        net: IpNet,
        suggestion: IpNet,
    },
    #[error("invalid policy JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// A validated policy: configured rules plus the built-in ones.
#[derive(Debug, Clone)]
pub struct Policy {
    spec: PolicySpec,
    rules: Vec<Rule>,
    table: Vec<Rule>,
}

impl Policy {
    pub fn new(spec: PolicySpec) -> Result<Policy, PolicyError> {
        let mut rules = Vec::new();
        let lists: [(&'static str, &[SpecRule]); 3] = [
            ("default_deny", &spec.default_deny),
            ("default_allow", &spec.default_allow),
            ("allow_egress", &spec.allow_egress),
        ];
        for (list, entries) in lists {
            for (index, entry) in entries.iter().enumerate() {
                if entry.net.trunc() != entry.net {
                    return Err(PolicyError::HostBits {
                        list,
                        index,
                        at: entry
                            .origin
                            .as_ref()
                            .map(|o| format!(" ({o})"))
                            .unwrap_or_default(),
                        net: entry.net,
                        suggestion: entry.net.trunc(),
                    });
                }
                let origin = entry.origin.clone();
                let source = match list {
                    "default_deny" => Source::DefaultDeny { origin },
                    "default_allow" => Source::DefaultAllow { origin },
                    _ => Source::AllowEgress {
                        profile: spec.profile.clone(),
                        origin,
                    },
                };
                rules.push(Rule::new(unmap_net(entry.net), source));
            }
        }
        for range in BuiltIn::DENY_RULES {
            rules.push(Rule::new(range.net(), Source::BuiltIn { range }));
        }
        let table = build_table(&rules);
        Ok(Policy { spec, rules, table })
    }

    pub fn from_json(json: &str) -> Result<Policy, PolicyError> {
        Policy::new(serde_json::from_str(json)?)
    }

    pub fn spec(&self) -> &PolicySpec {
        &self.spec
    }

    /// Every rule, configured (IPv4-mapped ones rewritten as IPv4) then
    /// built-in, without the implicit deny of everything else.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Which rule decides `addr`, and how.
    pub fn why(&self, addr: IpAddr) -> Decision {
        let judged_as = addr.to_canonical();
        let mut best: Option<&Rule> = None;
        for rule in self.rules.iter().filter(|r| r.net.contains(&judged_as)) {
            // Strictly better: on a tie the first written stays.
            if best.is_none_or(|b| rank(rule) > rank(b)) {
                best = Some(rule);
            }
        }
        let rule = best
            .cloned()
            .unwrap_or_else(|| implicit(Family::of_addr(&judged_as)));
        Decision {
            address: addr,
            judged_as,
            verdict: rule.verdict,
            rule: rule.net,
            source: rule.source,
        }
    }

    /// Every rule that contains `addr` (judged as for [`Policy::why`]), the
    /// deciding one first, then the ones it overrides; the implicit deny last.
    pub fn matching(&self, addr: IpAddr) -> Vec<Rule> {
        let judged_as = addr.to_canonical();
        let mut out: Vec<Rule> = self.matching_rules(judged_as).cloned().collect();
        out.push(implicit(Family::of_addr(&judged_as)));
        out
    }

    fn matching_rules(&self, judged_as: IpAddr) -> impl Iterator<Item = &Rule> {
        let mut hits: Vec<&Rule> = self
            .rules
            .iter()
            .filter(|r| r.net.contains(&judged_as))
            .collect();
        // Stable: on a tie the first written stays first.
        hits.sort_by_key(|r| std::cmp::Reverse(rank(r)));
        hits.into_iter()
    }

    /// One entry per prefix: the rule that decides that prefix, the implicit
    /// deny of `0.0.0.0/0` and `::/0` unless a rule names them, and the
    /// IPv4-mapped guard. IPv4 first; within a family the most specific first.
    pub fn table(&self) -> &[Rule] {
        &self.table
    }

    /// The table entry for exactly `net`, to explain a live route.
    pub fn entry(&self, net: &IpNet) -> Option<&Rule> {
        self.table.iter().find(|e| e.net == *net)
    }

    /// Whether the resolver forwards `name` (normalised, see
    /// [`crate::names::normalize`]): a matching deny pattern wins, then an
    /// allow pattern; a name no pattern matches is refused.
    pub fn name_decision(&self, name: &str) -> NameDecision {
        let find = |list: &[SpecName]| list.iter().find(|n| n.pattern.matches(name)).cloned();
        let at = |key: &str, n: &SpecName| match &n.origin {
            Some(o) => format!("{key} ({o})"),
            None => key.to_string(),
        };
        let (verdict, hit) = if let Some(d) = find(&self.spec.deny_domains) {
            (Verdict::Deny, Some(("deny_domains", d)))
        } else if let Some(a) = find(&self.spec.allow_domains) {
            (Verdict::Allow, Some(("allow_domains", a)))
        } else {
            (Verdict::Deny, None)
        };
        NameDecision {
            name: name.to_string(),
            verdict,
            pattern: hit.as_ref().map(|(_, n)| n.pattern.to_string()),
            source: hit.as_ref().map(|(key, n)| at(key, n)),
        }
    }

    /// What an allowed name's answer `addr` needs (decisions.md D11): a rule
    /// of its own only when no CIDR rule decides it and it is not in
    /// [`crate::names::NEVER_BY_NAME`]; a name never overrides a CIDR deny.
    pub fn name_route(&self, addr: IpAddr) -> NameRoute {
        let d = self.why(addr);
        match (d.verdict, &d.source) {
            (Verdict::Allow, _) => NameRoute::AlreadyAllowed,
            (Verdict::Deny, Source::NoRule) => match crate::names::never_by_name(d.judged_as) {
                Some(range) => NameRoute::Denied(format!(
                    "{range}: a name never opens loopback, private, link-local or multicast \
                     space (DNS rebinding); a CIDR rule can"
                )),
                None => NameRoute::Open(IpNet::from(d.judged_as)),
            },
            (Verdict::Deny, source) => NameRoute::Denied(format!("{}, {source}", d.rule)),
        }
    }

    /// Whether some prefix of `family` is allowed (and so needs a gateway).
    pub fn allows_any(&self, family: Family) -> bool {
        self.table
            .iter()
            .any(|e| e.verdict == Verdict::Allow && Family::of_net(&e.net) == family)
    }
}

/// What an answered address of an allowed name gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameRoute {
    /// A CIDR rule allows it already: nothing to add.
    AlreadyAllowed,
    /// A rule of its own (a /32 or /128) for the record's lifetime.
    Open(IpNet),
    /// It stays denied; why.
    Denied(String),
}

/// Longest prefix first, then precedence.
fn rank(rule: &Rule) -> (u8, u8) {
    (rule.net.prefix_len(), rule.source.precedence())
}

fn implicit(family: Family) -> Rule {
    Rule::new(family.everything(), Source::NoRule)
}

/// `::ffff:a.b.c.d/n` (n >= 96) is the IPv4 network `a.b.c.d/(n-96)`.
fn unmap_net(net: IpNet) -> IpNet {
    if let IpNet::V6(n) = net
        && n.prefix_len() >= 96
        && let Some(v4) = n.network().to_ipv4_mapped()
    {
        return IpNet::V4(Ipv4Net::new_assert(v4, n.prefix_len() - 96));
    }
    net
}

fn build_table(rules: &[Rule]) -> Vec<Rule> {
    let mut best: BTreeMap<IpNet, &Rule> = BTreeMap::new();
    for rule in rules {
        best.entry(rule.net)
            .and_modify(|b| {
                // Strictly higher: on a tie the first written stays.
                if rule.source.precedence() > b.source.precedence() {
                    *b = rule;
                }
            })
            .or_insert(rule);
    }
    let mut table: Vec<Rule> = best.into_values().cloned().collect();
    for family in Family::BOTH {
        if !table.iter().any(|e| e.net == family.everything()) {
            table.push(implicit(family));
        }
    }
    // No configured rule can hold this prefix: unmap_net rewrites every rule
    // inside it as IPv4.
    let guard = BuiltIn::V4Mapped;
    table.push(Rule::new(guard.net(), Source::BuiltIn { range: guard }));
    table.sort_unstable_by(|a, b| {
        (Family::of_net(&a.net), b.net.prefix_len(), a.net.network()).cmp(&(
            Family::of_net(&b.net),
            a.net.prefix_len(),
            b.net.network(),
        ))
    });
    table
}

#[cfg(test)]
mod tests;
