//! The results: the Markdown table (medians over rounds, the flood/unloaded
//! ratios against issue 12's 2x target) and the CSV of every run; what a
//! run's SIPp logs and gate metrics say is read by `testbed::callbench`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use testbed::callbench::{by_limit, percentile, BenchPhase};
use testbed::stats::median;

use crate::phase::{Phase, Run};

/// Medians of one phase over its runs.
struct Summary {
    runs: usize,
    established: u64,
    flood_established: u64,
    failed_established: u64,
    /// Of them, flood calls.
    flood_failed_established: u64,
    sipp_failed: u64,
    normal_refused: u64,
    flood_refused: u64,
    refusals: BTreeMap<String, u64>,
    cpu: f64,
    core: f64,
    p50_ms: f64,
    p99_ms: f64,
    queue_p99_ms: f64,
    /// Flood calls answered (admitted or refused) a second: the rate at
    /// which the flood reached the gate.
    flood_per_s: f64,
    samples: usize,
    rss_mib: f64,
}

fn summary(runs: &[&Run]) -> Summary {
    let sum = |f: &dyn Fn(&Run) -> u64| runs.iter().map(|r| f(r)).sum::<u64>();
    let med = |f: &dyn Fn(&Run) -> f64| median(runs.iter().map(|r| f(r)).collect());
    let mut refusals = BTreeMap::new();
    for r in runs {
        for (k, v) in &r.refusals {
            *refusals.entry(k.clone()).or_insert(0) += v;
        }
    }
    Summary {
        runs: runs.len(),
        established: sum(&|r| r.established()),
        flood_established: sum(&|r| r.flood.up),
        failed_established: sum(&|r| r.failed_established()),
        flood_failed_established: sum(&|r| r.flood.failed_established()),
        sipp_failed: sum(&|r| r.sipp_failed),
        normal_refused: sum(&|r| r.normal.refused),
        flood_refused: sum(&|r| r.flood.refused),
        refusals,
        cpu: med(&|r| r.cpu_us_per_established()),
        core: med(&|r| r.gate.core_percent()),
        p50_ms: med(&|r| percentile(&r.latency_us, 0.50) / 1000.0),
        p99_ms: med(&|r| percentile(&r.latency_us, 0.99) / 1000.0),
        flood_per_s: med(&|r| r.flood_per_s()),
        queue_p99_ms: med(&|r| r.queue_p99_ms),
        samples: runs.iter().map(|r| r.latency_us.len()).sum(),
        rss_mib: runs.iter().map(|r| r.gate.peak_rss_kb).max().unwrap_or(0) as f64 / 1024.0,
    }
}

/// The table: one row per phase (sums over rounds for counts, medians for
/// CPU and latency), then the ratios against the 2x target.
pub(crate) fn table(runs: &[Run]) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "| phase | runs | established calls (of them flood) | failed established (of them flood) | other failed calls | normal calls refused | flood INVITEs refused 503 | gate's 503s by limit | CPU µs / established call | gate CPU (% of a core) | in-dialog p50 (ms) | in-dialog p99 (ms) | in-dialog samples | gate queue wait p99, in-dialog (ms, at most) | peak RSS (MiB) |");
    let _ = writeln!(
        t,
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut by_phase = BTreeMap::new();
    for phase in Phase::ROUND {
        let rs: Vec<&Run> = runs.iter().filter(|r| r.phase == phase).collect();
        if rs.is_empty() {
            continue;
        }
        let s = summary(&rs);
        let _ = writeln!(
            t,
            "| {} | {} | {} ({}) | {} ({}) | {} | {} | {} | {} | {:.1} | {:.0} | {:.2} | {:.2} | {} | {} | {:.1} |",
            phase.name(),
            s.runs,
            s.established,
            s.flood_established,
            s.failed_established,
            s.flood_failed_established,
            s.sipp_failed.saturating_sub(s.failed_established),
            s.normal_refused,
            s.flood_refused,
            by_limit(&s.refusals),
            s.cpu,
            s.core,
            s.p50_ms,
            s.p99_ms,
            s.samples,
            s.queue_p99_ms,
            s.rss_mib
        );
        by_phase.insert(phase.name(), s);
    }
    if let (Some(u), Some(f)) = (by_phase.get("unloaded"), by_phase.get("flood")) {
        let ratio = |name: &str, under: f64, base: f64| {
            let r = under / base;
            let verdict = if !r.is_finite() {
                "not measurable"
            } else if r <= 2.0 {
                "within 2x"
            } else {
                "over 2x"
            };
            format!("{name} {r:.2}x ({verdict})")
        };
        let _ = writeln!(
            t,
            "\nUnder flood / unloaded (medians; issue 12's target: at most 2x): {}; {}; in-dialog p50 {:.2}x. The flood reached the gate at {:.0} new calls/s (admitted or refused).",
            ratio("CPU per established call", f.cpu, u.cpu),
            ratio("in-dialog p99", f.p99_ms, u.p99_ms),
            f.p50_ms / u.p50_ms,
            f.flood_per_s
        );
    }
    t
}

/// Every run, one line each.
pub(crate) fn csv(runs: &[Run]) -> String {
    let mut c = String::from(
        "round,phase,normal_up,normal_ended,normal_refused,flood_up,flood_ended,flood_refused,\
         sipp_failed,refused_by_limit,cpu_us,wall_us,cpu_us_per_established,in_dialog_samples,\
         in_dialog_p50_us,in_dialog_p99_us,flood_per_s,queue_wait_p99_ms,peak_rss_kb\n",
    );
    for r in runs {
        let _ = writeln!(
            c,
            "{},{},{},{},{},{},{},{},{},{},{},{},{:.1},{},{},{},{:.0},{},{}",
            r.round,
            r.phase.name(),
            r.normal.up,
            r.normal.ended,
            r.normal.refused,
            r.flood.up,
            r.flood.ended,
            r.flood.refused,
            r.sipp_failed,
            by_limit(&r.refusals).replace(" / ", ";"),
            r.gate.cpu_us,
            r.gate.wall_us,
            r.cpu_us_per_established(),
            r.latency_us.len(),
            percentile(&r.latency_us, 0.50),
            percentile(&r.latency_us, 0.99),
            r.flood_per_s(),
            r.queue_p99_ms,
            r.gate.peak_rss_kb
        );
    }
    c
}
