//! SIP over WebSocket (RFC 7118) on `ws`/`wss` listeners: browsers and
//! WebRTC clients. A WebSocket connection is a stream connection of the
//! gate's table like a TCP one (same `ConnId`s, same queue, same bound
//! `[tcp] max_connections`, same idle rule, and flows for REGISTERs through
//! a subscriber listener), so the core sees it as [`Inbound::Tcp`] and
//! needs no WebSocket of its own: only the listener's Via and Record-Route
//! names (`WS`, `WSS`) differ.
//!
//! After the upgrade (`upgrade.rs`), the gate frames (`frame.rs`, RFC
//! 6455) and serves the connection (`conn.rs`): one SIP message a
//! WebSocket message, text or binary (RFC 7118 5); a message (whole or
//! fragmented) over [`MAX_MESSAGE`] closes with 1009, a protocol error
//! with 1002, text that is not UTF-8 with 1007; one not complete within
//! `[tcp] frame_s` of its first bytes closes with 1008. Pings get pongs; a
//! message of only CRLFs is the RFC 5626 3.5.1 keep-alive, `\r\n\r\n`
//! answered with `\r\n`. The gate never opens a WebSocket connection: a
//! browser is only reached on the one it opened. As over TCP, an idle
//! connection holds no read buffer, and a message goes to the core as it
//! came out of its frame, with no copy of its own.
//!
//! The gate never drops a WebSocket connection without a Close frame
//! (RFC 6455 7.4.1 codes, issue 37): 1000 at `[tcp] idle_s`, 1001 when it
//! stops (R-GW-1), 1002/1007/1008/1009 as above; over `wss` the frame goes
//! through TLS. It writes the frame within [`CLOSE_WRITE`] and then closes
//! the TCP connection without waiting for the client's Close (the server
//! closes first, RFC 6455 7.1.1). Those are counted in
//! `sipgate_ws_closes_total{code}`; ends the client made (its Close, a bare
//! TCP close, a reset) in `sipgate_ws_peer_closes_total{how}`.
//!
//! A ws pool listener (`pool.rs`, R-WS-3) shares the accept, the table
//! slot and the TLS of the listener but no SIP: it passes each connection
//! whole to a `ws` instance.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ringsync::config::WsOptions;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::{Moved, Net, MAX_MESSAGE};
use crate::listener::Mode;
use crate::metrics as m;
use crate::txn::ConnId;

mod conn;
mod frame;
mod pool;
mod upgrade;

/// How long the gate tries to write a Close frame before it drops the
/// connection anyway (a client that reads nothing cannot hold it).
const CLOSE_WRITE: Duration = Duration::from_secs(2);

/// One accepted connection on a WebSocket listener, the TLS handshake (for
/// `wss`) already done: the upgrade within `[tcp] frame_s`, then messages
/// both ways until either side closes, the gate stops, or it idles out.
pub(super) async fn serve<S>(
    net: Arc<Net>,
    (listener, id, peer): (usize, ConnId, SocketAddr),
    local: SocketAddr,
    mut io: S,
    rx: mpsc::Receiver<Bytes>,
    opts: &WsOptions,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if let Some(Mode::WsPool { upstream_tls }) = net
        .core
        .site()
        .listeners
        .all()
        .get(listener)
        .map(|l| &l.mode)
    {
        return pool::serve(net.clone(), (listener, id, peer), io, opts, *upstream_tls).await;
    }
    let Some(tail) = handshake(&net, peer, &mut io, opts).await else {
        return;
    };
    let state = (
        BytesMut::from(&tail[..]),
        frame::Reader::new(MAX_MESSAGE),
        false,
    );
    conn::serve(net.clone(), (listener, id, peer), local, io, rx, state).await;
    net.unregister_ws(id);
}

/// [`serve`] on a plain `ws` listener: the connection moves in a
/// hand-over (R-GW-3, [`plain`]) once upgraded. A ws pool's connections
/// carry no SIP and are not moved.
pub(super) async fn serve_plain(
    net: Arc<Net>,
    (listener, id, peer): (usize, ConnId, SocketAddr),
    mut stream: TcpStream,
    rx: mpsc::Receiver<Bytes>,
    opts: &WsOptions,
) {
    if net.is_ws_pool(listener) {
        let local = super::stream::local_of(&stream, peer);
        return serve(net, (listener, id, peer), local, stream, rx, opts).await;
    }
    let Some(tail) = handshake(&net, peer, &mut stream, opts).await else {
        return;
    };
    plain(
        net,
        (listener, id, peer),
        stream,
        rx,
        (BytesMut::from(&tail[..]), None),
    )
    .await;
}

/// A plain upgraded `ws` connection, accepted here or handed over by an
/// earlier run (`buf` then holds what that run had read and not framed,
/// `begun` a message it had begun in fragments: text or not, its bytes so
/// far). Served; when a hand-over asks (R-GW-3), its socket, the bytes read
/// and not yet framed and the fragments begun go to the next run
/// ([`Moved`]) instead of closing, as a plain TCP connection's do.
pub(super) async fn plain(
    net: Arc<Net>,
    (listener, id, peer): (usize, ConnId, SocketAddr),
    stream: TcpStream,
    rx: mpsc::Receiver<Bytes>,
    (buf, begun): (BytesMut, Option<(bool, Vec<u8>)>),
) {
    // Upgraded after a hand-over's pause (whose list was taken before):
    // it stays in this run, relayed (R-GW-3), and no hand-over waits for it.
    let movable = net.pause.enter().is_some();
    if movable {
        net.movable.fetch_add(1, Ordering::Relaxed);
    }
    let begun = begun.as_ref().map(|(text, b)| (*text, &b[..]));
    let frames = frame::Reader::resume(MAX_MESSAGE, begun);
    let local = super::stream::local_of(&stream, peer);
    let state = (buf, frames, movable);
    let ended = conn::serve(net.clone(), (listener, id, peer), local, stream, rx, state).await;
    if let Some((stream, unread, frames)) = ended {
        match stream.into_std() {
            Ok(s) => {
                net.handed.insert(id, ());
                let begun = frames.begun().map(|(text, b)| (text, b.to_vec()));
                net.moved
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Moved {
                        id,
                        fd: s.into(),
                        unread: unread.to_vec(),
                        begun,
                    });
            }
            Err(_) => {
                tracing::warn!(%peer, "WebSocket connection not handed over: its socket could not be taken back")
            }
        }
    }
    net.unregister_ws(id);
    if movable {
        net.movable.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The upgrade, within `[tcp] frame_s`, answered and counted: what the
/// client sent after its request (the first frames), or `None` when the
/// connection ends here.
async fn handshake<S>(net: &Net, peer: SocketAddr, io: &mut S, opts: &WsOptions) -> Option<Vec<u8>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let deadline = net.core.tcp_config().frame();
    let head = tokio::select! {
        _ = net.shutdown.cancelled() => return None,
        r = tokio::time::timeout(deadline, upgrade::read(io, opts)) => r,
    };
    match head {
        Err(_) => {
            tracing::debug!(%peer, "WebSocket upgrade not complete in time: closed");
            m::ws_handshake("timeout");
            None
        }
        Ok(upgrade::Read::Closed) => {
            m::ws_handshake("closed");
            None
        }
        Ok(upgrade::Read::Head(result, tail)) => {
            let written = upgrade::answer(io, &result).await;
            match (result, written) {
                (Ok(_), Ok(())) => {
                    m::ws_handshake("ok");
                    Some(tail)
                }
                (Ok(_), Err(_)) => {
                    m::ws_handshake("closed");
                    None
                }
                (Err(r), _) => {
                    tracing::debug!(%peer, status = r.status, why = r.label, "WebSocket upgrade refused");
                    m::ws_handshake(r.label);
                    None
                }
            }
        }
    }
}
