//! A blind UDP relay: the floor any SIP proxy is compared against. One
//! `recv` and one `send` per datagram, nothing rewritten. With several
//! upstreams it reads one header, the Call-ID, so that every datagram of a
//! call goes to the same upstream: a proxy spreading calls over the same
//! servers is then compared with a floor that carries the same traffic
//! between the same processes.

use std::{
    io,
    net::{SocketAddr, UdpSocket},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    thread::{self, JoinHandle},
    time::Duration,
};

use crate::Result;

const MAX_DATAGRAM: usize = 65_535;
// Wake-up period of the forwarding threads to notice a stop request.
const POLL: Duration = Duration::from_millis(100);

/// Relays datagrams from clients to the upstreams (a call's datagrams to
/// one of them, chosen by its Call-ID) and the upstreams' datagrams back to
/// the last client heard from. Stops on drop.
#[derive(Debug)]
pub struct BlindRelay {
    listen: SocketAddr,
    upstream_local: SocketAddr,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    last_client: Mutex<Option<SocketAddr>>,
    to_upstream: AtomicU64,
    to_client: AtomicU64,
}

/// Datagram counters of a [`BlindRelay`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelayCounts {
    /// Datagrams sent to an upstream.
    pub to_upstream: u64,
    /// Datagrams sent back to a client.
    pub to_client: u64,
}

impl BlindRelay {
    /// Binds `listen` for clients and an ephemeral port on the same address
    /// towards `upstreams`, and starts one thread per direction. Fails
    /// without an upstream.
    pub fn start(listen: SocketAddr, upstreams: &[SocketAddr]) -> Result<Self> {
        if upstreams.is_empty() {
            return Err(
                io::Error::new(io::ErrorKind::InvalidInput, "no upstream to relay to").into(),
            );
        }
        let upstreams: Arc<[SocketAddr]> = upstreams.into();
        let client_side = UdpSocket::bind(listen)?;
        let upstream_side = UdpSocket::bind(SocketAddr::new(listen.ip(), 0))?;
        client_side.set_read_timeout(Some(POLL))?;
        upstream_side.set_read_timeout(Some(POLL))?;
        let listen = client_side.local_addr()?;
        let upstream_local = upstream_side.local_addr()?;
        let shared = Arc::new(Shared::default());

        let up = {
            let (rx, tx, shared, upstreams) = (
                client_side.try_clone()?,
                upstream_side.try_clone()?,
                shared.clone(),
                upstreams.clone(),
            );
            thread::Builder::new()
                .name("relay-up".into())
                .spawn(move || forward_up(rx, tx, &upstreams, &shared))?
        };
        let down = {
            let shared2 = shared.clone();
            thread::Builder::new()
                .name("relay-down".into())
                .spawn(move || forward_down(upstream_side, client_side, &upstreams, &shared2))?
        };
        Ok(Self {
            listen,
            upstream_local,
            shared,
            threads: vec![up, down],
        })
    }

    /// The client-facing address.
    pub fn local_addr(&self) -> SocketAddr {
        self.listen
    }

    /// The address the upstreams see datagrams come from.
    pub fn upstream_local_addr(&self) -> SocketAddr {
        self.upstream_local
    }

    /// Datagrams relayed so far.
    pub fn counts(&self) -> RelayCounts {
        RelayCounts {
            to_upstream: self.shared.to_upstream.load(Ordering::Relaxed),
            to_client: self.shared.to_client.load(Ordering::Relaxed),
        }
    }

    /// Stops both threads and waits for them.
    pub fn stop(mut self) -> RelayCounts {
        self.shutdown();
        self.counts()
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for BlindRelay {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn forward_up(rx: UdpSocket, tx: UdpSocket, upstreams: &[SocketAddr], shared: &Shared) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    while !shared.stop.load(Ordering::Relaxed) {
        match rx.recv_from(&mut buf) {
            Ok((n, from)) => {
                {
                    let mut last = shared.last_client.lock().unwrap_or_else(|e| e.into_inner());
                    if *last != Some(from) {
                        *last = Some(from);
                    }
                }
                let Some(upstream) = upstream_of(&buf[..n], upstreams) else {
                    continue;
                };
                if tx.send_to(&buf[..n], upstream).is_ok() {
                    shared.to_upstream.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(e) if is_timeout(&e) => {}
            // ICMP errors from a previous send surface here on Linux; the
            // relay is blind, so it just keeps going.
            Err(_) => {}
        }
    }
}

fn forward_down(rx: UdpSocket, tx: UdpSocket, upstreams: &[SocketAddr], shared: &Shared) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    while !shared.stop.load(Ordering::Relaxed) {
        match rx.recv_from(&mut buf) {
            Ok((n, from)) if upstreams.contains(&from) => {
                let client = *shared.last_client.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(client) = client {
                    if tx.send_to(&buf[..n], client).is_ok() {
                        shared.to_client.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Ok(_) => {} // not from an upstream: not ours to relay
            Err(e) if is_timeout(&e) => {}
            Err(_) => {}
        }
    }
}

/// The upstream for a datagram: the only one, or the one its Call-ID
/// hashes to (the first for a datagram without one); `None` without any.
fn upstream_of(datagram: &[u8], upstreams: &[SocketAddr]) -> Option<SocketAddr> {
    let i = match upstreams.len() {
        0 | 1 => 0,
        n => call_id(datagram).map_or(0, |id| {
            // FNV-1a: the spread only has to be even, not unpredictable.
            let h = id.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
            usize::try_from(h % n as u64).unwrap_or(0)
        }),
    };
    upstreams.get(i).copied()
}

/// The value of the `Call-ID` (or compact `i`) header in the datagram's
/// header section, trimmed; `None` if there is none.
fn call_id(datagram: &[u8]) -> Option<&[u8]> {
    for line in datagram.split(|&b| b == b'\n').skip(1) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            return None; // end of the header section
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = line[..colon].trim_ascii_end();
        if name.eq_ignore_ascii_case(b"call-id") || name.eq_ignore_ascii_case(b"i") {
            return Some(line[colon + 1..].trim_ascii());
        }
    }
    None
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relays_both_ways_byte_for_byte() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        server
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let relay = BlindRelay::start(
            "127.0.0.1:0".parse().unwrap(),
            &[server.local_addr().unwrap()],
        )
        .unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();

        client.send_to(b"OPTIONS x", relay.local_addr()).unwrap();
        let mut buf = [0u8; 64];
        let (n, from) = server.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"OPTIONS x");
        assert_eq!(from, relay.upstream_local_addr());

        server.send_to(b"SIP/2.0 200 OK", from).unwrap();
        let (n, from) = client.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"SIP/2.0 200 OK");
        assert_eq!(from, relay.local_addr());

        assert_eq!(
            relay.stop(),
            RelayCounts {
                to_upstream: 1,
                to_client: 1
            }
        );
    }

    #[test]
    fn no_upstream_is_an_error() {
        let err = BlindRelay::start("127.0.0.1:0".parse().unwrap(), &[]).unwrap_err();
        assert!(err.to_string().contains("no upstream"), "{err}");
    }

    fn invite(call_id_line: &str) -> Vec<u8> {
        format!("INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h\r\n{call_id_line}\r\nCSeq: 1 INVITE\r\n\r\nCall-ID: body\r\n").into_bytes()
    }

    #[test]
    fn the_call_id_is_read_in_any_case_or_compact_form_and_only_in_the_head() {
        assert_eq!(call_id(&invite("Call-ID: abc@h")), Some(&b"abc@h"[..]));
        assert_eq!(call_id(&invite("call-id :  abc@h ")), Some(&b"abc@h"[..]));
        assert_eq!(call_id(&invite("i:abc@h")), Some(&b"abc@h"[..]));
        // A header whose name only ends in Call-ID, and a Call-ID line in
        // the body: neither is the call's.
        assert_eq!(call_id(&invite("X-Call-ID: no")), None);
        assert_eq!(call_id(b"garbage"), None);
    }

    #[test]
    fn a_call_stays_on_one_upstream_and_calls_spread_over_all() {
        let ups: Vec<SocketAddr> = (1..=3)
            .map(|i| SocketAddr::from(([127, 0, 0, i], 5060)))
            .collect();
        let mut used = std::collections::HashSet::new();
        for n in 0..60 {
            let id = format!("Call-ID: {n}-1@127.0.0.100");
            let up = upstream_of(&invite(&id), &ups).unwrap();
            // The same call, as its ACK or BYE: the same upstream.
            let bye = format!("BYE sip:a@b SIP/2.0\r\ni: {n}-1@127.0.0.100\r\n\r\n");
            assert_eq!(upstream_of(bye.as_bytes(), &ups), Some(up));
            used.insert(up);
        }
        assert_eq!(used.len(), 3, "{used:?}");
        // Without a Call-ID: the first; with one upstream: always it.
        assert_eq!(upstream_of(b"ping", &ups), Some(ups[0]));
        assert_eq!(upstream_of(&invite("Call-ID: x"), &ups[1..2]), Some(ups[1]));
        assert_eq!(upstream_of(b"ping", &[]), None);
    }
}
