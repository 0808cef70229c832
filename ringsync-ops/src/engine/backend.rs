//! What a driver asks of an engine, whatever its kind: read the state of
//! the destinations it drives, and set one of them.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::error::EngineError;

/// What the drain view wants of an instance's destination in an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Want {
    /// Takes new selections.
    Active,
    /// Takes none (R-EX-1); what it holds stays.
    Drain,
}

impl Want {
    /// The word in status, logs and the audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            Want::Active => "active",
            Want::Drain => "drain",
        }
    }
}

/// What an engine says of one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    /// In the engine's own words (Kamailio's flags `AP`, `DX`; HAProxy's
    /// admin state `ready`, `drain`, `maint`).
    pub(crate) says: String,
    /// Excluded from new selections by the bit the driver owns (Kamailio's
    /// `D`, HAProxy's forced drain).
    pub(crate) excluded: bool,
}

impl Seen {
    /// Does the engine hold what the view wants?
    pub(crate) fn agrees(&self, want: Want) -> bool {
        self.excluded == (want == Want::Drain)
    }
}

/// One engine, as a driver sees it.
pub(crate) trait Backend: Send + Sync + 'static {
    /// Where it is, for status, logs and the audit log.
    fn address(&self) -> String;
    /// The engine's name for an instance's destination, if it drives it.
    fn target(&self, id: &str) -> Option<String>;
    /// Every driven instance the engine knows, by instance id; one it does
    /// not know is missing from the map.
    fn read(&self) -> BoxFuture<'_, Result<BTreeMap<String, Seen>, EngineError>>;
    /// Sets one instance's destination.
    fn apply<'a>(&'a self, id: &'a str, want: Want) -> BoxFuture<'a, Result<(), EngineError>>;
}
