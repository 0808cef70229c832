//! File helpers shared by the files a node re-reads while it runs (the
//! TLS certificate and key here, the operator plane's tokens file).

use std::fs;
use std::path::Path;
use std::time::SystemTime;

/// What identifies a version of a file without reading it: its length,
/// modification time and inode. `None` when the file cannot be read, so a
/// file that goes away and comes back counts as a change.
pub fn stamp(path: &Path) -> Option<(u64, SystemTime, u64)> {
    let m = fs::metadata(path).ok()?;
    #[cfg(unix)]
    let ino = std::os::unix::fs::MetadataExt::ino(&m);
    #[cfg(not(unix))]
    let ino = 0;
    Some((m.len(), m.modified().ok()?, ino))
}
