//! The operator's command line: `ringsync --config SITE.toml ...`.
//!
//! Parsing is clap's; every command is a function over the library, writing
//! a table (or JSON with `--json`) to the given output. Errors are typed;
//! the binary turns them into a message and a non-zero exit.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::api::AdminApi;
use crate::config::{ConfigError, SiteConfig};
use crate::fetch::Fetcher;
use crate::node::{NodeIdentity, NodeRole};
use crate::profile::{NewProfile, ProfilePatch, ProfileState};
use crate::state::DrainState;
use crate::status::{self, NodeBoard};
use crate::store::{self, StoreError};
use crate::view::DrainView;

mod handover;
mod registry;
mod text;

pub use handover::{AgentArgs, HandoverCommand};
pub use registry::{MigrateArgs, NodeCommand};

/// Drain profiles and status of a SIP site.
#[derive(Debug, Parser)]
#[command(name = "ringsync", version, about)]
pub struct Cli {
    /// The site file.
    #[arg(long, short = 'c', value_name = "SITE.toml")]
    pub config: PathBuf,
    /// Print JSON instead of tables (for scripts).
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Manage deservice (drain) profiles.
    #[command(subcommand)]
    Profile(ProfileCommand),
    /// Show every instance: zone, state, the work every node reports for
    /// it summed, why it is unknown, and when it should be gone (R-ST-1, R-ST-3).
    Status(StatusArgs),
    /// Serve the admin HTTP API.
    Serve(ServeArgs),
    /// Copy the site's profiles from one store to another (idempotent).
    Migrate(MigrateArgs),
    /// The site's node registry (etcd store).
    #[command(subcommand)]
    Node(NodeCommand),
    /// The Active-Passive handover: leaders moved off draining servers,
    /// one group per pace, and home again (R-AP-1..4).
    #[command(subcommand)]
    Handover(HandoverCommand),
    /// Run one group member's follower agent with a simulated service: it
    /// leads when the planner wants it to and confirms.
    Agent(AgentArgs),
}

/// `profile` subcommands. Profiles are named by id or name.
#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// Create a profile (inactive).
    Create {
        /// Name, unique on the site.
        #[arg(long)]
        name: String,
        /// Free text.
        #[arg(long, default_value = "")]
        description: String,
        /// A server to drain (repeat for several).
        #[arg(long = "server", required = true, value_name = "SERVER")]
        servers: Vec<String>,
    },
    /// Change a profile's name, description or servers.
    Update {
        /// Id or name.
        profile: String,
        /// New name.
        #[arg(long)]
        name: Option<String>,
        /// New description.
        #[arg(long)]
        description: Option<String>,
        /// New server list (repeat; replaces the old list).
        #[arg(long = "server", value_name = "SERVER")]
        servers: Vec<String>,
    },
    /// Delete a profile.
    Delete {
        /// Id or name.
        profile: String,
    },
    /// Apply a profile's drain.
    Activate {
        /// Id or name.
        profile: String,
    },
    /// Lift a profile's drain.
    Deactivate {
        /// Id or name.
        profile: String,
    },
    /// List profiles.
    List,
    /// Show one profile.
    Show {
        /// Id or name.
        profile: String,
    },
}

/// Where the nodes that report work are asked.
#[derive(Debug, Args)]
pub struct NodeArgs {
    /// Where to ask the gate for its work report (default: `admin.gate_bind`).
    #[arg(long, value_name = "ADDR")]
    pub gate: Option<SocketAddr>,
    /// Where to ask media-ctl for its work report (default: `admin.media_bind`).
    #[arg(long, value_name = "ADDR")]
    pub media: Option<SocketAddr>,
}

/// `status` options.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The nodes to ask.
    #[command(flatten)]
    pub nodes: NodeArgs,
}

/// `serve` options.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (default: `admin.bind`).
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<SocketAddr>,
    /// The nodes to poll, once a second.
    #[command(flatten)]
    pub nodes: NodeArgs,
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The site file is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The admin address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Writing output or serving failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Bad arguments clap could not catch.
    #[error("{0}")]
    Usage(String),
}

/// Runs a parsed command line, writing results to `out`. `serve` runs until
/// `shutdown`.
pub async fn run(
    cli: Cli,
    out: &mut (dyn Write + Send),
    shutdown: CancellationToken,
) -> Result<(), CliError> {
    let config = Arc::new(SiteConfig::load(&cli.config)?);
    match cli.command {
        Command::Profile(cmd) => profile(&config, cmd, cli.json, out).await,
        Command::Status(args) => status(&config, args, cli.json, out).await,
        Command::Serve(args) => serve(config, args, out, shutdown).await,
        Command::Migrate(args) => registry::run_migrate(&config, args, out).await,
        Command::Node(cmd) => registry::node(&config, cmd, cli.json, out).await,
        Command::Handover(cmd) => handover::status(&config, cmd, cli.json, out).await,
        Command::Agent(args) => handover::agent(&config, args, out, shutdown).await,
    }
}

async fn profile(
    config: &SiteConfig,
    cmd: ProfileCommand,
    json: bool,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    let store = store::open(config).await?;
    let (verb, p) = match cmd {
        ProfileCommand::Create {
            name,
            description,
            servers,
        } => {
            let new = NewProfile {
                name,
                description,
                servers,
                state: ProfileState::Inactive,
            };
            ("created", store.create(new).await?)
        }
        ProfileCommand::Update {
            profile,
            name,
            description,
            servers,
        } => {
            if name.is_none() && description.is_none() && servers.is_empty() {
                return Err(CliError::Usage(
                    "nothing to update: give --name, --description or --server".into(),
                ));
            }
            let patch = ProfilePatch {
                name,
                description,
                servers: (!servers.is_empty()).then_some(servers),
            };
            ("updated", store.update(&profile, patch).await?)
        }
        ProfileCommand::Delete { profile } => ("deleted", store.delete(&profile).await?),
        ProfileCommand::Activate { profile } => (
            "activated",
            store.set_state(&profile, ProfileState::Active).await?,
        ),
        ProfileCommand::Deactivate { profile } => (
            "deactivated",
            store.set_state(&profile, ProfileState::Inactive).await?,
        ),
        ProfileCommand::List => {
            let set = store.list().await?;
            return if json {
                write_json(out, &*set)
            } else {
                text::write_list(&set, out)
            };
        }
        ProfileCommand::Show { profile } => {
            let set = store.list().await?;
            let p = set
                .find(&profile)
                .cloned()
                .ok_or(StoreError::NotFound { id: profile })?;
            ("", p)
        }
    };
    if json {
        write_json(out, &p)
    } else if verb.is_empty() {
        text::write_profile(&p, out)
    } else {
        writeln!(out, "{verb} profile {} ({}): {}", p.id, p.name, p.state)?;
        Ok(())
    }
}

fn write_json<T: Serialize>(out: &mut (dyn Write + Send), v: &T) -> Result<(), CliError> {
    serde_json::to_writer_pretty(&mut *out, v).map_err(std::io::Error::from)?;
    writeln!(out)?;
    Ok(())
}

async fn status(
    config: &Arc<SiteConfig>,
    args: StatusArgs,
    json: bool,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    let store = store::open(config).await?;
    let set = store.list().await?;
    let view = DrainView::build(config.clone(), &set, &[], &[]);
    // Several nodes (etcd): the reports they published; else ask them.
    let round = match crate::sitewide::round(store.as_ref()).await? {
        Some(round) => round,
        None => {
            let nodes = status::local_nodes(config, args.nodes.gate, args.nodes.media);
            status::ask_all(&Fetcher::default(), &config.site.name, &nodes).await
        }
    };
    let mut round = round;
    // R-ST-3: Active-Passive work is the groups an instance leads.
    if let Some(o) = handover::work_outcome(config, store.as_ref(), set.revision).await {
        round.outcomes.push(o);
    }
    let mut st = round.status(&view);
    st.store = Some(store.freshness().borrow().clone());
    if json {
        write_json(out, &st)
    } else {
        text::write_status(&st, out)
    }
}

async fn serve(
    config: Arc<SiteConfig>,
    args: ServeArgs,
    out: &mut (dyn Write + Send),
    shutdown: CancellationToken,
) -> Result<(), CliError> {
    let store = store::open(&config).await?;
    let state = DrainState::new(config.clone());
    // What the store opened with (R-MN-2: possibly the view cache), before
    // anything is served or published.
    state.set_profiles(store.watch().borrow().clone());
    state.set_freshness(store.freshness().borrow().clone());
    let follower = state.follow(store.clone(), shutdown.clone());
    let addr = args.bind.unwrap_or(config.admin.bind);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| CliError::Bind { addr, source })?;
    let local = listener.local_addr()?;
    writeln!(
        out,
        "ringsync: admin API for site {} on http://{local}",
        config.site.name
    )?;
    out.flush()?;
    tracing::info!(%local, site = %config.site.name, "serving admin API");

    // R-ST-1: the nodes' work: asked once a second, or on etcd read from
    // the node registry every 5 s (an idle serve stays under 1 request/s).
    let (board, every) = if store.keeps_nodes() {
        let board = NodeBoard::from_registry(config.site.name.clone(), store.clone());
        (board, Duration::from_secs(5))
    } else {
        let nodes = status::local_nodes(&config, args.nodes.gate, args.nodes.media);
        let board = NodeBoard::new(config.site.name.clone(), nodes, Fetcher::default());
        (board, Duration::from_secs(1))
    };
    let poller = tokio::spawn(board.clone().run(every, shutdown.clone()));
    let identity = NodeIdentity {
        node: identity_node(local),
        role: NodeRole::Ringsync,
        address: local.to_string(),
        started_ms: crate::work::now_ms(),
    };
    let publisher = crate::publish::spawn(
        store.clone(),
        state.clone(),
        identity,
        || None,
        shutdown.clone(),
    );
    // The Active-Passive planner: one per site acts (R-MN-3).
    let planner = handover::start_planner(
        &config,
        store.as_ref(),
        &state,
        &identity_node(local),
        &shutdown,
    );
    let api = AdminApi::new(store, state, board);
    if let Some((stats, _)) = &planner {
        api.set_planner(identity_node(local), stats.clone());
    }
    let result = crate::api::serve(listener, api, shutdown.clone()).await;
    shutdown.cancel();
    let _ = follower.await;
    let _ = poller.await;
    let _ = publisher.await;
    if let Some((_, task)) = planner {
        let _ = task.await;
    }
    result.map_err(CliError::Io)
}

/// A serve node's name: its admin address.
fn identity_node(local: SocketAddr) -> String {
    local.to_string()
}
