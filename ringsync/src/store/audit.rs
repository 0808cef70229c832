//! The audit trail: one record per change asked of the store, made or
//! refused (who, when, from where, what, the profile before and after, the
//! result), kept with the profiles and never rewritten.
//!
//! The embedded store keeps it in `<store file>.audit.jsonl`, one JSON
//! record a line, appended and fsynced under the store's lock before the
//! change it records is committed ([`super::EmbeddedStore`]). A record's
//! `seq` is the byte offset just past its line, so it grows with every
//! record and a page can start at any record without reading the ones
//! before it. A crash mid-append leaves a line without its newline: readers
//! skip it with a warning, and the next append first ends it, so a torn
//! record is never glued to the next one. The etcd store keeps one key per
//! record (see [`super::EtcdStore`]).

use crate::store::{BackendError, Refusal};
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Committed, Op, StoreError};
use crate::profile::Profile;

/// Records a page holds unless asked for fewer.
pub const DEFAULT_PAGE: usize = 100;
/// Most records one page holds.
pub const MAX_PAGE: usize = 1000;

/// One audited change, made or refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Its place in the log, set by the store when read: increasing, unique
    /// (a byte offset in the embedded file, the etcd revision of its key).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub seq: u64,
    /// When (Unix ms).
    pub at_ms: u64,
    /// Who: the token's name, `local:<user>` for the CLI on the store
    /// itself, `anonymous` when the API runs without tokens.
    pub who: String,
    /// The token's role, when a token was used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// From where: the peer address of an API call, `local` for the CLI.
    pub from: String,
    /// `create`, `update`, `delete`, `activate`, `deactivate`, or the
    /// method and path of a refused API call.
    pub action: String,
    /// The profile named, as the caller named it (the CLI by name, the
    /// API and the page by id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The profile's name and id as the store holds it, whichever of them
    /// the caller named: set when the store knew the profile (before or
    /// after the change). Absent in records written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<ProfileRef>,
    /// The revision the caller said the profile was at, if it named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub if_revision: Option<u64>,
    /// The result as an HTTP status: 200/201 done, 4xx refused, 503 failed.
    pub status: u16,
    /// Why it was refused or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The profile before the change, when it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Profile>,
    /// The profile after the change, unless deleted or refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Profile>,
    /// The profile set's revision after a change that was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
}

/// A profile as an audit record names it: both its name and its id, so
/// one profile reads the same whether the CLI (by name) or the page (by
/// id) changed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileRef {
    /// Its name when the change was made (after a rename, the new name).
    pub name: String,
    /// Its id.
    pub id: String,
}

impl From<&Profile> for ProfileRef {
    fn from(p: &Profile) -> ProfileRef {
        ProfileRef {
            name: p.name.clone(),
            id: p.id.clone(),
        }
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Who asks for a change, and from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// See [`AuditRecord::who`].
    pub who: String,
    /// See [`AuditRecord::role`].
    pub role: Option<String>,
    /// See [`AuditRecord::from`].
    pub from: String,
}

impl Actor {
    /// The operator running the CLI on the store itself: the OS user of
    /// the process (its real uid, named through the system's user database),
    /// never `$USER` or `$LOGNAME`, which anyone sets to anything (R-PR-4).
    pub fn local() -> Actor {
        let user = os_user();
        Actor {
            who: format!("local:{user}"),
            role: None,
            from: "local".into(),
        }
    }

    /// A record of `action` on `target` by this actor, result not yet known.
    pub fn record(&self, action: &str, target: Option<&str>) -> AuditRecord {
        AuditRecord {
            seq: 0,
            at_ms: crate::work::now_ms(),
            who: self.who.clone(),
            role: self.role.clone(),
            from: self.from.clone(),
            action: action.to_owned(),
            target: target.map(str::to_owned),
            profile: None,
            if_revision: None,
            status: 0,
            error: None,
            before: None,
            after: None,
            revision: None,
        }
    }

    /// A record of `op` by this actor, result not yet known.
    pub fn record_op(&self, op: &Op, expect: Option<u64>) -> AuditRecord {
        AuditRecord {
            if_revision: expect,
            ..self.record(op.action(), Some(op.target()))
        }
    }
}

/// The name of this process's real uid, or `uid<N>` when the user
/// database has no entry for it (a container's bare uid).
fn os_user() -> String {
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(u)) => u.name,
        _ => format!("uid{uid}"),
    }
}

impl AuditRecord {
    /// The record of a change that was made.
    pub fn done(mut self, c: &Committed, revision: u64) -> AuditRecord {
        self.status = if c.before.is_none() { 201 } else { 200 };
        self.before = c.before.clone();
        self.after = c.after().cloned();
        self.profile = self
            .after
            .as_ref()
            .or(self.before.as_ref())
            .map(ProfileRef::from);
        self.revision = Some(revision);
        self
    }

    /// The record of a change that was refused (or failed), with the
    /// profile as it was, if known.
    pub fn refused(mut self, e: &StoreError, before: Option<Profile>) -> AuditRecord {
        self.status = e.status_code();
        self.error = Some(e.to_string());
        self.profile = before.as_ref().map(ProfileRef::from);
        self.before = before;
        self
    }
}

/// Which records to read: those after `after` (a `seq`), at or after
/// `since_ms`, at most `limit` (default [`DEFAULT_PAGE`], at most
/// [`MAX_PAGE`]), oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only records with a larger `seq` (the `next` of the page before).
    #[serde(default)]
    pub after: Option<u64>,
    /// Only records made at or after this time (Unix ms).
    #[serde(default)]
    pub since_ms: Option<u64>,
    /// At most this many.
    #[serde(default)]
    pub limit: Option<usize>,
}

impl AuditQuery {
    /// The page size asked for, bounded.
    pub fn page(&self) -> usize {
        self.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE)
    }
}

/// One page of the audit log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditPage {
    /// The records, oldest first.
    pub records: Vec<AuditRecord>,
    /// When the page is full: the `after` that reads the next one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
    /// Parts of the log that are not records (a line torn by a crash), skipped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

/// Appends `rec` to the log file at `path` and fsyncs it; returns its seq.
/// The caller holds the store's lock. Blocking.
pub fn append(path: &Path, rec: &AuditRecord) -> Result<u64, StoreError> {
    let io = |source| {
        StoreError::Backend(BackendError::Io {
            path: path.to_owned(),
            source,
        })
    };
    let mut line = serde_json::to_vec(&AuditRecord {
        seq: 0,
        ..rec.clone()
    })
    .map_err(|e| StoreError::Backend(BackendError::Task(e.to_string())))?;
    line.push(b'\n');
    let created = !path.exists();
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .open(path)
        .map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let mut last = [0u8; 1];
    if len > 0 {
        file.read_exact_at(&mut last, len - 1).map_err(io)?;
        if last[0] != b'\n' {
            // A record torn by a crash: end it, so it stays one bad line
            // that readers skip instead of merging with this one.
            tracing::warn!(file = %path.display(), "audit log ends in a torn record; sealing it before appending");
            line.insert(0, b'\n');
        }
    }
    file.write_all(&line).map_err(io)?;
    file.sync_all().map_err(io)?;
    if created {
        crate::files::sync_dir(path).map_err(io)?;
    }
    Ok(len + line.len() as u64)
}

/// Reads a page of the log file at `path` (a missing file is an empty log).
/// Blocking.
pub fn read(path: &Path, q: &AuditQuery) -> Result<AuditPage, StoreError> {
    let mut page = AuditPage::default();
    read_into(path, 0, q.after.unwrap_or(0), q, &mut page)?;
    Ok(page)
}

/// Reads the records of the log file at `path` that follow byte `start`
/// into `page` until it is full (then `page.next` is set); `base` is the
/// seq of the file's first byte in the whole log (its earlier parts).
/// Blocking.
pub(crate) fn read_into(
    path: &Path,
    base: u64,
    start: u64,
    q: &AuditQuery,
    page: &mut AuditPage,
) -> Result<(), StoreError> {
    let io = |source| {
        StoreError::Backend(BackendError::Io {
            path: path.to_owned(),
            source,
        })
    };
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(e)),
    };
    if start > 0 && !at_boundary(&file, start).map_err(io)? {
        return Err(StoreError::Refused(Refusal::InvalidQuery(format!(
            "after={} is not the seq of a record in this audit log",
            base + start
        ))));
    }
    file.seek(SeekFrom::Start(start)).map_err(io)?;
    let mut reader = BufReader::new(file);
    let mut offset = start;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(io)?;
        if n == 0 {
            break;
        }
        let from = offset;
        offset += n as u64;
        if line.last() != Some(&b'\n') {
            skip(page, path, format!("bytes {from}..{offset}: the last record is torn (a crash while it was written); skipped"));
            break;
        }
        match serde_json::from_slice::<AuditRecord>(&line) {
            Ok(mut rec) => {
                rec.seq = base + offset;
                if q.since_ms.is_some_and(|s| rec.at_ms < s) {
                    continue;
                }
                page.records.push(rec);
                if page.records.len() == q.page() {
                    page.next = Some(base + offset);
                    break;
                }
            }
            Err(e) => skip(
                page,
                path,
                format!("bytes {from}..{offset}: not a record ({e}); skipped"),
            ),
        }
    }
    Ok(())
}

/// The last whole record of the log file at `path`, if any (a torn tail
/// is not a record). Reads the whole file: for crash recovery only. Blocking.
pub fn last_record(path: &Path) -> Result<Option<AuditRecord>, StoreError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(StoreError::Backend(BackendError::Io {
                path: path.to_owned(),
                source,
            }))
        }
    };
    let whole = match bytes.iter().rposition(|b| *b == b'\n') {
        Some(end) => &bytes[..end],
        None => return Ok(None),
    };
    let line = whole.rsplit(|b| *b == b'\n').next().unwrap_or_default();
    Ok(serde_json::from_slice(line).ok())
}

pub(crate) fn skip(page: &mut AuditPage, path: &Path, what: String) {
    tracing::warn!(file = %path.display(), "audit log: {what}");
    // Torn or unreadable audit lines skipped by readers in this process.
    metrics::counter!("ringsync_audit_skipped_total").increment(1);
    page.skipped.push(what);
}

/// True if `offset` is just past a newline (or past the end of a sealed file).
fn at_boundary(file: &File, offset: u64) -> io::Result<bool> {
    let len = file.metadata()?.len();
    if offset > len {
        return Ok(false);
    }
    let mut b = [0u8; 1];
    let mut f = file;
    f.seek(SeekFrom::Start(offset - 1))?;
    f.read_exact(&mut b)?;
    Ok(b[0] == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(n: u64) -> AuditRecord {
        AuditRecord {
            status: 200,
            at_ms: 1000 + n,
            ..Actor::local().record("activate", Some("maint-a"))
        }
    }

    /// Issue 38: a record written before `profile` existed still reads
    /// (no profile, its target as it was).
    #[test]
    fn a_record_without_profile_still_reads() {
        let line = r#"{"at_ms":5,"who":"local:op","from":"local","action":"activate","target":"maint-a","status":200}"#;
        let r: AuditRecord = serde_json::from_str(line).unwrap();
        assert_eq!((r.target.as_deref(), r.profile), (Some("maint-a"), None));
    }

    #[test]
    fn append_read_page_and_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.audit.jsonl");
        let seqs: Vec<u64> = (0..5).map(|n| append(&path, &rec(n)).unwrap()).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]));
        let all = read(&path, &AuditQuery::default()).unwrap();
        assert_eq!(all.records.iter().map(|r| r.seq).collect::<Vec<_>>(), seqs);
        let q = AuditQuery {
            limit: Some(2),
            ..Default::default()
        };
        let p1 = read(&path, &q).unwrap();
        assert_eq!((p1.records.len(), p1.next), (2, Some(seqs[1])));
        let p2 = read(
            &path,
            &AuditQuery {
                after: p1.next,
                ..q.clone()
            },
        )
        .unwrap();
        assert_eq!(p2.records[0].at_ms, 1002);
        let since = AuditQuery {
            since_ms: Some(1003),
            ..Default::default()
        };
        assert_eq!(read(&path, &since).unwrap().records.len(), 2);
        let bad = AuditQuery {
            after: Some(seqs[0] - 3),
            ..Default::default()
        };
        assert!(matches!(
            read(&path, &bad),
            Err(StoreError::Refused(Refusal::InvalidQuery(_)))
        ));

        // A crash mid-append: half a line at the end.
        let full = serde_json::to_vec(&rec(9)).unwrap();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&full[..full.len() / 2]).unwrap();
        let torn = read(&path, &AuditQuery::default()).unwrap();
        assert_eq!((torn.records.len(), torn.skipped.len()), (5, 1), "{torn:?}");
        // The next append seals it: it stays one skipped line, never merged.
        append(&path, &rec(6)).unwrap();
        let after = read(&path, &AuditQuery::default()).unwrap();
        let times: Vec<u64> = after.records.iter().map(|r| r.at_ms).collect();
        assert_eq!(times, [1000, 1001, 1002, 1003, 1004, 1006]);
        assert_eq!(after.skipped.len(), 1, "{:?}", after.skipped);
    }
}
