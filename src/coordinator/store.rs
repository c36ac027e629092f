//! The state store (spec §4.4): a redb file in the Domain Root, opened only
//! by the Session Coordinator (redb locks it; a second opener fails fast).
//!
//! It keeps sessions, escalation requests and decisions, the request ids
//! already seen (replay protection), and the audit log. Audit records are
//! hash-chained: each holds the SHA-256 of the previous record, and its own
//! hash covers its sequence number, time, kind, data and that previous hash,
//! so an edited, removed or reordered record breaks the chain.
//!
//! Every call is synchronous; the coordinator runs them on tokio's blocking
//! pool (spec §4.4.2).

use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The schema this build writes.
pub const SCHEMA_VERSION: u64 = 2;

pub const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const SESSIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("sessions");
const REQUESTS: TableDefinition<&str, &[u8]> = TableDefinition::new("requests");
const DECISIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("decisions");
const SEEN_IDS: TableDefinition<&str, u64> = TableDefinition::new("seen_request_ids");
pub const AUDIT: TableDefinition<u64, &[u8]> = TableDefinition::new("audit_v2");

/// The hash before the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The kind of the record that starts a new segment of the audit chain
/// after a break found when the store was opened: it says where the chain
/// broke and why, and is chained to [`GENESIS`], not to the broken record,
/// so the records after it can be checked on their own. It never mends
/// the chain: `verify` still reports the break before it.
pub const SEGMENT_KIND: &str = "audit-chain-segment";

/// How many of the last audit records [`Store::open`] checks (the whole
/// chain is `audit --verify`'s): a few milliseconds whatever the store's
/// size, and more than any one session writes.
pub const OPEN_CHECK_RECORDS: usize = 4096;

/// The `meta` key holding the sequence number of the last segment record.
const META_SEGMENT: &str = "audit_segment";

/// A break in the audit chain, found when the store was opened (then, or
/// at an earlier opening: the segment record that followed says so).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainBreak {
    /// The first record found not to be what the chain says.
    pub seq: u64,
    /// What is wrong with it.
    pub why: String,
    /// The record that starts the new segment ([`SEGMENT_KIND`]): every
    /// record from it on was written after the break was found.
    pub segment: u64,
    /// When the break was found (seconds since the Unix epoch).
    pub found: u64,
}

impl std::fmt::Display for ChainBreak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the audit chain is broken at record {}: {}; the records from {} on are a new segment, started when the break was found",
            self.seq, self.why, self.segment
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "the state store {0} is open in another process (the Session Coordinator owns it); ask the coordinator instead, e.g. `lazaret audit`"
    )]
    Locked(PathBuf),
    #[error("state store {path}: {message}")]
    Db { path: PathBuf, message: String },
    #[error(
        "the state store {path} has schema version {found}, newer than this Lazaret ({SCHEMA_VERSION}); upgrade Lazaret"
    )]
    TooNew { path: PathBuf, found: u64 },
    #[error(
        "refusing to migrate {path}: its version 1 audit chain is broken at record {seq}: {why}"
    )]
    BrokenBeforeMigration {
        path: PathBuf,
        seq: u64,
        why: String,
    },
    #[error("a record in the state store is not valid: {0}")]
    Corrupt(String),
    #[error(
        "the state store {path} reached its cap of {cap_mib} MiB{kept}, so nothing more is recorded and host escalations are refused; stop the domain (`lazaret down`) and move the file aside to keep its audit log"
    )]
    Full {
        path: PathBuf,
        cap_mib: u64,
        /// Says so when the write was not a supervision record, refused
        /// at the reserve rather than the cap.
        kept: &'static str,
    },
}

/// The size the state store may reach before writes are refused
/// (decisions.md D9): requests are bounded in rate and stored size, so
/// only a long-lived domain comes near it.
pub const STORE_CAP: u64 = 256 << 20;

/// The audit records that say whether the domain was supervised: they may
/// use the reserve below the cap ([`Store::reserve`]), which everything
/// else (requests, decisions, refusals: what the agent can cause) stops
/// short of, so the agent's traffic cannot crowd them out.
pub const SUPERVISION_KINDS: &[&str] = &[
    "coordinator-start",
    "domain-up",
    "domain-down",
    "down-requested",
    "session-start",
    "session-end",
    "supervision-lost",
    "limit-memory",
    "limit-pids",
    "schema-migration",
];

/// The reserve is the cap's upper half. redb's file doubles as it grows,
/// so a bound on its size is a bound on doublings: the agent's kinds stop
/// once the file has reached half the cap, and that file's free half (a
/// quarter of the cap, 64 MiB by default) is left for supervision
/// records before it would double past the cap.
pub const RESERVE_FRACTION: u64 = 2;

pub fn is_supervision(kind: &str) -> bool {
    SUPERVISION_KINDS.contains(&kind)
}

/// One audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub seq: u64,
    /// Seconds since the Unix epoch.
    pub time: u64,
    /// What happened: `session-start`, `escalation-request`, `decision`, ...
    pub kind: String,
    pub data: serde_json::Value,
    pub prev_hash: String,
    pub hash: String,
}

impl AuditRecord {
    /// The record `seq` after one whose hash is `prev_hash`, hashed.
    pub fn chained(
        seq: u64,
        time: u64,
        kind: &str,
        data: serde_json::Value,
        prev_hash: String,
    ) -> AuditRecord {
        let hash = AuditRecord::compute_hash(seq, time, kind, &data, &prev_hash);
        AuditRecord {
            seq,
            time,
            kind: kind.to_string(),
            data,
            prev_hash,
            hash,
        }
    }

    /// The hash of a record's content and its predecessor's hash.
    pub fn compute_hash(
        seq: u64,
        time: u64,
        kind: &str,
        data: &serde_json::Value,
        prev: &str,
    ) -> String {
        let mut h = Sha256::new();
        h.update(b"lazaret-audit-v2\0");
        h.update(seq.to_be_bytes());
        h.update(time.to_be_bytes());
        for part in [
            kind.as_bytes(),
            &serde_json::to_vec(data).unwrap_or_default(),
            prev.as_bytes(),
        ] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part);
        }
        hex::encode(h.finalize())
    }
}

/// The outcome of [`Store::verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verification {
    /// Every record is intact; the count and the last hash.
    Intact { records: u64, head: String },
    /// The first record that is not what the chain says.
    Broken { seq: u64, why: String },
}

pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Checks a sequence of records read in key order.
pub fn verify_chain(records: impl IntoIterator<Item = (u64, AuditRecord)>) -> Verification {
    verify_run(records, 0)
}

/// Checks records read in key order that start a chain at `first` (0, or
/// a segment record), each chained to the one before it.
fn verify_run(records: impl IntoIterator<Item = (u64, AuditRecord)>, first: u64) -> Verification {
    let mut prev = GENESIS.to_string();
    let mut expected_seq = first;
    for (key, r) in records {
        let bad = |why: String| Verification::Broken { seq: key, why };
        if key != expected_seq {
            return Verification::Broken {
                seq: expected_seq,
                why: format!("record {expected_seq} is missing (next is {key})"),
            };
        }
        if r.seq != key {
            return bad(format!("it says it is record {}", r.seq));
        }
        if r.prev_hash != prev {
            return bad(
                "it does not follow the record before it (records removed or reordered)".into(),
            );
        }
        if AuditRecord::compute_hash(r.seq, r.time, &r.kind, &r.data, &r.prev_hash) != r.hash {
            return bad("its content does not match its hash (edited)".into());
        }
        prev = r.hash.clone();
        expected_seq += 1;
    }
    Verification::Intact {
        records: expected_seq - first,
        head: prev,
    }
}

/// What [`check_tail`] found.
#[derive(Debug, Default, PartialEq, Eq)]
struct TailCheck {
    /// The first break after the last segment record, if any: a break no
    /// segment says yet.
    unmarked: Option<(u64, String)>,
    /// The key of the last segment record in the tail.
    segment: Option<u64>,
}

/// Checks the last records of the chain (`tail`: keys and raw values in key
/// order, the oldest first). The first of them is taken on trust unless it
/// is record 0 (its predecessor is not read); a segment record starts the
/// chain anew, and a break before it is one it already says.
fn check_tail(tail: &[(u64, Vec<u8>)]) -> TailCheck {
    let mut out = TailCheck::default();
    // The hash the next record must name; `None`: not known (the first
    // record of a window, or one after a record that cannot be read).
    let mut prev: Option<String> = None;
    let mut expected: Option<u64> = None;
    // Only the first break after the last segment record counts.
    fn broken(out: &mut TailCheck, why: String, at: u64) {
        out.unmarked.get_or_insert((at, why));
    }
    for (key, bytes) in tail {
        let key = *key;
        if let Some(e) = expected
            && key != e
        {
            broken(
                &mut out,
                format!("record {e} is missing (next is {key})"),
                e,
            );
        }
        expected = Some(key + 1);
        let r: AuditRecord = match serde_json::from_slice(bytes) {
            Ok(r) => r,
            Err(e) => {
                broken(&mut out, format!("it cannot be read ({e})"), key);
                prev = None;
                continue;
            }
        };
        if r.kind == SEGMENT_KIND && r.prev_hash == GENESIS && key > 0 {
            // What came before is what this segment record already says.
            out.unmarked = None;
            out.segment = Some(key);
            prev = Some(GENESIS.to_string());
        } else if key == 0 {
            prev = Some(GENESIS.to_string());
        }
        if r.seq != key {
            broken(&mut out, format!("it says it is record {}", r.seq), key);
        } else if prev.as_ref().is_some_and(|p| *p != r.prev_hash) {
            broken(
                &mut out,
                "it does not follow the record before it (records removed or reordered)".into(),
                key,
            );
        } else if AuditRecord::compute_hash(r.seq, r.time, &r.kind, &r.data, &r.prev_hash) != r.hash
        {
            broken(
                &mut out,
                "its content does not match its hash (edited)".into(),
                key,
            );
        }
        prev = Some(r.hash);
    }
    out
}

/// Rows and audit records written together by [`Store::commit`].
#[derive(Debug, Default)]
pub struct Batch {
    /// Marked seen; a key seen before aborts the whole batch (a replay).
    pub first_sighting: Option<String>,
    /// Escalation requests, by request id.
    pub requests: Vec<(String, serde_json::Value)>,
    /// Decisions, by request id.
    pub decisions: Vec<(String, serde_json::Value)>,
    /// Client Sessions, by session id.
    pub sessions: Vec<(String, serde_json::Value)>,
    /// Audit records, appended in this order.
    pub audit: Vec<(&'static str, serde_json::Value)>,
}

impl Batch {
    /// Only sessions and supervision records: it may use the reserve.
    fn is_supervision(&self) -> bool {
        self.first_sighting.is_none()
            && self.requests.is_empty()
            && self.decisions.is_empty()
            && self.audit.iter().all(|(kind, _)| is_supervision(kind))
    }
}

/// The coordinator's handle on the store.
#[derive(Debug)]
pub struct Store {
    db: Database,
    path: PathBuf,
    cap: u64,
    /// The break in the audit chain found when the store was opened (now
    /// or before): `None` while the chain's tail is intact.
    chain_break: Option<ChainBreak>,
}

impl Store {
    /// Opens (or creates) the store, migrating an older schema in one
    /// transaction. Fails fast when another process has it open.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let db = match Database::create(path) {
            Ok(db) => db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                return Err(StoreError::Locked(path.to_path_buf()));
            }
            Err(e) => return Err(db_err(path, e)),
        };
        let mut store = Store {
            db,
            path: path.to_path_buf(),
            cap: STORE_CAP,
            chain_break: None,
        };
        store.migrate()?;
        store.chain_break = store.check_on_open()?;
        Ok(store)
    }

    /// The break in the audit chain found when the store was opened, now
    /// or at an earlier opening (see [`SEGMENT_KIND`]); `None` when the
    /// tail checked is intact and no segment was ever started.
    pub fn chain_break(&self) -> Option<&ChainBreak> {
        self.chain_break.as_ref()
    }

    /// Checks the chain's last [`OPEN_CHECK_RECORDS`] records. A break no
    /// segment record says yet gets one at once, before anything else can
    /// be appended, so no record is ever chained silently to a broken one.
    fn check_on_open(&self) -> Result<Option<ChainBreak>, StoreError> {
        let tail = {
            let tx = self.db.begin_read().map_err(|e| self.err(e))?;
            let audit = tx.open_table(AUDIT).map_err(|e| self.err(e))?;
            let mut tail = Vec::new();
            for item in audit
                .iter()
                .map_err(|e| self.err(e))?
                .rev()
                .take(OPEN_CHECK_RECORDS)
            {
                let (k, v) = item.map_err(|e| self.err(e))?;
                tail.push((k.value(), v.value().to_vec()));
            }
            tail.reverse();
            tail
        };
        let check = check_tail(&tail);
        if let Some((seq, why)) = check.unmarked {
            let next = tail.last().map_or(0, |(k, _)| k + 1);
            let found = now();
            let data = serde_json::json!({
                "broken_at": seq,
                "why": why,
                "checked_from": tail.first().map_or(0, |(k, _)| *k),
            });
            let record = AuditRecord::chained(next, found, SEGMENT_KIND, data, GENESIS.into());
            let bytes =
                serde_json::to_vec(&record).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            // Past the cap too: one small record, and without it nothing
            // could be appended honestly.
            let tx = self.db.begin_write().map_err(|e| self.err(e))?;
            {
                let mut audit = tx.open_table(AUDIT).map_err(|e| self.err(e))?;
                audit
                    .insert(next, bytes.as_slice())
                    .map_err(|e| self.err(e))?;
                let mut meta = tx.open_table(META).map_err(|e| self.err(e))?;
                meta.insert(META_SEGMENT, next).map_err(|e| self.err(e))?;
            }
            tx.commit().map_err(|e| self.err(e))?;
            return Ok(Some(ChainBreak {
                seq,
                why,
                segment: next,
                found,
            }));
        }
        // A segment started at an earlier opening: the break it says.
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let meta = tx.open_table(META).map_err(|e| self.err(e))?;
        let Some(segment) = check.segment.or(meta
            .get(META_SEGMENT)
            .map_err(|e| self.err(e))?
            .map(|v| v.value()))
        else {
            return Ok(None);
        };
        let audit = tx.open_table(AUDIT).map_err(|e| self.err(e))?;
        let record = audit
            .get(segment)
            .map_err(|e| self.err(e))?
            .and_then(|v| serde_json::from_slice::<AuditRecord>(v.value()).ok())
            .filter(|r| r.kind == SEGMENT_KIND);
        Ok(Some(match record {
            Some(r) => ChainBreak {
                seq: r.data["broken_at"].as_u64().unwrap_or(segment),
                why: r.data["why"].as_str().unwrap_or_default().to_string(),
                segment,
                found: r.time,
            },
            None => ChainBreak {
                seq: segment,
                why: "the record that started a new segment after an earlier break is gone".into(),
                segment,
                found: now(),
            },
        }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sets the size past which writes are refused (default [`STORE_CAP`]).
    pub fn with_cap(mut self, bytes: u64) -> Self {
        self.cap = bytes;
        self
    }

    /// The room below the cap kept for supervision records.
    pub fn reserve(&self) -> u64 {
        self.cap / RESERVE_FRACTION
    }

    /// Refuses a write once the file has reached its cap, or (unless
    /// `supervision`) the reserve below it.
    fn room(&self, supervision: bool) -> Result<(), StoreError> {
        let size = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        let (limit, kept) = if supervision {
            (self.cap, "")
        } else {
            (
                self.cap - self.reserve(),
                " (less the room kept for supervision records)",
            )
        };
        if size >= limit {
            return Err(StoreError::Full {
                path: self.path.clone(),
                cap_mib: self.cap >> 20,
                kept,
            });
        }
        Ok(())
    }

    fn err(&self, e: impl std::fmt::Display) -> StoreError {
        db_err(&self.path, e)
    }

    /// The schema version recorded in the file (0 for a new file).
    pub fn schema_version(&self) -> Result<u64, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let meta = match tx.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
            Err(e) => return Err(self.err(e)),
        };
        Ok(meta
            .get("schema_version")
            .map_err(|e| self.err(e))?
            .map_or(0, |v| v.value()))
    }

    fn migrate(&self) -> Result<(), StoreError> {
        let version = self.schema_version()?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                path: self.path.clone(),
                found: version,
            });
        }
        if version == SCHEMA_VERSION {
            return Ok(());
        }
        let tx = self.db.begin_write().map_err(|e| self.err(e))?;
        {
            // Create every table, so readers never meet a missing one.
            tx.open_table(SESSIONS).map_err(|e| self.err(e))?;
            tx.open_table(REQUESTS).map_err(|e| self.err(e))?;
            tx.open_table(DECISIONS).map_err(|e| self.err(e))?;
            tx.open_table(SEEN_IDS).map_err(|e| self.err(e))?;
            let mut audit = tx.open_table(AUDIT).map_err(|e| self.err(e))?;
            if version == 1 {
                v1::migrate_audit(&tx, &mut audit, &self.path)?;
            }
            let mut meta = tx.open_table(META).map_err(|e| self.err(e))?;
            meta.insert("schema_version", SCHEMA_VERSION)
                .map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Appends an audit record, chained to the last one.
    pub fn append(&self, kind: &str, data: serde_json::Value) -> Result<AuditRecord, StoreError> {
        self.room(is_supervision(kind))?;
        let tx = self.db.begin_write().map_err(|e| self.err(e))?;
        let record = {
            let mut audit = tx.open_table(AUDIT).map_err(|e| self.err(e))?;
            self.append_in(&mut audit, kind, data)?
        };
        tx.commit().map_err(|e| self.err(e))?;
        Ok(record)
    }

    fn append_in(
        &self,
        audit: &mut redb::Table<u64, &[u8]>,
        kind: &str,
        data: serde_json::Value,
    ) -> Result<AuditRecord, StoreError> {
        let (seq, prev) = match audit.last().map_err(|e| self.err(e))? {
            Some((k, v)) => {
                let r: AuditRecord = decode(v.value())?;
                (k.value() + 1, r.hash)
            }
            None => (0, GENESIS.to_string()),
        };
        // Whatever the kind: the agent's bytes are bounded here, where
        // every record passes (issue 40).
        let data = super::bounded::record(data);
        let record = AuditRecord::chained(seq, now(), kind, data, prev);
        let bytes = serde_json::to_vec(&record).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        audit
            .insert(seq, bytes.as_slice())
            .map_err(|e| self.err(e))?;
        Ok(record)
    }

    /// Writes everything in `batch` in one durable commit, or nothing:
    /// `Ok(false)` (and nothing written) when its replay key was seen
    /// before. One escalation request costs one `fdatasync` before its
    /// command runs, not one per row.
    pub fn commit(&self, batch: Batch) -> Result<bool, StoreError> {
        self.room(batch.is_supervision())?;
        let tx = self.db.begin_write().map_err(|e| self.err(e))?;
        {
            if let Some(key) = &batch.first_sighting {
                let mut t = tx.open_table(SEEN_IDS).map_err(|e| self.err(e))?;
                if t.get(key.as_str()).map_err(|e| self.err(e))?.is_some() {
                    drop(t);
                    tx.abort().map_err(|e| self.err(e))?;
                    return Ok(false);
                }
                t.insert(key.as_str(), now()).map_err(|e| self.err(e))?;
            }
            for (table, rows) in [
                (REQUESTS, &batch.requests),
                (DECISIONS, &batch.decisions),
                (SESSIONS, &batch.sessions),
            ] {
                if rows.is_empty() {
                    continue;
                }
                let mut t = tx.open_table(table).map_err(|e| self.err(e))?;
                for (key, value) in rows {
                    // Rows carry the agent's bytes too: bounded alike.
                    let value = super::bounded::record(value.clone());
                    let bytes = serde_json::to_vec(&value)
                        .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                    t.insert(key.as_str(), bytes.as_slice())
                        .map_err(|e| self.err(e))?;
                }
            }
            if !batch.audit.is_empty() {
                let mut audit = tx.open_table(AUDIT).map_err(|e| self.err(e))?;
                for (kind, data) in batch.audit {
                    self.append_in(&mut audit, kind, data)?;
                }
            }
        }
        tx.commit().map_err(|e| self.err(e))?;
        Ok(true)
    }

    /// Whether `request_id` was seen before (a read: nothing is written;
    /// [`Store::commit`] checks again as it marks it).
    pub fn seen(&self, request_id: &str) -> Result<bool, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = tx.open_table(SEEN_IDS).map_err(|e| self.err(e))?;
        Ok(t.get(request_id).map_err(|e| self.err(e))?.is_some())
    }

    /// Every audit record, in order (records that do not decode are errors).
    pub fn records(&self) -> Result<Vec<AuditRecord>, StoreError> {
        Ok(self.raw_records()?.into_iter().map(|(_, r)| r).collect())
    }

    fn raw_records(&self) -> Result<Vec<(u64, AuditRecord)>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let audit = tx.open_table(AUDIT).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for item in audit.iter().map_err(|e| self.err(e))? {
            let (k, v) = item.map_err(|e| self.err(e))?;
            out.push((k.value(), decode(v.value())?));
        }
        Ok(out)
    }

    /// Checks the whole audit chain. A break is reported where it is, with
    /// what became of the segment started after it, if any.
    pub fn verify(&self) -> Result<Verification, StoreError> {
        let v = self.verify_whole()?;
        let (Verification::Broken { seq, why }, Some(b)) = (&v, &self.chain_break) else {
            return Ok(v);
        };
        if b.segment <= *seq {
            return Ok(v);
        }
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let audit = tx.open_table(AUDIT).map_err(|e| self.err(e))?;
        let mut records = Vec::new();
        let mut unreadable = None;
        for item in audit.range(b.segment..).map_err(|e| self.err(e))? {
            let (k, v) = item.map_err(|e| self.err(e))?;
            match serde_json::from_slice::<AuditRecord>(v.value()) {
                Ok(r) => records.push((k.value(), r)),
                Err(e) => {
                    unreadable = Some((k.value(), e));
                    break;
                }
            }
        }
        let segment = match (verify_run(records, b.segment), unreadable) {
            (Verification::Broken { seq, why }, _) => {
                format!("itself broken at record {seq}: {why}")
            }
            (Verification::Intact { .. }, Some((seq, e))) => {
                format!("itself broken at record {seq}: it cannot be read ({e})")
            }
            (Verification::Intact { records, .. }, None) => format!("intact ({records} records)"),
        };
        Ok(Verification::Broken {
            seq: *seq,
            why: format!(
                "{why}; the new segment started at record {} when the break was found is {segment}",
                b.segment
            ),
        })
    }

    fn verify_whole(&self) -> Result<Verification, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let audit = tx.open_table(AUDIT).map_err(|e| self.err(e))?;
        let mut records = Vec::new();
        for item in audit.iter().map_err(|e| self.err(e))? {
            let (k, v) = item.map_err(|e| self.err(e))?;
            match serde_json::from_slice::<AuditRecord>(v.value()) {
                Ok(r) => records.push((k.value(), r)),
                Err(e) => {
                    // An unreadable record is a broken chain at that record.
                    let head = verify_chain(records);
                    return Ok(match head {
                        Verification::Broken { .. } => head,
                        Verification::Intact { .. } => Verification::Broken {
                            seq: k.value(),
                            why: format!("it cannot be read ({e})"),
                        },
                    });
                }
            }
        }
        Ok(verify_chain(records))
    }

    pub fn session(&self, id: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = tx.open_table(SESSIONS).map_err(|e| self.err(e))?;
        match t.get(id).map_err(|e| self.err(e))? {
            Some(v) => Ok(Some(decode(v.value())?)),
            None => Ok(None),
        }
    }

    /// Marks `request_id` as seen; `false` when it was seen before (a replay).
    /// Check and insert are one transaction.
    pub fn first_sighting(&self, request_id: &str) -> Result<bool, StoreError> {
        self.room(false)?;
        let tx = self.db.begin_write().map_err(|e| self.err(e))?;
        let fresh = {
            let mut t = tx.open_table(SEEN_IDS).map_err(|e| self.err(e))?;
            let seen = t.get(request_id).map_err(|e| self.err(e))?.is_some();
            if !seen {
                t.insert(request_id, now()).map_err(|e| self.err(e))?;
            }
            !seen
        };
        tx.commit().map_err(|e| self.err(e))?;
        Ok(fresh)
    }
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn db_err(path: &Path, e: impl std::fmt::Display) -> StoreError {
    StoreError::Db {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Schema version 1: the audit log as flat records with a free-text event
/// in table `audit`, chained with SHA-256 over `prev || seq || time || event`.
/// Version 2 gave records a kind and structured data; the migration checks
/// the v1 chain, converts each record and re-chains, and records where the
/// old chain ended.
pub mod v1 {
    use super::*;

    pub const AUDIT_V1: TableDefinition<u64, &[u8]> = TableDefinition::new("audit");

    #[derive(Debug, Clone, Serialize, Deserialize)]
    pub struct RecordV1 {
        pub seq: u64,
        pub time: u64,
        pub event: String,
        pub prev: String,
        pub hash: String,
    }

    pub fn hash_v1(seq: u64, time: u64, event: &str, prev: &str) -> String {
        let mut h = Sha256::new();
        h.update(prev.as_bytes());
        h.update(seq.to_be_bytes());
        h.update(time.to_be_bytes());
        h.update(event.as_bytes());
        hex::encode(h.finalize())
    }

    pub(super) fn migrate_audit(
        tx: &redb::WriteTransaction,
        audit: &mut redb::Table<u64, &[u8]>,
        path: &Path,
    ) -> Result<(), StoreError> {
        let old: Vec<RecordV1> = {
            let t = tx.open_table(AUDIT_V1).map_err(|e| db_err(path, e))?;
            let mut v = Vec::new();
            for item in t.iter().map_err(|e| db_err(path, e))? {
                let (_, val) = item.map_err(|e| db_err(path, e))?;
                v.push(decode::<RecordV1>(val.value())?);
            }
            v
        };
        let mut prev = GENESIS.to_string();
        for (i, r) in old.iter().enumerate() {
            let broken = |why: &str| StoreError::BrokenBeforeMigration {
                path: path.to_path_buf(),
                seq: i as u64,
                why: why.into(),
            };
            if r.seq != i as u64 {
                return Err(broken("records are missing or out of order"));
            }
            if r.prev != prev || hash_v1(r.seq, r.time, &r.event, &r.prev) != r.hash {
                return Err(broken("its hash does not match"));
            }
            prev = r.hash.clone();
        }
        let mut chain = GENESIS.to_string();
        let mut write =
            |seq: u64, time: u64, kind: &str, data: serde_json::Value| -> Result<(), StoreError> {
                let rec = AuditRecord::chained(seq, time, kind, data, chain.clone());
                let hash = rec.hash.clone();
                let bytes =
                    serde_json::to_vec(&rec).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                audit
                    .insert(seq, bytes.as_slice())
                    .map_err(|e| db_err(path, e))?;
                chain = hash;
                Ok(())
            };
        for r in &old {
            write(
                r.seq,
                r.time,
                "legacy-event",
                serde_json::json!({ "event": r.event, "v1_hash": r.hash }),
            )?;
        }
        write(
            old.len() as u64,
            now(),
            "schema-migration",
            serde_json::json!({ "from": 1, "to": 2, "v1_records": old.len(), "v1_head": prev }),
        )?;
        tx.delete_table(AUDIT_V1).map_err(|e| db_err(path, e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_store_refuses_writes_with_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let store = Store::open(&path).unwrap().with_cap(2 << 20);
        let big = "x".repeat(64 * 1024);
        let mut refused = None;
        for i in 0..200 {
            if let Err(e) = store.append("test", serde_json::json!({ "i": i, "pad": big })) {
                refused = Some(e);
                break;
            }
        }
        let e = refused.expect("the cap was never reached");
        assert!(matches!(e, StoreError::Full { .. }), "{e}");
        assert!(e.to_string().contains("reached its cap of 2 MiB"), "{e}");
        assert!(store.first_sighting("id").is_err());
        // What was written is intact.
        assert!(matches!(
            store.verify().unwrap(),
            Verification::Intact { .. }
        ));
        assert!(std::fs::metadata(&path).unwrap().len() < (2 << 20) + (1 << 20));
    }

    /// A batch may use the reserve only when every part of it is
    /// supervision: one request, decision, sighting or agent-caused audit
    /// record beside the sessions keeps it out.
    #[test]
    fn only_a_batch_of_supervision_alone_may_use_the_reserve() {
        let session = || Batch {
            sessions: vec![("s".into(), serde_json::json!({}))],
            audit: vec![("session-start", serde_json::json!({}))],
            ..Default::default()
        };
        assert!(session().is_supervision());
        assert!(Batch::default().is_supervision());
        let with_sighting = Batch {
            first_sighting: Some("k".into()),
            ..session()
        };
        let with_request = Batch {
            requests: vec![("r".into(), serde_json::json!({}))],
            ..session()
        };
        let with_decision = Batch {
            decisions: vec![("r".into(), serde_json::json!({}))],
            ..session()
        };
        let mut with_agent_record = session();
        with_agent_record
            .audit
            .push(("escalation-refused", serde_json::json!({})));
        for (what, b) in [
            ("a sighting", with_sighting),
            ("a request", with_request),
            ("a decision", with_decision),
            ("an agent-caused record", with_agent_record),
        ] {
            assert!(!b.is_supervision(), "a batch with {what} used the reserve");
        }
    }

    #[test]
    fn supervision_records_are_written_in_the_reserve() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let store = Store::open(&path).unwrap().with_cap(4 << 20);
        let big = "x".repeat(16 * 1024);
        // The agent's kinds of records fill the store up to the reserve.
        let refused = (0..1000)
            .find_map(|i| {
                store
                    .append(
                        "escalation-refused",
                        serde_json::json!({ "i": i, "pad": big }),
                    )
                    .err()
            })
            .expect("the reserve was never reached");
        assert!(
            refused.to_string().contains("less the room kept"),
            "{refused}"
        );
        let size = std::fs::metadata(&path).unwrap().len();
        assert!(size >= (4 << 20) - store.reserve(), "{size}");
        assert!(size < 4 << 20, "refused only at the cap: {size}");
        // Nothing the agent causes gets in any more...
        assert!(store.first_sighting("id").is_err());
        let request = Batch {
            first_sighting: Some("key".into()),
            audit: vec![("escalation-request", serde_json::json!({}))],
            ..Default::default()
        };
        assert!(store.commit(request).is_err());
        // ...while sessions, the watchdog and the domain's end still do.
        let session = Batch {
            sessions: vec![("s".into(), serde_json::json!({ "pid": 1 }))],
            audit: vec![("session-start", serde_json::json!({ "session_id": "s" }))],
            ..Default::default()
        };
        assert!(store.commit(session).unwrap());
        for kind in [
            "limit-memory",
            "supervision-lost",
            "session-end",
            "domain-down",
        ] {
            store.append(kind, serde_json::json!({})).unwrap();
        }
        let kinds: Vec<String> = store
            .records()
            .unwrap()
            .into_iter()
            .map(|r| r.kind)
            .collect();
        assert_eq!(kinds.last().map(String::as_str), Some("domain-down"));
        assert!(matches!(
            store.verify().unwrap(),
            Verification::Intact { .. }
        ));
        // The reserve is bounded too: the cap holds for supervision records.
        let refused = (0..1000)
            .find_map(|i| {
                store
                    .append("session-end", serde_json::json!({ "i": i, "pad": big }))
                    .err()
            })
            .expect("the cap was never reached");
        assert!(
            matches!(refused, StoreError::Full { kept: "", .. }),
            "{refused}"
        );
    }

    fn rec(seq: u64, prev: &str, kind: &str) -> AuditRecord {
        let data = serde_json::json!({ "n": seq });
        AuditRecord {
            seq,
            time: 1,
            kind: kind.into(),
            hash: AuditRecord::compute_hash(seq, 1, kind, &data, prev),
            data,
            prev_hash: prev.into(),
        }
    }

    /// A store of `n` records (one commit), closed.
    fn store_of(path: &Path, n: usize) {
        let store = Store::open(path).unwrap();
        let batch = Batch {
            audit: (0..n)
                .map(|i| ("test", serde_json::json!({ "i": i })))
                .collect(),
            ..Default::default()
        };
        assert!(store.commit(batch).unwrap());
    }

    /// Edits record `seq`'s data in place, its hash left as it was.
    fn forge(path: &Path, seq: u64) {
        let db = Database::open(path).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_table(AUDIT).unwrap();
            let mut r: AuditRecord = decode(t.get(seq).unwrap().unwrap().value()).unwrap();
            r.data = serde_json::json!({ "forged": true });
            t.insert(seq, serde_json::to_vec(&r).unwrap().as_slice())
                .unwrap();
        }
        tx.commit().unwrap();
    }

    #[test]
    fn an_intact_store_opens_without_a_segment() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        store_of(&path, 5);
        let store = Store::open(&path).unwrap();
        assert_eq!(store.chain_break(), None);
        assert_eq!(store.records().unwrap().len(), 5);
        // A new store too.
        let fresh = Store::open(&dir.path().join("new.redb")).unwrap();
        assert_eq!(fresh.chain_break(), None);
        assert!(fresh.records().unwrap().is_empty());
    }

    /// issue 41: a store whose chain broke while it was closed is found
    /// broken on opening; a segment record goes in before anything else,
    /// later records chain on from it, and the break stays reported.
    #[test]
    fn a_broken_chain_is_found_on_opening_and_a_new_segment_starts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        store_of(&path, 6);
        forge(&path, 3);
        let store = Store::open(&path).unwrap();
        let b = store
            .chain_break()
            .expect("the break was not found")
            .clone();
        assert_eq!((b.seq, b.segment), (3, 6), "{b:?}");
        assert_eq!(b.why, "its content does not match its hash (edited)");
        let records = store.records().unwrap();
        let segment = &records[6];
        assert_eq!(segment.kind, SEGMENT_KIND);
        assert_eq!(segment.prev_hash, GENESIS);
        assert_eq!(segment.data["broken_at"], 3);
        assert_eq!(segment.data["checked_from"], 0);
        // What comes next chains to the segment, not to the broken chain.
        let next = store.append("after", serde_json::json!({})).unwrap();
        assert_eq!(
            (next.seq, next.prev_hash.as_str()),
            (7, segment.hash.as_str())
        );
        // The whole chain stays broken where it broke; the segment is
        // checked on its own.
        let Verification::Broken { seq, why } = store.verify().unwrap() else {
            panic!("a broken chain verified");
        };
        assert_eq!(seq, 3);
        assert!(
            why.contains(
                "the new segment started at record 6 when the break was found is intact (2 records)"
            ),
            "{why}"
        );
        drop(store);
        // Opened again: the same break, from the segment's record, and no
        // second segment.
        let store = Store::open(&path).unwrap();
        assert_eq!(store.chain_break(), Some(&b));
        assert_eq!(store.records().unwrap().len(), 8);
        // A break inside the new segment is a new break, with a segment
        // of its own.
        drop(store);
        forge(&path, 7);
        let store = Store::open(&path).unwrap();
        let b2 = store.chain_break().unwrap();
        assert_eq!((b2.seq, b2.segment), (7, 8), "{b2:?}");
        let Verification::Broken { seq, why } = store.verify().unwrap() else {
            panic!("a broken chain verified");
        };
        assert_eq!(seq, 3, "{why}");
        assert!(why.contains("new segment started at record 8"), "{why}");
    }

    /// Each kind of break found on opening: a missing record, a reordered
    /// pair, an unreadable record (the last one: nothing could be chained
    /// to it at all), a record that says another number.
    #[test]
    fn every_kind_of_break_is_found_on_opening() {
        type Edit = fn(&mut redb::Table<u64, &[u8]>);
        let cases: [(Edit, u64, &str); 4] = [
            (
                |t| drop(t.remove(2).unwrap()),
                2,
                "record 2 is missing (next is 3)",
            ),
            (
                |t| {
                    let a = t.get(1).unwrap().unwrap().value().to_vec();
                    let b = t.get(2).unwrap().unwrap().value().to_vec();
                    t.insert(1, b.as_slice()).unwrap();
                    t.insert(2, a.as_slice()).unwrap();
                },
                1,
                "it says it is record 2",
            ),
            (
                |t| drop(t.insert(4, b"{not json".as_slice()).unwrap()),
                4,
                "it cannot be read",
            ),
            (
                |t| {
                    let mut r: AuditRecord = decode(t.get(1).unwrap().unwrap().value()).unwrap();
                    r.prev_hash = "f".repeat(64);
                    r.hash =
                        AuditRecord::compute_hash(r.seq, r.time, &r.kind, &r.data, &r.prev_hash);
                    t.insert(1, serde_json::to_vec(&r).unwrap().as_slice())
                        .unwrap();
                },
                1,
                "it does not follow the record before it",
            ),
        ];
        for (edit, seq, why) in cases {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("state.redb");
            store_of(&path, 5);
            {
                let db = Database::open(&path).unwrap();
                let tx = db.begin_write().unwrap();
                edit(&mut tx.open_table(AUDIT).unwrap());
                tx.commit().unwrap();
            }
            let store = Store::open(&path).unwrap();
            let b = store
                .chain_break()
                .unwrap_or_else(|| panic!("{why}: not found"));
            assert_eq!(b.seq, seq, "{why}: {b:?}");
            assert!(b.why.contains(why), "{why}: {b:?}");
            assert_eq!(b.segment, 5, "{why}: {b:?}");
            // Appending works after every kind, the unreadable last one too.
            let r = store.append("after", serde_json::json!({})).unwrap();
            assert_eq!(r.seq, 6, "{why}");
        }
    }

    /// Only a record of the segment kind that starts again from the
    /// genesis hash, after record 0, starts a segment: one of that kind
    /// chained as usual is an ordinary record, and a record that starts
    /// again from the genesis hash without being a segment is a break (a
    /// chain restarted mid-way to hide what came before).
    #[test]
    fn only_a_segment_record_starts_a_segment() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        {
            let store = Store::open(&path).unwrap();
            for kind in [SEGMENT_KIND, "x", SEGMENT_KIND, "y"] {
                store.append(kind, serde_json::json!({})).unwrap();
            }
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(store.chain_break(), None);
        assert!(matches!(
            store.verify().unwrap(),
            Verification::Intact { records: 4, .. }
        ));
        drop(store);
        // Record 3 re-chained from the genesis hash, its own hash right.
        {
            let db = Database::open(&path).unwrap();
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_table(AUDIT).unwrap();
                let r: AuditRecord = decode(t.get(3).unwrap().unwrap().value()).unwrap();
                let r = AuditRecord::chained(r.seq, r.time, &r.kind, r.data, GENESIS.into());
                t.insert(3, serde_json::to_vec(&r).unwrap().as_slice())
                    .unwrap();
            }
            tx.commit().unwrap();
        }
        let store = Store::open(&path).unwrap();
        let b = store
            .chain_break()
            .expect("a restarted chain was taken for a segment");
        assert_eq!((b.seq, b.segment), (3, 4), "{b:?}");
    }

    /// The check on opening reads the last [`OPEN_CHECK_RECORDS`] records
    /// and no more (bounded time whatever the store's size): a break just
    /// inside is found; one just before is `audit --verify`'s to find.
    #[test]
    fn the_check_on_opening_reads_only_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let n = OPEN_CHECK_RECORDS + 2;
        store_of(&path, n);
        let first_checked = (n - OPEN_CHECK_RECORDS) as u64;
        // The first record checked is taken on trust (its predecessor is
        // not read), so a break in its link alone is not seen; its content
        // is.
        forge(&path, first_checked);
        let store = Store::open(&path).unwrap();
        let b = store.chain_break().expect("a break in the tail").clone();
        assert_eq!(b.seq, first_checked);
        drop(store);
        let path = dir.path().join("older.redb");
        store_of(&path, n);
        forge(&path, first_checked - 1);
        let store = Store::open(&path).unwrap();
        // Not found on opening: the next record's link is taken on trust.
        assert_eq!(store.chain_break(), None);
        assert!(matches!(
            store.verify().unwrap(),
            Verification::Broken { seq, .. } if seq == first_checked - 1
        ));
    }

    #[test]
    fn chain_detects_edits_gaps_and_reordering() {
        let a = rec(0, GENESIS, "x");
        let b = rec(1, &a.hash, "y");
        let c = rec(2, &b.hash, "z");
        let ok = vec![(0, a.clone()), (1, b.clone()), (2, c.clone())];
        assert!(matches!(
            verify_chain(ok),
            Verification::Intact { records: 3, .. }
        ));
        let mut edited = b;
        edited.kind = "w".into();
        assert_eq!(
            verify_chain(vec![(0, a.clone()), (1, edited), (2, c.clone())]),
            Verification::Broken {
                seq: 1,
                why: "its content does not match its hash (edited)".into()
            }
        );
        assert!(matches!(
            verify_chain(vec![(0, a.clone()), (2, c.clone())]),
            Verification::Broken { seq: 1, .. }
        ));
        let mut b2 = c;
        b2.seq = 1;
        assert!(matches!(
            verify_chain(vec![(0, a), (1, b2)]),
            Verification::Broken { seq: 1, .. }
        ));
    }
}
