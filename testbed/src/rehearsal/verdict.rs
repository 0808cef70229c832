//! One verdict per rule a scenario names, each from what was measured,
//! each able to fail: a rule with nothing to judge it on (no call, no
//! drain window) fails and says so.

use std::collections::BTreeMap;

use serde::Serialize;

use super::play::Played;
use super::sample::Sample;
use super::sampled::{at, delta};
use super::totals::Calls;
use super::verdict_kit::{applied, instances_on, per_window};
pub use super::verdict_kit::{windows, Window};
use crate::site::{Layout, Svc};

/// Seconds past its drain window media-ctl's ramp may end and still pass
/// R-MG-1: the sampler's one-second resolution, and a loaded machine's.
const RAMP_SLACK_S: f64 = 3.0;

/// A rule's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// Rule id.
    pub rule: String,
    /// Held or not.
    pub pass: bool,
    /// The figures behind it.
    pub detail: String,
}

/// The verdict on `rule`.
pub fn judge(rule: &str, layout: &Layout, played: &Played, calls: &Calls) -> Verdict {
    let (pass, detail) = match rule {
        "R-SG-4" | "R-ESG-4" | "R-GW-2" => established_calls(calls),
        "R-AA-1" => per_window(layout, played, drain_holds),
        "R-AA-3" => per_window(layout, played, return_holds),
        "R-MG-1" => per_window(layout, played, mg_out),
        "R-MG-4" => per_window(layout, played, mg_gradual),
        "R-GW-1" => gate_stops(layout, played),
        "R-AA-4" => super::verdict_calls::all_draining(layout, played),
        "R-ESG-1" => super::verdict_calls::esg_provider_leg(layout, played),
        "R-ESG-3" => super::verdict_calls::esg_inside_leg(layout, played),
        "R-ESG-5" => super::verdict_calls::esg_single_account(layout, played),
        "R-MN-2" => super::verdict_calls::store_outage(layout, played),
        "R-MG-3" => super::verdict_media::last_mg(layout, played),
        "R-AP-2" => super::verdict_ap::paced(layout, played),
        "R-AP-1" => super::verdict_ap_moves::leaders_leave(layout, played),
        "R-AP-3" => super::verdict_ap_moves::leaders_go_home(layout, played),
        "R-AP-4" => super::verdict_ap_moves::blocked_keeps_leader(layout, played),
        "R-BG-1" => super::verdict_media::bgmg_never_drained(layout, played),
        "R-BG-3" => super::verdict_media::bgmg_closes(layout, played),
        other => (false, format!("no verdict is defined for {other}")),
    };
    Verdict {
        rule: rule.into(),
        pass,
        detail,
    }
}

fn established_calls(c: &Calls) -> (bool, String) {
    if c.established == 0 {
        return (false, "no call was established: nothing to judge".into());
    }
    (
        c.established_failed == 0,
        format!(
            "{} of {} established calls failed",
            c.established_failed, c.established
        ),
    )
}

/// Past the deadline the site gives a stopping gate (`--drain-deadline-s`):
/// the watcher's resolution and a loaded machine's.
const GATE_DEADLINE_SLACK_S: f64 = 3.0;

/// Time a SIGTERM takes to reach a node and its `/readyz` to change.
const SIGNAL_S: f64 = 0.5;

/// R-GW-1: no gate sent SIGTERM still said ready (`/readyz` 200) a
/// moment after it (the signal's delivery), and each exited by itself
/// within its deadline; when it lived long enough to be seen, its
/// `/readyz` failing is shown, and the 503s the gates counted meanwhile.
fn gate_stops(l: &Layout, p: &Played) -> (bool, String) {
    let deadline = f64::from(l.run.gate_deadline_s) + GATE_DEADLINE_SLACK_S;
    if p.gate_stops.is_empty() {
        return (false, "no gate was stopped: nothing to judge".into());
    }
    let parts: Vec<(bool, String)> = p
        .gate_stops
        .iter()
        .map(|st| {
            let (nr, ex) = (st.seen.not_ready, st.seen.exited);
            let refused = refusals_between(p, "R-GW-1", st.t, st.t + ex.unwrap_or(0.0) + 1.5);
            let still_ready = st.seen.ready.filter(|t| *t > SIGNAL_S);
            let pass = still_ready.is_none() && ex.is_some_and(|b| b <= deadline);
            let secs = |x: Option<f64>| x.map_or("never".into(), |v| format!("{v:.2} s"));
            let mut text = format!(
                "gate-{}: /readyz failed after {}, exited after {}, {refused} new calls refused (503 R-GW-1)",
                st.gate,
                secs(nr),
                secs(ex)
            );
            if let Some(t) = still_ready {
                text.push_str(&format!(", still ready after {t:.2} s"));
            }
            if st.restart {
                text.push_str(&format!(", serving again after {}", secs(st.seen.back)));
            }
            (pass, text)
        })
        .collect();
    let pass = parts.iter().all(|x| x.0);
    let text = parts
        .into_iter()
        .map(|x| x.1)
        .collect::<Vec<_>>()
        .join("; ");
    (pass, text)
}

/// 503s the gates counted for `rule` between `from` and `to`.
fn refusals_between(p: &Played, rule: &str, from: f64, to: f64) -> u64 {
    let count = |s: Option<&Sample>| s.and_then(|s| s.refusals.get(rule).copied()).unwrap_or(0);
    let before = at(&p.samples, from);
    let after = p.samples.iter().find(|s| s.t >= to).or(p.samples.last());
    count(after).saturating_sub(count(before))
}

/// The samples a count over `[from, to]` is the difference of: the first
/// at or after `from` and the last at or before `to`, so the span never
/// starts early; `None` when there is no such pair.
fn span(played: &Played, from: f64, to: f64) -> Option<(&Sample, &Sample)> {
    let first = played.samples.iter().find(|s| s.t >= from)?;
    let last = at(&played.samples, to)?;
    (last.t >= first.t).then_some((first, last))
}

/// New work per instance over `[from, to]` (see [`span`]).
fn new_work(played: &Played, from: f64, to: f64) -> BTreeMap<String, u64> {
    span(played, from, to).map_or_else(Default::default, |(a, b)| delta(&a.new_work, &b.new_work))
}

/// Of the new work to `ids` over `[from, to]`, what the gates sent there
/// on purpose although they drained, by reason (see [`span`]).
fn on_purpose(played: &Played, ids: &[String], from: f64, to: f64) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let Some((a, b)) = span(played, from, to) else {
        return out;
    };
    let none = BTreeMap::new();
    for id in ids {
        let before = a.on_purpose.get(id).unwrap_or(&none);
        let after = b.on_purpose.get(id).unwrap_or(&none);
        for (why, n) in delta(before, after) {
            *out.entry(why).or_default() += n;
        }
    }
    out.retain(|_, n| *n > 0);
    out
}

/// The rule behind a reason of `sipgate_new_work_draining_total`.
fn reason_words(why: &str) -> &str {
    match why {
        "single_instance_account" => "single-instance account, R-ESG-5",
        "exception" => "exception, R-SG-3/R-ESG-3",
        "all_draining" => "every instance draining, R-AA-4",
        "inside_leg" => "inside leg, R-ESG-1",
        "not_refused" => "not refused by a drain",
        other => other,
    }
}

/// R-AA-1: no new work to a draining sg/esg, once every gate applied the
/// drain, while others took some. What the rules send to a draining
/// instance on purpose (R-ESG-5's single-instance accounts, R-SG-3/R-ESG-3
/// exceptions, R-AA-4...) is left out, as the gates counted it, and the
/// detail says how much.
fn drain_holds(l: &Layout, p: &Played, w: &Window, end: f64) -> (bool, String) {
    let drained = instances_on(l, w, &[Svc::Sg, Svc::Esg]);
    let to = w.to.unwrap_or(end);
    let Some(from) = applied(l, p, &drained, w.from, true)
        .map(|s| s.t)
        .filter(|t| *t < to)
    else {
        return (
            false,
            format!(
                "the gates never all showed {} draining before {to:.0} s",
                drained.join(", ")
            ),
        );
    };
    let nw = new_work(p, from, to);
    let all: u64 = drained.iter().filter_map(|i| nw.get(i)).sum();
    let kept = on_purpose(p, &drained, from, to);
    let left_out: u64 = kept.values().sum();
    let to_drained = all.saturating_sub(left_out);
    let others: u64 = nw
        .iter()
        .filter(|(k, _)| !drained.contains(k))
        .map(|(_, v)| v)
        .sum();
    let pass = !drained.is_empty() && to_drained == 0 && others > 0;
    let why = if kept.is_empty() {
        String::new()
    } else {
        let parts: Vec<String> = kept
            .iter()
            .map(|(k, n)| format!("{} {n}", reason_words(k)))
            .collect();
        format!(" ({})", parts.join("; "))
    };
    (
        pass,
        format!(
            "{} took {to_drained} new calls in {:.0} s of drain ({}, applied by every gate {:.0} s after the activation), leaving out {left_out} the rules send there on purpose{why}; the others took {others}",
            drained.join(", "),
            to - from,
            w.profile,
            from - w.from
        ),
    )
}

/// R-AA-3: once lifted, the drained sg/esg take new work again.
fn return_holds(l: &Layout, p: &Played, w: &Window, end: f64) -> (bool, String) {
    let drained = instances_on(l, w, &[Svc::Sg, Svc::Esg]);
    let Some(lifted) = w.to else {
        return (false, format!("{} was never lifted", w.profile));
    };
    let Some(back_at) = applied(l, p, &drained, lifted, false).map(|s| s.t) else {
        return (
            false,
            format!(
                "the gates still showed {} draining at the end",
                drained.join(", ")
            ),
        );
    };
    let nw = new_work(p, back_at, end);
    let back: Vec<String> = drained
        .iter()
        .map(|i| format!("{i} {}", nw.get(i).copied().unwrap_or(0)))
        .collect();
    let pass = !drained.is_empty() && drained.iter().all(|i| nw.get(i).copied().unwrap_or(0) > 0);
    (
        pass,
        format!(
            "new calls after {} was lifted: {}",
            w.profile,
            back.join(", ")
        ),
    )
}

/// The draining mgs of a window and, per mg, the samples of its ramp.
fn mg_ramps(l: &Layout, p: &Played, w: &Window, end: f64) -> Vec<(String, Vec<(f64, f64)>)> {
    // From the sample in which media-ctl had the servers in its drain zone.
    let seen = p
        .samples
        .iter()
        .find(|s| s.t >= w.from && w.servers.iter().all(|x| s.mg_drain_zone.contains(x)))
        .map_or(end, |s| s.t);
    let until =
        w.to.unwrap_or(end)
            .min(seen + f64::from(l.mg_drain_window_s()) + RAMP_SLACK_S);
    instances_on(l, w, &[Svc::Mg])
        .into_iter()
        .map(|id| {
            let ramp = p
                .samples
                .iter()
                .filter(|s| s.t >= w.from && s.t <= until)
                .filter_map(|s| Some((s.t, *s.mg_weight.get(&id)?)))
                .collect();
            (id, ramp)
        })
        .collect()
}

/// True when media-ctl kept `id` assignable as the last mg up (R-MG-3)
/// before its weight ever reached 0 in the window: R-MG-1 and R-MG-4 do
/// not apply to it then.
fn was_last(p: &Played, id: &str, w: &Window, end: f64) -> bool {
    let to = w.to.unwrap_or(end);
    for s in p.samples.iter().filter(|s| s.t >= w.from && s.t <= to) {
        if s.mg_weight.get(id).is_some_and(|x| *x == 0.0) {
            return false;
        }
        if s.mg_assign.get(id).is_some_and(|a| a == "queued_for_drain") {
            return true;
        }
    }
    false
}

/// R-MG-1: a draining mg's weight reaches 0 within the window.
fn mg_out(l: &Layout, p: &Played, w: &Window, end: f64) -> (bool, String) {
    let ramps = mg_ramps(l, p, w, end);
    if ramps.is_empty() {
        return (false, format!("{} drains no mg", w.profile));
    }
    let parts: Vec<(bool, String)> = ramps
        .iter()
        .map(|(id, r)| match r.iter().find(|(_, wt)| *wt == 0.0) {
            _ if was_last(p, id, w, end) => (true, format!("{id} kept as the last mg up (R-MG-3)")),
            Some((t, _)) => (true, format!("{id} weight 0 after {:.0} s", t - w.from)),
            None => (
                false,
                format!(
                    "{id} weight still {:.2} after {} s + {RAMP_SLACK_S} s",
                    r.last().map_or(1.0, |x| x.1),
                    l.mg_drain_window_s()
                ),
            ),
        })
        .collect();
    let pass = parts.iter().all(|x| x.0);
    let text = parts
        .into_iter()
        .map(|x| x.1)
        .collect::<Vec<_>>()
        .join(", ");
    (pass, format!("{text} (window {} s)", l.mg_drain_window_s()))
}

/// R-MG-4: the weight passes through values between 1 and 0 (no cliff).
fn mg_gradual(l: &Layout, p: &Played, w: &Window, end: f64) -> (bool, String) {
    let ramps = mg_ramps(l, p, w, end);
    if ramps.is_empty() {
        return (false, format!("{} drains no mg", w.profile));
    }
    let parts: Vec<(bool, String)> = ramps
        .iter()
        .map(|(id, r)| {
            if was_last(p, id, w, end) {
                return (true, format!("{id} kept as the last mg up (R-MG-3)"));
            }
            let between = r.iter().filter(|(_, x)| *x > 0.0 && *x < 1.0).count();
            (
                between >= 2,
                format!("{id}: {between} samples between full weight and 0"),
            )
        })
        .collect();
    let pass = parts.iter().all(|x| x.0);
    (
        pass,
        parts
            .into_iter()
            .map(|x| x.1)
            .collect::<Vec<_>>()
            .join(", "),
    )
}
