//! Lowercase hex of digests (SHA-256 of tokens and submissions, HMAC tags), the form the
//! token file, the idempotency records and the webhook signatures store and compare.

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

#[cfg(test)]
mod tests {
    #[test]
    fn two_lowercase_digits_a_byte_as_format_gives_them() {
        let bytes: Vec<u8> = (0..=255).collect();
        let formatted: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(super::lower(&bytes), formatted);
        assert_eq!(super::lower(&[]), "");
    }
}
