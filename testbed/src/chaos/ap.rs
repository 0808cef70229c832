//! The Active-Passive promises from the agents' own logs: each agent says
//! when its member began to lead (`leading`) and when it stopped
//! (`following`), with the time (`ringsync agent`'s stderr). A group never
//! has two leaders at once, and is never without one longer than a pace.

use std::path::Path;

use serde::Serialize;

use super::evidence::{verdict, Evidence, Invariant};

/// One agent's change, by its own log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApEvent {
    /// Seconds after the start.
    pub t: f64,
    /// The group.
    pub group: String,
    /// The member.
    pub member: String,
    /// Began to lead (else: began to follow).
    pub leads: bool,
}

/// An agent's stderr (`<RFC 3339 time>  INFO ...agent: leading group=G
/// member=M seq=N`, `... following group=G member=M leader=L`) as events.
pub fn parse_agent_log(text: &str, epoch0: f64) -> Vec<ApEvent> {
    text.lines()
        .filter_map(|line| {
            let mut w = line.split_whitespace();
            let t = unix_seconds(w.next()?)? - epoch0;
            let (_, rest) = line.split_once("agent: ")?;
            let mut w = rest.split_whitespace();
            let leads = match w.next()? {
                "leading" => true,
                "following" => false,
                _ => return None,
            };
            let field = |name: &str| {
                rest.split_whitespace()
                    .find_map(|x| x.strip_prefix(name)?.strip_prefix('='))
                    .map(str::to_owned)
            };
            Some(ApEvent {
                t,
                group: field("group")?,
                member: field("member")?,
                leads,
            })
        })
        .collect()
}

/// Every agent log of the site's members (`agent-<member>.stderr` in
/// `dir`), as one timeline.
pub fn read_agents(dir: &Path, members: &[String], epoch0: f64) -> Vec<ApEvent> {
    let mut out: Vec<ApEvent> = members
        .iter()
        .flat_map(|m| {
            let text =
                std::fs::read_to_string(dir.join(format!("agent-{m}.stderr"))).unwrap_or_default();
            parse_agent_log(&text, epoch0)
        })
        .collect();
    out.sort_by(|a, b| a.t.total_cmp(&b.t));
    out
}

/// `2026-12-07T17:24:37.420364Z` as Unix seconds.
fn unix_seconds(ts: &str) -> Option<f64> {
    let (date, time) = ts.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':').map(|x| x.parse::<f64>().ok());
    let (h, min, s) = (t.next()??, t.next()??, t.next()??);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    Some(days as f64 * 86_400.0 + h * 3600.0 + min * 60.0 + s)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agents_log_becomes_its_leading_and_following() {
        let log = "2026-12-07T17:24:37.420364Z  INFO ringsync_ops::handover::agent: leading group=ap-1 member=ap1-a seq=0\n\
                   2026-12-07T17:24:37.5Z  INFO ringsync_ops::handover::agent: leadership confirmed group=ap-1 member=ap1-a seq=0\n\
                   2026-12-07T17:24:40.25Z  INFO ringsync_ops::handover::agent: following group=ap-1 member=ap1-a leader=ap1-b\n";
        // 2026-12-07T17:24:37Z is 1796664277 s after the epoch.
        let e = parse_agent_log(log, 1_796_664_277.0);
        assert_eq!(e.len(), 2, "{e:?}");
        assert!((e[0].t - 0.420364).abs() < 1e-3, "{e:?}");
        assert_eq!(
            (e[0].group.as_str(), e[0].member.as_str(), e[0].leads),
            ("ap-1", "ap1-a", true)
        );
        assert!((e[1].t - 3.25).abs() < 1e-3 && !e[1].leads, "{e:?}");
        assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), Some(0.0));
    }
}
