//! Wiring: a site config, its drain state and bound sockets become a running
//! gate. The entry point takes what a test can make (sockets bound to
//! `127.0.0.1:0`, a cancellation token), like mini-redis `server::run`.
//!
//! The stop has two steps, like linkerd's drain: [`Gate::drain`] (R-GW-1:
//! `/readyz` fails, new work gets 503, every transaction in flight
//! completes) waits for the transaction table to empty, under a deadline;
//! [`Gate::shutdown`] then cancels the token, which is when the UDP workers
//! and TCP tasks stop reading, and joins them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringsync::config::SiteConfig;
use ringsync::state::DrainState;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::lifecycle::Lifecycle;
use crate::proxy::{Core, CoreError};
use crate::reload::Reloader;
use crate::transport::{self, BoundListener, NetHandle, TlsReload, TlsSide};
use crate::txn::ConnId;

/// How often a stopping gate looks at its transaction table.
/// How long the dialogs a stopping gate carries must have been quiet
/// before it leaves (R-GW-1): four times T1, in which a 2xx is answered by
/// its ACK (or retransmitted twice) and a call that ends as the gate stops
/// sends its BYE. A gate with no call up and no dialog traffic since its
/// stop began waits none of it.
pub(crate) const QUIET: Duration = Duration::from_secs(2);

const DRAIN_POLL: Duration = Duration::from_millis(100);
/// How often a stopping gate logs what it still waits for.
const DRAIN_LOG_EVERY: Duration = Duration::from_secs(5);

/// Why a gate could not start.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// Binding a listener failed: the error names the listener and address.
    #[error(transparent)]
    Bind(#[from] transport::BindError),
    /// The bound listeners could not be started (their worker threads).
    #[error("starting listeners: {0}")]
    Spawn(#[from] std::io::Error),
    /// The config does not make a core.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The `[tls]` certificate, key or CA do not load.
    #[error(transparent)]
    Tls(#[from] ringsync::tls::TlsError),
}

/// A running gate.
#[derive(Debug)]
pub struct Gate {
    core: Arc<Core>,
    config: Arc<SiteConfig>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    threads: Vec<std::thread::JoinHandle<()>>,
    tls: Option<Arc<TlsSide>>,
    reloader: Arc<Reloader>,
    /// The transport, as the upgrade drives it (R-GW-3).
    net: NetHandle,
    /// Each listener's `bind` and `advertise` as the site file says (port
    /// 0 and all), which the next run's file must match to take them.
    file_addrs: Vec<(SocketAddr, SocketAddr)>,
}

/// How [`Gate::drain`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Transactions still waiting for a final response (0: every one
    /// forwarded was answered).
    pub left: usize,
    /// How long the drain took.
    pub waited: Duration,
}

impl Gate {
    /// Binds the site's listeners (port 0 allowed) and starts serving. The
    /// drain state is the caller's: it decides where profiles come from, and
    /// is taken as loaded.
    pub async fn start(
        config: SiteConfig,
        drain: Arc<DrainState>,
        shutdown: CancellationToken,
    ) -> Result<Gate, GateError> {
        let gate = Gate::start_awaiting_view(config, drain, shutdown).await?;
        gate.view_loaded();
        Ok(gate)
    }

    /// The drain view is loaded: the instance states are published from
    /// it, then the gate says ready ([`Lifecycle::view_loaded`]).
    pub fn view_loaded(&self) {
        self.core.view_loaded(std::time::Instant::now());
    }

    /// Like [`Gate::start`], but new work gets 503 and `/readyz` fails until
    /// the caller marks the drain view loaded ([`Lifecycle::view_loaded`]).
    /// The binary starts this way, so in-dialog requests and responses flow
    /// while it reads the profile store.
    pub async fn start_awaiting_view(
        config: SiteConfig,
        drain: Arc<DrainState>,
        shutdown: CancellationToken,
    ) -> Result<Gate, GateError> {
        let file = config.clone();
        let (config, bound) = transport::bind(config).await?;
        Gate::start_bound(Arc::new(config), file, bound, drain, (shutdown, None))
    }

    /// Starts serving on listeners that are already bound; `config` must hold
    /// their actual addresses (as [`transport::bind`] returns it). With
    /// `inherit`, the flow epoch and the first connection id of a run this
    /// one takes over from (R-GW-3): its flow tokens stay valid here.
    pub(crate) fn start_bound(
        config: Arc<SiteConfig>,
        file: SiteConfig,
        bound: Vec<BoundListener>,
        drain: Arc<DrainState>,
        (shutdown, inherit): (CancellationToken, Option<(u32, ConnId)>),
    ) -> Result<Gate, GateError> {
        let lifecycle = Lifecycle::new();
        let views = drain.subscribe();
        let core = Arc::new(Core::build(
            config.clone(),
            drain,
            config.overload.max_transactions,
            lifecycle.clone(),
        )?);
        let tls = match &config.tls {
            Some(t) => Some(Arc::new(TlsSide::new(t)?)),
            None => None,
        };
        let taking_over = inherit.map(|(epoch, first_conn)| {
            core.inherit_flow_epoch(epoch);
            first_conn
        });
        let tracker = TaskTracker::new();
        let (threads, net) = transport::spawn(
            core.clone(),
            bound,
            tls.clone(),
            (shutdown.clone(), taking_over),
            &tracker,
        )?;
        tracker.spawn(crate::view_log::run(views, shutdown.clone()));
        tracker.close();
        lifecycle.listeners_bound();
        for l in &config.listeners {
            tracing::info!(listener = %l.name, bind = %l.bind, advertise = %l.advertise, transports = ?l.transports, mode = ?l.mode, leg = ?l.leg, "listening");
        }
        let file_addrs = file
            .listeners
            .iter()
            .map(|l| (l.bind, l.advertise))
            .collect();
        Ok(Gate {
            reloader: Arc::new(Reloader::new(core.clone(), file)),
            net,
            file_addrs,
            core,
            config,
            shutdown,
            tracker,
            threads,
            tls,
        })
    }

    /// A handle that reloads the `[tls]` certificate (the binary calls it
    /// on SIGHUP); `None` without `[tls]`.
    pub fn tls_reload(&self) -> Option<TlsReload> {
        self.tls.clone().map(TlsReload)
    }

    /// What reloads the site file (the binary calls it on SIGHUP).
    pub fn reloader(&self) -> Arc<Reloader> {
        self.reloader.clone()
    }

    /// The config it started with, at the addresses actually bound (a
    /// reload's is [`Core::config`]).
    pub fn config(&self) -> &Arc<SiteConfig> {
        &self.config
    }

    /// The routing core (work counts, view).
    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// The transport (R-GW-3).
    pub(crate) fn net(&self) -> &NetHandle {
        &self.net
    }

    /// Its open stream connections (TCP, TLS, WebSocket) of every kind:
    /// what the old run keeps after an upgrade (R-GW-3).
    pub fn open_connections(&self) -> usize {
        self.net.open_connections()
    }

    /// Starts reading the listeners of a gate that took over (R-GW-3).
    pub(crate) fn start_listening(&mut self) -> std::io::Result<()> {
        let threads = self.net.start_listening()?;
        self.threads.extend(threads);
        Ok(())
    }

    /// Each listener's `bind` and `advertise` as its site file says.
    pub(crate) fn file_addrs(&self) -> &[(SocketAddr, SocketAddr)] {
        &self.file_addrs
    }

    /// The gate's phase (R-GW-1).
    pub fn lifecycle(&self) -> &Arc<Lifecycle> {
        self.core.lifecycle()
    }

    /// The gate's own stop up to its last transaction (R-GW-1): from now on
    /// `/readyz` fails and new work (new dialogs, registrations,
    /// subscriptions) gets 503 with Retry-After, while in-dialog requests,
    /// CANCEL, ACK, responses and retransmissions keep flowing and the
    /// health probes keep running. Returns once nothing the gate forwarded
    /// waits for a final response ([`crate::Core::in_flight`]: completed
    /// transactions kept for their retransmissions do not hold it) and the
    /// dialogs it carries have been quiet for [`QUIET`] ([`crate::Core::is_quiet`]:
    /// a 2xx waiting for its ACK, a short call's BYE), or at `deadline`. A
    /// gate with no call up and nothing going on returns at once. Sockets stay open:
    /// [`Gate::shutdown`] closes them.
    pub async fn drain(&self, deadline: Duration) -> Drained {
        let start = Instant::now();
        self.lifecycle().stop();
        let until = tokio::time::Instant::from_std(start + deadline);
        let mut tick = tokio::time::interval(DRAIN_POLL);
        let mut next_log = start + DRAIN_LOG_EVERY;
        loop {
            let left = self.core.in_flight();
            let quiet = self.core.is_quiet(start, Instant::now(), QUIET);
            if (left == 0 && quiet) || tokio::time::Instant::now() >= until {
                return Drained {
                    left,
                    waited: start.elapsed(),
                };
            }
            if Instant::now() >= next_log {
                tracing::info!(in_flight = left, "stopping: waiting for final responses");
                next_log += DRAIN_LOG_EVERY;
            }
            tokio::select! {
                _ = tick.tick() => {}
                _ = tokio::time::sleep_until(until) => {}
            }
        }
    }

    /// Stops reading (UDP workers, TCP connections, probes, the sweeper)
    /// and waits for the tasks and threads to end, at most `deadline`.
    /// Returns false if something was still running at the deadline.
    pub async fn shutdown(self, deadline: Duration) -> bool {
        self.shutdown.cancel();
        let threads = self.threads;
        let join = async {
            self.tracker.wait().await;
            // UDP workers notice the token within their poll interval.
            let _ = tokio::task::spawn_blocking(move || {
                threads.into_iter().for_each(|t| drop(t.join()))
            })
            .await;
        };
        let joined = tokio::time::timeout(deadline, join).await.is_ok();
        self.core.lifecycle().stopped();
        joined
    }
}
