//! What every verdict module shares: the run's drain windows, a check
//! applied to each, the instances a window drains, and when the gates had
//! applied a change. Below the verdicts, so none of them depends on another.

use super::play::{Mark, Played};
use super::sampled::Sample;
use super::scenario::Action;
use crate::site::{Layout, Svc};

/// A drain window: a profile active from `from` to `to`.
#[derive(Debug, Clone)]
pub struct Window {
    /// Profile name.
    pub profile: String,
    /// Its servers.
    pub servers: Vec<String>,
    /// Activated at.
    pub from: f64,
    /// Lifted at, or `None` if it was never lifted.
    pub to: Option<f64>,
}

/// The drain windows of a run, in order.
pub fn windows(marks: &[Mark]) -> Vec<Window> {
    let mut out: Vec<Window> = Vec::new();
    for m in marks.iter().filter(|m| m.error.is_none()) {
        match &m.action {
            Action::Activate { profile, servers } => out.push(Window {
                profile: profile.clone(),
                servers: servers.clone(),
                from: m.t,
                to: None,
            }),
            Action::Deactivate { profile } => {
                if let Some(w) = out
                    .iter_mut()
                    .find(|w| &w.profile == profile && w.to.is_none())
                {
                    w.to = Some(m.t);
                }
            }
            _ => {}
        }
    }
    out
}

/// Every part must pass; their details joined.
pub(crate) fn join(parts: Vec<(bool, String)>) -> (bool, String) {
    let pass = parts.iter().all(|x| x.0);
    let text = parts
        .into_iter()
        .map(|x| x.1)
        .collect::<Vec<_>>()
        .join("; ");
    (pass, text)
}

/// `check` on every drain window of the run; fails when there is none.
pub(crate) fn per_window(
    layout: &Layout,
    played: &Played,
    check: impl Fn(&Layout, &Played, &Window, f64) -> (bool, String),
) -> (bool, String) {
    let ws = windows(&played.marks);
    if ws.is_empty() {
        return (false, "no drain window in the run: nothing to judge".into());
    }
    let end = played.samples.last().map_or(0.0, |s| s.t);
    let results: Vec<(bool, String)> = ws.iter().map(|w| check(layout, played, w, end)).collect();
    let pass = results.iter().all(|r| r.0);
    (
        pass,
        results
            .into_iter()
            .map(|r| r.1)
            .collect::<Vec<_>>()
            .join("; "),
    )
}

pub(crate) fn instances_on(layout: &Layout, w: &Window, svcs: &[Svc]) -> Vec<String> {
    layout
        .instances()
        .into_iter()
        .filter(|i| svcs.contains(&i.svc) && w.servers.contains(&i.server))
        .map(|i| i.id)
        .collect()
}

/// The first sample from `from` on in which every gate of the site
/// answered with its instance states published and each of `ids` was
/// (`drain`) or was not in a drain state in every gate's view: from then
/// on, a new call to a drained instance is the gates' fault, not the time a
/// change takes to reach them.
pub(crate) fn applied<'a>(
    l: &Layout,
    p: &'a Played,
    ids: &[String],
    from: f64,
    drain: bool,
) -> Option<&'a Sample> {
    p.samples.iter().filter(|s| s.t >= from).find(|s| {
        s.gates_ready == l.gates()
            && ids.iter().all(|i| {
                let n = s.gates_draining.get(i).copied().unwrap_or(0);
                if drain {
                    n == l.gates()
                } else {
                    n == 0
                }
            })
    })
}
