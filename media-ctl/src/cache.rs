//! The retransmission cache: a client that does not hear an answer sends
//! the same datagram again (same cookie); it gets the answer already given,
//! and the mg does not see the command twice.
//!
//! Keyed by (client address, cookie): two clients may choose the same
//! cookie. Bounded in time ([`REPLY_TTL`], beyond Kamailio's default 5 s of
//! retries) and in bytes ([`REPLY_BYTES`], oldest first out), so memory
//! stays flat under any load.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;

/// How long an answer is kept for retransmissions.
pub(crate) const REPLY_TTL: Duration = Duration::from_secs(10);
/// Most bytes of answers kept.
pub(crate) const REPLY_BYTES: usize = 32 << 20;

/// Entries are found by a keyed hash of (client, cookie), so a lookup
/// allocates nothing; the entry keeps both to rule out a collision.
type Key = u64;

/// What is known of a (client, cookie).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Sent on as this pending command (`None`: a search of the pool for
    /// the call is under way).
    Pending(Option<u64>),
    /// Answered with this datagram.
    Done(Bytes),
}

#[derive(Debug)]
struct Entry {
    client: SocketAddr,
    cookie: Box<[u8]>,
    slot: Slot,
    at: Instant,
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<Key, Entry>,
    order: VecDeque<(Key, Instant)>,
    bytes: usize,
}

/// The cache.
#[derive(Debug, Default)]
pub(crate) struct ReplyCache {
    inner: Mutex<Inner>,
    hasher: RandomState,
}

impl ReplyCache {
    /// An empty cache.
    pub(crate) fn new() -> ReplyCache {
        ReplyCache::default()
    }

    fn key(&self, client: SocketAddr, cookie: &[u8]) -> Key {
        self.hasher.hash_one((client, cookie))
    }

    /// What is known of this cookie from this client.
    pub(crate) fn lookup(&self, client: SocketAddr, cookie: &[u8]) -> Option<Slot> {
        let key = self.key(client, cookie);
        let inner = self.lock();
        inner
            .map
            .get(&key)
            .filter(|e| e.client == client && *e.cookie == *cookie)
            .map(|e| e.slot.clone())
    }

    /// Records that the command is on its way.
    pub(crate) fn pending(&self, client: SocketAddr, cookie: &[u8], id: Option<u64>, now: Instant) {
        let key = self.key(client, cookie);
        let mut inner = self.lock();
        inner.order.push_back((key, now));
        let entry = Entry {
            client,
            cookie: Box::from(cookie),
            slot: Slot::Pending(id),
            at: now,
        };
        if let Some(Entry {
            slot: Slot::Done(old),
            ..
        }) = inner.map.insert(key, entry)
        {
            inner.bytes -= old.len();
        }
    }

    /// Records the answer given (for a retransmission to find).
    pub(crate) fn done(&self, client: SocketAddr, cookie: &[u8], reply: Bytes, now: Instant) {
        let key = self.key(client, cookie);
        let mut inner = self.lock();
        // The entry keeps its first time stamp: the one queued for expiry.
        let prev = inner.map.remove(&key);
        let (at, cookie) = match prev {
            Some(e) => {
                if let Slot::Done(old) = &e.slot {
                    inner.bytes -= old.len();
                }
                (e.at, e.cookie)
            }
            None => {
                inner.order.push_back((key, now));
                (now, Box::from(cookie))
            }
        };
        inner.bytes += reply.len();
        inner.map.insert(
            key,
            Entry {
                client,
                cookie,
                slot: Slot::Done(reply),
                at,
            },
        );
        while inner.bytes > REPLY_BYTES {
            if !inner.evict_oldest() {
                break;
            }
        }
    }

    /// Forgets entries older than [`REPLY_TTL`].
    pub(crate) fn expire(&self, now: Instant) {
        let mut inner = self.lock();
        while let Some((_, at)) = inner.order.front() {
            if now.saturating_duration_since(*at) < REPLY_TTL {
                break;
            }
            inner.evict_oldest();
        }
    }

    /// Entries and bytes held (its tests check the bounds with it).
    #[cfg(test)]
    pub(crate) fn size(&self) -> (usize, usize) {
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
        if self.map.get(&key).is_some_and(|e| e.at == at) {
            if let Some(Entry {
                slot: Slot::Done(b),
                ..
            }) = self.map.remove(&key)
            {
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
