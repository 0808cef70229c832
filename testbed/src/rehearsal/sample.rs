//! Once a second, what the site's own nodes say: every gate's `/metrics`
//! (new work per instance, what of it went to a draining instance on
//! purpose, 503s by rule, drain states) and `/v1/work` (calls up), and
//! media-ctl's `/v1/status` (mg weights and new calls). Counters are kept
//! cumulative across a gate's restart (a counter that goes down started
//! again from zero), so a phase's figure is the difference of two samples,
//! and a rate that difference over the samples' real interval
//! ([`super::rate`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use ringsync::work::{WorkReport, WORK_PATH};

use std::path::PathBuf;

use crate::metrics;
use crate::site::{http, ringsync, BinDir};

pub use super::sampled::Sample;

/// Cumulative counters over restarts of the node that reports them.
#[derive(Debug, Default)]
struct Counters {
    last: BTreeMap<(usize, String), u64>,
    total: BTreeMap<String, u64>,
}

impl Counters {
    fn observe(&mut self, node: usize, key: &str, raw: u64) {
        let last = self.last.insert((node, key.to_owned()), raw).unwrap_or(0);
        let delta = if raw >= last { raw - last } else { raw };
        *self.total.entry(key.to_owned()).or_default() += delta;
    }
}

/// Samples the site; shared with the progress line and the report.
#[derive(Debug)]
pub struct Recorder {
    gates: Vec<SocketAddr>,
    media: SocketAddr,
    ap: Option<(BinDir, PathBuf)>,
    start: Instant,
    new_work: Counters,
    on_purpose: Counters,
    refusals: Counters,
    tally: super::tally::Tally,
    samples: Vec<Sample>,
}

impl Recorder {
    /// A recorder of these nodes, its clock started now; with `ap` (the
    /// binaries and the site file) it also reads the handover status.
    pub fn new(
        gates: Vec<SocketAddr>,
        media: SocketAddr,
        ap: Option<(BinDir, PathBuf)>,
        start: Instant,
    ) -> Recorder {
        Recorder {
            gates,
            media,
            ap,
            start,
            new_work: Counters::default(),
            on_purpose: Counters::default(),
            refusals: Counters::default(),
            tally: super::tally::Tally::default(),
            samples: Vec::new(),
        }
    }

    /// Takes one sample now.
    pub fn sample(&mut self) -> &Sample {
        let metrics: Vec<Option<String>> = self
            .gates
            .iter()
            .map(|admin| match http::get(*admin, "/metrics") {
                Some((200, text)) => Some(text),
                _ => None,
            })
            .collect();
        let mut s = Sample {
            t: self.start.elapsed().as_secs_f64(),
            ..Sample::default()
        };
        self.read_gates(&metrics, &mut s);
        self.read_media(&mut s);
        self.read_handovers(&mut s);
        s.new_work = self.new_work.total.clone();
        for (key, n) in &self.on_purpose.total {
            if let Some((id, why)) = key.split_once(' ') {
                s.on_purpose
                    .entry(id.to_owned())
                    .or_default()
                    .insert(why.to_owned(), *n);
            }
        }
        s.refusals = self.refusals.total.clone();
        s.ap_handovers = self.tally.handovers(&s.ap_leader);
        s.failovers = self.tally.failovers();
        self.samples.push(s);
        self.samples.last().expect("just pushed")
    }

    /// The gates' counters and states, from their metrics (`None`: the gate
    /// did not answer), and the calls up from their work reports.
    fn read_gates(&mut self, metrics: &[Option<String>], s: &mut Sample) {
        for (k, text) in metrics.iter().enumerate() {
            let Some(text) = text else { continue };
            s.gates_up += 1;
            for (name, label, v) in series(text) {
                match name {
                    NEW_WORK => self.new_work.observe(k, &label, v),
                    NEW_WORK_DRAINING => self.on_purpose.observe(k, &label, v),
                    REFUSALS => self.refusals.observe(k, &label, v),
                    _ => {}
                }
            }
            // A gate whose view is not published yet says nothing of it.
            if !states_published(text) {
                continue;
            }
            s.gates_ready += 1;
            if text
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["ringsync_store_stale", "1"])
            {
                s.gates_stale += 1;
            }
            for id in draining(text) {
                *s.gates_draining.entry(id.to_owned()).or_default() += 1;
            }
        }
        for (admin, _) in self.gates.iter().zip(metrics).filter(|x| x.1.is_some()) {
            if let Some(w) = http::get_json::<WorkReport>(*admin, WORK_PATH) {
                s.calls_up += w.instances.values().map(|i| i.counts.dialogs).sum::<u64>();
            }
        }
    }

    /// The mg assignment, weights and calls from media-ctl's status.
    fn read_media(&self, s: &mut Sample) {
        if let Some(st) = http::get_json::<media_ctl::Status>(self.media, "/v1/status") {
            s.mg_drain_zone = st.drain_zone;
            for i in st.instances {
                s.mg_assign
                    .insert(i.id.clone(), i.assign.as_str().to_owned());
                s.mg_calls.insert(i.id.clone(), i.calls);
                if let Some(stop) = i.stoppable {
                    s.bgmg_stoppable.insert(i.id.clone(), stop);
                }
                s.mg_weight.insert(i.id.clone(), i.weight);
                s.mg_new_calls.insert(i.id, i.new_calls);
            }
        }
    }

    /// The Active-Passive leaders and blocked groups from `ringsync handover status`.
    fn read_handovers(&self, s: &mut Sample) {
        if let Some((bins, site)) = &self.ap {
            if let Ok(h) = ringsync(bins, site, &["handover", "status"]) {
                s.ap_last_move_ms = h["planner"]["last_move_ms"].as_u64();
                for g in h["groups"].as_array().into_iter().flatten() {
                    let Some(name) = g["group"].as_str() else {
                        continue;
                    };
                    if let Some(leader) = g["confirmed"].as_str() {
                        s.ap_leader.insert(name.to_owned(), leader.to_owned());
                    }
                    if g["state"] == "blocked" {
                        let why = g["blocked"].as_str().unwrap_or("blocked");
                        s.ap_blocked.insert(name.to_owned(), why.to_owned());
                    }
                }
            }
        }
    }

    /// Counts the gate failovers a caller writes into its log from now on.
    pub fn follow_caller(&mut self, log: PathBuf) {
        self.tally.follow(log);
    }

    /// Every sample so far.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }
}

const NEW_WORK: &str = "sipgate_new_work_total";
const NEW_WORK_DRAINING: &str = "sipgate_new_work_draining_total";
const REFUSALS: &str = "sipgate_drain_refusals_total";

/// `(metric, label values joined by a space, value)` of the counters the
/// rehearsal reads: `sipgate_new_work_total{instance="sg-a"} 12`,
/// `sipgate_new_work_draining_total{instance="esg-a",reason="exception"} 3`.
fn series(text: &str) -> impl Iterator<Item = (&'static str, String, u64)> + '_ {
    metrics::series(text).filter_map(|(series, v)| {
        let (name, labels) = series.split_once('{')?;
        let name = [NEW_WORK, NEW_WORK_DRAINING, REFUSALS]
            .into_iter()
            .find(|n| *n == name)?;
        let label = labels
            .split('"')
            .skip(1)
            .step_by(2)
            .collect::<Vec<_>>()
            .join(" ");
        Some((name, label, v as u64))
    })
}

/// Whether a gate has published its instance states: every instance in
/// `sipgate_instance_state` has one state at 1 (the gauges exist, all 0,
/// from the gate's start until its first publication).
fn states_published(text: &str) -> bool {
    let mut seen: BTreeMap<&str, bool> = BTreeMap::new();
    for (series, value) in instance_states(text) {
        let Some(id) = metrics::label(series, "instance") else {
            continue;
        };
        *seen.entry(id).or_default() |= value == 1.0;
    }
    !seen.is_empty() && seen.values().all(|on| *on)
}

/// The instances a gate's `/metrics` shows in a drain state (draining,
/// drained, draining while down).
fn draining(text: &str) -> impl Iterator<Item = &str> {
    instance_states(text).filter_map(|(series, value)| {
        let drain = metrics::label(series, "state")?.starts_with("drain");
        (value == 1.0 && drain).then(|| metrics::label(series, "instance"))?
    })
}

/// The `sipgate_instance_state` series of a gate's `/metrics`.
fn instance_states(text: &str) -> impl Iterator<Item = (&str, f64)> {
    metrics::series(text).filter(|(s, _)| metrics::name(s) == "sipgate_instance_state")
}

/// The progress line of the newest of `samples`: time, calls up, new calls
/// per second per instance (over the real interval since the sample
/// [`super::rate::base`] picks), 503s by rule, gate failovers and
/// Active-Passive handovers so far, mg weights.
pub fn progress_line(samples: &[Sample]) -> String {
    let Some(i) = samples.len().checked_sub(1) else {
        return String::new();
    };
    let s = &samples[i];
    let prev = super::rate::base(samples, i);
    let mut line = format!("t={:>4.0}s up {:>4}", s.t, s.calls_up);
    line.push_str(" | new/s");
    for (id, n) in &s.new_work {
        let rate = match prev {
            Some(p) => {
                let before = p.new_work.get(id).copied().unwrap_or(0);
                super::rate::per_second(before, *n, s.t - p.t)
            }
            // The first sample: its count over the time since the start.
            None => super::rate::per_second(0, *n, s.t),
        };
        line.push_str(&format!(" {id} {rate:.0}"));
    }
    if !s.refusals.is_empty() {
        line.push_str(" | 503");
        for (rule, n) in &s.refusals {
            line.push_str(&format!(" {rule}:{n}"));
        }
    }
    if s.failovers > 0 {
        line.push_str(&format!(" | failover {}", s.failovers));
    }
    if !s.ap_leader.is_empty() || s.ap_handovers > 0 {
        line.push_str(&format!(" | AP handovers {}", s.ap_handovers));
    }
    if !s.mg_weight.is_empty() {
        line.push_str(" | w");
        for (id, w) in &s.mg_weight {
            line.push_str(&format!(" {id} {w:.2}"));
        }
    }
    if s.gates_up == 0 {
        line.push_str(" | no gate answers");
    }
    line
}

/// A thread sampling once a second until `stop`, printing the progress
/// line unless `quiet`.
pub fn spawn(
    rec: Arc<Mutex<Recorder>>,
    stop: Arc<AtomicBool>,
    quiet: bool,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let mut next = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let line = {
                let mut r = rec.lock().unwrap_or_else(|e| e.into_inner());
                r.sample();
                progress_line(&r.samples)
            };
            if !quiet {
                // On a terminal the line is rewritten in place; in a log,
                // one line a second.
                if tty {
                    eprint!("\r\x1b[2K{line}");
                } else {
                    eprintln!("{line}");
                }
            }
            next += Duration::from_secs(1);
            // After a stall, the next sample a second from now, not a burst
            // to catch up: a sample a few ms after another measures nothing.
            let now = Instant::now();
            if next < now {
                next = now + Duration::from_secs(1);
            }
            while Instant::now() < next && !stop.load(Ordering::Relaxed) {
                thread::sleep(Duration::from_millis(50));
            }
        }
        if !quiet && tty {
            eprintln!();
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_survive_a_restart_of_the_node() {
        let mut c = Counters::default();
        c.observe(0, "sg-a", 10);
        c.observe(0, "sg-a", 15);
        c.observe(0, "sg-a", 3); // restarted: 3 new since
        c.observe(1, "sg-a", 4);
        assert_eq!(c.total["sg-a"], 15 + 3 + 4);
    }

    #[test]
    fn reads_the_counters_of_a_gate() {
        let text = "# TYPE x counter\nsipgate_new_work_total{instance=\"sg-a\"} 12\n\
                    sipgate_drain_refusals_total{rule=\"R-GW-1\"} 3\nsipgate_phase{phase=\"serving\"} 1\n\
                    sipgate_new_work_draining_total{instance=\"esg-a\",reason=\"exception\"} 2\n";
        let got: Vec<_> = series(text).collect();
        assert_eq!(
            got,
            [
                ("sipgate_new_work_total", "sg-a".to_string(), 12),
                ("sipgate_drain_refusals_total", "R-GW-1".to_string(), 3),
                (
                    "sipgate_new_work_draining_total",
                    "esg-a exception".to_string(),
                    2
                )
            ]
        );
    }

    #[test]
    fn reads_which_instances_a_gate_drains() {
        let text = "sipgate_instance_state{instance=\"sg-a\",state=\"up\"} 0\n\
                    sipgate_instance_state{instance=\"sg-a\",state=\"draining\"} 1\n\
                    sipgate_instance_state{instance=\"sg-b\",state=\"up\"} 1\n\
                    sipgate_instance_state{instance=\"sg-b\",state=\"drained\"} 0\n";
        assert_eq!(draining(text).collect::<Vec<_>>(), ["sg-a"]);
        assert!(states_published(text));
    }

    /// R-MN-2: a gate that has just started has its state gauges, all 0,
    /// before its first publication: it does not count as ready.
    #[test]
    fn a_gate_whose_states_are_not_published_is_not_ready() {
        let fresh = "sipgate_instance_state{instance=\"sg-a\",state=\"up\"} 0\n\
                     sipgate_instance_state{instance=\"sg-a\",state=\"draining\"} 0\n\
                     sipgate_instance_state{instance=\"sg-b\",state=\"up\"} 1\n";
        assert!(!states_published(fresh));
        assert!(!states_published("sipgate_phase{phase=\"serving\"} 1\n"));
    }
    #[test]
    fn the_progress_line_shows_rates_refusals_and_weights() {
        let mut a = Sample::default();
        a.new_work.insert("sg-a".into(), 10);
        let mut b = a.clone();
        b.t = 2.0;
        b.calls_up = 7;
        b.gates_up = 1;
        b.new_work.insert("sg-a".into(), 18);
        b.refusals.insert("R-GW-1".into(), 2);
        b.mg_weight.insert("mg-a".into(), 0.5);
        let mut s = vec![a.clone(), b.clone()];
        // 8 new calls in 2 s: 4 a second.
        assert_eq!(
            progress_line(&s),
            "t=   2s up    7 | new/s sg-a 4 | 503 R-GW-1:2 | w mg-a 0.50"
        );
        b.failovers = 5;
        b.ap_leader.insert("billing".into(), "bill-2".into());
        b.ap_handovers = 1;
        s[1] = b.clone();
        assert_eq!(
            progress_line(&s),
            "t=   2s up    7 | new/s sg-a 4 | 503 R-GW-1:2 | failover 5 | AP handovers 1 | w mg-a 0.50"
        );
        // A step's sample 20 ms later: the line still says 4 a second,
        // not 0 (its interval starts from the sample at 0 s).
        let mut c = b.clone();
        c.t = 2.02;
        s.push(c);
        assert!(
            progress_line(&s).contains("new/s sg-a 4 |"),
            "{}",
            progress_line(&s)
        );
    }
}
