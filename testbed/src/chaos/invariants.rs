//! The promises a chaos run checks against the far ends' ground truth,
//! each a verdict with its first counter-example (the Call-ID, the
//! instance, the instants). Pure functions of the run's [`Evidence`], so
//! each is tested on synthetic timelines (`tests.rs`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::operators::OpRecord;
use super::plan::{Done, Fault};
use super::truth::{CallerCall, Held, WorkKind};
use super::watch::StatusSample;
use super::zone::Zone;
use crate::rehearsal::sampled::Sample;

/// Everything a run recorded, for the checker.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// What the instances held (their own logs).
    pub held: Vec<Held>,
    /// Every established call as its caller saw it, by Call-ID.
    pub calls: BTreeMap<String, CallerCall>,
    /// The faults as injected.
    pub faults: Vec<Done>,
    /// `ringsync status` every 250 ms.
    pub status: Vec<StatusSample>,
    /// Every change the operators asked for.
    pub ops: Vec<OpRecord>,
    /// The audit log at the end.
    pub audit: Vec<AuditEntry>,
    /// The store's profiles at the end, by name: active, servers.
    pub store_end: Option<BTreeMap<String, (bool, Vec<String>)>>,
    /// The site's own nodes once a second (media-ctl's mgs).
    pub samples: Vec<Sample>,
    /// sg/esg instances: id, service, server.
    pub instances: Vec<(String, String, String)>,
    /// Seconds a drain may take to reach every gate.
    pub bound_s: f64,
    /// When the run ended (seconds after its start).
    pub end_s: f64,
}

/// An audit record, as far as the checker reads it.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, Serialize)]
pub struct AuditEntry {
    /// When it was written, seconds after the run's start.
    #[serde(default)]
    pub at_s: f64,
    /// `create`, `activate`, ...
    pub action: String,
    /// The profile's name, when the store knew it.
    #[serde(default)]
    pub profile: Option<String>,
    /// 200/201 made, 4xx refused.
    pub status: u16,
    /// The set's revision after a change that was made.
    #[serde(default)]
    pub revision: Option<u64>,
    /// The profile's revision before the change, when it existed.
    #[serde(default)]
    pub before_revision: Option<u64>,
}

impl AuditEntry {
    /// Whether this record is of the change `o` made. A deletion's answer
    /// names the profile as it was (its revision before), every other
    /// change's the profile as it is after (the set's new revision).
    pub fn records(&self, o: &OpRecord) -> bool {
        let rev = if o.action == "delete" {
            self.before_revision
        } else {
            self.revision
        };
        self.action == o.action
            && self.profile.as_deref() == Some(o.profile.as_str())
            && rev.is_some()
            && rev == o.made()
    }
}

/// One invariant's verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Invariant {
    /// Short name.
    pub name: &'static str,
    /// Held.
    pub pass: bool,
    /// The figures behind it.
    pub detail: String,
    /// The first counter-example, when it failed on one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counterexample: Option<String>,
}

fn verdict(name: &'static str, first: Option<String>, detail: String) -> Invariant {
    Invariant {
        name,
        pass: first.is_none(),
        detail,
        counterexample: first,
    }
}

/// Every invariant, in the report's order.
pub fn judge(e: &Evidence) -> Vec<Invariant> {
    vec![
        calls_survive(e),
        drained_means_empty(e),
        no_new_dialog_past_bound(e),
        super::invariants_ops::last_mg_kept(e),
        super::invariants_ops::operators(e),
    ]
}

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
