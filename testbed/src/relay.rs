//! A blind UDP relay: the floor any SIP proxy is compared against. One
//! `recv` and one `send` per datagram, nothing parsed.

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

/// Relays datagrams from clients to one upstream and the upstream's
/// datagrams back to the last client heard from. Stops on drop.
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
    /// Datagrams sent to the upstream.
    pub to_upstream: u64,
    /// Datagrams sent back to a client.
    pub to_client: u64,
}

impl BlindRelay {
    /// Binds `listen` for clients and an ephemeral port on the same address
    /// towards `upstream`, and starts one thread per direction.
    pub fn start(listen: SocketAddr, upstream: SocketAddr) -> Result<Self> {
        let client_side = UdpSocket::bind(listen)?;
        let upstream_side = UdpSocket::bind(SocketAddr::new(listen.ip(), 0))?;
        client_side.set_read_timeout(Some(POLL))?;
        upstream_side.set_read_timeout(Some(POLL))?;
        let listen = client_side.local_addr()?;
        let upstream_local = upstream_side.local_addr()?;
        let shared = Arc::new(Shared::default());

        let up = {
            let (rx, tx, shared) = (
                client_side.try_clone()?,
                upstream_side.try_clone()?,
                shared.clone(),
            );
            thread::Builder::new()
                .name("relay-up".into())
                .spawn(move || forward_up(rx, tx, upstream, &shared))?
        };
        let down = {
            let shared2 = shared.clone();
            thread::Builder::new()
                .name("relay-down".into())
                .spawn(move || forward_down(upstream_side, client_side, upstream, &shared2))?
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

    /// The address the upstream sees datagrams come from.
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

fn forward_up(rx: UdpSocket, tx: UdpSocket, upstream: SocketAddr, shared: &Shared) {
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

fn forward_down(rx: UdpSocket, tx: UdpSocket, upstream: SocketAddr, shared: &Shared) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    while !shared.stop.load(Ordering::Relaxed) {
        match rx.recv_from(&mut buf) {
            Ok((n, from)) if from == upstream => {
                let client = *shared.last_client.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(client) = client {
                    if tx.send_to(&buf[..n], client).is_ok() {
                        shared.to_client.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Ok(_) => {} // not from the upstream: not ours to relay
            Err(e) if is_timeout(&e) => {}
            Err(_) => {}
        }
    }
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
        let relay = BlindRelay::start("127.0.0.1:0".parse().unwrap(), server.local_addr().unwrap())
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
}
