//! `lazaret-sidecar link` and `unlink`: the sandbox's own network namespace
//! and its one link into the sidecar's (issue 25, D13). The host runs them
//! through `podman unshare`, in the rootless user's user and mount
//! namespace, where they may mount and have CAP_NET_ADMIN over the sidecar
//! container's network namespace.
//!
//! `link` always makes a new namespace: runsc `network=sandbox` copies
//! `eth0`'s addresses and routes into its own stack at boot and deletes them
//! from the kernel device, so a namespace is never reused.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use ipnet::IpNet;
use lazaret_sidecar::link::{
    self, LINK_MTU, LINK_PREFIX_V4, LINK_PREFIX_V6, LinkEnd, LinkReport, ROUTER_DEVICE,
    SANDBOX_DEVICE,
};
use lazaret_sidecar::policy::Family;
use netlink_packet_route::route::RouteType;
use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, unshare};
use nix::sys::statfs::{NSFS_MAGIC, statfs};

use crate::error::{Context, Error, Result};
use crate::rtnl::{DefaultRouteSpec, MAIN_TABLE, Netlink};

/// Whether `path` is a mounted namespace (nsfs).
fn is_namespace(path: &Path) -> Result<bool> {
    match statfs(path) {
        Ok(fs) => Ok(fs.filesystem_type() == NSFS_MAGIC),
        Err(Errno::ENOENT) => Ok(false),
        Err(e) => Err(Error::new(format!(
            "cannot inspect {}: {e}",
            path.display()
        ))),
    }
}

/// Unmounts every namespace mounted on `path` (MNT_DETACH: a sandbox that
/// still runs in one keeps it). Returns whether there was one.
fn unmount_namespaces(path: &Path) -> Result<bool> {
    let mut any = false;
    while is_namespace(path)? {
        umount2(path, MntFlags::MNT_DETACH)
            .with_context(|| format!("cannot unmount the namespace at {}", path.display()))?;
        any = true;
    }
    Ok(any)
}

/// A new network namespace, bind-mounted on `path` (made if missing).
/// Returns whether an earlier one was unmounted there first.
fn fresh_namespace(path: &Path) -> Result<bool> {
    // Unmounted first: a mounted namespace file cannot be opened to write.
    let replaced = unmount_namespaces(path)?;
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("cannot create the namespace file {}", path.display()))?;
    // unshare and setns act on the calling thread only: a thread of its own
    // makes the namespace, mounts it, and ends; the mount keeps it.
    std::thread::scope(|s| {
        s.spawn(|| -> Result<()> {
            unshare(CloneFlags::CLONE_NEWNET).context("cannot make a network namespace")?;
            mount(
                Some("/proc/thread-self/ns/net"),
                path,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .with_context(|| {
                format!(
                    "cannot bind-mount the new network namespace on {}",
                    path.display()
                )
            })
        })
        .join()
        .unwrap_or_else(|_| Err(Error::new("the thread that makes the namespace failed")))
    })?;
    Ok(replaced)
}

/// One end's addresses with the link's prefix lengths, IPv4 first.
fn addresses(router: bool) -> Vec<IpNet> {
    [false, true]
        .map(|v6| {
            let addr = if router {
                link::router(v6)
            } else {
                link::sandbox(v6)
            };
            let len = if v6 { LINK_PREFIX_V6 } else { LINK_PREFIX_V4 };
            IpNet::new(addr, len).expect("the link's prefix lengths are valid")
        })
        .to_vec()
}

/// `link --sidecar-pid PID --netns FILE`.
pub fn link(sidecar_pid: u32, netns: &Path) -> Result<LinkReport> {
    let sidecar_path = format!("/proc/{sidecar_pid}/ns/net");
    let sidecar_ns = File::open(&sidecar_path)
        .with_context(|| format!("cannot open the sidecar's network namespace {sidecar_path}"))?;
    let replaced_netns = fresh_namespace(netns)?;
    let sandbox_ns = File::open(netns)
        .with_context(|| format!("cannot open the new namespace {}", netns.display()))?;
    let netns_inode = sandbox_ns
        .metadata()
        .with_context(|| format!("cannot inspect {}", netns.display()))?
        .ino();
    let sidecar_what = format!("the sidecar's network namespace ({sidecar_path})");
    let sandbox_what = format!("the sandbox's network namespace ({})", netns.display());
    let mut sc = Netlink::open_in(&sidecar_ns, &sidecar_what)?;
    let mut sb = Netlink::open_in(&sandbox_ns, &sandbox_what)?;

    // A router device left by an earlier link (its namespace may live on in
    // a sandbox that was not removed): the new one replaces it.
    let stale = sc.link_index(ROUTER_DEVICE)?;
    if let Some(index) = stale {
        sc.delete_link(index, ROUTER_DEVICE)
            .with_context(|| format!("in {sidecar_what}"))?;
    }
    sc.add_veth(
        ROUTER_DEVICE,
        SANDBOX_DEVICE,
        LINK_MTU,
        Some(sandbox_ns.as_fd()),
    )
    .with_context(|| format!("in {sidecar_what}"))?;
    let missing = |dev: &str, what: &str| Error::new(format!("{dev} is missing in {what}"));
    let r = sc
        .link_index(ROUTER_DEVICE)?
        .ok_or_else(|| missing(ROUTER_DEVICE, &sidecar_what))?;
    let s = sb
        .link_index(SANDBOX_DEVICE)?
        .ok_or_else(|| missing(SANDBOX_DEVICE, &sandbox_what))?;
    let lo = sb
        .link_index("lo")?
        .ok_or_else(|| missing("lo", &sandbox_what))?;

    // Up before the addresses: a veth has carrier once both ends are up,
    // and IPv6 addresses on a link without carrier stay tentative. The
    // sandbox's end last: it finds carrier as it comes up, so its addresses
    // are usable at once (the router's end learns of carrier a moment later).
    sc.set_up(r, ROUTER_DEVICE)?;
    sb.set_up(lo, "lo")?;
    sb.set_up(s, SANDBOX_DEVICE)?;
    let router_addresses = addresses(true);
    let sandbox_addresses = addresses(false);
    for a in &router_addresses {
        sc.add_address(r, ROUTER_DEVICE, *a)?;
    }
    for a in &sandbox_addresses {
        sb.add_address(s, SANDBOX_DEVICE, *a)?;
    }
    let mtu = |nl: &mut Netlink, dev: &str| -> Result<u32> {
        nl.link(dev)?
            .and_then(|l| l.mtu)
            .ok_or_else(|| Error::new(format!("cannot read {dev}'s MTU")))
    };
    let (router_mtu, sandbox_mtu) = (mtu(&mut sc, ROUTER_DEVICE)?, mtu(&mut sb, SANDBOX_DEVICE)?);
    let mut gateways = Vec::new();
    for family in Family::BOTH {
        let gateway = link::router(family == Family::Ipv6);
        sb.add_default_route(&DefaultRouteSpec {
            family,
            table: MAIN_TABLE,
            kind: RouteType::Unicast,
            gateway: Some(gateway),
            ifindex: Some(s),
            metric: None,
            onlink: false,
        })
        .with_context(|| format!("cannot add the default route via {gateway} in {sandbox_what}"))?;
        gateways.push(gateway);
    }
    Ok(LinkReport {
        netns: netns.display().to_string(),
        netns_inode,
        replaced_netns,
        replaced_router_device: stale.is_some(),
        sandbox: LinkEnd {
            device: SANDBOX_DEVICE.into(),
            ifindex: s,
            mtu: sandbox_mtu,
            addresses: sandbox_addresses,
            gateways,
        },
        router: LinkEnd {
            device: ROUTER_DEVICE.into(),
            ifindex: r,
            mtu: router_mtu,
            addresses: router_addresses,
            gateways: Vec::new(),
        },
    })
}

/// `unlink --netns FILE`: unmounts the namespace and removes the file; no
/// error if either is gone already. Returns whether a namespace was mounted.
pub fn unlink(netns: &Path) -> Result<bool> {
    let was = unmount_namespaces(netns)?;
    match std::fs::remove_file(netns) {
        Err(e) if e.kind() != ErrorKind::NotFound => {
            Err(e).with_context(|| format!("cannot remove {}", netns.display()))
        }
        _ => Ok(was),
    }
}
