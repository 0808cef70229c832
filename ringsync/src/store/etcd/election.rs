//! The planner election on etcd (R-MN-3): the node that creates
//! `P/handover/election` under its own lease plans; the others stand by.
//!
//! The lease is renewed every third of its time to live. When a renewal
//! fails the leadership is lost at once (the runner stops before its next
//! move), and etcd deletes the key when the lease expires, which wakes the
//! standbys. Every move is written under a compare on this lease
//! ([`super::handover`]), so even a planner that does not notice its loss in
//! time cannot write a move once another node holds the key.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use serde::{Deserialize, Serialize};

use super::{json, Inner};
use crate::store::handover::{Campaign, Leadership, Release};
use crate::store::StoreError;
use crate::work::now_ms;

/// Time to live of the planner's lease: how long a planner that died keeps
/// the others waiting.
pub const PLANNER_LEASE_TTL_S: i64 = 5;
/// Renewal period (a third of the time to live: two may be lost).
const RENEW_EVERY: Duration = Duration::from_millis(PLANNER_LEASE_TTL_S as u64 * 1000 / 3);

/// The value of the election key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Elected {
    pub(super) node: String,
    pub(super) lease: i64,
    pub(super) since_ms: u64,
}

/// One attempt to be elected: the election key `key` taken under a new
/// lease, or who holds it.
pub(super) async fn campaign(
    inner: &Arc<Inner>,
    key: &str,
    node: &str,
) -> Result<Campaign, StoreError> {
    // A standby asks this often: a plain read, no lease, while a planner lives.
    let mut kv = inner.client.kv_client();
    let cur = inner
        .rpc("reading the planner election", kv.get(key, None))
        .await?;
    if let Some(kv) = cur.kvs().first() {
        return Ok(Campaign::Held {
            by: holder(kv.value()),
        });
    }
    let mut lc = inner.client.lease_client();
    let lease = inner
        .rpc(
            "granting the planner lease",
            lc.grant(PLANNER_LEASE_TTL_S, None),
        )
        .await?
        .id();
    let value = json(&Elected {
        node: node.to_owned(),
        lease,
        since_ms: now_ms(),
    })?;
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key,
            value,
            Some(PutOptions::new().with_lease(lease)),
        )])
        .or_else([TxnOp::get(key, None)]);
    let resp = match inner.rpc("campaigning to plan", kv.txn(txn)).await {
        Ok(r) => r,
        Err(e) => {
            revoke(inner, lease).await;
            return Err(e);
        }
    };
    if !resp.succeeded() {
        revoke(inner, lease).await;
        let by = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().and_then(|kv| holder(kv.value())),
            _ => None,
        });
        return Ok(Campaign::Held { by });
    }
    tracing::info!(node, lease, "elected Active-Passive planner (etcd lease)");
    let (tx, held) = watch::channel(true);
    let token = inner.token.child_token();
    tokio::spawn(renew(inner.clone(), lease, tx, token.clone()));
    let owner = inner.clone();
    let release: Release = Box::new(move || {
        Box::pin(async move {
            token.cancel();
            revoke(&owner, lease).await;
        })
    });
    Ok(Campaign::Elected(Leadership::new(
        node, lease, held, release,
    )))
}

fn holder(value: &[u8]) -> Option<String> {
    serde_json::from_slice::<Elected>(value)
        .ok()
        .map(|e| e.node)
}

/// Renews the lease until it is lost or given up; then `held` turns false.
async fn renew(inner: Arc<Inner>, lease: i64, held: watch::Sender<bool>, token: CancellationToken) {
    let reason = super::registry::keep_alive(&inner, lease, &token, RENEW_EVERY).await;
    if !token.is_cancelled() {
        tracing::warn!(
            reason,
            lease,
            "planner lease lost; no further move from this node"
        );
    }
    held.send_replace(false);
}

async fn revoke(inner: &Inner, lease: i64) {
    let mut lc = inner.client.lease_client();
    if let Err(e) = inner
        .rpc("revoking the planner lease", lc.revoke(lease))
        .await
    {
        tracing::debug!(error = %e, lease, "planner lease not revoked; it will expire");
    }
}
