//! What the call benchmarks (`flood-bench`, `reg-avalanche`) share: their
//! loopback network and two phases a round, run interleaved
//! ([`BenchPhase`], [`run_rounds`]); the sip-gate they start and what it
//! spent over a phase ([`GateProcess`], [`GateMeter`]); their SIPp callers
//! ([`caller`]), the outcomes and in-dialog response times read from the
//! callers' logs (`uac_call_or_503` with `-trace_logs` and
//! `-trace_shortmsg`); and the figures read from the gate's `/metrics`.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::bins::Node;
use crate::net::{wait_listening, Transport};
use crate::{stats, ProcStats, Scenario, Sipp};

/// A call benchmark's own loopback network, `127.N.0.0/24`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BenchNet(pub u8);

impl BenchNet {
    /// `127.N.0.host`.
    pub fn ip(self, host: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, self.0, 0, host))
    }
}

/// One of the two phases of a call benchmark's round: the call load alone,
/// or the call load beside what the benchmark measures.
pub trait BenchPhase: Copy + PartialEq {
    /// The round's phases, in the order of the odd rounds (the even ones
    /// run them in reverse).
    const ROUND: [Self; 2];

    /// Its name in the progress lines, the tables, the CSV and the saved
    /// metrics' file names.
    fn name(self) -> &'static str;

    /// The SIP address of the phase's gate in `net`: `.4` for the round's
    /// first phase, `.5` for the second. Each phase's gate listens on its
    /// own address, so a straggler of one run never reaches the next.
    fn gate_addr(self, net: BenchNet) -> SocketAddr {
        let host = if self == Self::ROUND[0] { 4 } else { 5 };
        SocketAddr::new(net.ip(host), 5060)
    }
}

/// Both phases in every one of `rounds` rounds, interleaved (the first
/// phase alternates, so machine noise hits them alike), each run by
/// `measure(phase, round)`, with progress on stderr: `round R/N, PHASE S s
/// ... ` then `line(run)`. A run that cannot finish is reported and left
/// out (of the medians).
pub fn run_rounds<P: BenchPhase, R>(
    rounds: u32,
    seconds: u32,
    mut measure: impl FnMut(P, u32) -> Result<R, String>,
    line: impl Fn(&R) -> String,
) -> Vec<R> {
    let width = P::ROUND.iter().map(|p| p.name().len()).max().unwrap_or(0);
    let mut runs = Vec::new();
    for round in 1..=rounds {
        let mut phases = P::ROUND;
        if round % 2 == 0 {
            phases.reverse();
        }
        for phase in phases {
            eprint!(
                "round {round}/{rounds}, {:<width$} {seconds} s ... ",
                phase.name()
            );
            match measure(phase, round) {
                Ok(r) => {
                    eprintln!("{}", line(&r));
                    runs.push(r);
                }
                Err(e) => eprintln!("error: {e} (run left out)"),
            }
        }
    }
    runs
}

/// The sip-gate binary a benchmark runs: `given` (its `--gate`), else
/// `sip-gate` next to the benchmark's own binary.
pub fn gate_binary(given: Option<&Path>) -> PathBuf {
    given.map(Path::to_path_buf).unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("sip-gate")))
            .unwrap_or_else(|| PathBuf::from("sip-gate"))
    })
}

/// The first words of a benchmark's results: `Command: `ARGS` (S s, N
/// cores).`, the command line it was started with, how long it has run
/// since `started` and the cores the machine has.
pub fn command_line(started: Instant) -> String {
    let cmd = std::env::args().collect::<Vec<_>>().join(" ");
    format!(
        "Command: `{cmd}` ({:.0} s, {} cores).",
        started.elapsed().as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    )
}

/// A benchmark's results: `table` on stdout and in `out/results.md`, the
/// CSV of every run in `out/runs.csv`.
pub fn write_results(out: &Path, table: &str, csv: &str) -> Result<(), String> {
    println!("{table}");
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    std::fs::write(out.join("results.md"), table).map_err(|e| e.to_string())?;
    std::fs::write(out.join("runs.csv"), csv).map_err(|e| e.to_string())
}

/// The head of a benchmark gate's site file: `[site]` named `name` (its
/// secret derived from the name), the embedded store in the run's
/// directory, and the admin endpoint on `admin`; the sections a benchmark
/// adds (overload, instances, listeners) follow it.
pub fn site_head(name: &str, admin: SocketAddr) -> String {
    format!(
        "[site]\nname = \"{name}\"\nsecret = \"{name}-secret-0123456789\"\n\n\
         [store]\nkind = \"embedded\"\npath = \"bench.profiles.json\"\n\n\
         [admin]\ngate_bind = \"{admin}\"\n\n"
    )
}

/// The `i`-th of `n` callers' share of `total` calls a second: the
/// remainder goes one each to the first callers.
pub fn share(total: u32, n: u32, i: u32) -> u32 {
    total / n + u32::from(i < total % n)
}

/// One caller: SIPp `uac_call_or_503` from `from` to `to`, `calls` calls
/// at `rate` a second, ended after `seconds` + 40 s at the latest, its
/// outcomes logged to `log` (`-trace_logs`, for [`Outcomes::read`]).
pub fn caller(
    from: IpAddr,
    to: SocketAddr,
    calls: u64,
    rate: u32,
    seconds: u32,
    log: &Path,
) -> Sipp {
    Sipp::new(Scenario::repo("uac_call_or_503"))
        .local_ip(from)
        .remote(to)
        .calls(calls)
        .rate(rate)
        .timeout(Duration::from_secs(u64::from(seconds) + 40))
        .arg("-trace_logs")
        .arg("-log_file")
        .arg(log)
}

/// `sipp` with its messages' times logged to `msg` (`-trace_shortmsg`, for
/// [`in_dialog_latencies`]).
pub fn timed(sipp: Sipp, msg: &Path) -> Sipp {
    sipp.arg("-trace_shortmsg")
        .arg("-shortmessage_file")
        .arg(msg)
}

/// A sip-gate process ([`Node`]) on a site file of its own, its log beside
/// it; killed on drop.
#[derive(Debug)]
pub struct GateProcess {
    gate: Node,
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
        let gate = Node::gate(&path)
            .program(bin)
            .env("RUST_LOG", "warn")
            .start()
            .map_err(|e| format!("starting {}: {e}", bin.display()))?;
        let gate = GateProcess { gate, _dir: dir };
        if !wait_listening(listen, Transport::Udp, Duration::from_secs(10)) {
            return Err(format!(
                "sip-gate did not listen on {listen}: {}",
                gate.gate.log()
            ));
        }
        std::thread::sleep(settle);
        Ok(gate)
    }

    /// The gate's process id (for [`crate::ProcStats`]); it runs as long
    /// as this lives, nothing here stops it.
    pub fn pid(&self) -> u32 {
        self.gate.pid().unwrap_or_default()
    }
}

/// What a phase's gate spent, measured from its start
/// ([`GateMeter::start`]) to its end ([`GateMeter::finish`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateCost {
    /// The gate's on-CPU time over the phase, µs.
    pub cpu_us: u64,
    /// How long the phase ran, µs.
    pub wall_us: u64,
    /// The gate's peak RSS at the phase's end, KiB.
    pub peak_rss_kb: u64,
}

impl GateCost {
    /// The gate's CPU over the phase as a share of one core, %.
    pub fn core_percent(&self) -> f64 {
        100.0 * self.cpu_us as f64 / self.wall_us.max(1) as f64
    }
}

/// A phase being measured: the gate's CPU time and the clock at its start.
#[derive(Debug)]
pub struct GateMeter {
    before: ProcStats,
    started: Instant,
}

impl GateMeter {
    /// Samples `gate` now: the phase starts.
    pub fn start(gate: &GateProcess) -> Result<GateMeter, String> {
        let before = ProcStats::sample(gate.pid()).map_err(|e| e.to_string())?;
        Ok(GateMeter {
            before,
            started: Instant::now(),
        })
    }

    /// How long the phase has run so far.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Ends the phase: what `gate` spent since [`GateMeter::start`], and
    /// its `/metrics` text from its admin endpoint `admin` (empty when the
    /// gate does not answer: the run's refusals then read 0). The gate is
    /// stopped after.
    pub fn finish(
        self,
        gate: GateProcess,
        admin: SocketAddr,
    ) -> Result<(GateCost, String), String> {
        let after = ProcStats::sample(gate.pid()).map_err(|e| e.to_string())?;
        let wall_us = self.started.elapsed().as_micros() as u64;
        let metrics = crate::http::get_ok(admin, "/metrics").unwrap_or_default();
        drop(gate);
        let cost = GateCost {
            cpu_us: after.cpu_since(&self.before).as_micros() as u64,
            wall_us,
            peak_rss_kb: after.peak_rss_kb,
        };
        Ok((cost, metrics))
    }
}

/// Keeps a run's gate metrics, the gate's own account of the run for
/// reading beside the table, as `out/metrics-ROUND-PHASE.prom`; a failure
/// is added to `errors`.
pub fn save_metrics(out: &Path, round: u32, phase: &str, metrics: &str, errors: &mut Vec<String>) {
    let saved = out.join(format!("metrics-{round}-{phase}.prom"));
    if let Err(e) = std::fs::create_dir_all(out).and_then(|()| std::fs::write(&saved, metrics)) {
        errors.push(format!("saving {}: {e}", saved.display()));
    }
}

/// The in-dialog response times of every `-trace_shortmsg` log in `msgs`
/// ([`in_dialog_latencies`]), µs, sorted.
pub fn all_latencies(msgs: impl IntoIterator<Item = PathBuf>) -> Vec<u64> {
    let mut all: Vec<u64> = msgs
        .into_iter()
        .flat_map(|m| in_dialog_latencies(&m))
        .collect();
    all.sort_unstable();
    all
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
    for (series, value) in crate::metrics::series(metrics) {
        if crate::metrics::name(series) != "sipgate_overload_refusals_total" {
            continue;
        }
        let limit = crate::metrics::label(series, "limit").unwrap_or("?");
        *by.entry(limit.to_string()).or_insert(0) += value as u64;
    }
    by
}

/// `capacity 28 / source 654`: the limits that refused anything (from
/// [`refusals`]), `none` when none did.
pub fn by_limit(m: &BTreeMap<String, u64>) -> String {
    if m.values().all(|&n| n == 0) {
        return "none".into();
    }
    m.iter()
        .filter(|(_, &n)| n > 0)
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// The 99th percentile of how long `class` datagrams waited in the gate's
/// UDP queues, ms, from its `sipgate_udp_intake_wait_total{class,upto_ms}`
/// counters: the upper bound of the bucket that holds it (infinite for the
/// last); NaN when none was counted.
pub fn queue_wait_p99_ms(metrics: &str, class: &str) -> f64 {
    use crate::metrics::label;
    let mut buckets: Vec<(f64, u64)> = crate::metrics::series(metrics)
        .filter(|(s, _)| crate::metrics::name(s) == "sipgate_udp_intake_wait_total")
        .filter(|(s, _)| label(s, "class") == Some(class))
        .filter_map(|(s, count)| {
            let upto = match label(s, "upto_ms")? {
                "+Inf" => f64::INFINITY,
                upto => upto.parse().ok()?,
            };
            Some((upto, count as u64))
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
    fn a_site_head_with_an_instance_and_a_listener_is_a_valid_site() {
        let admin: SocketAddr = "127.0.0.1:19091".parse().unwrap();
        let text = site_head("some-bench", admin)
            + "[[server]]\nname = \"srv-0\"\n\n\
               [[instance]]\nid = \"sg-0\"\nservice = \"sg\"\nserver = \"srv-0\"\nsip = \"127.0.0.11:5060\"\n\n\
               [[listener]]\nname = \"l\"\nbind = \"127.0.0.1:5060\"\nmode = \"balance\"\npool = \"sg\"\nleg = \"subscriber\"\n";
        let site = ringsync::config::SiteConfig::from_str_at(&text, Path::new("/x/site.toml"))
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(site.site.name, "some-bench");
        assert_eq!(site.admin.gate_bind, admin);
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
