//! The retransmission cache: a client that does not hear an answer sends
//! the same datagram again (same cookie); it gets the answer already given,
//! and the mg does not see the command twice.
//!
//! Keyed by (client address, cookie): two clients may choose the same
//! cookie. Bounded in time ([`REPLY_TTL`], beyond Kamailio's default 5 s of
//! retries) and in bytes ([`REPLY_BYTES`], oldest first out), so memory
//! stays flat under any load.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;

/// How long an answer is kept for retransmissions.
pub const REPLY_TTL: Duration = Duration::from_secs(10);
/// Most bytes of answers kept.
pub const REPLY_BYTES: usize = 32 << 20;

type Key = (SocketAddr, Box<[u8]>);

/// What is known of a (client, cookie).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot {
    /// Sent on as this pending command (`None`: a search of the pool for
    /// the call is under way).
    Pending(Option<u64>),
    /// Answered with this datagram.
    Done(Bytes),
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<Key, (Slot, Instant)>,
    order: VecDeque<(Key, Instant)>,
    bytes: usize,
}

/// The cache.
#[derive(Debug, Default)]
pub struct ReplyCache {
    inner: Mutex<Inner>,
}

impl ReplyCache {
    /// An empty cache.
    pub fn new() -> ReplyCache {
        ReplyCache::default()
    }

    /// What is known of this cookie from this client.
    pub fn lookup(&self, client: SocketAddr, cookie: &[u8]) -> Option<Slot> {
        let inner = self.lock();
        inner
            .map
            .get(&(client, Box::from(cookie)))
            .map(|(s, _)| s.clone())
    }

    /// Records that the command is on its way.
    pub fn pending(&self, client: SocketAddr, cookie: &[u8], id: Option<u64>, now: Instant) {
        let mut inner = self.lock();
        let key: Key = (client, Box::from(cookie));
        inner.order.push_back((key.clone(), now));
        if let Some((Slot::Done(old), _)) = inner.map.insert(key, (Slot::Pending(id), now)) {
            inner.bytes -= old.len();
        }
    }

    /// Records the answer given (for a retransmission to find).
    pub fn done(&self, client: SocketAddr, cookie: &[u8], reply: Bytes, now: Instant) {
        let mut inner = self.lock();
        let key: Key = (client, Box::from(cookie));
        // The entry keeps its first time stamp: the one queued for expiry.
        let prev = inner.map.remove(&key);
        let at = match &prev {
            Some((_, at)) => *at,
            None => {
                inner.order.push_back((key.clone(), now));
                now
            }
        };
        if let Some((Slot::Done(old), _)) = prev {
            inner.bytes -= old.len();
        }
        inner.bytes += reply.len();
        inner.map.insert(key, (Slot::Done(reply), at));
        while inner.bytes > REPLY_BYTES {
            if !inner.evict_oldest() {
                break;
            }
        }
    }

    /// Forgets entries older than [`REPLY_TTL`].
    pub fn expire(&self, now: Instant) {
        let mut inner = self.lock();
        while let Some((_, at)) = inner.order.front() {
            if now.saturating_duration_since(*at) < REPLY_TTL {
                break;
            }
            inner.evict_oldest();
        }
    }

    /// Entries and bytes held.
    pub fn size(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.map.len(), inner.bytes)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    /// Drops the oldest queued entry if the map still holds that version of
    /// it (a key queued again later is dropped by its later entry).
    fn evict_oldest(&mut self) -> bool {
        let Some((key, at)) = self.order.pop_front() else {
            return false;
        };
        if self.map.get(&key).is_some_and(|(_, t)| *t == at) {
            if let Some((Slot::Done(b), _)) = self.map.remove(&key) {
                self.bytes -= b.len();
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(p: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], p))
    }

    #[test]
    fn same_cookie_other_client_is_another_command() {
        let c = ReplyCache::new();
        let t0 = Instant::now();
        c.pending(addr(1), b"k", Some(9), t0);
        let t1 = t0 + Duration::from_millis(300);
        assert_eq!(c.lookup(addr(1), b"k"), Some(Slot::Pending(Some(9))));
        assert_eq!(c.lookup(addr(2), b"k"), None);
        c.done(addr(1), b"k", Bytes::from_static(b"k d6:result2:oke"), t1);
        assert_eq!(
            c.lookup(addr(1), b"k"),
            Some(Slot::Done(Bytes::from_static(b"k d6:result2:oke")))
        );
        assert_eq!(c.size(), (1, 16));
        c.expire(t0 + REPLY_TTL - Duration::from_millis(1));
        assert_eq!(c.size().0, 1);
        c.expire(t0 + REPLY_TTL);
        assert_eq!(c.size(), (0, 0));
    }

    #[test]
    fn bytes_are_bounded_oldest_first() {
        let c = ReplyCache::new();
        let t0 = Instant::now();
        let big = Bytes::from(vec![b'x'; REPLY_BYTES / 4 + 1]);
        for i in 0..8u16 {
            c.done(
                addr(i),
                b"k",
                big.clone(),
                t0 + Duration::from_millis(i.into()),
            );
        }
        let (n, bytes) = c.size();
        assert!(bytes <= REPLY_BYTES && n == 3, "{n} {bytes}");
        assert_eq!(c.lookup(addr(0), b"k"), None);
        assert!(c.lookup(addr(7), b"k").is_some());
    }
}
