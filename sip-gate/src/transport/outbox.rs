//! A UDP worker's outbox (issue 29): the datagrams one receive batch
//! produced for the worker's listener socket, sent after the batch with one
//! `sendmmsg` instead of a `sendto` each.
//!
//! Why: on loopback (and on a host whose peers are local) a send runs the
//! receiver's path at once and wakes the peer, which can preempt the worker
//! in the middle of its batch; each send is also a system call of its own.
//! Sending after the batch gives one call per batch and lets the worker
//! finish its batch before its peers run.
//!
//! What stays as it was: datagrams leave in the order the worker handled
//! them (so per destination too), a full send buffer blocks the send as
//! `sendto` did, an ICMP error left pending by an earlier datagram costs no
//! datagram (one more try, as [`crate::datagram::send`]), and every datagram
//! the kernel refuses is counted, never lost silently.

use std::io::IoSlice;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

use bytes::Bytes;
use nix::sys::socket::{sendmmsg, sendto, ControlMessage, MsgFlags, MultiHeaders, SockaddrStorage};

use crate::overload::MAX_BATCH;

/// What one [`Outbox::flush`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Flushed {
    /// Datagrams the kernel took.
    pub(super) sent: usize,
    /// Datagrams it refused (each logged and counted by the caller).
    pub(super) failed: usize,
    /// System calls made.
    pub(super) calls: usize,
}

/// Datagrams waiting for the end of the batch, in the order they were
/// produced.
pub(super) struct Outbox {
    headers: MultiHeaders<SockaddrStorage>,
    queued: Vec<(Bytes, SocketAddr)>,
}

impl Outbox {
    /// An empty outbox with headers for [`MAX_BATCH`] datagrams a call.
    pub(super) fn new() -> Outbox {
        Outbox {
            headers: MultiHeaders::preallocate(MAX_BATCH, None),
            queued: Vec::with_capacity(MAX_BATCH),
        }
    }

    /// Queues a datagram for the next flush.
    pub(super) fn push(&mut self, bytes: Bytes, to: SocketAddr) {
        self.queued.push((bytes, to));
    }

    /// Sends everything queued out of `sock`, in order, and empties the
    /// outbox.
    pub(super) fn flush(&mut self, sock: &UdpSocket) -> Flushed {
        let (fd, headers) = (sock.as_raw_fd(), &mut self.headers);
        drain(&mut self.queued, |rest| send_some(fd, headers, rest))
    }
}

/// Sends `queued` in order with `send`, which sends a prefix of what it is
/// given and says how long, or fails for the first datagram it was given.
/// A short count (`sendmmsg` stops at the first datagram that fails, and
/// reports only what it sent when that is any) continues with the rest:
/// the next call then reports that datagram's error, if it still has one.
fn drain(
    queued: &mut Vec<(Bytes, SocketAddr)>,
    mut send: impl FnMut(&[(Bytes, SocketAddr)]) -> nix::Result<usize>,
) -> Flushed {
    let mut done = Flushed::default();
    let (mut at, mut retried) = (0, false);
    while let Some(rest) = queued.get(at..).filter(|r| !r.is_empty()) {
        done.calls += 1;
        match send(rest) {
            Ok(n) if n > 0 => {
                let n = n.min(rest.len());
                (done.sent, at, retried) = (done.sent + n, at + n, false);
            }
            // An ICMP error of an earlier datagram, returned (and so
            // cleared) by this send, which sent nothing: once more.
            Err(e) if crate::datagram::left_by_icmp(e) && !retried => retried = true,
            // Refused (or, never seen, nothing sent and no error): counted
            // and skipped, so one bad datagram stops no other.
            other => {
                let to = rest[0].1;
                tracing::debug!(%to, result = ?other, "udp send failed");
                (done.failed, at, retried) = (done.failed + 1, at + 1, false);
            }
        }
    }
    queued.clear();
    done
}

/// One system call: `sendto` for a single datagram (no headers to fill),
/// `sendmmsg` for up to [`MAX_BATCH`]. Returns how many were sent.
fn send_some(
    fd: RawFd,
    headers: &mut MultiHeaders<SockaddrStorage>,
    rest: &[(Bytes, SocketAddr)],
) -> nix::Result<usize> {
    if let [(bytes, to)] = rest {
        return sendto(fd, bytes, &SockaddrStorage::from(*to), MsgFlags::empty()).map(|_| 1);
    }
    let rest = rest.get(..MAX_BATCH).unwrap_or(rest);
    let iovs: Vec<[IoSlice<'_>; 1]> = rest.iter().map(|(b, _)| [IoSlice::new(b)]).collect();
    let addrs: Vec<Option<SockaddrStorage>> = rest
        .iter()
        .map(|(_, to)| Some(SockaddrStorage::from(*to)))
        .collect();
    let none: [ControlMessage<'_>; 0] = [];
    let sent = sendmmsg(fd, headers, &iovs, &addrs, none, MsgFlags::empty())?;
    Ok(sent.count())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::errno::Errno;
    use nix::sys::socket::{setsockopt, sockopt};
    use std::time::Duration;

    fn to(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn queued(ports: &[u16]) -> Vec<(Bytes, SocketAddr)> {
        ports
            .iter()
            .map(|&p| (Bytes::from(p.to_string()), to(p)))
            .collect()
    }

    /// Issue 29: a short count continues with the rest, a refused datagram
    /// is counted and skipped, and every other goes out once, in order.
    #[test]
    fn a_partial_send_continues_and_errors_are_counted() {
        let mut q = queued(&[1, 2, 3, 4, 5, 6]);
        let mut seen = Vec::new();
        // Sends two, then refuses port 3 for good, then sends the rest.
        let done = drain(&mut q, |rest| {
            let first = rest[0].1.port();
            if first == 3 {
                return Err(Errno::EMSGSIZE);
            }
            let n = if first == 1 { 2 } else { rest.len() };
            seen.extend(rest[..n].iter().map(|(_, a)| a.port()));
            Ok(n)
        });
        assert_eq!(seen, [1, 2, 4, 5, 6]);
        assert_eq!(
            done,
            Flushed {
                sent: 5,
                failed: 1,
                calls: 3
            }
        );
        assert!(q.is_empty());
    }

    /// A pending ICMP error costs one more try, not the datagram; a second
    /// one in a row counts it as failed.
    #[test]
    fn an_icmp_error_is_tried_once_more() {
        let mut q = queued(&[1, 2]);
        let mut errors = 1;
        let done = drain(&mut q, |rest| {
            if errors > 0 {
                errors -= 1;
                return Err(Errno::ECONNREFUSED);
            }
            Ok(rest.len())
        });
        assert_eq!(
            done,
            Flushed {
                sent: 2,
                failed: 0,
                calls: 2
            }
        );
        let mut q = queued(&[1, 2]);
        let done = drain(&mut q, |rest| match rest[0].1.port() {
            1 => Err(Errno::ECONNREFUSED),
            _ => Ok(rest.len()),
        });
        assert_eq!(
            done,
            Flushed {
                sent: 1,
                failed: 1,
                calls: 3
            }
        );
    }

    /// Through the kernel: a datagram too large for UDP in the middle of a
    /// batch makes `sendmmsg` stop short; it is counted, and the datagrams
    /// after it arrive, in order, as do those to another destination.
    #[test]
    fn the_kernel_takes_the_rest_after_a_refused_datagram() {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        setsockopt(&sock, sockopt::Ipv4RecvErr, &true).unwrap();
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        for s in [&a, &b] {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        }
        let (to_a, to_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let mut out = Outbox::new();
        out.push(Bytes::from_static(b"a1"), to_a);
        out.push(Bytes::from_static(b"b1"), to_b);
        out.push(Bytes::from(vec![b'x'; 70_000]), to_a);
        out.push(Bytes::from_static(b"a2"), to_a);
        out.push(Bytes::from_static(b"b2"), to_b);
        let done = out.flush(&sock);
        assert_eq!((done.sent, done.failed), (4, 1));
        assert_eq!(done.calls, 3, "two sent, the big one refused, the rest");
        let mut buf = [0u8; 64];
        for (s, want) in [(&a, b"a1"), (&a, b"a2"), (&b, b"b1"), (&b, b"b2")] {
            let n = s.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], want);
        }
        assert_eq!(out.flush(&sock), Flushed::default(), "emptied");
    }

    /// Through the kernel: the port unreachable a dead destination left
    /// pending costs no datagram of the next batch.
    #[test]
    fn a_pending_icmp_error_costs_no_datagram_of_the_batch() {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        setsockopt(&sock, sockopt::Ipv4RecvErr, &true).unwrap();
        let dead = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dead_addr = dead.local_addr().unwrap();
        drop(dead);
        let live = UdpSocket::bind("127.0.0.1:0").unwrap();
        live.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut out = Outbox::new();
        out.push(Bytes::from_static(b"to the dead"), dead_addr);
        assert_eq!(out.flush(&sock).sent, 1);
        std::thread::sleep(Duration::from_millis(50));
        out.push(Bytes::from_static(b"one"), live.local_addr().unwrap());
        out.push(Bytes::from_static(b"two"), live.local_addr().unwrap());
        let done = out.flush(&sock);
        assert_eq!((done.sent, done.failed, done.calls), (2, 0, 2));
        let mut buf = [0u8; 16];
        for want in [&b"one"[..], b"two"] {
            let n = live.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], want);
        }
    }
}
