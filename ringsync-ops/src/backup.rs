//! `ringsync backup` / `ringsync restore`: a site's profiles, handover
//! records and audit log in one file, from and to either store kind.
//!
//! The file is two parts: a header line (JSON: `format`, `version`, `site`,
//! `created_ms`, `sha256`) and the body (JSON: `profiles`, `handover`,
//! `audit`). The checksum is over the header's other fields and the body's
//! bytes as written, so a file changed or cut anywhere is refused before
//! anything is taken from it.
//!
//! A restore checks everything before it writes anything: the header, the
//! checksum, the site name (another site's backup only with `force`), every
//! profile as a create would (R-PR-1), and the right to write the handover
//! records (no planner may be running). Then it writes, in this order: the
//! audit records the target does not hold yet (the backup's log, kept as
//! it was), the profiles (one `import` record each, R-PR-4), the handover
//! records, and last its own `restore` record. A restore cut off part way
//! leaves a store a second run completes: each step writes only what is
//! missing.

use std::collections::HashSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use ringsync::config::SiteConfig;
use ringsync::handover::record::HandoverState;
use ringsync::profile::ProfileSet;
pub use ringsync::store::Imported;
use ringsync::store::{self, Actor, AuditQuery, AuditRecord, Campaign, Store, StoreError};

/// The `format` of a backup file's header.
pub const FORMAT: &str = "ringsync-backup";
/// The body layout this build writes and reads.
pub const VERSION: u32 = 1;

/// A backup file's first line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Always [`FORMAT`].
    pub format: String,
    /// The body layout ([`VERSION`]).
    pub version: u32,
    /// The site it was taken of.
    pub site: String,
    /// When (Unix ms).
    pub created_ms: u64,
    /// SHA-256 of the other fields and the body's bytes, hex.
    pub sha256: String,
}

/// What a backup holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Body {
    /// Every profile, with ids, states and revisions.
    pub profiles: ProfileSet,
    /// The Active-Passive handover records, where the store keeps them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handover: Option<HandoverState>,
    /// The whole audit log, oldest first.
    pub audit: Vec<AuditRecord>,
}

/// Why a backup or a restore failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The file is not a backup this build can read, or it was changed.
    #[error("{file}: {detail}; nothing was restored")]
    Corrupt {
        /// The file, as named.
        file: String,
        /// What is wrong.
        detail: String,
    },
    /// The backup is of another site.
    #[error(
        "{file} is a backup of site `{theirs}`, not `{ours}`; nothing was restored \
         (pass --force to restore it here anyway)"
    )]
    OtherSite {
        /// The file, as named.
        file: String,
        /// Its site.
        theirs: String,
        /// This site.
        ours: String,
    },
    /// The backup could not be encoded.
    #[error("cannot encode the backup: {0}")]
    Encode(#[source] serde_json::Error),
    /// The handover records cannot be written now.
    #[error("the handover records cannot be restored: {0}; nothing was restored")]
    Planner(String),
}

/// Takes a backup of `store`: the file's bytes.
pub async fn take(config: &SiteConfig, store: &dyn Store) -> Result<Vec<u8>, BackupError> {
    let profiles = (*store.list().await?).clone();
    let handover = match store.handover() {
        Some(h) => {
            let mut s = (*h.read().await?).clone();
            // Who plans now is not a record: it is elected again.
            s.acting = None;
            Some(s)
        }
        None => None,
    };
    let audit = whole_log(store).await?;
    let body = serde_json::to_vec(&Body {
        profiles,
        handover,
        audit,
    })
    .map_err(BackupError::Encode)?;
    let header = Header {
        format: FORMAT.into(),
        version: VERSION,
        site: config.site.name.clone(),
        created_ms: ringsync::work::now_ms(),
        sha256: String::new(),
    };
    let header = Header {
        sha256: checksum(&header, &body),
        ..header
    };
    let mut out = serde_json::to_vec(&header).unwrap_or_default();
    out.push(b'\n');
    out.extend_from_slice(&body);
    out.push(b'\n');
    Ok(out)
}

/// Every record of the log, page by page.
async fn whole_log(store: &dyn Store) -> Result<Vec<AuditRecord>, StoreError> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .audit_log(AuditQuery {
                after,
                since_ms: None,
                limit: Some(1000),
            })
            .await?;
        all.extend(page.records);
        match page.next {
            Some(n) => after = Some(n),
            None => return Ok(all),
        }
    }
}

/// SHA-256 over the header's fields and the body: a site name or a date
/// edited in the header is caught as surely as a changed body.
fn checksum(h: &Header, body: &[u8]) -> String {
    let mut d = Sha256::new();
    let head = format!(
        "{}\n{}\n{}\n{}\n",
        h.format, h.version, h.site, h.created_ms
    );
    d.update(head.as_bytes());
    d.update(body);
    hex(&d.finalize())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads a backup file's bytes: the header and the body, checked.
pub fn read(file: &str, bytes: &[u8]) -> Result<(Header, Body), BackupError> {
    let corrupt = |detail: String| BackupError::Corrupt {
        file: file.to_owned(),
        detail,
    };
    let nl = bytes
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| corrupt("no header line: not a ringsync backup".into()))?;
    let header: Header = serde_json::from_slice(&bytes[..nl])
        .map_err(|e| corrupt(format!("the header is not a ringsync backup header: {e}")))?;
    if header.format != FORMAT {
        return Err(corrupt(format!(
            "format `{}`, not `{FORMAT}`",
            header.format
        )));
    }
    if header.version != VERSION {
        return Err(corrupt(format!(
            "backup format version {}; this ringsync reads version {VERSION}",
            header.version
        )));
    }
    let body = bytes[nl + 1..]
        .strip_suffix(b"\n")
        .unwrap_or(&bytes[nl + 1..]);
    let sum = checksum(&header, body);
    if sum != header.sha256 {
        return Err(corrupt(format!(
            "checksum mismatch (the header says {}, the body is {sum}): the file was changed or cut",
            header.sha256
        )));
    }
    let body: Body = serde_json::from_slice(body)
        .map_err(|e| corrupt(format!("the body does not parse: {e}")))?;
    Ok((header, body))
}

/// What a restore did.
#[derive(Debug, Clone)]
pub struct Restored {
    /// The site the backup was taken of.
    pub site: String,
    /// What the profile import did.
    pub profiles: Imported,
    /// Audit records appended (those the target did not hold).
    pub audit_added: usize,
    /// Handover groups written (desired and confirmed leaders).
    pub handover_groups: usize,
    /// The profile set's revision after it.
    pub revision: u64,
}

/// Restores the backup in `bytes` (named `file` in messages) into `store`;
/// audited (R-PR-4): a `restore` record once done, or the refusal and why.
pub async fn restore(
    config: &Arc<SiteConfig>,
    store: &dyn Store,
    file: &str,
    bytes: &[u8],
    force: bool,
    by: Actor,
) -> Result<Restored, BackupError> {
    let r = apply(config, store, file, bytes, force, &by).await;
    let mut rec = by.record("restore", Some(file));
    match &r {
        Ok(done) => {
            rec.status = 200;
            rec.revision = Some(done.revision);
        }
        Err(e) => {
            rec.status = match e {
                BackupError::Store(e) => e.status_code(),
                BackupError::OtherSite { .. } | BackupError::Planner(_) => 409,
                BackupError::Corrupt { .. } | BackupError::Encode(_) => 400,
            };
            rec.error = Some(e.to_string());
        }
    }
    match store.append_audit(rec).await {
        // The restore's outcome stands whether or not its record could be
        // written; a store that fails here failed the restore already.
        Err(e) if r.is_ok() => Err(e.into()),
        _ => r,
    }
}

async fn apply(
    config: &Arc<SiteConfig>,
    store: &dyn Store,
    file: &str,
    bytes: &[u8],
    force: bool,
    by: &Actor,
) -> Result<Restored, BackupError> {
    let (header, body) = read(file, bytes)?;
    if header.site != config.site.name && !force {
        return Err(BackupError::OtherSite {
            file: file.to_owned(),
            theirs: header.site,
            ours: config.site.name.clone(),
        });
    }
    // Checked before anything is written: every profile as a create would.
    store::checked_import(config, body.profiles.clone())?;
    let lead = match (&body.handover, store.handover()) {
        (Some(state), Some(h)) if has_records(state) => {
            match h.campaign("ringsync-restore").await? {
                Campaign::Elected(lead) => Some((h, lead)),
                Campaign::Held { by } => {
                    return Err(BackupError::Planner(format!(
                        "node {} plans the handover now; stop `ringsync serve` on the site's nodes first",
                        by.as_deref().unwrap_or("(unnamed)")
                    )))
                }
            }
        }
        _ => None,
    };
    let audit_added = append_missing(store, &body.audit).await?;
    let profiles = store.import(body.profiles, true, by.clone()).await?;
    let mut handover_groups = 0;
    if let (Some((h, lead)), Some(state)) = (lead, &body.handover) {
        for (group, desired) in &state.desired {
            h.publish(&lead, group, desired.clone(), state.planner.clone())
                .await?;
            handover_groups += 1;
        }
        for (group, confirmed) in &state.confirmed {
            h.confirm(group, confirmed.clone()).await?;
        }
        lead.resign().await;
    }
    Ok(Restored {
        site: header.site,
        profiles,
        audit_added,
        handover_groups,
        revision: store.list().await?.revision,
    })
}

fn has_records(s: &HandoverState) -> bool {
    !s.desired.is_empty() || !s.confirmed.is_empty()
}

/// Appends the backup's records the store's log does not hold yet (told
/// apart by when, who, what and the result, not by `seq`, which each store
/// assigns), oldest first.
async fn append_missing(store: &dyn Store, audit: &[AuditRecord]) -> Result<usize, StoreError> {
    let key = |r: &AuditRecord| {
        let mut r = r.clone();
        r.seq = 0;
        serde_json::to_string(&r).unwrap_or_default()
    };
    let held: HashSet<String> = whole_log(store).await?.iter().map(key).collect();
    let mut added = 0;
    for rec in audit {
        if !held.contains(&key(rec)) {
            let mut rec = rec.clone();
            rec.seq = 0;
            store.append_audit(rec).await?;
            added += 1;
        }
    }
    Ok(added)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringsync::handover::record::{Confirmed, Desired, MoveKind, PlannerRecord};
    use ringsync::store::EmbeddedStore;
    use std::path::Path;

    const SITE: &str =
        "[site]\nname = \"b\"\n[[server]]\nname = \"s1\"\n[[server]]\nname = \"s2\"\n\
        [[instance]]\nid = \"ap-1\"\nservice = \"db\"\nserver = \"s1\"\n\
        [[instance]]\nid = \"ap-2\"\nservice = \"db\"\nserver = \"s2\"\n\
        [[ap_group]]\nname = \"g\"\nmembers = [\"ap-1\", \"ap-2\"]\nhome = \"ap-1\"\n";

    async fn store(dir: &Path) -> (Arc<SiteConfig>, EmbeddedStore) {
        let site = dir.join("site.toml");
        let config = Arc::new(SiteConfig::from_str_at(SITE, &site).unwrap());
        let store = EmbeddedStore::open_at(config.clone(), dir.join("p.json"));
        (config, store.await.unwrap())
    }

    fn desired() -> Desired {
        Desired {
            leader: "ap-2".into(),
            from: "ap-1".into(),
            kind: MoveKind::Handover,
            seq: 1,
            attempt: 1,
            at_ms: 1000,
            step: 1,
            steps: 1,
            reason: "s1 drains".into(),
            planner: "n1".into(),
        }
    }

    /// The handover records go with the backup and come back on restore;
    /// a restore while a planner holds the election writes nothing at all.
    #[tokio::test]
    async fn handover_records_are_restored_and_a_running_planner_refuses_it_all() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (config, src) = store(a.path()).await;
        let h = src.handover().unwrap();
        let Campaign::Elected(lead) = h.campaign("n1").await.unwrap() else {
            panic!("the only planner is elected")
        };
        let planner = PlannerRecord {
            node: "n1".into(),
            last_move_ms: Some(1000),
            seq: 1,
            done: 1,
            remaining: 0,
        };
        h.publish(&lead, "g", desired(), planner).await.unwrap();
        lead.resign().await;
        let confirmed = Confirmed {
            leader: "ap-2".into(),
            seq: 1,
            at_ms: 1100,
        };
        h.confirm("g", confirmed.clone()).await.unwrap();
        let bytes = take(&config, &src).await.unwrap();

        let (config, dst) = store(b.path()).await;
        // A planner runs on the target: refused, nothing written but the
        // refusal's record.
        let other = dst.handover().unwrap();
        let Campaign::Elected(held) = other.campaign("n9").await.unwrap() else {
            panic!("elected")
        };
        let e = restore(&config, &dst, "f", &bytes, false, Actor::local())
            .await
            .unwrap_err();
        assert!(matches!(e, BackupError::Planner(_)), "{e}");
        assert!(other.read().await.unwrap().desired.is_empty());
        let log = whole_log(&dst).await.unwrap();
        assert_eq!((log.len(), log[0].status), (1, 409), "{log:?}");
        held.resign().await;

        let done = restore(&config, &dst, "f", &bytes, false, Actor::local())
            .await
            .unwrap();
        assert_eq!(done.handover_groups, 1);
        let got = other.read().await.unwrap();
        assert_eq!(got.desired.get("g"), Some(&desired()));
        assert_eq!(got.confirmed.get("g"), Some(&confirmed));
        assert_eq!(got.planner.last_move_ms, Some(1000));
    }
}
