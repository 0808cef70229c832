//! What the call benchmarks (`flood-bench`, `reg-avalanche`) share:
//! the sip-gate they start, the outcomes and in-dialog response times read
//! from their SIPp callers' logs (`uac_call_or_503` with `-trace_logs` and
//! `-trace_shortmsg`), and the figures read from the gate's `/metrics`.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::net::{wait_listening, Transport};
use crate::stats;

/// A sip-gate process on a site file of its own; killed on drop.
#[derive(Debug)]
pub struct GateProcess {
    child: Child,
    _dir: tempfile::TempDir,
}

impl GateProcess {
    /// Starts `bin` on `site` (the whole site file) and waits until it
    /// listens on `listen` (UDP), then `settle` more (its first health
    /// probes: until they answer, its instances are unknown).
    pub fn start(
        bin: &Path,
        site: &str,
        listen: SocketAddr,
        settle: Duration,
    ) -> Result<GateProcess, String> {
        let dir = tempfile::Builder::new()
            .prefix("callbench-gate-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let path: PathBuf = dir.path().join("site.toml");
        std::fs::write(&path, site).map_err(|e| format!("writing {}: {e}", path.display()))?;
        let child = Command::new(bin)
            .arg("--config")
            .arg(&path)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", bin.display()))?;
        let gate = GateProcess { child, _dir: dir };
        if !wait_listening(listen, Transport::Udp, Duration::from_secs(10)) {
            return Err(format!("sip-gate did not listen on {listen}"));
        }
        std::thread::sleep(settle);
        Ok(gate)
    }

    /// The gate's process id (for [`crate::ProcStats`]).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for GateProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Calls of a `uac_call_or_503` caller by outcome, from its `-trace_logs`
/// file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcomes {
    /// INVITEs answered 503 with Retry-After.
    pub refused: u64,
    /// Calls set up (200 to the INVITE): established calls.
    pub up: u64,
    /// Established calls that also got their BYE answered 200.
    pub ended: u64,
}

impl Outcomes {
    /// The outcome lines of one or more log files, added up.
    pub fn read(logs: &[impl AsRef<Path>]) -> Outcomes {
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
    pub fn failed_established(&self) -> u64 {
        self.up.saturating_sub(self.ended)
    }
}

/// The response time in µs of every in-dialog transaction the caller
/// started (the re-INVITE, CSeq 2, and the BYE, CSeq 3), from SIPp's
/// `-trace_shortmsg` log: the first send of the request (a retransmission
/// is part of the wait) to the first 200 to it. A transaction that never
/// got its 200 has no sample (its call is counted as failed).
pub fn in_dialog_latencies(shortmsg: &Path) -> Vec<u64> {
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
pub fn percentile(sorted: &[u64], q: f64) -> f64 {
    stats::percentile(sorted, q).map_or(f64::NAN, |v| v as f64)
}

/// The gate's 503s by `limit` label, from its Prometheus text
/// (`sipgate_overload_refusals_total{action=..,limit="source",rule=..} N`).
pub fn refusals(metrics: &str) -> BTreeMap<String, u64> {
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
pub fn queue_wait_p99_ms(metrics: &str, class: &str) -> f64 {
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
