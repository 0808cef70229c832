//! The call table: which mg every call lives on, so every command of a call
//! goes to the mg that took its first offer (R-MG-2), and how many calls
//! each mg still serves (R-ST-2).
//!
//! Keyed by call-id in a `DashMap`: lookups from the receive path never
//! wait on a global lock. A call counts from its first offer until its
//! `delete` is answered. After that it stays in the table, uncounted, for
//! [`DELETE_GRACE`] (rtpengine's own default delete delay), so a late
//! command or a branch that goes on still reaches the same mg; an offer or
//! answer in that time brings it back.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use crate::command::Command;

/// How long an ended call still routes to its mg.
pub(crate) const DELETE_GRACE: Duration = Duration::from_secs(30);

/// Where a call is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Its first offer is on the way to the mg.
    Setup,
    /// The mg accepted it.
    Live,
    /// Deleted; still routed until the instant given, not counted.
    Ended {
        /// End of the grace period.
        until: Instant,
    },
}

/// One call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// Index (in the site's instances) of the mg or bgmg it lives on.
    pub mg: u32,
    /// Last command seen for it.
    pub last: Instant,
    /// Its phase.
    pub phase: Phase,
}

impl Call {
    /// True while it counts as work of its mg.
    pub fn counts(&self) -> bool {
        !matches!(self.phase, Phase::Ended { .. })
    }
}

/// The table.
#[derive(Debug)]
pub struct CallTable {
    map: DashMap<Box<[u8]>, Call>,
    live: Box<[AtomicI64]>,
}

impl CallTable {
    /// A table for a site with `instances` instances (indexes as in the config).
    pub fn new(instances: usize) -> CallTable {
        CallTable {
            map: DashMap::new(),
            live: (0..instances).map(|_| AtomicI64::new(0)).collect(),
        }
    }

    /// The call with this id.
    pub fn get(&self, id: &[u8]) -> Option<Call> {
        self.map.get(id).map(|c| *c)
    }

    /// Places a new call on `mg`, unless the call-id is known: then the
    /// known call is returned and nothing changes.
    pub fn claim(&self, id: &[u8], mg: usize, now: Instant) -> Result<(), Call> {
        match self.map.entry(id.into()) {
            Entry::Occupied(e) => Err(*e.get()),
            Entry::Vacant(e) => {
                e.insert(Call {
                    mg: mg as u32,
                    last: now,
                    phase: Phase::Setup,
                });
                self.add(mg, 1);
                Ok(())
            }
        }
    }

    /// Records a call found on `mg` by asking the pool (media-ctl did not
    /// place it, or forgot it). Returns the mg the call is on: a call the
    /// table knows meanwhile keeps its own.
    pub fn adopt(&self, id: &[u8], mg: usize, now: Instant) -> usize {
        match self.map.entry(id.into()) {
            Entry::Occupied(e) => e.get().mg as usize,
            Entry::Vacant(e) => {
                e.insert(Call {
                    mg: mg as u32,
                    last: now,
                    phase: Phase::Live,
                });
                self.add(mg, 1);
                mg
            }
        }
    }

    /// Notes a command for the call.
    pub fn touch(&self, id: &[u8], now: Instant) {
        if let Some(mut c) = self.map.get_mut(id) {
            c.last = now;
        }
    }

    /// The mg answered `command` for the call; `ok` unless its result was
    /// `error`. (Looked up in place: no key is allocated per answer.)
    pub fn answered(&self, id: &[u8], command: Command, ok: bool, now: Instant) {
        let refused_setup = {
            let Some(mut c) = self.map.get_mut(id) else {
                return;
            };
            c.last = now;
            let mg = c.mg as usize;
            match (command, ok, c.phase) {
                (Command::Delete, true, Phase::Setup | Phase::Live) => {
                    c.phase = Phase::Ended {
                        until: now + DELETE_GRACE,
                    };
                    self.add(mg, -1);
                    false
                }
                (Command::Offer | Command::Publish, true, Phase::Setup) => {
                    c.phase = Phase::Live;
                    false
                }
                (
                    Command::Offer | Command::Publish | Command::Answer,
                    true,
                    Phase::Ended { .. },
                ) => {
                    c.phase = Phase::Live;
                    self.add(mg, 1);
                    false
                }
                (Command::Offer | Command::Publish, false, Phase::Setup) => true,
                _ => false,
            }
        };
        // The mg refused the offer that was to create the call: it has no
        // such call, so neither do we.
        if refused_setup {
            if let Some((_, c)) = self.map.remove_if(id, |_, c| c.phase == Phase::Setup) {
                self.add(c.mg as usize, -1);
            }
        }
    }

    /// The first offer of a call got no answer: forget the call if it is
    /// still in setup on `mg`.
    pub fn abandon_setup(&self, id: &[u8], mg: usize) {
        if self
            .map
            .remove_if(id, |_, c| c.phase == Phase::Setup && c.mg as usize == mg)
            .is_some()
        {
            self.add(mg, -1);
        }
    }

    /// Removes a call (its mg no longer knows it). True if it was there.
    pub fn forget(&self, id: &[u8]) -> bool {
        match self.map.remove(id) {
            Some((_, c)) => {
                if c.counts() {
                    self.add(c.mg as usize, -1);
                }
                true
            }
            None => false,
        }
    }

    /// Drops ended calls past their grace, and returns up to `max` counted
    /// calls idle for `idle` or more, marking them seen now (so each is
    /// returned once per idle period while the caller checks it; the rest
    /// wait for the next sweep).
    pub fn sweep(&self, now: Instant, idle: Duration, max: usize) -> Vec<(Box<[u8]>, usize)> {
        let mut stale = Vec::new();
        self.map.retain(|id, c| match c.phase {
            Phase::Ended { until } => now < until,
            _ => {
                if stale.len() < max && now.saturating_duration_since(c.last) >= idle {
                    c.last = now;
                    stale.push((id.clone(), c.mg as usize));
                }
                true
            }
        });
        stale
    }

    /// Calls counted on instance `mg`.
    pub fn calls(&self, mg: usize) -> u64 {
        self.live
            .get(mg)
            .map_or(0, |c| c.load(Ordering::Relaxed).max(0) as u64)
    }

    /// Calls counted on all instances.
    pub fn total(&self) -> u64 {
        (0..self.live.len()).map(|i| self.calls(i)).sum()
    }

    /// Entries in the table, ended ones included.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when the table is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    fn add(&self, mg: usize, n: i64) {
        if let Some(c) = self.live.get(mg) {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_counts_from_offer_to_delete_and_keeps_its_mg() {
        let t = CallTable::new(3);
        let t0 = Instant::now();
        t.claim(b"c1", 2, t0).unwrap();
        assert_eq!(t.calls(2), 1, "counted while the offer is out");
        assert_eq!(t.claim(b"c1", 0, t0).unwrap_err().mg, 2, "R-MG-2");
        t.answered(b"c1", Command::Offer, true, t0);
        assert_eq!(t.get(b"c1").unwrap().phase, Phase::Live);
        t.answered(b"c1", Command::Answer, true, t0);
        t.answered(b"c1", Command::Delete, true, t0);
        assert_eq!(t.calls(2), 0);
        // Still routed to mg 2 during the grace, not counted.
        assert_eq!(t.get(b"c1").unwrap().mg, 2);
        t.answered(b"c1", Command::Delete, true, t0);
        assert_eq!(t.calls(2), 0, "a second delete does not count twice");
        // A branch that answers after a delete brings the call back.
        t.answered(b"c1", Command::Answer, true, t0);
        assert_eq!(t.calls(2), 1);
        t.answered(b"c1", Command::Delete, true, t0);
        assert!(t
            .sweep(t0 + DELETE_GRACE, Duration::from_secs(3600), 10)
            .is_empty());
        assert!(t.get(b"c1").is_none(), "gone after the grace");
    }

    #[test]
    fn a_refused_or_unanswered_first_offer_leaves_nothing() {
        let t = CallTable::new(2);
        let t0 = Instant::now();
        t.claim(b"a", 0, t0).unwrap();
        t.answered(b"a", Command::Offer, false, t0);
        assert!(t.get(b"a").is_none());
        t.claim(b"b", 1, t0).unwrap();
        t.abandon_setup(b"b", 0);
        assert_eq!(t.calls(1), 1, "wrong mg: untouched");
        t.abandon_setup(b"b", 1);
        assert_eq!((t.calls(1), t.len()), (0, 0));
        // A refused re-offer does not end a live call.
        t.claim(b"c", 1, t0).unwrap();
        t.answered(b"c", Command::Offer, true, t0);
        t.answered(b"c", Command::Offer, false, t0);
        t.abandon_setup(b"c", 1);
        assert_eq!(t.calls(1), 1);
        assert!(t.forget(b"c"));
        assert_eq!(t.total(), 0);
    }

    #[test]
    fn idle_calls_are_returned_once_per_period() {
        let t = CallTable::new(1);
        let t0 = Instant::now();
        let idle = Duration::from_secs(60);
        t.claim(b"x", 0, t0).unwrap();
        t.claim(b"y", 0, t0 + Duration::from_secs(30)).unwrap();
        let s = t.sweep(t0 + idle, idle, 10);
        assert_eq!(s, vec![(Box::from(&b"x"[..]), 0)]);
        assert!(t.sweep(t0 + idle, idle, 10).is_empty());
        t.touch(b"y", t0 + idle);
        assert!(t
            .sweep(t0 + idle + Duration::from_secs(59), idle, 10)
            .is_empty());
        // At most `max` per sweep; the others are found by the next one.
        let t2 = t0 + idle * 3;
        assert_eq!(t.sweep(t2, idle, 1).len(), 1);
        assert_eq!(t.sweep(t2, idle, 1).len(), 1);
        assert!(t.sweep(t2, idle, 1).is_empty());
        t.adopt(b"z", 0, t2);
        assert_eq!(t.adopt(b"z", 5, t2), 0, "a known call keeps its mg");
        assert_eq!(
            t.calls(0),
            3,
            "idle calls stay until their mg says otherwise"
        );
    }
}
