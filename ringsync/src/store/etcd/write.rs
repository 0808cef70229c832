//! Writes: compare-and-swap on the profile document's mod revision
//! (R-PR-4; see the parent module for why and how conflicts are decided).

use std::time::Duration;

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};

use super::{Doc, EtcdStore, Inner, MAX_ATTEMPTS};
use crate::profile::{Profile, ProfileSet};
use crate::store::{Change, Imported, StoreError};

impl EtcdStore {
    pub(super) async fn import_once(
        &self,
        set: ProfileSet,
        overwrite: bool,
    ) -> Result<Imported, StoreError> {
        let src = crate::store::checked_import(&self.inner.config, set)?;
        let cur = self.inner.read_retrying().await?;
        let (next, imported) = crate::store::merge_import(&cur.set, &src, overwrite)?;
        let Some(next) = next else {
            return Ok(imported);
        };
        match self.inner.swap(cur.mod_revision, &next).await? {
            Swap::Done { mod_revision } => {
                self.inner.apply(next, mod_revision);
                Ok(imported)
            }
            Swap::Lost(fresh) if fresh.set == next => Ok(imported),
            Swap::Lost(_) => Err(StoreError::Conflict {
                id: "(profile set)".into(),
                detail: "the target changed during the import".into(),
            }),
        }
    }
}

impl Inner {
    /// The compare-and-swap write loop (see the module docs).
    pub(super) async fn write(
        &self,
        make: &(impl Fn(&ProfileSet) -> Change + Sync),
    ) -> Result<Profile, StoreError> {
        let mut base = self.read_retrying().await?;
        for _ in 0..MAX_ATTEMPTS {
            let change = make(&base.set);
            let target = change.target(&base.set);
            let mut next = base.set.clone();
            let profile = change.apply(&self.config, &mut next)?;
            next.revision += 1;
            let fresh = match self.swap(base.mod_revision, &next).await? {
                Swap::Done { mod_revision } => {
                    self.apply(next, mod_revision);
                    return Ok(profile);
                }
                Swap::Lost(fresh) => fresh,
            };
            // Our own earlier attempt (cut off before its answer) or an
            // identical change: the outcome holds, once.
            if fresh.set == next {
                self.apply(fresh.set, fresh.mod_revision);
                return Ok(profile);
            }
            if let Some(id) = target {
                if fresh.set.find(&id) != base.set.find(&id) {
                    self.apply(fresh.set, fresh.mod_revision);
                    return Err(StoreError::Conflict {
                        id,
                        detail: "another writer changed this profile at the same time".into(),
                    });
                }
            }
            base = fresh;
        }
        Err(StoreError::Conflict {
            id: "(profile set)".into(),
            detail: format!("the profile set changed under {MAX_ATTEMPTS} attempts in a row"),
        })
    }

    /// Writes `next` if the document is still at `expect`. Transport
    /// failures are retried: the compare makes a repeat harmless.
    async fn swap(&self, expect: u64, next: &ProfileSet) -> Result<Swap, StoreError> {
        let key = self.keys.profiles.as_str();
        let mut bytes = serde_json::to_vec(next).map_err(|e| StoreError::Task(e.to_string()))?;
        bytes.push(b'\n');
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, expect as i64)])
            .and_then([TxnOp::put(key, bytes, None)])
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
