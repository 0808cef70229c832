//! The promises on calls a chaos run checks against the far ends' ground
//! truth, each a verdict with its first counter-example (the Call-ID, the
//! instance, the instants). Pure functions of the run's [`Evidence`], so
//! each is tested on synthetic timelines (`tests.rs`).

use std::collections::BTreeMap;

use super::evidence::verdict;
pub use super::evidence::{Evidence, Invariant};
use super::plan::Fault;
use super::truth::{Held, WorkKind};
use super::zone::Zone;

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
const HEALTH_S: f64 = 1.5;

/// Whether instance `id` was down at some moment of `[a, b]` (killed and
/// not yet seen back by the gates' probes).
fn down(e: &Evidence, id: &str, a: f64, b: f64) -> bool {
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

fn gate_name(g: Option<usize>) -> String {
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

/// `ringsync status` never said `drained` while the instance's far end
/// held a call, registration or subscription that a gate carried (and
/// still carries: its gate was not killed since).
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
            let holding = e.held.iter().find(|h| {
                h.instance == x
                    && h.through(s.t0, s.t1)
                    && (h.kind != WorkKind::Call || h.ack.is_some_and(|a| a <= s.t0))
                    && killed(e, h.gate, h.from, s.t1).is_none()
            });
            if let (Some(h), None) = (holding, &first) {
                first = Some(format!(
                    "status at {:.2}–{:.2} s said {x} drained while it held {:?} {} (through {}, since {:.2} s, {})",
                    s.t0,
                    s.t1,
                    h.kind,
                    h.id,
                    gate_name(h.gate),
                    h.from,
                    h.to.map_or("never ended".into(), |t| format!("ended {t:.2} s"))
                ));
            }
        }
    }
    verdict(
        NAME,
        first,
        format!(
            "{} status samples, `drained` said {said} times (instance × sample)",
            e.status.len()
        ),
    )
}

/// Whether `h` is not a new call but a re-INVITE of one confirmed (ACKed)
/// before it: an instance's SIPp started again after a kill logs the first
/// INVITE of a Call-ID it does not know as `ev inv`, even a re-INVITE (or
/// its retransmission) of a call its killed run held. In-dialog requests
/// reach a draining instance by design (R-SG-4). A caller's failover INVITE
/// of a call never confirmed stays new work.
fn reinvite(e: &Evidence, h: &Held) -> bool {
    e.held
        .iter()
        .any(|g| g.kind == WorkKind::Call && g.id == h.id && g.ack.is_some_and(|a| a <= h.from))
}

/// No new call reached an instance later than the bound after its server
/// entered the drain zone (counted from its gate's last return, when a
/// fault froze or restarted that gate since) while another instance of
/// its service stayed out of the zone.
pub fn no_new_dialog_past_bound(e: &Evidence) -> Invariant {
    const NAME: &str = "no new dialog to a draining instance past the bound";
    let narrow = Zone::from_ops(&e.ops, e.end_s, false);
    let wide = Zone::from_ops(&e.ops, e.end_s, true);
    let place: BTreeMap<&str, (&str, &str)> = e
        .instances
        .iter()
        .map(|(i, svc, srv)| (i.as_str(), (svc.as_str(), srv.as_str())))
        .collect();
    let (mut checked, mut first) = (0, None);
    for h in e.held.iter().filter(|h| h.kind == WorkKind::Call) {
        let Some((svc, srv)) = place.get(h.instance.as_str()) else {
            continue;
        };
        if reinvite(e, h) {
            continue;
        }
        let Some(since) = narrow.since(srv, h.from) else {
            continue;
        };
        checked += 1;
        let back = e
            .faults
            .iter()
            .filter(|f| f.fault.gate().is_some() && f.fault.gate() == h.gate && f.until <= h.from)
            .map(|f| f.until)
            .fold(since, f64::max);
        let late = h.from - back;
        if late <= e.bound_s {
            continue;
        }
        let other = e.instances.iter().find(|(i, s, srv2)| {
            i != &h.instance
                && s == svc
                && !wide.touches(srv2, h.from - e.bound_s, h.from)
                && !down(e, i, h.from - e.bound_s, h.from)
        });
        if let (Some((o, _, _)), None) = (other, &first) {
            first = Some(format!(
                "call {} reached {} through {} at {:.2} s, {late:.2} s after {srv} entered the drain zone ({since:.2} s; bound {} s), while {o} was normal",
                h.id,
                h.instance,
                gate_name(h.gate),
                h.from,
                e.bound_s
            ));
        }
    }
    verdict(
        NAME,
        first,
        format!(
            "{checked} new calls reached an instance in the drain zone (bound {} s)",
            e.bound_s
        ),
    )
}
