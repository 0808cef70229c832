//! One node runtime for the daemons (sip-gate, media-ctl, `ringsync serve`
//! through [`Runtime::within`]): what each does
//! the same way before and around its own work. The site file loaded with
//! the exit code an operator's tooling expects ([`site_or_exit`]), then
//! [`Runtime::start`]: the process's metrics recorder, the signals watched
//! from the first moment (a signal during the start is kept, never
//! missed), the first word to systemd and its watchdog pings, the token
//! that stops the node, and one tracker for the tasks the stop waits for.
//!
//! The store's open-and-follow is [`crate::daemon::Attached`]; the log
//! set-up is [`crate::logs::init`], called by each binary before the site
//! file is read so a broken file is logged the same way by every daemon.

use std::path::Path;

use metrics_exporter_prometheus::{BuildError, PrometheusHandle};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::SiteConfig;
use crate::notify::Notifier;
use crate::signals::{Signal, Signals};

/// Why a node's runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The Prometheus recorder could not be installed (one per process).
    #[error("installing the metrics recorder")]
    Metrics(#[from] BuildError),
    /// A signal could not be watched (`what` names which).
    #[error("watching {what}")]
    Signals {
        /// The signals, as `SIGTERM and SIGINT`.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// The site file at `path` for a daemon's `main`: on an error, says it on
/// stderr (`error: ...`) and exits with status 2, the status
/// `docs/config.md` gives a site file that does not load (and `--check`).
pub fn site_or_exit(path: &Path) -> SiteConfig {
    SiteConfig::load(path).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2)
    })
}

/// What a daemon holds from its start to its exit.
pub struct Runtime {
    /// The process's metrics recorder: the admin endpoint's `/metrics`.
    pub prometheus: PrometheusHandle,
    /// The daemon's line to systemd.
    pub notify: Notifier,
    /// Ends the watchdog pings and the status updates: cancelled with
    /// [`Runtime::shutdown`], or alone when a new run speaks for the
    /// service (sip-gate's hand-over, R-GW-3).
    pub notify_stop: CancellationToken,
    /// Cancelled when the node stops; every task it started ends with it.
    pub shutdown: CancellationToken,
    /// The tasks [`Runtime::finish`] waits for.
    pub tasks: TaskTracker,
    /// The signals asked for at [`Runtime::start`], watched since.
    pub signals: Signals,
}

impl Runtime {
    /// Installs the metrics recorder, watches `which` signals, tells
    /// systemd `phase` (`STATUS=`), then pings its watchdog until
    /// [`Runtime::notify_stop`]. Must be called within a tokio runtime,
    /// once per process (the recorder is the process's).
    pub fn start(phase: &str, which: &[Signal]) -> Result<Runtime, RuntimeError> {
        let prometheus = crate::daemon::install_metrics()?;
        let signals = watch(which)?;
        Ok(Runtime::assemble(
            phase,
            prometheus,
            signals,
            CancellationToken::new(),
        ))
    }

    /// [`Runtime::start`] for a node that is one command of a process
    /// whose `main` watches the stop signals for every command and hands
    /// it `stop` (`ringsync serve`): no signal of its own, and
    /// [`Runtime::shutdown`] a child of `stop` (cancelled with it; its own
    /// cancel, as [`Runtime::finish`]'s, leaves `stop` alone). The
    /// process's recorder is installed unless one is already (an earlier
    /// serve of the same process, as in tests): then the node counts into
    /// that one, and [`Runtime::prometheus`] is the installed handle, or
    /// one of its own that nothing records into if the recorder is not
    /// [`crate::daemon::install_metrics`]'s.
    pub fn within(phase: &str, stop: &CancellationToken) -> Result<Runtime, RuntimeError> {
        let prometheus = match crate::daemon::install_metrics() {
            Ok(handle) => handle,
            Err(e) => {
                tracing::debug!(error = %e, "metrics recorder already installed");
                crate::daemon::process_metrics()
                    .cloned()
                    .unwrap_or_else(|| {
                        metrics_exporter_prometheus::PrometheusBuilder::new()
                            .build_recorder()
                            .handle()
                    })
            }
        };
        let signals = watch(&[])?;
        Ok(Runtime::assemble(
            phase,
            prometheus,
            signals,
            stop.child_token(),
        ))
    }

    /// Tells systemd `phase`, starts the watchdog's pings until
    /// [`Runtime::notify_stop`] (a child of `shutdown`).
    fn assemble(
        phase: &str,
        prometheus: PrometheusHandle,
        signals: Signals,
        shutdown: CancellationToken,
    ) -> Runtime {
        let notify_stop = shutdown.child_token();
        let notify = Notifier::new();
        // The first word to systemd is the phase, then the watchdog's pings.
        notify.phase(phase);
        notify.watchdog(notify_stop.clone());
        Runtime {
            prometheus,
            notify,
            notify_stop,
            shutdown,
            tasks: TaskTracker::new(),
            signals,
        }
    }

    /// Stops the node's tasks ([`Runtime::shutdown`]) and waits for every
    /// task on [`Runtime::tasks`] to end.
    pub async fn finish(self) {
        self.shutdown.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

/// The signals in `which`, watched from now on; the error names them.
pub fn watch(which: &[Signal]) -> Result<Signals, RuntimeError> {
    Signals::new(which).map_err(|source| RuntimeError::Signals {
        what: names(which),
        source,
    })
}

/// `SIGTERM, SIGINT and SIGHUP`: the signals as an error names them.
fn names(which: &[Signal]) -> String {
    let names: Vec<&str> = which.iter().map(|s| s.name()).collect();
    match names.split_last() {
        None => "no signal".into(),
        Some((last, [])) => (*last).into(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signals_are_named_as_an_operator_reads_them() {
        use Signal::*;
        assert_eq!(names(&[]), "no signal");
        assert_eq!(names(&[User2]), "SIGUSR2");
        assert_eq!(names(&[Terminate, Interrupt]), "SIGTERM and SIGINT");
        assert_eq!(
            names(&[Terminate, Interrupt, Hangup]),
            "SIGTERM, SIGINT and SIGHUP"
        );
    }

    /// The only test of this binary that installs the recorder: the second
    /// start in the process is refused, as a daemon's second would be.
    #[tokio::test]
    async fn a_runtime_tells_its_phase_and_waits_for_its_tasks_at_the_finish() {
        let rt = Runtime::start("starting: testing", &[]).unwrap();
        assert!(rt.notify.status_line().starts_with("starting: testing"));
        assert!(crate::daemon::process_metrics().is_some());
        let again = Runtime::start("starting: again", &[]);
        assert!(matches!(again, Err(RuntimeError::Metrics(_))));

        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let stop = rt.shutdown.clone();
        rt.tasks.spawn(async move {
            stop.cancelled().await;
            let _ = done_tx.send(());
        });
        assert!(!rt.notify_stop.is_cancelled());
        let notify_stop = rt.notify_stop.clone();
        let finish = tokio::time::timeout(std::time::Duration::from_secs(5), rt.finish());
        finish.await.expect("finish waits for its task, which ends");
        assert!(
            notify_stop.is_cancelled(),
            "the watchdog ends with the node"
        );
        done_rx.await.expect("the task ran to its end");

        // A node inside a process that holds the recorder already and
        // watches the signals itself (`ringsync serve`): it starts, stops
        // with the caller's token, and its own finish leaves that alone.
        let stop = CancellationToken::new();
        let inner = Runtime::within("starting: within", &stop).unwrap();
        assert!(inner.notify.status_line().starts_with("starting: within"));
        inner.finish().await;
        assert!(!stop.is_cancelled(), "the node's finish is its own");
        let inner = Runtime::within("starting: within again", &stop).unwrap();
        stop.cancel();
        assert!(inner.shutdown.is_cancelled() && inner.notify_stop.is_cancelled());
    }
}
