//! Helpers for tests on a real etcd: a site file pointing at it, stores
//! opened as separate nodes, and polling for an expected state.
//!
//! Not a module of `common`: ringsync's test binary declares it only with
//! the `etcd` feature, so the embedded store's tests build without it, and
//! ringsync-ops (which includes `common` too) declares it on its own.

use std::future::Future;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringsync::store::EtcdStore;
use ringsync::SiteConfig;

/// `127.0.<net>.<host>`.
pub fn ip(net: u8, host: u8) -> IpAddr {
    format!("127.0.{net}.{host}").parse().unwrap()
}

/// The servers and instances of the common test site, on an etcd store.
pub fn etcd_site_text(endpoints: &[String], prefix: &str) -> String {
    let eps = endpoints
        .iter()
        .map(|e| format!("\"{e}\""))
        .collect::<Vec<_>>()
        .join(", ");
    crate::common::site().replace(
        "[store]\nkind = \"embedded\"\npath = \"t1.profiles.json\"\n",
        &format!("[store]\nkind = \"etcd\"\nendpoints = [{eps}]\nprefix = \"{prefix}\"\n"),
    )
}

/// Writes the etcd site into `dir/site.toml` and loads it.
pub fn etcd_site(dir: &Path, endpoints: &[String], prefix: &str) -> Arc<SiteConfig> {
    let path = dir.join("site.toml");
    std::fs::write(&path, etcd_site_text(endpoints, prefix)).unwrap();
    Arc::new(SiteConfig::load(&path).unwrap())
}

/// Opens a store as one node, with its own view cache `cache`.
pub async fn node(
    config: &Arc<SiteConfig>,
    endpoints: &[String],
    prefix: &str,
    cache: PathBuf,
) -> Result<EtcdStore, ringsync::StoreError> {
    EtcdStore::open_with(config.clone(), endpoints.to_vec(), prefix.to_owned(), cache).await
}

/// Polls `check` every 20 ms until it holds; panics with `what` after `limit`.
pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let t0 = Instant::now();
    loop {
        if check().await {
            return t0.elapsed();
        }
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
