//! In-sandbox seccomp for every session process (decisions.md D8): nothing
//! the agent writes may carry a set-user-ID/set-group-ID bit or be a device
//! node. The sandbox's OCI seccomp profile does this under runc; gVisor
//! applies that profile only to the container's first process, not to
//! `podman exec`, so Lazaret starts each session through
//! `lazaret-escalate --confined-exec -- COMMAND`, which installs the same
//! rules in-process (gVisor honours seccomp(2)) and then runs COMMAND.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// The hidden option that runs a command confined.
pub const FLAG: &str = "--confined-exec";

const SUID_SGID: [u64; 2] = [0o4000, 0o2000];
const S_IFMT: u64 = 0o170000;
const DEVICES: [u64; 2] = [0o020000, 0o060000];
const O_CREAT: u64 = 0o100;
const O_TMPFILE: u64 = 0o20000000;

fn masked(arg: u8, mask: u64, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(mask),
        value,
    )
    .map_err(|e| e.to_string())
}

/// Syscall numbers with the index of their mode and (opens) flags argument.
fn mode_calls() -> Vec<(i64, u8, Option<u8>)> {
    let mut v = vec![
        (libc::SYS_fchmod, 1, None),
        (libc::SYS_fchmodat, 2, None),
        (libc::SYS_mkdirat, 2, None),
        (libc::SYS_openat, 3, Some(2)),
        // fchmodat2 (Linux 6.6), not yet in every libc crate.
        (452, 2, None),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        (libc::SYS_chmod, 1, None),
        (libc::SYS_mkdir, 1, None),
        (libc::SYS_creat, 1, None),
        (libc::SYS_open, 2, Some(1)),
    ]);
    v
}

fn filters() -> Result<Vec<BpfProgram>, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
    let mut deny: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let rule = |c: Vec<SeccompCondition>| SeccompRule::new(c).map_err(|e| e.to_string());
    for (nr, mode, flags) in mode_calls() {
        let mut rules = Vec::new();
        for bit in SUID_SGID {
            match flags {
                None => rules.push(rule(vec![masked(mode, bit, bit)?])?),
                Some(f) => {
                    for create in [O_CREAT, O_TMPFILE] {
                        rules.push(rule(vec![
                            masked(mode, bit, bit)?,
                            masked(f, create, create)?,
                        ])?);
                    }
                }
            }
        }
        deny.insert(nr, rules);
    }
    let mut mknod = vec![(libc::SYS_mknodat, 2u8)];
    #[cfg(target_arch = "x86_64")]
    mknod.push((libc::SYS_mknod, 1));
    for (nr, mode) in mknod {
        let rules = DEVICES
            .iter()
            .map(|&d| rule(vec![masked(mode, S_IFMT, d)?]))
            .collect::<Result<_, _>>()?;
        deny.insert(nr, rules);
    }
    // openat2 carries its mode in memory no filter can read; io_uring
    // opens files without the calls above.
    let mut refused: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in [
        libc::SYS_openat2,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ] {
        refused.insert(nr, vec![]);
    }
    let build = |rules, errno| -> Result<BpfProgram, String> {
        SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno),
            arch,
        )
        .and_then(BpfProgram::try_from)
        .map_err(|e| e.to_string())
    };
    Ok(vec![
        build(deny, libc::EPERM as u32)?,
        build(refused, libc::ENOSYS as u32)?,
    ])
}

/// Installs the filters on this process (inherited by everything it runs).
pub fn install() -> Result<(), String> {
    for f in filters()? {
        seccompiler::apply_filter(&f).map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn filters_build() {
        assert_eq!(super::filters().unwrap().len(), 2);
    }
}
