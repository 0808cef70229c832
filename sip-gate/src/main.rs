//! `sip-gate --config SITE.toml`: the drain-aware SIP proxy; and
//! `sip-gate announce`, the program ExaBGP runs to announce the gate's
//! anycast prefix while it is ready (R-EX-2, `sip_gate::announce`).
//!
//! Thin on purpose: config, tracing, metrics, gate, then the store and the
//! node's registration (`ringsync::daemon`, shared with media-ctl), signal,
//! stop; each step told to systemd (`ringsync::notify`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use ringsync::config::{Daemon, SiteConfig};
use ringsync::daemon::Attached;
use ringsync::node::{NodeIdentity, NodeRole};
use ringsync::notify::Notifier;
use ringsync::signals::{Signal, Signals};
use ringsync::state::DrainState;
use sip_gate::admin::NodeInfo;
use sip_gate::cli::{AnnounceArgs, Args, Sub};
use sip_gate::reload::Reloader;
use sip_gate::{Core, Gate, WorkSnapshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long the last step of a stop may take (threads and tasks joined).
const JOIN_DEADLINE: Duration = Duration::from_secs(3);

/// `sip-gate announce`: polls /readyz, commands ExaBGP on stdout.
async fn announce(args: AnnounceArgs) -> anyhow::Result<()> {
    use sip_gate::announce::{run, Options, Route};
    ringsync::logs::init(args.log_format);
    let options = Options {
        admin: args.admin,
        route: Route {
            prefix: args.prefix,
            next_hop: args.next_hop,
        },
        interval: Duration::from_millis(args.interval_ms.max(1)),
        timeout: Duration::from_millis(args.timeout_ms.max(1)),
    };
    tracing::info!(admin = %options.admin, prefix = %options.route.prefix, interval_ms = args.interval_ms, timeout_ms = args.timeout_ms, "announcing while the gate is ready (R-EX-2)");
    let stop = CancellationToken::new();
    // ExaBGP writes to our stdin; its end means ExaBGP is gone. A plain
    // thread: a blocking stdin read in tokio's pool would hold up the exit.
    let eof = stop.clone();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        tracing::info!("stdin closed (ExaBGP gone): stopping");
        eof.cancel();
    });
    let mut signals = Signals::stop().context("watching SIGTERM and SIGINT")?;
    let on_signal = stop.clone();
    tokio::spawn(async move {
        let signal = signals.recv().await;
        tracing::info!(signal = signal.name(), "stopping");
        on_signal.cancel();
    });
    run(&options, tokio::io::stdout(), stop)
        .await
        .context("writing to ExaBGP (stdout)")
}

/// Loads the site file (exit 2 when it does not load); with `--check`, says
/// what it holds and returns `None`: nothing is bound.
fn load_or_check(path: &std::path::Path, check: bool) -> Option<SiteConfig> {
    let config = SiteConfig::load(path).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2)
    });
    if !check {
        return Some(config);
    }
    let warned = ringsync::daemon::check(&config, Daemon::SipGate);
    let (i, l) = (config.instances.len(), config.listeners.len());
    println!(
        "{}: ok ({i} instances, {l} listeners){warned}",
        path.display()
    );
    None
}

/// Listeners first, then the store (new work gets 503 until the view is
/// loaded), then serve until SIGTERM or SIGINT and stop (R-GW-1).
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(Sub::Announce(a)) = args.command {
        return announce(a).await;
    }
    // clap requires --config without a subcommand.
    let config_path = args.config.context("--config is required")?;
    let started_ms = ringsync::work::now_ms();
    ringsync::logs::init(args.log_format);
    let Some(config) = load_or_check(&config_path, args.check) else {
        return Ok(());
    };
    let prometheus = PrometheusBuilder::new()
        .install_recorder()
        .context("installing the metrics recorder")?;
    // Watched from the start: a signal is never missed, and a second one
    // during the stop is seen.
    let mut signals = Signals::stop().context("watching SIGTERM and SIGINT")?;
    let shutdown = CancellationToken::new();
    let notify = Notifier::new();
    notify.phase("starting: binding the listeners");
    notify.watchdog(shutdown.clone());
    let drain = DrainState::new(Arc::new(config.clone()));
    // In-dialog requests and responses flow while the store is read.
    let snapshot = args.work_snapshot.as_deref().and_then(take_snapshot);
    let gate = Gate::start_awaiting_view(config.clone(), drain.clone(), shutdown.clone()).await?;
    restore_snapshot(gate.core(), snapshot);
    reload_on_sighup(
        gate.tls_reload(),
        gate.reloader(),
        notify.clone(),
        gate.core().clone(),
    )
    .context("watching SIGHUP")?;
    let core = gate.core().clone();
    let admin_addr = args.admin.unwrap_or(config.admin.gate_bind);
    let (admin_task, node, admin_addr) = serve_admin(
        &gate, admin_addr, args.node, started_ms, prometheus, &shutdown,
    )
    .await?;
    let deadline = Duration::from_secs(args.drain_deadline_s);
    notify.phase("starting: loading the drain view from the store");
    let mut store = tokio::select! {
        store = Attached::open(&drain, shutdown.clone()) => store.context("opening the profile store")?,
        signal = signals.recv() => {
            notify.stopping(format!("stopping ({signal}) before the drain view was loaded"));
            let clean = stop(gate, &mut signals, signal, deadline).await;
            let _ = admin_task.await;
            save_snapshot(&core, args.work_snapshot.as_deref(), clean);
            return Ok(());
        }
    };
    // The instance states go out with the view, before `/readyz` says ready.
    gate.view_loaded();
    tracing::info!(
        revision = drain.view().revision(),
        "drain view loaded: serving"
    );
    // What /readyz now says: listeners bound, view loaded.
    notify.follow_view(&drain, shutdown.clone());
    notify.ready(format!("serving on {} listener(s)", config.listeners.len()));
    publish_work(&mut store, &core, node, admin_addr, started_ms);
    let signal = signals.recv().await;
    notify.stopping(format!(
        "stopping ({signal}): waiting for {} transaction(s) in flight, deadline {}s",
        core.in_flight(),
        deadline.as_secs()
    ));
    let clean = stop(gate, &mut signals, signal, deadline).await;
    let _ = admin_task.await;
    // Withdrawn after the drain, so what work is left is recorded (R-ST-3).
    store.close().await;
    save_snapshot(&core, args.work_snapshot.as_deref(), clean);
    Ok(())
}

/// Publishes the gate's work report in the store's node registry (on an
/// etcd site; the embedded store keeps none), as `node` at `admin_addr`.
fn publish_work(
    store: &mut Attached,
    core: &Arc<sip_gate::Core>,
    node: NodeInfo,
    admin_addr: SocketAddr,
    started_ms: u64,
) {
    let identity = NodeIdentity {
        node: node.name.clone(),
        role: NodeRole::Gate,
        address: admin_addr.to_string(),
        started_ms,
    };
    let reporter = core.clone();
    store.publish(identity, move || {
        Some(sip_gate::admin::report(&reporter, &node))
    });
}

/// Binds the admin endpoint (/metrics, /v1/work, /readyz) at `addr` and
/// serves it until `shutdown`; the node is named `name`, or by the address
/// bound.
async fn serve_admin(
    gate: &Gate,
    addr: SocketAddr,
    name: Option<String>,
    started_ms: u64,
    prometheus: PrometheusHandle,
    shutdown: &CancellationToken,
) -> anyhow::Result<(JoinHandle<std::io::Result<()>>, NodeInfo, SocketAddr)> {
    let admin = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding admin endpoint {addr}"))?;
    let addr = admin.local_addr()?;
    let node = NodeInfo {
        name: name.unwrap_or_else(|| addr.to_string()),
        started_ms,
    };
    tracing::info!(admin_addr = %addr, node = %node.name, "admin endpoint (/metrics, /v1/work, /readyz)");
    let task = tokio::spawn(sip_gate::admin::serve(
        admin,
        gate.core().clone(),
        node.clone(),
        Some(prometheus),
        shutdown.clone(),
    ));
    Ok((task, node, addr))
}

/// The gate's own stop (R-GW-1): `/readyz` fails and new work gets 503 at
/// once, the transactions in flight get their final responses, and the gate
/// exits when none waits for one (completed transactions kept for their
/// retransmissions do not hold it), at `deadline`, or at once on a second
/// signal. True when its
/// threads and tasks then ended in time (nothing can change the work book).
async fn stop(gate: Gate, signals: &mut Signals, signal: Signal, deadline: Duration) -> bool {
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

/// The work snapshot a graceful stop left, read and deleted; `None` (and
/// why, in the log) when there is none or it cannot be read.
fn take_snapshot(path: &std::path::Path) -> Option<WorkSnapshot> {
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

/// Takes the snapshot read at start, if any, into the work book.
fn restore_snapshot(core: &Core, snapshot: Option<WorkSnapshot>) {
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
/// nothing can change the book any more.
fn save_snapshot(core: &Core, path: Option<&std::path::Path>, clean: bool) {
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

/// SIGHUP (`systemctl reload`) reads the `[tls]` certificate and key
/// again (a pair that does not load keeps the one in force), then the site
/// file ([`reload_site`]); never the default (exit).
fn reload_on_sighup(
    tls: Option<sip_gate::TlsReload>,
    reloader: Arc<Reloader>,
    notify: Notifier,
    core: Arc<Core>,
) -> std::io::Result<()> {
    for result in ["applied", "unchanged", "refused", "invalid"] {
        metrics::counter!(RELOADS, "result" => result).increment(0);
    }
    #[cfg(unix)]
    {
        let mut hup = Signals::reload()?;
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
    }
    #[cfg(not(unix))]
    drop((tls, reloader, notify, core));
    Ok(())
}

/// `sipgate_config_reloads_total{result}`: `applied`, `unchanged` (the
/// file means what the config in force means), `refused` (a change only a
/// restart makes) or `invalid` (the file does not load).
const RELOADS: &str = "sipgate_config_reloads_total";

/// Reloads the site file, told to systemd (`RELOADING=1`, then `READY=1`
/// once the gate was ready before), counted and logged with how long it
/// took; a refused or broken file leaves the config in force, whole.
fn reload_site(reloader: &Reloader, notify: &Notifier, core: &Core) {
    notify.reloading("reloading the site file");
    let result = reloader.reload();
    let status = match &result {
        Ok(r) => {
            let label = if r.changed { "applied" } else { "unchanged" };
            metrics::counter!(RELOADS, "result" => label).increment(1);
            metrics::gauge!("sipgate_config_reload_seconds").set(r.took.as_secs_f64());
            tracing::info!(
                hash = %r.hash,
                changed = r.changed,
                took_us = r.took.as_micros() as u64,
                "site file reloaded"
            );
            format!("serving; site file {} reloaded", r.hash)
        }
        Err(e) => {
            metrics::counter!(RELOADS, "result" => e.label()).increment(1);
            tracing::warn!(error = %e, "site file not reloaded: the config in force stays, whole");
            format!("serving; site file reload refused: {e}")
        }
    };
    if core.lifecycle().is_view_loaded() {
        notify.ready(status);
    } else {
        notify.phase("starting: loading the drain view from the store");
    }
}
