//! The Agent Sandbox's seccomp profile (decisions.md D8): podman's default,
//! plus rules that refuse set-user-ID/set-group-ID bits and device nodes,
//! so nothing the agent writes lands on the host as a set-user-ID program.
//! runc enforces it in the kernel; gVisor inside its Sentry when runsc runs
//! with `--oci-seccomp` (measured: argument conditions are honoured).
//!
//! Files the agent cannot reach this way (an overlay copy-up of an image's
//! set-user-ID file) are stripped on the host at teardown and by review.

use serde_json::{Value, json};

/// Where podman keeps its default profile.
pub const DEFAULT_PROFILES: &[&str] = &[
    "/usr/share/containers/seccomp.json",
    "/etc/containers/seccomp.json",
];

const EPERM: u32 = 1;
const ENOSYS: u32 = 38;
const SUID_SGID: u64 = 0o6000;
const S_IFMT: u64 = 0o170000;
const O_CREAT: u64 = 0o100;
const O_TMPFILE: u64 = 0o20000000;

/// Syscall → index of its mode argument, and of its flags argument (opens).
const MODE_CALLS: &[(&str, usize, Option<usize>)] = &[
    ("chmod", 1, None),
    ("fchmod", 1, None),
    ("fchmodat", 2, None),
    ("fchmodat2", 2, None),
    ("mkdir", 1, None),
    ("mkdirat", 2, None),
    ("creat", 1, None),
    ("open", 2, Some(1)),
    ("openat", 3, Some(2)),
];
const MKNOD_CALLS: &[(&str, usize)] = &[("mknod", 1), ("mknodat", 2)];
/// Refused outright: openat2 carries its mode in memory a filter cannot
/// read; io_uring opens files without the syscalls above.
const REFUSED: &[&str] = &[
    "openat2",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
];

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error(
        "podman's default seccomp profile is missing (looked at {0}); reinstall containers-common (sudo apt-get install --reinstall golang-github-containers-common)"
    )]
    NoDefault(String),
    #[error("podman's default seccomp profile {path} is not valid JSON: {error}")]
    Bad {
        path: String,
        error: serde_json::Error,
    },
}

fn masked(index: usize, mask: u64, value: u64) -> Value {
    json!({"index": index, "value": mask, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"})
}

fn rule(name: &str, allow: bool, errno: u32, args: &[Value]) -> Value {
    let mut r = json!({"names": [name], "args": args});
    if allow {
        r["action"] = json!("SCMP_ACT_ALLOW");
    } else {
        r["action"] = json!("SCMP_ACT_ERRNO");
        r["errnoRet"] = json!(errno);
    }
    r
}

/// Our rules. For each syscall they are disjoint (libseccomp gives no
/// order between overlapping rules of different actions) and cover every
/// case, so nothing falls through to the default action by accident.
fn rules() -> Vec<Value> {
    let mut out = Vec::new();
    for &(name, mode, flags) in MODE_CALLS {
        out.push(rule(name, true, 0, &[masked(mode, SUID_SGID, 0)]));
        for bits in [0o2000, 0o4000, 0o6000] {
            let m = masked(mode, SUID_SGID, bits);
            match flags {
                None => out.push(rule(name, false, EPERM, &[m])),
                Some(f) => {
                    // Without O_CREAT/O_TMPFILE the mode is not used.
                    out.push(rule(
                        name,
                        true,
                        0,
                        &[m.clone(), masked(f, O_CREAT | O_TMPFILE, 0)],
                    ));
                    out.push(rule(
                        name,
                        false,
                        EPERM,
                        &[m.clone(), masked(f, O_CREAT, O_CREAT)],
                    ));
                    out.push(rule(
                        name,
                        false,
                        EPERM,
                        &[m, masked(f, O_CREAT | O_TMPFILE, O_TMPFILE)],
                    ));
                }
            }
        }
    }
    for &(name, mode) in MKNOD_CALLS {
        // Regular files, FIFOs and sockets; never character or block devices.
        for kind in [0, 0o100000, 0o010000, 0o140000] {
            out.push(rule(name, true, 0, &[masked(mode, S_IFMT, kind)]));
        }
        for kind in [0o020000, 0o060000] {
            out.push(rule(name, false, EPERM, &[masked(mode, S_IFMT, kind)]));
        }
    }
    for name in REFUSED {
        out.push(rule(name, false, ENOSYS, &[]));
    }
    out
}

/// `default` (podman's profile) with our rules in charge of their syscalls.
pub fn patch(default: &str) -> Result<String, serde_json::Error> {
    let mut p: Value = serde_json::from_str(default)?;
    let ours: Vec<&str> = MODE_CALLS
        .iter()
        .map(|c| c.0)
        .chain(MKNOD_CALLS.iter().map(|c| c.0))
        .chain(REFUSED.iter().copied())
        .collect();
    let mut syscalls: Vec<Value> = rules();
    if let Some(list) = p["syscalls"].as_array() {
        for entry in list {
            let mut e = entry.clone();
            if let Some(names) = e["names"].as_array() {
                let kept: Vec<Value> = names
                    .iter()
                    .filter(|n| !n.as_str().is_some_and(|n| ours.contains(&n)))
                    .cloned()
                    .collect();
                if kept.is_empty() {
                    continue;
                }
                e["names"] = Value::Array(kept);
            }
            syscalls.push(e);
        }
    }
    p["syscalls"] = Value::Array(syscalls);
    Ok(serde_json::to_string_pretty(&p).expect("a JSON value serialises"))
}

/// The patched profile of this host's podman.
pub fn profile() -> Result<String, SeccompError> {
    for path in DEFAULT_PROFILES {
        if let Ok(text) = std::fs::read_to_string(path) {
            return patch(&text).map_err(|error| SeccompError::Bad {
                path: path.to_string(),
                error,
            });
        }
    }
    Err(SeccompError::NoDefault(DEFAULT_PROFILES.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_rules_replace_the_defaults_for_their_syscalls() {
        let default = r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[
            {"names":["chmod","read","openat2"],"action":"SCMP_ACT_ALLOW","args":[]},
            {"names":["mknod"],"action":"SCMP_ACT_ALLOW","args":[]}]}"#;
        let p: Value = serde_json::from_str(&patch(default).unwrap()).unwrap();
        let list = p["syscalls"].as_array().unwrap();
        let unconditional: Vec<&str> = list
            .iter()
            .filter(|e| {
                e["action"] == "SCMP_ACT_ALLOW" && e["args"].as_array().is_none_or(Vec::is_empty)
            })
            .flat_map(|e| {
                e["names"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| n.as_str().unwrap())
            })
            .collect();
        assert_eq!(unconditional, ["read"]);
        assert!(
            list.iter()
                .any(|e| e["names"][0] == "openat2" && e["errnoRet"] == 38)
        );
    }
}
