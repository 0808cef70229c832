//! UDP: sockets bound one per worker (`SO_REUSEPORT`) and the worker
//! threads that receive, handle and send on them, with the ICMP errors the
//! kernel queues for what they sent. Each socket's receive queue is its
//! worker's intake (R-OV-1): the kernel stamps every datagram as it queues
//! it and reports the datagrams it dropped, so the worker knows when it is
//! behind ([`crate::overload::IntakeMeter`]).

use std::io;
use std::io::IoSliceMut;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use nix::sys::socket::{
    recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, SockaddrStorage,
};
use nix::sys::time::TimeSpec;
use tokio_util::sync::CancellationToken;

use super::{Net, MAX_MESSAGE, UDP_POLL};
use crate::overload::IntakeMeter;
use crate::txn::Inbound;

/// UDP workers per listener: one per core, so a burst from many peers uses
/// every core, while each peer's messages stay on one worker (in order).
pub(super) fn udp_workers() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 8)
}

/// Binds a worker's socket; `rcvbuf`: its intake bound in bytes.
pub(super) fn bind_udp(addr: SocketAddr, rcvbuf: usize) -> io::Result<UdpSocket> {
    let domain = if addr.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    let s = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    s.set_reuse_port(true)?;
    // Best effort: the kernel caps it at net.core.rmem_max.
    let _ = s.set_recv_buffer_size(rcvbuf);
    let _ = s.set_send_buffer_size(rcvbuf);
    // The intake's fill (R-OV-1): a receive timestamp on every datagram and
    // the count of those the full queue dropped. Best effort: without them
    // only the gate's capacity and the per-source limits apply.
    let stamps = setsockopt(&s, sockopt::ReceiveTimestampns, &true)
        .and_then(|()| setsockopt(&s, sockopt::RxqOvfl, &1));
    if let Err(e) = stamps {
        tracing::debug!(error = %e, "no receive timestamps: the intake deadline is off");
    }
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
    let mut cmsg = nix::cmsg_space!(TimeSpec, u32);
    let mut meter = IntakeMeter::new(net.core.overload_deadline());
    while !shutdown.is_cancelled() {
        let Received {
            len: n,
            peer,
            waited,
            drops,
        } = match recv(&sock, &mut buf, &mut cmsg) {
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
        let now = Instant::now();
        let behind = meter.behind(waited, drops, now);
        let action = net.core.handle_intake(
            Inbound::Udp { listener, peer },
            Bytes::copy_from_slice(datagram),
            now,
            behind,
        );
        net.execute(action);
    }
}

/// One datagram read: its length, sender, how long it waited in the queue
/// and the kernel's count of dropped datagrams, when the kernel said.
struct Received {
    len: usize,
    peer: SocketAddr,
    waited: Option<Duration>,
    drops: Option<u32>,
}

/// `recvfrom` with the control messages of [`bind_udp`]; `cmsg` is reused.
fn recv(sock: &UdpSocket, buf: &mut [u8], cmsg: &mut [u8]) -> io::Result<Received> {
    let mut iov = [IoSliceMut::new(buf)];
    let msg =
        recvmsg::<SockaddrStorage>(sock.as_raw_fd(), &mut iov, Some(cmsg), MsgFlags::empty())?;
    let peer = msg
        .address
        .as_ref()
        .and_then(socket_addr)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "datagram without sender"))?;
    let (mut waited, mut drops) = (None, None);
    for c in msg.cmsgs().into_iter().flatten() {
        match c {
            ControlMessageOwned::ScmTimestampns(ts) => {
                let queued = Duration::from(ts);
                waited = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .ok()
                    .map(|now| now.saturating_sub(queued));
            }
            ControlMessageOwned::RxqOvfl(n) => drops = Some(n),
            _ => {}
        }
    }
    Ok(Received {
        len: msg.bytes,
        peer,
        waited,
        drops,
    })
}

fn socket_addr(a: &SockaddrStorage) -> Option<SocketAddr> {
    a.as_sockaddr_in()
        .map(|v4| SocketAddr::from(std::net::SocketAddrV4::from(*v4)))
        .or_else(|| {
            a.as_sockaddr_in6()
                .map(|v6| SocketAddr::from(std::net::SocketAddrV6::from(*v6)))
        })
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
        let dest = msg.address.as_ref().and_then(socket_addr);
        if let Some(dest) = dest {
            net.core.unreachable(dest, Instant::now());
        }
    }
}
