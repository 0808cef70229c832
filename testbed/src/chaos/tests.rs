//! Each invariant on a synthetic timeline: it passes on a clean one and
//! fails with the right counter-example when the promise is broken.

use super::invariants::*;
use super::operators::{OpOutcome, OpRecord};
use super::plan::{Done, Fault};
use super::truth::{CallerCall, Held, WorkKind};
use super::watch::StatusSample;
use crate::rehearsal::sampled::Sample;

fn held(id: &str, inst: &str, gate: usize, from: f64, to: Option<f64>) -> Held {
    Held {
        id: id.into(),
        kind: WorkKind::Call,
        instance: inst.into(),
        gate: Some(gate),
        from,
        ack: Some(from + 0.05),
        to,
    }
}

fn op(k: usize, t: f64, action: &str, profile: &str, rev: u64, if_rev: Option<u64>) -> OpRecord {
    OpRecord {
        operator: k,
        t0: t,
        t1: t + 0.1,
        action: action.into(),
        profile: profile.into(),
        servers: vec!["srv-a".into()],
        if_revision: if_rev,
        stale_on_purpose: false,
        outcome: OpOutcome::Accepted {
            revision: rev,
            changed: true,
        },
    }
}

fn audit(action: &str, profile: &str, rev: u64) -> AuditEntry {
    AuditEntry {
        action: action.into(),
        profile: Some(profile.into()),
        status: 200,
        revision: Some(rev),
        before_revision: None,
    }
}

/// A clean run: two calls through gate-0 to sg-a and sg-b; chaos-a
/// (srv-a) active from 10 s to 20 s; status says sg-a drained once its
/// call ended; a gate-1 kill; media-ctl always has an mg.
fn clean() -> Evidence {
    let mut calls = std::collections::BTreeMap::new();
    for (id, up, end) in [("c1", 1.0, 12.0), ("c2", 2.0, 30.0)] {
        calls.insert(
            id.to_string(),
            CallerCall {
                up: Some(up),
                end: Some(end),
            },
        );
    }
    let mut mg = Sample::default();
    mg.mg_assign.insert("mg-a".into(), "out".into());
    mg.mg_assign.insert("mg-b".into(), "normal".into());
    let ops = vec![
        op(0, 5.0, "create", "chaos-a", 1, None),
        op(1, 10.0, "activate", "chaos-a", 2, Some(1)),
        op(2, 20.0, "deactivate", "chaos-a", 3, Some(2)),
    ];
    Evidence {
        held: vec![
            held("c1", "sg-a", 0, 0.9, Some(11.9)),
            held("c2", "sg-b", 0, 1.9, Some(29.9)),
        ],
        calls,
        faults: vec![Done {
            t: 15.0,
            until: 16.0,
            fault: Fault::KillGate { gate: 1 },
            error: None,
        }],
        status: vec![StatusSample {
            t0: 13.0,
            t1: 13.2,
            states: [("sg-a".to_string(), "drained".to_string())].into(),
        }],
        audit: vec![
            audit("create", "chaos-a", 1),
            audit("activate", "chaos-a", 2),
            audit("deactivate", "chaos-a", 3),
        ],
        store_end: Some([("chaos-a".to_string(), (false, vec!["srv-a".to_string()]))].into()),
        ops,
        samples: vec![mg],
        instances: vec![
            ("sg-a".into(), "sg".into(), "srv-a".into()),
            ("sg-b".into(), "sg".into(), "srv-b".into()),
        ],
        bound_s: 2.0,
        end_s: 40.0,
    }
}

#[test]
fn a_clean_timeline_passes_every_invariant() {
    for v in judge(&clean()) {
        assert!(v.pass, "{v:?}");
    }
}
