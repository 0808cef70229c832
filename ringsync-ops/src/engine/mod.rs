//! The engine drivers (R-EX-1): the edges an operator already runs
//! (Kamailio's dispatcher, HAProxy) driven from the drain view by
//! `ringsync serve`, one driver task per `[[engine]]`.
//!
//! Only the elected node drives (the handover planner's election, R-MN-3),
//! so two serve nodes never fight over an engine; a standby's drivers
//! wait. `backend` is what a driver asks of any engine, `kamailio` and
//! `haproxy` how each kind is asked, `driver` the loop, `report` what
//! status shows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use ringsync::config::{EngineConfig, EngineKind, Service, SiteConfig};
use ringsync::state::DrainState;
use ringsync::store::Store;

mod backend;
mod driver;
mod error;
mod haproxy;
mod kamailio;
mod report;

pub use backend::Want;
pub use error::EngineError;
pub use report::{Correction, EngineBoard, EngineInstance, EngineStatus};

/// Starts one driver per engine of the site; they act while `acting` says
/// this node is elected, on `tasks` until `shutdown`. `None` when the site
/// has no engine.
pub fn start(
    config: &Arc<SiteConfig>,
    drain: &Arc<DrainState>,
    store: &Arc<dyn Store>,
    acting: watch::Receiver<bool>,
    (tasks, shutdown): (&TaskTracker, &CancellationToken),
) -> Option<Arc<EngineBoard>> {
    if config.engines.is_empty() {
        return None;
    }
    let services: HashMap<String, Service> = config
        .instances
        .iter()
        .map(|i| (i.id.clone(), i.service.clone()))
        .collect();
    let mut board = EngineBoard::default();
    let mut drivers = Vec::new();
    for cfg in &config.engines {
        let backend = backend_of(cfg, &services);
        let ids: Vec<String> = config
            .instances
            .iter()
            .filter(|i| backend.target(&i.id).is_some())
            .map(|i| i.id.clone())
            .collect();
        let status = Arc::new(Mutex::new(EngineStatus {
            name: cfg.name.clone(),
            kind: cfg.kind_name().to_owned(),
            address: backend.address(),
            acting: false,
            reachable: None,
            since_ms: None,
            error: None,
            revision: None,
            changes: 0,
            corrections: 0,
            last_correction: None,
            instances: Vec::new(),
        }));
        board.engines.push(status.clone());
        drivers.push(driver::Driver {
            cfg: cfg.clone(),
            backend,
            drain: drain.clone(),
            store: store.clone(),
            status,
            acting: acting.clone(),
            held: HashMap::new(),
            ids,
        });
    }
    for d in drivers {
        tasks.spawn(d.run(shutdown.clone()));
    }
    Some(Arc::new(board))
}

fn backend_of(
    cfg: &EngineConfig,
    services: &HashMap<String, Service>,
) -> Box<dyn backend::Backend> {
    match &cfg.kind {
        EngineKind::KamailioDispatcher {
            addr,
            path,
            sets,
            destinations,
        } => Box::new(kamailio::Kamailio::new(
            *addr,
            path,
            sets,
            destinations,
            services,
            cfg.timeout(),
        )),
        EngineKind::Haproxy {
            address,
            backends,
            servers,
        } => Box::new(haproxy::Haproxy::new(
            address,
            backends,
            servers,
            services,
            cfg.timeout(),
        )),
    }
}
