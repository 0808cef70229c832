//! The embedded store's audit log in parts (`[audit]`, issue 27): the
//! current file `<store file>.audit.jsonl` rolls to a part once a record
//! would take it past `max_bytes`, and the oldest parts beyond `keep` are
//! removed, so the log is bounded while `ringsync audit` still reads every
//! kept record, oldest first, across the parts.
//!
//! A part is named after the seq of its first byte in the whole log
//! (`<log>.00000000000000012345`): a record's seq stays the byte offset just
//! past it in the log as if never cut, so seqs keep growing across a roll
//! and a page (`after=`) can start in any part. The current file starts
//! where the newest part ends. Rolling is a rename under the store's lock,
//! before the record is appended, so a record is never split between two
//! files and the newest record is always in the current file (crash
//! recovery reads it there: [`super::EmbeddedStore`]).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::audit::{self, AuditPage, AuditQuery, AuditRecord};
use super::{BackendError, StoreError};
use crate::config::AuditConfig;

/// One file of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Part {
    /// The seq of its first byte.
    base: u64,
    path: PathBuf,
    len: u64,
}

fn io_err(path: &Path) -> impl Fn(io::Error) -> StoreError + '_ {
    move |source| {
        StoreError::Backend(BackendError::Io {
            path: path.to_owned(),
            source,
        })
    }
}

/// The rolled parts of the log at `path`, oldest first, then the current
/// file (which may not exist yet: length 0).
fn parts(path: &Path) -> Result<Vec<Part>, StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let prefix = format!(
        "{}.",
        path.file_name().unwrap_or_default().to_string_lossy()
    );
    let mut out = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(current(path, 0)),
        Err(e) => return Err(io_err(dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io_err(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(base) = name
            .strip_prefix(&prefix)
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let len = entry.metadata().map_err(io_err(&entry.path()))?.len();
        out.push(Part {
            base,
            path: entry.path(),
            len,
        });
    }
    out.sort_by_key(|p| p.base);
    let base = out.last().map_or(0, |p| p.base + p.len);
    out.extend(current(path, base));
    Ok(out)
}

fn current(path: &Path, base: u64) -> Vec<Part> {
    let len = fs::metadata(path).map_or(0, |m| m.len());
    vec![Part {
        base,
        path: path.to_owned(),
        len,
    }]
}

fn part_path(path: &Path, base: u64) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(format!(".{base:020}"));
    PathBuf::from(p)
}

/// Appends `rec`, rolling the current file first when the record would
/// take it past `cfg.max_bytes`; returns its seq. The caller holds the
/// store's lock. Blocking.
pub(crate) fn append(path: &Path, rec: &AuditRecord, cfg: &AuditConfig) -> Result<u64, StoreError> {
    let all = parts(path)?;
    let cur = all.last().cloned().unwrap_or(Part {
        base: 0,
        path: path.to_owned(),
        len: 0,
    });
    let mut base = cur.base;
    if cfg.max_bytes > 0 && cur.len > 0 {
        let size = serde_json::to_vec(rec).map_or(0, |v| v.len() as u64 + 1);
        if cur.len + size > cfg.max_bytes {
            fs::rename(path, part_path(path, cur.base)).map_err(io_err(path))?;
            crate::files::sync_dir(path).map_err(io_err(path))?;
            base = cur.base + cur.len;
            // The parts now: the ones before, and the one just rolled.
            let rolled = all.len();
            for old in all.iter().take(rolled.saturating_sub(cfg.keep)) {
                fs::remove_file(&old.path).map_err(io_err(&old.path))?;
                tracing::info!(part = %old.path.display(), "audit log part removed ([audit] keep)");
            }
        }
    }
    Ok(base + audit::append(path, rec)?)
}

/// Reads a page of the whole log at `path`, across its parts. A page that
/// starts before the oldest part kept says so in `skipped`. Blocking.
pub(crate) fn read(path: &Path, q: &AuditQuery) -> Result<AuditPage, StoreError> {
    let all = parts(path)?;
    let after = q.after.unwrap_or(0);
    let mut page = AuditPage::default();
    let first = all.first().map_or(0, |p| p.base);
    if after < first {
        audit::skip(
            &mut page,
            path,
            format!("records up to seq {first} were removed by the log's rotation ([audit] keep)"),
        );
    }
    if all.last().is_some_and(|p| after > p.base + p.len) {
        return Err(StoreError::Refused(super::Refusal::InvalidQuery(format!(
            "after={after} is not the seq of a record in this audit log"
        ))));
    }
    for part in &all {
        let end = part.base + part.len;
        if end <= after && part.len > 0 {
            continue;
        }
        let start = after.saturating_sub(part.base);
        audit::read_into(&part.path, part.base, start, q, &mut page)?;
        if page.next.is_some() {
            break;
        }
    }
    Ok(page)
}

/// The last whole record of the log: in the current file, or the newest
/// part when the current one is still empty. Blocking.
pub(crate) fn last_record(path: &Path) -> Result<Option<AuditRecord>, StoreError> {
    if let Some(rec) = audit::last_record(path)? {
        return Ok(Some(rec));
    }
    let all = parts(path)?;
    match all.len().checked_sub(2).and_then(|i| all.get(i)) {
        Some(newest) => audit::last_record(&newest.path),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Actor;

    fn rec(n: u64) -> AuditRecord {
        AuditRecord {
            status: 200,
            at_ms: 1000 + n,
            ..Actor::local().record("activate", Some("maint-a"))
        }
    }

    #[test]
    fn rolls_keeps_a_bounded_number_of_parts_and_reads_across_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json.audit.jsonl");
        let size = serde_json::to_vec(&rec(0)).unwrap().len() as u64 + 1;
        // Three records a file.
        let cfg = AuditConfig {
            max_bytes: size * 3,
            keep: 2,
        };
        let seqs: Vec<u64> = (0..10)
            .map(|n| append(&path, &rec(n), &cfg).unwrap())
            .collect();
        assert_eq!(
            seqs,
            (1..=10).map(|n| n * size).collect::<Vec<_>>(),
            "seqs as if never cut"
        );
        let all = parts(&path).unwrap();
        // 10 records: parts of 3, 3, 3 and the current file of 1; the
        // oldest part removed (keep 2).
        assert_eq!(
            all.iter().map(|p| p.len / size).collect::<Vec<_>>(),
            [3, 3, 1]
        );
        let page = read(&path, &AuditQuery::default()).unwrap();
        let times: Vec<u64> = page.records.iter().map(|r| r.at_ms).collect();
        assert_eq!(
            times,
            (1003..1010).collect::<Vec<_>>(),
            "oldest first, across parts"
        );
        assert_eq!(page.skipped.len(), 1, "says what rotation removed");
        // Pages of two, walked by `next`, cross the parts' edges.
        let mut after = Some(seqs[2]);
        let mut walked = Vec::new();
        while let Some(a) = after {
            let q = AuditQuery {
                after: Some(a),
                limit: Some(2),
                ..Default::default()
            };
            let p = read(&path, &q).unwrap();
            walked.extend(p.records.iter().map(|r| r.at_ms));
            after = p.next;
        }
        assert_eq!(walked, (1003..1010).collect::<Vec<_>>());
        assert_eq!(last_record(&path).unwrap().map(|r| r.at_ms), Some(1009));
        let bad = AuditQuery {
            after: Some(seqs[9] + 1),
            ..Default::default()
        };
        assert!(read(&path, &bad).is_err());
    }
}
