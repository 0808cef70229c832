//! Which configured instances the gate could not reach over a stream
//! transport lately (a TCP connect or a TLS handshake failed), and until
//! when it passes them over for new work that way.
//!
//! The health probe goes over UDP, so it keeps such an instance `up`; this
//! is the TCP/TLS side of the same question. A failure holds the instance's
//! transport down for `[dns] failover_hold_s`, the hold DNS targets get
//! (RFC 3263 failover): new dialogs of a pool go to the other instances
//! meanwhile (R-AA-1), and the work report names it (`ringsync status`). A
//! connection that succeeds ends the hold at once.
//!
//! Read on every new dialog over a stream: one atomic load per check, no
//! lock. The reasons, only for the report and the log, sit behind a mutex
//! that only failures, recoveries and reports take.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ringsync::config::Transport;
use ringsync::work::{self, Unreachable};

/// A stream transport toward an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    /// Plain TCP.
    Tcp,
    /// TLS over TCP.
    Tls,
}

impl Stream {
    fn slot(self) -> usize {
        match self {
            Stream::Tcp => 0,
            Stream::Tls => 1,
        }
    }

    /// The name used in logs, metrics and reports.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Stream::Tcp => "tcp",
            Stream::Tls => "tls",
        }
    }

    fn transport(self) -> Transport {
        match self {
            Stream::Tcp => Transport::Tcp,
            Stream::Tls => Transport::Tls,
        }
    }
}

const STREAMS: [Stream; 2] = [Stream::Tcp, Stream::Tls];

/// Why and since when a hold began (wall clock, for the report).
#[derive(Debug, Clone)]
struct Why {
    reason: String,
    since_ms: u64,
}

/// The holds of every instance, per stream transport.
#[derive(Debug)]
pub(crate) struct Reach {
    /// `Instant` and Unix ms of the same moment: holds are kept as
    /// milliseconds after it, reported as wall-clock times.
    base: Instant,
    base_unix_ms: u64,
    hold: Duration,
    /// Per instance and [`Stream::slot`]: the hold's end in ms after
    /// `base`; 0 when not held.
    until: Vec<[AtomicU64; 2]>,
    why: Mutex<Vec<[Option<Why>; 2]>>,
}

/// What [`Reach::failed`] or [`Reach::connected`] changed, for the caller
/// to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// The transport was not held and now is.
    Down,
    /// It was held already; the hold starts again.
    StillDown,
    /// It was held and a connection succeeded.
    Up,
    /// Nothing changed.
    Same,
}

impl Reach {
    /// Holds for `n` instances, each lasting `hold`.
    pub(crate) fn new(n: usize, hold: Duration, now: Instant) -> Reach {
        Reach {
            base: now,
            base_unix_ms: work::now_ms(),
            hold,
            until: (0..n)
                .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                .collect(),
            why: Mutex::new(vec![[None, None]; n]),
        }
    }

    fn ms(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<[Option<Why>; 2]>> {
        // Every change below is one assignment: a panic elsewhere leaves
        // nothing half-done.
        self.why.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether instance `idx` is held down over `stream` at `now`.
    #[inline]
    pub(crate) fn held(&self, idx: usize, stream: Stream, now: Instant) -> bool {
        self.until
            .get(idx)
            .map(|u| u[stream.slot()].load(Ordering::Relaxed))
            .is_some_and(|until| until != 0 && until > self.ms(now))
    }

    /// A connection to instance `idx` over `stream` failed: held down from
    /// `now` for the hold.
    pub(crate) fn failed(
        &self,
        idx: usize,
        stream: Stream,
        reason: String,
        now: Instant,
    ) -> Change {
        let Some(slot) = self.until.get(idx).map(|u| &u[stream.slot()]) else {
            return Change::Same;
        };
        let was = self.held(idx, stream, now);
        // 1 at the earliest: 0 reads as "not held".
        let until = self.ms(now).saturating_add(self.hold_ms()).max(1);
        let mut why = self.lock();
        slot.store(until, Ordering::Relaxed);
        if let Some(w) = why.get_mut(idx) {
            // Since the first failure of a run of them.
            let since_ms = match (&w[stream.slot()], was) {
                (Some(old), true) => old.since_ms,
                _ => work::now_ms(),
            };
            w[stream.slot()] = Some(Why { reason, since_ms });
        }
        if was {
            Change::StillDown
        } else {
            Change::Down
        }
    }

    /// A connection to instance `idx` over `stream` succeeded: a hold ends.
    pub(crate) fn connected(&self, idx: usize, stream: Stream, now: Instant) -> Change {
        let Some(slot) = self.until.get(idx).map(|u| &u[stream.slot()]) else {
            return Change::Same;
        };
        if slot.load(Ordering::Relaxed) == 0 {
            return Change::Same;
        }
        let was = self.held(idx, stream, now);
        let mut why = self.lock();
        slot.store(0, Ordering::Relaxed);
        if let Some(w) = why.get_mut(idx) {
            w[stream.slot()] = None;
        }
        if was {
            Change::Up
        } else {
            Change::Same
        }
    }

    fn hold_ms(&self) -> u64 {
        u64::try_from(self.hold.as_millis()).unwrap_or(u64::MAX)
    }

    /// Instance `idx`'s holds that last at `now`, as the work report
    /// carries them.
    pub(crate) fn report(&self, idx: usize, now: Instant) -> Vec<Unreachable> {
        let Some(until) = self.until.get(idx) else {
            return Vec::new();
        };
        let why = self.lock();
        STREAMS
            .iter()
            .filter(|s| self.held(idx, **s, now))
            .filter_map(|&s| {
                let w = why.get(idx)?[s.slot()].as_ref()?;
                let end = until[s.slot()].load(Ordering::Relaxed);
                Some(Unreachable {
                    transport: s.transport(),
                    reason: w.reason.clone(),
                    since_ms: w.since_ms,
                    until_ms: self.base_unix_ms.saturating_add(end),
                })
            })
            .collect()
    }

    /// Whether instance `idx` is held down over each stream at `now`
    /// (`[tcp, tls]`), for the metrics.
    pub(crate) fn held_each(&self, idx: usize, now: Instant) -> [bool; 2] {
        STREAMS.map(|s| self.held(idx, s, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_holds_one_transport_for_the_hold_and_a_connection_ends_it() {
        let t0 = Instant::now();
        let r = Reach::new(2, Duration::from_secs(30), t0);
        assert!(!r.held(0, Stream::Tcp, t0));
        assert_eq!(r.failed(0, Stream::Tcp, "refused".into(), t0), Change::Down);
        assert!(r.held(0, Stream::Tcp, t0 + Duration::from_secs(29)));
        assert!(
            !r.held(0, Stream::Tls, t0),
            "only the transport that failed"
        );
        assert!(!r.held(1, Stream::Tcp, t0), "only the instance that failed");
        assert!(!r.held(0, Stream::Tcp, t0 + Duration::from_secs(30)));
        let rep = r.report(0, t0);
        assert_eq!(rep.len(), 1);
        assert_eq!(rep[0].transport, Transport::Tcp);
        assert_eq!(rep[0].reason, "refused");
        assert_eq!(rep[0].until_ms - r.base_unix_ms, 30_000);
        assert!(r.report(0, t0 + Duration::from_secs(31)).is_empty());
        assert_eq!(
            r.failed(0, Stream::Tcp, "refused again".into(), t0),
            Change::StillDown
        );
        assert_eq!(r.connected(0, Stream::Tcp, t0), Change::Up);
        assert!(!r.held(0, Stream::Tcp, t0));
        assert_eq!(r.connected(0, Stream::Tcp, t0), Change::Same);
        assert_eq!(r.held_each(0, t0), [false, false]);
        assert_eq!(r.failed(9, Stream::Tcp, "x".into(), t0), Change::Same);
        assert!(!r.held(9, Stream::Tcp, t0));
    }
}
