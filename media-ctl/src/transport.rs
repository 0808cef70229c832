//! The thin I/O layer: UDP sockets and timers feeding the [`Controller`].
//!
//! One socket receives the clients' commands (the `ng_bind` address);
//! one socket per address family talks to the mgs, so every answer from an
//! mg comes back to a socket that only mgs use. Timers drive the core's
//! timeouts, idle sweeps and health rounds; a watcher starts drain ramps
//! the moment a new drain view is published.

use std::io;
use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ringsync::state::DrainState;
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::controller::{Controller, Decision, Out, Settings};

/// Receive buffer: the largest UDP payload.
const BUF: usize = 65_536;
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
    controller: Arc<Controller>,
    ng_addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

struct Sockets {
    client: Arc<UdpSocket>,
    v4: Option<Arc<UdpSocket>>,
    v6: Option<Arc<UdpSocket>>,
}

impl Sockets {
    fn to_mg(&self, addr: SocketAddr) -> Option<&Arc<UdpSocket>> {
        if addr.is_ipv4() {
            self.v4.as_ref()
        } else {
            self.v6.as_ref()
        }
    }

    async fn send(&self, out: Out) {
        let (sock, to, d) = match &out {
            Out::Client(to, d) => (Some(&self.client), *to, d),
            Out::Mg(to, d) => (self.to_mg(*to), *to, d),
        };
        if let Some(s) = sock {
            if let Err(e) = s.send_to(d, to).await {
                tracing::debug!(%to, error = %e, "send failed");
                crate::metrics::dropped("send_failed");
            }
        }
    }
}

impl MediaCtl {
    /// Binds `media.ng_bind` of the site and starts.
    pub async fn start(
        drain: Arc<DrainState>,
        shutdown: CancellationToken,
    ) -> Result<MediaCtl, StartError> {
        let bind = drain.config().media.ng_bind;
        let client = StdUdpSocket::bind(bind).map_err(|source| StartError::Io {
            what: format!("binding ng address {bind}"),
            source,
        })?;
        MediaCtl::start_bound(drain, client, shutdown)
    }

    /// Starts on an already bound ng socket (tests bind `127.0.0.1:0`).
    pub fn start_bound(
        drain: Arc<DrainState>,
        client: StdUdpSocket,
        shutdown: CancellationToken,
    ) -> Result<MediaCtl, StartError> {
        let io = |what: &str| {
            let what = what.to_owned();
            move |source| StartError::Io { what, source }
        };
        let ng_addr = client.local_addr().map_err(io("ng socket"))?;
        client.set_nonblocking(true).map_err(io("ng socket"))?;
        let client = Arc::new(UdpSocket::from_std(client).map_err(io("ng socket"))?);
        let config = drain.config().clone();
        let family = |v4: bool| {
            config
                .instances
                .iter()
                .filter_map(|i| i.ng)
                .any(|a| a.is_ipv4() == v4)
        };
        let upstream = |addr: &str| -> Result<Arc<UdpSocket>, StartError> {
            let s = StdUdpSocket::bind(addr).map_err(io("upstream socket"))?;
            s.set_nonblocking(true).map_err(io("upstream socket"))?;
            Ok(Arc::new(
                UdpSocket::from_std(s).map_err(io("upstream socket"))?,
            ))
        };
        let sockets = Arc::new(Sockets {
            client,
            v4: family(true).then(|| upstream("0.0.0.0:0")).transpose()?,
            v6: family(false).then(|| upstream("[::]:0")).transpose()?,
        });
        let now = tokio::time::Instant::now().into_std();
        let controller = Arc::new(Controller::new(drain, Settings::of(&config), now));
        for ip in controller.pool().ambiguous_sources() {
            tracing::warn!(%ip, "ng_source of sg/esg on several servers: commands from it get no bgmg");
        }
        let tracker = TaskTracker::new();
        tracker.spawn(client_loop(
            controller.clone(),
            sockets.clone(),
            shutdown.clone(),
        ));
        for s in [&sockets.v4, &sockets.v6].into_iter().flatten() {
            tracker.spawn(upstream_loop(
                controller.clone(),
                sockets.clone(),
                s.clone(),
                shutdown.clone(),
            ));
        }
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
        tracker.close();
        tracing::info!(%ng_addr, mgs = controller.pool().members().len(), "media-ctl listening for ng commands");
        Ok(MediaCtl {
            controller,
            ng_addr,
            stopping: Arc::new(AtomicBool::new(false)),
            shutdown,
            tracker,
        })
    }

    /// The core (status, work, call table).
    pub fn controller(&self) -> &Arc<Controller> {
        &self.controller
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
        tokio::time::timeout(left.max(Duration::from_millis(200)), self.tracker.wait())
            .await
            .is_ok()
    }
}

fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

async fn client_loop(c: Arc<Controller>, s: Arc<Sockets>, shutdown: CancellationToken) {
    let mut buf = vec![0u8; BUF];
    loop {
        let (n, from) = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = s.client.recv_from(&mut buf) => match r {
                Ok(r) => r,
                Err(e) => {
                    // ICMP errors surface here on some systems; keep serving.
                    tracing::debug!(error = %e, "ng receive error");
                    continue;
                }
            },
        };
        match c.handle(from, &buf[..n], now()) {
            Decision::Reply(d) => s.send(Out::Client(from, d)).await,
            Decision::Send(sends) => {
                for (to, d) in sends {
                    s.send(Out::Mg(to, d)).await;
                }
            }
            Decision::Drop(_) => {}
        }
    }
}

async fn upstream_loop(
    c: Arc<Controller>,
    s: Arc<Sockets>,
    sock: Arc<UdpSocket>,
    shutdown: CancellationToken,
) {
    let mut buf = vec![0u8; BUF];
    loop {
        let (n, from) = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = sock.recv_from(&mut buf) => match r {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(error = %e, "upstream receive error");
                    continue;
                }
            },
        };
        for out in c.on_mg_datagram(from, &buf[..n], now()) {
            s.send(out).await;
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
            s.send(out).await;
        }
        if t.duration_since(last_sweep) >= SWEEP {
            last_sweep = t;
            for out in c.sweep(t) {
                s.send(out).await;
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
            s.send(out).await;
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
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = rx.changed() => if changed.is_err() { return },
        }
        rx.borrow_and_update();
        c.observe(now());
    }
}
