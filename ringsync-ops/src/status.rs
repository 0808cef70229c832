//! The site's status as operators read it (R-ST-1, R-ST-3): ask every node
//! that should report work, sum their reports over the drain view with
//! [`sum`](crate::sum::sum), and hand out one shape, [`SiteStatus`], for both
//! `ringsync status --json` and `GET /v1/status` of `ringsync serve`.
//!
//! A node that does not answer, answers for another site or as another kind
//! of node, counts as a node that did not report: the instances it would
//! count stay unknown (never `drained`), with its reason.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::fetch::Fetcher;
use crate::round::{NodeAnswer, Round};
use crate::sum::{self, InstanceStatus, PoolBackupFrom};
use ringsync::config::SiteConfig;
use ringsync::store::{Freshness, Store};
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

/// The nodes of a one-machine site: the gate at `admin.gate_bind` and
/// media-ctl at `admin.media_bind`, unless overridden. A kind whose
/// services the site does not have (no `mg`/`bgmg`: no media-ctl) is not
/// expected, so status names no such node missing; one given explicitly
/// (`--gate`, `--media`) is asked all the same.
pub fn local_nodes(
    config: &SiteConfig,
    gate: Option<SocketAddr>,
    media: Option<SocketAddr>,
) -> Vec<NodeAddr> {
    let has = |kind: NodeKind| {
        config
            .instances
            .iter()
            .any(|i| kind.counts_on(config, &i.service))
    };
    [
        (NodeKind::Gate, gate, config.admin.gate_bind),
        (NodeKind::MediaCtl, media, config.admin.media_bind),
    ]
    .into_iter()
    .filter(|(kind, given, _)| given.is_some() || has(*kind))
    .map(|(kind, given, default)| NodeAddr {
        kind,
        addr: given.unwrap_or(default),
    })
    .collect()
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

    fn from_results(results: Vec<(NodeAddr, Result<WorkReport, String>)>) -> Round {
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

/// Asks every node once, all at the same time, and checks that each report
/// is for `site` and from the kind of node expected there.
pub async fn ask_all(fetcher: &Fetcher, site: &str, nodes: &[NodeAddr]) -> Round {
    let asks = nodes.iter().map(|at| async move {
        let report = match fetcher.work_report(at.addr).await {
            // The address is named next to the reason already.
            Err(e) => Err(e.failure.to_string()),
            Ok(r) if r.kind != at.kind => Err(format!(
                "answered as a `{}` node where a `{}` was expected",
                r.kind, at.kind
            )),
            Ok(r) if r.site != site => Err(format!("reports for site `{}`, not `{site}`", r.site)),
            Ok(r) => Ok(r),
        };
        (*at, report)
    });
    Round::from_results(futures::future::join_all(asks).await)
}

/// The latest round of a site's nodes, kept fresh by [`NodeBoard::run`]
/// for `ringsync serve`.
pub struct NodeBoard {
    site: String,
    nodes: Vec<NodeAddr>,
    source: Source,
    latest: ArcSwap<Round>,
    /// Bumped after every round, so a long poll (`GET /v1/wait`) wakes
    /// when there is something new to look at instead of polling.
    rounds: tokio::sync::watch::Sender<u64>,
}

/// Where a board learns the nodes' reports.
enum Source {
    /// Asking each node's admin address (one machine, embedded store).
    Ask(Box<Fetcher>),
    /// Reading the store's node registry (several nodes, etcd).
    Registry(Arc<dyn Store>),
}

impl NodeBoard {
    /// A board for these nodes; until the first round, every node is unknown.
    pub fn new(site: impl Into<String>, nodes: Vec<NodeAddr>, fetcher: Fetcher) -> Arc<NodeBoard> {
        Arc::new(NodeBoard {
            site: site.into(),
            latest: ArcSwap::from_pointee(Round::not_asked(&nodes)),
            nodes,
            source: Source::Ask(Box::new(fetcher)),
            rounds: tokio::sync::watch::Sender::new(0),
        })
    }

    /// A board fed by `store`'s node registry (R-ST-3 across nodes).
    pub fn from_registry(site: impl Into<String>, store: Arc<dyn Store>) -> Arc<NodeBoard> {
        Arc::new(NodeBoard {
            site: site.into(),
            latest: ArcSwap::from_pointee(Round::default()),
            nodes: Vec::new(),
            source: Source::Registry(store),
            rounds: tokio::sync::watch::Sender::new(0),
        })
    }

    /// The nodes it asks (none when it reads a registry).
    pub fn nodes(&self) -> &[NodeAddr] {
        &self.nodes
    }

    /// Asks every node now and keeps the answers.
    pub async fn refresh(&self) -> Arc<Round> {
        let round = match &self.source {
            Source::Ask(fetcher) => ask_all(fetcher, &self.site, &self.nodes).await,
            Source::Registry(store) => match crate::sitewide::round(store.as_ref()).await {
                Ok(Some(r)) => r,
                Ok(None) => Round::default(),
                Err(e) => crate::sitewide::unreadable(&self.latest(), &e),
            },
        };
        let round = Arc::new(round);
        self.latest.store(round.clone());
        self.rounds.send_modify(|n| *n = n.wrapping_add(1));
        round
    }

    /// Changes after every round.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.rounds.subscribe()
    }

    /// The last round.
    pub fn latest(&self) -> Arc<Round> {
        self.latest.load_full()
    }

    /// The site's status from the last round over `view`.
    pub fn status(&self, view: &DrainView) -> SiteStatus {
        self.latest().status(view)
    }

    /// Refreshes every `every` until `shutdown`, logging when a node stops
    /// or starts answering.
    pub async fn run(self: Arc<Self>, every: Duration, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut was_ok: Vec<Option<bool>> = vec![None; self.nodes.len()];
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let round = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = self.refresh() => r,
            };
            for (a, was) in round.answers.iter().zip(was_ok.iter_mut()) {
                let ok = a.error.is_none();
                match (&a.error, *was) {
                    (Some(e), Some(true) | None) => tracing::warn!(
                        kind = %a.kind, addr = %a.addr, error = %e,
                        "node gives no work report; the instances it counts stay unknown"
                    ),
                    (None, Some(false)) => {
                        tracing::info!(kind = %a.kind, addr = %a.addr, "node reports again")
                    }
                    _ => {}
                }
                *was = Some(ok);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringsync::config::SiteConfig;
    use ringsync::profile::ProfileSet;
    use ringsync::view::InstanceState;
    use std::path::Path;

    #[test]
    fn before_the_first_round_nothing_is_known() {
        let text = "[site]\nname = \"t\"\n[[server]]\nname = \"s\"\n\
                    [[instance]]\nid = \"sg-a\"\nservice = \"sg\"\nserver = \"s\"\nsip = \"127.0.0.1:1\"\n";
        let config = Arc::new(SiteConfig::from_str_at(text, Path::new("/t.toml")).unwrap());
        let nodes = local_nodes(&config, None, Some("127.0.0.1:7".parse().unwrap()));
        assert_eq!(nodes[0].addr, config.admin.gate_bind);
        assert_eq!(nodes[1].addr.port(), 7);
        let view = DrainView::build(config, &ProfileSet::default(), &[], &[]);
        let st = Round::not_asked(&nodes).status(&view);
        assert_eq!(st.nodes[1].error.as_deref(), Some("not asked yet"));
        let sg = &st.instances[0];
        // R-ST-4: nobody answered for it and its health is not known.
        assert_eq!((sg.state, sg.work), (InstanceState::Unknown, None));
        assert_eq!(sg.unknown, ["gate 127.0.0.1:9091: not asked yet"]);
    }
}
