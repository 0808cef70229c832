//! Wiring: a site config, its drain state and bound sockets become a running
//! gate. The entry point takes what a test can make (sockets bound to
//! `127.0.0.1:0`, a cancellation token), like mini-redis `server::run`.

use std::sync::Arc;
use std::time::Duration;

use ringsync::config::SiteConfig;
use ringsync::state::DrainState;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::proxy::{Core, CoreError};
use crate::transport::{self, BoundListener};

/// Why a gate could not start.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// Binding a listener failed.
    #[error("binding listeners: {0}")]
    Bind(#[from] std::io::Error),
    /// The config does not make a core.
    #[error(transparent)]
    Core(#[from] CoreError),
}

/// A running gate.
#[derive(Debug)]
pub struct Gate {
    core: Arc<Core>,
    config: Arc<SiteConfig>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Gate {
    /// Binds the site's listeners (port 0 allowed) and starts serving. The
    /// drain state is the caller's: it decides where profiles come from.
    pub async fn start(
        config: SiteConfig,
        drain: Arc<DrainState>,
        shutdown: CancellationToken,
    ) -> Result<Gate, GateError> {
        let (config, bound) = transport::bind(config).await?;
        Gate::start_bound(Arc::new(config), bound, drain, shutdown)
    }

    /// Starts serving on listeners that are already bound; `config` must hold
    /// their actual addresses (as [`transport::bind`] returns it).
    fn start_bound(
        config: Arc<SiteConfig>,
        bound: Vec<BoundListener>,
        drain: Arc<DrainState>,
        shutdown: CancellationToken,
    ) -> Result<Gate, GateError> {
        let core = Arc::new(Core::new(config.clone(), drain)?);
        let tracker = TaskTracker::new();
        let threads = transport::spawn(core.clone(), bound, shutdown.clone(), &tracker)?;
        tracker.close();
        for l in &config.listeners {
            tracing::info!(listener = %l.name, bind = %l.bind, advertise = %l.advertise, transports = ?l.transports, mode = ?l.mode, leg = ?l.leg, "listening");
        }
        Ok(Gate {
            core,
            config,
            shutdown,
            tracker,
            threads,
        })
    }

    /// The config with the addresses actually bound.
    pub fn config(&self) -> &Arc<SiteConfig> {
        &self.config
    }

    /// The routing core (work counts, view).
    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// Stops taking new messages and waits for the tasks to end, at most `deadline`.
    /// Returns false if something was still running at the deadline.
    pub async fn shutdown(self, deadline: Duration) -> bool {
        self.shutdown.cancel();
        let threads = self.threads;
        let join = async {
            self.tracker.wait().await;
            // UDP workers notice the token within their poll interval.
            let _ = tokio::task::spawn_blocking(move || {
                threads.into_iter().for_each(|t| drop(t.join()))
            })
            .await;
        };
        tokio::time::timeout(deadline, join).await.is_ok()
    }
}
