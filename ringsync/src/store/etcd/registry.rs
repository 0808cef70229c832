//! The node registry in etcd (R-ST-1, R-ST-3, R-MN-2).
//!
//! A node process holds one lease ([`LEASE_TTL_S`]) and keeps it alive every
//! [`KEEPALIVE_EVERY`] on one stream: with records rewritten only when they
//! change, that is the whole steady cost of an idle node (about 0.3
//! requests/s). Its live record sits under the lease, so it disappears when
//! the node dies; its member entry does not, so `ringsync status` can still
//! name a node whose lease expired. A lease lost in an outage is granted
//! again, and the last record rewritten, as soon as etcd answers.

use crate::store::BackendError;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{DeleteOptions, GetOptions, PutOptions, Txn, TxnOp};
use tokio::sync::Mutex;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::{json, Inner};
use crate::node::{Departure, Liveness, NodeEntry, NodeMember, NodeRecord};
use crate::store::StoreError;
use crate::work::now_ms;

/// Lease time to live: how long after its last keep-alive a dead node is
/// declared expired.
pub(super) const LEASE_TTL_S: i64 = 10;
/// Keep-alive period (a third of the TTL: two may be lost).
pub(super) const KEEPALIVE_EVERY: Duration = Duration::from_millis(LEASE_TTL_S as u64 * 1000 / 3);

/// This process's registration.
#[derive(Default)]
pub(crate) struct Registry {
    state: Mutex<RegState>,
}

#[derive(Default)]
struct RegState {
    last: Option<NodeRecord>,
    lease: Option<i64>,
    keeper: Option<DropGuard>,
}

fn escape(node: &str) -> String {
    node.replace('%', "%25").replace('/', "%2F")
}

fn unescape(key: &str) -> String {
    key.replace("%2F", "/").replace("%25", "%")
}

/// Publishes `record`: registers (lease, member entry) the first time, then
/// rewrites the live record under the lease.
pub(super) async fn publish(inner: Arc<Inner>, record: NodeRecord) -> Result<(), StoreError> {
    let mut st = inner.registry.state.lock().await;
    st.last = Some(record.clone());
    if st.keeper.is_none() {
        // A child of the store's token: dropping the store ends the keeper,
        // so a node that vanishes lets its lease expire.
        let token = inner.token.child_token();
        tokio::spawn(keeper(inner.clone(), token.clone()));
        st.keeper = Some(token.drop_guard());
    }
    match st.lease {
        None => register(&inner, &mut st).await.map(|_| ()),
        Some(lease) => {
            let key = format!("{}{}", inner.keys.live, escape(&record.id.node));
            let mut kv = inner.client.kv_client();
            let put = kv.put(
                key,
                json(&record)?,
                Some(PutOptions::new().with_lease(lease)),
            );
            inner
                .rpc("publishing the node record", put)
                .await
                .map(|_| ())
        }
    }
}

/// Grants a lease and writes the member entry and the last record under it.
async fn register(inner: &Inner, st: &mut RegState) -> Result<i64, StoreError> {
    let Some(record) = st.last.clone() else {
        return Err(StoreError::Backend(BackendError::Task(
            "no node record to register".into(),
        )));
    };
    let mut lc = inner.client.lease_client();
    let lease = inner
        .rpc("granting the node lease", lc.grant(LEASE_TTL_S, None))
        .await?
        .id();
    let name = escape(&record.id.node);
    let member = NodeMember {
        id: record.id.clone(),
        left: None,
    };
    let txn = Txn::new().and_then([
        TxnOp::put(
            format!("{}{name}", inner.keys.members),
            json(&member)?,
            None,
        ),
        TxnOp::put(
            format!("{}{name}", inner.keys.live),
            json(&record)?,
            Some(PutOptions::new().with_lease(lease)),
        ),
    ]);
    let mut kv = inner.client.kv_client();
    inner.rpc("registering the node", kv.txn(txn)).await?;
    st.lease = Some(lease);
    tracing::info!(node = %record.id.node, lease, "registered in the profile store");
    Ok(lease)
}

/// Keeps the lease alive; grants a new one (and rewrites the record) when
/// it is lost.
async fn keeper(inner: Arc<Inner>, token: CancellationToken) {
    let mut backoff = Duration::from_millis(200);
    loop {
        let lease = {
            let mut st = inner.registry.state.lock().await;
            match st.lease {
                Some(l) => Some(l),
                None => register(&inner, &mut st).await.ok(),
            }
        };
        if let Some(lease) = lease {
            let reason = keep_alive(&inner, lease, &token, KEEPALIVE_EVERY).await;
            if token.is_cancelled() {
                return;
            }
            let mut st = inner.registry.state.lock().await;
            if st.lease == Some(lease) {
                st.lease = None;
            }
            tracing::warn!(
                reason,
                "node lease lost; registering again when etcd answers"
            );
        }
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// Renews `lease` every `every` until it is lost (the reason) or shutdown.
pub(super) async fn keep_alive(
    inner: &Inner,
    lease: i64,
    token: &CancellationToken,
    every: Duration,
) -> String {
    let mut lc = inner.client.lease_client();
    let (mut keeper, mut stream) = match inner
        .rpc("starting lease keep-alives", lc.keep_alive(lease))
        .await
    {
        Ok(k) => k,
        Err(e) => return e.to_string(),
    };
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tokio::select! {
            _ = token.cancelled() => return "shutdown".into(),
            _ = tick.tick() => {}
        }
        if let Err(e) = keeper.keep_alive().await {
            return format!("keep-alive not sent: {e}");
        }
        match tokio::time::timeout(super::RPC_TIMEOUT, stream.message()).await {
            Ok(Ok(Some(r))) if r.ttl() > 0 => {}
            Ok(Ok(Some(_))) => return "lease expired".into(),
            Ok(Ok(None)) => return "keep-alive stream closed".into(),
            Ok(Err(e)) => return format!("keep-alive failed: {e}"),
            Err(_) => return "keep-alive not answered".into(),
        }
    }
}

/// A clean stop: records a departure if work is left (else removes the
/// member entry), then revokes the lease, which deletes the live record.
pub(super) async fn withdraw(inner: Arc<Inner>, last: NodeRecord) -> Result<(), StoreError> {
    let mut st = inner.registry.state.lock().await;
    st.keeper = None;
    let name = escape(&last.id.node);
    let member_key = format!("{}{name}", inner.keys.members);
    let work = last.work_total();
    let mut kv = inner.client.kv_client();
    if work > 0 {
        let member = NodeMember {
            id: last.id.clone(),
            left: Some(Departure {
                at_ms: now_ms(),
                work,
            }),
        };
        inner
            .rpc(
                "recording the departure",
                kv.put(member_key, json(&member)?, None),
            )
            .await?;
    } else {
        inner
            .rpc("removing the node", kv.delete(member_key, None))
            .await?;
    }
    if let Some(lease) = st.lease.take() {
        let mut lc = inner.client.lease_client();
        inner
            .rpc("revoking the node lease", lc.revoke(lease))
            .await?;
    }
    Ok(())
}

/// Every registered node: members joined with live records by name.
pub(super) async fn list(inner: &Inner) -> Result<Vec<NodeEntry>, StoreError> {
    let mut kv = inner.client.kv_client();
    let resp = inner
        .rpc(
            "listing nodes",
            kv.get(
                inner.keys.nodes.as_str(),
                Some(GetOptions::new().with_prefix()),
            ),
        )
        .await?;
    let mut members: BTreeMap<String, NodeMember> = BTreeMap::new();
    let mut live: BTreeMap<String, NodeRecord> = BTreeMap::new();
    for kv in resp.kvs() {
        let key = String::from_utf8_lossy(kv.key());
        let bad = |e: serde_json::Error| {
            tracing::warn!(%key, error = %e, "unreadable node entry; ignored");
        };
        if let Some(name) = key.strip_prefix(&inner.keys.members) {
            match serde_json::from_slice(kv.value()) {
                Ok(m) => {
                    members.insert(unescape(name), m);
                }
                Err(e) => bad(e),
            }
        } else if let Some(name) = key.strip_prefix(&inner.keys.live) {
            match serde_json::from_slice(kv.value()) {
                Ok(r) => {
                    live.insert(unescape(name), r);
                }
                Err(e) => bad(e),
            }
        }
    }
    let mut out = Vec::new();
    for (name, m) in members {
        let liveness = match (live.remove(&name), m.left) {
            (Some(r), _) => Liveness::Live {
                record: Box::new(r),
            },
            (None, Some(departure)) => Liveness::Left { departure },
            (None, None) => Liveness::Expired,
        };
        out.push(NodeEntry { id: m.id, liveness });
    }
    // A live record whose member entry was forgotten while it ran.
    for (_, r) in live {
        out.push(NodeEntry {
            id: r.id.clone(),
            liveness: Liveness::Live {
                record: Box::new(r),
            },
        });
    }
    Ok(out)
}

/// Removes a node's entries; false if it had none.
pub(super) async fn forget(inner: &Inner, node: &str) -> Result<bool, StoreError> {
    let name = escape(node);
    let txn = Txn::new().and_then([
        TxnOp::delete(
            format!("{}{name}", inner.keys.members),
            None::<DeleteOptions>,
        ),
        TxnOp::delete(format!("{}{name}", inner.keys.live), None::<DeleteOptions>),
    ]);
    let mut kv = inner.client.kv_client();
    let resp = inner.rpc("forgetting the node", kv.txn(txn)).await?;
    let deleted = resp
        .op_responses()
        .iter()
        .any(|r| matches!(r, etcd_client::TxnOpResponse::Delete(d) if d.deleted() > 0));
    Ok(deleted)
}
