//! Drain rehearsals: build a site ([`crate::site`]), play a scenario's
//! timeline on it ([`play`]), and write a report with verdicts per rule
//! ([`report`], [`verdict`]) and a chart ([`chart`]). `testbed run
//! SCENARIO.toml` is this module behind a command line.

pub mod chart;
pub mod load;
pub mod media;
pub mod play;
pub mod rate;
pub mod report;
pub mod sample;
pub mod sampled;
pub mod scenario;
pub mod site_map;
mod tally;
pub mod totals;
pub mod verdict;
mod verdict_ap;
mod verdict_ap_moves;
mod verdict_calls;
mod verdict_kit;
mod verdict_media;
#[cfg(test)]
mod verdict_tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub use report::Report;
pub use scenario::Scenario;

use crate::site::BinDir;
use crate::{Error, Result};

/// How a rehearsal runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where the report, chart, site files and logs go.
    pub out: PathBuf,
    /// No progress line.
    pub quiet: bool,
    /// Where the project's binaries are (default [`BinDir::locate`]).
    pub bins: Option<BinDir>,
}

/// Runs `scenario`: starts its site, plays it, stops everything, writes
/// `report.md`, `report.json` and the chart into `opts.out`. `stop` (set
/// from a signal handler) ends the run early with [`Error::Interrupted`].
pub fn run(scenario: &Scenario, opts: &Options, stop: &Arc<AtomicBool>) -> Result<Report> {
    let site_dir = opts.out.join("site");
    // A run starts from nothing: a site directory left by an earlier run
    // holds its profiles (the embedded store), work books and caller logs.
    if site_dir.exists() {
        std::fs::remove_dir_all(&site_dir).map_err(|source| Error::File {
            path: site_dir.clone(),
            source,
        })?;
    }
    let mut builder = scenario.builder()?.dir(&site_dir);
    if let Some(b) = &opts.bins {
        builder = builder.bins(b.clone());
    }
    let layout = builder.layout()?;
    let scenario = &scenario.resolved(&layout);
    if !opts.quiet {
        eprintln!("{}", site_map::SiteMap::new(&layout).markdown());
    }
    let played = {
        let mut site = builder.run()?;
        play::play(scenario, &mut site, &site_dir, opts.quiet, stop)?
        // The site drops here: everything it started stops.
    };
    let mut report = Report::new(scenario, &layout, &played);
    match chart::write(&played, scenario.end_s(), &opts.out, "chart") {
        Ok(files) => report.charts = files,
        Err(e) => eprintln!("testbed: no chart: {e}"),
    }
    write(&opts.out.join("report.md"), report.markdown())?;
    let json = serde_json::to_string_pretty(&report).map_err(std::io::Error::other)?;
    write(&opts.out.join("report.json"), json)?;
    Ok(report)
}

fn write(path: &Path, text: String) -> Result<()> {
    std::fs::write(path, text).map_err(|source| Error::File {
        path: path.to_path_buf(),
        source,
    })
}
