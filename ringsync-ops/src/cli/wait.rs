//! `ringsync wait drained`: blocks until every instance of the servers asked
//! for is `drained` (R-ST-1), for automation that stops a server once its
//! drain is done. Works on the store (`--config`) and through `ringsync
//! serve` (`--api`) alike, judging the same site status `ringsync status`
//! prints ([`crate::drained`]) and printing a progress line whenever it
//! changes: on the store it asks for that status once a second; through
//! serve it long-polls `GET /v1/wait`, which answers when the progress
//! changes or the servers are drained.
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

use super::remote::{segment, Remote};
use super::site::Site;
use super::{CliError, NodeArgs};
use crate::drained::{self, Outcome, Verdict, WaitAnswer};
use ringsync::view::InstanceState;

/// The exit code of `wait` when the deadline passed with work left.
pub const EXIT_TIMEOUT: u8 = 4;
/// The exit code of `wait drained` for an instance outside the drain zone.
pub const EXIT_NOT_DRAINING: u8 = 5;

/// How often the site status is asked again on the store.
const POLL: Duration = Duration::from_secs(1);
/// The longest one long poll of `ringsync serve` is held: under the
/// client's 30 s bound for one exchange.
const CHUNK: Duration = Duration::from_secs(20);

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
    #[arg(long, value_name = "T", default_value = "1h", value_parser = drained::parse_duration)]
    pub timeout: Duration,
    /// The nodes to ask (with `--config`).
    #[command(flatten)]
    pub nodes: NodeArgs,
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
    let mut progress = Progress {
        out,
        last: String::new(),
    };
    match site {
        Site::Remote(r) => remote(r, &servers, args.timeout, &mut progress, shutdown).await,
        Site::Local { .. } => local(site, &servers, &args, deadline, &mut progress, shutdown).await,
    }
}

/// Prints a progress line when it differs from the last one.
struct Progress<'a> {
    out: &'a mut (dyn Write + Send),
    last: String,
}

impl Progress<'_> {
    fn show(&mut self, line: &str) -> Result<(), CliError> {
        if line != self.last {
            writeln!(self.out, "{line}")?;
            self.out.flush()?;
            self.last = line.to_owned();
        }
        Ok(())
    }
}

/// On the store: the site status asked again every [`POLL`].
async fn local(
    site: &Site,
    servers: &[String],
    args: &WaitArgs,
    deadline: Instant,
    progress: &mut Progress<'_>,
    shutdown: CancellationToken,
) -> Result<(), CliError> {
    loop {
        let st = site.status(&args.nodes).await?;
        let look = drained::look(&st, servers).map_err(|e| CliError::Usage(e.to_string()))?;
        if let Verdict::NotDraining(outside) = look.verdict {
            return Err(CliError::NotDraining(outside));
        }
        progress.show(&look.progress)?;
        if look.verdict == Verdict::Drained {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(at_deadline(
                args.timeout,
                drained::ids(&look.instances, |s| s == InstanceState::Unknown),
                drained::ids(&look.instances, |s| s != InstanceState::Drained),
            ));
        }
        tokio::select! {
            () = shutdown.cancelled() => return Err(CliError::Usage("wait: interrupted".into())),
            () = tokio::time::sleep(POLL.min(deadline - Instant::now())) => {}
        }
    }
}

/// Through `ringsync serve`: its long poll `GET /v1/wait`, asked again
/// every [`CHUNK`] at most and whenever the progress changed (the request
/// names the last progress it saw, `changed=`; an empty one is answered at
/// once, so the first line prints at once).
async fn remote(
    r: &Remote,
    servers: &[String],
    timeout: Duration,
    progress: &mut Progress<'_>,
    shutdown: CancellationToken,
) -> Result<(), CliError> {
    let deadline = Instant::now() + timeout;
    let query: String = servers
        .iter()
        .map(|s| format!("server={}&", segment(s)))
        .collect();
    let mut seen = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk = left.min(CHUNK);
        let path = format!(
            "/v1/wait?{query}state=drained&timeout={}ms&changed={seen}",
            chunk.as_millis()
        );
        let (_, a): (u16, WaitAnswer) = tokio::select! {
            () = shutdown.cancelled() => return Err(CliError::Usage("wait: interrupted".into())),
            r = r.get_also(&path, &[408, 409]) => r?,
        };
        progress.show(&a.progress)?;
        seen = a.digest;
        match a.outcome {
            Outcome::Drained => return Ok(()),
            Outcome::NotDraining => return Err(CliError::NotDraining(a.not_draining)),
            Outcome::Changed => {}
            Outcome::Timeout if chunk == left => {
                return Err(at_deadline(timeout, a.unknown, a.left))
            }
            Outcome::Timeout => {}
        }
    }
}

/// The error at the deadline: unknown (R-ST-4) before work left.
fn at_deadline(after: Duration, unknown: Vec<String>, left: Vec<String>) -> CliError {
    if unknown.is_empty() {
        CliError::Timeout { after, left }
    } else {
        CliError::Unknown(unknown)
    }
}
