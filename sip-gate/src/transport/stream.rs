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
use std::sync::Arc;
use std::task::{ready, Poll};
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::mpsc;

use super::read_timer::{Expired, ReadTimer};
use super::{Net, MAX_MESSAGE, STREAM_TURN};
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
    fn frame_buffered(
        self: &Arc<Net>,
        buf: &mut BytesMut,
        listener: usize,
        id: ConnId,
        (local, peer): (SocketAddr, SocketAddr),
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
                    consumed = true;
                    let data = buf.split_to(len.min(buf.len())).freeze();
                    let ends = (peer, local);
                    self.core.capture().sip(listener, Stream, ends, &data);
                    let inbound = Inbound::Tcp {
                        listener,
                        conn: id,
                        peer,
                    };
                    let now = Instant::now();
                    let behind = self.lag.behind(now);
                    let action = self.core.handle_stream(inbound, data, now, behind);
                    self.execute(action);
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
async fn read_some<R: AsyncRead + Unpin>(rd: &mut R, buf: &mut BytesMut) -> io::Result<usize> {
    std::future::poll_fn(|cx| {
        let mut scratch = [MaybeUninit::<u8>::uninit(); READ_CHUNK];
        let mut chunk = ReadBuf::uninit(&mut scratch);
        ready!(Pin::new(&mut *rd).poll_read(cx, &mut chunk))?;
        buf.extend_from_slice(chunk.filled());
        Poll::Ready(Ok(chunk.filled().len()))
    })
    .await
}

/// One connection (see the module doc). The halves are a TCP stream's, or
/// a TLS stream's (tls.rs).
pub(super) async fn connection<R, W>(
    net: Arc<Net>,
    listener: usize,
    id: ConnId,
    (local, peer): (SocketAddr, SocketAddr),
    (rd, mut wr): (R, W),
    mut rx: mpsc::Receiver<Bytes>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let stop = net.shutdown.child_token();
    let writer_stop = stop.clone();
    let capture_net = net.clone();
    let writer = async move {
        let capture = capture_net.core.capture();
        loop {
            let msg = tokio::select! {
                _ = writer_stop.cancelled() => break,
                m = rx.recv() => match m { Some(m) => m, None => break },
            };
            // Copied before the write: a reply it draws is copied after it.
            if capture.is_on() && msg.as_ref() != b"\r\n" {
                capture.sip(listener, Stream, (local, peer), &msg);
            }
            // TLS holds records until flushed; on TCP a flush is free.
            if wr.write_all(&msg).await.is_err() || wr.flush().await.is_err() {
                break;
            }
        }
        writer_stop.cancel();
    };
    let reader = reader(net.clone(), (listener, id, local, peer), rd, stop);
    tokio::join!(writer, reader);
    net.unregister(id, peer);
}

/// The reading half of [`connection`]: until the peer closes, the framing
/// breaks, a clock runs out, or `stop`; it cancels `stop` when it ends.
async fn reader<R: AsyncRead + Unpin>(
    net: Arc<Net>,
    (listener, id, local, peer): (usize, ConnId, SocketAddr, SocketAddr),
    mut rd: R,
    stop: tokio_util::sync::CancellationToken,
) {
    let tcp = net.core.tcp_config();
    let mut timer = ReadTimer::new(tcp.idle(), tcp.frame());
    let mut buf = BytesMut::new();
    // A message was taken off in an earlier turn of this framing.
    let mut earlier = false;
    loop {
        // Frame everything already buffered before reading more, a turn at
        // a time.
        let consumed = match net.frame_buffered(&mut buf, listener, id, (local, peer)) {
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
                return;
            }
        };
        if buf.is_empty() {
            // Nothing partial: let go of the allocation (the messages
            // taken off it keep their own share of it).
            buf = BytesMut::new();
        }
        timer.framed(!buf.is_empty(), consumed, Instant::now());
        let (wait, expiry) = timer.wait(Instant::now());
        let read = tokio::select! {
            _ = stop.cancelled() => return,
            r = tokio::time::timeout(wait, read_some(&mut rd, &mut buf)) => r,
        };
        match read {
            Err(_) if expiry == Expired::Frame => {
                tracing::info!(%peer, "closing tcp connection: message not complete in time");
                m::dropped("tcp_frame_timeout");
                stop.cancel();
                return;
            }
            // Idle, but a registration uses it: the subscriber's requests
            // reach it only this way (RFC 5626 5.3).
            Err(_) if net.core.tcp_held(id, Instant::now()) => {}
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => {
                stop.cancel();
                return;
            }
            Ok(Ok(_)) => {}
        }
    }
}
