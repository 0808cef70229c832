//! The nodes of a site with a node registry (etcd), as status sums them
//! (R-ST-1, R-ST-3, R-MN-2): every registered node that reports work
//! becomes one answer and one outcome of a [`Round`], whether it is live
//! (its published report), expired or departed (the reason, so its
//! instances stay unknown and never `drained`).
//!
//! On the embedded store there is no registry: status asks the nodes' admin
//! addresses instead ([`crate::status::ask_all`]).

use std::net::SocketAddr;

use crate::round::{NodeAnswer, Round};
use ringsync::node::{Liveness, NodeEntry};
use ringsync::store::{Store, StoreError};
use ringsync::work;

/// One round from the store's registry; `None` when it keeps none.
pub async fn round(store: &dyn Store) -> Result<Option<Round>, StoreError> {
    Ok(store
        .nodes()
        .await?
        .map(|entries| from_entries(&entries, work::now_ms())))
}

/// The round these registry entries make (nodes that report no work, such
/// as `ringsync serve`, are left out).
pub fn from_entries(entries: &[NodeEntry], now_ms: u64) -> Round {
    let mut round = Round::default();
    for e in entries {
        let Some(outcome) = e.outcome(now_ms) else {
            continue;
        };
        let addr =
            e.id.address
                .parse()
                .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
        let answer = match (&e.liveness, &outcome.report) {
            (Liveness::Live { record }, Ok(r)) => NodeAnswer {
                kind: outcome.kind,
                addr,
                node: Some(e.id.node.clone()),
                revision: Some(r.revision),
                started_ms: Some(r.started_ms),
                error: None,
                stale_since_ms: record.freshness.stale_since_ms,
                site_hash: hash_of(&record.site_hash, &r.site_hash),
                run: r.run.clone(),
            },
            (_, report) => NodeAnswer {
                kind: outcome.kind,
                addr,
                node: Some(e.id.node.clone()),
                revision: None,
                started_ms: Some(e.id.started_ms),
                error: report.as_ref().err().cloned(),
                stale_since_ms: None,
                site_hash: match &e.liveness {
                    Liveness::Live { record } => hash_of(&record.site_hash, ""),
                    _ => None,
                },
                run: None,
            },
        };
        round.answers.push(answer);
        round.outcomes.push(outcome);
    }
    round
}

/// A node's site file hash: its record's, else its report's; `None` when
/// it gave neither (a node that predates them).
fn hash_of(record: &str, report: &str) -> Option<String> {
    [record, report]
        .into_iter()
        .find(|h| !h.is_empty())
        .map(str::to_owned)
}

/// A round in which the registry could not be read: every node known from
/// `last` is unknown for that reason (R-ST-3: a missing report never makes
/// an instance `drained`).
pub fn unreadable(last: &Round, why: &StoreError) -> Round {
    let reason = format!("node registry unreadable: {why}");
    let mut round = last.clone();
    for a in &mut round.answers {
        a.error = Some(reason.clone());
        a.revision = None;
    }
    for o in &mut round.outcomes {
        o.report = Err(reason.clone());
    }
    round
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringsync::node::{Departure, NodeIdentity, NodeRole};
    use ringsync::store::BackendError;

    fn entry(node: &str, role: NodeRole, liveness: Liveness) -> NodeEntry {
        NodeEntry {
            id: NodeIdentity {
                node: node.into(),
                role,
                address: "127.0.0.1:9091".into(),
                started_ms: 5,
            },
            liveness,
        }
    }

    #[test]
    fn r_st_3_every_registered_work_node_is_an_outcome() {
        let entries = [
            entry("g1", NodeRole::Gate, Liveness::Expired),
            entry(
                "g2",
                NodeRole::Gate,
                Liveness::Left {
                    departure: Departure { at_ms: 0, work: 2 },
                },
            ),
            entry("rs", NodeRole::Ringsync, Liveness::Expired),
        ];
        let r = from_entries(&entries, 1_000);
        assert_eq!(r.answers.len(), 2, "ringsync reports no work");
        assert!(r.outcomes.iter().all(|o| o.report.is_err()));
        assert!(r.answers[0]
            .error
            .as_deref()
            .unwrap()
            .contains("lease expired"));
        let down = unreadable(&r, &StoreError::Backend(BackendError::Task("x".into())));
        assert!(down.outcomes[0]
            .report
            .as_ref()
            .unwrap_err()
            .starts_with("node registry unreadable"));
    }
}
