//! The node registry's model: which nodes serve a site, what each one
//! reports, and how that becomes the per-node outcomes `ringsync_ops::sum` adds up
//! (R-ST-1, R-ST-3, R-MN-2).
//!
//! Every node (gate, media controller, `ringsync serve`) publishes a
//! [`NodeRecord`] under a lease in the store; the store also keeps a
//! lease-less member entry, so a node whose lease expired is still named
//! ([`Liveness::Expired`]) rather than silently dropped, and its instances
//! stay `draining`. Plain data: the store backends read and write it, the
//! publisher ([`crate::publish`]) fills it.

use serde::{Deserialize, Serialize};

// From its leaf module, not `crate::store`: the store names `node`'s records,
// so going through `store` would be an import cycle (issue 24).
use crate::store::freshness::Freshness;
use crate::work::{in_words, NodeKind, NodeOutcome, WorkReport};

/// What a registered node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeRole {
    /// A sip-gate node (reports the work of sg/esg instances).
    Gate,
    /// A media-ctl node (reports the calls on mg/bgmg instances).
    MediaCtl,
    /// A `ringsync serve` node (reports no work).
    Ringsync,
}

impl NodeRole {
    /// The work-report kind of this role; `None` for roles that report no work.
    pub fn work_kind(self) -> Option<NodeKind> {
        match self {
            NodeRole::Gate => Some(NodeKind::Gate),
            NodeRole::MediaCtl => Some(NodeKind::MediaCtl),
            NodeRole::Ringsync => None,
        }
    }

    /// The name used in keys and output.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeRole::Gate => "gate",
            NodeRole::MediaCtl => "media_ctl",
            NodeRole::Ringsync => "ringsync",
        }
    }
}

impl std::fmt::Display for NodeRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who a node is: fixed for the life of the process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeIdentity {
    /// Unique on the site (default: the node's admin address).
    pub node: String,
    /// What it is.
    pub role: NodeRole,
    /// Where its admin endpoint answers.
    pub address: String,
    /// When the process started (Unix ms).
    pub started_ms: u64,
}

/// What a node publishes under its lease. It is rewritten only when it
/// changes (not on a timer), so an idle node costs the store nothing but its
/// lease keep-alives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Who.
    #[serde(flatten)]
    pub id: NodeIdentity,
    /// Profile revision of the node's drain view.
    pub view_revision: u64,
    /// Whether the node's view is current (R-MN-2).
    #[serde(default)]
    pub freshness: Freshness,
    /// The short hash of the site file the node runs (every role, also
    /// those that report no work); empty from a node that predates it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub site_hash: String,
    /// Its work report (gates and media controllers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<WorkReport>,
}

impl NodeRecord {
    /// True when `other` says the same thing: everything but the report's
    /// time stamp, so an unchanged node is not republished.
    pub fn same_as(&self, other: &NodeRecord) -> bool {
        let strip = |r: &NodeRecord| {
            let mut r = r.clone();
            if let Some(w) = &mut r.report {
                w.generated_ms = 0;
            }
            r
        };
        strip(self) == strip(other)
    }

    /// The total work in its report (0 without one).
    pub fn work_total(&self) -> u64 {
        self.report.as_ref().map_or(0, |r| {
            r.instances
                .values()
                .map(|w| w.counts.total())
                .fold(0u64, u64::saturating_add)
        })
    }
}

/// The lease-less part of a registration, kept until the node withdraws
/// cleanly with no work or an operator forgets it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMember {
    /// Who.
    #[serde(flatten)]
    pub id: NodeIdentity,
    /// Set when the node stopped cleanly while still holding work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left: Option<Departure>,
}

/// A clean stop with work left (the calls may go on through other nodes,
/// which did not see them set up, so nobody can vouch for them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Departure {
    /// When it stopped (Unix ms).
    pub at_ms: u64,
    /// The work it still held.
    pub work: u64,
}

/// Whether a registered node is alive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Liveness {
    /// Its lease is alive; its latest record.
    Live {
        /// The record.
        record: Box<NodeRecord>,
    },
    /// Registered, but its lease expired: it crashed, hangs or is cut off
    /// from the store. Its work is unknown.
    Expired,
    /// It stopped cleanly while holding work.
    Left {
        /// When and with how much.
        departure: Departure,
    },
}

/// A node as the registry knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeEntry {
    /// Who.
    #[serde(flatten)]
    pub id: NodeIdentity,
    /// Alive or not.
    pub liveness: Liveness,
}

impl NodeEntry {
    /// The outcome `ringsync_ops::sum` needs, for roles that report work: the
    /// report, or why there is none (R-ST-3: never a silent drop).
    pub fn outcome(&self, now_ms: u64) -> Option<NodeOutcome> {
        let kind = self.id.role.work_kind()?;
        let report = match &self.liveness {
            Liveness::Live { record } => match &record.report {
                Some(r) => Ok(r.clone()),
                None => Err("registered but has published no work report yet".to_owned()),
            },
            Liveness::Expired => Err(format!(
                "lease expired (node at {} stopped renewing it; crashed, hung or cut off \
                 from the store); its work is unknown",
                self.id.address
            )),
            Liveness::Left { departure } => Err(format!(
                "stopped {} ago holding {} work item(s), which may go on through other \
                 nodes; `ringsync node forget {}` once they are over",
                ago(departure.at_ms, now_ms),
                departure.work,
                self.id.node
            )),
        };
        Some(NodeOutcome {
            node: self.id.node.clone(),
            kind,
            report,
        })
    }

    /// One line for the node list.
    pub fn describe(&self, now_ms: u64) -> String {
        match &self.liveness {
            Liveness::Live { record } => {
                if record.freshness.is_stale() {
                    format!(
                        "live, view revision {}, {}",
                        record.view_revision,
                        record.freshness.describe(now_ms)
                    )
                } else {
                    format!("live, view revision {}", record.view_revision)
                }
            }
            Liveness::Expired => "LEASE EXPIRED: work unknown".to_owned(),
            Liveness::Left { departure } => format!(
                "stopped {} ago with {} work item(s)",
                ago(departure.at_ms, now_ms),
                departure.work
            ),
        }
    }
}

/// The outcomes of every work-reporting node, in registry order.
pub fn outcomes(entries: &[NodeEntry], now_ms: u64) -> Vec<NodeOutcome> {
    entries.iter().filter_map(|e| e.outcome(now_ms)).collect()
}

fn ago(at_ms: u64, now_ms: u64) -> String {
    // `in_words` counts forward; mirror the interval.
    let words = in_words(now_ms, at_ms);
    words.strip_prefix("in ").unwrap_or(&words).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::work::{InstanceWork, WorkCounts};
    use std::collections::BTreeMap;

    fn id(role: NodeRole) -> NodeIdentity {
        NodeIdentity {
            node: "n1".into(),
            role,
            address: "127.0.0.1:9091".into(),
            started_ms: 1,
        }
    }

    fn record(generated_ms: u64, dialogs: u64) -> NodeRecord {
        let mut instances = BTreeMap::new();
        instances.insert(
            "sg-a".to_owned(),
            InstanceWork {
                counts: WorkCounts {
                    dialogs,
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        NodeRecord {
            site_hash: String::new(),
            id: id(NodeRole::Gate),
            view_revision: 3,
            freshness: Freshness::fresh(9),
            report: Some(WorkReport {
                site_hash: String::new(),
                backups: Vec::new(),
                run: None,
                site: "t".into(),
                node: "n1".into(),
                kind: NodeKind::Gate,
                scope: String::new(),
                started_ms: 1,
                generated_ms,
                revision: 3,
                generation: 4,
                instances,
            }),
        }
    }

    #[test]
    fn time_stamps_alone_are_no_change() {
        assert!(record(1, 2).same_as(&record(99, 2)));
        assert!(!record(1, 2).same_as(&record(1, 3)));
        assert_eq!(record(1, 5).work_total(), 5);
    }

    #[test]
    fn r_st_3_expired_and_departed_nodes_are_named_not_dropped() {
        let live = NodeEntry {
            id: id(NodeRole::Gate),
            liveness: Liveness::Live {
                record: Box::new(record(1, 2)),
            },
        };
        assert!(live.outcome(0).unwrap().report.is_ok());
        let expired = NodeEntry {
            liveness: Liveness::Expired,
            ..live.clone()
        };
        let o = expired.outcome(0).unwrap();
        assert!(o.report.unwrap_err().contains("lease expired"));
        let left = NodeEntry {
            liveness: Liveness::Left {
                departure: Departure {
                    at_ms: 1_000,
                    work: 4,
                },
            },
            ..live.clone()
        };
        let e = left.outcome(61_000).unwrap().report.unwrap_err();
        assert!(e.contains("stopped 1m 0s ago holding 4"), "{e}");
        let rs = NodeEntry {
            id: id(NodeRole::Ringsync),
            liveness: Liveness::Expired,
        };
        assert!(rs.outcome(0).is_none(), "ringsync reports no work");
        assert_eq!(outcomes(&[live, expired, rs], 0).len(), 2);
    }
}
