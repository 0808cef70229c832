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

/// Every gate's log (`gate-<k>.stderr` in `dir`, both runs of an upgraded
/// gate), as one list.
pub fn read_gates(dir: &Path, gates: usize, epoch0: f64, end_s: f64) -> Vec<SawDown> {
    (0..gates)
        .flat_map(|g| {
            let text =
                std::fs::read_to_string(dir.join(format!("gate-{g}.stderr"))).unwrap_or_default();
            parse_gate_log(g, &text, epoch0, end_s)
        })
        .collect()
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
}
