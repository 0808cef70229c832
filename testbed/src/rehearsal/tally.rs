//! Live tallies the nodes' own metrics do not give, for the progress line
//! and the chart: callers that sent a call to another gate (gate failover,
//! from the callers' logs as they grow) and Active-Passive leader changes
//! (from the confirmed leaders of each sample).

use std::collections::BTreeMap;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::PathBuf;

/// A caller's log, read from where the last look stopped.
#[derive(Debug)]
struct Tail {
    path: PathBuf,
    offset: u64,
}

/// Running counts since the start.
#[derive(Debug, Default)]
pub(super) struct Tally {
    logs: Vec<Tail>,
    failovers: u64,
    leaders: BTreeMap<String, String>,
    handovers: u64,
}

impl Tally {
    /// Follows a caller's log from its start.
    pub(super) fn follow(&mut self, path: PathBuf) {
        self.logs.push(Tail { path, offset: 0 });
    }

    /// Calls sent to another gate after a 503 or no answer (`ev retry`
    /// lines of the failover caller) so far.
    pub(super) fn failovers(&mut self) -> u64 {
        for t in &mut self.logs {
            self.failovers += count_new(t);
        }
        self.failovers
    }

    /// Leader changes so far, given the leaders confirmed now (a group
    /// missing from a sample keeps its last leader).
    pub(super) fn handovers(&mut self, now: &BTreeMap<String, String>) -> u64 {
        for (g, l) in now {
            match self.leaders.insert(g.clone(), l.clone()) {
                Some(before) if &before != l => self.handovers += 1,
                _ => {}
            }
        }
        self.handovers
    }
}

/// `ev retry` lines completed since the last look; a line still being
/// written is read next time.
fn count_new(t: &mut Tail) -> u64 {
    let Ok(mut f) = std::fs::File::open(&t.path) else {
        return 0;
    };
    if f.seek(SeekFrom::Start(t.offset)).is_err() {
        return 0;
    }
    let mut buf = Vec::new();
    if f.read_to_end(&mut buf).is_err() {
        return 0;
    }
    let Some(last_nl) = buf.iter().rposition(|b| *b == b'\n') else {
        return 0;
    };
    t.offset += last_nl as u64 + 1;
    String::from_utf8_lossy(&buf[..last_nl])
        .lines()
        .filter(|l| l.starts_with("ev retry "))
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn failovers_are_counted_once_as_the_log_grows() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("caller.log");
        let mut f = std::fs::File::create(&p).unwrap();
        let mut t = Tally::default();
        t.follow(p.clone());
        write!(f, "ev up c1 1.0\nev retry c2 1.5\nev ret").unwrap();
        f.flush().unwrap();
        assert_eq!(t.failovers(), 1);
        write!(f, "ry c3 2.0\nev end c1 3.0\n").unwrap();
        f.flush().unwrap();
        assert_eq!(t.failovers(), 2);
        assert_eq!(t.failovers(), 2);
    }

    #[test]
    fn leader_changes_are_counted_across_a_missing_group() {
        let m = |v: &[(&str, &str)]| -> BTreeMap<String, String> {
            v.iter().map(|(g, l)| ((*g).into(), (*l).into())).collect()
        };
        let mut t = Tally::default();
        assert_eq!(t.handovers(&m(&[("g", "a"), ("h", "a")])), 0);
        assert_eq!(t.handovers(&m(&[])), 0);
        assert_eq!(t.handovers(&m(&[("g", "b")])), 1);
        assert_eq!(t.handovers(&m(&[("g", "b"), ("h", "b")])), 2);
    }
}
