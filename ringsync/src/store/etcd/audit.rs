//! The audit trail in etcd: one key per record under `P/audit/`, named by
//! its time and a random suffix (`P/audit/<unix ms, 13 digits>-<8 hex>`),
//! never rewritten. A change that is made writes its record in the same
//! transaction as the profile document (see [`super::write`]), so the two
//! cannot diverge; a refused change writes its record alone. A record's
//! `seq` is the etcd revision that created its key: the log's order, the
//! same on every node.

use crate::store::BackendError;
use etcd_client::{GetOptions, SortOrder, SortTarget};

use super::Inner;
use crate::store::audit::{AuditPage, AuditQuery, AuditRecord};
use crate::store::StoreError;

impl Inner {
    /// A fresh key for a record made at `at_ms`.
    pub(super) fn audit_key(&self, at_ms: u64) -> String {
        format!(
            "{}{at_ms:013}-{:08x}",
            self.keys.audit,
            rand::random::<u32>()
        )
    }

    /// Appends one record by itself; returns its seq.
    pub(super) async fn append_audit(&self, rec: &AuditRecord) -> Result<u64, StoreError> {
        let key = self.audit_key(rec.at_ms);
        let mut kv = self.client.kv_client();
        let resp = self
            .rpc(
                "writing an audit record",
                kv.put(key, audit_bytes(rec)?, None),
            )
            .await?;
        Ok(resp.header().map_or(0, |h| h.revision()).max(0) as u64)
    }

    /// A page of the log, oldest first.
    pub(super) async fn read_audit(&self, q: &AuditQuery) -> Result<AuditPage, StoreError> {
        let start = format!("{}{:013}", self.keys.audit, q.since_ms.unwrap_or(0));
        let mut options = GetOptions::new()
            .with_range(prefix_end(&self.keys.audit))
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(q.page() as i64);
        if let Some(after) = q.after {
            options = options.with_min_create_revision(after.saturating_add(1) as i64);
        }
        let mut kv = self.client.kv_client();
        let resp = self
            .rpc("reading the audit log", kv.get(start, Some(options)))
            .await?;
        let mut page = AuditPage::default();
        for kv in resp.kvs() {
            match serde_json::from_slice::<AuditRecord>(kv.value()) {
                Ok(mut rec) => {
                    rec.seq = kv.create_revision().max(0) as u64;
                    page.records.push(rec);
                }
                Err(e) => {
                    let what = format!(
                        "key {}: not a record ({e}); skipped",
                        String::from_utf8_lossy(kv.key())
                    );
                    tracing::warn!("audit log: {what}");
                    page.skipped.push(what);
                }
            }
        }
        if resp.more() {
            page.next = resp
                .kvs()
                .last()
                .map(|kv| kv.create_revision().max(0) as u64);
        }
        Ok(page)
    }
}

/// The stored value of a record (its seq is the key's create revision).
pub(super) fn audit_bytes(rec: &AuditRecord) -> Result<Vec<u8>, StoreError> {
    let rec = AuditRecord {
        seq: 0,
        ..rec.clone()
    };
    serde_json::to_vec(&rec).map_err(|e| StoreError::Backend(BackendError::Task(e.to_string())))
}

/// The end of the key range of everything under `prefix`.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    // The prefix ends in '/', never 0xff: bumping its last byte is enough.
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}
