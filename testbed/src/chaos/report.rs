//! The report of a chaos run: the seed and the command that replays it,
//! the fault timeline as planned and as injected, the invariants with
//! their first counter-examples, and the load's totals; Markdown and JSON.

use std::fmt::Write as _;

use serde::Serialize;

use super::evidence::Invariant;
use super::operators::OpRecord;
use super::plan::{Done, Planned};
use crate::rehearsal::report::{Registrations, Requests};
use crate::rehearsal::totals::Calls;

/// A chaos run's report.
#[derive(Debug, Clone, Serialize)]
pub struct ChaosReport {
    /// The seed: the same seed replays the same fault timeline.
    pub seed: u64,
    /// Seconds the run lasted (faults and load).
    pub duration_s: f64,
    /// The command that replays it.
    pub replay: String,
    /// The site, in words.
    pub site: String,
    /// The faults as drawn from the seed.
    pub timeline: Vec<Planned>,
    /// The faults as injected, with when each one's effect was over.
    pub faults: Vec<Done>,
    /// One verdict per invariant.
    pub invariants: Vec<Invariant>,
    /// Calls as the callers saw them.
    pub calls: Calls,
    /// Registrations.
    pub registrations: Registrations,
    /// Subscriptions.
    pub subscriptions: Requests,
    /// Calls, registrations and subscriptions the instances' own logs hold.
    pub held: usize,
    /// `ringsync status` samples read, and how many did not answer.
    pub status_samples: (usize, usize),
    /// Datagrams the delaying relays in front of the gates carried between
    /// the callers and the gates, both ways.
    pub relayed: u64,
    /// Every change the operators asked for.
    pub operator_changes: Vec<OpRecord>,
    /// The site's own nodes once a second (the rehearsal's samples).
    pub samples: Vec<crate::rehearsal::sampled::Sample>,
    /// Per instance, each state `ringsync status` gave it when it changed
    /// (seconds after the start, at the read's answer).
    pub status_changes: std::collections::BTreeMap<String, Vec<(f64, String)>>,
    /// Every `ringsync wait drained` run, with its exit code.
    pub waits: Vec<super::waits::WaitReturn>,
    /// The Active-Passive agents' leading and following, from their logs.
    pub ap: Vec<super::ap_log::ApEvent>,
}

impl ChaosReport {
    /// Every invariant held and every fault was injected.
    pub fn passed(&self) -> bool {
        self.invariants.iter().all(|v| v.pass) && self.faults.iter().all(|f| f.error.is_none())
    }

    /// The report as Markdown.
    pub fn markdown(&self) -> String {
        let mut m = String::new();
        let _ = writeln!(
            m,
            "# Chaos: seed {}, {:.0} s\n\nReplay: `{}`\n\nSite: {}.\n\n## Invariants\n",
            self.seed, self.duration_s, self.replay, self.site
        );
        for v in &self.invariants {
            let mark = if v.pass { "PASS" } else { "FAIL" };
            let _ = writeln!(m, "- **{mark}** {}: {}", v.name, v.detail);
            if let Some(c) = &v.counterexample {
                let _ = writeln!(m, "  - first counter-example: {c}");
            }
        }
        let c = &self.calls;
        let _ = writeln!(
            m,
            "\nCalls: {} attempted, {} established, {} finished, {} established and failed, {} refused (503), {} sent to another gate after a 503 or no answer, {} failed in SIPp's count.\n",
            c.attempted, c.established, c.finished, c.established_failed, c.refused, c.retried, c.sipp_failed
        );
        let r = &self.registrations;
        let _ = writeln!(
            m,
            "Registrations: {} attempted, {} registered, {} removed, {} registered and failed.\n",
            r.attempted, r.registered, r.removed, r.failed
        );
        let _ = writeln!(m, "{}", self.subscriptions.line("Subscriptions"));
        let made = self
            .operator_changes
            .iter()
            .filter(|o| o.made().is_some())
            .count();
        let _ = writeln!(
            m,
            "The instances' own logs hold {} calls, registrations and subscriptions. `ringsync status` read {} times ({} did not answer). `ringsync wait drained` run {} times ({}). Operators asked {} changes, {made} made. The relays in front of the gates carried {} datagrams.\n",
            self.held,
            self.status_samples.0,
            self.status_samples.1,
            self.waits.len(),
            wait_codes(&self.waits),
            self.operator_changes.len(),
            self.relayed
        );
        let _ = writeln!(
            m,
            "## Faults\n\n| t (s) | over at (s) | fault | result |\n|---:|---:|---|---|"
        );
        for f in &self.faults {
            let _ = writeln!(
                m,
                "| {:.1} | {:.1} | {} | {} |",
                f.t,
                f.until,
                f.fault.label(),
                f.error.as_deref().or(f.skipped.as_deref()).unwrap_or("ok")
            );
        }
        m
    }
}

/// How the waits ended, in words: `3 drained, 2 not draining, ...`.
fn wait_codes(w: &[super::waits::WaitReturn]) -> String {
    let mut n = std::collections::BTreeMap::<&str, usize>::new();
    for x in w {
        let word = match x.code {
            Some(0) => "drained",
            Some(3) => "unknown at the timeout",
            Some(4) => "work left at the timeout",
            Some(5) => "not draining",
            Some(_) => "failed",
            None => "stopped at the end",
        };
        *n.entry(word).or_default() += 1;
    }
    let parts: Vec<String> = n.iter().map(|(w, k)| format!("{k} {w}")).collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// Per instance, the states the status reads gave it, each when it changed.
pub fn status_changes(
    samples: &[super::watch::StatusSample],
) -> std::collections::BTreeMap<String, Vec<(f64, String)>> {
    let mut out: std::collections::BTreeMap<String, Vec<(f64, String)>> = Default::default();
    for s in samples {
        for (i, st) in &s.states {
            let v = out.entry(i.clone()).or_default();
            if v.last().is_none_or(|(_, last)| last != st) {
                v.push((s.t1, st.clone()));
            }
        }
    }
    out
}
