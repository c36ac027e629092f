//! The sandbox's self-test (`lazaret-escalate selftest JSON`): one process
//! inside a freshly started Agent Sandbox proves, from the agent's side,
//! that the sandbox is what the host believes it is. The host passes what
//! it expects ([`Expectations`]); the answer is a JSON [`Report`] on stdout.
//! Every check fails closed: anything it cannot prove is a failure.

use std::io::{Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, pem::PemObject};
use serde::{Deserialize, Serialize};

use crate::trust;

/// What the host expects of the sandbox.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Expectations {
    /// `runsc` (gVisor) or `runc`.
    pub runtime: String,
    /// The host kernel's release (`uname -r`): seen inside under runc only.
    pub host_kernel: String,
    /// Paths that must be read-only mounts (git protections, Lazaret's own).
    #[serde(default)]
    pub read_only: Vec<String>,
    /// Paths that must be tmpfs masks.
    #[serde(default)]
    pub masks: Vec<String>,
    /// `ip:port`s the egress policy denies: connecting must fail at once,
    /// also from a socket bound to each of the sandbox's devices.
    #[serde(default)]
    pub denied: Vec<String>,
    /// The network devices the sandbox's namespace must hold, exactly
    /// (`lo` and its link to the Network Sidecar): any other device could
    /// lead around the router (decisions.md D13).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<String>,
    /// The Escalation Socket, when the domain has one: it must refuse a
    /// client without the sandbox's certificate.
    #[serde(default)]
    pub socket: Option<String>,
    /// Where the sandbox's CA certificate is (to know the server is ours).
    #[serde(default)]
    pub certs_dir: Option<String>,
    /// The sandbox's resolver (`ip:port`, the sidecar's): the sandbox's
    /// `/etc/resolv.conf` must name it, and it answers the names below.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolver: Option<String>,
    /// Names the policy denies: the resolver must refuse them itself
    /// (REFUSED, nothing asked upstream).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused_names: Vec<String>,
    /// Names the policy allows: the resolver must answer them (asked for
    /// TXT, which it answers itself without going upstream).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_names: Vec<String>,
}

/// One check's outcome.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

/// Every check, in order.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Report {
    pub checks: Vec<Check>,
}

impl Report {
    pub fn failed(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| !c.ok)
    }
    /// How many refusals the Network Sidecar counted for this self-test:
    /// one per denied connect that was refused (a single packet, reset at
    /// once) and one per name its resolver refused.
    pub fn refusals(&self) -> u64 {
        self.checks
            .iter()
            .filter(|c| {
                c.ok && (c.name.starts_with("denied ") || c.name.starts_with("dns refuses "))
            })
            .count() as u64
    }
    fn push(&mut self, name: impl Into<String>, result: Result<String, String>) {
        let (ok, detail) = match result {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        self.checks.push(Check {
            name: name.into(),
            ok,
            detail,
        });
    }
}

/// The fixed `/proc/version` gVisor reports (it emulates Linux 4.4.0).
const GVISOR_VERSION_MARK: &str = "4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016";

/// Runs every check.
/// Put before the report on the sandbox entrypoint's stdout (`init`), so
/// the host finds it in the sandbox's log.
pub const REPORT_MARKER: &str = "lazaret-selftest-report ";

pub fn run(x: &Expectations) -> Report {
    let mut r = Report::default();
    r.push("runtime", runtime(x));
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let table = parse_mountinfo(&mounts);
    for p in &x.read_only {
        r.push(format!("read-only {p}"), read_only(&table, p));
    }
    for p in &x.masks {
        r.push(format!("mask {p}"), mask(&table, p));
    }
    if !x.links.is_empty() {
        r.push("network devices", devices(&x.links));
    }
    for a in &x.denied {
        r.push(format!("denied {a}"), denied(a, None));
        // Every device-bound path meets the same policy: the devices
        // checked above, whatever the check said (loopback's packets never
        // leave the namespace: a connect bound there only times out).
        for dev in x.links.iter().filter(|d| *d != "lo") {
            r.push(format!("denied {a} bound to {dev}"), denied(a, Some(dev)));
        }
    }
    if let Some(resolver) = &x.resolver {
        dns(&mut r, resolver, x);
    }
    if let Some(sock) = &x.socket {
        r.push(
            "escalation socket",
            refuses_without_certificate(Path::new(sock), x.certs_dir.as_deref().map(Path::new)),
        );
    }
    r
}

fn runtime(x: &Expectations) -> Result<String, String> {
    let version = std::fs::read_to_string("/proc/version")
        .map_err(|e| format!("cannot read /proc/version: {e}"))?;
    let version = version.trim();
    let host = !x.host_kernel.is_empty() && version.contains(&x.host_kernel);
    let gvisor = !host && version.contains(GVISOR_VERSION_MARK);
    match x.runtime.as_str() {
        "runsc" if gvisor => Ok(format!("gVisor ({version})")),
        "runsc" if host => Err(format!(
            "expected gVisor, but the sandbox runs on the host kernel ({version})"
        )),
        "runsc" => Err(format!(
            "expected gVisor, but /proc/version is not gVisor's: {version}"
        )),
        "runc" if host => Ok(format!("host kernel, no gVisor ({version})")),
        "runc" => Err(format!(
            "expected runc on the host kernel {}, but /proc/version says: {version}",
            x.host_kernel
        )),
        other => Err(format!("unknown runtime `{other}` expected")),
    }
}

/// One mount: its mount point, per-mount options and filesystem type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    pub point: String,
    pub options: Vec<String>,
    pub fstype: String,
}

/// Octal escapes of mountinfo (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `/proc/self/mountinfo`, in mount order.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let f: Vec<&str> = left.split(' ').collect();
            let point = unescape(f.get(4)?);
            let options = f.get(5)?.split(',').map(str::to_string).collect();
            let fstype = right.split(' ').next()?.to_string();
            Some(MountEntry {
                point,
                options,
                fstype,
            })
        })
        .collect()
}

/// The mount that is visible at `path`: the last one mounted there.
fn top<'a>(table: &'a [MountEntry], path: &str) -> Option<&'a MountEntry> {
    let want = path.trim_end_matches('/');
    table.iter().rev().find(|m| m.point == want)
}

fn read_only(table: &[MountEntry], path: &str) -> Result<String, String> {
    let m = top(table, path).ok_or_else(|| format!("{path} is not a mount point"))?;
    if !m.options.iter().any(|o| o == "ro") {
        return Err(format!("{path} is mounted read-write ({})", m.fstype));
    }
    // The flag is not enough: try a write the way the agent would.
    let p = Path::new(path);
    let attempt = if p.is_dir() {
        let probe = p.join(format!(".lazaret-selftest-{}", std::process::id()));
        let r = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe);
        if r.is_ok() {
            let _ = std::fs::remove_file(&probe);
        }
        r.map(drop)
    } else {
        // Append, never truncate: the file may be the host's own.
        std::fs::OpenOptions::new().append(true).open(p).map(drop)
    };
    match attempt {
        Ok(()) => Err(format!("{path} is writable")),
        Err(e) if e.raw_os_error() == Some(30) => Ok("read-only (write gave EROFS)".into()),
        Err(e) => Err(format!(
            "{path}: a write failed with `{e}`, not EROFS: cannot prove it read-only"
        )),
    }
}

fn mask(table: &[MountEntry], path: &str) -> Result<String, String> {
    match top(table, path) {
        Some(m) if m.fstype == "tmpfs" => Ok("tmpfs".into()),
        Some(m) => Err(format!(
            "{path} is not masked: a {} mount is on top of it",
            m.fstype
        )),
        None => Err(format!("{path} is not masked: no mount there")),
    }
}

/// The sandbox's network devices must be exactly `want`.
fn devices(want: &[String]) -> Result<String, String> {
    let mut have = device_names()?;
    have.sort();
    let mut want = want.to_vec();
    want.sort();
    if have == want {
        Ok(format!("only {}", have.join(", ")))
    } else {
        Err(format!(
            "the sandbox's namespace holds {}, not only {}: a device other than the link to the Network Sidecar could lead around the policy",
            have.join(", "),
            want.join(", ")
        ))
    }
}

/// The names of the namespace's network devices (netlink, through libc).
fn device_names() -> Result<Vec<String>, String> {
    let list = nix::net::if_::if_nameindex()
        .map_err(|e| format!("cannot list the network devices: {e}"))?;
    Ok(list
        .iter()
        .map(|i| i.name().to_string_lossy().into_owned())
        .collect())
}

/// A denied destination must fail at once, from an ordinary socket or one
/// bound to `device`: refused by the Network Sidecar (the sandbox's only
/// link leads there; a TCP reset or an ICMP error) or by a route.
fn denied(addr: &str, device: Option<&str>) -> Result<String, String> {
    let sa: SocketAddr = addr
        .parse()
        .map_err(|_| format!("`{addr}` is not an address:port"))?;
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(sa),
        socket2::Type::STREAM,
        None,
    )
    .map_err(|e| format!("cannot make a socket: {e}"))?;
    if let Some(dev) = device {
        socket
            .bind_device(Some(dev.as_bytes()))
            .map_err(|e| format!("cannot bind a socket to {dev}: {e}"))?;
    }
    let started = std::time::Instant::now();
    let result = socket.connect_timeout(&sa.into(), Duration::from_secs(2));
    let took = started.elapsed();
    match result {
        Ok(()) => Err(format!(
            "{addr} was reached: the egress policy is not in force"
        )),
        // ECONNREFUSED (the router's reset), EINVAL (blackhole),
        // EHOSTUNREACH, ENETUNREACH, EACCES, EPERM.
        Err(e) if matches!(e.raw_os_error(), Some(111 | 22 | 113 | 101 | 13 | 1)) => {
            if took < Duration::from_millis(1500) {
                Ok(format!("refused at once ({} ms): {e}", took.as_millis()))
            } else {
                Err(format!(
                    "{addr} was refused only after {} ms: {e}",
                    took.as_millis()
                ))
            }
        }
        Err(e) => Err(format!("{addr}: `{e}`, not a refusal")),
    }
}

/// DNS response codes the checks tell apart.
const NOERROR: u8 = 0;
const REFUSED: u8 = 5;
/// Query types.
const TYPE_A: u16 = 1;
const TYPE_TXT: u16 = 16;

/// The resolver checks: the sandbox uses Lazaret's resolver, which refuses
/// denied names and answers allowed ones. Queries go only to `resolver`
/// (inside the sandbox's namespace); none needs an upstream.
fn dns(r: &mut Report, resolver: &str, x: &Expectations) {
    let Ok(server) = resolver.parse::<SocketAddr>() else {
        r.push(
            "dns resolver",
            Err(format!("`{resolver}` is not an address:port")),
        );
        return;
    };
    let conf = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    r.push("dns resolver", uses_resolver(&conf, server));
    let probes = x
        .refused_names
        .iter()
        .map(|n| (n, "refuses", TYPE_A, REFUSED))
        .chain(
            x.allowed_names
                .iter()
                .map(|n| (n, "answers", TYPE_TXT, NOERROR)),
        );
    for (name, does, qtype, want) in probes {
        let result = match dns_query(server, name, qtype) {
            Ok(code) if code == want => Ok(format!("{does} it (code {code})")),
            Ok(code) if want == REFUSED => Err(format!(
                "answered with code {code}, not REFUSED: the resolver does not enforce the name policy"
            )),
            Ok(code) => Err(format!(
                "answered with code {code}, not NOERROR: an allowed name does not resolve"
            )),
            Err(e) => Err(e),
        };
        r.push(format!("dns {does} {name}"), result);
    }
}

/// The first `nameserver` of `resolv.conf` must be `server`: the one the
/// agent's programs ask.
fn uses_resolver(conf: &str, server: SocketAddr) -> Result<String, String> {
    let first = conf.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some("nameserver")).then(|| w.next().unwrap_or("").to_string())
    });
    match first {
        Some(ns) if ns.parse() == Ok(server.ip()) => {
            Ok(format!("/etc/resolv.conf names {ns}, the sidecar's"))
        }
        Some(ns) => Err(format!(
            "/etc/resolv.conf names {ns}, not the sidecar's resolver {}",
            server.ip()
        )),
        None => Err("/etc/resolv.conf names no nameserver".into()),
    }
}

/// One DNS query over UDP (RFC 1035): the answer's response code.
fn dns_query(server: SocketAddr, name: &str, qtype: u16) -> Result<u8, String> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let id = ((nanos ^ std::process::id()) & 0xffff) as u16;
    let mut q = Vec::with_capacity(64);
    q.extend_from_slice(&id.to_be_bytes());
    // Recursion desired; one question.
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        let len = u8::try_from(label.len())
            .ok()
            .filter(|l| (1..=63).contains(l))
            .ok_or_else(|| format!("`{name}` is not a DNS name"))?;
        q.push(len);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&1u16.to_be_bytes());
    let local: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse().expect("address")
    } else {
        "[::]:0".parse().expect("address")
    };
    let sock = UdpSocket::bind(local).map_err(|e| format!("cannot open a UDP socket: {e}"))?;
    let _ = sock.set_read_timeout(Some(Duration::from_secs(2)));
    sock.connect(server)
        .map_err(|e| format!("cannot reach the resolver {server}: {e}"))?;
    let mut buf = [0u8; 1500];
    for _ in 0..2 {
        sock.send(&q)
            .map_err(|e| format!("cannot ask the resolver {server}: {e}"))?;
        loop {
            match sock.recv(&mut buf) {
                Ok(n) if n >= 12 && buf[..2] == id.to_be_bytes() && buf[2] & 0x80 != 0 => {
                    return Ok(buf[3] & 0x0f);
                }
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    break;
                }
                Err(e) => return Err(format!("the resolver {server} failed: {e}")),
            }
        }
    }
    Err(format!("the resolver {server} did not answer within 4 s"))
}

/// Connects without a client certificate. Passes only when the server
/// proves to be the sandbox's (its certificate chains to the sandbox's CA)
/// and then refuses to talk.
fn refuses_without_certificate(sock: &Path, certs: Option<&Path>) -> Result<String, String> {
    let certs = certs.unwrap_or(Path::new(crate::CERTS_DIR));
    let ca_path = certs.join(trust::CA_CERT_FILE);
    let ca =
        std::fs::read(&ca_path).map_err(|e| format!("cannot read {}: {e}", ca_path.display()))?;
    let ca = CertificateDer::from_pem_slice(&ca)
        .map_err(|_| format!("{} holds no certificate", ca_path.display()))?;
    let mut roots = RootCertStore::empty();
    roots.add(ca).map_err(|e| e.to_string())?;
    let mut cfg = rustls::ClientConfig::builder_with_provider(trust::crypto_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![trust::ALPN.to_vec()];
    let stream = UnixStream::connect(sock)
        .map_err(|e| format!("cannot connect to {}: {e}", sock.display()))?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(3)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(3)));
    let conn = rustls::ClientConnection::new(Arc::new(cfg), trust::server_name())
        .map_err(|e| e.to_string())?;
    let mut tls = rustls::StreamOwned::new(conn, stream);
    // The handshake first: it proves the server is the sandbox's own (its
    // certificate chains to the sandbox's CA). Under TLS 1.3 the server
    // judges the client's (missing) certificate only after that.
    while tls.conn.is_handshaking() {
        if let Err(e) = tls.conn.complete_io(&mut tls.sock) {
            return match refusal(&e) {
                Some(how) => Ok(how),
                None => Err(format!(
                    "the TLS handshake failed (`{e}`): it is not the sandbox's own Escalation Socket"
                )),
            };
        }
    }
    // A frame header and a little body: a server that accepted us would
    // answer it (with an error, but an answer).
    let _ = tls
        .write_all(&[0, 0, 0, 2, b'{', b'}'])
        .and_then(|()| tls.flush());
    let mut buf = [0u8; 64];
    match tls.read(&mut buf) {
        Ok(0) => Ok("closed without answering a client with no certificate".into()),
        Ok(_) => Err("it answered a client with no certificate".into()),
        Err(e) => refusal(&e).ok_or_else(|| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                "no refusal within 3 s: the server kept a client with no certificate".into()
            }
            _ => format!("`{e}`, not a refusal of the missing certificate"),
        }),
    }
}

/// The errors by which a server refuses a client without a certificate:
/// a certificate alert, or closing the connection. Anything else fails.
fn refusal(e: &std::io::Error) -> Option<String> {
    use rustls::AlertDescription as A;
    use std::io::ErrorKind as K;
    if let Some(rustls::Error::AlertReceived(alert)) =
        e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>())
    {
        return matches!(
            alert,
            A::CertificateRequired | A::BadCertificate | A::HandshakeFailure | A::AccessDenied
        )
        .then(|| format!("refused a client with no certificate (alert {alert:?})"));
    }
    matches!(
        e.kind(),
        K::UnexpectedEof | K::ConnectionReset | K::BrokenPipe | K::ConnectionAborted
    )
    .then(|| format!("closed the connection of a client with no certificate ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_top_entry_wins() {
        let t = "19 18 0:20 / /ro ro - 9p none ro\n\
                 27 18 0:28 / /ws/.vscode rw - tmpfs none rw\n\
                 28 18 0:29 / /ws/.vscode rw,relatime - ext4 /dev/vda rw\n\
                 29 18 0:30 / /a\\040b ro - tmpfs none ro\n";
        let table = parse_mountinfo(t);
        assert_eq!(top(&table, "/ws/.vscode").unwrap().fstype, "ext4");
        assert!(mask(&table, "/ws/.vscode").is_err());
        assert_eq!(top(&table, "/a b").unwrap().fstype, "tmpfs");
        assert!(mask(&table, "/nothing").is_err());
    }

    /// A resolver on loopback that answers `code` to every query.
    fn fake_resolver(code: u8) -> SocketAddr {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = sock.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = sock.recv_from(&mut buf) {
                let mut answer = buf[..n].to_vec();
                answer[2] |= 0x80;
                answer[3] = (answer[3] & 0xf0) | code;
                let _ = sock.send_to(&answer, from);
            }
        });
        addr
    }

    fn dns_report(resolver: SocketAddr) -> Report {
        let x = Expectations {
            resolver: Some(resolver.to_string()),
            refused_names: vec!["lazaret-selftest.invalid".into()],
            allowed_names: vec!["api.example.com".into()],
            ..Default::default()
        };
        let mut r = Report::default();
        dns(&mut r, &resolver.to_string(), &x);
        r
    }

    fn check<'a>(r: &'a Report, name: &str) -> &'a Check {
        r.checks.iter().find(|c| c.name == name).unwrap()
    }

    #[test]
    fn a_resolver_that_answers_every_name_fails() {
        let r = dns_report(fake_resolver(NOERROR));
        let refused = check(&r, "dns refuses lazaret-selftest.invalid");
        assert!(!refused.ok, "{refused:?}");
        assert!(refused.detail.contains("not REFUSED"), "{refused:?}");
        assert!(check(&r, "dns answers api.example.com").ok);
    }

    #[test]
    fn a_resolver_that_refuses_every_name_fails_the_allowed_one() {
        let r = dns_report(fake_resolver(REFUSED));
        assert!(check(&r, "dns refuses lazaret-selftest.invalid").ok);
        assert!(!check(&r, "dns answers api.example.com").ok);
    }

    #[test]
    fn resolv_conf_must_name_the_resolver() {
        let server: SocketAddr = "127.0.0.53:53".parse().unwrap();
        assert!(uses_resolver("search x\nnameserver 127.0.0.53\n", server).is_ok());
        assert!(uses_resolver("nameserver 10.0.2.3\nnameserver 127.0.0.53\n", server).is_err());
        assert!(uses_resolver("", server).is_err());
    }

    #[test]
    fn runtime_by_proc_version() {
        let x = Expectations {
            runtime: "runc".into(),
            host_kernel: "no-such-kernel".into(),
            ..Default::default()
        };
        assert!(runtime(&x).is_err());
    }
}
