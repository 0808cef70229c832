//! The stream transports' intake deadline (R-OV-1 for TCP, TLS and
//! WebSocket). A UDP worker knows how long each datagram waited, from the
//! kernel's receive timestamp; a stream has no such stamp per message, and
//! its backlog is not one queue but the runtime's ready connections, each
//! with its socket buffer. What they share is the runtime: when its threads
//! are behind, every connection's messages wait. A probe task asks to wake
//! every `period` and notes when it did; a message read by a connection task
//! is handled *behind* when the probe has not run for longer than its period
//! plus the deadline (the runtime is stalled right now), or for one deadline
//! after the probe woke that late (it has just caught up, and what it read
//! meanwhile is old). Behind, a new dialog gets 503 at once, as over UDP; in-
//! dialog requests and responses are handled as always.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::metrics as m;

/// How often the probe wakes: often enough to see a stall well inside the
/// deadline, seldom enough to cost nothing measurable while the gate idles.
pub(crate) fn probe_period(deadline: Duration) -> Duration {
    (deadline / 4).clamp(Duration::from_millis(5), Duration::from_millis(100))
}

/// The runtime's lag as the stream transports read it.
#[derive(Debug)]
pub(crate) struct RuntimeLag {
    /// The instants below are microseconds since this one.
    base: Instant,
    deadline: Duration,
    period: Duration,
    /// When the probe last woke.
    woke_us: AtomicU64,
    /// Behind until then: the probe woke a deadline late.
    behind_until_us: AtomicU64,
}

impl RuntimeLag {
    /// A meter with `deadline` (0: off, nothing is ever behind), started
    /// at `now`.
    pub(crate) fn new(deadline: Duration, now: Instant) -> RuntimeLag {
        RuntimeLag {
            base: now,
            deadline,
            period: probe_period(deadline),
            woke_us: AtomicU64::new(0),
            behind_until_us: AtomicU64::new(0),
        }
    }

    fn us(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.base).as_micros()).unwrap_or(u64::MAX)
    }

    /// Whether a message read at `now` is read behind.
    #[inline]
    pub(crate) fn behind(&self, now: Instant) -> bool {
        if self.deadline.is_zero() {
            return false;
        }
        let now = self.us(now);
        let woke = self.woke_us.load(Ordering::Relaxed);
        let late = u64::try_from((self.period + self.deadline).as_micros()).unwrap_or(u64::MAX);
        now.saturating_sub(woke) > late || now < self.behind_until_us.load(Ordering::Relaxed)
    }

    /// The probe woke at `now`, `lag` after it asked to.
    pub(crate) fn woke(&self, lag: Duration, now: Instant) {
        let now_us = self.us(now);
        self.woke_us.store(now_us, Ordering::Relaxed);
        m::runtime_lag(lag);
        if lag > self.deadline {
            let until =
                now_us.saturating_add(u64::try_from(self.deadline.as_micros()).unwrap_or(u64::MAX));
            self.behind_until_us.store(until, Ordering::Relaxed);
        }
    }

    /// The probe: runs on the runtime whose lag it measures, until `stop`.
    pub(crate) async fn run(self: std::sync::Arc<Self>, stop: CancellationToken) {
        if self.deadline.is_zero() {
            return;
        }
        self.woke(Duration::ZERO, Instant::now());
        loop {
            let asked = Instant::now() + self.period;
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep_until(asked.into()) => {}
            }
            let now = Instant::now();
            self.woke(now.saturating_duration_since(asked), now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn r_ov_1_a_stalled_runtime_is_behind_until_it_catches_up_and_one_deadline_more() {
        let t0 = Instant::now();
        let lag = RuntimeLag::new(200 * MS, t0);
        assert_eq!(lag.period, 50 * MS);
        lag.woke(Duration::ZERO, t0);
        assert!(!lag.behind(t0 + 100 * MS));
        assert!(
            !lag.behind(t0 + 250 * MS),
            "period + deadline not yet passed"
        );
        // The probe has not woken for longer than its period plus the
        // deadline: the runtime is stalled now.
        assert!(lag.behind(t0 + 251 * MS));
        // It wakes 600 ms late: behind for one deadline more, then not.
        let woke = t0 + 650 * MS;
        lag.woke(600 * MS, woke);
        assert!(lag.behind(woke + 199 * MS));
        lag.woke(Duration::ZERO, woke + 190 * MS);
        assert!(
            lag.behind(woke + 199 * MS),
            "the hold outlasts later prompt wakes"
        );
        assert!(!lag.behind(woke + 201 * MS));
        // A small lag is no reason.
        lag.woke(20 * MS, woke + 300 * MS);
        assert!(!lag.behind(woke + 301 * MS));
    }

    #[test]
    fn a_zero_deadline_is_never_behind() {
        let t0 = Instant::now();
        let lag = RuntimeLag::new(Duration::ZERO, t0);
        assert!(!lag.behind(t0 + Duration::from_secs(60)));
    }
}
