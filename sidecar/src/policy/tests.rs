use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use super::*;
use crate::kernel::{self, KernelRule, Step};

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

fn addr(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn rules(list: &[&str]) -> Vec<SpecRule> {
    list.iter().map(|s| SpecRule::new(net(s))).collect()
}

fn policy(allow: &[&str], deny: &[&str], egress: &[&str]) -> Policy {
    Policy::new(PolicySpec {
        default_allow: rules(allow),
        default_deny: rules(deny),
        profile: Some("dev".into()),
        allow_egress: rules(egress),
        ..PolicySpec::default()
    })
    .unwrap()
}

fn names(list: &[&str]) -> Vec<SpecName> {
    list.iter()
        .map(|s| SpecName::new(crate::names::NamePattern::parse(s).unwrap()))
        .collect()
}

#[test]
fn names_deny_wins_and_answers_never_override_a_cidr_deny() {
    let p = Policy::new(PolicySpec {
        default_deny: rules(&["198.51.100.128/25"]),
        allow_egress: rules(&["203.0.113.0/24"]),
        allow_domains: names(&["*.lazaret.test", "api.example.com"]),
        deny_domains: names(&["bad.lazaret.test"]),
        ..PolicySpec::default()
    })
    .unwrap();
    assert_eq!(p.name_decision("a.lazaret.test").verdict, Verdict::Allow);
    assert_eq!(p.name_decision("bad.lazaret.test").verdict, Verdict::Deny);
    assert_eq!(p.name_decision("lazaret.test").verdict, Verdict::Deny);
    assert_eq!(p.name_decision("api.example.com").verdict, Verdict::Allow);
    assert_eq!(p.name_decision("x.api.example.com").verdict, Verdict::Deny);
    let open = |a: &str| p.name_route(a.parse().unwrap());
    assert_eq!(
        open("198.51.100.7"),
        NameRoute::Open(net("198.51.100.7/32"))
    );
    assert_eq!(open("203.0.113.5"), NameRoute::AlreadyAllowed);
    for denied in [
        "198.51.100.200",
        "10.1.2.3",
        "127.0.0.1",
        "169.254.169.254",
        "fd00::2",
        "::1",
        "::ffff:10.0.0.1",
    ] {
        assert!(
            matches!(open(denied), NameRoute::Denied(_)),
            "{denied}: {:?}",
            open(denied)
        );
    }
    // The names' rules sit with the most specific prefixes.
    let rules = kernel::desired_with_names(&p, &[net("198.51.100.7/32")]);
    assert!(rules.contains(&kernel::name_rule(net("198.51.100.7/32"))));
}

/// The kind of source, without origins, for compact tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Allow,
    Deny,
    Egress,
    Built(BuiltIn),
    NoRule,
}

fn kind(s: &Source) -> Kind {
    match s {
        Source::DefaultAllow { .. } => Kind::Allow,
        Source::DefaultDeny { .. } => Kind::Deny,
        Source::AllowEgress { .. } => Kind::Egress,
        Source::BuiltIn { range } => Kind::Built(*range),
        Source::NoRule => Kind::NoRule,
        Source::Name { .. } => unreachable!("a policy never holds a name rule"),
    }
}

use Verdict::{Allow as A, Deny as D};

struct Case {
    allow: &'static [&'static str],
    deny: &'static [&'static str],
    egress: &'static [&'static str],
    addr: &'static str,
    verdict: Verdict,
    rule: &'static str,
    kind: Kind,
}

const NESTED_V4: (&[&str], &[&str]) = (
    &["10.1.0.0/16", "10.1.2.3/32"],
    &["10.0.0.0/8", "10.1.2.0/24"],
);

#[rustfmt::skip]
const CASES: &[Case] = &[
    // Nothing configured: everything is denied, IPv4 and IPv6.
    Case { allow: &[], deny: &[], egress: &[], addr: "192.0.2.1", verdict: D, rule: "0.0.0.0/0", kind: Kind::NoRule },
    Case { allow: &[], deny: &[], egress: &[], addr: "2001:db8::1", verdict: D, rule: "::/0", kind: Kind::NoRule },
    // 0.0.0.0/0 allowed: the built-in denies still win, being more specific.
    Case { allow: &["0.0.0.0/0"], deny: &[], egress: &[], addr: "192.0.2.1", verdict: A, rule: "0.0.0.0/0", kind: Kind::Allow },
    Case { allow: &["0.0.0.0/0"], deny: &[], egress: &[], addr: "169.254.169.254", verdict: D, rule: "169.254.0.0/16", kind: Kind::Built(BuiltIn::LinkLocalV4) },
    Case { allow: &["0.0.0.0/0"], deny: &[], egress: &[], addr: "169.254.1.2", verdict: D, rule: "169.254.0.0/16", kind: Kind::Built(BuiltIn::LinkLocalV4) },
    Case { allow: &["0.0.0.0/0"], deny: &[], egress: &[], addr: "100.100.1.1", verdict: D, rule: "100.64.0.0/10", kind: Kind::Built(BuiltIn::Cgnat) },
    Case { allow: &["0.0.0.0/0"], deny: &[], egress: &[], addr: "10.0.2.2", verdict: D, rule: "10.0.2.2/32", kind: Kind::Built(BuiltIn::SlirpHostLoopback) },
    Case { allow: &["0.0.0.0/0"], deny: &[], egress: &[], addr: "10.0.2.3", verdict: A, rule: "0.0.0.0/0", kind: Kind::Allow },
    // An IPv4 allow says nothing about IPv6.
    Case { allow: &["0.0.0.0/0"], deny: &[], egress: &[], addr: "2001:db8::1", verdict: D, rule: "::/0", kind: Kind::NoRule },
    // ::/0 allowed: link-local and ULA (slirp4netns's host aliases) stay denied.
    Case { allow: &["::/0"], deny: &[], egress: &[], addr: "2001:db8::1", verdict: A, rule: "::/0", kind: Kind::Allow },
    Case { allow: &["::/0"], deny: &[], egress: &[], addr: "fe80::2", verdict: D, rule: "fe80::/10", kind: Kind::Built(BuiltIn::LinkLocalV6) },
    Case { allow: &["::/0"], deny: &[], egress: &[], addr: "fd00::2", verdict: D, rule: "fc00::/7", kind: Kind::Built(BuiltIn::UniqueLocal) },
    // IPv4-mapped IPv6 is judged as IPv4: ::/0 does not open it.
    Case { allow: &["::/0"], deny: &[], egress: &[], addr: "::ffff:192.0.2.1", verdict: D, rule: "0.0.0.0/0", kind: Kind::NoRule },
    Case { allow: &["::/0"], deny: &[], egress: &[], addr: "::ffff:10.0.2.2", verdict: D, rule: "10.0.2.2/32", kind: Kind::Built(BuiltIn::SlirpHostLoopback) },
    Case { allow: &["192.0.2.0/24"], deny: &[], egress: &[], addr: "::ffff:192.0.2.7", verdict: A, rule: "192.0.2.0/24", kind: Kind::Allow },
    // A rule written as mapped IPv6 is an IPv4 rule.
    Case { allow: &["::ffff:198.51.100.0/120"], deny: &[], egress: &[], addr: "198.51.100.9", verdict: A, rule: "198.51.100.0/24", kind: Kind::Allow },
    Case { allow: &["::ffff:0.0.0.0/96"], deny: &[], egress: &[], addr: "203.0.113.1", verdict: A, rule: "0.0.0.0/0", kind: Kind::Allow },
    // Nested: deny /8 > allow /16 > deny /24 > allow /32.
    Case { allow: NESTED_V4.0, deny: NESTED_V4.1, egress: &[], addr: "10.0.0.1", verdict: D, rule: "10.0.0.0/8", kind: Kind::Deny },
    Case { allow: NESTED_V4.0, deny: NESTED_V4.1, egress: &[], addr: "10.1.0.1", verdict: A, rule: "10.1.0.0/16", kind: Kind::Allow },
    Case { allow: NESTED_V4.0, deny: NESTED_V4.1, egress: &[], addr: "10.1.2.1", verdict: D, rule: "10.1.2.0/24", kind: Kind::Deny },
    Case { allow: NESTED_V4.0, deny: NESTED_V4.1, egress: &[], addr: "10.1.2.3", verdict: A, rule: "10.1.2.3/32", kind: Kind::Allow },
    Case { allow: NESTED_V4.0, deny: NESTED_V4.1, egress: &[], addr: "10.1.2.4", verdict: D, rule: "10.1.2.0/24", kind: Kind::Deny },
    Case { allow: NESTED_V4.0, deny: NESTED_V4.1, egress: &[], addr: "10.1.255.255", verdict: A, rule: "10.1.0.0/16", kind: Kind::Allow },
    Case { allow: NESTED_V4.0, deny: NESTED_V4.1, egress: &[], addr: "11.0.0.0", verdict: D, rule: "0.0.0.0/0", kind: Kind::NoRule },
    // Nested IPv6 and an allow_egress inside a default_deny.
    Case { allow: &["2001:db8::/32"], deny: &["2001:db8:1::/48"], egress: &["2001:db8:1:2::/64"], addr: "2001:db8:1:2::5", verdict: A, rule: "2001:db8:1:2::/64", kind: Kind::Egress },
    Case { allow: &["2001:db8::/32"], deny: &["2001:db8:1::/48"], egress: &["2001:db8:1:2::/64"], addr: "2001:db8:1:3::5", verdict: D, rule: "2001:db8:1::/48", kind: Kind::Deny },
    Case { allow: &["2001:db8::/32"], deny: &["2001:db8:1::/48"], egress: &["2001:db8:1:2::/64"], addr: "2001:db8:2::5", verdict: A, rule: "2001:db8::/32", kind: Kind::Allow },
    // Overlapping, not nested the other way: a narrower deny inside an allow
    // of another list.
    Case { allow: &[], deny: &["192.0.2.128/25"], egress: &["192.0.2.0/24"], addr: "192.0.2.200", verdict: D, rule: "192.0.2.128/25", kind: Kind::Deny },
    Case { allow: &[], deny: &["192.0.2.128/25"], egress: &["192.0.2.0/24"], addr: "192.0.2.100", verdict: A, rule: "192.0.2.0/24", kind: Kind::Egress },
    // Equal prefixes: deny wins, whichever list each is in.
    Case { allow: &["192.0.2.0/24"], deny: &["192.0.2.0/24"], egress: &[], addr: "192.0.2.1", verdict: D, rule: "192.0.2.0/24", kind: Kind::Deny },
    Case { allow: &[], deny: &["198.51.100.0/24"], egress: &["198.51.100.0/24"], addr: "198.51.100.1", verdict: D, rule: "198.51.100.0/24", kind: Kind::Deny },
    Case { allow: &["0.0.0.0/0"], deny: &["0.0.0.0/0"], egress: &[], addr: "192.0.2.1", verdict: D, rule: "0.0.0.0/0", kind: Kind::Deny },
    Case { allow: &["::/0"], deny: &["::/0"], egress: &[], addr: "2001:db8::1", verdict: D, rule: "::/0", kind: Kind::Deny },
    // A configured rule of exactly a built-in prefix beats the built-in one
    // (the one way to reach the host alias on purpose); a configured deny
    // still beats that allow.
    Case { allow: &[], deny: &[], egress: &["10.0.2.2/32"], addr: "10.0.2.2", verdict: A, rule: "10.0.2.2/32", kind: Kind::Egress },
    Case { allow: &[], deny: &["10.0.2.2/32"], egress: &["10.0.2.2/32"], addr: "10.0.2.2", verdict: D, rule: "10.0.2.2/32", kind: Kind::Deny },
    Case { allow: &["fe80::/10"], deny: &[], egress: &[], addr: "fe80::2", verdict: A, rule: "fe80::/10", kind: Kind::Allow },
    // ...but a more specific allow inside a configured /0 deny is allowed.
    Case { allow: &["192.0.2.0/24"], deny: &["0.0.0.0/0"], egress: &[], addr: "192.0.2.9", verdict: A, rule: "192.0.2.0/24", kind: Kind::Allow },
    Case { allow: &["192.0.2.0/24"], deny: &["0.0.0.0/0"], egress: &[], addr: "8.8.8.8", verdict: D, rule: "0.0.0.0/0", kind: Kind::Deny },
];

#[test]
fn why_follows_the_rules_of_d2() {
    for (i, c) in CASES.iter().enumerate() {
        let p = policy(c.allow, c.deny, c.egress);
        let d = p.why(addr(c.addr));
        let got = (d.verdict, d.rule, kind(&d.source));
        let want = (c.verdict, net(c.rule), c.kind);
        assert_eq!(
            got, want,
            "case {i}: {} under allow {:?} deny {:?} egress {:?}: {d}",
            c.addr, c.allow, c.deny, c.egress
        );
        assert_eq!(d.address, addr(c.addr));
        assert_eq!(d.judged_as, addr(c.addr).to_canonical(), "case {i}");
    }
}

#[test]
fn decisions_read_well() {
    let p = Policy::new(PolicySpec {
        allow_egress: vec![SpecRule::with_origin(net("0.0.0.0/0"), "lazaret.toml:4:18")],
        profile: Some("dev".into()),
        ..PolicySpec::default()
    })
    .unwrap();
    assert_eq!(
        p.why(addr("192.0.2.1")).to_string(),
        "192.0.2.1: allowed by 0.0.0.0/0, profile dev: allow_egress (lazaret.toml:4:18)"
    );
    let mapped = p.why(addr("::ffff:10.0.2.2")).to_string();
    assert!(
        mapped.starts_with(
            "::ffff:10.0.2.2 (judged as 10.0.2.2): denied by 10.0.2.2/32, built-in: slirp4netns"
        ),
        "{mapped}"
    );
    let overridden: Vec<String> = p
        .matching(addr("10.0.2.2"))
        .iter()
        .map(|r| r.net.to_string())
        .collect();
    assert_eq!(overridden, ["10.0.2.2/32", "0.0.0.0/0", "0.0.0.0/0"]);
}

#[test]
fn the_table_has_one_entry_per_prefix_most_specific_first() {
    let p = policy(
        &["0.0.0.0/0", "192.0.2.0/24", "2001:db8::/32"],
        &["192.0.2.0/24", "10.0.0.0/8", "fc00::/7"],
        &["192.0.2.0/24", "10.0.2.2/32"],
    );
    let table: Vec<(IpNet, Verdict, Kind)> = p
        .table()
        .iter()
        .map(|e| (e.net, e.verdict, kind(&e.source)))
        .collect();
    let want = vec![
        (net("10.0.2.2/32"), A, Kind::Egress),
        (net("192.0.2.0/24"), D, Kind::Deny),
        (net("169.254.0.0/16"), D, Kind::Built(BuiltIn::LinkLocalV4)),
        (net("100.64.0.0/10"), D, Kind::Built(BuiltIn::Cgnat)),
        (net("10.0.0.0/8"), D, Kind::Deny),
        (net("0.0.0.0/0"), A, Kind::Allow),
        (net("::ffff:0:0/96"), D, Kind::Built(BuiltIn::V4Mapped)),
        (net("2001:db8::/32"), A, Kind::Allow),
        (net("fe80::/10"), D, Kind::Built(BuiltIn::LinkLocalV6)),
        (net("fc00::/7"), D, Kind::Deny),
        (net("::/0"), D, Kind::NoRule),
    ];
    assert_eq!(table, want);
    assert_eq!(p.entry(&net("10.0.0.0/8")).map(|e| e.verdict), Some(D));
    assert!(p.entry(&net("10.0.0.0/9")).is_none());
    assert!(p.allows_any(Family::Ipv4) && p.allows_any(Family::Ipv6));
    assert!(!policy(&["0.0.0.0/0"], &[], &[]).allows_any(Family::Ipv6));
}

#[test]
fn kernel_rules_put_longer_prefixes_first_and_end_with_floors() {
    let p = policy(&["192.0.2.0/24"], &[], &["2001:db8::/32"]);
    let text: Vec<String> = kernel::desired(&p).iter().map(|r| r.to_string()).collect();
    let want = [
        "10000: to 10.0.2.2/32 prohibit",
        "10008: to 192.0.2.0/24 lookup 200",
        "10016: to 169.254.0.0/16 prohibit",
        "10022: to 100.64.0.0/10 prohibit",
        "10032: to 0.0.0.0/0 prohibit",
        "10032: to ::ffff:0.0.0.0/96 prohibit",
        "10096: to 2001:db8::/32 lookup 200",
        "10118: to fe80::/10 prohibit",
        "10121: to fc00::/7 prohibit",
        "10128: to ::/0 prohibit",
        "10999: to 0.0.0.0/0 prohibit",
        "10999: to ::/0 prohibit",
    ];
    assert_eq!(text, want);
}

#[test]
fn host_bits_are_refused_with_a_suggestion_and_the_origin() {
    let err = Policy::new(PolicySpec {
        default_deny: vec![
            SpecRule::new(net("10.0.0.0/8")),
            SpecRule::with_origin(net("172.16.0.1/12"), "config.toml:21:5"),
        ],
        ..PolicySpec::default()
    })
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "default_deny[1] (config.toml:21:5): 172.16.0.1/12 has host bits set (did you mean 172.16.0.0/12?)"
    );
    let err = Policy::from_json(r#"{"allow_egress": ["2001:db8::1/32"]}"#).unwrap_err();
    assert!(
        err.to_string().contains("did you mean 2001:db8::/32?"),
        "{err}"
    );
}

#[test]
fn policy_json_takes_strings_or_objects_and_round_trips() {
    let json = r#"{
        "default_allow": ["192.0.2.0/24", {"net": "2001:db8::/32", "origin": "config.toml:3:17"}],
        "default_deny": ["10.0.0.0/8"],
        "profile": "dev",
        "allow_egress": ["198.51.100.7"]
    }"#;
    let p = Policy::from_json(json).unwrap();
    let spec = p.spec();
    assert_eq!(
        spec.default_allow[1].origin.as_deref(),
        Some("config.toml:3:17")
    );
    assert_eq!(spec.allow_egress[0].net, net("198.51.100.7/32"));
    assert_eq!(
        p.why(addr("2001:db8::5")).source,
        Source::DefaultAllow {
            origin: Some("config.toml:3:17".into())
        }
    );
    let again = Policy::from_json(&spec.to_json()).unwrap();
    assert_eq!(again.spec(), spec);
    assert_eq!(again.table(), p.table());
    assert_eq!(PolicySpec::default().to_json(), "{}");

    for (bad, needle) in [
        (r#"{"default_alow": []}"#, "unknown field `default_alow`"),
        (
            r#"{"default_allow": ["192.0.2.0/33"]}"#,
            "`192.0.2.0/33` is not a CIDR",
        ),
        (r#"{"default_allow": [{"net": "x"}]}"#, "`x` is not a CIDR"),
        (
            r#"{"default_allow": [{"net": "10.0.0.0/8", "why": 1}]}"#,
            "unknown field `why`",
        ),
        (r#"{"default_allow": [7]}"#, "a CIDR such as"),
    ] {
        let err = Policy::from_json(bad).unwrap_err().to_string();
        assert!(err.contains(needle), "{bad}: {err}");
    }
}

/// xorshift64*: reproducible pseudo-random numbers without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn u128(&mut self) -> u128 {
        (u128::from(self.next()) << 64) | u128::from(self.next())
    }
}

/// A random policy whose rules overlap and nest: prefixes of a few anchor
/// addresses, some of them the built-in ranges or written as mapped IPv6.
fn random_spec(rng: &mut Rng) -> PolicySpec {
    let anchors_v4: Vec<Ipv4Addr> = (0..3)
        .map(|_| Ipv4Addr::from(rng.next() as u32))
        .chain([
            Ipv4Addr::new(10, 0, 2, 2),
            Ipv4Addr::new(169, 254, 169, 254),
        ])
        .collect();
    let anchors_v6: Vec<Ipv6Addr> = (0..2)
        .map(|_| Ipv6Addr::from(rng.u128()))
        .chain([
            Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
            Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2),
        ])
        .collect();
    let lens_v4 = [0, 1, 4, 8, 10, 12, 16, 20, 24, 28, 31, 32];
    let lens_v6 = [0, 1, 7, 10, 16, 32, 48, 64, 96, 120, 127, 128];
    let mut spec = PolicySpec {
        profile: Some("p".into()),
        ..PolicySpec::default()
    };
    for _ in 0..rng.below(12) + 1 {
        let net = match rng.below(5) {
            0 | 1 => {
                let a = anchors_v4[rng.below(anchors_v4.len())];
                IpNet::V4(
                    Ipv4Net::new(a, lens_v4[rng.below(lens_v4.len())])
                        .unwrap()
                        .trunc(),
                )
            }
            2 => {
                // An IPv4 rule written as mapped IPv6.
                let a = anchors_v4[rng.below(anchors_v4.len())].to_ipv6_mapped();
                IpNet::V6(
                    Ipv6Net::new(a, 96 + lens_v4[rng.below(lens_v4.len())])
                        .unwrap()
                        .trunc(),
                )
            }
            _ => {
                let a = anchors_v6[rng.below(anchors_v6.len())];
                IpNet::V6(
                    Ipv6Net::new(a, lens_v6[rng.below(lens_v6.len())])
                        .unwrap()
                        .trunc(),
                )
            }
        };
        let list = match rng.below(3) {
            0 => &mut spec.default_allow,
            1 => &mut spec.default_deny,
            _ => &mut spec.allow_egress,
        };
        list.push(SpecRule::new(net));
    }
    spec
}

fn v4_offset(a: Ipv4Addr, d: i64) -> Ipv4Addr {
    Ipv4Addr::from((i64::from(u32::from(a)) + d).rem_euclid(1 << 32) as u32)
}

fn v6_offset(a: Ipv6Addr, d: i128) -> Ipv6Addr {
    Ipv6Addr::from(u128::from(a).wrapping_add(d as u128))
}

/// Addresses on and around every table boundary, inside each prefix, and
/// anywhere; each IPv4 one also as mapped IPv6.
fn sample_addresses(p: &Policy, rng: &mut Rng, random: usize) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for e in p.table() {
        match e.net {
            IpNet::V4(n) => {
                let span = u64::from(u32::from(n.broadcast()) - u32::from(n.network())) + 1;
                let inside = v4_offset(n.network(), (rng.next() % span) as i64);
                for a in [
                    v4_offset(n.network(), -1),
                    n.network(),
                    inside,
                    n.broadcast(),
                    v4_offset(n.broadcast(), 1),
                ] {
                    out.push(IpAddr::V4(a));
                }
            }
            IpNet::V6(n) => {
                let host_bits = 128 - u32::from(n.prefix_len());
                let inside = if host_bits == 0 {
                    0
                } else {
                    rng.u128() >> (128 - host_bits)
                };
                for a in [
                    v6_offset(n.network(), -1),
                    n.network(),
                    v6_offset(n.network(), inside as i128),
                    n.broadcast(),
                    v6_offset(n.broadcast(), 1),
                ] {
                    out.push(IpAddr::V6(a));
                }
            }
        }
    }
    for _ in 0..random {
        out.push(IpAddr::V4(Ipv4Addr::from(rng.next() as u32)));
        out.push(IpAddr::V6(Ipv6Addr::from(rng.u128())));
    }
    let mapped: Vec<IpAddr> = out
        .iter()
        .filter_map(|a| match a {
            IpAddr::V4(v4) => Some(IpAddr::V6(v4.to_ipv6_mapped())),
            IpAddr::V6(_) => None,
        })
        .collect();
    out.extend(mapped);
    out
}

/// What the kernel does with a socket's destination: an IPv4-mapped address
/// goes through IPv4 routing; then the FIB rules are tried by priority (and
/// in insertion order within one) and the first whose prefix contains the
/// destination decides. `None`: it fell through to the main table.
fn kernel_verdict(installed: &[KernelRule], a: IpAddr) -> Option<Verdict> {
    let a = a.to_canonical();
    let mut ordered = installed.to_vec();
    ordered.sort_by_key(|r| r.priority);
    ordered
        .iter()
        .find(|r| r.dst.contains(&a))
        .map(|r| r.action.verdict())
}

/// A plain longest-prefix match over the table, as a routing table would do.
fn table_verdict(p: &Policy, a: IpAddr) -> Verdict {
    let a = a.to_canonical();
    p.table()
        .iter()
        .filter(|e| e.net.contains(&a))
        .max_by_key(|e| e.net.prefix_len())
        .map(|e| e.verdict)
        .unwrap()
}

#[test]
fn kernel_lookup_over_the_rules_agrees_with_why_for_random_policies() {
    let mut rng = Rng(0x5eed_1a2a_7e70_0001);
    let mut checked = 0;
    for round in 0..300 {
        let spec = random_spec(&mut rng);
        let p = Policy::new(spec.clone()).unwrap();
        let installed = kernel::desired(&p);
        for a in sample_addresses(&p, &mut rng, 20) {
            let why = p.why(a);
            assert_eq!(
                kernel_verdict(&installed, a),
                Some(why.verdict),
                "round {round}: {a}: why says {why}\npolicy {}\nrules {installed:#?}",
                spec.to_json()
            );
            assert_eq!(
                table_verdict(&p, a),
                why.verdict,
                "round {round}: {a}: {why}"
            );
            // The table entry that decides has the rule why() names.
            assert_eq!(
                p.entry(&why.rule).map(|e| e.verdict),
                Some(why.verdict),
                "round {round}: {a}"
            );
            checked += 1;
        }
        // Looked up as IPv6 (were the kernel ever to), a mapped address is refused.
        let mapped = IpAddr::V6(Ipv4Addr::from(rng.next() as u32).to_ipv6_mapped());
        let as_v6 = installed
            .iter()
            .filter(|r| r.dst.contains(&mapped))
            .min_by_key(|r| r.priority);
        assert_eq!(as_v6.map(|r| r.action.verdict()), Some(Verdict::Deny));
    }
    assert!(checked > 10_000, "only {checked} addresses checked");
}

/// Applies steps the way the kernel inserts FIB rules: after every rule of
/// the same or a lower priority.
fn simulate(state: &mut Vec<KernelRule>, step: &Step) {
    match step {
        Step::Add(r) => {
            let at = state
                .iter()
                .position(|x| x.priority > r.priority)
                .unwrap_or(state.len());
            state.insert(at, *r);
        }
        Step::Delete(r) => {
            let at = state
                .iter()
                .position(|x| x == r)
                .expect("deleting a rule that is not there");
            state.remove(at);
        }
    }
}

fn first_match(state: &[KernelRule], a: IpAddr) -> Option<Verdict> {
    let a = a.to_canonical();
    state
        .iter()
        .find(|r| r.dst.contains(&a))
        .map(|r| r.action.verdict())
}

#[test]
fn every_step_of_a_change_decides_each_address_as_before_or_as_after() {
    let mut rng = Rng(0xc4a2_6e00_0000_0002);
    let mut steps_checked = 0;
    for round in 0..200 {
        let old = Policy::new(random_spec(&mut rng)).unwrap();
        let new = Policy::new(random_spec(&mut rng)).unwrap();
        let mut state = kernel::desired(&old);
        let mut addrs = sample_addresses(&old, &mut rng, 5);
        addrs.extend(sample_addresses(&new, &mut rng, 5));
        let steps = kernel::plan(&state, &kernel::desired(&new));
        for (i, step) in steps.iter().enumerate() {
            simulate(&mut state, step);
            for &a in &addrs {
                let (before, after) = (old.why(a).verdict, new.why(a).verdict);
                let now = first_match(&state, a);
                assert!(
                    now == Some(before) || now == Some(after),
                    "round {round}, after step {i} ({step}): {a} is {now:?}, was {before}, will be {after}"
                );
            }
            steps_checked += 1;
        }
        let mut end = state.clone();
        end.sort();
        let mut want = kernel::desired(&new);
        want.sort();
        assert_eq!(
            end, want,
            "round {round}: the plan does not reach the new policy"
        );
        assert!(
            kernel::plan(&state, &kernel::desired(&new)).is_empty(),
            "round {round}: not idempotent"
        );
    }
    assert!(steps_checked > 1000, "only {steps_checked} steps checked");
}

#[test]
fn the_first_install_denies_until_each_rule_arrives() {
    let mut rng = Rng(0x0f1e_2d3c_4b5a_6978);
    for round in 0..100 {
        let p = Policy::new(random_spec(&mut rng)).unwrap();
        let steps = kernel::plan(&[], &kernel::desired(&p));
        let addrs = sample_addresses(&p, &mut rng, 5);
        let mut state = Vec::new();
        // The two floors come first; from then on nothing falls through.
        for step in &steps[..2] {
            assert!(
                matches!(step, Step::Add(r) if r.is_floor()),
                "round {round}: {step}"
            );
        }
        for (i, step) in steps.iter().enumerate() {
            assert!(matches!(step, Step::Add(_)), "round {round}: {step}");
            simulate(&mut state, step);
            if i == 0 {
                continue;
            }
            for &a in &addrs {
                let now = first_match(&state, a);
                assert!(
                    now == Some(Verdict::Deny) || now == Some(p.why(a).verdict),
                    "round {round}, after step {i} ({step}): {a} is {now:?}"
                );
            }
        }
    }
}

#[test]
fn changing_one_prefix_adds_the_new_rule_before_deleting_the_old() {
    let old = policy(&["192.0.2.0/24"], &[], &[]);
    let new = policy(&[], &["192.0.2.0/24"], &["198.51.100.0/24"]);
    let steps: Vec<String> = kernel::plan(&kernel::desired(&old), &kernel::desired(&new))
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        steps,
        [
            "+ 10008: to 192.0.2.0/24 prohibit",
            "+ 10008: to 198.51.100.0/24 lookup 200",
            "- 10008: to 192.0.2.0/24 lookup 200",
        ]
    );
}

/// Mutation check (issue 41, scripts/mutants sidecar): between rules of
/// the same network and kind, the first written decides and is the one
/// named (in the decision and in the live table), and a CIDR with host
/// bits is refused by the parser the host uses.
#[test]
fn the_first_of_equal_rules_decides_and_host_bits_are_refused() {
    let p = Policy::new(PolicySpec {
        default_allow: vec![
            SpecRule::with_origin(net("192.0.2.0/24"), "first"),
            SpecRule::with_origin(net("192.0.2.0/24"), "second"),
        ],
        ..PolicySpec::default()
    })
    .unwrap();
    let d = p.why(addr("192.0.2.7"));
    assert_eq!(d.verdict, Verdict::Allow);
    assert!(d.source.to_string().contains("first"), "{}", d.source);
    let entry = p.entry(&net("192.0.2.0/24")).unwrap();
    assert!(
        entry.source.to_string().contains("first"),
        "{}",
        entry.source
    );
    assert_eq!(parse_cidr("192.0.2.0/24"), Ok(net("192.0.2.0/24")));
    assert_eq!(parse_cidr("10.1.2.3"), Ok(net("10.1.2.3/32")));
    let err = parse_cidr("192.0.2.7/24").unwrap_err();
    assert!(err.contains("192.0.2.0/24"), "{err}");
}
