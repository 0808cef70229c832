//! What the gate's upgrade (R-GW-3) reads from and gives to the core: the
//! subscribers' flows that move with their connections, the epoch their
//! tokens name, and the work book as it is.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::txn::{ConnId, SavedTxn};
use crate::work::WorkSnapshot;

use super::Core;

impl Core {
    /// Whether connection `conn` is a subscriber's flow and how long a
    /// registration still holds it (R-GW-3: a hand-over passes both on).
    pub(crate) fn flow_state(&self, conn: ConnId, now: Instant) -> Option<Option<Duration>> {
        self.flow_table.state(conn, now)
    }

    /// A flow an earlier run handed over (R-GW-3), held `held` from `now`.
    pub(crate) fn adopt_flow(
        &self,
        (conn, listener, peer): (ConnId, usize, SocketAddr),
        now: Instant,
        held: Option<Duration>,
    ) {
        self.flow_table.adopt(conn, listener, peer, (now, held));
    }

    /// The epoch flow tokens name (R-GW-3: a hand-over passes it on).
    pub(crate) fn flow_epoch(&self) -> u32 {
        self.flow_table.epoch()
    }

    /// Takes the epoch of the run this one took over from (R-GW-3).
    pub(crate) fn inherit_flow_epoch(&self, epoch: u32) {
        self.flow_table.inherit_epoch(epoch);
    }

    /// The work book as it is, whatever is in flight: what a hand-over
    /// passes to the next run, which serves those transactions' answers
    /// (R-GW-3). A stop's snapshot waits for them instead.
    pub(crate) fn work_now(&self, now: Instant) -> WorkSnapshot {
        self.work.snapshot(now)
    }

    /// The transactions in flight and completed, for the next run (R-GW-3).
    pub(crate) fn txns_now(&self, now: Instant) -> Vec<SavedTxn> {
        self.txns.export(now)
    }

    /// Takes in the transactions of the run this one took over from
    /// (R-GW-3): their answers find them here, and an INVITE waiting for
    /// its final response counts as its instance's work, as it did there.
    /// Returns how many were taken.
    pub(crate) fn take_txns(&self, saved: &[SavedTxn], now: Instant) -> usize {
        let taken = self.txns.import(saved, now);
        for e in taken.iter().filter(|e| e.invite && !e.finished) {
            if let Some(i) = e.owner {
                self.work.invite_started(i);
            }
        }
        taken.len()
    }
}
