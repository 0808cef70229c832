//! Writes: compare-and-swap on the profile document's mod revision
//! (R-PR-4; see the parent module for why and how conflicts are decided),
//! each with its audit record in the same transaction.

use crate::store::{BackendError, Refusal};
use std::time::Duration;

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};

use super::audit::audit_bytes;
use super::{Doc, EtcdStore, Inner, MAX_ATTEMPTS};
use crate::profile::ProfileSet;
use crate::store::{Actor, Imported, StoreError, WriteRequest, Written};

impl EtcdStore {
    /// One import attempt (see [`crate::store::Store::import`]): the new
    /// document and its audit records in one transaction. etcd bounds a
    /// transaction's operations (`--max-txn-ops`, 128 by default), so an
    /// import that makes more than 127 records is refused by etcd as a
    /// whole, and nothing is written.
    pub(super) async fn import_once(
        &self,
        set: ProfileSet,
        overwrite: bool,
        by: &Actor,
    ) -> Result<Imported, StoreError> {
        let src = crate::store::checked_import(&self.inner.config, set)?;
        let cur = self.inner.read_retrying().await?;
        let (next, imported) = crate::store::merge_import(&cur.set, &src, overwrite)?;
        let Some(next) = next else {
            return Ok(imported);
        };
        let mut audit = Vec::new();
        for rec in crate::store::import_audit(by, &cur.set, &next) {
            audit.push((self.inner.audit_key(rec.at_ms), audit_bytes(&rec)?));
        }
        match self.inner.swap(cur.mod_revision, &next, audit).await? {
            Swap::Done { mod_revision } => {
                self.inner.apply(next, mod_revision);
                Ok(imported)
            }
            Swap::Lost(fresh) if fresh.set == next => Ok(imported),
            Swap::Lost(_) => Err(StoreError::Refused(Refusal::Conflict {
                id: "(profile set)".into(),
                detail: "the target changed during the import".into(),
            })),
        }
    }
}

impl Inner {
    /// The compare-and-swap write loop (see the module docs), the audit
    /// record of a change that is made in the same transaction as it.
    pub(super) async fn write(&self, w: &WriteRequest) -> Result<Written, StoreError> {
        // One key for every attempt: a retry of a write that was in fact
        // applied finds the document already changed and writes nothing.
        let key = w.audit.as_ref().map(|r| self.audit_key(r.at_ms));
        let mut base = self.read_retrying().await?;
        for _ in 0..MAX_ATTEMPTS {
            let target = w.op.target_in(&base.set);
            let mut next = base.set.clone();
            let committed = match w.op.commit(&self.config, &mut next, w.expect) {
                Ok(c) => c,
                Err(e) => return Err(self.refuse(w, e, &base.set, target).await),
            };
            if !committed.changed {
                // Already as asked, in the document just read: nothing to
                // swap, no audit record (as on the embedded store).
                let revision = next.revision;
                return Ok(Written {
                    committed,
                    revision,
                });
            }
            let audit = match (&key, &w.audit) {
                (Some(k), Some(rec)) => {
                    let rec = rec.clone().done(&committed, next.revision);
                    vec![(k.clone(), audit_bytes(&rec)?)]
                }
                _ => Vec::new(),
            };
            let written = Written {
                committed,
                revision: next.revision,
            };
            let fresh = match self.swap(base.mod_revision, &next, audit).await? {
                Swap::Done { mod_revision } => {
                    self.apply(next, mod_revision);
                    return Ok(written);
                }
                Swap::Lost(fresh) => fresh,
            };
            // The very document this attempt meant to write: our own
            // earlier attempt, cut off before its answer (its audit record,
            // written in the same transaction, is there: the outcome holds,
            // once), or another writer's identical change, which is not
            // ours: judged again below on what is there now (a stale
            // revision is refused, none is a conflict), so no writer is
            // told a change was made that the audit log holds as another's.
            if fresh.set == next && self.ours(key.as_deref()).await? {
                self.apply(fresh.set, fresh.mod_revision);
                return Ok(written);
            }
            if let Some(id) = &target {
                // With a revision named, the next attempt says how it moved on.
                if fresh.set.find(id) != base.set.find(id) && w.expect.is_none() {
                    self.apply(fresh.set.clone(), fresh.mod_revision);
                    let e = StoreError::Refused(Refusal::Conflict {
                        id: id.clone(),
                        detail: "another writer changed this profile at the same time".into(),
                    });
                    return Err(self.refuse(w, e, &fresh.set, target).await);
                }
            }
            base = fresh;
        }
        let e = StoreError::Refused(Refusal::Conflict {
            id: "(profile set)".into(),
            detail: format!("the profile set changed under {MAX_ATTEMPTS} attempts in a row"),
        });
        let target = w.op.target_in(&base.set);
        Err(self.refuse(w, e, &base.set, target).await)
    }

    /// Whether this request's audit record is in etcd, i.e. one of its own
    /// attempts was written (`None`: an unaudited write, which cannot tell,
    /// is taken as its own, as a retry of itself).
    async fn ours(&self, key: Option<&str>) -> Result<bool, StoreError> {
        let Some(key) = key else {
            return Ok(true);
        };
        let mut kv = self.client.kv_client();
        let opts = etcd_client::GetOptions::new().with_count_only();
        let resp = self
            .rpc("reading the audit record", kv.get(key, Some(opts)))
            .await?;
        Ok(resp.count() > 0)
    }

    /// Records a refused change (when audited) and hands the error back; a
    /// failure to record is logged and the refusal stands.
    async fn refuse(
        &self,
        w: &WriteRequest,
        e: StoreError,
        set: &ProfileSet,
        target: Option<String>,
    ) -> StoreError {
        if let Some(rec) = &w.audit {
            let before = target.and_then(|id| set.find(&id).cloned());
            if let Err(ae) = self.append_audit(&rec.clone().refused(&e, before)).await {
                crate::store::count_error(&ae);
                tracing::error!(error = %ae, "cannot append a refused change to the audit log");
            }
        }
        e
    }

    /// Writes `next` if the document is still at `expect`. Transport
    /// failures are retried: the compare makes a repeat harmless.
    /// `audit`: record keys and values written in the same transaction.
    async fn swap(
        &self,
        expect: u64,
        next: &ProfileSet,
        audit: Vec<(String, Vec<u8>)>,
    ) -> Result<Swap, StoreError> {
        let key = self.keys.profiles.as_str();
        let mut bytes = serde_json::to_vec(next)
            .map_err(|e| StoreError::Backend(BackendError::Task(e.to_string())))?;
        bytes.push(b'\n');
        let mut puts = vec![TxnOp::put(key, bytes, None)];
        for (k, v) in audit {
            puts.push(TxnOp::put(k, v, None));
        }
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, expect as i64)])
            .and_then(puts)
            .or_else([TxnOp::get(key, None)]);
        let mut backoff = Duration::from_millis(50);
        let resp = loop {
            let mut kv = self.client.kv_client();
            match self.rpc("writing profiles", kv.txn(txn.clone())).await {
                Ok(r) => break r,
                Err(e) => {
                    tracing::warn!(error = %e, "profile write failed; retrying (compare-and-swap keeps it single)");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(800));
                }
            }
        };
        if resp.succeeded() {
            let rev = resp.header().map_or(0, |h| h.revision()).max(0) as u64;
            return Ok(Swap::Done { mod_revision: rev });
        }
        for r in resp.op_responses() {
            if let TxnOpResponse::Get(g) = r {
                return Ok(Swap::Lost(self.doc_of(&g)?));
            }
        }
        Err(self.unavailable("compare failed and etcd returned no current value"))
    }
}

pub(super) enum Swap {
    Done { mod_revision: u64 },
    Lost(Doc),
}
