//! Every verdict's wording against its figures, table-driven: synthetic
//! samples and calls in, the verdict and its detail out, word for word, so
//! a detail never claims what the figures do not show (R-AA-1's left-out
//! count, R-ESG-5's "while it drained" of a home that never drained,
//! R-MN-2 with a gate that restarted just before the outage).

use std::collections::BTreeMap;

use super::load::{CallEvent, LoadRun};
use super::play::{Mark, Played};
use super::report::Calls;
use super::sample::Sample;
use super::scenario::{AccountKind, Action, LoadKind};
use super::verdict::judge;
use crate::site::{Counts, Layout, RunSpec, StoreKind};

/// Two esg (esg-a is the single-instance account's home), one gate.
fn layout() -> Layout {
    let counts = Counts {
        sg: 0,
        esg: 2,
        mg: 0,
        ..Counts::default()
    };
    let run = RunSpec {
        net: [127, 60, 1],
        gates: 1,
        store: StoreKind::Etcd,
        gate_deadline_s: 20,
        mg_drain_window_s: None,
        ap_pace_s: None,
    };
    Layout::from_counts(&counts, &run).unwrap()
}

/// One sample: `t`, whether the gate is ready (answered, states
/// published), the instances it shows draining, cumulative new work, and
/// cumulative new work on purpose `(instance, reason, n)`.
fn sample(
    t: f64,
    ready: bool,
    draining: &[&str],
    new_work: &[(&str, u64)],
    on_purpose: &[(&str, &str, u64)],
) -> Sample {
    let mut s = Sample {
        t,
        gates_up: 1,
        gates_ready: usize::from(ready),
        ..Sample::default()
    };
    for id in draining.iter().filter(|_| ready) {
        s.gates_draining.insert((*id).into(), 1);
    }
    for (id, n) in new_work {
        s.new_work.insert((*id).into(), *n);
    }
    for (id, why, n) in on_purpose {
        s.on_purpose
            .entry((*id).into())
            .or_default()
            .insert((*why).into(), *n);
    }
    s
}

fn mark(t: f64, action: Action) -> Mark {
    Mark {
        t,
        label: action.label(),
        error: None,
        action,
    }
}

fn activate(t: f64, server: &str) -> Mark {
    mark(
        t,
        Action::Activate {
            profile: "maint".into(),
            servers: vec![server.into()],
        },
    )
}

fn deactivate(t: f64) -> Mark {
    mark(
        t,
        Action::Deactivate {
            profile: "maint".into(),
        },
    )
}

/// Calls of one load, each `(t up, answering instance)`, all ended.
fn calls(l: &Layout, listener: &str, account: AccountKind, up: &[(f64, &str)]) -> LoadRun {
    let ip = |id: &str| l.instances().into_iter().find(|i| i.id == id).unwrap().ip;
    let name = match account {
        AccountKind::Single => "rehearsal-single",
        AccountKind::Multi => "rehearsal-carrier",
    };
    let mut run = LoadRun {
        label: "load".into(),
        gate: 0,
        listener: listener.into(),
        account,
        account_name: Some(name.into()),
        report: None,
        kind: LoadKind::Call,
        media: None,
        events: Vec::new(),
        answered: BTreeMap::new(),
        refused_why: BTreeMap::new(),
    };
    for (k, (t, who)) in up.iter().enumerate() {
        let id = format!("{name}-{k}");
        run.events.push((*t, CallEvent::Up, id.clone()));
        run.events.push((*t + 1.0, CallEvent::End, id.clone()));
        run.answered.insert(id, ip(who));
    }
    run
}

fn played(marks: Vec<Mark>, samples: Vec<Sample>, loads: Vec<LoadRun>) -> Played {
    Played {
        marks,
        samples,
        loads,
        gate_stops: Vec::new(),
    }
}

/// srv-a drains from 4 s to 13 s; the gate shows esg-a draining from the
/// sample at 5 s to the one at 13 s. esg-a takes `a` new calls in the
/// drain, `kept` of them on purpose (single-instance account); esg-b 80;
/// after the lift, esg-a 10 a second again.
fn esg_drain(a: u64, kept: u64) -> Played {
    let mut samples = Vec::new();
    for t in 0..=16 {
        let t = f64::from(t);
        let draining: &[&str] = if (5.0..13.0).contains(&t) {
            &["esg-a"]
        } else {
            &[]
        };
        let inside = (t - 5.0).clamp(0.0, 8.0) / 8.0;
        let nw = [
            (
                "esg-a",
                40 + (a as f64 * inside) as u64 + 10 * (t - 13.0).max(0.0) as u64,
            ),
            ("esg-b", 40 + (80.0 * inside) as u64),
        ];
        let op = [(
            "esg-a",
            "single_instance_account",
            (kept as f64 * inside) as u64,
        )];
        samples.push(sample(t, true, draining, &nw, &op));
    }
    played(
        vec![activate(4.0, "srv-a"), deactivate(13.0)],
        samples,
        Vec::new(),
    )
}

/// Single-instance calls, 4 a second from 0 s to 16 s, on their home
/// esg-a, but call number `stray` (if any) on esg-b.
fn single_calls(l: &Layout, stray: Option<u32>) -> LoadRun {
    let up: Vec<(f64, &str)> = (0..64u32)
        .map(|k| {
            let who = if Some(k) == stray { "esg-b" } else { "esg-a" };
            (f64::from(k) / 4.0, who)
        })
        .collect();
    calls(l, "providers", AccountKind::Single, &up)
}

/// A store outage from 5 s to 13 s with esg-a drained all along; the gate
/// restarted at 4 s and published its states only from `ready_at`.
fn outage(ready_at: f64) -> Played {
    let l = layout();
    let mut samples = Vec::new();
    for t in 0..=16 {
        let t = f64::from(t);
        let ready = !(4.0..ready_at).contains(&t);
        let mut s = sample(t, ready, &["esg-a"], &[], &[]);
        if ready && (5.0..13.0).contains(&t) {
            s.gates_stale = 1;
        }
        samples.push(s);
    }
    let up: Vec<(f64, &str)> = (0..32u32).map(|k| (f64::from(k) / 2.0, "esg-b")).collect();
    played(
        vec![
            activate(1.0, "srv-a"),
            mark(5.0, Action::StopEtcd { for_s: 8.0 }),
        ],
        samples,
        vec![calls(&l, "inside", AccountKind::Multi, &up)],
    )
}

#[test]
fn every_verdicts_wording_matches_its_figures() {
    let l = layout();
    let no_calls = Calls::default();
    let home_drains = {
        let mut p = esg_drain(32, 32);
        p.loads.push(single_calls(&l, None));
        p
    };
    let home_stays = {
        let mut p = esg_drain(0, 0);
        p.marks = vec![activate(4.0, "srv-b"), deactivate(13.0)];
        p.loads.push(single_calls(&l, None));
        p
    };
    let stray = {
        let mut p = esg_drain(32, 32);
        p.loads.push(single_calls(&l, Some(20)));
        p
    };
    let never_applied = {
        let mut p = esg_drain(0, 0);
        for s in &mut p.samples {
            s.gates_draining.clear();
        }
        p
    };
    // Provider leg: the multi-instance account's calls, 5 a second, on
    // esg-b in the drain (esg-a before and after); the inside leg's, 3 a
    // second, on esg-b; one inside call refused at 8 s in `refusing`.
    let legs = |refusing: bool, stray: bool| {
        let mut p = esg_drain(32, 32);
        let multi: Vec<(f64, &str)> = (0..80u32)
            .map(|k| {
                let t = f64::from(k) / 5.0;
                let drained = (5.0..13.0).contains(&t) && !(stray && k == 40);
                (t, if drained { "esg-b" } else { "esg-a" })
            })
            .collect();
        p.loads
            .push(calls(&l, "providers", AccountKind::Multi, &multi));
        let inside: Vec<(f64, &str)> = (0..48u32).map(|k| (f64::from(k) / 3.0, "esg-b")).collect();
        let mut run = calls(&l, "inside", AccountKind::Multi, &inside);
        if refusing {
            run.events
                .push((8.0, CallEvent::Refused, "refused-1".into()));
        }
        p.loads.push(run);
        p
    };
    let with_single = {
        let mut p = legs(false, false);
        p.loads.push(single_calls(&l, None));
        p
    };
    let every_esg = {
        let mut p = esg_drain(0, 0);
        for s in &mut p.samples {
            if (5.0..13.0).contains(&s.t) {
                s.gates_draining.insert("esg-b".into(), 1);
            }
        }
        p.marks = vec![activate(4.0, "srv-a"), activate(4.0, "srv-b")];
        let up: Vec<(f64, &str)> = (0..32u32).map(|k| (f64::from(k) / 2.0, "esg-b")).collect();
        p.loads.push(calls(&l, "inside", AccountKind::Multi, &up));
        p
    };
    let established = Calls {
        established: 1000,
        established_failed: 2,
        ..Calls::default()
    };
    #[rustfmt::skip]
    let cases: Vec<(&str, &str, Played, &Calls, bool, &str)> = vec![
        ("R-AA-1 leaves out what R-ESG-5 sends home, and says how much",
         "R-AA-1", esg_drain(32, 32), &no_calls, true,
         "esg-a took 0 new calls in 8 s of drain (maint, applied by every gate 1 s after the activation), leaving out 32 the rules send there on purpose (single-instance account, R-ESG-5 32); the others took 80"),
        ("R-AA-1 with nothing on purpose says 0 left out",
         "R-AA-1", esg_drain(0, 0), &no_calls, true,
         "esg-a took 0 new calls in 8 s of drain (maint, applied by every gate 1 s after the activation), leaving out 0 the rules send there on purpose; the others took 80"),
        ("R-AA-1 fails on new calls beyond those sent on purpose",
         "R-AA-1", esg_drain(40, 32), &no_calls, false,
         "esg-a took 8 new calls in 8 s of drain (maint, applied by every gate 1 s after the activation), leaving out 32 the rules send there on purpose (single-instance account, R-ESG-5 32); the others took 80"),
        ("R-AA-1 fails when the gates never applied the drain",
         "R-AA-1", never_applied, &no_calls, false,
         "the gates never all showed esg-a draining before 13 s"),
        ("R-AA-3 counts the calls after the gates showed the lift",
         "R-AA-3", esg_drain(0, 0), &no_calls, true,
         "new calls after maint was lifted: esg-a 30"),
        ("R-ESG-5 with a home that drained says how many while it drained",
         "R-ESG-5", home_drains, &no_calls, true,
         "64 of 64 calls of the single-instance account went to its home esg-a, 32 of them in the 8 s it drained (esg-a 64)"),
        ("R-ESG-5 with a home that never drained says so",
         "R-ESG-5", home_stays, &no_calls, true,
         "64 of 64 calls of the single-instance account went to its home esg-a, which did not drain in the run (esg-a 64)"),
        ("R-ESG-5 fails on a call away from home",
         "R-ESG-5", stray, &no_calls, false,
         "63 of 64 calls of the single-instance account went to its home esg-a, 31 of them in the 8 s it drained (esg-a 63, esg-b 1)"),
        ("R-ESG-5 with no call has nothing to judge",
         "R-ESG-5", esg_drain(0, 0), &no_calls, false,
         "no call of the single-instance account: nothing to judge"),
        ("R-MN-2 judges the view only once a restarted gate published it",
         "R-MN-2", outage(6.0), &no_calls, true,
         "store away 5–13 s: 16 calls established meanwhile, 0 of them failed; every gate said stale: yes; drain states unchanged: yes (in 7 samples with every gate's view); every gate fresh again after: yes"),
        ("R-MN-2 with no sample of every gate's view does not claim it unchanged",
         "R-MN-2", outage(13.0), &no_calls, false,
         "store away 5–13 s: 16 calls established meanwhile, 0 of them failed; every gate said stale: no; drain states unchanged: not known (in 0 samples with every gate's view); every gate fresh again after: yes"),
        ("R-ESG-1 counts the multi-instance account's calls on the provider leg",
         "R-ESG-1", legs(false, false), &no_calls, true,
         "provider leg, multi-instance account, 8 s of drain (maint): esg-a took 0 new calls, the others 40 (esg-b 40)"),
        ("R-ESG-1 fails on one of them on the draining esg",
         "R-ESG-1", legs(false, true), &no_calls, false,
         "provider leg, multi-instance account, 8 s of drain (maint): esg-a took 1 new calls, the others 39 (esg-a 1, esg-b 39)"),
        ("R-ESG-3 with no single-instance load says so, not 0 kept",
         "R-ESG-3", legs(false, false), &no_calls, true,
         "8 s of drain (maint): inside leg 24 new calls (esg-b 24), 0 refused; no load of the single-instance account"),
        ("R-ESG-3 counts what the draining esg kept of the single-instance account",
         "R-ESG-3", with_single, &no_calls, true,
         "8 s of drain (maint): inside leg 24 new calls (esg-b 24), 0 refused; esg-a took 32 new calls of the single-instance account"),
        ("R-ESG-3 fails on an inside call refused",
         "R-ESG-3", legs(true, false), &no_calls, false,
         "8 s of drain (maint): inside leg 24 new calls (esg-b 24), 1 refused; no load of the single-instance account"),
        ("R-AA-4 judges the samples in which every esg drained in every gate's view",
         "R-AA-4", every_esg, &no_calls, true,
         "every esg draining for 8 s (from 5 s): 16 new calls served (esg-b 16), 0 refused"),
        ("R-AA-4 with no such moment has nothing to judge",
         "R-AA-4", esg_drain(0, 0), &no_calls, false,
         "no moment in which every sg or every esg drained: nothing to judge"),
        ("R-GW-1 with no gate stopped has nothing to judge",
         "R-GW-1", esg_drain(0, 0), &no_calls, false,
         "no gate was stopped: nothing to judge"),
        ("R-SG-4 counts established calls that failed",
         "R-SG-4", esg_drain(0, 0), &established, false,
         "2 of 1000 established calls failed"),
        ("R-SG-4 with no call has nothing to judge",
         "R-SG-4", esg_drain(0, 0), &no_calls, false,
         "no call was established: nothing to judge"),
    ];
    for (what, rule, p, c, pass, detail) in cases {
        let v = judge(rule, &l, &p, c);
        assert_eq!((v.pass, v.detail.as_str()), (pass, detail), "{what}");
    }
}
