//! `sip-gate --config SITE.toml`: the drain-aware SIP proxy.
//!
//! Thin on purpose: config, tracing, metrics, gate, store, registration,
//! signal, stop.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use metrics_exporter_prometheus::PrometheusBuilder;
use ringsync::config::{Daemon, SiteConfig};
use ringsync::node::{NodeIdentity, NodeRole};
use ringsync::state::DrainState;
use sip_gate::admin::NodeInfo;
use sip_gate::{Core, Gate, WorkSnapshot};
use tokio_util::sync::CancellationToken;

/// How long the last step of a stop may take (threads and tasks joined).
const JOIN_DEADLINE: Duration = Duration::from_secs(3);

/// Drain-aware inline SIP proxy.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Site configuration file.
    #[arg(long, short)]
    config: PathBuf,
    /// Validate the configuration and exit (non-zero with the error).
    #[arg(long)]
    check: bool,
    /// Admin HTTP address (/metrics, /v1/work); overrides `admin.gate_bind`.
    #[arg(long)]
    admin: Option<std::net::SocketAddr>,
    /// This gate's name in its work report and, on an etcd store, in the
    /// site's node registry; unique on the site (default: its admin address).
    #[arg(long, value_name = "NAME")]
    node: Option<String>,
    /// How long a stop (SIGTERM) may wait for the transactions in flight
    /// before the gate exits anyway (R-GW-1).
    #[arg(long, default_value_t = 60)]
    drain_deadline_s: u64,
    /// Where this gate keeps its work book across a graceful restart
    /// (R-ST-3): written on a clean stop with nothing in flight, read and
    /// deleted at start. One file per gate node. Without it, or when it is
    /// missing or unusable, a restarted gate reports its work unknown for
    /// the `[work]` window.
    #[arg(long, value_name = "FILE")]
    work_snapshot: Option<PathBuf>,
    /// Log lines as text (for people) or JSON (one object a line, with the
    /// fields of the span they are in: call_id, branch, instance).
    #[arg(long, value_enum, default_value_t = ringsync::logs::LogFormat::Text)]
    log_format: ringsync::logs::LogFormat,
}

/// How log lines are written.
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let started_ms = ringsync::work::now_ms();
    ringsync::logs::init(args.log_format);

    let config = match SiteConfig::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    if args.check {
        // Binds nothing: warns for addresses this host does not have.
        let warnings = ringsync::config::check_warnings(&config, Daemon::SipGate);
        for w in &warnings {
            eprintln!("warning: {w}");
        }
        let n = warnings.len();
        let warned = if n == 0 {
            String::new()
        } else {
            format!(", {n} warning(s)")
        };
        println!(
            "{}: ok ({} instances, {} listeners){warned}",
            args.config.display(),
            config.instances.len(),
            config.listeners.len(),
        );
        return Ok(());
    }

    let prometheus = PrometheusBuilder::new()
        .install_recorder()
        .context("installing the metrics recorder")?;
    // Watched from the start: a signal is never missed, and a second one
    // during the stop is seen.
    let mut signals = Signals::new().context("watching SIGTERM and SIGINT")?;
    let shutdown = CancellationToken::new();
    let drain = DrainState::new(Arc::new(config.clone()));

    // Listeners first: in-dialog requests and responses flow while the
    // store is read; new work gets 503 until the view is loaded.
    let admin_addr = args.admin.unwrap_or(config.admin.gate_bind);
    let snapshot = args.work_snapshot.as_deref().and_then(take_snapshot);
    let gate = Gate::start_awaiting_view(config.clone(), drain.clone(), shutdown.clone()).await?;
    restore_snapshot(gate.core(), snapshot);
    reload_on_sighup(gate.tls_reload()).context("watching SIGHUP")?;
    let core = gate.core().clone();
    let admin = tokio::net::TcpListener::bind(admin_addr)
        .await
        .with_context(|| format!("binding admin endpoint {admin_addr}"))?;
    let admin_addr = admin.local_addr()?;
    let node = NodeInfo {
        name: args.node.unwrap_or_else(|| admin_addr.to_string()),
        started_ms,
    };
    tracing::info!(%admin_addr, node = %node.name, "admin endpoint (/metrics, /v1/work, /readyz)");
    let admin_task = tokio::spawn(sip_gate::admin::serve(
        admin,
        gate.core().clone(),
        node.clone(),
        Some(prometheus),
        shutdown.clone(),
    ));

    let deadline = Duration::from_secs(args.drain_deadline_s);
    let store = tokio::select! {
        store = ringsync::store::open(&config) => store.context("opening the profile store")?,
        signal = signals.recv() => {
            let clean = stop(gate, &mut signals, signal, deadline).await;
            let _ = admin_task.await;
            save_snapshot(&core, args.work_snapshot.as_deref(), clean);
            return Ok(());
        }
    };
    // What the store opened with: from the store, or (R-MN-2) from the view
    // cache while etcd is unreachable, stale and saying so.
    drain.set_profiles(store.watch().borrow().clone());
    let freshness = store.freshness().borrow().clone();
    if freshness.is_stale() {
        tracing::warn!("{}", freshness.describe(ringsync::work::now_ms()));
    }
    drain.set_freshness(freshness);
    gate.lifecycle().view_loaded();
    tracing::info!(
        revision = drain.view().revision(),
        "drain view loaded: serving"
    );
    let follower = drain.follow(store.clone(), shutdown.clone());
    // R-ST-3: on a shared store (etcd), register and publish the same report.
    let published = CancellationToken::new();
    let publisher = {
        let (core, info) = (gate.core().clone(), node.clone());
        let identity = NodeIdentity {
            node: node.name.clone(),
            role: NodeRole::Gate,
            address: admin_addr.to_string(),
            started_ms,
        };
        ringsync::publish::spawn(
            store,
            drain,
            identity,
            move || Some(sip_gate::admin::report(&core, &info)),
            published.clone(),
        )
    };

    let signal = signals.recv().await;
    let clean = stop(gate, &mut signals, signal, deadline).await;
    let _ = admin_task.await;
    // Withdrawn after the drain, so what work is left is recorded (R-ST-3).
    published.cancel();
    let _ = publisher.await;
    let _ = follower.await;
    save_snapshot(&core, args.work_snapshot.as_deref(), clean);
    Ok(())
}

/// The gate's own stop (R-GW-1): `/readyz` fails and new work gets 503 at
/// once, the transactions in flight complete, and the gate exits when none
/// is left, at `deadline`, or at once on a second signal. True when its
/// threads and tasks then ended in time (nothing can change the work book).
async fn stop(gate: Gate, signals: &mut Signals, signal: &'static str, deadline: Duration) -> bool {
    tracing::info!(
        signal,
        deadline_s = deadline.as_secs(),
        transactions = gate.core().transactions(),
        "stopping (R-GW-1): /readyz fails, new work gets 503, waiting for the transactions in flight"
    );
    tokio::select! {
        drained = gate.drain(deadline) => {
            let waited_ms = drained.waited.as_millis() as u64;
            if drained.left == 0 {
                tracing::info!(waited_ms, "stopped: no transaction left");
            } else {
                tracing::warn!(
                    waited_ms,
                    transactions = drained.left,
                    "stopped: drain deadline reached with transactions left"
                );
            }
        }
        second = signals.recv() => {
            tracing::warn!(
                signal = second,
                transactions = gate.core().transactions(),
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

/// SIGHUP reads the `[tls]` certificate and key again (a pair that does
/// not load keeps the one in force); without `[tls]` it is logged and
/// ignored, never the default (exit).
fn reload_on_sighup(tls: Option<sip_gate::TlsReload>) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = signal(SignalKind::hangup())?;
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                match &tls {
                    Some(t) => {
                        t.reload();
                    }
                    None => tracing::info!("SIGHUP: no [tls] to reload"),
                }
            }
        });
    }
    #[cfg(not(unix))]
    drop(tls);
    Ok(())
}

/// SIGTERM and SIGINT, registered once.
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Signals {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// The next signal's name.
    async fn recv(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => "SIGTERM",
                _ = self.int.recv() => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "ctrl-c"
        }
    }
}
