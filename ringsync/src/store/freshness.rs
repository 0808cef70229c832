//! How current a node's copy of the profiles is (R-MN-2).
//!
//! A store that cannot reach its backend keeps serving the last profiles it
//! had (fail-static) and says so through a [`Freshness`]: since when it may
//! be out of date and why. Nodes show it in status, metrics and `/readyz`
//! detail; readiness itself stays true, because serving the last view is
//! the correct behaviour during a store outage.

use serde::{Deserialize, Serialize};

/// Whether the profiles a store hands out are known to be current.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Freshness {
    /// The backend revision the current profiles came from (etcd: the mod
    /// revision of the profile document; embedded: the set's revision).
    pub store_revision: u64,
    /// Set while the backend cannot be reached or read: the time (Unix ms)
    /// since which the profiles may be out of date.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_since_ms: Option<u64>,
    /// Why the profiles are stale, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Set when the profiles were loaded from the local view cache at start
    /// and the backend has not confirmed them since: where from, and when
    /// the cache was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_cache: Option<String>,
}

impl Freshness {
    /// Current profiles at `store_revision`.
    pub fn fresh(store_revision: u64) -> Freshness {
        Freshness {
            store_revision,
            ..Default::default()
        }
    }

    /// True while the profiles may be out of date.
    pub fn is_stale(&self) -> bool {
        self.stale_since_ms.is_some()
    }

    /// One line for an operator: `store: fresh (revision 7)` or
    /// `store: stale since 2026-11-30T16:00:00Z (42s): etcd unreachable ...`.
    pub fn describe(&self, now_ms: u64) -> String {
        match self.stale_since_ms {
            None => format!("store: fresh (revision {})", self.store_revision),
            Some(since) => {
                let mut s = format!(
                    "store: stale since {} ({}s), keeping the last view (revision {})",
                    crate::time::rfc3339(since),
                    now_ms.saturating_sub(since) / 1000,
                    self.store_revision
                );
                if let Some(r) = &self.reason {
                    s.push_str(": ");
                    s.push_str(r);
                }
                if let Some(c) = &self.from_cache {
                    s.push_str("; started from the view cache ");
                    s.push_str(c);
                }
                s
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_both_states() {
        assert_eq!(Freshness::fresh(7).describe(0), "store: fresh (revision 7)");
        let f = Freshness {
            store_revision: 7,
            stale_since_ms: Some(1_000),
            reason: Some("etcd unreachable".into()),
            from_cache: Some("/var/cache/x.json (saved 1970-01-01T00:00:01Z)".into()),
        };
        let d = f.describe(43_000);
        assert!(
            d.starts_with("store: stale since 1970-01-01T00:00:01Z (42s)"),
            "{d}"
        );
        assert!(d.contains("etcd unreachable") && d.contains("view cache /var/cache/x.json"));
    }
}
