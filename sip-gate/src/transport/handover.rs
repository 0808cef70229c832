//! The transport's side of the gate's upgrade (R-GW-3): the listening
//! sockets a hand-over passes on, the listeners' reading stopped (and
//! resumed when the next run fails), the plain TCP connections stopped
//! between messages and given up with the bytes read but not yet framed,
//! and on the other side the same connections taken in under their ids.
//!
//! TLS and WebSocket connections are not moved: a rustls session cannot
//! leave its process, and tungstenite keeps what it read of a frame to
//! itself. They stay served by the run that holds them (`upgrade/`).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::stream::plain;
use super::Net;
use crate::txn::ConnId;

/// A plain TCP connection stopped by a hand-over, as the next run takes it.
#[derive(Debug)]
pub(crate) struct Moved {
    /// Its id, which flow tokens name.
    pub(crate) id: ConnId,
    /// The listener it belongs to.
    pub(crate) listener: usize,
    /// The other end.
    pub(crate) peer: SocketAddr,
    /// The socket.
    pub(crate) fd: OwnedFd,
    /// What was read of it and not yet framed (a partial message).
    pub(crate) unread: Vec<u8>,
    /// A subscriber's flow, and how long a registration still holds it.
    pub(crate) flow: Option<Option<Duration>>,
}

/// The two steps of a hand-over's stop of the plain TCP connections.
#[derive(Debug, Default)]
pub(crate) struct Moving {
    /// Stops their readers.
    read: CancellationToken,
    /// Then their writers, which give the connections up.
    write: CancellationToken,
}

impl Moving {
    /// (readers', writers') tokens, for a connection starting now.
    pub(super) fn tokens(&self) -> (CancellationToken, CancellationToken) {
        (self.read.clone(), self.write.clone())
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
        self.0.listen().map(drop)
    }

    /// Stops every plain TCP connection between two messages and takes
    /// it back (what was queued for it is written first); waits at most
    /// `wait` for them. A connection opened from now on is served here.
    ///
    /// In two steps, so no message is lost between them: every reader
    /// stops (between two messages) and the UDP workers end, so nothing in
    /// this run queues a message any more; then every writer writes what
    /// was queued and gives its connection up.
    pub(crate) async fn move_connections(&self, wait: Duration) -> Vec<Moved> {
        let Moving { read, write } =
            std::mem::take(&mut *self.0.moving.lock().unwrap_or_else(|e| e.into_inner()));
        let until = Instant::now() + wait;
        read.cancel();
        settle(&self.0.reading, until).await;
        settle(&self.0.udp_running, until).await;
        write.cancel();
        settle(&self.0.movable, until).await;
        std::mem::take(&mut *self.0.moved.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Open connections of every kind (those a keeper waits for).
    pub(crate) fn open_connections(&self) -> usize {
        self.0.conns.len()
    }

    /// Takes in the connections an earlier run handed over, under their
    /// ids, with their flows; each is read from the bytes it had read.
    /// All are in the table before any is read: a message read on one
    /// finds the others (a request to an instance goes on the connection
    /// to it that moved, not on a new one).
    pub(crate) fn adopt(&self, moved: Vec<Moved>) -> io::Result<usize> {
        let net = &self.0;
        let now = Instant::now();
        let mut taken = Vec::with_capacity(moved.len());
        for m in moved {
            let std = std::net::TcpStream::from(m.fd);
            std.set_nonblocking(true)?;
            let _guard = net.runtime.enter();
            let stream = TcpStream::from_std(std)?;
            tracing::debug!(id = m.id, listener = m.listener, peer = %m.peer, unread = m.unread.len(), flow = m.flow.is_some(), "connection taken over");
            let (id, _tx, rx) = net.register_as(m.id, (m.listener, m.peer), false);
            if let Some(held) = m.flow {
                net.core.adopt_flow((id, m.listener, m.peer), now, held);
            }
            taken.push(((m.listener, id, m.peer), stream, rx, m.unread));
        }
        let n = taken.len();
        let _guard = net.runtime.enter();
        for (at, stream, rx, unread) in taken {
            let buf = BytesMut::from(&unread[..]);
            net.tracker.spawn(plain(net.clone(), at, stream, rx, buf));
        }
        Ok(n)
    }
}
