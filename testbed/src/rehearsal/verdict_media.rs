//! Verdicts on media-ctl's own account of its gateways (its `/v1/status`,
//! sampled once a second): the last mg stays assignable (R-MG-3), a bgmg
//! is never drained and serves its local sg/esg (R-BG-1), is not stoppable
//! while it has their calls (R-BG-2), and takes no new call once they
//! drain, then is reported stoppable (R-BG-3).

use super::play::Played;
use super::sample::Sample;
use super::sampled::delta;
use super::verdict_kit::{instances_on, join, per_window};
use crate::site::{Layout, Svc};

fn ids(l: &Layout, svc: Svc) -> Vec<(String, String)> {
    l.instances()
        .into_iter()
        .filter(|i| i.svc == svc)
        .map(|i| (i.id, i.server))
        .collect()
}

/// New calls media-ctl placed on `id` between two samples.
fn placed(a: &Sample, b: &Sample, id: &str) -> u64 {
    let d = delta(&a.mg_new_calls, &b.mg_new_calls);
    d.get(id).copied().unwrap_or(0)
}

/// R-MG-3: while every mg's server is in media-ctl's drain zone, one mg
/// stays assignable (`queued_for_drain`, weight above 0) and takes the new
/// calls.
pub(super) fn last_mg(l: &Layout, p: &Played) -> (bool, String) {
    let mgs = ids(l, Svc::Mg);
    let every =
        |s: &&Sample| !mgs.is_empty() && mgs.iter().all(|(_, srv)| s.mg_drain_zone.contains(srv));
    let inside: Vec<&Sample> = p.samples.iter().filter(every).collect();
    let (Some(first), Some(last)) = (inside.first(), inside.last()) else {
        return (
            false,
            "no moment in which every mg's server drained: nothing to judge".into(),
        );
    };
    let kept = inside.iter().all(|s| {
        s.mg_assign
            .iter()
            .any(|(id, a)| a == "queued_for_drain" && s.mg_weight.get(id).is_some_and(|w| *w > 0.0))
    });
    let queued: Vec<String> = last
        .mg_assign
        .iter()
        .filter(|(_, a)| *a == "queued_for_drain")
        .map(|(id, _)| format!("{id} ({} new calls)", placed(first, last, id)))
        .collect();
    let total: u64 = mgs.iter().map(|(id, _)| placed(first, last, id)).sum();
    (
        kept && total > 0,
        format!(
            "every mg's server drained for {:.0} s: queued for drain and still assignable in {} of {} samples: {}; {total} new calls placed meanwhile",
            last.t - first.t,
            inside.iter().filter(|s| s.mg_assign.values().any(|a| a == "queued_for_drain")).count(),
            inside.len(),
            if queued.is_empty() { "none".into() } else { queued.join(", ") }
        ),
    )
}

/// R-BG-1: a bgmg is never drained (never ramping, out or queued for
/// drain in media-ctl's status) and takes the new calls of its local sg/esg.
pub(super) fn bgmg_never_drained(l: &Layout, p: &Played) -> (bool, String) {
    let bgmgs = ids(l, Svc::Bgmg);
    let (Some(a), Some(b)) = (p.samples.first(), p.samples.last()) else {
        return (false, "no sample".into());
    };
    if bgmgs.is_empty() {
        return (false, "the site has no bgmg: nothing to judge".into());
    }
    let parts = bgmgs
        .iter()
        .map(|(id, _)| {
            // Closed (weight 0) while its local sg/esg drains is R-BG-3,
            // not a drain of the bgmg: a drain ramps it or takes it out.
            let drained = p.samples.iter().any(|s| {
                s.mg_assign.get(id).is_some_and(|a| {
                    a.starts_with("ramping") || a == "out" || a == "queued_for_drain"
                })
            });
            let states: std::collections::BTreeSet<&str> = p
                .samples
                .iter()
                .filter_map(|s| s.mg_assign.get(id).map(String::as_str))
                .collect();
            let n = placed(a, b, id);
            (
                !drained && n > 0,
                format!(
                    "{id}: {n} new calls, {} ({})",
                    if drained {
                        "drained at some sample"
                    } else {
                        "never ramped or out"
                    },
                    states.into_iter().collect::<Vec<_>>().join(", ")
                ),
            )
        })
        .collect();
    join(parts)
}

/// R-BG-2 and R-BG-3, per drain window: before it, a bgmg with calls is
/// not stoppable; once media-ctl has its server in the drain zone it takes
/// no new call (`closed`) and, its calls ended, is reported stoppable.
pub(super) fn bgmg_closes(l: &Layout, p: &Played) -> (bool, String) {
    per_window(l, p, |l, p, w, end| {
        let bgmgs = instances_on(l, w, &[Svc::Bgmg]);
        if bgmgs.is_empty() {
            return (false, format!("{} has no bgmg", w.profile));
        }
        let to = w.to.unwrap_or(end);
        let seen = p.samples.iter().find(|s| {
            s.t >= w.from && s.t < to && w.servers.iter().all(|x| s.mg_drain_zone.contains(x))
        });
        let Some(seen) = seen else {
            return (
                false,
                format!("media-ctl never showed {} draining", w.servers.join(", ")),
            );
        };
        let last = super::sampled::at(&p.samples, to).unwrap_or(seen);
        let parts = bgmgs
            .iter()
            .map(|id| {
                let busy_stoppable = p.samples.iter().filter(|s| s.t < w.from).any(|s| {
                    s.mg_calls.get(id).is_some_and(|c| *c > 0)
                        && s.bgmg_stoppable.get(id) == Some(&true)
                });
                let n = placed(seen, last, id);
                let stoppable_at = p
                    .samples
                    .iter()
                    .find(|s| s.t >= seen.t && s.t <= to && s.bgmg_stoppable.get(id) == Some(&true))
                    .map(|s| s.t - w.from);
                (
                    !busy_stoppable && n == 0 && stoppable_at.is_some(),
                    format!(
                        "{id}: stoppable while busy before the drain: {}; {n} new calls in {:.0} s of drain; reported stoppable {}",
                        if busy_stoppable { "yes" } else { "never" },
                        last.t - seen.t,
                        stoppable_at.map_or("never".into(), |t| format!("{t:.0} s after the activation"))
                    ),
                )
            })
            .collect();
        join(parts)
    })
}
