//! The connections that cannot move in an upgrade (TLS, WSS: R-GW-3), and
//! any WebSocket one still upgrading at the pause, relayed. The old run
//! keeps their sockets and their TLS or WebSocket framing; each message it reads on one goes, as it was read, to the new
//! run ([`Relayed::In`]), whose core decides as for its own connections;
//! what the new run sends into one goes back to the old run, which writes
//! it. In the new run such a connection is an entry of its table like any
//! other (same id, same flow), whose queue drains into the link instead of
//! a socket.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{Net, NetHandle};
use crate::txn::{ConnId, Inbound};

/// What the old run tells the new one about a connection it keeps.
#[derive(Debug)]
pub(crate) enum Relayed {
    /// A message read on it.
    In {
        /// The connection, with its listener, peer and kind (WebSocket).
        conn: Kept,
        /// The message as read.
        data: Bytes,
    },
    /// It closed.
    Closed(ConnId),
}

/// A connection the old run keeps, as the new run registers it.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub(crate) struct Kept {
    /// Its id.
    pub(crate) id: ConnId,
    /// Its listener.
    pub(crate) listener: usize,
    /// The other end.
    pub(crate) peer: SocketAddr,
    /// WebSocket (else TCP with TLS).
    pub(crate) ws: bool,
    /// A subscriber's flow.
    pub(crate) flow: bool,
    /// How long a registration still holds it.
    pub(crate) held: Option<Duration>,
}

impl Net {
    /// A message read on connection `at`: given back to be handled here,
    /// or `None` when this run relays its connections to the run that took
    /// over (R-GW-3).
    pub(super) fn relay_in(
        &self,
        (listener, id, peer): (usize, ConnId, SocketAddr),
        data: Bytes,
    ) -> Option<Bytes> {
        let relay = self.relay.load();
        let Some(tx) = relay.as_ref() else {
            return Some(data);
        };
        let conn = Kept {
            id,
            listener,
            peer,
            ws: self.ws_for(listener).is_some(),
            flow: false,
            held: None,
        };
        let _ = tx.send(Relayed::In { conn, data });
        None
    }

    /// Drops a closed connection's details, and tells the run that took
    /// over, when this one relays.
    pub(super) fn forget(&self, id: ConnId) {
        // A connection handed over is the new run's now: nothing to tell.
        if self.meta.remove(&id).is_some() && !self.handed.contains_key(&id) {
            if let Some(tx) = self.relay.load().as_ref() {
                let _ = tx.send(Relayed::Closed(id));
            }
        }
    }
}

impl NetHandle {
    /// The old run: the connections it holds but for those that move
    /// (`moving`), with their flows.
    pub(crate) fn kept(&self, moving: &[super::Stopped]) -> Vec<Kept> {
        let now = Instant::now();
        let moving: std::collections::HashSet<ConnId> = moving.iter().map(|s| s.id).collect();
        self.0
            .meta
            .iter()
            .filter(|e| !moving.contains(e.key()))
            .map(|e| {
                let (listener, peer, ws) = *e.value();
                let flow = self.0.core.flow_state(*e.key(), now);
                Kept {
                    id: *e.key(),
                    listener,
                    peer,
                    ws,
                    flow: flow.is_some(),
                    held: flow.flatten(),
                }
            })
            .collect()
    }

    /// The old run: from now on the messages of its connections go to
    /// what it returns, not to its core.
    pub(crate) fn start_relay(&self) -> std::sync::mpsc::Receiver<Relayed> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.0.relay.store(Some(Arc::new(tx)));
        rx
    }

    /// The old run, when the hand-over failed: its core handles its
    /// connections' messages again, those queued in `rx` first.
    pub(crate) fn stop_relay(&self, rx: std::sync::mpsc::Receiver<Relayed>) {
        self.0.relay.store(None);
        for r in rx.try_iter() {
            if let Relayed::In { conn, data } = r {
                self.relayed_in(conn, data);
            }
        }
    }

    /// The old run: writes what the new run sent into connection `id`.
    pub(crate) fn relay_out(&self, id: ConnId, data: Bytes) {
        if let Some(tx) = self.0.conns.get(&id).map(|t| t.clone()) {
            if tx.try_send(data).is_err() {
                crate::metrics::dropped("tcp_queue_full");
            }
        }
    }

    /// The new run: takes in a connection the old run keeps; what this run
    /// sends into it goes to `out`, for the old run to write.
    pub(crate) fn adopt_relayed(&self, k: Kept, out: std::sync::mpsc::Sender<(ConnId, Bytes)>) {
        let net = &self.0;
        let (id, _tx, mut rx) = net.register_as(k.id, (k.listener, k.peer), k.ws);
        if k.flow {
            net.core
                .adopt_flow((id, k.listener, k.peer), Instant::now(), k.held);
        }
        let _guard = net.runtime.enter();
        net.tracker.spawn(async move {
            while let Some(b) = rx.recv().await {
                if out.send((id, b)).is_err() {
                    return;
                }
            }
        });
    }

    /// The new run: a message the old run read on a connection it keeps,
    /// handled as if read here.
    pub(crate) fn relayed_in(&self, k: Kept, data: Bytes) {
        let net: &Arc<Net> = &self.0;
        let inbound = Inbound::Tcp {
            listener: k.listener,
            conn: k.id,
            peer: k.peer,
        };
        let now = Instant::now();
        let action = net
            .core
            .handle_stream(inbound, data, now, net.lag.behind(now));
        net.execute(action);
    }

    /// The new run: a connection the old run kept closed.
    pub(crate) fn relayed_closed(&self, id: ConnId) {
        let Some((_, (_, peer, ws))) = self.0.meta.remove(&id) else {
            return;
        };
        if ws {
            self.0.unregister_ws(id);
        } else {
            self.0.unregister(id, peer);
        }
    }
}
