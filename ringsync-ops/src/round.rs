//! What one asking of every node gave ([`Round`]), the shape both the
//! status summing ([`crate::status`]) and the registry reading
//! ([`crate::sitewide`]) fill. It sits below both so neither imports the
//! other's types (issue 24); `Round`'s methods stay in `status`.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use ringsync::work::{NodeKind, NodeOutcome};

/// What asking one node gave, as status shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAnswer {
    /// What it counts.
    pub kind: NodeKind,
    /// Where it was asked.
    pub addr: SocketAddr,
    /// The name it reports under; absent when it gave no usable report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The profile revision its drain view is built from: behind the
    /// store's while it has not applied the latest change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// When it started (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<u64>,
    /// Why it gave no usable report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Set while the node's own view is stale (its store unreachable, R-MN-2):
    /// since when (Unix ms). Known from the node registry only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_since_ms: Option<u64>,
    /// The short hash of the site file it runs (from its report or its
    /// record); absent when it gave none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site_hash: Option<String>,
}

/// One asking of every node: what each answered, and the reports to sum.
#[derive(Debug, Clone, Default)]
pub struct Round {
    /// Per node, in the order asked.
    pub answers: Vec<NodeAnswer>,
    /// The same nodes, as [`crate::sum::sum`] takes them.
    pub outcomes: Vec<NodeOutcome>,
}
