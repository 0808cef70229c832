//! One TCP or TLS connection's task: a reader that frames messages (RFC
//! 3261 18.3) and hands them to the core, and a writer fed by the
//! connection's queue.
//!
//! An idle connection holds no read buffer (issue 29): the reader waits for
//! bytes with nothing allocated, reads them into a scratch array that lives
//! only while the socket is polled, and keeps a heap buffer only while a
//! message is partial. A subscriber's connection idles between keep-alives
//! for hours, and tens of thousands of them are held at once; a buffer
//! kept for each would be most of the gate's memory. What this costs is
//! one copy of the bytes read, from the scratch array into the buffer.
//!
//! Nothing wakes an idle connection but its socket, its queue, the gate's
//! stop, and the `[tcp] idle_s` clock (R-FT-4: the `frame_s` clock runs
//! only while part of a message is buffered).

use std::io;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{ready, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::member::{handed, Member};
use super::read_timer::{Expired, ReadTimer};
use super::{Moved, Net, MAX_MESSAGE, STREAM_TURN};
use crate::frame::{self, Frame};
use crate::metrics as m;
use crate::txn::{ConnId, Inbound};
use ringsync::capture::Transport::Stream;

/// The most one read takes off the socket: a burst of pipelined messages
/// is framed a read at a time.
const READ_CHUNK: usize = 16 * 1024;

impl Net {
    /// Hands the complete messages at the start of `buf` to the core, up
    /// to [`STREAM_TURN`] of them, and answers pings: whether a message was
    /// taken off and whether the turn ended with more perhaps left, or the
    /// framing error that ends the connection.
    ///
    /// A connection that moves in a hand-over (`movable`) is never relayed:
    /// only those that stay in this run are (R-GW-3).
    fn frame_buffered(
        self: &Arc<Net>,
        buf: &mut BytesMut,
        (listener, id, local, peer): (usize, ConnId, SocketAddr, SocketAddr),
        movable: bool,
    ) -> Result<(bool, bool), frame::FrameError> {
        let mut consumed = false;
        for _ in 0..STREAM_TURN {
            match frame::check(buf, MAX_MESSAGE)? {
                Some(Frame::KeepAlive { len, ping }) => {
                    buf.advance(len.min(buf.len()));
                    if ping {
                        self.tcp_send(listener, Some(id), peer, Bytes::from_static(b"\r\n"));
                    }
                }
                Some(Frame::Message { len }) => {
                    // Counted while handled; none once a hand-over paused
                    // this run: a plain connection stops with it unread (the
                    // next run reads it), any other relays it (R-GW-3).
                    let handling = self.pause.enter();
                    if handling.is_none() && movable {
                        return Ok((consumed, false));
                    }
                    consumed = true;
                    let data = buf.split_to(len.min(buf.len())).freeze();
                    // Copied as read, by the run that reads it (a keeper's
                    // connection is copied here, not again where it is relayed).
                    self.core
                        .capture()
                        .sip(listener, Stream, (peer, local), &data, None);
                    // A keeper's connection: the run that took over decides.
                    let data = if movable {
                        data
                    } else {
                        match self.relay_in((listener, id, peer), data) {
                            Some(data) => data,
                            None => continue,
                        }
                    };
                    let inbound = Inbound::Tcp {
                        listener,
                        conn: id,
                        peer,
                    };
                    let now = Instant::now();
                    let behind = self.lag.behind(now);
                    let action = self.core.handle_stream(inbound, data, now, behind);
                    self.execute(action);
                    drop(handling);
                }
                None => return Ok((consumed, false)),
            }
        }
        Ok((consumed, true))
    }
}

/// Reads what `rd` has (at most [`READ_CHUNK`] bytes) and appends it to
/// `buf`; 0 at the end of the stream. The scratch array is a local of one
/// poll, not kept across the wait, so a connection waiting here holds no
/// buffer; `buf` grows only by what came.
pub(super) async fn read_some<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
) -> io::Result<usize> {
    std::future::poll_fn(|cx| {
        let mut scratch = [MaybeUninit::<u8>::uninit(); READ_CHUNK];
        let mut chunk = ReadBuf::uninit(&mut scratch);
        ready!(Pin::new(&mut *rd).poll_read(cx, &mut chunk))?;
        buf.extend_from_slice(chunk.filled());
        Poll::Ready(Ok(chunk.filled().len()))
    })
    .await
}

/// A plain TCP connection (accepted or opened): [`connection`], and when a
/// hand-over asks (R-GW-3), its socket and the bytes read but not yet
/// framed go to the next run ([`Moved`]) instead of closing. `buf` holds
/// what an earlier run had read of it.
pub(super) async fn plain(
    net: Arc<Net>,
    (listener, id, peer): (usize, ConnId, SocketAddr),
    stream: TcpStream,
    rx: mpsc::Receiver<Bytes>,
    buf: BytesMut,
) {
    net.movable.fetch_add(1, Ordering::Relaxed);
    let local = local_of(&stream, peer);
    let halves = stream.into_split();
    let ends = (local, peer);
    let ended = connection(net.clone(), listener, id, ends, halves, rx, (buf, true)).await;
    if let Some((rd, wr, unread)) = ended {
        match rd.reunite(wr).map(TcpStream::into_std) {
            Ok(Ok(s)) => {
                net.handed.insert(id, ());
                net.moved
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Moved {
                        id,
                        fd: s.into(),
                        unread: unread.to_vec(),
                        begun: None,
                    });
            }
            _ => {
                tracing::warn!(%peer, "connection not handed over: its socket could not be taken back")
            }
        }
    }
    net.unregister(id, peer);
    net.movable.fetch_sub(1, Ordering::Relaxed);
}

/// One connection (see the module doc). The halves are a TCP stream's, or
/// a TLS stream's (tls.rs). With `movable` (plain TCP), a hand-over stops
/// it: what was queued for it is written, and the halves come back with
/// the bytes read but not yet framed (R-GW-3). Otherwise it ends closed
/// and unregisters.
pub(super) async fn connection<R, W>(
    net: Arc<Net>,
    listener: usize,
    id: ConnId,
    (local, peer): (SocketAddr, SocketAddr),
    (rd, mut wr): (R, W),
    mut rx: mpsc::Receiver<Bytes>,
    (buf, movable): (BytesMut, bool),
) -> Option<(R, W, BytesMut)>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let stop = net.shutdown.child_token();
    let writer_stop = stop.clone();
    let capture_net = net.clone();
    // A plain connection is a member of the hand-over that may come.
    let (member, members) = net.join_moving(movable, id, listener, peer);
    let writer_member = member.clone();
    let writer = async move {
        let capture = capture_net.core.capture();
        loop {
            let msg = tokio::select! {
                _ = writer_stop.cancelled() => break,
                _ = handed(writer_member.as_deref()) => {
                    // This run handles no message any more (the pause):
                    // what the core queued goes out from this run, the
                    // next one sends the rest.
                    while let Ok(m) = rx.try_recv() {
                        if wr.write_all(&m).await.is_err() {
                            writer_stop.cancel();
                            return None;
                        }
                    }
                    return wr.flush().await.is_ok().then_some(wr);
                }
                m = rx.recv() => match m { Some(m) => m, None => break },
            };
            // Copied before the write: a reply it draws is copied after it.
            if capture.is_on() && msg.as_ref() != b"\r\n" {
                capture.sip(listener, Stream, (local, peer), &msg, None);
            }
            // TLS holds records until flushed; on TCP a flush is free.
            if wr.write_all(&msg).await.is_err() || wr.flush().await.is_err() {
                break;
            }
            if let Some(m) = &writer_member {
                m.touch();
            }
        }
        writer_stop.cancel();
        // TLS: the close_notify before the TCP close (a keeper ending at
        // its bound closes properly, R-GW-3); TCP: the FIN.
        let _ = tokio::time::timeout(Duration::from_secs(1), wr.shutdown()).await;
        None
    };
    let reader = async {
        let at = (listener, id, local, peer);
        reader(net.clone(), at, rd, (buf, member.as_deref()), stop).await
    };
    let ended = tokio::join!(writer, reader);
    if let Some(members) = members {
        members.remove(&id);
    }
    match ended {
        (Some(wr), Some((rd, unread))) => Some((rd, wr, unread)),
        _ => {
            if !movable {
                net.unregister(id, peer);
            }
            None
        }
    }
}

/// The reading half of [`connection`]: until the peer closes, the framing
/// breaks, a clock runs out, or `stop`; it cancels `stop` when it ends.
async fn reader<R: AsyncRead + Unpin>(
    net: Arc<Net>,
    (listener, id, local, peer): (usize, ConnId, SocketAddr, SocketAddr),
    mut rd: R,
    (mut buf, member): (BytesMut, Option<&Member>),
    stop: tokio_util::sync::CancellationToken,
) -> Option<(R, BytesMut)> {
    let movable = member.is_some();
    let tcp = net.core.tcp_config();
    let mut timer = ReadTimer::new(tcp.idle(), tcp.frame());
    // A message was taken off in an earlier turn of this framing.
    let mut earlier = false;
    loop {
        // Frame everything already buffered before reading more, a turn at
        // a time.
        let consumed = match net.frame_buffered(&mut buf, (listener, id, local, peer), movable) {
            Ok((_, true)) => {
                earlier = true;
                tokio::task::yield_now().await;
                continue;
            }
            Ok((consumed, false)) => consumed || std::mem::take(&mut earlier),
            Err(e) => {
                // A stream that lost its framing cannot be resynchronised.
                tracing::info!(%peer, error = %e, "closing tcp connection: bad framing");
                m::dropped("tcp_framing");
                stop.cancel();
                return None;
            }
        };
        if buf.is_empty() {
            // Nothing partial: let go of the allocation (the messages
            // taken off it keep their own share of it).
            buf = BytesMut::new();
        }
        if member.is_some_and(Member::stopped) {
            // A hand-over: between two messages, the rest unread.
            return Some((rd, buf));
        }
        timer.framed(!buf.is_empty(), consumed, Instant::now());
        let (wait, expiry) = timer.wait(Instant::now());
        let read = tokio::select! {
            _ = stop.cancelled() => return None,
            // Only between messages: what is buffered is a partial one.
            _ = handed(member) => return Some((rd, buf)),
            r = tokio::time::timeout(wait, read_some(&mut rd, &mut buf)) => r,
        };
        match read {
            Err(_) if expiry == Expired::Frame => {
                tracing::info!(%peer, "closing tcp connection: message not complete in time");
                m::dropped("tcp_frame_timeout");
                stop.cancel();
                return None;
            }
            // Idle, but a registration uses it: the subscriber's requests
            // reach it only this way (RFC 5626 5.3).
            Err(_) if net.core.tcp_held(id, Instant::now()) => {}
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => {
                stop.cancel();
                return None;
            }
            Ok(Ok(_)) => {
                if let Some(m) = member {
                    m.touch();
                }
            }
        }
    }
}

/// A connection's local address, for the capture (the peer's family's
/// wildcard if the kernel does not say).
pub(super) fn local_of(stream: &TcpStream, peer: SocketAddr) -> SocketAddr {
    stream.local_addr().unwrap_or_else(|_| {
        let any = if peer.is_ipv4() {
            std::net::Ipv4Addr::UNSPECIFIED.into()
        } else {
            std::net::Ipv6Addr::UNSPECIFIED.into()
        };
        SocketAddr::new(any, 0)
    })
}
