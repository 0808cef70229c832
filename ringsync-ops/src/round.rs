//! What one asking of every node gave ([`Round`]), the shape both the
//! status asking ([`crate::status`]) and the registry reading
//! ([`crate::sitewide`]) fill, and the site status it sums to
//! ([`SiteStatus`]). It sits below both so neither imports the other's
//! types (issue 24); [`crate::status`] re-exports the status types.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::sum::{self, InstanceStatus, PoolBackupFrom};
use ringsync::store::Freshness;
use ringsync::view::DrainView;
use ringsync::work::{self, NodeKind, NodeOutcome, WorkReport};

/// A node expected to report on this site, and where it is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAddr {
    /// What it counts.
    pub kind: NodeKind,
    /// Its admin address (it serves [`work::WORK_PATH`] there).
    pub addr: SocketAddr,
}

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
    /// Which run of its binary answered (issue 39: a gate upgraded in
    /// place changes runs); absent when it gave no report or predates it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<work::RunInfo>,
}

/// One asking of every node: what each answered, and the reports to sum.
#[derive(Debug, Clone, Default)]
pub struct Round {
    /// Per node, in the order asked.
    pub answers: Vec<NodeAnswer>,
    /// The same nodes, as [`crate::sum::sum`] takes them.
    pub outcomes: Vec<NodeOutcome>,
}

/// The status of a site: `ringsync status --json` and `GET /v1/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteStatus {
    /// Site name.
    pub site: String,
    /// Profile revision of the drain view.
    pub revision: u64,
    /// Servers in the drain zone (R-PR-3).
    pub drain_zone: BTreeSet<String>,
    /// When this status was made (Unix ms).
    pub generated_ms: u64,
    /// Every node asked, and what it answered.
    pub nodes: Vec<NodeAnswer>,
    /// Every instance, in config order: state and summed work (R-ST-1, R-ST-3).
    pub instances: Vec<InstanceStatus>,
    /// Whether the profiles behind this status are current, and since when
    /// not (R-MN-2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<Freshness>,
    /// The engines `ringsync serve` drives (R-EX-1); only a serve node
    /// knows them, so a status computed by the CLI itself has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engines: Option<Vec<crate::engine::EngineStatus>>,
    /// Pools under their health threshold whose new dialogs a gate sends
    /// to their backup, per gate (R-HT-1); empty while none is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backups: Vec<PoolBackupFrom>,
    /// The site file this status was made with, and whether the nodes run
    /// it (issue 27).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site_file: Option<SiteFile>,
}

/// Which site files a site's nodes run, by their short hashes
/// (`ringsync::config::file_hash`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteFile {
    /// The hash of the file this status was made with (the CLI's, or
    /// `ringsync serve`'s).
    pub hash: String,
    /// Every hash a node reported, with the nodes that run it.
    pub nodes: BTreeMap<String, Vec<String>>,
    /// Set when the nodes and this status do not all run one file: what an
    /// operator reads (a node not reloaded, or a file not copied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

impl SiteFile {
    /// The site file of a status made with the file hashed `own`, over
    /// these node answers.
    pub fn of(own: &str, answers: &[NodeAnswer]) -> Option<SiteFile> {
        let mut nodes: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for a in answers {
            if let Some(h) = &a.site_hash {
                let name = a.node.clone().unwrap_or_else(|| a.addr.to_string());
                nodes.entry(h.clone()).or_default().push(name);
            }
        }
        let differ = nodes.len() > 1 || nodes.keys().any(|h| h != own);
        let warning = differ.then(|| {
            let each: Vec<String> = nodes
                .iter()
                .map(|(h, n)| format!("{h} on {}", n.join(", ")))
                .collect();
            format!(
                "the nodes do not run the same site file: {}; this status read {own} \
                 (copy the file to every node and reload them: `systemctl reload`)",
                each.join("; ")
            )
        });
        Some(SiteFile {
            hash: own.to_owned(),
            nodes,
            warning,
        })
    }
}

impl Round {
    /// A round in which no node has been asked yet: every node is unknown.
    pub fn not_asked(nodes: &[NodeAddr]) -> Round {
        let failed = nodes
            .iter()
            .map(|n| (*n, Err("not asked yet".to_owned())))
            .collect::<Vec<_>>();
        Round::from_results(failed)
    }

    pub(crate) fn from_results(results: Vec<(NodeAddr, Result<WorkReport, String>)>) -> Round {
        let mut round = Round::default();
        for (at, report) in results {
            let answer = match &report {
                Ok(r) => NodeAnswer {
                    kind: at.kind,
                    addr: at.addr,
                    node: Some(r.node.clone()),
                    revision: Some(r.revision),
                    started_ms: Some(r.started_ms),
                    error: None,
                    stale_since_ms: None,
                    site_hash: Some(r.site_hash.clone()).filter(|h| !h.is_empty()),
                    run: r.run.clone(),
                },
                Err(e) => NodeAnswer {
                    kind: at.kind,
                    addr: at.addr,
                    node: None,
                    revision: None,
                    started_ms: None,
                    error: Some(e.clone()),
                    stale_since_ms: None,
                    site_hash: None,
                    run: None,
                },
            };
            let node = answer.node.clone().unwrap_or_else(|| at.addr.to_string());
            round.answers.push(answer);
            round.outcomes.push(NodeOutcome {
                node,
                kind: at.kind,
                report,
            });
        }
        round
    }

    /// The site's status: these answers summed over `view`.
    pub fn status(&self, view: &DrainView) -> SiteStatus {
        SiteStatus {
            site: view.config().site.name.clone(),
            revision: view.revision(),
            drain_zone: view.drain_zone().clone(),
            generated_ms: work::now_ms(),
            nodes: self.answers.clone(),
            instances: sum::sum(view, &self.outcomes),
            store: None,
            engines: None,
            backups: sum::backups(&self.outcomes),
            site_file: SiteFile::of(&view.config().hash, &self.answers),
        }
    }
}
