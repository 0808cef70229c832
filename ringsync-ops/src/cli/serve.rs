//! `ringsync serve` (the admin API, its tokens and TLS, and the refusal to
//! expose it unprotected) and `ringsync token add` / `token remove`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{CliError, ServeArgs};
use crate::api::tls::CertFiles;
use crate::api::{Access, AdminApi};
use crate::auth::{self, Role, Tokens};
use crate::fetch::Fetcher;
use crate::status::{self, NodeBoard};
use ringsync::config::SiteConfig;
use ringsync::daemon::Attached;
use ringsync::node::{NodeIdentity, NodeRole};
use ringsync::runtime::Runtime;
use ringsync::state::DrainState;
use ringsync::store;

/// `token` subcommands.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a token for the admin API: prints it once, keeps only its hash.
    Add(TokenAddArgs),
    /// Remove a token: its holder is refused from serve's next reload on.
    Remove(TokenRemoveArgs),
}

/// Where the tokens file is and who may read it (`token add`, `token remove`).
#[derive(Debug, Args)]
pub struct TokenFileArgs {
    /// The tokens file (default: `[admin] tokens` of the site file).
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// The file's group: what `ringsync serve` runs as. A new file gets
    /// mode 0640 and this group (default `sip-gate`); an existing one keeps
    /// its mode, owner and group unless this is given.
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
}

/// `token add` options.
#[derive(Debug, Args)]
pub struct TokenAddArgs {
    /// Who holds it: the name the audit log records.
    pub name: String,
    /// What it may do.
    #[arg(long, value_enum)]
    pub role: Role,
    /// Where the file is and its group.
    #[command(flatten)]
    pub file: TokenFileArgs,
    /// Print the token alone, without the note after it: the output is
    /// then a file a client can read whole (Prometheus' `credentials_file`).
    #[arg(long)]
    pub print_secret_only: bool,
}

/// `token remove` options.
#[derive(Debug, Args)]
pub struct TokenRemoveArgs {
    /// The token's name.
    pub name: String,
    /// Where the file is and its group.
    #[command(flatten)]
    pub file: TokenFileArgs,
}

fn tokens_path(config: Option<&SiteConfig>, file: Option<PathBuf>) -> Result<PathBuf, CliError> {
    file.or_else(|| config.and_then(|c| c.admin.tokens.clone()))
        .ok_or_else(|| {
            CliError::Usage(
                "no tokens file: give --file or set [admin] tokens in the site file".into(),
            )
        })
}

pub(super) fn token(
    config: Option<&SiteConfig>,
    cmd: TokenCommand,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    match cmd {
        TokenCommand::Add(args) => {
            let path = tokens_path(config, args.file.file)?;
            let group = args.file.group.as_deref();
            let token = auth::add_token(&path, &args.name, args.role, group)?;
            writeln!(out, "{token}")?;
            if !args.print_secret_only {
                writeln!(
                    out,
                    "# token `{}` ({}) added to {}; this is the only time it is shown: \
                     store it in a file only its holder can read",
                    args.name,
                    args.role,
                    path.display()
                )?;
            }
        }
        TokenCommand::Remove(args) => {
            let path = tokens_path(config, args.file.file)?;
            let role = auth::remove_token(&path, &args.name, args.file.group.as_deref())?;
            writeln!(
                out,
                "token `{}` ({role}) removed from {}",
                args.name,
                path.display()
            )?;
        }
    }
    Ok(())
}

/// Refuses to serve the API where others can reach it unless it is behind
/// TLS and tokens, or the operator said `--insecure`.
fn check_exposure(
    addr: SocketAddr,
    tls: bool,
    tokens: bool,
    insecure: bool,
) -> Result<(), CliError> {
    if addr.ip().to_canonical().is_loopback() || (tls && tokens) {
        return Ok(());
    }
    let missing = match (tls, tokens) {
        (false, false) => "without TLS and without tokens",
        (false, true) => "without TLS (tokens would cross the network in clear)",
        _ => "without tokens",
    };
    if insecure {
        tracing::warn!(%addr, "--insecure: serving the admin API {missing} on a non-loopback address");
        return Ok(());
    }
    Err(CliError::Usage(format!(
        "refusing to serve the admin API on {addr} {missing}: anyone who can reach that address \
         could read the site and create, activate or delete drain profiles. Set [admin] tls_cert, \
         tls_key and tokens in the site file, bind a loopback address, or pass --insecure to \
         accept the risk"
    )))
}

/// `ringsync serve` on the node runtime ([`Runtime::within`], as sip-gate
/// and media-ctl run on [`Runtime::start`]): the stop is `shutdown`, which
/// the CLI's `main` cancels on SIGTERM or SIGINT; every task the serve
/// started has ended when this returns, whether it served or failed.
pub(super) async fn serve(
    config: Arc<SiteConfig>,
    args: ServeArgs,
    out: &mut (dyn Write + Send),
    shutdown: CancellationToken,
) -> Result<(), CliError> {
    let addr = args.bind.unwrap_or(config.admin.bind);
    let a = &config.admin;
    check_exposure(
        addr,
        a.tls_cert.is_some(),
        a.tokens.is_some(),
        args.insecure,
    )?;
    // The process's recorder first, so what is counted from here on (token
    // reloads, store errors, the drain state's gauges) is exported. Tests
    // that serve twice in one process keep the first.
    let rt = Runtime::within("starting: loading the drain view from the store", &shutdown)?;
    let result = serve_on(&rt, config, &args, addr, out).await;
    rt.finish().await;
    result
}

/// The API served on `addr` with `rt`'s notifier, tasks and stop.
async fn serve_on(
    rt: &Runtime,
    config: Arc<SiteConfig>,
    args: &ServeArgs,
    addr: SocketAddr,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    for name in [
        "ringsync_tokens_reload_errors_total",
        "ringsync_profile_updates_applied_total",
    ] {
        metrics::counter!(name).increment(0);
    }
    for status in ["401", "403"] {
        metrics::counter!("ringsync_api_refused_total", "status" => status).increment(0);
    }
    let (tasks, shutdown) = (&rt.tasks, &rt.shutdown);
    let (access, certs) = protection(&config, (tasks, shutdown))?;
    let state = DrainState::new(config.clone());
    // What the store opened with (R-MN-2: possibly the view cache), before
    // anything is served or published; followed until `shutdown`.
    let mut attached = Attached::open(&state, shutdown.clone()).await?;
    let store = attached.store().clone();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| CliError::Bind { addr, source })?;
    let local = listener.local_addr()?;
    announce(&config, local, &access, certs.is_some(), out)?;
    // READY=1 once the API reads the store, as /readyz does.
    let notify = rt.notify.clone();
    notify.follow_view(&state, shutdown.clone());
    notify.stopping_on(shutdown.clone(), "stopping: the admin API closes".into());

    let (board, every) = node_board(&config, args, &store);
    tasks.spawn(board.clone().run(every, shutdown.clone()));
    attached.publish(serve_identity(local), || None);
    // The Active-Passive planner: one per site acts (R-MN-3).
    let node = local.to_string();
    let on = (tasks, shutdown);
    let planner = super::handover::start_planner(&config, store.as_ref(), &state, &node, on);
    // The engine drivers act under the planner's election (R-EX-1, R-MN-3).
    let engines = planner
        .as_ref()
        .and_then(|stats| crate::engine::start(&config, &state, &store, stats.watch_acting(), on));
    if planner.is_none() && !config.engines.is_empty() {
        tracing::warn!("this store keeps no election: the engines are not driven");
    }
    let api = AdminApi::with_access(store, state, board, access);
    if let Some(stats) = &planner {
        api.set_planner(node, stats.clone());
    }
    if let Some(board) = &engines {
        api.set_engines(board.clone());
    }
    api.notify_ready(notify, format!("serving the admin API on {local}"));
    // The status page at `/`, its chart sampled meanwhile (issue 28).
    let page = crate::page::start(&api, tasks, shutdown);
    let tls = certs.map(|c| c.server_config()).transpose()?;
    let result = crate::api::serve_with(listener, api, page, tls, shutdown.clone()).await;
    shutdown.cancel();
    // The record withdrawn, then the follower ended (by `shutdown`).
    attached.close().await;
    result.map_err(CliError::Io)
}

/// This serve node as the store's node registry knows it (it reports no
/// work of its own).
fn serve_identity(local: SocketAddr) -> NodeIdentity {
    NodeIdentity {
        node: local.to_string(),
        role: NodeRole::Ringsync,
        address: local.to_string(),
        started_ms: ringsync::work::now_ms(),
    }
}

/// The tokens and the certificate of `[admin]`, each re-read on change
/// until `shutdown`.
fn protection(
    config: &SiteConfig,
    (tasks, shutdown): (&TaskTracker, &CancellationToken),
) -> Result<(Access, Option<Arc<CertFiles>>), CliError> {
    let a = &config.admin;
    let access = match &a.tokens {
        Some(path) => {
            let tokens = Tokens::open(path)?;
            tasks.spawn(tokens.clone().watch(shutdown.clone()));
            Access::Tokens(tokens)
        }
        None => Access::Open,
    };
    let certs = match (&a.tls_cert, &a.tls_key) {
        (Some(cert), Some(key)) => {
            let c = CertFiles::open(cert, key)?;
            tasks.spawn(c.clone().watch(shutdown.clone()));
            Some(c)
        }
        _ => None,
    };
    Ok((access, certs))
}

/// Where the API listens and who may call it: the first line is the URL.
fn announce(
    config: &SiteConfig,
    local: SocketAddr,
    access: &Access,
    tls: bool,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    let scheme = if tls { "https" } else { "http" };
    writeln!(
        out,
        "ringsync: admin API for site {} on {scheme}://{local}",
        config.site.name
    )?;
    match access {
        Access::Open => writeln!(
            out,
            "ringsync: no tokens file: every caller that reaches {local} may read and change profiles"
        )?,
        Access::Tokens(t) => writeln!(
            out,
            "ringsync: {} token(s) from {}",
            t.current().len(),
            config
                .admin
                .tokens
                .as_ref()
                .map_or(String::new(), |p| p.display().to_string())
        )?,
    }
    out.flush()?;
    tracing::info!(%local, site = %config.site.name, scheme, "serving admin API");
    Ok(())
}

/// R-ST-1: the nodes' work: asked once a second, or on etcd read from the
/// node registry every 5 s (an idle serve stays under 1 request/s).
fn node_board(
    config: &Arc<SiteConfig>,
    args: &ServeArgs,
    store: &Arc<dyn store::Store>,
) -> (Arc<NodeBoard>, Duration) {
    if store.keeps_nodes() {
        let board = NodeBoard::from_registry(config.site.name.clone(), store.clone());
        (board, Duration::from_secs(5))
    } else {
        let nodes = status::local_nodes(config, args.nodes.gate, args.nodes.media);
        let board = NodeBoard::new(config.site.name.clone(), nodes, Fetcher::default());
        (board, Duration::from_secs(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposure_needs_tls_and_tokens_off_loopback() {
        let lo: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let v6: SocketAddr = "[::1]:8080".parse().unwrap();
        assert!(check_exposure(lo, false, false, false).is_ok());
        assert!(check_exposure(v6, false, false, false).is_ok());
        assert!(check_exposure(any, true, true, false).is_ok());
        assert!(check_exposure(any, false, false, true).is_ok());
        for (tls, tokens, what) in [
            (false, false, "without TLS and without tokens"),
            (true, false, "without tokens"),
            (false, true, "without TLS"),
        ] {
            let e = check_exposure(any, tls, tokens, false)
                .unwrap_err()
                .to_string();
            assert!(e.contains(what) && e.contains("--insecure"), "{e}");
        }
    }
}
