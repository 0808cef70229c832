//! The report of a run: per phase (the timeline cut at every step that is
//! not a load) and per instance, from the samples and the callers' logs;
//! the verdicts ([`super::verdict`]); Markdown and JSON.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

use super::play::{CallEvent, Played};
use super::sample::Sample;
pub use super::sampled::{at, delta};
use super::scenario::{Action, LoadKind, Scenario};
pub use super::totals::Calls;
use super::verdict::{self, Verdict};
use crate::site::Layout;

/// One phase of the run.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    /// What started it (`start` for the first).
    pub label: String,
    /// Seconds after the start.
    pub from: f64,
    /// Seconds after the start.
    pub to: f64,
    /// New work (calls) forwarded to each sg/esg in the phase.
    pub new_work: BTreeMap<String, u64>,
    /// Calls established (200 to the INVITE) in the phase.
    pub established: u64,
    /// Calls that ended normally (200 to the BYE) in the phase.
    pub finished: u64,
    /// Calls established in the phase that did not end normally.
    pub failed: u64,
    /// Calls refused with 503 in the phase, as the callers saw them.
    pub refused: u64,
    /// 503s the gates counted in the phase, by rule.
    pub refusals: BTreeMap<String, u64>,
    /// Share of the new calls media-ctl placed on each mg/bgmg (0..1);
    /// empty when it placed none.
    pub mg_share: BTreeMap<String, f64>,
    /// Mean weight of each mg/bgmg over the phase's samples.
    pub mg_weight: BTreeMap<String, f64>,
}

/// Totals over the run's `register` loads.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Registrations {
    /// Registrations attempted (SIPp `TotalCallCreated`).
    pub attempted: u64,
    /// 200 to the first REGISTER.
    pub registered: u64,
    /// Of those, refreshed and removed (200 to the de-REGISTER).
    pub removed: u64,
    /// Of those, not removed normally (a failed refresh or removal).
    pub failed: u64,
    /// Refused with 503.
    pub refused: u64,
    /// SIPp's failed registrations (including those never answered).
    pub sipp_failed: u64,
}

/// Totals over the run's `subscribe` or `options` loads.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Requests {
    /// Sent (SIPp `TotalCallCreated`).
    pub attempted: u64,
    /// Answered 200 (the first SUBSCRIBE; the OPTIONS).
    pub ok: u64,
    /// Of those, ended normally (a subscription refreshed and removed; an
    /// OPTIONS is done with its 200).
    pub ended: u64,
    /// Answered and not ended normally.
    pub failed: u64,
    /// Refused with 503.
    pub refused: u64,
    /// SIPp's failed ones (including those never answered).
    pub sipp_failed: u64,
}

impl Requests {
    pub(crate) fn line(&self, what: &str) -> String {
        format!(
            "{what}: {} sent, {} answered 200, {} ended normally, {} answered and failed, {} refused (503), {} failed in SIPp's count.\n",
            self.attempted, self.ok, self.ended, self.failed, self.refused, self.sipp_failed
        )
    }
}

/// Totals of the loads of `kind` from their logs and reports.
pub(crate) fn requests(played: &Played, kind: LoadKind) -> Requests {
    let (up_ev, end_ev, refused_ev) = match kind {
        LoadKind::Subscribe => (CallEvent::SubUp, CallEvent::SubEnd, CallEvent::SubRefused),
        _ => (CallEvent::OptOk, CallEvent::OptOk, CallEvent::OptRefused),
    };
    let (mut up, mut end) = (BTreeSet::new(), BTreeSet::new());
    let mut r = Requests::default();
    for l in played.loads.iter().filter(|l| l.kind == kind) {
        for (_, ev, id) in &l.events {
            if *ev == up_ev {
                up.insert(id.clone());
            }
            if *ev == end_ev {
                end.insert(id.clone());
            }
            if *ev == refused_ev {
                r.refused += 1;
            }
        }
        if let Some(s) = &l.report {
            r.attempted += s.created;
            r.sipp_failed += s.failed;
        }
    }
    r.ok = up.len() as u64;
    r.ended = up.intersection(&end).count() as u64;
    r.failed = r.ok - r.ended;
    r
}

/// Registration totals from the `register` loads' logs and reports.
pub(crate) fn registrations(played: &Played) -> Registrations {
    let (mut up, mut end) = (BTreeSet::new(), BTreeSet::new());
    let mut r = Registrations::default();
    for l in played.loads.iter().filter(|l| l.kind == LoadKind::Register) {
        for (_, ev, id) in &l.events {
            match ev {
                CallEvent::RegUp => {
                    up.insert(id.clone());
                }
                CallEvent::RegEnd => {
                    end.insert(id.clone());
                }
                CallEvent::RegRefused => r.refused += 1,
                _ => {}
            }
        }
        if let Some(s) = &l.report {
            r.attempted += s.created;
            r.sipp_failed += s.failed;
        }
    }
    r.registered = up.len() as u64;
    r.removed = up.intersection(&end).count() as u64;
    r.failed = r.registered - r.removed;
    r
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Its description.
    pub description: String,
    /// The site, in words.
    pub site: String,
    /// The site file the run played and where its addresses went.
    pub site_map: super::site_map::SiteMap,
    /// Steps as they happened, with errors.
    pub steps: Vec<super::play::Mark>,
    /// Phases.
    pub phases: Vec<Phase>,
    /// Totals.
    pub calls: Calls,
    /// Registration totals (`register` loads).
    pub registrations: Registrations,
    /// Subscription totals (`subscribe` loads).
    pub subscriptions: Requests,
    /// OPTIONS totals (`options` loads).
    pub options: Requests,
    /// Active-Passive leader changes the groups' services confirmed
    /// (handovers and takeovers home; none on a site without AP groups).
    pub handovers: u64,
    /// Gate stops (`sigterm_gate`, `restart_gate`) as seen from outside.
    pub gate_stops: Vec<super::play::GateStop>,
    /// One verdict per rule the scenario names.
    pub verdicts: Vec<Verdict>,
    /// Chart files written next to the report.
    pub charts: Vec<String>,
    /// Samples (once a second), for other tools.
    pub samples: Vec<Sample>,
}

impl Report {
    /// Builds the report of a run.
    pub fn new(scenario: &Scenario, layout: &Layout, played: &Played) -> Report {
        let phases = phases(played, scenario.end_s());
        let calls = calls(played);
        let verdicts = scenario
            .rules
            .iter()
            .map(|r| verdict::judge(r, layout, played, &calls))
            .collect();
        Report {
            scenario: scenario.name.clone(),
            description: scenario.description.clone(),
            site: super::site_map::words(layout),
            site_map: super::site_map::SiteMap::new(layout),
            steps: played.marks.clone(),
            phases,
            calls,
            registrations: registrations(played),
            subscriptions: requests(played, LoadKind::Subscribe),
            options: requests(played, LoadKind::Options),
            handovers: super::verdict_ap::handovers_done(played),
            gate_stops: played.gate_stops.clone(),
            verdicts,
            charts: Vec::new(),
            samples: played.samples.clone(),
        }
    }

    /// True when every verdict passed and every step ran.
    pub fn passed(&self) -> bool {
        self.verdicts.iter().all(|v| v.pass) && self.steps.iter().all(|s| s.error.is_none())
    }

    /// The report as Markdown; the chart (if any) embedded.
    pub fn markdown(&self) -> String {
        let mut m = String::new();
        let _ = writeln!(m, "# Rehearsal: {}\n", self.scenario);
        if !self.description.is_empty() {
            let _ = writeln!(m, "{}\n", self.description);
        }
        let _ = writeln!(m, "Site: {}.\n", self.site);
        let _ = writeln!(m, "## The site on loopback\n\n{}", self.site_map.markdown());
        let _ = writeln!(m, "## Verdicts\n");
        for v in &self.verdicts {
            let mark = if v.pass { "PASS" } else { "FAIL" };
            let _ = writeln!(m, "- **{mark}** {}: {}", v.rule, v.detail);
        }
        if self.verdicts.is_empty() {
            let _ = writeln!(m, "(the scenario names no rule)");
        }
        let c = &self.calls;
        let _ = writeln!(
            m,
            "\nCalls: {} attempted, {} established, {} finished, {} established and failed, {} refused (503), {} sent to another gate after a 503 or no answer, {} failed in SIPp's count. Active-Passive handovers: {}.\n",
            c.attempted, c.established, c.finished, c.established_failed, c.refused, c.retried, c.sipp_failed, self.handovers
        );
        let md = &c.media;
        if md.offered > 0 {
            let _ = writeln!(
                m,
                "Media (ng to media-ctl, one per call): {} offered, {} answered, {} deleted, {} commands failed.\n",
                md.offered, md.answered, md.deleted, md.failed
            );
        }
        let r = &self.registrations;
        if r.attempted > 0 {
            let _ = writeln!(
                m,
                "Registrations: {} attempted, {} registered, {} refreshed and removed, {} registered and failed, {} refused (503), {} failed in SIPp's count.\n",
                r.attempted, r.registered, r.removed, r.failed, r.refused, r.sipp_failed
            );
        }
        if self.subscriptions.attempted > 0 {
            let _ = writeln!(m, "{}", self.subscriptions.line("Subscriptions"));
        }
        if self.options.attempted > 0 {
            let _ = writeln!(m, "{}", self.options.line("OPTIONS"));
        }
        if !c.failures.is_empty() {
            let why: Vec<String> = c.failures.iter().map(|(k, n)| format!("{k} {n}")).collect();
            let _ = writeln!(m, "SIPp failures by reason: {}.\n", why.join(", "));
        }
        for chart in self.charts.iter().filter(|c| c.ends_with(".svg")) {
            let _ = writeln!(m, "![new calls per instance and mg weights]({chart})\n");
        }
        self.steps_md(&mut m);
        self.phases_md(&mut m);
        m
    }

    fn steps_md(&self, m: &mut String) {
        let _ = writeln!(
            m,
            "## Timeline\n\n| t (s) | step | result |\n|---:|---|---|"
        );
        for s in &self.steps {
            let r = s.error.as_deref().unwrap_or("ok");
            let _ = writeln!(m, "| {:.1} | {} | {r} |", s.t, s.label);
        }
    }

    fn phases_md(&self, m: &mut String) {
        let insts: BTreeSet<&String> = self.phases.iter().flat_map(|p| p.new_work.keys()).collect();
        let mgs: BTreeSet<&String> = self
            .phases
            .iter()
            .flat_map(|p| p.mg_weight.keys())
            .collect();
        let _ = write!(m, "\n## Phases\n\n| phase | s |");
        for i in &insts {
            let _ = write!(m, " new {i} |");
        }
        let _ = writeln!(
            m,
            " established | finished | failed | 503 (callers) | 503 by rule (gates) |"
        );
        let _ = writeln!(
            m,
            "|---|---:|{}---:|---:|---:|---:|---|",
            "---:|".repeat(insts.len())
        );
        for p in &self.phases {
            let _ = write!(m, "| {} | {:.0}–{:.0} |", p.label, p.from, p.to);
            for i in &insts {
                let _ = write!(m, " {} |", p.new_work.get(*i).copied().unwrap_or(0));
            }
            let rules: Vec<String> = p
                .refusals
                .iter()
                .map(|(r, n)| format!("{r}: {n}"))
                .collect();
            let _ = writeln!(
                m,
                " {} | {} | {} | {} | {} |",
                p.established,
                p.finished,
                p.failed,
                p.refused,
                if rules.is_empty() {
                    "—".into()
                } else {
                    rules.join(", ")
                }
            );
        }
        if mgs.is_empty() {
            return;
        }
        let _ = write!(
            m,
            "\n### Media gateways: share of new calls (mean weight)\n\n| phase |"
        );
        for g in &mgs {
            let _ = write!(m, " {g} |");
        }
        let _ = writeln!(m, "\n|---|{}", "---:|".repeat(mgs.len()));
        for p in &self.phases {
            let _ = write!(m, "| {} |", p.label);
            for g in &mgs {
                let share = p
                    .mg_share
                    .get(*g)
                    .map_or("—".into(), |s| format!("{:.0}%", s * 100.0));
                let w = p.mg_weight.get(*g).copied().unwrap_or(0.0);
                let _ = write!(m, " {share} ({w:.2}) |");
            }
            let _ = writeln!(m);
        }
    }
}

fn phases(played: &Played, end: f64) -> Vec<Phase> {
    let mut cuts = vec![(0.0, "start".to_string())];
    for mk in &played.marks {
        if !matches!(mk.action, Action::Load { .. }) {
            cuts.push((mk.t, mk.label.clone()));
        }
    }
    let last = played.samples.last().map_or(end, |s| s.t.max(end));
    let ends: Vec<f64> = cuts.iter().skip(1).map(|c| c.0).chain([last]).collect();
    let outcome = outcomes(played);
    cuts.into_iter()
        .zip(ends)
        .map(|((from, label), to)| phase(played, &outcome, label, from, to))
        .collect()
}

/// Per call: when it came up, whether it ended, when it was refused.
struct Outcome {
    up: BTreeMap<String, f64>,
    ended: BTreeMap<String, f64>,
    refused: Vec<f64>,
    retried: BTreeSet<String>,
}

fn outcomes(played: &Played) -> Outcome {
    let mut o = Outcome {
        up: BTreeMap::new(),
        ended: BTreeMap::new(),
        refused: Vec::new(),
        retried: BTreeSet::new(),
    };
    for l in &played.loads {
        for (t, ev, call) in &l.events {
            match ev {
                CallEvent::Up => {
                    o.up.insert(call.clone(), *t);
                }
                CallEvent::End => {
                    o.ended.insert(call.clone(), *t);
                }
                CallEvent::Refused => o.refused.push(*t),
                CallEvent::Retry => {
                    o.retried.insert(call.clone());
                }
                _ => {}
            }
        }
    }
    o
}

fn phase(played: &Played, o: &Outcome, label: String, from: f64, to: f64) -> Phase {
    let s = &played.samples;
    let (a, b) = (at(s, from), at(s, to));
    let pick = |f: fn(&Sample) -> &BTreeMap<String, u64>| match (a, b) {
        (Some(a), Some(b)) => delta(f(a), f(b)),
        _ => BTreeMap::new(),
    };
    let inside = |t: f64| t >= from && t < to;
    let mg_new = pick(|s| &s.mg_new_calls);
    let total: u64 = mg_new.values().sum();
    let mg_share = if total == 0 {
        BTreeMap::new()
    } else {
        mg_new
            .iter()
            .map(|(k, v)| (k.clone(), *v as f64 / total as f64))
            .collect()
    };
    let in_phase: Vec<&Sample> = s.iter().filter(|x| inside(x.t)).collect();
    let mut mg_weight = BTreeMap::new();
    for x in &in_phase {
        for (k, w) in &x.mg_weight {
            *mg_weight.entry(k.clone()).or_insert(0.0) += w / in_phase.len() as f64;
        }
    }
    Phase {
        label,
        from,
        to,
        new_work: pick(|s| &s.new_work),
        established: o.up.values().filter(|t| inside(**t)).count() as u64,
        finished: o.ended.values().filter(|t| inside(**t)).count() as u64,
        failed: o
            .up
            .iter()
            .filter(|(c, t)| inside(**t) && !o.ended.contains_key(*c))
            .count() as u64,
        refused: o.refused.iter().filter(|t| inside(**t)).count() as u64,
        refusals: pick(|s| &s.refusals),
        mg_share,
        mg_weight,
    }
}

pub(crate) fn calls(played: &Played) -> Calls {
    let o = outcomes(played);
    let mut c = Calls {
        established: o.up.len() as u64,
        finished: o.up.keys().filter(|k| o.ended.contains_key(*k)).count() as u64,
        refused: o.refused.len() as u64,
        retried: o.retried.len() as u64,
        ..Calls::default()
    };
    c.established_failed = c.established - c.finished;
    for l in played.loads.iter().filter(|l| l.is_call()) {
        if let Some(m) = l.media {
            c.media = c.media.plus(m);
        }
        if let Some(r) = &l.report {
            c.attempted += r.created;
            c.sipp_failed += r.failed;
            for (why, n) in &r.failures {
                *c.failures.entry(why.clone()).or_default() += n;
            }
            if r.failed > 0 && c.errors.is_empty() {
                let tail = r.errors.len().saturating_sub(1500);
                c.errors = r.errors[r.errors.ceil_char_boundary(tail)..].to_string();
            }
        }
    }
    c
}
