//! The in-sandbox seccomp filter (`lazaret-escalate --confined-exec`,
//! decisions.md D8) on the host, without a sandbox: the real binary
//! installs the real filter, and each system call that could make a
//! set-user-ID/set-group-ID file or a device node is made directly (by
//! number, so libc's choice of call does not hide one). The sandbox tests
//! (tests/workspace_untrusted.rs) show the same end to end; this one runs
//! wherever the escalate crate's tests run, so a rule dropped from the
//! filter fails here too.

#![cfg(target_arch = "x86_64")]

use std::process::Command;

/// Each call with a mode that the filter must refuse (EPERM, or ENOSYS for
/// calls whose mode it cannot read), and the same call with a harmless
/// mode, which must work: `name errno-or-0` per line.
const PROBE: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
O_CREAT, O_WRONLY, O_TMPFILE = 0o100, 0o1, 0o20200000
def call(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *args)
    if r >= 0 and nr in (2, 85, 257):
        os.close(r)
    return 0 if r >= 0 else ctypes.get_errno()
def p(name):
    return ctypes.c_char_p(name.encode())
open("plain", "w").close()
fd = os.open("plain", os.O_RDONLY)
I = ctypes.c_long
cases = [
    ("chmod-suid", 90, (p("plain"), I(0o4755))),
    ("chmod-sgid", 90, (p("plain"), I(0o2755))),
    ("chmod", 90, (p("plain"), I(0o755))),
    ("fchmod-suid", 91, (I(fd), I(0o4755))),
    ("fchmod", 91, (I(fd), I(0o644))),
    ("fchmodat-sgid", 268, (I(AT_FDCWD), p("plain"), I(0o2755))),
    ("fchmodat", 268, (I(AT_FDCWD), p("plain"), I(0o644))),
    ("fchmodat2-suid", 452, (I(AT_FDCWD), p("plain"), I(0o4755), I(0))),
    ("mkdir-sgid", 83, (p("d1"), I(0o2755))),
    ("mkdir", 83, (p("d2"), I(0o755))),
    ("mkdirat-suid", 258, (I(AT_FDCWD), p("d3"), I(0o4755))),
    ("mkdirat", 258, (I(AT_FDCWD), p("d4"), I(0o755))),
    ("creat-suid", 85, (p("c1"), I(0o4755))),
    ("creat", 85, (p("c2"), I(0o644))),
    ("open-creat-sgid", 2, (p("o1"), I(O_CREAT | O_WRONLY), I(0o2755))),
    ("open-creat", 2, (p("o2"), I(O_CREAT | O_WRONLY), I(0o644))),
    ("openat-creat-suid", 257, (I(AT_FDCWD), p("o3"), I(O_CREAT | O_WRONLY), I(0o4755))),
    ("openat-tmpfile-suid", 257, (I(AT_FDCWD), p("."), I(O_TMPFILE | O_WRONLY), I(0o4755))),
    ("openat-creat", 257, (I(AT_FDCWD), p("o4"), I(O_CREAT | O_WRONLY), I(0o644))),
    ("mknod-char", 133, (p("n1"), I(0o020644), I(0))),
    ("mknod-block", 133, (p("n2"), I(0o060644), I(0))),
    ("mknodat-char", 259, (I(AT_FDCWD), p("n3"), I(0o020644), I(0))),
    ("mknodat-fifo", 259, (I(AT_FDCWD), p("n4"), I(0o010644), I(0))),
    ("openat2", 437, (I(AT_FDCWD), p("plain"), I(0), I(24))),
    ("io_uring_setup", 425, (I(1), I(0))),
]
for name, nr, args in cases:
    print(name, call(nr, *args))
"#;

#[test]
fn the_confined_exec_filter_refuses_set_id_modes_and_devices() {
    let dir = tempfile::tempdir().unwrap();
    // The confined exec waits for the sandbox's ready marker, a fixed path
    // under /run: made here in a mount namespace of the test's own (a
    // tmpfs over /run), never on the host. As root the namespace is the
    // host's user's, so the kernel alone would allow device nodes: only
    // the filter refuses them; otherwise a user namespace (where the
    // kernel refuses devices too) is needed for the mount.
    let mut cmd = Command::new("unshare");
    if !nix::unistd::geteuid().is_root() {
        cmd.arg("--map-root-user");
    }
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(
            "mount -t tmpfs lazaret-test /run && mkdir -p /run/lazaret/certs && \
             touch /run/lazaret/certs/ready && exec \"$0\" --confined-exec -- python3 -c \"$1\"",
        )
        .arg(env!("CARGO_BIN_EXE_lazaret-escalate"))
        .arg(PROBE)
        .current_dir(dir.path());
    let out = cmd
        .output()
        .expect("cannot run unshare (util-linux) to give the test a mount namespace");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: std::collections::BTreeMap<&str, i32> = text
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, e)| (n, e.parse().unwrap()))
        .collect();
    let (eperm, enosys) = (libc::EPERM, libc::ENOSYS);
    let expected: &[(&str, i32)] = &[
        ("chmod-suid", eperm),
        ("chmod-sgid", eperm),
        ("chmod", 0),
        ("fchmod-suid", eperm),
        ("fchmod", 0),
        ("fchmodat-sgid", eperm),
        ("fchmodat", 0),
        ("mkdir-sgid", eperm),
        ("mkdir", 0),
        ("mkdirat-suid", eperm),
        ("mkdirat", 0),
        ("creat-suid", eperm),
        ("creat", 0),
        ("open-creat-sgid", eperm),
        ("open-creat", 0),
        ("openat-creat-suid", eperm),
        ("openat-tmpfile-suid", eperm),
        ("openat-creat", 0),
        ("mknod-char", eperm),
        ("mknod-block", eperm),
        ("mknodat-char", eperm),
        // A FIFO is no device: allowed.
        ("mknodat-fifo", 0),
        ("openat2", enosys),
        ("io_uring_setup", enosys),
    ];
    for (name, errno) in expected {
        assert_eq!(results.get(name), Some(errno), "{name}: {text}");
    }
    // fchmodat2 is refused on kernels that have it (6.6 on); older ones
    // answer ENOSYS themselves: either way no set-user-ID bit.
    assert!(
        matches!(results.get("fchmodat2-suid"), Some(&e) if e == eperm || e == enosys),
        "{text}"
    );
    // Nothing set-user-ID or device-like was made.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        assert_eq!(
            meta.permissions().mode() & 0o6000,
            0,
            "{:?} has a set-id bit",
            entry.path()
        );
        let t = meta.file_type();
        assert!(
            !t.is_char_device() && !t.is_block_device(),
            "{:?} is a device",
            entry.path()
        );
    }
}
