//! The transport's side of the gate's upgrade (R-GW-3): the listening
//! sockets a hand-over passes on, the listeners' reading stopped (and
//! resumed when the next run fails), the pause (`pause.rs`), the plain TCP
//! connections listed before it and given up after it (the busy ones
//! first) with the bytes read but not yet framed, and on the other side
//! the same connections registered under their ids before the listeners
//! are read and read once their sockets come.
//!
//! Plain WebSocket (`ws`) connections move the same way, with the
//! fragments of a message begun (the gate frames them itself, `ws/`). TLS
//! and WSS connections are not moved: a rustls session cannot leave its
//! process. They stay served by the run that holds them (`upgrade/`).

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::member::{clock_ms, Member, Members};
use super::stream::plain;
use super::ws::plain as plain_ws;
use super::Net;
use crate::txn::ConnId;

/// A plain TCP or WebSocket connection a hand-over moves, as listed: what the next run
/// registers before its socket comes (R-GW-3).
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub(crate) struct Stopped {
    /// Its id, which flow tokens name.
    pub(crate) id: ConnId,
    /// The listener it belongs to.
    pub(crate) listener: usize,
    /// The other end.
    pub(crate) peer: SocketAddr,
    /// A subscriber's flow.
    pub(crate) flow: bool,
    /// How long a registration still holds it.
    pub(crate) held: Option<Duration>,
}

/// A plain TCP or WebSocket connection given up by a hand-over: its
/// socket and what was read of it and not yet framed (a partial message).
#[derive(Debug)]
pub(crate) struct Moved {
    /// Its id, as listed in the [`Stopped`] table.
    pub(crate) id: ConnId,
    /// The socket.
    pub(crate) fd: OwnedFd,
    /// What was read of it and not yet framed.
    pub(crate) unread: Vec<u8>,
    /// A WebSocket message begun in fragments: whether text, and its
    /// bytes so far (unmasked).
    pub(crate) begun: Option<(bool, Vec<u8>)>,
}

/// The new run's connections listed by the old run and not yet given
/// their sockets: each is in the table (its messages queue), read once
/// its socket comes ([`NetHandle::attach`]).
#[derive(Debug, Default)]
pub(crate) struct Pending(HashMap<ConnId, (usize, SocketAddr, mpsc::Receiver<Bytes>)>);

impl Pending {
    /// How many still wait for their sockets.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A hand-over's stop of the plain TCP and WebSocket connections, and the
/// connections it stops: each has its own token, so that the busy ones can
/// be stopped first without waking the thousands of idle ones.
#[derive(Debug, Default)]
pub(crate) struct Moving {
    /// The parent of every connection's token: stops them all.
    all: CancellationToken,
    /// The plain connections served now.
    members: Members,
}

impl Net {
    /// A plain connection's part in the hand-over that may come, and the
    /// table it is a member of until it ends; none for one that does not
    /// move (TLS, WSS).
    pub(super) fn join_moving(
        &self,
        movable: bool,
        id: ConnId,
        listener: usize,
        peer: SocketAddr,
    ) -> (Option<Arc<Member>>, Option<Members>) {
        if !movable {
            return (None, None);
        }
        let moving = self.moving.lock().unwrap_or_else(|e| e.into_inner());
        let (member, members) = moving.join(id, listener, peer);
        (Some(member), Some(members))
    }
}

impl Moving {
    /// The part in a hand-over of a plain connection starting now, and the
    /// table it is a member of until it ends. It counts as idle until it
    /// reads or writes.
    pub(super) fn join(
        &self,
        id: ConnId,
        listener: usize,
        peer: SocketAddr,
    ) -> (Arc<Member>, Members) {
        let member = Arc::new(Member::new(listener, peer, self.all.child_token()));
        self.members.insert(id, member.clone());
        (member, self.members.clone())
    }
}

/// The second step of a hand-over's stop ([`NetHandle::pause`] the
/// first): the plain connections' readers stop between two messages and
/// their writers write what was queued for them; then each connection is
/// given up ([`NetHandle::take_moved`]). The busy ones first, each woken
/// alone; then the rest.
#[derive(Debug)]
pub(crate) struct GiveUp {
    all: CancellationToken,
    members: Members,
}

impl GiveUp {
    /// The busy connections now (those that read or wrote within
    /// [`super::member::IDLE_FOR`], 500 ms): how many.
    pub(crate) fn busy(&self) -> usize {
        let now = clock_ms();
        // Collected first: a connection stopped leaves the table, which
        // must not be locked by this walk meanwhile.
        let busy: Vec<CancellationToken> = self
            .members
            .iter()
            .filter(|m| m.busy(now))
            .map(|m| m.go().clone())
            .collect();
        for go in &busy {
            go.cancel();
        }
        busy.len()
    }

    /// Then every other one.
    pub(crate) fn idle(&self) {
        self.all.cancel();
    }
}

impl Drop for GiveUp {
    /// Every connection, whatever came before (a failed hand-over must not
    /// leave one waiting).
    fn drop(&mut self) {
        self.all.cancel();
    }
}

/// Waits until `count` is 0, or `until`.
async fn settle(count: &AtomicUsize, until: Instant) {
    while count.load(Ordering::Relaxed) > 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The listening sockets of one listener.
pub(crate) struct ListenerSockets {
    /// Every UDP socket (one per worker).
    pub(crate) udp: Vec<Arc<UdpSocket>>,
    /// The TCP listening socket (TCP, TLS, WS, WSS).
    pub(crate) tcp: Option<Arc<TcpListener>>,
}

/// The running transport, as the upgrade drives it.
#[derive(Clone)]
pub(crate) struct NetHandle(pub(super) Arc<Net>);

impl std::fmt::Debug for NetHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetHandle")
            .field("connections", &self.0.conns.len())
            .finish()
    }
}

impl NetHandle {
    /// Each listener's sockets, in config order.
    pub(crate) fn sockets(&self) -> Vec<ListenerSockets> {
        let udp = self.0.udp_all.lock().unwrap_or_else(|e| e.into_inner());
        let tcp = self
            .0
            .tcp_listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        (0..udp.len().max(tcp.len()))
            .map(|i| ListenerSockets {
                udp: udp.get(i).cloned().unwrap_or_default(),
                tcp: tcp.get(i).cloned().flatten(),
            })
            .collect()
    }

    /// The next connection id this run would give.
    pub(crate) fn next_conn(&self) -> ConnId {
        self.0.next.load(Ordering::Relaxed)
    }

    /// Stops reading the listeners (accept loops, UDP workers, prober):
    /// the next run reads them. Sends still go out of the UDP sockets.
    pub(crate) fn stop_listening(&self) {
        self.0
            .listen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .cancel();
    }

    /// Starts reading the listeners (a run that took over, once it has
    /// the connections); the UDP threads started, to join at shutdown.
    pub(crate) fn start_listening(&self) -> io::Result<Vec<std::thread::JoinHandle<()>>> {
        self.0.listen()
    }

    /// Reads the listeners again (the next run failed after this one
    /// stopped reading them). The UDP worker threads started end with the
    /// gate's shutdown; they are not joined.
    pub(crate) fn resume_listening(&self) -> io::Result<()> {
        *self.0.listen.lock().unwrap_or_else(|e| e.into_inner()) = self.0.shutdown.child_token();
        self.0.pause.resume();
        self.0.listen().map(drop)
    }

    /// The plain TCP connections served now, with their flows: the table
    /// the next run registers before the pause (R-GW-3).
    pub(crate) fn movers(&self) -> Vec<Stopped> {
        let members = self
            .0
            .moving
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .members
            .clone();
        self.table(&members)
    }

    fn table(&self, members: &Members) -> Vec<Stopped> {
        let now = Instant::now();
        members
            .iter()
            .map(|e| {
                let (id, listener, peer) = (*e.key(), e.listener(), e.peer());
                let flow = self.0.core.flow_state(id, now);
                Stopped {
                    id,
                    listener,
                    peer,
                    flow: flow.is_some(),
                    held: flow.flatten(),
                }
            })
            .collect()
    }

    /// The pause: no message is handled here from now on (waiting, at most
    /// until `until`, for those being handled and for the UDP workers to
    /// end), so the state is still; a plain connection's reader that
    /// reads a message from now on keeps it unread. The plain connections,
    /// with their flows, and their stop ([`GiveUp`]: the caller says when).
    /// A connection opened from now on is served here.
    pub(crate) async fn pause(&self, until: Instant) -> (Vec<Stopped>, GiveUp) {
        let Moving { all, members } =
            std::mem::take(&mut *self.0.moving.lock().unwrap_or_else(|e| e.into_inner()));
        self.0.pause.pause();
        settle(self.0.pause.handling(), until).await;
        settle(&self.0.udp_running, until).await;
        (self.table(&members), GiveUp { all, members })
    }

    /// The connections given up since the last call, and whether more may
    /// come (some writers still write).
    pub(crate) fn take_moved(&self) -> (Vec<Moved>, bool) {
        let more = self.0.movable.load(Ordering::Relaxed) > 0;
        let moved = std::mem::take(&mut *self.0.moved.lock().unwrap_or_else(|e| e.into_inner()));
        (moved, more)
    }

    /// Open connections of every kind (those a keeper waits for).
    pub(crate) fn open_connections(&self) -> usize {
        self.0.conns.len()
    }

    /// Registers the connections an earlier run is handing over, under
    /// their ids, with their flows, before their sockets come: what the
    /// core sends into one queues until [`NetHandle::attach`]. All are in
    /// the table before the listeners are read: a message read meanwhile
    /// finds them (a request to an instance waits for the connection to it
    /// that moves, and does not open another; a subscriber's flow holds).
    /// One already registered takes the flow given now.
    pub(crate) fn adopt_table(&self, pending: &mut Pending, table: Vec<Stopped>) {
        let net = &self.0;
        let now = Instant::now();
        for s in table {
            if let std::collections::hash_map::Entry::Vacant(e) = pending.0.entry(s.id) {
                let ws = net.ws_for(s.listener).is_some();
                let (_, _tx, rx) = net.register_as(s.id, (s.listener, s.peer), ws);
                e.insert((s.listener, s.peer, rx));
            }
            if s.flow {
                net.core.adopt_flow((s.id, s.listener, s.peer), now, s.held);
            }
        }
    }

    /// Connections registered by [`NetHandle::adopt_table`] that closed in
    /// the earlier run before it paused: closed here too.
    pub(crate) fn drop_listed(&self, pending: &mut Pending, ids: &[ConnId]) {
        for id in ids {
            if let Some((listener, peer, _)) = pending.0.remove(id) {
                self.0.unregister_any(*id, listener, peer);
            }
        }
    }

    /// Reads the connections whose sockets came, each from the bytes the
    /// earlier run had read of it; a socket not in `pending` is closed.
    pub(crate) fn attach(&self, pending: &mut Pending, moved: Vec<Moved>) -> io::Result<usize> {
        let net = &self.0;
        let _guard = net.runtime.enter();
        let mut n = 0;
        for m in moved {
            let Some((listener, peer, rx)) = pending.0.remove(&m.id) else {
                tracing::warn!(
                    id = m.id,
                    "hand-over: a socket for a connection not listed: closed"
                );
                continue;
            };
            let std = std::net::TcpStream::from(m.fd);
            std.set_nonblocking(true)?;
            let stream = TcpStream::from_std(std)?;
            let buf = BytesMut::from(&m.unread[..]);
            let at = (listener, m.id, peer);
            if net.ws_for(listener).is_some() {
                let state = (buf, m.begun);
                net.tracker
                    .spawn(plain_ws(net.clone(), at, stream, rx, state));
            } else {
                net.tracker.spawn(plain(net.clone(), at, stream, rx, buf));
            }
            n += 1;
        }
        Ok(n)
    }

    /// The connections whose sockets never came (closed in the earlier run
    /// meanwhile, or lost with it): closed here too.
    pub(crate) fn drop_pending(&self, pending: Pending) {
        for (id, (listener, peer, _)) in pending.0 {
            self.0.unregister_any(id, listener, peer);
        }
    }
}
