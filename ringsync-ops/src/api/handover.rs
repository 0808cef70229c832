//! The Active-Passive handover on the admin API: `/v1/handover` and the
//! handover's metrics (R-AP-1..4, R-MN-3).

use super::AdminApi;
use crate::handover::status::{GroupState, HandoverStatus};
use ringsync::store::BackendError;
use ringsync::store::StoreError;
use ringsync::view::DrainView;

impl AdminApi {
    /// The handover's gauges and this node's move counters (R-AP-1..4).
    pub(super) fn handover_metrics(&self, view: &DrainView) {
        let Some(records) = self.store.handover() else {
            return;
        };
        let state = records.watch().borrow().clone();
        let now = ringsync::work::now_ms();
        let fresh = !self.drain.freshness().is_stale();
        let st = crate::handover::status(view.config(), view, &state, now, fresh);
        let count = |s: GroupState| st.groups.iter().filter(|g| g.state == s).count() as f64;
        metrics::with_local_recorder(&self.recorder, || {
            metrics::gauge!("ringsync_handover_blocked_groups").set(count(GroupState::Blocked));
            metrics::gauge!("ringsync_handover_unconfirmed_groups").set(count(GroupState::Moving));
            metrics::gauge!("ringsync_handover_planned_moves").set(f64::from(st.planner.planned));
            // NaN while nothing is planned.
            let next = st
                .planner
                .next_move_ms
                .map_or(f64::NAN, |t| t.saturating_sub(now) as f64 / 1000.0);
            metrics::gauge!("ringsync_handover_next_move_seconds").set(next);
            if let Some((_, stats)) = self.planner.get() {
                let (handovers, takeovers, retries) = stats.moves();
                for (kind, n) in [
                    ("handover", handovers),
                    ("takeover", takeovers),
                    ("retry", retries),
                ] {
                    metrics::counter!("ringsync_handover_moves_total", "kind" => kind).absolute(n);
                }
                metrics::gauge!("ringsync_handover_acting").set(if stats.acting() {
                    1.0
                } else {
                    0.0
                });
            }
        });
    }

    /// The handover's status from the records as the store has them now.
    pub async fn handover_status(&self) -> Result<HandoverStatus, StoreError> {
        let records = self.store.handover().ok_or_else(|| {
            StoreError::Backend(BackendError::Unsupported(
                "this store keeps no handover records".into(),
            ))
        })?;
        let state = records.read().await?;
        let view = self.drain.view();
        let fresh = !self.drain.freshness().is_stale();
        let mut st = crate::handover::status(
            view.config(),
            &view,
            &state,
            ringsync::work::now_ms(),
            fresh,
        );
        if let Some((node, stats)) = self.planner.get() {
            st.planner.this_node = Some(node.clone());
            st.planner.this_node_acting = Some(stats.acting());
        }
        Ok(st)
    }
}
