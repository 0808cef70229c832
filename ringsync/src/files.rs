//! File helpers shared by the files a node re-reads while it runs (the
//! TLS certificate and key here, the operator plane's tokens file) and by the
//! file-backed stores (profiles, audit log, handover records), which all
//! import them from here so none imports another (issue 24).

use std::ffi::OsString;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// What identifies a version of a file without reading it: its length,
/// modification time and inode, and on Unix its change time (ctime), mode
/// and owner, so a `chmod` or `chown` (which leave the mtime as it was)
/// counts as a change too: a file that became readable is read again.
/// `None` when the file cannot be read, so a file that goes away and comes
/// back counts as a change.
pub fn stamp(path: &Path) -> Option<Stamp> {
    let m = fs::metadata(path).ok()?;
    #[cfg(unix)]
    let meta = {
        use std::os::unix::fs::MetadataExt;
        (
            m.ino(),
            m.ctime(),
            m.ctime_nsec(),
            m.mode(),
            m.uid(),
            m.gid(),
        )
    };
    #[cfg(not(unix))]
    let meta = (0, 0, 0, 0, 0, 0);
    Some(Stamp {
        len: m.len(),
        mtime: m.modified().ok()?,
        meta,
    })
}

/// A file version as [`stamp`] sees it: compare two to tell a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    len: u64,
    mtime: SystemTime,
    /// Inode, ctime (seconds, nanoseconds), mode, uid, gid.
    meta: (u64, i64, i64, u32, u32, u32),
}

/// How often the store's files (profiles, handover records) are is checked for changes by other processes.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// What identifies a version of a file without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    ino: u64,
    len: u64,
    mtime: Option<SystemTime>,
}

/// Fsyncs the directory holding `path`, so a file created or renamed there stays.
pub fn sync_dir(path: &Path) -> io::Result<()> {
    File::open(parent_dir(path)).and_then(|d| d.sync_all())
}

/// The [`Fingerprint`] of `path`, `None` when it does not exist.
pub fn fingerprint(path: &Path) -> io::Result<Option<Fingerprint>> {
    match fs::metadata(path) {
        Ok(m) => Ok(Some(fp_of(&m))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The fingerprint of a file's metadata (read from an open file, so it is
/// the version read).
pub fn fp_of(m: &fs::Metadata) -> Fingerprint {
    #[cfg(unix)]
    let ino = std::os::unix::fs::MetadataExt::ino(m);
    #[cfg(not(unix))]
    let ino = 0;
    Fingerprint {
        ino,
        len: m.len(),
        mtime: m.modified().ok(),
    }
}

/// `path` with `suffix` appended to its file name (`store.json.tmp`).
pub fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = OsString::from(path.as_os_str());
    s.push(suffix);
    PathBuf::from(s)
}

/// The directory holding `path` (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}
