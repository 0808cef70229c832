//! `ringsync`: the operator's tool (profiles, status) and the admin API server.

use std::process::ExitCode;

use clap::Parser;
use ringsync::logs::LogFormat;
use ringsync::signals::Signals;
use ringsync_ops::cli::{self, Cli};
use tokio_util::sync::CancellationToken;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Warnings only, but what ringsync does (the API, the handover) is told.
    ringsync::logs::init_with(LogFormat::Text, "warn,ringsync=info");
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ringsync: error: {e:#}");
            // R-ST-4: `status` of a named instance nobody can report on has
            // its own code, so a script tells it from a failure.
            e.downcast_ref::<cli::CliError>()
                .map_or(ExitCode::FAILURE, |e| ExitCode::from(e.exit_code()))
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let shutdown = CancellationToken::new();
        let signals = Signals::stop()?;
        tokio::spawn(on_signal(signals, shutdown.clone()));
        let mut out = std::io::stdout();
        cli::run(cli, &mut out, shutdown).await?;
        Ok(())
    })
}

/// SIGINT or SIGTERM: graceful shutdown of `serve`.
async fn on_signal(mut signals: Signals, shutdown: CancellationToken) {
    let signal = signals.recv().await;
    tracing::info!(signal = signal.name(), "shutting down");
    shutdown.cancel();
}
