//! The classifier: tables for every character class of spec §5.2.1 and
//! D5, the argv-prefix rules, a differential test of shell-words splitting
//! (and of the client's quoting) against the real `sh`, and properties.

use std::path::Path;
use std::process::Command;

use lazaret_escalate::classify::{
    self, AutoApproveRules, CharClass, Decision, HumanReason, RuleError, TRUSTED_PATH, classify,
    first_forcing, join, resolve_program, split,
};
use proptest::prelude::*;

fn rules(entries: &[&str]) -> AutoApproveRules {
    let argvs: Vec<Vec<String>> = entries.iter().map(|e| split(e).unwrap()).collect();
    let (r, errors) = AutoApproveRules::new(&argvs);
    assert!(errors.is_empty(), "{errors:?}");
    r
}

fn is_auto(d: &Decision) -> bool {
    matches!(d, Decision::AutoApprove { .. })
}

#[test]
fn every_forcing_character_on_the_auto_approve_path_needs_a_human() {
    let r = rules(&["ls *", "echo *"]);
    assert!(is_auto(&classify("ls -la", &r)), "control case");
    let cases: &[(&str, CharClass)] = &[
        // Spec §5.2.1, one by one.
        ("ls;id", CharClass::Metacharacter),
        ("ls|id", CharClass::Metacharacter),
        ("ls&", CharClass::Metacharacter),
        ("ls $(id)", CharClass::Metacharacter),
        ("ls (", CharClass::Metacharacter),
        ("ls )", CharClass::Metacharacter),
        ("ls `id`", CharClass::Metacharacter),
        ("ls >x", CharClass::Metacharacter),
        ("ls <x", CharClass::Metacharacter),
        ("ls\nid", CharClass::Metacharacter),
        ("ls\rid", CharClass::Metacharacter),
        ("ls \\x", CharClass::Metacharacter),
        // Ours (see the module documentation).
        ("echo $[ x='a[$(id)]' ]", CharClass::Metacharacter),
        ("ls *", CharClass::Metacharacter),
        ("ls ?", CharClass::Metacharacter),
        ("ls [a]", CharClass::Metacharacter),
        ("ls {a,b}", CharClass::Metacharacter),
        ("ls ~", CharClass::Metacharacter),
        ("ls #x", CharClass::Metacharacter),
        ("ls !x", CharClass::Metacharacter),
        ("ls \0", CharClass::Control),
        ("ls \u{1b}[31m", CharClass::Control),
        ("ls\tx", CharClass::Control),
        ("ls \u{7f}", CharClass::Control),
        ("ls \u{85}", CharClass::Control),
        ("ls \u{202e}x", CharClass::Hidden),
        ("ls \u{202a}x", CharClass::Hidden),
        ("ls \u{2066}x", CharClass::Hidden),
        ("ls \u{061c}x", CharClass::Hidden),
        ("ls \u{200e}x", CharClass::Hidden),
        ("ls \u{200b}x", CharClass::Hidden),
        ("ls \u{200c}x", CharClass::Hidden),
        ("ls \u{2060}x", CharClass::Hidden),
        ("ls \u{feff}x", CharClass::Hidden),
        ("ls \u{ad}x", CharClass::Hidden),
        ("ls\u{a0}-la", CharClass::Hidden),
        ("ls\u{3000}-la", CharClass::Hidden),
        ("ls \u{2028}x", CharClass::Hidden),
        ("ls \u{e0069}x", CharClass::Hidden),
        ("ls \u{e000}x", CharClass::Hidden),
    ];
    for (command, class) in cases {
        match classify(command, &r) {
            Decision::NeedsHuman {
                reason:
                    HumanReason::Character {
                        class: got,
                        ch,
                        offset,
                    },
                via_shell: true,
                argv: None,
            } => {
                assert_eq!(got, *class, "{command:?}");
                assert_eq!(command[offset..].chars().next(), Some(ch), "{command:?}");
            }
            d => panic!("{command:?}: {d:?}"),
        }
    }
}

#[test]
fn entries_match_the_whole_argv_unless_they_end_in_a_star() {
    let r = rules(&["ls", "ls -la *", "cat README.md", "printf x *"]);
    let auto = [
        "ls",
        "ls -la",
        "ls -la src",
        "'ls' -la",
        "cat README.md",
        "printf x y",
        "\"printf\" 'x'",
    ];
    for c in auto {
        assert!(is_auto(&classify(c, &r)), "{c}");
    }
    let human = [
        // Exact entries take nothing after them.
        ("ls src", HumanReason::NotWhitelisted),
        ("ls -laR", HumanReason::NotWhitelisted),
        ("cat README.md other", HumanReason::NotWhitelisted),
        ("lsblk", HumanReason::NotWhitelisted),
        ("lsof -i", HumanReason::NotWhitelisted),
        ("cat", HumanReason::NotWhitelisted),
        ("cat README.mdx", HumanReason::NotWhitelisted),
        ("cat other README.md", HumanReason::NotWhitelisted),
        ("printf xy", HumanReason::NotWhitelisted),
        ("'ls -la'", HumanReason::NotWhitelisted),
        ("/bin/ls", HumanReason::ProgramHasPath),
        ("./ls", HumanReason::ProgramHasPath),
        ("bin/ls -la", HumanReason::ProgramHasPath),
        ("X=1 ls", HumanReason::AssignmentAsProgram),
        ("ls 'a", HumanReason::Unparseable),
        ("   ", HumanReason::Empty),
    ];
    for (c, want) in human {
        match classify(c, &r) {
            Decision::NeedsHuman { reason, .. } => assert_eq!(reason, want, "{c}"),
            d => panic!("{c}: {d:?}"),
        }
    }
    for c in ["ls -laR", "ls -l -a", "ls -la; id", "ls -al"] {
        assert!(!is_auto(&classify(c, &r)), "{c}");
    }
    // `*` anywhere but last is refused, as is a lone `*`.
    let (_, errors) = AutoApproveRules::new([vec!["ls", "*", "-la"], vec!["*"]]);
    assert_eq!(errors.len(), 2, "{errors:?}");
}

#[test]
fn agent_arguments_naming_paths_outside_the_workspace_need_a_human() {
    use lazaret_escalate::classify::{OutsideWhy, PathProbe, classify_with};
    let r = rules(&["date *", "cat *", "curl -sS *", "ls /etc"]);
    let cases = [
        ("date -f /home/u/.ssh/id_ed25519", 2, OutsideWhy::Absolute),
        ("date --file=/etc/shadow", 1, OutsideWhy::Absolute),
        ("date -f/x", 1, OutsideWhy::Absolute),
        ("date -uf/x", 1, OutsideWhy::Absolute),
        ("cat @/x", 1, OutsideWhy::Absolute),
        ("cat key=/x", 1, OutsideWhy::Absolute),
        ("cat host:/x", 1, OutsideWhy::Absolute),
        ("cat a,/x", 1, OutsideWhy::Absolute),
        ("cat ../secret", 1, OutsideWhy::DotDot),
        ("cat sub/../../secret", 1, OutsideWhy::DotDot),
        ("cat --in=..", 1, OutsideWhy::DotDot),
        ("cat -f..", 1, OutsideWhy::DotDot),
        ("curl -sS file:///etc/passwd", 2, OutsideWhy::Url),
        ("curl -sS FILE:etc/passwd", 2, OutsideWhy::Url),
        ("curl -sS https://example.invalid/", 2, OutsideWhy::Url),
        ("cat --file=file:x", 1, OutsideWhy::Url),
    ];
    for (c, arg, why) in cases {
        match classify(c, &r) {
            Decision::NeedsHuman {
                reason: HumanReason::PathOutsideWorkspace { arg: a, why: w },
                via_shell: false,
                argv: Some(_),
            } => assert_eq!((a, w), (arg, why), "{c}"),
            d => panic!("{c}: {d:?}"),
        }
    }
    let reason = HumanReason::PathOutsideWorkspace {
        arg: 2,
        why: OutsideWhy::Absolute,
    };
    assert!(reason.to_string().contains("argument 2"), "{reason}");
    // Inside the workspace, and the user's own words, are fine.
    for c in [
        "cat src/main.rs",
        "date -f dates.txt",
        "cat -n a=b",
        "ls /etc",
    ] {
        assert!(is_auto(&classify(c, &r)), "{c}");
    }
    // The host's probe finds symlinks that lead out.
    struct Links;
    impl PathProbe for Links {
        fn leads_out(&self, p: &str) -> bool {
            p == "link" || p.starts_with("link/")
        }
    }
    for c in ["cat link", "cat link/x", "date -flink", "date --file=link"] {
        assert!(
            matches!(
                classify_with(c, &r, &Links),
                Decision::NeedsHuman {
                    reason: HumanReason::PathOutsideWorkspace {
                        why: OutsideWhy::Symlink,
                        ..
                    },
                    ..
                }
            ),
            "{c}"
        );
    }
    assert!(is_auto(&classify_with("cat linked", &r, &Links)));
}

#[test]
fn auto_approval_names_the_trusted_program_and_keeps_argv() {
    let r = rules(&["ls *"]);
    match classify("ls  -la   'a b'", &r) {
        Decision::AutoApprove { argv, program_path } => {
            assert_eq!(argv, ["ls", "-la", "a b"]);
            assert_eq!(Some(program_path.clone()), resolve_program("ls"));
            assert!(
                TRUSTED_PATH
                    .iter()
                    .any(|d| program_path.parent() == Some(Path::new(d)))
            );
        }
        d => panic!("{d:?}"),
    }
    // A human-approved plain command keeps its argv for execve.
    match classify("cp a 'b c'", &r) {
        Decision::NeedsHuman {
            via_shell: false,
            argv: Some(argv),
            reason: HumanReason::NotWhitelisted,
        } => assert_eq!(argv, ["cp", "a", "b c"]),
        d => panic!("{d:?}"),
    }
}

#[test]
fn bad_whitelist_entries_are_returned_not_taken() {
    let entries: Vec<Vec<String>> = vec![
        vec![],
        vec!["/bin/ls".into()],
        vec!["ls;id".into()],
        vec!["A=1".into()],
        vec!["no-such-program-lazaret".into()],
        vec!["ls".into(), "\u{202e}".into()],
        vec!["ls".into()],
    ];
    let (r, errors) = AutoApproveRules::new(&entries);
    assert_eq!(r.len(), 1);
    assert!(matches!(errors[0], RuleError::Empty { index: 0 }));
    assert!(matches!(errors[1], RuleError::NotBare { index: 1, .. }));
    assert!(matches!(
        errors[2],
        RuleError::ForcingCharacter { index: 2, ch: ';' }
    ));
    assert!(matches!(errors[3], RuleError::NotBare { index: 3, .. }));
    assert!(matches!(errors[4], RuleError::NotFound { index: 4, .. }));
    assert!(matches!(
        errors[5],
        RuleError::ForcingCharacter { index: 5, .. }
    ));
    assert_eq!(errors.len(), 6);
}

#[test]
fn program_resolution_uses_only_the_trusted_path_and_safe_files() {
    use std::os::unix::fs::PermissionsExt;
    assert!(resolve_program("sh").is_some());
    assert_eq!(resolve_program("../bin/sh"), None);
    assert_eq!(resolve_program(""), None);
    assert_eq!(resolve_program(".."), None);
    let dir = tempfile::tempdir().unwrap();
    let tool = dir.path().join("tool");
    std::fs::write(&tool, "#!/bin/sh\n").unwrap();
    let dirs = [dir.path()];
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(
        classify::resolve_program_in("tool", &dirs),
        None,
        "not executable"
    );
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(
        classify::resolve_program_in("tool", &dirs),
        None,
        "world-writable"
    );
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(classify::resolve_program_in("tool", &dirs), Some(tool));
    // The agent's PATH is never consulted.
    assert_eq!(resolve_program("tool"), None);
}

// ---------------------------------------------------------------------------
// Differential: shell_words against sh.

/// How `sh` splits `line` into words: the line follows `set --` in a script
/// given to `sh -c` as one argv element (no shell in between), and the
/// words come back NUL-terminated. `None` if sh rejects the line.
fn sh_split(line: &str) -> Option<Vec<String>> {
    let script = format!("set -- {line}\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done");
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .env_clear()
        .output()
        .unwrap();
    if !out.status.success() {
        return None;
    }
    let mut words: Vec<String> = out
        .stdout
        .split(|b| *b == 0)
        .map(|w| String::from_utf8(w.to_vec()).unwrap())
        .collect();
    assert_eq!(words.pop().as_deref(), Some(""), "output ends with NUL");
    Some(words)
}

#[test]
fn shell_words_agrees_with_sh_on_a_table() {
    for line in [
        "ls -la",
        "  a   b  ",
        "'a b' \"c d\"",
        "a'b'c\"d\"e",
        "'' \"\" x",
        "\"it's\" 'say \"hi\"'",
        "a=b --x=y",
        "é ü 'ö ä'",
        "if then fi",
        "-- -x",
        "",
    ] {
        assert_eq!(
            split(line).ok(),
            sh_split(line),
            "{line:?} split differently"
        );
    }
    for unbalanced in ["'a", "\"a", "a'b"] {
        assert!(split(unbalanced).is_err());
        assert_eq!(sh_split(unbalanced), None, "{unbalanced}");
    }
}

/// Lines without forcing characters, rich in quotes and spaces.
fn plain_line() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just(" ".to_string()),
        Just("'".to_string()),
        Just("\"".to_string()),
        Just("=".to_string()),
        "[a-c0-9_.,:+%@^/-]{1,3}",
        Just("é".to_string()),
    ];
    proptest::collection::vec(piece, 0..12).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn shell_words_agrees_with_sh(line in plain_line()) {
        prop_assert!(first_forcing(&line).is_none());
        prop_assert_eq!(split(&line).ok(), sh_split(&line), "{:?}", line);
    }

    /// The client's `-- CMD ARGS` form: whatever the arguments, sh and
    /// shell_words both get exactly them back from the joined line.
    #[test]
    fn join_round_trips_through_sh_and_shell_words(
        argv in proptest::collection::vec("[^\0]{0,6}", 1..5)
    ) {
        let line = join(&argv);
        prop_assert_eq!(&split(&line).unwrap(), &argv);
        prop_assert_eq!(sh_split(&line).unwrap(), argv);
    }
}

// ---------------------------------------------------------------------------
// Properties.

fn forcing_char() -> impl Strategy<Value = char> {
    prop_oneof![
        proptest::sample::select(vec![
            ';', '|', '&', '$', '(', ')', '`', '>', '<', '\\', '\n', '\r', '*', '?', '[', ']', '{',
            '}', '~', '#', '!', '\u{202e}', '\u{200b}', '\u{feff}', '\u{a0}', '\u{2066}',
        ]),
        (0u32..0x20).prop_map(|c| char::from_u32(c).unwrap()),
        (0x7fu32..0xa0).prop_map(|c| char::from_u32(c).unwrap()),
        (0xe0000u32..0xe0080).prop_map(|c| char::from_u32(c).unwrap()),
    ]
}

fn near_whitelist() -> impl Strategy<Value = String> {
    let entry = proptest::sample::select(vec!["ls", "ls -la", "echo hi", "printf", "lsblk"]);
    let word = "[a-z0-9.=/'\"-]{0,5}";
    (entry, proptest::collection::vec(word, 0..4))
        .prop_map(|(e, words)| format!("{e} {}", words.join(" ")))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn classify_never_panics(s in "\\PC{0,40}|.{0,40}") {
        let _ = classify(&s, &rules(&["ls"]));
    }

    #[test]
    fn auto_approval_implies_every_invariant(s in near_whitelist()) {
        let r = rules(&["ls *", "ls -la *", "echo hi *", "printf *"]);
        match classify(&s, &r) {
            Decision::AutoApprove { argv, program_path } => {
                prop_assert!(first_forcing(&s).is_none());
                prop_assert_eq!(&split(&s).unwrap(), &argv);
                prop_assert!(!argv[0].contains('/') && !argv[0].contains('='));
                prop_assert!(["ls", "echo", "printf"].contains(&argv[0].as_str()));
                if argv[0] == "echo" {
                    prop_assert_eq!(argv.get(1).map(String::as_str), Some("hi"));
                }
                prop_assert_eq!(Some(program_path), resolve_program(&argv[0]));
            }
            Decision::NeedsHuman { via_shell, argv, .. } => {
                prop_assert_eq!(via_shell, argv.is_none());
            }
        }
    }

    #[test]
    fn one_forcing_character_anywhere_forces_a_human(
        s in near_whitelist(),
        c in forcing_char(),
        at in any::<proptest::sample::Index>(),
    ) {
        let r = rules(&["ls *", "ls -la *", "echo hi *", "printf *"]);
        let cuts: Vec<usize> = (0..=s.len()).filter(|i| s.is_char_boundary(*i)).collect();
        let i = cuts[at.index(cuts.len())];
        let mut t = s;
        t.insert(i, c);
        let d = classify(&t, &r);
        prop_assert!(
            matches!(d, Decision::NeedsHuman { via_shell: true, .. }),
            "{:?} -> {:?}", t, d
        );
    }
}

/// Mutation check (issue 41, scripts/mutants classify): the helpers the
/// configuration and the coordinator call, each seen to decide.
#[test]
fn the_classifiers_helpers_decide() {
    // The configuration refuses entries with this same test.
    assert!(classify::has_forcing_characters("date;id"));
    assert!(classify::has_forcing_characters("date\u{202e}"));
    assert!(!classify::has_forcing_characters("date -u"));
    // Versioned names are the program they version; others are not banned.
    for banned in ["python3.12", "gcc-12", "perl5.36", "python"] {
        assert!(
            classify::banned_auto_approve_reason(banned).is_some(),
            "{banned}"
        );
    }
    for allowed in ["date", "uname", "wc"] {
        assert_eq!(
            classify::banned_auto_approve_reason(allowed),
            None,
            "{allowed}"
        );
    }
}

#[test]
fn a_lone_prefix_mark_is_no_entry_and_network_is_only_for_the_entries_named() {
    // `*` alone is not an empty prefix entry (which would match anything):
    // it is refused as the character it is.
    let (r, errors) = AutoApproveRules::new([vec!["*".to_string()]]);
    assert!(r.is_empty());
    assert!(
        matches!(errors[..], [RuleError::ForcingCharacter { ch: '*', .. }]),
        "{errors:?}"
    );
    let r = rules(&["date", "uname *"]);
    assert_eq!(r.len(), 2);
    assert!(!r.is_empty());
    let argv = |s: &str| split(s).unwrap();
    let opted = r.clone().with_network(&[argv("uname *")]);
    assert_eq!(opted.len(), 2);
    assert!(opted.matching(&argv("uname -a")).unwrap().network);
    assert!(!opted.matching(&argv("date")).unwrap().network);
    assert!(!r.matching(&argv("uname -a")).unwrap().network);
    assert_eq!(opted.matching(&argv("uname -a")).unwrap().fixed, 1);
}
