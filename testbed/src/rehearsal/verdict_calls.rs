//! Verdicts judged call by call from the callers' logs: which instance
//! answered each call (the address in its SDP answer), on which listener,
//! for which esg account (R-ESG-1, R-ESG-3, R-ESG-5), whether work went on
//! while every instance drained (R-AA-4) or the store was away (R-MN-2).

use std::collections::BTreeMap;

use super::load::{CallEvent, LoadRun};
use super::play::Played;
use super::sample::Sample;
use super::scenario::{AccountKind, Action};
use super::verdict_kit::{applied, instances_on, per_window, Window};
use crate::site::{Layout, Svc};

/// Calls of the loads `keep` accepts established in `[from, to)`, per
/// instance that answered them (`?` when the answer named no instance).
fn answered_by(
    l: &Layout,
    p: &Played,
    keep: impl Fn(&LoadRun) -> bool,
    from: f64,
    to: f64,
) -> BTreeMap<String, u64> {
    let ids: BTreeMap<_, _> = l.instances().into_iter().map(|i| (i.ip, i.id)).collect();
    let mut out = BTreeMap::new();
    for load in p.loads.iter().filter(|x| keep(x)) {
        for (t, ev, call) in &load.events {
            if *ev != CallEvent::Up || *t < from || *t >= to {
                continue;
            }
            let who = load
                .answered
                .get(call)
                .and_then(|ip| ids.get(ip))
                .cloned()
                .unwrap_or_else(|| "?".into());
            *out.entry(who).or_default() += 1;
        }
    }
    out
}

fn list(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The span of a window in which every gate showed its esg draining.
fn drain_span(l: &Layout, p: &Played, w: &Window, end: f64) -> Option<(Vec<String>, f64, f64)> {
    let drained = instances_on(l, w, &[Svc::Esg]);
    let to = w.to.unwrap_or(end);
    let from = applied(l, p, &drained, w.from, true)
        .map(|s| s.t)
        .filter(|t| *t < to)?;
    Some((drained, from, to))
}

/// The leg (`subscriber`, `provider`, `inside`) of the listener a load called.
fn leg<'a>(l: &'a Layout, x: &LoadRun) -> &'a str {
    l.listener(&x.listener).map_or("", |x| x.leg.as_str())
}

fn multi_provider(l: &Layout, x: &LoadRun) -> bool {
    x.is_call() && leg(l, x) == "provider" && x.account == AccountKind::Multi
}

/// R-ESG-1, R-ESG-2: on the provider leg, a multi-instance account's new
/// calls leave the draining esg once every gate applied the drain.
pub(super) fn esg_provider_leg(l: &Layout, p: &Played) -> (bool, String) {
    per_window(l, p, |l, p, w, end| {
        let Some((drained, from, to)) = drain_span(l, p, w, end) else {
            return (
                false,
                format!("the gates never all showed {} draining its esg", w.profile),
            );
        };
        let by = answered_by(l, p, |x| multi_provider(l, x), from, to);
        let to_drained: u64 = drained.iter().filter_map(|i| by.get(i)).sum();
        let others: u64 = by
            .iter()
            .filter(|(k, _)| !drained.contains(k))
            .map(|x| x.1)
            .sum();
        (
            to_drained == 0 && others > 0,
            format!(
                "provider leg, multi-instance account, {:.0} s of drain ({}): {} took {to_drained} new calls, the others {others} ({})",
                to - from,
                w.profile,
                drained.join(", "),
                list(&by)
            ),
        )
    })
}

/// R-ESG-3: the drain's 503 is for the provider leg only. On the inside
/// leg no new call is refused (the balancer prefers a normal-zone esg,
/// R-AA-1), and the single-instance account's new calls are still taken by
/// the draining esg.
pub(super) fn esg_inside_leg(l: &Layout, p: &Played) -> (bool, String) {
    per_window(l, p, |l, p, w, end| {
        let Some((drained, from, to)) = drain_span(l, p, w, end) else {
            return (
                false,
                format!("the gates never all showed {} draining its esg", w.profile),
            );
        };
        let inside = |x: &LoadRun| x.is_call() && leg(l, x) == "inside";
        let single = |x: &LoadRun| x.is_call() && x.account == AccountKind::Single;
        let by = answered_by(l, p, inside, from, to);
        let served: u64 = by.values().sum();
        let refused = refused_in(p, inside, from, to);
        let kept: u64 = drained
            .iter()
            .filter_map(|i| answered_by(l, p, single, from, to).get(i).copied())
            .sum();
        let has_single = p.loads.iter().any(single);
        // Only a run that called for the account says what the esg kept.
        let single_words = if has_single {
            format!(
                "{} took {kept} new calls of the single-instance account",
                drained.join(", ")
            )
        } else {
            "no load of the single-instance account".into()
        };
        (
            served + kept > 0 && refused == 0 && (!has_single || kept > 0),
            format!(
                "{:.0} s of drain ({}): inside leg {served} new calls ({}), {refused} refused; {single_words}",
                to - from,
                w.profile,
                list(&by),
            ),
        )
    })
}

/// Calls of the loads `keep` accepts refused (503) in `[from, to)`.
fn refused_in(p: &Played, keep: impl Fn(&LoadRun) -> bool, from: f64, to: f64) -> usize {
    p.loads
        .iter()
        .filter(|x| keep(x))
        .flat_map(|x| &x.events)
        .filter(|(t, ev, _)| *ev == CallEvent::Refused && *t >= from && *t < to)
        .count()
}

/// R-ESG-5: every call of the single-instance account goes to its home
/// esg (its account's `home`), drain or not.
pub(super) fn esg_single_account(l: &Layout, p: &Played) -> (bool, String) {
    let single = |x: &LoadRun| x.is_call() && x.account == AccountKind::Single;
    let home_id = p
        .loads
        .iter()
        .filter(|x| single(x))
        .find_map(|x| l.account(x.account_name.as_deref()?)?.home.clone())
        .unwrap_or_default();
    let all = answered_by(l, p, single, 0.0, f64::MAX);
    let total: u64 = all.values().sum();
    if total == 0 {
        return (
            false,
            "no call of the single-instance account: nothing to judge".into(),
        );
    }
    let home = all.get(&home_id).copied().unwrap_or(0);
    let drained = home_drained(l, p, single, &home_id);
    (
        home == total,
        format!(
            "{home} of {total} calls of the single-instance account went to its home {home_id}{drained} ({})",
            list(&all)
        ),
    )
}

/// What R-ESG-5's detail says of the home's drain, from the figures: how
/// many of the account's calls it took while every gate showed it
/// draining, or that it never drained (or never showed drained), so the
/// detail claims no drain that did not happen.
fn home_drained(
    l: &Layout,
    p: &Played,
    single: impl Fn(&LoadRun) -> bool + Copy,
    home_id: &str,
) -> String {
    let end = p.samples.last().map_or(0.0, |s| s.t);
    let windows: Vec<Window> = super::verdict_kit::windows(&p.marks)
        .into_iter()
        .filter(|w| instances_on(l, w, &[Svc::Esg]).iter().any(|i| i == home_id))
        .collect();
    if windows.is_empty() {
        return ", which did not drain in the run".into();
    }
    let spans: Vec<(f64, f64)> = windows
        .iter()
        .filter_map(|w| drain_span(l, p, w, end))
        .map(|(_, from, to)| (from, to))
        .collect();
    if spans.is_empty() {
        return ", which the gates never all showed draining".into();
    }
    let during: u64 = spans
        .iter()
        .map(|(from, to)| {
            answered_by(l, p, single, *from, *to)
                .get(home_id)
                .copied()
                .unwrap_or(0)
        })
        .sum();
    let secs: f64 = spans.iter().map(|(a, b)| b - a).sum();
    format!(", {during} of them in the {secs:.0} s it drained")
}

/// The spans of consecutive samples for which `hold` is true.
fn spans(samples: &[Sample], hold: impl Fn(&Sample) -> bool) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    let mut open: Option<f64> = None;
    for s in samples {
        match (hold(s), open) {
            (true, None) => open = Some(s.t),
            (false, Some(a)) => {
                out.push((a, s.t));
                open = None;
            }
            _ => {}
        }
    }
    if let (Some(a), Some(last)) = (open, samples.last()) {
        out.push((a, last.t));
    }
    out
}

/// R-AA-4: while every sg (or every esg) drains, in every gate's view, new
/// calls are still served, by the draining instances, and none refused.
pub(super) fn all_draining(l: &Layout, p: &Played) -> (bool, String) {
    let mut parts = Vec::new();
    for svc in [Svc::Sg, Svc::Esg] {
        let ids: Vec<String> = l
            .instances()
            .into_iter()
            .filter(|i| i.svc == svc)
            .map(|i| i.id)
            .collect();
        if ids.is_empty() {
            continue;
        }
        let every = |s: &Sample| {
            s.gates_ready == l.gates()
                && ids
                    .iter()
                    .all(|i| s.gates_draining.get(i).copied().unwrap_or(0) == l.gates())
        };
        for (from, to) in spans(&p.samples, every) {
            let by = answered_by(l, p, |x| x.is_call(), from, to);
            let served: u64 = by.values().sum();
            let refused = refused_in(p, |_| true, from, to);
            parts.push((
                served > 0 && refused == 0,
                format!(
                    "every {} draining for {:.0} s (from {from:.0} s): {served} new calls served ({}), {refused} refused",
                    svc.as_str(),
                    to - from,
                    list(&by)
                ),
            ));
        }
    }
    if parts.is_empty() {
        return (
            false,
            "no moment in which every sg or every esg drained: nothing to judge".into(),
        );
    }
    super::verdict_kit::join(parts)
}

/// R-MN-2: while the store is away every gate keeps its view (fail-static)
/// and says it is stale; calls keep flowing; nothing drains or undrains;
/// once it is back the gates are fresh again.
pub(super) fn store_outage(l: &Layout, p: &Played) -> (bool, String) {
    let outages: Vec<(f64, f64)> = p
        .marks
        .iter()
        .filter(|m| m.error.is_none())
        .filter_map(|m| match m.action {
            Action::StopEtcd { for_s } => Some((m.t, m.t + for_s)),
            _ => None,
        })
        .collect();
    if outages.is_empty() {
        return (false, "no store outage in the run: nothing to judge".into());
    }
    let parts = outages
        .into_iter()
        .map(|(from, to)| {
            let inside: Vec<&Sample> = p.samples.iter().filter(|s| s.t >= from && s.t < to).collect();
            let stale_seen = inside.iter().any(|s| s.gates_stale == l.gates());
            // Only the samples in which every gate had published its view:
            // a gate restarted just before the outage says ready before
            // its instance states are set, and that is no change of view.
            let views: Vec<_> = inside
                .iter()
                .filter(|s| s.gates_ready == l.gates())
                .map(|s| &s.gates_draining)
                .collect();
            let judged = views.len() >= 2;
            let static_view = judged && views.windows(2).all(|w| w[0] == w[1]);
            let fresh_after = p.samples.iter().any(|s| s.t >= to && s.gates_ready == l.gates() && s.gates_stale == 0);
            let by = answered_by(l, p, |x| x.is_call(), from, to);
            let served: u64 = by.values().sum();
            let failed = failed_established(p, from, to);
            (
                stale_seen && static_view && fresh_after && served > 0 && failed == 0,
                format!(
                    "store away {from:.0}–{to:.0} s: {served} calls established meanwhile, {failed} of them failed; every gate said stale: {}; drain states unchanged: {} (in {} samples with every gate's view); every gate fresh again after: {}",
                    yes(stale_seen),
                    if judged { yes(static_view) } else { "not known" },
                    views.len(),
                    yes(fresh_after)
                ),
            )
        })
        .collect();
    super::verdict_kit::join(parts)
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// Calls established in `[from, to)` that did not end normally.
fn failed_established(p: &Played, from: f64, to: f64) -> u64 {
    let mut n = 0;
    for load in p.loads.iter().filter(|x| x.is_call()) {
        let ended: std::collections::BTreeSet<&String> = load
            .events
            .iter()
            .filter(|e| e.1 == CallEvent::End)
            .map(|e| &e.2)
            .collect();
        n += load
            .events
            .iter()
            .filter(|(t, ev, c)| {
                *ev == CallEvent::Up && *t >= from && *t < to && !ended.contains(c)
            })
            .count() as u64;
    }
    n
}
