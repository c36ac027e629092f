//! The classification corpus, shared by the escalate crate's adversarial
//! tests (against its test server) and Lazaret's tests/escalation.rs
//! (against the Session Coordinator's real pipeline, from the host).

use lazaret_escalate::classify::{CharClass, HumanReason, OutsideWhy};

/// The whitelist the program cases are judged against.
pub const RULES: &[&str] = &["touch *", "ls -la *", "true"];

/// Commands whose characters force a human, with the class expected.
pub fn characters() -> &'static [(&'static str, CharClass)] {
    use CharClass::{Control, Hidden, Metacharacter};
    &[
        ("true;touch canary", Metacharacter),
        ("true|touch canary", Metacharacter),
        ("true&touch canary", Metacharacter),
        ("true&&touch canary", Metacharacter),
        ("true $(touch canary)", Metacharacter),
        ("true ${x:=y}", Metacharacter),
        ("touch $HOME", Metacharacter),
        ("true `touch canary`", Metacharacter),
        ("(touch canary)", Metacharacter),
        ("touch canary>x", Metacharacter),
        ("touch canary<x", Metacharacter),
        ("true\ntouch canary", Metacharacter),
        ("touch canary\r", Metacharacter),
        ("touch can\\ary", Metacharacter),
        ("touch canary*", Metacharacter),
        ("touch canar?", Metacharacter),
        ("touch [c]anary", Metacharacter),
        ("touch {a,b}", Metacharacter),
        ("touch ~/canary", Metacharacter),
        ("touch canary #x", Metacharacter),
        ("! touch canary", Metacharacter),
        ("touch\tcanary", Control),
        ("touch canary\u{1b}[2K", Control),
        ("touch canary\u{7f}", Control),
        ("touch canary\u{9b}", Control),
        ("touch canary\u{7}", Control),
        ("touch canary\u{202e}", Hidden),
        ("touch canary\u{2066}", Hidden),
        ("touch canary\u{200b}", Hidden),
        ("touch canary\u{200d}", Hidden),
        ("touch canary\u{feff}", Hidden),
        ("touch\u{a0}canary", Hidden),
        ("touch canary\u{e0041}", Hidden),
        ("touch canary\u{fe0f}", Hidden),
    ]
}

/// Client arguments (`--` then argv, or one command string) that must not
/// auto-approve under [`RULES`], with the reason expected.
pub fn programs() -> Vec<(&'static [&'static str], HumanReason)> {
    let out = |arg, why| HumanReason::PathOutsideWorkspace { arg, why };
    let cases: &[(&'static [&'static str], HumanReason)] = &[
        (&["lsblk"], HumanReason::NotWhitelisted),
        (&["touchx canary"], HumanReason::NotWhitelisted),
        (&["ls"], HumanReason::NotWhitelisted),
        (&["ls -laR"], HumanReason::NotWhitelisted),
        (&["ls -l -a"], HumanReason::NotWhitelisted),
        (&["--", "ls -la", "x"], HumanReason::NotWhitelisted),
        (&["./touch canary"], HumanReason::ProgramHasPath),
        (&["../bin/touch canary"], HumanReason::ProgramHasPath),
        (&["/usr/bin/touch canary"], HumanReason::ProgramHasPath),
        (&["TOUCH=1 touch canary"], HumanReason::AssignmentAsProgram),
        (&["touch 'canary"], HumanReason::Unparseable),
        // Exact entries take no arguments; prefix entries no path that
        // leaves the workspace.
        (&["true x"], HumanReason::NotWhitelisted),
        (&["ls -la /etc"], out(2, OutsideWhy::Absolute)),
        (&["touch ../canary"], out(1, OutsideWhy::DotDot)),
        (
            &["touch", "--reference=/etc/passwd", "x"],
            out(1, OutsideWhy::Absolute),
        ),
        (&["touch", "-d@/x", "canary"], out(1, OutsideWhy::Absolute)),
        (&["touch file:///tmp/canary"], out(1, OutsideWhy::Url)),
    ];
    cases.to_vec()
}
