//! What the handover keeps in the store: plain data, one JSON shape for
//! every writer and reader (the planner, the services' agents, status).
//!
//! Per group, two records with one writer each: the planner's [`Desired`]
//! (which member should lead, and how the plan got there) and the
//! service's [`Confirmed`] (which member does lead). Site-wide, the
//! [`PlannerRecord`]: the time of the last move, so a planner that starts
//! (after a restart, or elected on another node) keeps the pace (R-AP-2).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Why a leader moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MoveKind {
    /// Away from a leader on a draining server, to a normal-zone follower (R-AP-1).
    Handover,
    /// Back to the home member once its server is in the normal zone (R-AP-3).
    Takeover,
}

impl MoveKind {
    /// The name used in records, reports and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            MoveKind::Handover => "handover",
            MoveKind::Takeover => "takeover",
        }
    }
}

impl std::fmt::Display for MoveKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The planner's word for one group: who should lead. Written only by the
/// acting planner (R-MN-3), one key per group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Desired {
    /// The member (instance id) that should lead.
    pub leader: String,
    /// The member that was to lead before this move.
    pub from: String,
    /// Handover or takeover.
    pub kind: MoveKind,
    /// Site-wide publication number: every move and every retry takes the
    /// next one, so a service sees a retry as a change.
    pub seq: u64,
    /// 1 for the first publication of this move, +1 per retry of an
    /// unconfirmed move.
    pub attempt: u32,
    /// When it was published (Unix ms).
    pub at_ms: u64,
    /// The plan's progress: this is move `step` of `steps` (the moves done
    /// since the site was last settled, plus those still planned).
    pub step: u32,
    /// See `step`.
    pub steps: u32,
    /// Why, in words (e.g. `srv-a is draining`).
    pub reason: String,
    /// The planner node that published it.
    pub planner: String,
}

/// The service's word for one group: who leads. Written by the service (its
/// agent) once a member has taken leadership.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confirmed {
    /// The member that leads now.
    pub leader: String,
    /// The [`Desired::seq`] it acted on (0 when no move was published yet).
    #[serde(default)]
    pub seq: u64,
    /// When it was written (Unix ms).
    pub at_ms: u64,
}

/// Where the site's plan stands, written with every move.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannerRecord {
    /// The node that made the last move.
    pub node: String,
    /// When the last move (or retry) was published (Unix ms): the next one
    /// is due no earlier than one pace later, whoever plans then (R-AP-2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_move_ms: Option<u64>,
    /// The last [`Desired::seq`] given out.
    pub seq: u64,
    /// Moves done since the site was last settled.
    #[serde(default)]
    pub done: u32,
    /// Moves still planned after the last one.
    #[serde(default)]
    pub remaining: u32,
}

/// Everything the handover keeps, as read from the store.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoverState {
    /// The planner's desired leader per group.
    #[serde(default)]
    pub desired: BTreeMap<String, Desired>,
    /// The leader each group's service confirmed.
    #[serde(default)]
    pub confirmed: BTreeMap<String, Confirmed>,
    /// The planner's progress and the time of its last move.
    #[serde(default)]
    pub planner: PlannerRecord,
    /// The node currently elected to plan, where the store knows it (R-MN-3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acting: Option<String>,
}

impl HandoverState {
    /// The member a group's service should have as leader: the published
    /// desired one, or the home while nothing was published.
    pub fn desired_leader<'a>(&'a self, group: &str, home: &'a str) -> &'a str {
        self.desired.get(group).map_or(home, |d| d.leader.as_str())
    }
}
