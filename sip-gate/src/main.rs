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
use ringsync::work::RunInfo;
use sip_gate::cli::{AnnounceArgs, Args, Sub, UpgradeArgs};
use sip_gate::upgrade::{Inheritance, Upgrader};
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

/// `sip-gate upgrade`: asks the running gate to upgrade (R-GW-3).
fn upgrade(args: UpgradeArgs) -> anyhow::Result<()> {
    let path = match args.socket {
        Some(p) => p,
        None => {
            let admin = match args.admin {
                Some(a) => a,
                None => {
                    SiteConfig::load(&args.config)
                        .with_context(|| format!("reading {}", args.config.display()))?
                        .admin
                        .gate_bind
                }
            };
            sip_gate::upgrade::socket_path(admin)
        }
    };
    let pid = sip_gate::upgrade::request(&path)
        .with_context(|| format!("upgrading the gate on {}", path.display()))?;
    println!("upgraded: the new run (pid {pid}) serves");
    Ok(())
}

/// Listeners first, then the store (new work gets 503 until the view is
/// loaded), then serve until SIGTERM or SIGINT and stop (R-GW-1); or, in
/// a run an upgrade started, take over from the running gate (R-GW-3).
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match args.command {
        Some(Sub::Announce(a)) => return announce(a).await,
        Some(Sub::Upgrade(u)) => return upgrade(u),
        None => {}
    }
    // clap requires --config without a subcommand.
    let config_path = args.config.clone().context("--config is required")?;
    let started_ms = ringsync::work::now_ms();
    ringsync::logs::init(args.log_format);
    let Some(config) = load_or_check(&config_path, args.check) else {
        return Ok(());
    };
    // A run an upgrade started asks the running gate before anything: a
    // refusal leaves that gate serving, and this run exits.
    let inheritance = match Inheritance::from_env() {
        None => None,
        Some(Ok(i)) => Some(i),
        Some(Err(e)) => {
            tracing::error!(error = %e, "upgrade: not taking over; the running gate serves on");
            std::process::exit(1);
        }
    };
    let prometheus =
        ringsync::daemon::install_metrics().context("installing the metrics recorder")?;
    // Watched from the start: a signal is never missed, and a second one
    // during the stop is seen. SIGUSR2 too: its default would end the gate.
    let mut signals = Signals::stop().context("watching SIGTERM and SIGINT")?;
    let usr2 = Signals::upgrade().context("watching SIGUSR2")?;
    let shutdown = CancellationToken::new();
    let notify = Notifier::new();
    // This run's messages to systemd end when it hands over (R-GW-3): the
    // new run is the main process then, and speaks for the service.
    let notify_stop = shutdown.child_token();
    // The first word to systemd is the phase, then the watchdog's pings.
    notify.phase(match &inheritance {
        Some(_) => "upgrading: taking over from the running gate",
        None => "starting: binding the listeners",
    });
    notify.watchdog(notify_stop.clone());
    let drain = DrainState::new(Arc::new(config.clone()));
    let deadline = Duration::from_secs(args.drain_deadline_s);
    let ctx = Ctx {
        started_ms,
        prometheus,
        notify,
        notify_stop,
        shutdown,
        drain,
        deadline,
    };
    let running = match inheritance {
        Some(i) => take_over(&args, config, ctx, i).await?,
        None => match start(&args, config, ctx, &mut signals).await? {
            Some(r) => r,
            None => return Ok(()),
        },
    };
    serve(&args, running, signals, usr2).await
}

/// What every way of starting shares.
struct Ctx {
    started_ms: u64,
    prometheus: metrics_exporter_prometheus::PrometheusHandle,
    notify: Notifier,
    /// Ends the watchdog pings and the status updates (a hand-over).
    notify_stop: CancellationToken,
    shutdown: CancellationToken,
    drain: Arc<DrainState>,
    deadline: Duration,
}

/// A gate serving, with its admin endpoint and its store.
struct Running {
    gate: Gate,
    admin: node::Admin,
    store: Attached,
    ctx: Ctx,
    /// The upgrade socket an earlier run handed over.
    control: Option<std::os::unix::net::UnixListener>,
}

/// The start of a gate that takes over from nobody; `None` when a signal
/// stopped it before the drain view was loaded.
async fn start(
    args: &Args,
    config: SiteConfig,
    ctx: Ctx,
    signals: &mut Signals,
) -> anyhow::Result<Option<Running>> {
    let notify = &ctx.notify;
    // In-dialog requests and responses flow while the store is read.
    let snapshot_path = args.work_snapshot.as_deref();
    let snapshot = snapshot_path.and_then(node::take_snapshot);
    let gate =
        Gate::start_awaiting_view(config.clone(), ctx.drain.clone(), ctx.shutdown.clone()).await?;
    node::restore_snapshot(gate.core(), snapshot);
    node::reload_on_sighup(&gate, notify.clone()).context("watching SIGHUP")?;
    let admin_addr = args.admin.unwrap_or(config.admin.gate_bind);
    let admin = node::serve_admin(
        &gate,
        admin_addr,
        args.node.clone(),
        RunInfo::this_process(env!("CARGO_PKG_VERSION"), ctx.started_ms, None),
        Some(ctx.prometheus.clone()),
        &ctx.shutdown,
    )
    .await
    .with_context(|| format!("binding admin endpoint {admin_addr}"))?;
    // `[capture] agents` gives each node its own agent id, by this name.
    gate.core().capture().set_node(&admin.node.name);
    notify.phase("starting: loading the drain view from the store");
    let store = tokio::select! {
        store = Attached::open(&ctx.drain, ctx.shutdown.clone()) => store.context("opening the profile store")?,
        signal = signals.recv() => {
            notify.stopping(format!("stopping ({signal}) before the drain view was loaded"));
            node::shut_down(gate, admin, None, signals, signal, ctx.deadline, snapshot_path).await;
            return Ok(None);
        }
    };
    // The instance states go out with the view, before `/readyz` says ready.
    gate.view_loaded();
    tracing::info!(
        revision = ctx.drain.view().revision(),
        "drain view loaded: serving"
    );
    // What /readyz now says: listeners bound, view loaded.
    notify.follow_view(&ctx.drain, ctx.notify_stop.clone());
    notify.ready(format!("serving on {} listener(s)", config.listeners.len()));
    Ok(Some(Running {
        gate,
        admin,
        store,
        ctx,
        control: None,
    }))
}

/// The start of a run an upgrade started (R-GW-3): the store first (so it
/// serves with the drain view from its first message), the gate on the
/// running gate's sockets, its connections and work book, then the
/// listeners read and systemd told this is the main process now. A
/// failure before the gate serves is told to the running gate, which
/// serves on.
async fn take_over(
    args: &Args,
    config: SiteConfig,
    ctx: Ctx,
    mut inh: Inheritance,
) -> anyhow::Result<Running> {
    let refuse = |inh: &Inheritance, e: &dyn std::fmt::Display| -> ! {
        tracing::error!(error = %e, "upgrade: not taking over; the running gate serves on");
        inh.refuse(&e.to_string());
        std::process::exit(1)
    };
    let store = match Attached::open(&ctx.drain, ctx.shutdown.clone()).await {
        Ok(s) => s,
        Err(e) => refuse(&inh, &format!("opening the profile store: {e}")),
    };
    let start = inh
        .start_gate(config.clone(), ctx.drain.clone(), ctx.shutdown.clone())
        .await;
    let mut gate = match start {
        Ok(g) => g,
        Err(e) => refuse(&inh, &e),
    };
    gate.view_loaded();
    node::reload_on_sighup(&gate, ctx.notify.clone()).context("watching SIGHUP")?;
    let Some(listener) = inh.admin_listener() else {
        refuse(&inh, &"no admin socket in the offer")
    };
    let admin = node::serve_admin_on(
        &gate,
        listener,
        args.node.clone(),
        // The run it took over from: `ringsync status` shows the upgrade.
        RunInfo::this_process(env!("CARGO_PKG_VERSION"), ctx.started_ms, inh.from_run()),
        Some(ctx.prometheus.clone()),
        &ctx.shutdown,
    )
    .context("serving the admin endpoint handed over")?;
    gate.core().capture().set_node(&admin.node.name);
    let control = inh.control_listener();
    let taken = inh.finish(&mut gate).await.context("taking over")?;
    let (calls, registrations, subscriptions) = taken.work;
    tracing::info!(
        connections = taken.connections,
        relayed = taken.relayed,
        transactions = taken.transactions,
        calls,
        registrations,
        subscriptions,
        revision = ctx.drain.view().revision(),
        "upgrade: took over from the running gate: serving"
    );
    ctx.notify.follow_view(&ctx.drain, ctx.notify_stop.clone());
    ctx.notify.ready_as_main(format!(
        "serving on {} listener(s), upgraded",
        config.listeners.len()
    ));
    Ok(Running {
        gate,
        admin,
        store,
        ctx,
        control,
    })
}

/// Serves until SIGTERM or SIGINT (the stop, R-GW-1) or a hand-over to a
/// new run (then keeps what could not move, R-GW-3).
async fn serve(
    args: &Args,
    running: Running,
    mut signals: Signals,
    usr2: Signals,
) -> anyhow::Result<()> {
    let Running {
        gate,
        admin,
        mut store,
        ctx,
        control,
    } = running;
    let core = gate.core().clone();
    node::publish_work(&mut store, &core, &admin);
    let path = args
        .upgrade_socket
        .clone()
        .unwrap_or_else(|| sip_gate::upgrade::socket_path(admin.addr));
    let upgrader = match Upgrader::start(&gate, &admin, (&path, control), &ctx.shutdown) {
        Ok(u) => Some(u),
        Err(e) => {
            tracing::warn!(socket = %path.display(), error = %e, "no upgrade socket: this run cannot be upgraded (R-GW-3)");
            None
        }
    };
    node::upgrade_on_sigusr2(upgrader.clone(), usr2);
    let handed = async {
        match &upgrader {
            Some(u) => u.handed_over().await,
            None => std::future::pending().await,
        }
    };
    let signal = tokio::select! {
        signal = signals.recv() => signal,
        pid = handed => {
            ctx.notify_stop.cancel();
            store.hand_over();
            let keep = Duration::from_secs(args.upgrade_keep_s);
            let lost = upgrader.as_ref().map(|u| u.link_lost()).unwrap_or_default();
            node::keep_after_upgrade(gate, &mut signals, (pid, lost), keep).await;
            return Ok(());
        }
    };
    let deadline = ctx.deadline;
    ctx.notify.stopping(format!(
        "stopping ({signal}): waiting for {} transaction(s) in flight, deadline {}s",
        core.in_flight(),
        deadline.as_secs()
    ));
    let _status = node::status_while_stopping(ctx.notify.clone(), core.clone(), deadline);
    node::shut_down(
        gate,
        admin,
        Some(store),
        &mut signals,
        signal,
        deadline,
        args.work_snapshot.as_deref(),
    )
    .await;
    if upgrader.is_some() {
        let _ = std::fs::remove_file(&path);
    }
    Ok(())
}
