//! The promises on calls a chaos run checks against the far ends' ground
//! truth, each a verdict with its first counter-example (the Call-ID, the
//! instance, the instants). Pure functions of the run's [`Evidence`], so
//! each is tested on synthetic timelines (`tests.rs`).

use super::evidence::verdict;
pub use super::evidence::{Evidence, Invariant};
use super::plan::Fault;
use super::truth::{Held, WorkKind};

/// When gate `g` was killed at or after `from` (and at or before `to`).
fn killed(e: &Evidence, g: Option<usize>, from: f64, to: f64) -> Option<f64> {
    e.faults
        .iter()
        .filter(|f| {
            f.error.is_none() && matches!(f.fault, Fault::KillGate { gate } if Some(gate) == g)
        })
        .map(|f| f.t)
        .find(|t| *t >= from && *t <= to)
}

/// When instance `id` was killed at or after `from` (and at or before `to`).
fn instance_killed(e: &Evidence, id: &str, from: f64, to: f64) -> Option<f64> {
    e.faults
        .iter()
        .filter(|f| {
            f.error.is_none()
                && matches!(&f.fault, Fault::KillInstance { instance, .. } if instance == id)
        })
        .map(|f| f.t)
        .find(|t| *t >= from && *t <= to)
}

/// Seconds the gates' health probes take to see an instance back (two
/// probes 500 ms apart, and one more for a margin).
pub(super) const HEALTH_S: f64 = 1.5;

/// Whether instance `id` was down at some moment of `[a, b]` (killed and
/// not yet seen back by the gates' probes).
pub(super) fn down(e: &Evidence, id: &str, a: f64, b: f64) -> bool {
    e.faults.iter().any(|f| {
        matches!(&f.fault, Fault::KillInstance { instance, .. } if instance == id)
            && f.t <= b
            && f.until + HEALTH_S >= a
    })
}

fn call<'a>(e: &'a Evidence, id: &str) -> Option<&'a Held> {
    e.held
        .iter()
        .find(|h| h.id == id && h.kind == WorkKind::Call)
}

pub(super) fn gate_name(g: Option<usize>) -> String {
    g.map_or("an unknown gate".into(), |g| format!("gate-{g}"))
}

/// No established call failed (no 200 to its BYE) unless a process on its
/// own path (its gate, its instance) was killed while it was up.
pub fn calls_survive(e: &Evidence) -> Invariant {
    const NAME: &str = "calls survive faults off their path";
    if e.calls.is_empty() {
        return verdict(
            NAME,
            Some("no call was established: nothing to judge".into()),
            "0 calls".into(),
        );
    }
    let (mut failed, mut excused, mut first) = (0, 0, None);
    for (id, c) in &e.calls {
        let (Some(up), None) = (c.up, c.end) else {
            continue;
        };
        failed += 1;
        let h = call(e, id);
        let gate = h.and_then(|h| h.gate);
        let inst = h.map(|h| h.instance.as_str()).unwrap_or_default();
        // Up from the far end's 200 on, which its caller sees a moment later.
        let from = h.map_or(up, |h| h.from.min(up));
        if killed(e, gate, from, e.end_s).is_some()
            || instance_killed(e, inst, from, e.end_s).is_some()
        {
            excused += 1;
            continue;
        }
        first.get_or_insert_with(|| {
            let far = h.map_or("no instance saw it".into(), |h| match h.to {
                Some(t) => format!("{} saw its BYE at {t:.2} s", h.instance),
                None => format!("{} never saw its BYE", h.instance),
            });
            format!(
                "call {id}: up at {up:.2} s through {}, never ended for its caller ({far}); no process on its path was killed",
                gate_name(gate)
            )
        });
    }
    verdict(
        NAME,
        first,
        format!(
            "{} calls established, {failed} failed, {excused} of them with their gate or instance killed while they were up",
            e.calls.len()
        ),
    )
}

/// The work instance `x` held through all of `[a, b]` that a gate carried
/// (a call once ACKed before `a`; its gate not killed since it began).
fn holding<'a>(e: &'a Evidence, x: &str, a: f64, b: f64) -> Option<&'a Held> {
    e.held.iter().find(|h| {
        h.instance == x
            && h.through(a, b)
            && (h.kind != WorkKind::Call || h.ack.is_some_and(|t| t <= a))
            && killed(e, h.gate, h.from, b).is_none()
    })
}

fn held_words(h: &Held) -> String {
    format!(
        "{:?} {} (through {}, since {:.2} s, {})",
        h.kind,
        h.id,
        gate_name(h.gate),
        h.from,
        h.to.map_or("never ended".into(), |t| format!("ended {t:.2} s"))
    )
}

/// The moment a `ringsync wait drained` that returned at `t1` judged lies
/// in its last read of the status, which took about as long as the
/// watcher's reads around then: the longest of those that ended in the
/// 10 s before, and at least 0.25 s.
fn last_read_s(e: &Evidence, t1: f64) -> f64 {
    e.status
        .iter()
        .filter(|s| s.t1 <= t1 && s.t1 >= t1 - 10.0)
        .map(|s| s.t1 - s.t0)
        .fold(0.25, f64::max)
}

/// A `ringsync wait drained` that returned 0 (drained) while an instance
/// of its server held work through its last read.
fn wait_said_drained_while_held(e: &Evidence) -> Option<String> {
    e.waits.iter().filter(|w| w.code == Some(0)).find_map(|w| {
        let a = w.t1 - last_read_s(e, w.t1);
        e.instances
            .iter()
            .filter(|(_, _, srv)| *srv == w.server)
            .find_map(|(x, _, _)| {
                holding(e, x, a, w.t1).map(|h| {
                    format!(
                        "`ringsync wait drained --server {}` (started {:.2} s) returned drained at {:.2} s while {x} held {}",
                        w.server,
                        w.t0,
                        w.t1,
                        held_words(h)
                    )
                })
            })
    })
}

/// `ringsync status` never said `drained`, nor did `ringsync wait drained`
/// return, while the instance's far end held a call, registration or
/// subscription that a gate carried (and still carries: its gate was not
/// killed since).
pub fn drained_means_empty(e: &Evidence) -> Invariant {
    const NAME: &str = "drained only when the far end holds nothing";
    if e.status.is_empty() {
        return verdict(
            NAME,
            Some("no `ringsync status` answered: nothing to judge".into()),
            "0 status samples".into(),
        );
    }
    let (mut said, mut first) = (0, None);
    for s in &e.status {
        for x in s.drained() {
            said += 1;
            if let (Some(h), None) = (holding(e, x, s.t0, s.t1), &first) {
                first = Some(format!(
                    "status at {:.2}–{:.2} s said {x} drained while it held {}",
                    s.t0,
                    s.t1,
                    held_words(h)
                ));
            }
        }
    }
    let first = first.or_else(|| wait_said_drained_while_held(e));
    let waited = e.waits.iter().filter(|w| w.code == Some(0)).count();
    verdict(
        NAME,
        first,
        format!(
            "{} status samples, `drained` said {said} times (instance × sample); `ringsync wait drained` run {} times, {waited} returned drained",
            e.status.len(),
            e.waits.len()
        ),
    )
}
