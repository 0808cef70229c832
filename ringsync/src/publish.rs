//! Publishing a node's registration and work report to a shared store
//! (R-ST-1, R-ST-3, R-MN-2).
//!
//! Every [`CHECK_EVERY`] the publisher builds the node's [`NodeRecord`]
//! (view revision, freshness, work report) and writes it only if it differs
//! from the last one written, ignoring time stamps; the store's lease keeps
//! it alive in between. On shutdown it withdraws the node. On a store
//! without a registry (the embedded file) it does nothing: `ringsync
//! status` asks the node's admin address instead.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::node::{NodeIdentity, NodeRecord};
use crate::state::DrainState;
use crate::store::Store;
use crate::work::WorkReport;

/// How often the record is rebuilt and compared (a local check; the store
/// is written only on change).
pub const CHECK_EVERY: Duration = Duration::from_millis(500);

/// Starts publishing `id` with the reports `report` makes until
/// `shutdown`, then withdraws. Await the handle after `shutdown` so the
/// withdrawal is written before the process exits.
pub fn spawn(
    store: Arc<dyn Store>,
    state: Arc<DrainState>,
    id: NodeIdentity,
    report: impl Fn() -> Option<WorkReport> + Send + Sync + 'static,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        if !store.keeps_nodes() {
            return;
        }
        let record = || NodeRecord {
            id: id.clone(),
            view_revision: state.view().revision(),
            freshness: (*state.freshness()).clone(),
            site_hash: state.config().hash.clone(),
            report: report(),
        };
        let mut published: Option<NodeRecord> = None;
        let mut failing = false;
        let mut tick = tokio::time::interval(CHECK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            let now = record();
            if published.as_ref().is_some_and(|p| p.same_as(&now)) {
                continue;
            }
            match store.publish_node(now.clone()).await {
                Ok(()) => {
                    if failing {
                        tracing::info!(node = %id.node, "node record published again");
                    }
                    failing = false;
                    published = Some(now);
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(node = %id.node, error = %e, "cannot publish the node record; retrying");
                    }
                    failing = true;
                }
            }
        }
        if let Err(e) = store.withdraw_node(record()).await {
            tracing::warn!(node = %id.node, error = %e, "cannot withdraw the node; its lease will expire");
        }
    })
}
