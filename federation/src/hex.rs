//! Lowercase hex of digests (SHA-256 of tokens and submissions, HMAC tags), the form the
//! token file, the idempotency records and the webhook signatures store and compare, and
//! back to bytes where a record holds them as bytes.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// `bytes` as lowercase hex, two digits a byte. One string, not one per byte: every node
/// computes a submission's digest for every submission it applies and again when it replays
/// its log, and the server a token's for every authenticated request.
pub fn lower(bytes: &[u8]) -> String {
    let mut hex = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        hex.push(char::from(DIGITS[usize::from(b >> 4)]));
        hex.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    hex
}

/// The `N` bytes `hex` holds, written as [`lower`] writes them (exactly `2 * N` lowercase
/// digits); anything else is `None`, so what parses encodes back to the same string.
pub fn parse_lower<const N: usize>(hex: &str) -> Option<[u8; N]> {
    let digits = hex.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (o, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *o = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn two_lowercase_digits_a_byte_as_format_gives_them() {
        let bytes: Vec<u8> = (0..=255).collect();
        let formatted: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(super::lower(&bytes), formatted);
        assert_eq!(super::lower(&[]), "");
    }

    #[test]
    fn parsing_gives_back_what_lower_wrote_and_nothing_else() {
        let bytes: [u8; 4] = [0x00, 0x9f, 0xa0, 0xff];
        assert_eq!(super::parse_lower::<4>(&super::lower(&bytes)), Some(bytes));
        for bad in [
            "009fa0f",
            "009fa0fff",
            "009FA0FF",
            "009fa0fg",
            "009fa0\u{e9}",
        ] {
            assert_eq!(super::parse_lower::<4>(bad), None, "{bad}");
        }
    }
}
