//! The gate as a node of its site: what the `sip-gate` binary does around
//! the [`Gate`] between start-up and exit, as library code its tests call.
//! The admin endpoint and the node's record in the store ([`serve_admin`],
//! [`publish_work`]), the reload on SIGHUP ([`reload_on_sighup`]), the work
//! book carried over a graceful restart ([`take_snapshot`],
//! [`restore_snapshot`], [`save_snapshot`]) and the stop sequence
//! ([`stop`], [`shut_down`]).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::PrometheusHandle;
use ringsync::daemon::Attached;
use ringsync::node::{NodeIdentity, NodeRole};
use ringsync::notify::Notifier;
use ringsync::signals::{Signal, Signals};
use ringsync::work::RunInfo;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admin::NodeInfo;
use crate::reload::Reloader;
use crate::upgrade::Upgrader;
use crate::{Core, Gate, WorkSnapshot};

/// How long the last step of a stop may take (threads and tasks joined).
pub const JOIN_DEADLINE: Duration = Duration::from_secs(3);

/// The admin endpoint (/metrics, /v1/work, /readyz) as served.
pub struct Admin {
    /// The server, until the gate's shutdown token or [`Admin::stop`].
    pub task: JoinHandle<std::io::Result<()>>,
    /// The node it speaks for.
    pub node: NodeInfo,
    /// The address bound.
    pub addr: SocketAddr,
    /// Its listening socket, which an upgrade passes on (R-GW-3).
    pub socket: Arc<std::net::TcpListener>,
    /// Ends this run's serving of it (the next run serves it: R-GW-3).
    pub stop: CancellationToken,
}

/// Binds the admin endpoint at `addr` and serves it until `shutdown`; the
/// node is named `name`, or by the address bound, and reports `run`.
pub async fn serve_admin(
    gate: &Gate,
    addr: SocketAddr,
    name: Option<String>,
    run: RunInfo,
    prometheus: Option<PrometheusHandle>,
    shutdown: &CancellationToken,
) -> std::io::Result<Admin> {
    let listener = tokio::net::TcpListener::bind(addr).await?.into_std()?;
    serve_admin_on(gate, listener, name, run, prometheus, shutdown)
}

/// [`serve_admin`] on a socket already bound (one an earlier run handed
/// over, R-GW-3).
pub fn serve_admin_on(
    gate: &Gate,
    listener: std::net::TcpListener,
    name: Option<String>,
    run: RunInfo,
    prometheus: Option<PrometheusHandle>,
    shutdown: &CancellationToken,
) -> std::io::Result<Admin> {
    listener.set_nonblocking(true)?;
    let socket = Arc::new(listener.try_clone()?);
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let addr = listener.local_addr()?;
    let node = NodeInfo {
        name: name.unwrap_or_else(|| addr.to_string()),
        started_ms: run.since_ms,
        run: Some(run),
    };
    tracing::info!(admin_addr = %addr, node = %node.name, "admin endpoint (/metrics, /v1/work, /readyz)");
    let stop = shutdown.child_token();
    let task = tokio::spawn(crate::admin::serve(
        listener,
        gate.core().clone(),
        node.clone(),
        prometheus,
        stop.clone(),
    ));
    Ok(Admin {
        task,
        node,
        addr,
        socket,
        stop,
    })
}

/// Publishes the gate's work report in the store's node registry (on an
/// etcd site; the embedded store keeps none), as the node `admin` serves.
pub fn publish_work(store: &mut Attached, core: &Arc<Core>, admin: &Admin) {
    let identity = NodeIdentity {
        node: admin.node.name.clone(),
        role: NodeRole::Gate,
        address: admin.addr.to_string(),
        started_ms: admin.node.started_ms,
    };
    let (reporter, node) = (core.clone(), admin.node.clone());
    store.publish(identity, move || {
        Some(crate::admin::report(&reporter, &node))
    });
}

/// The work snapshot a graceful stop left at `path`, read and deleted;
/// `None` (and why, in the log) when there is none or it cannot be read.
pub fn take_snapshot(path: &Path) -> Option<WorkSnapshot> {
    match WorkSnapshot::take(path) {
        Ok(Some(s)) => Some(s),
        Ok(None) => {
            tracing::info!(path = %path.display(), "no work snapshot: work set up before this start is unknown for the [work] window");
            None
        }
        Err(e) => {
            tracing::warn!("{e}; work set up before this start is unknown for the [work] window");
            None
        }
    }
}

/// Takes the snapshot read at start, if any, into the work book; a
/// snapshot the book refuses is logged and left out.
pub fn restore_snapshot(core: &Core, snapshot: Option<WorkSnapshot>) {
    let Some(s) = snapshot else { return };
    match core.restore_work(&s, Instant::now()) {
        Ok(()) => {
            let (calls, registrations, subscriptions) = s.sizes();
            tracing::info!(
                calls,
                registrations,
                subscriptions,
                "work book restored from its snapshot"
            );
        }
        Err(e) => {
            tracing::warn!("{e}; work set up before this start is unknown for the [work] window")
        }
    }
}

/// Saves the work book after the stop to `path`, if one is configured and
/// the stop was `clean` (nothing can change the book any more).
pub fn save_snapshot(core: &Core, path: Option<&Path>, clean: bool) {
    let Some(path) = path else { return };
    if !clean {
        tracing::warn!(
            "work snapshot not written: the threads did not end in time, messages may still be in flight"
        );
        return;
    }
    let saved = core
        .work_snapshot(Instant::now())
        .and_then(|s| s.save(path).map(|()| s.sizes()));
    match saved {
        Ok((calls, registrations, subscriptions)) => {
            tracing::info!(path = %path.display(), calls, registrations, subscriptions, "work snapshot written")
        }
        Err(e) => tracing::warn!("{e}"),
    }
}

/// The gate's own stop (R-GW-1): `/readyz` fails and new work gets 503 at
/// once, the transactions in flight get their final responses, and the gate
/// exits when none waits for one (completed transactions kept for their
/// retransmissions do not hold it), at `deadline`, or at once on a second
/// signal. True when its threads and tasks then ended in time (nothing can
/// change the work book).
pub async fn stop(gate: Gate, signals: &mut Signals, signal: Signal, deadline: Duration) -> bool {
    tracing::info!(
        signal = signal.name(),
        deadline_s = deadline.as_secs(),
        in_flight = gate.core().in_flight(),
        "stopping (R-GW-1): /readyz fails, new work gets 503, waiting for the transactions in flight"
    );
    tokio::select! {
        drained = gate.drain(deadline) => {
            let waited_ms = drained.waited.as_millis() as u64;
            if drained.left == 0 {
                tracing::info!(waited_ms, "stopped: no transaction left in flight");
            } else {
                tracing::warn!(
                    waited_ms,
                    in_flight = drained.left,
                    "stopped: drain deadline reached with transactions left in flight"
                );
            }
        }
        second = signals.recv() => {
            tracing::warn!(
                signal = second.name(),
                in_flight = gate.core().in_flight(),
                "stopped at once: second signal"
            );
        }
    }
    let joined = gate.shutdown(JOIN_DEADLINE).await;
    if !joined {
        tracing::warn!("some tasks did not finish before the join deadline");
    }
    joined
}

/// Keeps systemd's `STATUS=` to what the stopping gate still waits for,
/// once a second until the process ends: the transactions in flight, the
/// calls up and the time left to the deadline (issue 38: a status that
/// stays on the count the stop began with tells an operator nothing).
pub fn status_while_stopping(
    notify: Notifier,
    core: Arc<Core>,
    deadline: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let start = tokio::time::Instant::now();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let left = deadline.saturating_sub(start.elapsed()).as_secs();
            notify.phase(format!(
                "stopping: {} transaction(s) in flight, {} call(s) up, deadline in {left}s",
                core.in_flight(),
                core.work().calls_live()
            ));
        }
    })
}

/// The node's stop sequence, in its order: the gate's [`stop`] (its
/// shutdown also ends the admin endpoint), then the node's record withdrawn
/// from `store` (after the drain, so the record holds the work left:
/// R-ST-3), then the work book saved to `snapshot` if the stop was clean.
/// Returns whether it was.
pub async fn shut_down(
    gate: Gate,
    admin: Admin,
    store: Option<Attached>,
    signals: &mut Signals,
    signal: Signal,
    deadline: Duration,
    snapshot: Option<&Path>,
) -> bool {
    let core = gate.core().clone();
    let clean = stop(gate, signals, signal, deadline).await;
    let _ = admin.task.await;
    if let Some(store) = store {
        store.close().await;
    }
    save_snapshot(&core, snapshot, clean);
    clean
}

/// Upgrades on each SIGUSR2 (R-GW-3), logging the outcome; a SIGUSR2
/// during an upgrade is refused (logged), one after the hand-over too.
/// Without `upgrader` (no upgrade socket) each is logged and ignored.
pub fn upgrade_on_sigusr2(upgrader: Option<Arc<Upgrader>>, mut usr2: Signals) {
    tokio::spawn(async move {
        loop {
            let signal = usr2.recv().await;
            let Some(u) = upgrader.clone() else {
                tracing::warn!(%signal, "no upgrade socket: not upgrading");
                continue;
            };
            // Its own task: a second signal during it is answered at once.
            tokio::spawn(async move {
                tracing::info!(%signal, "upgrading (R-GW-3)");
                match u.upgrade().await {
                    Ok(pid) => tracing::info!(pid, "upgraded: the new run serves"),
                    Err(e) => tracing::error!(error = %e, "upgrade not done: this run serves on"),
                }
            });
        }
    });
}

/// The old run after a hand-over (R-GW-3): it keeps the TLS and WSS
/// connections it holds (plain TCP and WebSocket ones moved) (their messages relayed to the new run `pid`,
/// which decides) until the last closes, `keep` has passed, a stop signal,
/// or the new run is gone (`lost`); then stops its gate (a WebSocket gets its 1001 close, a TLS
/// connection its close_notify) and returns.
pub async fn keep_after_upgrade(
    gate: Gate,
    signals: &mut Signals,
    (pid, lost): (u32, CancellationToken),
    keep: Duration,
) {
    let until = tokio::time::Instant::now() + keep;
    let kept = gate.open_connections();
    tracing::info!(
        new_run = pid,
        kept,
        keep_s = keep.as_secs(),
        "handed over: keeping this run's TLS and WSS connections until they close"
    );
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            signal = signals.recv() => {
                tracing::info!(%signal, left = gate.open_connections(), "keeper stopped by a signal");
                break;
            }
            _ = lost.cancelled() => {
                tracing::warn!(left = gate.open_connections(), "keeper: the new run is gone: closing the connections kept");
                break;
            }
        }
        let left = gate.open_connections();
        if left == 0 {
            tracing::info!("keeper: no connection left");
            break;
        }
        if tokio::time::Instant::now() >= until {
            tracing::info!(left, "keeper: bound reached, closing the connections left");
            break;
        }
    }
    if !gate.shutdown(JOIN_DEADLINE).await {
        tracing::warn!("some tasks did not finish before the join deadline");
    }
}

/// `sipgate_config_reloads_total{result}`: `applied`, `unchanged` (the
/// file means what the config in force means), `refused` (a change only a
/// restart makes) or `invalid` (the file does not load).
const RELOADS: &str = "sipgate_config_reloads_total";

/// SIGHUP (`systemctl reload`) reads the `[tls]` certificate and key
/// again (a pair that does not load keeps the one in force), then the site
/// file ([`reload_site`]); never the default (exit). Watched from this call
/// on, for the rest of the process's life.
pub fn reload_on_sighup(gate: &Gate, notify: Notifier) -> std::io::Result<()> {
    for result in ["applied", "unchanged", "refused", "invalid"] {
        metrics::counter!(RELOADS, "result" => result).increment(0);
    }
    let mut hup = Signals::reload()?;
    let (tls, reloader, core) = (gate.tls_reload(), gate.reloader(), gate.core().clone());
    tokio::spawn(async move {
        loop {
            hup.recv().await;
            if let Some(t) = &tls {
                t.reload();
            }
            // Off the runtime's workers: it reads a file.
            let (r, n, c) = (reloader.clone(), notify.clone(), core.clone());
            let _ = tokio::task::spawn_blocking(move || reload_site(&r, &n, &c)).await;
        }
    });
    Ok(())
}

/// Reloads the site file, told to systemd (`RELOADING=1`, then `READY=1`
/// once the gate was ready before), counted and logged with how long it
/// took; a refused or broken file leaves the config in force, whole.
pub fn reload_site(reloader: &Reloader, notify: &Notifier, core: &Core) {
    notify.reloading("reloading the site file");
    let result = reloader.reload();
    let status = match &result {
        // Logged before counted: whoever sees the count go up finds the
        // line that says why (the reload tests read the log on the count).
        Ok(r) => {
            let label = if r.changed { "applied" } else { "unchanged" };
            tracing::info!(
                hash = %r.hash,
                changed = r.changed,
                took_us = r.took.as_micros() as u64,
                "site file reloaded"
            );
            metrics::gauge!("sipgate_config_reload_seconds").set(r.took.as_secs_f64());
            metrics::counter!(RELOADS, "result" => label).increment(1);
            format!("serving; site file {} reloaded", r.hash)
        }
        Err(e) => {
            tracing::warn!(error = %e, "site file not reloaded: the config in force stays, whole");
            metrics::counter!(RELOADS, "result" => e.label()).increment(1);
            format!("serving; site file reload refused: {e}")
        }
    };
    if core.lifecycle().is_view_loaded() {
        notify.ready(status);
    } else {
        notify.phase("starting: loading the drain view from the store");
    }
}
