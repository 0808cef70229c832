//! The core's side of a ws pool (R-WS-3): which `ws` instance takes a new
//! WebSocket connection, and the bookkeeping of its connections (its work,
//! R-ST-2) and of instances that refuse them. The bytes themselves are the
//! transport's (`transport/ws/pool.rs`); the core never sees them.
//!
//! The key into the `ws` ring is the client's IP address, not the
//! `Sec-WebSocket-Key`: the key is random per connection, so it would
//! spread connections as well but give no affinity at all, while the
//! address brings a client that reconnects (a reload, a network blip,
//! another tab) back to the same instance as long as the pool is the same,
//! and a drain moves only the clients of the drained instance (R-AA-2).
//! The price: clients behind one NAT address share one instance.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use ringsync::config::Service;

use super::Core;
use crate::reach::{Change, Stream};

/// Where a ws pool passes one connection: the instance and its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WsTarget {
    /// Index of the `ws` instance in the config.
    pub(crate) idx: usize,
    /// Its `ws` address.
    pub(crate) addr: SocketAddr,
}

impl Core {
    /// The `ws` instance a new connection from `client` goes to: the ring
    /// of normal-zone `ws` instances that are not down (R-WS-3, R-AA-1;
    /// all draining: the draining ones, R-AA-4), passing over one held
    /// unreachable over `stream` for the next reachable member. `None`
    /// when the site has no `ws` ring (no ws pool) or no instance.
    pub(crate) fn ws_pick(&self, client: IpAddr, stream: Stream, now: Instant) -> Option<WsTarget> {
        let view = self.view();
        let ring = view.ring(&Service::Ws)?;
        let key = client.to_string();
        let first = ring.get(key.as_bytes())?;
        let idx = if self.reach.held(first, stream, now) {
            // The ring's members in order from the first, the first
            // reachable one: the same for every gate node.
            let members = ring.members();
            let at = members.iter().position(|&m| m == first).unwrap_or(0);
            (1..members.len())
                .map(|k| members[(at + k) % members.len()])
                .find(|&m| !self.reach.held(m, stream, now))
                .unwrap_or(first)
        } else {
            first
        };
        let addr = self.config.instances.get(idx)?.ws?;
        Some(WsTarget { idx, addr })
    }

    /// A connection to `ws` instance `idx` opened (`up`) or closed: its
    /// work (R-ST-2, R-WS-3).
    pub(crate) fn ws_connection(&self, idx: usize, up: bool) {
        self.work.ws_connection(idx, up);
    }

    /// Connecting to `ws` instance `idx` over `stream` failed (`why`): it
    /// is held unreachable that way for `[dns] failover_hold_s`, so new
    /// connections go to the next member meanwhile, and status says so.
    pub(crate) fn ws_connect_failed(&self, idx: usize, stream: Stream, why: &str, now: Instant) {
        let Some(inst) = self.config.instances.get(idx) else {
            return;
        };
        let to = inst.ws.map(|a| a.to_string()).unwrap_or_default();
        let reason = format!("{} connect to {to}: {why}", stream.as_str());
        if self.reach.failed(idx, stream, reason, now) == Change::Down {
            tracing::warn!(instance = %inst.id, transport = stream.as_str(), %to, error = why,
                "ws instance unreachable: new WebSocket connections go to the other instances of the pool until the hold ends");
        }
    }

    /// A connection to `ws` instance `idx` over `stream` is up: a hold ends.
    pub(crate) fn ws_connected(&self, idx: usize, stream: Stream, now: Instant) {
        if self.reach.connected(idx, stream, now) == Change::Up {
            tracing::info!(instance = %self.config.instances[idx].id, transport = stream.as_str(),
                "ws instance reachable again");
        }
    }
}
