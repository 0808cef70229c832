//! Which run of a node's binary serves (issue 39, R-GW-3): a gate upgraded
//! in place keeps its name and address, so status tells its runs apart by
//! this.

use serde::{Deserialize, Serialize};

/// One run of a node's binary: a process, from its start (or its taking
/// over from the run before it) to its exit or hand-over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunInfo {
    /// Unique per run on a host: the process id and its start (Unix ms),
    /// as `PID-MS`.
    pub id: String,
    /// The binary's version (its package version).
    pub version: String,
    /// When this run started (Unix ms).
    pub since_ms: u64,
    /// The run it took over from by an upgrade; absent for a run that
    /// started on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgraded_from: Option<RunRef>,
}

/// The run an upgraded run took over from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRef {
    /// Its [`RunInfo::id`].
    pub id: String,
    /// Its [`RunInfo::version`].
    pub version: String,
}

impl RunInfo {
    /// This process's run, of a binary at `version`, started at
    /// `since_ms`, taken over from `from` if an upgrade started it.
    pub fn this_process(version: &str, since_ms: u64, from: Option<RunRef>) -> RunInfo {
        RunInfo {
            id: format!("{}-{since_ms}", std::process::id()),
            version: version.to_owned(),
            since_ms,
            upgraded_from: from,
        }
    }

    /// What a run it hands over to names it by.
    pub fn to_ref(&self) -> RunRef {
        RunRef {
            id: self.id.clone(),
            version: self.version.clone(),
        }
    }

    /// In words, for `ringsync status`: `run ID (version V, since T)`,
    /// and the run it was upgraded from.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "run {} (version {}, since {}",
            self.id,
            self.version,
            crate::time::rfc3339(self.since_ms)
        );
        if let Some(from) = &self.upgraded_from {
            s.push_str(&format!(
                ", upgraded from run {} version {}",
                from.id, from.version
            ));
        }
        s.push(')');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_in_words_names_the_run_it_was_upgraded_from() {
        let old = RunInfo::this_process("0.1.0", 1_000, None);
        assert!(old.id.ends_with("-1000"), "{}", old.id);
        assert_eq!(
            old.describe(),
            format!("run {} (version 0.1.0, since 1970-01-01T00:00:01Z)", old.id)
        );
        let new = RunInfo::this_process("0.2.0", 2_000, Some(old.to_ref()));
        assert!(
            new.describe()
                .ends_with(&format!(", upgraded from run {} version 0.1.0)", old.id)),
            "{}",
            new.describe()
        );
    }

    #[test]
    fn a_report_without_a_run_still_reads() {
        let json = r#"{"site":"s","node":"g1","kind":"gate","scope":"x","started_ms":1,
            "generated_ms":2,"revision":3,"generation":4,"instances":{}}"#;
        let r: crate::work::WorkReport = serde_json::from_str(json).unwrap();
        assert_eq!(r.run, None);
        let back = serde_json::to_value(&r).unwrap();
        assert!(back.get("run").is_none(), "{back}");
    }
}
