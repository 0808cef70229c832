//! Ground truth from the far ends: what each sg/esg instance (its SIPp
//! UAS's own log) and each caller (its SIPp UAC's log) saw, joined by
//! Call-ID, independent of the gates' counters.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Serialize;

use crate::rehearsal::load::{CallEvent, LoadRun};

/// What an instance held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkKind {
    /// An INVITE dialog.
    Call,
    /// A registration binding.
    Registration,
    /// A presence subscription.
    Subscription,
}

/// One piece of work an instance held, by its own log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Held {
    /// Call-ID.
    pub id: String,
    /// What it is.
    pub kind: WorkKind,
    /// The instance that held it.
    pub instance: String,
    /// The gate node it came through (its top Via), when known.
    pub gate: Option<usize>,
    /// When its first request arrived (seconds after the start).
    pub from: f64,
    /// When the ACK of a call arrived (a dialog confirmed).
    pub ack: Option<f64>,
    /// When it ended there (BYE, de-REGISTER, removal, its expiry, the
    /// binding's next REGISTER at another instance); `None`: held to the
    /// end of the run.
    pub to: Option<f64>,
}

/// The expiry a binding or subscription was last granted (`exp=N`), and
/// when.
fn expiry(w: &[&str], t: f64) -> Option<f64> {
    w.iter()
        .find_map(|x| x.strip_prefix("exp=")?.parse::<f64>().ok())
        .map(|e| t + e)
}

impl Held {
    /// Whether the instance held it through all of `[a, b]`.
    pub fn through(&self, a: f64, b: f64) -> bool {
        self.from <= a && self.to.is_none_or(|to| to >= b)
    }
}

/// One call as its caller saw it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CallerCall {
    /// 200 to the INVITE.
    pub up: Option<f64>,
    /// 200 to the BYE.
    pub end: Option<f64>,
}

/// The instance's log (`ev inv|reg|sub ID GATE-IP ... UNIX`, `ev
/// ack|bye|unreg|unsub ID ... UNIX`) as the work it held; `gate_of` maps a
/// Via address to a gate node.
pub fn parse_uas(
    instance: &str,
    text: &str,
    epoch0: f64,
    gate_of: impl Fn(IpAddr) -> Option<usize>,
) -> Vec<Held> {
    let mut held: Vec<Held> = Vec::new();
    let mut open: BTreeMap<String, usize> = BTreeMap::new();
    // Per binding or subscription, when its last grant expires.
    let mut expires: BTreeMap<usize, f64> = BTreeMap::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() < 4 || w[0] != "ev" {
            continue;
        }
        let Some(t) = w.last().and_then(|x| x.parse::<f64>().ok()) else {
            continue;
        };
        let t = (t - epoch0).max(0.0);
        let id = w[2];
        let kind = match w[1] {
            "inv" => Some(WorkKind::Call),
            "reg" => Some(WorkKind::Registration),
            "sub" => Some(WorkKind::Subscription),
            _ => None,
        };
        if let Some(kind) = kind {
            // A second INVITE of one Call-ID (a caller that failed over
            // while a late gate delivered its first) is the same call.
            if open.contains_key(id) {
                continue;
            }
            if kind != WorkKind::Call {
                if let Some(e) = expiry(&w, t) {
                    expires.insert(held.len(), e);
                }
            }
            open.insert(id.to_owned(), held.len());
            held.push(Held {
                id: id.to_owned(),
                kind,
                instance: instance.to_owned(),
                gate: w[3].parse().ok().and_then(&gate_of),
                from: t,
                ack: None,
                to: None,
            });
            continue;
        }
        let Some(i) = open.get(id).copied() else {
            continue;
        };
        let Some(h) = held.get_mut(i) else {
            continue;
        };
        match w[1] {
            "ack" => {
                h.ack.get_or_insert(t);
            }
            "bye" | "unreg" | "unsub" => {
                h.to.get_or_insert(t);
            }
            "rereg" | "resub" => {
                if let Some(e) = expiry(&w, t) {
                    expires.insert(i, e);
                }
            }
            _ => {}
        }
    }
    // A binding or subscription not removed is held until its grant
    // expires (a removal that starts here, `exp=0`, holds nothing).
    for (i, e) in expires {
        if let Some(h) = held.get_mut(i) {
            h.to = Some(h.to.map_or(e, |to| to.min(e)));
        }
    }
    held
}

/// Joins the two ends of each call: a call whose caller read the 200 to
/// its BYE was over at its instance by then, whatever that instance's log
/// says (SIPp answers a BYE its scenario did not expect, e.g. one that
/// overtook a lost ACK's retransmitted 200, by itself and ends the call
/// without the scenario's `ev bye`).
pub fn end_at_callers_bye(held: &mut [Held], calls: &BTreeMap<String, CallerCall>) {
    for h in held.iter_mut().filter(|h| h.kind == WorkKind::Call) {
        if let Some(end) = calls.get(&h.id).and_then(|c| c.end) {
            if end >= h.from {
                h.to = Some(h.to.map_or(end, |to| to.min(end)));
            }
        }
    }
}

/// A run of an instance started again after a kill logs an in-dialog
/// request of a call an earlier run held (its re-INVITE, by the
/// Record-Route token, R-SG-4) as `ev inv`: its scenario starts with an
/// INVITE. That is no new dialog: such calls are dropped from `run`.
pub fn drop_calls_of_earlier_runs(
    earlier: &std::collections::BTreeSet<String>,
    run: Vec<Held>,
) -> Vec<Held> {
    run.into_iter()
        .filter(|h| h.kind != WorkKind::Call || !earlier.contains(&h.id))
        .collect()
}

/// Every REGISTER an instance's log shows after a binding's first one
/// (`ev rereg|unreg ID ... UNIX`): (instance, Call-ID, seconds after the
/// start), for [`moved_bindings`].
pub fn later_registers(instance: &str, text: &str, epoch0: f64) -> Vec<(String, String, f64)> {
    text.lines()
        .filter_map(|line| {
            let w: Vec<&str> = line.split_whitespace().collect();
            if w.len() < 4 || w[0] != "ev" || !matches!(w[1], "rereg" | "unreg") {
                return None;
            }
            let t = w.last()?.parse::<f64>().ok()?;
            Some((instance.to_owned(), w[2].to_owned(), (t - epoch0).max(0.0)))
        })
        .collect()
}

/// REGISTER is new work each time (R-SEC-4): a binding's refresh or
/// removal may reach another instance of the pool, which shares the
/// bindings. A binding is held where it was until its Call-ID's next
/// REGISTER reaches another instance: a first one there (another held
/// binding) or a refresh or removal there (`later`, from
/// [`later_registers`]: a de-REGISTER at the instance that held the
/// binding before removes it from the shared pool).
pub fn moved_bindings(held: &mut [Held], later: &[(String, String, f64)]) {
    let starts: Vec<(String, String, f64)> = held
        .iter()
        .filter(|h| h.kind == WorkKind::Registration)
        .map(|h| (h.instance.clone(), h.id.clone(), h.from))
        .collect();
    for h in held.iter_mut().filter(|h| h.kind == WorkKind::Registration) {
        let next = starts
            .iter()
            .chain(later)
            .filter(|(inst, id, t)| *id == h.id && *t > h.from && *inst != h.instance)
            .map(|(_, _, t)| *t)
            .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.min(t))));
        if let Some(next) = next {
            h.to = Some(h.to.map_or(next, |to| to.min(next)));
        }
    }
}

/// A 503 a gate gave a new call, registration or subscription, by its
/// caller's own log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Refusal {
    /// When the caller read it (seconds after the start).
    pub t: f64,
    /// Call-ID.
    pub id: String,
    /// What was refused.
    pub kind: WorkKind,
    /// The gate node that refused it.
    pub gate: Option<usize>,
    /// The service its listener routes to (`sg`, `esg`).
    pub svc: String,
    /// The 503's reason phrase, when the caller logged it.
    pub why: String,
}

/// The reason of a call no gate answered at all ([`refusals`]).
pub const NO_ANSWER: &str = "no answer from any gate";

/// Every 503 the callers logged: a failover caller's attempt N went to
/// the N-1th gate after its own (wrapping round `gates`), the other
/// callers' to their own gate. And every call a caller gave up without
/// any 503, every gate it tried silent: a refusal by no gate
/// ([`NO_ANSWER`]). `svc_of` names the service behind a listener.
pub fn refusals(loads: &[LoadRun], gates: usize, svc_of: impl Fn(&str) -> String) -> Vec<Refusal> {
    let mut out = Vec::new();
    for l in loads {
        let answered_503: std::collections::BTreeSet<&String> = l
            .events
            .iter()
            .filter(|(_, ev, _)| matches!(ev, CallEvent::GateRefused(_)))
            .map(|(_, _, id)| id)
            .collect();
        for (t, ev, id) in &l.events {
            if *ev == CallEvent::Refused && l.is_call() && !answered_503.contains(id) {
                out.push(Refusal {
                    t: *t,
                    id: id.clone(),
                    kind: WorkKind::Call,
                    gate: None,
                    svc: svc_of(&l.listener),
                    why: NO_ANSWER.into(),
                });
                continue;
            }
            let (kind, gate, why) = match ev {
                CallEvent::GateRefused(n) => (
                    WorkKind::Call,
                    (l.gate + usize::from(n.saturating_sub(1))) % gates.max(1),
                    l.refused_why.get(&(id.clone(), *n)).cloned(),
                ),
                CallEvent::RegRefused => (
                    WorkKind::Registration,
                    l.gate,
                    l.refused_why.get(&(id.clone(), 0)).cloned(),
                ),
                CallEvent::SubRefused => (
                    WorkKind::Subscription,
                    l.gate,
                    l.refused_why.get(&(id.clone(), 0)).cloned(),
                ),
                _ => continue,
            };
            out.push(Refusal {
                t: *t,
                id: id.clone(),
                kind,
                gate: Some(gate),
                svc: svc_of(&l.listener),
                why: why.unwrap_or_default(),
            });
        }
    }
    out.sort_by(|a, b| a.t.total_cmp(&b.t));
    out
}

/// Every call of the loads of calls, as the callers saw them.
pub fn callers(loads: &[LoadRun]) -> BTreeMap<String, CallerCall> {
    let mut out: BTreeMap<String, CallerCall> = BTreeMap::new();
    for l in loads.iter().filter(|l| l.is_call()) {
        for (t, ev, id) in &l.events {
            let c = out.entry(id.clone()).or_default();
            match ev {
                CallEvent::Up => {
                    c.up.get_or_insert(*t);
                }
                CallEvent::End => {
                    c.end.get_or_insert(*t);
                }
                _ => {}
            }
        }
    }
    out.retain(|_, c| c.up.is_some());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_log_becomes_what_it_held() {
        let log = "media 1-1@x offer 127.0.0.9\n\
                   ev inv 1-1@x 127.9.9.2 2026-12-07\t14:00:00.5\t1000.5\n\
                   ev ack 1-1@x 2026-12-07\t14:00:00.6\t1000.6\n\
                   ev inv 1-1@x 127.9.9.1 2026-12-07\t14:00:00.7\t1000.7\n\
                   ev reg 2-1@x 127.9.9.1 exp=60 2026-12-07\t14:00:01\t1001\n\
                   ev unreg 2-1@x 2026-12-07\t14:00:04\t1004\n\
                   ev bye 1-1@x 2026-12-07\t14:00:05\t1005\n\
                   ev sub 3-1@x  exp= 2026-12-07\t14:00:06\t1006\n\
                   ev reg 4-1@x 127.9.9.2 exp=60 2026-12-07\t14:00:07\t1007\n\
                   ev rereg 4-1@x exp=60 2026-12-07\t14:00:11\t1011\n\
                   ev reg 5-1@x 127.9.9.2 exp=0 2026-12-07\t14:00:12\t1012\n";
        let gate = |ip: IpAddr| match ip.to_string().as_str() {
            "127.9.9.1" => Some(0),
            "127.9.9.2" => Some(1),
            _ => None,
        };
        let h = parse_uas("sg-a", log, 1000.0, gate);
        assert_eq!(h.len(), 5, "{h:?}");
        let ms = |t: Option<f64>| t.map(|t| (t * 1000.0).round() as u64);
        assert_eq!(
            (
                h[0].id.as_str(),
                h[0].kind,
                h[0].instance.as_str(),
                h[0].gate
            ),
            ("1-1@x", WorkKind::Call, "sg-a", Some(1))
        );
        assert_eq!(
            (ms(Some(h[0].from)), ms(h[0].ack), ms(h[0].to)),
            (Some(500), Some(600), Some(5000))
        );
        assert_eq!(
            (h[1].kind, h[1].gate, h[1].to),
            (WorkKind::Registration, Some(0), Some(4.0))
        );
        // An empty gate (no Via matched) is no gate, and held to the end.
        assert_eq!((h[2].gate, h[2].to), (None, None));
        assert!(h[0].through(1.0, 5.0) && !h[0].through(0.4, 2.0) && !h[0].through(1.0, 5.1));
        assert!(h[2].through(7.0, 1e9));
        // A binding not removed: held until its last grant expires; one
        // whose first REGISTER here removes it: held for no time.
        assert_eq!(h[3].to, Some(71.0));
        assert_eq!(h[4].to, Some(12.0));
    }

    #[test]
    fn a_call_is_over_at_its_instance_once_its_caller_has_the_200_to_its_bye() {
        let call = |to: Option<f64>| Held {
            id: "374@x".into(),
            kind: WorkKind::Call,
            instance: "sg-c".into(),
            gate: Some(2),
            from: 124.7,
            ack: Some(124.71),
            to,
        };
        let calls: BTreeMap<String, CallerCall> = [(
            "374@x".to_string(),
            CallerCall {
                up: Some(124.72),
                end: Some(128.9),
            },
        )]
        .into();
        let mut h = vec![call(None), call(Some(128.8))];
        end_at_callers_bye(&mut h, &calls);
        assert_eq!((h[0].to, h[1].to), (Some(128.9), Some(128.8)));
    }

    #[test]
    fn a_restarted_instance_sees_an_earlier_runs_call_as_no_new_dialog() {
        let call = |id: &str| Held {
            id: id.into(),
            kind: WorkKind::Call,
            instance: "sg-c".into(),
            gate: Some(0),
            from: 44.7,
            ack: None,
            to: None,
        };
        let earlier = ["157@x".to_string()].into();
        let kept = drop_calls_of_earlier_runs(&earlier, vec![call("157@x"), call("158@x")]);
        assert_eq!(kept, vec![call("158@x")]);
    }

    #[test]
    fn a_binding_moved_to_another_instance_ends_where_it_was() {
        let reg = |inst: &str, from: f64, to: Option<f64>| Held {
            id: "r@x".into(),
            kind: WorkKind::Registration,
            instance: inst.into(),
            gate: Some(0),
            from,
            ack: None,
            to,
        };
        let mut h = vec![reg("sg-c", 4.0, Some(4.0)), reg("sg-b", 0.5, Some(60.5))];
        moved_bindings(&mut h, &[]);
        assert_eq!((h[0].to, h[1].to), (Some(4.0), Some(4.0)));
        // The hour's case: registered at sg-b, refreshed at sg-c (a first
        // REGISTER there, 60 s asked), removed at sg-b 7 ms later: the
        // pool's binding is gone, so sg-c holds it no longer either.
        let log = "ev rereg r@x exp=0 2026-12-07\t14:00:04\t4.007\n";
        let later = later_registers("sg-b", log, 0.0);
        assert_eq!(later, vec![("sg-b".to_string(), "r@x".to_string(), 4.007)]);
        let mut h = vec![reg("sg-b", 0.5, Some(4.007)), reg("sg-c", 4.0, Some(64.0))];
        moved_bindings(&mut h, &later);
        assert_eq!((h[0].to, h[1].to), (Some(4.0), Some(4.007)));
    }
}
