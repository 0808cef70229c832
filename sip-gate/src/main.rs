//! `sip-gate --config SITE.toml`: the drain-aware SIP proxy; and
//! `sip-gate announce`, the program ExaBGP runs to announce the gate's
//! anycast prefix while it is ready (R-EX-2, `sip_gate::announce`).
//!
//! Thin: the arguments, the site file, then `sip_gate::run::run` (the
//! start or take-over, serving, the stop or hand-over: library code).

use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use ringsync::config::{Daemon, SiteConfig};
use ringsync::signals::Signals;
use sip_gate::cli::{AnnounceArgs, Args, Sub, UpgradeArgs};
use tokio_util::sync::CancellationToken;

/// `sip-gate announce`: polls /readyz, commands ExaBGP on stdout.
async fn announce(args: AnnounceArgs) -> anyhow::Result<()> {
    use sip_gate::announce::{run, Options, Route};
    ringsync::logs::init(args.log_format);
    let options = Options {
        admin: args.admin,
        route: Route {
            prefix: args.prefix,
            next_hop: args.next_hop,
        },
        interval: Duration::from_millis(args.interval_ms.max(1)),
        timeout: Duration::from_millis(args.timeout_ms.max(1)),
    };
    tracing::info!(admin = %options.admin, prefix = %options.route.prefix, interval_ms = args.interval_ms, timeout_ms = args.timeout_ms, "announcing while the gate is ready (R-EX-2)");
    let stop = CancellationToken::new();
    // ExaBGP writes to our stdin; its end means ExaBGP is gone. A plain
    // thread: a blocking stdin read in tokio's pool would hold up the exit.
    let eof = stop.clone();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        tracing::info!("stdin closed (ExaBGP gone): stopping");
        eof.cancel();
    });
    let mut signals = Signals::stop().context("watching SIGTERM and SIGINT")?;
    let on_signal = stop.clone();
    tokio::spawn(async move {
        let signal = signals.recv().await;
        tracing::info!(signal = signal.name(), "stopping");
        on_signal.cancel();
    });
    run(&options, tokio::io::stdout(), stop)
        .await
        .context("writing to ExaBGP (stdout)")
}

/// Loads the site file (exit 2 when it does not load); with `--check`, says
/// what it holds and returns `None`: nothing is bound.
fn load_or_check(path: &std::path::Path, check: bool) -> Option<SiteConfig> {
    let config = ringsync::runtime::site_or_exit(path);
    if !check {
        return Some(config);
    }
    let warned = ringsync::daemon::check(&config, Daemon::SipGate);
    let (i, l) = (config.instances.len(), config.listeners.len());
    println!(
        "{}: ok ({i} instances, {l} listeners){warned}",
        path.display()
    );
    None
}

/// `sip-gate upgrade`: asks the running gate to upgrade (R-GW-3).
fn upgrade(args: UpgradeArgs) -> anyhow::Result<()> {
    let path = match args.socket {
        Some(p) => p,
        None => {
            let admin = match args.admin {
                Some(a) => a,
                None => {
                    SiteConfig::load(&args.config)
                        .with_context(|| format!("reading {}", args.config.display()))?
                        .admin
                        .gate_bind
                }
            };
            sip_gate::upgrade::socket_path(admin)
        }
    };
    let pid = sip_gate::upgrade::request(&path)
        .with_context(|| format!("upgrading the gate on {}", path.display()))?;
    println!("upgraded: the new run (pid {pid}) serves");
    Ok(())
}

/// Loads the site file, then runs the gate ([`sip_gate::run::run`]).
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match args.command {
        Some(Sub::Announce(a)) => return announce(a).await,
        Some(Sub::Upgrade(u)) => return upgrade(u),
        None => {}
    }
    // clap requires --config without a subcommand.
    let config_path = args.config.clone().context("--config is required")?;
    let started_ms = ringsync::work::now_ms();
    ringsync::logs::init(args.log_format);
    let Some(config) = load_or_check(&config_path, args.check) else {
        return Ok(());
    };
    Ok(sip_gate::run::run(&args, config, started_ms).await?)
}
