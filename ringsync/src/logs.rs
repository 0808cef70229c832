//! Log set-up for every binary (sip-gate, media-ctl, the `ringsync` CLI
//! and its `serve`), so the daemons offer the same `--log-format` and all
//! write the same way.

/// How a daemon writes its logs to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (coloured only on a terminal).
    Text,
    /// One JSON object per event, for log collectors.
    Json,
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`).
pub fn init(format: LogFormat) {
    init_with(format, "info");
}

/// Logs to stderr, filtered by `RUST_LOG`, or by `default` (a `RUST_LOG`
/// directive, e.g. `warn,ringsync=info`) when it is not set.
pub fn init_with(format: LogFormat, default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => logs.json().init(),
        // Colours only on a terminal: log files and journald get plain text.
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
}
