//! One measured phase: a fresh sip-gate, the normal call load through it,
//! and in the flood phase the flood of new dialogs beside it; what the gate
//! spent and what the callers saw.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use testbed::callbench::{in_dialog_latencies, queue_wait_p99_ms, refusals, GateProcess, Outcomes};
use testbed::http::get_ok as http_get;
use testbed::{ProcStats, Scenario, Sipp, SippHandle, SippReport};

use crate::Opts;

/// The benchmark's own loopback network: 127.78.0.0/24.
pub(crate) fn ip(host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 78, 0, host))
}

fn uas_addr(i: u8) -> SocketAddr {
    SocketAddr::new(ip(11 + i), 5060)
}

/// The gate's admin port (metrics), on its listener's address.
const ADMIN_PORT: u16 = 19092;

/// What runs beside the normal load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// The normal load alone.
    Unloaded,
    /// The normal load and the flood.
    Flood,
}

impl Phase {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Phase::Unloaded => "unloaded",
            Phase::Flood => "flood",
        }
    }

    /// Each phase's gate listens on its own address, so a straggler of one
    /// run never reaches the next.
    fn addr(self) -> SocketAddr {
        let host = match self {
            Phase::Unloaded => 4,
            Phase::Flood => 5,
        };
        SocketAddr::new(ip(host), 5060)
    }
}

/// One measured phase of one round.
#[derive(Clone, Debug)]
pub(crate) struct Run {
    pub(crate) round: u32,
    pub(crate) phase: Phase,
    /// The normal callers' calls, all sources together.
    pub(crate) normal: Outcomes,
    /// The flood's calls (zero in the unloaded phase).
    pub(crate) flood: Outcomes,
    /// Calls SIPp counted as failed, every caller together: established
    /// calls that failed, and calls that never got a final answer.
    pub(crate) sipp_failed: u64,
    /// The gate's 503s by limit (`source`, `capacity`, `deadline`, ...),
    /// retransmitted INVITEs refused again counted again.
    pub(crate) refusals: BTreeMap<String, u64>,
    /// The 99th percentile of every in-dialog datagram's wait in the
    /// gate's UDP queues (the flood's ACKs to its 503s included), ms: the
    /// upper bound of the bucket it falls in
    /// (`sipgate_udp_intake_wait_total`); NaN when the gate counted none.
    pub(crate) queue_p99_ms: f64,
    /// The gate's on-CPU time over the phase, µs.
    pub(crate) cpu_us: u64,
    /// How long the phase ran (first call placed to last caller done), µs.
    pub(crate) wall_us: u64,
    /// From the first call placed until the last flood caller was done, µs
    /// (0 without a flood).
    pub(crate) flood_us: u64,
    pub(crate) peak_rss_kb: u64,
    /// Response times of the normal calls' re-INVITEs and BYEs, µs, sorted.
    pub(crate) latency_us: Vec<u64>,
}

impl Run {
    pub(crate) fn established(&self) -> u64 {
        self.normal.up + self.flood.up
    }

    pub(crate) fn failed_established(&self) -> u64 {
        self.normal.failed_established() + self.flood.failed_established()
    }

    /// The gate's CPU over the phase as a share of one core, %.
    pub(crate) fn core_percent(&self) -> f64 {
        100.0 * self.cpu_us as f64 / self.wall_us.max(1) as f64
    }

    /// Flood calls the gate answered (admitted or refused) per second the
    /// flood ran.
    pub(crate) fn flood_per_s(&self) -> f64 {
        (self.flood.up + self.flood.refused) as f64 * 1e6 / self.flood_us.max(1) as f64
    }

    pub(crate) fn cpu_us_per_established(&self) -> f64 {
        self.cpu_us as f64 / self.established().max(1) as f64
    }
}

/// The site: three sg (the SIPp servers) behind a balance listener, and
/// the `[overload]` limits under test. The bursts are a tenth of a second
/// of their rates, so a limit bites within the run rather than after a
/// long burst.
fn site_toml(o: &Opts, listen: SocketAddr) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "[site]\nname = \"flood-bench\"\nsecret = \"flood-bench-secret-0123456789\"\n"
    );
    let _ = writeln!(
        t,
        "[store]\nkind = \"embedded\"\npath = \"bench.profiles.json\"\n"
    );
    let _ = writeln!(t, "[admin]\ngate_bind = \"{}:{ADMIN_PORT}\"\n", listen.ip());
    let _ = writeln!(
        t,
        "[overload]\nnew_dialogs_per_s = {}\nnew_dialogs_burst = {}\nper_source_rate = {}\nper_source_burst = {}\n",
        o.capacity,
        (o.capacity / 10).max(1),
        o.per_source,
        (o.per_source / 10).max(1)
    );
    for i in 0..3u8 {
        let _ = writeln!(t, "[[server]]\nname = \"srv-{i}\"");
    }
    for i in 0..3u8 {
        let _ = writeln!(
            t,
            "[[instance]]\nid = \"sg-{i}\"\nservice = \"sg\"\nserver = \"srv-{i}\"\nsip = \"{}\"",
            uas_addr(i)
        );
    }
    let _ = writeln!(t, "[[listener]]\nname = \"subs\"\nbind = \"{listen}\"\ntransports = [\"udp\"]\nmode = \"balance\"\npool = \"sg\"\nleg = \"subscriber\"");
    t
}

fn start_gate(o: &Opts, phase: Phase) -> Result<GateProcess, String> {
    // Let the gate probe its instances once: until then they are unknown.
    GateProcess::start(
        &o.gate(),
        &site_toml(o, phase.addr()),
        phase.addr(),
        Duration::from_millis(1500),
    )
}

/// The three sg: SIPp `uas_call` (INVITE, re-INVITE, BYE), answering the
/// gate's OPTIONS probes (`-aa`), up for the whole benchmark.
pub(crate) fn servers(lifetime: Duration) -> Result<Vec<SippHandle>, String> {
    (0..3)
        .map(|i| {
            Sipp::new(Scenario::repo("uas_call"))
                .local(uas_addr(i).ip(), uas_addr(i).port())
                .arg("-aa")
                .timeout(lifetime)
                .spawn()
                .map_err(|e| format!("starting uas {i}: {e}"))
        })
        .collect()
}

/// One caller: `uac_call_or_503` from its own address, `calls` at `rate`
/// a second, each held `hold`; outcomes logged to `log`.
fn caller(o: &Opts, host: u8, to: SocketAddr, calls: u64, rate: u32, log: &Path) -> Sipp {
    Sipp::new(Scenario::repo("uac_call_or_503"))
        .local_ip(ip(host))
        .remote(to)
        .calls(calls)
        .rate(rate)
        .timeout(Duration::from_secs(u64::from(o.seconds) + 40))
        .arg("-trace_logs")
        .arg("-log_file")
        .arg(log)
}

/// Starts the phase's callers: the normal load split over
/// `--normal-sources` (its calls timed with `-trace_shortmsg`), and in the
/// flood phase the flood split over `--flood-sources`.
fn start_callers(
    o: &Opts,
    phase: Phase,
    dir: &Path,
) -> Result<Vec<(bool, PathBuf, SippHandle)>, String> {
    let to = phase.addr();
    let mut callers = Vec::new();
    let n = o.normal_sources;
    for i in 0..n {
        let rate = o.rate / n + u32::from(i < o.rate % n);
        let log = dir.join(format!("normal-{i}.log"));
        let sipp = caller(
            o,
            100 + i as u8,
            to,
            u64::from(rate * o.seconds),
            rate,
            &log,
        )
        .duration(Duration::from_millis(o.hold_ms.into()))
        .arg("-trace_shortmsg")
        .arg("-shortmessage_file")
        .arg(dir.join(format!("normal-{i}.msg")))
        .spawn()
        .map_err(|e| format!("starting normal caller {i}: {e}"))?;
        callers.push((false, log, sipp));
    }
    if phase == Phase::Flood {
        let n = o.flood_sources;
        for i in 0..n {
            let rate = o.flood_rate / n + u32::from(i < o.flood_rate % n);
            let log = dir.join(format!("flood-{i}.log"));
            // Admitted flood calls are short: a scanner does not talk long.
            let mut sipp = caller(
                o,
                200 + i as u8,
                to,
                u64::from(rate * o.seconds),
                rate,
                &log,
            )
            .duration(Duration::from_millis(100));
            if o.flood_nice > 0 {
                sipp = sipp.nice(o.flood_nice);
            }
            let sipp = sipp
                .spawn()
                .map_err(|e| format!("starting flood caller {i}: {e}"))?;
            callers.push((true, log, sipp));
        }
    }
    Ok(callers)
}

/// Runs one phase on a fresh gate and measures it.
pub(crate) fn measure(o: &Opts, phase: Phase, round: u32) -> Result<Run, String> {
    let gate = start_gate(o, phase)?;
    let dir = tempfile::Builder::new()
        .prefix("flood-bench-logs-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let before = ProcStats::sample(gate.pid()).map_err(|e| e.to_string())?;
    let started = std::time::Instant::now();
    let callers = start_callers(o, phase, dir.path())?;
    let wait = Duration::from_secs(u64::from(o.seconds) + 60);
    let (mut normal_logs, mut flood_logs, mut sipp_failed) = (Vec::new(), Vec::new(), 0);
    let mut errors = Vec::new();
    // The flood's callers first: they end first (their calls are short),
    // so their wait times how long the flood took to place.
    let (floods, normals): (Vec<_>, Vec<_>) = callers.into_iter().partition(|c| c.0);
    let mut flood_us = 0;
    for (i, (flood, log, sipp)) in floods.into_iter().chain(normals).enumerate() {
        if !flood && i > 0 && flood_us == 0 {
            flood_us = started.elapsed().as_micros() as u64;
        }
        match sipp.wait(wait) {
            Ok(r) => {
                sipp_failed += r.failed;
                note_failures(&r, flood, &mut errors);
            }
            Err(e) => errors.push(format!("a caller did not finish: {e}")),
        }
        if flood {
            flood_logs.push(log);
        } else {
            normal_logs.push(log);
        }
    }
    let after = ProcStats::sample(gate.pid()).map_err(|e| e.to_string())?;
    let wall_us = started.elapsed().as_micros() as u64;
    // Empty when the gate does not answer: the run's refusals then read 0.
    let metrics =
        http_get(SocketAddr::new(phase.addr().ip(), ADMIN_PORT), "/metrics").unwrap_or_default();
    drop(gate);
    // The gate's own account of the run, for reading beside the table.
    let saved = o.out.join(format!("metrics-{round}-{}.prom", phase.name()));
    if let Err(e) = std::fs::create_dir_all(&o.out).and_then(|()| std::fs::write(&saved, &metrics))
    {
        errors.push(format!("saving {}: {e}", saved.display()));
    }
    for e in &errors {
        eprintln!("    {e}");
    }
    let mut latency_us = Vec::new();
    for i in 0..o.normal_sources {
        latency_us.extend(in_dialog_latencies(
            &dir.path().join(format!("normal-{i}.msg")),
        ));
    }
    latency_us.sort_unstable();
    Ok(Run {
        round,
        phase,
        normal: Outcomes::read(&normal_logs),
        flood: Outcomes::read(&flood_logs),
        sipp_failed,
        refusals: refusals(&metrics),
        queue_p99_ms: queue_wait_p99_ms(&metrics, "in_dialog"),
        cpu_us: after.cpu_since(&before).as_micros() as u64,
        wall_us,
        flood_us,
        peak_rss_kb: after.peak_rss_kb,
        latency_us,
    })
}

fn note_failures(r: &SippReport, flood: bool, errors: &mut Vec<String>) {
    if r.failed > 0 {
        errors.push(format!(
            "{} caller: {} failed {:?} retrans={} {}",
            if flood { "flood" } else { "normal" },
            r.failed,
            r.failures,
            r.retransmissions,
            r.errors.chars().take(400).collect::<String>()
        ));
    }
}
