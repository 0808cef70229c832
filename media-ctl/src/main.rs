//! `media-ctl --config SITE.toml`: the drain-aware mg controller;
//! `media-ctl --config SITE.toml status`: what a running one says.
//!
//! Thin: the arguments, the site file, then `media_ctl::run::run` (the
//! node runtime, the store, the controller, SIGHUP reloads `[capture]`,
//! the stop: library code).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use media_ctl::cli::{Args, Cmd};
use media_ctl::run::Options;
use media_ctl::{admin, Status};
use ringsync::config::Daemon;

/// Loads the site file, then runs the controller ([`media_ctl::run::run`]).
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let started_ms = ringsync::work::now_ms();
    ringsync::logs::init(args.log_format);
    let mut config = ringsync::runtime::site_or_exit(&args.config);
    let admin = args.admin.unwrap_or(config.admin.media_bind);
    if let Some(Cmd::Status { json }) = args.command {
        return status(admin, json).await;
    }
    if let Some(ng) = args.ng {
        config.media.ng_bind = ng;
    }
    if args.check {
        let warned = ringsync::daemon::check(&config, Daemon::MediaCtl);
        let mgs = config.instances.iter().filter(|i| i.ng.is_some()).count();
        println!(
            "{}: ok ({mgs} mg/bgmg instances){warned}",
            args.config.display()
        );
        return Ok(());
    }
    let options = Options {
        config: args.config,
        admin,
        node: args.node,
        drain_deadline: Duration::from_secs(args.drain_deadline_s),
        started_ms,
    };
    Ok(media_ctl::run::run(config, options).await?)
}

/// `media-ctl status`: the running controller's status, as text or JSON.
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
