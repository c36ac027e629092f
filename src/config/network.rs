//! A profile's network policy as configured (spec §3.1, D2, D11): the
//! rules and names of `[network]` and the profile, each with the
//! `file:line:col` it came from, as the sidecar's `PolicySpec`. `net`
//! sends it to the sidecar and reads back what is in force.

use ipnet::IpNet;
use lazaret_sidecar::names::{NamePattern, SpecName};
use lazaret_sidecar::policy::{PolicySpec, SpecRule};

use super::{Config, ProfileConfig};

/// A configuration's rule list, each rule with the `file:line:col` it came from.
fn spec_rules(config: &Config, key: &str, nets: &[IpNet]) -> Vec<SpecRule> {
    nets.iter()
        .enumerate()
        .map(
            |(i, net)| match config.merged.origin(&format!("{key}[{i}]")) {
                Some(loc) => SpecRule::with_origin(*net, loc.to_string()),
                None => SpecRule::new(*net),
            },
        )
        .collect()
}

fn spec_names(config: &Config, key: &str, names: &[NamePattern]) -> Vec<SpecName> {
    names
        .iter()
        .enumerate()
        .map(
            |(i, n)| match config.merged.origin(&format!("{key}[{i}]")) {
                Some(loc) => SpecName::with_origin(n.clone(), loc.to_string()),
                None => SpecName::new(n.clone()),
            },
        )
        .collect()
}

/// The effective policy of `profile` (spec §3.1, D2, D11).
pub fn policy_spec(config: &Config, profile: &ProfileConfig) -> PolicySpec {
    let profile_key = |k: &str| format!("profiles.{}.{k}", profile.name);
    let mut allow_domains = spec_names(
        config,
        "network.allow_domains",
        &config.network.allow_domains,
    );
    allow_domains.extend(spec_names(
        config,
        &profile_key("allow_domains"),
        &profile.allow_domains,
    ));
    let mut deny_domains = spec_names(config, "network.deny_domains", &config.network.deny_domains);
    deny_domains.extend(spec_names(
        config,
        &profile_key("deny_domains"),
        &profile.deny_domains,
    ));
    PolicySpec {
        default_allow: spec_rules(
            config,
            "network.default_allow",
            &config.network.default_allow,
        ),
        default_deny: spec_rules(config, "network.default_deny", &config.network.default_deny),
        profile: Some(profile.name.clone()),
        allow_egress: spec_rules(
            config,
            &format!("profiles.{}.allow_egress", profile.name),
            &profile.allow_egress,
        ),
        allow_domains,
        deny_domains,
    }
}
