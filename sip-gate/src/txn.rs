//! The short-lived transaction table.
//!
//! The gate is dialog-stateless (the Record-Route token carries the
//! instance), but it remembers for a transaction's lifetime where each
//! request went, keyed by the branch it computed from the client's branch. So
//! a retransmitted INVITE, the CANCEL and the ACK of a non-2xx follow the
//! original request even if the ring changed in between, and a retransmitted
//! INVITE never reaches a second instance. Responses find the connection the
//! request came in on (RFC 3261 18.2.2). Entries expire on RFC 3261 timers, and
//! the table is bounded: when it is full, new transactions are refused (503)
//! rather than letting memory grow without limit. The bound is exact under
//! any number of workers: a slot is reserved with one atomic step before an
//! entry goes in, and given back when the entry leaves.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use crate::keys::TableHasher;

/// Timer F / Timer H: 64 * T1 (RFC 3261 17.1.2.2, 17.2.1).
pub(crate) const NON_INVITE_LIFETIME: Duration = Duration::from_secs(32);
/// Timer B: 64 * T1 (RFC 3261 17.1.1.2): a client's INVITE transaction
/// gives up after it. An INVITE the gate could not deliver after waiting
/// that long is answered 408, a timeout, rather than 503 (RFC 3261 8.1.3.1).
pub(crate) const TIMER_B: Duration = Duration::from_secs(32);
/// Timer C is at least 3 minutes (RFC 3261 16.6 step 11); an INVITE without a
/// final response is kept a little longer than that.
pub(crate) const INVITE_PENDING_LIFETIME: Duration = Duration::from_secs(200);
/// After a final response to an INVITE: time for retransmissions of the
/// final response and the ACK of a non-2xx (Timer D is at least 32 s).
pub(crate) const INVITE_DONE_LIFETIME: Duration = Duration::from_secs(32);

/// Identifier of a TCP connection held by the transport layer.
pub type ConnId = u64;

/// Where a request came from, so its responses can go back the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Inbound {
    /// A datagram on a listener's UDP socket.
    Udp {
        /// Index of the listener in the site config.
        listener: usize,
        /// Source address of the datagram.
        peer: SocketAddr,
    },
    /// A message on a TCP connection.
    Tcp {
        /// Index of the listener in the site config.
        listener: usize,
        /// The connection it came in on.
        conn: ConnId,
        /// Remote address of the connection.
        peer: SocketAddr,
    },
}

impl Inbound {
    /// Index of the listener the message arrived on.
    pub fn listener(&self) -> usize {
        match *self {
            Inbound::Udp { listener, .. } | Inbound::Tcp { listener, .. } => listener,
        }
    }
    /// The remote address.
    pub fn peer(&self) -> SocketAddr {
        match *self {
            Inbound::Udp { peer, .. } | Inbound::Tcp { peer, .. } => peer,
        }
    }
}

/// Where a request was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Hop {
    /// The instance, when the request went to a configured instance.
    pub(crate) instance: Option<usize>,
    /// The address it was sent to.
    pub(crate) addr: SocketAddr,
    /// True when it was sent over TCP.
    pub(crate) tcp: bool,
    /// The cached DNS answer `addr` came from (a host name the instance
    /// sent to), so a failed target can give way to the next one.
    pub(crate) dns: Option<u64>,
    /// Sent into a subscriber's flow (RFC 5626 5.3), not to an address.
    pub(crate) flow: Option<FlowOut>,
}

/// A request sent into a subscriber's flow: from the listener the flow came
/// in on, over TCP on the subscriber's own connection and never a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct FlowOut {
    /// Listener index.
    pub(crate) listener: usize,
    /// The subscriber's connection (TCP); `None` over UDP.
    pub(crate) conn: Option<ConnId>,
}

/// One remembered transaction.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TxnEntry {
    /// Where the request came from.
    pub(crate) inbound: Inbound,
    /// Where it was sent.
    pub(crate) hop: Hop,
    /// An INVITE transaction (lives until its final response).
    pub(crate) invite: bool,
    /// A request that starts a dialog or stands alone (no To tag), for work
    /// accounting.
    pub(crate) initial: bool,
    /// The instance whose work this transaction is: the one it went to, or
    /// the one that sent it outward through the gate (R-ST-2).
    pub(crate) owner: Option<usize>,
    /// When the entry expires.
    pub(crate) expires: Instant,
    /// A final response was seen.
    pub(crate) finished: bool,
}

impl TxnEntry {
    /// When the request was routed: its expiry less the lifetime
    /// [`TxnTable::insert`] gave it (only while no final response moved
    /// the expiry).
    pub(crate) fn sent_at(&self) -> Option<Instant> {
        if self.finished {
            return None;
        }
        self.expires.checked_sub(if self.invite {
            INVITE_PENDING_LIFETIME
        } else {
            NON_INVITE_LIFETIME
        })
    }

    /// An INVITE without a final response whose Timer B has run out at
    /// `now`: it started [`INVITE_PENDING_LIFETIME`] before its expiry.
    pub(crate) fn invite_timed_out(&self, now: Instant) -> bool {
        self.invite
            && !self.finished
            && self
                .expires
                .checked_sub(INVITE_PENDING_LIFETIME)
                .is_some_and(|started| now.saturating_duration_since(started) >= TIMER_B)
    }
}

/// A transaction as a hand-over passes it to the next run (R-GW-3): its
/// entry, with the time it has left instead of an instant of this process.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct SavedTxn {
    key: u64,
    inbound: Inbound,
    hop: Hop,
    invite: bool,
    initial: bool,
    owner: Option<usize>,
    left_ms: u64,
    finished: bool,
}

/// What [`TxnTable::insert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Insert {
    /// The entry is in: this copy of the request routes the transaction.
    New,
    /// The key was already there (another copy of the request got in
    /// first): it goes to that entry's hop.
    Known(Hop),
    /// The table is full; nothing was inserted.
    Full,
}

/// The bounded transaction table.
#[derive(Debug)]
pub(crate) struct TxnTable {
    map: DashMap<u64, TxnEntry, TableHasher>,
    capacity: usize,
    /// Slots taken: reserved before an insert, given back by a removal, so
    /// two workers cannot both take the last one.
    used: AtomicUsize,
}

impl TxnTable {
    /// A table that holds at most `capacity` transactions.
    pub(crate) fn new(capacity: usize) -> TxnTable {
        TxnTable {
            map: DashMap::with_hasher(TableHasher::default()),
            capacity,
            used: AtomicUsize::new(0),
        }
    }

    /// Number of live entries.
    pub(crate) fn len(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Takes a slot unless all `capacity` are taken.
    fn reserve(&self) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.capacity).then_some(n + 1)
            })
            .is_ok()
    }

    /// Looks a transaction up without changing it.
    pub(crate) fn get(&self, key: u64) -> Option<TxnEntry> {
        self.map.get(&key).map(|e| *e)
    }

    /// Remembers a routed request unless its key is already known; its
    /// expiry is set from `now` by the RFC 3261 timers. Atomic per key, so
    /// of two copies of an INVITE routed at once on two worker threads only
    /// one gets in, and the other learns the winner's hop; never more than
    /// `capacity` entries, however many workers insert at once (the slot is
    /// reserved while the key's shard is locked).
    pub(crate) fn insert(&self, key: u64, mut entry: TxnEntry, now: Instant) -> Insert {
        match self.map.entry(key) {
            Entry::Occupied(e) => Insert::Known(e.get().hop),
            Entry::Vacant(_) if !self.reserve() => Insert::Full,
            Entry::Vacant(v) => {
                entry.expires = now
                    + if entry.invite {
                        INVITE_PENDING_LIFETIME
                    } else {
                        NON_INVITE_LIFETIME
                    };
                v.insert(entry);
                Insert::New
            }
        }
    }

    /// Notes a final response for the transaction; returns the entry as it
    /// was before (so the caller can tell the first final from a
    /// retransmission).
    pub(crate) fn finish(&self, key: u64, now: Instant) -> Option<TxnEntry> {
        let mut e = self.map.get_mut(&key)?;
        let before = *e;
        if !e.finished {
            e.finished = true;
            if e.invite {
                e.expires = now + INVITE_DONE_LIFETIME;
            }
        }
        Some(before)
    }

    /// Transactions without a final response yet.
    pub(crate) fn unfinished(&self) -> usize {
        self.map.iter().filter(|e| !e.finished).count()
    }

    /// Sends the rest of transaction `key` to `hop` (its first hop failed).
    pub(crate) fn set_hop(&self, key: u64, hop: Hop) {
        if let Some(mut e) = self.map.get_mut(&key) {
            e.hop = hop;
        }
    }

    /// Every live transaction, for the next run (R-GW-3).
    pub(crate) fn export(&self, now: Instant) -> Vec<SavedTxn> {
        self.map
            .iter()
            .filter(|e| e.expires > now)
            .map(|e| SavedTxn {
                key: *e.key(),
                inbound: e.inbound,
                hop: e.hop,
                invite: e.invite,
                initial: e.initial,
                owner: e.owner,
                left_ms: u64::try_from(e.expires.duration_since(now).as_millis())
                    .unwrap_or(u64::MAX),
                finished: e.finished,
            })
            .collect()
    }

    /// Takes in the transactions an earlier run passed (R-GW-3), each with
    /// the time it had left; one already here, or past the bound, is left
    /// out. The DNS answer a hop came from is not carried (the cache is
    /// this run's). Returns those taken.
    pub(crate) fn import(&self, saved: &[SavedTxn], now: Instant) -> Vec<TxnEntry> {
        let mut taken = Vec::new();
        for t in saved {
            let entry = TxnEntry {
                inbound: t.inbound,
                hop: Hop { dns: None, ..t.hop },
                invite: t.invite,
                initial: t.initial,
                owner: t.owner,
                expires: now + Duration::from_millis(t.left_ms),
                finished: t.finished,
            };
            if let Entry::Vacant(v) = self.map.entry(t.key) {
                if self.reserve() {
                    v.insert(entry);
                    taken.push(entry);
                }
            }
        }
        taken
    }

    /// Removes expired entries; returns those that expired without a final
    /// response (so work counts can be corrected).
    pub(crate) fn sweep(&self, now: Instant) -> Vec<TxnEntry> {
        let mut unfinished = Vec::new();
        self.map.retain(|_, e| {
            if e.expires > now {
                return true;
            }
            if !e.finished {
                unfinished.push(*e);
            }
            self.used.fetch_sub(1, Ordering::AcqRel);
            false
        });
        unfinished
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(invite: bool) -> TxnEntry {
        TxnEntry {
            inbound: Inbound::Udp {
                listener: 0,
                peer: "127.0.0.10:5060".parse().unwrap(),
            },
            hop: Hop {
                instance: Some(1),
                addr: "127.0.1.1:5060".parse().unwrap(),
                tcp: false,
                dns: None,
                flow: None,
            },
            invite,
            initial: invite,
            owner: Some(1),
            expires: Instant::now(),
            finished: false,
        }
    }

    #[test]
    fn retransmission_follows_first_hop() {
        let t = TxnTable::new(10);
        let now = Instant::now();
        assert_eq!(t.insert(7, entry(true), now), Insert::New);
        let mut other = entry(true);
        other.hop.addr = "127.0.1.2:5060".parse().unwrap();
        // The second copy learns the first one's hop, not its own.
        assert_eq!(t.insert(7, other, now), Insert::Known(entry(true).hop));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn expiry_follows_rfc3261_timers() {
        let t = TxnTable::new(10);
        let now = Instant::now();
        t.insert(1, entry(true), now);
        t.insert(2, entry(false), now);
        // Non-INVITE goes after Timer F; a pending INVITE stays.
        assert!(
            t.sweep(now + NON_INVITE_LIFETIME + Duration::from_millis(1))
                .len()
                == 1
        );
        assert!(t.get(1).is_some() && t.get(2).is_none());
        // A final response shortens the INVITE's life to Timer D.
        let later = now + Duration::from_secs(40);
        assert!(!t.finish(1, later).unwrap().finished);
        assert!(t.finish(1, later).unwrap().finished);
        assert!(t
            .sweep(later + INVITE_DONE_LIFETIME + Duration::from_millis(1))
            .is_empty());
        assert_eq!(t.len(), 0);
    }

    /// R-OV-1: the bound holds when workers insert at once: of many
    /// threads racing distinct keys into a table of 64, exactly 64 get in
    /// (a check of the size followed by an insert let each thread that
    /// checked before the others inserted take a slot past the bound), and
    /// the slots come back when the entries expire.
    #[test]
    fn r_ov_1_racing_inserts_never_pass_the_capacity() {
        const CAP: usize = 64;
        for round in 0..20u64 {
            let t = std::sync::Arc::new(TxnTable::new(CAP));
            let now = Instant::now();
            let start = std::sync::Arc::new(std::sync::Barrier::new(8));
            let threads: Vec<_> = (0..8u64)
                .map(|w| {
                    let (t, start) = (t.clone(), start.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        (0..64u64)
                            .filter(|i| {
                                let key = round << 32 | w << 16 | i;
                                t.insert(key, entry(false), now) == Insert::New
                            })
                            .count()
                    })
                })
                .collect();
            let admitted: usize = threads.into_iter().map(|h| h.join().unwrap()).sum();
            assert_eq!(admitted, CAP, "round {round}");
            assert_eq!((t.len(), t.map.len()), (CAP, CAP), "round {round}");
            t.sweep(now + NON_INVITE_LIFETIME + Duration::from_millis(1));
            assert_eq!((t.len(), t.map.len()), (0, 0));
            assert_eq!(t.insert(1, entry(false), now), Insert::New);
        }
    }

    #[test]
    fn an_invite_times_out_at_timer_b_unless_answered() {
        let now = Instant::now();
        let t = TxnTable::new(4);
        t.insert(1, entry(true), now);
        let e = t.get(1).unwrap();
        assert!(!e.invite_timed_out(now + TIMER_B - Duration::from_millis(1)));
        assert!(e.invite_timed_out(now + TIMER_B));
        t.finish(1, now);
        assert!(!t.get(1).unwrap().invite_timed_out(now + TIMER_B));
        t.insert(2, entry(false), now);
        assert!(!t.get(2).unwrap().invite_timed_out(now + TIMER_B));
    }

    #[test]
    fn full_table_refuses_new_but_serves_known() {
        let t = TxnTable::new(1);
        let now = Instant::now();
        assert_eq!(t.insert(1, entry(false), now), Insert::New);
        assert_eq!(t.insert(2, entry(false), now), Insert::Full);
        assert!(matches!(t.insert(1, entry(false), now), Insert::Known(_)));
        assert_eq!(t.len(), 1);
    }
}
