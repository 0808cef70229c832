//! One upgraded WebSocket connection's task: a reader that takes frames
//! off the bytes read (`frame.rs`) and hands each message to the core as
//! the TCP reader does, and a writer that frames each queued message.
//!
//! The reader works as the TCP one (`stream.rs`, issue 29): it reads into a
//! scratch array that lives only while the socket is polled, keeps a
//! buffer only while a frame or a fragmented message is incomplete, and
//! holds nothing while idle. A message in one frame is unmasked in place
//! and split off that buffer: the core gets it with no copy of its own.
//!
//! A plain `ws` connection moves in a hand-over like a plain TCP one
//! (R-GW-3): its reader stops between two messages, its writer writes what
//! was queued, and the socket goes to the next run with the bytes read and
//! not yet framed and the fragments of a message begun ([`Moved`]).

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use super::super::member::{handed, Member};
use super::super::read_timer::{Expired, ReadTimer};
use super::super::stream::read_some;
use super::super::Net;
use super::frame::{self, Event, Kind, Violation};
use super::CLOSE_WRITE;
use crate::metrics as m;
use crate::txn::{ConnId, Inbound};
use ringsync::capture::Transport::Stream;

/// What the reader asks the writer to send, which only the writer writes:
/// the pong a ping is owed (only the latest, RFC 6455 5.5.3) and the Close
/// that ends the connection.
#[derive(Debug, Default)]
struct Owed {
    pong: Mutex<Option<Bytes>>,
    close: Mutex<Option<Bytes>>,
    ready: Notify,
}

impl Owed {
    fn set(&self, slot: &Mutex<Option<Bytes>>, body: Bytes) {
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(body);
        self.ready.notify_one();
    }

    fn take(slot: &Mutex<Option<Bytes>>) -> Option<Bytes> {
        slot.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// What a connection that moves leaves for the next run: the stream, the
/// bytes read and not yet framed, and the framing's state.
pub(super) type Moved<S> = (S, BytesMut, frame::Reader);

/// How the reader ended.
enum End<R> {
    /// The peer went, or the gate stops: no Close from the reader.
    Gone,
    /// With this Close frame's body.
    Close(Bytes),
    /// A hand-over: the half, with what is buffered and begun.
    Moved(R, BytesMut, frame::Reader),
}

/// Serves an upgraded connection until either side closes, the gate stops,
/// or it idles out; `buf` holds what was read after the upgrade (or by an
/// earlier run), `frames` the framing's state. With `movable` (plain `ws`),
/// a hand-over stops it and it comes back ([`Moved`]); otherwise `None`.
pub(super) async fn serve<S>(
    net: Arc<Net>,
    (listener, id, peer): (usize, ConnId, SocketAddr),
    local: SocketAddr,
    io: S,
    rx: mpsc::Receiver<Bytes>,
    (buf, frames, movable): (BytesMut, frame::Reader, bool),
) -> Option<Moved<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (rd, wr) = tokio::io::split(io);
    let stop = net.shutdown.child_token();
    let owed = Owed::default();
    // A plain connection is a member of the hand-over that may come.
    let (member, members) = net.join_moving(movable, id, listener, peer);
    let writer = write_loop(
        (&net, listener, (local, peer)),
        wr,
        rx,
        &owed,
        (&stop, member.as_deref()),
    );
    let reader = async {
        let at = (listener, id, local, peer);
        let moving = member.as_deref();
        let end = read_loop(&net, at, rd, (buf, frames), (&stop, &owed), moving).await;
        match end {
            End::Gone => {
                stop.cancel();
                None
            }
            End::Close(body) => {
                owed.set(&owed.close, body);
                None
            }
            End::Moved(rd, buf, frames) => Some((rd, buf, frames)),
        }
    };
    let ended = tokio::join!(writer, reader);
    if let Some(members) = members {
        members.remove(&id);
    }
    match ended {
        (Some(wr), Some((rd, buf, frames))) => Some((rd.unsplit(wr), buf, frames)),
        _ => None,
    }
}

/// The reader (see the module doc): until the peer closes, the framing
/// breaks, a bound ends it (`[tcp] idle_s` without a byte unless a
/// registration holds the connection, RFC 5626 5.3; `[tcp] frame_s` for a
/// message begun), the connection's `stop`, or a hand-over (`member`).
async fn read_loop<R: AsyncRead + Unpin>(
    net: &Arc<Net>,
    (listener, id, local, peer): (usize, ConnId, SocketAddr, SocketAddr),
    mut rd: R,
    (mut buf, mut frames): (BytesMut, frame::Reader),
    (stop, owed): (&CancellationToken, &Owed),
    member: Option<&Member>,
) -> End<R> {
    let movable = member.is_some();
    let tcp = net.core.tcp_config();
    let mut timer = ReadTimer::new(tcp.idle(), tcp.frame());
    let at = (listener, id, local, peer);
    loop {
        let consumed = match take_frames(net, at, &mut buf, (&mut frames, owed), movable) {
            Ok(Turn::More) => {
                tokio::task::yield_now().await;
                continue;
            }
            Ok(Turn::Done(consumed)) => consumed,
            Ok(Turn::Closed(echo)) => return End::Close(echo),
            Err(v) => return End::Close(refusal(v, peer)),
        };
        if buf.is_empty() {
            // Nothing partial: let go of the allocation (the messages
            // taken off it keep their own share of it).
            buf = BytesMut::new();
        }
        if member.is_some_and(Member::stopped) {
            return End::Moved(rd, buf, frames);
        }
        let partial = !buf.is_empty() || frames.pending();
        timer.framed(partial, consumed, Instant::now());
        let (wait, expiry) = timer.wait(Instant::now());
        let read = tokio::select! {
            _ = stop.cancelled() => return End::Gone,
            // Only between messages: what is buffered is a partial one.
            _ = handed(member) => return End::Moved(rd, buf, frames),
            r = tokio::time::timeout(wait, read_some(&mut rd, &mut buf)) => r,
        };
        match read {
            Err(_) if expiry == Expired::Frame => {
                tracing::info!(%peer, "closing WebSocket connection: message not complete in time");
                m::dropped("ws_frame_timeout");
                // RFC 6455 7.4.1: 1008, the message broke the frame-time
                // policy (R-WS-2).
                return End::Close(sent(1008, "1008", "message not complete in time"));
            }
            // Idle, but a registration uses it: the subscriber's requests
            // reach it only this way (RFC 5626 5.3).
            Err(_) if net.core.tcp_held(id, Instant::now()) => {}
            // R-WS-2, issue 37: 1000 (RFC 6455 7.4.1, normal closure): the
            // idle rule ended it, nothing went wrong; a browser sees a
            // clean close, not 1006.
            Err(_) => return End::Close(sent(1000, "1000", "idle")),
            Ok(Ok(0)) => {
                m::ws_peer_close("eof");
                return End::Gone;
            }
            Ok(Err(e)) => {
                let how = if e.kind() == io::ErrorKind::ConnectionReset {
                    "reset"
                } else {
                    "error"
                };
                m::ws_peer_close(how);
                return End::Gone;
            }
            Ok(Ok(_)) => {
                if let Some(m) = member {
                    m.touch();
                }
            }
        }
    }
}

/// How one turn of framing ended.
enum Turn {
    /// Nothing whole is left; whether a message was taken off.
    Done(bool),
    /// [`super::super::STREAM_TURN`] messages taken: more may be buffered.
    More,
    /// The client's Close: the echo to send.
    Closed(Bytes),
}

/// Takes the whole frames at the start of `buf` (up to a turn's messages):
/// each message to the core, each ping its pong owed, a Close its echo.
/// Stops before a message once a hand-over paused this run, when the
/// connection moves: the next run reads it.
fn take_frames(
    net: &Arc<Net>,
    (listener, id, local, peer): (usize, ConnId, SocketAddr, SocketAddr),
    buf: &mut BytesMut,
    (frames, owed): (&mut frame::Reader, &Owed),
    movable: bool,
) -> Result<Turn, Violation> {
    let mut consumed = false;
    for _ in 0..super::super::STREAM_TURN {
        // Counted while handled: a hand-over's pause waits for it; once
        // paused, a moving connection stops here, a kept one relays.
        let handling = net.pause.enter();
        if handling.is_none() && movable {
            return Ok(Turn::Done(consumed));
        }
        let before = buf.len();
        let data = match frames.next(buf)? {
            // Nothing whole left.
            None if buf.len() == before => return Ok(Turn::Done(consumed)),
            // A fragment taken: the message goes on.
            None => continue,
            Some(Event::Message(data)) => data,
            Some(Event::Ping(payload)) => {
                owed.set(&owed.pong, payload);
                continue;
            }
            Some(Event::Pong) => continue,
            Some(Event::Close(c)) => {
                m::ws_peer_close("close");
                // RFC 6455 5.5.1: the code echoed, the reason not needed.
                let echo = c.map_or(Bytes::new(), |(code, _)| frame::close_body(code, b""));
                return Ok(Turn::Closed(echo));
            }
        };
        consumed = true;
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
        // A keeper's connection: the run that took over decides (R-GW-3).
        let Some(data) = net.relay_in((listener, id, peer), data) else {
            continue;
        };
        let inbound = Inbound::Tcp {
            listener,
            conn: id,
            peer,
        };
        // R-OV-1: the stream transports' deadline, as over TCP.
        let now = Instant::now();
        let action = net
            .core
            .handle_stream(inbound, data, now, net.lag.behind(now));
        net.execute(action);
        drop(handling);
    }
    Ok(Turn::More)
}

/// The writer: each queued SIP message as one WebSocket message, the pongs
/// owed, until the connection's `stop`; the Close the reader asks for, or
/// 1001 when the gate stops (R-GW-1), each written within [`CLOSE_WRITE`].
/// A hand-over (`member`, a plain connection) stops it once what was
/// queued is written, and it gives its half back.
async fn write_loop<W: AsyncWrite + Unpin>(
    (net, listener, ends): (&Arc<Net>, usize, (SocketAddr, SocketAddr)),
    mut wr: W,
    mut rx: mpsc::Receiver<Bytes>,
    owed: &Owed,
    (stop, member): (&CancellationToken, Option<&Member>),
) -> Option<W> {
    let capture = net.core.capture();
    loop {
        let written = tokio::select! {
            // Biased, the stop first: a reader that saw the gate stop ends
            // too, and the gate's 1001 must go before anything else.
            biased;
            _ = stop.cancelled() => {
                if net.shutdown.is_cancelled() {
                    let body = sent(1001, "1001", "gate stopping");
                    let close = write_frame(&mut wr, Kind::Close, &body);
                    let _ = tokio::time::timeout(CLOSE_WRITE, close).await;
                }
                break;
            }
            _ = handed(member) => {
                // This run handles no message any more (the pause): what
                // the core queued goes out from this run, the next one
                // sends the rest.
                while let Ok(msg) = rx.try_recv() {
                    if write_message(&mut wr, &msg).await.is_err() {
                        stop.cancel();
                        return None;
                    }
                }
                return Some(wr);
            }
            () = owed.ready.notified() => {
                if let Some(body) = Owed::take(&owed.close) {
                    let close = write_frame(&mut wr, Kind::Close, &body);
                    let _ = tokio::time::timeout(CLOSE_WRITE, close).await;
                    break;
                }
                match Owed::take(&owed.pong) {
                    Some(p) => write_frame(&mut wr, Kind::Pong, &p).await,
                    None => Ok(()),
                }
            }
            msg = rx.recv() => match msg {
                Some(msg) => {
                    if capture.is_on() && msg.as_ref() != b"\r\n" {
                        capture.sip(listener, Stream, ends, &msg, None);
                    }
                    write_message(&mut wr, &msg).await
                }
                None => break,
            },
        };
        if written.is_err() {
            break;
        }
        if let Some(m) = member {
            m.touch();
        }
    }
    stop.cancel();
    // No TLS close_notify and no half-close: the socket closes whole when
    // the task ends (a ws pool in front, R-WS-3, copies until both of its
    // sides end, and the client that sent a Close may not close its own).
    None
}

/// A SIP message as one WebSocket message: text when it is UTF-8, as SIP
/// nearly always is (browsers' SIP stacks read text most simply), binary
/// otherwise (RFC 7118 5).
async fn write_message<W: AsyncWrite + Unpin>(wr: &mut W, msg: &[u8]) -> io::Result<()> {
    let kind = if std::str::from_utf8(msg).is_ok() {
        Kind::Text
    } else {
        Kind::Binary
    };
    write_frame(wr, kind, msg).await
}

/// Writes one frame, its header and payload gathered in one write where
/// the stream takes it (no copy of the payload), then flushes (TLS holds
/// records until then).
async fn write_frame<W: AsyncWrite + Unpin>(
    wr: &mut W,
    kind: Kind,
    payload: &[u8],
) -> io::Result<()> {
    let (h, n) = frame::header(kind, payload.len());
    let (mut head, mut body) = (&h[..n], payload);
    while !head.is_empty() || !body.is_empty() {
        let bufs = [IoSlice::new(head), IoSlice::new(body)];
        let k = wr.write_vectored(&bufs).await?;
        if k == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let from_head = k.min(head.len());
        head = &head[from_head..];
        body = &body[k - from_head..];
    }
    wr.flush().await
}

/// The Close the gate ends a connection with for `v` (RFC 6455 7.4.1).
fn refusal(v: Violation, peer: SocketAddr) -> Bytes {
    let (code, label, reason) = match v {
        Violation::Protocol => (1002, "1002", "protocol error"),
        Violation::Utf8 => (1007, "1007", "text not UTF-8"),
        Violation::Size => (1009, "1009", "message too big"),
    };
    tracing::info!(%peer, code, reason, "closing WebSocket connection");
    sent(code, label, reason)
}

/// A Close frame body the gate sends, counted under its `code`.
fn sent(code: u16, label: &'static str, reason: &'static str) -> Bytes {
    m::ws_close(label);
    frame::close_body(code, reason.as_bytes())
}
