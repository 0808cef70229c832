//! The per-source buckets of R-OV-2, in a table with a hard bound: a
//! scanner that sends from a million addresses cannot grow it. Each source
//! has one bucket per kind of new work (new dialogs, REGISTERs), each with
//! its own limit: an office NAT's registrations do not use up its calls'.
//!
//! Each shard keeps two generations. A source is looked up in the current
//! one, then in the previous one (and moved up); when the current one is
//! half the shard's bound, it becomes the previous one and the old previous
//! one is forgotten. A source therefore stays while it keeps sending, an
//! idle one is forgotten after two turnovers, every step is O(1), and the
//! maps keep their allocations (no allocation once they have grown). A
//! forgotten source comes back with a full burst, which is what a bucket
//! idle for `burst / rate` seconds holds anyway.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use super::bucket::{Bucket, Limit};

/// Shards, so the UDP workers rarely wait for one another.
const SHARDS: usize = 16;

/// Kinds of new work with a bucket of their own per source.
pub(crate) const KINDS: usize = 2;

#[derive(Debug)]
pub(crate) struct SourceTable {
    limits: [Limit; KINDS],
    /// Entries per generation of one shard.
    half: usize,
    shards: [Mutex<Shard>; SHARDS],
}

#[derive(Debug)]
struct Shard {
    current: HashMap<IpAddr, [Bucket; KINDS], Keyed>,
    previous: HashMap<IpAddr, [Bucket; KINDS], Keyed>,
}

/// The maps' hash: the address bits XORed with a random key, then a full
/// 64-bit mix (murmur3's finaliser). Far cheaper than SipHash on the path
/// of every new dialog, and without the key a scanner cannot choose
/// addresses that collide.
#[derive(Debug, Clone, Copy)]
struct Keyed(u64);

impl BuildHasher for Keyed {
    type Hasher = Mix;
    fn build_hasher(&self) -> Mix {
        Mix(self.0)
    }
}

/// The state of one [`Keyed`] hash.
#[derive(Debug)]
struct Mix(u64);

impl Hasher for Mix {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            if let Some(head) = b.get_mut(..chunk.len()) {
                head.copy_from_slice(chunk);
            }
            self.0 = fmix(self.0 ^ u64::from_le_bytes(b));
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = fmix(self.0 ^ u64::from(n));
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

fn fmix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

impl SourceTable {
    /// A table of at most `bound` sources (rounded up to a multiple of 32),
    /// with a limit per kind of new work.
    pub(crate) fn new(limits: [Limit; KINDS], bound: usize) -> SourceTable {
        SourceTable {
            limits,
            half: bound.div_ceil(2 * SHARDS).max(1),
            shards: std::array::from_fn(|_| {
                let key = Keyed(rand::random());
                Mutex::new(Shard {
                    current: HashMap::with_hasher(key),
                    previous: HashMap::with_hasher(key),
                })
            }),
        }
    }

    /// Takes a token from `source`'s bucket of `kind` (an index into the
    /// limits); `false`: over its limit.
    pub(crate) fn take(&self, source: IpAddr, kind: usize, now: Instant) -> bool {
        let (Some(shard), Some(&limit)) =
            (self.shards.get(shard_of(source)), self.limits.get(kind))
        else {
            return true;
        };
        let mut s = shard.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = s.current.get_mut(&source).and_then(|b| b.get_mut(kind)) {
            return b.take(limit, now);
        }
        let mut b = s
            .previous
            .remove(&source)
            .unwrap_or_else(|| self.limits.map(|l| Bucket::full(l, now)));
        let ok = b.get_mut(kind).is_none_or(|b| b.take(limit, now));
        if s.current.len() >= self.half {
            let Shard { current, previous } = &mut *s;
            std::mem::swap(current, previous);
            current.clear();
        }
        s.current.insert(source, b);
        ok
    }

    /// Sources held (at most the bound).
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock().unwrap_or_else(|e| e.into_inner());
                s.current.len() + s.previous.len()
            })
            .sum()
    }
}

/// A cheap mix of the address bits: sources spread over the shards.
fn shard_of(ip: IpAddr) -> usize {
    let x = match ip {
        IpAddr::V4(v4) => u64::from(u32::from(v4)),
        IpAddr::V6(v6) => {
            let b = u128::from(v6);
            (b as u64) ^ ((b >> 64) as u64)
        }
    };
    (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % SHARDS
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    fn v4(n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(n))
    }

    #[test]
    fn a_source_over_its_limit_is_refused_others_are_not() {
        let t = SourceTable::new([Limit { rate: 1, burst: 3 }; KINDS], 1024);
        let now = Instant::now();
        let a = (0..10).filter(|_| t.take(v4(1), 0, now)).count();
        assert_eq!(a, 3);
        assert!(t.take(v4(2), 0, now), "another source has its own bucket");
        assert!(t.take(v4(1), 0, now + Duration::from_secs(1)));
    }

    #[test]
    fn r_ov_2_each_kind_of_new_work_has_its_own_bucket_per_source() {
        // An office NAT: its REGISTERs (kind 1) have a larger allowance and
        // using it up leaves its new dialogs (kind 0) theirs.
        let t = SourceTable::new(
            [Limit { rate: 1, burst: 2 }, Limit { rate: 1, burst: 50 }],
            1024,
        );
        let now = Instant::now();
        assert_eq!((0..80).filter(|_| t.take(v4(1), 1, now)).count(), 50);
        assert_eq!((0..10).filter(|_| t.take(v4(1), 0, now)).count(), 2);
        assert!(t.take(v4(1), 1, now + Duration::from_secs(1)));
        assert!(t.take(v4(1), 9, now), "an unknown kind is not limited");
    }

    #[test]
    fn a_million_scanner_addresses_stay_within_the_bound() {
        let bound = 4096;
        let t = SourceTable::new([Limit { rate: 1, burst: 1 }; KINDS], bound);
        let now = Instant::now();
        for n in 0..1_000_000u32 {
            assert!(t.take(v4(0x0A00_0000 + n), 0, now), "first request of {n}");
        }
        assert!(t.len() <= bound, "{} > {bound}", t.len());
    }

    #[test]
    fn a_busy_source_is_remembered_through_a_scan() {
        // The busy source sends between the scanner's addresses: it keeps
        // being found, so its bucket stays empty (refused), not reset.
        let t = SourceTable::new([Limit { rate: 1, burst: 2 }; KINDS], 256);
        let now = Instant::now();
        let busy = v4(7);
        assert!(t.take(busy, 0, now) && t.take(busy, 0, now));
        for n in 0..10_000u32 {
            t.take(v4(0x0B00_0000 + n), 0, now);
            if n % 8 == 0 {
                assert!(!t.take(busy, 0, now), "busy source reset at {n}");
            }
        }
    }
}
