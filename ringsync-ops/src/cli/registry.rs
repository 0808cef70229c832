//! The commands for a site on several nodes: `migrate` between stores and
//! the node registry (`node list`, `node forget`).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Subcommand};

use super::{text, write_json, CliError};
use crate::migrate;
use ringsync::config::SiteConfig;
use ringsync::store::{self, Imported};

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

pub(super) async fn run_migrate(
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
        Imported::Copied { profiles } => writeln!(
            out,
            "copied {profiles} profile(s) at revision {} from {} to {}",
            m.revision, m.from, m.to
        )?,
        Imported::AlreadyThere { profiles } => writeln!(
            out,
            "{} already holds these {profiles} profile(s); nothing written",
            m.to
        )?,
    }
    Ok(())
}

pub(super) async fn node(
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
            let now = ringsync::work::now_ms();
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
            text::write_table(out, &["NODE", "ROLE", "ADDRESS", "STATE"], &rows)
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
