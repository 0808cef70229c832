//! The invariants added for loss, waits, Active-Passive and refusals, on
//! synthetic timelines (the clean one of [`super::tests`]): each fails
//! with its counter-example and is excused only where the promise allows.

use super::invariants::*;
use super::invariants_zone::*;
use super::judge;
use super::plan::{Done, Fault};
use super::tests::{clean, failed_one, held};
use super::truth::{Held, WorkKind};

fn loss(t: f64, until: f64, leg: super::plan::Leg) -> Done {
    Done {
        t,
        until,
        fault: Fault::LosePackets {
            leg,
            share: 0.2,
            for_s: until - t,
        },
        error: None,
        skipped: None,
    }
}

/// A registration that reached draining sg-a 5 s into srv-a's drain
/// (bound 2 s) fails like a call; a loss on the gate-to-instance leg that
/// began in time and ended less than T2 before it excuses it (its gate
/// routed the first copy in time, a retransmission got through late), but
/// never a call (the INVITE is not retransmitted) nor a loss elsewhere.
#[test]
fn new_work_past_the_bound_is_excused_by_a_loss_only_where_retransmission_explains_it() {
    use super::plan::Leg;
    let reg = |id: &str, from: f64| Held {
        kind: WorkKind::Registration,
        ack: None,
        ..held(id, "sg-a", 2, from, Some(from + 4.0))
    };
    let mut e = clean();
    e.held.push(reg("r3", 15.1));
    let c = failed_one(&judge(&e), "no new work")
        .counterexample
        .unwrap();
    assert!(
        c.starts_with("registration r3 reached sg-a through gate-2 at 15.10 s, 5.00 s after"),
        "{c}"
    );
    // Lost between gate and instance from 9 s to 12 s: the first copy was
    // routed before 12.1 s (since + bound), the last retransmission lands
    // at most T2 (4 s) after the loss ended.
    e.faults.push(loss(9.0, 12.0, Leg::GateToInstance));
    let v = no_new_work_past_bound(&e);
    assert!(
        v.pass && v.detail.contains("1 late behind a packet loss"),
        "{v:?}"
    );
    // A loss that began after the bound had passed explains nothing.
    e.faults.last_mut().unwrap().t = 12.5;
    assert!(!no_new_work_past_bound(&e).pass);
    // Nor one that ended more than T2 before it reached the instance.
    *e.faults.last_mut().unwrap() = loss(9.0, 11.0, Leg::GateToInstance);
    assert!(!no_new_work_past_bound(&e).pass);
    // Nor one on the callers' leg: the gate routes what it receives then.
    *e.faults.last_mut().unwrap() = loss(9.0, 12.0, Leg::CallerToGate);
    assert!(!no_new_work_past_bound(&e).pass);
    // Its instance killed from 9 s and started again at 12 s: the
    // retransmission its new run answered was routed in time.
    *e.faults.last_mut().unwrap() = Done {
        fault: Fault::KillInstance {
            instance: "sg-a".into(),
            for_s: 3.0,
        },
        ..loss(9.0, 12.0, Leg::CallerToGate)
    };
    assert!(no_new_work_past_bound(&e).pass);
    // Another instance's kill explains nothing (sg-b back and seen up by
    // 13.0 s, before the bound's window).
    *e.faults.last_mut().unwrap() = Done {
        fault: Fault::KillInstance {
            instance: "sg-b".into(),
            for_s: 2.5,
        },
        ..loss(9.0, 11.5, Leg::CallerToGate)
    };
    assert!(!no_new_work_past_bound(&e).pass);
    // A call is never excused by a loss.
    let mut e = clean();
    e.held.push(held("c3", "sg-a", 2, 15.1, Some(18.0)));
    e.faults.push(loss(9.0, 12.0, Leg::GateToInstance));
    let c = no_new_work_past_bound(&e).counterexample.unwrap();
    assert!(c.starts_with("call c3"), "{c}");
    // Nor does a loss excuse an established call that never ended: SIP's
    // retransmissions (re-INVITE, BYE, the 200 until its ACK) outlast it.
    let mut e = clean();
    e.calls.get_mut("c2").unwrap().end = None;
    e.faults.push(loss(20.0, 24.0, Leg::GateToInstance));
    let c = failed_one(&judge(&e), "calls survive")
        .counterexample
        .unwrap();
    assert!(c.contains("call c2"), "{c}");
}

/// A call that reached draining sg-a 5 s into srv-a's drain fails, unless
/// its gate held every normal instance (sg-b) down at that instant behind
/// a gate->instance packet loss: R-AA-4 then sends it to a draining one on
/// purpose. A down the gate logged without such a loss, at another time,
/// or by another gate excuses nothing.
#[test]
fn new_work_to_a_draining_instance_is_excused_when_its_gate_saw_every_normal_one_down() {
    use super::health_log::SawDown;
    use super::plan::Leg;
    let saw = |gate: usize, from: f64, until: f64| SawDown {
        gate,
        instance: "sg-b".into(),
        from,
        until,
    };
    let mut e = clean();
    e.held.push(held("c3", "sg-a", 2, 15.1, Some(18.0)));
    e.gate_down.push(saw(2, 14.8, 15.3));
    // Down in the gate's view, but no loss explains it.
    let c = no_new_work_past_bound(&e).counterexample.unwrap();
    assert!(c.starts_with("call c3 reached sg-a through gate-2"), "{c}");
    e.faults.push(loss(13.0, 15.0, Leg::GateToInstance));
    let v = no_new_work_past_bound(&e);
    assert!(
        v.pass
            && v.detail
                .contains("1 sent there while their gate held every normal instance down"),
        "{v:?}"
    );
    // Another gate's view of sg-b says nothing of gate-2's choice.
    e.gate_down[0].gate = 1;
    assert!(!no_new_work_past_bound(&e).pass);
    // Up again before the call was routed.
    e.gate_down[0] = saw(2, 14.0, 14.5);
    assert!(!no_new_work_past_bound(&e).pass);
    // A loss on the callers' leg loses no probe.
    e.gate_down[0] = saw(2, 14.8, 15.3);
    *e.faults.last_mut().unwrap() = loss(13.0, 15.0, Leg::CallerToGate);
    assert!(!no_new_work_past_bound(&e).pass);
}

/// `ringsync wait drained --server srv-a` returned drained at 11.5 s while
/// sg-a held c1 (until 11.9 s): the verdict names the wait and the call.
/// One that timed out, or returned after the call ended, passes.
#[test]
fn a_wait_drained_that_returns_while_the_far_end_holds_a_call_fails() {
    use super::waits::WaitReturn;
    let mut e = clean();
    e.waits.push(WaitReturn {
        server: "srv-a".into(),
        t0: 10.5,
        t1: 11.5,
        code: Some(0),
        said: "1 of 1 drained".into(),
    });
    let c = failed_one(&judge(&e), "drained").counterexample.unwrap();
    assert!(
        c.starts_with("`ringsync wait drained --server srv-a` (started 10.50 s) returned drained at 11.50 s while sg-a held Call c1"),
        "{c}"
    );
    e.waits[0].code = Some(4);
    assert!(drained_means_empty(&e).pass);
    e.waits[0] = WaitReturn {
        t1: 12.2,
        code: Some(0),
        ..e.waits[0].clone()
    };
    let v = drained_means_empty(&e);
    assert!(
        v.pass && v.detail.contains("run 1 times, 1 returned drained"),
        "{v:?}"
    );
}

/// Two members leading at once, or a group without a leader for longer
/// than the pace: each fails with the group, the members and the instants.
#[test]
fn ap_two_leaders_or_none_past_the_pace_fail_with_the_instants() {
    let mut e = clean();
    // ap1-b begins to lead 0.7 s before ap1-a follows.
    e.ap[2].t = 9.5;
    e.ap.sort_by(|a, b| a.t.total_cmp(&b.t));
    let c = failed_one(&judge(&e), "Active-Passive")
        .counterexample
        .unwrap();
    assert_eq!(
        c,
        "group ap-1 had two leaders for 0.700 s: ap1-b began to lead at 9.500 s while ap1-a led (since 0.500 s)"
    );
    // Within the agents' skew (no fence between them): counted, not failed.
    e.ap[1].t = 10.15;
    let v = super::ap::one_leader(&e);
    assert!(
        v.pass
            && v.detail
                .contains("1 times two led at once, for 0.050 s at most"),
        "{v:?}"
    );
    // None from 10.2 s to 15.7 s, pace 5 s.
    let mut e = clean();
    e.ap[2].t = 15.7;
    let c = failed_one(&judge(&e), "Active-Passive")
        .counterexample
        .unwrap();
    assert!(
        c.starts_with("group ap-1 had no leader from 10.20 s to 15.70 s (5.50 s; pace 5 s)"),
        "{c}"
    );
    // Within the pace: passes, and says the longest gap.
    e.ap[2].t = 15.0;
    let v = super::ap::one_leader(&e);
    assert!(
        v.pass && v.detail.contains("longest without a leader 4.800 s"),
        "{v:?}"
    );
    // Left without one to the end.
    e.ap.pop();
    assert!(!super::ap::one_leader(&e).pass);
    // No agent record at all is no evidence, not a pass.
    e.ap.clear();
    assert!(!super::ap::one_leader(&e).pass);
}

/// A call refused (503) by gate-0 at 15 s while sg-b was normal and up
/// fails, naming the call, the gate and sg-b; refused by a gate that was
/// being killed then, or while the only other sg was down, it is excused.
#[test]
fn a_refusal_while_another_instance_could_take_it_fails() {
    use super::truth::Refusal;
    let mut e = clean();
    e.refusals.push(Refusal {
        t: 15.0,
        id: "c9".into(),
        kind: WorkKind::Call,
        gate: Some(0),
        svc: "sg".into(),
        why: "No Instance Available".into(),
    });
    let c = failed_one(&judge(&e), "none refused")
        .counterexample
        .unwrap();
    assert_eq!(
        c,
        "call c9 refused (503 No Instance Available) by gate-0 at 15.00 s while sg-b was normal and up"
    );
    // gate-1 was killed at 15 s and back at 16 s: its own refusal.
    e.refusals[0].gate = Some(1);
    assert!(none_refused_while_one_could_take_it(&e).pass);
    // Long after that kill: not excused.
    e.refusals[0].t = 25.0;
    assert!(!none_refused_while_one_could_take_it(&e).pass);
    // A REGISTER refused then may have been routed up to Timer F (32 s)
    // before, while gate-1 was down: excused.
    e.refusals[0].kind = WorkKind::Registration;
    assert!(none_refused_while_one_could_take_it(&e).pass);
    e.refusals[0].kind = WorkKind::Call;
    // sg-a draining and sg-b down: nowhere to go.
    e.refusals[0].t = 15.0;
    e.refusals[0].gate = Some(0);
    e.faults.push(Done {
        t: 14.0,
        until: 16.0,
        fault: Fault::KillInstance {
            instance: "sg-b".into(),
            for_s: 2.0,
        },
        error: None,
        skipped: None,
    });
    let v = none_refused_while_one_could_take_it(&e);
    assert!(v.pass && v.detail.starts_with("1 refusals (503)"), "{v:?}");
}

/// srv-a entered the zone at 10.1 s and the whole store was stopped at
/// 11 s, before the change could reach every gate, until 14 s: a gate kept
/// its last view (R-MN-2), and the bound counts from the store's return.
/// A store stopped after the bound had lapsed excuses nothing.
#[test]
fn the_bound_counts_from_the_stores_return_when_it_went_away_in_time() {
    let mut e = clean();
    e.held.push(held("c3", "sg-a", 2, 15.5, Some(18.0)));
    assert!(!no_new_work_past_bound(&e).pass);
    e.faults.push(Done {
        t: 11.0,
        until: 14.0,
        fault: Fault::StopStore { for_s: 3.0 },
        error: None,
        skipped: None,
    });
    assert!(no_new_work_past_bound(&e).pass);
    // Or while the store was still away.
    e.faults.last_mut().unwrap().until = 16.0;
    assert!(no_new_work_past_bound(&e).pass);
    e.faults.last_mut().unwrap().until = 14.0;
    e.faults.last_mut().unwrap().t = 12.5;
    let c = no_new_work_past_bound(&e).counterexample.unwrap();
    assert!(
        c.starts_with("call c3 reached sg-a through gate-2 at 15.50 s"),
        "{c}"
    );
}

/// A call its caller gave up with no answer from any gate (every attempt
/// silent) fails the refusal invariant, naming the call, unless packets
/// were being dropped while it was tried: a relay or gate that swallows
/// calls cannot pass for a healthy edge.
#[test]
fn a_call_no_gate_answered_fails_unless_packets_were_dropped() {
    use super::plan::Leg;
    use super::truth::{Refusal, NO_ANSWER};
    let mut e = clean();
    e.refusals.push(Refusal {
        t: 30.0,
        id: "c9".into(),
        kind: WorkKind::Call,
        gate: None,
        svc: "sg".into(),
        why: NO_ANSWER.into(),
    });
    let c = failed_one(&judge(&e), "none refused")
        .counterexample
        .unwrap();
    assert_eq!(
        c,
        "call c9 got no answer from any gate (its attempts from 21.50 s to 30.00 s) while no packet was being dropped"
    );
    // A loss on either leg while it was tried explains it.
    e.faults.push(loss(24.0, 26.0, Leg::CallerToGate));
    let v = none_refused_while_one_could_take_it(&e);
    assert!(
        v.pass
            && v.detail
                .ends_with("1 calls no gate answered (1 while packets were dropped)"),
        "{v:?}"
    );
    // One that ended before the attempts began does not.
    *e.faults.last_mut().unwrap() = loss(18.0, 21.0, Leg::GateToInstance);
    assert!(!none_refused_while_one_could_take_it(&e).pass);
}
