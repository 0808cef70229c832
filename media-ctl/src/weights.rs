//! The drain ramp (R-MG-1, R-MG-4): when an mg's server enters the drain
//! zone, its weight for new calls falls steadily from where it is to zero
//! over the window; when the drain is lifted it rises the same way. A
//! change in the middle of a ramp turns it around from the current weight,
//! so the weight never jumps.

use std::time::{Duration, Instant};

use ringsync::config::Service;
use ringsync::view::DrainView;

/// Which way a weight is moving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trend {
    /// At 1 (normal zone) or 0 (drained out).
    Steady,
    /// Falling toward 0 (draining).
    Down,
    /// Rising toward 1 (drain lifted).
    Up,
}

/// One mg's ramp.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ramp {
    draining: bool,
    from: f64,
    since: Instant,
}

impl Ramp {
    /// A ramp at rest: weight 0 if draining, else 1. Used at start, when
    /// nothing is known of the past (a drain already active then is
    /// treated as complete: new calls must not go to it).
    pub fn settled(draining: bool, now: Instant) -> Ramp {
        Ramp {
            draining,
            from: if draining { 0.0 } else { 1.0 },
            since: now,
        }
    }

    /// True while the mg's server is in the drain zone.
    pub fn draining(&self) -> bool {
        self.draining
    }

    /// The weight at `now`, in `[0, 1]`.
    pub fn weight(&self, now: Instant, window: Duration) -> f64 {
        let step = if window.is_zero() {
            1.0
        } else {
            now.saturating_duration_since(self.since).as_secs_f64() / window.as_secs_f64()
        };
        if self.draining {
            (self.from - step).max(0.0)
        } else {
            (self.from + step).min(1.0)
        }
    }

    /// Which way the weight moves at `now`.
    pub fn trend(&self, now: Instant, window: Duration) -> Trend {
        match (self.draining, self.weight(now, window)) {
            (true, w) if w > 0.0 => Trend::Down,
            (false, w) if w < 1.0 => Trend::Up,
            _ => Trend::Steady,
        }
    }

    /// When the ramp reaches its end (0 or 1).
    pub fn ends_at(&self, window: Duration) -> Instant {
        let left = if self.draining {
            self.from
        } else {
            1.0 - self.from
        };
        self.since + window.mul_f64(left.clamp(0.0, 1.0))
    }

    /// The drain started (`true`) or was lifted (`false`) at `now`.
    pub fn set(&mut self, draining: bool, now: Instant, window: Duration) {
        if draining != self.draining {
            self.from = self.weight(now, window);
            self.since = now;
            self.draining = draining;
        }
    }
}

/// The ramps of every mg of the site, indexed like the config's instances
/// (`None` for instances that are not mg: bgmg are never drained, R-BG-1).
#[derive(Debug, Clone)]
pub struct Ramps {
    ramps: Vec<Option<Ramp>>,
    generation: Option<u64>,
}

impl Ramps {
    /// Ramps for a view, settled.
    pub fn new(view: &DrainView, now: Instant) -> Ramps {
        let ramps = view
            .instances()
            .iter()
            .enumerate()
            .map(|(i, v)| {
                (v.service == Service::Mg).then(|| Ramp::settled(view.is_draining(i), now))
            })
            .collect();
        Ramps {
            ramps,
            generation: Some(view.generation()),
        }
    }

    /// Follows a new view: every mg whose zone changed starts ramping at
    /// `now`. Cheap when the view is the one already seen.
    pub fn observe(&mut self, view: &DrainView, now: Instant, window: Duration) {
        if self.generation == Some(view.generation()) && view.generation() != 0 {
            return;
        }
        self.generation = Some(view.generation());
        for (i, r) in self.ramps.iter_mut().enumerate() {
            if let Some(r) = r {
                r.set(view.is_draining(i), now, window);
            }
        }
    }

    /// The ramp of instance `idx`, if it is an mg.
    pub fn get(&self, idx: usize) -> Option<&Ramp> {
        self.ramps.get(idx).and_then(Option::as_ref)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_secs(180);

    #[test]
    fn r_mg_4_weight_falls_steadily_and_rises_the_same_way() {
        let t0 = Instant::now();
        let mut r = Ramp::settled(false, t0);
        assert_eq!(r.weight(t0, W), 1.0);
        r.set(true, t0, W);
        let at = |s: u64| r.weight(t0 + Duration::from_secs(s), W);
        assert_eq!(at(0), 1.0);
        assert!((at(45) - 0.75).abs() < 1e-9);
        assert!((at(90) - 0.5).abs() < 1e-9);
        assert_eq!(at(180), 0.0);
        assert_eq!(at(1000), 0.0);
        // Monotone: every second lower than the one before, until zero.
        let mut last = 1.0;
        for s in 1..=180 {
            let w = at(s);
            assert!(w < last, "{s}: {w} !< {last}");
            last = w;
        }
        assert_eq!(r.trend(t0 + Duration::from_secs(10), W), Trend::Down);
        assert_eq!(r.trend(t0 + W, W), Trend::Steady);
        assert_eq!(r.ends_at(W), t0 + W);

        // Lifted half way through: back up from 0.5, reaching 1 after half a window.
        let t1 = t0 + Duration::from_secs(90);
        r.set(false, t1, W);
        assert!((r.weight(t1, W) - 0.5).abs() < 1e-9, "no jump");
        assert!((r.weight(t1 + Duration::from_secs(45), W) - 0.75).abs() < 1e-9);
        assert_eq!(r.weight(t1 + Duration::from_secs(90), W), 1.0);
        assert_eq!(r.trend(t1 + Duration::from_secs(1), W), Trend::Up);
        assert_eq!(r.ends_at(W), t1 + Duration::from_secs(90));
        // Setting the same state again does not restart the ramp.
        r.set(false, t1 + Duration::from_secs(30), W);
        assert_eq!(r.weight(t1 + Duration::from_secs(90), W), 1.0);
    }

    #[test]
    fn zero_window_is_a_switch_and_start_is_settled() {
        let t0 = Instant::now();
        let mut r = Ramp::settled(false, t0);
        r.set(true, t0, Duration::ZERO);
        assert_eq!(r.weight(t0, Duration::ZERO), 0.0);
        assert_eq!(Ramp::settled(true, t0).weight(t0, W), 0.0);
    }
}
