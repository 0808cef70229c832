//! `sip-gate --config SITE.toml`: the drain-aware SIP proxy; and
//! `sip-gate announce`, the program ExaBGP runs to announce the gate's
//! anycast prefix while it is ready (R-EX-2, `sip_gate::announce`).
//!
//! Thin on purpose: config, tracing, metrics, gate, then the store and the
//! node's registration (`ringsync::daemon`, shared with media-ctl), signal,
//! stop; each step told to systemd (`ringsync::notify`). What it runs
//! around the gate (admin endpoint, reload on SIGHUP, work snapshot, the
//! stop sequence) is library code, `sip_gate::node`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use ringsync::config::{Daemon, SiteConfig};
use ringsync::daemon::Attached;
use ringsync::notify::Notifier;
use ringsync::signals::Signals;
use ringsync::state::DrainState;
use sip_gate::cli::{AnnounceArgs, Args, Sub};
use sip_gate::{node, Gate};
use tokio_util::sync::CancellationToken;

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
    let prometheus =
        ringsync::daemon::install_metrics().context("installing the metrics recorder")?;
    // Watched from the start: a signal is never missed, and a second one
    // during the stop is seen.
    let mut signals = Signals::stop().context("watching SIGTERM and SIGINT")?;
    let shutdown = CancellationToken::new();
    let notify = Notifier::new();
    notify.phase("starting: binding the listeners");
    notify.watchdog(shutdown.clone());
    let drain = DrainState::new(Arc::new(config.clone()));
    // In-dialog requests and responses flow while the store is read.
    let snapshot_path = args.work_snapshot.as_deref();
    let snapshot = snapshot_path.and_then(node::take_snapshot);
    let gate = Gate::start_awaiting_view(config.clone(), drain.clone(), shutdown.clone()).await?;
    node::restore_snapshot(gate.core(), snapshot);
    node::reload_on_sighup(&gate, notify.clone()).context("watching SIGHUP")?;
    let core = gate.core().clone();
    let admin_addr = args.admin.unwrap_or(config.admin.gate_bind);
    let admin = node::serve_admin(
        &gate,
        admin_addr,
        args.node,
        started_ms,
        Some(prometheus),
        &shutdown,
    )
    .await
    .with_context(|| format!("binding admin endpoint {admin_addr}"))?;
    // `[capture] agents` gives each node its own agent id, by this name.
    core.capture().set_node(&admin.node.name);
    let deadline = Duration::from_secs(args.drain_deadline_s);
    notify.phase("starting: loading the drain view from the store");
    let mut store = tokio::select! {
        store = Attached::open(&drain, shutdown.clone()) => store.context("opening the profile store")?,
        signal = signals.recv() => {
            notify.stopping(format!("stopping ({signal}) before the drain view was loaded"));
            node::shut_down(gate, admin, None, &mut signals, signal, deadline, snapshot_path).await;
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
    node::publish_work(&mut store, &core, &admin);
    let signal = signals.recv().await;
    notify.stopping(format!(
        "stopping ({signal}): waiting for {} transaction(s) in flight, deadline {}s",
        core.in_flight(),
        deadline.as_secs()
    ));
    let _status = node::status_while_stopping(notify.clone(), core.clone(), deadline);
    node::shut_down(
        gate,
        admin,
        Some(store),
        &mut signals,
        signal,
        deadline,
        snapshot_path,
    )
    .await;
    Ok(())
}
