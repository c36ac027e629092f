//! Lowercase hex, strict: one spelling per value, so signed text has one
//! encoding. The `hex` crate does the work; this module adds the rule.

pub(crate) fn encode(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// Decodes exactly `N` bytes of lowercase hex; anything else (uppercase
/// included) is `None`.
pub(crate) fn decode<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trip_and_strictness() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(super::encode(&b), "0001abff");
        assert_eq!(super::decode::<4>("0001abff"), Some(b));
        assert_eq!(super::decode::<4>("0001ABFF"), None, "uppercase");
        assert_eq!(super::decode::<4>("0001abf"), None, "short");
        assert_eq!(super::decode::<4>("0001abff00"), None, "long");
        assert_eq!(super::decode::<4>("0001abfg"), None, "not hex");
    }
}
