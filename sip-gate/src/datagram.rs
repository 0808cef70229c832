//! Sending one UDP datagram from a forwarding socket.
//!
//! The gate's UDP sockets are unconnected and ask for ICMP errors
//! (`IP_RECVERR`). Linux reports such an error (a port unreachable from an
//! instance that died) as the socket's pending error, and the next send on
//! that socket returns it and sends nothing, whatever that send's own
//! destination. Left alone, one dead instance would cost a datagram to a
//! live one: a forwarded request or response, or a health probe that then
//! counts as unanswered and can mark a live instance down. Returning the
//! error clears it, so one more try sends the datagram.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use nix::errno::Errno;
use nix::sys::socket::{sendto, MsgFlags, SockaddrStorage};

/// Sends `bytes` to `to`, trying once more when the first try returned an
/// ICMP error left pending by an earlier datagram.
pub(crate) fn send(
    sock: &UdpSocket,
    bytes: &[u8],
    to: SocketAddr,
    flags: MsgFlags,
) -> nix::Result<usize> {
    let addr = SockaddrStorage::from(to);
    match sendto(sock.as_raw_fd(), bytes, &addr, flags) {
        // An unconnected socket learns of these only from ICMP, later than
        // any send: on a send they belong to an earlier datagram.
        Err(Errno::ECONNREFUSED | Errno::EHOSTUNREACH | Errno::ENETUNREACH | Errno::EHOSTDOWN) => {
            sendto(sock.as_raw_fd(), bytes, &addr, flags)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{setsockopt, sockopt};
    use std::time::Duration;

    /// A port unreachable from one destination does not cost the next
    /// datagram to another (the health probe of a live instance).
    #[test]
    fn a_pending_icmp_error_does_not_cost_the_next_datagram() {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        setsockopt(&sock, sockopt::Ipv4RecvErr, &true).unwrap();
        let closed = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dead = closed.local_addr().unwrap();
        drop(closed);
        let live = UdpSocket::bind("127.0.0.1:0").unwrap();
        live.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        // The port unreachable for `dead` is back before the next send on
        // loopback; the plain second send shows it is pending.
        send(&sock, b"to the dead", dead, MsgFlags::empty()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let raw = sendto(
            sock.as_raw_fd(),
            b"x",
            &SockaddrStorage::from(dead),
            MsgFlags::empty(),
        );
        assert_eq!(
            raw,
            Err(Errno::ECONNREFUSED),
            "the error is reported by a send"
        );
        send(&sock, b"to the dead", dead, MsgFlags::empty()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        send(
            &sock,
            b"to the living",
            live.local_addr().unwrap(),
            MsgFlags::empty(),
        )
        .unwrap();
        let mut buf = [0u8; 32];
        let (n, _) = live.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"to the living");
    }
}
