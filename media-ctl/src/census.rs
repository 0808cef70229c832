//! Whether media-ctl can vouch for its call counts (R-ST-3).
//!
//! A media-ctl that just started has an empty table, while its mgs may
//! still carry calls placed before. Until an mg itself reports no more
//! sessions than media-ctl tracks on it (`statistics`,
//! `currentstatistics.sessionstotal`), its count is reported as unknown
//! with the reason, and the mg is never called `drained` on media-ctl's
//! word.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::ng::Value;
use crate::pool::Pool;

const UNKNOWN: u64 = u64::MAX;

/// Per instance: vouched or not, and the sessions it last reported.
#[derive(Debug)]
pub(crate) struct Census {
    vouched: Vec<AtomicBool>,
    sessions: Vec<AtomicU64>,
}

impl Census {
    /// Nothing vouched yet.
    pub(crate) fn new(pool: &Pool) -> Census {
        let n = pool.members().iter().map(|m| m.idx + 1).max().unwrap_or(0);
        Census {
            vouched: (0..n).map(|_| AtomicBool::new(false)).collect(),
            sessions: (0..n).map(|_| AtomicU64::new(UNKNOWN)).collect(),
        }
    }

    /// True once the mg's own count showed nothing media-ctl does not know.
    pub(crate) fn vouched(&self, idx: usize) -> bool {
        self.vouched
            .get(idx)
            .is_some_and(|v| v.load(Ordering::Relaxed))
    }

    /// The sessions the mg reported last.
    pub(crate) fn sessions(&self, idx: usize) -> Option<u64> {
        let s = self.sessions.get(idx)?.load(Ordering::Relaxed);
        (s != UNKNOWN).then_some(s)
    }

    /// The mg reported `sessions` while media-ctl tracked `tracked` calls on it.
    pub(crate) fn observe(&self, idx: usize, sessions: u64, tracked: u64) {
        if let Some(s) = self.sessions.get(idx) {
            s.store(sessions.min(UNKNOWN - 1), Ordering::Relaxed);
        }
        if sessions <= tracked {
            if let Some(v) = self.vouched.get(idx) {
                v.store(true, Ordering::Relaxed);
            }
        }
    }
}

/// `statistics.currentstatistics.sessionstotal` of a `statistics` answer.
pub(crate) fn sessions_of(payload: &[u8]) -> Option<u64> {
    let Ok(Value::Dict(d)) = Value::decode(payload) else {
        return None;
    };
    let Value::Dict(stats) = d.get(&b"statistics"[..])? else {
        return None;
    };
    let Value::Dict(cur) = stats.get(&b"currentstatistics"[..])? else {
        return None;
    };
    match cur.get(&b"sessionstotal"[..])? {
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rtpengines_session_count() {
        let a = b"d10:statisticsd17:currentstatisticsd11:sessionsowni1e15:sessionsforeigni0e13:sessionstotali1eee6:result2:oke";
        assert_eq!(sessions_of(a), Some(1));
        assert_eq!(sessions_of(b"d6:result2:oke"), None);
        assert_eq!(sessions_of(b"garbage"), None);
    }
}
