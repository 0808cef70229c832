//! SIP over WebSocket (RFC 7118) on `ws`/`wss` listeners: browsers and
//! WebRTC clients. A WebSocket connection is a stream connection of the
//! gate's table like a TCP one (same `ConnId`s, same queue, same bound
//! `[tcp] max_connections`, same idle rule, and flows for REGISTERs through
//! a subscriber listener), so the core sees it as [`Inbound::Tcp`] and
//! needs no WebSocket of its own: only the listener's Via and Record-Route
//! names (`WS`, `WSS`) differ.
//!
//! After the upgrade (`upgrade.rs`), tungstenite frames: one SIP message a
//! WebSocket message, text or binary (RFC 7118 5); a message (whole or
//! fragmented) over [`MAX_MESSAGE`] closes with 1009, a protocol error with
//! 1002; one not complete within `[tcp] frame_s` of its first bytes closes
//! with 1008 (`timed.rs`). Pings get pongs (tungstenite answers them as it reads); a message
//! of only CRLFs is the RFC 5626 3.5.1 keep-alive, `\r\n\r\n` answered with
//! `\r\n`. The gate never opens a WebSocket connection: a browser is only
//! reached on the one it opened.
//!
//! The gate never drops a WebSocket connection without a Close frame
//! (RFC 6455 7.4.1 codes, issue 37): 1000 at `[tcp] idle_s`, 1001 when it
//! stops (R-GW-1), 1002/1008/1009 as above; over `wss` the frame goes
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
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use ringsync::config::WsOptions;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;

use super::{Net, MAX_MESSAGE};
use crate::listener::Mode;
use crate::metrics as m;
use crate::txn::{ConnId, Inbound};
use ringsync::capture::Transport::Stream;

mod pool;
mod timed;
mod upgrade;

use timed::{Due, Fired, Started, Timed};

/// The read buffer of each WebSocket connection, in bytes (see `serve`).
const WS_READ_BUFFER: usize = 4096;
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
    messages(net, (listener, id, peer), local, (ws, started), rx).await;
}

/// The message loop of an upgraded connection: a writer fed by the
/// connection's queue, a reader handing each message to the core.
async fn messages<S>(
    net: Arc<Net>,
    at: (usize, ConnId, SocketAddr),
    local: SocketAddr,
    (ws, started): (WebSocketStream<Timed<S>>, Started),
    rx: mpsc::Receiver<Bytes>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (sink, source) = ws.split();
    let stop = net.shutdown.child_token();
    // The reader asks the writer (which owns the sink) to close with a code.
    let (close_tx, close_rx) = oneshot::channel::<CloseFrame>();
    let copies = (&net, at.0, (local, at.2));
    let writer = write_loop(
        copies,
        sink,
        rx,
        close_rx,
        stop.clone(),
        net.shutdown.clone(),
    );
    let reader = async {
        if let Some(frame) = read_loop(&net, at, local, source, &started, &stop).await {
            let _ = close_tx.send(frame);
        } else {
            stop.cancel();
        }
    };
    tokio::join!(writer, reader);
    net.unregister_ws(at.1);
}

/// The reader of a connection: each message to the core, until the peer
/// closes, the connection's `stop`, or a bound ends it: `[tcp] idle_s`
/// without a message (unless a registration holds the connection, RFC 5626
/// 5.3), `[tcp] frame_s` for a message whose bytes began to come. Returns
/// the close frame to send, if the end calls for one.
async fn read_loop<S>(
    net: &Arc<Net>,
    (listener, id, peer): (usize, ConnId, SocketAddr),
    local: SocketAddr,
    mut source: SplitStream<WebSocketStream<Timed<S>>>,
    started: &Started,
    stop: &CancellationToken,
) -> Option<CloseFrame>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let inbound = Inbound::Tcp {
        listener,
        conn: id,
        peer,
    };
    let (idle, frame) = (net.core.tcp_config().idle(), net.core.tcp_config().frame());
    let mut last = Instant::now();
    // One timer for both bounds, armed for the idle one and brought
    // forward only when a message begins (timed.rs): an idle connection
    // wakes at its idle bound, not every frame_s (issue 25).
    let timer = tokio::time::sleep(idle);
    tokio::pin!(timer);
    loop {
        let next = tokio::select! {
            _ = stop.cancelled() => return None,
            n = timed::next_or_due(&mut source, started, timer.as_mut(), frame) => n,
        };
        let now = Instant::now();
        let data = match next {
            Err(Due) => match timed::fired(started, timer.as_mut(), (last, now), (idle, frame)) {
                Fired::Frame => {
                    tracing::info!(%peer, "closing WebSocket connection: message not complete in time");
                    m::dropped("ws_frame_timeout");
                    // RFC 6455 7.4.1: 1008, the message broke the
                    // frame-time policy (R-WS-2).
                    return Some(sent(
                        CloseCode::Policy,
                        "1008",
                        "message not complete in time",
                    ));
                }
                Fired::Early => continue,
                // Idle, but a registration uses it: the subscriber's
                // requests reach it only this way (RFC 5626 5.3).
                Fired::Idle if net.core.tcp_held(id, now) => {
                    last = now;
                    timer.as_mut().reset((now + idle).into());
                    continue;
                }
                // R-WS-2, issue 37: 1000 (RFC 6455 7.4.1, normal closure):
                // the idle rule ended it, nothing went wrong; a browser
                // sees a clean close, not 1006.
                Fired::Idle => return Some(sent(CloseCode::Normal, "1000", "idle")),
            },
            Ok(Some(Ok(Message::Close(_)))) => {
                m::ws_peer_close("close");
                return None;
            }
            // tokio-tungstenite ends the stream only after a close
            // handshake, which the arm above already took.
            Ok(None) => return None,
            Ok(Some(Err(e))) => {
                let frame = refusal(&e);
                if frame.is_some() {
                    tracing::info!(%peer, error = %e, "closing WebSocket connection");
                }
                return frame;
            }
            Ok(Some(Ok(msg))) => {
                started.clear();
                last = now;
                match msg {
                    Message::Text(t) => Bytes::from(t),
                    Message::Binary(b) => b,
                    // Pongs go out as tungstenite reads; nothing for the core.
                    _ => continue,
                }
            }
        };
        if data.iter().all(|b| matches!(b, b'\r' | b'\n')) {
            // RFC 5626 3.5.1: a double CRLF asks for one back.
            if data.as_ref() == b"\r\n\r\n" {
                net.tcp_send(listener, Some(id), peer, Bytes::from_static(b"\r\n"));
            }
            continue;
        }
        // Each SIP message as it came out of its WebSocket frames (and
        // out of TLS on a wss listener).
        net.core
            .capture()
            .sip(listener, Stream, (peer, local), &data, None);
        // Counted while handled: a hand-over's pause waits for it; once
        // paused it is relayed (R-GW-3).
        let _handling = net.pause.enter();
        // A keeper's connection: the run that took over decides (R-GW-3).
        let Some(data) = net.relay_in((listener, id, peer), data) else {
            continue;
        };
        // R-OV-1: the stream transports' deadline, as over TCP.
        let now = Instant::now();
        let action = net
            .core
            .handle_stream(inbound, data, now, net.lag.behind(now));
        net.execute(action);
    }
}

/// The writer of a connection: each queued SIP message as one WebSocket
/// message, until the connection's `stop`; a close frame when the reader
/// asks for one, or 1001 when the gate (`gate_stop`) stops (R-GW-1), each
/// written within [`CLOSE_WRITE`].
async fn write_loop<S>(
    (net, listener, ends): (&Arc<Net>, usize, (SocketAddr, SocketAddr)),
    mut sink: SplitSink<WebSocketStream<S>, Message>,
    mut rx: mpsc::Receiver<Bytes>,
    mut close_rx: oneshot::Receiver<CloseFrame>,
    stop: CancellationToken,
    gate_stop: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        let frame = tokio::select! {
            // Biased, the stop first: a reader that saw the gate stop
            // ends too, and its dropped `close_rx` must not win the race
            // and end this loop without the 1001 (issue 37).
            biased;
            _ = stop.cancelled() => {
                if gate_stop.is_cancelled() {
                    let frame = sent(CloseCode::Away, "1001", "gate stopping");
                    let _ = tokio::time::timeout(CLOSE_WRITE, sink.send(Message::Close(Some(frame)))).await;
                }
                break;
            }
            c = &mut close_rx => match c {
                Ok(frame) => {
                    let _ = tokio::time::timeout(CLOSE_WRITE, sink.send(Message::Close(Some(frame)))).await;
                    break;
                }
                // The reader ended without a code: the peer went.
                Err(_) => break,
            },
            msg = rx.recv() => match msg {
                Some(bytes) => {
                    if bytes.as_ref() != b"\r\n" {
                        net.core.capture().sip(listener, Stream, ends, &bytes, None);
                    }
                    sip_message(bytes)
                }
                None => break,
            },
        };
        if sink.send(frame).await.is_err() {
            break;
        }
    }
    stop.cancel();
}

/// The close a read error calls for: 1009 for a message over the bound,
/// 1002 for a protocol error; `None` when the client ended the connection
/// (a TCP close without a Close frame, which tungstenite reports as a
/// protocol error, a reset): counted as the client's, never as a close
/// frame the gate sent (issue 37).
fn refusal(e: &WsError) -> Option<CloseFrame> {
    match e {
        WsError::Capacity(_) => Some(sent(CloseCode::Size, "1009", "message too big")),
        WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => {
            m::ws_peer_close("eof");
            None
        }
        WsError::Protocol(_) | WsError::Utf8(_) => {
            Some(sent(CloseCode::Protocol, "1002", "protocol error"))
        }
        WsError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionReset => {
            m::ws_peer_close("reset");
            None
        }
        _ => {
            m::ws_peer_close("error");
            None
        }
    }
}

/// A close frame the gate sends, counted under its `code`.
fn sent(code: CloseCode, label: &'static str, reason: &'static str) -> CloseFrame {
    m::ws_close(label);
    CloseFrame {
        code,
        reason: Utf8Bytes::from_static(reason),
    }
}

/// A SIP message as one WebSocket message: text when it is UTF-8, as SIP
/// nearly always is (browsers' SIP stacks read text most simply), binary
/// otherwise (RFC 7118 5). Neither copies the bytes.
fn sip_message(bytes: Bytes) -> Message {
    match Utf8Bytes::try_from(bytes.clone()) {
        Ok(text) => Message::Text(text),
        Err(_) => Message::Binary(bytes),
    }
}
