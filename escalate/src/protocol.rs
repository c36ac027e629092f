//! Frames and message bodies on the Escalation Socket (spec §5.1.2, §5.1.3).
//!
//! On the wire, inside mTLS, each message is one frame: a `u32` big-endian
//! body length, then the body, a JSON object. The client sends one
//! [`Request`] frame; the host answers with one [`Response`] frame and
//! closes. Bodies carry `"version": 1` ([`PROTOCOL_VERSION`]); a peer
//! speaking another version is refused by name before the rest is read.
//!
//! Decoding is strict because the body comes from an untrusted agent: the
//! length is checked before anything is allocated or read, and a body must
//! be valid UTF-8, one JSON object without duplicate keys (at any depth,
//! compared after unescaping), without unknown fields and with every field
//! well formed. Each failure is its own [`ProtocolError`] variant.

use std::cell::RefCell;
use std::fmt;
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The protocol version this crate speaks, carried in every body.
pub const PROTOCOL_VERSION: u32 = 1;
/// Largest request body: far above any real command, small enough that an
/// agent cannot make the host buffer much.
pub const MAX_REQUEST_FRAME: usize = 1024 * 1024;
/// Largest response body; [`Response::fit_to`] trims output to it.
pub const MAX_RESPONSE_FRAME: usize = 16 * 1024 * 1024;
/// Longest `command`, in bytes (Linux's per-argument limit).
pub const MAX_COMMAND_BYTES: usize = 128 * 1024;
/// Longest `justification`, in bytes.
pub const MAX_JUSTIFICATION_BYTES: usize = 16 * 1024;
/// Longest `cwd`, in bytes (PATH_MAX).
pub const MAX_CWD_BYTES: usize = 4096;
/// Longest `delegation` or `signature` text; real ones are under 300.
pub const MAX_CREDENTIAL_TEXT: usize = 512;

/// Why a frame or body was refused.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("the peer closed the connection before sending a frame")]
    Closed,
    #[error("the frame header was cut off after {got} of 4 bytes")]
    TruncatedHeader { got: usize },
    #[error("the frame announces {len} bytes, more than the limit of {max}")]
    Oversized { len: usize, max: usize },
    #[error("the frame is empty")]
    Empty,
    #[error("the frame was cut off after {got} of {expected} bytes")]
    Truncated { expected: usize, got: usize },
    #[error("the body is not valid UTF-8 (at byte {at})")]
    InvalidUtf8 { at: usize },
    #[error("the body is not one valid JSON value: {0}")]
    Json(String),
    #[error("the body has the key `{0}` more than once")]
    DuplicateKey(String),
    #[error("the body is not a JSON object")]
    NotAnObject,
    #[error("the body has no protocol version")]
    MissingVersion,
    #[error("protocol version {0} is not supported (this side speaks {PROTOCOL_VERSION})")]
    UnsupportedVersion(String),
    /// Unknown, missing or mistyped fields.
    #[error("the body does not match the message: {0}")]
    Schema(String),
    #[error("field `{field}` is invalid: {reason}")]
    InvalidField { field: &'static str, reason: String },
    #[error("the response is inconsistent: {0}")]
    Inconsistent(&'static str),
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

/// A command request, sandbox to host (spec §5.1.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// Always [`PROTOCOL_VERSION`] once decoded.
    pub version: u32,
    /// A fresh canonical lowercase UUID per request; the host refuses one
    /// it has seen (replay).
    pub request_id: String,
    /// The `LAZARET_SESSION_ID` of the Client Session that asked.
    pub session_id: String,
    pub profile: String,
    /// Seconds since the Unix epoch when the client signed (decisions.md D4).
    pub timestamp: u64,
    /// The client's working directory inside the sandbox, sent as is; the
    /// host maps it with [`map_cwd`].
    pub cwd: String,
    /// The raw command line, as the human will see it.
    pub command: String,
    pub justification: String,
    /// The per-exec key's certificate from the session key, text form of
    /// [`Delegation`](crate::signing::Delegation).
    pub delegation: String,
    /// ed25519 signature by the delegated key over
    /// [`signing::request_signed_bytes`](crate::signing::request_signed_bytes), lowercase hex.
    pub signature: String,
}

/// What the host did with a request. Each value has one meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Approved (automatically or by a human) and run: `exit_code` is the
    /// command's exit status (128 + signal number if it was killed).
    Approved,
    /// A human, or the policy, decided not to run it: `denied_reason` says
    /// why. Nothing ran.
    Denied,
    /// The host did not judge or could not run the request (it failed
    /// verification, the session is unknown or ended, the program could not
    /// be started, an internal fault); `stderr` explains. Nothing ran.
    Error,
}

/// The host's answer (spec §5.1.3, plus `status`, `truncated`,
/// `denied_reason` and `edited_command`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Response {
    pub version: u32,
    /// The request's id; empty only in an `error` answer to a request that
    /// could not be decoded.
    pub request_id: String,
    pub status: Status,
    /// `status == Approved`; kept for the spec's field list.
    pub approved: bool,
    /// Set exactly when `status == Approved`.
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// The host cut `stdout` or `stderr` short (its output limits).
    pub truncated: bool,
    /// Set exactly when `status == Denied`.
    pub denied_reason: Option<String>,
    /// Set when the human edited the command before approving: what ran.
    pub edited_command: Option<String>,
}

impl Response {
    /// The command ran and exited with `exit_code`.
    pub fn approved(
        request_id: impl Into<String>,
        exit_code: i32,
        stdout: impl Into<String>,
        stderr: impl Into<String>,
    ) -> Self {
        Response {
            version: PROTOCOL_VERSION,
            request_id: request_id.into(),
            status: Status::Approved,
            approved: true,
            exit_code: Some(exit_code),
            stdout: stdout.into(),
            stderr: stderr.into(),
            truncated: false,
            denied_reason: None,
            edited_command: None,
        }
    }

    /// Nothing ran because a human or the policy said no.
    pub fn denied(request_id: impl Into<String>, reason: impl Into<String>) -> Self {
        Response {
            version: PROTOCOL_VERSION,
            request_id: request_id.into(),
            status: Status::Denied,
            approved: false,
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            truncated: false,
            denied_reason: Some(reason.into()),
            edited_command: None,
        }
    }

    /// Nothing ran because the request was invalid or could not be run.
    pub fn error(request_id: impl Into<String>, message: impl Into<String>) -> Self {
        Response {
            version: PROTOCOL_VERSION,
            request_id: request_id.into(),
            status: Status::Error,
            approved: false,
            exit_code: None,
            stdout: String::new(),
            stderr: message.into(),
            truncated: false,
            denied_reason: None,
            edited_command: None,
        }
    }

    /// Records that the human edited the command; `command` is what ran.
    #[must_use]
    pub fn with_edited_command(mut self, command: impl Into<String>) -> Self {
        self.edited_command = Some(command.into());
        self
    }

    /// Records that the host cut output short.
    #[must_use]
    pub fn with_truncated(mut self, truncated: bool) -> Self {
        self.truncated = truncated;
        self
    }

    /// Checks that the fields agree with `status`.
    pub fn validate(&self) -> Result<(), ProtocolError> {
        use ProtocolError::Inconsistent;
        if self.approved != (self.status == Status::Approved) {
            return Err(Inconsistent("`approved` disagrees with `status`"));
        }
        if self.exit_code.is_some() != (self.status == Status::Approved) {
            return Err(Inconsistent(
                "`exit_code` must be set exactly when the command ran",
            ));
        }
        if self.denied_reason.is_some() != (self.status == Status::Denied) {
            return Err(Inconsistent(
                "`denied_reason` must be set exactly when denied",
            ));
        }
        if self.edited_command.is_some() && self.status != Status::Approved {
            return Err(Inconsistent("`edited_command` is only for approved runs"));
        }
        if self.request_id.is_empty() && self.status != Status::Error {
            return Err(Inconsistent("only an `error` answer may lack a request id"));
        }
        Ok(())
    }

    /// Trims the tail of `stdout`/`stderr` (longer first) until the encoded
    /// body fits in `max` bytes, setting `truncated` if anything was cut.
    /// Fails only if the answer cannot fit even with no output.
    pub fn fit_to(&mut self, max: usize) -> Result<(), ProtocolError> {
        loop {
            let len = encode(self)?.len();
            if len <= max {
                return Ok(());
            }
            let excess = len - max;
            // Cutting k bytes of text removes at least k encoded bytes, so
            // each round removes the whole excess or empties a stream.
            let target = if self.stdout.len() >= self.stderr.len() {
                &mut self.stdout
            } else {
                &mut self.stderr
            };
            if target.is_empty() {
                return Err(ProtocolError::Oversized { len, max });
            }
            let mut keep = target.len().saturating_sub(excess);
            while !target.is_char_boundary(keep) {
                keep -= 1;
            }
            target.truncate(keep);
            self.truncated = true;
        }
    }
}

impl Request {
    /// Checks every field's syntax; the decoder calls it, and so should
    /// anything building a request by hand.
    pub fn validate(&self) -> Result<(), ProtocolError> {
        let bad = |field: &'static str, reason: &str| ProtocolError::InvalidField {
            field,
            reason: reason.to_string(),
        };
        if self.version != PROTOCOL_VERSION {
            return Err(ProtocolError::UnsupportedVersion(self.version.to_string()));
        }
        if !is_canonical_uuid(&self.request_id) {
            return Err(bad("request_id", "not a canonical lowercase UUID"));
        }
        if !is_canonical_uuid(&self.session_id) {
            return Err(bad("session_id", "not a canonical lowercase UUID"));
        }
        if !is_profile_name(&self.profile) {
            return Err(bad("profile", "not a profile name ([a-z0-9_-]{2,32})"));
        }
        check_sandbox_path(&self.cwd).map_err(|r| bad("cwd", r))?;
        if self.command.trim().is_empty() {
            return Err(bad("command", "empty"));
        }
        if self.command.len() > MAX_COMMAND_BYTES {
            return Err(bad("command", "too long"));
        }
        // No process can receive a NUL in an argument or in `sh -c`.
        if self.command.contains('\0') {
            return Err(bad("command", "contains NUL"));
        }
        if self.justification.len() > MAX_JUSTIFICATION_BYTES {
            return Err(bad("justification", "too long"));
        }
        if self.delegation.len() > MAX_CREDENTIAL_TEXT {
            return Err(bad("delegation", "too long"));
        }
        if self.signature.len() > MAX_CREDENTIAL_TEXT {
            return Err(bad("signature", "too long"));
        }
        Ok(())
    }
}

/// `s` is a UUID in the one spelling `Uuid::to_string` gives, so that one
/// id cannot be replayed under another spelling.
pub fn is_canonical_uuid(s: &str) -> bool {
    uuid::Uuid::try_parse(s).is_ok_and(|u| u.hyphenated().to_string() == s)
}

/// The profile-name rule of the configuration: `^[a-z0-9_-]{2,32}$`.
pub fn is_profile_name(s: &str) -> bool {
    (2..=32).contains(&s.len())
        && s.bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'))
}

/// An absolute path with no `.`, `..` or empty components and no control
/// characters: one spelling per folder.
fn check_sandbox_path(p: &str) -> Result<(), &'static str> {
    if p.len() > MAX_CWD_BYTES {
        return Err("too long");
    }
    if !p.starts_with('/') {
        return Err("not absolute");
    }
    if p.chars().any(char::is_control) {
        return Err("contains control characters");
    }
    if p != "/" && (p.ends_with('/') || p.split('/').skip(1).any(|c| matches!(c, "" | "." | "..")))
    {
        return Err("not normalised (empty, `.` or `..` components)");
    }
    Ok(())
}

/// Why a request's `cwd` cannot be mapped to the host.
#[derive(Debug, thiserror::Error)]
pub enum CwdError {
    #[error("`{0}` is not a normalised absolute path: {1}")]
    Malformed(String, &'static str),
    #[error("`{cwd}` is outside {workspace}; run lazaret-escalate from inside it")]
    OutsideWorkspace { cwd: String, workspace: String },
    #[error("the host folder {0} cannot be resolved: {1}")]
    Unresolvable(PathBuf, io::Error),
    #[error("the host folder {0} leaves the workspace through a symbolic link")]
    EscapesWorkspace(PathBuf),
}

/// Maps a request's sandbox `cwd` (under `sandbox_workspace`, normally
/// [`WORKSPACE_DIR`](crate::WORKSPACE_DIR)) to the matching folder under
/// `host_workspace`, canonicalised and checked to still lie inside it, so
/// that agent-made symbolic links cannot move the command elsewhere.
///
/// The folder can still be swapped for a link after this returns; the host
/// should run the command promptly and treat the workspace as hostile.
pub fn map_cwd(
    cwd: &str,
    sandbox_workspace: &str,
    host_workspace: &Path,
) -> Result<PathBuf, CwdError> {
    check_sandbox_path(cwd).map_err(|r| CwdError::Malformed(cwd.to_string(), r))?;
    let outside = || CwdError::OutsideWorkspace {
        cwd: cwd.to_string(),
        workspace: sandbox_workspace.to_string(),
    };
    let rel = Path::new(cwd)
        .strip_prefix(sandbox_workspace)
        .map_err(|_| outside())?;
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(outside());
    }
    let root = host_workspace
        .canonicalize()
        .map_err(|e| CwdError::Unresolvable(host_workspace.to_path_buf(), e))?;
    let joined = root.join(rel);
    let real = joined
        .canonicalize()
        .map_err(|e| CwdError::Unresolvable(joined.clone(), e))?;
    if !real.starts_with(&root) {
        return Err(CwdError::EscapesWorkspace(joined));
    }
    Ok(real)
}

// ---------------------------------------------------------------------------
// Frames

fn check_len(len: usize, max: usize) -> Result<(), ProtocolError> {
    if len == 0 {
        return Err(ProtocolError::Empty);
    }
    if len > max {
        return Err(ProtocolError::Oversized { len, max });
    }
    Ok(())
}

fn frame(body: &[u8], max: usize) -> Result<Vec<u8>, ProtocolError> {
    check_len(body.len(), max)?;
    let len = u32::try_from(body.len()).map_err(|_| ProtocolError::Oversized {
        len: body.len(),
        max,
    })?;
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(body);
    Ok(out)
}

/// Reads one frame's body, refusing lengths over `max` before reading it.
pub fn read_frame<R: Read + ?Sized>(r: &mut R, max: usize) -> Result<Vec<u8>, ProtocolError> {
    let mut header = [0u8; 4];
    let got = read_full(r, &mut header)?;
    if got == 0 {
        return Err(ProtocolError::Closed);
    }
    if got < 4 {
        return Err(ProtocolError::TruncatedHeader { got });
    }
    let len = u32::from_be_bytes(header) as usize;
    check_len(len, max)?;
    let mut body = vec![0u8; len];
    let got = read_full(r, &mut body)?;
    if got < len {
        return Err(ProtocolError::Truncated { expected: len, got });
    }
    Ok(body)
}

/// Reads until `buf` is full or end of stream; returns the count read.
fn read_full<R: Read + ?Sized>(r: &mut R, buf: &mut [u8]) -> Result<usize, ProtocolError> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // A peer closing without TLS close_notify is still a short read.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(n)
}

/// Writes one frame and flushes.
pub fn write_frame<W: Write + ?Sized>(
    w: &mut W,
    body: &[u8],
    max: usize,
) -> Result<(), ProtocolError> {
    w.write_all(&frame(body, max)?)?;
    w.flush()?;
    Ok(())
}

/// [`read_frame`] for tokio streams.
pub async fn read_frame_async<R: AsyncRead + Unpin + ?Sized>(
    r: &mut R,
    max: usize,
) -> Result<Vec<u8>, ProtocolError> {
    let mut header = [0u8; 4];
    let got = read_full_async(r, &mut header).await?;
    if got == 0 {
        return Err(ProtocolError::Closed);
    }
    if got < 4 {
        return Err(ProtocolError::TruncatedHeader { got });
    }
    let len = u32::from_be_bytes(header) as usize;
    check_len(len, max)?;
    let mut body = vec![0u8; len];
    let got = read_full_async(r, &mut body).await?;
    if got < len {
        return Err(ProtocolError::Truncated { expected: len, got });
    }
    Ok(body)
}

async fn read_full_async<R: AsyncRead + Unpin + ?Sized>(
    r: &mut R,
    buf: &mut [u8],
) -> Result<usize, ProtocolError> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]).await {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(n)
}

/// [`write_frame`] for tokio streams.
pub async fn write_frame_async<W: AsyncWrite + Unpin + ?Sized>(
    w: &mut W,
    body: &[u8],
    max: usize,
) -> Result<(), ProtocolError> {
    w.write_all(&frame(body, max)?).await?;
    w.flush().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Bodies

/// Serialises a message body (no frame header).
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, ProtocolError> {
    serde_json::to_vec(msg).map_err(|e| ProtocolError::Json(e.to_string()))
}

/// Strictly decodes a request body (see the module documentation).
pub fn decode_request(body: &[u8]) -> Result<Request, ProtocolError> {
    let req: Request = decode_strict(body)?;
    req.validate()?;
    Ok(req)
}

/// Strictly decodes a response body and checks its consistency.
pub fn decode_response(body: &[u8]) -> Result<Response, ProtocolError> {
    let resp: Response = decode_strict(body)?;
    resp.validate()?;
    Ok(resp)
}

fn decode_strict<T: de::DeserializeOwned>(body: &[u8]) -> Result<T, ProtocolError> {
    let text = std::str::from_utf8(body).map_err(|e| ProtocolError::InvalidUtf8 {
        at: e.valid_up_to(),
    })?;
    let obj = match parse_without_duplicates(text)? {
        Value::Object(m) => m,
        _ => return Err(ProtocolError::NotAnObject),
    };
    match obj.get("version") {
        None => return Err(ProtocolError::MissingVersion),
        Some(Value::Number(n)) if n.as_u64() == Some(u64::from(PROTOCOL_VERSION)) => {}
        Some(other) => return Err(ProtocolError::UnsupportedVersion(other.to_string())),
    }
    serde_json::from_value(Value::Object(obj)).map_err(|e| ProtocolError::Schema(e.to_string()))
}

/// Parses one JSON value, failing on a duplicate key in any object. The
/// stock `Value` keeps the last duplicate; a request whose fields a human
/// reads and a parser reads differently must not exist.
pub fn parse_without_duplicates(text: &str) -> Result<Value, ProtocolError> {
    let dup = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = StrictSeed { dup: &dup }.deserialize(&mut de);
    if let Some(key) = dup.into_inner() {
        return Err(ProtocolError::DuplicateKey(key));
    }
    let value = parsed.map_err(|e| ProtocolError::Json(e.to_string()))?;
    de.end().map_err(|e| ProtocolError::Json(e.to_string()))?;
    Ok(value)
}

#[derive(Clone, Copy)]
struct StrictSeed<'a> {
    dup: &'a RefCell<Option<String>>,
}

impl<'de> DeserializeSeed<'de> for StrictSeed<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("not a finite number"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                let msg = format!("duplicate key `{key}`");
                *self.dup.borrow_mut() = Some(key);
                return Err(de::Error::custom(msg));
            }
            let value = map.next_value_seed(self)?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

// ---------------------------------------------------------------------------
// Messages over streams

/// Reads and strictly decodes one request frame.
pub fn read_request<R: Read + ?Sized>(r: &mut R) -> Result<Request, ProtocolError> {
    decode_request(&read_frame(r, MAX_REQUEST_FRAME)?)
}

/// Validates, encodes and writes one request frame.
pub fn write_request<W: Write + ?Sized>(w: &mut W, req: &Request) -> Result<(), ProtocolError> {
    req.validate()?;
    write_frame(w, &encode(req)?, MAX_REQUEST_FRAME)
}

/// Reads and strictly decodes one response frame.
pub fn read_response<R: Read + ?Sized>(r: &mut R) -> Result<Response, ProtocolError> {
    decode_response(&read_frame(r, MAX_RESPONSE_FRAME)?)
}

/// Validates, encodes and writes one response frame; call
/// [`Response::fit_to`] first if the output may be large.
pub fn write_response<W: Write + ?Sized>(w: &mut W, resp: &Response) -> Result<(), ProtocolError> {
    resp.validate()?;
    write_frame(w, &encode(resp)?, MAX_RESPONSE_FRAME)
}

/// [`read_request`] for tokio streams: what the host calls after
/// [`server::accept`](crate::server::accept).
pub async fn read_request_async<R: AsyncRead + Unpin + ?Sized>(
    r: &mut R,
) -> Result<Request, ProtocolError> {
    decode_request(&read_frame_async(r, MAX_REQUEST_FRAME).await?)
}

/// [`write_request`] for tokio streams.
pub async fn write_request_async<W: AsyncWrite + Unpin + ?Sized>(
    w: &mut W,
    req: &Request,
) -> Result<(), ProtocolError> {
    req.validate()?;
    write_frame_async(w, &encode(req)?, MAX_REQUEST_FRAME).await
}

/// [`read_response`] for tokio streams.
pub async fn read_response_async<R: AsyncRead + Unpin + ?Sized>(
    r: &mut R,
) -> Result<Response, ProtocolError> {
    decode_response(&read_frame_async(r, MAX_RESPONSE_FRAME).await?)
}

/// [`write_response`] for tokio streams.
pub async fn write_response_async<W: AsyncWrite + Unpin + ?Sized>(
    w: &mut W,
    resp: &Response,
) -> Result<(), ProtocolError> {
    resp.validate()?;
    write_frame_async(w, &encode(resp)?, MAX_RESPONSE_FRAME).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        Request {
            version: PROTOCOL_VERSION,
            request_id: "4f2c1a9e-0d4b-4c7e-9a51-3b8e2f6d7c10".into(),
            session_id: "0b9f8e7d-6c5b-4a39-8271-605f4e3d2c1b".into(),
            profile: "dev".into(),
            timestamp: 1_700_000_000,
            cwd: "/workspace/sub".into(),
            command: "ls -la".into(),
            justification: "look".into(),
            delegation: "lzd1.x".into(),
            signature: "00".into(),
        }
    }

    #[test]
    fn request_round_trips() {
        let r = request();
        let body = encode(&r).unwrap();
        assert_eq!(decode_request(&body).unwrap(), r);
    }

    #[test]
    fn duplicate_keys_are_found_after_unescaping_and_at_depth() {
        let body = br#"{"a":1,"\u0061":2}"#;
        assert!(matches!(
            parse_without_duplicates(std::str::from_utf8(body).unwrap()),
            Err(ProtocolError::DuplicateKey(k)) if k == "a"
        ));
        assert!(matches!(
            parse_without_duplicates(r#"{"x":[{"b":1,"b":1}]}"#),
            Err(ProtocolError::DuplicateKey(k)) if k == "b"
        ));
        assert!(parse_without_duplicates(r#"{"x":[{"b":1},{"b":1}]}"#).is_ok());
    }

    #[test]
    fn response_round_trips_and_rejects_unknown_fields() {
        let r = Response::denied("4f2c1a9e-0d4b-4c7e-9a51-3b8e2f6d7c10", "no");
        let text = String::from_utf8(encode(&r).unwrap()).unwrap();
        assert_eq!(decode_response(text.as_bytes()).unwrap(), r);
        let extra = text.replacen('{', "{\"admin\":true,", 1);
        assert!(matches!(
            decode_response(extra.as_bytes()),
            Err(ProtocolError::Schema(_))
        ));
    }

    #[test]
    fn inconsistent_responses_are_refused() {
        let mut r = Response::approved("4f2c1a9e-0d4b-4c7e-9a51-3b8e2f6d7c10", 0, "", "");
        r.approved = false;
        assert!(matches!(r.validate(), Err(ProtocolError::Inconsistent(_))));
        let mut r = Response::denied("4f2c1a9e-0d4b-4c7e-9a51-3b8e2f6d7c10", "no");
        r.exit_code = Some(0);
        assert!(matches!(r.validate(), Err(ProtocolError::Inconsistent(_))));
        let r = Response::denied("", "no");
        assert!(matches!(r.validate(), Err(ProtocolError::Inconsistent(_))));
        assert!(Response::error("", "bad frame").validate().is_ok());
    }

    #[test]
    fn fit_to_trims_output_to_the_limit() {
        let mut r = Response::approved(
            "4f2c1a9e-0d4b-4c7e-9a51-3b8e2f6d7c10",
            0,
            "é\u{1}".repeat(5000),
            "x".repeat(100),
        );
        r.fit_to(4000).unwrap();
        assert!(encode(&r).unwrap().len() <= 4000);
        assert!(r.truncated);
        assert_eq!(r.stderr.len(), 100, "the shorter stream is kept");
        let mut small = Response::approved("4f2c1a9e-0d4b-4c7e-9a51-3b8e2f6d7c10", 0, "a", "b");
        small.fit_to(4000).unwrap();
        assert!(!small.truncated);
    }

    #[test]
    fn frames_check_length_before_reading() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"{}", 10).unwrap();
        assert_eq!(read_frame(&mut buf.as_slice(), 10).unwrap(), b"{}");
        let big = (11u32).to_be_bytes();
        assert!(matches!(
            read_frame(&mut &big[..], 10),
            Err(ProtocolError::Oversized { len: 11, max: 10 })
        ));
        assert!(matches!(
            read_frame(&mut &[0u8, 0][..], 10),
            Err(ProtocolError::TruncatedHeader { got: 2 })
        ));
        assert!(matches!(
            read_frame(&mut &[][..], 10),
            Err(ProtocolError::Closed)
        ));
        assert!(matches!(
            read_frame(&mut &[0u8, 0, 0, 5, b'{'][..], 10),
            Err(ProtocolError::Truncated {
                expected: 5,
                got: 1
            })
        ));
        assert!(matches!(
            read_frame(&mut &[0u8, 0, 0, 0][..], 10),
            Err(ProtocolError::Empty)
        ));
    }

    #[test]
    fn cwd_syntax_and_mapping() {
        for bad in [
            "",
            "workspace",
            "/workspace/",
            "/workspace//a",
            "/workspace/./a",
            "/workspace/../etc",
            "/workspace/a\nb",
        ] {
            assert!(check_sandbox_path(bad).is_err(), "{bad:?}");
        }
        let host = tempfile::tempdir().unwrap();
        std::fs::create_dir(host.path().join("sub")).unwrap();
        std::os::unix::fs::symlink("/etc", host.path().join("out")).unwrap();
        let root = host.path().canonicalize().unwrap();
        assert_eq!(
            map_cwd("/workspace", "/workspace", host.path()).unwrap(),
            root
        );
        assert_eq!(
            map_cwd("/workspace/sub", "/workspace", host.path()).unwrap(),
            root.join("sub")
        );
        assert!(matches!(
            map_cwd("/workspacex", "/workspace", host.path()),
            Err(CwdError::OutsideWorkspace { .. })
        ));
        assert!(matches!(
            map_cwd("/tmp", "/workspace", host.path()),
            Err(CwdError::OutsideWorkspace { .. })
        ));
        assert!(matches!(
            map_cwd("/workspace/out", "/workspace", host.path()),
            Err(CwdError::EscapesWorkspace(_))
        ));
        assert!(matches!(
            map_cwd("/workspace/missing", "/workspace", host.path()),
            Err(CwdError::Unresolvable(..))
        ));
    }
}
