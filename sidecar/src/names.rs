//! Egress by name (decisions.md D11): which names the sandbox may resolve,
//! and which answered addresses may get a rule of their own.
//!
//! A pattern is an exact name (`api.anthropic.com`) or a wildcard over the
//! names below a suffix (`*.githubusercontent.com`: `raw.githubusercontent.com`
//! and `a.b.githubusercontent.com`, not `githubusercontent.com` itself). A
//! deny pattern that matches beats every allow pattern; a name no pattern
//! matches is refused. Names compare case-insensitively, without the final dot.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::policy::Verdict;

/// An exact name or a `*.suffix` wildcard, lower case, without the final dot.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NamePattern {
    Exact(String),
    /// `*.SUFFIX`: every name that ends in `.SUFFIX`.
    Below(String),
}

impl NamePattern {
    /// Parses `api.example.com` or `*.example.com`; the message says what is
    /// wrong with a malformed one.
    pub fn parse(raw: &str) -> Result<NamePattern, String> {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Err("an empty name".into());
        }
        if let Some(suffix) = trimmed.strip_prefix("*.") {
            let suffix = normalize(suffix).map_err(|e| format!("`{raw}`: {e}"))?;
            if !suffix.contains('.') {
                return Err(format!(
                    "`{raw}` would allow every name under a top-level domain; name a \
                     registered domain (e.g. *.example.com)"
                ));
            }
            return Ok(NamePattern::Below(suffix));
        }
        if trimmed.contains('*') {
            return Err(format!(
                "`{raw}`: a wildcard is only allowed as the whole first label (`*.example.com`)"
            ));
        }
        normalize(trimmed)
            .map(NamePattern::Exact)
            .map_err(|e| format!("`{raw}`: {e}"))
    }

    /// Whether the (normalised) `name` is one this pattern names.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            NamePattern::Exact(n) => n == name,
            NamePattern::Below(suffix) => name
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        }
    }
}

impl fmt::Display for NamePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NamePattern::Exact(n) => f.pad(n),
            NamePattern::Below(s) => f.pad(&format!("*.{s}")),
        }
    }
}

/// A host name as compared: lower case, no final dot, letters, digits, `-`
/// and `_` in labels of 1 to 63 characters, at most 253 in all, and not an
/// address (an IPv4 address is all digits and dots: use a CIDR rule).
pub fn normalize(raw: &str) -> Result<String, String> {
    let name = raw.strip_suffix('.').unwrap_or(raw).to_ascii_lowercase();
    if name.is_empty() {
        return Err("an empty name".into());
    }
    if name.len() > 253 {
        return Err("longer than 253 characters".into());
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err("an empty label (two dots in a row, or a leading dot)".into());
        }
        if label.len() > 63 {
            return Err(format!("the label `{label}` is longer than 63 characters"));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
        {
            return Err(format!(
                "`{}` is not allowed in a host name (letters, digits, `-`, `_`; write \
                 internationalised names in their xn-- form)",
                c.escape_default()
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("the label `{label}` starts or ends with `-`"));
        }
    }
    if name.parse::<IpAddr>().is_ok() || name.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err("an address, not a name: write it as a CIDR rule (allow_egress)".into());
    }
    Ok(name)
}

/// One name pattern as the host sends it, with where it was written.
/// In JSON `"api.example.com"` or `{"name": "...", "origin": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SpecName {
    pub pattern: NamePattern,
    pub origin: Option<String>,
}

impl SpecName {
    pub fn new(pattern: NamePattern) -> SpecName {
        SpecName {
            pattern,
            origin: None,
        }
    }

    pub fn with_origin(pattern: NamePattern, origin: impl Into<String>) -> SpecName {
        SpecName {
            pattern,
            origin: Some(origin.into()),
        }
    }
}

impl Serialize for SpecName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.origin {
            None => s.collect_str(&self.pattern),
            Some(origin) => {
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("name", &self.pattern.to_string())?;
                map.serialize_entry("origin", origin)?;
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for SpecName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SpecName, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SpecName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    r#"a name such as "api.example.com" or "*.example.com", or {"name", "origin"}"#,
                )
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<SpecName, E> {
                NamePattern::parse(s).map(SpecName::new).map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<SpecName, A::Error> {
                #[derive(Deserialize)]
                #[serde(deny_unknown_fields)]
                struct Full {
                    name: String,
                    #[serde(default)]
                    origin: Option<String>,
                }
                let full = Full::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let pattern = NamePattern::parse(&full.name).map_err(de::Error::custom)?;
                Ok(SpecName {
                    pattern,
                    origin: full.origin,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// Which pattern decides a name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameDecision {
    pub name: String,
    pub verdict: Verdict,
    /// The deciding pattern; `None` when none matches (refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// `allow_domains` or `deny_domains`, with where it was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl fmt::Display for NameDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.pattern, &self.verdict) {
            (Some(p), Verdict::Allow) => write!(
                f,
                "{}: resolved by the sidecar (allowed by {p}, {}); each answered address is \
                 reachable for the record's lifetime unless a CIDR rule denies it",
                self.name,
                self.source.as_deref().unwrap_or("allow_domains")
            ),
            (Some(p), Verdict::Deny) => write!(
                f,
                "{}: refused by the sidecar's resolver (denied by {p}, {})",
                self.name,
                self.source.as_deref().unwrap_or("deny_domains")
            ),
            (None, _) => write!(
                f,
                "{}: refused by the sidecar's resolver: no allow_domains entry names it \
                 (allow it with `lazaret net allow {}`)",
                self.name, self.name
            ),
        }
    }
}

/// Ranges an answer can never open, whatever the configuration: a name
/// pointing here is DNS rebinding towards the sandbox's own machine or the
/// user's network (loopback, private, link-local, shared and multicast
/// space). A CIDR rule can still open them explicitly.
pub const NEVER_BY_NAME: [&str; 16] = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "::/128",
    "::1/128",
    "::ffff:0:0/96",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
    "64:ff9b::/96",
];

/// The [`NEVER_BY_NAME`] range that holds `addr`, if any.
pub fn never_by_name(addr: IpAddr) -> Option<IpNet> {
    NEVER_BY_NAME
        .iter()
        .filter_map(|s| s.parse::<IpNet>().ok())
        .find(|n| n.contains(&addr))
}

/// Seconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS UTC` (the sidecar
/// and the host may differ in time zone; UTC reads the same on both).
pub fn clock(unix: u64) -> String {
    let (days, rest) = (unix / 86_400, unix % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// A name as the agent asked it, safe to print on a terminal: printable
/// ASCII stays, anything else becomes `\xNN` (decisions.md D8: an asked name
/// is agent-chosen text). Cut at 255 characters.
pub fn escape(raw: &str) -> String {
    let mut out = String::new();
    for b in raw.bytes().take(255) {
        if b.is_ascii_graphic() && b != b'\\' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Names the resolver remembers (refused ones, failed lookups), each with
/// how often and when last, and what it last noted of it. The agent
/// chooses the names, so the log is bounded: past `cap` names, the one seen
/// longest ago goes. Names are kept [`escape`]d.
#[derive(Debug, Clone)]
pub struct NameLog<T> {
    cap: usize,
    entries: std::collections::BTreeMap<String, Logged<T>>,
    /// Every record since the start, forgotten names included.
    total: u64,
}

/// One name of a [`NameLog`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged<T> {
    pub count: u64,
    /// Seconds since the Unix epoch.
    pub last: u64,
    /// What was noted the last time.
    pub note: T,
}

impl<T> NameLog<T> {
    pub fn new(cap: usize) -> NameLog<T> {
        NameLog {
            cap,
            entries: std::collections::BTreeMap::new(),
            total: 0,
        }
    }

    /// Counts `name` once more at `now`, noting `note`.
    pub fn record(&mut self, name: &str, now: u64, note: T) {
        self.total += 1;
        let name = escape(name);
        match self.entries.get_mut(&name) {
            Some(e) => {
                e.count += 1;
                e.last = e.last.max(now);
                e.note = note;
            }
            None => {
                self.entries.insert(
                    name,
                    Logged {
                        count: 1,
                        last: now,
                        note,
                    },
                );
            }
        }
        while self.entries.len() > self.cap {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.last)
                .map(|(n, _)| n.clone())
            else {
                break;
            };
            self.entries.remove(&oldest);
        }
    }

    /// The names, most recent first.
    pub fn recent(&self) -> Vec<(&str, &Logged<T>)> {
        let mut v: Vec<(&str, &Logged<T>)> =
            self.entries.iter().map(|(n, e)| (n.as_str(), e)).collect();
        v.sort_by_key(|(_, e)| std::cmp::Reverse(e.last));
        v
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Records since the start (never goes down, unlike the counts kept).
    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Now, in seconds since the Unix epoch.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn clock_reads_utc() {
        assert_eq!(clock(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(clock(1_796_106_605), "2026-12-01 06:30:05 UTC");
    }

    use super::*;

    /// Mutation check (issue 41, scripts/mutants sidecar): the length
    /// bounds at their edge, and digits and dots are an address however
    /// few there are.
    #[test]
    fn names_are_bounded_at_their_edges() {
        let label = "a".repeat(63);
        assert!(normalize(&label).is_ok());
        assert!(normalize(&format!("{label}a")).is_err());
        // 253 characters in all: three labels of 63, one of 61.
        let name = format!("{label}.{label}.{label}.{}", "b".repeat(61));
        assert_eq!(name.len(), 253);
        assert_eq!(normalize(&name), Ok(name.clone()));
        assert!(normalize(&format!("{name}c")).is_err());
        for address in ["123", "1.2.3", "10.0.2.2"] {
            assert!(normalize(address).is_err(), "{address}");
        }
        assert!(normalize("web1.example").is_ok());
    }

    #[test]
    fn patterns_parse_and_match() {
        let exact = NamePattern::parse("API.Example.com.").unwrap();
        assert_eq!(exact, NamePattern::Exact("api.example.com".into()));
        assert!(exact.matches("api.example.com"));
        assert!(!exact.matches("x.api.example.com"));
        let below = NamePattern::parse("*.example.com").unwrap();
        assert!(below.matches("a.example.com"));
        assert!(below.matches("a.b.example.com"));
        assert!(!below.matches("example.com"));
        assert!(!below.matches("badexample.com"));
        assert!(!below.matches(".example.com"));
        assert_eq!(below.to_string(), "*.example.com");
    }

    #[test]
    fn malformed_names_are_refused_with_a_reason() {
        for (raw, why) in [
            ("", "empty"),
            ("a..b", "empty label"),
            ("*.com", "top-level"),
            ("a.*.com", "wildcard"),
            ("*example.com", "wildcard"),
            ("exa mple.com", "not allowed"),
            ("-a.com", "starts or ends"),
            ("10.0.0.1", "address"),
            ("2001:db8::1", "not allowed"),
            ("10.0.0.0/8", "not allowed"),
        ] {
            let e = NamePattern::parse(raw).unwrap_err();
            assert!(e.contains(why), "{raw}: {e}");
        }
        let long = format!("{}.com", "a".repeat(64));
        assert!(NamePattern::parse(&long).unwrap_err().contains("63"));
    }

    #[test]
    fn name_log_counts_and_keeps_the_latest_note() {
        let mut log = NameLog::new(4);
        log.record("a.test", 10, "NXDOMAIN");
        log.record("b.test", 11, "SERVFAIL");
        log.record("a.test", 12, "SERVFAIL");
        let recent = log.recent();
        assert_eq!(recent.len(), 2);
        assert_eq!(recent[0].0, "a.test");
        assert_eq!(
            *recent[0].1,
            Logged {
                count: 2,
                last: 12,
                note: "SERVFAIL"
            }
        );
        assert_eq!(recent[1].0, "b.test");
    }

    #[test]
    fn name_log_is_bounded_and_drops_the_oldest() {
        let mut log = NameLog::new(3);
        for i in 0..100u64 {
            log.record(&format!("n{i}.test"), 1000 + i, ());
            assert!(log.len() <= 3, "{} names kept", log.len());
        }
        let names: Vec<&str> = log.recent().iter().map(|(n, _)| *n).collect();
        assert_eq!(names, vec!["n99.test", "n98.test", "n97.test"]);
        // A name asked again stays; the one seen longest ago goes.
        log.record("n97.test", 2000, ());
        log.record("new.test", 2001, ());
        let names: Vec<&str> = log.recent().iter().map(|(n, _)| *n).collect();
        assert_eq!(names, vec!["new.test", "n97.test", "n99.test"]);
    }

    #[test]
    fn name_log_escapes_what_the_agent_chose() {
        let mut log = NameLog::new(2);
        log.record("a\u{1b}[2J.test", 1, ());
        assert_eq!(log.recent()[0].0, "a\\x1b[2J.test");
    }

    #[test]
    fn rebinding_ranges() {
        for a in [
            "10.1.2.3",
            "127.0.0.1",
            "169.254.169.254",
            "::1",
            "fd00::2",
            "192.168.1.1",
        ] {
            assert!(never_by_name(a.parse().unwrap()).is_some(), "{a}");
        }
        for a in ["198.51.100.7", "2001:db8::7", "93.184.216.34"] {
            assert!(never_by_name(a.parse().unwrap()).is_none(), "{a}");
        }
    }
}
