//! The configuration contract (spec §3, §3.2), table-driven: every case is a
//! real file on disk, loaded and resolved against a real workspace folder,
//! with the exact outcome and the message a user would read.

use std::path::{Path, PathBuf};

use lazaret::config::source::Layer;
use lazaret::config::trust::{TrustStore, sha256_hex};
use lazaret::config::{Config, ConfigError, HostVars, LoadOptions};
use lazaret::host::FixedEnv;

const HEADER: &str = r#"[storage]
data_root = "ROOT/data"

[network]
default_allow = []
default_deny = ["10.0.0.0/8"]

[escalation]
enabled = true
socket_dir = "ROOT/sock"
"#;

/// The standard header plus a `dev` profile with `body`.
fn profile(body: &str) -> String {
    format!("{HEADER}\n[profiles.dev]\nimage = \"img\"\n{body}\n")
}

/// The header with one line replaced, plus a plain `dev` profile.
fn header_with(from: &str, to: &str) -> String {
    assert!(HEADER.contains(from), "{from}");
    format!(
        "{}\n[profiles.dev]\nimage = \"img\"\n",
        HEADER.replace(from, to)
    )
}

#[derive(Debug)]
enum Expect {
    /// Loads, and the `dev` profile resolves against the workspace.
    Ok,
    /// Fails to load; the message contains every string, and names the line
    /// holding `at` (when given).
    Load {
        contains: &'static [&'static str],
        at: Option<&'static str>,
        security: bool,
    },
    /// Loads, but resolving `dev` against the workspace fails.
    Resolve {
        contains: &'static [&'static str],
        security: bool,
    },
}

struct Case {
    name: &'static str,
    toml: String,
    env: &'static [(&'static str, &'static str)],
    expect: Expect,
}

fn load_err(contains: &'static [&'static str], at: &'static str) -> Expect {
    Expect::Load {
        contains,
        at: Some(at),
        security: false,
    }
}

fn security_at(contains: &'static [&'static str], at: &'static str) -> Expect {
    Expect::Load {
        contains,
        at: Some(at),
        security: true,
    }
}

fn resolve_err(contains: &'static [&'static str]) -> Expect {
    Expect::Resolve {
        contains,
        security: false,
    }
}

fn resolve_security(contains: &'static [&'static str]) -> Expect {
    Expect::Resolve {
        contains,
        security: true,
    }
}

fn cases() -> Vec<Case> {
    let case = |name, toml: String, expect| Case {
        name,
        toml,
        env: &[],
        expect,
    };
    let long_name = "a".repeat(33);
    let max_name = "b".repeat(32);
    vec![
        case("valid minimal configuration", profile(""), Expect::Ok),
        // --- profile names (§3.2.3 1) ---
        case(
            "profile name with a dot",
            format!("{HEADER}\n[profiles.\"a.b\"]\nimage = \"i\"\n"),
            security_at(&["profile name `a.b` is not allowed"], "[profiles.\"a.b\"]"),
        ),
        case(
            "profile name with a slash",
            format!("{HEADER}\n[profiles.\"a/b\"]\nimage = \"i\"\n"),
            security_at(&["profile name `a/b`"], "[profiles.\"a/b\"]"),
        ),
        case(
            "profile name with a backslash",
            format!("{HEADER}\n[profiles.'a\\b']\nimage = \"i\"\n"),
            security_at(&["is not allowed"], "[profiles.'a\\b']"),
        ),
        case(
            "profile name with upper case",
            format!("{HEADER}\n[profiles.Dev]\nimage = \"i\"\n"),
            security_at(&["profile name `Dev`"], "[profiles.Dev]"),
        ),
        case(
            "profile name with unicode",
            format!("{HEADER}\n[profiles.\"dév\"]\nimage = \"i\"\n"),
            security_at(&["profile name `dév`"], "[profiles.\"dév\"]"),
        ),
        case(
            "profile name with a look-alike (Cyrillic a)",
            format!("{HEADER}\n[profiles.\"\u{430}gent\"]\nimage = \"i\"\n"),
            security_at(&["is not allowed"], "gent\"]"),
        ),
        case(
            "profile name with shell metacharacters",
            format!("{HEADER}\n[profiles.\"a;rm -rf\"]\nimage = \"i\"\n"),
            security_at(&["is not allowed"], "[profiles.\"a;rm"),
        ),
        case(
            "profile name with command substitution",
            format!("{HEADER}\n[profiles.\"$(id)\"]\nimage = \"i\"\n"),
            security_at(&["is not allowed"], "[profiles.\"$(id)\"]"),
        ),
        case(
            "profile name too short",
            format!("{HEADER}\n[profiles.a]\nimage = \"i\"\n"),
            security_at(&["2 to 32 characters"], "[profiles.a]"),
        ),
        case(
            "profile name empty",
            format!("{HEADER}\n[profiles.\"\"]\nimage = \"i\"\n"),
            security_at(&["is not allowed"], "[profiles.\"\"]"),
        ),
        case(
            "profile name of 33 characters",
            format!("{HEADER}\n[profiles.{long_name}]\nimage = \"i\"\n"),
            Expect::Load {
                contains: &["is not allowed"],
                at: None,
                security: true,
            },
        ),
        case(
            "profile name of 32 characters is fine",
            format!(
                "{HEADER}\n[profiles.dev]\nimage = \"i\"\n[profiles.{max_name}]\nimage = \"i\"\n"
            ),
            Expect::Ok,
        ),
        case(
            "profile name with - and _ is fine",
            format!(
                "{HEADER}\n[profiles.dev]\nimage = \"i\"\n[profiles.my-agent_2]\nimage = \"i\"\n"
            ),
            Expect::Ok,
        ),
        // --- schema: unknown keys, wrong types, required fields ---
        case(
            "unknown top-level key",
            profile("").replacen("[storage]", "shell = \"bash\"\n[storage]", 1),
            load_err(&["unknown field `shell`"], "shell = \"bash\""),
        ),
        case(
            "unknown profile key (typo)",
            profile("imagee = \"x\""),
            load_err(&["unknown field `imagee`"], "imagee"),
        ),
        case(
            "unknown volume key",
            profile("volumes = [{ host = \"/tmp\", container = \"/x\", readonly = true }]"),
            load_err(&["unknown field `readonly`"], "volumes"),
        ),
        case(
            "boolean given as a string",
            header_with("enabled = true", "enabled = \"yes\""),
            load_err(
                &["invalid type: string \"yes\", expected a boolean"],
                "enabled",
            ),
        ),
        case(
            "array given as a string",
            header_with("default_allow = []", "default_allow = \"0.0.0.0/0\""),
            load_err(&["invalid type", "expected a sequence"], "default_allow"),
        ),
        case(
            "env given as an array",
            profile("env = [\"A=1\"]"),
            load_err(&["invalid type"], "env = ["),
        ),
        case(
            "TOML syntax error",
            profile("command = \"unterminated"),
            load_err(&["command = \"unterminated"], "command =").with_contains_fallback(),
        ),
        // Issue 17: a key left out takes the built-in default (it used to
        // be "is required").
        case(
            "missing data_root takes the default",
            header_with("data_root = \"ROOT/data\"", ""),
            Expect::Ok,
        ),
        case(
            "missing image",
            format!("{HEADER}\n[profiles.dev]\ncommand = \"sh\"\n"),
            load_err(&["profiles.dev.image: is required"], "[profiles.dev]"),
        ),
        case(
            "missing socket_dir takes the default",
            header_with("socket_dir = \"ROOT/sock\"", ""),
            Expect::Ok,
        ),
        case(
            "runtime that is not known",
            profile("runtime = \"kata\""),
            load_err(
                &["unknown variant `kata`, expected `runsc` or `runc`"],
                "runtime",
            ),
        ),
        case(
            "workspace mode that is not known",
            profile("workspace_mode = \"shared\""),
            load_err(
                &["unknown variant `shared`, expected `isolated` or `direct`"],
                "workspace_mode",
            ),
        ),
        case(
            "default_profile naming nothing",
            format!("default_profile = \"ghost\"\n{}", profile("")),
            load_err(
                &["names the profile `ghost`, which is not defined (defined: dev, shell)"],
                "default_profile",
            ),
        ),
        // --- tilde and tokens (§3.2.1, §3.2.2) ---
        case(
            "data_root relative",
            header_with("\"ROOT/data\"", "\"data\""),
            load_err(&["`data` must be an absolute path"], "data_root"),
        ),
        case(
            "data_root may not use tokens",
            header_with("\"ROOT/data\"", "\"ROOT/{profile_name}\""),
            load_err(
                &["the token {profile_name} cannot be used here"],
                "data_root",
            ),
        ),
        case(
            "~user is not expanded",
            header_with("\"ROOT/data\"", "\"~root/lazaret\""),
            load_err(&["only `~` and `~/...` are expanded"], "data_root"),
        ),
        case(
            "unknown token",
            profile("volumes = [{ host = \"{profile}/x\", container = \"/x\" }]"),
            load_err(&["unknown token `{profile}`", "{profile_dir}"], "volumes"),
        ),
        case(
            "unbalanced brace",
            profile("volumes = [{ host = \"{profile_dir/x\", container = \"/x\" }]"),
            load_err(&["without a closing `}`"], "volumes"),
        ),
        case(
            "NUL in a path",
            header_with("\"ROOT/data\"", "\"ROOT/da\\u0000ta\""),
            load_err(&["contains a NUL character"], "data_root"),
        ),
        // --- `..` after expansion (§3.2.3 2) ---
        case(
            "`..` literally in data_root",
            header_with("\"ROOT/data\"", "\"ROOT/data/../../etc\""),
            security_at(&["security:", "contains a `..` segment"], "data_root"),
        ),
        case(
            "`..` hidden behind ~",
            header_with("\"ROOT/data\"", "\"~/../../etc\""),
            security_at(&["security:", "`..`"], "data_root"),
        ),
        case(
            "`..` after a token in a volume",
            profile("volumes = [{ host = \"{profile_dir}/../../etc\", container = \"/x\" }]"),
            resolve_security(&["security:", "profiles.dev.volumes[0].host", "`..`"]),
        ),
        case(
            "`..` after {workspace_dir}",
            profile("volumes = [{ host = \"{workspace_dir}/..\", container = \"/up\" }]"),
            resolve_security(&["security:", "`..`"]),
        ),
        case(
            "`..` in a container path",
            profile("volumes = [{ host = \"/tmp\", container = \"/a/../proc\" }]"),
            security_at(&["security:", "`..`"], "volumes"),
        ),
        case(
            "`..` in persistent_dirs",
            profile("persistent_dirs = [\"/usr/../etc\"]"),
            security_at(&["security:", "`..`"], "persistent_dirs"),
        ),
        case(
            "a `.` segment is harmless",
            header_with("\"ROOT/data\"", "\"ROOT/./data\""),
            Expect::Ok,
        ),
        case(
            "~ later in a path is a literal folder",
            header_with("\"ROOT/data\"", "\"ROOT/a/~/b\""),
            Expect::Ok,
        ),
        // --- volumes ---
        case(
            "volume host path relative",
            profile("volumes = [{ host = \"data/x\", container = \"/x\" }]"),
            load_err(&["must be absolute"], "volumes"),
        ),
        case(
            "volume container path relative",
            profile("volumes = [{ host = \"/tmp\", container = \"root\" }]"),
            load_err(
                &["must be an absolute path inside the container"],
                "volumes",
            ),
        ),
        case(
            "volume over Lazaret's own mounts",
            profile("volumes = [{ host = \"/tmp\", container = \"/run/lazaret/escalate\" }]"),
            security_at(&["is reserved"], "volumes"),
        ),
        case(
            "volume over /proc",
            profile("volumes = [{ host = \"/tmp\", container = \"/proc/self\" }]"),
            security_at(&["is reserved"], "volumes"),
        ),
        case(
            "host token in container path",
            profile("volumes = [{ host = \"/tmp\", container = \"{profile_dir}\" }]"),
            load_err(&["{profile_dir} is a host path"], "volumes"),
        ),
        case(
            "volume mode ro,z",
            profile(
                "volumes = [{ host = \"{profile_dir}/h\", container = \"/h\", mode = \"ro,z\" }]",
            ),
            Expect::Ok,
        ),
        case(
            "volume mode not allowed",
            profile("volumes = [{ host = \"/tmp\", container = \"/x\", mode = \"rshared\" }]"),
            load_err(&["`rshared` is not an allowed mount option"], "volumes"),
        ),
        case(
            "volume mode ro and rw",
            profile("volumes = [{ host = \"/tmp\", container = \"/x\", mode = \"ro,rw\" }]"),
            load_err(&["cannot be both `ro` and `rw`"], "volumes"),
        ),
        case(
            "volume host outside the storage root must exist",
            profile("volumes = [{ host = \"ROOT/nowhere\", container = \"/x\" }]"),
            resolve_err(&[
                "host path `",
                "nowhere` cannot be used",
                "create it or change the volume",
            ]),
        ),
        case(
            "volume host inside the storage root may not exist yet",
            profile("volumes = [{ host = \"{domain_dir}/cache\", container = \"/cache\" }]"),
            Expect::Ok,
        ),
        case(
            "symlink in the storage root leading out",
            profile("volumes = [{ host = \"{profile_dir}/escape/passwd\", container = \"/x\" }]"),
            resolve_security(&["security:", "resolves through a symlink", "outside it"]),
        ),
        // --- environment (§3.1 env) ---
        case(
            "env: of an unset variable",
            profile("env = { KEY = \"env:LAZARET_TEST_UNSET\" }"),
            resolve_err(&[
                "forwards the host variable LAZARET_TEST_UNSET",
                "export LAZARET_TEST_UNSET",
            ]),
        ),
        Case {
            name: "env: of a set variable",
            toml: profile("env = { KEY = \"env:LAZARET_TEST_SET\" }"),
            env: &[("LAZARET_TEST_SET", "v")],
            expect: Expect::Ok,
        },
        case(
            "env name starting with a digit",
            profile("env = { 1BAD = \"x\" }"),
            load_err(&["`1BAD` is not a valid environment variable name"], "env"),
        ),
        case(
            "env: with no variable",
            profile("env = { KEY = \"env:\" }"),
            load_err(&["`env:` does not name a valid host variable"], "env"),
        ),
        case(
            "env: with an invalid variable",
            profile("env = { KEY = \"env:A-B\" }"),
            load_err(&["`env:A-B` does not name"], "env"),
        ),
        // --- network ---
        case(
            "CIDR prefix too long",
            header_with("\"10.0.0.0/8\"", "\"10.0.0.0/33\""),
            load_err(&["`10.0.0.0/33` is not a CIDR network"], "default_deny"),
        ),
        case(
            "CIDR with host bits",
            header_with("\"10.0.0.0/8\"", "\"10.0.0.1/8\""),
            load_err(
                &["has host bits set; did you mean 10.0.0.0/8?"],
                "default_deny",
            ),
        ),
        case(
            "CIDR that is a name",
            profile("allow_egress = [\"example.com\"]"),
            load_err(&["`example.com` is not a CIDR network"], "allow_egress"),
        ),
        // --- egress by name (decisions.md D11) ---
        case(
            "names and wildcards",
            profile(
                "allow_domains = [\"api.example.com\", \"*.example.org\"]\ndeny_domains = [\"bad.example.org\"]",
            ),
            Expect::Ok,
        ),
        case(
            "a malformed name",
            profile("allow_domains = [\"api..example.com\"]"),
            load_err(&["is not a host name", "empty label"], "allow_domains"),
        ),
        case(
            "a wildcard in the middle",
            header_with(
                "default_allow = []",
                "default_allow = []\ndeny_domains = [\"a.*.example.com\"]",
            ),
            load_err(
                &["a wildcard is only allowed as the whole first label"],
                "deny_domains",
            ),
        ),
        case(
            "a top-level wildcard",
            profile("allow_domains = [\"*.com\"]"),
            load_err(&["every name under a top-level domain"], "allow_domains"),
        ),
        case(
            "an address as a name",
            profile("allow_domains = [\"192.0.2.7\"]"),
            load_err(&["an address, not a name"], "allow_domains"),
        ),
        case(
            "a bad resolver upstream",
            header_with(
                "default_allow = []",
                "default_allow = []\ndns_upstream = \"10.0.2.3\"",
            ),
            load_err(&["is not ADDRESS:PORT"], "dns_upstream"),
        ),
        case(
            "IPv6 everything is a valid CIDR",
            profile("allow_egress = [\"::/0\", \"0.0.0.0/0\"]"),
            Expect::Ok,
        ),
        // --- auto-approve (decisions.md D5) ---
        case(
            "auto-approve git",
            header_with(
                "enabled = true",
                "enabled = true\nauto_approve = [\"git status\"]",
            ),
            security_at(
                &["`git` can run arbitrary or workspace-controlled code"],
                "auto_approve",
            ),
        ),
        case(
            "auto-approve a shell",
            header_with(
                "enabled = true",
                "enabled = true\nauto_approve = [\"bash\"]",
            ),
            security_at(&["`bash` can run arbitrary"], "auto_approve"),
        ),
        case(
            "auto-approve rg (--pre runs programs)",
            header_with(
                "enabled = true",
                "enabled = true\nauto_approve = [\"rg -n\"]",
            ),
            security_at(&["`rg` can run arbitrary", "rg --pre"], "auto_approve"),
        ),
        case(
            "auto-approve a confinement escape",
            header_with(
                "enabled = true",
                "enabled = true\nauto_approve = [\"ls\", \"unshare -r\"]",
            ),
            security_at(&["`unshare` can run arbitrary"], "auto_approve"),
        ),
        case(
            "auto-approve a banned program by path",
            header_with(
                "enabled = true",
                "enabled = true\nauto_approve = [\"/usr/bin/rg\"]",
            ),
            security_at(&["`/usr/bin/rg` is a path"], "auto_approve"),
        ),
        case(
            "auto-approve with a non-ASCII space",
            header_with(
                "enabled = true",
                "enabled = true\nauto_approve = [\"ls\\u00a0-la\"]",
            ),
            security_at(
                &["contains shell metacharacters or control characters"],
                "auto_approve",
            ),
        ),
        case(
            "auto-approve a path",
            header_with(
                "enabled = true",
                "enabled = true\nauto_approve = [\"/bin/ls\"]",
            ),
            security_at(&["`/bin/ls` is a path"], "auto_approve"),
        ),
        case(
            "auto-approve with a metacharacter",
            header_with(
                "enabled = true",
                "enabled = true\nauto_approve = [\"ls; id\"]",
            ),
            security_at(&["contains shell metacharacters"], "auto_approve"),
        ),
        case(
            "auto-approve with ESC",
            header_with(
                "enabled = true",
                "enabled = true\nauto_approve = [\"ls\\u001b[2K\"]",
            ),
            security_at(
                &["contains shell metacharacters or control characters"],
                "auto_approve",
            ),
        ),
        case(
            "auto-approve plain entries",
            header_with(
                "enabled = true",
                "enabled = true\nauto_approve = [\"ls -la\", \"date\"]",
            ),
            Expect::Ok,
        ),
        // --- other profile fields ---
        case(
            "persistent dir that podman writes",
            profile("persistent_dirs = [\"/etc/resolv.conf\"]"),
            load_err(&["is written by podman at every start"], "persistent_dirs"),
        ),
        case(
            "persistent dir relative",
            profile("persistent_dirs = [\"usr\"]"),
            load_err(
                &["must be an absolute path inside the container"],
                "persistent_dirs",
            ),
        ),
        case(
            "command that cannot be split",
            profile("command = \"claude 'unterminated\""),
            load_err(&["cannot be split into words"], "command"),
        ),
        case(
            "image with whitespace",
            profile("").replace("image = \"img\"", "image = \"my image\""),
            load_err(&["is not an image reference"], "image"),
        ),
    ]
}

trait Fallback {
    fn with_contains_fallback(self) -> Self;
}

impl Fallback for Expect {
    /// A TOML syntax error quotes toml's own message; only the location is
    /// asserted exactly.
    fn with_contains_fallback(self) -> Self {
        match self {
            Expect::Load { at, security, .. } => Expect::Load {
                contains: &[""],
                at,
                security,
            },
            other => other,
        }
    }
}

fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("`{needle}` not in the case's TOML"))
        + 1
}

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    workspace: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let workspace = root.join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    // For the symlink case: a link inside the storage root pointing out of it.
    let profile_dir = root.join("data/dev");
    std::fs::create_dir_all(&profile_dir).unwrap();
    std::os::unix::fs::symlink("/etc", profile_dir.join("escape")).unwrap();
    Fixture {
        _dir: dir,
        root,
        workspace,
    }
}

fn run_case(case: &Case) -> Result<(), String> {
    let fx = fixture();
    let toml = case.toml.replace("ROOT", &fx.root.display().to_string());
    let file = fx.root.join("case.toml");
    std::fs::write(&file, &toml).unwrap();
    let mut env = FixedEnv::default().with("HOME", &fx.root.join("home").display().to_string());
    for (k, v) in case.env {
        env = env.with(k, v);
    }
    let opts = LoadOptions {
        explicit_file: Some(file.clone()),
        ..LoadOptions::default()
    };
    let loaded = Config::load(&opts, &env);
    let check_message = |err: &ConfigError, contains: &[&str], security: bool| {
        let msg = err.to_string();
        for c in contains {
            if !msg.contains(c) {
                return Err(format!("message lacks `{c}`:\n{msg}"));
            }
        }
        let is_security = err.is_security() || msg.contains("security:");
        if is_security != security {
            return Err(format!(
                "security flag {is_security}, expected {security}:\n{msg}"
            ));
        }
        Ok(msg)
    };
    match (&case.expect, loaded) {
        (
            Expect::Load {
                contains,
                at,
                security,
            },
            Err(err),
        ) => {
            let msg = check_message(&err, contains, *security)?;
            if let Some(needle) = at {
                let want = format!("{}:{}:", file.display(), line_of(&toml, needle));
                if !msg.contains(&want) {
                    return Err(format!("message does not point at `{want}`:\n{msg}"));
                }
            }
            Ok(())
        }
        (Expect::Load { .. }, Ok(_)) => Err("loaded, expected a load error".into()),
        (_, Err(err)) => Err(format!("load failed unexpectedly: {err}")),
        (expect, Ok(config)) => {
            let profile = config.profiles.get("dev").ok_or("no dev profile")?;
            let resolved = config.resolve(profile, &fx.workspace, &env, HostVars::Require);
            match (expect, resolved) {
                (Expect::Ok, Ok(r)) => {
                    // Resolved host paths are canonical and free of `..`.
                    for v in &r.volumes {
                        if v.host
                            .components()
                            .any(|c| c == std::path::Component::ParentDir)
                        {
                            return Err(format!("non-canonical host path {}", v.host.display()));
                        }
                    }
                    Ok(())
                }
                (Expect::Resolve { contains, security }, Err(err)) => {
                    check_message(&err, contains, *security).map(drop)
                }
                (_, Ok(_)) => Err("resolved, expected an error".into()),
                (_, Err(err)) => Err(format!("resolve failed unexpectedly: {err}")),
            }
        }
    }
}

#[test]
fn configuration_contract_table() {
    let cases = cases();
    assert!(cases.len() >= 40, "the contract needs at least 40 cases");
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| run_case(c).err().map(|e| format!("[{}] {e}", c.name)))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p
}

/// Spec §3: user < workspace < --config, merged per key, so a workspace file
/// overrides one profile field without restating the profile.
#[test]
fn hierarchy_merges_per_key_and_remembers_origins() {
    let fx = fixture();
    let root = fx.root.display().to_string();
    let user = write(
        &fx.root,
        "home/.config/lazaret/config.toml",
        &format!(
            "{}\n[profiles.dev]\nimage = \"user-image\"\ncommand = \"claude\"\nenv = {{ A = \"user\", B = \"user\" }}\n",
            HEADER.replace("ROOT", &root)
        ),
    );
    let ws = write(
        &fx.workspace,
        "lazaret.toml",
        "[profiles.dev]\nimage = \"ws-image\"\nenv = { B = \"ws\" }\n",
    );
    let explicit = write(
        &fx.root,
        "explicit.toml",
        "[network]\ndefault_deny = [\"192.168.0.0/16\"]\n",
    );
    let env = FixedEnv::default().with("HOME", &fx.root.join("home").display().to_string());
    let opts = LoadOptions::standard(&env, &fx.workspace, Some(explicit.clone()));
    assert_eq!(opts.user_file.as_deref(), Some(user.as_path()));
    // Changing the image widens: the user trusts this exact file first.
    trust_file(&env, &ws);
    let config = Config::load(&opts, &env).unwrap();
    let dev = &config.profiles["dev"];
    assert_eq!(dev.image, "ws-image", "workspace file overrides one field");
    assert_eq!(
        dev.command.as_deref(),
        Some(&["claude".to_string()][..]),
        "the rest of the profile stays"
    );
    assert_eq!(
        dev.env["A"],
        lazaret::config::EnvValue::Literal("user".into())
    );
    assert_eq!(
        dev.env["B"],
        lazaret::config::EnvValue::Literal("ws".into())
    );
    assert_eq!(
        config.network.default_deny,
        vec!["192.168.0.0/16".parse().unwrap()]
    );
    let layers: Vec<Layer> = config.merged.sources.iter().map(|s| s.layer).collect();
    assert_eq!(
        layers,
        vec![
            Layer::Default,
            Layer::User,
            Layer::Workspace,
            Layer::CommandLine
        ]
    );
    assert_eq!(config.merged.origin("profiles.dev.image").unwrap().file, ws);
    assert_eq!(
        config.merged.origin("profiles.dev.command").unwrap().file,
        user
    );
    assert_eq!(
        config.merged.origin("network.default_deny").unwrap().file,
        explicit
    );
    assert_eq!(config.merged.origin("profiles.dev.env.B").unwrap().file, ws);
}

/// A type error in one layer is reported in that layer's coordinates, even
/// when other files are read too.
#[test]
fn errors_point_into_the_file_that_has_them() {
    let fx = fixture();
    let root = fx.root.display().to_string();
    write(
        &fx.root,
        "home/.config/lazaret/config.toml",
        &format!(
            "{}\n[profiles.dev]\nimage = \"i\"\n",
            HEADER.replace("ROOT", &root)
        ),
    );
    let ws = write(
        &fx.workspace,
        "lazaret.toml",
        "\n\n[profiles.dev]\n  image = 7\n",
    );
    let env = FixedEnv::default().with("HOME", &fx.root.join("home").display().to_string());
    let opts = LoadOptions::standard(&env, &fx.workspace, None);
    let err = Config::load(&opts, &env).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!(
            "{}:4:11: invalid type: integer `7`, expected a string",
            ws.display()
        )),
        "{err}"
    );
}

/// `--config FILE` that does not exist is an error; the optional layers are not.
#[test]
fn explicit_file_must_exist() {
    let fx = fixture();
    let env = FixedEnv::default().with("HOME", &fx.root.join("home").display().to_string());
    let opts = LoadOptions::standard(&env, &fx.workspace, Some(fx.root.join("missing.toml")));
    let err = Config::load(&opts, &env).unwrap_err().to_string();
    assert!(
        err.contains("cannot read configuration file") && err.contains("missing.toml"),
        "{err}"
    );
    // Issue 17: no file at all used to be an error ("no configuration file
    // was found"); the built-in defaults now load.
    let opts = LoadOptions::standard(&env, &fx.workspace, None);
    Config::load(&opts, &env).expect("the built-in defaults load");
}

/// §3.2.1: `$HOME` first, then the passwd entry.
#[test]
fn tilde_uses_home_then_passwd() {
    let fx = fixture();
    let file = write(
        &fx.root,
        "c.toml",
        &header_with("\"ROOT/data\"", "\"~/lz\"").replace("ROOT", &fx.root.display().to_string()),
    );
    let opts = LoadOptions {
        explicit_file: Some(file),
        ..LoadOptions::default()
    };
    let with_home = FixedEnv::default().with("HOME", &fx.root.join("h1").display().to_string());
    assert_eq!(
        Config::load(&opts, &with_home).unwrap().data_root,
        fx.root.join("h1/lz")
    );
    let passwd_only = FixedEnv {
        passwd_home: Some(fx.root.join("h2")),
        ..FixedEnv::default()
    };
    assert_eq!(
        Config::load(&opts, &passwd_only).unwrap().data_root,
        fx.root.join("h2/lz")
    );
    let empty_home = FixedEnv {
        passwd_home: Some(fx.root.join("h3")),
        ..FixedEnv::default()
    }
    .with("HOME", "");
    assert_eq!(
        Config::load(&opts, &empty_home).unwrap().data_root,
        fx.root.join("h3/lz")
    );
}

/// Tokens expand to the Domain Anchor's values; host paths come out canonical.
#[test]
fn tokens_expand_to_domain_values() {
    let fx = fixture();
    let file = write(
        &fx.root,
        "c.toml",
        &profile("volumes = [{ host = \"{domain_dir}/c-{profile_name}\", container = \"/c/{domain_hash}\" }, { host = \"{workspace_dir}\", container = \"/w\", mode = \"ro\" }]")
            .replace("ROOT", &fx.root.display().to_string()),
    );
    let env = FixedEnv::default().with("HOME", "/nonexistent");
    let config = Config::load(
        &LoadOptions {
            explicit_file: Some(file),
            ..LoadOptions::default()
        },
        &env,
    )
    .unwrap();
    let r = config
        .resolve(
            &config.profiles["dev"],
            &fx.workspace.join("."),
            &env,
            HostVars::Require,
        )
        .unwrap();
    let hash = r.domain.hash().to_string();
    assert_eq!(r.domain_dir, fx.root.join("data/domains").join(&hash));
    assert_eq!(r.volumes[0].host, r.domain_dir.join("c-dev"));
    assert_eq!(r.volumes[0].container, PathBuf::from(format!("/c/{hash}")));
    assert!(r.volumes[0].in_storage_root);
    assert_eq!(r.volumes[1].host, fx.workspace);
    assert_eq!(r.volumes[1].options, vec!["ro".to_string()]);
    assert!(!r.volumes[1].in_storage_root);
}

/// The shipped example passes the check it advertises.
#[test]
fn example_toml_loads_and_resolves() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("example.toml");
    let fx = fixture();
    let env = FixedEnv::default().with("HOME", &fx.root.display().to_string());
    let config = Config::load(
        &LoadOptions {
            explicit_file: Some(example),
            ..LoadOptions::default()
        },
        &env,
    )
    .unwrap();
    assert!(config.profiles.len() >= 3);
    for name in ["claude", "codex", "aider"] {
        let p = &config.profiles[name];
        config
            .resolve(p, &fx.workspace, &env, HostVars::Skip)
            .unwrap();
    }
    // The built-in shell stays the default, under gVisor (issue 27 item 5).
    let default = config.select_profile(None).unwrap();
    assert_eq!(default.name, "shell");
    assert!(default.runtime.is_gvisor());
    // The agents' APIs by name, not by address ranges (decisions.md D11).
    let claude = &config.profiles["claude"];
    assert!(claude.allow_egress.is_empty());
    assert_eq!(claude.allow_domains[0].to_string(), "api.anthropic.com");
    assert_eq!(
        config.profiles["codex"].allow_domains[0].to_string(),
        "api.openai.com"
    );
}

fn trust_file(env: &FixedEnv, file: &Path) {
    let text = std::fs::read(file).unwrap();
    TrustStore::locate(env)
        .unwrap()
        .trust(file, &sha256_hex(&text))
        .unwrap();
}

/// The user's configuration of the trust cases: one profile, some egress,
/// a deny list, auto-approve entries and a read-write volume.
fn user_layer(fx: &Fixture) -> (FixedEnv, LoadOptions) {
    user_layer_of(
        fx,
        "auto_approve = [\"date\", \"uname -a\"]\n\n[profiles.dev]\nimage = \"img\"\nallow_egress = [\"192.0.2.0/24\", \"198.51.100.0/24\"]\npersistent_dirs = [\"/usr\"]\nvolumes = [{ host = \"ROOT/shared\", container = \"/shared\" }]\n",
    )
}

/// The user's configuration: [`HEADER`] and then `rest` (`ROOT` in it is
/// the fixture's root, where `shared` is a folder to mount).
fn user_layer_of(fx: &Fixture, rest: &str) -> (FixedEnv, LoadOptions) {
    let root = fx.root.display().to_string();
    std::fs::create_dir_all(fx.root.join("shared")).unwrap();
    write(
        &fx.root,
        "home/.config/lazaret/config.toml",
        &format!("{HEADER}{rest}").replace("ROOT", &root),
    );
    let env = FixedEnv::default().with("HOME", &fx.root.join("home").display().to_string());
    let opts = LoadOptions::standard(&env, &fx.workspace, None);
    (env, opts)
}

/// decisions.md D8: an untrusted ./lazaret.toml with any widening key is
/// refused with one message naming the file, the key and `lazaret trust`.
#[test]
fn untrusted_workspace_file_cannot_widen() {
    let fx = fixture();
    let (env, opts) = user_layer(&fx);
    let cases: &[(&str, &str)] = &[
        (
            "[profiles.dev]\nvolumes = [{ host = \"/etc\", container = \"/e\" }]",
            "profiles.dev.volumes",
        ),
        (
            "[profiles.dev]\nvolumes = [{ host = \"ROOT/shared\", container = \"/shared\", mode = \"rw,Z\" }]",
            "profiles.dev.volumes",
        ),
        ("[profiles.dev]\nruntime = \"runc\"", "profiles.dev.runtime"),
        (
            "[profiles.dev]\nallow_egress = [\"0.0.0.0/0\"]",
            "profiles.dev.allow_egress",
        ),
        (
            "[network]\ndefault_allow = [\"0.0.0.0/0\"]",
            "network.default_allow",
        ),
        ("[network]\ndefault_deny = []", "network.default_deny"),
        (
            "[escalation]\nauto_approve = [\"date\", \"cp\"]",
            "escalation.auto_approve",
        ),
        (
            "[escalation]\nsocket_dir = \"/tmp/elsewhere\"",
            "escalation.socket_dir",
        ),
        (
            "[profiles.dev]\nenv = { TOKEN = \"env:SSH_AUTH_SOCK\" }",
            "profiles.dev.env.TOKEN",
        ),
        (
            "[profiles.dev]\npersistent_dirs = [\"/usr\", \"/home\"]",
            "profiles.dev.persistent_dirs",
        ),
        (
            "[profiles.dev]\nimage = \"evil:latest\"",
            "profiles.dev.image",
        ),
        (
            "[profiles.dev]\ncommand = \"sh -c evil\"",
            "profiles.dev.command",
        ),
        (
            "[profiles.dev]\nworkspace_mode = \"direct\"",
            "profiles.dev.workspace_mode",
        ),
        ("[storage]\ndata_root = \"/tmp/elsewhere\"", "storage"),
        ("[profiles.other]\nimage = \"img\"", "profiles.other"),
        ("default_profile = \"dev\"", "default_profile"),
    ];
    let ws = fx.workspace.join("lazaret.toml");
    for (text, key) in cases {
        let text = text.replace("ROOT", &fx.root.display().to_string());
        std::fs::write(&ws, &text).unwrap();
        let err = Config::load(&opts, &env).unwrap_err();
        let msg = err.to_string();
        assert!(err.is_security(), "{text}: {msg}");
        assert!(
            msg.contains(&format!("{} is not trusted", ws.display())),
            "{msg}"
        );
        assert!(msg.contains(&format!("{key}:")), "{key}: {msg}");
        assert!(
            msg.contains(&format!("`lazaret trust {}`", ws.display())),
            "{msg}"
        );
        // It names the line: `file:line:col: key`.
        assert!(msg.contains(&format!("{}:", ws.display())), "{msg}");
    }
}

/// issue 41: a volume the user mounts `nosuid,nodev,noexec` keeps each of
/// those options against an untrusted ./lazaret.toml: dropping any one
/// (setuid binaries, device files or executables on a host folder the
/// sandbox can write) is a widening, refused like `ro` turned into `rw`.
#[test]
fn untrusted_workspace_file_cannot_drop_a_volumes_restrictions() {
    let fx = fixture();
    let root = fx.root.display().to_string();
    let (env, opts) = user_layer_of(
        &fx,
        "\n[profiles.dev]\nimage = \"img\"\nvolumes = [{ host = \"ROOT/shared\", container = \"/shared\", mode = \"nosuid,nodev,noexec\" }]\n",
    );
    let ws = fx.workspace.join("lazaret.toml");
    let volume = |mode: &str| {
        format!(
            "[profiles.dev]\nvolumes = [{{ host = \"{root}/shared\", container = \"/shared\", mode = \"{mode}\" }}]\n"
        )
    };
    // Each of the three dropped, alone, is refused and named.
    for mode in ["nodev,noexec", "nosuid,noexec", "nosuid,nodev"] {
        std::fs::write(&ws, volume(mode)).unwrap();
        let err = Config::load(&opts, &env).unwrap_err();
        let msg = err.to_string();
        assert!(err.is_security(), "{mode}: {msg}");
        assert!(msg.contains("profiles.dev.volumes:"), "{mode}: {msg}");
        assert!(
            msg.contains(&format!("{} is not trusted", ws.display())),
            "{mode}: {msg}"
        );
    }
    // Keeping all three (and adding `ro`) narrows, and applies untrusted:
    // the refusals above are for the dropped option, not for the volume.
    std::fs::write(&ws, volume("ro,nosuid,nodev,noexec")).unwrap();
    let config = Config::load(&opts, &env).unwrap();
    assert!(!config.workspace_trust.as_ref().unwrap().trusted);
    assert_eq!(
        config.profiles["dev"].volumes[0].options,
        vec!["ro", "nosuid", "nodev", "noexec"]
    );
}

/// Narrowing keys apply untrusted, and `config show` can say so.
#[test]
fn untrusted_narrowing_keys_apply() {
    let fx = fixture();
    let (env, opts) = user_layer(&fx);
    let root = fx.root.display().to_string();
    write(
        &fx.workspace,
        "lazaret.toml",
        &format!(
            "[network]\ndefault_deny = [\"10.0.0.0/8\", \"192.0.2.128/25\"]\n\
             [escalation]\nauto_approve = [\"date\"]\n\
             [profiles.dev]\nimage = \"img\"\nruntime = \"runsc\"\nallow_egress = [\"192.0.2.0/24\"]\npersistent_dirs = []\n\
             volumes = [{{ host = \"{root}/shared\", container = \"/shared\", mode = \"ro,nosuid\" }}]\n"
        ),
    );
    let config = Config::load(&opts, &env).unwrap();
    let trust = config.workspace_trust.as_ref().unwrap();
    assert!(!trust.trusted);
    let dev = &config.profiles["dev"];
    assert_eq!(dev.allow_egress, vec!["192.0.2.0/24".parse().unwrap()]);
    assert!(dev.persistent_dirs.is_empty());
    assert_eq!(dev.volumes[0].options, vec!["ro", "nosuid"]);
    assert_eq!(config.network.default_deny.len(), 2);
    assert_eq!(config.escalation.auto_approve.len(), 1);
    // Turning escalation off narrows too.
    write(
        &fx.workspace,
        "lazaret.toml",
        "[escalation]\nenabled = false\n",
    );
    assert!(!Config::load(&opts, &env).unwrap().escalation.enabled);
}

/// Trust, change (untrusted again), re-trust, revoke.
#[test]
fn trust_change_retrust_revoke() {
    let fx = fixture();
    let (env, opts) = user_layer(&fx);
    let ws = write(
        &fx.workspace,
        "lazaret.toml",
        "[profiles.dev]\nimage = \"mine:1\"\n",
    );
    let err = Config::load(&opts, &env).unwrap_err().to_string();
    assert!(err.contains("profiles.dev.image"), "{err}");
    trust_file(&env, &ws);
    let config = Config::load(&opts, &env).unwrap();
    assert_eq!(config.profiles["dev"].image, "mine:1");
    assert!(config.workspace_trust.as_ref().unwrap().trusted);
    // The store lives in the user's data, private, not in the workspace.
    let store = TrustStore::locate(&env).unwrap();
    assert!(store.path().starts_with(fx.root.join("home/.local/share")));
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(store.path()).unwrap().mode() & 0o777,
        0o600
    );
    // One byte changes: untrusted again.
    write(
        &fx.workspace,
        "lazaret.toml",
        "[profiles.dev]\nimage = \"mine:2\"\n",
    );
    let err = Config::load(&opts, &env).unwrap_err().to_string();
    assert!(err.contains("is not trusted"), "{err}");
    trust_file(&env, &ws);
    assert_eq!(
        Config::load(&opts, &env).unwrap().profiles["dev"].image,
        "mine:2"
    );
    assert!(store.revoke(&ws).unwrap());
    assert!(Config::load(&opts, &env).is_err());
    // A symlink named lazaret.toml does not borrow another file's trust.
    let other = fx.root.join("trusted-elsewhere");
    std::fs::create_dir_all(&other).unwrap();
    let real = write(
        &other,
        "lazaret.toml",
        "[profiles.dev]\nimage = \"mine:3\"\n",
    );
    trust_file(&env, &real);
    std::fs::remove_file(&ws).unwrap();
    std::os::unix::fs::symlink(&real, &ws).unwrap();
    assert!(Config::load(&opts, &env).is_err());
    // Teardown may leave an untrusted widening file out instead.
    let skip = LoadOptions {
        skip_untrusted_workspace: true,
        ..opts
    };
    let config = Config::load(&skip, &env).unwrap();
    assert_eq!(config.skipped_workspace.as_deref(), Some(ws.as_path()));
    assert_eq!(config.profiles["dev"].image, "img");
}

/// Profile names that are Storage Root folders are refused; volumes that
/// reach Lazaret's own folders are refused; the example's `{domain_dir}/cache`
/// still works.
#[test]
fn internal_folders_are_out_of_reach() {
    let fx = fixture();
    let root = fx.root.display().to_string();
    let env = FixedEnv::default().with("HOME", &fx.root.join("home").display().to_string());
    let load = |text: &str| {
        let file = write(&fx.root, "c.toml", &text.replace("ROOT", &root));
        Config::load(
            &LoadOptions {
                explicit_file: Some(file),
                ..LoadOptions::default()
            },
            &env,
        )
    };
    for name in ["runtime", "domains", "tmp"] {
        let err = load(&format!(
            "{HEADER}\n[profiles.{name}]\nimage = \"i\"\nvolumes = [{{ host = \"{{profile_dir}}\", container = \"/p\" }}]\n"
        ))
        .unwrap_err();
        assert!(err.is_security());
        assert!(
            err.to_string()
                .contains(&format!("profile name `{name}` is reserved")),
            "{err}"
        );
    }
    for (host, why) in [
        ("ROOT/data", "Storage Root"),
        ("ROOT/data/runtime", "Storage Root"),
        ("ROOT/data/domains", "Storage Root"),
        ("{domain_dir}", "Storage Root"),
        ("{domain_dir}/state.redb", "Domain Root"),
        ("{domain_dir}/usr_changes", "Domain Root"),
        ("{domain_dir}/workspace", "Domain Root"),
        ("ROOT/data/domains/0123456789ab", "Storage Root"),
        ("ROOT/sock", "Escalation Socket"),
        ("ROOT/home/.config/lazaret", "configuration folder"),
        ("ROOT/home/.config", "configuration folder"),
        ("ROOT/home", "Lazaret's"),
    ] {
        let host = host.replace("ROOT", &root);
        std::fs::create_dir_all(fx.root.join("home/.config/lazaret")).unwrap();
        std::fs::create_dir_all(fx.root.join("sock")).unwrap();
        let config = load(&profile(&format!(
            "volumes = [{{ host = \"{host}\", container = \"/v\" }}]"
        )))
        .unwrap();
        let err = config
            .resolve(
                &config.profiles["dev"],
                &fx.workspace,
                &env,
                HostVars::Require,
            )
            .unwrap_err();
        assert!(err.is_security(), "{host}: {err}");
        let msg = err.to_string();
        assert!(
            msg.contains("security:") && msg.contains(why),
            "{host}: {msg}"
        );
    }
    let config = load(&profile(
        "volumes = [{ host = \"{domain_dir}/cache\", container = \"/c\" }, { host = \"{profile_dir}/home\", container = \"/root\" }]",
    ))
    .unwrap();
    config
        .resolve(
            &config.profiles["dev"],
            &fx.workspace,
            &env,
            HostVars::Require,
        )
        .unwrap();
}

/// A workspace that is or contains the home folder, or lies in Lazaret's
/// folders, is refused unless the user insists.
#[test]
fn broad_workspaces_are_refused_unless_asked() {
    let fx = fixture();
    let root = fx.root.display().to_string();
    let home = fx.root.join("home");
    std::fs::create_dir_all(home.join("project")).unwrap();
    std::fs::create_dir_all(fx.root.join("data/dev/home")).unwrap();
    let env = FixedEnv::default().with("HOME", &home.display().to_string());
    let file = write(&fx.root, "c.toml", &profile("").replace("ROOT", &root));
    let mut config = Config::load(
        &LoadOptions {
            explicit_file: Some(file),
            ..LoadOptions::default()
        },
        &env,
    )
    .unwrap();
    let dev = config.profiles["dev"].clone();
    for (ws, why) in [
        (home.clone(), "your home folder"),
        (fx.root.clone(), "your home folder"),
        (fx.root.join("data"), "Storage Root"),
        (fx.root.join("data/dev/home"), "Storage Root"),
    ] {
        let err = config
            .resolve(&dev, &ws, &env, HostVars::Require)
            .unwrap_err();
        let msg = err.to_string();
        assert!(err.is_security(), "{msg}");
        assert!(
            msg.contains(why) && msg.contains("--allow-broad-workspace"),
            "{msg}"
        );
    }
    // A project inside the home folder is what Lazaret is for.
    config
        .resolve(&dev, &home.join("project"), &env, HostVars::Require)
        .unwrap();
    config.allow_broad_workspace = true;
    config
        .resolve(&dev, &home, &env, HostVars::Require)
        .unwrap();
}

/// Issue 17: with no file at all the built-in `default` layer gives a
/// working gVisor `shell` profile on the base image, chosen with no name.
#[test]
fn default_layer_works_with_no_file() {
    let fx = fixture();
    let home = fx.root.join("home");
    let env = FixedEnv::default().with("HOME", &home.display().to_string());
    let opts = LoadOptions::standard(&env, &fx.workspace, None);
    assert!(!opts.user_file.as_ref().unwrap().exists());
    let config = Config::load(&opts, &env).expect("defaults load");
    assert_eq!(config.merged.sources.len(), 1);
    assert_eq!(config.merged.sources[0].layer, Layer::Default);
    assert_eq!(config.data_root, home.join(".local/share/lazaret"));
    assert_eq!(
        config.escalation.socket_dir,
        home.join(".local/state/lazaret/sockets")
    );
    assert!(config.network.default_allow.is_empty());
    assert!(!config.network.default_deny.is_empty());
    let shell = config.select_profile(None).expect("the built-in shell");
    assert_eq!(shell.name, "shell");
    assert_eq!(shell.image, "localhost/lazaret/trixie:latest");
    assert_eq!(shell.runtime.as_str(), "runsc");
    config
        .resolve(shell, &fx.workspace, &env, HostVars::Require)
        .expect("the shell profile resolves");
    let shown = lazaret::cli::config_show(&config);
    assert!(
        shown.contains("# default layer: built into lazaret (trusted)"),
        "{shown}"
    );
    assert!(
        shown.contains("image = \"localhost/lazaret/trixie:latest\"  # <built-in defaults>:"),
        "{shown}"
    );
}

/// A user file overrides the defaults key by key, and its single profile
/// is chosen over the built-in `shell`.
#[test]
fn user_file_overrides_defaults_per_key() {
    let fx = fixture();
    let root = fx.root.display().to_string();
    write(
        &fx.root,
        "home/.config/lazaret/config.toml",
        &format!("[storage]\ndata_root = \"{root}/data\"\n[profiles.dev]\nimage = \"img\"\n"),
    );
    let env = FixedEnv::default().with("HOME", &fx.root.join("home").display().to_string());
    let opts = LoadOptions::standard(&env, &fx.workspace, None);
    let config = Config::load(&opts, &env).expect("loads");
    let layers: Vec<Layer> = config.merged.sources.iter().map(|s| s.layer).collect();
    assert_eq!(layers, [Layer::Default, Layer::User]);
    assert_eq!(config.data_root, fx.root.join("data"));
    // Not set by the user: still the default.
    assert_eq!(
        config.escalation.socket_dir,
        fx.root.join("home/.local/state/lazaret/sockets")
    );
    assert_eq!(config.select_profile(None).unwrap().name, "dev");
    assert_eq!(config.select_profile(Some("shell")).unwrap().name, "shell");
    let shown = lazaret::cli::config_show(&config);
    assert!(shown.contains("# user file: "), "{shown}");
}
