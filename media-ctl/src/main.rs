//! `media-ctl --config SITE.toml`: the drain-aware mg controller;
//! `media-ctl --config SITE.toml status`: what a running one says.
//!
//! Thin on purpose: config, tracing, metrics, the store and the node's
//! registration (`ringsync::daemon`, shared with sip-gate), controller,
//! signals (SIGHUP reloads `[capture]`), stop; each step told to systemd
//! (`ringsync::notify`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use media_ctl::cli::{Args, Cmd};
use media_ctl::{admin, MediaCtl, Status};
use ringsync::config::{Daemon, SiteConfig};
use ringsync::daemon::Attached;
use ringsync::node::{NodeIdentity, NodeRole};
use ringsync::notify::Notifier;
use ringsync::signals::{Signal, Signals};
use ringsync::state::DrainState;
use tokio_util::sync::CancellationToken;

/// The store, then the controller and its admin endpoint; serve until
/// SIGTERM or SIGINT, then stop.
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let started_ms = ringsync::work::now_ms();
    ringsync::logs::init(args.log_format);
    let mut config = SiteConfig::load(&args.config).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2)
    });
    let admin_addr = args.admin.unwrap_or(config.admin.media_bind);
    if let Some(Cmd::Status { json }) = args.command {
        return status(admin_addr, json).await;
    }
    if let Some(ng) = args.ng {
        config.media.ng_bind = ng;
    }
    if args.check {
        check(&config, &args.config);
        return Ok(());
    }
    let prometheus =
        ringsync::daemon::install_metrics().context("installing the metrics recorder")?;
    let shutdown = CancellationToken::new();
    let notify = Notifier::new();
    notify.phase("starting: loading the drain view from the store");
    notify.watchdog(shutdown.clone());
    let drain = DrainState::new(Arc::new(config.clone()));
    let mut store = Attached::open(&drain, shutdown.clone())
        .await
        .context("opening the profile store")?;
    let media = MediaCtl::start(drain.clone(), shutdown.clone()).await?;
    let admin_listener = tokio::net::TcpListener::bind(admin_addr)
        .await
        .with_context(|| format!("binding admin endpoint {admin_addr}"))?;
    let admin_addr = admin_listener.local_addr()?;
    let node = args.node.unwrap_or_else(|| admin_addr.to_string());
    // `[capture] agents` gives each node its own agent id, by this name.
    media.capture().set_node(&node);
    tracing::info!(%admin_addr, %node, "admin endpoint (/v1/status, /v1/work, /metrics, /readyz)");
    // R-ST-3: on a shared store (etcd), register and publish the same report
    // (on the embedded store, `ringsync status` asks the admin address).
    let identity = NodeIdentity {
        node: node.clone(),
        role: NodeRole::MediaCtl,
        address: admin_addr.to_string(),
        started_ms,
    };
    let (controller, name) = (media.controller().clone(), node.clone());
    store.publish(identity, move || {
        Some(controller.work_report(&name, tokio::time::Instant::now().into_std()))
    });
    let router = admin::router(
        media.controller().clone(),
        node,
        Some(prometheus),
        media.stopping(),
    );
    let admin_task = tokio::spawn(ringsync::admin::serve(
        admin_listener,
        router,
        shutdown.clone(),
    ));
    // The ng socket and the admin endpoint are bound, the view is loaded.
    notify.follow_view(&drain, shutdown.clone());
    notify.ready(format!("serving, admin on {admin_addr}"));

    let clean = serve_signals(media, &notify, &args.config, args.drain_deadline_s).await?;
    let _ = admin_task.await;
    // Withdrawn after the stop, so what work is left is recorded (R-ST-3).
    store.close().await;
    if !clean {
        tracing::warn!("some tasks did not finish before the deadline");
    }
    Ok(())
}

/// `--check`: the site file loaded; what media-ctl would control.
fn check(config: &SiteConfig, path: &std::path::Path) {
    let warned = ringsync::daemon::check(config, Daemon::MediaCtl);
    let mgs = config.instances.iter().filter(|i| i.ng.is_some()).count();
    println!("{}: ok ({mgs} mg/bgmg instances){warned}", path.display());
}

/// Reloads `[capture]` from `config` at each SIGHUP until SIGTERM or
/// SIGINT, then stops the controller within `deadline_s`; whether
/// everything finished in time.
async fn serve_signals(
    media: MediaCtl,
    notify: &Notifier,
    config: &std::path::Path,
    deadline_s: u64,
) -> anyhow::Result<bool> {
    let which = [Signal::Terminate, Signal::Interrupt, Signal::Hangup];
    let mut signals = Signals::new(&which).context("watching SIGTERM, SIGINT and SIGHUP")?;
    let signal = loop {
        let signal = signals.recv().await;
        if signal.is_stop() {
            break signal;
        }
        // Told to systemd as sip-gate does; a file that does not load
        // leaves the capture in force (logged and counted).
        notify.reloading("reloading [capture] from the site file");
        let status = match media.reload(config) {
            Ok(()) => "serving; [capture] reloaded".to_owned(),
            Err(e) => format!("serving; reload refused: {e}"),
        };
        notify.ready(status);
    };
    notify.stopping(format!(
        "stopping ({signal}): answers in flight are relayed, deadline {deadline_s}s"
    ));
    tracing::info!(
        signal = signal.name(),
        "stopping: /readyz fails, answers in flight are relayed"
    );
    Ok(media.shutdown(Duration::from_secs(deadline_s)).await)
}

async fn status(admin: SocketAddr, json: bool) -> anyhow::Result<()> {
    let s: Status = admin::fetch(admin, admin::STATUS_PATH, Duration::from_secs(2))
        .await
        .context("is media-ctl running? (`admin.media_bind` or --admin)")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print!(
            "{}",
            media_ctl::status::render(&s, ringsync::work::now_ms())
        );
    }
    Ok(())
}
