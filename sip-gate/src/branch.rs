//! The gate's Via branches.
//!
//! The branch the gate writes into its Via is derived from the client's
//! transaction (so a retransmission or CANCEL carries the same branch
//! downstream) and carries a MAC, so a response can be recognised as
//! answering something the gate sent, even by a gate that restarted, and a
//! forged one cannot make the gate relay it (R-SEC-1).
//!
//! Form: `z9hG4bK-g<key><mac>`, each 16 lowercase hex digits.

use std::hash::Hasher;

use siphasher::sip::SipHasher13;

use crate::message::{SipMessage, Via};

/// Prefix of the branches of forwarded requests: the RFC 3261 magic cookie
/// and a marker.
pub(crate) const BRANCH_PREFIX: &str = "z9hG4bK-g";
/// Prefix of the branches of the gate's own health probes.
pub(crate) const PROBE_PREFIX: &str = "z9hG4bK-p";

/// Keys for transaction keys and branch MACs, from the site secret.
#[derive(Clone)]
pub(crate) struct BranchKey {
    k0: u64,
    k1: u64,
}

impl std::fmt::Debug for BranchKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BranchKey(..)")
    }
}

impl BranchKey {
    /// Derives the keys from the site secret.
    pub(crate) fn new(secret: &str) -> BranchKey {
        let mut bk0 = SipHasher13::new_with_keys(1, 2);
        bk0.write(secret.as_bytes());
        let mut bk1 = SipHasher13::new_with_keys(3, 4);
        bk1.write(secret.as_bytes());
        BranchKey {
            k0: bk0.finish(),
            k1: bk1.finish(),
        }
    }

    /// The transaction key: RFC 3261 branch when the client sent one with the
    /// magic cookie (17.2.3), else the RFC 2543 matching fields. ACK and
    /// CANCEL of an INVITE share the INVITE's key, as they share its branch.
    pub(crate) fn txn_key(&self, msg: &SipMessage, via: &Via<'_>) -> u64 {
        let mut h = SipHasher13::new_with_keys(self.k0, self.k1);
        match via.branch {
            Some(b) if b.len() > 7 && b[..7].eq_ignore_ascii_case(b"z9hG4bK") => {
                h.write(b);
                h.write_u8(0xff);
                h.write(via.host);
                h.write_u16(via.port.unwrap_or(0));
            }
            _ => {
                h.write(msg.raw().get(via.range.clone()).unwrap_or_default());
                h.write(msg.call_id().unwrap_or_default());
                h.write(msg.from_tag().unwrap_or_default());
                h.write(msg.to_tag().unwrap_or_default());
                h.write_u32(msg.cseq().map_or(0, |c| c.0));
            }
        }
        h.finish()
    }

    fn mac(&self, key: u64) -> u64 {
        let mut h = SipHasher13::new_with_keys(self.k1, self.k0);
        h.write_u64(key);
        h.finish()
    }

    /// Appends the branch for transaction `key` to `out`.
    pub(crate) fn write(&self, key: u64, out: &mut String) {
        out.push_str(BRANCH_PREFIX);
        push_hex(out, key);
        push_hex(out, self.mac(key));
    }

    /// The transaction key of a branch the gate made; `None` for any other
    /// branch, a forged one included.
    pub(crate) fn open(&self, branch: &[u8]) -> Option<u64> {
        let b = branch.strip_prefix(BRANCH_PREFIX.as_bytes())?;
        let (k, mac) = (b.get(..16)?, b.get(16..)?);
        let k = parse_hex(k)?;
        (parse_hex(mac)? == self.mac(k)).then_some(k)
    }
}

fn push_hex(s: &mut String, v: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for i in (0..16).rev() {
        s.push(HEX[((v >> (i * 4)) & 0xf) as usize] as char);
    }
}

fn parse_hex(b: &[u8]) -> Option<u64> {
    if b.len() != 16 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(b).ok()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branch_round_trip_and_forgery_r_sec_1() {
        let k = BranchKey::new("a-long-enough-site-secret");
        let mut b = String::new();
        k.write(0x0123_4567_89ab_cdef, &mut b);
        assert_eq!(b.len(), BRANCH_PREFIX.len() + 32);
        assert_eq!(k.open(b.as_bytes()), Some(0x0123_4567_89ab_cdef));
        // Another site's key, a flipped digit, a truncated MAC: refused.
        assert_eq!(
            BranchKey::new("another-site-secret-x").open(b.as_bytes()),
            None
        );
        let mut flipped = b.clone().into_bytes();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
        assert_eq!(k.open(&flipped), None);
        assert_eq!(k.open(&b.as_bytes()[..b.len() - 1]), None);
        assert_eq!(k.open(b"z9hG4bK-p0-1"), None);
    }
}
