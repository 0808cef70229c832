//! `testbed run SCENARIO.toml`: rehearse a drain of a whole site on this
//! machine with real peers, a live progress line, a report and a chart
//! (docs/rehearsal.md).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::{Parser, Subcommand};
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
        /// Where the report, chart, site files and logs go
        /// (default: rehearsal-<name> in the current directory).
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
    },
    /// Check a scenario file and print its timeline.
    Check {
        /// The scenario file.
        scenario: PathBuf,
    },
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
        Command::Run {
            scenario,
            out,
            quiet,
            json,
            bin_dir,
        } => {
            let s = Scenario::load(&scenario)?;
            let opts = Options {
                out: out.unwrap_or_else(|| PathBuf::from(format!("rehearsal-{}", s.name))),
                quiet,
                bins: bin_dir.map(BinDir::at),
            };
            std::fs::create_dir_all(&opts.out)?;
            let stop = Arc::new(AtomicBool::new(false));
            for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
                signal_hook::flag::register(sig, stop.clone())?;
            }
            let report = rehearsal::run(&s, &opts, &stop)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.markdown());
            }
            eprintln!(
                "testbed: report in {}",
                opts.out.join("report.md").display()
            );
            Ok(if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}
