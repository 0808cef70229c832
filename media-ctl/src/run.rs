//! media-ctl's run as a daemon, from a loaded site file to its exit: the
//! node runtime ([`ringsync::runtime`]: recorder, signals, systemd), the
//! store and the node's registration ([`ringsync::daemon`], shared with
//! sip-gate), the controller and its admin endpoint; then SIGHUP reloads
//! `[capture]` until SIGTERM or SIGINT stops it. The binary parses its
//! arguments, loads the site file and calls [`run`].

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ringsync::config::SiteConfig;
use ringsync::daemon::Attached;
use ringsync::node::{NodeIdentity, NodeRole};
use ringsync::runtime::{Runtime, RuntimeError};
use ringsync::signals::Signal;
use ringsync::state::DrainState;

use crate::{admin, MediaCtl, StartError};

/// Why media-ctl's run ended before serving; the cause is its
/// [`std::error::Error::source`].
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The recorder or the signals (see [`RuntimeError`]).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The profile store could not be opened.
    #[error("opening the profile store")]
    Store(#[from] ringsync::StoreError),
    /// The ng socket could not be bound (the error names it).
    #[error(transparent)]
    Start(#[from] StartError),
    /// The admin endpoint could not be bound.
    #[error("binding admin endpoint {addr}")]
    Admin {
        /// The address asked for.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
}

/// What [`run`] takes besides the site file: the command line's overrides.
#[derive(Debug, Clone)]
pub struct Options {
    /// The site file, read again at each SIGHUP.
    pub config: std::path::PathBuf,
    /// The admin endpoint's address.
    pub admin: SocketAddr,
    /// This node's name (default: the admin address bound).
    pub node: Option<String>,
    /// How long the stop may take.
    pub drain_deadline: Duration,
    /// When the process started (ms since the epoch), for its record.
    pub started_ms: u64,
}

/// Runs the controller on `config` until SIGTERM or SIGINT, then stops it
/// within the deadline; SIGHUP reloads `[capture]` meanwhile.
pub async fn run(config: SiteConfig, opts: Options) -> Result<(), RunError> {
    let which = [Signal::Terminate, Signal::Interrupt, Signal::Hangup];
    let rt = Runtime::start("starting: loading the drain view from the store", &which)?;
    let drain = DrainState::new(Arc::new(config));
    let mut store = Attached::open(&drain, rt.shutdown.clone()).await?;
    let media = MediaCtl::start(drain.clone(), rt.shutdown.clone()).await?;
    let bind = |source| RunError::Admin {
        addr: opts.admin,
        source,
    };
    let listener = tokio::net::TcpListener::bind(opts.admin)
        .await
        .map_err(bind)?;
    let admin_addr = listener.local_addr().map_err(bind)?;
    let node = opts.node.clone().unwrap_or_else(|| admin_addr.to_string());
    // `[capture] agents` gives each node its own agent id, by this name.
    media.capture().set_node(&node);
    tracing::info!(%admin_addr, %node, "admin endpoint (/v1/status, /v1/work, /metrics, /readyz)");
    // R-ST-3: on a shared store (etcd), register and publish the same report
    // (on the embedded store, `ringsync status` asks the admin address).
    let identity = NodeIdentity {
        node: node.clone(),
        role: NodeRole::MediaCtl,
        address: admin_addr.to_string(),
        started_ms: opts.started_ms,
    };
    let (controller, name) = (media.controller().clone(), node.clone());
    store.publish(identity, move || {
        Some(controller.work_report(&name, tokio::time::Instant::now().into_std()))
    });
    let prometheus = Some(rt.prometheus.clone());
    let router = admin::router(
        media.controller().clone(),
        node,
        prometheus,
        media.stopping(),
    );
    let admin = ringsync::admin::serve(listener, router, rt.shutdown.clone());
    rt.tasks.spawn(admin);
    // The ng socket and the admin endpoint are bound, the view is loaded.
    rt.notify.follow_view(&drain, rt.notify_stop.clone());
    rt.notify.ready(format!("serving, admin on {admin_addr}"));

    let mut rt = rt;
    let clean = serve_signals(media, &mut rt, &opts.config, opts.drain_deadline).await;
    // The admin endpoint ends with the controller's stop (its `shutdown`).
    rt.finish().await;
    // Withdrawn after the stop, so what work is left is recorded (R-ST-3).
    store.close().await;
    if !clean {
        tracing::warn!("some tasks did not finish before the deadline");
    }
    Ok(())
}

/// Reloads `[capture]` from `config` at each SIGHUP until SIGTERM or
/// SIGINT, then stops the controller within `deadline`; whether
/// everything finished in time.
async fn serve_signals(
    media: MediaCtl,
    rt: &mut Runtime,
    config: &Path,
    deadline: Duration,
) -> bool {
    let notify = rt.notify.clone();
    let signal = loop {
        let signal = rt.signals.recv().await;
        if signal.is_stop() {
            break signal;
        }
        // Told to systemd as sip-gate does; a file that does not load
        // leaves the capture in force (logged and counted).
        notify.reloading("reloading [capture] from the site file");
        let status = match media.reload(config) {
            Ok(()) => "serving; [capture] reloaded".to_owned(),
            Err(e) => format!("serving; reload refused: {e}"),
        };
        notify.ready(status);
    };
    notify.stopping(format!(
        "stopping ({signal}): answers in flight are relayed, deadline {}s",
        deadline.as_secs()
    ));
    tracing::info!(
        signal = signal.name(),
        "stopping: /readyz fails, answers in flight are relayed"
    );
    media.shutdown(deadline).await
}
