//! UDP: sockets bound one per worker (`SO_REUSEPORT`) and the worker
//! threads that receive, handle and send on them, with the ICMP errors the
//! kernel queues for what they sent.

use std::io;
use std::io::IoSliceMut;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use nix::sys::socket::{recvmsg, setsockopt, sockopt, MsgFlags, SockaddrStorage};
use tokio_util::sync::CancellationToken;

use super::{Net, MAX_MESSAGE, UDP_POLL, UDP_RCVBUF};
use crate::txn::Inbound;

/// UDP workers per listener: one per core, so a burst from many peers uses
/// every core, while each peer's messages stay on one worker (in order).
pub(super) fn udp_workers() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 8)
}

pub(super) fn bind_udp(addr: SocketAddr) -> io::Result<UdpSocket> {
    let domain = if addr.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    let s = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    s.set_reuse_port(true)?;
    // Best effort: the kernel caps it at net.core.rmem_max.
    let _ = s.set_recv_buffer_size(UDP_RCVBUF);
    let _ = s.set_send_buffer_size(UDP_RCVBUF);
    // ICMP errors for what this socket sends (a target's port closed) are
    // queued for the worker to read (see `icmp_errors`); best effort.
    let recverr = if addr.is_ipv4() {
        setsockopt(&s, sockopt::Ipv4RecvErr, &true)
    } else {
        setsockopt(&s, sockopt::Ipv6RecvErr, &true)
    };
    if let Err(e) = recverr {
        tracing::debug!(error = %e, "no IP_RECVERR: ICMP errors are not seen");
    }
    s.bind(&addr.into())?;
    let s: UdpSocket = s.into();
    s.set_read_timeout(Some(UDP_POLL))?;
    Ok(s)
}

pub(super) fn udp_worker(
    net: Arc<Net>,
    listener: usize,
    sock: Arc<UdpSocket>,
    shutdown: CancellationToken,
) {
    // One receive buffer per worker, reused; each datagram is then copied
    // once into a right-sized `Bytes` (a SIP datagram is ~0.5-2 KB, so the
    // copy is cheaper than zeroing or re-allocating a 64 KB buffer).
    let mut buf = vec![0u8; MAX_MESSAGE];
    while !shutdown.is_cancelled() {
        let (n, peer) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => {
                // An ICMP error for an earlier send (IP_RECVERR); not fatal.
                tracing::debug!(error = %e, "udp recv error");
                icmp_errors(&net, &sock);
                continue;
            }
        };
        let Some(datagram) = buf.get(..n) else {
            continue;
        };
        if datagram.iter().all(|&b| b == b'\r' || b == b'\n' || b == 0) {
            continue; // keep-alive datagram (RFC 5626 4.4.1 style) or empty
        }
        let action = net.core.handle(
            Inbound::Udp { listener, peer },
            Bytes::copy_from_slice(datagram),
            Instant::now(),
        );
        net.execute(action);
    }
}

/// Reads the socket's error queue: each entry is an ICMP error for a
/// datagram this socket sent, with that datagram's destination, which the
/// core passes over (RFC 3263 failover of DNS targets).
fn icmp_errors(net: &Net, sock: &UdpSocket) {
    let mut buf = [0u8; 1024];
    for _ in 0..64 {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let flags = MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT;
        let Ok(msg) = recvmsg::<SockaddrStorage>(sock.as_raw_fd(), &mut iov, None, flags) else {
            return;
        };
        let dest = msg.address.as_ref().and_then(|a| {
            a.as_sockaddr_in()
                .map(|v4| SocketAddr::from(std::net::SocketAddrV4::from(*v4)))
                .or_else(|| {
                    a.as_sockaddr_in6()
                        .map(|v6| SocketAddr::from(std::net::SocketAddrV6::from(*v6)))
                })
        });
        if let Some(dest) = dest {
            net.core.unreachable(dest, Instant::now());
        }
    }
}
