//! Where the Active-Passive leaders went, judged against the drain zone
//! over time (the union of the servers of the active profiles): R-AP-1
//! (leaders leave a draining server for a normal-zone follower), R-AP-3
//! (they go home when the drain is lifted), R-AP-4 (a group without a
//! normal-zone follower keeps its leader and is reported blocked). The
//! leaders are the ones the groups' services confirmed
//! (`ringsync handover status`, once a second).

use std::collections::BTreeSet;

use super::play::Played;
use super::verdict_kit::windows;
use crate::site::{ApGroup, Layout};

/// A stretch of the run with one drain zone: `[from, to)`, the zone, and
/// the servers the change that opened it took out of the zone.
struct Period {
    from: f64,
    to: f64,
    zone: BTreeSet<String>,
    lifted: BTreeSet<String>,
    label: String,
}

fn periods(p: &Played) -> Vec<Period> {
    let ws = windows(&p.marks);
    let end = p.samples.last().map_or(0.0, |s| s.t);
    let mut cuts: Vec<(f64, String)> = ws.iter().map(|w| (w.from, w.profile.clone())).collect();
    cuts.extend(
        ws.iter()
            .filter_map(|w| Some((w.to?, format!("{} lifted", w.profile)))),
    );
    cuts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let zone_at = |t: f64| -> BTreeSet<String> {
        ws.iter()
            .filter(|w| w.from <= t && w.to.is_none_or(|to| t < to))
            .flat_map(|w| w.servers.iter().cloned())
            .collect()
    };
    let mut out: Vec<Period> = Vec::new();
    for (i, (from, label)) in cuts.iter().enumerate() {
        let to = cuts.get(i + 1).map_or(end, |c| c.0);
        let before = out.last().map(|p| p.zone.clone()).unwrap_or_default();
        let zone = zone_at(*from);
        out.push(Period {
            from: *from,
            to,
            lifted: before.difference(&zone).cloned().collect(),
            zone,
            label: label.clone(),
        });
    }
    out
}

/// The group's confirmed leader in the last sample at or before `t` that
/// had one.
fn leader_at<'a>(p: &'a Played, group: &str, t: f64) -> Option<&'a str> {
    p.samples
        .iter()
        .take_while(|s| s.t <= t)
        .filter_map(|s| s.ap_leader.get(group))
        .last()
        .map(String::as_str)
}

fn server_of<'a>(g: &'a ApGroup, member: &str) -> Option<&'a str> {
    g.members
        .iter()
        .find(|m| m.0 == member)
        .map(|m| m.1.as_str())
}

fn has_normal_follower(g: &ApGroup, zone: &BTreeSet<String>) -> bool {
    g.members.iter().any(|m| !zone.contains(&m.1))
}

/// Per period, `check` gives `(judged, passed, text)`; the verdict passes
/// when something was judged and everything judged passed.
fn judge_periods(
    l: &Layout,
    p: &Played,
    check: impl Fn(&Period, &ApGroup) -> Option<(bool, String)>,
) -> (bool, String) {
    let mut parts = Vec::new();
    let mut all = true;
    let mut any = false;
    for per in periods(p) {
        let results: Vec<(bool, String)> = l.ap().iter().filter_map(|g| check(&per, g)).collect();
        if results.is_empty() {
            continue;
        }
        any = true;
        let ok = results.iter().filter(|r| r.0).count();
        all &= ok == results.len();
        let texts: Vec<&str> = results.iter().map(|r| r.1.as_str()).collect();
        parts.push(format!(
            "{} ({:.0}–{:.0} s): {ok} of {} groups ({})",
            per.label,
            per.from,
            per.to,
            results.len(),
            texts.join("; ")
        ));
    }
    if !any {
        return (false, "no group to judge in any drain window".into());
    }
    (all, parts.join("; "))
}

/// R-AP-1: a group led from a server the period put in the drain zone, with
/// a member in the normal zone, is led from the normal zone by the period's
/// end.
pub(super) fn leaders_leave(l: &Layout, p: &Played) -> (bool, String) {
    judge_periods(l, p, |per, g| {
        if per.zone.is_empty() || !has_normal_follower(g, &per.zone) {
            return None;
        }
        let before = leader_at(p, &g.name, per.from)?;
        if !per.zone.contains(server_of(g, before)?) {
            return None;
        }
        let after = leader_at(p, &g.name, per.to)?;
        let srv = server_of(g, after)?;
        Some((
            !per.zone.contains(srv),
            format!("{}: {before} → {after} on {srv}", g.name),
        ))
    })
}

/// R-AP-3: after a lift, a group whose home server left the drain zone and
/// that was not led from home is led from home by the period's end.
pub(super) fn leaders_go_home(l: &Layout, p: &Played) -> (bool, String) {
    judge_periods(l, p, |per, g| {
        let home_srv = server_of(g, &g.home)?;
        if !per.lifted.contains(home_srv) || per.zone.contains(home_srv) {
            return None;
        }
        let before = leader_at(p, &g.name, per.from)?;
        if before == g.home {
            return None;
        }
        let after = leader_at(p, &g.name, per.to)?;
        let when = p
            .samples
            .iter()
            .filter(|s| s.t >= per.from && s.t <= per.to)
            .find(|s| s.ap_leader.get(&g.name) == Some(&g.home))
            .map_or(String::new(), |s| format!(" after {:.0} s", s.t - per.from));
        Some((
            after == g.home,
            format!("{}: {before} → {after}{when}", g.name),
        ))
    })
}

/// R-AP-4: a group with every member in the drain zone keeps its leader
/// through the period, and the planner reports it blocked.
pub(super) fn blocked_keeps_leader(l: &Layout, p: &Played) -> (bool, String) {
    let (pass, text) = judge_periods(l, p, |per, g| {
        if per.zone.is_empty() || has_normal_follower(g, &per.zone) {
            return None;
        }
        let kept = leader_at(p, &g.name, per.from)?;
        let inside = p.samples.iter().filter(|s| s.t > per.from && s.t < per.to);
        let changed = inside
            .clone()
            .filter_map(|s| s.ap_leader.get(&g.name))
            .find(|x| x.as_str() != kept);
        let why = inside.filter_map(|s| s.ap_blocked.get(&g.name)).next();
        let text = match (changed, why) {
            (Some(x), _) => format!("{}: moved {kept} → {x}", g.name),
            (None, Some(_)) => format!("{}: kept {kept}, reported blocked", g.name),
            (None, None) => format!("{}: kept {kept}, never reported blocked", g.name),
        };
        Some((changed.is_none() && why.is_some(), text))
    });
    let why = p.samples.iter().find_map(|s| s.ap_blocked.values().next());
    match why {
        Some(why) => (pass, format!("{text}; the planner said: {why}")),
        None => (pass, text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rehearsal::play::Mark;
    use crate::rehearsal::sample::Sample;
    use crate::rehearsal::scenario::Action;
    use crate::site::{Counts, RunSpec, StoreKind};

    fn layout() -> Layout {
        let counts = Counts {
            sg: 2,
            ap_groups: 1,
            ..Counts::default()
        };
        let run = RunSpec {
            net: [127, 60, 1],
            gates: 1,
            store: StoreKind::Embedded,
            gate_deadline_s: 20,
            mg_drain_window_s: None,
            ap_pace_s: Some(3),
        };
        Layout::from_counts(&counts, &run).unwrap()
    }

    fn mark(t: f64, action: Action) -> Mark {
        Mark {
            t,
            label: action.label(),
            error: None,
            action,
        }
    }

    fn played(leaders: &[(f64, &str, bool)], marks: Vec<Mark>) -> Played {
        let samples = leaders
            .iter()
            .map(|(t, l, blocked)| {
                let mut s = Sample {
                    t: *t,
                    ..Sample::default()
                };
                s.ap_leader.insert("ap-1".into(), (*l).into());
                if *blocked {
                    s.ap_blocked.insert("ap-1".into(), "no follower".into());
                }
                s
            })
            .collect();
        Played {
            marks,
            samples,
            loads: Vec::new(),
            gate_stops: Vec::new(),
        }
    }

    fn activate(t: f64, p: &str, srv: &[&str]) -> Mark {
        let servers = srv.iter().map(|s| (*s).to_string()).collect();
        mark(
            t,
            Action::Activate {
                profile: p.into(),
                servers,
            },
        )
    }

    fn deactivate(t: f64, p: &str) -> Mark {
        mark(t, Action::Deactivate { profile: p.into() })
    }

    #[test]
    fn a_leader_that_stays_on_a_draining_server_fails_r_ap_1() {
        let l = layout();
        let marks = vec![activate(1.5, "m", &["srv-a"]), deactivate(5.5, "m")];
        let moved = played(
            &[
                (1.0, "ap1-a", false),
                (3.0, "ap1-b", false),
                (6.0, "ap1-a", false),
            ],
            marks.clone(),
        );
        assert!(leaders_leave(&l, &moved).0);
        assert!(leaders_go_home(&l, &moved).0);
        let stuck = played(
            &[
                (1.0, "ap1-a", false),
                (3.0, "ap1-a", false),
                (6.0, "ap1-a", false),
            ],
            marks,
        );
        let (pass, text) = leaders_leave(&l, &stuck);
        assert!(!pass, "{text}");
        assert!(text.contains("ap1-a → ap1-a on srv-a"), "{text}");
        // Never away from home: nothing for R-AP-3 to judge.
        assert!(!leaders_go_home(&l, &stuck).0);
    }

    #[test]
    fn a_group_without_a_normal_follower_must_keep_its_leader_and_say_blocked() {
        let l = layout();
        let marks = vec![
            activate(1.5, "all", &["srv-a", "srv-b"]),
            deactivate(5.5, "all"),
        ];
        let kept = played(
            &[
                (1.0, "ap1-a", false),
                (3.0, "ap1-a", true),
                (6.0, "ap1-a", false),
            ],
            marks.clone(),
        );
        let (pass, text) = blocked_keeps_leader(&l, &kept);
        assert!(pass, "{text}");
        assert!(text.contains("the planner said: no follower"), "{text}");
        let moved = played(
            &[
                (1.0, "ap1-a", false),
                (3.0, "ap1-b", true),
                (6.0, "ap1-b", false),
            ],
            marks.clone(),
        );
        assert!(!blocked_keeps_leader(&l, &moved).0);
        let silent = played(
            &[
                (1.0, "ap1-a", false),
                (3.0, "ap1-a", false),
                (6.0, "ap1-a", false),
            ],
            marks,
        );
        let (pass, text) = blocked_keeps_leader(&l, &silent);
        assert!(!pass && text.contains("never reported blocked"), "{text}");
    }
}
