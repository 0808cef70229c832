//! `[audit]`: how big the embedded store's audit log grows before it rolls
//! to a numbered part, and how many parts are kept (issue 27: the log
//! "only grows" otherwise). etcd keeps one key per record and is not
//! rotated here (compact it as etcd's own docs say).

use serde::{Deserialize, Serialize};

use super::validator::Validator;
use super::ConfigError;

/// The audit log's rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// The current file rolls to a part once a record would take it past
    /// this many bytes; `0` never rolls. Default 64 MiB.
    pub max_bytes: u64,
    /// Parts kept besides the current file; the oldest beyond this is
    /// removed when another rolls. Default 8.
    pub keep: usize,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            max_bytes: 64 << 20,
            keep: 8,
        }
    }
}

/// The smallest `max_bytes` other than 0: a few records a part.
pub const MIN_AUDIT_BYTES: u64 = 1024;

impl AuditConfig {
    pub(super) fn checked(self, v: &Validator<'_>) -> Result<AuditConfig, ConfigError> {
        if self.max_bytes != 0 && self.max_bytes < MIN_AUDIT_BYTES {
            return Err(v.err(
                0..0,
                "audit.max_bytes",
                format!("must be 0 (never roll) or at least {MIN_AUDIT_BYTES}"),
            ));
        }
        if self.keep == 0 {
            return Err(v.err(
                0..0,
                "audit.keep",
                "must be at least 1 (the records are the audit trail)",
            ));
        }
        Ok(self)
    }
}
