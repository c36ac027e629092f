//! The egress policy of a Lazaret sandbox, shared by the host (`lazaret net
//! ...`) and the Network Sidecar (`lazaret-sidecar`).
//!
//! - [`policy`]: the model. Which configured or built-in rule decides an
//!   address ([`Policy::why`]), and the table of one entry per prefix that the
//!   kernel must reproduce ([`Policy::table`]).
//! - [`kernel`]: how that table becomes Linux policy-routing rules, and the
//!   order in which a change is applied so that no flow allowed before and
//!   after it is ever cut.
//! - [`report`]: what the sidecar prints (`--json`), for the host to parse.
//! - [`names`]: egress by name (D11): name patterns, and which answered
//!   addresses may get a rule; [`control`]: how `apply`/`show` reach a
//!   running `serve`, which owns the resolver's state.
//! - [`link`]: the link between the sandbox's own network namespace and the
//!   sidecar's (issue 25, D13): device names, addresses, the reject table,
//!   the sysctls the router needs, and what `lazaret-sidecar link` prints.
//!
//! The netlink code lives in the binary (feature `router`), so the host can
//! depend on this crate with `default-features = false`.

pub mod control;
pub mod kernel;
pub mod link;
pub mod names;
pub mod policy;
pub mod report;

pub use kernel::{Action, KernelRule, Step};
pub use names::{NameDecision, NamePattern, SpecName};
pub use policy::{
    BuiltIn, Decision, Family, NameRoute, Policy, PolicyError, PolicySpec, Rule, Source, SpecRule,
    Verdict,
};
pub use report::{
    FailedLookup, Gateway, LiveEntry, NameEntry, NameRule, NftChain, RefusedName, RouterReport,
    TableReport,
};
