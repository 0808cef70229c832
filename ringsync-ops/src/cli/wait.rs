//! `ringsync wait drained`: blocks until every instance of the servers asked
//! for is `drained` (R-ST-1), for automation that stops a server once its
//! drain is done. Works on the store (`--config`) and through `ringsync
//! serve` (`--api`) alike: it polls the same site status `ringsync status`
//! prints, once a second, and prints a progress line whenever it changes.
//!
//! Exit codes: 0 drained; [`EXIT_UNKNOWN`](super::EXIT_UNKNOWN) (3) at the deadline with an
//! instance whose state nobody can say (R-ST-4); [`EXIT_TIMEOUT`] (4) at the
//! deadline with work left; [`EXIT_NOT_DRAINING`] (5) at once when an
//! instance of those servers is not in the drain zone (no active profile
//! drains its server: it would never drain); 1 for any other failure.

use std::io::Write;
use std::time::Duration;

use clap::{Args, Subcommand};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::site::Site;
use super::{CliError, NodeArgs};
use ringsync::view::InstanceState;
use ringsync::work::InstanceStatus;

/// The exit code of `wait` when the deadline passed with work left.
pub const EXIT_TIMEOUT: u8 = 4;
/// The exit code of `wait drained` for an instance outside the drain zone.
pub const EXIT_NOT_DRAINING: u8 = 5;

/// How often the site status is asked again.
const POLL: Duration = Duration::from_secs(1);

/// `wait` conditions.
#[derive(Debug, Subcommand)]
pub enum WaitCommand {
    /// Until every instance of the servers is `drained`; progress lines
    /// meanwhile. Exit 0 drained, 3 unknown at the deadline, 4 work left at
    /// the deadline, 5 not draining (no active profile drains a server).
    Drained(WaitArgs),
}

/// `wait drained` options.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// A server whose instances to wait for (repeat for several).
    #[arg(long = "server", value_name = "SERVER")]
    pub servers: Vec<String>,
    /// The servers of this profile (id or name), besides any `--server`.
    #[arg(long, value_name = "PROFILE")]
    pub profile: Option<String>,
    /// How long to wait: seconds, or with a unit (`90s`, `15m`, `2h`).
    #[arg(long, value_name = "T", default_value = "1h", value_parser = parse_timeout)]
    pub timeout: Duration,
    /// The nodes to ask (with `--config`).
    #[command(flatten)]
    pub nodes: NodeArgs,
}

/// `300`, `300s`, `5m`, `2h`.
fn parse_timeout(s: &str) -> Result<Duration, String> {
    let (n, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = n
        .parse()
        .map_err(|_| format!("`{s}`: a number of seconds, or with s, m or h"))?;
    let secs = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        _ => return Err(format!("`{s}`: the unit is s, m or h")),
    };
    Ok(Duration::from_secs(secs))
}

pub(super) async fn run(
    site: &Site,
    cmd: WaitCommand,
    out: &mut (dyn Write + Send),
    shutdown: CancellationToken,
) -> Result<(), CliError> {
    let WaitCommand::Drained(args) = cmd;
    let mut servers = args.servers.clone();
    if let Some(p) = &args.profile {
        servers.extend(site.show(p).await?.servers);
    }
    servers.sort();
    servers.dedup();
    if servers.is_empty() {
        return Err(CliError::Usage(
            "wait drained: name the servers (--server, repeat) or a --profile".into(),
        ));
    }
    let deadline = Instant::now() + args.timeout;
    let mut last = String::new();
    loop {
        let st = site.status(&args.nodes).await?;
        if let Some(bad) = servers
            .iter()
            .find(|s| !st.instances.iter().any(|i| &i.server == *s))
        {
            return Err(CliError::Usage(format!(
                "no instance on server `{bad}` in site `{}`",
                st.site
            )));
        }
        let mine: Vec<&InstanceStatus> = (st.instances.iter())
            .filter(|i| servers.contains(&i.server))
            .collect();
        let outside: Vec<String> = (mine.iter())
            .filter(|i| matches!(i.state, InstanceState::Up | InstanceState::Down))
            .map(|i| i.id.clone())
            .collect();
        if !outside.is_empty() {
            return Err(CliError::NotDraining(outside));
        }
        let line = progress(&mine);
        if line != last {
            writeln!(out, "{line}")?;
            out.flush()?;
            last = line;
        }
        if mine.iter().all(|i| i.state == InstanceState::Drained) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let unknown: Vec<String> = (mine.iter())
                .filter(|i| i.state == InstanceState::Unknown)
                .map(|i| i.id.clone())
                .collect();
            if !unknown.is_empty() {
                return Err(CliError::Unknown(unknown));
            }
            let left: Vec<String> = (mine.iter())
                .filter(|i| i.state != InstanceState::Drained)
                .map(|i| i.id.clone())
                .collect();
            return Err(CliError::Timeout {
                after: args.timeout,
                left,
            });
        }
        tokio::select! {
            () = shutdown.cancelled() => return Err(CliError::Usage("wait: interrupted".into())),
            () = tokio::time::sleep(POLL.min(deadline - Instant::now())) => {}
        }
    }
}

/// `N of M drained; sg-a draining (work 3), mg-a unknown`.
fn progress(mine: &[&InstanceStatus]) -> String {
    let drained = mine
        .iter()
        .filter(|i| i.state == InstanceState::Drained)
        .count();
    let mut line = format!("{drained} of {} drained", mine.len());
    let rest: Vec<String> = (mine.iter())
        .filter(|i| i.state != InstanceState::Drained)
        .map(|i| {
            let state = serde_json::to_value(i.state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| format!("{:?}", i.state));
            match i.work {
                Some(w) => format!("{} {state} (work {w})", i.id),
                None => format!("{} {state}", i.id),
            }
        })
        .collect();
    if !rest.is_empty() {
        line.push_str("; ");
        line.push_str(&rest.join(", "));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_take_seconds_or_a_unit() {
        assert_eq!(parse_timeout("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_timeout("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_timeout("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_timeout("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_timeout("2d").is_err());
        assert!(parse_timeout("m").is_err());
    }
}
