//! The handover records in etcd (R-AP-1..4, R-MN-3), under `P/handover/`:
//!
//! | key | value | written by | lease |
//! |---|---|---|---|
//! | `P/handover/desired/<group>` | [`Desired`] | the elected planner, fenced by its lease | none |
//! | `P/handover/confirmed/<group>` | [`Confirmed`] | the group's service (its agent) | none |
//! | `P/handover/planner` | [`PlannerRecord`]: the last move's time | the elected planner, with each move | none |
//! | `P/handover/election` | who plans ([`Elected`]) | the election ([`super::election`]) | the planner's |
//!
//! One writer per key. A move is one transaction that writes the group's
//! desired leader and the planner record only if the election key is still
//! under the mover's lease: a planner whose lease expired (it hung, or was
//! cut off) can never write a move after another was elected.

use crate::store::BackendError;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, EventType, GetOptions, Txn, TxnOp, WatchOptions};
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::election::Elected;
use super::{json, Inner, WRITE_DEADLINE};
use crate::handover::record::{Confirmed, Desired, HandoverState, PlannerRecord};
use crate::store::handover::{Campaign, HandoverStore, Leadership, Published};
use crate::store::StoreError;

/// The key names under `P/handover/`.
#[derive(Debug, Clone)]
pub(super) struct HKeys {
    pub(super) root: String,
    desired: String,
    confirmed: String,
    pub(super) planner: String,
    pub(super) election: String,
}

impl HKeys {
    fn new(prefix: &str) -> HKeys {
        let root = format!("{}/handover/", prefix.trim_end_matches('/'));
        HKeys {
            desired: format!("{root}desired/"),
            confirmed: format!("{root}confirmed/"),
            planner: format!("{root}planner"),
            election: format!("{root}election"),
            root,
        }
    }
}

/// The handover records of an etcd store.
pub struct EtcdHandover {
    pub(super) inner: Arc<Inner>,
    pub(super) keys: HKeys,
    tx: watch::Sender<Arc<HandoverState>>,
    _watcher: DropGuard,
}

impl EtcdHandover {
    pub(super) fn open(inner: Arc<Inner>) -> EtcdHandover {
        let keys = HKeys::new(&inner.prefix);
        let (tx, _) = watch::channel(Arc::new(HandoverState::default()));
        let token = inner.token.child_token();
        let h = EtcdHandover {
            inner,
            keys,
            tx,
            _watcher: token.clone().drop_guard(),
        };
        tokio::spawn(follow(h.inner.clone(), h.keys.clone(), h.tx.clone(), token));
        h
    }
}

impl HandoverStore for EtcdHandover {
    fn read(&self) -> BoxFuture<'_, Result<Arc<HandoverState>, StoreError>> {
        Box::pin(async move {
            let (state, _) = read(&self.inner, &self.keys).await?;
            let state = Arc::new(state);
            send(&self.tx, state.clone());
            Ok(state)
        })
    }

    fn watch(&self) -> watch::Receiver<Arc<HandoverState>> {
        self.tx.subscribe()
    }

    fn publish<'a>(
        &'a self,
        lead: &'a Leadership,
        group: &'a str,
        desired: Desired,
        planner: PlannerRecord,
    ) -> BoxFuture<'a, Result<Published, StoreError>> {
        Box::pin(async move {
            if !lead.is_held() {
                return Ok(Published::NotPlanner);
            }
            let txn = Txn::new()
                .when([Compare::lease(
                    self.keys.election.as_str(),
                    CompareOp::Equal,
                    lead.fence(),
                )])
                .and_then([
                    TxnOp::put(
                        format!("{}{group}", self.keys.desired),
                        json(&desired)?,
                        None,
                    ),
                    TxnOp::put(self.keys.planner.as_str(), json(&planner)?, None),
                ]);
            let write = async {
                let mut backoff = Duration::from_millis(50);
                loop {
                    let mut kv = self.inner.client.kv_client();
                    match self
                        .inner
                        .rpc("publishing a move", kv.txn(txn.clone()))
                        .await
                    {
                        Ok(r) => break r,
                        Err(e) => {
                            // The lease compare makes a repeat harmless.
                            tracing::warn!(error = %e, "move not written; retrying");
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(Duration::from_millis(800));
                        }
                    }
                }
            };
            let resp = tokio::time::timeout(WRITE_DEADLINE, write)
                .await
                .map_err(|_| {
                    self.inner.unavailable(format!(
                        "no answer within {WRITE_DEADLINE:?}; the move may or may not have \
                         been written"
                    ))
                })?;
            Ok(if resp.succeeded() {
                Published::Done
            } else {
                Published::NotPlanner
            })
        })
    }

    fn confirm<'a>(
        &'a self,
        group: &'a str,
        confirmed: Confirmed,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let key = format!("{}{group}", self.keys.confirmed);
            let mut kv = self.inner.client.kv_client();
            self.inner
                .rpc("confirming a leader", kv.put(key, json(&confirmed)?, None))
                .await
                .map(|_| ())
        })
    }

    fn campaign<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<Campaign, StoreError>> {
        Box::pin(super::election::campaign(
            &self.inner,
            &self.keys.election,
            node,
        ))
    }

    fn location(&self) -> String {
        format!("etcd {} {}", self.inner.endpoints, self.keys.root)
    }
}

fn send(tx: &watch::Sender<Arc<HandoverState>>, state: Arc<HandoverState>) {
    tx.send_if_modified(|cur| {
        if **cur == *state {
            false
        } else {
            *cur = state;
            true
        }
    });
}

/// Every record under `P/handover/`, and the store revision of the read.
async fn read(inner: &Inner, keys: &HKeys) -> Result<(HandoverState, i64), StoreError> {
    let mut kv = inner.client.kv_client();
    let resp = inner
        .rpc(
            "reading handover records",
            kv.get(keys.root.as_str(), Some(GetOptions::new().with_prefix())),
        )
        .await?;
    let mut state = HandoverState::default();
    for kv in resp.kvs() {
        apply(&mut state, keys, kv.key(), Some(kv.value()))?;
    }
    Ok((state, resp.header().map_or(0, |h| h.revision())))
}

/// Applies one key's value (`None`: deleted) to `state`.
fn apply(
    state: &mut HandoverState,
    keys: &HKeys,
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<(), StoreError> {
    let key = String::from_utf8_lossy(key);
    let corrupt = |e: serde_json::Error| {
        StoreError::Backend(BackendError::Corrupt {
            path: format!("etcd:{key}").into(),
            detail: e.to_string(),
        })
    };
    if let Some(group) = key.strip_prefix(&keys.desired) {
        match value {
            Some(v) => {
                state.desired.insert(
                    group.to_owned(),
                    serde_json::from_slice(v).map_err(corrupt)?,
                );
            }
            None => {
                state.desired.remove(group);
            }
        }
    } else if let Some(group) = key.strip_prefix(&keys.confirmed) {
        match value {
            Some(v) => {
                state.confirmed.insert(
                    group.to_owned(),
                    serde_json::from_slice(v).map_err(corrupt)?,
                );
            }
            None => {
                state.confirmed.remove(group);
            }
        }
    } else if *key == keys.planner {
        state.planner = match value {
            Some(v) => serde_json::from_slice(v).map_err(corrupt)?,
            None => PlannerRecord::default(),
        };
    } else if *key == keys.election {
        state.acting = match value {
            Some(v) => Some(serde_json::from_slice::<Elected>(v).map_err(corrupt)?.node),
            None => None,
        };
    }
    Ok(())
}

/// Keeps the watch channel current: read, watch from the read's revision,
/// read again whenever the watch breaks (compaction included).
async fn follow(
    inner: Arc<Inner>,
    keys: HKeys,
    tx: watch::Sender<Arc<HandoverState>>,
    token: CancellationToken,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let why = match read(&inner, &keys).await {
            Ok((state, rev)) => {
                send(&tx, Arc::new(state.clone()));
                backoff = Duration::from_millis(100);
                watch_from(&inner, &keys, &tx, state, rev, &token).await
            }
            Err(e) => e.to_string(),
        };
        if token.is_cancelled() {
            return;
        }
        tracing::debug!(reason = %why, "handover watch interrupted; reading again");
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// One watch from `rev + 1`, applying events to `state`; returns why it ended.
async fn watch_from(
    inner: &Inner,
    keys: &HKeys,
    tx: &watch::Sender<Arc<HandoverState>>,
    mut state: HandoverState,
    rev: i64,
    token: &CancellationToken,
) -> String {
    let options = WatchOptions::new()
        .with_prefix()
        .with_start_revision(rev + 1);
    let mut client = inner.client.watch_client();
    let mut stream = match inner
        .rpc(
            "watching handover records",
            client.watch(keys.root.as_str(), Some(options)),
        )
        .await
    {
        Ok(s) => s,
        Err(e) => return e.to_string(),
    };
    loop {
        let msg = tokio::select! {
            _ = token.cancelled() => return "shutdown".into(),
            m = stream.message() => m,
        };
        let resp = match msg {
            Ok(Some(r)) if r.canceled() => return format!("cancelled: {}", r.cancel_reason()),
            Ok(Some(r)) => r,
            Ok(None) => return "etcd closed the watch".into(),
            Err(e) => return format!("watch broken: {e}"),
        };
        for ev in resp.events() {
            let Some(kv) = ev.kv() else { continue };
            let value = (ev.event_type() == EventType::Put).then(|| kv.value());
            if let Err(e) = apply(&mut state, keys, kv.key(), value) {
                tracing::warn!(error = %e, "unreadable handover record; ignored");
            }
        }
        send(tx, Arc::new(state.clone()));
    }
}
