//! The run's figures: a Markdown table for docs/benchmarks.md and one
//! `key=value` summary line for scripts and the smoke test.

use std::fmt::Write as _;
use std::time::Duration;

use crate::client::{Kind, Tally};

/// One set of subscribers opened.
#[derive(Debug)]
pub(crate) struct SetRow {
    pub(crate) kind: Kind,
    pub(crate) count: u32,
    pub(crate) registered: u64,
    pub(crate) refused: u64,
    pub(crate) no_ok: u64,
    /// From the first connect to the last subscriber registered (or failed).
    pub(crate) took: Duration,
    pub(crate) rss_before_kb: u64,
    pub(crate) rss_after_kb: u64,
}

impl SetRow {
    /// Gate RSS per registered connection of this set, KiB; NaN when none
    /// registered (nothing to divide by).
    pub(crate) fn kib_per_conn(&self) -> f64 {
        if self.registered == 0 {
            return f64::NAN;
        }
        self.rss_after_kb.saturating_sub(self.rss_before_kb) as f64 / self.registered as f64
    }

    fn per_s(&self) -> f64 {
        self.registered as f64 / self.took.as_secs_f64().max(1e-6)
    }

    /// Progress line on stderr.
    pub(crate) fn line(&self) -> String {
        format!(
            "{:?}: {}/{} registered in {:.1} s ({:.0}/s), refused {}, no 200 {}, gate RSS {} -> {} KiB ({:.1} KiB per connection)",
            self.kind,
            self.registered,
            self.count,
            self.took.as_secs_f64(),
            self.per_s(),
            self.refused,
            self.no_ok,
            self.rss_before_kb,
            self.rss_after_kb,
            self.kib_per_conn()
        )
    }
}

/// The gate's CPU over one phase.
#[derive(Debug)]
pub(crate) struct Phase {
    name: String,
    secs: u32,
    /// % of one core.
    cpu: f64,
}

impl Phase {
    pub(crate) fn new(name: &str, secs: u32, cpu: f64) -> Phase {
        Phase {
            name: name.to_owned(),
            secs,
            cpu,
        }
    }
}

/// Everything a run measured.
#[derive(Debug)]
pub(crate) struct Report {
    /// Which gate (its binary's directory).
    label: String,
    command: String,
    pub(crate) baseline_rss_kb: u64,
    pub(crate) rss_end_kb: u64,
    pub(crate) sets: Vec<SetRow>,
    pub(crate) phases: Vec<Phase>,
    /// The gate's own counts once every set was open.
    pub(crate) flows_registered: f64,
    pub(crate) tcp_connections: f64,
    pings: u64,
    pongs: u64,
    lost: u64,
    /// Registration time, connect to 200: p50 and p99, ms.
    register_ms: (f64, f64),
}

impl Report {
    pub(crate) fn new(label: String) -> Report {
        Report {
            label,
            command: std::env::args().collect::<Vec<_>>().join(" "),
            baseline_rss_kb: 0,
            rss_end_kb: 0,
            sets: Vec::new(),
            phases: Vec::new(),
            flows_registered: 0.0,
            tcp_connections: 0.0,
            pings: 0,
            pongs: 0,
            lost: 0,
            register_ms: (f64::NAN, f64::NAN),
        }
    }

    /// Takes the subscribers' counts once they are done.
    pub(crate) fn take_tally(&mut self, t: &Tally) {
        self.pings = Tally::get(&t.pings);
        self.pongs = Tally::get(&t.pongs);
        self.lost = Tally::get(&t.lost);
        let mut us = t.register_us.lock().map(|v| v.clone()).unwrap_or_default();
        us.sort_unstable();
        let ms = |q| testbed::stats::percentile(&us, q).map_or(f64::NAN, |v| v as f64 / 1000.0);
        self.register_ms = (ms(0.5), ms(0.99));
    }

    /// Gate RSS per registered connection at the end, over the start, KiB.
    pub(crate) fn end_kib_per_conn(&self) -> f64 {
        self.rss_end_kb.saturating_sub(self.baseline_rss_kb) as f64
            / self.registered().max(1) as f64
    }

    fn requested(&self) -> u64 {
        self.sets.iter().map(|s| u64::from(s.count)).sum()
    }

    fn registered(&self) -> u64 {
        self.sets.iter().map(|s| s.registered).sum()
    }

    /// Every subscriber registered, the gate held each as a flow, and
    /// every keep-alive got its pong.
    pub(crate) fn all_ok(&self) -> bool {
        self.registered() == self.requested()
            && self.flows_registered as u64 == self.requested()
            && self.pings > 0
            && self.pongs == self.pings
            && self.lost == 0
    }

    /// The tables, in Markdown.
    pub(crate) fn markdown(&self) -> String {
        let mut t = format!(
            "Gate `{}`. Command: `{}`; {} cores; load average at the end: {}.\n\n",
            self.label,
            self.command,
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            loadavg()
        );
        t.push_str("| set | connections | registered | refused / no 200 | time to accept + register | rate reached | gate RSS before → after | RSS per connection |\n");
        t.push_str("|---|---:|---:|---:|---:|---:|---:|---:|\n");
        for s in &self.sets {
            let _ = writeln!(
                t,
                "| {:?} | {} | {} | {} / {} | {:.1} s | {:.0}/s | {:.1} → {:.1} MiB | **{:.1} KiB** |",
                s.kind,
                s.count,
                s.registered,
                s.refused,
                s.no_ok,
                s.took.as_secs_f64(),
                s.per_s(),
                s.rss_before_kb as f64 / 1024.0,
                s.rss_after_kb as f64 / 1024.0,
                s.kib_per_conn()
            );
        }
        let _ = writeln!(
            t,
            "\nRegistration (connect, TLS handshake, REGISTER to its 200): p50 {:.2} ms, p99 {:.2} ms. \
             The gate held {} connections, {} of them as registered flows. Gate RSS: {:.1} MiB at start, \
             {:.1} MiB at the end (after the keep-alives; the registrations' transactions gone): \
             **{:.1} KiB per connection**, TCP and TLS together.\n",
            self.register_ms.0,
            self.register_ms.1,
            self.tcp_connections,
            self.flows_registered,
            self.baseline_rss_kb as f64 / 1024.0,
            self.rss_end_kb as f64 / 1024.0,
            self.end_kib_per_conn()
        );
        t.push_str("| phase | s | gate CPU (user + sys), % of one core |\n|---|---:|---:|\n");
        for p in &self.phases {
            let _ = writeln!(t, "| {} | {} | {:.2}% |", p.name, p.secs, p.cpu);
        }
        let _ = writeln!(
            t,
            "\nKeep-alives sent {}, answered {}; connections lost while held {}.",
            self.pings, self.pongs, self.lost
        );
        t
    }

    /// One line of `key=value` pairs.
    pub(crate) fn summary(&self) -> String {
        let mut s = format!(
            "result: requested={} registered={} flows={} pings={} pongs={} lost={}",
            self.requested(),
            self.registered(),
            self.flows_registered,
            self.pings,
            self.pongs,
            self.lost
        );
        let _ = write!(s, " end_kib_per_conn={:.1}", self.end_kib_per_conn());
        for set in &self.sets {
            let k = format!("{:?}", set.kind).to_lowercase();
            let _ = write!(
                s,
                " {k}_kib_per_conn={:.1} {k}_seconds={:.2}",
                set.kib_per_conn(),
                set.took.as_secs_f64()
            );
        }
        s
    }
}

/// The figures a comparison shows, each a median over the gate's runs:
/// name, value of one run.
type Figure = (&'static str, fn(&Report) -> f64);

const FIGURES: [Figure; 7] = [
    ("TCP: RSS per connection, KiB", |r| {
        set_figure(r, Kind::Tcp, SetRow::kib_per_conn)
    }),
    ("TLS: RSS per connection, KiB", |r| {
        set_figure(r, Kind::Tls, SetRow::kib_per_conn)
    }),
    (
        "all, at the end: RSS per connection, KiB",
        Report::end_kib_per_conn,
    ),
    ("TCP: time to accept + register, s", |r| {
        set_figure(r, Kind::Tcp, |s| s.took.as_secs_f64())
    }),
    ("TLS: time to accept + register, s", |r| {
        set_figure(r, Kind::Tls, |s| s.took.as_secs_f64())
    }),
    ("quiet: gate CPU, % of a core", |r| phase_cpu(r, "quiet")),
    ("keep-alives: gate CPU, % of a core", |r| {
        phase_cpu(r, "keep-alives")
    }),
];

fn set_figure(r: &Report, kind: Kind, f: fn(&SetRow) -> f64) -> f64 {
    r.sets.iter().find(|s| s.kind == kind).map_or(f64::NAN, f)
}

fn phase_cpu(r: &Report, prefix: &str) -> f64 {
    r.phases
        .iter()
        .find(|p| p.name.starts_with(prefix))
        .map_or(f64::NAN, |p| p.cpu)
}

/// The gates side by side: each figure's median over the rounds, and each
/// gate's ratio to the first one.
pub(crate) fn compare(reports: &[Report]) -> String {
    let mut labels: Vec<&str> = Vec::new();
    for r in reports {
        if !labels.contains(&r.label.as_str()) {
            labels.push(&r.label);
        }
    }
    if labels.is_empty() {
        return String::new();
    }
    let rounds = reports.len() / labels.len();
    let mut t = format!(
        "Medians over {rounds} round(s); ratio to `{}`.\n\n| figure |",
        labels[0]
    );
    for l in &labels {
        let _ = write!(t, " `{l}` |");
    }
    t.push_str("\n|---|");
    t.push_str(&"---:|".repeat(labels.len()));
    t.push('\n');
    for (name, f) in FIGURES {
        let medians: Vec<f64> = labels
            .iter()
            .map(|l| {
                let v = reports.iter().filter(|r| r.label == *l).map(f).collect();
                testbed::stats::median(v)
            })
            .collect();
        let _ = write!(t, "| {name} |");
        for (i, m) in medians.iter().enumerate() {
            if i == 0 {
                let _ = write!(t, " {m:.2} |");
            } else {
                let _ = write!(t, " {m:.2} ({:.2}x) |", m / medians[0]);
            }
        }
        t.push('\n');
    }
    t
}

/// The first field of /proc/loadavg (the 1-minute average).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}
