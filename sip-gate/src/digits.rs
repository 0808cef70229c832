//! Numbers and addresses written straight into a byte buffer. The forward
//! path writes a few per message (Max-Forwards, `received`, `rport`,
//! Content-Length); `core::fmt` and a `String` per number cost more than
//! the rest of the splice.

use std::io::Write as _;
use std::net::IpAddr;

/// Appends `n` in decimal.
/// A buffer ASCII text is appended to: a `String`, or the bytes a splice
/// writes its new header lines into ([`crate::edit::Splice::replace_with`]),
/// so the same writers serve both.
pub(crate) trait AsciiOut {
    /// Appends `s`.
    fn push_str(&mut self, s: &str);
    /// Appends one ASCII byte.
    fn push_ascii(&mut self, b: u8);
    /// Appends bytes that are all ASCII (others are left out of a `String`).
    fn push_ascii_bytes(&mut self, b: &[u8]);
}

impl AsciiOut for String {
    fn push_str(&mut self, s: &str) {
        String::push_str(self, s);
    }
    fn push_ascii(&mut self, b: u8) {
        self.push(char::from(b));
    }
    fn push_ascii_bytes(&mut self, b: &[u8]) {
        if let Ok(s) = std::str::from_utf8(b) {
            String::push_str(self, s);
        }
    }
}

impl AsciiOut for Vec<u8> {
    fn push_str(&mut self, s: &str) {
        self.extend_from_slice(s.as_bytes());
    }
    fn push_ascii(&mut self, b: u8) {
        self.push(b);
    }
    fn push_ascii_bytes(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
}

pub(crate) fn push_decimal(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        // `n % 10` is below 10: the cast cannot truncate.
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Appends `ip` as `Display` writes it (no brackets around IPv6).
pub(crate) fn push_ip(out: &mut Vec<u8>, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            // Each octet's digits from a table, written on the stack four
            // bytes at a time (the dot after it too), then copied once:
            // every forwarded request's `received` is one.
            let mut text = [0u8; 16];
            let mut len = 0;
            for octet in v4.octets() {
                let (digits, n) = OCTETS[usize::from(octet)];
                if let Some(slot) = text.get_mut(len..len + 4) {
                    slot.copy_from_slice(&digits);
                }
                len += usize::from(n);
            }
            // Less the dot after the last octet.
            out.extend_from_slice(text.get(..len.saturating_sub(1)).unwrap_or_default());
        }
        // Rare on the forward path; writing into a Vec cannot fail.
        IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

/// Each octet's decimal digits followed by a dot, and how many of the
/// four bytes that is.
const OCTETS: [([u8; 4], u8); 256] = {
    let mut t = [([0u8; 4], 0u8); 256];
    let mut i = 0;
    while i < 256 {
        let n = i as u8;
        t[i] = if n >= 100 {
            ([b'0' + n / 100, b'0' + n / 10 % 10, b'0' + n % 10, b'.'], 4)
        } else if n >= 10 {
            ([b'0' + n / 10, b'0' + n % 10, b'.', 0], 3)
        } else {
            ([b'0' + n, b'.', 0, 0], 2)
        };
        i += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn decimals_and_addresses_match_display(n: u64, a: [u8; 4], b: [u16; 8]) {
            let mut out = Vec::new();
            push_decimal(&mut out, n);
            prop_assert_eq!(out, n.to_string().into_bytes());
            for ip in [IpAddr::from(a), IpAddr::from(b)] {
                let mut out = Vec::new();
                push_ip(&mut out, ip);
                prop_assert_eq!(out, ip.to_string().into_bytes());
            }
        }
    }

    /// Every octet value in every position of an address.
    #[test]
    fn every_octet_is_written_as_display_writes_it() {
        for n in 0..=255u8 {
            for ip in [[n, 0, 0, 0], [1, n, 22, 255], [100, 9, n, 10], [0, 0, 0, n]] {
                let ip = IpAddr::from(ip);
                let mut out = b"x".to_vec();
                push_ip(&mut out, ip);
                assert_eq!(out, format!("x{ip}").into_bytes());
            }
        }
    }
}
