//! The work book on disk, so a planned restart keeps its knowledge (R-ST-3).
//!
//! A gate that stops gracefully, with no transaction in flight, writes its
//! book; the next start reads it, deletes it before trusting it, and knows
//! the work set up since the old book's own start instead of since now. The
//! file is read at most once: a gate that ran again without writing a new
//! one (it crashed) finds none, and reports unknown for the restart window.
//! A snapshot of another site, made under another secret, from the future,
//! or unreadable is refused (with the reason), and the gate starts blind.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::bindings::Binding;
use super::dialogs::Dialog;
use super::WorkBook;

const VERSION: u32 = 1;
/// Clock skew tolerated between the stop and the next start.
const SKEW_MS: u64 = 5_000;

/// Why a snapshot could not be written or used.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Reading, writing or deleting the file failed.
    #[error("work snapshot {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not a snapshot this gate can read.
    #[error("work snapshot {path}: {source}")]
    Format {
        /// The file.
        path: PathBuf,
        /// The error.
        source: serde_json::Error,
    },
    /// The snapshot does not describe this gate's work.
    #[error("work snapshot not used: {0}")]
    Mismatch(String),
    /// The book cannot be written yet.
    #[error("work snapshot not written: {0}")]
    NotNow(String),
}

/// A call or subscription: key, instance (index into `instances`), since,
/// seen, until, learned.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedDialog(u64, u32, u64, u64, u64, bool);

/// A binding: AoR key, contact key, instance, expiry.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedBinding(u64, u64, u32, u64);

/// The work book as written on a graceful stop.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkSnapshot {
    version: u32,
    site: String,
    /// Fingerprint of the table keys (the site secret).
    keys: u64,
    written_ms: u64,
    /// Since when the book that wrote it knew every piece of work.
    known_since_ms: u64,
    /// When a table was last full: calls, registrations, subscriptions.
    full_ms: [Option<u64>; 3],
    instances: Vec<String>,
    calls: Vec<SavedDialog>,
    subscriptions: Vec<SavedDialog>,
    registrations: Vec<SavedBinding>,
    holds: Vec<u64>,
}

impl WorkSnapshot {
    /// Reads the snapshot at `path` and deletes it, so it is used at most
    /// once. `Ok(None)` when there is none.
    pub fn take(path: &Path) -> Result<Option<WorkSnapshot>, SnapshotError> {
        let io = |source| SnapshotError::Io {
            path: path.to_owned(),
            source,
        };
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(e)),
        };
        // Gone before it is trusted: if the delete fails, it is not used.
        std::fs::remove_file(path).map_err(io)?;
        serde_json::from_slice(&text)
            .map(Some)
            .map_err(|source| SnapshotError::Format {
                path: path.to_owned(),
                source,
            })
    }

    /// Writes it to `path` atomically (temporary file, fsync, rename, fsync
    /// of the directory).
    pub fn save(&self, path: &Path) -> Result<(), SnapshotError> {
        let io = |source| SnapshotError::Io {
            path: path.to_owned(),
            source,
        };
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let mut tmp = tempfile_in(dir, path).map_err(io)?;
        let text = serde_json::to_vec(self).map_err(|source| SnapshotError::Format {
            path: path.to_owned(),
            source,
        })?;
        tmp.1.write_all(&text).map_err(io)?;
        tmp.1.sync_all().map_err(io)?;
        std::fs::rename(&tmp.0, path).map_err(io)?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io)
    }

    /// How many calls, registrations and subscriptions it holds.
    pub fn sizes(&self) -> (usize, usize, usize) {
        (
            self.calls.len(),
            self.registrations.len(),
            self.subscriptions.len(),
        )
    }
}

/// A new file next to `path` (`<name>.tmp`), truncated.
fn tempfile_in(dir: &Path, path: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    let tmp = dir.join(name);
    let f = std::fs::File::create(&tmp)?;
    Ok((tmp, f))
}

impl WorkBook {
    /// The book as it stands at `now`, live entries only.
    pub(crate) fn snapshot(&self, now: Instant) -> WorkSnapshot {
        let saved = |k, d: &Dialog| {
            SavedDialog(k, d.instance, d.since_ms, d.seen_ms, d.until_ms, d.learned)
        };
        let mut calls = Vec::new();
        self.calls.for_each_live(|k, d| calls.push(saved(k, d)));
        let mut subscriptions = Vec::new();
        self.subs
            .for_each_live(|k, d| subscriptions.push(saved(k, d)));
        let mut registrations = Vec::new();
        self.regs.for_each(|aor, b| {
            registrations.push(SavedBinding(aor, b.contact, b.instance, b.expires_ms()));
        });
        WorkSnapshot {
            version: VERSION,
            site: self.site.clone(),
            keys: self.hashes.fingerprint(),
            written_ms: self.clock.ms(now),
            known_since_ms: self.known_since_ms.load(Ordering::Relaxed),
            full_ms: [
                self.calls.tally().full_at_ms(),
                self.regs.tally().full_at_ms(),
                self.subs.tally().full_at_ms(),
            ],
            instances: self.ids.load().as_ref().clone(),
            calls,
            subscriptions,
            registrations,
            holds: self.holds.counts(),
        }
    }

    /// Takes a snapshot's work into this book (entries it already has stay
    /// as they are: they are newer) and its knowledge: from then on the
    /// book knows the work set up since the snapshot's book did. Entries of
    /// instances no longer configured are dropped, expired ones too.
    pub(crate) fn restore(&self, s: &WorkSnapshot, now: Instant) -> Result<(), SnapshotError> {
        let now_ms = self.clock.ms(now);
        self.check(s, now_ms)?;
        let ids = self.ids.load();
        let map: Vec<Option<usize>> = s
            .instances
            .iter()
            .map(|id| ids.iter().position(|x| x == id))
            .collect();
        let inst = |i: u32| map.get(i as usize).copied().flatten();
        for SavedDialog(k, i, since, seen, until, learned) in &s.calls {
            if let Some(i) = inst(*i) {
                let d = Dialog {
                    seen_ms: *seen,
                    until_ms: *until,
                    ..Dialog::new(i, *since, 0, *learned)
                };
                self.calls.add(*k, d);
            }
        }
        for SavedDialog(k, i, since, seen, until, learned) in &s.subscriptions {
            if let (Some(i), true) = (inst(*i), *until > now_ms) {
                let d = Dialog {
                    seen_ms: *seen,
                    ..Dialog::new(i, *since, *until, *learned)
                };
                self.subs.add(*k, d);
            }
        }
        for SavedBinding(aor, contact, i, expires) in &s.registrations {
            if let (Some(i), true) = (inst(*i), *expires > now_ms) {
                let b = Binding::new(*contact, u32::try_from(i).unwrap_or(u32::MAX), *expires);
                self.regs.restore(*aor, b);
            }
        }
        self.holds.restore(&s.holds);
        let [calls, regs, subs] = s.full_ms;
        if let Some(t) = calls {
            self.calls.tally().note_full(t);
        }
        if let Some(t) = regs {
            self.regs.tally().note_full(t);
        }
        if let Some(t) = subs {
            self.subs.tally().note_full(t);
        }
        self.known_since_ms
            .fetch_min(s.known_since_ms, Ordering::Relaxed);
        self.restored.store(true, Ordering::Relaxed);
        self.sweep(now);
        Ok(())
    }

    fn check(&self, s: &WorkSnapshot, now_ms: u64) -> Result<(), SnapshotError> {
        let bad = |why: String| Err(SnapshotError::Mismatch(why));
        if s.version != VERSION {
            return bad(format!("version {} (this gate reads {VERSION})", s.version));
        }
        if s.site != self.site {
            return bad(format!("it is of site `{}`, not `{}`", s.site, self.site));
        }
        if s.keys != self.hashes.fingerprint() {
            return bad("it was written under another site secret".into());
        }
        if s.written_ms > now_ms.saturating_add(SKEW_MS) {
            return bad(format!(
                "it was written at {}, after now ({})",
                ringsync::time::rfc3339(s.written_ms),
                ringsync::time::rfc3339(now_ms)
            ));
        }
        if s.known_since_ms > s.written_ms {
            return bad("it claims knowledge from after it was written".into());
        }
        Ok(())
    }
}
