//! The thin I/O layer: UDP sockets and timers feeding the [`Controller`].
//!
//! One socket receives the clients' commands (the `ng_bind` address); one
//! socket per address family talks to the mgs, so every answer from an mg
//! comes back to a socket that only mgs use. Each of these sockets is read
//! by its own thread in a blocking `recv_from`: one system call per
//! datagram, where an async loop pays a second `recv` (EAGAIN) and an
//! `epoll_wait` (measured: a third less CPU per command). Batched receive
//! and send (`recvmmsg`/`sendmmsg`) were tried and taken out: at 2000
//! cycles/s a receive rarely found more than one datagram queued, and the
//! batched build cost 1.03x this one (docs/benchmarks.md, "media-ctl: in
//! front of a real rtpengine", mg-bench `--before`). Timers (timeouts, idle
//! sweeps, health rounds) and the watcher that starts drain ramps when a new
//! view is published are tokio tasks.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ringsync::capture::{Capture, Names};
use ringsync::state::DrainState;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::controller::{Controller, Decision, Out, Settings};

/// Receive buffer: the largest UDP payload.
const BUF: usize = 65_536;
/// How long a stop waits for the I/O threads at least.
const POLL: Duration = Duration::from_millis(100);
/// How often pending commands are checked for timeouts.
const TICK: Duration = Duration::from_millis(20);
/// How often idle calls are swept and gauges refreshed.
const SWEEP: Duration = Duration::from_secs(1);
/// Census period when pinging is off.
const CENSUS_ONLY: Duration = Duration::from_secs(1);

/// Why media-ctl could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Binding or configuring a socket failed.
    #[error("{what}: {source}")]
    Io {
        /// Which socket.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// A running media-ctl.
#[derive(Debug)]
pub struct MediaCtl {
    /// The ng traffic's copies to the `[capture]` collectors.
    capture: Arc<Capture>,
    controller: Arc<Controller>,
    ng_addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    threads: Vec<JoinHandle<()>>,
}

struct Sockets {
    /// Set before the wake-up datagrams go out (a plain load in the
    /// receive loops; the token's check takes a lock).
    stopped: AtomicBool,
    client: UdpSocket,
    v4: Option<UdpSocket>,
    v6: Option<UdpSocket>,
    /// Copies of every ng datagram to the `[capture]` collectors.
    capture: Arc<Capture>,
    /// The sockets' addresses as the capture reports them: the ng
    /// socket's, and each upstream one's (its port at the ng address when
    /// it is bound to the wildcard).
    local: Local,
}

/// See [`Sockets::local`].
struct Local {
    client: SocketAddr,
    v4: SocketAddr,
    v6: SocketAddr,
}

impl Sockets {
    fn to_mg(&self, addr: SocketAddr) -> Option<&UdpSocket> {
        if addr.is_ipv4() {
            self.v4.as_ref()
        } else {
            self.v6.as_ref()
        }
    }

    /// Sends one datagram. UDP sends do not wait for the peer; a full
    /// socket buffer is the only way this blocks, briefly.
    fn send(&self, out: &Out) {
        let (sock, to, d) = match out {
            Out::Client(to, d) => (Some(&self.client), *to, d),
            Out::Mg(to, d) => (self.to_mg(*to), *to, d),
        };
        if let Some(s) = sock {
            let from = match out {
                Out::Client(..) => self.local.client,
                Out::Mg(..) if to.is_ipv4() => self.local.v4,
                Out::Mg(..) => self.local.v6,
            };
            self.capture.log((from, to), d);
            if let Err(e) = s.send_to(d, to) {
                tracing::debug!(%to, error = %e, "send failed");
                crate::metrics::dropped("send_failed");
            }
        }
    }
}

impl MediaCtl {
    /// Binds `media.ng_bind` of the site and starts. Call from a tokio
    /// runtime (the timers run on it).
    pub async fn start(
        drain: Arc<DrainState>,
        shutdown: CancellationToken,
    ) -> Result<MediaCtl, StartError> {
        let bind = drain.config().media.ng_bind;
        let client = UdpSocket::bind(bind).map_err(|source| StartError::Io {
            what: format!("binding ng address {bind}"),
            source,
        })?;
        MediaCtl::start_bound(drain, client, shutdown)
    }

    /// Starts on an already bound ng socket (tests bind `127.0.0.1:0`).
    /// Call from a tokio runtime (the timers run on it).
    pub fn start_bound(
        drain: Arc<DrainState>,
        client: UdpSocket,
        shutdown: CancellationToken,
    ) -> Result<MediaCtl, StartError> {
        let io = |what: &str| {
            let what = what.to_owned();
            move |source| StartError::Io { what, source }
        };
        let ng_addr = client.local_addr().map_err(io("ng socket"))?;
        let config = drain.config().clone();
        let family = |v4: bool| {
            config
                .instances
                .iter()
                .filter_map(|i| i.ng)
                .any(|a| a.is_ipv4() == v4)
        };
        let upstream = |addr: &str| UdpSocket::bind(addr).map_err(io("upstream socket"));
        let v4 = family(true).then(|| upstream("0.0.0.0:0")).transpose()?;
        let v6 = family(false).then(|| upstream("[::]:0")).transpose()?;
        let at = |s: &Option<UdpSocket>, any: SocketAddr| {
            let bound = s.as_ref().and_then(|s| s.local_addr().ok()).unwrap_or(any);
            match (
                ng_addr.ip().is_unspecified(),
                ng_addr.is_ipv4() == bound.is_ipv4(),
            ) {
                (false, true) => SocketAddr::new(ng_addr.ip(), bound.port()),
                _ => bound,
            }
        };
        let local = Local {
            client: ng_addr,
            v4: at(&v4, SocketAddr::from(([0, 0, 0, 0], 0))),
            v6: at(&v6, SocketAddr::from(([0u16; 8], 0))),
        };
        let capture = Arc::new(Capture::for_logs(
            Names {
                sent: crate::metrics::CAPTURE_SENT,
                dropped: crate::metrics::CAPTURE_DROPPED,
            },
            ng_ids,
        ));
        capture.apply(&config);
        for result in ["applied", "invalid"] {
            metrics::counter!(crate::metrics::RELOADS, "result" => result).increment(0);
        }
        let sockets = Arc::new(Sockets {
            stopped: AtomicBool::new(false),
            client,
            v4,
            v6,
            capture: capture.clone(),
            local,
        });
        let now = tokio::time::Instant::now().into_std();
        let controller = Arc::new(Controller::new(drain, Settings::of(&config), now));
        for ip in controller.pool().ambiguous_sources() {
            tracing::warn!(%ip, "ng_source of sg/esg on several servers: commands from it get no bgmg");
        }
        let mut threads = Vec::new();
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(f)
                .map_err(io("spawning an I/O thread"))
        };
        {
            let (c, s) = (controller.clone(), sockets.clone());
            threads.push(spawn("ng-clients", Box::new(move || client_loop(&c, &s)))?);
        }
        for v4 in [true, false] {
            if (if v4 { &sockets.v4 } else { &sockets.v6 }).is_none() {
                continue;
            }
            let (c, s) = (controller.clone(), sockets.clone());
            threads.push(spawn(
                "ng-mgs",
                Box::new(move || upstream_loop(&c, &s, v4)),
            )?);
        }
        let tracker = TaskTracker::new();
        tracker.spawn(timer_loop(
            controller.clone(),
            sockets.clone(),
            shutdown.clone(),
        ));
        tracker.spawn(health_loop(
            controller.clone(),
            sockets.clone(),
            shutdown.clone(),
        ));
        tracker.spawn(view_loop(controller.clone(), shutdown.clone()));
        tracker.spawn(wake_on_stop(sockets.clone(), shutdown.clone()));
        tracker.close();
        tracing::info!(%ng_addr, mgs = controller.pool().members().len(), "media-ctl listening for ng commands");
        Ok(MediaCtl {
            capture,
            controller,
            ng_addr,
            stopping: Arc::new(AtomicBool::new(false)),
            shutdown,
            tracker,
            threads,
        })
    }

    /// The core (status, work, call table).
    pub fn controller(&self) -> &Arc<Controller> {
        &self.controller
    }

    /// The capture of the ng traffic (`[capture]`): the binary names the
    /// node with [`Capture::set_node`].
    pub fn capture(&self) -> &Arc<Capture> {
        &self.capture
    }

    /// SIGHUP: reads the site file at `path` again and puts its
    /// `[capture]` in force as sip-gate does (a new sender replaces the
    /// running one, which sends what it holds; without the section,
    /// capture stops). `[capture]` is the one section media-ctl takes on
    /// reload: the others apply at its next start. A file that does not
    /// load changes nothing. Counted in `mediactl_config_reloads_total`.
    pub fn reload(&self, path: &std::path::Path) -> Result<(), ringsync::config::ConfigError> {
        let count = |result: &'static str| {
            metrics::counter!(crate::metrics::RELOADS, "result" => result).increment(1);
        };
        match ringsync::config::SiteConfig::load(path) {
            Ok(config) => {
                self.capture.apply(&Arc::new(config));
                count("applied");
                tracing::info!(
                    file = %path.display(),
                    "reloaded: [capture] in force (other sections apply at the next start)"
                );
                Ok(())
            }
            Err(e) => {
                count("invalid");
                tracing::error!(error = %e, "reload: the site file does not load; nothing changed");
                Err(e)
            }
        }
    }

    /// The address the ng socket is bound to.
    pub fn ng_addr(&self) -> SocketAddr {
        self.ng_addr
    }

    /// Set once a stop has begun (`/readyz` then fails).
    pub fn stopping(&self) -> Arc<AtomicBool> {
        self.stopping.clone()
    }

    /// Graceful stop: `/readyz` fails at once, commands already sent to an
    /// mg get their answers relayed for up to `deadline`, then everything
    /// stops. False if tasks were still running at the deadline.
    pub async fn shutdown(self, deadline: Duration) -> bool {
        self.stopping.store(true, Ordering::Relaxed);
        let until = tokio::time::Instant::now() + deadline;
        while self.controller.pending() > 0 && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.shutdown.cancel();
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        let threads = self.threads;
        let join = async {
            self.tracker.wait().await;
            // The I/O threads wake on the datagram `wake_on_stop` sends.
            let _ = tokio::task::spawn_blocking(move || {
                threads.into_iter().for_each(|t| drop(t.join()))
            })
            .await;
        };
        tokio::time::timeout(left.max(POLL * 3), join).await.is_ok()
    }
}

/// The key and id of an ng datagram for the capture (off the message
/// path): its cookie, and the call-id a command carries (an answer has
/// none: it gets its command's, by cookie).
fn ng_ids(datagram: &[u8]) -> (Option<&[u8]>, Option<&[u8]>) {
    let Ok((cookie, payload)) = crate::ng::split_cookie(datagram) else {
        return (None, None);
    };
    let call_id = crate::ng::DictView::parse(payload)
        .ok()
        .and_then(|d| d.bytes("call-id"));
    (Some(cookie), call_id)
}

fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// The receive threads block without a timeout (a timer per receive
/// costs measurably); on stop, an empty datagram to each socket wakes them.
async fn wake_on_stop(s: Arc<Sockets>, stop: CancellationToken) {
    stop.cancelled().await;
    s.stopped.store(true, Ordering::Release);
    for sock in [Some(&s.client), s.v4.as_ref(), s.v6.as_ref()]
        .into_iter()
        .flatten()
    {
        let Ok(mut addr) = sock.local_addr() else {
            continue;
        };
        if addr.ip().is_unspecified() {
            addr.set_ip(if addr.is_ipv4() {
                std::net::Ipv4Addr::LOCALHOST.into()
            } else {
                std::net::Ipv6Addr::LOCALHOST.into()
            });
        }
        let _ = sock.send_to(&[], addr);
    }
}

fn client_loop(c: &Controller, s: &Sockets) {
    let mut buf = vec![0u8; BUF];
    loop {
        let r = s.client.recv_from(&mut buf);
        if s.stopped.load(Ordering::Acquire) {
            return;
        }
        let (n, from) = match r {
            Ok(r) => r,
            // ICMP errors some systems report here: keep serving.
            Err(_) => continue,
        };
        s.capture.log((from, s.local.client), &buf[..n]);
        match c.handle(from, &buf[..n], now()) {
            Decision::Reply(d) => s.send(&Out::Client(from, d)),
            Decision::Send(sends) => {
                for (to, d) in sends {
                    s.send(&Out::Mg(to, d));
                }
            }
            Decision::Drop(_) => {}
        }
    }
}

fn upstream_loop(c: &Controller, s: &Sockets, v4: bool) {
    let Some(sock) = (if v4 { &s.v4 } else { &s.v6 }) else {
        return;
    };
    let mut buf = vec![0u8; BUF];
    loop {
        let r = sock.recv_from(&mut buf);
        if s.stopped.load(Ordering::Acquire) {
            return;
        }
        let Ok((n, from)) = r else {
            continue;
        };
        let to = if v4 { s.local.v4 } else { s.local.v6 };
        s.capture.log((from, to), &buf[..n]);
        for out in c.on_mg_datagram(from, &buf[..n], now()) {
            s.send(&out);
        }
    }
}

async fn timer_loop(c: Arc<Controller>, s: Arc<Sockets>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_sweep = now();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let t = now();
        for out in c.tick(t) {
            s.send(&out);
        }
        if t.duration_since(last_sweep) >= SWEEP {
            last_sweep = t;
            for out in c.sweep(t) {
                s.send(&out);
            }
            c.publish_gauges(t);
        }
    }
}

async fn health_loop(c: Arc<Controller>, s: Arc<Sockets>, shutdown: CancellationToken) {
    let media = c.config().media.clone();
    let (period, ping) = match media.ping_interval() {
        Some(p) => (p, true),
        None => (CENSUS_ONLY, false),
    };
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seq = 0u64;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        seq += 1;
        for out in c.ping_round(seq, ping, now()) {
            s.send(&out);
        }
        if !ping {
            continue;
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(media.ping_timeout()) => {}
        }
        c.ping_verdict(seq);
    }
}

async fn view_loop(c: Arc<Controller>, shutdown: CancellationToken) {
    let mut rx = c.drain().subscribe();
    let mut zone = rx.borrow().drain_zone().clone();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = rx.changed() => if changed.is_err() { return },
        }
        let now_zone = rx.borrow_and_update().drain_zone().clone();
        c.observe(now());
        // Health changes publish views too; only a new drain zone is news here.
        if now_zone != zone {
            tracing::info!(
                drain_zone = ?now_zone,
                window_s = c.config().timers.mg_drain_window_s,
                "drain zone changed: mgs entering or leaving it start their ramp"
            );
            zone = now_zone;
        }
    }
}
