//! `flood-bench`: what a flood of new dialogs costs the calls already up
//! through sip-gate (issue 12, R-OV-1/R-OV-2): CPU per established call and
//! the latency of in-dialog requests, unloaded and under a flood, side by
//! side in one run.
//!
//! Every round runs two phases, each on a fresh sip-gate in front of three
//! SIPp `uas_call` servers (127.78.0.11-13):
//!
//! * `unloaded`: the normal load, `--rate` calls/s for `--seconds`, split
//!   over `--normal-sources` SIPp callers (127.78.0.100+) so each stays
//!   under the per-source limit; every call is INVITE, hold `--hold-ms`,
//!   re-INVITE, BYE (`uac_call_or_503`).
//! * `flood`: the same normal load, and beside it `--flood-rate` new
//!   calls/s from `--flood-sources` other callers (127.78.0.200+), each
//!   past the per-source limit (`--per-source`) and together past the
//!   gate's capacity (`--capacity`, its `new_dialogs_per_s`). The gate
//!   answers what is over a limit with 503 and Retry-After; what it admits
//!   is a short call.
//!
//! Per phase: established calls (200 to the INVITE) and those that then
//! failed (re-INVITE or BYE without its 200), the INVITEs refused with 503
//! and the gate's 503s by limit (its `sipgate_overload_refusals_total`),
//! the gate's CPU (on-CPU time of the process over the phase, from
//! schedstat) per established call, the p50/p99 response time of the normal
//! calls' re-INVITEs and BYEs as their caller saw them (from the first send
//! to the 200, µs timestamps of SIPp's `-trace_shortmsg`), and the gate's
//! peak RSS. The table shows medians over rounds and the ratios
//! flood/unloaded against issue 12's target (at most 2x).
//!
//! The flood's callers run at `nice` 19 (`--flood-nice`): on a machine
//! whose cores also run the gate and the timing callers, a flood generator
//! at equal priority would delay the callers' own sends and reads, and the
//! latency they report would be the generator's. The table says at what
//! rate the flood reached the gate, so a generator starved by its niceness
//! shows.
//!
//! ```text
//! cargo build --release -p sip-gate -p testbed
//! netns-run target/release/flood-bench --rounds 3
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

mod phase;
mod report;

use phase::{measure, servers, Phase, Run};
use testbed::callbench::{self, command_line, gate_binary, percentile, run_rounds};

/// CPU per established call and in-dialog latency of sip-gate, unloaded
/// and under a flood of new dialogs, in interleaved rounds (medians).
#[derive(Debug, Parser)]
#[command(name = "flood-bench", version)]
pub(crate) struct Opts {
    /// The normal load, in calls per second, all its sources together
    /// (1..=1000: the machine is shared).
    #[arg(long, value_name = "N", default_value_t = 300,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    rate: u32,
    /// SIPp callers the normal load is split over, each on its own address
    /// (1..=8).
    #[arg(long, value_name = "N", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=8))]
    normal_sources: u32,
    /// How long each normal call stays up before its re-INVITE and BYE, ms
    /// (0..=10000).
    #[arg(long, value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(0..=10_000))]
    hold_ms: u32,
    /// The flood, in new calls per second, all its sources together
    /// (1..=5000).
    #[arg(long, value_name = "N", default_value_t = 3000,
          value_parser = clap::value_parser!(u32).range(1..=5000))]
    flood_rate: u32,
    /// SIPp callers the flood is split over, each on its own address (1..=8).
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=8))]
    flood_sources: u32,
    /// The flood's SIPp callers run at this `nice` (0: as the rest; 1..=19).
    /// On one shared machine a flood generator at equal priority takes the
    /// cores from the SIPp callers and servers that time the normal calls,
    /// so their latency is the generator's as much as the gate's; niced, it
    /// stands for a flood from elsewhere. The table says what flood rate
    /// reached the gate.
    #[arg(long, value_name = "N", default_value_t = 19,
          value_parser = clap::value_parser!(u8).range(0..=19))]
    flood_nice: u8,
    /// The gate's capacity for new dialogs, all sources (its
    /// `[overload] new_dialogs_per_s`; the burst is a tenth of it).
    #[arg(long, value_name = "N", default_value_t = 800,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    capacity: u32,
    /// The gate's limit of new dialogs per second from one source address
    /// (its `[overload] per_source_rate`; the burst is a tenth of it).
    #[arg(long, value_name = "N", default_value_t = 150,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    per_source: u32,
    /// Seconds of load per phase (1..=60).
    #[arg(long, value_name = "S", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=60))]
    seconds: u32,
    /// Rounds: both phases run once per round, interleaved, so machine
    /// noise hits them alike; the table shows medians.
    #[arg(long, value_name = "N", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: u32,
    /// The sip-gate binary (default: `sip-gate` next to this one).
    #[arg(long, value_name = "PATH")]
    gate: Option<PathBuf>,
    /// Directory for results.md (the table), runs.csv (every run) and
    /// each run's gate metrics at its end (metrics-ROUND-PHASE.prom).
    #[arg(long, value_name = "DIR", default_value = "flood-bench-out")]
    pub(crate) out: PathBuf,
}

impl Opts {
    pub(crate) fn gate(&self) -> PathBuf {
        gate_binary(self.gate.as_deref())
    }

    /// The load must measure what it claims: the normal load within every
    /// limit (else the unloaded phase is refused too), the flood past both.
    fn check(&self) -> Result<(), String> {
        let per_normal = self.rate.div_ceil(self.normal_sources);
        let per_flood = self.flood_rate / self.flood_sources;
        if self.rate < self.normal_sources || self.flood_rate < self.flood_sources {
            return Err("each source needs at least 1 call/s".into());
        }
        if per_normal >= self.per_source {
            return Err(format!(
                "each normal source sends {per_normal}/s, not under --per-source {}: \
                 add --normal-sources",
                self.per_source
            ));
        }
        if self.rate >= self.capacity {
            return Err(format!(
                "the normal load ({}/s) must be under --capacity {}",
                self.rate, self.capacity
            ));
        }
        if per_flood <= self.per_source || self.flood_rate <= self.capacity {
            return Err(format!(
                "not a flood: each flood source must send more than --per-source {} \
                 (it sends {per_flood}/s) and all together more than --capacity {} \
                 (they send {}/s)",
                self.per_source, self.capacity, self.flood_rate
            ));
        }
        Ok(())
    }
}

/// Both phases in every round, interleaved (the first phase alternates),
/// with progress on stderr. A run that cannot finish is reported and left
/// out of the medians.
fn run_all(o: &Opts) -> Vec<Run> {
    run_rounds(
        o.rounds,
        o.seconds,
        |phase: Phase, round| measure(o, phase, round),
        |r| {
            format!(
                "established {} (failed {}), refused {}+{}, {:.1} µs/call, p99 {:.2} ms",
                r.established(),
                r.failed_established(),
                r.normal.refused,
                r.flood.refused,
                r.cpu_us_per_established(),
                percentile(&r.latency_us, 0.99) / 1000.0
            )
        },
    )
}

/// The table on stdout and in `OUT/results.md`, every run in `OUT/runs.csv`.
fn write_results(o: &Opts, runs: &[Run], started: Instant) -> Result<(), String> {
    let mut out = format!(
        "{} Normal load {}/s from {} sources, \
         hold {} ms; flood {}/s from {} sources; gate capacity {}/s, per source {}/s.\n\n",
        command_line(started),
        o.rate,
        o.normal_sources,
        o.hold_ms,
        o.flood_rate,
        o.flood_sources,
        o.capacity,
        o.per_source
    );
    out.push_str(&report::table(runs));
    callbench::write_results(&o.out, &out, &report::csv(runs))
}

fn main() -> ExitCode {
    let o = Opts::parse();
    if let Err(e) = o.check() {
        eprintln!("flood-bench: {e}");
        return ExitCode::from(2);
    }
    if !o.gate().exists() {
        eprintln!(
            "flood-bench: sip-gate not found at {} (cargo build --release -p sip-gate)",
            o.gate().display()
        );
        return ExitCode::FAILURE;
    }
    let per_phase = u64::from(o.seconds) + u64::from(o.hold_ms) / 1000 + 70;
    let lifetime = Duration::from_secs(per_phase * 2 * u64::from(o.rounds));
    let servers = match servers(lifetime) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("flood-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let started = Instant::now();
    let runs = run_all(&o);
    drop(servers);
    if let Err(e) = write_results(&o, &runs, started) {
        eprintln!("flood-bench: writing results: {e}");
        return ExitCode::FAILURE;
    }
    let failed: u64 = runs.iter().map(Run::failed_established).sum();
    if failed > 0 {
        let flood: u64 = runs.iter().map(|r| r.flood.failed_established()).sum();
        eprintln!(
            "flood-bench: {failed} established calls failed, {flood} of them flood calls \
             (R-OV-1 says none may; a flood generator starved of CPU by its niceness, \
             see the rate it reached, fails its own calls)"
        );
    }
    ExitCode::SUCCESS
}
