//! Datagrams a batch at a time on the hot sockets (issue 29).
//!
//! [`Receiver::recv`] is one `recvmmsg` that blocks for the first datagram
//! and then takes, without waiting, whatever else is already queued (up to
//! [`BATCH`]): when the queue is empty that is one system call and one
//! wake-up per datagram, as with `recv_from`; when several commands or
//! answers arrived while the thread was busy, they cost one call together
//! (they cost no wake-up with `recv_from` either). [`Outbox::flush`] sends
//! what a batch produced for one socket with `sendmmsg` (a lone datagram
//! with `send_to`: no vector to set up).
//!
//! Measured against one `recv_from`/`send_to` per datagram (mg-bench
//! `--before`, docs/benchmarks.md): no gain on the benchmark machine, where
//! the cost is the sleep and wake-up per datagram, not the system calls.
//!
//! Safe wrappers only (`nix`), as `#![forbid(unsafe_code)]` requires.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;

use bytes::Bytes;
use nix::sys::socket::{
    recvmmsg, sendmmsg, ControlMessage, MsgFlags, MultiHeaders, SockaddrStorage,
};

/// Most datagrams taken by one receive or given to one send.
pub(crate) const BATCH: usize = 16;
/// Room for one datagram: the largest UDP payload.
const SLOT: usize = 65_536;

/// A hot socket's receive buffers, reused for every batch.
pub(crate) struct Receiver {
    headers: MultiHeaders<SockaddrStorage>,
    /// [`BATCH`] slots of [`SLOT`] bytes, zeroed lazily by the allocator:
    /// only the pages datagrams were written to become resident.
    buf: Vec<u8>,
}

impl Receiver {
    pub(crate) fn new() -> Receiver {
        Receiver {
            headers: MultiHeaders::preallocate(BATCH, None),
            buf: vec![0u8; BATCH * SLOT],
        }
    }

    /// Waits for a datagram, then hands `each` it and every datagram queued
    /// behind it (up to [`BATCH`]), in arrival order, with their senders.
    /// Returns how many were read.
    pub(crate) fn recv(
        &mut self,
        sock: &UdpSocket,
        mut each: impl FnMut(SocketAddr, &[u8]),
    ) -> io::Result<usize> {
        let mut slots = self.buf.chunks_mut(SLOT);
        let mut iovs: [[IoSliceMut<'_>; 1]; BATCH] =
            std::array::from_fn(|_| [IoSliceMut::new(slots.next().unwrap_or_default())]);
        let read = recvmmsg(
            sock.as_raw_fd(),
            &mut self.headers,
            iovs.iter_mut(),
            MsgFlags::MSG_WAITFORONE,
            None,
        )?;
        let mut n = 0;
        for msg in read {
            n += 1;
            let Some(peer) = msg.address.as_ref().and_then(socket_addr) else {
                continue;
            };
            let data = msg.iovs().next().unwrap_or_default();
            each(peer, data.get(..msg.bytes).unwrap_or(data));
        }
        Ok(n)
    }
}

/// Datagrams a batch produced for one socket, sent together.
pub(crate) struct Outbox {
    queue: Vec<(SocketAddr, Bytes)>,
    headers: MultiHeaders<SockaddrStorage>,
    addrs: Vec<Option<SockaddrStorage>>,
}

impl Outbox {
    pub(crate) fn new() -> Outbox {
        Outbox {
            queue: Vec::with_capacity(BATCH),
            headers: MultiHeaders::preallocate(BATCH, None),
            addrs: Vec::with_capacity(BATCH),
        }
    }

    /// Queues `d` for `to`.
    pub(crate) fn push(&mut self, to: SocketAddr, d: Bytes) {
        self.queue.push((to, d));
    }

    /// Drops what is queued.
    pub(crate) fn clear(&mut self) {
        self.queue.clear();
    }

    /// Sends everything queued from `sock` and empties the queue; `failed`
    /// hears of each datagram that could not be sent (the others still go).
    pub(crate) fn flush(
        &mut self,
        sock: &UdpSocket,
        mut failed: impl FnMut(SocketAddr, io::Error),
    ) {
        let mut at = 0;
        while let Some(rest) = self.queue.get(at..).filter(|r| !r.is_empty()) {
            let chunk = &rest[..rest.len().min(BATCH)];
            if let [(to, d)] = chunk {
                if let Err(e) = sock.send_to(d, *to) {
                    failed(*to, e);
                }
                at += 1;
                continue;
            }
            self.addrs.clear();
            self.addrs
                .extend(chunk.iter().map(|(to, _)| Some(SockaddrStorage::from(*to))));
            let slices: Vec<[IoSlice<'_>; 1]> =
                chunk.iter().map(|(_, d)| [IoSlice::new(d)]).collect();
            let no_cmsgs: [ControlMessage<'_>; 0] = [];
            match sendmmsg(
                sock.as_raw_fd(),
                &mut self.headers,
                slices.iter(),
                &self.addrs,
                no_cmsgs,
                MsgFlags::empty(),
            ) {
                // The kernel stops at the first datagram it cannot send and
                // reports how many went; the next call reports that one.
                Ok(sent) => match sent.count() {
                    0 => {
                        failed(chunk[0].0, io::Error::from(io::ErrorKind::WriteZero));
                        at += 1;
                    }
                    n => at += n,
                },
                Err(e) => {
                    failed(chunk[0].0, e.into());
                    at += 1;
                }
            }
        }
        self.queue.clear();
    }
}

/// The address of a datagram's peer, IPv4 or IPv6.
fn socket_addr(a: &SockaddrStorage) -> Option<SocketAddr> {
    a.as_sockaddr_in()
        .map(|v4| SocketAddr::from(SocketAddrV4::from(*v4)))
        .or_else(|| {
            a.as_sockaddr_in6()
                .map(|v6| SocketAddr::from(SocketAddrV6::from(*v6)))
        })
}

#[cfg(test)]
mod tests {
    //! On 127.76.1.0/24 (mg-bench has 127.76.0.0/24).
    use super::*;
    use std::time::Duration;

    fn sock(host: u8) -> UdpSocket {
        let s = UdpSocket::bind(("127.76.1.".to_owned() + &host.to_string() + ":0").as_str())
            .expect("bind");
        s.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        s
    }

    #[test]
    fn one_receive_takes_what_queued_in_order_and_at_most_a_batch() {
        let (rx, a, b) = (sock(1), sock(2), sock(3));
        let to = rx.local_addr().unwrap();
        let n = BATCH + 3;
        for i in 0..n {
            let from = if i % 2 == 0 { &a } else { &b };
            from.send_to(format!("d{i}").as_bytes(), to).unwrap();
        }
        // Loopback delivery is synchronous: all n are queued now.
        let mut r = Receiver::new();
        let mut got = Vec::new();
        let first = r.recv(&rx, |from, d| got.push((from, d.to_vec()))).unwrap();
        assert_eq!(first, BATCH, "a full batch in one call");
        let second = r.recv(&rx, |from, d| got.push((from, d.to_vec()))).unwrap();
        assert_eq!(second, 3, "the rest in the next");
        for (i, (from, d)) in got.iter().enumerate() {
            assert_eq!(d, format!("d{i}").as_bytes());
            let sender = if i % 2 == 0 { &a } else { &b };
            assert_eq!(*from, sender.local_addr().unwrap(), "datagram {i}");
        }
        // An empty datagram (the stop wake-up) is read as empty.
        a.send_to(&[], to).unwrap();
        let mut empty = None;
        assert_eq!(r.recv(&rx, |_, d| empty = Some(d.len())).unwrap(), 1);
        assert_eq!(empty, Some(0));
    }

    #[test]
    fn a_flush_delivers_every_datagram_to_its_own_destination() {
        let (tx, a, b) = (sock(4), sock(5), sock(6));
        let mut out = Outbox::new();
        let n = 2 * BATCH + 1;
        for i in 0..n {
            let to = if i % 3 == 0 { &a } else { &b };
            out.push(to.local_addr().unwrap(), Bytes::from(format!("m{i}")));
        }
        let mut failures = 0;
        out.flush(&tx, |_, _| failures += 1);
        assert_eq!(failures, 0);
        let mut buf = [0u8; 64];
        for i in 0..n {
            let to = if i % 3 == 0 { &a } else { &b };
            let (len, from) = to.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..len], format!("m{i}").as_bytes());
            assert_eq!(from, tx.local_addr().unwrap());
        }
        // Emptied: a second flush sends nothing.
        out.flush(&tx, |_, _| failures += 1);
        a.set_nonblocking(true).unwrap();
        assert!(a.recv_from(&mut buf).is_err(), "nothing more for a");
    }

    #[test]
    fn a_datagram_that_cannot_go_is_reported_and_the_others_still_go() {
        let (tx, a) = (sock(7), sock(8));
        let mut out = Outbox::new();
        let good = a.local_addr().unwrap();
        // Too large for UDP: the kernel refuses this one alone.
        let bad = Bytes::from(vec![0u8; 70_000]);
        out.push(good, Bytes::from_static(b"one"));
        out.push(good, bad);
        out.push(good, Bytes::from_static(b"two"));
        let mut failed = Vec::new();
        out.flush(&tx, |to, _| failed.push(to));
        assert_eq!(failed, vec![good]);
        let mut buf = [0u8; 64];
        for want in [&b"one"[..], b"two"] {
            let (len, _) = a.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..len], want);
        }
    }
}
