//! Where profiles live: one trait, several backends.
//!
//! The trait is object safe (boxed futures) so consumers hold an
//! `Arc<dyn Store>`: [`EmbeddedStore`] (one file, one machine) or
//! [`EtcdStore`] (a site with several nodes). Every backend validates changes
//! through [`Change::apply`], so R-PR-1 and name uniqueness hold whatever the
//! backend. Besides profiles a store says how current they are
//! ([`Freshness`], R-MN-2) and, where several nodes share it, keeps the
//! node registry their work reports live in (R-ST-3), and the records of
//! the Active-Passive handover ([`HandoverStore`]).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::config::{SiteConfig, StoreConfig};
use crate::node::{NodeEntry, NodeRecord};
use crate::profile::{NewProfile, Profile, ProfilePatch, ProfileSet, ProfileState};

pub mod cache;
pub mod embedded;
pub mod etcd;
mod freshness;
pub mod handover;
pub mod handover_file;

pub use embedded::EmbeddedStore;
pub use etcd::EtcdStore;
pub use freshness::{rfc3339, Freshness};
pub use handover::{Campaign, HandoverStore, Leadership, Published};

/// Longest accepted profile name.
pub const MAX_NAME_LEN: usize = 128;
/// Longest accepted description.
pub const MAX_DESCRIPTION_LEN: usize = 4096;

/// A store error. Variants before `Corrupt` are the caller's fault (4xx in
/// the API); the others are the store's (503).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
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
    /// The name is empty, too long or has control characters.
    #[error("invalid profile name: {0}")]
    InvalidName(String),
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
    /// Another writer changed the same profile between our read and our
    /// write; nothing was stored (409 in the API). Read it again and retry.
    #[error("conflict on profile `{id}`: {detail}; nothing was changed, read it again and retry")]
    Conflict {
        /// Id or name of the profile.
        id: String,
        /// What changed underneath.
        detail: String,
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
        matches!(
            self,
            StoreError::UnknownServer { .. }
                | StoreError::NoServers
                | StoreError::InvalidName(_)
                | StoreError::InvalidDescription(_)
                | StoreError::DuplicateName { .. }
                | StoreError::NotFound { .. }
                | StoreError::Conflict { .. }
        )
    }
}

/// A profile store.
pub trait Store: Send + Sync + 'static {
    /// The current profiles, read from the backend (not a cache).
    fn list(&self) -> BoxFuture<'_, Result<Arc<ProfileSet>, StoreError>>;
    /// Creates a profile (R-PR-1: servers must exist; names are unique).
    fn create(&self, p: NewProfile) -> BoxFuture<'_, Result<Profile, StoreError>>;
    /// Updates a profile found by id or name.
    fn update(&self, id: &str, patch: ProfilePatch) -> BoxFuture<'_, Result<Profile, StoreError>>;
    /// Deletes a profile found by id or name; returns what was deleted.
    fn delete(&self, id: &str) -> BoxFuture<'_, Result<Profile, StoreError>>;
    /// Activates or deactivates a profile found by id or name.
    fn set_state(
        &self,
        id: &str,
        state: ProfileState,
    ) -> BoxFuture<'_, Result<Profile, StoreError>>;
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
    /// other profiles is refused with [`StoreError::Conflict`] unless
    /// `overwrite`.
    fn import(
        &self,
        set: ProfileSet,
        overwrite: bool,
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
            Err(StoreError::Unsupported(
                "this store keeps no node registry".into(),
            ))
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
/// names), keeping ids, states and the revision.
pub fn checked_import(config: &SiteConfig, set: ProfileSet) -> Result<ProfileSet, StoreError> {
    let mut out = ProfileSet {
        revision: set.revision,
        profiles: Vec::with_capacity(set.profiles.len()),
    };
    for p in set.profiles {
        if out.find(&p.id).is_some() {
            return Err(StoreError::Corrupt {
                path: config.path.clone(),
                detail: format!("profile id `{}` appears twice in the source", p.id),
            });
        }
        let new = NewProfile {
            name: p.name,
            description: p.description,
            servers: p.servers,
            state: p.state,
        };
        Change::Create { id: p.id, new }.apply(config, &mut out)?;
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
        return Err(StoreError::Conflict {
            id: "(profile set)".into(),
            detail: format!(
                "the target already holds {} other profile(s) at revision {}; \
                 refusing to overwrite them (pass --overwrite to replace them)",
                cur.profiles.len(),
                cur.revision
            ),
        });
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

static ERRORS: AtomicU64 = AtomicU64::new(0);

/// Store failures (not bad requests) seen by this process: reads of a
/// corrupt file, I/O errors. Exported as `ringsync_store_errors_total`.
pub fn error_count() -> u64 {
    ERRORS.load(Ordering::Relaxed)
}

/// Counts a store failure (see [`error_count`]); client errors are not counted.
pub fn count_error(e: &StoreError) {
    if !e.is_client_error() {
        ERRORS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Opens the store the site configures.
pub async fn open(config: &SiteConfig) -> Result<Arc<dyn Store>, StoreError> {
    match &config.store {
        StoreConfig::Embedded { .. } => {
            let store = EmbeddedStore::open(Arc::new(config.clone())).await?;
            Ok(Arc::new(store))
        }
        StoreConfig::Etcd { .. } => {
            let store = EtcdStore::open(Arc::new(config.clone())).await?;
            Ok(Arc::new(store))
        }
    }
}

// === changes ===

/// One change to a profile set; backends apply it to the freshest set they
/// can read, under their own exclusion.
#[derive(Debug, Clone)]
pub enum Change {
    /// Create a profile with this id.
    Create {
        /// The id chosen for it.
        id: String,
        /// What to create.
        new: NewProfile,
    },
    /// Update a profile.
    Update {
        /// Id or name.
        id: String,
        /// What to change.
        patch: ProfilePatch,
    },
    /// Delete a profile.
    Delete {
        /// Id or name.
        id: String,
    },
    /// Activate or deactivate a profile.
    SetState {
        /// Id or name.
        id: String,
        /// The new state.
        state: ProfileState,
    },
}

impl Change {
    /// The id of the existing profile this change touches in `set` (`None`
    /// for a create, or when no profile matches).
    pub fn target(&self, set: &ProfileSet) -> Option<String> {
        let id = match self {
            Change::Create { .. } => return None,
            Change::Update { id, .. } | Change::Delete { id } | Change::SetState { id, .. } => id,
        };
        set.find(id).map(|p| p.id.clone())
    }

    /// Applies the change to `set` after checking it against the site
    /// (R-PR-1) and the other profiles. On error `set` is unchanged. Returns
    /// the profile as created, updated or deleted. Does not touch the revision.
    pub fn apply(self, config: &SiteConfig, set: &mut ProfileSet) -> Result<Profile, StoreError> {
        match self {
            Change::Create { id, new } => {
                let name = check_name(&new.name)?;
                check_description(&new.description)?;
                let servers = check_servers(config, &new.servers)?;
                if set.profiles.iter().any(|p| p.name == name) {
                    return Err(StoreError::DuplicateName { name });
                }
                let p = Profile {
                    id,
                    name,
                    description: new.description,
                    servers,
                    state: new.state,
                };
                set.profiles.push(p.clone());
                Ok(p)
            }
            Change::Update { id, patch } => {
                let i = find(set, &id)?;
                let mut p = set.profiles[i].clone();
                if let Some(name) = patch.name {
                    let name = check_name(&name)?;
                    if set
                        .profiles
                        .iter()
                        .enumerate()
                        .any(|(j, o)| j != i && o.name == name)
                    {
                        return Err(StoreError::DuplicateName { name });
                    }
                    p.name = name;
                }
                if let Some(d) = patch.description {
                    check_description(&d)?;
                    p.description = d;
                }
                if let Some(servers) = patch.servers {
                    p.servers = check_servers(config, &servers)?;
                }
                set.profiles[i] = p.clone();
                Ok(p)
            }
            Change::Delete { id } => {
                let i = find(set, &id)?;
                Ok(set.profiles.remove(i))
            }
            Change::SetState { id, state } => {
                let i = find(set, &id)?;
                set.profiles[i].state = state;
                Ok(set.profiles[i].clone())
            }
        }
    }
}

/// A fresh profile id: `p-` and 8 hex digits, not used in `set`.
pub fn new_id(set: &ProfileSet) -> String {
    loop {
        let id = format!("p-{:08x}", rand::random::<u32>());
        if set.find(&id).is_none() {
            return id;
        }
    }
}

fn find(set: &ProfileSet, id: &str) -> Result<usize, StoreError> {
    set.position(id)
        .ok_or_else(|| StoreError::NotFound { id: id.to_owned() })
}

fn check_name(name: &str) -> Result<String, StoreError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(StoreError::InvalidName("must not be empty".into()));
    }
    if name.chars().count() > MAX_NAME_LEN {
        return Err(StoreError::InvalidName(format!(
            "must be at most {MAX_NAME_LEN} characters"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(StoreError::InvalidName(
            "must not contain control characters".into(),
        ));
    }
    Ok(name.to_owned())
}

fn check_description(d: &str) -> Result<(), StoreError> {
    if d.chars().count() > MAX_DESCRIPTION_LEN {
        return Err(StoreError::InvalidDescription(format!(
            "must be at most {MAX_DESCRIPTION_LEN} characters"
        )));
    }
    if d.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Err(StoreError::InvalidDescription(
            "must not contain control characters other than newline and tab".into(),
        ));
    }
    Ok(())
}

/// R-PR-1: every server must exist in the site; at least one; duplicates dropped.
fn check_servers(config: &SiteConfig, servers: &[String]) -> Result<Vec<String>, StoreError> {
    if servers.is_empty() {
        return Err(StoreError::NoServers);
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(servers.len());
    for s in servers {
        let s = s.trim();
        if !config.has_server(s) {
            return Err(StoreError::UnknownServer {
                server: s.to_owned(),
                config: config.path.clone(),
            });
        }
        if seen.insert(s) {
            out.push(s.to_owned());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    pub(crate) fn site() -> SiteConfig {
        SiteConfig::from_str_at(
            "[site]\nname = \"t\"\n[[server]]\nname = \"srv-a\"\n[[server]]\nname = \"srv-b\"\n",
            Path::new("/etc/site/t.toml"),
        )
        .unwrap()
    }

    fn new(name: &str, servers: &[&str]) -> NewProfile {
        NewProfile {
            name: name.into(),
            servers: servers.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn r_pr_1_unknown_server_refused_set_unchanged() {
        let c = site();
        let mut set = ProfileSet::default();
        let e = Change::Create {
            id: "p-1".into(),
            new: new("x", &["srv-a", "srv-z"]),
        }
        .apply(&c, &mut set)
        .unwrap_err();
        assert!(matches!(&e, StoreError::UnknownServer { server, .. } if server == "srv-z"));
        assert!(e.to_string().contains("srv-z") && e.to_string().contains("/etc/site/t.toml"));
        assert!(set.profiles.is_empty());
        assert!(matches!(
            Change::Create {
                id: "p-1".into(),
                new: new("x", &[])
            }
            .apply(&c, &mut set),
            Err(StoreError::NoServers)
        ));
    }

    #[test]
    fn names_unique_and_valid() {
        let c = site();
        let mut set = ProfileSet::default();
        Change::Create {
            id: "p-1".into(),
            new: new("a", &["srv-a", "srv-a"]),
        }
        .apply(&c, &mut set)
        .unwrap();
        assert_eq!(set.profiles[0].servers, ["srv-a"]);
        Change::Create {
            id: "p-2".into(),
            new: new("b", &["srv-b"]),
        }
        .apply(&c, &mut set)
        .unwrap();
        assert!(matches!(
            Change::Create {
                id: "p-3".into(),
                new: new(" a ", &["srv-a"])
            }
            .apply(&c, &mut set),
            Err(StoreError::DuplicateName { .. })
        ));
        let rename = ProfilePatch {
            name: Some("a".into()),
            ..Default::default()
        };
        assert!(matches!(
            Change::Update {
                id: "b".into(),
                patch: rename
            }
            .apply(&c, &mut set),
            Err(StoreError::DuplicateName { .. })
        ));
        assert!(matches!(
            Change::Create {
                id: "p-3".into(),
                new: new("", &["srv-a"])
            }
            .apply(&c, &mut set),
            Err(StoreError::InvalidName(_))
        ));
        assert!(matches!(
            Change::Delete { id: "nope".into() }.apply(&c, &mut set),
            Err(StoreError::NotFound { .. })
        ));
        let bad = ProfilePatch {
            servers: Some(vec!["srv-q".into()]),
            ..Default::default()
        };
        assert!(Change::Update {
            id: "a".into(),
            patch: bad
        }
        .apply(&c, &mut set)
        .is_err());
        assert_eq!(
            set.profiles[0].servers,
            ["srv-a"],
            "R-PR-1: nothing changed"
        );
    }
}
