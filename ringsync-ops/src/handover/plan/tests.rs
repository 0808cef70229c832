//! The planner's rules on a hand-built site: no store, no clock.

use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::handover::record::Confirmed;
use ringsync::config::SiteConfig;
use ringsync::profile::{Profile, ProfileSet, ProfileState};

const PACE: u64 = 60_000;
const T0: u64 = 1_700_000_000_000;

/// Servers srv-a..srv-c, groups g1..g5 with a member on each server
/// (`g1-a`, `g1-b`, `g1-c`), all at home on srv-a; `g6` has members on
/// srv-a and srv-b only.
fn site() -> SiteConfig {
    let mut t = String::from("[site]\nname = \"t\"\n");
    for s in ["a", "b", "c"] {
        t.push_str(&format!("[[server]]\nname = \"srv-{s}\"\n"));
    }
    for g in 1..=6 {
        let servers: &[&str] = if g == 6 {
            &["a", "b"]
        } else {
            &["a", "b", "c"]
        };
        for s in servers {
            t.push_str(&format!(
                "[[instance]]\nid = \"g{g}-{s}\"\nservice = \"billing\"\nserver = \"srv-{s}\"\n"
            ));
        }
        let members: Vec<String> = servers.iter().map(|s| format!("\"g{g}-{s}\"")).collect();
        t.push_str(&format!(
            "[[ap_group]]\nname = \"g{g}\"\nmembers = [{}]\nhome = \"g{g}-a\"\n",
            members.join(", ")
        ));
    }
    SiteConfig::from_str_at(&t, Path::new("/t.toml")).unwrap()
}

fn view(config: &SiteConfig, drained: &[&str], down: &[&str]) -> DrainView {
    let profiles = ProfileSet {
        revision: 1,
        profiles: vec![Profile {
            id: "p-1".into(),
            name: "d".into(),
            description: String::new(),
            revision: 1,
            servers: drained.iter().map(|s| s.to_string()).collect(),
            state: if drained.is_empty() {
                ProfileState::Inactive
            } else {
                ProfileState::Active
            },
        }],
    };
    let health: Vec<Health> = config
        .instances
        .iter()
        .map(|i| {
            if down.contains(&i.id.as_str()) {
                Health::Down
            } else {
                Health::Unknown
            }
        })
        .collect();
    DrainView::build(Arc::new(config.clone()), &profiles, &health, &[])
}

fn run(config: &SiteConfig, view: &DrainView, state: &HandoverState, now_ms: u64) -> Plan {
    plan(&Input {
        groups: &config.ap_groups,
        view,
        state,
        pace_ms: PACE,
        now_ms,
        fresh: true,
    })
}

/// Publishes `m` into `state` as the runner would, and optionally confirms it.
fn publish(state: &mut HandoverState, p: &Plan, m: &Move, now_ms: u64, confirm: bool) {
    let (d, rec) = publication(m, p, state, "n1", now_ms);
    if confirm {
        state.confirmed.insert(
            m.group.clone(),
            Confirmed {
                leader: d.leader.clone(),
                seq: d.seq,
                at_ms: now_ms,
            },
        );
    }
    state.desired.insert(m.group.clone(), d);
    state.planner = rec;
}

fn moving(p: &Plan) -> &Move {
    match &p.next {
        Next::Publish(m) => m,
        other => panic!("expected a move, got {other:?}"),
    }
}

/// Drives the plan to the end, confirming every move at once; returns the
/// moves in order with their times.
fn drive(
    config: &SiteConfig,
    v: &DrainView,
    state: &mut HandoverState,
    mut now: u64,
) -> Vec<(u64, Move)> {
    let mut out = Vec::new();
    for _ in 0..20 {
        let p = run(config, v, state, now);
        match p.next.clone() {
            Next::Publish(m) => {
                publish(state, &p, &m, now, true);
                out.push((now, m));
            }
            Next::Wait { until_ms } => now = until_ms,
            Next::Idle => return out,
            Next::Hold { .. } => panic!("held"),
        }
    }
    panic!("plan never settled: {out:?}");
}

#[test]
fn r_ap_1_targets_normal_zone_followers_fewest_leaders_per_server_then_name() {
    let c = site();
    let v = view(&c, &["srv-a"], &[]);
    let mut st = HandoverState::default();
    let p = run(&c, &v, &st, T0);
    let m = moving(&p);
    assert_eq!((m.group.as_str(), m.to.as_str()), ("g1", "g1-b"));
    assert_eq!(m.kind, MoveKind::Handover);
    assert!(m.reason.contains("srv-a"), "{}", m.reason);
    // g6 goes to srv-b, the only other server it has; the others alternate
    // between srv-b and srv-c by load, then id.
    let planned: Vec<(String, String, u64)> = p
        .groups
        .iter()
        .filter_map(|g| {
            g.planned
                .as_ref()
                .map(|s| (g.name.clone(), s.to.clone(), s.at_ms))
        })
        .collect();
    assert_eq!(
        planned,
        [
            ("g1".into(), "g1-b".into(), T0),
            ("g2".into(), "g2-c".into(), T0 + PACE),
            ("g3".into(), "g3-b".into(), T0 + 2 * PACE),
            ("g4".into(), "g4-c".into(), T0 + 3 * PACE),
            ("g5".into(), "g5-b".into(), T0 + 4 * PACE),
            ("g6".into(), "g6-b".into(), T0 + 5 * PACE),
        ]
    );
    let moves = drive(&c, &v, &mut st, T0);
    assert_eq!(moves.len(), 6);
    for (k, (at, m)) in moves.iter().enumerate() {
        assert_eq!(*at, T0 + k as u64 * PACE, "R-AP-2: one move per pace");
        assert!(!m.to.ends_with("-a"), "R-AP-1: {m:?}");
    }
    assert_eq!(st.desired["g6"].step, 6);
    assert_eq!(st.desired["g6"].steps, 6);
    assert_eq!(st.desired["g2"].steps, 6);
}

#[test]
fn r_ap_2_one_publication_per_pace_from_the_persisted_last_move() {
    let c = site();
    let v = view(&c, &["srv-a"], &[]);
    let mut st = HandoverState::default();
    let p = run(&c, &v, &st, T0);
    publish(&mut st, &p, moving(&p), T0, true);
    let p = run(&c, &v, &st, T0 + 1_000);
    assert_eq!(
        p.next,
        Next::Wait {
            until_ms: T0 + PACE
        }
    );
    assert_eq!(p.next_move_ms, Some(T0 + PACE));
    // A new planner reads the same record: the same answer.
    let fresh_start = st.clone();
    let p = run(&c, &v, &fresh_start, T0 + PACE - 1);
    assert!(matches!(p.next, Next::Wait { .. }));
    let p = run(&c, &v, &st, T0 + PACE);
    assert_eq!(moving(&p).group, "g2");
}

#[test]
fn r_ap_2_an_unconfirmed_move_is_retried_at_the_pace_and_nothing_piles_up() {
    let c = site();
    let v = view(&c, &["srv-a"], &[]);
    let mut st = HandoverState::default();
    let p = run(&c, &v, &st, T0);
    publish(&mut st, &p, moving(&p), T0, false);
    let p = run(&c, &v, &st, T0 + PACE / 2);
    assert_eq!(
        p.next,
        Next::Wait {
            until_ms: T0 + PACE
        }
    );
    let g1 = p.groups[0].unconfirmed.as_ref().unwrap();
    assert_eq!((g1.attempt, g1.retry_at_ms), (1, Some(T0 + PACE)));
    assert_eq!(p.groups[1].planned.as_ref().unwrap().at_ms, T0 + 2 * PACE);
    for k in 1..4u64 {
        let now = T0 + k * PACE;
        let p = run(&c, &v, &st, now);
        let m = moving(&p).clone();
        assert!(m.retry && m.group == "g1" && m.to == "g1-b", "{m:?}");
        publish(&mut st, &p, &m, now, false);
        assert_eq!(st.desired["g1"].attempt as u64, k + 1);
        assert_eq!(st.desired["g1"].seq, k + 1, "a retry is a new publication");
        assert!(
            st.desired.keys().all(|g| g == "g1"),
            "no second move in flight"
        );
    }
    // Confirmed at last: the plan goes on, one pace after the last retry.
    st.confirmed.insert(
        "g1".into(),
        Confirmed {
            leader: "g1-b".into(),
            seq: 4,
            at_ms: T0 + 3 * PACE + 5,
        },
    );
    let p = run(&c, &v, &st, T0 + 3 * PACE + 10);
    assert_eq!(
        p.next,
        Next::Wait {
            until_ms: T0 + 4 * PACE
        }
    );
    assert_eq!(moving(&run(&c, &v, &st, T0 + 4 * PACE)).group, "g2");
}

#[test]
fn r_ap_3_lifting_the_drain_takes_every_group_home_paced() {
    let c = site();
    let mut st = HandoverState::default();
    drive(&c, &view(&c, &["srv-a"], &[]), &mut st, T0);
    let lifted = view(&c, &[], &[]);
    let start = st.planner.last_move_ms.unwrap();
    let moves = drive(&c, &lifted, &mut st, start + 1);
    assert_eq!(moves.len(), 6);
    for (k, (at, m)) in moves.iter().enumerate() {
        assert_eq!(m.kind, MoveKind::Takeover);
        assert!(m.to.ends_with("-a"), "{m:?}");
        assert_eq!(*at, start + (k as u64 + 1) * PACE);
    }
    assert_eq!(moves[0].1.group, "g1", "stable order");
    assert_eq!(
        st.desired["g1"].step, 1,
        "a new plan after the site settled"
    );
}

#[test]
fn r_ap_4_a_group_without_a_normal_follower_is_blocked_and_keeps_its_leader() {
    let c = site();
    let v = view(&c, &["srv-a", "srv-b"], &[]);
    let mut st = HandoverState::default();
    let p = run(&c, &v, &st, T0);
    let g6 = p.groups.iter().find(|g| g.name == "g6").unwrap();
    assert_eq!(g6.leader, "g6-a");
    assert!(g6.planned.is_none());
    let why = g6.blocked.as_deref().unwrap();
    assert!(
        why.contains("g6-a on srv-a draining") && why.contains("g6-b on srv-b draining"),
        "{why}"
    );
    // The others still move, all to srv-c.
    let moves = drive(&c, &v, &mut st, T0);
    assert_eq!(moves.len(), 5);
    assert!(moves.iter().all(|(_, m)| m.to.ends_with("-c")));
    assert!(!st.desired.contains_key("g6"));
}

#[test]
fn a_follower_known_down_is_no_target() {
    let c = site();
    let v = view(&c, &["srv-a"], &["g1-b"]);
    let p = run(&c, &v, &HandoverState::default(), T0);
    assert_eq!(moving(&p).to, "g1-c");
    // Down everywhere else: blocked, with the reason.
    let v = view(&c, &["srv-a"], &["g6-b"]);
    let p = run(&c, &v, &HandoverState::default(), T0);
    let g6 = p.groups.iter().find(|g| g.name == "g6").unwrap();
    assert!(g6
        .blocked
        .as_deref()
        .unwrap()
        .contains("g6-b on srv-b down"));
}

#[test]
fn priority_then_name_orders_the_moves() {
    let mut c = site();
    c.ap_groups[4].priority = 1; // g5
    c.ap_groups[2].priority = 1; // g3
    let v = view(&c, &["srv-a"], &[]);
    let moves = drive(&c, &v, &mut HandoverState::default(), T0);
    let order: Vec<&str> = moves.iter().map(|(_, m)| m.group.as_str()).collect();
    assert_eq!(order, ["g3", "g5", "g1", "g2", "g4", "g6"]);
}

#[test]
fn a_profile_change_mid_plan_replans_without_moving_a_group_twice_for_nothing() {
    let c = site();
    let mut st = HandoverState::default();
    let v = view(&c, &["srv-a"], &[]);
    // Two moves done: g1 -> g1-b, g2 -> g2-c.
    for now in [T0, T0 + PACE] {
        let p = run(&c, &v, &st, now);
        publish(&mut st, &p, moving(&p), now, true);
    }
    // srv-c drains too: g2 (on srv-c) must move again, g1 stays on srv-b,
    // and the pace holds from the last move.
    let v2 = view(&c, &["srv-a", "srv-c"], &[]);
    let p = run(&c, &v2, &st, T0 + PACE + 1);
    assert_eq!(
        p.next,
        Next::Wait {
            until_ms: T0 + 2 * PACE
        }
    );
    let moves = drive(&c, &v2, &mut st, T0 + PACE + 1);
    let groups: Vec<&str> = moves.iter().map(|(_, m)| m.group.as_str()).collect();
    assert_eq!(groups, ["g2", "g3", "g4", "g5", "g6"], "g1 stays on srv-b");
    assert!(moves.iter().all(|(_, m)| m.to.ends_with("-b")));
    assert_eq!(moves[0].0, T0 + 2 * PACE);
    // A drain of a server no leader is on changes nothing.
    let before = st.clone();
    let v3 = view(&c, &["srv-a", "srv-c"], &["g1-c"]);
    assert_eq!(run(&c, &v3, &st, T0 + 10 * PACE).next, Next::Idle);
    assert_eq!(st, before);
}

#[test]
fn a_pending_move_whose_reason_went_away_is_retargeted_first() {
    let c = site();
    let mut st = HandoverState::default();
    let v = view(&c, &["srv-a"], &[]);
    st.confirmed.insert(
        "g1".into(),
        Confirmed {
            leader: "g1-a".into(),
            seq: 0,
            at_ms: T0 - 1,
        },
    );
    let p = run(&c, &v, &st, T0);
    publish(&mut st, &p, moving(&p), T0, false);
    // The drain is lifted before g1-b confirmed: g1 goes back home first,
    // at the pace, and that is all.
    let lifted = view(&c, &[], &[]);
    let p = run(&c, &lifted, &st, T0 + PACE);
    let m = moving(&p);
    assert_eq!(
        (m.group.as_str(), m.to.as_str(), m.kind),
        ("g1", "g1-a", MoveKind::Takeover)
    );
    publish(&mut st, &p, m, T0 + PACE, false);
    assert_eq!(
        run(&c, &lifted, &st, T0 + 5 * PACE).next,
        Next::Idle,
        "g1-a confirmed already"
    );
}

#[test]
fn r_mn_2_a_stale_view_moves_nothing() {
    let c = site();
    let v = view(&c, &["srv-a"], &[]);
    let st = HandoverState::default();
    let p = plan(&Input {
        groups: &c.ap_groups,
        view: &v,
        state: &st,
        pace_ms: PACE,
        now_ms: T0,
        fresh: false,
    });
    assert!(matches!(p.next, Next::Hold { .. }));
    assert_eq!(
        p.groups[0].planned.as_ref().unwrap().to,
        "g1-b",
        "the plan is still shown"
    );
}

#[test]
fn without_a_published_move_the_home_is_the_leader_whatever_was_confirmed() {
    // The agents follow the same rule: nothing published means home.
    let c = site();
    let mut st = HandoverState::default();
    st.confirmed.insert(
        "g2".into(),
        Confirmed {
            leader: "g2-c".into(),
            seq: 0,
            at_ms: T0,
        },
    );
    let p = run(&c, &view(&c, &[], &[]), &st, T0);
    assert_eq!(p.next, Next::Idle);
    assert_eq!(p.groups[1].leader, "g2-a");
    let p = run(&c, &view(&c, &["srv-a"], &[]), &st, T0);
    let g2 = p.groups[1].planned.as_ref().unwrap();
    assert_eq!((g2.to.as_str(), g2.kind), ("g2-c", MoveKind::Handover));
}
