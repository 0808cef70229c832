//! The Active-Passive agents' own record: each agent says when its member
//! began to lead (`leading`) and when it stopped (`following`), with the
//! time (`ringsync agent`'s stderr). Read into [`ApEvent`]s for the
//! evidence; judged in `ap.rs`.

use std::path::Path;

use serde::Serialize;

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
/// `dir`, and `agent-<member>.run<n>.stderr` of each start after a kill),
/// as one timeline; an agent killed at `t` (`kills`: when, which member)
/// stops its member leading then, as nothing else logs it.
pub fn read_agents(
    dir: &Path,
    members: &[String],
    epoch0: f64,
    kills: &[(f64, String)],
) -> Vec<ApEvent> {
    let mut out: Vec<ApEvent> = members
        .iter()
        .flat_map(|m| {
            std::iter::once(format!("agent-{m}.stderr"))
                .chain((1..).map(move |n| format!("agent-{m}.run{n}.stderr")))
                .take_while(|f| dir.join(f).exists())
                .flat_map(|f| {
                    let text = std::fs::read_to_string(dir.join(f)).unwrap_or_default();
                    parse_agent_log(&text, epoch0)
                })
        })
        .collect();
    for (t, member) in kills {
        let group = out
            .iter()
            .find(|e| &e.member == member)
            .map(|e| e.group.clone());
        if let Some(group) = group {
            out.push(ApEvent {
                t: *t,
                group,
                member: member.clone(),
                leads: false,
            });
        }
    }
    out.sort_by(|a, b| a.t.total_cmp(&b.t));
    out
}

/// `2026-12-07T17:24:37.420364Z` as Unix seconds.
pub(super) fn unix_seconds(ts: &str) -> Option<f64> {
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

    /// A leader's agent killed at 3 s and started again: it stops leading
    /// at the kill, and its next run's log is read too.
    #[test]
    fn a_killed_agent_stops_leading_at_the_kill_and_its_next_run_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let line = |s: &str, what: &str| {
            format!("2026-12-07T17:24:{s}Z  INFO ringsync_ops::handover::agent: {what} group=ap-1 member=ap1-a seq=0\n")
        };
        std::fs::write(dir.path().join("agent-ap1-a.stderr"), line("38", "leading")).unwrap();
        std::fs::write(
            dir.path().join("agent-ap1-a.run1.stderr"),
            line("41", "leading"),
        )
        .unwrap();
        let e = read_agents(
            dir.path(),
            &["ap1-a".into()],
            1_796_664_277.0,
            &[(3.0, "ap1-a".into())],
        );
        let seen: Vec<(f64, bool)> = e.iter().map(|x| (x.t, x.leads)).collect();
        assert_eq!(seen, vec![(1.0, true), (3.0, false), (4.0, true)]);
    }
}
