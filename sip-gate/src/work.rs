//! What the gate still serves per instance: open INVITE transactions and the
//! calls (INVITE dialogs) it record-routed and has not seen end. ringsync uses
//! the sum to tell `draining` from `drained` (R-ST-1).
//!
//! Dialogs are remembered by a hash of their Call-ID, so a 200 OK
//! retransmitted does not count twice. Routing reads it in one case: an
//! in-dialog request without a route set (a UA that keeps none) goes to the
//! instance its call was set up on, not where the ring points after a drain
//! (R-SG-4). A dialog whose BYE the gate never sees (a UA that vanished) is
//! forgotten after [`DIALOG_MAX_AGE`], so the count cannot stay up forever.

use std::hash::Hasher;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use siphasher::sip::SipHasher13;

use crate::message::SipMessage;

/// A call older than this is assumed gone.
pub(crate) const DIALOG_MAX_AGE: Duration = Duration::from_secs(12 * 3600);

/// Work counters for every instance of the site.
#[derive(Debug)]
pub struct WorkBook {
    invites: Vec<AtomicI64>,
    dialogs: Vec<AtomicI64>,
    open: DashMap<u64, (usize, Instant)>,
}

/// One instance's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Work {
    /// Open INVITE transactions.
    pub invites: u64,
    /// Established calls.
    pub dialogs: u64,
}

impl Work {
    /// Everything the instance still serves.
    pub fn total(&self) -> u64 {
        self.invites + self.dialogs
    }
}

fn dialog_key(msg: &SipMessage) -> u64 {
    let mut h = SipHasher13::new_with_keys(5, 6);
    h.write(msg.call_id().unwrap_or_default());
    h.finish()
}

impl WorkBook {
    /// Counters for `n` instances.
    pub(crate) fn new(n: usize) -> WorkBook {
        WorkBook {
            invites: (0..n).map(|_| AtomicI64::new(0)).collect(),
            dialogs: (0..n).map(|_| AtomicI64::new(0)).collect(),
            open: DashMap::new(),
        }
    }

    pub(crate) fn invite_started(&self, i: usize) {
        if let Some(c) = self.invites.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn invite_done(&self, i: usize) {
        if let Some(c) = self.invites.get(i) {
            c.fetch_sub(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn dialog_started(&self, i: usize, msg: &SipMessage) {
        if self
            .open
            .insert(dialog_key(msg), (i, Instant::now()))
            .is_none()
        {
            if let Some(c) = self.dialogs.get(i) {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn dialog_ended(&self, _i: usize, msg: &SipMessage) {
        if let Some((_, (i, _))) = self.open.remove(&dialog_key(msg)) {
            if let Some(c) = self.dialogs.get(i) {
                c.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// The instance serving the call this message belongs to, if this gate
    /// saw it set up and has not seen it end.
    pub(crate) fn dialog_instance(&self, msg: &SipMessage) -> Option<usize> {
        self.open.get(&dialog_key(msg)).map(|e| e.0)
    }

    /// Forgets calls older than [`DIALOG_MAX_AGE`].
    pub(crate) fn sweep(&self, now: Instant) {
        self.open.retain(|_, (i, since)| {
            if now.duration_since(*since) < DIALOG_MAX_AGE {
                return true;
            }
            if let Some(c) = self.dialogs.get(*i) {
                c.fetch_sub(1, Ordering::Relaxed);
            }
            false
        });
    }

    /// The work of instance `i`.
    pub fn get(&self, i: usize) -> Work {
        let read = |v: &Vec<AtomicI64>| {
            v.get(i)
                .map_or(0, |c| c.load(Ordering::Relaxed).max(0) as u64)
        };
        Work {
            invites: read(&self.invites),
            dialogs: read(&self.dialogs),
        }
    }
}
