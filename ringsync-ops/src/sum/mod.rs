//! How the work reports of every node of a site add up to one truthful
//! state per instance (R-ST-3): [`sum`]. An instance is `drained` only when
//! every node that routes to it reported, vouches for its count, and the
//! counts add up to zero; anything else keeps it `draining` with the
//! reasons and the time when the answer will be known.
//!
//! The reports themselves ([`WorkReport`](ringsync::work::WorkReport),
//! [`NodeOutcome`]) are the
//! model's (`ringsync::work`): the data plane writes them; only the
//! operator plane (`ringsync status`, the API, the handover) sums them.

use ringsync::config::{Service, SiteConfig};
use ringsync::view::{DrainView, Health, InstanceState, InstanceView, Zone};
use ringsync::work::{Eta, NodeKind, NodeOutcome, PoolBackup, Unreachable, WorkCounts};
use serde::{Deserialize, Serialize};

/// A [`PoolBackup`] as the site status shows it: with the node that said it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolBackupFrom {
    /// The gate node that sends the pool's new dialogs to the backup.
    pub node: String,
    /// Which pool, where to, why and since when.
    #[serde(flatten)]
    pub what: PoolBackup,
}

/// Every pool some node sends to its backup, per node, from the reports in
/// `outcomes` (R-HT-1).
pub fn backups(outcomes: &[NodeOutcome]) -> Vec<PoolBackupFrom> {
    outcomes
        .iter()
        .filter_map(|o| o.report.as_ref().ok().map(|r| (o, r)))
        .flat_map(|(o, r)| {
            r.backups.iter().map(|b| PoolBackupFrom {
                node: o.node.clone(),
                what: b.clone(),
            })
        })
        .collect()
}

/// An [`Unreachable`] as the site status shows it: with the node that saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnreachableFrom {
    /// The node whose connection failed.
    pub node: String,
    /// What failed, and until when.
    #[serde(flatten)]
    pub what: Unreachable,
}

/// The site-wide work and state of one instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceStatus {
    /// Instance id.
    pub id: String,
    /// Its service.
    pub service: Service,
    /// Its server.
    pub server: String,
    /// Its zone.
    pub zone: Zone,
    /// Health as the nodes see it: `down` if any node's probe fails, `up`
    /// if one answers and none fails.
    pub health: Health,
    /// State from zone, health and the summed work (R-ST-1, R-ST-3).
    pub state: InstanceState,
    /// The summed work, when every node that routes to it vouched for its count.
    pub work: Option<u64>,
    /// The summed counts of the nodes that reported (a lower bound when
    /// `work` is absent).
    pub counts: WorkCounts,
    /// Why `work` is absent, one line per cause.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<String>,
    /// When every node that could not vouch will know (Unix ms), if they said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_at_ms: Option<u64>,
    /// The drain ETA, merged over the nodes.
    #[serde(default, skip_serializing_if = "Eta::is_empty")]
    pub eta: Eta,
    /// bgmg: stoppable only if every reporting node says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stoppable: Option<bool>,
    /// mg: its weight for new calls, the lowest any media controller
    /// reported (see [`InstanceWork::weight`](ringsync::work::InstanceWork::weight)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// The nodes whose reports cover it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// Transports over which some node could not reach it lately, per node
    /// (see [`InstanceWork::unreachable`](ringsync::work::InstanceWork::unreachable)); its `state` says nothing of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreachable: Vec<UnreachableFrom>,
}

/// Sums the reports of every node of the site into one status per instance
/// (R-ST-3). `outcomes` must list every node expected to report: a node
/// whose report is missing makes every instance it would count unknown.
///
/// An instance that no expected node counts (a `ws`, an mg when no media
/// controller is configured, an Active-Passive service when the handover
/// records are not among the outcomes) has no known work: it is never
/// `drained`, and says why. An instance no node answered for, whose health
/// nobody knows either, is [`InstanceState::Unknown`] (R-ST-4): not `up`,
/// whatever its zone; so is a normal-zone `ws` whose health no gate knows
/// (nothing probes it: a gate knows it by its connects, R-WS-3).
pub fn sum(view: &DrainView, outcomes: &[NodeOutcome]) -> Vec<InstanceStatus> {
    view.instances()
        .iter()
        .map(|iv| sum_instance(view.config(), view.revision(), iv, outcomes))
        .collect()
}

/// What the reports said of one instance so far.
struct Tally {
    /// Nodes expected to count it.
    expected: usize,
    /// False once one of them could not vouch for its work.
    vouched: bool,
    any_up: bool,
    any_down: bool,
}

/// One instance's status from every node expected to count it.
fn sum_instance(
    site: &SiteConfig,
    revision: u64,
    iv: &InstanceView,
    outcomes: &[NodeOutcome],
) -> InstanceStatus {
    let mut st = InstanceStatus {
        id: iv.id.clone(),
        service: iv.service.clone(),
        server: iv.server.clone(),
        zone: iv.zone,
        health: Health::Unknown,
        state: iv.state,
        work: None,
        counts: WorkCounts::default(),
        unknown: Vec::new(),
        known_at_ms: None,
        eta: Eta::default(),
        stoppable: None,
        weight: None,
        nodes: Vec::new(),
        unreachable: Vec::new(),
    };
    let mut t = Tally {
        expected: 0,
        vouched: true,
        any_up: false,
        any_down: false,
    };
    for o in outcomes
        .iter()
        .filter(|o| o.kind.counts_on(site, &iv.service))
    {
        t.expected += 1;
        add_report(&mut st, &mut t, (&iv.id, revision), o);
    }
    if t.expected == 0 {
        t.vouched = false;
        st.unknown.push(format!(
            "no node of this site counts the work of `{}` instances",
            iv.service
        ));
    }
    st.health = if t.any_down {
        Health::Down
    } else if t.any_up {
        Health::Up
    } else {
        iv.health
    };
    st.work = t.vouched.then(|| st.counts.total());
    // R-ST-4: nobody answered for it and nobody knows its health:
    // neither `up` (nobody saw it up) nor anything the zone implies. A
    // pooled `ws` has no probe: its gates know its health only from their
    // connects to it (R-WS-3), so one none of them has reached lately is
    // not `up` either; in the drain zone its work (always known) says
    // `draining` or `drained`.
    let unseen_ws = iv.service == Service::Ws && iv.zone == Zone::Normal;
    st.state = if (st.nodes.is_empty() || unseen_ws) && st.health == Health::Unknown {
        InstanceState::Unknown
    } else {
        InstanceState::of(iv.zone, st.health, st.work)
    };
    st
}

/// Adds what node `o` says of instance `id` (or that it says nothing);
/// `revision`: the profile revision of the view being summed.
fn add_report(
    st: &mut InstanceStatus,
    t: &mut Tally,
    (id, revision): (&str, u64),
    o: &NodeOutcome,
) {
    let report = match &o.report {
        Ok(r) => r,
        Err(e) => {
            t.vouched = false;
            st.unknown.push(format!("{} {}: {e}", o.kind, o.node));
            return;
        }
    };
    // A gate or media controller still routing by an older revision than
    // the one summed may not have applied this drain yet: it can give the
    // instance new work after its report said none, so its count cannot
    // make it `drained` (R-ST-3). The Active-Passive records carry the
    // reader's own revision.
    if report.kind != NodeKind::Handover && report.revision < revision {
        t.vouched = false;
        st.unknown.push(format!(
            "{} {}: routes by profile revision {}, not yet {revision}",
            o.kind, o.node, report.revision
        ));
    }
    let Some(w) = report.instances.get(id) else {
        t.vouched = false;
        st.unknown
            .push(format!("{} {}: does not report it", o.kind, o.node));
        return;
    };
    st.nodes.push(o.node.clone());
    st.unreachable
        .extend(w.unreachable.iter().map(|u| UnreachableFrom {
            node: o.node.clone(),
            what: u.clone(),
        }));
    st.counts.add(&w.counts);
    st.eta.merge(&w.eta);
    match w.health {
        Health::Up => t.any_up = true,
        Health::Down => t.any_down = true,
        Health::Unknown => {}
    }
    if let Some(s) = w.stoppable {
        st.stoppable = Some(st.stoppable.unwrap_or(true) && s);
    }
    if let Some(x) = w.weight {
        st.weight = Some(st.weight.map_or(x, |y| y.min(x)));
    }
    if let Some(u) = &w.unknown {
        t.vouched = false;
        st.unknown
            .push(format!("{} {}: {}", o.kind, o.node, u.reason));
        st.known_at_ms = match (st.known_at_ms, u.until_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (_, b) => b,
        };
    }
}

#[cfg(test)]
mod tests;
