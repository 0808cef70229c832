//! The gate's secret keys, all derived from the site secret.
//!
//! Every gate node of a site holds the same secret, so each one derives the
//! same keys and reads the others' tokens and branches (R-GW-2). Each use has
//! its own key, derived with BLAKE3's key derivation function (`derive_key`
//! with a context string per use): a MAC made for one purpose (a branch, say)
//! never verifies as another (a Record-Route token). The MACs are BLAKE3
//! keyed hashes, truncated ([`Key::mac`]), except the Via branch's, which is
//! SipHash-2-4 under its own key ([`crate::branch`]); all are checked with
//! a constant-time comparison so the time a check takes tells nothing about
//! how many bytes matched.

use subtle::ConstantTimeEq;

use crate::digits::AsciiOut;

/// The hasher of the tables keyed by hashes made with keys from here (the
/// transaction table, the work book's dialogs and bindings). Their keys are
/// keyed SipHash-1-3 values of what peers send (Call-IDs, tags, branches):
/// without the site secret a peer cannot choose them, let alone aim them
/// at one bucket, so the table's own hash need not be SipHash again to stay
/// safe from HashDoS. foldhash's `RandomState` is still seeded per process
/// and per table, and costs a few instructions where SipHash cost a hundred.
pub(crate) type TableHasher = foldhash::fast::RandomState;

/// The longest input [`Key::mac`] hashes from a stack buffer in one call
/// (a Call-ID and an instance id fit, as do a branch and a flow).
const ONE_SHOT: usize = 256;

/// A 256-bit key for one purpose.
#[derive(Clone)]
pub(crate) struct Key([u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

/// What a key is for; each names its own KDF context.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Purpose {
    /// Record-Route tokens ([`crate::token`]).
    RouteToken,
    /// MACs of the gate's Via branches ([`crate::branch`]).
    BranchMac,
    /// Transaction keys hashed from the client's branch ([`crate::branch`]).
    TxnKey,
    /// To tags of the responses the gate makes ([`crate::reply`]).
    ReplyTag,
    /// Keys of the work book's tables ([`crate::work`]): the same on every
    /// gate node of a site and across restarts, so a work snapshot reads back.
    WorkBook,
    /// Flow tokens in the Path and Record-Route of subscribers' flows
    /// ([`crate::flow`]).
    FlowToken,
}

impl Purpose {
    fn context(self) -> &'static str {
        match self {
            Purpose::RouteToken => "sip-gate 2026-11 record-route token v2",
            Purpose::BranchMac => "sip-gate 2026-12 via branch mac v3",
            Purpose::TxnKey => "sip-gate 2026-11 transaction key v2",
            Purpose::ReplyTag => "sip-gate 2026-11 reply to-tag v2",
            Purpose::WorkBook => "sip-gate 2026-11 work book keys v1",
            Purpose::FlowToken => "sip-gate 2026-11 subscriber flow token v1",
        }
    }
}

impl Key {
    /// The key for `purpose` from the site secret.
    pub(crate) fn derive(secret: &str, purpose: Purpose) -> Key {
        Key(blake3::derive_key(purpose.context(), secret.as_bytes()))
    }

    /// The first `N` (at most 32) bytes of the keyed BLAKE3 hash of
    /// `parts`, written one after the other (callers keep them unambiguous).
    pub(crate) fn mac<const N: usize>(&self, parts: &[&[u8]]) -> [u8; N] {
        const { assert!(N <= blake3::OUT_LEN) };
        // Most MACs cover a few dozen bytes: hashed in one call from a
        // buffer on the stack, which BLAKE3 defines to be the same as
        // streaming the parts, without the incremental hasher's setup.
        let mut buf = [0u8; ONE_SHOT];
        let mut len = 0usize;
        for p in parts {
            match buf.get_mut(len..len.saturating_add(p.len())) {
                Some(dst) => dst.copy_from_slice(p),
                None => return self.mac_streamed(parts),
            }
            len += p.len();
        }
        let hash = blake3::keyed_hash(&self.0, buf.get(..len).unwrap_or_default());
        let mut out = [0u8; N];
        out.copy_from_slice(&hash.as_bytes()[..N]);
        out
    }

    /// [`Key::mac`] of parts too long for its buffer.
    #[cold]
    fn mac_streamed<const N: usize>(&self, parts: &[&[u8]]) -> [u8; N] {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        for p in parts {
            h.update(p);
        }
        let hash = h.finalize();
        let mut out = [0u8; N];
        out.copy_from_slice(&hash.as_bytes()[..N]);
        out
    }

    /// Two 64-bit words of key material (a SipHash key).
    pub(crate) fn words(&self) -> (u64, u64) {
        let [a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, ..] = self.0;
        (
            u64::from_le_bytes([a, b, c, d, e, f, g, h]),
            u64::from_le_bytes([i, j, k, l, m, n, o, p]),
        )
    }
}

/// Constant-time equality of two MACs (a length mismatch is not secret).
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// Lowercase hex of `bytes`, appended to `out`.
pub(crate) fn push_hex(out: &mut impl AsciiOut, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // A run of digits written on the stack, then appended in one copy.
    let mut text = [0u8; 64];
    for chunk in bytes.chunks(text.len() / 2) {
        for (pair, b) in text.chunks_exact_mut(2).zip(chunk) {
            pair[0] = HEX[usize::from(b >> 4)];
            pair[1] = HEX[usize::from(b & 0xf)];
        }
        out.push_ascii_bytes(text.get(..2 * chunk.len()).unwrap_or_default());
    }
}

/// Decodes exactly `2 * N` hex digits (either case).
pub(crate) fn parse_hex<const N: usize>(hex: &[u8]) -> Option<[u8; N]> {
    if hex.len() != 2 * N {
        return None;
    }
    // One table lookup a digit: `char::to_digit` takes any radix and cost
    // twice the instructions on every response's branch, a `match` on
    // ranges half again as much as this.
    let mut out = [0u8; N];
    for (o, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        let (hi, lo) = (
            HEX_VALUE[usize::from(pair[0])],
            HEX_VALUE[usize::from(pair[1])],
        );
        if (hi | lo) > 0x0f {
            return None;
        }
        *o = hi << 4 | lo;
    }
    Some(out)
}

/// The value of a hex digit (either case); 0xff for any other byte.
const HEX_VALUE: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-call MAC is the streamed one, at every length around the
    /// buffer's and for any split into parts; hex reads back what it wrote
    /// and refuses any non-digit.
    #[test]
    fn one_shot_mac_is_the_streamed_one_and_hex_round_trips() {
        let k = Key::derive("a-long-enough-site-secret", Purpose::RouteToken);
        let data: Vec<u8> = (0..600u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [
            0,
            1,
            63,
            64,
            65,
            200,
            ONE_SHOT - 1,
            ONE_SHOT,
            ONE_SHOT + 1,
            600,
        ] {
            let d = &data[..len];
            let whole: [u8; 16] = k.mac(&[d]);
            let split: [u8; 16] = k.mac(&[&d[..len / 3], b"", &d[len / 3..]]);
            let streamed: [u8; 16] = k.mac_streamed(&[d]);
            assert_eq!(whole, streamed, "{len}");
            assert_eq!(split, streamed, "{len}");
        }
        let mut hex = String::new();
        push_hex(&mut hex, &data[..32]);
        assert_eq!(
            parse_hex::<32>(hex.as_bytes()),
            Some(<[u8; 32]>::try_from(&data[..32]).unwrap())
        );
        assert_eq!(
            parse_hex::<32>(hex.to_ascii_uppercase().as_bytes()),
            parse_hex::<32>(hex.as_bytes())
        );
        for bad in [b'g', b'G', b'/', b':', b'@', b'`', b' ', 0, 0xff] {
            let mut h = hex.clone().into_bytes();
            h[5] = bad;
            assert_eq!(parse_hex::<32>(&h), None, "{bad}");
        }
    }

    #[test]
    fn purposes_get_different_keys_and_macs() {
        let s = "a-long-enough-site-secret";
        let macs: Vec<[u8; 8]> = [
            Purpose::RouteToken,
            Purpose::BranchMac,
            Purpose::TxnKey,
            Purpose::ReplyTag,
            Purpose::WorkBook,
            Purpose::FlowToken,
        ]
        .into_iter()
        .map(|p| Key::derive(s, p).mac(&[b"same input"]))
        .collect();
        for (i, a) in macs.iter().enumerate() {
            for b in &macs[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // Same secret, same key (every gate node of a site agrees).
        let k = Key::derive(s, Purpose::BranchMac);
        assert_eq!(
            k.mac::<8>(&[b"x"]),
            Key::derive(s, Purpose::BranchMac).mac(&[b"x"])
        );
        assert_ne!(
            k.mac::<8>(&[b"x"]),
            Key::derive("another-secret-xx", Purpose::BranchMac).mac(&[b"x"])
        );
    }

    #[test]
    fn hex_round_trip_and_constant_time_compare() {
        let mut s = String::new();
        push_hex(&mut s, &[0x01, 0xab, 0xff]);
        assert_eq!(s, "01abff");
        assert_eq!(parse_hex::<3>(b"01ABff"), Some([0x01, 0xab, 0xff]));
        assert_eq!(parse_hex::<3>(b"01abf"), None);
        assert_eq!(parse_hex::<3>(b"01abfg"), None);
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
    }
}
