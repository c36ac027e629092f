//! Lowercase hex, strict: one spelling per value, so signed text has one
//! encoding.

pub(crate) fn encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

/// Decodes exactly `N` bytes of lowercase hex; anything else is `None`.
pub(crate) fn decode<const N: usize>(s: &str) -> Option<[u8; N]> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    let bytes = s.as_bytes();
    if bytes.len() != N * 2 {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        out[i] = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
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
