//! What one audit record may hold of the agent's bytes (issue 40): every
//! record the store writes, whatever its kind, passes through [`record`]
//! on its way in, so a new kind of record cannot reopen the flood of
//! round 4 (an impersonated Session Host's announced argv, 256 KiB a
//! record, stored whole). Callers bound what they know better first
//! (an escalation's command, a refusal's excerpt); this is the floor.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// A string field longer than this is stored as its SHA-256, its length
/// and its first bytes.
pub const FIELD_BYTES: usize = 4096;
/// A list (or object) keeps this many items; a last one counts the rest.
pub const FIELD_ITEMS: usize = 256;
/// Nesting kept; what is deeper is summed up.
pub const DEPTH: usize = 16;
/// One record's data at the most, serialized: over it (many fields each
/// within their bound), the whole is stored as its digest and a preview.
pub const RECORD_BYTES: usize = 64 << 10;

/// `text` whole when at most `max` bytes, else its SHA-256, length and
/// the first `max` bytes (cut at a character boundary).
pub fn text(text: &str, max: usize) -> Value {
    if text.len() <= max {
        return Value::String(text.to_string());
    }
    serde_json::json!({
        "sha256": sha256(text.as_bytes()),
        "bytes": text.len(),
        "preview": cut(text, max),
    })
}

/// `data` within the bounds above.
pub fn record(data: Value) -> Value {
    let v = value(data, 0);
    let whole = v.to_string();
    if whole.len() <= RECORD_BYTES {
        return v;
    }
    serde_json::json!({
        "bounded": format!("this record's data was {} bytes, over the {RECORD_BYTES} one record keeps", whole.len()),
        "sha256": sha256(whole.as_bytes()),
        "bytes": whole.len(),
        "preview": cut(&whole, FIELD_BYTES),
    })
}

fn value(v: Value, depth: usize) -> Value {
    match v {
        Value::String(s) => text(&s, FIELD_BYTES),
        Value::Array(items) if depth >= DEPTH => too_deep(&Value::Array(items)),
        Value::Object(map) if depth >= DEPTH => too_deep(&Value::Object(map)),
        Value::Array(items) => {
            let n = items.len();
            let mut out: Vec<Value> = items
                .into_iter()
                .take(FIELD_ITEMS)
                .map(|i| value(i, depth + 1))
                .collect();
            if n > FIELD_ITEMS {
                out.push(serde_json::json!({ "more_items": n - FIELD_ITEMS }));
            }
            Value::Array(out)
        }
        Value::Object(map) => {
            let n = map.len();
            let mut out: Map<String, Value> = map
                .into_iter()
                .take(FIELD_ITEMS)
                .map(|(k, v)| (cut(&k, FIELD_BYTES).to_string(), value(v, depth + 1)))
                .collect();
            if n > FIELD_ITEMS {
                out.insert("more_items".into(), (n - FIELD_ITEMS).into());
            }
            Value::Object(out)
        }
        other => other,
    }
}

fn too_deep(v: &Value) -> Value {
    let whole = v.to_string();
    serde_json::json!({
        "deeper_than": DEPTH,
        "sha256": sha256(whole.as_bytes()),
        "bytes": whole.len(),
    })
}

fn cut(text: &str, max: usize) -> &str {
    let mut at = max.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    &text[..at]
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_fits_is_kept_as_it_is() {
        let data = serde_json::json!({
            "argv": ["/bin/sh", "-c", "echo hi"], "n": 3, "ok": true, "none": null,
            "nested": {"a": [1, 2, {"b": "c"}]},
        });
        assert_eq!(record(data.clone()), data);
    }

    /// The adoption records of round 4: a 256 KiB argv word, ten thousand
    /// words, a deep nest, many mid-sized fields: each record stays within
    /// [`RECORD_BYTES`] and says what it held.
    #[test]
    fn every_record_is_bounded_whatever_it_holds() {
        let huge = record(serde_json::json!({ "argv": ["A".repeat(256 << 10), "é".repeat(5000)] }));
        let argv = &huge["argv"];
        assert_eq!(argv[0]["bytes"], 256 << 10);
        assert_eq!(argv[0]["preview"].as_str().unwrap().len(), FIELD_BYTES);
        assert!(argv[1]["preview"].as_str().unwrap().len() <= FIELD_BYTES);
        let many = record(serde_json::json!({ "argv": vec!["w"; 10_000] }));
        let items = many["argv"].as_array().unwrap();
        assert_eq!(items.len(), FIELD_ITEMS + 1);
        assert_eq!(items[FIELD_ITEMS]["more_items"], 10_000 - FIELD_ITEMS);
        let mut deep = Value::Null;
        for _ in 0..100 {
            deep = serde_json::json!([deep]);
        }
        assert!(record(deep).to_string().contains("deeper_than"));
        let wide = record(serde_json::json!({ "argv": vec!["x".repeat(4000); 200] }));
        assert!(wide.to_string().len() <= RECORD_BYTES);
        assert!(wide["bounded"].as_str().unwrap().contains("over the"));
    }

    /// Mutation check (issue 41, scripts/mutants store): each bound at its
    /// edge, for lists and objects alike, and what a cut field says of
    /// itself (its real digest, a preview cut at a character boundary).
    #[test]
    fn each_bound_holds_at_its_edge() {
        let list = |n: usize| record(serde_json::json!({ "l": vec![1; n] }));
        assert_eq!(
            list(FIELD_ITEMS)["l"].as_array().unwrap().len(),
            FIELD_ITEMS
        );
        let keys = |n: usize| {
            let map: Map<String, Value> =
                (0..n).map(|i| (format!("k{i}"), Value::from(i))).collect();
            record(serde_json::json!({ "o": map }))
        };
        assert_eq!(
            keys(FIELD_ITEMS)["o"].as_object().unwrap().len(),
            FIELD_ITEMS
        );
        let over = keys(FIELD_ITEMS + 44);
        assert_eq!(over["o"].as_object().unwrap().len(), FIELD_ITEMS + 1);
        assert_eq!(over["o"]["more_items"], 44);
        // Objects nest no deeper than lists do.
        let mut deep = Value::Null;
        for _ in 0..100 {
            deep = serde_json::json!({ "d": deep });
        }
        assert!(record(deep).to_string().contains("deeper_than"));
        let mut shallow = Value::Null;
        for _ in 0..DEPTH - 1 {
            shallow = serde_json::json!({ "d": shallow });
        }
        assert_eq!(record(shallow.clone()), shallow);
        // One byte, then two-byte characters: the bound falls inside one.
        let odd = format!("a{}", "é".repeat(5000));
        let cut = text(&odd, FIELD_BYTES);
        assert_eq!(cut["preview"].as_str().unwrap().len(), FIELD_BYTES - 1);
        assert_eq!(cut["sha256"], hex::encode(Sha256::digest(odd.as_bytes())));
        assert_eq!(cut["bytes"], odd.len());
    }

    /// Round 4's flood through the store itself: a hundred `session-adopt`
    /// records, each with a 256 KiB announced argv, as the coordinator
    /// wrote them. The file stays small, the chain verifies, and an
    /// escalation's records are still written after.
    #[test]
    fn the_store_bounds_every_record_it_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let store = super::super::store::Store::open(&path).unwrap();
        let argv = vec!["A".repeat(256 << 10)];
        // A hundred unbounded would be 25 MiB.
        for n in 0..100 {
            store
                .append(
                    "session-adopt",
                    serde_json::json!({ "session_id": "x", "hosted": n, "argv": argv }),
                )
                .unwrap();
        }
        let size = std::fs::metadata(&path).unwrap().len();
        eprintln!("100 adoption records: {} KiB", size >> 10);
        assert!(size < 16 << 20, "the store grew to {} MiB", size >> 20);
        store
            .append(
                "escalation-request",
                serde_json::json!({ "command": "date" }),
            )
            .unwrap();
        assert!(matches!(
            store.verify().unwrap(),
            super::super::store::Verification::Intact { records: 101, .. }
        ));
    }
}
