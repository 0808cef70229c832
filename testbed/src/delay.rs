//! A delaying UDP relay: what `tc netem delay` would do on a real network,
//! for machines without `sch_netem` (these ones). Clients send to the
//! relay's address; each client gets a socket of its own towards the
//! upstream, bound on the client's own IP (so that the upstream still sees
//! the client's address, port aside), and the upstream's
//! answers come back through the relay from its listening address. While
//! a delay is set, every datagram both ways waits that long, in order: a
//! datagram never overtakes one received before it, also when the delay
//! is lowered. Chaos runs put the callers behind one per gate and set its
//! delay as a fault.

use std::{
    collections::{HashMap, VecDeque},
    io,
    net::{SocketAddr, UdpSocket},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use crate::Result;

const MAX_DATAGRAM: usize = 65_535;
/// How often an idle thread looks at the stop flag.
const POLL: Duration = Duration::from_millis(50);

/// A running relay; stops on drop.
#[derive(Debug)]
pub struct DelayRelay {
    listen: SocketAddr,
    shared: Arc<Shared>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    delay_us: AtomicU64,
    relayed: AtomicU64,
}

impl Shared {
    fn delay(&self) -> Duration {
        Duration::from_micros(self.delay_us.load(Ordering::Relaxed))
    }
}

/// Datagrams waiting their instant, in the order they came.
#[derive(Default)]
struct Queue(VecDeque<(Instant, Vec<u8>, SocketAddr)>);

impl Queue {
    /// Queues `data` for `to` after `delay`, never before the last one.
    fn push(&mut self, data: &[u8], to: SocketAddr, delay: Duration) {
        let mut due = Instant::now() + delay;
        if let Some((last, _, _)) = self.0.back() {
            due = due.max(*last);
        }
        self.0.push_back((due, data.to_vec(), to));
    }

    /// Sends what is due through `send`; returns how long until the next.
    fn flush(&mut self, mut send: impl FnMut(&[u8], SocketAddr)) -> Duration {
        let now = Instant::now();
        while let Some((due, _, _)) = self.0.front() {
            if *due > now {
                return (*due - now).min(POLL);
            }
            if let Some((_, data, to)) = self.0.pop_front() {
                send(&data, to);
            }
        }
        POLL
    }
}

impl DelayRelay {
    /// Binds `listen` and relays what clients send there to `upstream`,
    /// from a socket per client bound on the client's IP (port chosen by
    /// the kernel); no delay until [`DelayRelay::set_delay`].
    pub fn start(listen: SocketAddr, upstream: SocketAddr) -> Result<Self> {
        let sock = UdpSocket::bind(listen)?;
        let listen = sock.local_addr()?;
        let shared = Arc::new(Shared::default());
        let threads = Arc::new(Mutex::new(Vec::new()));
        let (s, t) = (shared.clone(), threads.clone());
        let down = thread::Builder::new()
            .name("delay-relay".into())
            .spawn(move || {
                if let Err(e) = clients(&sock, upstream, &s, &t) {
                    eprintln!("testbed: delay relay {listen} stopped: {e}");
                }
            })?;
        lock(&threads).push(down);
        Ok(Self {
            listen,
            shared,
            threads,
        })
    }

    /// Where clients send.
    pub fn addr(&self) -> SocketAddr {
        self.listen
    }

    /// Every datagram received from now on waits `d` (both ways).
    pub fn set_delay(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.shared.delay_us.store(us, Ordering::Relaxed);
    }

    /// Datagrams relayed so far, both ways.
    pub fn relayed(&self) -> u64 {
        self.shared.relayed.load(Ordering::Relaxed)
    }
}

impl Drop for DelayRelay {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let threads = std::mem::take(&mut *lock(&self.threads));
        for t in threads {
            let _ = t.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether a receive error leaves the socket usable: nothing came in
/// time, a signal interrupted the call (the testbed's children end all
/// the time), or an ICMP error of an earlier send came back (a gate or a
/// caller restarting): all of them happen in a chaos run.
fn passing(e: &io::Error) -> bool {
    use io::ErrorKind as K;
    matches!(
        e.kind(),
        K::WouldBlock | K::TimedOut | K::Interrupted | K::ConnectionRefused | K::ConnectionReset
    )
}

/// Clients to the upstream: a socket per client, and a thread per such
/// socket carrying the upstream's answers back.
fn clients(
    sock: &UdpSocket,
    upstream: SocketAddr,
    shared: &Arc<Shared>,
    threads: &Arc<Mutex<Vec<JoinHandle<()>>>>,
) -> io::Result<()> {
    let mut out: HashMap<SocketAddr, UdpSocket> = HashMap::new();
    let mut queue = Queue::default();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut wait = POLL;
    while !shared.stop.load(Ordering::Relaxed) {
        sock.set_read_timeout(Some(wait.max(Duration::from_millis(1))))?;
        match sock.recv_from(&mut buf) {
            Ok((n, client)) => {
                if let std::collections::hash_map::Entry::Vacant(v) = out.entry(client) {
                    let up = UdpSocket::bind(SocketAddr::new(client.ip(), 0))?;
                    let (back, to_client) = (up.try_clone()?, sock.try_clone()?);
                    let s = shared.clone();
                    let t = thread::Builder::new()
                        .name("delay-relay-back".into())
                        .spawn(move || answers(&back, &to_client, client, &s))?;
                    lock(threads).push(t);
                    v.insert(up);
                }
                queue.push(&buf[..n], client, shared.delay());
            }
            Err(e) if passing(&e) => {}
            Err(e) => return Err(e),
        }
        wait = queue.flush(|data, client| {
            if let Some(up) = out.get(&client) {
                // A send the kernel refuses is a lost datagram, as on a
                // network: SIP retransmits.
                if up.send_to(data, upstream).is_ok() {
                    shared.relayed.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    Ok(())
}

/// The upstream's answers to one client's socket, back to the client from
/// the relay's own address.
fn answers(up: &UdpSocket, to_client: &UdpSocket, client: SocketAddr, shared: &Shared) {
    let mut queue = Queue::default();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut wait = POLL;
    while !shared.stop.load(Ordering::Relaxed) {
        if up
            .set_read_timeout(Some(wait.max(Duration::from_millis(1))))
            .is_err()
        {
            return;
        }
        match up.recv_from(&mut buf) {
            Ok((n, _)) => queue.push(&buf[..n], client, shared.delay()),
            Err(e) if passing(&e) => {}
            Err(e) => {
                eprintln!("testbed: delay relay, the answers to {client} stopped: {e}");
                return;
            }
        }
        wait = queue.flush(|data, to| {
            if to_client.send_to(data, to).is_ok() {
                shared.relayed.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo() -> (UdpSocket, SocketAddr) {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let a = s.local_addr().unwrap();
        (s, a)
    }

    /// Relayed both ways with the client's IP kept; with 150 ms set, a
    /// round trip takes at least 300 ms, and datagrams keep their order
    /// when the delay is lowered behind them.
    #[test]
    fn relays_both_ways_delays_as_set_and_keeps_the_order() {
        let (up, up_addr) = echo();
        let relay = DelayRelay::start("127.0.0.1:0".parse().unwrap(), up_addr).unwrap();
        let client = UdpSocket::bind("127.0.0.3:0").unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        up.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut buf = [0u8; 64];
        let round = |msg: &[u8], buf: &mut [u8]| {
            let t = Instant::now();
            client.send_to(msg, relay.addr()).unwrap();
            let (n, from) = up.recv_from(buf).unwrap();
            assert_eq!(&buf[..n], msg);
            assert_eq!(from.ip(), client.local_addr().unwrap().ip());
            up.send_to(b"answer", from).unwrap();
            let (n, from) = client.recv_from(buf).unwrap();
            assert_eq!((&buf[..n], from), (&b"answer"[..], relay.addr()));
            t.elapsed()
        };
        round(b"first", &mut buf);
        relay.set_delay(Duration::from_millis(150));
        assert!(round(b"slow", &mut buf) >= Duration::from_millis(300));
        // One datagram under the delay, the next without: still in order.
        client.send_to(b"one", relay.addr()).unwrap();
        thread::sleep(Duration::from_millis(20));
        relay.set_delay(Duration::ZERO);
        client.send_to(b"two", relay.addr()).unwrap();
        let (n, _) = up.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"one");
        let (n, _) = up.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"two");
        // The client's first, slow and one went before two: counted.
        assert!(relay.relayed() >= 3, "{}", relay.relayed());
    }
}
