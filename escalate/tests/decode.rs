//! Properties of frame and body decoding: no input makes it panic, valid
//! requests round-trip, and every way of bending a valid frame (cutting,
//! duplicating a key, adding a field, overstating the length) is refused.

use lazaret_escalate::protocol::{
    self, MAX_REQUEST_FRAME, PROTOCOL_VERSION, ProtocolError, Request, decode_request,
    decode_response, read_frame,
};
use proptest::prelude::*;

const FIELDS: &[&str] = &[
    "version",
    "request_id",
    "session_id",
    "profile",
    "timestamp",
    "cwd",
    "command",
    "justification",
    "delegation",
    "signature",
];

fn uuid_text() -> impl Strategy<Value = String> {
    any::<[u8; 16]>().prop_map(|b| uuid::Uuid::from_bytes(b).hyphenated().to_string())
}

fn request() -> impl Strategy<Value = Request> {
    (
        uuid_text(),
        uuid_text(),
        "[a-z0-9_-]{2,32}",
        any::<u64>(),
        "(/[a-z.]{0,3}[a-z]){0,3}",
        "[^\0]{0,40}[a-z][^\0]{0,40}",
        ".{0,60}",
        "[ -~]{0,100}",
        "[ -~]{0,100}",
    )
        .prop_map(
            |(request_id, session_id, profile, timestamp, sub, command, justification, d, s)| {
                Request {
                    version: PROTOCOL_VERSION,
                    request_id,
                    session_id,
                    profile,
                    timestamp,
                    cwd: format!("/workspace{sub}"),
                    command,
                    justification,
                    delegation: d,
                    signature: s,
                }
            },
        )
}

fn body(r: &Request) -> String {
    String::from_utf8(protocol::encode(r).unwrap()).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = decode_request(&bytes);
        let _ = decode_response(&bytes);
        let _ = read_frame(&mut bytes.as_slice(), 256);
    }

    #[test]
    fn json_shaped_text_never_panics(s in "[{}\\[\\]\":,0-9a-z\\\\ ]{0,200}") {
        let _ = decode_request(s.as_bytes());
        let _ = protocol::parse_without_duplicates(&s);
    }

    #[test]
    fn valid_requests_round_trip_through_frames(r in request()) {
        prop_assume!(r.cwd.split('/').all(|c| c != "." && c != ".."));
        prop_assume!(!r.command.trim().is_empty());
        let mut wire = Vec::new();
        protocol::write_request(&mut wire, &r).unwrap();
        prop_assert_eq!(protocol::read_request(&mut wire.as_slice()).unwrap(), r);
    }

    #[test]
    fn every_cut_of_a_frame_is_refused(r in request(), cut in any::<proptest::sample::Index>()) {
        prop_assume!(r.validate().is_ok());
        let mut wire = Vec::new();
        protocol::write_request(&mut wire, &r).unwrap();
        let n = cut.index(wire.len());
        let e = protocol::read_request(&mut &wire[..n]).unwrap_err();
        prop_assert!(matches!(
            e,
            ProtocolError::Closed | ProtocolError::TruncatedHeader { .. } | ProtocolError::Truncated { .. }
        ), "{:?}", e);
    }

    #[test]
    fn a_repeated_field_is_always_a_duplicate(
        r in request(),
        which in proptest::sample::select(FIELDS),
        value in prop_oneof![Just("1".to_string()), "\"[a-z]{0,5}\"", Just("null".to_string())],
        front in any::<bool>(),
    ) {
        let text = body(&r);
        let extra = format!("\"{which}\":{value}");
        let twisted = if front {
            text.replacen('{', &format!("{{{extra},"), 1)
        } else {
            format!("{},{extra}}}", &text[..text.len() - 1])
        };
        match decode_request(twisted.as_bytes()) {
            Err(ProtocolError::DuplicateKey(k)) => prop_assert_eq!(k, which),
            other => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn an_unknown_field_is_always_refused(r in request(), key in "[a-z_]{1,12}") {
        prop_assume!(r.validate().is_ok());
        prop_assume!(!FIELDS.contains(&key.as_str()));
        let text = body(&r).replacen('{', &format!("{{\"{key}\":0,"), 1);
        let e = decode_request(text.as_bytes()).unwrap_err();
        prop_assert!(matches!(e, ProtocolError::Schema(_)), "{:?}", e);
    }

    #[test]
    fn overstated_lengths_are_refused_before_reading(
        len in (MAX_REQUEST_FRAME as u32 + 1)..=u32::MAX,
        tail in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut wire = len.to_be_bytes().to_vec();
        wire.extend_from_slice(&tail);
        let e = protocol::read_request(&mut wire.as_slice()).unwrap_err();
        prop_assert!(matches!(e, ProtocolError::Oversized { .. }), "{:?}", e);
    }
}
