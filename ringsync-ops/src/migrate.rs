//! `ringsync migrate --from embedded --to etcd`: moves a site's profiles
//! from one store to another (and back), keeping ids, states and the
//! revision (R-PR-4: nothing acknowledged is lost on the way).
//!
//! The site file names one store; the other side comes from flags or
//! defaults: the embedded file `<site>.profiles.json` next to the site file,
//! etcd at `--endpoint`/`--prefix` (default prefix `/drain/<site>`).
//! Every profile the copy writes gets an audit record (`import`, by
//! `local:<OS user>`) in the target's log, with the profiles (R-PR-4).
//! Idempotent: running it twice copies once. A target holding other
//! profiles is refused unless `--overwrite`.

use ringsync::store::BackendError;
use std::path::PathBuf;
use std::sync::Arc;

use clap::ValueEnum;

use ringsync::config::{SiteConfig, StoreConfig};
use ringsync::store::{cache, Actor, EmbeddedStore, EtcdStore, Imported, Store, StoreError};

/// A store kind on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// The local JSON file.
    Embedded,
    /// An etcd cluster.
    Etcd,
}

/// Where the side the site file does not describe lives.
#[derive(Debug, Clone, Default)]
pub struct Locations {
    /// The embedded file.
    pub path: Option<PathBuf>,
    /// etcd client URLs.
    pub endpoints: Vec<String>,
    /// etcd key prefix.
    pub prefix: Option<String>,
}

/// What a migration did, for the operator.
#[derive(Debug, Clone)]
pub struct Migrated {
    /// The source, in words.
    pub from: String,
    /// The target, in words.
    pub to: String,
    /// What the target store did.
    pub outcome: Imported,
    /// The source's revision.
    pub revision: u64,
}

/// Copies the profiles from `from` to `to`.
pub async fn run(
    config: &Arc<SiteConfig>,
    from: Kind,
    to: Kind,
    at: &Locations,
    overwrite: bool,
) -> Result<Migrated, StoreError> {
    if from == to {
        return Err(StoreError::Backend(BackendError::Unsupported(
            "source and target are the same kind of store".into(),
        )));
    }
    let (src, from_words) = open(config, from, at).await?;
    let (dst, to_words) = open(config, to, at).await?;
    let set = src.list().await?;
    let revision = set.revision;
    // Audited as the CLI's other local changes: the OS user (R-PR-4).
    let outcome = dst
        .import((*set).clone(), overwrite, Actor::local())
        .await?;
    Ok(Migrated {
        from: from_words,
        to: to_words,
        outcome,
        revision,
    })
}

async fn open(
    config: &Arc<SiteConfig>,
    kind: Kind,
    at: &Locations,
) -> Result<(Arc<dyn Store>, String), StoreError> {
    let site = &config.site.name;
    match kind {
        Kind::Embedded => {
            let path = match (&at.path, &config.store) {
                (Some(p), _) => p.clone(),
                (None, StoreConfig::Embedded { path }) => path.clone(),
                (None, StoreConfig::Etcd { .. }) => config
                    .path
                    .parent()
                    .unwrap_or(std::path::Path::new("."))
                    .join(format!("{site}.profiles.json")),
            };
            let words = format!("embedded file {}", path.display());
            let s = EmbeddedStore::open_at(config.clone(), path).await?;
            Ok((Arc::new(s), words))
        }
        Kind::Etcd => {
            let (endpoints, prefix, cache) = match &config.store {
                StoreConfig::Etcd {
                    endpoints,
                    prefix,
                    cache,
                } => (
                    if at.endpoints.is_empty() {
                        endpoints.clone()
                    } else {
                        at.endpoints.clone()
                    },
                    at.prefix.clone().unwrap_or_else(|| prefix.clone()),
                    cache.clone(),
                ),
                StoreConfig::Embedded { .. } => (
                    at.endpoints.clone(),
                    at.prefix
                        .clone()
                        .unwrap_or_else(|| format!("/drain/{site}")),
                    cache::default_path(&config.path, site),
                ),
            };
            if endpoints.is_empty() {
                return Err(StoreError::Backend(BackendError::Unsupported(
                    "no etcd endpoint: give --endpoint URL (the site file names the embedded store)"
                        .into(),
                )));
            }
            let words = format!("etcd {} prefix {prefix}", endpoints.join(","));
            let s = EtcdStore::open_with(config.clone(), endpoints, prefix, cache).await?;
            Ok((Arc::new(s), words))
        }
    }
}
