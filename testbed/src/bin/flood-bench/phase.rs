//! One measured phase: a fresh sip-gate, the normal call load through it,
//! and in the flood phase the flood of new dialogs beside it; what the gate
//! spent and what the callers saw.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use testbed::callbench::{
    all_latencies, caller, queue_wait_p99_ms, refusals, save_metrics, share, timed, BenchNet,
    BenchPhase, GateCost, GateMeter, GateProcess, Outcomes,
};
use testbed::{Scenario, Sipp, SippHandle, SippReport};

use crate::Opts;

/// The benchmark's own loopback network: 127.78.0.0/24.
const NET: BenchNet = BenchNet(78);

pub(crate) fn ip(host: u8) -> IpAddr {
    NET.ip(host)
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

impl BenchPhase for Phase {
    const ROUND: [Phase; 2] = [Phase::Unloaded, Phase::Flood];

    fn name(self) -> &'static str {
        match self {
            Phase::Unloaded => "unloaded",
            Phase::Flood => "flood",
        }
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
    /// What the gate spent over the phase (first call placed to last
    /// caller done).
    pub(crate) gate: GateCost,
    /// From the first call placed until the last flood caller was done, µs
    /// (0 without a flood).
    pub(crate) flood_us: u64,
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

    /// Flood calls the gate answered (admitted or refused) per second the
    /// flood ran.
    pub(crate) fn flood_per_s(&self) -> f64 {
        (self.flood.up + self.flood.refused) as f64 * 1e6 / self.flood_us.max(1) as f64
    }

    pub(crate) fn cpu_us_per_established(&self) -> f64 {
        self.gate.cpu_us as f64 / self.established().max(1) as f64
    }
}

/// The site: three sg (the SIPp servers) behind a balance listener, and
/// the `[overload]` limits under test. The bursts are a tenth of a second
/// of their rates, so a limit bites within the run rather than after a
/// long burst.
fn site_toml(o: &Opts, listen: SocketAddr) -> String {
    let mut t =
        testbed::callbench::site_head("flood-bench", SocketAddr::new(listen.ip(), ADMIN_PORT));
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
    let addr = phase.gate_addr(NET);
    GateProcess::start(
        &o.gate(),
        &site_toml(o, addr),
        addr,
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

/// Starts the phase's callers: the normal load split over
/// `--normal-sources` (its calls timed with `-trace_shortmsg`), and in the
/// flood phase the flood split over `--flood-sources`.
fn start_callers(
    o: &Opts,
    phase: Phase,
    dir: &Path,
) -> Result<Vec<(bool, PathBuf, SippHandle)>, String> {
    let to = phase.gate_addr(NET);
    let mut callers = Vec::new();
    for i in 0..o.normal_sources {
        let rate = share(o.rate, o.normal_sources, i);
        let log = dir.join(format!("normal-{i}.log"));
        let calls = u64::from(rate * o.seconds);
        let sipp = caller(ip(100 + i as u8), to, calls, rate, o.seconds, &log)
            .duration(Duration::from_millis(o.hold_ms.into()));
        let sipp = timed(sipp, &dir.join(format!("normal-{i}.msg")))
            .spawn()
            .map_err(|e| format!("starting normal caller {i}: {e}"))?;
        callers.push((false, log, sipp));
    }
    if phase == Phase::Flood {
        for i in 0..o.flood_sources {
            let rate = share(o.flood_rate, o.flood_sources, i);
            let log = dir.join(format!("flood-{i}.log"));
            let calls = u64::from(rate * o.seconds);
            // Admitted flood calls are short: a scanner does not talk long.
            let mut sipp = caller(ip(200 + i as u8), to, calls, rate, o.seconds, &log)
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
    let meter = GateMeter::start(&gate)?;
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
            flood_us = meter.elapsed().as_micros() as u64;
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
    let admin = SocketAddr::new(phase.gate_addr(NET).ip(), ADMIN_PORT);
    let (gate, metrics) = meter.finish(gate, admin)?;
    save_metrics(&o.out, round, phase.name(), &metrics, &mut errors);
    for e in &errors {
        eprintln!("    {e}");
    }
    let latency_us =
        all_latencies((0..o.normal_sources).map(|i| dir.path().join(format!("normal-{i}.msg"))));
    Ok(Run {
        round,
        phase,
        normal: Outcomes::read(&normal_logs),
        flood: Outcomes::read(&flood_logs),
        sipp_failed,
        refusals: refusals(&metrics),
        queue_p99_ms: queue_wait_p99_ms(&metrics, "in_dialog"),
        gate,
        flood_us,
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
