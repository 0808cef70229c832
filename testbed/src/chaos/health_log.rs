//! The gates' own record of their health probes: each gate logs when an
//! instance stopped answering (`no answer to health probes: down`) and
//! when it answered again (`answers health probes ... health="up"`). Read
//! into intervals for the evidence: a gate that saw every normal instance
//! of a service down sends new work to a draining one on purpose (R-AA-4),
//! and the propagation invariant must tell that from a late drain.

use std::path::Path;

use serde::Serialize;

use super::ap_log::unix_seconds;

/// A time a gate held an instance down, by its own log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SawDown {
    /// The gate (its index in the site).
    pub gate: usize,
    /// The instance.
    pub instance: String,
    /// Seconds after the start the gate logged it down.
    pub from: f64,
    /// When it logged it up again (the run's end if never).
    pub until: f64,
}

/// One gate's log (`<RFC 3339 time>  WARN sip_gate::health: no answer to
/// health probes: down ... instance="sg-a" unanswered=2`, `... INFO
/// sip_gate::health: answers health probes instance="sg-a" health="up"`)
/// as the intervals it held each instance down; one still open at the end
/// lasts until `end_s`.
pub fn parse_gate_log(gate: usize, text: &str, epoch0: f64, end_s: f64) -> Vec<SawDown> {
    let mut open: Vec<(String, f64)> = Vec::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((_, rest)) = line.split_once("sip_gate::health: ") else {
            continue;
        };
        let Some(t) = line
            .split_whitespace()
            .next()
            .and_then(unix_seconds)
            .map(|s| s - epoch0)
        else {
            continue;
        };
        let Some(instance) = rest
            .split_once("instance=\"")
            .and_then(|(_, r)| r.split_once('"'))
            .map(|(i, _)| i.to_owned())
        else {
            continue;
        };
        let was = open.iter().position(|(i, _)| *i == instance);
        if rest.starts_with("no answer to health probes: down") {
            if was.is_none() {
                open.push((instance, t));
            }
        } else if rest.starts_with("answers health probes") {
            if let Some(k) = was {
                let (instance, from) = open.swap_remove(k);
                out.push(SawDown {
                    gate,
                    instance,
                    from,
                    until: t,
                });
            }
        }
    }
    out.extend(open.into_iter().map(|(instance, from)| SawDown {
        gate,
        instance,
        from,
        until: end_s,
    }));
    out
}

/// Every gate's logs in `dir` as one list: `gate-<k>.stderr` (with the
/// new run of an upgraded gate, which writes where the old one did) and
/// `gate-<k>.run<n>.stderr` of each start after a kill. A killed run's
/// downs still open end where the next run's log begins: that run starts
/// knowing nothing down.
pub fn read_gates(dir: &Path, gates: usize, epoch0: f64, end_s: f64) -> Vec<SawDown> {
    let mut out = Vec::new();
    for g in 0..gates {
        let runs = std::iter::once(format!("gate-{g}.stderr"))
            .chain((1..).map(|n| format!("gate-{g}.run{n}.stderr")))
            .take_while(|f| dir.join(f).exists());
        let texts: Vec<String> = runs
            .map(|f| std::fs::read_to_string(dir.join(f)).unwrap_or_default())
            .collect();
        for (k, text) in texts.iter().enumerate() {
            let next = texts
                .get(k + 1)
                .and_then(|t| t.split_whitespace().next())
                .and_then(unix_seconds)
                .map_or(end_s, |s| s - epoch0);
            out.extend(parse_gate_log(g, text, epoch0, next));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gates_log_becomes_the_times_it_held_each_instance_down() {
        let log = "2026-12-07T17:24:37.5Z  INFO sip_gate::health: answers health probes instance=\"sg-a\" health=\"up\"\n\
                   2026-12-07T17:24:38Z  WARN sip_gate::health: no answer to health probes: down (no new dialogs; its in-dialog requests get 408 unless it answers traffic: R-FT-1) instance=\"sg-a\" unanswered=2\n\
                   2026-12-07T17:24:39Z  WARN sip_gate::health: no answer to health probes: down (no new dialogs) instance=\"sg-b\" unanswered=2\n\
                   2026-12-07T17:24:39.5Z  INFO sip_gate::health: answers health probes instance=\"sg-a\" health=\"up\"\n\
                   2026-12-07T17:24:40Z  INFO sip_gate::proxy: something else instance=\"sg-b\"\n";
        // 2026-12-07T17:24:37Z is 1796664277 s after the epoch.
        let d = parse_gate_log(1, log, 1_796_664_277.0, 60.0);
        assert_eq!(
            d,
            vec![
                SawDown {
                    gate: 1,
                    instance: "sg-a".into(),
                    from: 1.0,
                    until: 2.5
                },
                SawDown {
                    gate: 1,
                    instance: "sg-b".into(),
                    from: 2.0,
                    until: 60.0
                },
            ]
        );
    }

    /// A gate killed while it held sg-a down: that down ends where its
    /// next run's log begins; the next run's own down lasts to the end.
    #[test]
    fn a_killed_runs_downs_end_where_the_next_run_begins() {
        let dir = tempfile::tempdir().unwrap();
        let down = |t: &str, i: &str| {
            format!("2026-12-07T17:24:{t}Z  WARN sip_gate::health: no answer to health probes: down instance=\"{i}\" unanswered=2\n")
        };
        std::fs::write(dir.path().join("gate-0.stderr"), down("38", "sg-a")).unwrap();
        std::fs::write(
            dir.path().join("gate-0.run1.stderr"),
            format!(
                "2026-12-07T17:24:41Z  INFO sip_gate::run: serving\n{}",
                down("45", "sg-b")
            ),
        )
        .unwrap();
        let d = read_gates(dir.path(), 2, 1_796_664_277.0, 60.0);
        let spans: Vec<(&str, f64, f64)> = d
            .iter()
            .map(|x| (x.instance.as_str(), x.from, x.until))
            .collect();
        assert_eq!(spans, vec![("sg-a", 1.0, 4.0), ("sg-b", 8.0, 60.0)]);
    }
}
