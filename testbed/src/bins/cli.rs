//! One-shot CLI runs of the project's binaries (`--check`, `ringsync
//! status`, `ringsync profile ...`): run to their end, output returned.

use std::path::Path;
use std::process::{Command, Output};

use super::BinDir;
use crate::{Error, Result};

/// A command for one of the project's binaries, found by [`BinDir::locate`]
/// (a CLI run: `--check`, `ringsync profile ...`).
pub fn command(program: &str) -> Result<Command> {
    Ok(Command::new(BinDir::locate().program(program)?))
}

/// Runs `program --config SITE ARGS` to its end (a one-shot CLI run:
/// `--check`, `status`, `ringsync profile ...`), the program found in
/// `bins`; its output, whatever its exit status.
pub fn run(bins: &BinDir, program: &str, site: &Path, args: &[&str]) -> Result<Output> {
    Command::new(bins.program(program)?)
        .arg("--config")
        .arg(site)
        .args(args)
        .output()
        .map_err(|source| Error::Spawn {
            program: program.into(),
            source,
        })
}

/// `program --config SITE --check` (the gate's or media-ctl's), found by
/// [`BinDir::locate`]: its output.
///
/// # Panics
/// When the program cannot be found or started: the test's setup.
pub fn check(program: &str, site: &Path) -> Output {
    run(&BinDir::locate(), program, site, &["--check"])
        .unwrap_or_else(|e| panic!("{program} --check: {e}"))
}

/// Runs `ringsync --config SITE --json ARGS`; its JSON output, or an error
/// with what it wrote on stderr.
pub fn ringsync(bins: &BinDir, site: &Path, args: &[&str]) -> Result<serde_json::Value> {
    let args_json: Vec<&str> = std::iter::once("--json")
        .chain(args.iter().copied())
        .collect();
    let out = run(bins, "ringsync", site, &args_json)?;
    if !out.status.success() {
        return Err(Error::Command {
            command: format!("ringsync {}", args.join(" ")),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    serde_json::from_slice(&out.stdout).map_err(|e| Error::Command {
        command: format!("ringsync {}", args.join(" ")),
        message: format!("output is not JSON: {e}"),
    })
}
