//! The frame-time bound (`[tcp] frame_s`) for WebSocket messages:
//! tungstenite assembles frames out of sight, so the stream under it notes
//! when bytes came in while no message was delivered, and the reader closes
//! a connection whose message is not complete that long after (a peer
//! dribbling a frame, slowloris), as the TCP reader does.
//!
//! The reader's one timer ([`next_or_due`]) is armed for the frame bound
//! only once such bytes have come: an idle connection's timer is its idle
//! bound (`[tcp] idle_s`), so 10,000 idle connections wake nobody between
//! keep-alives (issue 25, docs/benchmarks.md).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

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

/// The reader's timer fired before a message came.
#[derive(Debug)]
pub(super) struct Due;

/// The next item of `source`, or [`Due`] once `timer` fires first. Before
/// it waits, the timer is brought forward to `frame` after [`Started`] when
/// the poll of `source` just saw the bytes of a message begin (the mark is
/// made inside that poll, so it is seen at once). It is never pushed back
/// here: woken at a deadline that no longer holds, the reader asks
/// [`fired`], which re-arms it. A message delivered whole in one poll
/// touches no timer at all.
pub(super) async fn next_or_due<T, S>(
    source: &mut S,
    started: &Started,
    mut timer: Pin<&mut Sleep>,
    frame: Duration,
) -> Result<Option<T>, Due>
where
    S: Stream<Item = T> + Unpin,
{
    std::future::poll_fn(|cx| {
        if let Poll::Ready(item) = source.poll_next_unpin(cx) {
            return Poll::Ready(Ok(item));
        }
        if let Some(t) = started.since() {
            let due = tokio::time::Instant::from_std(t + frame);
            if due < timer.deadline() {
                timer.as_mut().reset(due);
            }
        }
        timer.as_mut().poll(cx).map(|()| Err(Due))
    })
    .await
}

/// What the reader's timer firing at `now` means.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Fired {
    /// A message began `frame` or more ago and is not complete.
    Frame,
    /// No message for `idle` since `last`, and none begun.
    Idle,
    /// A deadline that no longer holds (a message came since it was set,
    /// or one began later): the timer is re-armed for the one that does.
    Early,
}

/// Decides what the timer firing at `now` means, the last message having
/// come at `last`, and re-arms the timer when it fired early.
pub(super) fn fired(
    started: &Started,
    timer: Pin<&mut Sleep>,
    (last, now): (Instant, Instant),
    (idle, frame): (Duration, Duration),
) -> Fired {
    let begun = started.since();
    let due = begun.map_or(last + idle, |t| t + frame);
    if now < due {
        timer.reset(tokio::time::Instant::from_std(due));
        Fired::Early
    } else if begun.is_some() {
        Fired::Frame
    } else {
        Fired::Idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Duration = Duration::from_secs(600);

    /// R-WS-2 (issue 25): nothing read, nothing begun: waiting leaves the
    /// timer at the idle bound (no frame_s wake-up is armed).
    #[tokio::test]
    async fn r_ws_2_an_idle_reader_waits_for_its_idle_bound() {
        let started = Started::new();
        let timer = tokio::time::sleep(IDLE);
        tokio::pin!(timer);
        let idle_at = timer.deadline();
        let mut source = futures::stream::pending::<()>();
        let wait = next_or_due(
            &mut source,
            &started,
            timer.as_mut(),
            Duration::from_secs(10),
        );
        let polled = tokio::time::timeout(Duration::from_millis(20), wait).await;
        assert!(polled.is_err(), "nothing fired");
        assert_eq!(timer.deadline(), idle_at);
    }

    /// R-WS-2: bytes of a message seen in the poll (as tungstenite reads a
    /// partial frame) bring the timer forward to frame_s after them, and it
    /// fires there, long before the idle bound.
    #[tokio::test]
    async fn r_ws_2_a_begun_message_arms_the_frame_bound() {
        let frame = Duration::from_millis(50);
        let started = Started::new();
        let timer = tokio::time::sleep(IDLE);
        tokio::pin!(timer);
        let marks = started.clone();
        let mut source = futures::stream::poll_fn(move |_| -> Poll<Option<()>> {
            marks.mark();
            Poll::Pending
        });
        let wait = next_or_due(&mut source, &started, timer.as_mut(), frame);
        let r = tokio::time::timeout(Duration::from_secs(5), wait).await;
        assert!(matches!(r, Ok(Err(Due))), "the frame bound fired");
        let begun = started.since().expect("marked");
        assert_eq!(
            timer.deadline(),
            tokio::time::Instant::from_std(begun + frame)
        );
        let now = Instant::now();
        assert_eq!(
            fired(
                &started,
                timer.as_mut(),
                (now, begun + frame),
                (IDLE, frame)
            ),
            Fired::Frame
        );
    }

    /// R-WS-2: a deadline that no longer holds re-arms the timer for the
    /// one that does; past the idle bound with nothing begun is idle.
    #[tokio::test]
    async fn r_ws_2_an_early_wake_rearms_and_idle_is_idle() {
        let frame = Duration::from_secs(10);
        let started = Started::new();
        let timer = tokio::time::sleep(frame);
        tokio::pin!(timer);
        let last = Instant::now();
        let at = last + frame;
        assert_eq!(
            fired(&started, timer.as_mut(), (last, at), (IDLE, frame)),
            Fired::Early
        );
        assert_eq!(
            timer.deadline(),
            tokio::time::Instant::from_std(last + IDLE)
        );
        assert_eq!(
            fired(&started, timer.as_mut(), (last, last + IDLE), (IDLE, frame)),
            Fired::Idle
        );
        // A message begun, its bound not reached: early, re-armed to it.
        started.mark();
        let begun = started.since().expect("marked");
        assert_eq!(
            fired(
                &started,
                timer.as_mut(),
                (last, begun + frame / 2),
                (IDLE, frame)
            ),
            Fired::Early
        );
        assert_eq!(
            timer.deadline(),
            tokio::time::Instant::from_std(begun + frame)
        );
    }
}
