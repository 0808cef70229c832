//! The results: two Markdown tables (the calls, the REGISTERs; sums over
//! rounds for counts, medians for rates, CPU and latency), the in-dialog
//! p99 ratio avalanche/unloaded against issue 29's 2x, and the CSV of
//! every run.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use testbed::callbench::{by_limit, percentile, BenchPhase};
use testbed::stats::median;

use crate::phase::{Phase, Run};

/// A queue wait p99 for the table: its last bucket has no upper bound
/// (over 250 ms), which a median of finite values would leave out.
fn wait_ms(v: f64) -> String {
    if v.is_nan() {
        "none".into()
    } else if v > 250.0 {
        "> 250".into()
    } else {
        format!("{v}")
    }
}

/// A wait's infinite bound as the largest finite value, so the median
/// counts it.
fn finite(v: f64) -> f64 {
    if v.is_infinite() {
        f64::MAX
    } else {
        v
    }
}

fn p_ms(r: &Run, q: f64) -> f64 {
    percentile(&r.latency_us, q) / 1000.0
}

/// The gate's CPU per REGISTER handled net of the calls' share: the
/// phase's CPU less the median CPU of the unloaded phases (the same call
/// load alone), per REGISTER; NaN without both.
fn net_cpu_us_per_register(r: &Run, unloaded_cpu_us: f64) -> f64 {
    match r.registers_handled() {
        0 => f64::NAN,
        n => (r.gate.cpu_us as f64 - unloaded_cpu_us) / n as f64,
    }
}

/// Both tables and the verdict line.
pub(crate) fn table(runs: &[Run], subscribers: u32) -> String {
    let of = |p: Phase| runs.iter().filter(move |r| r.phase == p);
    let med = |p: Phase, f: &dyn Fn(&Run) -> f64| median(of(p).map(f).collect());
    let sum = |p: Phase, f: &dyn Fn(&Run) -> u64| of(p).map(f).sum::<u64>();
    let unloaded_cpu = med(Phase::Unloaded, &|r| r.gate.cpu_us as f64);
    let mut t = String::new();
    let _ = writeln!(t, "| phase | runs | established calls | failed established | other failed calls | calls refused | in-dialog p50 (ms) | in-dialog p99 (ms) | in-dialog samples | gate queue wait p99, in-dialog (ms, at most) | gate CPU (% of a core) | gate peak RSS (MiB) |");
    let _ = writeln!(
        t,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for p in Phase::ROUND {
        let n = of(p).count();
        if n == 0 {
            continue;
        }
        let calls_failed = sum(p, &|r| r.calls.failed_established());
        let _ = writeln!(
            t,
            "| {} | {n} | {} | {calls_failed} | {} | {} | {:.2} | {:.2} | {} | {} | {:.0} | {:.1} |",
            p.name(),
            sum(p, &|r| r.calls.up),
            sum(p, &|r| r.sipp_failed).saturating_sub(calls_failed),
            sum(p, &|r| r.calls.refused),
            med(p, &|r| p_ms(r, 0.50)),
            med(p, &|r| p_ms(r, 0.99)),
            sum(p, &|r| r.latency_us.len() as u64),
            wait_ms(med(p, &|r| finite(r.queue_p99_ms))),
            med(p, &|r| r.gate.core_percent()),
            of(p).map(|r| r.gate.peak_rss_kb).max().unwrap_or(0) as f64 / 1024.0,
        );
    }
    let aval: Vec<&Run> = of(Phase::Avalanche).collect();
    if !aval.is_empty() {
        registers_table(&mut t, &aval, subscribers, unloaded_cpu);
    }
    let (u, l) = (
        med(Phase::Unloaded, &|r| p_ms(r, 0.99)),
        med(Phase::Avalanche, &|r| p_ms(r, 0.99)),
    );
    if !aval.is_empty() && of(Phase::Unloaded).count() > 0 {
        let ratio = l / u;
        let verdict = if !ratio.is_finite() {
            "not measurable"
        } else if ratio <= 2.0 {
            "within 2x"
        } else {
            "over 2x"
        };
        let _ = writeln!(
            t,
            "\nIn-dialog p99 avalanche / unloaded (medians; issue 29's target: at most 2x): {ratio:.2}x ({verdict}); p50 {:.2}x.",
            med(Phase::Avalanche, &|r| p_ms(r, 0.50)) / med(Phase::Unloaded, &|r| p_ms(r, 0.50))
        );
    }
    t
}

/// The REGISTER table of the avalanche runs `aval`.
fn registers_table(t: &mut String, aval: &[&Run], subscribers: u32, unloaded_cpu: f64) {
    let sum = |f: &dyn Fn(&Run) -> u64| aval.iter().map(|r| f(r)).sum::<u64>();
    let med = |f: &dyn Fn(&Run) -> f64| median(aval.iter().map(|r| f(r)).collect());
    let mut limits = BTreeMap::new();
    for r in aval {
        for (k, v) in &r.refusals {
            *limits.entry(k.clone()).or_insert(0) += v;
        }
    }
    let _ = writeln!(t, "\n| REGISTERs (avalanche phase) | runs | transactions sent | 200 | 503 with Retry-After | other answer | no answer (lost) | unaccounted | retransmissions | subscribers refused after their last retry | reached the registrars | gate's 503s by limit | first REGISTERs/s reached | gate queue wait p99, REGISTER (ms, at most) | gate CPU µs / REGISTER (total) | gate CPU µs / REGISTER (net of calls) |");
    let _ = writeln!(
        t,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"
    );
    let _ = writeln!(
        t,
        "| {} subscribers each run | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {} | {:.1} | {:.1} |",
        subscribers,
        aval.len(),
        sum(&|r| r.regs.sent),
        sum(&|r| r.regs.ok),
        sum(&|r| r.regs.refused),
        sum(&|r| r.regs.other),
        sum(&|r| r.regs.lost),
        sum(&|r| r.regs.sent.saturating_sub(r.regs.accounted())),
        sum(&|r| r.regs.retransmitted),
        sum(&|r| r.regs.gave_up),
        sum(&|r| r.reached),
        by_limit(&limits),
        med(&|r| r.regs.rate(subscribers.into())),
        wait_ms(med(&|r| finite(r.register_queue_p99_ms))),
        med(&|r| r.cpu_us_per_register()),
        med(&|r| net_cpu_us_per_register(r, unloaded_cpu)),
    );
}

/// Every run, one line each.
pub(crate) fn csv(runs: &[Run]) -> String {
    let mut c = String::from(
        "round,phase,calls_up,calls_ended,calls_refused,sipp_failed,reg_sent,reg_ok,reg_503,\
         reg_other,reg_lost,reg_retransmitted,reg_gave_up,reg_reached,reg_window_us,\
         refused_by_limit,cpu_us,wall_us,in_dialog_samples,in_dialog_p50_us,in_dialog_p99_us,\
         queue_wait_p99_ms,register_queue_wait_p99_ms,peak_rss_kb\n",
    );
    for r in runs {
        let g = &r.regs;
        let _ = writeln!(
            c,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.round,
            r.phase.name(),
            r.calls.up,
            r.calls.ended,
            r.calls.refused,
            r.sipp_failed,
            g.sent,
            g.ok,
            g.refused,
            g.other,
            g.lost,
            g.retransmitted,
            g.gave_up,
            r.reached,
            g.window_us,
            by_limit(&r.refusals).replace(" / ", ";"),
            r.gate.cpu_us,
            r.gate.wall_us,
            r.latency_us.len(),
            percentile(&r.latency_us, 0.50),
            percentile(&r.latency_us, 0.99),
            r.queue_p99_ms,
            r.register_queue_p99_ms,
            r.gate.peak_rss_kb
        );
    }
    c
}
