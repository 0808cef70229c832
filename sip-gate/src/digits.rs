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
            // Written on the stack, then copied once: every forwarded
            // request's `received` is one.
            let mut text = [0u8; 15];
            let mut len = 0;
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    if let Some(dot) = text.get_mut(len) {
                        *dot = b'.';
                    }
                    len += 1;
                }
                let (h, t, u) = (octet / 100, octet / 10 % 10, octet % 10);
                let digits = [b'0' + h, b'0' + t, b'0' + u];
                let skip = match octet {
                    0..=9 => 2,
                    10..=99 => 1,
                    _ => 0,
                };
                for &d in digits.get(skip..).unwrap_or_default() {
                    if let Some(slot) = text.get_mut(len) {
                        *slot = d;
                    }
                    len += 1;
                }
            }
            out.extend_from_slice(text.get(..len).unwrap_or_default());
        }
        // Rare on the forward path; writing into a Vec cannot fail.
        IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

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
}
