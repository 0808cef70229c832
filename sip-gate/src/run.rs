//! The gate's run as a daemon, from a loaded site file to its exit: the
//! listeners, then the store (new work gets 503 until the view is loaded),
//! then serving until SIGTERM or SIGINT and the stop (R-GW-1); or, in a run
//! an upgrade started, the take-over from the running gate (R-GW-3) and,
//! when this run is upgraded itself, the hand-over and what it keeps
//! afterwards. Each step is told to systemd ([`ringsync::notify`]); the
//! recorder, the signals and the watchdog are the node runtime every
//! daemon starts with ([`ringsync::runtime`]). The binary parses its arguments, loads the site file and calls [`run`].

use std::sync::Arc;
use std::time::Duration;

use ringsync::config::SiteConfig;
use ringsync::daemon::Attached;
use ringsync::notify::Notifier;
use ringsync::runtime::{Runtime, RuntimeError};
use ringsync::signals::{Signal, Signals};
use ringsync::state::DrainState;
use ringsync::work::RunInfo;
use tokio_util::sync::CancellationToken;

use crate::cli::Args;
use crate::upgrade::{Inheritance, UpgradeError, Upgrader};
use crate::{node, Gate, GateError};

/// Why a gate's run ended before serving, or could not go on; the cause is
/// its [`std::error::Error::source`].
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The recorder or the signals (see [`RuntimeError`]).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The listeners could not be bound or the gate not started.
    #[error("starting the gate")]
    Gate(#[from] GateError),
    /// The admin endpoint could not be bound or served.
    #[error("binding admin endpoint {addr}")]
    Admin {
        /// The address (or `handed over` for an upgrade's socket).
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The profile store could not be opened.
    #[error("opening the profile store")]
    Store(#[from] ringsync::StoreError),
    /// The take-over from the running gate failed after it began.
    #[error("taking over")]
    TakeOver(#[from] UpgradeError),
}

fn watching(what: &'static str) -> impl FnOnce(std::io::Error) -> RunError {
    move |source| {
        let what = what.to_owned();
        RunError::Runtime(RuntimeError::Signals { what, source })
    }
}

/// Runs the gate on `config` (loaded from `args.config`) until it stops or
/// hands over; `started_ms` is when the process started, for the run view.
/// A run an upgrade started that cannot take over tells the running gate
/// and exits with status 1 (the running gate serves on).
pub async fn run(args: &Args, config: SiteConfig, started_ms: u64) -> Result<(), RunError> {
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
    // Watched from the start: a signal is never missed, and a second one
    // during the stop is seen. SIGUSR2 too: its default would end the gate.
    // This run's messages to systemd end when it hands over (R-GW-3): the
    // new run is the main process then, and speaks for the service.
    let phase = match &inheritance {
        Some(_) => "upgrading: taking over from the running gate",
        None => "starting: binding the listeners",
    };
    let Runtime {
        prometheus,
        notify,
        notify_stop,
        shutdown,
        tasks: _,
        mut signals,
    } = Runtime::start(phase, &[Signal::Terminate, Signal::Interrupt])?;
    let usr2 = ringsync::runtime::watch(&[Signal::User2])?;
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
        Some(i) => take_over(args, config, ctx, i).await?,
        None => match start(args, config, ctx, &mut signals).await? {
            Some(r) => r,
            None => return Ok(()),
        },
    };
    serve(args, running, signals, usr2).await;
    Ok(())
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
) -> Result<Option<Running>, RunError> {
    let notify = &ctx.notify;
    // In-dialog requests and responses flow while the store is read.
    let snapshot_path = args.work_snapshot.as_deref();
    let snapshot = snapshot_path.and_then(node::take_snapshot);
    let gate =
        Gate::start_awaiting_view(config.clone(), ctx.drain.clone(), ctx.shutdown.clone()).await?;
    node::restore_snapshot(gate.core(), snapshot);
    node::reload_on_sighup(&gate, notify.clone()).map_err(watching("SIGHUP"))?;
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
    .map_err(|source| RunError::Admin {
        addr: admin_addr.to_string(),
        source,
    })?;
    // `[capture] agents` gives each node its own agent id, by this name.
    gate.core().capture().set_node(&admin.node.name);
    notify.phase("starting: loading the drain view from the store");
    let store = tokio::select! {
        store = Attached::open(&ctx.drain, ctx.shutdown.clone()) => store?,
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
) -> Result<Running, RunError> {
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
    node::reload_on_sighup(&gate, ctx.notify.clone()).map_err(watching("SIGHUP"))?;
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
    .map_err(|source| RunError::Admin {
        addr: "handed over".into(),
        source,
    })?;
    gate.core().capture().set_node(&admin.node.name);
    let control = inh.control_listener();
    let taken = inh.finish(&mut gate).await?;
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
async fn serve(args: &Args, running: Running, mut signals: Signals, usr2: Signals) {
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
        .unwrap_or_else(|| crate::upgrade::socket_path(admin.addr));
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
            return;
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
}
