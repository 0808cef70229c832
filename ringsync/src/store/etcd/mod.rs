//! The etcd store: one truth for a site with several nodes (R-PR-2, R-PR-4,
//! R-MN-1, R-MN-2).
//!
//! Keys under the configured prefix `P`:
//!
//! | key | value | lease |
//! |---|---|---|
//! | `P/profiles` | the whole [`ProfileSet`] as JSON | none |
//! | `P/nodes/member/<node>` | [`NodeMember`](crate::node::NodeMember) | none |
//! | `P/nodes/live/<node>` | [`NodeRecord`](crate::node::NodeRecord) | the node's |
//! | `P/handover/...` | Active-Passive handover records ([`handover`]) | the planner's for `P/handover/election` |
//! | `P/audit/<ms>-<hex>` | one [`AuditRecord`] (see [`audit`]) | none |
//!
//! **One document for the profiles**, not one key per profile: a node
//! applies a change as one value from one watch event, so it can never see
//! half of a change; the set's own `revision` counts changes exactly as in
//! the embedded file (so `migrate` copies it as it is); name uniqueness
//! across profiles is checked against the very version the write replaces;
//! and a site holds tens of profiles, far below etcd's value size limit.
//!
//! **Writes are compare-and-swap transactions** on the document's mod
//! revision: read, [`Op::apply`](crate::store::Op::apply) (the same R-PR-1 checks as the embedded
//! store), write if nobody wrote since. When someone did, the change is
//! retried on the new version only if the profile it touches is unchanged
//! there (a create, or a change to another profile); if that profile
//! changed, the caller gets [`Refusal::Conflict`]: two writers updating
//! one profile at once get one success and one conflict, never a lost
//! update. Because every retry is again a compare-and-swap, a write whose
//! first attempt was cut off can be retried safely: it applies at most once.
//! A write that loses to the very document it meant to write is its own
//! earlier attempt only if its audit record (same transaction) is there;
//! otherwise another writer made the identical change, and this one is
//! judged again on it (stale with a revision named, a conflict without).
//!
//! **Following** ([`follow`]): every node watches `P/profiles`, resumes
//! right after the last revision it received after a reconnect (a version
//! that does not parse is skipped, and the node is stale until a good one
//! comes), and re-lists after a compaction. While etcd is unreachable it keeps its last view and reports
//! itself stale (R-MN-2); a node that starts during an outage starts from its
//! local view cache ([`super::cache`]) and says so.

use crate::store::BackendError;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetResponse, KeyValue};
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::audit::{Actor, AuditPage, AuditQuery, AuditRecord};
use super::{cache, Freshness, Imported, Store, StoreError, WriteRequest, Written};
use crate::config::{SiteConfig, StoreConfig};
use crate::node::{NodeEntry, NodeRecord};
use crate::profile::ProfileSet;
use crate::work::now_ms;

/// A record as the JSON the store keeps.
fn json<T: serde::Serialize>(v: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(v).map_err(|e| StoreError::Backend(BackendError::Task(e.to_string())))
}

mod audit;
mod election;
mod follow;
mod handover;
mod registry;
mod write;

pub use election::PLANNER_LEASE_TTL_S;
pub use handover::EtcdHandover;

/// Time allowed for one request to etcd.
pub const RPC_TIMEOUT: Duration = Duration::from_secs(2);
/// Time allowed for a whole write, retries included.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(6);
/// Compare-and-swap attempts before a write that keeps losing to writers of
/// other profiles gives up with a conflict.
const MAX_ATTEMPTS: usize = 8;

/// A profile store in etcd.
pub struct EtcdStore {
    inner: Arc<Inner>,
    _tasks: DropGuard,
    /// The handover records under `P/handover/`, opened on first use.
    handover: std::sync::OnceLock<Arc<EtcdHandover>>,
}

/// The key names under the site's prefix.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    /// `P/profiles`.
    profiles: String,
    /// `P/nodes/` (members and live records).
    nodes: String,
    /// `P/nodes/member/`.
    members: String,
    /// `P/nodes/live/`.
    live: String,
    /// `P/audit/` (one key per audit record).
    audit: String,
}

impl Keys {
    fn new(prefix: &str) -> Keys {
        let p = prefix.trim_end_matches('/');
        Keys {
            profiles: format!("{p}/profiles"),
            nodes: format!("{p}/nodes/"),
            members: format!("{p}/nodes/member/"),
            live: format!("{p}/nodes/live/"),
            audit: format!("{p}/audit/"),
        }
    }
}

pub(crate) struct Inner {
    config: Arc<SiteConfig>,
    client: Client,
    endpoints: String,
    prefix: String,
    keys: Keys,
    cache: PathBuf,
    tx: watch::Sender<Arc<ProfileSet>>,
    fresh: watch::Sender<Freshness>,
    /// Mod revision of the profile document last applied (0: none).
    applied: Mutex<u64>,
    relists: AtomicU64,
    registry: registry::Registry,
    /// Cancelled when the [`EtcdStore`] is dropped: every task of the store ends.
    token: CancellationToken,
}

impl EtcdStore {
    /// Opens the store of `config` (which must be `kind = "etcd"`): reads the
    /// profiles from etcd or, if etcd cannot be reached, from the node's view
    /// cache (stale, and saying so). With neither it fails: an empty view
    /// would undrain every server (R-MN-2). Needs a tokio runtime.
    pub async fn open(config: Arc<SiteConfig>) -> Result<EtcdStore, StoreError> {
        let (endpoints, prefix, cache) = match &config.store {
            StoreConfig::Etcd {
                endpoints,
                prefix,
                cache,
            } => (endpoints.clone(), prefix.clone(), cache.clone()),
            StoreConfig::Embedded { .. } => {
                return Err(StoreError::Backend(BackendError::Unsupported(
                    "EtcdStore::open on a site configured for the embedded store".into(),
                )))
            }
        };
        Self::open_with(config, endpoints, prefix, cache).await
    }

    /// Opens an etcd store at `endpoints`/`prefix` with the view cache at
    /// `cache`, validating changes against `config`.
    pub async fn open_with(
        config: Arc<SiteConfig>,
        endpoints: Vec<String>,
        prefix: String,
        cache: PathBuf,
    ) -> Result<EtcdStore, StoreError> {
        let joined = endpoints.join(",");
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(1))
            // etcd refuses pings more often than every 5 s (GOAWAY).
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            // A member cut off from its cluster answers at once instead of hanging.
            .with_require_leader(true);
        let client = Client::connect(&endpoints, Some(options))
            .await
            .map_err(|e| {
                StoreError::Backend(BackendError::Unavailable {
                    endpoints: joined.clone(),
                    detail: format!("cannot set up a client: {e}"),
                })
            })?;
        let (tx, _) = watch::channel(Arc::new(ProfileSet::default()));
        let (fresh, _) = watch::channel(Freshness::default());
        let token = CancellationToken::new();
        let inner = Arc::new(Inner {
            token: token.clone(),
            config,
            client,
            endpoints: joined,
            keys: Keys::new(&prefix),
            prefix,
            cache,
            tx,
            fresh,
            applied: Mutex::new(0),
            relists: AtomicU64::new(0),
            registry: registry::Registry::default(),
        });
        let start = match inner.read().await {
            Ok(doc) => {
                inner.apply(doc.set, doc.mod_revision);
                inner.mark_fresh();
                Some(doc.header_revision)
            }
            Err(e @ StoreError::Backend(BackendError::Unavailable { .. })) => {
                inner.start_from_cache(&e).await?;
                None
            }
            Err(e) => return Err(e),
        };
        tokio::spawn(follow::run(inner.clone(), start, token.clone()));
        tokio::spawn(follow::save_cache(inner.clone(), token.clone()));
        Ok(EtcdStore {
            inner,
            _tasks: token.drop_guard(),
            handover: std::sync::OnceLock::new(),
        })
    }

    /// How many times this store re-listed the profiles because the
    /// revision it wanted to resume from had been compacted.
    pub fn relists(&self) -> u64 {
        self.inner.relists.load(Ordering::Relaxed)
    }

    /// The key prefix of the site.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }
}

impl Store for EtcdStore {
    fn list(&self) -> BoxFuture<'_, Result<Arc<ProfileSet>, StoreError>> {
        Box::pin(async move {
            let doc = self.inner.read().await?;
            self.inner.apply(doc.set, doc.mod_revision);
            Ok(self.inner.tx.borrow().clone())
        })
    }

    fn write(&self, w: WriteRequest) -> BoxFuture<'_, Result<Written, StoreError>> {
        Box::pin(async move {
            match tokio::time::timeout(WRITE_DEADLINE, self.inner.write(&w)).await {
                Ok(r) => r,
                Err(_) => Err(self.inner.unavailable(format!(
                    "no answer within {WRITE_DEADLINE:?}; the change may or may not have been \
                     applied: list the profiles to see"
                ))),
            }
        })
    }

    fn append_audit(&self, rec: AuditRecord) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(async move { self.inner.append_audit(&rec).await })
    }

    fn audit_log(&self, q: AuditQuery) -> BoxFuture<'_, Result<AuditPage, StoreError>> {
        Box::pin(async move { self.inner.read_audit(&q).await })
    }

    fn watch(&self) -> watch::Receiver<Arc<ProfileSet>> {
        self.inner.tx.subscribe()
    }

    fn freshness(&self) -> watch::Receiver<Freshness> {
        self.inner.fresh.subscribe()
    }

    fn import(
        &self,
        set: ProfileSet,
        overwrite: bool,
        by: Actor,
    ) -> BoxFuture<'_, Result<Imported, StoreError>> {
        Box::pin(async move {
            tokio::time::timeout(WRITE_DEADLINE, self.import_once(set, overwrite, &by))
                .await
                .unwrap_or_else(|_| {
                    Err(self.inner.unavailable(format!(
                        "no answer within {WRITE_DEADLINE:?}; the import may or may not have \
                         been written: run it again (it is idempotent)"
                    )))
                })
        })
    }

    fn keeps_nodes(&self) -> bool {
        true
    }

    fn publish_node(&self, record: NodeRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(registry::publish(self.inner.clone(), record))
    }

    fn withdraw_node(&self, last: NodeRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(registry::withdraw(self.inner.clone(), last))
    }

    fn nodes(&self) -> BoxFuture<'_, Result<Option<Vec<NodeEntry>>, StoreError>> {
        Box::pin(async move { registry::list(&self.inner).await.map(Some) })
    }

    fn handover(&self) -> Option<Arc<dyn super::HandoverStore>> {
        let h = self
            .handover
            .get_or_init(|| Arc::new(EtcdHandover::open(self.inner.clone())));
        Some(h.clone())
    }

    fn forget_node(&self, node: &str) -> BoxFuture<'_, Result<bool, StoreError>> {
        let node = node.to_owned();
        Box::pin(async move { registry::forget(&self.inner, &node).await })
    }
}

/// The profile document as read.
struct Doc {
    set: ProfileSet,
    /// Its mod revision (0 when absent).
    mod_revision: u64,
    /// The store revision of the read.
    header_revision: i64,
}

// === impl Inner ===

impl Inner {
    pub(crate) fn unavailable(&self, detail: impl Into<String>) -> StoreError {
        StoreError::Backend(BackendError::Unavailable {
            endpoints: self.endpoints.clone(),
            detail: detail.into(),
        })
    }

    /// One request with [`RPC_TIMEOUT`]; transport errors become `Unavailable`.
    pub(crate) async fn rpc<T>(
        &self,
        what: &str,
        fut: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(RPC_TIMEOUT, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.unavailable(format!("{what}: {e}"))),
            Err(_) => Err(self.unavailable(format!("{what}: no answer within {RPC_TIMEOUT:?}"))),
        }
    }

    /// Reads the profile document (linearizable).
    async fn read(&self) -> Result<Doc, StoreError> {
        let mut kv = self.client.kv_client();
        let resp = self
            .rpc(
                "reading profiles",
                kv.get(self.keys.profiles.as_str(), None),
            )
            .await?;
        self.doc_of(&resp)
    }

    /// The mod revision of the profile document (0 when absent) and, when
    /// it does not parse, why: unlike [`Inner::read`], a corrupt document
    /// still has a version a watch can wait for.
    async fn read_version(&self) -> Result<(u64, Option<StoreError>), StoreError> {
        let mut kv = self.client.kv_client();
        let resp = self
            .rpc(
                "reading profiles",
                kv.get(self.keys.profiles.as_str(), None),
            )
            .await?;
        Ok(match resp.kvs().first() {
            None => (0, None),
            Some(kv) => (kv.mod_revision().max(0) as u64, self.parse(kv).err()),
        })
    }

    /// [`Inner::read`], retried while etcd is unreachable (a member that
    /// died is skipped on the next attempt); the caller bounds the time.
    async fn read_retrying(&self) -> Result<Doc, StoreError> {
        let mut backoff = Duration::from_millis(50);
        loop {
            match self.read().await {
                Err(e @ StoreError::Backend(BackendError::Unavailable { .. })) => {
                    tracing::debug!(error = %e, "profile read failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(800));
                }
                r => return r,
            }
        }
    }

    fn doc_of(&self, resp: &GetResponse) -> Result<Doc, StoreError> {
        let header_revision = resp.header().map_or(0, |h| h.revision());
        match resp.kvs().first() {
            None => Ok(Doc {
                set: ProfileSet::default(),
                mod_revision: 0,
                header_revision,
            }),
            Some(kv) => Ok(Doc {
                set: self.parse(kv)?,
                mod_revision: kv.mod_revision().max(0) as u64,
                header_revision,
            }),
        }
    }

    pub(crate) fn parse(&self, kv: &KeyValue) -> Result<ProfileSet, StoreError> {
        serde_json::from_slice(kv.value()).map_err(|e| {
            StoreError::Backend(BackendError::Corrupt {
                path: PathBuf::from(format!("etcd:{}", self.keys.profiles)),
                detail: e.to_string(),
            })
        })
    }

    /// Publishes a document version if it is newer than the one applied,
    /// so every version reaches watchers once and never out of order.
    pub(crate) fn apply(&self, set: ProfileSet, mod_revision: u64) -> bool {
        {
            let mut applied = self.applied.lock().unwrap_or_else(|e| e.into_inner());
            if mod_revision <= *applied && *applied != 0 {
                return false;
            }
            *applied = mod_revision;
        }
        let set = Arc::new(set);
        self.tx.send_if_modified(|cur| {
            if **cur == *set {
                false
            } else {
                *cur = set;
                true
            }
        });
        self.fresh.send_if_modified(|f| {
            let changed = f.store_revision != mod_revision;
            f.store_revision = mod_revision;
            changed
        });
        true
    }

    pub(crate) fn applied(&self) -> u64 {
        *self.applied.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The store answered and the view is current.
    pub(crate) fn mark_fresh(&self) {
        let rev = self.applied();
        self.fresh.send_if_modified(|f| {
            let next = Freshness::fresh(rev);
            if *f == next {
                false
            } else {
                if f.is_stale() {
                    tracing::info!(
                        revision = rev,
                        "profile store reachable again; view is current"
                    );
                }
                *f = next;
                true
            }
        });
    }

    /// The store cannot be reached: keep the view, say since when (R-MN-2).
    pub(crate) fn mark_stale(&self, reason: &str) {
        self.fresh.send_modify(|f| {
            if f.stale_since_ms.is_none() {
                tracing::warn!(
                    reason,
                    "profile store unreachable; keeping the last view (fail-static)"
                );
                f.stale_since_ms = Some(now_ms());
            }
            f.reason = Some(reason.to_owned());
        });
    }

    async fn start_from_cache(&self, why: &StoreError) -> Result<(), StoreError> {
        let path = self.cache.clone();
        let cached = tokio::task::spawn_blocking(move || cache::load(&path))
            .await
            .map_err(|e| StoreError::Backend(BackendError::Task(e.to_string())))??;
        let source = self.cache_source();
        let Some(c) = cached.filter(|c| c.site == self.config.site.name && c.source == source)
        else {
            return Err(self.unavailable(format!(
                "{why}; and there is no view cache for this site at {}: refusing to start \
                 with an empty view, which would undrain every server",
                self.cache.display()
            )));
        };
        tracing::warn!(cache = %self.cache.display(), saved = %crate::time::rfc3339(c.saved_ms),
            "profile store unreachable at start; serving the cached view until it answers");
        // Stale first, so the cache writer never takes this view for a confirmed one.
        self.fresh.send_modify(|f| {
            f.stale_since_ms = Some(c.saved_ms);
            f.reason = Some(why.to_string());
            f.from_cache = Some(format!(
                "{} (saved {})",
                self.cache.display(),
                crate::time::rfc3339(c.saved_ms)
            ));
        });
        self.apply(c.profiles, c.store_revision);
        Ok(())
    }

    fn cache_source(&self) -> String {
        format!("etcd {}", self.prefix)
    }
}
