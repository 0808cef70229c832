//! The handover planner's core: a pure function of (groups, drain view,
//! published leaders, last move time, now) → the plan and the next action.
//! No I/O and no clock: the runner ([`super::runner`]) feeds it and applies
//! what it decides, so every rule here is a fast test.
//!
//! For each group, in the order moves are made (ascending `priority`, then
//! name), the member that should lead:
//!
//! * its home, when the home's server is in the normal zone and the home
//!   is not known to be down: a **takeover** if another member leads (R-AP-3);
//! * otherwise the member that leads now, while its server is in the normal
//!   zone: a group is never moved for nothing;
//! * otherwise a **handover** to a follower in the normal zone that is not
//!   known to be down: the one whose server holds the fewest leaders (the
//!   plan's earlier moves counted), then the smallest id (R-AP-1);
//! * with no such follower the group keeps its leader and is **blocked**,
//!   with the reason (R-AP-4).
//!
//! One publication per pace, site-wide (R-AP-2). A move the service has not
//! confirmed is republished at the pace and holds back every other move: a
//! site never has two moves in flight.

use std::collections::HashMap;

use ringsync::config::ApGroup;
use ringsync::view::{DrainView, Health, Zone};

use super::record::{Desired, HandoverState, MoveKind, PlannerRecord};

/// What the planner decides from.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The site's groups (config order).
    pub groups: &'a [ApGroup],
    /// Zones and health of the instances.
    pub view: &'a DrainView,
    /// What the store holds: desired and confirmed leaders, the last move.
    pub state: &'a HandoverState,
    /// The pace (R-AP-2), in milliseconds.
    pub pace_ms: u64,
    /// Now (Unix ms).
    pub now_ms: u64,
    /// False while the drain view may be out of date (R-MN-2): nothing moves.
    pub fresh: bool,
}

/// The plan for the whole site at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Every group, in config order.
    pub groups: Vec<GroupPlan>,
    /// What to do now.
    pub next: Next,
    /// When the next publication is due (Unix ms), if one is planned.
    pub next_move_ms: Option<u64>,
}

/// One group in the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPlan {
    /// Group name.
    pub name: String,
    /// Its priority.
    pub priority: u32,
    /// Its home member.
    pub home: String,
    /// The member that should lead now: the published one, else the home.
    pub leader: String,
    /// The member the service confirmed, if it did.
    pub confirmed: Option<String>,
    /// Set while the published leader is not confirmed.
    pub unconfirmed: Option<Unconfirmed>,
    /// The move the plan holds for it.
    pub planned: Option<Step>,
    /// Why it cannot move (R-AP-4).
    pub blocked: Option<String>,
}

/// A published move the service has not confirmed yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unconfirmed {
    /// When it was last published (Unix ms).
    pub since_ms: u64,
    /// Publications so far.
    pub attempt: u32,
    /// Its publication number.
    pub seq: u64,
    /// When it will be published again, if the plan retries it (Unix ms).
    pub retry_at_ms: Option<u64>,
}

/// A move still to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The member that will lead.
    pub to: String,
    /// Handover or takeover.
    pub kind: MoveKind,
    /// When it is due if every move before it is confirmed in time (Unix ms).
    pub at_ms: u64,
}

/// What the runner should do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Nothing to move.
    Idle,
    /// The view may be out of date: move nothing (R-MN-2).
    Hold {
        /// Why.
        reason: String,
    },
    /// A move is planned; the pace allows it at `until_ms` (Unix ms).
    Wait {
        /// When.
        until_ms: u64,
    },
    /// Publish this now.
    Publish(Move),
}

/// One publication: a new move, or a retry of an unconfirmed one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The group.
    pub group: String,
    /// The member that was to lead.
    pub from: String,
    /// The member that will lead.
    pub to: String,
    /// Handover or takeover.
    pub kind: MoveKind,
    /// True when it republishes an unconfirmed move unchanged.
    pub retry: bool,
    /// Why, in words.
    pub reason: String,
}

/// Plans the site (see the module docs).
pub fn plan(input: &Input<'_>) -> Plan {
    let mut groups: Vec<GroupPlan> = input.groups.iter().map(|g| base(input, g)).collect();
    let order = move_order(input.groups);
    let mut load = Load::of(input.view, &groups);
    let mut moves: Vec<(usize, Move)> = Vec::new();
    for &i in &order {
        match wanted(input, &input.groups[i], &groups[i], &load) {
            Wanted::Stay => {}
            Wanted::Blocked(reason) => groups[i].blocked = Some(reason),
            Wanted::Move(to, kind, reason) => {
                load.shift(&groups[i].leader, &to);
                let from = groups[i].leader.clone();
                let group = groups[i].name.clone();
                let m = Move {
                    group,
                    from,
                    to,
                    kind,
                    retry: false,
                    reason,
                };
                moves.push((i, m));
            }
        }
    }
    let queue = queue(input, &order, &groups, moves);
    let next_allowed = input
        .state
        .planner
        .last_move_ms
        .map_or(input.now_ms, |t| t.saturating_add(input.pace_ms));
    let first_slot = next_allowed.max(input.now_ms);
    for (k, (i, m)) in queue.iter().enumerate() {
        let at_ms = first_slot + k as u64 * input.pace_ms;
        if m.retry {
            if let Some(u) = groups[*i].unconfirmed.as_mut() {
                u.retry_at_ms = Some(at_ms);
            }
        } else {
            groups[*i].planned = Some(Step {
                to: m.to.clone(),
                kind: m.kind,
                at_ms,
            });
        }
    }
    let next = match queue.into_iter().next() {
        None => Next::Idle,
        Some(_) if !input.fresh => Next::Hold {
            reason: "the drain view may be out of date (profile store stale)".into(),
        },
        Some((_, m)) if input.now_ms >= next_allowed => Next::Publish(m),
        Some(_) => Next::Wait {
            until_ms: next_allowed,
        },
    };
    let next_move_ms = match next {
        Next::Idle => None,
        _ => Some(first_slot),
    };
    Plan {
        groups,
        next,
        next_move_ms,
    }
}

/// The group as the store has it, before planning.
fn base(input: &Input<'_>, g: &ApGroup) -> GroupPlan {
    let desired = input.state.desired.get(&g.name);
    let confirmed = input.state.confirmed.get(&g.name).map(|c| c.leader.clone());
    // What the services' agents follow too: nothing published means home.
    let leader = input.state.desired_leader(&g.name, &g.home).to_owned();
    let unconfirmed = desired
        .filter(|d| confirmed.as_deref() != Some(d.leader.as_str()))
        .map(|d| Unconfirmed {
            since_ms: d.at_ms,
            attempt: d.attempt,
            seq: d.seq,
            retry_at_ms: None,
        });
    GroupPlan {
        name: g.name.clone(),
        priority: g.priority,
        home: g.home.clone(),
        leader,
        confirmed,
        unconfirmed,
        planned: None,
        blocked: None,
    }
}

/// Group indexes in the order moves are made: priority, then name.
fn move_order(groups: &[ApGroup]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..groups.len()).collect();
    order.sort_by(|&a, &b| {
        (groups[a].priority, &groups[a].name).cmp(&(groups[b].priority, &groups[b].name))
    });
    order
}

/// The publications in the order they will be made: a move that re-targets
/// an unconfirmed group first (it holds the slot), else the retry of an
/// unconfirmed group, then the other moves in order.
fn queue(
    input: &Input<'_>,
    order: &[usize],
    groups: &[GroupPlan],
    mut moves: Vec<(usize, Move)>,
) -> Vec<(usize, Move)> {
    if let Some(k) = moves
        .iter()
        .position(|(i, _)| groups[*i].unconfirmed.is_some())
    {
        let m = moves.remove(k);
        moves.insert(0, m);
        return moves;
    }
    // A blocked group is not retried: it keeps what it has (R-AP-4).
    let retry = order.iter().find_map(|&i| {
        let g = &groups[i];
        if g.blocked.is_some() {
            return None;
        }
        g.unconfirmed.as_ref()?;
        let d = input.state.desired.get(&g.name)?;
        Some((i, retry_of(&g.name, d)))
    });
    if let Some(r) = retry {
        moves.insert(0, r);
    }
    moves
}

fn retry_of(group: &str, d: &Desired) -> Move {
    Move {
        group: group.to_owned(),
        from: d.from.clone(),
        to: d.leader.clone(),
        kind: d.kind,
        retry: true,
        reason: d.reason.clone(),
    }
}

enum Wanted {
    Stay,
    Move(String, MoveKind, String),
    Blocked(String),
}

/// Where one group's leadership should be (see the module docs).
fn wanted(input: &Input<'_>, g: &ApGroup, gp: &GroupPlan, load: &Load) -> Wanted {
    let view = input.view;
    let home_ok = zone(view, &g.home) == Some(Zone::Normal) && !down(view, &g.home);
    if home_ok {
        if gp.leader == g.home {
            return Wanted::Stay;
        }
        let reason = format!(
            "home {} ({}) is in the normal zone",
            g.home,
            server(view, &g.home)
        );
        return Wanted::Move(g.home.clone(), MoveKind::Takeover, reason);
    }
    if zone(view, &gp.leader) != Some(Zone::Drain) {
        return Wanted::Stay;
    }
    let best = g
        .members
        .iter()
        .filter(|m| **m != gp.leader)
        .filter(|m| zone(view, m) == Some(Zone::Normal) && !down(view, m))
        .min_by_key(|m| (load.on(server(view, m)), m.as_str()));
    match best {
        Some(to) => {
            let reason = format!(
                "{} of leader {} is draining",
                server(view, &gp.leader),
                gp.leader
            );
            Wanted::Move(to.clone(), MoveKind::Handover, reason)
        }
        None => Wanted::Blocked(blocked_reason(view, g)),
    }
}

/// R-AP-4: why no member can take over, member by member.
fn blocked_reason(view: &DrainView, g: &ApGroup) -> String {
    let why: Vec<String> = g
        .members
        .iter()
        .map(|m| {
            let state = match (zone(view, m), down(view, m)) {
                (Some(Zone::Drain), _) => "draining",
                (Some(Zone::Normal), true) => "down",
                (Some(Zone::Normal), false) => "normal",
                (None, _) => "unknown",
            };
            format!("{m} on {} {state}", server(view, m))
        })
        .collect();
    format!(
        "no follower in the normal zone; keeps its leader ({})",
        why.join(", ")
    )
}

fn zone(view: &DrainView, id: &str) -> Option<Zone> {
    let i = view.index_of(id)?;
    Some(view.instances()[i].zone)
}

fn down(view: &DrainView, id: &str) -> bool {
    view.index_of(id)
        .is_some_and(|i| view.instances()[i].health == Health::Down)
}

fn server<'v>(view: &'v DrainView, id: &str) -> &'v str {
    view.index_of(id)
        .map_or("?", |i| view.instances()[i].server.as_str())
}

/// Leaders per server, as the plan moves them.
struct Load<'v> {
    view: &'v DrainView,
    per_server: HashMap<&'v str, usize>,
}

impl<'v> Load<'v> {
    fn of(view: &'v DrainView, groups: &[GroupPlan]) -> Load<'v> {
        let mut per_server = HashMap::new();
        for g in groups {
            *per_server.entry(server(view, &g.leader)).or_default() += 1;
        }
        Load { view, per_server }
    }

    fn on(&self, server: &str) -> usize {
        self.per_server.get(server).copied().unwrap_or(0)
    }

    fn shift(&mut self, from: &str, to: &str) {
        if let Some(n) = self.per_server.get_mut(server(self.view, from)) {
            *n = n.saturating_sub(1);
        }
        *self.per_server.entry(server(self.view, to)).or_default() += 1;
    }
}

// === publication ===

/// What to write for `m`, published by `node` at `now_ms`: the group's
/// desired record and the planner's record with the plan's progress.
/// `plan` is the plan `m` came from.
pub fn publication(
    m: &Move,
    plan: &Plan,
    state: &HandoverState,
    node: &str,
    now_ms: u64,
) -> (Desired, PlannerRecord) {
    let prev = &state.planner;
    let planned = plan.groups.iter().filter(|g| g.planned.is_some()).count() as u32;
    let in_flight = plan.groups.iter().any(|g| g.unconfirmed.is_some());
    let (done, remaining) = if m.retry {
        (prev.done.max(1), planned)
    } else if prev.remaining == 0 && !in_flight {
        (1, planned.saturating_sub(1))
    } else {
        (prev.done + 1, planned.saturating_sub(1))
    };
    let attempt = match (m.retry, state.desired.get(&m.group)) {
        (true, Some(d)) => d.attempt + 1,
        _ => 1,
    };
    let seq = prev.seq + 1;
    let desired = Desired {
        leader: m.to.clone(),
        from: m.from.clone(),
        kind: m.kind,
        seq,
        attempt,
        at_ms: now_ms,
        step: done,
        steps: done + remaining,
        reason: m.reason.clone(),
        planner: node.to_owned(),
    };
    let record = PlannerRecord {
        node: node.to_owned(),
        last_move_ms: Some(now_ms),
        seq,
        done,
        remaining,
    };
    (desired, record)
}

#[cfg(test)]
mod tests;
