//! SIP over WebSocket (RFC 7118) on `ws`/`wss` listeners: browsers and
//! WebRTC clients. A WebSocket connection is a stream connection of the
//! gate's table like a TCP one (same `ConnId`s, same queue, same bound
//! `[tcp] max_connections`, same idle rule, and flows for REGISTERs through
//! a subscriber listener), so the core sees it as
//! [`Inbound::Tcp`](crate::txn::Inbound::Tcp) and
//! needs no WebSocket of its own: only the listener's Via and Record-Route
//! names (`WS`, `WSS`) differ.
//!
//! After the upgrade (`upgrade.rs`), tungstenite frames: one SIP message a
//! WebSocket message, text or binary (RFC 7118 5); a message (whole or
//! fragmented) over [`MAX_MESSAGE`] closes with 1009, a protocol error with
//! 1002; one not complete within `[tcp] frame_s` of its first bytes closes
//! the connection (`timed.rs`). Pings get pongs (tungstenite answers them
//! as it reads); a message of only CRLFs is the RFC 5626 3.5.1 keep-alive,
//! `\r\n\r\n` answered with `\r\n`. One loop of the connection's task
//! serves both directions (`session.rs`). The gate never opens a WebSocket
//! connection: a browser is only reached on the one it opened.
//!
//! A ws pool listener (`pool.rs`, R-WS-3) shares the accept, the table
//! slot and the TLS of the listener but no SIP: it passes each connection
//! whole to a `ws` instance.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use ringsync::config::WsOptions;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::WebSocketStream;

use super::{Net, MAX_MESSAGE};
use crate::listener::Mode;
use crate::metrics as m;
use crate::txn::ConnId;

mod pool;
mod session;
mod timed;
mod upgrade;

use timed::{Started, Timed};

/// The read buffer of each WebSocket connection, in bytes (see `serve`).
const WS_READ_BUFFER: usize = 4096;

/// One accepted connection on a WebSocket listener, the TLS handshake (for
/// `wss`) already done: the upgrade within `[tcp] frame_s`, then messages
/// both ways until either side closes, the gate stops, or it idles out.
pub(super) async fn serve<S>(
    net: Arc<Net>,
    (listener, id, peer): (usize, ConnId, SocketAddr),
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
    let deadline = net.core.tcp_config().frame();
    let head = tokio::select! {
        _ = net.shutdown.cancelled() => None,
        r = tokio::time::timeout(deadline, upgrade::read(&mut io, opts)) => Some(r),
    };
    let tail = match head {
        None => return,
        Some(Err(_)) => {
            tracing::debug!(%peer, "WebSocket upgrade not complete in time: closed");
            m::ws_handshake("timeout");
            return;
        }
        Some(Ok(upgrade::Read::Closed)) => {
            m::ws_handshake("closed");
            return;
        }
        Some(Ok(upgrade::Read::Head(result, tail))) => {
            let written = upgrade::answer(&mut io, &result).await;
            match (result, written) {
                (Ok(_), Ok(())) => {
                    m::ws_handshake("ok");
                    tail
                }
                (Ok(_), Err(_)) => {
                    m::ws_handshake("closed");
                    return;
                }
                (Err(r), _) => {
                    tracing::debug!(%peer, status = r.status, why = r.label, "WebSocket upgrade refused");
                    m::ws_handshake(r.label);
                    return;
                }
            }
        }
    };
    // tungstenite's defaults (128 KiB read buffer per connection, writes
    // gathered up to 128 KiB) suit bulk transfer; a SIP connection carries
    // messages of a kilobyte or two, sent one at a time, and sits idle for
    // hours. 4 KiB reads take a usual message in one go (the buffer grows
    // for a larger one, up to the bound), and each message is written at
    // once: 10,000 idle connections then hold tens, not hundreds, of KiB
    // each (docs/benchmarks.md).
    let config = WebSocketConfig::default()
        .read_buffer_size(WS_READ_BUFFER)
        .write_buffer_size(0)
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE));
    let started = Started::new();
    let io = Timed::new(io, started.clone());
    let ws = WebSocketStream::from_partially_read(io, tail, Role::Server, Some(config)).await;
    session::run(&net, (listener, id, peer), (ws, started), rx).await;
    net.unregister_ws(id);
}
