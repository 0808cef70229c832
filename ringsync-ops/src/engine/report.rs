//! What each driver says of its engine: `GET /v1/status` (`engines`),
//! `ringsync status` and the metrics read it (R-EX-1).

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::backend::Want;

/// One engine's state as its driver knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineStatus {
    /// The engine's name in the site file.
    pub name: String,
    /// `kamailio-dispatcher` or `haproxy`.
    pub kind: String,
    /// Where it is reached.
    pub address: String,
    /// Whether this `ringsync serve` is the elected one that drives it
    /// (the handover planner's election, R-MN-3); a standby only watches.
    pub acting: bool,
    /// Whether the last request reached it; `None` before the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reachable: Option<bool>,
    /// Since when it has been reachable, or not (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// The last failure, while it lasts: which side failed and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The profile revision of the view the engine was last verified to
    /// hold; `None` while it holds none (unreachable, or not yet applied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// Changes the driver made to the engine.
    pub changes: u64,
    /// Changes that re-applied what the engine had lost or someone had
    /// undone (a restart, a reload, a hand edit).
    pub corrections: u64,
    /// The last of those.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_correction: Option<Correction>,
    /// Per driven instance: what the view wants and what the engine says.
    pub instances: Vec<EngineInstance>,
}

/// A divergence the driver corrected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Correction {
    /// When (Unix ms).
    pub at_ms: u64,
    /// The instance.
    pub instance: String,
    /// What the engine said.
    pub found: String,
    /// What it was set back to.
    pub want: Want,
}

/// One instance's destination in an engine. The engine counts no work
/// (Kamailio's dispatcher knows no dialogs), so nothing here says an
/// instance is drained: its work is known only from a node that counts it
/// (R-ST-4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineInstance {
    /// Instance id.
    pub id: String,
    /// Its destination in the engine (`set 1 sip:...`, `backend/server`).
    pub target: String,
    /// What the drain view wants.
    pub want: Want,
    /// What the engine says, in its own words; `None` when the engine has
    /// no such destination or was not reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub says: Option<String>,
    /// Whether that is what the view wants.
    pub agrees: bool,
}

/// Every engine's status, shared by the drivers and the API.
#[derive(Debug, Default)]
pub struct EngineBoard {
    pub(crate) engines: Vec<Arc<Mutex<EngineStatus>>>,
}

impl EngineBoard {
    /// A copy of every engine's status, in site-file order.
    pub fn snapshot(&self) -> Vec<EngineStatus> {
        self.engines
            .iter()
            .map(|e| e.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .collect()
    }
}
