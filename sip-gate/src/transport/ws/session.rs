//! The message phase of an upgraded WebSocket connection, in one loop of
//! the connection's task: each message tungstenite reads goes to the core,
//! each the connection's queue holds goes out as a message, until either
//! side closes, the gate stops, or a bound ends it (`timed.rs`).
//!
//! One loop rather than a reader and a writer over a split stream: no lock
//! between the halves on every poll, no channel for the reader to ask the
//! writer for a close frame, and a task that holds one future, not two
//! (issue 25, docs/benchmarks.md).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures::SinkExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;

use super::timed::{self, Due, Fired, Started, Timed};
use super::Net;
use crate::metrics as m;
use crate::txn::{ConnId, Inbound};

type Ws<S> = WebSocketStream<Timed<S>>;

/// What one turn of the loop leads to.
enum Turn {
    /// On to the next.
    Go,
    /// The end, with the close frame to send, if the end calls for one.
    End(Option<CloseFrame>),
}

/// Serves an upgraded connection (`started` marked by its stream) until
/// it ends: `[tcp] idle_s` without a message (unless a registration holds
/// the connection, RFC 5626 5.3), `[tcp] frame_s` for a message whose
/// bytes began to come, the peer's close or error, or the gate stopping.
pub(super) async fn run<S>(
    net: &Arc<Net>,
    (listener, id, peer): (usize, ConnId, SocketAddr),
    (mut ws, started): (Ws<S>, Started),
    mut rx: mpsc::Receiver<Bytes>,
) where
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
    let end = loop {
        let turn = tokio::select! {
            _ = net.shutdown.cancelled() => {
                m::ws_close("1001");
                Turn::End(Some(close(CloseCode::Away, "gate stopping")))
            }
            msg = rx.recv() => match msg {
                Some(bytes) => match ws.send(sip_message(bytes)).await {
                    Ok(()) => Turn::Go,
                    Err(_) => Turn::End(None),
                },
                None => Turn::End(None),
            },
            next = timed::next_or_due(&mut ws, &started, timer.as_mut(), frame) => {
                let now = Instant::now();
                match next {
                    Err(Due) => match timed::fired(&started, timer.as_mut(), (last, now), (idle, frame)) {
                        Fired::Early => Turn::Go,
                        // Idle, but a registration uses it: the subscriber's
                        // requests reach it only this way (RFC 5626 5.3).
                        Fired::Idle if net.core.tcp_held(id, now) => {
                            last = now;
                            timer.as_mut().reset((now + idle).into());
                            Turn::Go
                        }
                        Fired::Idle => Turn::End(None),
                        Fired::Frame => {
                            tracing::info!(%peer, "closing WebSocket connection: message not complete in time");
                            m::dropped("ws_frame_timeout");
                            Turn::End(None)
                        }
                    },
                    Ok(item) => match received(item, &started, peer) {
                        Ok(data) => {
                            last = now;
                            match data {
                                Some(data) => deliver(net, inbound, &mut ws, data).await,
                                None => Turn::Go,
                            }
                        }
                        Err(end) => end,
                    },
                }
            }
        };
        if let Turn::End(close) = turn {
            break close;
        }
    };
    match end {
        Some(close) => {
            let _ = tokio::time::timeout(frame, ws.send(Message::Close(Some(close)))).await;
        }
        // A close from the peer is answered (tungstenite queued the
        // answer as it read it): sent here.
        None => {
            let _ = tokio::time::timeout(frame, ws.flush()).await;
        }
    }
}

/// What tungstenite read: a SIP message's bytes, nothing for the core (a
/// ping, whose pong tungstenite sends, or a pong), or the end.
fn received(
    item: Option<Result<Message, WsError>>,
    started: &Started,
    peer: SocketAddr,
) -> Result<Option<Bytes>, Turn> {
    match item {
        None | Some(Ok(Message::Close(_))) => Err(Turn::End(None)),
        Some(Err(e)) => {
            let frame = refusal(&e);
            if frame.is_some() {
                tracing::info!(%peer, error = %e, "closing WebSocket connection");
            }
            Err(Turn::End(frame))
        }
        Some(Ok(msg)) => {
            started.clear();
            Ok(match msg {
                Message::Text(t) => Some(Bytes::from(t)),
                Message::Binary(b) => Some(b),
                _ => None,
            })
        }
    }
}

/// A message to the core, or a keep-alive answered.
async fn deliver<S>(net: &Arc<Net>, inbound: Inbound, ws: &mut Ws<S>, data: Bytes) -> Turn
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if data.iter().all(|b| matches!(b, b'\r' | b'\n')) {
        // RFC 5626 3.5.1: a double CRLF asks for one back.
        if data.as_ref() == b"\r\n\r\n" && ws.send(Message::text("\r\n")).await.is_err() {
            return Turn::End(None);
        }
        return Turn::Go;
    }
    // R-OV-1: the stream transports' deadline, as over TCP.
    let now = Instant::now();
    let action = net
        .core
        .handle_stream(inbound, data, now, net.lag.behind(now));
    net.execute(action);
    Turn::Go
}

/// The close a read error calls for: 1009 for a message over the bound,
/// 1002 for a protocol error; `None` when the connection just went.
fn refusal(e: &WsError) -> Option<CloseFrame> {
    match e {
        WsError::Capacity(_) => {
            m::ws_close("1009");
            Some(CloseFrame {
                code: CloseCode::Size,
                reason: Utf8Bytes::from_static("message too big"),
            })
        }
        WsError::Protocol(_) | WsError::Utf8(_) => {
            m::ws_close("1002");
            Some(CloseFrame {
                code: CloseCode::Protocol,
                reason: Utf8Bytes::from_static("protocol error"),
            })
        }
        _ => None,
    }
}

fn close(code: CloseCode, reason: &'static str) -> CloseFrame {
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
