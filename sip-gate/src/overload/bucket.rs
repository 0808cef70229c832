//! A token bucket: `rate` tokens a second, at most `burst` saved up; each
//! admitted request takes one (R-OV-1's capacity, R-OV-2's limits).

use std::time::Instant;

/// A rate with a burst; a rate of 0 is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limit {
    /// Tokens a second.
    pub(crate) rate: u32,
    /// Tokens saved up at most.
    pub(crate) burst: u32,
}

impl Limit {
    pub(crate) fn is_on(self) -> bool {
        self.rate > 0
    }
}

/// The state of one bucket.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// A bucket with its whole burst: what a source never seen before has.
    pub(crate) fn full(limit: Limit, now: Instant) -> Bucket {
        Bucket {
            tokens: f64::from(limit.burst),
            last: now,
        }
    }

    /// Takes a token if there is one. `now` may be a little older than the
    /// last call's (two threads' clocks read in the other order): no time
    /// then passes, and no token is lost or made.
    pub(crate) fn take(&mut self, limit: Limit, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * f64::from(limit.rate)).min(f64::from(limit.burst));
        self.last = self.last.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    #[test]
    fn a_burst_then_the_rate() {
        let limit = Limit { rate: 10, burst: 5 };
        let t0 = Instant::now();
        let mut b = Bucket::full(limit, t0);
        assert_eq!((0..8).filter(|_| b.take(limit, t0)).count(), 5);
        // 100 ms later: one more token, no more.
        let t1 = t0 + Duration::from_millis(100);
        assert!(b.take(limit, t1));
        assert!(!b.take(limit, t1));
        // Idle for long: back to the burst, never above it.
        let t2 = t1 + Duration::from_secs(60);
        assert_eq!((0..100).filter(|_| b.take(limit, t2)).count(), 5);
    }

    #[test]
    fn an_older_clock_reading_makes_no_tokens() {
        let limit = Limit { rate: 1, burst: 1 };
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut b = Bucket::full(limit, t0);
        assert!(b.take(limit, t0));
        assert!(!b.take(limit, t0 - Duration::from_secs(5)));
        assert!(!b.take(limit, t0 + Duration::from_millis(500)));
        assert!(b.take(limit, t0 + Duration::from_secs(1)));
    }

    proptest! {
        /// R-OV-2: whatever the arrival times, a bucket admits at most its
        /// burst plus its rate times the time that passed.
        #[test]
        fn never_admits_more_than_burst_plus_rate_times_time(
            rate in 1u32..1000,
            burst in 1u32..100,
            gaps_us in proptest::collection::vec(0u64..50_000, 1..400),
        ) {
            let limit = Limit { rate, burst };
            let t0 = Instant::now();
            let mut b = Bucket::full(limit, t0);
            let mut now = t0;
            let mut admitted = 0u64;
            for gap in gaps_us {
                now += Duration::from_micros(gap);
                admitted += u64::from(b.take(limit, now));
            }
            let bound = f64::from(burst) + f64::from(rate) * (now - t0).as_secs_f64();
            prop_assert!(admitted as f64 <= bound + 1e-6, "{admitted} > {bound}");
        }

        /// And it never refuses a sender that keeps to the rate.
        #[test]
        fn admits_every_request_at_or_below_the_rate(
            rate in 1u32..1000,
            burst in 1u32..100,
            n in 1usize..300,
            slack_us in 0u64..1000,
        ) {
            let limit = Limit { rate, burst };
            let t0 = Instant::now();
            let mut b = Bucket::full(limit, t0);
            let gap = Duration::from_micros(1_000_000u64.div_ceil(u64::from(rate)) + slack_us);
            for i in 0..n {
                prop_assert!(b.take(limit, t0 + gap * i as u32), "request {i} refused");
            }
        }
    }
}
