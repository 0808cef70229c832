//! The command line of the `sip-gate` binary, here so the man page and the
//! shell completions are made from the same definition (`xtask`).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

/// The signals section of `--help` and the man page.
const SIGNALS: &str = "Signals:
SIGTERM, SIGINT: stop gracefully (R-GW-1): listeners closed, new work refused, transactions in flight finished (at most --drain-deadline-s), the work book saved (--work-snapshot), then exit.
SIGHUP: reload the site file (systemctl reload sip-gate): applied whole without dropping a call, or refused whole with the reason when it changes what only a restart can (a listener's address, the store).

Files:
/etc/sip-gate/site.toml: the site file (--config, SIP_GATE_CONFIG); see sip-gate.toml(5).";

/// Drain-aware inline SIP proxy.
#[derive(Parser, Debug)]
#[command(
    version,
    about,
    args_conflicts_with_subcommands = true,
    after_long_help = SIGNALS
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Sub>,
    /// Site configuration file. Default: `SIP_GATE_CONFIG`, else
    /// /etc/sip-gate/site.toml, the file the package installs.
    #[arg(
        long,
        short,
        env = "SIP_GATE_CONFIG",
        default_value = "/etc/sip-gate/site.toml"
    )]
    pub config: Option<PathBuf>,
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
    /// The upgrade socket (R-GW-3), on which `sip-gate upgrade` asks and
    /// the new run takes over. Default: `sip-gate-ADMIN.upgrade` in
    /// `$RUNTIME_DIRECTORY`, else in the temporary directory.
    #[arg(long, value_name = "PATH")]
    pub upgrade_socket: Option<PathBuf>,
    /// After an upgrade, how long the old run keeps serving the TLS and
    /// WebSocket connections it holds (they cannot move) before it closes
    /// the rest properly and exits (R-GW-3).
    #[arg(long, default_value_t = 3600)]
    pub upgrade_keep_s: u64,
}

/// What the binary does besides running a gate.
#[derive(clap::Subcommand, Debug)]
pub enum Sub {
    /// Announce the gate's anycast prefix to ExaBGP while it is ready.
    ///
    /// Run as ExaBGP's `process`: announce PREFIX on stdout (ExaBGP's text
    /// API) while the gate's /readyz says ready, withdraw it when not
    /// (R-EX-2). Logs go to stderr. Ends when stdin closes (ExaBGP gone)
    /// or on SIGTERM/SIGINT, withdrawing the route if it is out.
    Announce(AnnounceArgs),
    /// Upgrade the running gate to the binary now installed (R-GW-3).
    ///
    /// Asks the gate on its upgrade socket, as SIGUSR2 does, and waits:
    /// the new run takes the sockets, the plain TCP connections and the
    /// state, and serves. Exits 0 with the new run's pid once it does,
    /// non-zero with the reason when it does not (the running gate then
    /// serves on).
    Upgrade(UpgradeArgs),
}

/// `sip-gate upgrade`.
#[derive(clap::Args, Debug)]
pub struct UpgradeArgs {
    /// The gate's site file (its admin address names the socket).
    #[arg(
        long,
        short,
        env = "SIP_GATE_CONFIG",
        default_value = "/etc/sip-gate/site.toml"
    )]
    pub config: PathBuf,
    /// The gate's admin address, when it runs with `--admin`.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<SocketAddr>,
    /// The gate's upgrade socket, when it runs with `--upgrade-socket`.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
}

/// `sip-gate announce`.
#[derive(clap::Args, Debug)]
pub struct AnnounceArgs {
    /// The gate's admin address (`admin.gate_bind` or its `--admin`).
    #[arg(long, value_name = "ADDR")]
    pub admin: SocketAddr,
    /// The anycast prefix to announce (a bare address is its host prefix).
    #[arg(long, value_name = "PREFIX", value_parser = crate::announce::parse_prefix)]
    pub prefix: ipnet::IpNet,
    /// The route's next hop: `self` (ExaBGP's own address on the session)
    /// or an address.
    #[arg(long, value_name = "ADDR|self", default_value = "self")]
    pub next_hop: crate::announce::NextHop,
    /// Time between two /readyz requests. With the timeout, bounds how
    /// long a gate that stops being ready stays announced.
    #[arg(long, default_value_t = 200)]
    pub interval_ms: u64,
    /// Time one /readyz request may take before the gate counts as not
    /// ready.
    #[arg(long, default_value_t = 400)]
    pub timeout_ms: u64,
    /// Log lines as text or JSON.
    #[arg(long, value_enum, default_value_t = ringsync::logs::LogFormat::Text)]
    pub log_format: ringsync::logs::LogFormat,
}
