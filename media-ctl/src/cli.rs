//! The command line of the `media-ctl` binary, here so the man page and
//! the shell completions are made from the same definition (`xtask`).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Drain-aware mg controller in front of rtpengine media gateways.
/// The signals section of `--help` and the man page.
const SIGNALS: &str = "Signals:
SIGTERM, SIGINT: stop: take no new calls, then exit (systemctl stop).
SIGHUP: reload the site file's [capture] (systemctl reload media-ctl); the other sections apply at the next start.

Files:
/etc/sip-gate/site.toml: the site file (--config, SIP_GATE_CONFIG); see sip-gate.toml(5).";

#[derive(Parser, Debug)]
#[command(version, about, after_long_help = SIGNALS)]
pub struct Args {
    /// Site configuration file. Default: `SIP_GATE_CONFIG`, else
    /// /etc/sip-gate/site.toml, the file the package installs.
    #[arg(
        long,
        short,
        env = "SIP_GATE_CONFIG",
        default_value = "/etc/sip-gate/site.toml"
    )]
    pub config: PathBuf,
    /// Validate the configuration and exit (non-zero with the error).
    #[arg(long)]
    pub check: bool,
    /// Admin HTTP address; overrides `admin.media_bind`.
    #[arg(long)]
    pub admin: Option<SocketAddr>,
    /// ng address (UDP); overrides `media.ng_bind`.
    #[arg(long)]
    pub ng: Option<SocketAddr>,
    /// This node's name in work reports (default: its admin address).
    #[arg(long)]
    pub node: Option<String>,
    /// How long a graceful stop may take.
    #[arg(long, default_value_t = 5)]
    pub drain_deadline_s: u64,
    /// Log lines as text (for people) or JSON (one object a line).
    #[arg(long, value_enum, default_value_t = ringsync::logs::LogFormat::Text)]
    pub log_format: ringsync::logs::LogFormat,
    #[command(subcommand)]
    pub command: Option<Cmd>,
}

/// What else than running the controller.
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Print the status of the media-ctl running for this site.
    Status {
        /// Print the JSON as served.
        #[arg(long)]
        json: bool,
    },
}
