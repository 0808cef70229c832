//! The gate's Via branches.
//!
//! The branch the gate writes into its Via is derived from the client's
//! transaction (so a retransmission or CANCEL carries the same branch
//! downstream) and carries a MAC, so a response can be recognised as
//! answering something the gate sent, even by a gate that restarted, and a
//! forged one cannot make the gate relay it (R-SEC-1).
//!
//! Form: `z9hG4bK-g<key><mac>`, each 16 lowercase hex digits. The MAC is
//! SipHash-2-4 of the 64-bit key under a key derived for this use (like
//! the kernel's SYN cookies: a short-lived value checked on the way back).
//! Every relayed response checks one, so it is the cheap PRF, not BLAKE3;
//! a branch lives only as long as its transaction, and a gate stops with
//! its transactions done (R-GW-1), so a restarted gate meets no branch made
//! with another MAC.

use std::hash::Hasher;

use siphasher::sip::{SipHasher13, SipHasher24};

use crate::digits::AsciiOut;
use crate::keys::{self, Key, Purpose};
use crate::message::{Method, SipMessage, Via};

/// Prefix of the branches of forwarded requests: the RFC 3261 magic cookie
/// and a marker.
pub(crate) const BRANCH_PREFIX: &str = "z9hG4bK-g";
/// Prefix of the branches of the gate's own health probes.
pub(crate) const PROBE_PREFIX: &str = "z9hG4bK-p";

/// Keys for transaction keys and branch MACs, from the site secret.
#[derive(Clone, Debug)]
pub(crate) struct BranchKey {
    /// SipHash keys of the transaction table's keys (a client cannot aim
    /// its branches at one bucket).
    txn: (u64, u64),
    /// SipHash keys of the branch MACs.
    mac: (u64, u64),
}

impl BranchKey {
    /// Derives the keys from the site secret ([`crate::keys`]).
    pub(crate) fn new(secret: &str) -> BranchKey {
        BranchKey {
            txn: Key::derive(secret, Purpose::TxnKey).words(),
            mac: Key::derive(secret, Purpose::BranchMac).words(),
        }
    }

    /// The transaction key: RFC 3261 branch and sent-by when the client sent
    /// a branch with the magic cookie, and the method (17.2.3: an INVITE
    /// that reuses an OPTIONS' branch is another transaction), else the RFC
    /// 2543 matching fields. ACK and CANCEL of an INVITE share the INVITE's
    /// key, as they share its branch, so they follow it.
    pub(crate) fn txn_key(&self, msg: &SipMessage, via: &Via<'_>) -> u64 {
        let mut h = SipHasher13::new_with_keys(self.txn.0, self.txn.1);
        let method = match msg.method() {
            Some(Method::Ack | Method::Cancel) => &b"INVITE"[..],
            _ => msg.method_bytes(),
        };
        h.write(method);
        h.write_u8(0xff);
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

    fn mac(&self, key: u64) -> [u8; 8] {
        let mut h = SipHasher24::new_with_keys(self.mac.0, self.mac.1);
        h.write(&key.to_be_bytes());
        h.finish().to_be_bytes()
    }

    /// Appends the branch for transaction `key` to `out`.
    pub(crate) fn write(&self, key: u64, out: &mut impl AsciiOut) {
        out.push_str(BRANCH_PREFIX);
        keys::push_hex(out, &key.to_be_bytes());
        keys::push_hex(out, &self.mac(key));
    }

    /// The transaction key of a branch the gate made; `None` for any other
    /// branch, a forged one included. The MAC is compared in constant time.
    pub(crate) fn open(&self, branch: &[u8]) -> Option<u64> {
        let b = branch.strip_prefix(BRANCH_PREFIX.as_bytes())?;
        let (k, mac) = (b.get(..16)?, b.get(16..)?);
        let k = u64::from_be_bytes(keys::parse_hex::<8>(k)?);
        let mac = keys::parse_hex::<8>(mac)?;
        keys::same(&self.mac(k), &mac).then_some(k)
    }
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
