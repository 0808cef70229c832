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
use crate::gate::{self, GateError};
use crate::migrate;
use crate::node::{NodeIdentity, NodeRole};
use crate::profile::{NewProfile, Profile, ProfilePatch, ProfileSet, ProfileState};
use crate::state::DrainState;
use crate::store::{self, StoreError};
use crate::view::InstanceView;

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
    /// Show every instance: zone, state and work (R-ST-1).
    Status(StatusArgs),
    /// Serve the admin HTTP API.
    Serve(ServeArgs),
    /// Copy the site's profiles from one store to another (idempotent).
    Migrate(MigrateArgs),
    /// The site's node registry (etcd store).
    #[command(subcommand)]
    Node(NodeCommand),
}

/// `migrate` options.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The store to copy from.
    #[arg(long, value_enum)]
    pub from: migrate::Kind,
    /// The store to copy to.
    #[arg(long, value_enum)]
    pub to: migrate::Kind,
    /// The embedded file, when the site file names etcd (default
    /// `<site>.profiles.json` next to the site file).
    #[arg(long, value_name = "FILE")]
    pub path: Option<PathBuf>,
    /// An etcd client URL, when the site file names the embedded store (repeat for several).
    #[arg(long = "endpoint", value_name = "URL")]
    pub endpoints: Vec<String>,
    /// The etcd key prefix (default: the site file's, or `/drain/<site>`).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Replace a target that already holds other profiles.
    #[arg(long)]
    pub overwrite: bool,
}

/// `node` subcommands.
#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// List the registered nodes, live or not.
    List,
    /// Remove a node that is gone for good (its work no longer counts).
    Forget {
        /// The node's name.
        node: String,
    },
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

/// `status` options.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Where to ask the gate for health and work (default: `admin.gate_bind`).
    #[arg(long, value_name = "ADDR")]
    pub gate: Option<SocketAddr>,
}

/// `serve` options.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (default: `admin.bind`).
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<SocketAddr>,
    /// Where to poll the gate for health and work (default: `admin.gate_bind`).
    #[arg(long, value_name = "ADDR")]
    pub gate: Option<SocketAddr>,
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
        Command::Migrate(args) => run_migrate(&config, args, out).await,
        Command::Node(cmd) => node(&config, cmd, cli.json, out).await,
    }
}

async fn run_migrate(
    config: &Arc<SiteConfig>,
    args: MigrateArgs,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    let at = migrate::Locations {
        path: args.path,
        endpoints: args.endpoints,
        prefix: args.prefix,
    };
    let m = migrate::run(config, args.from, args.to, &at, args.overwrite).await?;
    match m.outcome {
        store::Imported::Copied { profiles } => writeln!(
            out,
            "copied {profiles} profile(s) at revision {} from {} to {}",
            m.revision, m.from, m.to
        )?,
        store::Imported::AlreadyThere { profiles } => writeln!(
            out,
            "{} already holds these {profiles} profile(s); nothing written",
            m.to
        )?,
    }
    Ok(())
}

async fn node(
    config: &SiteConfig,
    cmd: NodeCommand,
    json: bool,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    let store = store::open(config).await?;
    let no_registry = || {
        CliError::Usage(
            "this site's store keeps no node registry (only the etcd store does)".into(),
        )
    };
    match cmd {
        NodeCommand::List => {
            let nodes = store.nodes().await?.ok_or_else(no_registry)?;
            if json {
                return write_json(out, &nodes);
            }
            let now = crate::work::now_ms();
            let rows: Vec<Vec<String>> = nodes
                .iter()
                .map(|n| {
                    vec![
                        n.id.node.clone(),
                        n.id.role.to_string(),
                        n.id.address.clone(),
                        n.describe(now),
                    ]
                })
                .collect();
            write_table(out, &["NODE", "ROLE", "ADDRESS", "STATE"], &rows)
        }
        NodeCommand::Forget { node } => {
            if !store.keeps_nodes() {
                return Err(no_registry());
            }
            if store.forget_node(&node).await? {
                writeln!(out, "forgot node {node}")?;
                Ok(())
            } else {
                Err(CliError::Usage(format!(
                    "no node named `{node}` is registered"
                )))
            }
        }
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
            return write_list(&set, json, out);
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
        write_profile(&p, out)
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

fn write_profile(p: &Profile, out: &mut (dyn Write + Send)) -> Result<(), CliError> {
    writeln!(out, "id:          {}", p.id)?;
    writeln!(out, "name:        {}", p.name)?;
    writeln!(out, "state:       {}", p.state)?;
    writeln!(out, "servers:     {}", p.servers.join(", "))?;
    writeln!(out, "description: {}", p.description)?;
    Ok(())
}

fn write_list(set: &ProfileSet, json: bool, out: &mut (dyn Write + Send)) -> Result<(), CliError> {
    if json {
        return write_json(out, set);
    }
    let rows: Vec<Vec<String>> = set
        .profiles
        .iter()
        .map(|p| {
            vec![
                p.id.clone(),
                p.name.clone(),
                p.state.to_string(),
                p.servers.join(","),
                p.description.lines().next().unwrap_or_default().to_owned(),
            ]
        })
        .collect();
    write_table(
        out,
        &["ID", "NAME", "STATE", "SERVERS", "DESCRIPTION"],
        &rows,
    )?;
    writeln!(
        out,
        "{} profile(s), {} active, revision {}",
        set.profiles.len(),
        set.active_count(),
        set.revision
    )?;
    Ok(())
}

/// `status --json` output.
#[derive(Debug, Serialize)]
struct StatusJson<'a> {
    site: &'a str,
    revision: u64,
    drain_zone: Vec<String>,
    gate: GateJson,
    instances: Vec<InstanceView>,
}

#[derive(Debug, Serialize)]
struct GateJson {
    addr: SocketAddr,
    reachable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

async fn status(
    config: &Arc<SiteConfig>,
    args: StatusArgs,
    json: bool,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    let store = store::open(config).await?;
    let set = store.list().await?;
    let state = DrainState::new(config.clone());
    state.set_profiles(set.clone());
    // Several nodes (etcd): their registered reports, summed (R-ST-3).
    if let Some(site) = crate::sitewide::read(store.as_ref(), &state, &set).await? {
        return if json {
            write_json(out, &site)
        } else {
            crate::sitewide::write_text(&site, out).map_err(CliError::Io)
        };
    }
    let addr = args.gate.unwrap_or(config.admin.gate_bind);
    let gate_err: Option<GateError> = match gate::fetch(addr, gate::DEFAULT_TIMEOUT).await {
        Ok(report) => {
            gate::apply(&report, &state);
            None
        }
        Err(e) => Some(e),
    };
    let view = state.view();
    let instances = state.report();
    if json {
        return write_json(
            out,
            &StatusJson {
                site: &config.site.name,
                revision: set.revision,
                drain_zone: view.drain_zone().iter().cloned().collect(),
                gate: GateJson {
                    addr,
                    reachable: gate_err.is_none(),
                    error: gate_err.as_ref().map(ToString::to_string),
                },
                instances,
            },
        );
    }
    let zone: Vec<&str> = view.drain_zone().iter().map(String::as_str).collect();
    writeln!(
        out,
        "site {}, profile revision {}, drain zone: {}",
        config.site.name,
        set.revision,
        if zone.is_empty() {
            "(empty)".into()
        } else {
            zone.join(", ")
        }
    )?;
    let rows: Vec<Vec<String>> = instances
        .iter()
        .map(|i| {
            vec![
                i.id.clone(),
                i.service.to_string(),
                i.server.clone(),
                i.zone.as_str().to_owned(),
                i.state.to_string(),
                i.work.map_or_else(|| "-".to_owned(), |w| w.to_string()),
            ]
        })
        .collect();
    write_table(
        out,
        &["INSTANCE", "SERVICE", "SERVER", "ZONE", "STATE", "WORK"],
        &rows,
    )?;
    if let Some(e) = gate_err {
        writeln!(out, "note: {e}; health and work unknown (shown as -)")?;
    }
    Ok(())
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

    let poller = if store.keeps_nodes() {
        tokio::spawn(poll_registry(
            store.clone(),
            state.clone(),
            shutdown.clone(),
        ))
    } else {
        let gate_addr = args.gate.unwrap_or(config.admin.gate_bind);
        tokio::spawn(poll_gate(gate_addr, state.clone(), shutdown.clone()))
    };
    let identity = NodeIdentity {
        node: local.to_string(),
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
    let api = AdminApi::new(store, state);
    let result = crate::api::serve(listener, api, shutdown.clone()).await;
    shutdown.cancel();
    let _ = follower.await;
    let _ = poller.await;
    let _ = publisher.await;
    result.map_err(CliError::Io)
}

/// Feeds the gate's health and work into the state once a second (R-ST-1).
async fn poll_gate(addr: SocketAddr, state: Arc<DrainState>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut was_ok = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let r = gate::fetch(addr, gate::DEFAULT_TIMEOUT).await;
        let ok = r.is_ok();
        match r {
            Ok(report) => gate::apply(&report, &state),
            Err(e) if was_ok != Some(false) => {
                tracing::warn!(error = %e, "gate not reachable; health and work unknown")
            }
            Err(_) => {}
        }
        was_ok = Some(ok);
    }
}

/// On a site with a node registry: the site-wide health and work of every
/// instance, summed over the nodes' reports, every [`REGISTRY_POLL`] (R-ST-1).
async fn poll_registry(
    store: Arc<dyn store::Store>,
    state: Arc<DrainState>,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(REGISTRY_POLL);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Ok(Some(nodes)) = store.nodes().await else {
            continue;
        };
        let view = state.view();
        let outcomes = crate::node::outcomes(&nodes, crate::work::now_ms());
        for (i, st) in crate::work::sum(&view, &outcomes).iter().enumerate() {
            state.set_health(i, st.health);
            if let Some(w) = st.work {
                state.set_work(i, w);
            }
        }
    }
}

/// How often `serve` reads the node registry: slow enough that an idle
/// `ringsync serve` stays well under one request a second on etcd.
const REGISTRY_POLL: Duration = Duration::from_secs(5);

fn write_table(
    out: &mut (dyn Write + Send),
    header: &[&str],
    rows: &[Vec<String>],
) -> Result<(), CliError> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        s.trim_end().to_owned()
    };
    writeln!(out, "{}", line(header.to_vec()))?;
    for row in rows {
        writeln!(out, "{}", line(row.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}
