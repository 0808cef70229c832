//! Copies of what a node receives and sends, to HEP v3 collectors (HOMER,
//! `sngrep -L`, Wireshark), as `[capture]` says: sip-gate's SIP messages
//! and media-ctl's ng commands and answers.
//!
//! Off the message path: the path hands a copy (a reference to the bytes
//! it has anyway, the addresses and a timestamp) to a bounded queue and
//! goes on, waking nobody unless the sender is idle or the queue half
//! full; a sender task takes the queue's copies as a batch every
//! [`FLUSH`] while they come (at once when half full), filters,
//! encodes ([`hep`]) and sends them, a UDP collector's in one system
//! call (`send.rs`). A full queue, a slow collector or one that is gone drops
//! copies and counts them (`<prefix>_capture_dropped_total{reason}`),
//! never delays a message and never holds more than the queue. Without
//! `[capture]` the path pays one relaxed load and a branch.

pub mod hep;
mod send;
mod stream;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use tokio::sync::Notify;

use crate::config::{CaptureConfig, SiteConfig};

/// The transport a message went over, as the capture reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// UDP.
    Udp,
    /// TCP, TLS, WebSocket or secure WebSocket: a TCP connection below.
    Stream,
}

/// What a copy is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A SIP message (HEP protocol type 1, correlated by its Call-ID).
    Sip,
    /// A log record (HEP protocol type 100), correlated by the daemon's
    /// [`Correlate`].
    Log,
}

/// How a log record's correlation id is found, off the message path:
/// from its bytes, a key that ties an answer to its request (media-ctl:
/// the ng cookie) and the id itself when the record carries it (the
/// call-id of an ng command). An answer without an id gets the id its
/// request had under the same key.
pub type Correlate = fn(&[u8]) -> (Option<&[u8]>, Option<&[u8]>);

/// What the daemon already read of a SIP message it parsed: its Call-ID
/// and method (a response's from its CSeq), so the sender need not scan
/// the copy's header lines again. A copy without them (a message the
/// daemon did not parse) is scanned by the sender ([`hep::sip_fields`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields {
    /// The Call-ID's value (a slice of the message's bytes).
    pub call_id: Option<Bytes>,
    /// The method, or a response's CSeq method.
    pub method: Option<Bytes>,
}

/// One message copied for the collectors.
#[derive(Debug, Clone)]
pub struct Captured {
    /// When it was received or sent.
    pub at: SystemTime,
    /// Where it came from.
    pub src: SocketAddr,
    /// Where it went.
    pub dst: SocketAddr,
    /// Over what.
    pub transport: Transport,
    /// SIP or a log record.
    pub kind: Kind,
    /// The bytes, as received or sent.
    pub payload: Bytes,
    /// What the daemon read of them, when it parsed them.
    pub fields: Option<Fields>,
}

/// The metric names a daemon counts its capture under.
#[derive(Debug, Clone, Copy)]
pub struct Names {
    /// Copies handed to a collector's socket (label `collector`).
    pub sent: &'static str,
    /// Copies dropped (label `reason`: `queue_full`, `collector_slow`,
    /// `collector_down`, `too_big`).
    pub dropped: &'static str,
}

/// The reasons a copy is dropped, registered at zero when capture starts.
const REASONS: [&str; 4] = ["queue_full", "collector_slow", "collector_down", "too_big"];

/// How long a copy may wait in the queue for the rest of its batch: the
/// delay capture adds to a copy (documented in R-CAP-1), which lets the
/// sender wake and make its system calls once a batch, not once a copy.
pub const FLUSH: Duration = Duration::from_millis(5);

/// The bounded queue between the message path and the sender: a vector
/// swapped out whole by the sender, so the path pays one uncontended lock
/// and a push, and wakes the sender only when it is idle (the first copy
/// after a quiet [`FLUSH`]) and when the queue reaches half its bound.
pub(crate) struct Queue {
    items: Mutex<Vec<Captured>>,
    bound: usize,
    /// Wakes an idle sender: a first copy (a permit is kept when it is
    /// busy, which costs it at most one empty turn).
    first: Notify,
    /// Wakes the sender before its [`FLUSH`]: half full, or closed.
    full: Notify,
    /// Set when the [`Tap`] is gone: nothing more is pushed.
    closed: AtomicBool,
}

impl Queue {
    fn new(bound: usize) -> Queue {
        Queue {
            items: Mutex::new(Vec::new()),
            bound: bound.max(1),
            first: Notify::new(),
            full: Notify::new(),
            closed: AtomicBool::new(false),
        }
    }

    /// Queues `copy`; false when the queue is full (the copy is dropped).
    fn push(&self, copy: Captured) -> bool {
        let len = {
            let mut items = self.items.lock().unwrap_or_else(|p| p.into_inner());
            if items.len() >= self.bound {
                return false;
            }
            items.push(copy);
            items.len()
        };
        if len == self.bound.div_ceil(2) {
            self.full.notify_one();
        } else if len == 1 {
            self.first.notify_one();
        }
        true
    }

    /// Every queued copy, into `out` (emptied by the caller), in order.
    pub(crate) fn take(&self, out: &mut Vec<Captured>) {
        let mut items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::swap(&mut *items, out);
    }

    /// Whether the queue is at half its bound or more (flush now).
    pub(crate) fn half_full(&self) -> bool {
        let items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        items.len() >= self.bound.div_ceil(2)
    }

    /// Waits for a copy (or the end), when the queue was found empty.
    pub(crate) async fn first_copy(&self) {
        tokio::select! {
            _ = self.first.notified() => {}
            _ = self.full.notified() => {}
        }
    }

    /// Waits for the queue to be half full (or closed).
    pub(crate) async fn filled(&self) {
        self.full.notified().await;
    }

    /// Whether the tap is gone: after one more [`Queue::take`], nothing
    /// is left.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// What is in force: the queue into the running sender and the listeners
/// captured.
struct Tap {
    queue: Arc<Queue>,
    /// By listener index: whether its messages are captured.
    listeners: Box<[bool]>,
}

impl Drop for Tap {
    /// The last message path's handle is gone: the sender sends what is
    /// queued and ends.
    fn drop(&mut self) {
        self.queue.closed.store(true, Ordering::Release);
        self.queue.full.notify_one();
    }
}

/// A daemon's capture: off until [`Capture::apply`] finds a `[capture]`.
pub struct Capture {
    on: AtomicBool,
    tap: ArcSwapOption<Tap>,
    names: Names,
    /// Set for a daemon that sends log records (media-ctl): it follows
    /// `[capture] media`.
    correlate: Option<Correlate>,
    state: Mutex<State>,
}

/// What [`Capture::apply`] and [`Capture::set_node`] keep.
#[derive(Default)]
struct State {
    /// The node's name (its agent id may be set per node).
    node: Option<String>,
    /// The config last applied, to apply again when the name comes.
    config: Option<Arc<SiteConfig>>,
    /// What the running sender was started with: a reload that changes
    /// none of it keeps it (and its connections).
    running: Option<(CaptureConfig, Vec<String>)>,
    /// The running sender's agent id: a new node name changes it in place.
    agent: Arc<AtomicU32>,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture")
            .field("on", &self.on.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Capture {
    /// A capture of SIP messages that sends nothing until a config with
    /// `[capture]` is applied.
    pub fn new(names: Names) -> Capture {
        Capture::with(names, None)
    }

    /// A capture of log records (media-ctl's ng traffic), correlated by
    /// `correlate`; on only while `[capture] media` is true.
    pub fn for_logs(names: Names, correlate: Correlate) -> Capture {
        Capture::with(names, Some(correlate))
    }

    fn with(names: Names, correlate: Option<Correlate>) -> Capture {
        Capture {
            on: AtomicBool::new(false),
            tap: ArcSwapOption::empty(),
            names,
            correlate,
            state: Mutex::new(State::default()),
        }
    }

    /// Puts the `[capture]` of `config` in force (at start and on each
    /// reload): a new sender with its own queue and connections replaces
    /// the one running, which sends what it holds and ends. Without the
    /// section, capture stops. Must be called within a tokio runtime when
    /// the section is there (the sender is a task); a collector that cannot
    /// be reached is not an error (its copies are dropped and counted).
    pub fn apply(&self, config: &Arc<SiteConfig>) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.config = Some(config.clone());
        self.start(&mut state);
    }

    /// Names the node (`--node`): its agent id is looked up in
    /// `[capture] agents` from now on.
    pub fn set_node(&self, name: &str) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.node = Some(name.to_owned());
        self.start(&mut state);
    }

    fn start(&self, state: &mut State) {
        let Some(config) = state.config.clone() else {
            return;
        };
        let wanted = config
            .capture
            .as_ref()
            .filter(|c| self.correlate.is_none() || c.media);
        let Some(cfg) = wanted else {
            self.on.store(false, Ordering::Relaxed);
            self.tap.store(None);
            if state.running.take().is_some() {
                tracing::info!("capture off");
            }
            return;
        };
        let agent = cfg.agent_for(state.node.as_deref());
        let names: Vec<String> = config.listeners.iter().map(|l| l.name.clone()).collect();
        let key = (cfg.clone(), names);
        if state.running.as_ref() == Some(&key) {
            state.agent.store(agent, Ordering::Relaxed);
            return;
        }
        state.agent = Arc::new(AtomicU32::new(agent));
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!("capture not started: no runtime to run its sender on");
            return;
        };
        for reason in REASONS {
            metrics::counter!(self.names.dropped, "reason" => reason).increment(0);
        }
        let listeners = config
            .listeners
            .iter()
            .map(|l| cfg.listeners.is_empty() || cfg.listeners.contains(&l.name))
            .collect();
        let queue = Arc::new(Queue::new(cfg.queue));
        let sender = send::Sender::new(cfg, state.agent.clone(), self.names, self.correlate);
        runtime.spawn(sender.run(queue.clone()));
        let collectors: Vec<String> = cfg.collectors.iter().map(ToString::to_string).collect();
        tracing::info!(
            ?collectors,
            agent_id = agent,
            "capture on: HEP v3 copies to the collectors"
        );
        self.tap.store(Some(Arc::new(Tap { queue, listeners })));
        self.on.store(true, Ordering::Relaxed);
        state.running = Some(key);
    }

    /// Whether a `[capture]` is in force: the one branch the message
    /// path pays without it.
    #[inline]
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// A SIP message received or sent on `listener` (its index in the
    /// site's listeners), from `src` to `dst`, now; `fields` when the
    /// daemon parsed it (else the sender reads them from its bytes).
    #[inline]
    pub fn sip(
        &self,
        listener: usize,
        transport: Transport,
        (src, dst): (SocketAddr, SocketAddr),
        payload: &Bytes,
        fields: Option<Fields>,
    ) {
        if self.is_on() {
            let at = SystemTime::now();
            self.push(
                Some(listener),
                transport,
                (src, dst),
                (Kind::Sip, at),
                (payload, fields),
            );
        }
    }

    /// [`Capture::sip`] for a message received at `at` (the kernel's
    /// receive timestamp of a datagram, when it gave one): HOMER orders a
    /// call's messages by their times, and a datagram may wait in the
    /// socket's queue before it is read.
    #[inline]
    pub fn sip_received_at(
        &self,
        listener: usize,
        (src, dst): (SocketAddr, SocketAddr),
        (payload, fields): (&Bytes, Option<Fields>),
        at: SystemTime,
    ) {
        if self.is_on() {
            let kind = (Kind::Sip, at);
            let copy = (payload, fields);
            self.push(Some(listener), Transport::Udp, (src, dst), kind, copy);
        }
    }

    /// A log record (media-ctl's ng command or answer) from `src` to `dst`
    /// over UDP; its bytes are copied only while capture is on.
    #[inline]
    pub fn log(&self, (src, dst): (SocketAddr, SocketAddr), payload: &[u8]) {
        if self.is_on() {
            let bytes = Bytes::copy_from_slice(payload);
            let kind = (Kind::Log, SystemTime::now());
            self.push(None, Transport::Udp, (src, dst), kind, (&bytes, None));
        }
    }

    fn push(
        &self,
        listener: Option<usize>,
        transport: Transport,
        (src, dst): (SocketAddr, SocketAddr),
        (kind, at): (Kind, SystemTime),
        (payload, fields): (&Bytes, Option<Fields>),
    ) {
        let tap = self.tap.load();
        let Some(tap) = tap.as_ref() else { return };
        if let Some(l) = listener {
            if !tap.listeners.get(l).copied().unwrap_or(true) {
                return;
            }
        }
        let copy = Captured {
            at,
            src,
            dst,
            transport,
            kind,
            payload: payload.clone(),
            fields,
        };
        if !tap.queue.push(copy) {
            metrics::counter!(self.names.dropped, "reason" => "queue_full").increment(1);
        }
    }
}

/// Whether a copy passes the filters of `cfg` that need its bytes: the
/// methods, and the sample of registrations (by Call-ID, so a sampled
/// registration is seen whole: request and answers, both legs).
pub(crate) fn wanted(cfg: &CaptureConfig, method: Option<&[u8]>, call_id: Option<&[u8]>) -> bool {
    if !cfg.methods.is_empty() {
        let Some(m) = method else { return false };
        if !cfg.methods.iter().any(|w| w.as_bytes() == m) {
            return false;
        }
    }
    if cfg.register_per_million < 1_000_000 && method == Some(b"REGISTER") {
        let h = call_id.map_or(0, fnv1a);
        return h % 1_000_000 < u64::from(cfg.register_per_million);
    }
    true
}

/// FNV-1a: a stable hash (the same Call-ID is sampled the same on every
/// node and after every restart).
fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(methods: &[&str], per_million: u32) -> CaptureConfig {
        CaptureConfig {
            collectors: vec![],
            agent_id: 0,
            agents: Default::default(),
            auth_key: None,
            listeners: vec![],
            methods: methods.iter().map(|m| m.to_string()).collect(),
            register_per_million: per_million,
            queue: 1,
            media: true,
            tls: None,
        }
    }

    #[test]
    fn methods_filter_requests_and_their_responses() {
        let c = cfg(&["INVITE", "BYE"], 1_000_000);
        assert!(wanted(&c, Some(b"INVITE"), Some(b"a")));
        assert!(!wanted(&c, Some(b"OPTIONS"), Some(b"a")));
        assert!(!wanted(&c, None, Some(b"a")));
        assert!(wanted(&cfg(&[], 1_000_000), None, None));
    }

    #[test]
    fn registrations_are_sampled_by_call_id() {
        let c = cfg(&[], 250_000);
        let ids: Vec<String> = (0..4000).map(|i| format!("reg-{i}@host")).collect();
        let kept = ids
            .iter()
            .filter(|id| wanted(&c, Some(b"REGISTER"), Some(id.as_bytes())))
            .count();
        assert!((800..1200).contains(&kept), "{kept} of 4000 kept at 25%");
        // The same Call-ID always gets the same answer; other methods pass.
        for id in &ids[..50] {
            let once = wanted(&c, Some(b"REGISTER"), Some(id.as_bytes()));
            assert_eq!(once, wanted(&c, Some(b"REGISTER"), Some(id.as_bytes())));
            assert!(wanted(&c, Some(b"INVITE"), Some(id.as_bytes())));
        }
        assert!(!wanted(&cfg(&[], 0), Some(b"REGISTER"), Some(b"x")));
    }
}
