//! One plain connection's part in a gate upgrade's hand-over (R-GW-3):
//! its own stop and when it last read or wrote, so that the busy ones are
//! given up first. Below both the readers (`stream`, `ws`) that touch it
//! and the hand-over (`handover`) that stops it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use tokio_util::sync::CancellationToken;

use crate::txn::ConnId;

/// The connections of one hand-over's table, each leaving when it ends.
pub(super) type Members = Arc<DashMap<ConnId, Arc<Member>>>;

/// One plain connection's part in a hand-over.
#[derive(Debug)]
pub(super) struct Member {
    /// The listener it belongs to.
    listener: usize,
    /// The other end.
    peer: SocketAddr,
    /// Stops its reader between two messages and its writer once what was
    /// queued is written; then the connection is given up.
    go: CancellationToken,
    /// When it last read or wrote, in ms ([`clock_ms`]); 0: never.
    active: AtomicU64,
}

impl Member {
    /// A connection on `listener` from `peer`, stopped by `go`; idle
    /// until it reads or writes.
    pub(super) fn new(listener: usize, peer: SocketAddr, go: CancellationToken) -> Member {
        Member {
            listener,
            peer,
            go,
            active: AtomicU64::new(0),
        }
    }

    /// The listener it belongs to.
    pub(super) fn listener(&self) -> usize {
        self.listener
    }

    /// The other end.
    pub(super) fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// What stops it.
    pub(super) fn go(&self) -> &CancellationToken {
        &self.go
    }

    /// It read or wrote just now.
    pub(super) fn touch(&self) {
        self.active.store(clock_ms(), Ordering::Relaxed);
    }

    /// Whether a hand-over stopped it.
    pub(super) fn stopped(&self) -> bool {
        self.go.is_cancelled()
    }

    /// Whether it read or wrote within [`IDLE_FOR`] of `now` ([`clock_ms`]).
    pub(super) fn busy(&self, now: u64) -> bool {
        let at = self.active.load(Ordering::Relaxed);
        at != 0 && now.saturating_sub(at) < IDLE_FOR.as_millis() as u64
    }
}

/// Resolves once a hand-over stops the connection of `member`; never for
/// one that does not move (`None`).
pub(super) async fn handed(member: Option<&Member>) {
    match member {
        Some(m) => m.go.cancelled().await,
        None => std::future::pending().await,
    }
}

/// A hand-over gives up first the connections that read or wrote within
/// this (their peers are waiting for something), the idle ones after them
/// (R-GW-3).
pub(super) const IDLE_FOR: Duration = Duration::from_millis(500);

/// Milliseconds since the first call, never 0: a [`Member`]'s clock.
pub(super) fn clock_ms() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}
