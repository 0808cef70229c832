//! Health of the mgs and bgmgs: the ng `ping`, answered `pong`.
//!
//! Every round pings every instance; `failures` rounds in a row without a
//! `pong` from the instance's own address mark it `down`, one `pong` marks
//! it up again. A down mg gets no new calls, and commands of its calls get
//! an ng error (R-MG-5).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use ringsync::view::Health;

/// Ping bookkeeping for the instances of a site.
#[derive(Debug)]
pub(crate) struct Pinger {
    targets: Vec<usize>,
    answered: Vec<AtomicU64>,
    fails: Mutex<Vec<u32>>,
    failures: u32,
}

impl Pinger {
    /// Pings `targets` (instance indexes below `instances`); `failures`
    /// missed rounds make an instance down.
    pub(crate) fn new(targets: Vec<usize>, instances: usize, failures: u32) -> Pinger {
        Pinger {
            targets,
            answered: (0..instances).map(|_| AtomicU64::new(0)).collect(),
            fails: Mutex::new(vec![0; instances]),
            failures: failures.max(1),
        }
    }

    /// A `pong` for round `seq` came from instance `idx`.
    pub(crate) fn pong(&self, idx: usize, seq: u64) {
        if let Some(a) = self.answered.get(idx) {
            a.fetch_max(seq, Ordering::Relaxed);
        }
    }

    /// After round `seq`'s timeout: the health of every target, where
    /// known (`None` while misses are below the threshold).
    pub(crate) fn evaluate(&self, seq: u64) -> Vec<(usize, Health)> {
        let mut fails = self.fails.lock().unwrap_or_else(|e| e.into_inner());
        self.targets
            .iter()
            .filter_map(|&idx| {
                let f = fails.get_mut(idx)?;
                if self.answered[idx].load(Ordering::Relaxed) >= seq {
                    *f = 0;
                    Some((idx, Health::Up))
                } else {
                    *f = f.saturating_add(1);
                    (*f >= self.failures).then_some((idx, Health::Down))
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_after_failures_up_after_one_pong() {
        let p = Pinger::new(vec![1, 3], 4, 3);
        p.pong(1, 1);
        p.pong(3, 1);
        assert_eq!(p.evaluate(1), vec![(1, Health::Up), (3, Health::Up)]);
        p.pong(1, 2);
        assert_eq!(p.evaluate(2), vec![(1, Health::Up)]);
        p.pong(1, 3);
        assert_eq!(p.evaluate(3), vec![(1, Health::Up)]);
        p.pong(1, 4);
        assert_eq!(p.evaluate(4), vec![(1, Health::Up), (3, Health::Down)]);
        // A late pong of an old round does not count for a newer one.
        p.pong(3, 4);
        assert_eq!(p.evaluate(5), vec![(3, Health::Down)]);
        p.pong(3, 6);
        assert_eq!(p.evaluate(6), vec![(3, Health::Up)]);
        p.pong(99, 1);
    }
}
