//! Calls and subscriptions, one entry per dialog (R-ST-2), bounded.
//!
//! An entry that ends leaves a tombstone for [`TOMBSTONE_MS`]: a 2xx
//! retransmitted after the BYE, or arriving after the NOTIFY that
//! terminated the subscription, finds it and counts nothing.

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use super::tally::Tally;
use crate::keys::TableHasher;

/// How long an ended dialog is remembered: 64*T1, the longest a UAS
/// retransmits its 2xx (RFC 3261 13.3.1.4).
pub(crate) const TOMBSTONE_MS: u64 = 32_000;

/// One call or subscription. Times are Unix ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dialog {
    /// The instance that serves it (index in the site config).
    pub(crate) instance: u32,
    /// Over: a tombstone.
    pub(crate) ended: bool,
    /// First seen by an in-dialog request, not by its set-up (it was set up
    /// before this gate knew): its age is unknown.
    pub(crate) learned: bool,
    /// Set up (or learned), or, for a tombstone, ended.
    pub(crate) since_ms: u64,
    /// The last request seen in it.
    pub(crate) seen_ms: u64,
    /// A call: when the BYE in flight ends it at the latest (0: none). A
    /// subscription: when it expires.
    pub(crate) until_ms: u64,
}

impl Dialog {
    /// A live dialog served by `instance` since `now_ms`.
    pub(crate) fn new(instance: usize, now_ms: u64, until_ms: u64, learned: bool) -> Dialog {
        Dialog {
            instance: u32::try_from(instance).unwrap_or(u32::MAX),
            ended: false,
            learned,
            since_ms: now_ms,
            seen_ms: now_ms,
            until_ms,
        }
    }
}

/// What [`Dialogs::add`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Added {
    /// A new live dialog.
    New,
    /// It was live already (a retransmitted 2xx).
    Known,
    /// It ended recently; nothing was added.
    Ended,
    /// The table is full; nothing was added.
    Full,
}

/// A bounded table of dialogs with a live count per instance.
#[derive(Debug)]
pub(crate) struct Dialogs {
    map: DashMap<u64, Dialog, TableHasher>,
    /// Entries counted with tombstones; live ones without.
    tally: Tally,
}

impl Dialogs {
    /// A table for `instances` instances holding at most `capacity` entries
    /// (tombstones included).
    pub(crate) fn new(instances: usize, capacity: usize) -> Dialogs {
        Dialogs {
            map: DashMap::with_hasher(TableHasher::default()),
            tally: Tally::new(instances, capacity),
        }
    }

    /// Its bound, entries held (tombstones included), live dialogs per
    /// instance, full-at time.
    pub(crate) fn tally(&self) -> &Tally {
        &self.tally
    }

    /// Adds a live dialog unless its key is live or recently ended.
    pub(crate) fn add(&self, key: u64, d: Dialog) -> Added {
        if self.tally.is_full() && !self.map.contains_key(&key) {
            self.tally.note_full(d.since_ms);
            return Added::Full;
        }
        match self.map.entry(key) {
            Entry::Occupied(e) if e.get().ended => Added::Ended,
            Entry::Occupied(_) => Added::Known,
            Entry::Vacant(v) => {
                self.tally.count(d.instance, true);
                self.tally.entered();
                v.insert(d);
                Added::New
            }
        }
    }

    /// Changes a live dialog; `None` if it is not known or has ended.
    pub(crate) fn update<R>(&self, key: u64, f: impl FnOnce(&mut Dialog) -> R) -> Option<R> {
        let mut e = self.map.get_mut(&key)?;
        (!e.ended).then(|| f(&mut e))
    }

    /// Ends a live dialog, leaving a tombstone; returns it as it was.
    pub(crate) fn end(&self, key: u64, now_ms: u64) -> Option<Dialog> {
        let mut e = self.map.get_mut(&key)?;
        if e.ended {
            return None;
        }
        let was = *e;
        e.ended = true;
        e.since_ms = now_ms;
        drop(e);
        self.tally.count(was.instance, false);
        Some(was)
    }

    /// Ends a live dialog, or leaves a tombstone for one not seen yet (a
    /// NOTIFY that terminates a subscription before its 2xx arrived), so
    /// the 2xx does not set it up afterwards.
    pub(crate) fn end_or_bury(&self, key: u64, instance: usize, now_ms: u64) -> Option<Dialog> {
        if let Some(was) = self.end(key, now_ms) {
            return Some(was);
        }
        let mut grave = Dialog::new(instance, now_ms, 0, false);
        grave.ended = true;
        if !self.tally.is_full() {
            if let Entry::Vacant(v) = self.map.entry(key) {
                self.tally.entered();
                v.insert(grave);
            }
        }
        None
    }

    /// The instance of a dialog, live or recently ended.
    pub(crate) fn instance(&self, key: u64) -> Option<usize> {
        self.map.get(&key).map(|e| e.instance as usize)
    }

    /// Drops tombstones past [`TOMBSTONE_MS`] and ends every live dialog
    /// `over` says is over (it sees every live dialog once: the ones it
    /// keeps too).
    pub(crate) fn sweep(&self, now_ms: u64, mut over: impl FnMut(&Dialog) -> bool) {
        self.map.retain(|_, d| {
            let keep = if d.ended {
                now_ms < d.since_ms.saturating_add(TOMBSTONE_MS)
            } else if over(d) {
                self.tally.count(d.instance, false);
                false
            } else {
                true
            };
            if !keep {
                self.tally.left();
            }
            keep
        });
    }

    /// Calls `f` with every live dialog and its key.
    pub(crate) fn for_each_live(&self, mut f: impl FnMut(u64, &Dialog)) {
        for e in self.map.iter() {
            if !e.ended {
                f(*e.key(), e.value());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_counts_tombstones_and_the_bound() {
        let t = Dialogs::new(2, 3);
        assert_eq!(t.add(1, Dialog::new(0, 1000, 0, false)), Added::New);
        assert_eq!(t.add(1, Dialog::new(0, 1001, 0, false)), Added::Known);
        assert_eq!(t.add(2, Dialog::new(1, 1000, 0, false)), Added::New);
        assert_eq!((t.tally().live(0), t.tally().live(1)), (1, 1));
        assert_eq!(t.end(1, 2000).map(|d| d.since_ms), Some(1000));
        assert_eq!(t.end(1, 2001), None, "ends once");
        assert_eq!(t.tally().live(0), 0);
        // A retransmitted 2xx after the end does not bring it back.
        assert_eq!(t.add(1, Dialog::new(0, 2500, 0, false)), Added::Ended);
        assert_eq!(t.update(1, |d| d.seen_ms = 9), None);
        assert_eq!(t.instance(1), Some(0));
        // Unknown key: a grave keeps a late 2xx out.
        assert_eq!(t.end_or_bury(3, 1, 2000), None);
        assert_eq!(t.add(3, Dialog::new(1, 2100, 0, false)), Added::Ended);
        assert_eq!(t.tally().len(), 3);
        // Full: refused, and the time noted.
        assert_eq!(t.add(4, Dialog::new(0, 2200, 0, false)), Added::Full);
        assert_eq!(t.tally().full_at_ms(), Some(2200));
        // Tombstones go after TOMBSTONE_MS; live ones when `over` says.
        let mut seen = Vec::new();
        t.sweep(2000 + TOMBSTONE_MS, |d| {
            seen.push(d.instance);
            d.instance == 1
        });
        assert_eq!(seen, [1], "live ones only");
        assert_eq!((t.tally().len(), t.tally().live(1)), (0, 0));
        assert_eq!(t.add(4, Dialog::new(0, 40_000, 0, false)), Added::New);
    }
}
