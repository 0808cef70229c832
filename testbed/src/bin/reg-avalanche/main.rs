//! `reg-avalanche`: a registration avalanche through one sip-gate beside
//! a call load (issue 29, R-OV-1 for REGISTER): whether an established
//! call fails, what the avalanche does to the calls' in-dialog latency,
//! what becomes of every REGISTER (forwarded and answered 200, or refused
//! 503 with Retry-After, none lost silently), and the gate's CPU per
//! REGISTER.
//!
//! Every round runs two phases, each on a fresh sip-gate in front of three
//! sg stand-ins (127.82.0.11-13, registrar and call UAS at once, see
//! `standin.rs` for why not SIPp):
//!
//! * `unloaded`: the call load alone, `--rate` calls/s for `--seconds`,
//!   split over `--normal-sources` SIPp callers (127.82.0.100+), each call
//!   INVITE, hold `--hold-ms`, re-INVITE, BYE (`uac_call_or_503`).
//! * `avalanche`: the same call load, and beside it `--subscribers`
//!   distinct subscribers (own AoR and Call-ID each) registering within
//!   the same `--seconds` from `--sources` addresses (127.82.0.150+),
//!   sent by the generator (`gen.rs`, a process of its own) which
//!   retransmits as RFC 3261 has it, retries a 503 after its Retry-After
//!   (`--retries`) and counts every transaction's outcome.
//!
//! The gate runs with its defaults but for what `--register-capacity` and
//! `--per-source-register` set. Per phase: calls established and failed,
//! the in-dialog p50/p99 as the callers saw them, REGISTERs sent / 200 /
//! 503 / other / lost, the gate's 503s by limit, the gate's CPU (on-CPU
//! time from schedstat) per REGISTER both as its total over the phase and
//! net of the calls' share (the unloaded phase's CPU subtracted), its peak
//! RSS, and the ratio of the in-dialog p99 avalanche/unloaded against the
//! issue's 2x.
//!
//! ```text
//! cargo build --release -p sip-gate -p testbed
//! target/release/reg-avalanche --rounds 1
//! target/release/reg-avalanche --subscribers 2000 --seconds 5   # smoke
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

mod gen;
mod phase;
mod report;
mod standin;

use phase::{instance_addrs, measure, Phase, Run};
use testbed::callbench::{self, command_line, gate_binary, percentile, run_rounds};

/// sip-gate under a registration avalanche beside a call load, unloaded
/// and loaded in interleaved rounds.
#[derive(Debug, Parser)]
#[command(
    name = "reg-avalanche",
    version,
    args_conflicts_with_subcommands = true
)]
pub(crate) struct Opts {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// The call load, in calls per second, all callers together (1..=1000).
    #[arg(long, value_name = "N", default_value_t = 200,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    rate: u32,
    /// SIPp callers the call load is split over, each on its own address,
    /// each under the gate's per-source limit of 50 new dialogs/s (1..=8).
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..=8))]
    normal_sources: u32,
    /// How long each call stays up before its re-INVITE and BYE, ms.
    #[arg(long, value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(0..=10_000))]
    hold_ms: u32,
    /// Subscribers registering in the avalanche, each with its own AoR
    /// and Call-ID (1..=300000).
    #[arg(long, value_name = "N", default_value_t = 200_000,
          value_parser = clap::value_parser!(u32).range(1..=300_000))]
    subscribers: u32,
    /// Source addresses the subscribers are spread over, as NATs with many
    /// phones behind each (1..=100).
    #[arg(long, value_name = "N", default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    sources: u32,
    /// Seconds of call load per phase, and the window the avalanche's
    /// first REGISTERs are spread over (1..=60).
    #[arg(long, value_name = "S", default_value_t = 60,
          value_parser = clap::value_parser!(u32).range(1..=60))]
    seconds: u32,
    /// Retries of a REGISTER refused with 503, each after its Retry-After
    /// (0..=5).
    #[arg(long, value_name = "N", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(0..=5))]
    retries: u32,
    /// Timer F of the generator's transactions: unanswered by then, a
    /// REGISTER is lost (2..=32 s).
    #[arg(long, value_name = "S", default_value_t = 32,
          value_parser = clap::value_parser!(u32).range(2..=32))]
    txn_timeout_s: u32,
    /// The generator runs at this `nice` (0: as the rest; 1..=19).
    #[arg(long, value_name = "N", default_value_t = 0,
          value_parser = clap::value_parser!(u8).range(0..=19))]
    gen_nice: u8,
    /// The gate's `[overload] registers_per_s` (its burst a tenth of it);
    /// unset: the gate's default.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    register_capacity: Option<u32>,
    /// The gate's `[overload] per_source_register_rate` (its burst a tenth
    /// of it); unset: the gate's default.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    per_source_register: Option<u32>,
    /// Rounds: both phases once per round, interleaved; medians (1..=5).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=5))]
    rounds: u32,
    /// The sip-gate binary (default: `sip-gate` next to this one).
    #[arg(long, value_name = "PATH")]
    gate: Option<PathBuf>,
    /// Directory for results.md, runs.csv and each run's gate metrics.
    #[arg(long, value_name = "DIR", default_value = "reg-avalanche-out")]
    pub(crate) out: PathBuf,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// The avalanche's generator (run by the benchmark itself).
    #[command(hide = true)]
    Gen(gen::GenOpts),
}

impl Opts {
    pub(crate) fn gate(&self) -> PathBuf {
        gate_binary(self.gate.as_deref())
    }

    /// The longest the generator may take: the window, then every retry
    /// after its Retry-After (at most 10 s with the gate's defaults; 60 s
    /// allowed) and its Timer F, and a margin.
    pub(crate) fn generator_limit(&self) -> Duration {
        let per_try = 60 + u64::from(self.txn_timeout_s);
        Duration::from_secs(u64::from(self.seconds) + u64::from(self.retries + 1) * per_try + 30)
    }

    fn check(&self) -> Result<(), String> {
        if self.rate < self.normal_sources {
            return Err("each caller needs at least 1 call/s".into());
        }
        let per_caller = self.rate.div_ceil(self.normal_sources);
        if per_caller >= 50 {
            return Err(format!(
                "each caller sends {per_caller} calls/s, not under the gate's per-source \
                 limit of 50: add --normal-sources"
            ));
        }
        if self.subscribers < self.sources {
            return Err("at least one subscriber per source".into());
        }
        Ok(())
    }
}

/// Both phases in every round, interleaved (the first alternates). A run
/// that cannot finish is reported and left out of the medians.
fn run_all(o: &Opts, sg: &standin::StandIns) -> Vec<Run> {
    run_rounds(
        o.rounds,
        o.seconds,
        |phase: Phase, round| measure(o, phase, round, sg),
        |r| {
            format!(
                "calls {} (failed {}), REGISTERs {} sent: {} ok / {} 503 / {} other / {} lost, \
                 gate {:.0}% of a core, p99 {:.2} ms",
                r.calls.up,
                r.calls.failed_established(),
                r.regs.sent,
                r.regs.ok,
                r.regs.refused,
                r.regs.other,
                r.regs.lost,
                r.gate.core_percent(),
                percentile(&r.latency_us, 0.99) / 1000.0
            )
        },
    )
}

fn write_results(o: &Opts, runs: &[Run], started: Instant) -> Result<(), String> {
    let mut out = format!(
        "{} Calls {}/s from {} callers, hold {} ms; \
         avalanche {} subscribers from {} sources within {} s ({:.0}/s asked), {} retries; \
         gate REGISTER capacity {}, per source {}.\n\n",
        command_line(started),
        o.rate,
        o.normal_sources,
        o.hold_ms,
        o.subscribers,
        o.sources,
        o.seconds,
        f64::from(o.subscribers) / f64::from(o.seconds),
        o.retries,
        o.register_capacity
            .map_or("default (5000/s)".into(), |n| format!("{n}/s")),
        o.per_source_register
            .map_or("default (200/s)".into(), |n| format!("{n}/s")),
    );
    out.push_str(&report::table(runs, o.subscribers));
    callbench::write_results(&o.out, &out, &report::csv(runs))
}

fn main() -> ExitCode {
    let o = Opts::parse();
    if let Some(Cmd::Gen(g)) = &o.cmd {
        return match gen::run(g) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("reg-avalanche gen: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Err(e) = o.check() {
        eprintln!("reg-avalanche: {e}");
        return ExitCode::from(2);
    }
    if !o.gate().exists() {
        eprintln!(
            "reg-avalanche: sip-gate not found at {} (cargo build --release -p sip-gate)",
            o.gate().display()
        );
        return ExitCode::FAILURE;
    }
    let sg = match standin::StandIns::start(&instance_addrs()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("reg-avalanche: {e}");
            return ExitCode::FAILURE;
        }
    };
    let started = Instant::now();
    let runs = run_all(&o, &sg);
    drop(sg);
    if let Err(e) = write_results(&o, &runs, started) {
        eprintln!("reg-avalanche: writing results: {e}");
        return ExitCode::FAILURE;
    }
    let failed: u64 = runs.iter().map(|r| r.calls.failed_established()).sum();
    let lost: u64 = runs.iter().map(|r| r.regs.lost).sum();
    if failed > 0 || lost > 0 {
        eprintln!(
            "reg-avalanche: {failed} established calls failed, {lost} REGISTERs lost \
             (R-OV-1 says none may)"
        );
    }
    ExitCode::SUCCESS
}
