//! One start-up and one shutdown for the site's store, shared by every
//! node (sip-gate, media-ctl, `ringsync serve`): open the store, take the
//! profiles and their freshness into the drain state, follow the store's
//! changes, publish the node's work report, and withdraw the node when it
//! stops. Also the metrics recorder the data plane installs, and what
//! sip-gate and media-ctl print for `--check`.

use std::sync::{Arc, OnceLock};

use metrics_exporter_prometheus::{BuildError, PrometheusBuilder, PrometheusHandle};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{check_warnings, Daemon, SiteConfig};
use crate::node::NodeIdentity;
use crate::state::DrainState;
use crate::store::{self, Store, StoreError};
use crate::work::{now_ms, WorkReport};

/// A running node's tie to its site's store: the follower that applies
/// every profile change (R-PR-2), and the publisher of its record (R-ST-3)
/// once [`Attached::publish`] started it.
pub struct Attached {
    store: Arc<dyn Store>,
    drain: Arc<DrainState>,
    follower: JoinHandle<()>,
    publisher: Option<(CancellationToken, JoinHandle<()>)>,
}

impl Attached {
    /// Opens the store of `drain`'s site and loads what it holds into
    /// `drain`: the profiles and how fresh they are, from the store or,
    /// while etcd is unreachable, from the view cache (R-MN-2: stale, and
    /// the log says since when). Then follows the store until `shutdown`.
    pub async fn open(
        drain: &Arc<DrainState>,
        shutdown: CancellationToken,
    ) -> Result<Attached, StoreError> {
        let store = store::open(&drain.config()).await?;
        drain.set_profiles(store.watch().borrow().clone());
        let freshness = store.freshness().borrow().clone();
        if freshness.is_stale() {
            tracing::warn!("{}", freshness.describe(now_ms()));
        }
        drain.set_freshness(freshness);
        let follower = drain.follow(store.clone(), shutdown);
        Ok(Attached {
            store,
            drain: drain.clone(),
            follower,
            publisher: None,
        })
    }

    /// The store opened, for what else the node reads from it.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Registers the node and publishes the reports `report` makes, on a
    /// store that keeps a node registry (etcd; on the embedded file
    /// `ringsync status` asks the node's admin address instead), until
    /// [`Attached::close`] (R-ST-3).
    pub fn publish(
        &mut self,
        id: NodeIdentity,
        report: impl Fn() -> Option<WorkReport> + Send + Sync + 'static,
    ) {
        let stop = CancellationToken::new();
        let task = crate::publish::spawn(
            self.store.clone(),
            self.drain.clone(),
            id,
            report,
            stop.clone(),
        );
        self.publisher = Some((stop, task));
    }

    /// Stops publishing without withdrawing the node: the next run of the
    /// same node took over its record (the gate's upgrade, R-GW-3), and a
    /// withdrawal now would delete the record that run writes. The
    /// follower keeps the drain view current until the `shutdown` given to
    /// [`Attached::open`], for what this run still serves.
    pub fn hand_over(self) {
        if let Some((_, task)) = self.publisher {
            task.abort();
        }
    }

    /// Withdraws the node, then waits for the follower, which ends with
    /// the `shutdown` given to [`Attached::open`]. Call it after the node's
    /// own stop, so the record withdrawn holds the work left (R-ST-3).
    pub async fn close(self) {
        if let Some((stop, task)) = self.publisher {
            stop.cancel();
            let _ = task.await;
        }
        let _ = self.follower.await;
    }
}

static PROCESS_METRICS: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process's metrics recorder, whose handle renders the
/// admin endpoint's `/metrics`: every daemon's (sip-gate, media-ctl,
/// `ringsync serve`), so what the library counts where it happens (store
/// errors, skipped audit lines, TLS reloads that failed) reaches it. The
/// library's counters are exported from the start, at 0.
pub fn install_metrics() -> Result<PrometheusHandle, BuildError> {
    let handle = PrometheusBuilder::new().install_recorder()?;
    let _ = PROCESS_METRICS.set(handle.clone());
    for name in [
        "ringsync_store_errors_total",
        "ringsync_audit_skipped_total",
        "ringsync_tls_reload_errors_total",
    ] {
        metrics::counter!(name).increment(0);
    }
    Ok(handle)
}

/// The handle of the recorder [`install_metrics`] installed, if it ran.
pub fn process_metrics() -> Option<&'static PrometheusHandle> {
    PROCESS_METRICS.get()
}

/// `--check` for `daemon`: prints on stderr each warning the site file
/// gives (addresses this host does not have; nothing is bound) and returns
/// what to add to the "ok" line: empty, or ", N warning(s)".
pub fn check(config: &SiteConfig, daemon: Daemon) -> String {
    let warnings = check_warnings(config, daemon);
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    match warnings.len() {
        0 => String::new(),
        n => format!(", {n} warning(s)"),
    }
}
