//! Sockets: UDP receive workers, TCP accept and connect, and the table of
//! open TCP connections (TLS ones included: `tls.rs` adds the handshakes).
//! Everything here moves bytes; what to send where is the core's business
//! ([`crate::proxy::Core::handle`]).
//!
//! UDP is served by plain OS threads doing blocking `recvmmsg`/`sendto`,
//! one `SO_REUSEPORT` socket each, like Kamailio's UDP workers: the kernel
//! hashes each peer to one socket, and a message to a UDP next hop is
//! handled and sent from its worker's thread with no hand-off (one to a
//! TCP next hop is queued to its connection's task). In an early ad-hoc
//! run, blocking threads took the gate from 172 µs of CPU per call (tokio
//! tasks sharing one socket: every readiness event woke every task) to about
//! 100 µs, and a socket per worker ended its reordering failures
//! (docs/benchmarks.md, the load benchmark's "How we got here"). TCP stays on
//! tokio.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use dashmap::DashMap;
use std::net::UdpSocket;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use hickory_resolver::TokioResolver;

use ringsync::capture::Fields;
use ringsync::capture::Transport::Udp;
use ringsync::config::WsOptions;

use crate::dns::{DnsFailure, DnsQuery};
use crate::metrics as m;
use crate::overload::RuntimeLag;
use crate::proxy::{Action, Core, Out};
use crate::reach::Stream;
use crate::txn::{ConnId, Inbound};

mod batch;
mod bind;
mod fd_limit;
mod handover;
mod listen;
mod member;
mod pause;
mod read_timer;
mod relay;
mod stream;
mod tls;
mod udp;
mod workers;
mod ws;
pub(crate) use bind::bind;
pub use bind::{BindError, SocketKind};
pub(crate) use handover::{GiveUp, Moved, NetHandle, Pending, Stopped};
pub(crate) use relay::{Kept, Relayed};
use stream::connection;
pub use tls::TlsReload;
pub(crate) use tls::TlsSide;

/// Largest SIP message accepted on a stream (and a UDP receive slot).
pub(crate) const MAX_MESSAGE: usize = 65_535;
/// How often a blocked UDP worker wakes to check for shutdown.
const UDP_POLL: Duration = Duration::from_millis(200);
/// The most messages one connection hands to the core before it lets the
/// other connections' tasks run: a peer that filled its socket buffer with
/// new dialogs does not hold a runtime thread while a BYE on another
/// connection waits (R-OV-1).
const STREAM_TURN: usize = 16;
/// A connect that takes longer fails.
const TCP_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The sockets of one listener, already bound.
#[derive(Debug)]
pub(crate) struct BoundListener {
    /// UDP sockets (one per worker, all on the listener's address with
    /// `SO_REUSEPORT`); empty when the listener does not serve UDP.
    pub(crate) udp: Vec<Arc<UdpSocket>>,
    /// TCP listener, when the listener serves TCP.
    pub(crate) tcp: Option<TcpListener>,
}

/// Runs the gate on bound listeners until `shutdown` is cancelled. Tokio
/// tasks are tracked by `tracker`; the UDP worker threads are returned so the
/// caller can join them, with the handle the upgrade works through
/// (R-GW-3). `tls` serves the listeners whose stream is TLS. Connection
/// ids start at 1, or at `taking_over`'s: this run takes over from an
/// earlier one and reads the listeners only once told to
/// (`NetHandle::start_listening`).
pub(crate) fn spawn(
    core: Arc<Core>,
    listeners: Vec<BoundListener>,
    tls: Option<Arc<TlsSide>>,
    (shutdown, taking_over): (CancellationToken, Option<ConnId>),
    tracker: &TaskTracker,
) -> io::Result<(Vec<std::thread::JoinHandle<()>>, NetHandle)> {
    // Every connection is a descriptor: the limit must leave room for
    // max_connections, or accept fails before the connection limit bites.
    fd_limit::fit(core.tcp_config().max_connections);
    let udp: Vec<Option<Arc<UdpSocket>>> =
        listeners.iter().map(|l| l.udp.first().cloned()).collect();
    let udp_local = udp
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let bound = s.as_ref()?.local_addr().ok()?;
            Some(capture_local(&core, i, bound))
        })
        .collect();
    // Without a usable resolver (no /etc/resolv.conf and no [dns]
    // nameservers) the gate still serves numeric hosts; names get 503.
    let resolver = match crate::dns::resolve::resolver(&core.dns_config()) {
        Ok(r) => Some(Arc::new(r)),
        Err(e) => {
            tracing::warn!(error = %e, "no DNS resolver: requests to host names get 503");
            None
        }
    };
    if let Some(t) = &tls {
        tracker.spawn(t.clone().watch(shutdown.clone()));
    }
    let net = Arc::new(Net {
        udp,
        udp_local,
        tls,
        tls_on: core.site().listeners.all().iter().map(|l| l.tls).collect(),
        ws_on: core
            .site()
            .listeners
            .all()
            .iter()
            .map(|l| l.ws.clone())
            .collect(),
        resolver,
        core: core.clone(),
        conns: DashMap::new(),
        by_peer: DashMap::new(),
        next: AtomicU64::new(taking_over.unwrap_or(1).max(1)),
        udp_all: Mutex::new(listeners.iter().map(|l| l.udp.clone()).collect()),
        tcp_listeners: Mutex::new(Vec::new()),
        listen: Mutex::new(shutdown.child_token()),
        moving: Mutex::new(handover::Moving::default()),
        moved: Mutex::new(Vec::new()),
        pause: pause::Pause::new(),
        movable: AtomicUsize::new(0),
        udp_running: AtomicUsize::new(0),
        meta: DashMap::new(),
        relay: arc_swap::ArcSwapOption::empty(),
        handed: DashMap::new(),
        shutdown: shutdown.clone(),
        tracker: tracker.clone(),
        runtime: tokio::runtime::Handle::current(),
        lag: Arc::new(RuntimeLag::new(core.overload_deadline(), Instant::now())),
    });
    tracker.spawn(net.lag.clone().run(shutdown.clone()));
    *net.tcp_listeners.lock().unwrap_or_else(|e| e.into_inner()) =
        listeners.into_iter().map(|l| l.tcp.map(Arc::new)).collect();
    // A run taking over reads the listeners once it has the connections
    // (R-GW-3: `NetHandle::start_listening`).
    let threads = if taking_over.is_some() {
        Vec::new()
    } else {
        net.listen()?
    };
    tracker.spawn(sweeper(core, shutdown));
    Ok((threads, NetHandle(net)))
}

/// The local address of a socket of `listener` bound at `bound`, as the
/// capture reports it: a wildcard bind is reported at the listener's
/// advertised address (the kernel does not say which of its addresses a
/// datagram used without a control message per datagram).
fn capture_local(core: &Core, listener: usize, bound: SocketAddr) -> SocketAddr {
    if !bound.ip().is_unspecified() {
        return bound;
    }
    match core.site().listeners.get(listener) {
        Some(l) => SocketAddr::new(l.advertise.ip(), bound.port()),
        None => bound,
    }
}

/// Once a second: the core's sweep, then its work published (R-ST-2).
async fn sweeper(core: Arc<Core>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = Instant::now();
        core.sweep(now);
        core.publish_work(now);
    }
}

/// The sockets and open connections, shared by every task.
struct Net {
    udp: Vec<Option<Arc<UdpSocket>>>,
    /// Each UDP listener's address as the capture reports it
    /// ([`capture_local`]).
    udp_local: Vec<Option<SocketAddr>>,
    /// The gate's TLS, and which listeners' streams use it.
    tls: Option<Arc<TlsSide>>,
    tls_on: Vec<bool>,
    /// The WebSocket options of each listener whose stream is WebSocket.
    ws_on: Vec<Option<WsOptions>>,
    resolver: Option<Arc<TokioResolver>>,
    core: Arc<Core>,
    conns: DashMap<ConnId, mpsc::Sender<Bytes>>,
    by_peer: DashMap<SocketAddr, ConnId>,
    next: AtomicU64,
    /// Every UDP socket of each listener (the supervisor adds some): what
    /// a hand-over passes on (R-GW-3).
    udp_all: Mutex<Vec<Vec<Arc<UdpSocket>>>>,
    /// Each listener's TCP listening socket, shared with its accept loop.
    tcp_listeners: Mutex<Vec<Option<Arc<TcpListener>>>>,
    /// Ends the reading of the listeners (accept loops, UDP workers, the
    /// prober): a child of `shutdown`, cancelled alone by a hand-over.
    listen: Mutex<CancellationToken>,
    /// Ask every plain TCP connection served now to stop reading, then to
    /// stop writing and hand itself over (a fresh pair once used).
    moving: Mutex<handover::Moving>,
    /// The connections that did, for the hand-over to pass on.
    moved: Mutex<Vec<Moved>>,
    /// A hand-over's pause: no message is handled from then on.
    pause: pause::Pause,
    /// Plain TCP and WebSocket connections being served (what `moving`
    /// waits for).
    movable: AtomicUsize,
    /// UDP worker threads running.
    udp_running: AtomicUsize,
    /// Each open connection's listener, peer and whether it is WebSocket.
    meta: DashMap<ConnId, (usize, SocketAddr, bool)>,
    /// Set in an old run once it handed over (R-GW-3): the messages of the
    /// connections it keeps go to the new run, which decides.
    /// Connections this run handed over (not to be told closed).
    handed: DashMap<ConnId, ()>,
    /// One atomic load per message read while unset.
    relay: arc_swap::ArcSwapOption<std::sync::mpsc::Sender<relay::Relayed>>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    runtime: tokio::runtime::Handle,
    /// The stream transports' intake deadline (R-OV-1).
    lag: Arc<RuntimeLag>,
}

impl Net {
    /// Sends what the core decided. Never blocks for long: a UDP send only
    /// waits when the kernel buffer is full, TCP only queues.
    fn execute(self: &Arc<Net>, action: Action) {
        self.execute_for(action, None);
    }

    /// [`Net::execute`] for the action of a received message whose Call-ID
    /// and method the transport read (`fields`, while capture is on): what
    /// the core sends for it is a forward of it or an answer to it, with
    /// the same Call-ID and CSeq method, so its copy needs no scan. The
    /// two answers of a [`Action::SendTwo`] are to two transactions (the
    /// CANCEL and its INVITE): they go without, and are scanned.
    fn execute_for(self: &Arc<Net>, action: Action, fields: Option<Fields>) {
        match action {
            Action::Send(out, bytes) => self.send(out, bytes, fields),
            Action::SendTwo(both) => {
                let [first, second] = *both;
                self.send(first.0, first.1, None);
                self.send(second.0, second.1, None);
            }
            Action::Resolve(query) => self.resolve(query),
            Action::None => {}
        }
    }

    /// Sends one message where `out` says.
    fn send(self: &Arc<Net>, out: Out, bytes: Bytes, fields: Option<Fields>) {
        match out {
            Out::Udp { listener, to } => match self.udp.get(listener).and_then(Option::as_ref) {
                Some(sock) => {
                    let capture = self.core.capture();
                    if let (true, Some(Some(local))) =
                        (capture.is_on(), self.udp_local.get(listener))
                    {
                        capture.sip(listener, Udp, (*local, to), &bytes, fields);
                    }
                    let sent = crate::datagram::send(
                        sock,
                        &bytes,
                        to,
                        nix::sys::socket::MsgFlags::empty(),
                    );
                    if let Err(e) = sent {
                        tracing::debug!(%to, error = %e, "udp send failed");
                        m::dropped("udp_send_error");
                    }
                }
                // A listener without UDP: the message goes over TCP instead.
                None => self.tcp_send(listener, None, to, bytes),
            },
            Out::Tcp { listener, conn, to } => self.tcp_send(listener, conn, to, bytes),
            Out::Flow { conn, to, .. } => match self.conns.get(&conn).map(|t| t.clone()) {
                Some(tx) => {
                    if tx.try_send(bytes).is_err() {
                        m::dropped("tcp_queue_full");
                    }
                }
                // Closed since the core looked: never a new connection
                // toward a subscriber behind NAT.
                None => {
                    tracing::debug!(%to, conn, "flow closed before the send");
                    m::dropped("flow_closed");
                }
            },
        }
    }
}

impl Net {
    /// Runs an RFC 3263 lookup in the background and hands the answer to the
    /// core, which routes the messages that waited for it.
    fn resolve(self: &Arc<Net>, query: DnsQuery) {
        let net = self.clone();
        let _guard = self.runtime.enter();
        self.tracker.spawn(async move {
            let result = match &net.resolver {
                Some(r) => crate::dns::resolve::resolve(r, &query).await,
                None => Err(DnsFailure::Unavailable),
            };
            for action in net.core.resolved(query, result, Instant::now()) {
                net.execute(action);
            }
        });
    }
}

// === TCP ===

impl Net {
    /// Queues bytes for a connection: the given one if still open, else any
    /// open one to `to`, else a new one (RFC 3261 18.2.2: a response whose
    /// connection is gone goes on a new connection to the Via's address).
    ///
    /// On a WebSocket listener only the given connection: the gate cannot
    /// connect to a browser, and another connection from the same address
    /// is another client's.
    fn tcp_send(
        self: &Arc<Net>,
        listener: usize,
        conn: Option<ConnId>,
        to: SocketAddr,
        bytes: Bytes,
    ) {
        if self.ws_for(listener).is_some() {
            match conn.and_then(|c| self.conns.get(&c).map(|t| t.clone())) {
                Some(tx) => {
                    if tx.try_send(bytes).is_err() {
                        m::dropped("tcp_queue_full");
                    }
                }
                None => {
                    tracing::debug!(%to, "WebSocket connection closed before the send");
                    m::dropped("ws_closed");
                }
            }
            return;
        }
        let tx = conn
            .and_then(|c| self.conns.get(&c).map(|t| t.clone()))
            .or_else(|| {
                self.by_peer
                    .get(&to)
                    .and_then(|c| self.conns.get(&*c).map(|t| t.clone()))
            });
        let tx = match tx {
            Some(tx) => tx,
            None => self.connect(listener, to),
        };
        if tx.try_send(bytes).is_err() {
            m::dropped("tcp_queue_full");
        }
    }

    /// Adds a connection to the table; a WebSocket one (`ws`) is counted
    /// in its own gauge and never found by peer address.
    fn register(
        &self,
        listener: usize,
        peer: SocketAddr,
        ws: bool,
    ) -> (ConnId, mpsc::Sender<Bytes>, mpsc::Receiver<Bytes>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.register_as(id, (listener, peer), ws)
    }

    /// [`Net::register`] under a given id (a connection an earlier run
    /// handed over keeps its id, which its flow token names: R-GW-3).
    fn register_as(
        &self,
        id: ConnId,
        (listener, peer): (usize, SocketAddr),
        ws: bool,
    ) -> (ConnId, mpsc::Sender<Bytes>, mpsc::Receiver<Bytes>) {
        let (tx, rx) = mpsc::channel(self.core.tcp_queue().max(1));
        self.conns.insert(id, tx.clone());
        self.meta.insert(id, (listener, peer, ws));
        if ws {
            metrics::gauge!(m::WS_CONNECTIONS).increment(1.0);
        } else {
            self.by_peer.insert(peer, id);
            metrics::gauge!(m::TCP_CONNECTIONS).increment(1.0);
        }
        (id, tx, rx)
    }

    fn unregister(&self, id: ConnId, peer: SocketAddr) {
        self.core.tcp_closed(id);
        self.forget(id);
        if self.conns.remove(&id).is_some() {
            metrics::gauge!(m::TCP_CONNECTIONS).decrement(1.0);
        }
        self.by_peer.remove_if(&peer, |_, v| *v == id);
    }

    /// [`Net::unregister`] or [`Net::unregister_ws`], as `listener` is.
    fn unregister_any(&self, id: ConnId, listener: usize, peer: SocketAddr) {
        if self.ws_for(listener).is_some() {
            self.unregister_ws(id);
        } else {
            self.unregister(id, peer);
        }
    }

    /// [`Net::unregister`] for a WebSocket connection.
    fn unregister_ws(&self, id: ConnId) {
        self.core.tcp_closed(id);
        self.forget(id);
        if self.conns.remove(&id).is_some() {
            metrics::gauge!(m::WS_CONNECTIONS).decrement(1.0);
        }
    }

    /// The WebSocket options of `listener`, when its stream is WebSocket.
    fn ws_for(&self, listener: usize) -> Option<&WsOptions> {
        self.ws_on.get(listener).and_then(Option::as_ref)
    }

    /// Whether `listener` is a ws pool (R-WS-3).
    fn is_ws_pool(&self, listener: usize) -> bool {
        self.core
            .site()
            .listeners
            .all()
            .get(listener)
            .is_some_and(|l| matches!(l.mode, crate::listener::Mode::WsPool { .. }))
    }

    /// Registers a connection to `to` at once (so messages queue behind the
    /// connect instead of racing it) and connects in the background.
    fn connect(self: &Arc<Net>, listener: usize, to: SocketAddr) -> mpsc::Sender<Bytes> {
        let (id, tx, rx) = self.register(listener, to, false);
        tracing::debug!(%to, listener, conn = id, "connecting");
        let local_ip = self
            .core
            .site()
            .listeners
            .get(listener)
            .map(|l| l.advertise.ip());
        let net = self.clone();
        let tracker = self.tracker.clone();
        let _guard = self.runtime.enter();
        tracker.spawn(async move {
            let stream = async {
                let sock = if to.is_ipv4() {
                    TcpSocket::new_v4()?
                } else {
                    TcpSocket::new_v6()?
                };
                if let Some(ip) =
                    local_ip.filter(|ip| ip.is_ipv4() == to.is_ipv4() && !ip.is_unspecified())
                {
                    sock.bind(SocketAddr::new(ip, 0))?;
                }
                tokio::time::timeout(TCP_CONNECT_TIMEOUT, sock.connect(to))
                    .await
                    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))?
            }
            .await;
            match stream {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    tls::serve_opened(net, listener, id, to, s, rx).await;
                }
                Err(e) => {
                    let stream = net.stream_of(listener);
                    net.connect_failed(id, (to, stream), rx, &e)
                }
            }
        });
        tx
    }

    /// A connection the gate opened failed (connect or TLS handshake): an
    /// instance at `to` is held unreachable over that stream, then what
    /// queued behind the connect is answered (RFC 3261 16.9: 503 to the
    /// client) or, for a DNS target, sent to the next target.
    fn connect_failed(
        self: &Arc<Net>,
        id: ConnId,
        (to, stream): (SocketAddr, Stream),
        mut rx: mpsc::Receiver<Bytes>,
        e: &io::Error,
    ) {
        tracing::info!(%to, transport = stream.as_str(), error = %e, "connect failed");
        self.unregister(id, to);
        self.core
            .connect_failed(to, stream, &e.to_string(), Instant::now());
        while let Ok(bytes) = rx.try_recv() {
            let action = self.core.undeliverable(to, bytes, Instant::now());
            self.execute(action);
        }
    }

    /// The stream the gate opens from `listener`: TLS where its streams
    /// are TLS.
    fn stream_of(&self, listener: usize) -> Stream {
        if self.tls_on.get(listener).copied().unwrap_or(false) {
            Stream::Tls
        } else {
            Stream::Tcp
        }
    }
}

async fn accept_loop(
    net: Arc<Net>,
    listener: usize,
    tcp: Arc<TcpListener>,
    shutdown: CancellationToken,
) {
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = tcp.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "tcp accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if net.conns.len() >= net.core.tcp_config().max_connections {
            m::dropped("tcp_connection_limit");
            drop(stream);
            continue;
        }
        // A source refused with `drop` gets no TLS handshake, no WebSocket
        // upgrade, no byte (R-SEC-4).
        if net.core.drops_connection(listener, peer, Instant::now()) {
            m::dropped("source_refused");
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let (id, _tx, rx) = net.register(listener, peer, net.ws_for(listener).is_some());
        // A ws pool's connections carry no SIP: no flow (R-WS-3).
        if !net.is_ws_pool(listener) {
            net.core.tcp_opened(Inbound::Tcp {
                listener,
                conn: id,
                peer,
            });
        }
        net.tracker.spawn(tls::serve_accepted(
            net.clone(),
            listener,
            id,
            peer,
            stream,
            rx,
        ));
    }
}
