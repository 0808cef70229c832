//! The subscribers' TCP connections the core can send into (RFC 5626 5.3):
//! which are open, and until when a registration uses each.
//!
//! The transport reports every connection accepted on a `subscriber`
//! listener and its close; a REGISTER 2xx relayed back on one holds it
//! until the registration expires, and the transport keeps a held
//! connection open while it is idle. The table is bounded by the
//! transport's connection limit (`[tcp] max_connections`): an entry lives
//! exactly as long as its connection.
//!
//! UDP flows need no entry: the token holds the address, and the NAT
//! binding on the subscriber's side is kept by its own keep-alives.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;

use crate::txn::ConnId;

/// One open subscriber connection.
#[derive(Debug, Clone, Copy)]
struct Conn {
    listener: usize,
    peer: SocketAddr,
    /// Until when a registration uses it (kept open while idle).
    held_until: Option<Instant>,
}

/// Open subscriber connections of this process.
#[derive(Debug)]
pub(crate) struct FlowTable {
    conns: DashMap<ConnId, Conn>,
    /// Names this process in TCP flow tokens: connection ids restart with
    /// the process, so a token of an earlier run must not open. A run that
    /// took over from an earlier one by a hand-over (R-GW-3) takes its
    /// epoch, with its connections and their ids: the tokens stay valid.
    epoch: AtomicU32,
}

impl FlowTable {
    /// An empty table with a random epoch.
    pub(crate) fn new() -> FlowTable {
        FlowTable {
            conns: DashMap::new(),
            epoch: AtomicU32::new(rand::random()),
        }
    }

    /// This process's epoch.
    pub(crate) fn epoch(&self) -> u32 {
        self.epoch.load(Ordering::Relaxed)
    }

    /// Takes the epoch of the run this one took over from (R-GW-3), before
    /// any flow token is made.
    pub(crate) fn inherit_epoch(&self, epoch: u32) {
        self.epoch.store(epoch, Ordering::Relaxed);
    }

    /// Whether `conn` is a flow, and for how long a registration still
    /// holds it from `now` (what a hand-over passes on, R-GW-3).
    pub(crate) fn state(&self, conn: ConnId, now: Instant) -> Option<Option<Duration>> {
        self.conns.get(&conn).map(|c| {
            c.held_until
                .and_then(|u| u.checked_duration_since(now))
                .filter(|d| !d.is_zero())
        })
    }

    /// A flow handed over by an earlier run (R-GW-3), held `held` more.
    pub(crate) fn adopt(
        &self,
        conn: ConnId,
        listener: usize,
        peer: SocketAddr,
        (now, held): (Instant, Option<Duration>),
    ) {
        self.conns.insert(
            conn,
            Conn {
                listener,
                peer,
                held_until: held.map(|d| now + d),
            },
        );
    }

    /// A connection was accepted on subscriber listener `listener`.
    pub(crate) fn opened(&self, conn: ConnId, listener: usize, peer: SocketAddr) {
        self.conns.insert(
            conn,
            Conn {
                listener,
                peer,
                held_until: None,
            },
        );
    }

    /// The connection closed.
    pub(crate) fn closed(&self, conn: ConnId) {
        self.conns.remove(&conn);
    }

    /// Whether `conn` is open, on `listener`, to `peer`.
    pub(crate) fn is_open(&self, conn: ConnId, listener: usize, peer: SocketAddr) -> bool {
        self.conns
            .get(&conn)
            .is_some_and(|c| c.listener == listener && c.peer == peer)
    }

    /// A registration through `conn` lasts `secs` from `now`: keep it open
    /// that long (a later, shorter one does not shorten an earlier one's).
    pub(crate) fn hold(&self, conn: ConnId, now: Instant, secs: u32) {
        let until = now + Duration::from_secs(secs.into());
        if let Some(mut c) = self.conns.get_mut(&conn) {
            c.held_until = Some(c.held_until.map_or(until, |u| u.max(until)));
        }
    }

    /// Whether a registration still uses `conn` at `now`.
    pub(crate) fn held(&self, conn: ConnId, now: Instant) -> bool {
        self.conns
            .get(&conn)
            .and_then(|c| c.held_until)
            .is_some_and(|u| u > now)
    }

    /// Open subscriber connections, and how many of them a registration uses.
    pub(crate) fn counts(&self, now: Instant) -> (usize, usize) {
        let held = self
            .conns
            .iter()
            .filter(|c| c.held_until.is_some_and(|u| u > now))
            .count();
        (self.conns.len(), held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_hold_close() {
        let t = FlowTable::new();
        let peer: SocketAddr = "203.0.113.7:50000".parse().unwrap();
        let now = Instant::now();
        assert!(!t.is_open(1, 0, peer));
        t.opened(1, 0, peer);
        assert!(t.is_open(1, 0, peer));
        // Another listener or peer is not this flow.
        assert!(!t.is_open(1, 1, peer));
        assert!(!t.is_open(1, 0, "203.0.113.7:50001".parse().unwrap()));
        assert!(!t.held(1, now));
        t.hold(1, now, 60);
        t.hold(1, now, 10); // a shorter one does not shorten it
        assert!(t.held(1, now + Duration::from_secs(59)));
        assert!(!t.held(1, now + Duration::from_secs(61)));
        assert_eq!(t.counts(now), (1, 1));
        t.closed(1);
        assert!(!t.is_open(1, 0, peer));
        assert!(!t.held(1, now));
        assert_eq!(t.counts(now), (0, 0));
    }
}
