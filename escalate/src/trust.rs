//! The Trust Anchor (spec §5.1.1; decisions.md D4): an in-memory CA per
//! coordinator, a short-lived client certificate per sandbox whose single
//! URI SAN names profile and sandbox, a server certificate for the socket,
//! and the rustls configurations for both ends.
//!
//! rustls' client verifier checks the chain, validity and the clientAuth
//! EKU but matches no names (webpki has no URI SAN matching), so after the
//! handshake the host must call [`check_peer_identity`] (done by
//! [`server::accept`](crate::server::accept)). A UNIX socket has no host
//! name: the server certificate carries the fixed DNS name [`SERVER_NAME`].
//!
//! Everything uses one crypto provider, ring ([`crypto_provider`]), passed
//! explicitly to every builder, so no process-wide default is needed.

use std::fmt;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, SerialNumber,
};
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use sha2::Digest;

use crate::protocol::is_profile_name;

/// The DNS name in the server certificate and the client's `ServerName`.
pub const SERVER_NAME: &str = "lazaret-host.invalid";
/// The one ALPN protocol both ends offer; it versions the channel.
pub const ALPN: &[u8] = b"lazaret-escalation/1";
/// Files in the certs folder ([`CERTS_DIR`](crate::CERTS_DIR) in the sandbox).
pub const CA_CERT_FILE: &str = "ca.pem";
pub const CLIENT_CERT_FILE: &str = "client.pem";
pub const CLIENT_KEY_FILE: &str = "client-key.pem";
/// Allowance for clocks when a certificate starts to be valid.
const NOT_BEFORE_SLACK: Duration = Duration::from_secs(60);

/// Why the Trust Anchor could not make or load something.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("certificate generation failed: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("TLS configuration failed: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("client verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("invalid sandbox identity: {0}")]
    Identity(String),
    #[error("validity {0:?} is out of range")]
    Validity(Duration),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: no usable PEM {what}")]
    Pem { path: PathBuf, what: &'static str },
}

/// Why a peer's certificate does not prove the expected identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("the peer presented no certificate")]
    NoCertificate,
    #[error("the peer certificate cannot be parsed")]
    Unparseable,
    #[error("the peer certificate has no subject alternative name")]
    NoSan,
    #[error("the peer certificate has more than one SAN extension")]
    DuplicateSanExtension,
    #[error("the peer certificate has {0} subject alternative names; exactly one URI is required")]
    NotExactlyOne(usize),
    #[error("the peer certificate's subject alternative name is not a URI")]
    NotUri,
    #[error("the peer is `{found}`, this socket belongs to `{expected}`")]
    WrongIdentity { found: String, expected: String },
}

/// Verifies Ed25519 signatures only: every certificate here is Ed25519.
static VERIFY_ALGORITHMS: rustls::crypto::WebPkiSupportedAlgorithms =
    rustls::crypto::WebPkiSupportedAlgorithms {
        all: &[webpki::ring::ED25519],
        mapping: &[(rustls::SignatureScheme::ED25519, &[webpki::ring::ED25519])],
    };

/// ring's randomness and Ed25519 keys, nothing else.
#[derive(Debug)]
struct RingEd25519;

impl rustls::crypto::SecureRandom for RingEd25519 {
    fn fill(&self, buf: &mut [u8]) -> Result<(), rustls::crypto::GetRandomFailed> {
        use ring::rand::SecureRandom;
        ring::rand::SystemRandom::new()
            .fill(buf)
            .map_err(|_| rustls::crypto::GetRandomFailed)
    }
}

impl rustls::crypto::KeyProvider for RingEd25519 {
    fn load_private_key(
        &self,
        key: PrivateKeyDer<'static>,
    ) -> Result<Arc<dyn rustls::sign::SigningKey>, rustls::Error> {
        match &key {
            PrivateKeyDer::Pkcs8(k) => rustls::crypto::ring::sign::any_eddsa_type(k),
            _ => Err(rustls::Error::General(
                "only Ed25519 PKCS#8 keys are used".into(),
            )),
        }
    }
}

/// The crypto provider for the whole tree: ring, narrowed to what both
/// ends use (TLS 1.3 AES-128-GCM, X25519, Ed25519). Both ends are ours, so
/// nothing needs negotiating, and the client links no RSA, P-256/P-384 or
/// ChaCha code.
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(CryptoProvider {
        cipher_suites: vec![rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256],
        kx_groups: vec![rustls::crypto::ring::kx_group::X25519],
        signature_verification_algorithms: VERIFY_ALGORITHMS,
        secure_random: &RingEd25519,
        key_provider: &RingEd25519,
    })
}

/// Installs ring (its full default set) as the process-wide rustls
/// provider, for code elsewhere that uses rustls' default builders. The
/// configurations here never rely on it. Returns false if a provider was
/// already installed.
pub fn install_crypto_provider() -> bool {
    rustls::crypto::ring::default_provider()
        .install_default()
        .is_ok()
}

/// Every key here: Ed25519.
fn new_key() -> Result<KeyPair, TrustError> {
    Ok(KeyPair::generate_for(&rcgen::PKCS_ED25519)?)
}

/// The client's `ServerName` ([`SERVER_NAME`]).
pub fn server_name() -> ServerName<'static> {
    ServerName::DnsName(
        rustls_pki_types::DnsName::try_from(SERVER_NAME)
            .expect("SERVER_NAME is a valid DNS name")
            .to_owned(),
    )
}

/// The identity bound to one sandbox's socket:
/// `lazaret://profile/<profile>/sandbox/<sandbox>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SandboxIdentity {
    profile: String,
    sandbox: String,
}

impl SandboxIdentity {
    /// `profile` follows the profile-name rule; `sandbox` (the domain hash)
    /// is 1 to 64 of `[a-z0-9-]`, so the URI needs no escaping.
    pub fn new(profile: &str, sandbox: &str) -> Result<Self, TrustError> {
        if !is_profile_name(profile) {
            return Err(TrustError::Identity(format!("bad profile `{profile}`")));
        }
        if sandbox.is_empty()
            || sandbox.len() > 64
            || !sandbox
                .bytes()
                .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-'))
        {
            return Err(TrustError::Identity(format!("bad sandbox id `{sandbox}`")));
        }
        Ok(SandboxIdentity {
            profile: profile.to_string(),
            sandbox: sandbox.to_string(),
        })
    }

    pub fn profile(&self) -> &str {
        &self.profile
    }

    pub fn sandbox(&self) -> &str {
        &self.sandbox
    }

    pub fn uri(&self) -> String {
        format!(
            "lazaret://profile/{}/sandbox/{}",
            self.profile, self.sandbox
        )
    }
}

impl fmt::Display for SandboxIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.uri())
    }
}

/// A certificate and its private key.
pub struct IssuedCert {
    pub cert_der: CertificateDer<'static>,
    pub cert_pem: String,
    key_der: Vec<u8>,
    key_pem: String,
}

impl fmt::Debug for IssuedCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedCert")
            .field("sha256", &crate::hex::encode(&fingerprint(&self.cert_der)))
            .finish_non_exhaustive()
    }
}

impl IssuedCert {
    pub fn key_der(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }

    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }
}

/// What a sandbox gets: the CA certificate and its own certificate and key.
#[derive(Debug)]
pub struct ClientMaterial {
    pub ca_pem: String,
    pub ca_der: CertificateDer<'static>,
    pub cert: IssuedCert,
}

impl ClientMaterial {
    /// Writes [`CA_CERT_FILE`], [`CLIENT_CERT_FILE`] and [`CLIENT_KEY_FILE`]
    /// into `dir` (an existing folder on a host tmpfs, later mounted
    /// read-only at [`CERTS_DIR`](crate::CERTS_DIR)). Each file is replaced
    /// by rename, so a renewal never shows a half-written file. Files are
    /// mode 0644: the sandbox's users must read them whatever uid they
    /// map to, and the folder's own mode keeps other host users out.
    pub fn write_to(&self, dir: &Path) -> Result<(), TrustError> {
        for (name, text) in [
            (CA_CERT_FILE, self.ca_pem.as_str()),
            (CLIENT_CERT_FILE, self.cert.cert_pem.as_str()),
            (CLIENT_KEY_FILE, self.cert.key_pem.as_str()),
        ] {
            let path = dir.join(name);
            let tmp = dir.join(format!(".{name}.tmp"));
            let io = |source| TrustError::Io {
                path: path.clone(),
                source,
            };
            match std::fs::remove_file(&tmp) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(e)),
            }
            // create_new (O_EXCL) never follows a planted symbolic link.
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&tmp)
                .map_err(io)?;
            f.write_all(text.as_bytes()).map_err(io)?;
            drop(f);
            std::fs::rename(&tmp, &path).map_err(io)?;
        }
        Ok(())
    }

    /// The rustls client configuration for this material.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, TrustError> {
        client_config(
            &self.ca_der,
            vec![self.cert.cert_der.clone()],
            self.cert.key_der(),
        )
    }
}

/// The in-memory certificate authority of one coordinator.
pub struct TrustAnchor {
    issuer: Issuer<'static, KeyPair>,
    ca_der: CertificateDer<'static>,
    ca_pem: String,
}

impl fmt::Debug for TrustAnchor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrustAnchor")
            .field("sha256", &crate::hex::encode(&fingerprint(&self.ca_der)))
            .finish_non_exhaustive()
    }
}

fn validity_window(
    validity: Duration,
) -> Result<(time::OffsetDateTime, time::OffsetDateTime), TrustError> {
    let now = time::OffsetDateTime::now_utc();
    let after = time::Duration::try_from(validity)
        .ok()
        .and_then(|d| now.checked_add(d))
        .ok_or(TrustError::Validity(validity))?;
    let before = now
        .checked_sub(
            time::Duration::try_from(NOT_BEFORE_SLACK)
                .map_err(|_| TrustError::Validity(validity))?,
        )
        .ok_or(TrustError::Validity(validity))?;
    Ok((before, after))
}

fn random_serial() -> Result<SerialNumber, TrustError> {
    use ring::rand::{SecureRandom, SystemRandom};
    let mut b = [0u8; 16];
    SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| TrustError::Rcgen(rcgen::Error::RingUnspecified))?;
    b[0] &= 0x7f; // positive, as RFC 5280 requires
    Ok(SerialNumber::from_slice(&b))
}

impl TrustAnchor {
    /// A fresh CA (path length 0: it signs only end-entity certificates),
    /// valid for `validity`.
    pub fn generate(validity: Duration) -> Result<Self, TrustError> {
        let key = new_key()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "Lazaret Trust Anchor");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        (params.not_before, params.not_after) = validity_window(validity)?;
        params.serial_number = Some(random_serial()?);
        let cert = params.self_signed(&key)?;
        Ok(TrustAnchor {
            ca_der: cert.der().clone(),
            ca_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    pub fn ca_cert_der(&self) -> &CertificateDer<'static> {
        &self.ca_der
    }

    pub fn ca_cert_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A sandbox's client certificate: exactly one SAN, the identity's URI;
    /// EKU clientAuth; valid for `validity` (the session's lifetime).
    pub fn issue_client(
        &self,
        identity: &SandboxIdentity,
        validity: Duration,
    ) -> Result<ClientMaterial, TrustError> {
        self.issue_custom(Self::client_params(identity, validity)?)
    }

    /// A renewal of `previous` (issued by this CA for `identity`): a new
    /// certificate for the same key, valid for `validity` from now. Only
    /// the certificate changes, so a reader that meets the old and the new
    /// files mixed still gets a matching pair.
    pub fn renew_client(
        &self,
        identity: &SandboxIdentity,
        previous: &ClientMaterial,
        validity: Duration,
    ) -> Result<ClientMaterial, TrustError> {
        let key = KeyPair::from_pem(previous.cert.key_pem())?;
        self.sign(Self::client_params(identity, validity)?, &key)
    }

    fn client_params(
        identity: &SandboxIdentity,
        validity: Duration,
    ) -> Result<CertificateParams, TrustError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "Lazaret sandbox");
        params.subject_alt_names = vec![SanType::URI(identity.uri().try_into()?)];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        (params.not_before, params.not_after) = validity_window(validity)?;
        Ok(params)
    }

    /// The socket's server certificate: DNS SAN [`SERVER_NAME`], EKU
    /// serverAuth.
    pub fn issue_server(&self, validity: Duration) -> Result<IssuedCert, TrustError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, SERVER_NAME);
        params.subject_alt_names = vec![SanType::DnsName(SERVER_NAME.try_into()?)];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        (params.not_before, params.not_after) = validity_window(validity)?;
        Ok(self.issue_custom(params)?.cert)
    }

    /// Signs arbitrary `params` for a fresh key. For tests and special
    /// cases; the issue_* functions are what the host normally needs.
    pub fn issue_custom(&self, params: CertificateParams) -> Result<ClientMaterial, TrustError> {
        self.sign(params, &new_key()?)
    }

    fn sign(
        &self,
        mut params: CertificateParams,
        key: &KeyPair,
    ) -> Result<ClientMaterial, TrustError> {
        if params.serial_number.is_none() {
            params.serial_number = Some(random_serial()?);
        }
        let cert = params.signed_by(key, &self.issuer)?;
        Ok(ClientMaterial {
            ca_pem: self.ca_pem.clone(),
            ca_der: self.ca_der.clone(),
            cert: IssuedCert {
                cert_der: cert.der().clone(),
                cert_pem: cert.pem(),
                key_der: key.serialize_der(),
                key_pem: key.serialize_pem(),
            },
        })
    }

    /// The Escalation Socket's server configuration: TLS 1.3 only, client
    /// certificates from this CA required, no session resumption (every
    /// connection proves its identity afresh), ALPN [`ALPN`].
    pub fn server_config(&self, server: &IssuedCert) -> Result<Arc<ServerConfig>, TrustError> {
        let provider = crypto_provider();
        let mut roots = RootCertStore::empty();
        roots.add(self.ca_der.clone())?;
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()?;
        let mut cfg = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![server.cert_der.clone()], server.key_der())?;
        cfg.alpn_protocols = vec![ALPN.to_vec()];
        cfg.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        cfg.send_tls13_tickets = 0;
        Ok(Arc::new(cfg))
    }
}

/// A client configuration trusting only `ca`, presenting `chain`/`key`.
pub fn client_config(
    ca: &CertificateDer<'_>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<ClientConfig>, TrustError> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.clone().into_owned())?;
    let mut cfg = ClientConfig::builder_with_provider(crypto_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)?;
    cfg.alpn_protocols = vec![ALPN.to_vec()];
    cfg.resumption = rustls::client::Resumption::disabled();
    Ok(Arc::new(cfg))
}

/// Reads the client material [`ClientMaterial::write_to`] wrote.
pub fn load_client_config(dir: &Path) -> Result<Arc<ClientConfig>, TrustError> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path)
            .map(|b| (path.clone(), b))
            .map_err(|source| TrustError::Io { path, source })
    };
    let (ca_path, ca) = read(CA_CERT_FILE)?;
    let ca = CertificateDer::from_pem_slice(&ca).map_err(|_| TrustError::Pem {
        path: ca_path,
        what: "certificate",
    })?;
    let (cert_path, cert) = read(CLIENT_CERT_FILE)?;
    let chain: Vec<_> = CertificateDer::pem_slice_iter(&cert)
        .collect::<Result<_, _>>()
        .ok()
        .filter(|c: &Vec<_>| !c.is_empty())
        .ok_or(TrustError::Pem {
            path: cert_path,
            what: "certificate",
        })?;
    let (key_path, key) = read(CLIENT_KEY_FILE)?;
    let key = PrivateKeyDer::from_pem_slice(&key).map_err(|_| TrustError::Pem {
        path: key_path,
        what: "private key",
    })?;
    client_config(&ca, chain, key)
}

/// SHA-256 of a certificate's DER, for the audit log.
pub fn fingerprint(cert: &CertificateDer<'_>) -> [u8; 32] {
    sha2::Sha256::digest(cert.as_ref()).into()
}

/// Every subject alternative name of `cert`, in order, URIs as text and
/// other kinds as `None`. Fails on an unparseable certificate or a
/// repeated SAN extension.
pub fn subject_alt_names(cert: &CertificateDer<'_>) -> Result<Vec<Option<String>>, IdentityError> {
    use x509_parser::extensions::{GeneralName, ParsedExtension};
    let (rest, x509) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|_| IdentityError::Unparseable)?;
    if !rest.is_empty() {
        return Err(IdentityError::Unparseable);
    }
    let mut found = None;
    for ext in x509.extensions() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext.parsed_extension() {
            if found.is_some() {
                return Err(IdentityError::DuplicateSanExtension);
            }
            found = Some(
                san.general_names
                    .iter()
                    .map(|n| match n {
                        GeneralName::URI(u) => Some((*u).to_string()),
                        _ => None,
                    })
                    .collect::<Vec<_>>(),
            );
        } else if ext.oid == x509_parser::oid_registry::OID_X509_EXT_SUBJECT_ALT_NAME {
            // A SAN extension x509-parser could not parse.
            return Err(IdentityError::Unparseable);
        }
    }
    found.ok_or(IdentityError::NoSan)
}

/// The post-handshake check (decisions.md D4): the peer's end-entity
/// certificate has exactly one subject alternative name, a URI, equal to
/// `expected`'s. rustls has already checked chain, validity and EKU.
pub fn check_peer_identity(
    peer: Option<&[CertificateDer<'_>]>,
    expected: &SandboxIdentity,
) -> Result<(), IdentityError> {
    let leaf = peer
        .and_then(<[_]>::first)
        .ok_or(IdentityError::NoCertificate)?;
    let names = subject_alt_names(leaf)?;
    let [only] = names.as_slice() else {
        return Err(IdentityError::NotExactlyOne(names.len()));
    };
    let uri = only.as_deref().ok_or(IdentityError::NotUri)?;
    let want = expected.uri();
    if uri != want {
        return Err(IdentityError::WrongIdentity {
            found: uri.to_string(),
            expected: want,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_rules() {
        let id = SandboxIdentity::new("dev", "0123456789ab").unwrap();
        assert_eq!(id.uri(), "lazaret://profile/dev/sandbox/0123456789ab");
        assert!(SandboxIdentity::new("Dev", "x").is_err());
        assert!(SandboxIdentity::new("dev", "a/b").is_err());
        assert!(SandboxIdentity::new("dev", "").is_err());
    }

    #[test]
    fn issued_client_cert_has_exactly_the_identity() {
        let ca = TrustAnchor::generate(Duration::from_secs(3600)).unwrap();
        let id = SandboxIdentity::new("dev", "abc").unwrap();
        let m = ca.issue_client(&id, Duration::from_secs(600)).unwrap();
        let certs = [m.cert.cert_der.clone()];
        assert_eq!(subject_alt_names(&certs[0]).unwrap(), vec![Some(id.uri())]);
        check_peer_identity(Some(&certs), &id).unwrap();
        let other = SandboxIdentity::new("dev", "abd").unwrap();
        assert!(matches!(
            check_peer_identity(Some(&certs), &other),
            Err(IdentityError::WrongIdentity { .. })
        ));
        assert_eq!(
            check_peer_identity(None, &id),
            Err(IdentityError::NoCertificate)
        );
        let server = ca.issue_server(Duration::from_secs(600)).unwrap();
        assert_eq!(
            check_peer_identity(Some(std::slice::from_ref(&server.cert_der)), &id),
            Err(IdentityError::NotUri)
        );
    }

    #[test]
    fn a_renewal_keeps_key_and_identity_with_a_new_certificate() {
        let ca = TrustAnchor::generate(Duration::from_secs(3600)).unwrap();
        let id = SandboxIdentity::new("dev", "abc").unwrap();
        let old = ca.issue_client(&id, Duration::from_secs(600)).unwrap();
        let new = ca
            .renew_client(&id, &old, Duration::from_secs(600))
            .unwrap();
        assert_eq!(new.cert.key_pem(), old.cert.key_pem());
        assert_eq!(new.ca_pem, old.ca_pem);
        assert_ne!(new.cert.cert_der, old.cert.cert_der);
        check_peer_identity(Some(std::slice::from_ref(&new.cert.cert_der)), &id).unwrap();
        // Old key file with the new certificate: still a matching pair.
        let dir = tempfile::tempdir().unwrap();
        old.write_to(dir.path()).unwrap();
        std::fs::write(dir.path().join(CLIENT_CERT_FILE), &new.cert.cert_pem).unwrap();
        load_client_config(dir.path()).unwrap();
    }

    #[test]
    fn material_round_trips_through_files() {
        let ca = TrustAnchor::generate(Duration::from_secs(3600)).unwrap();
        let id = SandboxIdentity::new("dev", "abc").unwrap();
        let m = ca.issue_client(&id, Duration::from_secs(600)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        m.write_to(dir.path()).unwrap();
        m.write_to(dir.path()).unwrap(); // renewal replaces
        load_client_config(dir.path()).unwrap();
        std::fs::write(dir.path().join(CLIENT_KEY_FILE), "junk").unwrap();
        assert!(matches!(
            load_client_config(dir.path()),
            Err(TrustError::Pem { .. })
        ));
    }
}
