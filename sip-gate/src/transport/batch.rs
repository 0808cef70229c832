//! Reading a UDP worker's queue a batch at a time (R-OV-1): one
//! `recvmmsg` that blocks for the first datagram (up to the socket's read
//! timeout) and then takes, without waiting, whatever else is queued, up to
//! [`MAX_BATCH`] (a few while the worker keeps up). When the queue is empty that is one datagram per system
//! call, as with `recvmsg`; under a backlog it is one call per batch, and
//! the worker sees the whole batch before handling any of it, so it can
//! serve in-dialog traffic first.

use std::io;
use std::io::IoSliceMut;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use nix::sys::socket::{recvmmsg, ControlMessageOwned, MsgFlags, MultiHeaders, SockaddrStorage};
use nix::sys::time::TimeSpec;

use super::MAX_MESSAGE;
use crate::overload::{IntakeMeter, MAX_BATCH};

/// One datagram read, copied out of the receive buffer.
#[derive(Debug)]
pub(super) struct Datagram {
    pub(super) data: Bytes,
    pub(super) from: Sender,
}

/// Who sent a datagram, and when the kernel queued it (since the Unix
/// epoch), if it said.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sender {
    pub(super) peer: SocketAddr,
    pub(super) queued: Option<Duration>,
}

impl Sender {
    /// How long it has been since the kernel queued the datagram.
    pub(super) fn waited(&self) -> Option<Duration> {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .ok()?;
        Some(now.saturating_sub(self.queued?))
    }
}

/// A worker's receive buffers, reused for every batch.
pub(super) struct BatchReceiver {
    headers: MultiHeaders<SockaddrStorage>,
    /// [`MAX_BATCH`] slots of [`MAX_MESSAGE`] bytes. Zeroed lazily by the
    /// allocator: only the pages datagrams were written to are resident.
    buf: Vec<u8>,
    /// A datagram's control messages did not fit its slot's space.
    truncated: bool,
    /// Datagrams in the last batch.
    last: usize,
}

/// Slots offered while the queue keeps up.
const SMALL: usize = 4;

/// Room for each datagram's control messages: its receive timestamp and
/// the queue's drop count.
fn headers() -> MultiHeaders<SockaddrStorage> {
    MultiHeaders::preallocate(MAX_BATCH, Some(nix::cmsg_space!(TimeSpec, u32)))
}

impl BatchReceiver {
    pub(super) fn new() -> BatchReceiver {
        BatchReceiver {
            headers: headers(),
            buf: vec![0u8; MAX_BATCH * MAX_MESSAGE],
            truncated: false,
            last: 0,
        }
    }

    /// Reads a batch into `out` (cleared first), in the order the kernel
    /// queued it, and gives `meter` each datagram's drop count in that order.
    /// While the worker keeps up (its last batch had room to spare) the
    /// kernel is offered [`SMALL`] slots, so a batch of one costs little more
    /// than `recvmsg`; a full batch means a backlog, and the next offers
    /// [`MAX_BATCH`]. `WouldBlock` when nothing is queued: it never waits.
    pub(super) fn recv(
        &mut self,
        sock: &UdpSocket,
        meter: &mut IntakeMeter,
        out: &mut Vec<Datagram>,
    ) -> io::Result<()> {
        out.clear();
        if self.truncated {
            // The kernel writes back each header's control length, and the
            // headers keep it: a slot whose last datagram carried only a
            // timestamp has no room for a drop count. Fresh headers have the
            // full room again; the count rides on every later datagram.
            self.headers = headers();
            self.truncated = false;
        }
        let read = if self.last < SMALL {
            self.read::<SMALL>(sock, meter, out)
        } else {
            self.read::<MAX_BATCH>(sock, meter, out)
        };
        self.last = out.len();
        read
    }

    /// One `recvmmsg` into the first `N` slots.
    fn read<const N: usize>(
        &mut self,
        sock: &UdpSocket,
        meter: &mut IntakeMeter,
        out: &mut Vec<Datagram>,
    ) -> io::Result<()> {
        let mut slots = self.buf.chunks_mut(MAX_MESSAGE);
        let mut iovs: [[IoSliceMut<'_>; 1]; N] =
            std::array::from_fn(|_| [IoSliceMut::new(slots.next().unwrap_or_default())]);
        let read = recvmmsg(
            sock.as_raw_fd(),
            &mut self.headers,
            iovs.iter_mut(),
            // Never blocks: the worker waits in `poll` (`pause.rs`).
            MsgFlags::MSG_WAITFORONE | MsgFlags::MSG_DONTWAIT,
            None,
        )?;
        let now = Instant::now();
        for msg in read {
            let (mut queued, mut drops) = (None, None);
            match msg.cmsgs() {
                Ok(cmsgs) => {
                    for c in cmsgs {
                        match c {
                            ControlMessageOwned::ScmTimestampns(ts) => {
                                queued = Some(Duration::from(ts))
                            }
                            ControlMessageOwned::RxqOvfl(n) => drops = Some(n),
                            _ => {}
                        }
                    }
                }
                Err(_) => self.truncated = true,
            }
            meter.dropped(drops, now);
            let Some(peer) = msg.address.as_ref().and_then(socket_addr) else {
                continue;
            };
            let data = msg.iovs().next().unwrap_or_default();
            out.push(Datagram {
                data: Bytes::copy_from_slice(data.get(..msg.bytes).unwrap_or(data)),
                from: Sender { peer, queued },
            });
        }
        Ok(())
    }
}

/// The address of a datagram's peer, IPv4 or IPv6. Here, below `udp`, since
/// both the batched reads and `udp`'s error queue read it (issue 24).
pub(super) fn socket_addr(a: &SockaddrStorage) -> Option<SocketAddr> {
    a.as_sockaddr_in()
        .map(|v4| SocketAddr::from(std::net::SocketAddrV4::from(*v4)))
        .or_else(|| {
            a.as_sockaddr_in6()
                .map(|v6| SocketAddr::from(std::net::SocketAddrV6::from(*v6)))
        })
}
