//! Each invariant on a synthetic timeline: it passes on a clean one and
//! fails with the right counter-example when the promise is broken.

use super::ap_log::ApEvent;
use super::invariants::*;
use super::invariants_zone::*;
use super::judge;
use super::operators::{AuditEntry, OpOutcome, OpRecord};
use super::plan::{Done, Fault};
use super::truth::{CallerCall, Held, WorkKind};
use super::watch::StatusSample;
use crate::rehearsal::sampled::Sample;

pub(super) fn held(id: &str, inst: &str, gate: usize, from: f64, to: Option<f64>) -> Held {
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

pub(super) fn op(
    k: usize,
    t: f64,
    action: &str,
    profile: &str,
    rev: u64,
    if_rev: Option<u64>,
) -> OpRecord {
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
        made_per_audit: false,
    }
}

pub(super) fn audit(action: &str, profile: &str, rev: u64) -> AuditEntry {
    AuditEntry {
        at_s: 0.0,
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
pub(super) fn clean() -> Evidence {
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
            skipped: None,
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
        refusals: Vec::new(),
        ap: vec![
            ap(0.5, "ap1-a", true),
            ap(10.2, "ap1-a", false),
            ap(10.3, "ap1-b", true),
        ],
        ap_pace_s: 5.0,
        waits: Vec::new(),
        gate_down: Vec::new(),
    }
}

pub(super) fn ap(t: f64, member: &str, leads: bool) -> ApEvent {
    ApEvent {
        t,
        group: "ap-1".into(),
        member: member.into(),
        leads,
    }
}

#[test]
fn a_clean_timeline_passes_every_invariant() {
    for v in judge(&clean()) {
        assert!(v.pass, "{v:?}");
    }
}

pub(super) fn failed_one(v: &[Invariant], name_part: &str) -> Invariant {
    let failed: Vec<&Invariant> = v.iter().filter(|x| !x.pass).collect();
    assert_eq!(failed.len(), 1, "exactly one invariant fails: {failed:?}");
    assert!(failed[0].name.contains(name_part), "{failed:?}");
    failed[0].clone()
}

/// A call whose caller never saw the 200 to its BYE, through a gate
/// nobody killed: the verdict names the call, its gate and instance.
#[test]
fn a_call_lost_off_any_killed_path_fails_with_its_call_id() {
    let mut e = clean();
    e.calls.get_mut("c2").unwrap().end = None;
    e.held[1].to = None;
    let v = failed_one(&judge(&e), "calls survive");
    let c = v.counterexample.unwrap();
    assert!(
        c.contains("call c2") && c.contains("gate-0") && c.contains("sg-b never saw its BYE"),
        "{c}"
    );
    assert!(c.contains("up at 2.00 s"), "{c}");
    // Its gate killed while it was up: excused, and counted so.
    e.faults.push(Done {
        t: 20.0,
        until: 21.0,
        fault: Fault::KillGate { gate: 0 },
        error: None,
        skipped: None,
    });
    let v = calls_survive(&e);
    assert!(v.pass, "{v:?}");
    assert!(
        v.detail
            .contains("1 failed, 1 of them with their gate or instance killed"),
        "{v:?}"
    );
    // A kill before the call was up does not excuse it.
    e.faults.last_mut().unwrap().t = 1.0;
    assert!(!calls_survive(&e).pass);
    // Its instance killed after the far end answered, a moment before
    // the caller saw the 200: excused.
    e.faults.last_mut().unwrap().fault = Fault::KillInstance {
        instance: "sg-b".into(),
        for_s: 1.0,
    };
    e.faults.last_mut().unwrap().t = 1.95;
    assert!(calls_survive(&e).pass, "{:?}", calls_survive(&e));
}

/// `drained` said while the far end still held an ACKed call its gate
/// carries: the verdict names the sample, the instance and the call.
#[test]
fn drained_while_the_far_end_holds_a_call_fails_with_the_call() {
    let mut e = clean();
    // sg-a's call ends at 11.9 s at the far end; status says drained at 11.0.
    e.status[0].t0 = 11.0;
    e.status[0].t1 = 11.2;
    let v = failed_one(&judge(&e), "drained");
    let c = v.counterexample.unwrap();
    assert!(
        c.contains("11.00–11.20 s said sg-a drained")
            && c.contains("Call c1")
            && c.contains("gate-0"),
        "{c}"
    );
    // Its gate was killed since: it no longer carries it.
    e.faults.push(Done {
        t: 5.0,
        until: 6.0,
        fault: Fault::KillGate { gate: 0 },
        error: None,
        skipped: None,
    });
    assert!(drained_means_empty(&e).pass);
    // An unconfirmed INVITE (no ACK yet) is not a dialog the gate counts.
    let mut e = clean();
    e.status[0].t0 = 0.95;
    e.status[0].t1 = 1.0;
    assert!(drained_means_empty(&e).pass);
    // A registration is held from its REGISTER.
    e.held.push(Held {
        kind: WorkKind::Registration,
        ack: None,
        ..held("r1", "sg-a", 1, 0.5, Some(4.0))
    });
    let v = drained_means_empty(&e);
    assert!(!v.pass && v.counterexample.unwrap().contains("Registration r1"));
    // No status at all: nothing judged is a failure, not a pass.
    let mut e = clean();
    e.status.clear();
    assert!(!drained_means_empty(&e).pass);
}

/// A new call on sg-a 5 s into srv-a's drain (bound 2 s) while sg-b was
/// normal: the verdict names the call and how late it was.
#[test]
fn a_new_call_past_the_bound_fails_with_the_call_and_the_lateness() {
    let mut e = clean();
    e.held.push(held("c3", "sg-a", 2, 15.1, Some(18.0)));
    let v = failed_one(&judge(&e), "no new work");
    let c = v.counterexample.unwrap();
    assert!(
        c.contains("call c3 reached sg-a through gate-2 at 15.10 s, 5.00 s after srv-a entered"),
        "{c}"
    );
    assert!(c.contains("while sg-b was normal"), "{c}");
    // Within the bound: the time a change takes to reach the gates.
    let mut e = clean();
    e.held.push(held("c3", "sg-a", 2, 11.5, Some(18.0)));
    assert!(no_new_work_past_bound(&e).pass);
    // gate-2 was frozen until 14 s: the bound counts from its return.
    let mut e = clean();
    e.held.push(held("c3", "sg-a", 2, 15.1, Some(18.0)));
    e.faults.push(Done {
        t: 13.0,
        until: 14.0,
        fault: Fault::PauseGate {
            gate: 2,
            for_s: 1.0,
        },
        error: None,
        skipped: None,
    });
    assert!(no_new_work_past_bound(&e).pass);
    // Every sg draining (R-AA-4): the call had nowhere else to go.
    let mut e = clean();
    e.held.push(held("c3", "sg-a", 2, 15.1, Some(18.0)));
    e.ops.push(OpRecord {
        servers: vec!["srv-b".into()],
        ..op(0, 9.0, "create", "chaos-b", 4, None)
    });
    e.ops.push(OpRecord {
        servers: vec!["srv-b".into()],
        ..op(0, 9.5, "activate", "chaos-b", 5, None)
    });
    assert!(no_new_work_past_bound(&e).pass);
}

/// Every mg out of service in one sample: the verdict gives the instant.
#[test]
fn no_assignable_mg_fails_with_the_sample() {
    let mut e = clean();
    let mut s = Sample {
        t: 7.5,
        ..Sample::default()
    };
    s.mg_assign.insert("mg-a".into(), "out".into());
    s.mg_assign.insert("mg-b".into(), "down".into());
    e.samples.push(s);
    let v = failed_one(&judge(&e), "last mg");
    assert!(v
        .counterexample
        .unwrap()
        .starts_with("at 7.50 s no mg took new calls"));
}

/// A stale revision accepted, a change audited twice or never, an end
/// state that is not the changes' sum: each fails, naming the change.
#[test]
fn operator_changes_fail_on_stale_audit_and_end_state() {
    // A change made on a revision the profile had left.
    let mut e = clean();
    e.ops[2].if_revision = Some(1);
    let c = failed_one(&judge(&e), "operator").counterexample.unwrap();
    assert!(
        c.contains("deactivate chaos-a --revision 1") && c.contains("was at revision 2"),
        "{c}"
    );
    // A change the operator was told was made, missing from the log.
    let mut e = clean();
    e.audit.remove(1);
    let c = failed_one(&judge(&e), "operator").counterexample.unwrap();
    assert!(
        c.contains("activate chaos-a at 10.00 s (revision 2) is in the audit log 0 times"),
        "{c}"
    );
    // ... or there twice.
    let mut e = clean();
    e.audit.push(audit("activate", "chaos-a", 2));
    let c = failed_one(&judge(&e), "operator").counterexample.unwrap();
    assert!(c.contains("2 times"), "{c}");
    // A made change in the log that no operator made.
    let mut e = clean();
    e.audit.push(audit("activate", "chaos-a", 9));
    let c = failed_one(&judge(&e), "operator").counterexample.unwrap();
    assert!(c.contains("no operator was told was made"), "{c}");
    // The store ends active where the last change deactivated it.
    let mut e = clean();
    e.store_end = Some([("chaos-a".to_string(), (true, vec!["srv-a".to_string()]))].into());
    let c = failed_one(&judge(&e), "operator").counterexample.unwrap();
    assert!(c.contains("the store ends with"), "{c}");
    // A revision the operator knew was stale, accepted.
    let mut e = clean();
    e.ops.push(OpRecord {
        stale_on_purpose: true,
        outcome: OpOutcome::Accepted {
            revision: 3,
            changed: false,
        },
        ..op(1, 25.0, "deactivate", "chaos-a", 3, Some(2))
    });
    let c = failed_one(&judge(&e), "operator").counterexample.unwrap();
    assert!(c.contains("stale on purpose"), "{c}");
    // A deletion is audited with the revision it had before.
    let mut e = clean();
    e.ops.push(op(1, 30.0, "delete", "chaos-a", 3, Some(3)));
    e.audit.push(AuditEntry {
        revision: Some(4),
        before_revision: Some(3),
        ..audit("delete", "chaos-a", 4)
    });
    e.store_end = Some(Default::default());
    for v in judge(&e) {
        assert!(v.pass, "{v:?}");
    }
}

/// sg-b, the only other sg, was down (killed, not yet seen back): a new
/// call on the draining sg-a had nowhere else to go.
#[test]
fn a_call_past_the_bound_is_excused_while_the_others_are_down() {
    let mut e = clean();
    e.held.push(held("c3", "sg-a", 2, 15.1, Some(18.0)));
    e.faults.push(Done {
        t: 12.0,
        until: 14.0,
        fault: Fault::KillInstance {
            instance: "sg-b".into(),
            for_s: 2.0,
        },
        error: None,
        skipped: None,
    });
    assert!(no_new_work_past_bound(&e).pass);
    // Back and seen healthy long before: not excused.
    e.faults.last_mut().unwrap().until = 3.0;
    e.faults.last_mut().unwrap().t = 1.0;
    assert!(!no_new_work_past_bound(&e).pass);
}

/// A change the CLI saw fail (the store away) that the audit log shows
/// made counts as made; one the log does not show does not.
#[test]
fn a_failed_change_is_made_when_the_audit_log_says_so() {
    use super::operators::resolve;
    let mut e = clean();
    e.ops[2].outcome = OpOutcome::Failed {
        message: "store unavailable".into(),
    };
    // The deactivation is in the log: made, and every invariant holds.
    e.audit[2].at_s = 20.05;
    let ops = resolve(&e.ops, &e.audit);
    assert!(
        ops[2].made_per_audit && ops[2].made() == Some(3),
        "{:?}",
        ops[2]
    );
    e.ops = ops;
    for v in judge(&e) {
        assert!(v.pass, "{v:?}");
    }
    // Not in the log: not made, so the store should have stayed active.
    let mut e = clean();
    e.ops[2].outcome = OpOutcome::Failed {
        message: "store unavailable".into(),
    };
    e.audit.remove(2);
    e.ops = resolve(&e.ops, &e.audit);
    assert_eq!(e.ops[2].made(), None);
    let v = super::invariants_ops::operators(&e);
    assert!(!v.pass && v.counterexample.unwrap().contains("the store ends with"));
}
