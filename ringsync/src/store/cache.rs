//! The local last-known view cache of a node on a shared store (R-MN-2).
//!
//! A node that starts while etcd is unreachable must not start with an empty
//! view: that would undrain every server on its own. So every node writes
//! the profiles it applies to a small JSON file (atomically: a temporary
//! file per process, fsync, rename) and, when the store cannot be reached at
//! start, starts from that file, stale since the file was written, and says
//! so. By default the file sits next to the site file as
//! `<site>.view-cache.json`; `[store] cache` moves it.

use crate::store::BackendError;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::profile::ProfileSet;

/// The cache file's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedView {
    /// The site it belongs to.
    pub site: String,
    /// Where the profiles came from (`etcd <prefix>`), so a cache written
    /// for another store is never used.
    pub source: String,
    /// The store revision of `profiles`.
    pub store_revision: u64,
    /// When it was written (Unix ms).
    pub saved_ms: u64,
    /// The profiles.
    pub profiles: ProfileSet,
}

/// Writes `view` to `path` atomically. Blocking.
pub fn save(path: &Path, view: &CachedView) -> Result<(), StoreError> {
    let io = |p: &Path| {
        let p = p.to_owned();
        move |source| StoreError::Backend(BackendError::Io { path: p, source })
    };
    let mut bytes = serde_json::to_vec_pretty(view)
        .map_err(|e| StoreError::Backend(BackendError::Task(e.to_string())))?;
    bytes.push(b'\n');
    // One temporary name per process: several nodes on one machine may share the cache.
    let tmp = {
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".{}.tmp", std::process::id()));
        path.with_file_name(name)
    };
    {
        let mut f = File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(&bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
    }
    fs::rename(&tmp, path).map_err(io(path))?;
    Ok(())
}

/// Reads the cache at `path`: `Ok(None)` when there is none, an error when
/// it cannot be read or parsed.
pub fn load(path: &Path) -> Result<Option<CachedView>, StoreError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(StoreError::Backend(BackendError::Io {
                path: path.to_owned(),
                source,
            }))
        }
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        StoreError::Backend(BackendError::Corrupt {
            path: path.to_owned(),
            detail: e.to_string(),
        })
    })
}

/// The default cache path for a site file: `<dir>/<site>.view-cache.json`.
pub fn default_path(site_file: &Path, site: &str) -> PathBuf {
    let dir = match site_file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    dir.join(format!("{site}.view-cache.json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.view-cache.json");
        assert_eq!(load(&path).unwrap(), None);
        let v = CachedView {
            site: "t".into(),
            source: "etcd /drain/t".into(),
            store_revision: 12,
            saved_ms: 5,
            profiles: ProfileSet::default(),
        };
        save(&path, &v).unwrap();
        assert_eq!(load(&path).unwrap(), Some(v));
        fs::write(&path, b"{").unwrap();
        assert!(matches!(
            load(&path),
            Err(StoreError::Backend(BackendError::Corrupt { .. }))
        ));
        assert_eq!(
            default_path(Path::new("/etc/site/t.toml"), "t"),
            Path::new("/etc/site/t.view-cache.json")
        );
    }
}
