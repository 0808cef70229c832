//! The bookkeeping every bounded work table keeps (R-ST-2, R-OV-1): its
//! bound, how many entries it holds, the live ones per instance, and when an
//! entry last found it full (so the work report can say the counts are
//! unknown from then on, R-ST-3).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Counters of one bounded table; the table keeps them in step with its map.
#[derive(Debug)]
pub(crate) struct Tally {
    capacity: usize,
    entries: AtomicUsize,
    live: Box<[AtomicU64]>,
    /// When an entry last found the table full (Unix ms; 0: never).
    full_at_ms: AtomicU64,
}

impl Tally {
    /// Counters for `instances` instances and a bound of `capacity` entries.
    pub(crate) fn new(instances: usize, capacity: usize) -> Tally {
        Tally {
            capacity,
            entries: AtomicUsize::new(0),
            live: (0..instances).map(|_| AtomicU64::new(0)).collect(),
            full_at_ms: AtomicU64::new(0),
        }
    }

    /// Live entries, every instance together.
    pub(crate) fn live_total(&self) -> u64 {
        self.live.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.entries.load(Ordering::Relaxed)
    }

    /// The bound.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether one more entry would pass the bound.
    pub(crate) fn is_full(&self) -> bool {
        self.len() >= self.capacity
    }

    /// Live entries of instance `i`.
    pub(crate) fn live(&self, i: usize) -> u64 {
        self.live.get(i).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// When an entry last found the table full, if ever.
    pub(crate) fn full_at_ms(&self) -> Option<u64> {
        Some(self.full_at_ms.load(Ordering::Relaxed)).filter(|&t| t != 0)
    }

    /// Notes that an entry found the table full at `at_ms` (also used to
    /// carry the time over from a snapshot).
    pub(crate) fn note_full(&self, at_ms: u64) {
        self.full_at_ms.fetch_max(at_ms, Ordering::Relaxed);
    }

    /// An entry was added.
    pub(crate) fn entered(&self) {
        self.entries.fetch_add(1, Ordering::Relaxed);
    }

    /// An entry was removed.
    pub(crate) fn left(&self) {
        self.entries.fetch_sub(1, Ordering::Relaxed);
    }

    /// One more (`up`) or one less live entry for `instance`.
    pub(crate) fn count(&self, instance: u32, up: bool) {
        if let Some(c) = self.live.get(instance as usize) {
            if up {
                c.fetch_add(1, Ordering::Relaxed);
            } else {
                c.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}
