//! Where profiles live: one trait, several backends.
//!
//! The trait is object safe (boxed futures) so consumers hold an
//! `Arc<dyn Store>`: [`EmbeddedStore`] (one file, one machine) or
//! `EtcdStore` (a site with several nodes; with the `etcd` feature, on by
//! default). Every backend validates changes
//! through [`Op::apply`], so R-PR-1 and name uniqueness hold whatever the
//! backend. Besides profiles a store says how current they are
//! ([`Freshness`], R-MN-2) and, where several nodes share it, keeps the
//! node registry their work reports live in (R-ST-3), and the records of
//! the Active-Passive handover ([`HandoverStore`]).

use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::config::{SiteConfig, StoreConfig};
use crate::node::{NodeEntry, NodeRecord};
use crate::profile::{NewProfile, Profile, ProfilePatch, ProfileSet, ProfileState};

pub mod audit;
mod audit_parts;
pub mod cache;
mod change;
pub mod embedded;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod freshness;
pub mod handover;
pub mod handover_file;

pub use audit::{Actor, AuditPage, AuditQuery, AuditRecord, ProfileRef};
pub use change::{create, new_id, Committed, Op};
pub use embedded::EmbeddedStore;
#[cfg(feature = "etcd")]
pub use etcd::EtcdStore;
pub use freshness::Freshness;
pub use handover::{Campaign, HandoverStore, Leadership, Published};

pub use crate::profile::MAX_NAME_LEN;
/// Longest accepted description.
pub const MAX_DESCRIPTION_LEN: usize = 4096;

/// A store error: either the caller asked for something the store refuses
/// (4xx in the API), or the store itself failed (503).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The request was wrong: bad input, an unknown id, a stale revision.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The store failed: its backend is unreachable, corrupt, or broke.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// What a caller did wrong: nothing was changed. The request must change
/// before it can succeed (for a stale revision or a conflict: read the
/// profile again first).
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// R-PR-1: the profile names a server the site does not define.
    #[error("unknown server `{server}`: the site configuration {} defines no such server", config.display())]
    UnknownServer {
        /// The unknown name.
        server: String,
        /// The site file consulted.
        config: PathBuf,
    },
    /// A profile needs at least one server.
    #[error("a profile needs at least one server")]
    NoServers,
    /// The name of a new or renamed profile breaks the name rules (R-PR-1).
    #[error("invalid profile name `{}`: {reason}", name.escape_debug())]
    InvalidName {
        /// The name asked for.
        name: String,
        /// Which rule it breaks.
        reason: crate::profile::NameError,
    },
    /// The description is too long or has control characters other than newlines.
    #[error("invalid description: {0}")]
    InvalidDescription(String),
    /// Another profile of the site already has this name.
    #[error("a profile named `{name}` already exists")]
    DuplicateName {
        /// The name asked for.
        name: String,
    },
    /// No profile has this id or name.
    #[error("no profile with id or name `{id}`")]
    NotFound {
        /// The id or name asked for.
        id: String,
    },
    /// The caller named a revision of the profile that is no longer its
    /// current one (optimistic concurrency); nothing was stored (409).
    #[error("profile `{id}` is at revision {}, not {expected} as asked: it changed since it was read; nothing was changed, read it again and retry", current.revision)]
    Stale {
        /// The profile's id.
        id: String,
        /// The revision the caller named.
        expected: u64,
        /// The profile as it is now.
        current: Box<Profile>,
    },
    /// Another writer changed the same profile between our read and our
    /// write; nothing was stored (409 in the API). Read it again and retry.
    #[error("conflict on profile `{id}`: {detail}; nothing was changed, read it again and retry")]
    Conflict {
        /// Id or name of the profile.
        id: String,
        /// What changed underneath.
        detail: String,
    },
    /// A query the store cannot answer as asked (e.g. an audit cursor that
    /// is not a record's).
    #[error("invalid query: {0}")]
    InvalidQuery(String),
}

impl Refusal {
    /// The HTTP status the API answers with, and the audit log records.
    pub fn status_code(&self) -> u16 {
        match self {
            Refusal::NotFound { .. } => 404,
            Refusal::DuplicateName { .. } | Refusal::Conflict { .. } | Refusal::Stale { .. } => 409,
            _ => 400,
        }
    }
}

/// What the store's backend did: the request may be fine and succeed later.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The store's data cannot be parsed; it is left as it is (never auto-repaired).
    #[error("profile store {} is corrupt: {detail} (fix or remove the file; ringsync will not overwrite it)", path.display())]
    Corrupt {
        /// The file (or key) that is corrupt.
        path: PathBuf,
        /// What the parser said.
        detail: String,
    },
    /// An I/O error on the store's file.
    #[error("profile store {}: {source}", path.display())]
    Io {
        /// The file being read or written.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The store's backend cannot be reached (503). For a write, `detail`
    /// says whether the change may still have been applied.
    #[error("profile store unreachable ({endpoints}): {detail}")]
    Unavailable {
        /// Where the backend was looked for.
        endpoints: String,
        /// What failed.
        detail: String,
    },
    /// The configured backend is not available in this build.
    #[error("unsupported store: {0}")]
    Unsupported(String),
    /// A background task of the store failed (e.g. it panicked or the runtime is shutting down).
    #[error("profile store task failed: {0}")]
    Task(String),
}

impl StoreError {
    /// True when the request was wrong (bad input, unknown id), false when
    /// the store failed. The API answers 4xx for the first, 503 for the second.
    pub fn is_client_error(&self) -> bool {
        matches!(self, StoreError::Refused(_))
    }

    /// The HTTP status the API answers with, and the audit log records.
    pub fn status_code(&self) -> u16 {
        match self {
            StoreError::Refused(r) => r.status_code(),
            StoreError::Backend(_) => 503,
        }
    }
}

/// A change asked of a store, with the revision the caller expects the
/// profile to be at and the audit record to keep with it.
#[derive(Debug, Clone)]
pub struct WriteRequest {
    /// The change.
    pub op: Op,
    /// Refuse with [`Refusal::Stale`] unless the profile is at this
    /// revision; `None`: whatever its revision (last writer wins).
    pub expect: Option<u64>,
    /// Who asks: the store appends the record of the outcome, made or
    /// refused; for a change that is made, atomically with it where the
    /// backend can (etcd) and before it otherwise (the embedded file).
    pub audit: Option<AuditRecord>,
}

impl WriteRequest {
    /// A change by this process's OS user ([`Actor::local`]), whatever the
    /// profile's revision: audited like the CLI's local changes, since no
    /// change is made without its record (R-PR-4).
    pub fn local(op: Op) -> WriteRequest {
        WriteRequest {
            audit: Some(Actor::local().record_op(&op, None)),
            op,
            expect: None,
        }
    }
}

/// What [`Store::write`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The profile before and after.
    pub committed: Committed,
    /// The profile set's revision after it.
    pub revision: u64,
}

/// A profile store.
pub trait Store: Send + Sync + 'static {
    /// The current profiles, read from the backend (not a cache).
    fn list(&self) -> BoxFuture<'_, Result<Arc<ProfileSet>, StoreError>>;
    /// Applies a change (R-PR-1: servers must exist; names are unique),
    /// audited when [`WriteRequest::audit`] is set: a change that cannot be audited
    /// is not made.
    fn write(&self, w: WriteRequest) -> BoxFuture<'_, Result<Written, StoreError>>;
    /// Appends a record of a change refused before it reached the store
    /// (401, 403, a bad request); returns its seq.
    fn append_audit(&self, rec: AuditRecord) -> BoxFuture<'_, Result<u64, StoreError>>;
    /// Reads a page of the audit log, oldest first.
    fn audit_log(&self, q: AuditQuery) -> BoxFuture<'_, Result<AuditPage, StoreError>>;
    /// Creates a profile (R-PR-1: servers must exist; names are unique).
    fn create(&self, p: NewProfile) -> BoxFuture<'_, Result<Profile, StoreError>> {
        self.plain(Op::Create(p))
    }
    /// Updates a profile found by id or name.
    fn update(&self, id: &str, patch: ProfilePatch) -> BoxFuture<'_, Result<Profile, StoreError>> {
        self.plain(Op::Update {
            id: id.to_owned(),
            patch,
        })
    }
    /// Deletes a profile found by id or name; returns what was deleted.
    fn delete(&self, id: &str) -> BoxFuture<'_, Result<Profile, StoreError>> {
        self.plain(Op::Delete { id: id.to_owned() })
    }
    /// Activates or deactivates a profile found by id or name.
    fn set_state(
        &self,
        id: &str,
        state: ProfileState,
    ) -> BoxFuture<'_, Result<Profile, StoreError>> {
        self.plain(Op::SetState {
            id: id.to_owned(),
            state,
        })
    }
    /// [`Store::write`] by this process's OS user, audited
    /// ([`WriteRequest::local`]), whatever the revision: the profile.
    fn plain(&self, op: Op) -> BoxFuture<'_, Result<Profile, StoreError>> {
        let w = self.write(WriteRequest::local(op));
        Box::pin(async move { w.await.map(|w| w.committed.profile) })
    }
    /// A new snapshot on every change, including changes made by other
    /// processes (R-PR-2).
    fn watch(&self) -> watch::Receiver<Arc<ProfileSet>>;
    /// Whether the snapshot in [`Store::watch`] is current, and if not since
    /// when (R-MN-2); a new value on every change.
    fn freshness(&self) -> watch::Receiver<Freshness>;

    /// True when the store keeps a node registry (several nodes share it).
    /// Without one, `ringsync status` asks the nodes' admin addresses.
    fn keeps_nodes(&self) -> bool {
        false
    }
    /// Publishes this node's record under a lease the store keeps alive
    /// (and renews after an outage). A no-op without a registry.
    fn publish_node(&self, _record: NodeRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }
    /// A clean stop: drops the lease; the node stays listed as departed
    /// when its last record still held work (R-ST-3).
    fn withdraw_node(&self, _last: NodeRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }
    /// Every registered node, live or not; `None` without a registry.
    fn nodes(&self) -> BoxFuture<'_, Result<Option<Vec<NodeEntry>>, StoreError>> {
        Box::pin(async { Ok(None) })
    }
    /// Copies a whole profile set in (`ringsync migrate`): every profile is
    /// checked as a create would be (R-PR-1), ids kept. Idempotent: a target
    /// that already holds these profiles is left as it is. A target holding
    /// other profiles is refused with [`Refusal::Conflict`] unless
    /// `overwrite`. Audited like every change (R-PR-4): one record by `by`
    /// per profile the import creates, replaces or removes
    /// ([`import_audit`]), written with the profiles (etcd: in the same
    /// transaction; the embedded file: before the new file is renamed in);
    /// a target left as it was gets none.
    fn import(
        &self,
        set: ProfileSet,
        overwrite: bool,
        by: Actor,
    ) -> BoxFuture<'_, Result<Imported, StoreError>>;
    /// The Active-Passive handover records kept with these profiles
    /// (R-AP-1..4, R-MN-3); `None` when the backend keeps none. Every call
    /// gives the same handle.
    fn handover(&self) -> Option<Arc<dyn HandoverStore>> {
        None
    }
    /// Removes a node that is gone for good from the registry; false if it
    /// was not registered.
    fn forget_node(&self, _node: &str) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async {
            Err(StoreError::Backend(BackendError::Unsupported(
                "this store keeps no node registry".into(),
            )))
        })
    }
}

/// What [`Store::import`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Imported {
    /// The profiles were written.
    Copied {
        /// How many.
        profiles: usize,
    },
    /// The target already held exactly these profiles; nothing written.
    AlreadyThere {
        /// How many.
        profiles: usize,
    },
}

/// Checks every profile of an imported set as a create would (R-PR-1,
/// names: R-PR-1), keeping ids, states and the revision. A source holding
/// a name the rules now refuse is refused whole, naming it: rename it
/// there first (a rename to a good name is always allowed).
pub fn checked_import(config: &SiteConfig, set: ProfileSet) -> Result<ProfileSet, StoreError> {
    let mut out = ProfileSet {
        revision: set.revision,
        profiles: Vec::with_capacity(set.profiles.len()),
    };
    for p in set.profiles {
        if out.find(&p.id).is_some() {
            return Err(StoreError::Backend(BackendError::Corrupt {
                path: config.path.clone(),
                detail: format!("profile id `{}` appears twice in the source", p.id),
            }));
        }
        let new = NewProfile {
            name: p.name,
            description: p.description,
            servers: p.servers,
            state: p.state,
        };
        let id = p.id.clone();
        create(p.id, new, config, &mut out)?;
        // The copy keeps each profile's revision: a change that names the
        // revision it read before the move still applies after it.
        if let Some(i) = out.position(&id) {
            out.profiles[i].revision = p.revision;
        }
    }
    // Each create checked its name against the ids copied before it; this
    // catches a name equal to an id copied after it (R-PR-1).
    for p in &out.profiles {
        if let Some(o) = out.profiles.iter().find(|o| o.id == p.name) {
            return Err(StoreError::Refused(Refusal::InvalidName {
                name: p.name.clone(),
                reason: crate::profile::NameError::IsAnId(o.id.clone()),
            }));
        }
    }
    Ok(out)
}

/// What to write for an import of `src` over `cur`: `None` when `cur`
/// already holds it. The revision never goes back, so every node sees the
/// import as a change.
pub fn merge_import(
    cur: &ProfileSet,
    src: &ProfileSet,
    overwrite: bool,
) -> Result<(Option<ProfileSet>, Imported), StoreError> {
    let profiles = src.profiles.len();
    if cur.profiles == src.profiles {
        return Ok((None, Imported::AlreadyThere { profiles }));
    }
    if !cur.profiles.is_empty() && !overwrite {
        return Err(StoreError::Refused(Refusal::Conflict {
            id: "(profile set)".into(),
            detail: format!(
                "the target already holds {} other profile(s) at revision {}; \
                 refusing to overwrite them (pass --overwrite to replace them)",
                cur.profiles.len(),
                cur.revision
            ),
        }));
    }
    let revision = if cur.revision == 0 && cur.profiles.is_empty() {
        src.revision
    } else {
        src.revision.max(cur.revision + 1)
    };
    let next = ProfileSet {
        revision,
        profiles: src.profiles.clone(),
    };
    Ok((Some(next), Imported::Copied { profiles }))
}

/// The audit records of an import that replaces `cur` by `next` (R-PR-4):
/// action `import`, one per profile of `next` that is new (201) or
/// differs from the one of that id in `cur` (200, with `before`), and one
/// per profile of `cur` that `next` drops (`--overwrite`: 200, `before`
/// only). Profiles already there as they are get none.
pub fn import_audit(by: &Actor, cur: &ProfileSet, next: &ProfileSet) -> Vec<AuditRecord> {
    let record = |before: Option<&Profile>, after: Option<&Profile>| {
        let named = after.or(before).map(|p| p.name.as_str());
        let mut rec = by.record("import", named);
        rec.status = if before.is_none() { 201 } else { 200 };
        rec.before = before.cloned();
        rec.after = after.cloned();
        rec.revision = Some(next.revision);
        rec
    };
    let mut out = Vec::new();
    for p in &next.profiles {
        let before = cur.profiles.iter().find(|c| c.id == p.id);
        if before != Some(p) {
            out.push(record(before, Some(p)));
        }
    }
    for c in &cur.profiles {
        if !next.profiles.iter().any(|p| p.id == c.id) {
            out.push(record(Some(c), None));
        }
    }
    out
}

/// Counts a store failure (not a bad request: a read of a corrupt file, an
/// I/O error) in `ringsync_store_errors_total` of this process's metrics.
pub fn count_error(e: &StoreError) {
    if !e.is_client_error() {
        metrics::counter!("ringsync_store_errors_total").increment(1);
    }
}

/// Opens the store the site configures.
pub async fn open(config: &SiteConfig) -> Result<Arc<dyn Store>, StoreError> {
    match &config.store {
        StoreConfig::Embedded { .. } => {
            let store = EmbeddedStore::open(Arc::new(config.clone())).await?;
            Ok(Arc::new(store))
        }
        #[cfg(feature = "etcd")]
        StoreConfig::Etcd { .. } => {
            let store = EtcdStore::open(Arc::new(config.clone())).await?;
            Ok(Arc::new(store))
        }
        // A site file cannot say etcd in this build (the config refuses
        // it); a config built in code still gets an error, not a panic.
        #[cfg(not(feature = "etcd"))]
        StoreConfig::Etcd { .. } => Err(StoreError::Backend(BackendError::Unsupported(
            crate::config::NO_ETCD.into(),
        ))),
    }
}

/// Runs file I/O off the async threads; a task that panicked is a
/// [`BackendError::Task`].
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Backend(BackendError::Task(e.to_string())))
}
