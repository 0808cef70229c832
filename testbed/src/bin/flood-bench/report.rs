//! Reading a run's SIPp logs and the gate's metrics, and the results: the
//! Markdown table (medians over rounds, the flood/unloaded ratios against
//! issue 12's 2x target) and the CSV of every run.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;

use testbed::stats::{self, median};

use crate::phase::{Phase, Run};

/// Calls of a `uac_call_or_503` caller by outcome, from its `-trace_logs`
/// file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Outcomes {
    /// INVITEs answered 503 with Retry-After.
    pub(crate) refused: u64,
    /// Calls set up (200 to the INVITE): established calls.
    pub(crate) up: u64,
    /// Established calls that also got their BYE answered 200.
    pub(crate) ended: u64,
}

impl Outcomes {
    /// The outcome lines of one or more log files, added up.
    pub(crate) fn read(logs: &[impl AsRef<Path>]) -> Outcomes {
        let mut o = Outcomes::default();
        for log in logs {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            for line in text.lines() {
                if line.starts_with("ev refused ") {
                    o.refused += 1;
                } else if line.starts_with("ev up ") {
                    o.up += 1;
                } else if line.starts_with("ev end ") {
                    o.ended += 1;
                }
            }
        }
        o
    }

    /// Established calls that did not end with a 200 to their BYE: a
    /// re-INVITE or BYE unanswered, or answered with an error.
    pub(crate) fn failed_established(&self) -> u64 {
        self.up.saturating_sub(self.ended)
    }
}

/// The response time in µs of every in-dialog transaction the caller
/// started (the re-INVITE, CSeq 2, and the BYE, CSeq 3), from SIPp's
/// `-trace_shortmsg` log: the first send of the request (a retransmission
/// is part of the wait) to the first 200 to it. A transaction that never
/// got its 200 has no sample (its call is counted as failed).
pub(crate) fn in_dialog_latencies(shortmsg: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(shortmsg).unwrap_or_default();
    // Lines: date, time, epoch seconds with µs, S|R, Call-ID, CSeq, first line.
    let mut sent: HashMap<(&str, &str), u64> = HashMap::new();
    let mut done: HashMap<(&str, &str), u64> = HashMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let [_, _, at, dir, call_id, cseq, first, ..] = f[..] else {
            continue;
        };
        if cseq != "CSeq:2 INVITE" && cseq != "CSeq:3 BYE" {
            continue;
        }
        let Some(us) = epoch_us(at) else { continue };
        let key = (call_id, cseq);
        match dir {
            "S" => {
                sent.entry(key).or_insert(us);
            }
            "R" if first.starts_with("SIP/2.0 200 ") => {
                done.entry(key).or_insert(us);
            }
            _ => {}
        }
    }
    let mut out: Vec<u64> = done
        .iter()
        .filter_map(|(k, &end)| Some(end.saturating_sub(*sent.get(k)?)))
        .collect();
    out.sort_unstable();
    out
}

/// `1796088812.261751` -> µs since the epoch.
fn epoch_us(s: &str) -> Option<u64> {
    let (secs, frac) = s.split_once('.')?;
    if frac.len() != 6 {
        return None;
    }
    Some(secs.parse::<u64>().ok()? * 1_000_000 + frac.parse::<u64>().ok()?)
}

/// The `q`-quantile (`0..=1`) of sorted samples by [`stats::percentile`]
/// (nearest rank), as f64; NaN when there is none.
pub(crate) fn percentile(sorted: &[u64], q: f64) -> f64 {
    stats::percentile(sorted, q).map_or(f64::NAN, |v| v as f64)
}

/// The gate's 503s by `limit` label, from its Prometheus text
/// (`sipgate_overload_refusals_total{action=..,limit="source",rule=..} N`).
pub(crate) fn refusals(metrics: &str) -> BTreeMap<String, u64> {
    let mut by = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("sipgate_overload_refusals_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let limit = labels
            .split(',')
            .find_map(|l| l.strip_prefix("limit=\""))
            .and_then(|l| l.strip_suffix('"'))
            .unwrap_or("?");
        let n = value.trim().parse::<f64>().unwrap_or(0.0) as u64;
        *by.entry(limit.to_string()).or_insert(0) += n;
    }
    by
}

/// The 99th percentile of how long `class` datagrams waited in the gate's
/// UDP queues, ms, from its `sipgate_udp_intake_wait_total{class,upto_ms}`
/// counters: the upper bound of the bucket that holds it (infinite for the
/// last); NaN when none was counted.
pub(crate) fn queue_wait_p99_ms(metrics: &str, class: &str) -> f64 {
    let prefix = format!("sipgate_udp_intake_wait_total{{class=\"{class}\",upto_ms=\"");
    let mut buckets: Vec<(f64, u64)> = metrics
        .lines()
        .filter_map(|l| {
            let (upto, count) = l.strip_prefix(&prefix)?.split_once("\"} ")?;
            let upto = if upto == "+Inf" {
                f64::INFINITY
            } else {
                upto.parse().ok()?
            };
            Some((upto, count.trim().parse::<f64>().ok()? as u64))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: u64 = buckets.iter().map(|b| b.1).sum();
    let mut seen = 0;
    for (upto, n) in buckets {
        seen += n;
        if total > 0 && seen * 100 >= total * 99 {
            return upto;
        }
    }
    f64::NAN
}

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
        core: med(&|r| r.core_percent()),
        p50_ms: med(&|r| percentile(&r.latency_us, 0.50) / 1000.0),
        p99_ms: med(&|r| percentile(&r.latency_us, 0.99) / 1000.0),
        flood_per_s: med(&|r| r.flood_per_s()),
        queue_p99_ms: med(&|r| r.queue_p99_ms),
        samples: runs.iter().map(|r| r.latency_us.len()).sum(),
        rss_mib: runs.iter().map(|r| r.peak_rss_kb).max().unwrap_or(0) as f64 / 1024.0,
    }
}

/// `capacity 28 / source 654`: the limits that refused anything.
fn by_limit(m: &BTreeMap<String, u64>) -> String {
    if m.values().all(|&n| n == 0) {
        return "none".into();
    }
    m.iter()
        .filter(|(_, &n)| n > 0)
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(" / ")
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
    for phase in [Phase::Unloaded, Phase::Flood] {
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
            r.cpu_us,
            r.wall_us,
            r.cpu_us_per_established(),
            r.latency_us.len(),
            percentile(&r.latency_us, 0.50),
            percentile(&r.latency_us, 0.99),
            r.flood_per_s(),
            r.queue_p99_ms,
            r.peak_rss_kb
        );
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_dialog_latency_runs_from_the_first_send_to_the_first_200() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.log");
        let l = |t: &str, d: &str, cseq: &str, first: &str| {
            format!("2026-12-01\t01:33:32.0\t{t}\t{d}\t1-7@x\t{cseq}\t{first}\n")
        };
        let text = [
            l("100.000000", "S", "CSeq:1 INVITE", "INVITE sip:a SIP/2.0"),
            l("100.002000", "R", "CSeq:1 INVITE", "SIP/2.0 200 OK"),
            l("101.000000", "S", "CSeq:2 INVITE", "INVITE sip:a SIP/2.0"),
            l("101.000500", "S", "CSeq:2 INVITE", "INVITE sip:a SIP/2.0"),
            l("101.000600", "R", "CSeq:2 INVITE", "SIP/2.0 100 Trying"),
            l("101.001250", "R", "CSeq:2 INVITE", "SIP/2.0 200 OK"),
            l("101.009000", "R", "CSeq:2 INVITE", "SIP/2.0 200 OK"),
            l("101.100000", "S", "CSeq:3 BYE", "BYE sip:a SIP/2.0"),
            l("101.100300", "R", "CSeq:3 BYE", "SIP/2.0 200 OK"),
        ]
        .concat();
        std::fs::write(&p, text + "garbage line\n").unwrap();
        assert_eq!(in_dialog_latencies(&p), vec![300, 1250]);
    }

    #[test]
    fn the_queue_wait_p99_is_the_bound_of_the_bucket_that_holds_it() {
        let line = |class: &str, upto: &str, n: u32| {
            format!("sipgate_udp_intake_wait_total{{class=\"{class}\",upto_ms=\"{upto}\"}} {n}\n")
        };
        let m = [
            line("in_dialog", "0.25", 10),
            line("in_dialog", "0.1", 980),
            line("in_dialog", "1", 9),
            line("in_dialog", "+Inf", 1),
            line("new_dialog", "+Inf", 500),
        ]
        .concat();
        // 990 of 1000 within 0.25 ms: the 99th falls in that bucket.
        assert_eq!(queue_wait_p99_ms(&m, "in_dialog"), 0.25);
        assert_eq!(queue_wait_p99_ms(&m, "new_dialog"), f64::INFINITY);
        assert!(queue_wait_p99_ms(&m, "response").is_nan());
    }

    #[test]
    fn refusals_are_summed_by_limit() {
        let m = "# TYPE sipgate_overload_refusals_total counter\n\
                 sipgate_overload_refusals_total{action=\"reject\",limit=\"source\",rule=\"R-OV-2\"} 120\n\
                 sipgate_overload_refusals_total{action=\"reject\",limit=\"capacity\",rule=\"R-OV-1\"} 7\n\
                 sipgate_overload_refusals_total{action=\"drop\",limit=\"source\",rule=\"R-OV-2\"} 3\n\
                 sipgate_requests_total{method=\"INVITE\"} 9\n";
        let r = refusals(m);
        assert_eq!(r.get("source"), Some(&123));
        assert_eq!(r.get("capacity"), Some(&7));
        assert_eq!(r.len(), 2);
    }
}
