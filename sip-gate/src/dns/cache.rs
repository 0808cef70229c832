//! The answers the gate holds, per their TTL, and what waits for them.
//!
//! Bounded everywhere (R-OV-1): answers (`[dns] cache_size`; the one that
//! expires first goes), messages parked while a name resolves (per name and
//! in all), targets marked failed. Negative answers are cached too, so a
//! name that does not resolve is not asked for on every request.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ringsync::config::DnsConfig;

use super::order::order;
use super::{DnsFailure, DnsQuery, DnsResult};
use crate::txn::Inbound;

/// Names being resolved at once; beyond it, requests get 503.
const MAX_PENDING_NAMES: usize = 1024;
/// Messages waiting for one name (retransmissions included).
const MAX_PARKED_PER_NAME: usize = 64;
/// Targets remembered as failed.
const MAX_FAILED: usize = 1024;
/// How long a lookup that got no answer at all is remembered (capped by
/// `negative_ttl_s`): long enough to spare a dead name server a flood.
const UNAVAILABLE_TTL: Duration = Duration::from_secs(5);

/// A message waiting for a name.
pub(crate) type Parked = (Inbound, Bytes);

/// What the cache says about a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cached {
    /// The address to send to (the first in RFC 2782 order that has not
    /// failed lately), over TCP or UDP; `key` names the answer for failover.
    Hit {
        key: u64,
        addr: SocketAddr,
        tcp: bool,
    },
    /// A negative answer.
    Failed(DnsFailure),
    /// Not cached (or expired): ask.
    Miss,
}

/// What [`DnsCache::park`] did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Park {
    /// The first for this name: start a lookup.
    First,
    /// Queued behind a lookup already running.
    Queued,
    /// Too much is waiting already.
    Full,
}

struct Entry {
    query: DnsQuery,
    result: DnsResult,
    expires: Instant,
}

#[derive(Default)]
struct Inner {
    answers: HashMap<u64, Entry>,
    parked: HashMap<DnsQuery, Vec<Parked>>,
    failed: HashMap<SocketAddr, Instant>,
}

/// The gate's DNS cache.
pub(crate) struct DnsCache {
    inner: Mutex<Inner>,
    capacity: usize,
    negative_cap: Duration,
    hold: Duration,
}

impl std::fmt::Debug for DnsCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DnsCache")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

/// The cache key of a query.
pub(crate) fn key(q: &DnsQuery) -> u64 {
    let mut h = DefaultHasher::new();
    q.hash(&mut h);
    h.finish()
}

impl DnsCache {
    /// An empty cache with the `[dns]` bounds.
    pub(crate) fn new(cfg: &DnsConfig) -> DnsCache {
        DnsCache {
            inner: Mutex::new(Inner::default()),
            capacity: cfg.cache_size.max(1),
            negative_cap: Duration::from_secs(cfg.negative_ttl_s.into()),
            hold: Duration::from_secs(cfg.failover_hold_s.into()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere cannot leave the maps half-updated: every
        // change below is a single insert or remove.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached answer for `q`, ordered by `seed`; `stale_ok` takes an
    /// expired one too (a message handed back right after its lookup).
    pub(crate) fn get(&self, q: &DnsQuery, seed: u64, now: Instant, stale_ok: bool) -> Cached {
        let k = key(q);
        let inner = self.lock();
        let Some(e) = inner.answers.get(&k).filter(|e| e.query == *q) else {
            return Cached::Miss;
        };
        if e.expires <= now && !stale_ok {
            return Cached::Miss;
        }
        match &e.result {
            Err(f) => Cached::Failed(*f),
            Ok(answer) => {
                let all = order(&answer.targets, seed);
                let live = all
                    .iter()
                    .find(|a| !is_held(&inner.failed, a, now))
                    .or(all.first());
                match live {
                    Some(&addr) => Cached::Hit {
                        key: k,
                        addr,
                        tcp: answer.tcp,
                    },
                    None => Cached::Failed(DnsFailure::NotFound {
                        ttl: Duration::ZERO,
                    }),
                }
            }
        }
    }

    /// Stores a lookup's result, evicting the entry that expires first
    /// when full.
    pub(crate) fn insert(&self, query: DnsQuery, result: DnsResult, now: Instant) {
        let ttl = match &result {
            Ok(a) => a.ttl,
            Err(DnsFailure::NotFound { ttl }) => (*ttl).min(self.negative_cap),
            Err(DnsFailure::Unavailable) => UNAVAILABLE_TTL.min(self.negative_cap),
        };
        let k = key(&query);
        let mut inner = self.lock();
        if inner.answers.len() >= self.capacity && !inner.answers.contains_key(&k) {
            inner.answers.retain(|_, e| e.expires > now);
            if inner.answers.len() >= self.capacity {
                let first = inner
                    .answers
                    .iter()
                    .min_by_key(|(_, e)| e.expires)
                    .map(|(k, _)| *k);
                if let Some(old) = first {
                    inner.answers.remove(&old);
                }
            }
        }
        inner.answers.insert(
            k,
            Entry {
                query,
                result,
                expires: now + ttl,
            },
        );
    }

    /// Parks a message until `q` resolves.
    pub(crate) fn park(&self, q: &DnsQuery, msg: Parked) -> Park {
        let mut inner = self.lock();
        if let Some(waiting) = inner.parked.get_mut(q) {
            if waiting.len() >= MAX_PARKED_PER_NAME {
                return Park::Full;
            }
            waiting.push(msg);
            return Park::Queued;
        }
        if inner.parked.len() >= MAX_PENDING_NAMES {
            return Park::Full;
        }
        inner.parked.insert(q.clone(), vec![msg]);
        Park::First
    }

    /// The messages that waited for `q`.
    pub(crate) fn take_parked(&self, q: &DnsQuery) -> Vec<Parked> {
        self.lock().parked.remove(q).unwrap_or_default()
    }

    /// Marks `addr` failed for `[dns] failover_hold_s`, and returns the
    /// next target of answer `key` in the order of `seed` after `addr` that
    /// has not failed lately; `None` when there is none.
    pub(crate) fn fail_over(
        &self,
        key: u64,
        addr: SocketAddr,
        seed: u64,
        now: Instant,
    ) -> Option<SocketAddr> {
        self.hold(addr, now);
        let inner = self.lock();
        let answer = inner.answers.get(&key)?.result.as_ref().ok()?;
        let all = order(&answer.targets, seed);
        let after = all.iter().position(|a| *a == addr)? + 1;
        all.get(after..)?
            .iter()
            .find(|a| !is_held(&inner.failed, a, now))
            .copied()
    }
}

impl DnsCache {
    /// Passes `addr` over for `[dns] failover_hold_s`: it could not be
    /// reached (a TCP connect failed, an ICMP error came back).
    pub(crate) fn hold(&self, addr: SocketAddr, now: Instant) {
        let mut inner = self.lock();
        if inner.failed.len() >= MAX_FAILED && !inner.failed.contains_key(&addr) {
            inner.failed.retain(|_, until| *until > now);
            if inner.failed.len() >= MAX_FAILED {
                inner.failed.clear();
            }
        }
        inner.failed.insert(addr, now + self.hold);
    }

    /// Whether `addr` is being passed over.
    pub(crate) fn held(&self, addr: SocketAddr, now: Instant) -> bool {
        is_held(&self.lock().failed, &addr, now)
    }
}

fn is_held(failed: &HashMap<SocketAddr, Instant>, addr: &SocketAddr, now: Instant) -> bool {
    failed.get(addr).is_some_and(|until| *until > now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::{DnsAnswer, SrvTarget};

    fn q(host: &str) -> DnsQuery {
        DnsQuery {
            host: host.into(),
            port: None,
            tcp: None,
            udp_ok: true,
            tcp_ok: true,
            v6: false,
        }
    }

    fn answer(ttl: u64, prios: &[(u16, u8)]) -> DnsResult {
        Ok(DnsAnswer {
            tcp: true,
            targets: prios
                .iter()
                .map(|&(priority, octet)| SrvTarget {
                    priority,
                    weight: 0,
                    addrs: vec![SocketAddr::from(([192, 0, 2, octet], 5060))],
                })
                .collect(),
            ttl: Duration::from_secs(ttl),
        })
    }

    fn cfg(size: usize) -> DnsConfig {
        DnsConfig {
            cache_size: size,
            negative_ttl_s: 10,
            failover_hold_s: 30,
            ..DnsConfig::default()
        }
    }

    #[test]
    fn ttl_expiry_negative_cap_and_bound() {
        let c = DnsCache::new(&cfg(2));
        let t0 = Instant::now();
        c.insert(q("a.example"), answer(60, &[(10, 1)]), t0);
        assert!(matches!(
            c.get(&q("a.example"), 0, t0, false),
            Cached::Hit { .. }
        ));
        let later = t0 + Duration::from_secs(61);
        assert_eq!(c.get(&q("a.example"), 0, later, false), Cached::Miss);
        assert!(matches!(
            c.get(&q("a.example"), 0, later, true),
            Cached::Hit { .. }
        ));
        // A negative answer of an hour is kept for the cap (10 s).
        let nx = Err(DnsFailure::NotFound {
            ttl: Duration::from_secs(3600),
        });
        c.insert(q("nx.example"), nx, t0);
        assert!(matches!(
            c.get(&q("nx.example"), 0, t0, false),
            Cached::Failed(_)
        ));
        assert_eq!(
            c.get(&q("nx.example"), 0, t0 + Duration::from_secs(11), false),
            Cached::Miss
        );
        // Full: the entry that expires first goes.
        c.insert(q("b.example"), answer(5, &[(10, 2)]), t0);
        assert_eq!(c.get(&q("nx.example"), 0, t0, false), Cached::Miss);
        assert!(matches!(
            c.get(&q("a.example"), 0, t0, false),
            Cached::Hit { .. }
        ));
    }

    #[test]
    fn failover_walks_the_order_and_holds_failed_targets() {
        let c = DnsCache::new(&cfg(8));
        let t0 = Instant::now();
        c.insert(q("f.example"), answer(60, &[(10, 1), (20, 2), (30, 3)]), t0);
        let Cached::Hit { key, addr, tcp } = c.get(&q("f.example"), 0, t0, false) else {
            panic!()
        };
        assert!(tcp);
        assert_eq!(addr.ip(), std::net::IpAddr::from([192, 0, 2, 1]));
        let next = c.fail_over(key, addr, 0, t0).unwrap();
        assert_eq!(next.ip(), std::net::IpAddr::from([192, 0, 2, 2]));
        // A new request skips the failed target while it is held...
        let Cached::Hit { addr, .. } = c.get(&q("f.example"), 9, t0, false) else {
            panic!()
        };
        assert_eq!(addr, next);
        // ...and tries it again afterwards.
        let Cached::Hit { addr, .. } =
            c.get(&q("f.example"), 9, t0 + Duration::from_secs(31), true)
        else {
            panic!()
        };
        assert_eq!(addr.ip(), std::net::IpAddr::from([192, 0, 2, 1]));
        let last = c.fail_over(key, next, 0, t0).unwrap();
        assert_eq!(c.fail_over(key, last, 0, t0), None);
    }

    #[test]
    fn parking_is_bounded() {
        let c = DnsCache::new(&cfg(8));
        let m = (
            Inbound::Udp {
                listener: 0,
                peer: "127.0.0.1:5060".parse().unwrap(),
            },
            Bytes::new(),
        );
        assert_eq!(c.park(&q("p.example"), m.clone()), Park::First);
        for _ in 1..MAX_PARKED_PER_NAME {
            assert_eq!(c.park(&q("p.example"), m.clone()), Park::Queued);
        }
        assert_eq!(c.park(&q("p.example"), m.clone()), Park::Full);
        assert_eq!(c.take_parked(&q("p.example")).len(), MAX_PARKED_PER_NAME);
        assert_eq!(c.park(&q("p.example"), m), Park::First);
    }
}
