//! The planner's thin I/O layer: get elected (R-MN-3), then on every change
//! of the drain view or the records, and when the pace allows the next
//! move, read the records, run [`plan`] and publish what it says.
//!
//! It reads the records from the store before every decision, so the time
//! of the last move is the one persisted, whoever made it: a planner that
//! restarts, or is elected after another died, keeps the pace (R-AP-2).
//! It checks its leadership before every move and the store refuses a move
//! from a leadership it no longer holds, so a planner that loses its lease
//! stops before its next move.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::clock::Clock;
use super::plan::{plan, publication, Input, Move, Next, Plan};
use super::record::{HandoverState, MoveKind};
use ringsync::config::SiteConfig;
use ringsync::state::DrainState;
use ringsync::store::{Campaign, HandoverStore, Leadership, Published};

/// How often a standby tries to be elected, besides when the records change.
pub const CAMPAIGN_EVERY: Duration = Duration::from_secs(1);
/// How long to wait after a store failure, or while the view is stale.
const RETRY: Duration = Duration::from_secs(1);

/// What the planner did, for metrics and status.
#[derive(Debug, Default)]
pub struct PlannerStats {
    acting: AtomicBool,
    handovers: AtomicU64,
    takeovers: AtomicU64,
    retries: AtomicU64,
}

impl PlannerStats {
    /// True while this node is the elected planner.
    pub fn acting(&self) -> bool {
        self.acting.load(Ordering::Relaxed)
    }

    /// Publications by this node: `(handovers, takeovers, retries)`.
    pub fn moves(&self) -> (u64, u64, u64) {
        (
            self.handovers.load(Ordering::Relaxed),
            self.takeovers.load(Ordering::Relaxed),
            self.retries.load(Ordering::Relaxed),
        )
    }

    fn count(&self, m: &Move) {
        let c = match (m.retry, m.kind) {
            (true, _) => &self.retries,
            (false, MoveKind::Handover) => &self.handovers,
            (false, MoveKind::Takeover) => &self.takeovers,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// A site's handover planner on one node.
pub struct Planner {
    config: Arc<SiteConfig>,
    drain: Arc<DrainState>,
    store: Arc<dyn HandoverStore>,
    node: String,
    clock: Clock,
    stats: Arc<PlannerStats>,
}

impl Planner {
    /// A planner named `node` (unique on the site) that plans from `drain`
    /// and writes to `store`, with times from `clock`.
    pub fn new(
        config: Arc<SiteConfig>,
        drain: Arc<DrainState>,
        store: Arc<dyn HandoverStore>,
        node: impl Into<String>,
        clock: Clock,
    ) -> Planner {
        Planner {
            config,
            drain,
            store,
            node: node.into(),
            clock,
            stats: Arc::new(PlannerStats::default()),
        }
    }

    /// Its counters and whether it acts.
    pub fn stats(&self) -> Arc<PlannerStats> {
        self.stats.clone()
    }

    /// Stands for election, plans while elected, stands again when the
    /// leadership is lost; resigns and returns on `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        if self.config.ap_groups.is_empty() {
            return;
        }
        if self.config.timers.ap_pace_s < ringsync::config::Timers::MIN_AP_PACE_S {
            tracing::warn!(
                pace_s = self.config.timers.ap_pace_s,
                "Active-Passive test pace: leaders may move faster than one group a minute"
            );
        }
        loop {
            let Some(lead) = self.elect(&shutdown).await else {
                return;
            };
            self.stats.acting.store(true, Ordering::Relaxed);
            self.act(&lead, &shutdown).await;
            self.stats.acting.store(false, Ordering::Relaxed);
            lead.resign().await;
            if shutdown.is_cancelled() {
                return;
            }
        }
    }

    /// Campaigns until elected (`None` on shutdown).
    async fn elect(&self, shutdown: &CancellationToken) -> Option<Leadership> {
        let mut records = self.store.watch();
        let mut said: Option<String> = None;
        loop {
            records.borrow_and_update();
            let line = match self.store.campaign(&self.node).await {
                Ok(Campaign::Elected(lead)) => return Some(lead),
                Ok(Campaign::Held { by }) => format!(
                    "standing by: {} plans",
                    by.as_deref().unwrap_or("another node")
                ),
                Err(e) => format!("cannot campaign: {e}"),
            };
            if said.as_ref() != Some(&line) {
                tracing::info!(node = %self.node, "{line}");
                said = Some(line);
            }
            tokio::select! {
                _ = shutdown.cancelled() => return None,
                _ = records.changed() => {}
                _ = tokio::time::sleep(CAMPAIGN_EVERY) => {}
            }
        }
    }

    /// Plans and publishes while `lead` is held.
    async fn act(&self, lead: &Leadership, shutdown: &CancellationToken) {
        let mut views = self.drain.subscribe();
        let mut records = self.store.watch();
        let mut failing = false;
        loop {
            views.borrow_and_update();
            records.borrow_and_update();
            if !lead.is_held() {
                return;
            }
            let wake = match self.store.read().await {
                Ok(state) => {
                    failing = false;
                    let now = self.clock.now_ms();
                    let plan = self.plan(&state, now);
                    match &plan.next {
                        Next::Publish(m) => match self.publish(lead, m, &plan, &state, now).await {
                            Some(true) => continue,
                            Some(false) => Some(self.clock.now_ms() + ms(RETRY)),
                            None => return,
                        },
                        Next::Wait { until_ms } => Some(*until_ms),
                        Next::Hold { .. } => Some(now + ms(RETRY)),
                        Next::Idle => None,
                    }
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(error = %e, "handover records unreadable; no move until they are");
                        failing = true;
                    }
                    Some(self.clock.now_ms() + ms(RETRY))
                }
            };
            let sleep = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(self.clock.instant_at(at)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = lead.lost() => return,
                _ = views.changed() => {}
                _ = records.changed() => {}
                _ = sleep => {}
            }
        }
    }

    fn plan(&self, state: &HandoverState, now_ms: u64) -> Plan {
        let view = self.drain.view();
        plan(&Input {
            groups: &self.config.ap_groups,
            view: &view,
            state,
            pace_ms: u64::from(self.config.timers.ap_pace_s) * 1000,
            now_ms,
            fresh: !self.drain.freshness().is_stale(),
        })
    }

    /// Writes one move: `Some(true)` written, `Some(false)` failed (retry
    /// later), `None` no longer the planner.
    async fn publish(
        &self,
        lead: &Leadership,
        m: &Move,
        plan: &Plan,
        state: &HandoverState,
        now_ms: u64,
    ) -> Option<bool> {
        let (desired, record) = publication(m, plan, state, &self.node, now_ms);
        let (step, steps, attempt) = (desired.step, desired.steps, desired.attempt);
        match self.store.publish(lead, &m.group, desired, record).await {
            Ok(Published::Done) => {
                self.stats.count(m);
                tracing::info!(
                    group = %m.group, from = %m.from, to = %m.to, kind = %m.kind,
                    step, steps, attempt, reason = %m.reason,
                    "Active-Passive leader move published"
                );
                Some(true)
            }
            Ok(Published::NotPlanner) => {
                tracing::warn!(node = %self.node, "no longer the planner; move not written");
                None
            }
            Err(e) => {
                tracing::warn!(group = %m.group, error = %e, "move not written; retrying");
                Some(false)
            }
        }
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
