//! The nodes of a site with a node registry (etcd), as status sums them
//! (R-ST-1, R-ST-3, R-MN-2): every registered node that reports work
//! becomes one answer and one outcome of a [`Round`], whether it is live
//! (its published report), expired or departed (the reason, so its
//! instances stay unknown and never `drained`).
//!
//! On the embedded store there is no registry: status asks the nodes' admin
//! addresses instead ([`crate::status::ask_all`]).

use std::net::SocketAddr;

use crate::fetch::Fetcher;
use crate::round::{NodeAnswer, Round};
use ringsync::node::{Liveness, NodeEntry};
use ringsync::store::{Store, StoreError};
use ringsync::work::{self, Unknown, WorkReport};

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

/// R-ST-3: a published report is as old as the publisher's last change
/// check ([`ringsync::publish::CHECK_EVERY`]) plus its write, so a call set
/// up since, on an instance that still takes new work (R-SG-2: no other
/// normal instance up), is missing from it. Each live node is asked for
/// its report now at its admin address; the fresh answer replaces the
/// record's. A node that does not answer here keeps its record's counts,
/// which then vouch for nothing: its instances stay `draining`, with why.
/// (Seed 2026's chaos hour: a record from before a call said sg-a drained
/// while it held the call, issue 40.)
pub async fn ask_live(mut round: Round, fetcher: &Fetcher, site: &str) -> Round {
    let asks = round
        .answers
        .iter()
        .zip(&round.outcomes)
        .map(|(a, o)| async move {
            match &o.report {
                Ok(_) if a.error.is_none() => Some(fetcher.work_report(a.addr).await),
                _ => None,
            }
        });
    let fresh = futures::future::join_all(asks).await;
    for ((a, o), got) in round
        .answers
        .iter_mut()
        .zip(round.outcomes.iter_mut())
        .zip(fresh)
    {
        let (Some(got), Ok(record)) = (got, o.report.as_mut()) else {
            continue;
        };
        match got {
            Ok(r) if r.node == record.node && r.kind == o.kind && r.site == site => {
                a.revision = Some(r.revision);
                a.started_ms = Some(r.started_ms);
                a.run = r.run.clone();
                *record = r;
            }
            Ok(r) => not_vouched(
                record,
                &format!(
                    "its address answers as node `{}` of site `{}`",
                    r.node, r.site
                ),
            ),
            Err(e) => not_vouched(record, &e.to_string()),
        }
    }
    round
}

/// A published report whose node could not be asked now: its counts stay
/// (a lower bound), but vouch for no instance (R-ST-3).
fn not_vouched(record: &mut WorkReport, why: &str) {
    let age_ms = work::now_ms().saturating_sub(record.generated_ms);
    for w in record.instances.values_mut() {
        w.unknown.get_or_insert_with(|| Unknown {
            reason: format!(
                "its published report is {age_ms} ms old and it was not asked now ({why}): \
                 work set up since is not in it"
            ),
            until_ms: None,
        });
    }
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
