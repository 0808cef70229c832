//! The handover records of the embedded store: one machine, files next to
//! the profiles file `F`.
//!
//! | file | what |
//! |---|---|
//! | `F.handover` | every group's desired and confirmed leader and the planner record (JSON) |
//! | `F.handover.lock` | writers' lock |
//! | `F.planner.lock` | the planner election: held by the acting planner for its whole life (R-MN-3) |
//!
//! Writes follow the profiles file's discipline (lock, re-read, apply,
//! write a temporary file, fsync, rename, fsync the directory), so a
//! planner and the services' agents writing at once lose nothing. The
//! election is an exclusive `flock`: the kernel releases it when the holder
//! dies, and a second `ringsync serve` on the machine stands by until then.

use crate::store::BackendError;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::handover::{Campaign, HandoverStore, Leadership, Published};
use super::{blocking, StoreError};
use crate::files::{fingerprint, parent_dir, sibling, POLL_INTERVAL};
use crate::handover::record::{Confirmed, Desired, HandoverState, PlannerRecord};

/// The handover records next to an embedded profiles file.
pub struct FileHandover {
    inner: Arc<Files>,
    _poller: DropGuard,
}

struct Files {
    path: PathBuf,
    lock: PathBuf,
    tmp: PathBuf,
    planner_lock: PathBuf,
    tx: watch::Sender<Arc<HandoverState>>,
}

impl FileHandover {
    /// The records next to the profiles file `profiles`; starts a poller that
    /// notices other processes' writes. Needs a tokio runtime.
    pub fn open(profiles: &Path) -> FileHandover {
        let path = sibling(profiles, ".handover");
        let inner = Arc::new(Files {
            lock: sibling(&path, ".lock"),
            tmp: sibling(&path, ".tmp"),
            planner_lock: sibling(profiles, ".planner.lock"),
            path,
            tx: watch::channel(Arc::new(HandoverState::default())).0,
        });
        let token = CancellationToken::new();
        tokio::spawn(poll(inner.clone(), token.clone()));
        FileHandover {
            inner,
            _poller: token.drop_guard(),
        }
    }

    /// The records file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    fn mutate(
        &self,
        edit: impl FnOnce(&mut HandoverState) + Send + 'static,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let state = blocking(move || inner.mutate(edit)).await??;
            self.inner.publish(Arc::new(state));
            Ok(())
        })
    }
}

impl HandoverStore for FileHandover {
    fn read(&self) -> BoxFuture<'_, Result<Arc<HandoverState>, StoreError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let (mut state, acting) = blocking(move || {
                let state = read_file(&inner.path)?;
                Ok::<_, StoreError>((state, holder(&inner.planner_lock)))
            })
            .await??;
            self.inner.publish(Arc::new(state.clone()));
            state.acting = acting;
            Ok(Arc::new(state))
        })
    }

    fn watch(&self) -> watch::Receiver<Arc<HandoverState>> {
        self.inner.tx.subscribe()
    }

    fn publish<'a>(
        &'a self,
        lead: &'a Leadership,
        group: &'a str,
        desired: Desired,
        planner: PlannerRecord,
    ) -> BoxFuture<'a, Result<Published, StoreError>> {
        if !lead.is_held() {
            return Box::pin(async { Ok(Published::NotPlanner) });
        }
        // The planner lock, held by `lead` for its whole life, is the fence.
        let group = group.to_owned();
        Box::pin(async move {
            self.mutate(move |s| {
                s.desired.insert(group, desired);
                s.planner = planner;
            })
            .await?;
            Ok(Published::Done)
        })
    }

    fn confirm<'a>(
        &'a self,
        group: &'a str,
        confirmed: Confirmed,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let group = group.to_owned();
        self.mutate(move |s| {
            s.confirmed.insert(group, confirmed);
        })
    }

    fn campaign<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<Campaign, StoreError>> {
        let path = self.inner.planner_lock.clone();
        let name = node.to_owned();
        Box::pin(async move {
            let won = blocking(move || try_elect(&path, &name)).await??;
            Ok(match won {
                Ok(file) => {
                    let (tx, held) = watch::channel(true);
                    let release: super::handover::Release = Box::new(move || {
                        Box::pin(async move {
                            // Closing the file releases the lock.
                            drop(file);
                            drop(tx);
                        })
                    });
                    tracing::info!(node, "elected Active-Passive planner (file lock)");
                    Campaign::Elected(Leadership::new(node, 0, held, release))
                }
                Err(by) => Campaign::Held { by },
            })
        })
    }

    fn location(&self) -> String {
        format!("embedded file {}", self.inner.path.display())
    }
}

// === impl Files ===

impl Files {
    fn publish(&self, state: Arc<HandoverState>) {
        self.tx.send_if_modified(|cur| {
            if **cur == *state {
                false
            } else {
                *cur = state;
                true
            }
        });
    }

    /// Lock, re-read, edit, write atomically. Blocking.
    fn mutate(&self, edit: impl FnOnce(&mut HandoverState)) -> Result<HandoverState, StoreError> {
        let lock = open_rw(&self.lock).map_err(io_err(&self.lock))?;
        // Released when `lock` is closed, also when the process dies.
        fs4::FileExt::lock(&lock).map_err(io_err(&self.lock))?;
        let mut state = read_file(&self.path)?;
        edit(&mut state);
        let mut bytes = serde_json::to_vec_pretty(&state)
            .map_err(|e| StoreError::Backend(BackendError::Task(e.to_string())))?;
        bytes.push(b'\n');
        {
            let mut tmp = File::create(&self.tmp).map_err(io_err(&self.tmp))?;
            tmp.write_all(&bytes).map_err(io_err(&self.tmp))?;
            tmp.sync_all().map_err(io_err(&self.tmp))?;
        }
        fs::rename(&self.tmp, &self.path).map_err(io_err(&self.path))?;
        let dir = parent_dir(&self.path);
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err(&dir))?;
        drop(lock);
        Ok(state)
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StoreError {
    let path = path.to_owned();
    move |source| StoreError::Backend(BackendError::Io { path, source })
}

fn open_rw(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
}

/// Missing → no records; unparsable → [`BackendError::Corrupt`], left as it is.
fn read_file(path: &Path) -> Result<HandoverState, StoreError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(HandoverState::default()),
        Err(source) => {
            return Err(StoreError::Backend(BackendError::Io {
                path: path.to_owned(),
                source,
            }))
        }
    };
    let mut state: HandoverState = serde_json::from_slice(&bytes).map_err(|e| {
        StoreError::Backend(BackendError::Corrupt {
            path: path.to_owned(),
            detail: e.to_string(),
        })
    })?;
    state.acting = None;
    Ok(state)
}

/// Takes the planner lock if free: the open file holding it, or who holds it.
fn try_elect(path: &Path, node: &str) -> Result<Result<File, Option<String>>, StoreError> {
    let mut file = open_rw(path).map_err(io_err(path))?;
    match fs4::FileExt::try_lock(&file) {
        Ok(()) => {}
        Err(fs4::TryLockError::WouldBlock) => return Ok(Err(holder(path))),
        Err(fs4::TryLockError::Error(e)) => return Err(io_err(path)(e)),
    }
    // Who plans, for `handover status`; the lock, not the text, decides.
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| file.write_all(format!("{node}\n").as_bytes()))
        .map_err(io_err(path))?;
    Ok(Ok(file))
}

/// The node holding the planner lock, if one does. Blocking.
fn holder(path: &Path) -> Option<String> {
    let mut file = File::open(path).ok()?;
    match fs4::FileExt::try_lock_shared(&file) {
        // Free: nobody plans.
        Ok(()) => None,
        Err(_) => {
            let mut s = String::new();
            file.read_to_string(&mut s).ok()?;
            Some(s.trim().to_owned()).filter(|s| !s.is_empty())
        }
    }
}

/// Notices writes of other processes (the planner's, the agents').
async fn poll(inner: Arc<Files>, token: CancellationToken) {
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = None;
    let mut reported = false;
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tick.tick() => {}
        }
        let path = inner.path.clone();
        let Ok(Ok(now)) = blocking(move || fingerprint(&path)).await else {
            continue;
        };
        if last == Some(now) {
            continue;
        }
        let path = inner.path.clone();
        match blocking(move || read_file(&path)).await {
            Ok(Ok(state)) => {
                last = Some(now);
                reported = false;
                inner.publish(Arc::new(state));
            }
            // The read could not run: the runtime is shutting down with the
            // process (a CLI command's end). Nothing failed to report.
            Err(_) => return,
            Ok(Err(e)) => {
                if !reported {
                    tracing::error!(error = %e, "handover records cannot be read; keeping the last ones");
                    reported = true;
                }
                last = Some(now);
            }
        }
    }
}
