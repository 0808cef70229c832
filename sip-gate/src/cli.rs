//! The command line of the `sip-gate` binary, here so the man page and the
//! shell completions are made from the same definition (`xtask`).

use std::path::PathBuf;

use clap::Parser;

/// Drain-aware inline SIP proxy.
#[derive(Parser, Debug)]
#[command(version, about)]
pub struct Args {
    /// Site configuration file.
    #[arg(long, short)]
    pub config: PathBuf,
    /// Validate the configuration and exit (non-zero with the error).
    #[arg(long)]
    pub check: bool,
    /// Admin HTTP address (/metrics, /v1/work); overrides `admin.gate_bind`.
    #[arg(long)]
    pub admin: Option<std::net::SocketAddr>,
    /// This gate's name in its work report and, on an etcd store, in the
    /// site's node registry; unique on the site (default: its admin address).
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// How long a stop (SIGTERM) may wait for the transactions in flight
    /// before the gate exits anyway (R-GW-1).
    #[arg(long, default_value_t = 60)]
    pub drain_deadline_s: u64,
    /// Where this gate keeps its work book across a graceful restart
    /// (R-ST-3): written on a clean stop with nothing in flight, read and
    /// deleted at start. One file per gate node. Without it, or when it is
    /// missing or unusable, a restarted gate reports its work unknown for
    /// the `[work]` window.
    #[arg(long, value_name = "FILE")]
    pub work_snapshot: Option<PathBuf>,
    /// Log lines as text (for people) or JSON (one object a line, with the
    /// fields of the span they are in: call_id, branch, instance).
    #[arg(long, value_enum, default_value_t = ringsync::logs::LogFormat::Text)]
    pub log_format: ringsync::logs::LogFormat,
}
