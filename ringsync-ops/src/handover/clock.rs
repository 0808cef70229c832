//! Wall-clock milliseconds from tokio's clock, so the planner's times are
//! Unix times (they are persisted, and read by other nodes) while tests run
//! them on paused time (`tokio::time::pause`): a test of "one group per
//! minute" takes no minute.

use std::time::Duration;

use tokio::time::Instant;

/// Unix milliseconds as `base_ms` plus tokio's elapsed time since `base`.
/// Immune to wall-clock steps while the process runs.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    base_ms: u64,
    base: Instant,
}

impl Clock {
    /// A clock that reads the wall clock now and advances with tokio's.
    pub fn wall() -> Clock {
        Clock::starting_at(ringsync::work::now_ms())
    }

    /// A clock that reads `base_ms` now (tests).
    pub fn starting_at(base_ms: u64) -> Clock {
        Clock {
            base_ms,
            base: Instant::now(),
        }
    }

    /// Now, in Unix ms.
    pub fn now_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.base_ms.saturating_add(elapsed)
    }

    /// The tokio instant at which this clock reads `at_ms`.
    pub fn instant_at(&self, at_ms: u64) -> Instant {
        self.base + Duration::from_millis(at_ms.saturating_sub(self.base_ms))
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::wall()
    }
}
