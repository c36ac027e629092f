//! The Session Anchor (spec §4.3.5 Step 3, §5.1.1; decisions.md D4).
//!
//! Each Client Session holds a long-lived ed25519 [`SessionKey`] that never
//! leaves the host; its public half is registered with the coordinator under
//! the session's id. For each `podman exec` the session makes a fresh
//! per-exec key and certifies it with a [`Delegation`] (session id, expiry),
//! and puts the per-exec secret plus that certificate into the exec'd
//! process's environment only ([`SessionCredential::env_vars`]).
//!
//! The client signs [`request_signed_bytes`]: a fixed, domain-separated
//! encoding, never re-serialised JSON, so what is verified does not depend
//! on how a JSON library orders or escapes anything. The host checks the
//! delegation against the registered session key, the signature with
//! `verify_strict`, the timestamp window and the profile
//! ([`verify_request`]); the seen-id store is the host's, fed by
//! [`VerifiedRequest::replay_key`].
//!
//! Encodings (all integers big-endian, strings as UTF-8 bytes behind a
//! `u32` length):
//!
//! ```text
//! request:    "lazaret-escalation-v1\0" | str request_id | str session_id
//!             | str profile | u64 timestamp | str cwd | str command
//!             | str justification
//! delegation: "lazaret-delegation-v1\0" | str session_id
//!             | 32-byte per-exec public key | u64 expires_at
//! ```
//!
//! Text forms:
//!
//! ```text
//! Request.delegation:          lzd1.<session_id>.<expires_at>.<pubkey hex>.<sig hex>
//! LAZARET_SESSION_CREDENTIAL:  lzc1.<per-exec secret key hex>.<delegation text>
//! ```
//!
//! Hex is lowercase; `expires_at` is decimal seconds since the Unix epoch.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Re-exported so the host names the same types without its own dependency.
pub use ed25519_dalek::{Signature, VerifyingKey};
use ed25519_dalek::{Signer, SigningKey};

use crate::hex;
use crate::protocol::{Request, is_canonical_uuid};

/// Domain separation for request signatures.
pub const REQUEST_DOMAIN: &[u8] = b"lazaret-escalation-v1\0";
/// Domain separation for delegation certificates.
pub const DELEGATION_DOMAIN: &[u8] = b"lazaret-delegation-v1\0";
/// Default timestamp window, either side of the host's clock.
pub const DEFAULT_MAX_SKEW: Duration = Duration::from_secs(30);

const DELEGATION_TAG: &str = "lzd1";
const CREDENTIAL_TAG: &str = "lzc1";

/// Why a request failed verification. Each failure is its own variant so
/// the audit log and tests can tell them apart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The request was not decoded by [`protocol`](crate::protocol) or was
    /// changed since: its fields break the syntax rules.
    #[error("the request is malformed: {0}")]
    MalformedRequest(String),
    #[error("the delegation is malformed: {0}")]
    MalformedDelegation(&'static str),
    #[error("the delegation is for session {delegation}, the request names {request}")]
    DelegationSessionMismatch { delegation: String, request: String },
    #[error("the delegation is not signed by the session's key")]
    DelegationSignatureInvalid,
    #[error("the delegation expired at {expires_at} (now {now})")]
    DelegationExpired { expires_at: u64, now: u64 },
    #[error("the signature is malformed (want 128 lowercase hex digits)")]
    MalformedSignature,
    #[error("the signature does not verify over the request")]
    SignatureInvalid,
    #[error("the timestamp {timestamp} is too old (now {now})")]
    TimestampTooOld { timestamp: u64, now: u64 },
    #[error("the timestamp {timestamp} is in the future (now {now})")]
    TimestampInFuture { timestamp: u64, now: u64 },
    #[error("the request names profile `{request}`, the client certificate `{identity}`")]
    ProfileMismatch { request: String, identity: String },
}

/// Why a credential could not be made or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("the system random number generator failed")]
    Random,
    #[error("`{0}` is not a canonical session id (a lowercase UUID)")]
    BadSessionId(String),
    #[error("the credential is malformed: {0}")]
    Malformed(&'static str),
    #[error("the credential's secret key does not match its delegation")]
    KeyMismatch,
}

/// Seconds since the Unix epoch (0 before it).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A fresh random id in canonical form, for `request_id` and session ids.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Frames are at most 1 MiB, so every field fits a u32.
    let len = u32::try_from(s.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// The exact bytes a request's signature covers.
pub fn request_signed_bytes(req: &Request) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        REQUEST_DOMAIN.len() + 64 + req.command.len() + req.justification.len() + req.cwd.len(),
    );
    out.extend_from_slice(REQUEST_DOMAIN);
    put_str(&mut out, &req.request_id);
    put_str(&mut out, &req.session_id);
    put_str(&mut out, &req.profile);
    out.extend_from_slice(&req.timestamp.to_be_bytes());
    put_str(&mut out, &req.cwd);
    put_str(&mut out, &req.command);
    put_str(&mut out, &req.justification);
    out
}

/// The exact bytes a delegation's signature covers.
pub fn delegation_signed_bytes(session_id: &str, key: &VerifyingKey, expires_at: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(DELEGATION_DOMAIN.len() + 4 + session_id.len() + 40);
    out.extend_from_slice(DELEGATION_DOMAIN);
    put_str(&mut out, session_id);
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&expires_at.to_be_bytes());
    out
}

fn random_signing_key() -> Result<SigningKey, CredentialError> {
    use ring::rand::{SecureRandom, SystemRandom};
    let mut seed = [0u8; 32];
    SystemRandom::new()
        .fill(&mut seed)
        .map_err(|_| CredentialError::Random)?;
    let key = SigningKey::from_bytes(&seed);
    seed.fill(0);
    Ok(key)
}

/// A Client Session's long-lived key. Host only: it never enters a sandbox.
pub struct SessionKey(SigningKey);

impl fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionKey")
            .field("public", &hex::encode(self.0.verifying_key().as_bytes()))
            .finish_non_exhaustive()
    }
}

impl SessionKey {
    pub fn generate() -> Result<Self, CredentialError> {
        random_signing_key().map(SessionKey)
    }

    /// What the coordinator registers under the session's id.
    pub fn public_key(&self) -> VerifyingKey {
        self.0.verifying_key()
    }

    /// A fresh per-exec credential for `session_id`, valid until
    /// `expires_at` (Unix seconds).
    pub fn delegate(
        &self,
        session_id: &str,
        expires_at: u64,
    ) -> Result<SessionCredential, CredentialError> {
        if !is_canonical_uuid(session_id) {
            return Err(CredentialError::BadSessionId(session_id.to_string()));
        }
        let key = random_signing_key()?;
        let public = key.verifying_key();
        let signature = self
            .0
            .sign(&delegation_signed_bytes(session_id, &public, expires_at));
        Ok(SessionCredential {
            delegation: Delegation {
                session_id: session_id.to_string(),
                key: public,
                expires_at,
                signature,
            },
            key,
        })
    }
}

/// The session key's certificate for one per-exec key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delegation {
    pub session_id: String,
    pub key: VerifyingKey,
    pub expires_at: u64,
    pub signature: Signature,
}

impl Delegation {
    /// `lzd1.<session_id>.<expires_at>.<pubkey hex>.<sig hex>`
    pub fn to_text(&self) -> String {
        format!(
            "{DELEGATION_TAG}.{}.{}.{}.{}",
            self.session_id,
            self.expires_at,
            hex::encode(self.key.as_bytes()),
            hex::encode(&self.signature.to_bytes()),
        )
    }

    /// Parses [`to_text`](Self::to_text)'s form and nothing else.
    pub fn from_text(s: &str) -> Result<Self, VerifyError> {
        use VerifyError::MalformedDelegation as Bad;
        let mut parts = s.split('.');
        let (Some(tag), Some(session_id), Some(expires), Some(key), Some(sig), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(Bad("want five dot-separated parts"));
        };
        if tag != DELEGATION_TAG {
            return Err(Bad("unknown tag"));
        }
        if !is_canonical_uuid(session_id) {
            return Err(Bad("session id is not a canonical UUID"));
        }
        let expires_at = parse_decimal(expires).ok_or(Bad("expiry is not a decimal number"))?;
        let key = hex::decode::<32>(key).ok_or(Bad("public key is not 64 hex digits"))?;
        let key = VerifyingKey::from_bytes(&key).map_err(|_| Bad("public key is not a point"))?;
        let sig = hex::decode::<64>(sig).ok_or(Bad("signature is not 128 hex digits"))?;
        Ok(Delegation {
            session_id: session_id.to_string(),
            key,
            expires_at,
            signature: Signature::from_bytes(&sig),
        })
    }

    /// Checks that the registered `session_key` certified this key for
    /// `session_id` and that it has not expired at `now`.
    pub fn verify(
        &self,
        session_key: &VerifyingKey,
        session_id: &str,
        now: u64,
    ) -> Result<(), VerifyError> {
        if self.session_id != session_id {
            return Err(VerifyError::DelegationSessionMismatch {
                delegation: self.session_id.clone(),
                request: session_id.to_string(),
            });
        }
        let bytes = delegation_signed_bytes(&self.session_id, &self.key, self.expires_at);
        session_key
            .verify_strict(&bytes, &self.signature)
            .map_err(|_| VerifyError::DelegationSignatureInvalid)?;
        if now >= self.expires_at {
            return Err(VerifyError::DelegationExpired {
                expires_at: self.expires_at,
                now,
            });
        }
        Ok(())
    }
}

/// Decimal digits without sign or leading zeros: one spelling per number.
fn parse_decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

/// A per-exec key and its delegation: what one exec'd process holds.
pub struct SessionCredential {
    delegation: Delegation,
    key: SigningKey,
}

impl fmt::Debug for SessionCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret half.
        f.debug_struct("SessionCredential")
            .field("delegation", &self.delegation)
            .finish_non_exhaustive()
    }
}

/// The file, in the sandbox's certs folder, where the host publishes (and
/// renews) session `session_id`'s credential in
/// [`SessionCredential::to_env_value`]'s form.
pub fn credential_file_name(session_id: &str) -> String {
    format!("session-{session_id}.cred")
}

impl SessionCredential {
    pub fn session_id(&self) -> &str {
        &self.delegation.session_id
    }

    pub fn delegation(&self) -> &Delegation {
        &self.delegation
    }

    /// `lzc1.<secret hex>.<delegation text>`, for
    /// [`env::SESSION_CREDENTIAL`](crate::env::SESSION_CREDENTIAL).
    pub fn to_env_value(&self) -> String {
        format!(
            "{CREDENTIAL_TAG}.{}.{}",
            hex::encode(&self.key.to_bytes()),
            self.delegation.to_text()
        )
    }

    /// Parses [`to_env_value`](Self::to_env_value)'s form and checks that
    /// the secret key is the delegated one.
    pub fn from_env_value(s: &str) -> Result<Self, CredentialError> {
        use CredentialError::Malformed;
        let rest = s
            .strip_prefix(CREDENTIAL_TAG)
            .and_then(|r| r.strip_prefix('.'))
            .ok_or(Malformed("unknown tag"))?;
        let (secret, delegation) = rest.split_once('.').ok_or(Malformed("no delegation"))?;
        let mut secret =
            hex::decode::<32>(secret).ok_or(Malformed("secret is not 64 hex digits"))?;
        let key = SigningKey::from_bytes(&secret);
        secret.fill(0);
        let delegation =
            Delegation::from_text(delegation).map_err(|_| Malformed("bad delegation"))?;
        if key.verifying_key() != delegation.key {
            return Err(CredentialError::KeyMismatch);
        }
        Ok(SessionCredential { delegation, key })
    }

    /// The environment the host adds to the exec'd process:
    /// `LAZARET_SESSION_ID` and `LAZARET_SESSION_CREDENTIAL`.
    pub fn env_vars(&self) -> [(&'static str, String); 2] {
        [
            (crate::env::SESSION_ID, self.delegation.session_id.clone()),
            (crate::env::SESSION_CREDENTIAL, self.to_env_value()),
        ]
    }

    /// Fills `req.session_id`, `delegation` and `signature`; call it after
    /// every other field is final.
    pub fn sign(&self, req: &mut Request) {
        req.session_id.clone_from(&self.delegation.session_id);
        req.delegation = self.delegation.to_text();
        let sig = self.key.sign(&request_signed_bytes(req));
        req.signature = hex::encode(&sig.to_bytes());
    }
}

/// What [`verify_request`] checks a request against.
#[derive(Debug, Clone, Copy)]
pub struct VerifyContext<'a> {
    /// The public key registered for `request.session_id`.
    pub session_key: &'a VerifyingKey,
    /// The profile of the mTLS identity bound to the socket.
    pub profile: &'a str,
    /// The host's clock, Unix seconds.
    pub now: u64,
    /// Accepted distance between `timestamp` and `now`, either way.
    pub max_skew: Duration,
}

impl<'a> VerifyContext<'a> {
    /// The current time and [`DEFAULT_MAX_SKEW`].
    pub fn new(session_key: &'a VerifyingKey, profile: &'a str) -> Self {
        VerifyContext {
            session_key,
            profile,
            now: unix_now(),
            max_skew: DEFAULT_MAX_SKEW,
        }
    }
}

/// A request whose delegation, signature, time and profile verified.
#[derive(Debug, Clone)]
pub struct VerifiedRequest {
    request: Request,
    exec_key: VerifyingKey,
    forget_after: u64,
}

impl VerifiedRequest {
    pub fn request(&self) -> &Request {
        &self.request
    }

    pub fn into_request(self) -> Request {
        self.request
    }

    /// The per-exec key that signed (for the audit log).
    pub fn exec_key(&self) -> &VerifyingKey {
        &self.exec_key
    }

    /// The key the host's seen-id store must insert atomically, refusing the
    /// request if present: the request id's 16 bytes (ids are canonical, so
    /// one id has one key).
    pub fn replay_key(&self) -> [u8; 16] {
        // Validated in verify_request; the fallback is unreachable and would
        // fail closed (every such id the same key).
        uuid::Uuid::parse_str(&self.request.request_id).map_or([0; 16], |u| u.into_bytes())
    }

    /// After this Unix second the timestamp check alone refuses a replay of
    /// this request, so the store may drop its id.
    pub fn forget_after(&self) -> u64 {
        self.forget_after
    }
}

/// Verifies a decoded request: the delegation (session id, signature by the
/// registered session key, expiry), then the request signature
/// (`verify_strict`, by the delegated key), then the timestamp window, then
/// the profile. Signatures come first so that a time or profile error is
/// only ever reported for an authentic request. Replay is not checked here.
pub fn verify_request(
    req: &Request,
    ctx: &VerifyContext<'_>,
) -> Result<VerifiedRequest, VerifyError> {
    // Decoding already checked this; a hand-built request must not skip it
    // (the replay key relies on a canonical request id).
    req.validate()
        .map_err(|e| VerifyError::MalformedRequest(e.to_string()))?;
    let delegation = Delegation::from_text(&req.delegation)?;
    delegation.verify(ctx.session_key, &req.session_id, ctx.now)?;
    let sig = hex::decode::<64>(&req.signature).ok_or(VerifyError::MalformedSignature)?;
    delegation
        .key
        .verify_strict(&request_signed_bytes(req), &Signature::from_bytes(&sig))
        .map_err(|_| VerifyError::SignatureInvalid)?;
    let skew = ctx.max_skew.as_secs();
    if req.timestamp.saturating_add(skew) < ctx.now {
        return Err(VerifyError::TimestampTooOld {
            timestamp: req.timestamp,
            now: ctx.now,
        });
    }
    if req.timestamp > ctx.now.saturating_add(skew) {
        return Err(VerifyError::TimestampInFuture {
            timestamp: req.timestamp,
            now: ctx.now,
        });
    }
    if req.profile != ctx.profile {
        return Err(VerifyError::ProfileMismatch {
            request: req.profile.clone(),
            identity: ctx.profile.to_string(),
        });
    }
    Ok(VerifiedRequest {
        request: req.clone(),
        exec_key: delegation.key,
        forget_after: req.timestamp.saturating_add(skew),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::PROTOCOL_VERSION;

    fn setup() -> (SessionKey, SessionCredential, Request) {
        let session = SessionKey::generate().unwrap();
        let sid = new_id();
        let cred = session.delegate(&sid, unix_now() + 3600).unwrap();
        let mut req = Request {
            version: PROTOCOL_VERSION,
            request_id: new_id(),
            session_id: String::new(),
            profile: "dev".into(),
            timestamp: unix_now(),
            cwd: "/workspace".into(),
            command: "ls".into(),
            justification: String::new(),
            delegation: String::new(),
            signature: String::new(),
        };
        cred.sign(&mut req);
        (session, cred, req)
    }

    #[test]
    fn signed_bytes_are_fixed() {
        let req = Request {
            version: 1,
            request_id: "r".into(),
            session_id: "s".into(),
            profile: "p".into(),
            timestamp: 0x0102,
            cwd: "/w".into(),
            command: "ls".into(),
            justification: "".into(),
            delegation: "ignored".into(),
            signature: "ignored".into(),
        };
        let mut want = b"lazaret-escalation-v1\0".to_vec();
        want.extend_from_slice(b"\0\0\0\x01r\0\0\0\x01s\0\0\0\x01p");
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 1, 2]);
        want.extend_from_slice(b"\0\0\0\x02/w\0\0\0\x02ls\0\0\0\0");
        assert_eq!(request_signed_bytes(&req), want);
    }

    #[test]
    fn field_boundaries_are_unambiguous() {
        let (_, cred, mut a) = setup();
        a.command = "ab".into();
        a.justification = "c".into();
        cred.sign(&mut a);
        let mut b = a.clone();
        b.command = "a".into();
        b.justification = "bc".into();
        assert_ne!(request_signed_bytes(&a), request_signed_bytes(&b));
    }

    #[test]
    fn credential_round_trips_through_env_text() {
        let (session, cred, req) = setup();
        let text = cred.to_env_value();
        assert!(text.starts_with("lzc1."));
        let back = SessionCredential::from_env_value(&text).unwrap();
        assert_eq!(back.delegation(), cred.delegation());
        let mut again = req.clone();
        back.sign(&mut again);
        assert_eq!(again.signature, req.signature, "ed25519 is deterministic");
        let key = session.public_key();
        verify_request(&req, &VerifyContext::new(&key, "dev")).unwrap();
        assert!(
            !format!("{cred:?}").contains(&text[5..69]),
            "Debug leaks the secret"
        );
    }

    #[test]
    fn credential_with_foreign_secret_is_refused() {
        let (session, cred, _) = setup();
        let other = session.delegate(cred.session_id(), 1).unwrap();
        let mixed = format!(
            "lzc1.{}.{}",
            &other.to_env_value()[5..69],
            cred.delegation().to_text()
        );
        assert_eq!(
            SessionCredential::from_env_value(&mixed).unwrap_err(),
            CredentialError::KeyMismatch
        );
    }

    #[test]
    fn each_failure_has_its_variant() {
        let (session, cred, req) = setup();
        let key = session.public_key();
        let ctx = VerifyContext::new(&key, "dev");

        let mut r = req.clone();
        r.command = "ls -R".into();
        assert_eq!(
            verify_request(&r, &ctx).unwrap_err(),
            VerifyError::SignatureInvalid
        );

        let mut r = req.clone();
        r.signature = r.signature.to_uppercase();
        assert_eq!(
            verify_request(&r, &ctx).unwrap_err(),
            VerifyError::MalformedSignature
        );

        let other = SessionKey::generate().unwrap().public_key();
        let c2 = VerifyContext::new(&other, "dev");
        assert_eq!(
            verify_request(&req, &c2).unwrap_err(),
            VerifyError::DelegationSignatureInvalid
        );

        let c3 = VerifyContext {
            now: cred.delegation().expires_at,
            ..ctx
        };
        assert!(matches!(
            verify_request(&req, &c3).unwrap_err(),
            VerifyError::DelegationExpired { .. }
        ));

        let c4 = VerifyContext {
            now: req.timestamp + 31,
            ..ctx
        };
        assert!(matches!(
            verify_request(&req, &c4).unwrap_err(),
            VerifyError::TimestampTooOld { .. }
        ));
        let c5 = VerifyContext {
            now: req.timestamp - 31,
            ..ctx
        };
        assert!(matches!(
            verify_request(&req, &c5).unwrap_err(),
            VerifyError::TimestampInFuture { .. }
        ));
        let c6 = VerifyContext {
            now: req.timestamp + 30,
            ..ctx
        };
        let ok = verify_request(&req, &c6).unwrap();
        assert_eq!(ok.forget_after(), req.timestamp + 30);
        assert_eq!(
            uuid::Uuid::from_bytes(ok.replay_key()).to_string(),
            req.request_id
        );

        let c7 = VerifyContext {
            profile: "ops",
            ..ctx
        };
        assert!(matches!(
            verify_request(&req, &c7).unwrap_err(),
            VerifyError::ProfileMismatch { .. }
        ));

        let mut r = req.clone();
        r.request_id = r.request_id.to_uppercase();
        cred.sign(&mut r);
        assert!(matches!(
            verify_request(&r, &ctx).unwrap_err(),
            VerifyError::MalformedRequest(_)
        ));

        let mut r = req;
        r.session_id = new_id();
        assert!(matches!(
            verify_request(&r, &ctx).unwrap_err(),
            VerifyError::DelegationSessionMismatch { .. }
        ));
        r.delegation = "lzd1.garbage".into();
        assert!(matches!(
            verify_request(&r, &ctx).unwrap_err(),
            VerifyError::MalformedDelegation(_)
        ));
    }

    #[test]
    fn delegation_text_is_strict() {
        let (_, cred, _) = setup();
        let text = cred.delegation().to_text();
        assert_eq!(&Delegation::from_text(&text).unwrap(), cred.delegation());
        let e = cred.delegation().expires_at;
        for bad in [
            text.replacen("lzd1", "lzd2", 1),
            text.replacen(&format!(".{e}."), &format!(".0{e}."), 1),
            text.replacen(&format!(".{e}."), &format!(".+{e}."), 1),
            format!("{text}."),
            text.to_uppercase(),
        ] {
            assert!(Delegation::from_text(&bad).is_err(), "{bad}");
        }
    }
}
