//! UDP: sockets bound one per worker (`SO_REUSEPORT`) and the worker
//! threads that receive, handle and send on them, with the ICMP errors the
//! kernel queues for what they sent. Each socket's receive queue is its
//! worker's intake (R-OV-1): the kernel stamps every datagram as it queues
//! it and reports the datagrams it dropped, so the worker knows when it is
//! behind ([`crate::overload::IntakeMeter`]). Workers read their queue a
//! batch at a time (`batch.rs`) and serve in-dialog traffic first.

use std::io;
use std::io::IoSliceMut;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use nix::sys::socket::{recvmsg, setsockopt, sockopt, MsgFlags, SockaddrStorage};
use ringsync::capture::Fields;
use tokio_util::sync::CancellationToken;

use super::batch::{socket_addr, BatchReceiver, Datagram, Sender};
use super::{Net, UDP_POLL};
use crate::message::SipMessage;
use crate::metrics as m;
use crate::overload::{self, BatchSizes, IntakeMeter, IntakeWaits, MAX_BATCH};
use crate::txn::Inbound;

/// The automatic worker count's ceiling unless `[overload]
/// udp_workers_max` says (`workers.rs`): as many as the cores this process
/// may run on (`available_parallelism`: CPU affinity and cgroup quota
/// count), at most 8, and 2 when that cannot be read; so a load one core
/// cannot carry can use every core, while each peer's messages stay on one
/// worker (in order).
pub(super) fn udp_workers() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 8)
}

/// Binds a worker's socket; `rcvbuf`: its intake bound in bytes (and the
/// size asked for its send buffer).
pub(super) fn bind_udp(addr: SocketAddr, rcvbuf: usize) -> io::Result<UdpSocket> {
    let domain = if addr.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    let s = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    s.set_reuse_port(true)?;
    // Best effort, each capped by the kernel: the receive queue at
    // net.core.rmem_max, the send buffer at net.core.wmem_max. The send
    // buffer is asked for the same size because the worker sends with a
    // blocking `sendto` on its own thread: a burst of what it forwards then
    // waits in the kernel instead of stalling its receives.
    let _ = s.set_recv_buffer_size(rcvbuf);
    let _ = s.set_send_buffer_size(rcvbuf);
    receive_buffer(&s, addr, rcvbuf);
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

/// Makes sure of the receive queue's size: past `net.core.rmem_max`,
/// `SO_RCVBUFFORCE` (root or `CAP_NET_ADMIN`; else quietly the capped
/// size); logs the size obtained. The queue holds what arrives while
/// nobody reads, as during an upgrade's pause (R-GW-3).
fn receive_buffer(s: &socket2::Socket, addr: SocketAddr, asked: usize) {
    // Linux reports twice what was set (its bookkeeping share).
    let got = |s: &socket2::Socket| s.recv_buffer_size().map_or(0, |n| n / 2);
    let mut obtained = got(s);
    if obtained < asked {
        let want = asked.min(i32::MAX as usize);
        if setsockopt(s, sockopt::RcvBufForce, &want).is_ok() {
            obtained = got(s);
        }
    }
    if obtained < asked {
        tracing::warn!(%addr, asked, obtained, "udp receive queue smaller than [overload] udp_rcvbuf_bytes (capped at net.core.rmem_max; raise it, or run with CAP_NET_ADMIN)");
    } else {
        tracing::info!(%addr, bytes = obtained, "udp receive queue");
    }
}

pub(super) fn udp_worker(
    net: Arc<Net>,
    listener: usize,
    sock: Arc<UdpSocket>,
    shutdown: CancellationToken,
) {
    let mut rx = BatchReceiver::new();
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut later = Vec::with_capacity(MAX_BATCH);
    let mut meter = IntakeMeter::new(net.core.overload_deadline());
    let sizes = BatchSizes::new();
    let waits = IntakeWaits::new();
    let reading_since = SystemTime::now();
    while !shutdown.is_cancelled() && !net.pause.is_paused() {
        match rx.recv(&sock, &mut meter, &mut batch) {
            Ok(()) => {}
            // Nothing queued: wait for a datagram, or for a hand-over's
            // pause, which must not wait for a receive timeout (R-GW-3).
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                net.pause.wait_readable(&sock, UDP_POLL);
                continue;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
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
        }
        if batch.is_empty() {
            continue;
        }
        sizes.record(batch.len());
        let intake = (&meter, &waits, reading_since);
        serve_batch(&net, listener, intake, &mut batch, &mut later);
    }
}

/// Handles a batch (R-OV-1): responses and in-dialog requests as they
/// come, new dialogs (and what follows them in their call) after them
/// (`later`), REGISTERs last, each judged against the deadline when its
/// turn comes. A batch of one is handled as it comes.
fn serve_batch(
    net: &Arc<Net>,
    listener: usize,
    intake: (&IntakeMeter, &IntakeWaits, SystemTime),
    batch: &mut Vec<Datagram>,
    later: &mut Vec<(Sender, SipMessage, Option<Fields>)>,
) {
    let alone = batch.len() == 1;
    let capture = net.core.capture();
    let local = net.udp_local.get(listener).copied().flatten();
    for Datagram { data, from } in batch.drain(..) {
        if data.iter().all(|&b| b == b'\r' || b == b'\n' || b == 0) {
            continue; // keep-alive datagram (RFC 5626 4.4.1 style) or empty
        }
        // Every message as received, parsed or not, at the time the kernel
        // queued it: with the Call-ID and method the scan read (a message
        // that does not scan is kept to be copied without them).
        let copy = match (capture.is_on(), local) {
            (true, Some(local)) => {
                let at = from.queued.map_or_else(SystemTime::now, |d| UNIX_EPOCH + d);
                Some((local, at, data.clone()))
            }
            _ => None,
        };
        let scanned = SipMessage::scan(data);
        // Read once: for this copy and those of what is sent for it.
        let mut fields = None;
        if let Some((local, at, raw)) = copy {
            fields = scanned.as_ref().ok().map(capture_fields);
            let copy = (&raw, fields.clone());
            capture.sip_received_at(listener, (from.peer, local), copy, at);
        }
        let Ok(msg) = scanned else {
            m::dropped("unparseable");
            continue;
        };
        if alone || overload::first(&msg, later.iter().map(|(_, m, _)| m)) {
            serve(net, listener, intake, from, (msg, fields));
        } else {
            later.push((from, msg, fields));
        }
    }
    // New dialogs, then REGISTERs (R-OV-1 for REGISTER): both refused
    // past the deadline, so in an avalanche the REGISTERs are what waits.
    let mut registers = Vec::new();
    for (from, msg, fields) in later.drain(..) {
        if overload::before_registers(&msg, registers.iter().map(|(_, m, _)| m)) {
            serve(net, listener, intake, from, (msg, fields));
        } else {
            registers.push((from, msg, fields));
        }
    }
    for (from, msg, fields) in registers {
        serve(net, listener, intake, from, (msg, fields));
    }
}

fn serve(
    net: &Arc<Net>,
    listener: usize,
    (meter, waits, since): (&IntakeMeter, &IntakeWaits, SystemTime),
    from: Sender,
    (msg, fields): (SipMessage, Option<Fields>),
) {
    let now = Instant::now();
    // What waited before this worker read its socket waited for no load
    // of its own: the start of a run that took over (R-GW-3: the pause of
    // the hand-over), not a backlog of this one.
    let reading = since.elapsed().unwrap_or_default();
    let waited = from.waited().map(|w| w.min(reading));
    let behind = meter.behind(waited, now);
    waits.record(overload::class_of(&msg), waited);
    let inbound = Inbound::Udp {
        listener,
        peer: from.peer,
    };
    // What it sends for this message is copied with its Call-ID and
    // method (read when it was received, while capture is on).
    let action = net.core.handle_scanned(inbound, msg, now, behind);
    net.execute_for(action, fields);
}

/// The Call-ID and method (a response's CSeq method) of a message the
/// gate scanned, for its capture copies: slices of its bytes, or a known
/// method's name.
fn capture_fields(msg: &SipMessage) -> Fields {
    let raw = msg.raw();
    let method = if msg.is_request() {
        match msg.method().and_then(|m| m.as_str()) {
            Some(known) => Some(Bytes::from_static(known.as_bytes())),
            None => Some(sub(raw, msg.method_bytes())),
        }
    } else {
        msg.cseq_method_bytes().map(|m| sub(raw, m))
    };
    Fields {
        call_id: msg.call_id().map(|c| sub(raw, c)),
        method,
    }
}

/// `part` of `raw` as a slice of it (no copy); a copy should the parser
/// ever hand back bytes from elsewhere (`Bytes::slice_ref` would panic).
fn sub(raw: &Bytes, part: &[u8]) -> Bytes {
    let start = (part.as_ptr() as usize).wrapping_sub(raw.as_ptr() as usize);
    match raw.get(start..start.wrapping_add(part.len())) {
        Some(s) if s.as_ptr() == part.as_ptr() => raw.slice(start..start + part.len()),
        _ => Bytes::copy_from_slice(part),
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
        let dest = msg.address.as_ref().and_then(socket_addr);
        if let Some(dest) = dest {
            net.core.unreachable(dest, Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A receive queue asked past `net.core.rmem_max` is forced to the
    /// size asked when the process may (root here), else capped there.
    #[test]
    fn r_gw_3_the_receive_queue_is_forced_past_rmem_max() {
        let max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(212_992);
        let asked = max * 2;
        let s = bind_udp("127.0.0.1:0".parse().unwrap(), asked).unwrap();
        let obtained = socket2::SockRef::from(&s).recv_buffer_size().unwrap() / 2;
        if rustix::process::geteuid().is_root() {
            assert!(obtained >= asked, "{obtained} < {asked}");
        } else {
            assert!(obtained >= max.min(asked), "{obtained} < {max}");
        }
    }
}
