//! The operator's command line: `ringsync --config SITE.toml ...` on the
//! store itself, or `ringsync --api URL --token-file FILE ...` through a
//! remote `ringsync serve`.
//!
//! Parsing is clap's; every command is a function over a [`site::Site`]
//! (either mode), writing a table (or JSON with `--json`) to the given
//! output, so both modes print the same. Errors are typed; the binary turns
//! them into a message and a non-zero exit.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::api::tls::TlsError;
use crate::auth::TokenError;
use ringsync::config::{ConfigError, SiteConfig};
use ringsync::profile::{NewProfile, ProfilePatch, ProfileState};
use ringsync::store::{AuditQuery, Op, StoreError};
use ringsync::view::InstanceState;

mod audit_text;
mod backup;
mod bans;
mod handover;
mod pipe;
mod registry;
mod remote;
mod serve;
mod site;
mod text;
mod wait;

pub use backup::{BackupArgs, RestoreArgs};
pub use bans::{BansCommand, GateArg};
pub use handover::{AgentArgs, HandoverCommand};
pub use registry::{MigrateArgs, NodeCommand};
pub use serve::{TokenAddArgs, TokenCommand, TokenFileArgs, TokenRemoveArgs};
use site::Site;
pub use wait::{WaitArgs, WaitCommand, EXIT_NOT_DRAINING, EXIT_TIMEOUT};

/// Drain profiles and status of a SIP site.
#[derive(Debug, Parser)]
#[command(name = "ringsync", version, about)]
pub struct Cli {
    /// The site file (not needed with `--api`). Default: `SIP_GATE_CONFIG`,
    /// else /etc/sip-gate/site.toml, the file the package installs.
    #[arg(long, short = 'c', env = "SIP_GATE_CONFIG", value_name = "SITE.toml")]
    pub config: Option<PathBuf>,
    /// Print JSON instead of tables (for scripts).
    #[arg(long, global = true)]
    pub json: bool,
    /// Act through the admin API of a `ringsync serve` at this URL
    /// (`https://drain.example:8443`) instead of opening the store.
    #[arg(long, global = true, env = "RINGSYNC_API", value_name = "URL")]
    pub api: Option<String>,
    /// With `--api`: the file holding your token (as `token add` printed it).
    #[arg(long, global = true, env = "RINGSYNC_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// With an `https://` API: trust this CA (PEM) instead of the system's.
    #[arg(long, global = true, env = "RINGSYNC_CA_FILE", value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The site file when neither `--config` nor `SIP_GATE_CONFIG` names one:
/// where the package installs it.
pub const DEFAULT_CONFIG: &str = "/etc/sip-gate/site.toml";

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Manage deservice (drain) profiles.
    #[command(subcommand)]
    Profile(ProfileCommand),
    /// Show every instance: zone, state, the work every node reports for
    /// it summed, why it is unknown, and when it should be gone (R-ST-1, R-ST-3).
    Status(StatusArgs),
    /// Wait until a state is reached: `wait drained --server S` exits 0
    /// once every instance of the servers is drained (R-ST-1).
    #[command(subcommand)]
    Wait(WaitCommand),
    /// Serve the admin HTTP API.
    #[command(after_long_help = "Signals:
SIGTERM, SIGINT: stop: requests in progress finish, then exit.

The tokens file ([admin] tokens) is read again whenever its content, mode or owner changes.")]
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
    /// The audit log: every change asked for, made or refused, oldest first.
    Audit(AuditArgs),
    /// Tokens of the admin API.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Write the site's profiles, handover records and audit log to one
    /// file (versioned, with the site name and a checksum).
    Backup(BackupArgs),
    /// Restore a backup into the site's store (either kind): checked whole
    /// before anything is written, refused for another site unless
    /// `--force`, and audited.
    Restore(RestoreArgs),
    /// The auth bans of a gate (R-SEC-3): `bans list`, `bans lift IP`, on
    /// the gate's admin port (`--gate ADDR`, default `admin.gate_bind`).
    #[command(subcommand)]
    Bans(BansCommand),
}

/// `audit` options.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only records after this seq (the `next` a page ends with).
    #[arg(long, value_name = "SEQ")]
    pub after: Option<u64>,
    /// Only records made at or after this time (Unix ms).
    #[arg(long, value_name = "MS")]
    pub since_ms: Option<u64>,
    /// At most this many records (default 100, at most 1000).
    #[arg(long)]
    pub limit: Option<usize>,
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
        /// Refuse unless the profile is still at this revision.
        #[arg(long, value_name = "N")]
        revision: Option<u64>,
    },
    /// Delete a profile.
    Delete {
        /// Id or name.
        profile: String,
        /// Refuse unless the profile is still at this revision.
        #[arg(long, value_name = "N")]
        revision: Option<u64>,
    },
    /// Apply a profile's drain.
    Activate {
        /// Id or name.
        profile: String,
        /// Refuse unless the profile is still at this revision.
        #[arg(long, value_name = "N")]
        revision: Option<u64>,
        /// Change nothing: show which instances would drain, how each
        /// service's share of new work would move, and what would be left
        /// the last of its service.
        #[arg(long)]
        dry_run: bool,
    },
    /// Lift a profile's drain.
    Deactivate {
        /// Id or name.
        profile: String,
        /// Refuse unless the profile is still at this revision.
        #[arg(long, value_name = "N")]
        revision: Option<u64>,
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
    /// Only these instances (ids). Asked about by name, an instance that is
    /// `unknown` makes the command exit with [`EXIT_UNKNOWN`] (R-ST-4).
    #[arg(value_name = "INSTANCE")]
    pub instances: Vec<String>,
}

/// The exit code of a `status` that names instances when any of them is
/// `unknown` (R-ST-4): the table or JSON is printed all the same.
pub const EXIT_UNKNOWN: u8 = 3;

/// `serve` options.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (default: `admin.bind`).
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<SocketAddr>,
    /// The nodes to poll, once a second.
    #[command(flatten)]
    pub nodes: NodeArgs,
    /// Serve on a non-loopback address without TLS and tokens anyway.
    #[arg(long)]
    pub insecure: bool,
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
    /// The remote API refused or failed: its message, as the store gave it.
    #[error("{message}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The API's error message.
        message: String,
    },
    /// The remote API could not be asked.
    #[error("{0}")]
    Remote(String),
    /// The tokens file is wrong.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// The TLS certificate or key is wrong.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The admin address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// `serve`'s node runtime could not start (its signals or recorder).
    #[error(transparent)]
    Runtime(#[from] ringsync::runtime::RuntimeError),
    /// Writing output or serving failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Bad arguments clap could not catch.
    #[error("{0}")]
    Usage(String),
    /// `status` was asked about these instances by name and nobody can say
    /// how they are (R-ST-4); the binary exits with [`EXIT_UNKNOWN`].
    #[error("state unknown (no node answered for it, its health is not known): {}", .0.join(", "))]
    Unknown(Vec<String>),
    /// `wait` reached its deadline with these instances not there yet; the
    /// binary exits with [`EXIT_TIMEOUT`].
    #[error("still not drained after {}s: {}", .after.as_secs(), .left.join(", "))]
    Timeout {
        /// The `--timeout` given.
        after: std::time::Duration,
        /// The instances not drained.
        left: Vec<String>,
    },
    /// `wait drained` named servers with instances outside the drain zone
    /// (no active profile drains them); the binary exits with
    /// [`EXIT_NOT_DRAINING`].
    #[error("not draining (no active profile drains their server): {}", .0.join(", "))]
    NotDraining(Vec<String>),
}

impl CliError {
    /// The process exit code for this error: [`EXIT_UNKNOWN`] for
    /// [`CliError::Unknown`], 1 for every other failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Unknown(_) => EXIT_UNKNOWN,
            CliError::Timeout { .. } => EXIT_TIMEOUT,
            CliError::NotDraining(_) => EXIT_NOT_DRAINING,
            _ => 1,
        }
    }
}

/// Runs a parsed command line, writing results to `out`. `serve` runs until
/// `shutdown`. A reader that went away (`ringsync status | head -1`: the
/// output is a pipe closed early) ends the command quietly and successfully,
/// as a shell filter does, instead of reporting the broken pipe.
pub async fn run(
    cli: Cli,
    out: &mut (dyn Write + Send),
    shutdown: CancellationToken,
) -> Result<(), CliError> {
    let mut out = pipe::Output::new(out);
    let result = run_command(cli, &mut out, shutdown).await;
    match result {
        Err(_) if out.closed() => Ok(()),
        r => r,
    }
}

async fn run_command(
    cli: Cli,
    out: &mut (dyn Write + Send),
    shutdown: CancellationToken,
) -> Result<(), CliError> {
    if let Some(url) = &cli.api {
        let remote = remote::Remote::new(url, cli.token_file.as_deref(), cli.ca_file.as_deref())?;
        let site = Site::Remote(remote);
        return match cli.command {
            Command::Profile(cmd) => profile(&site, cmd, cli.json, out).await,
            Command::Status(args) => status(&site, args, cli.json, out).await,
            Command::Audit(args) => audit(&site, args, cli.json, out).await,
            Command::Wait(cmd) => wait::run(&site, cmd, out, shutdown).await,
            _ => Err(CliError::Usage(
                "with --api only `profile`, `status`, `wait` and `audit` work; run `serve`, `migrate`, \
                 `node`, `token`, `handover`, `agent`, `backup` and `restore` where the site file and its store are"
                    .into(),
            )),
        };
    }
    // The flag, then SIP_GATE_CONFIG (both clap's), then the installed file.
    let path = cli.config.clone().or_else(|| {
        let installed = std::path::Path::new(DEFAULT_CONFIG);
        installed.exists().then(|| installed.to_owned())
    });
    let Some(path) = &path else {
        match cli.command {
            Command::Token(cmd) => return serve::token(None, cmd, out),
            Command::Bans(cmd) => return bans::run(None, cmd, cli.json, out).await,
            _ => {}
        }
        return Err(CliError::Usage(format!(
            "no site file: {DEFAULT_CONFIG} does not exist; give --config SITE.toml (or \
                 SIP_GATE_CONFIG), or --api URL to act through `ringsync serve`"
        )));
    };
    let config = Arc::new(SiteConfig::load(path)?);
    match cli.command {
        Command::Profile(cmd) => profile(&Site::local(config).await?, cmd, cli.json, out).await,
        Command::Status(args) => status(&Site::local(config).await?, args, cli.json, out).await,
        Command::Audit(args) => audit(&Site::local(config).await?, args, cli.json, out).await,
        Command::Wait(cmd) => wait::run(&Site::local(config).await?, cmd, out, shutdown).await,
        Command::Serve(args) => serve::serve(config, args, out, shutdown).await,
        Command::Migrate(args) => registry::run_migrate(&config, args, out).await,
        Command::Node(cmd) => registry::node(&config, cmd, cli.json, out).await,
        Command::Handover(cmd) => handover::status(&config, cmd, cli.json, out).await,
        Command::Agent(args) => handover::agent(&config, args, out, shutdown).await,
        Command::Token(cmd) => serve::token(Some(&config), cmd, out),
        Command::Backup(args) => backup::backup(&config, args, out).await,
        Command::Restore(args) => backup::restore(&config, args, out).await,
        Command::Bans(cmd) => bans::run(Some(&config), cmd, cli.json, out).await,
    }
}

/// The change a profile command asks for, and the revision it names.
fn change_of(cmd: ProfileCommand) -> Result<(Op, Option<u64>), CliError> {
    Ok(match cmd {
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
            (Op::Create(new), None)
        }
        ProfileCommand::Update {
            profile,
            name,
            description,
            servers,
            revision,
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
            (Op::Update { id: profile, patch }, revision)
        }
        ProfileCommand::Delete { profile, revision } => (Op::Delete { id: profile }, revision),
        ProfileCommand::Activate {
            profile, revision, ..
        } => {
            let state = ProfileState::Active;
            (Op::SetState { id: profile, state }, revision)
        }
        ProfileCommand::Deactivate { profile, revision } => {
            let state = ProfileState::Inactive;
            (Op::SetState { id: profile, state }, revision)
        }
        ProfileCommand::List | ProfileCommand::Show { .. } => {
            return Err(CliError::Usage("not a change".into()))
        }
    })
}

async fn profile(
    site: &Site,
    cmd: ProfileCommand,
    json: bool,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    match cmd {
        ProfileCommand::List => {
            let set = site.list().await?;
            if json {
                write_json(out, &set)
            } else {
                text::write_list(&set, out)
            }
        }
        ProfileCommand::Show { profile } => {
            let p = site.show(&profile).await?;
            if json {
                write_json(out, &p)
            } else {
                text::write_profile(&p, out)
            }
        }
        ProfileCommand::Activate {
            profile,
            dry_run: true,
            ..
        } => {
            let plan = site.plan(&profile).await?;
            if json {
                write_json(out, &plan)
            } else {
                audit_text::write_plan(&plan, out)
            }
        }
        cmd => {
            let (op, expect) = change_of(cmd)?;
            let verb = match &op {
                Op::Create(_) => "created",
                Op::Update { .. } => "updated",
                Op::Delete { .. } => "deleted",
                Op::SetState {
                    state: ProfileState::Active,
                    ..
                } => "activated",
                Op::SetState { .. } => "deactivated",
            };
            let (p, changed) = site.write(op, expect).await?;
            if json {
                return write_json(
                    out,
                    &ChangeAnswer {
                        profile: &p,
                        changed,
                    },
                );
            }
            // A change that found the profile already as asked kept its
            // revision and wrote nothing: say so, not "activated".
            let verb = if changed { verb } else { "unchanged" };
            writeln!(
                out,
                "{verb} profile {} ({}): {}, revision {}",
                p.id, p.name, p.state, p.revision
            )?;
            Ok(())
        }
    }
}

/// `--json` of a change: the profile's fields and `changed` (false when
/// it was already as asked and nothing was written).
#[derive(Serialize)]
struct ChangeAnswer<'a> {
    #[serde(flatten)]
    profile: &'a ringsync::profile::Profile,
    changed: bool,
}

fn write_json<T: Serialize>(out: &mut (dyn Write + Send), v: &T) -> Result<(), CliError> {
    serde_json::to_writer_pretty(&mut *out, v).map_err(std::io::Error::from)?;
    writeln!(out)?;
    Ok(())
}

async fn status(
    site: &Site,
    args: StatusArgs,
    json: bool,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    let mut st = site.status(&args.nodes).await?;
    if !args.instances.is_empty() {
        if let Some(bad) = args
            .instances
            .iter()
            .find(|id| !st.instances.iter().any(|i| i.id == **id))
        {
            return Err(CliError::Usage(format!(
                "no instance `{bad}` in site `{}`",
                st.site
            )));
        }
        st.instances.retain(|i| args.instances.contains(&i.id));
    }
    if json {
        write_json(out, &st)?;
    } else {
        text::write_status(&st, out)?;
    }
    // R-ST-4: asked by name, an instance nobody can report on is not a
    // success a script may read as "fine".
    let unknown: Vec<String> = st
        .instances
        .iter()
        .filter(|i| !args.instances.is_empty() && i.state == InstanceState::Unknown)
        .map(|i| i.id.clone())
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(CliError::Unknown(unknown))
    }
}

async fn audit(
    site: &Site,
    args: AuditArgs,
    json: bool,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    let q = AuditQuery {
        after: args.after,
        since_ms: args.since_ms,
        limit: args.limit,
    };
    let page = site.audit(&q).await?;
    if json {
        write_json(out, &page)
    } else {
        audit_text::write_audit(&page, out)
    }
}
