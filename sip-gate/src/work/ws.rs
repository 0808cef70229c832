//! What a gate knows of the health of its ws pool's `ws` instances (R-WS-3,
//! R-ST-4, issue 37). Nothing probes them: the gate learns of one only by
//! connecting to it for a client. So it reports an instance `up` while it
//! holds open connections to it or connected to it within `[dns]
//! failover_hold_s`, `down` while a failed connect holds it unreachable
//! (the pool passes over it then), and `unknown` otherwise: never `up` for
//! an instance it has not reached (nothing unknown is shown as good).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ringsync::view::Health;

/// When each instance was last connected to.
#[derive(Debug)]
pub(crate) struct WsReached {
    base: Instant,
    /// Milliseconds since `base`, plus one; 0: never.
    at: Box<[AtomicU64]>,
}

impl WsReached {
    /// Room for `n` instances, none reached.
    pub(crate) fn new(n: usize, now: Instant) -> WsReached {
        WsReached {
            base: now,
            at: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// A connection to instance `i` was set up at `now`.
    pub(crate) fn reached(&self, i: usize, now: Instant) {
        let ms = u64::try_from(now.saturating_duration_since(self.base).as_millis())
            .unwrap_or(u64::MAX - 1);
        if let Some(a) = self.at.get(i) {
            a.fetch_max(ms + 1, Ordering::Relaxed);
        }
    }

    /// Instance `i`'s health at `now`: `held` (a failed connect holds it
    /// unreachable) is `down`; `open` connections, or a connect within
    /// `hold`, `up`; else `unknown`.
    pub(crate) fn health(
        &self,
        i: usize,
        (held, open): (bool, u64),
        hold: Duration,
        now: Instant,
    ) -> Health {
        let last = match self.at.get(i).map(|a| a.load(Ordering::Relaxed)) {
            None | Some(0) => None,
            Some(ms) => Some(self.base + Duration::from_millis(ms - 1)),
        };
        let recent = last.is_some_and(|t| now.saturating_duration_since(t) <= hold);
        if held {
            Health::Down
        } else if open > 0 || recent {
            Health::Up
        } else {
            Health::Unknown
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOLD: Duration = Duration::from_secs(30);

    /// R-WS-3, R-ST-4: never reached is unknown (not up); a connect makes
    /// it up for the hold, open connections for as long as they are open;
    /// a hold after a failed connect is down whatever came before.
    #[test]
    fn r_ws_3_r_st_4_ws_health_is_what_the_connects_said() {
        let t0 = Instant::now();
        let r = WsReached::new(2, t0);
        assert_eq!(r.health(0, (false, 0), HOLD, t0), Health::Unknown);
        r.reached(0, t0 + Duration::from_secs(1));
        assert_eq!(r.health(0, (false, 0), HOLD, t0 + HOLD), Health::Up);
        let later = t0 + HOLD + Duration::from_secs(2);
        assert_eq!(r.health(0, (false, 0), HOLD, later), Health::Unknown);
        assert_eq!(r.health(0, (false, 3), HOLD, later), Health::Up);
        assert_eq!(r.health(0, (true, 3), HOLD, later), Health::Down);
        assert_eq!(r.health(1, (false, 0), HOLD, later), Health::Unknown);
        assert_eq!(r.health(9, (false, 0), HOLD, later), Health::Unknown);
    }
}
