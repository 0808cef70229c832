//! The Active-Passive promises judged from the agents' own record
//! (`ap_log.rs`): a group never has two leaders at once, and is never
//! without one longer than a pace.

use super::ap_log::ApEvent;
use super::evidence::{verdict, Evidence, Invariant};

/// The longest two members of a group may both lead at a handover: the
/// skew between two agents' watches of the same record. The agents have no
/// fence (the new leader does not wait for the old one to follow), so
/// every handover overlaps or leaves a gap of a few milliseconds (seen:
/// 0.4-5 ms); longer is a leader that did not step down.
pub const AP_SKEW_S: f64 = 0.25;

/// What one group's timeline showed.
#[derive(Default)]
struct GroupSeen {
    leads: usize,
    overlaps: usize,
    longest_overlap: f64,
    longest_gap: f64,
    first: Option<String>,
}

/// One group's events in order: two leaders for longer than
/// [`AP_SKEW_S`], or none for longer than `pace` (from the first leader on).
fn judge_group(g: &str, events: &[&ApEvent], pace: f64, end: f64) -> GroupSeen {
    let mut seen = GroupSeen::default();
    // Who leads, since when; since when two lead; since when none does.
    let mut leading: Vec<(&str, f64)> = Vec::new();
    let mut two: Option<(f64, String)> = None;
    let mut none_since: Option<f64> = None;
    let close_two = |t: f64, two: &mut Option<(f64, String)>, seen: &mut GroupSeen| {
        if let Some((from, what)) = two.take() {
            seen.overlaps += 1;
            seen.longest_overlap = seen.longest_overlap.max(t - from);
            if t - from > AP_SKEW_S {
                seen.first.get_or_insert_with(|| {
                    format!("group {g} had two leaders for {:.3} s: {what}", t - from)
                });
            }
        }
    };
    for a in events {
        if a.leads {
            seen.leads += 1;
            if let Some((other, since)) = leading.iter().find(|(m, _)| *m != a.member) {
                two.get_or_insert((
                    a.t,
                    format!(
                        "{} began to lead at {:.3} s while {other} led (since {since:.3} s)",
                        a.member, a.t
                    ),
                ));
            }
            if let Some(from) = none_since.take() {
                seen.longest_gap = seen.longest_gap.max(a.t - from);
                if a.t - from > pace {
                    seen.first.get_or_insert_with(|| {
                        format!(
                            "group {g} had no leader from {from:.2} s to {:.2} s ({:.2} s; pace {pace} s)",
                            a.t,
                            a.t - from
                        )
                    });
                }
            }
            leading.retain(|(m, _)| *m != a.member);
            leading.push((&a.member, a.t));
        } else {
            leading.retain(|(m, _)| *m != a.member);
            if leading.len() < 2 {
                close_two(a.t, &mut two, &mut seen);
            }
            if leading.is_empty() {
                none_since = Some(a.t);
            }
        }
    }
    close_two(end, &mut two, &mut seen);
    if let Some(from) = none_since.filter(|from| end - from > pace) {
        seen.first
            .get_or_insert_with(|| format!("group {g} had no leader from {from:.2} s to the end"));
    }
    seen
}

/// Per group: never two members leading at once for longer than
/// [`AP_SKEW_S`], never none for longer than `ap_pace_s`.
pub fn one_leader(e: &Evidence) -> Invariant {
    const NAME: &str = "Active-Passive: never two leaders, never none longer than a pace";
    if e.ap.is_empty() {
        return verdict(
            NAME,
            Some("no agent said it leads: nothing to judge".into()),
            "0 agent events".into(),
        );
    }
    let mut groups: Vec<&str> = e.ap.iter().map(|a| a.group.as_str()).collect();
    groups.sort();
    groups.dedup();
    let mut all = GroupSeen::default();
    for g in &groups {
        let events: Vec<&ApEvent> = e.ap.iter().filter(|a| a.group == *g).collect();
        let s = judge_group(g, &events, e.ap_pace_s, e.end_s);
        all.leads += s.leads;
        all.overlaps += s.overlaps;
        all.longest_overlap = all.longest_overlap.max(s.longest_overlap);
        all.longest_gap = all.longest_gap.max(s.longest_gap);
        all.first = all.first.or(s.first);
    }
    verdict(
        NAME,
        all.first,
        format!(
            "{} groups, {} times a member began to lead; {} times two led at once, for {:.3} s at most (skew allowed {AP_SKEW_S} s); longest without a leader {:.3} s (pace {} s)",
            groups.len(),
            all.leads,
            all.overlaps,
            all.longest_overlap,
            all.longest_gap,
            e.ap_pace_s
        ),
    )
}
