//! The frame-time bound (`[tcp] frame_s`) for WebSocket messages:
//! tungstenite assembles frames out of sight, so the stream under it notes
//! when bytes came in while no message was delivered, and the reader closes
//! a connection whose message is not complete that long after (a peer
//! dribbling a frame, slowloris), as the TCP reader does.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// When the bytes of the message being read began to come, shared by the
/// stream (which sets it) and the reader (which clears it per message).
#[derive(Clone, Debug)]
pub(super) struct Started {
    base: Instant,
    /// Microseconds since `base`, plus one; 0 while nothing is pending.
    at: Arc<AtomicU64>,
}

impl Started {
    pub(super) fn new() -> Started {
        Started {
            base: Instant::now(),
            at: Arc::new(AtomicU64::new(0)),
        }
    }

    /// When bytes first came since the last delivered message, if any did.
    pub(super) fn since(&self) -> Option<Instant> {
        match self.at.load(Ordering::Relaxed) {
            0 => None,
            us => Some(self.base + std::time::Duration::from_micros(us - 1)),
        }
    }

    /// A message was delivered: nothing pending. Bytes of the next one
    /// already buffered start the clock again with the next read.
    pub(super) fn clear(&self) {
        self.at.store(0, Ordering::Relaxed);
    }

    fn mark(&self) {
        let us = u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX - 1) + 1;
        let _ = self
            .at
            .compare_exchange(0, us, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// A stream that marks [`Started`] when a read brings bytes.
pub(super) struct Timed<S> {
    inner: S,
    started: Started,
}

impl<S> Timed<S> {
    pub(super) fn new(inner: S, started: Started) -> Timed<S> {
        Timed { inner, started }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Timed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.started.mark();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Timed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
