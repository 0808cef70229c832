//! A hand-over's pause (R-GW-3): the moment the old run stops handling
//! messages, so that the state it passes on is the state. It waits only for
//! the messages being handled then, not for every connection's reader to
//! wake and stop (thousands of idle ones): each reader checks the pause
//! before it hands a message to the core, and a plain connection's reader
//! that finds it set stops with the message still unread (the next run
//! reads it); a TLS or WSS one relays it to the next run. The UDP
//! workers wait for their socket and for the pause together (`poll` on
//! the socket and an eventfd), so they stop at once instead of at their
//! next receive timeout.

use std::net::UdpSocket;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags, Timespec};

/// See the module doc.
#[derive(Debug)]
pub(super) struct Pause {
    paused: AtomicBool,
    /// Messages being handled now.
    handling: AtomicUsize,
    /// Readable once paused: wakes the UDP workers (none if the kernel
    /// gave no eventfd: they then stop at their receive timeout).
    wake: Option<OwnedFd>,
}

/// A message being handled, counted until dropped.
pub(super) struct Handling<'a>(&'a Pause);

impl Drop for Handling<'_> {
    fn drop(&mut self) {
        self.0.handling.fetch_sub(1, SeqCst);
    }
}

impl Pause {
    pub(super) fn new() -> Pause {
        let wake = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK);
        if let Err(e) = &wake {
            tracing::debug!(error = %e, "no eventfd: a hand-over waits for the UDP workers' receive timeout");
        }
        Pause {
            paused: AtomicBool::new(false),
            handling: AtomicUsize::new(0),
            wake: wake.ok(),
        }
    }

    /// A message is about to be handled: `None` once paused (it is not).
    /// Counted first and checked after, as [`Pause::pause`] sets and then
    /// counts: one of the two sees the other.
    pub(super) fn enter(&self) -> Option<Handling<'_>> {
        self.handling.fetch_add(1, SeqCst);
        let h = Handling(self);
        (!self.paused.load(SeqCst)).then_some(h)
    }

    /// Whether paused.
    pub(super) fn is_paused(&self) -> bool {
        self.paused.load(SeqCst)
    }

    /// Pauses, and wakes the UDP workers.
    pub(super) fn pause(&self) {
        self.paused.store(true, SeqCst);
        if let Some(w) = &self.wake {
            let _ = rustix::io::write(w, &1u64.to_ne_bytes());
        }
    }

    /// Messages handled now (the pause waits for 0).
    pub(super) fn handling(&self) -> &AtomicUsize {
        &self.handling
    }

    /// Unpauses (the next run failed: this one serves again).
    pub(super) fn resume(&self) {
        if let Some(w) = &self.wake {
            let mut b = [0u8; 8];
            let _ = rustix::io::read(w, &mut b);
        }
        self.paused.store(false, SeqCst);
    }

    /// Waits at most `wait` for `sock` to be readable or for the pause.
    pub(super) fn wait_readable(&self, sock: &UdpSocket, wait: Duration) {
        let timeout = Timespec {
            tv_sec: wait.as_secs() as i64,
            tv_nsec: i64::from(wait.subsec_nanos()),
        };
        let mut fds = vec![PollFd::new(sock, PollFlags::IN)];
        if let Some(w) = &self.wake {
            fds.push(PollFd::from_borrowed_fd(w.as_fd(), PollFlags::IN));
        }
        let _ = poll(&mut fds, Some(&timeout));
    }
}
