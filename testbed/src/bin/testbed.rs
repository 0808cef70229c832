//! `testbed run SCENARIO.toml`: rehearse a drain of a whole site on this
//! machine with real peers, a live progress line, a report and a chart
//! (docs/rehearsal.md).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use testbed::chaos;
use testbed::rehearsal::{self, Options, Scenario};
use testbed::site::BinDir;

/// Real peers on loopback: drain rehearsals of a whole site.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Build the scenario's site, play its timeline, write the report.
    Run {
        /// The scenario file.
        scenario: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// Random faults from a seed against a whole site under load, every
    /// promise checked against the far ends' own record.
    Chaos {
        /// The seed: the same seed replays the same fault timeline.
        #[arg(long)]
        seed: u64,
        /// How long faults and load run, in minutes (0.5 to 120).
        #[arg(long, default_value_t = 10.0)]
        minutes: f64,
        /// Gate nodes: 2 or 3.
        #[arg(long, default_value_t = 3)]
        gates: usize,
        /// New calls per second.
        #[arg(long, default_value_t = 10)]
        rate: u32,
        /// Seconds a drain may take to reach every gate.
        #[arg(long, default_value_t = 3.0)]
        bound_s: f64,
        /// The run's /24, `127.A.B` (default: from the pid).
        #[arg(long)]
        net: Option<String>,
        /// Print the fault timeline the seed gives and exit.
        #[arg(long)]
        plan: bool,
        /// Break a promise on purpose, to see the invariants catch it:
        /// `blind-gate` (the last gate reads another store prefix, so it
        /// never sees a drain), `refusing-gate` (the last gate lets one new
        /// dialog a second from a source through and refuses the rest),
        /// `forgetful-gates` (every gate forgets a call a second after its
        /// last request; the run has no registrations or subscriptions).
        #[arg(long = "break", value_name = "WHAT", value_parser = ["blind-gate", "refusing-gate", "forgetful-gates"])]
        breaks: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Check a scenario file and print its timeline.
    Check {
        /// The scenario file.
        scenario: PathBuf,
    },
}

/// What `run` and `chaos` share: where the report goes, how it prints,
/// where the binaries are.
#[derive(Args, Debug)]
struct Common {
    /// Where the report, site files and logs go (default: rehearsal-<name>
    /// or chaos-<seed> in the current directory).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// No progress line.
    #[arg(long, short)]
    quiet: bool,
    /// Print the report as JSON instead of Markdown.
    #[arg(long)]
    json: bool,
    /// Where sip-gate, media-ctl and ringsync are (default: next to
    /// this program, or TESTBED_BIN_DIR).
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,
}

/// A report `run` or `chaos` prints.
trait Printed: serde::Serialize {
    fn markdown(&self) -> String;
    fn passed(&self) -> bool;
}

impl Printed for rehearsal::Report {
    fn markdown(&self) -> String {
        rehearsal::Report::markdown(self)
    }
    fn passed(&self) -> bool {
        rehearsal::Report::passed(self)
    }
}

impl Printed for chaos::ChaosReport {
    fn markdown(&self) -> String {
        chaos::ChaosReport::markdown(self)
    }
    fn passed(&self) -> bool {
        chaos::ChaosReport::passed(self)
    }
}

/// Makes `out`, runs `play` with a flag SIGINT and SIGTERM set, prints
/// its report (JSON with `json`) and says where it was written; exit 0
/// when it passed, 1 when not.
fn report<R: Printed>(
    out: &std::path::Path,
    json: bool,
    play: impl FnOnce(&Arc<AtomicBool>) -> testbed::Result<R>,
) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(out)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    let report = play(&stop)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.markdown());
    }
    eprintln!("testbed: report in {}", out.join("report.md").display());
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("testbed: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Chaos {
            seed,
            minutes,
            gates,
            rate,
            bound_s,
            net,
            plan,
            breaks,
            common,
        } => {
            if plan {
                let t = chaos::timeline(seed, minutes * 60.0, gates)?;
                print!("{}", chaos::plan::timeline_text(seed, &t));
                return Ok(ExitCode::SUCCESS);
            }
            let net = match net {
                None => None,
                Some(n) => Some(
                    parse_net(&n)
                        .ok_or_else(|| anyhow::anyhow!("--net {n:?}: expected \"127.A.B\""))?,
                ),
            };
            let opts = chaos::Options {
                seed,
                duration_s: minutes * 60.0,
                out: common
                    .out
                    .unwrap_or_else(|| PathBuf::from(format!("chaos-{seed}"))),
                quiet: common.quiet,
                bins: common.bin_dir.map(BinDir::at),
                net,
                gates,
                rate,
                bound_s,
                breaks: testbed::site::Break::ALL
                    .iter()
                    .find(|(n, _)| Some(*n) == breaks.as_deref())
                    .map(|(_, b)| *b),
            };
            report(&opts.out, common.json, |stop| chaos::run(&opts, stop))
        }
        Command::Check { scenario } => {
            let s = Scenario::load(&scenario)?;
            let layout = s.builder()?.layout()?;
            let s = s.resolved(&layout);
            // A closed pipe (`| head`) ends the listing, not the program.
            let mut out = std::io::stdout().lock();
            let _ = writeln!(
                out,
                "{}: ok, {} steps, ends at {:.0} s",
                scenario.display(),
                s.steps.len(),
                s.end_s()
            );
            for step in &s.steps {
                let _ = writeln!(out, "  {:>6.1} s  {}", step.at_s, step.action.label());
            }
            if layout.source.is_some() {
                let map = testbed::rehearsal::site_map::SiteMap::new(&layout);
                let _ = writeln!(out, "\n{}", map.markdown());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Run { scenario, common } => {
            let s = Scenario::load(&scenario)?;
            let opts = Options {
                out: common
                    .out
                    .unwrap_or_else(|| PathBuf::from(format!("rehearsal-{}", s.name))),
                quiet: common.quiet,
                bins: common.bin_dir.map(BinDir::at),
            };
            report(&opts.out, common.json, |stop| {
                rehearsal::run(&s, &opts, stop)
            })
        }
    }
}

/// `"127.A.B"` as octets.
fn parse_net(s: &str) -> Option<[u8; 3]> {
    let mut it = s.split('.').map(|p| p.parse::<u8>().ok());
    let net = [it.next()??, it.next()??, it.next()??];
    it.next().is_none().then_some(net)
}
