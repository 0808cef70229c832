//! The site's status as operators read it (R-ST-1, R-ST-3): ask every node
//! that should report work, sum their reports over the drain view with
//! [`sum`](crate::sum::sum), and hand out one shape, [`SiteStatus`], for both
//! `ringsync status --json` and `GET /v1/status` of `ringsync serve`.
//!
//! A node that does not answer, answers for another site or as another kind
//! of node, counts as a node that did not report: the instances it would
//! count stay unknown (never `drained`), with its reason.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;

use crate::fetch::Fetcher;
use crate::round::Round;
pub use crate::round::{NodeAddr, SiteFile, SiteStatus};
use ringsync::config::SiteConfig;
use ringsync::store::Store;
use ringsync::view::DrainView;
use ringsync::work::NodeKind;

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
    /// Reading the store's node registry (several nodes, etcd), then
    /// asking its live nodes now (R-ST-3, [`crate::sitewide::ask_live`]).
    Registry(Arc<dyn Store>, Box<Fetcher>),
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
            source: Source::Registry(store, Box::default()),
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
            Source::Registry(store, fetcher) => {
                match crate::sitewide::round(store.as_ref()).await {
                    Ok(Some(r)) => crate::sitewide::ask_live(r, fetcher, &self.site).await,
                    Ok(None) => Round::default(),
                    Err(e) => crate::sitewide::unreadable(&self.latest(), &e),
                }
            }
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
