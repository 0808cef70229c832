//! Registration bindings (R-ST-2): per address-of-record, the contacts a
//! registrar confirmed in a 2xx, each held by the instance whose 2xx
//! listed it last, until its expiry.
//!
//! A REGISTER 2xx lists every binding the registrar holds for the AoR
//! (RFC 3261 10.3 step 8), so it is the whole truth for that instance: a
//! binding it lists is held there until the expiry it grants (moving from
//! another instance when it was refreshed through this one); a binding of
//! that AoR held there that it no longer lists is gone (removed with
//! `expires=0` or `Contact: *`, or expired at the registrar).

use dashmap::DashMap;
use smallvec::SmallVec;

use super::tally::Tally;
use crate::keys::TableHasher;

/// One binding: 16 bytes, so that an AoR with one binding is 24 bytes
/// inline (a million subscribers are a million of these, issue 29).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Binding {
    /// Key of the contact URI.
    pub(crate) contact: u64,
    /// When it expires, Unix seconds rounded up: SIP grants expiries in
    /// whole seconds and the sweep runs once a second, so a millisecond
    /// clock here would cost 4 bytes a binding for nothing.
    expires_s: u32,
    /// The instance holding it.
    pub(crate) instance: u32,
}

impl Binding {
    /// A binding of `contact` held by `instance` until `expires_ms` (Unix
    /// ms; kept to the second above it, at most `u32::MAX` s).
    pub(crate) fn new(contact: u64, instance: u32, expires_ms: u64) -> Binding {
        Binding {
            contact,
            expires_s: u32::try_from(expires_ms.div_ceil(1000)).unwrap_or(u32::MAX),
            instance,
        }
    }

    /// When it expires, Unix ms (a whole second).
    pub(crate) fn expires_ms(&self) -> u64 {
        u64::from(self.expires_s) * 1000
    }
}

/// The bindings of one AoR: most have one contact, kept inline (no heap
/// allocation per AoR).
type Held = SmallVec<[Binding; 1]>;

/// Bindings by AoR key, bounded, with a count per instance.
#[derive(Debug)]
pub(crate) struct Bindings {
    map: DashMap<u64, Held, TableHasher>,
    tally: Tally,
}

impl Bindings {
    /// A table for `instances` instances holding at most `capacity` bindings.
    pub(crate) fn new(instances: usize, capacity: usize) -> Bindings {
        Bindings {
            map: DashMap::with_hasher(TableHasher::default()),
            tally: Tally::new(instances, capacity),
        }
    }

    /// Its bound, bindings held, live counts per instance, full-at time.
    pub(crate) fn tally(&self) -> &Tally {
        &self.tally
    }

    fn gone(&self, b: &Binding) {
        self.tally.count(b.instance, false);
        self.tally.left();
    }

    /// What a 2xx to a REGISTER for `aor` through `instance` says: `listed`
    /// holds every contact it lists with an expiry still ahead, as (contact
    /// key, expiry in Unix ms).
    pub(crate) fn confirm(&self, aor: u64, instance: usize, listed: &[(u64, u64)], now_ms: u64) {
        let inst = u32::try_from(instance).unwrap_or(u32::MAX);
        let mut entry = self.map.entry(aor).or_default();
        let held = entry.value_mut();
        // Bindings this registrar held and no longer lists are gone.
        held.retain(|b| {
            let keep = b.instance != inst || listed.iter().any(|(c, _)| *c == b.contact);
            if !keep {
                self.gone(b);
            }
            keep
        });
        for &(contact, expires_ms) in listed {
            if let Some(b) = held.iter_mut().find(|b| b.contact == contact) {
                if b.instance != inst {
                    // Refreshed through another instance: the binding moves.
                    self.tally.count(b.instance, false);
                    self.tally.count(inst, true);
                    b.instance = inst;
                }
                *b = Binding::new(contact, inst, expires_ms);
            } else if self.tally.is_full() {
                self.tally.note_full(now_ms);
            } else {
                self.tally.entered();
                self.tally.count(inst, true);
                held.push(Binding::new(contact, inst, expires_ms));
            }
        }
        let empty = held.is_empty();
        drop(entry);
        if empty {
            self.map.remove_if(&aor, |_, v| v.is_empty());
        }
    }

    /// Adds a binding from a snapshot unless the AoR's contact is known.
    pub(crate) fn restore(&self, aor: u64, b: Binding) {
        let mut entry = self.map.entry(aor).or_default();
        if !self.tally.is_full() && !entry.iter().any(|x| x.contact == b.contact) {
            self.tally.entered();
            self.tally.count(b.instance, true);
            entry.value_mut().push(b);
        }
    }

    /// Drops the bindings expired at `now_ms`, handing every other to `kept`.
    pub(crate) fn sweep(&self, now_ms: u64, mut kept: impl FnMut(&Binding)) {
        self.map.retain(|_, held| {
            held.retain(|b| {
                let keep = b.expires_ms() > now_ms;
                if keep {
                    kept(b);
                } else {
                    self.gone(b);
                }
                keep
            });
            !held.is_empty()
        });
    }

    /// Calls `f` with every binding and its AoR key.
    pub(crate) fn for_each(&self, mut f: impl FnMut(u64, &Binding)) {
        for e in self.map.iter() {
            for b in e.value() {
                f(*e.key(), b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_moves_removal_and_expiry() {
        let t = Bindings::new(2, 3);
        t.confirm(7, 0, &[(1, 5000), (2, 6000)], 0);
        assert_eq!((t.tally().live(0), t.tally().len()), (2, 2));
        // The same contact refreshed through instance 1: it moves.
        t.confirm(7, 1, &[(1, 9000)], 100);
        assert_eq!((t.tally().live(0), t.tally().live(1)), (1, 1));
        // Instance 0's registrar lists nothing any more: its binding is gone;
        // instance 1's is another registrar's and stays.
        t.confirm(7, 0, &[], 200);
        assert_eq!(
            (t.tally().live(0), t.tally().live(1), t.tally().len()),
            (0, 1, 1)
        );
        // Expiry.
        t.sweep(8999, |_| {});
        assert_eq!(t.tally().live(1), 1);
        t.sweep(9000, |_| {});
        assert_eq!((t.tally().live(1), t.tally().len()), (0, 0));
        // The bound.
        t.confirm(8, 0, &[(1, 10), (2, 10), (3, 10), (4, 10)], 300);
        assert_eq!((t.tally().len(), t.tally().full_at_ms()), (3, Some(300)));
    }

    #[test]
    fn an_expiry_is_kept_to_the_second_above_it() {
        let t = Bindings::new(1, 4);
        t.confirm(7, 0, &[(1, 5001), (2, 7000)], 0);
        let mut seen = Vec::new();
        t.for_each(|_, b| seen.push((b.contact, b.expires_ms())));
        seen.sort_unstable();
        assert_eq!(seen, [(1, 6000), (2, 7000)]);
        t.sweep(5999, |_| {});
        assert_eq!(t.tally().len(), 2);
        t.sweep(6000, |_| {});
        assert_eq!(t.tally().len(), 1);
        // Past u32 seconds (the year 2106) it saturates rather than wraps.
        assert_eq!(
            Binding::new(1, 0, u64::MAX).expires_ms(),
            u64::from(u32::MAX) * 1000
        );
    }

    /// What a million subscribers cost (issue 29): an AoR with one binding
    /// holds it inline in 24 bytes, a table slot with its key 32.
    #[test]
    fn one_binding_is_held_inline_in_24_bytes() {
        assert_eq!(std::mem::size_of::<Binding>(), 16);
        assert_eq!(std::mem::size_of::<Held>(), 24);
    }
}
