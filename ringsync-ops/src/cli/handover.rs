//! The Active-Passive handover on the command line: `handover status`, the
//! follower agent (`agent`), and the planner `serve` runs.

use ringsync::store::BackendError;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, Subcommand};
use futures::future::BoxFuture;
use ringsync::notify::Notifier;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{text::write_table, write_json, CliError};
use crate::handover::agent::{Agent, Member};
use crate::handover::status::{GroupStatus, HandoverStatus};
use crate::handover::{self, Clock, Planner, PlannerStats};
use ringsync::config::SiteConfig;
use ringsync::state::DrainState;
use ringsync::store::{self, Store};
use ringsync::view::DrainView;
use ringsync::work::{in_words, now_ms, NodeOutcome};

/// `handover` subcommands.
#[derive(Debug, Subcommand)]
pub enum HandoverCommand {
    /// Per group: home, desired and confirmed leader, the next move and
    /// when, why a group is blocked (R-AP-1..4).
    Status,
}

/// `agent` options: one group member's follower agent with a simulated
/// service (tests, labs, and a model for a service's own integration).
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The Active-Passive group (default: the one group of the site that
    /// has the member; the `ringsync-agent@MEMBER` unit relies on it).
    #[arg(long)]
    pub group: Option<String>,
    /// This member's instance id.
    #[arg(long)]
    pub member: String,
    /// How long the simulated service takes to become leader.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub lead_delay_ms: u64,
}

pub(super) async fn status(
    config: &Arc<SiteConfig>,
    cmd: HandoverCommand,
    json: bool,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    let HandoverCommand::Status = cmd;
    let store = store::open(config).await?;
    let records = records_of(store.as_ref())?;
    let set = store.list().await?;
    let state = records.read().await?;
    let view = DrainView::build(config.clone(), &set, &[], &[]);
    let fresh = !store.freshness().borrow().is_stale();
    let st = handover::status(config, &view, &state, now_ms(), fresh);
    if json {
        write_json(out, &st)
    } else {
        write_status(&st, out)
    }
}

fn records_of(store: &dyn Store) -> Result<Arc<dyn store::HandoverStore>, CliError> {
    store.handover().ok_or_else(|| {
        CliError::Store(store::StoreError::Backend(BackendError::Unsupported(
            "this store keeps no handover records".into(),
        )))
    })
}

/// The handover records' work outcome for `ringsync status` (R-ST-3): the
/// groups each Active-Passive instance leads or is to lead.
pub(super) async fn work_outcome(
    config: &SiteConfig,
    store: &dyn Store,
    revision: u64,
) -> Option<NodeOutcome> {
    let records = store.handover()?;
    let state = records.read().await.map_err(|e| e.to_string());
    let state = state.as_ref().map(|s| s.as_ref()).map_err(Clone::clone);
    Some(handover::work::outcome(config, state, revision, now_ms()))
}

/// Starts the site's planner on this `serve` node, on `tasks` until
/// `shutdown` (it acts only when elected, R-MN-3).
pub(super) fn start_planner(
    config: &Arc<SiteConfig>,
    store: &dyn Store,
    drain: &Arc<DrainState>,
    node: &str,
    (tasks, shutdown): (&TaskTracker, &CancellationToken),
) -> Option<Arc<PlannerStats>> {
    let records = store.handover()?;
    let planner = Planner::new(config.clone(), drain.clone(), records, node, Clock::wall());
    let stats = planner.stats();
    tasks.spawn(planner.run(shutdown.clone()));
    Some(stats)
}

/// `ringsync agent`: follows the group, prints each role change.
pub(super) async fn agent(
    config: &Arc<SiteConfig>,
    args: AgentArgs,
    out: &mut (dyn Write + Send),
    shutdown: CancellationToken,
) -> Result<(), CliError> {
    let store = store::open(config).await?;
    let records = records_of(store.as_ref())?;
    let group = group_of(config, args.group.as_deref(), &args.member)?;
    let agent = Agent::new(config, records, &group, &args.member)
        .map_err(|e| CliError::Usage(e.to_string()))?;
    writeln!(
        out,
        "agent {}/{}: following the handover records (site file {})",
        group, args.member, config.hash
    )?;
    out.flush()?;
    // The store is open and the group's records read. The agent keeps no
    // node record nor metrics: its status line says which site file it
    // runs (issue 27).
    let notify = Notifier::new();
    notify.watchdog(shutdown.clone());
    notify.stopping_on(shutdown.clone(), "stopping".into());
    notify.ready(format!(
        "following the handover records of {group}/{}; site file {}",
        args.member, config.hash
    ));
    let lines = Arc::new(Mutex::new(Vec::new()));
    let mut sim = Simulated {
        name: format!("{group}/{}", args.member),
        delay: Duration::from_millis(args.lead_delay_ms),
        lines: lines.clone(),
    };
    let printer = async {
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        loop {
            tick.tick().await;
            let pending: Vec<String> =
                std::mem::take(&mut *lines.lock().unwrap_or_else(|e| e.into_inner()));
            for l in pending {
                writeln!(out, "{l}")?;
            }
            out.flush()?;
            if shutdown.is_cancelled() {
                return Ok::<(), std::io::Error>(());
            }
        }
    };
    let (_, printed) = tokio::join!(agent.run(&mut sim, shutdown.clone()), printer);
    printed?;
    Ok(())
}

/// `group` if given, else the one group of the site with `member`.
fn group_of(config: &SiteConfig, group: Option<&str>, member: &str) -> Result<String, CliError> {
    if let Some(g) = group {
        return Ok(g.to_owned());
    }
    let groups: Vec<&str> = (config.ap_groups.iter())
        .filter(|g| g.members.iter().any(|m| m == member))
        .map(|g| g.name.as_str())
        .collect();
    match groups[..] {
        [one] => Ok(one.to_owned()),
        [] => Err(CliError::Usage(format!(
            "`{member}` is a member of no Active-Passive group of the site"
        ))),
        _ => Err(CliError::Usage(format!(
            "`{member}` is a member of groups {}: say which with --group",
            groups.join(", ")
        ))),
    }
}

/// A stand-in service: leads after `delay`, says so on stdout.
struct Simulated {
    name: String,
    delay: Duration,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Simulated {
    fn say(&self, line: String) {
        self.lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(line);
    }
}

impl Member for Simulated {
    fn lead(&mut self, seq: u64) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            self.say(format!("agent {}: leading (seq {seq})", self.name));
            Ok(())
        })
    }

    fn follow(&mut self, leader: &str) -> BoxFuture<'_, ()> {
        let line = format!("agent {}: following ({leader} leads)", self.name);
        Box::pin(async move { self.say(line) })
    }
}

/// `handover status` as a table.
fn write_status(st: &HandoverStatus, out: &mut (dyn Write + Send)) -> Result<(), CliError> {
    let now = st.generated_ms;
    let p = &st.planner;
    let mut head = format!(
        "site {}, pace {} s, planner: {}",
        st.site,
        st.pace_s,
        p.acting.as_deref().unwrap_or("none elected")
    );
    if let Some(t) = p.last_move_ms {
        head.push_str(&format!(", last move {}", ringsync::time::rfc3339(t)));
    }
    match (p.next.as_str(), p.next_move_ms) {
        ("holding", _) => head.push_str(&format!(
            ", holding: {}",
            p.holding.as_deref().unwrap_or("")
        )),
        (_, Some(t)) => head.push_str(&format!(", next move {}", in_words(t, now))),
        _ => head.push_str(", nothing to move"),
    }
    head.push_str(&format!(" ({} done, {} planned)", p.done, p.planned));
    writeln!(out, "{head}")?;
    let rows: Vec<Vec<String>> = st.groups.iter().map(|g| row(g, now)).collect();
    write_table(
        out,
        &[
            "GROUP",
            "PRIORITY",
            "HOME",
            "DESIRED",
            "CONFIRMED",
            "STATE",
            "NEXT MOVE",
            "NOTE",
        ],
        &rows,
    )
}

fn ago(at_ms: u64, now_ms: u64) -> String {
    match in_words(now_ms, at_ms).strip_prefix("in ") {
        Some(d) => format!("{d} ago"),
        None => "just now".into(),
    }
}

fn row(g: &GroupStatus, now: u64) -> Vec<String> {
    let retry = g.unconfirmed.as_ref().and_then(|u| u.retry_at_ms);
    let next = match (&g.next_move, retry) {
        (Some(m), _) => format!("{} -> {} {}", m.kind, m.to, in_words(m.at_ms, now)),
        (None, Some(at)) => format!("retry -> {} {}", g.desired, in_words(at, now)),
        (None, None) => "-".to_owned(),
    };
    let note = match (&g.blocked, &g.unconfirmed) {
        (Some(why), _) => why.clone(),
        (None, Some(u)) => format!(
            "published {} (attempt {}), not confirmed",
            ago(u.since_ms, now),
            u.attempt
        ),
        (None, None) => String::new(),
    };
    vec![
        g.group.clone(),
        g.priority.to_string(),
        g.home.clone(),
        g.desired.clone(),
        g.confirmed.clone().unwrap_or_else(|| "-".into()),
        g.state.as_str().to_owned(),
        next,
        note,
    ]
}
