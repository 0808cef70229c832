//! The handover as operators read it: `ringsync handover status [--json]`
//! and `GET /v1/handover` serve this one shape, computed with the
//! planner's own core from the drain view and the records, so it shows what
//! the planner will do and when.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::plan::{plan, GroupPlan, Input, Next, Plan};
use super::record::{HandoverState, MoveKind};
use ringsync::config::SiteConfig;
use ringsync::view::DrainView;

/// The handover of a site.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoverStatus {
    /// Site name.
    pub site: String,
    /// When this was computed (Unix ms).
    pub generated_ms: u64,
    /// The pace: at most one move per this many seconds (R-AP-2).
    pub pace_s: u32,
    /// Profile revision of the drain view planned from.
    pub revision: u64,
    /// Servers in the drain zone.
    pub drain_zone: BTreeSet<String>,
    /// The planner and the plan's progress.
    pub planner: PlannerStatus,
    /// Every group, in config order.
    pub groups: Vec<GroupStatus>,
}

/// Who plans and where the plan stands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannerStatus {
    /// The elected planner, where the store knows it (R-MN-3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acting: Option<String>,
    /// The node answering (`ringsync serve`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub this_node: Option<String>,
    /// Whether the answering node is the one that plans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub this_node_acting: Option<bool>,
    /// When the last move was published (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_move_ms: Option<u64>,
    /// When the next move is due (Unix ms), if one is planned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_move_ms: Option<u64>,
    /// `idle`, `waiting` (for the pace), `due`, or `holding` (view stale).
    pub next: String,
    /// Why it holds, when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holding: Option<String>,
    /// Moves published since the site was last settled.
    pub done: u32,
    /// Moves planned and not yet published (retries not counted).
    pub planned: u32,
}

/// Where a group stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupState {
    /// Its service confirmed the leader the planner wants; nothing to do.
    Settled,
    /// Nothing published for it, and its service has not confirmed the
    /// home as leader (yet).
    Unconfirmed,
    /// A move was published and its service has not confirmed it: retried
    /// at the pace, and no other group moves meanwhile.
    Moving,
    /// A move is planned.
    Planned,
    /// No follower in the normal zone: it keeps its leader (R-AP-4).
    Blocked,
}

impl GroupState {
    /// The name used in output.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupState::Settled => "settled",
            GroupState::Unconfirmed => "unconfirmed",
            GroupState::Moving => "moving",
            GroupState::Planned => "planned",
            GroupState::Blocked => "blocked",
        }
    }
}

/// One group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStatus {
    /// Group name.
    pub group: String,
    /// Its priority (moves go in ascending priority, then name).
    pub priority: u32,
    /// Its home member.
    pub home: String,
    /// The member that should lead now: the one the planner published, or
    /// the home while nothing is published.
    pub desired: String,
    /// The member its service confirmed leads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmed: Option<String>,
    /// Where it stands.
    pub state: GroupState,
    /// Its planned move: to whom, why and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_move: Option<PlannedMove>,
    /// Set while a published move is not confirmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unconfirmed: Option<PendingMove>,
    /// Why it cannot move (R-AP-4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<String>,
}

/// A planned move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedMove {
    /// The member that will lead.
    pub to: String,
    /// Handover or takeover.
    pub kind: MoveKind,
    /// When it is due if every move before it is confirmed in time (Unix ms).
    pub at_ms: u64,
}

/// A published move awaiting its confirmation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingMove {
    /// When it was last published (Unix ms).
    pub since_ms: u64,
    /// Publications so far.
    pub attempt: u32,
    /// Its publication number.
    pub seq: u64,
    /// When it will be published again (Unix ms), unless confirmed first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at_ms: Option<u64>,
}

/// The status of the site's handover at `now_ms`; `fresh`: whether the
/// view's profiles are current (R-MN-2).
pub fn status(
    config: &SiteConfig,
    view: &DrainView,
    state: &HandoverState,
    now_ms: u64,
    fresh: bool,
) -> HandoverStatus {
    let p = plan(&Input {
        groups: &config.ap_groups,
        view,
        state,
        pace_ms: u64::from(config.timers.ap_pace_s) * 1000,
        now_ms,
        fresh,
    });
    HandoverStatus {
        site: config.site.name.clone(),
        generated_ms: now_ms,
        pace_s: config.timers.ap_pace_s,
        revision: view.revision(),
        drain_zone: view.drain_zone().clone(),
        planner: planner(&p, state, now_ms),
        groups: p.groups.iter().map(group).collect(),
    }
}

fn planner(p: &Plan, state: &HandoverState, now_ms: u64) -> PlannerStatus {
    let (next, holding) = match &p.next {
        Next::Idle => ("idle", None),
        Next::Hold { reason } => ("holding", Some(reason.clone())),
        Next::Wait { .. } => ("waiting", None),
        Next::Publish(_) => ("due", None),
    };
    let planned = p.groups.iter().filter(|g| g.planned.is_some()).count() as u32;
    let settled = planned == 0 && p.groups.iter().all(|g| g.unconfirmed.is_none());
    PlannerStatus {
        acting: state.acting.clone(),
        this_node: None,
        this_node_acting: None,
        last_move_ms: state.planner.last_move_ms,
        next_move_ms: p.next_move_ms.map(|t| t.max(now_ms)),
        next: next.into(),
        holding,
        done: if settled && state.planner.remaining == 0 {
            0
        } else {
            state.planner.done
        },
        planned,
    }
}

fn group(g: &GroupPlan) -> GroupStatus {
    let state = if g.blocked.is_some() {
        GroupState::Blocked
    } else if g.planned.is_some() {
        GroupState::Planned
    } else if g.unconfirmed.is_some() {
        GroupState::Moving
    } else if g.confirmed.as_deref() != Some(g.leader.as_str()) {
        GroupState::Unconfirmed
    } else {
        GroupState::Settled
    };
    GroupStatus {
        group: g.name.clone(),
        priority: g.priority,
        home: g.home.clone(),
        desired: g.leader.clone(),
        confirmed: g.confirmed.clone(),
        state,
        next_move: g.planned.as_ref().map(|s| PlannedMove {
            to: s.to.clone(),
            kind: s.kind,
            at_ms: s.at_ms,
        }),
        unconfirmed: g.unconfirmed.as_ref().map(|u| PendingMove {
            since_ms: u.since_ms,
            attempt: u.attempt,
            seq: u.seq,
            retry_at_ms: u.retry_at_ms,
        }),
        blocked: g.blocked.clone(),
    }
}
