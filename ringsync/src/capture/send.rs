//! The sender task of a capture: takes copies off the queue, filters and
//! encodes each once, and hands it to every collector without waiting on
//! any. A UDP collector gets a non-blocking send on a connected socket
//! (a full socket buffer drops the copy as `collector_slow`, a refusal
//! the kernel reports from the collector's ICMP as `collector_down`); a
//! TCP or TLS collector has its own writer task behind a bounded queue,
//! which connects (and for TLS checks the collector's certificate),
//! writes, and reconnects after a loss, and while it is not connected its
//! copies are dropped as `collector_down` (`stream.rs`).

use std::collections::HashMap;
use std::io;
use std::io::IoSlice;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use metrics::Counter;
use nix::errno::Errno;
use nix::sys::socket::{sendmmsg, ControlMessage, MsgFlags, MultiHeaders};
use tokio::sync::mpsc;

use super::hep::{self, Record};
use super::stream::{self, RETRY};
use super::{wanted, Captured, Correlate, Kind, Names, Queue, Transport};
use crate::config::{CaptureConfig, CaptureTls, Collector, CollectorTransport};

/// The dropped copies, by reason.
#[derive(Clone)]
struct Drops {
    slow: Counter,
    down: Counter,
    too_big: Counter,
}

/// One running capture's sender.
pub(super) struct Sender {
    cfg: CaptureConfig,
    /// The node's agent id, which [`super::Capture::set_node`] may change.
    agent: Arc<AtomicU32>,
    names: Names,
    drops: Drops,
    correlate: Option<Correlate>,
    /// The ids of log records' requests by key, for their answers;
    /// cleared when it reaches [`MAX_KEYS`] (an answer then goes without).
    ids: HashMap<Vec<u8>, Vec<u8>>,
}

/// The most request keys remembered for their answers.
const MAX_KEYS: usize = 16_384;

impl Sender {
    pub(super) fn new(
        cfg: &CaptureConfig,
        agent: Arc<AtomicU32>,
        names: Names,
        correlate: Option<Correlate>,
    ) -> Sender {
        let drop = |reason: &'static str| metrics::counter!(names.dropped, "reason" => reason);
        Sender {
            cfg: cfg.clone(),
            agent,
            names,
            drops: Drops {
                slow: drop("collector_slow"),
                down: drop("collector_down"),
                too_big: drop("too_big"),
            },
            correlate,
            ids: HashMap::new(),
        }
    }

    /// The correlation id of a log record (see [`Correlate`]).
    fn log_id(&mut self, payload: &[u8]) -> Option<Vec<u8>> {
        let (key, id) = (self.correlate?)(payload);
        match (key, id) {
            (Some(k), Some(id)) => {
                if self.ids.len() >= MAX_KEYS {
                    self.ids.clear();
                }
                self.ids.insert(k.to_vec(), id.to_vec());
                Some(id.to_vec())
            }
            (Some(k), None) => self.ids.get(k).cloned(),
            (None, id) => id.map(<[u8]>::to_vec),
        }
    }

    /// Until every handle on the queue is gone (capture turned off or
    /// replaced by a reload): what is queued is still sent. While copies
    /// come it takes a batch every [`super::FLUSH`] (sooner when the queue
    /// is half full): one timer wake a batch and none from the message
    /// path; a turn that finds the queue empty leaves it idle until the
    /// next copy wakes it.
    pub(super) async fn run(mut self, queue: Arc<Queue>) {
        let mut outs: Vec<Out> = self
            .cfg
            .collectors
            .iter()
            .map(|c| Out::open(*c, self.names, &self.drops, self.cfg.tls.as_ref()))
            .collect();
        let mut batch = Vec::new();
        let mut packets = Packets::default();
        let mut idle = true;
        loop {
            if idle {
                queue.first_copy().await;
            }
            if !queue.is_closed() && !queue.half_full() {
                let flush = tokio::time::sleep(super::FLUSH);
                tokio::pin!(flush);
                tokio::select! {
                    _ = &mut flush => {}
                    _ = queue.filled() => {}
                }
            }
            // Read before the take: once closed, nothing more is pushed.
            let closed = queue.is_closed();
            queue.take(&mut batch);
            idle = batch.is_empty();
            packets.clear();
            for copy in batch.drain(..) {
                self.encode(&copy, &mut packets);
            }
            for out in &mut outs {
                out.send(&packets);
            }
            if closed {
                return;
            }
        }
    }

    /// Appends the HEP packet of `copy` to `packets`, unless the filters
    /// leave it out or it is too big (counted).
    fn encode(&mut self, copy: &Captured, packets: &mut Packets) {
        let log_id;
        let (correlation, proto_type) = match copy.kind {
            Kind::Sip => {
                // The daemon's own reading when it parsed the message; a
                // scan of the header lines when it did not.
                let (method, call_id) = match &copy.fields {
                    Some(f) => (f.method.as_deref(), f.call_id.as_deref()),
                    None => hep::sip_fields(&copy.payload),
                };
                if !wanted(&self.cfg, method, call_id) {
                    return;
                }
                (call_id, hep::PROTO_SIP)
            }
            Kind::Log => {
                log_id = self.log_id(&copy.payload);
                (log_id.as_deref(), hep::PROTO_LOG)
            }
        };
        let record = Record {
            at: copy.at,
            src: copy.src,
            dst: copy.dst,
            ip_proto: match copy.transport {
                Transport::Udp => hep::IPPROTO_UDP,
                Transport::Stream => hep::IPPROTO_TCP,
            },
            proto_type,
            agent: self.agent.load(Ordering::Relaxed),
            auth_key: self.cfg.auth_key.as_deref().map(str::as_bytes),
            correlation,
            payload: &copy.payload,
        };
        if hep::encode(&record, &mut packets.all).is_err() {
            self.drops.too_big.increment(1);
            return;
        }
        packets.ends.push(packets.all.len());
    }
}

/// A batch's HEP packets, end to end in one buffer.
#[derive(Default)]
struct Packets {
    all: Vec<u8>,
    /// Where each packet ends in `all`.
    ends: Vec<usize>,
}

impl Packets {
    fn clear(&mut self) {
        self.all.clear();
        self.ends.clear();
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(s, &e)| &self.all[s..e])
    }

    fn len(&self) -> usize {
        self.ends.len()
    }
}

/// One collector as the sender sees it.
enum Out {
    Udp {
        addr: SocketAddr,
        sock: Option<UdpSocket>,
        /// No new socket before this, after one could not be made.
        retry: Instant,
        sent: Counter,
        drops: Drops,
    },
    Tcp {
        tx: mpsc::Sender<Bytes>,
        up: Arc<AtomicBool>,
        drops: Drops,
    },
}

impl Out {
    fn open(c: Collector, names: Names, drops: &Drops, tls: Option<&CaptureTls>) -> Out {
        let sent = metrics::counter!(names.sent, "collector" => c.to_string());
        sent.increment(0);
        match c.transport {
            CollectorTransport::Udp => Out::Udp {
                addr: c.addr,
                sock: None,
                retry: Instant::now(),
                sent,
                drops: drops.clone(),
            },
            CollectorTransport::Tcp | CollectorTransport::Tls => {
                let (tx, up) = stream::spawn_writer(c, tls, sent, drops.down.clone());
                Out::Tcp {
                    tx,
                    up,
                    drops: drops.clone(),
                }
            }
        }
    }

    /// Hands a batch to the collector: a UDP collector's in one system
    /// call (or a few), a TCP collector's to its writer.
    fn send(&mut self, packets: &Packets) {
        if packets.len() == 0 {
            return;
        }
        match self {
            Out::Udp {
                addr,
                sock,
                retry,
                sent,
                drops,
            } => {
                if sock.is_none() && Instant::now() >= *retry {
                    *sock = udp_socket(*addr)
                        .inspect_err(|e| {
                            tracing::debug!(collector = %addr, error = %e, "capture: no socket to the collector");
                            *retry = Instant::now() + RETRY;
                        })
                        .ok();
                }
                let Some(s) = sock else {
                    drops.down.increment(packets.len() as u64);
                    return;
                };
                send_batch(s, packets, sent, drops);
            }
            Out::Tcp { tx, up, drops } => {
                if !up.load(Ordering::Relaxed) {
                    drops.down.increment(packets.len() as u64);
                    return;
                }
                // One copy of the batch, each packet a slice of it.
                let all = Bytes::copy_from_slice(&packets.all);
                let starts = std::iter::once(0).chain(packets.ends.iter().copied());
                for (s, &e) in starts.zip(&packets.ends) {
                    if tx.try_send(all.slice(s..e)).is_err() {
                        drops.slow.increment(1);
                    }
                }
            }
        }
    }
}

/// The most packets one `sendmmsg` takes (Linux's `UIO_MAXIOV`).
const MMSG_MAX: usize = 1024;

/// Sends `packets` on the connected non-blocking `s` with `sendmmsg`: the
/// kernel sends them in order until one fails. A full socket buffer drops
/// the rest of the batch as `collector_slow`; another error (the
/// collector's port closed, reported from an earlier packet's ICMP, or no
/// route) loses the packet it stopped at as `collector_down`, and the
/// rest go on. The message headers are made once a batch, not once a
/// call: a closed port fails every other call.
fn send_batch(s: &UdpSocket, packets: &Packets, sent: &Counter, drops: &Drops) {
    let iovs: Vec<[IoSlice<'_>; 1]> = packets.iter().map(|p| [IoSlice::new(p)]).collect();
    let most = iovs.len().min(MMSG_MAX);
    let addrs = vec![None::<()>; most];
    let mut headers = MultiHeaders::<()>::preallocate(most, None);
    let no_cmsgs: [ControlMessage<'_>; 0] = [];
    let flags = MsgFlags::MSG_DONTWAIT;
    let mut at = 0;
    while at < iovs.len() {
        let n = (iovs.len() - at).min(MMSG_MAX);
        let some = &iovs[at..at + n];
        match sendmmsg(
            s.as_raw_fd(),
            &mut headers,
            some,
            &addrs[..n],
            no_cmsgs,
            flags,
        ) {
            Ok(done) => {
                let k = done.count();
                sent.increment(k as u64);
                at += k.max(1);
                if k == 0 {
                    drops.down.increment(1);
                }
            }
            Err(Errno::EAGAIN) => {
                drops.slow.increment((iovs.len() - at) as u64);
                return;
            }
            Err(_) => {
                drops.down.increment(1);
                at += 1;
            }
        }
    }
}

/// A non-blocking UDP socket connected to `addr` (so the kernel reports
/// the collector's port closed).
fn udp_socket(addr: SocketAddr) -> io::Result<UdpSocket> {
    let any: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0".parse().expect("an address")
    } else {
        "[::]:0".parse().expect("an address")
    };
    let s = UdpSocket::bind(any)?;
    s.connect(addr)?;
    s.set_nonblocking(true)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// `cookie rest`: the cookie, and the id when `rest` starts with `id=`.
    fn ids(d: &[u8]) -> (Option<&[u8]>, Option<&[u8]>) {
        let mut parts = d.splitn(2, |&b| b == b' ');
        let cookie = parts.next();
        let id = parts.next().and_then(|r| r.strip_prefix(b"id="));
        (cookie, id)
    }

    fn config(collectors: Vec<Collector>, queue: usize) -> CaptureConfig {
        CaptureConfig {
            collectors,
            agent_id: 0,
            agents: Default::default(),
            auth_key: None,
            listeners: vec![],
            methods: vec![],
            register_per_million: 1_000_000,
            queue,
            media: true,
            tls: None,
        }
    }

    fn copy(i: usize) -> Captured {
        Captured {
            at: std::time::SystemTime::now(),
            src: "10.0.0.1:5060".parse().unwrap(),
            dst: "10.0.0.2:5060".parse().unwrap(),
            transport: Transport::Udp,
            kind: Kind::Sip,
            payload: Bytes::from(format!("OPTIONS sip:x SIP/2.0\r\nCall-ID: c{i}\r\n\r\n")),
            fields: None,
        }
    }

    /// A batch goes to a UDP collector whole and in order (one
    /// `sendmmsg`), past the queue's bound copies are refused, and when
    /// the tap goes what is queued is still sent before the sender ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_reaches_a_udp_collector_in_order_and_the_queue_is_sent_at_the_end() {
        let collector = UdpSocket::bind("127.0.0.1:0").unwrap();
        collector
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let c = Collector {
            transport: CollectorTransport::Udp,
            addr: collector.local_addr().unwrap(),
        };
        let names = Names {
            sent: "t_batch_sent",
            dropped: "t_batch_dropped",
        };
        let cfg = config(vec![c], 8);
        let queue = Arc::new(Queue::new(cfg.queue));
        let sender = Sender::new(&cfg, Arc::new(AtomicU32::new(7)), names, None);
        let run = tokio::spawn(sender.run(queue.clone()));
        // A first batch, taken within FLUSH of its first copy.
        for i in 0..3 {
            assert!(queue.push(copy(i)));
        }
        let mut buf = [0u8; 2048];
        for i in 0..3 {
            let n = tokio::task::block_in_place(|| collector.recv(&mut buf)).unwrap();
            assert!(
                buf[..n].ends_with(format!("c{i}").as_bytes()),
                "copy {i} in order"
            );
        }
        // A second batch fills the queue; the next copy is refused; the
        // tap goes (as `Tap::drop` does) and the eight queued are sent.
        for i in 3..11 {
            assert!(queue.push(copy(i)));
        }
        assert!(!queue.push(copy(99)), "bounded");
        queue.closed.store(true, Ordering::Release);
        queue.full.notify_one();
        tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .expect("the sender ends once the tap is gone")
            .unwrap();
        for i in 3..11 {
            let n = collector.recv(&mut buf).unwrap();
            assert!(
                buf[..n].ends_with(format!("c{i}").as_bytes()),
                "copy {i} in order"
            );
        }
    }

    #[test]
    fn an_answer_gets_the_id_of_its_request_by_key() {
        let cfg = CaptureConfig {
            collectors: vec![],
            agent_id: 0,
            agents: Default::default(),
            auth_key: None,
            listeners: vec![],
            methods: vec![],
            register_per_million: 1_000_000,
            queue: 1,
            media: true,
            tls: None,
        };
        let names = Names {
            sent: "t_sent",
            dropped: "t_dropped",
        };
        let mut s = Sender::new(&cfg, Arc::new(AtomicU32::new(0)), names, Some(ids));
        assert_eq!(s.log_id(b"c1 id=call-1"), Some(b"call-1".to_vec()));
        assert_eq!(s.log_id(b"c2 id=call-2"), Some(b"call-2".to_vec()));
        // Answers name no call: their command's, also when answered twice
        // (the mg's answer, then media-ctl's to its client).
        assert_eq!(s.log_id(b"c1 result=ok"), Some(b"call-1".to_vec()));
        assert_eq!(s.log_id(b"c1 result=ok"), Some(b"call-1".to_vec()));
        assert_eq!(s.log_id(b"c9 result=ok"), None);
        for i in 0..MAX_KEYS + 1 {
            s.log_id(format!("k{i} id=x").as_bytes());
        }
        assert!(s.ids.len() <= MAX_KEYS, "bounded");
    }
}
