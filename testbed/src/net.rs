//! Ports and listening checks on loopback.
//!
//! SIPp and Kamailio give no readiness signal on UDP, so "ready" means "the
//! kernel shows a socket bound to the address", read from `/proc/net/*`.

use std::{
    fmt, fs,
    net::{IpAddr, SocketAddr, TcpListener, UdpSocket},
    thread,
    time::{Duration, Instant},
};

use crate::{Error, Result};

/// SIP transport of a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Transport {
    /// UDP (SIPp `-t u1`).
    #[default]
    Udp,
    /// TCP (SIPp `-t t1`).
    Tcp,
}

impl Transport {
    /// The lowercase name used in SIP URIs and Kamailio listen specs.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
        }
    }

    /// SIPp's `-t` value: one socket for all calls.
    pub fn sipp_mode(self) -> &'static str {
        match self {
            Transport::Udp => "u1",
            Transport::Tcp => "t1",
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A port on `ip` that is free for both UDP and TCP right now.
///
/// The port is released before returning, so another process may take it;
/// on loopback with per-test addresses that race is negligible.
pub fn free_port(ip: IpAddr) -> Result<u16> {
    let mut last = None;
    for _ in 0..64 {
        let udp = match UdpSocket::bind((ip, 0)) {
            Ok(s) => s,
            Err(e) => {
                last = Some(e);
                continue;
            }
        };
        let port = udp.local_addr()?.port();
        match TcpListener::bind((ip, port)) {
            Ok(_tcp) => return Ok(port),
            Err(e) => last = Some(e),
        }
    }
    Err(Error::NoFreePort {
        ip,
        source: last.unwrap_or_else(|| std::io::Error::other("no port")),
    })
}

/// Whether a socket is bound to `addr` (UDP) or listening on it (TCP),
/// including a wildcard bind on the same port.
pub fn is_listening(addr: SocketAddr, transport: Transport) -> bool {
    let (v4, v6) = match transport {
        Transport::Udp => ("/proc/net/udp", "/proc/net/udp6"),
        Transport::Tcp => ("/proc/net/tcp", "/proc/net/tcp6"),
    };
    [v4, v6].iter().any(|path| {
        fs::read_to_string(path)
            .map(|table| table_has(&table, addr, transport))
            .unwrap_or(false)
    })
}

/// Polls [`is_listening`] until it is true or `timeout` passes.
pub fn wait_listening(addr: SocketAddr, transport: Transport, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if is_listening(addr, transport) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

// === /proc/net parsing ===

const TCP_LISTEN: &str = "0A";

fn table_has(table: &str, addr: SocketAddr, transport: Transport) -> bool {
    table.lines().skip(1).any(|line| {
        let mut cols = line.split_whitespace();
        let (Some(local), Some(_remote), Some(state)) = (cols.nth(1), cols.next(), cols.next())
        else {
            return false;
        };
        if transport == Transport::Tcp && state != TCP_LISTEN {
            return false;
        }
        match parse_hex_addr(local) {
            Some((ip, port)) => port == addr.port() && (ip == addr.ip() || ip.is_unspecified()),
            None => false,
        }
    })
}

/// A reading of the UDP datagrams the kernel dropped because a socket's
/// receive queue was full, in this network namespace: per local address of
/// the sockets open now (`/proc/net/udp` and `udp6`, column `drops`;
/// sockets sharing an address are summed) and in all since the namespace
/// was created (`Udp: RcvbufErrors` in `/proc/net/snmp`, which keeps the
/// drops of sockets already closed). Two readings around a run say which
/// side lost datagrams.
#[derive(Debug, Clone, Default)]
pub struct UdpDrops {
    sockets: Vec<(SocketAddr, u64)>,
    total: Option<u64>,
}

impl UdpDrops {
    /// Reads the counters now; what cannot be read counts as none.
    pub fn read() -> UdpDrops {
        UdpDrops {
            sockets: socket_drops(),
            total: rcvbuf_errors(),
        }
    }

    /// Drops at the sockets bound to `addr` since `earlier`.
    pub fn at_since(&self, earlier: &UdpDrops, addr: SocketAddr) -> u64 {
        let at = |t: &UdpDrops| {
            t.sockets
                .iter()
                .find(|(a, _)| *a == addr)
                .map_or(0, |(_, n)| *n)
        };
        at(self).saturating_sub(at(earlier))
    }

    /// Drops anywhere in the namespace since `earlier`, closed sockets
    /// included.
    pub fn total_since(&self, earlier: &UdpDrops) -> u64 {
        match (earlier.total, self.total) {
            (Some(e), Some(n)) => n.saturating_sub(e),
            _ => 0,
        }
    }
}

fn socket_drops() -> Vec<(SocketAddr, u64)> {
    let mut out: Vec<(SocketAddr, u64)> = Vec::new();
    for path in ["/proc/net/udp", "/proc/net/udp6"] {
        let Ok(table) = fs::read_to_string(path) else {
            continue;
        };
        for line in table.lines().skip(1) {
            let mut cols = line.split_whitespace();
            let local = cols.nth(1).and_then(parse_hex_addr);
            let drops = cols.last().and_then(|c| c.parse::<u64>().ok());
            let (Some((ip, port)), Some(drops)) = (local, drops) else {
                continue;
            };
            let addr = SocketAddr::new(ip, port);
            match out.iter_mut().find(|(a, _)| *a == addr) {
                Some((_, n)) => *n = n.saturating_add(drops),
                None => out.push((addr, drops)),
            }
        }
    }
    out
}

fn rcvbuf_errors() -> Option<u64> {
    let snmp = fs::read_to_string("/proc/net/snmp").ok()?;
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (udp.next()?, udp.next()?);
    let i = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(i)?.parse().ok()
}

/// `0100007F:13C4` (IPv4) or the 32-digit IPv6 form; the address words are
/// in host byte order (little-endian here), the port is big-endian hex.
fn parse_hex_addr(s: &str) -> Option<(IpAddr, u16)> {
    let (ip_hex, port_hex) = s.split_once(':')?;
    let port = u16::from_str_radix(port_hex, 16).ok()?;
    let ip = match ip_hex.len() {
        8 => {
            let word = u32::from_str_radix(ip_hex, 16).ok()?;
            IpAddr::from(word.to_le_bytes())
        }
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_mut(4).enumerate() {
                let word = u32::from_str_radix(&ip_hex[i * 8..i * 8 + 8], 16).ok()?;
                chunk.copy_from_slice(&word.to_le_bytes());
            }
            let v6 = std::net::Ipv6Addr::from(bytes);
            // A v4-mapped bind serves the v4 address too.
            v6.to_ipv4_mapped()
                .map(IpAddr::V4)
                .unwrap_or(IpAddr::V6(v6))
        }
        _ => return None,
    };
    Some((ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `f` returns once it is `Some`; fails with `what` after 2 s.
    fn within_2s<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            if let Some(t) = f() {
                return t;
            }
            assert!(Instant::now() < deadline, "{what}");
            thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn parses_proc_net_addresses() {
        assert_eq!(
            parse_hex_addr("0100007F:13C4"),
            Some(("127.0.0.1".parse().unwrap(), 5060))
        );
        assert_eq!(
            parse_hex_addr("00000000000000000000000001000000:0016"),
            Some(("::1".parse().unwrap(), 22))
        );
        assert_eq!(parse_hex_addr("zz"), None);
    }

    #[test]
    fn sees_a_bound_udp_socket_and_a_tcp_listener() {
        let ip: IpAddr = "127.0.250.1".parse().unwrap();
        let udp = UdpSocket::bind((ip, 0)).unwrap();
        assert!(is_listening(udp.local_addr().unwrap(), Transport::Udp));
        let tcp = TcpListener::bind((ip, 0)).unwrap();
        let addr = tcp.local_addr().unwrap();
        assert!(is_listening(addr, Transport::Tcp));
        drop(tcp);
        // Eventually gone, not "never seen": a process that another test
        // forks at this moment holds a copy of the socket until its exec.
        within_2s(&format!("{addr} still listening"), || {
            (!is_listening(addr, Transport::Tcp)).then_some(())
        });
    }

    #[test]
    fn counts_the_datagrams_a_full_receive_queue_dropped() {
        let ip: IpAddr = "127.0.250.2".parse().unwrap();
        let rx = UdpSocket::bind((ip, 0)).unwrap();
        let tx = UdpSocket::bind((ip, 0)).unwrap();
        let (addr, sender) = (rx.local_addr().unwrap(), tx.local_addr().unwrap());
        let before = UdpDrops::read();
        // 4 MB unread, far past the default queue of ~200 kB: loopback
        // delivers each send at once, so the overflow is certain.
        for _ in 0..4000 {
            tx.send_to(&[0u8; 1000], addr).unwrap();
        }
        let after = UdpDrops::read();
        let drops = after.at_since(&before, addr);
        assert!(drops > 0 && drops < 4000, "{drops}");
        // The sender's socket received nothing, so dropped nothing.
        assert_eq!(after.at_since(&before, sender), 0);
        // Other tests may add their own; never fewer than this socket's.
        assert!(after.total_since(&before) >= drops, "{after:?}");
        // Once closed, the socket's drops are only in the total. Eventually,
        // as above: a process another test forks at this moment holds a copy
        // of the socket until its exec (CI once read it 3908 here).
        drop(rx);
        let closed = within_2s(&format!("{addr} still open"), || {
            let now = UdpDrops::read();
            (now.at_since(&before, addr) == 0).then_some(now)
        });
        assert!(closed.total_since(&before) >= drops);
    }

    #[test]
    fn free_port_is_bindable() {
        // An address no other test of this binary binds: on 127.0.0.1 a
        // test running alongside can take the port between the two calls.
        // Even there a concurrent wildcard bind (another test's client
        // socket on 0.0.0.0:0) may be handed the port just released, as the
        // doc of `free_port` says: one of a few ports must bind both ways.
        let ip: IpAddr = "127.0.0.253".parse().unwrap();
        let bound = (0..5).any(|_| {
            let port = free_port(ip).unwrap();
            UdpSocket::bind((ip, port)).is_ok() && TcpListener::bind((ip, port)).is_ok()
        });
        assert!(bound, "no port from free_port was bindable");
    }
}
