//! The Agent Sandbox's network namespace and its only link (decisions.md
//! D13, docs/architecture.md "The egress router").
//!
//! The sandbox does not share the Network Sidecar's namespace: that one
//! holds slirp4netns's device, and a socket bound to it skips any rule of
//! the namespace. Before each sandbox start Lazaret makes a fresh namespace
//! holding only `lo` and `eth0`, a veth whose other end (`sbx0`) is in the
//! sidecar's namespace, where forwarding meets the policy. The static
//! `lazaret-sidecar link` does the netlink work inside `podman unshare`
//! (the user's podman namespaces, where the sidecar's namespace is the
//! user's to change and the namespace file can be mounted); `podman run
//! --network ns:FILE` joins it.
//!
//! A namespace is never reused: runsc's own network stack takes `eth0`'s
//! addresses and routes out of the kernel at boot, so a second start in
//! it would have no route.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::install::{SIDECAR_BINARY, find_helper};
use crate::podman::Podman;

use super::EngineError;

/// The sandbox's namespace file in the Domain Root (the mount lives in
/// podman's own mount namespace, not the host's).
pub fn netns_file(domain_root: &Path) -> PathBuf {
    domain_root.join("sandbox.netns")
}

/// The static sidecar binary run on the host, inside `podman unshare`.
fn sidecar_binary() -> Result<PathBuf, EngineError> {
    find_helper(SIDECAR_BINARY).ok_or_else(|| {
        EngineError::Link(format!(
            "the static {SIDECAR_BINARY} is not installed; run the set-up again (sudo scripts/setup)"
        ))
    })
}

/// `podman unshare lazaret-sidecar ARGS`: stdout, or what went wrong.
fn sidecar_in_podman(podman: &Podman, args: &[&OsStr]) -> Result<String, EngineError> {
    let binary = sidecar_binary()?;
    let mut all = vec![OsStr::new("unshare"), binary.as_os_str()];
    all.extend_from_slice(args);
    Ok(podman.run(all)?)
}

/// Makes a fresh namespace at `file` and its link into the sidecar
/// `sidecar` (which must run).
pub fn make(podman: &Podman, sidecar: &str, file: &Path) -> Result<(), EngineError> {
    let pid = podman
        .run(["inspect", "--format", "{{.State.Pid}}", sidecar])?
        .trim()
        .to_string();
    if !pid.parse::<u32>().is_ok_and(|p| p > 0) {
        return Err(EngineError::Link(format!(
            "the Network Sidecar {sidecar} does not run (its pid is `{pid}`)"
        )));
    }
    let fail = |e: String| {
        EngineError::Link(format!(
            "cannot link the sandbox's network namespace to the Network Sidecar {sidecar}: {e}"
        ))
    };
    let out = sidecar_in_podman(
        podman,
        &[
            OsStr::new("link"),
            OsStr::new("--sidecar-pid"),
            OsStr::new(&pid),
            OsStr::new("--netns"),
            file.as_os_str(),
            OsStr::new("--json"),
        ],
    )
    .map_err(|e| fail(e.to_string()))?;
    // What it made, read back from the kernel: the link at its MTU.
    let report: lazaret_sidecar::link::LinkReport = serde_json::from_str(out.trim())
        .map_err(|e| fail(format!("unreadable report ({e}): {out}")))?;
    if report.sandbox.mtu != lazaret_sidecar::link::LINK_MTU
        || report.router.mtu != lazaret_sidecar::link::LINK_MTU
    {
        return Err(fail(format!(
            "the link's MTU is not {}: {out}",
            lazaret_sidecar::link::LINK_MTU
        )));
    }
    Ok(())
}

/// Unmounts and removes the namespace file (after the sandbox is gone).
/// Nothing to do when it was never made, or when podman's namespaces
/// (and the mount with them) are gone.
pub fn remove(podman: &Podman, file: &Path) -> Result<(), EngineError> {
    if !file.exists() {
        return Ok(());
    }
    sidecar_in_podman(
        podman,
        &[
            OsStr::new("unlink"),
            OsStr::new("--netns"),
            file.as_os_str(),
        ],
    )
    .map_err(|e| {
        EngineError::Link(format!(
            "cannot remove the sandbox's network namespace {}: {e}",
            file.display()
        ))
    })?;
    Ok(())
}
