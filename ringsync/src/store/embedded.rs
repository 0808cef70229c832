//! The embedded store: one JSON file per site, replaced atomically (R-PR-4).
//!
//! Every change takes an exclusive `flock` on `<file>.lock`, re-reads the file
//! (another process may have written it), applies the change, writes
//! `<file>.tmp`, fsyncs it, renames it over the file and fsyncs the
//! directory. Concurrent writers, threads or processes, therefore lose
//! nothing, and a kill -9 leaves the old or the new file, never a torn one.
//! A file that does not parse is reported and never overwritten.
//!
//! The audit trail of the changes is `<file>.audit.jsonl` ([`super::audit`]),
//! appended under the same lock, each record before the change it records;
//! a writer killed between the two has its change committed by the next
//! process that takes the lock, so the log never names a change the store
//! lacks and the store never holds a change the log does not name.
//!
//! Other processes' changes are noticed by polling the file's identity
//! (inode, size, mtime) every [`POLL_INTERVAL`](crate::files::POLL_INTERVAL) (R-PR-2).

use crate::store::BackendError;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::audit::{AuditPage, AuditQuery, AuditRecord};
use super::audit_parts;
use super::{blocking, Actor, Freshness, Imported, Store, StoreError, WriteRequest, Written};
use crate::config::{SiteConfig, StoreConfig};
use crate::files::{fingerprint, fp_of, parent_dir, sibling, sync_dir, Fingerprint, POLL_INTERVAL};
use crate::profile::ProfileSet;

/// A profile store in a local JSON file.
pub struct EmbeddedStore {
    inner: Arc<Inner>,
    _poller: DropGuard,
    /// The handover records next to the file, opened on first use.
    handover: std::sync::OnceLock<Arc<super::handover_file::FileHandover>>,
}

struct Inner {
    config: Arc<SiteConfig>,
    path: PathBuf,
    lock_path: PathBuf,
    tmp_path: PathBuf,
    audit_path: PathBuf,
    tx: watch::Sender<Arc<ProfileSet>>,
    fresh: watch::Sender<Freshness>,
}

impl EmbeddedStore {
    /// Opens the store of `config` (which must be `kind = "embedded"`): reads
    /// the file (missing → empty set; malformed → [`BackendError::Corrupt`], the
    /// file untouched) and starts the poller. Needs a tokio runtime.
    pub async fn open(config: Arc<SiteConfig>) -> Result<EmbeddedStore, StoreError> {
        let path = match &config.store {
            StoreConfig::Embedded { path } => path.clone(),
            StoreConfig::Etcd { .. } => {
                return Err(StoreError::Backend(BackendError::Unsupported(
                    "EmbeddedStore::open on a site configured for etcd".into(),
                )))
            }
        };
        Self::open_at(config, path).await
    }

    /// Opens a store file at `path`, validating changes against `config`.
    pub async fn open_at(
        config: Arc<SiteConfig>,
        path: PathBuf,
    ) -> Result<EmbeddedStore, StoreError> {
        let (fresh, _) = watch::channel(Freshness::fresh(0));
        let (tx, _) = watch::channel(Arc::new(ProfileSet::default()));
        let inner = Arc::new(Inner {
            fresh,
            config,
            lock_path: sibling(&path, ".lock"),
            audit_path: sibling(&path, ".audit.jsonl"),
            tmp_path: sibling(&path, ".tmp"),
            path,
            tx,
        });
        let i = inner.clone();
        let (set, fp) = blocking(move || {
            // Finish or drop what a writer killed mid-change left; a store
            // this process may not lock (read-only) is read as it is.
            let _lock = i.lock().ok();
            read_file(&i.path)
        })
        .await??;
        inner.fresh.send_replace(Freshness::fresh(set.revision));
        inner.tx.send_replace(Arc::new(set));
        let token = CancellationToken::new();
        tokio::spawn(poll(inner.clone(), fp, token.clone()));
        Ok(EmbeddedStore {
            inner,
            _poller: token.drop_guard(),
            handover: std::sync::OnceLock::new(),
        })
    }

    /// The file this store writes.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The audit log kept next to it.
    pub fn audit_path(&self) -> &Path {
        &self.inner.audit_path
    }
}

impl Store for EmbeddedStore {
    fn list(&self) -> BoxFuture<'_, Result<Arc<ProfileSet>, StoreError>> {
        Box::pin(async move {
            let path = self.inner.path.clone();
            let (set, _) = blocking(move || read_file(&path)).await??;
            let set = Arc::new(set);
            self.inner.publish(set.clone());
            Ok(set)
        })
    }

    fn write(&self, w: WriteRequest) -> BoxFuture<'_, Result<Written, StoreError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let (set, written) = blocking(move || inner.write(w)).await??;
            self.inner.publish(set);
            Ok(written)
        })
    }

    fn append_audit(&self, rec: AuditRecord) -> BoxFuture<'_, Result<u64, StoreError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            blocking(move || {
                let _lock = inner.lock()?;
                audit_parts::append(&inner.audit_path, &rec, &inner.config.audit)
            })
            .await?
        })
    }

    fn audit_log(&self, q: AuditQuery) -> BoxFuture<'_, Result<AuditPage, StoreError>> {
        let path = self.inner.audit_path.clone();
        Box::pin(async move { blocking(move || audit_parts::read(&path, &q)).await? })
    }

    fn watch(&self) -> watch::Receiver<Arc<ProfileSet>> {
        self.inner.tx.subscribe()
    }

    fn freshness(&self) -> watch::Receiver<Freshness> {
        self.inner.fresh.subscribe()
    }

    fn handover(&self) -> Option<Arc<dyn super::HandoverStore>> {
        let h = self
            .handover
            .get_or_init(|| Arc::new(super::handover_file::FileHandover::open(&self.inner.path)));
        Some(h.clone())
    }

    fn import(
        &self,
        set: ProfileSet,
        overwrite: bool,
        by: Actor,
    ) -> BoxFuture<'_, Result<Imported, StoreError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let src = super::checked_import(&inner.config, set)?;
            let (set, imported) = blocking(move || {
                inner.mutate_set(|cur| {
                    let (next, imported) = super::merge_import(cur, &src, overwrite)?;
                    let records = match next {
                        Some(n) => {
                            let records = super::import_audit(&by, cur, &n);
                            *cur = n;
                            records
                        }
                        None => Vec::new(),
                    };
                    Ok((imported, records))
                })
            })
            .await??;
            self.inner.publish(set);
            Ok(imported)
        })
    }
}

// === impl Inner ===

impl Inner {
    /// Publishes a set if it differs from the current one, so watchers see
    /// each version once whether it came from us or from the poller.
    fn publish(&self, set: Arc<ProfileSet>) {
        let fresh = Freshness::fresh(set.revision);
        self.fresh.send_if_modified(|cur| {
            if *cur == fresh {
                false
            } else {
                *cur = fresh;
                true
            }
        });
        self.tx.send_if_modified(|cur| {
            if **cur == *set {
                false
            } else {
                *cur = set;
                true
            }
        });
    }

    /// The locked read-modify-write cycle (R-PR-4) of one change, audited
    /// when asked: the record is appended and fsynced before the new file
    /// is renamed into place, so no change is ever made without its record.
    /// Blocking.
    fn write(&self, w: WriteRequest) -> Result<(Arc<ProfileSet>, Written), StoreError> {
        let lock = self.lock()?;
        let (mut set, _) = read_file(&self.path)?;
        let before = w.op.target_in(&set).and_then(|id| set.find(&id).cloned());
        let committed = match w.op.commit(&self.config, &mut set, w.expect) {
            Ok(c) => c,
            Err(e) => {
                if let Some(rec) = w.audit {
                    self.audit_refusal(rec.refused(&e, before));
                }
                return Err(e);
            }
        };
        // A change that changes nothing writes nothing: the file, its
        // revision and the log stay as they are (the log names the changes
        // the store holds, and the refusals).
        if committed.changed {
            self.write_tmp(&set)?;
            if let Some(rec) = w.audit {
                audit_parts::append(
                    &self.audit_path,
                    &rec.done(&committed, set.revision),
                    &self.config.audit,
                )?;
            }
            self.commit_tmp()?;
        }
        drop(lock);
        let revision = set.revision;
        Ok((
            Arc::new(set),
            Written {
                committed,
                revision,
            },
        ))
    }

    /// Records a refused change; a failure to is logged, and the refusal
    /// stands (nothing was changed).
    fn audit_refusal(&self, rec: AuditRecord) {
        if let Err(e) = audit_parts::append(&self.audit_path, &rec, &self.config.audit) {
            super::count_error(&e);
            tracing::error!(error = %e, "cannot append a refused change to the audit log");
        }
    }

    /// Takes the writers' lock (released when the file is closed, also
    /// when the process dies). Blocking.
    fn lock(&self) -> Result<File, StoreError> {
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&self.lock_path)
            .map_err(io_at(&self.lock_path))?;
        fs4::FileExt::lock(&lock).map_err(io_at(&self.lock_path))?;
        self.recover()?;
        Ok(lock)
    }

    /// Under the lock: what a writer killed mid-change left behind. Its
    /// `<file>.tmp` is committed if the audit log already holds the record
    /// of that very change (the record is written first, so the change is
    /// owed: the log never names a change the store lacks), else removed
    /// (killed before its record: nothing claims it). Blocking.
    fn recover(&self) -> Result<(), StoreError> {
        if !self.tmp_path.exists() {
            return Ok(());
        }
        let pending = fs::read(&self.tmp_path)
            .ok()
            .and_then(|b| serde_json::from_slice::<ProfileSet>(&b).ok());
        let (current, _) = read_file(&self.path)?;
        let recorded = audit_parts::last_record(&self.audit_path)?;
        let owed = match (&pending, &recorded) {
            (Some(p), Some(r)) => {
                // A change goes one revision up, an import (`ringsync
                // migrate`) may jump: either way past the file's, and
                // its last record names exactly that revision.
                p.revision > current.revision
                    && r.revision == Some(p.revision)
                    && (200..300).contains(&r.status)
            }
            _ => false,
        };
        if owed {
            tracing::warn!(file = %self.path.display(), "a writer died after recording its change and before committing it; committing it now");
            self.commit_tmp()
        } else {
            tracing::warn!(file = %self.tmp_path.display(), "removing the half-made change of a writer that died before recording it");
            fs::remove_file(&self.tmp_path).map_err(io_at(&self.tmp_path))
        }
    }

    /// Lock, re-read, let `edit` change the set (it returns the audit
    /// records of what it changed; none: nothing to write), write
    /// atomically. Blocking.
    fn mutate_set<T>(
        &self,
        edit: impl FnOnce(&mut ProfileSet) -> Result<(T, Vec<AuditRecord>), StoreError>,
    ) -> Result<(Arc<ProfileSet>, T), StoreError> {
        let lock = self.lock()?;
        let (mut set, _) = read_file(&self.path)?;
        let (out, records) = edit(&mut set)?;
        if !records.is_empty() {
            self.write_tmp(&set)?;
            // As in `write`: the records are fsynced before the new file is
            // renamed in, so no change is made without them (R-PR-4).
            for rec in &records {
                audit_parts::append(&self.audit_path, rec, &self.config.audit)?;
            }
            self.commit_tmp()?;
        }
        drop(lock);
        Ok((Arc::new(set), out))
    }

    /// Writes and fsyncs `<file>.tmp`.
    fn write_tmp(&self, set: &ProfileSet) -> Result<(), StoreError> {
        let mut bytes = serde_json::to_vec_pretty(set)
            .map_err(|e| StoreError::Backend(BackendError::Task(e.to_string())))?;
        bytes.push(b'\n');
        let mut tmp = File::create(&self.tmp_path).map_err(io_at(&self.tmp_path))?;
        tmp.write_all(&bytes).map_err(io_at(&self.tmp_path))?;
        tmp.sync_all().map_err(io_at(&self.tmp_path))
    }

    /// Renames `<file>.tmp` over the file and fsyncs the directory.
    fn commit_tmp(&self) -> Result<(), StoreError> {
        fs::rename(&self.tmp_path, &self.path).map_err(io_at(&self.path))?;
        sync_dir(&self.path).map_err(io_at(&parent_dir(&self.path)))
    }
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> StoreError {
    let path = path.to_owned();
    move |source| StoreError::Backend(BackendError::Io { path, source })
}

/// Polls the file for changes made by other processes (R-PR-2).
async fn poll(inner: Arc<Inner>, mut last: Option<Fingerprint>, token: CancellationToken) {
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reported_error = false;
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tick.tick() => {}
        }
        let path = inner.path.clone();
        let now = match blocking(move || fingerprint(&path)).await {
            Ok(Ok(fp)) => fp,
            Ok(Err(_)) | Err(_) => continue,
        };
        if now == last {
            continue;
        }
        let path = inner.path.clone();
        match blocking(move || read_file(&path)).await {
            Ok(Ok((set, fp))) => {
                last = fp;
                reported_error = false;
                inner.publish(Arc::new(set));
            }
            // The read could not run: the runtime is shutting down with the
            // process (a CLI command's end). Nothing failed to report.
            Err(_) => return,
            Ok(Err(e)) => {
                // Keep serving the last good snapshot; say so once per bad version.
                if !reported_error {
                    tracing::error!(error = %e, "profile store changed but cannot be read; keeping the last good profiles");
                    super::count_error(&e);
                    reported_error = true;
                    // R-MN-2: fail-static, and say so.
                    inner.fresh.send_modify(|f| {
                        f.stale_since_ms = Some(crate::work::now_ms());
                        f.reason = Some(e.to_string());
                    });
                }
                last = now;
            }
        }
    }
}

/// Reads and parses the file. Missing → empty set, fingerprint `None`.
fn read_file(path: &Path) -> Result<(ProfileSet, Option<Fingerprint>), StoreError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((ProfileSet::default(), None)),
        Err(source) => {
            return Err(StoreError::Backend(BackendError::Io {
                path: path.to_owned(),
                source,
            }))
        }
    };
    let io = |source| {
        StoreError::Backend(BackendError::Io {
            path: path.to_owned(),
            source,
        })
    };
    // Fingerprint of the very version we read (rename replaces, never edits in place).
    let fp = Some(fp_of(&file.metadata().map_err(io)?));
    let bytes = io::read_to_string(file).map_err(|e| {
        if e.kind() == io::ErrorKind::InvalidData {
            StoreError::Backend(BackendError::Corrupt {
                path: path.to_owned(),
                detail: "not UTF-8 text".into(),
            })
        } else {
            io(e)
        }
    })?;
    let set: ProfileSet = serde_json::from_str(&bytes).map_err(|e| {
        StoreError::Backend(BackendError::Corrupt {
            path: path.to_owned(),
            detail: e.to_string(),
        })
    })?;
    Ok((set, fp))
}
