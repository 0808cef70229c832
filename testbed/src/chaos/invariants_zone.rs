//! The two halves of the propagation promise, against the far ends: no
//! new call, registration or subscription reached a draining instance
//! later than the bound, and none was refused while another instance of
//! its service was normal and up.

use std::collections::BTreeMap;

use super::evidence::{verdict, Evidence, Invariant};
use super::invariants::{down, gate_name};
use super::plan::{Fault, Leg};
use super::truth::{Held, WorkKind};
use super::zone::Zone;

/// T2 (RFC 3261 17.1.2.2): the longest wait between two retransmissions of
/// a non-INVITE request.
const T2_S: f64 = 4.0;
/// Seconds after a gate fault's end in which its refusals are its own
/// (a restarted or upgraded gate refuses new work until its view is
/// loaded, R-GW-1; a resumed one sheds what waited past its deadline,
/// R-OV-1).
const GATE_SETTLE_S: f64 = 3.0;
/// The failover caller's wait for an answer before it tries the next gate:
/// its INVITE was routed at most this long before its 503.
const CALLER_WAIT_S: f64 = 2.0;
/// A failover caller's four attempts, each waiting [`CALLER_WAIT_S`],
/// with a margin: when a call no gate answered was being tried.
const SILENT_SPAN_S: f64 = 4.0 * CALLER_WAIT_S + 0.5;

/// Whether a packet loss (either leg) took effect in `[a, b]`.
fn lost_in(e: &Evidence, a: f64, b: f64) -> bool {
    e.faults.iter().any(|f| {
        matches!(f.fault, Fault::LosePackets { .. }) && f.happened() && f.t <= b && a <= f.until
    })
}

/// Timer F (RFC 3261 17.1.2.2): a REGISTER or SUBSCRIBE retransmitted
/// along its first hop may be answered this long after it was routed.
const TIMER_F_S: f64 = 32.0;

fn kind_word(k: WorkKind) -> &'static str {
    match k {
        WorkKind::Call => "call",
        WorkKind::Registration => "registration",
        WorkKind::Subscription => "subscription",
    }
}

/// Whether a REGISTER or SUBSCRIBE that reached its instance at `h.from`
/// could have been routed by its gate before `by` and held back on its
/// way: the gate decides at the first copy and sends every retransmission
/// the same way (its transaction table), and the caller retransmits at
/// most [`T2_S`] apart. Its copies were lost while a gate->instance loss
/// ran, or while its instance was killed and not yet started again (the
/// new run answers a retransmission). So: such a window `[a, b]` with
/// `a <= by`, `a <= h.from` and `h.from <= b + T2`. An INVITE is never
/// excused: the failover caller does not retransmit it (a lost one goes to
/// the next gate, decided anew).
fn held_back(e: &Evidence, h: &Held, by: f64) -> bool {
    h.kind != WorkKind::Call
        && e.faults.iter().any(|f| {
            let lost_there = match &f.fault {
                Fault::LosePackets {
                    leg: Leg::GateToInstance,
                    ..
                } => true,
                Fault::KillInstance { instance, .. } => *instance == h.instance,
                _ => false,
            };
            f.happened() && lost_there && f.t <= by && f.t <= h.from && h.from <= f.until + T2_S
        })
}

/// Seconds between a gate's routing of a new dialog and its arrival at
/// the instance, with a margin (the same machine: milliseconds).
const ROUTED_S: f64 = 0.5;

/// Whether gate `h.gate` held every one of `others` down at one instant
/// while it routed `h` (`[h.from - ROUTED_S, h.from]`), each down begun
/// behind a gate->instance packet loss (its probes lost, not a flaw of its
/// own): then R-AA-4 sent the new dialog to a draining instance on
/// purpose, since nothing normal was up in that gate's view.
fn all_seen_down_behind_loss(e: &Evidence, h: &Held, others: &[&str]) -> bool {
    let Some(gate) = h.gate else {
        return false;
    };
    let (w0, w1) = (h.from - ROUTED_S, h.from);
    let lossy = |at: f64| {
        e.faults.iter().any(|f| {
            matches!(
                f.fault,
                Fault::LosePackets {
                    leg: Leg::GateToInstance,
                    ..
                }
            ) && f.happened()
                && f.t <= at
                && at <= f.until + super::invariants::HEALTH_S
        })
    };
    let seen: Vec<Vec<(f64, f64)>> = others
        .iter()
        .map(|o| {
            e.gate_down
                .iter()
                .filter(|d| d.gate == gate && d.instance == *o && lossy(d.from))
                .filter(|d| d.from <= w1 && d.until >= w0)
                .map(|d| (d.from.max(w0), d.until.min(w1)))
                .collect()
        })
        .collect();
    if others.is_empty() || seen.iter().any(Vec::is_empty) {
        return false;
    }
    // One instant in every other's down: some interval's start lies in all.
    seen.iter().flatten().any(|&(t, _)| {
        seen.iter()
            .all(|ivs| ivs.iter().any(|&(a, b)| a <= t && t <= b))
    })
}

/// Whether a fault takes the store away from the gates for a while: the
/// whole cluster stopped, or its leader killed (the watches wait for a new
/// one).
fn store_away(f: &Fault) -> bool {
    matches!(f, Fault::StopStore { .. } | Fault::KillEtcdLeader { .. })
}

/// No new call, registration or subscription reached an instance later
/// than the bound after its server entered the drain zone (counted from
/// its gate's last return, when a fault froze or restarted that gate
/// since) while another instance of its service stayed out of the zone.
pub fn no_new_work_past_bound(e: &Evidence) -> Invariant {
    const NAME: &str = "no new work to a draining instance past the bound";
    let narrow = Zone::from_ops(&e.ops, e.end_s, false);
    let wide = Zone::from_ops(&e.ops, e.end_s, true);
    let place: BTreeMap<&str, (&str, &str)> = e
        .instances
        .iter()
        .map(|(i, svc, srv)| (i.as_str(), (svc.as_str(), srv.as_str())))
        .collect();
    let mut checked: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut lossy, mut aa4, mut first) = (0, 0, None);
    for h in &e.held {
        let Some((svc, srv)) = place.get(h.instance.as_str()) else {
            continue;
        };
        let Some(since) = narrow.since(srv, h.from) else {
            continue;
        };
        *checked.entry(kind_word(h.kind)).or_default() += 1;
        // The bound counts from the gate's return from a fault, and from the
        // store's return when it went away before the change could reach
        // every gate (R-MN-2: a gate keeps its last view meanwhile).
        let back = e
            .faults
            .iter()
            .filter(|f| {
                (f.fault.gate().is_some() && f.fault.gate() == h.gate && f.until <= h.from)
                    || (store_away(&f.fault) && f.t <= since + e.bound_s && since <= f.until)
            })
            .map(|f| f.until)
            .fold(since, f64::max);
        let late = h.from - back;
        if late <= e.bound_s {
            continue;
        }
        if held_back(e, h, back + e.bound_s) {
            lossy += 1;
            continue;
        }
        let others: Vec<&str> = e
            .instances
            .iter()
            .filter(|(i, s, srv2)| {
                i != &h.instance
                    && s == svc
                    && !wide.touches(srv2, h.from - e.bound_s, h.from)
                    && !down(e, i, h.from - e.bound_s, h.from)
            })
            .map(|(i, _, _)| i.as_str())
            .collect();
        if all_seen_down_behind_loss(e, h, &others) {
            aa4 += 1;
            continue;
        }
        if let (Some(o), None) = (others.first(), &first) {
            first = Some(format!(
                "{} {} reached {} through {} at {:.2} s, {late:.2} s after {srv} entered the drain zone ({since:.2} s; bound {} s), while {o} was normal",
                kind_word(h.kind),
                h.id,
                h.instance,
                gate_name(h.gate),
                h.from,
                e.bound_s
            ));
        }
    }
    let n = |k: &str| checked.get(k).copied().unwrap_or(0);
    verdict(
        NAME,
        first,
        format!(
            "{} new calls, {} registrations and {} subscriptions reached an instance in the drain zone (bound {} s); {lossy} late behind a packet loss or their instance's restart; {aa4} sent there while their gate held every normal instance down behind a packet loss (R-AA-4)",
            n("call"),
            n("registration"),
            n("subscription"),
            e.bound_s
        ),
    )
}

/// No call, registration or subscription was refused (a 503 from a gate,
/// by the caller's own log) while an instance of its service was out of
/// the drain zone and up all the while it may have been routed (an INVITE
/// in the 2 s before, a REGISTER or SUBSCRIBE within Timer F) and the bound
/// before, unless the gate that refused was being killed, frozen or
/// upgraded then. And no call went unanswered by every gate its caller
/// tried, unless packets were being dropped meanwhile.
pub fn none_refused_while_one_could_take_it(e: &Evidence) -> Invariant {
    const NAME: &str = "none refused while another normal instance could take it";
    let wide = Zone::from_ops(&e.ops, e.end_s, true);
    let (mut own, mut nowhere, mut first) = (0, 0, None);
    let silent = e.refusals.iter().filter(|r| r.gate.is_none()).count();
    let silent_lossy = e
        .refusals
        .iter()
        .filter(|r| r.gate.is_none() && lost_in(e, r.t - SILENT_SPAN_S, r.t))
        .count();
    for r in &e.refusals {
        if r.gate.is_none() {
            // No gate answered: only lost packets explain that.
            if lost_in(e, r.t - SILENT_SPAN_S, r.t) {
                continue;
            }
            first.get_or_insert_with(|| {
                format!(
                    "call {} got no answer from any gate (its attempts from {:.2} s to {:.2} s) while no packet was being dropped",
                    r.id,
                    r.t - SILENT_SPAN_S,
                    r.t
                )
            });
            continue;
        }
        // Routed somewhere in [r.t - span, r.t].
        let span = if r.kind == WorkKind::Call {
            CALLER_WAIT_S
        } else {
            TIMER_F_S
        };
        let own_fault = e.faults.iter().any(|f| {
            f.happened()
                && f.fault.gate().is_some()
                && f.fault.gate() == r.gate
                && f.t - span <= r.t
                && r.t - span <= f.until + GATE_SETTLE_S
        });
        if own_fault {
            own += 1;
            continue;
        }
        let (a, b) = (r.t - span - e.bound_s, r.t);
        let other = e
            .instances
            .iter()
            .find(|(i, s, srv)| s == &r.svc && !wide.touches(srv, a, b) && !down(e, i, a, b));
        match other {
            Some((o, _, _)) => {
                first.get_or_insert_with(|| {
                    format!(
                        "{} {} refused (503{}{}) by {} at {:.2} s while {o} was normal and up",
                        kind_word(r.kind),
                        r.id,
                        if r.why.is_empty() { "" } else { " " },
                        r.why,
                        gate_name(r.gate),
                        r.t
                    )
                });
            }
            None => nowhere += 1,
        }
    }
    verdict(
        NAME,
        first,
        format!(
            "{} refusals (503) seen by the callers: {own} by a gate under a fault, {nowhere} with every instance of the service draining or down; {silent} calls no gate answered ({silent_lossy} while packets were dropped)",
            e.refusals.len() - silent
        ),
    )
}
