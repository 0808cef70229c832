//! A ws pool listener (`mode = "ws_pool"`, R-WS-3): WebSocket connections
//! passed through whole to the site's `ws` instances. The gate reads the
//! upgrade request (within `[tcp] frame_s`), checks it as on a SIP
//! WebSocket listener (path, `Origin`, key, version) but leaves the
//! subprotocol to the instance, picks the instance at that moment
//! ([`crate::proxy::Core::ws_pick`]: the `ws` ring of normal-zone
//! instances that are not down), connects to it (plain TCP, or TLS
//! verified against `[tls] ca` with `ws_upstream = "wss"`), forwards the
//! request bytes as they came, then copies bytes both ways until either
//! side closes. No SIP is read and nothing is re-framed: the instance
//! answers the upgrade itself.
//!
//! A drain changes only where the next connection goes: an open one stays
//! on its instance until one side closes it, and counts as that instance's
//! work while it is open, so status reads `draining` then `drained`. The
//! gate applies no idle timeout to it (the WebSocket's own pings are the
//! instance's business); a gate that stops closes them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use ringsync::config::WsOptions;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use super::upgrade::{self, Raw, Refusal};
use super::Net;
use crate::metrics as m;
use crate::reach::Stream;
use crate::txn::ConnId;

/// No `ws` instance to take the connection.
const NO_INSTANCE: Refusal = upgrade::refusal(503, "Service Unavailable", "no_instance");
/// The picked instance refused the connection or its TLS handshake.
const UPSTREAM_FAILED: Refusal = upgrade::refusal(502, "Bad Gateway", "upstream_failed");

/// Serves one accepted connection of a ws pool listener (TLS already
/// accepted on a `wss` one).
pub(super) async fn serve<S>(
    net: Arc<Net>,
    (listener, _id, peer): (usize, ConnId, SocketAddr),
    mut io: S,
    opts: &WsOptions,
    upstream_tls: bool,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let deadline = net.core.tcp_config().frame();
    let read = tokio::select! {
        _ = net.shutdown.cancelled() => return,
        r = tokio::time::timeout(deadline, upgrade::read_head(&mut io)) => r,
    };
    let (head, tail) = match read {
        Err(_) => {
            tracing::debug!(%peer, "WebSocket upgrade not complete in time: closed");
            return m::ws_handshake("timeout");
        }
        Ok(Raw::Closed) => return m::ws_handshake("closed"),
        Ok(Raw::TooLong) => return refuse(&mut io, peer, upgrade::BAD_REQUEST).await,
        Ok(Raw::Head(head, tail)) => (head, tail),
    };
    if let Err(r) = upgrade::check_as(&head, opts, false) {
        return refuse(&mut io, peer, r).await;
    }
    let stream = if upstream_tls {
        Stream::Tls
    } else {
        Stream::Tcp
    };
    let Some(target) = net.core.ws_pick(peer.ip(), stream, Instant::now()) else {
        return refuse(&mut io, peer, NO_INSTANCE).await;
    };
    let local = net
        .core
        .site()
        .listeners
        .all()
        .get(listener)
        .map(|l| l.advertise.ip());
    let tcp = match connect(target.addr, local).await {
        Ok(s) => s,
        Err(e) => {
            net.core
                .ws_connect_failed(target.idx, stream, &e.to_string(), Instant::now());
            return refuse(&mut io, peer, UPSTREAM_FAILED).await;
        }
    };
    // Counted from the connect: the instance holds the connection from
    // now on, whatever it answers to the upgrade.
    let _work = Work::open(&net, target.idx);
    let sent = (head, tail);
    if !upstream_tls {
        reached(&net, target.idx, stream);
        m::ws_handshake("passed");
        return splice(&net, io, tcp, sent).await;
    }
    let tls = match &net.tls {
        Some(t) => t.connect(tcp, target.addr).await,
        None => Err(std::io::Error::other("no [tls] section")),
    };
    match tls {
        Ok(up) => {
            reached(&net, target.idx, stream);
            m::ws_handshake("passed");
            splice(&net, io, up, sent).await;
        }
        Err(e) => {
            net.core
                .ws_connect_failed(target.idx, stream, &e.to_string(), Instant::now());
            refuse(&mut io, peer, UPSTREAM_FAILED).await;
        }
    }
}

/// A connection to instance `idx` is up (TLS included when the pool's
/// upstream is `wss`): a hold ends, and the instance's health in the work
/// report is `up` (R-WS-3, R-ST-4).
fn reached(net: &Net, idx: usize, stream: Stream) {
    let now = Instant::now();
    net.core.ws_connected(idx, stream, now);
    net.core.work().ws_reached(idx, now);
}

/// Connects to `to` from the listener's address (when of its family),
/// within the gate's connect timeout.
async fn connect(to: SocketAddr, local: Option<std::net::IpAddr>) -> std::io::Result<TcpStream> {
    let sock = if to.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(ip) = local.filter(|ip| ip.is_ipv4() == to.is_ipv4() && !ip.is_unspecified()) {
        sock.bind(SocketAddr::new(ip, 0))?;
    }
    let s = tokio::time::timeout(super::super::TCP_CONNECT_TIMEOUT, sock.connect(to))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// Answers a refused upgrade with its status, counted.
async fn refuse<S: AsyncWrite + Unpin>(io: &mut S, peer: SocketAddr, r: Refusal) {
    tracing::debug!(%peer, status = r.status, why = r.label, "ws pool upgrade refused");
    m::ws_handshake(r.label);
    let _ = upgrade::answer(io, &Err(r)).await;
}

/// Forwards the upgrade request as it came (`head`, then what the client
/// sent after it), then copies both ways until either side closes or the
/// gate stops.
async fn splice<A, B>(net: &Net, mut client: A, mut up: B, (head, tail): (BytesMut, Vec<u8>))
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let sent = async {
        up.write_all(&head).await?;
        up.write_all(&tail).await?;
        up.flush().await
    };
    if sent.await.is_err() {
        return;
    }
    tokio::select! {
        _ = net.shutdown.cancelled() => {}
        _ = tokio::io::copy_bidirectional(&mut client, &mut up) => {}
    }
    let _ = client.shutdown().await;
    let _ = up.shutdown().await;
}

/// One open connection counted on its instance until dropped, however the
/// connection ends.
struct Work<'a> {
    net: &'a Net,
    idx: usize,
}

impl<'a> Work<'a> {
    fn open(net: &'a Net, idx: usize) -> Work<'a> {
        net.core.ws_connection(idx, true);
        Work { net, idx }
    }
}

impl Drop for Work<'_> {
    fn drop(&mut self) {
        self.net.core.ws_connection(self.idx, false);
    }
}
