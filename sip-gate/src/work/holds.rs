//! Hold times of the calls that ended on this gate, and the drain ETA of
//! open calls estimated from them.
//!
//! Hold times go into a histogram of logarithmic buckets (a quarter of an
//! octave wide, from 1 s to about 21 h). For an open call of age `a` the
//! estimate looks only at the calls that lasted at least as long (the
//! buckets from `a`'s on) and takes their 90th percentile `q` (the upper
//! edge of its bucket): the call is expected to end at `start + q`. When
//! fewer than [`MIN_HISTORY`] ended calls lasted that long (no history yet,
//! or a call older than nearly all seen), it is expected to end at `start +
//! typical`, the configured typical hold time, or, once it has outlived
//! that, at the first doubling of it still ahead (`start + typical * 2^k`).
//! Anchored at the call's start, so an operator's ETA counts down with the
//! clock instead of standing still at "typical from now".

use std::sync::atomic::{AtomicU64, Ordering};

/// Buckets: `[0, 1 s)`, then `[2^((k-1)/4), 2^(k/4))` seconds.
pub(crate) const BUCKETS: usize = 66;
/// Ended calls needed before the histogram is trusted for a given age.
pub(crate) const MIN_HISTORY: u64 = 10;
/// The percentile of the remaining hold time an estimate takes.
const QUANTILE: f64 = 0.9;

fn bucket(ms: u64) -> usize {
    if ms < 1000 {
        return 0;
    }
    let k = (4.0 * (ms as f64 / 1000.0).log2()).floor() as usize + 1;
    k.min(BUCKETS - 1)
}

/// Upper edge of bucket `k`, in ms.
fn upper_ms(k: usize) -> u64 {
    (1000.0 * 2f64.powf(k as f64 / 4.0)).ceil() as u64
}

/// The histogram (shared by every instance: a hold time is a property of
/// the site's callers more than of one server).
#[derive(Debug)]
pub(crate) struct Holds {
    counts: [AtomicU64; BUCKETS],
}

impl Default for Holds {
    fn default() -> Self {
        Holds {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Holds {
    /// Notes a call that lasted `hold_ms`.
    pub(crate) fn record(&self, hold_ms: u64) {
        self.counts[bucket(hold_ms)].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts, for a snapshot.
    pub(crate) fn counts(&self) -> Vec<u64> {
        self.counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }

    /// Adds counts from a snapshot.
    pub(crate) fn restore(&self, counts: &[u64]) {
        for (c, n) in self.counts.iter().zip(counts) {
            c.fetch_add(*n, Ordering::Relaxed);
        }
    }

    /// The estimator for the current histogram.
    pub(crate) fn estimator(&self, typical_ms: u64) -> Estimator {
        let counts = self.counts();
        let mut quantile = [None; BUCKETS];
        for (a, q) in quantile.iter_mut().enumerate() {
            let m: u64 = counts[a..].iter().sum();
            if m < MIN_HISTORY {
                continue;
            }
            let target = (QUANTILE * m as f64).ceil() as u64;
            let mut cum = 0;
            for (k, n) in counts.iter().enumerate().skip(a) {
                cum += n;
                if cum >= target {
                    *q = Some(upper_ms(k));
                    break;
                }
            }
        }
        Estimator {
            quantile,
            typical_ms,
        }
    }
}

/// Expected ends of open calls (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Estimator {
    quantile: [Option<u64>; BUCKETS],
    typical_ms: u64,
}

impl Estimator {
    /// When a call that started at `since_ms` is expected to end (Unix ms).
    pub(crate) fn end_ms(&self, since_ms: u64, now_ms: u64) -> u64 {
        let age = now_ms.saturating_sub(since_ms);
        match self.quantile[bucket(age)] {
            Some(q) => since_ms.saturating_add(q.max(age)),
            None => {
                let mut hold = self.typical_ms.max(1);
                while hold <= age {
                    hold = hold.saturating_mul(2);
                }
                since_ms.saturating_add(hold)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_one_second_to_a_day() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(999), 0);
        assert_eq!(bucket(1000), 1);
        assert!(upper_ms(bucket(1000)) > 1000);
        for ms in [1500, 60_000, 180_000, 3_600_000] {
            let k = bucket(ms);
            assert!(upper_ms(k - 1) <= ms && ms < upper_ms(k), "{ms} in {k}");
            // A quarter octave: the edge is at most 19 % above the value.
            assert!(upper_ms(k) as f64 <= ms as f64 * 1.19 + 1.0);
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert!(upper_ms(BUCKETS - 1) > 12 * 3_600_000);
    }

    #[test]
    fn estimate_from_history_or_the_typical_hold_time() {
        let h = Holds::default();
        let now = 1_000_000_000;
        // No history: the typical hold time from the call's start, so the
        // estimate stays put while the clock runs (the ETA counts down)...
        let e = h.estimator(180_000);
        assert_eq!(e.end_ms(now - 5000, now), now - 5000 + 180_000);
        assert_eq!(e.end_ms(now - 5000, now + 15_000), now - 5000 + 180_000);
        // ...and a call that outlived it is given the next doubling.
        assert_eq!(e.end_ms(now - 180_000, now), now - 180_000 + 360_000);
        assert_eq!(e.end_ms(now - 500_000, now), now - 500_000 + 720_000);
        // 100 calls of 60 s and 10 of 600 s ended.
        (0..100).for_each(|_| h.record(60_000));
        (0..10).for_each(|_| h.record(600_000));
        let e = h.estimator(180_000);
        // A young call: 90 % of all calls ended by about 60 s.
        let young = e.end_ms(now - 5000, now);
        assert!((now + 55_000..=now + 67_000).contains(&young), "{young}");
        // A call already 2 minutes old belongs with the long ones: ~600 s.
        let old = e.end_ms(now - 120_000, now);
        let at = old - (now - 120_000);
        assert!((600_000..=720_000).contains(&at), "{at}");
        // Older than every call seen: doublings of the typical hold time.
        assert_eq!(e.end_ms(now - 3_600_000, now), now - 3_600_000 + 5_760_000);
        // Round trip through a snapshot.
        let copy = Holds::default();
        copy.restore(&h.counts());
        assert_eq!(copy.counts(), h.counts());
    }
}
