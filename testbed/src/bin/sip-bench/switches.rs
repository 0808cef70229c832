//! The context switches of a proxy's threads over a run, from
//! `/proc/PID/task/TID/status` (`voluntary_ctxt_switches`: the thread
//! waited, for a datagram or a lock; `nonvoluntary_ctxt_switches`: it was
//! preempted, e.g. by a peer its send woke). Issue 29: a UDP worker that
//! sleeps between datagrams pays for each wake, and one that wakes its
//! peers mid-batch is preempted by them.

use std::collections::HashMap;
use std::fmt;

/// Each thread's counts at one moment, by thread id: its name and its
/// voluntary and nonvoluntary switches.
#[derive(Debug, Default)]
pub(crate) struct Switches(HashMap<u32, (String, u64, u64)>);

/// What a run added: the whole process's and its busiest thread's (the
/// one with the most switches of both kinds: the UDP worker for the gate).
#[derive(Debug, Default, Clone)]
pub(crate) struct Delta {
    /// Voluntary switches of every thread.
    pub(crate) voluntary: u64,
    /// Nonvoluntary switches of every thread.
    pub(crate) nonvoluntary: u64,
    /// The busiest thread: its name, voluntary and nonvoluntary switches.
    pub(crate) busiest: (String, u64, u64),
}

impl Switches {
    /// Reads every thread of `pid`; empty where `/proc` cannot be read (the
    /// run then shows no switches rather than failing).
    pub(crate) fn read(pid: u32) -> Switches {
        let mut all = HashMap::new();
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return Switches(all);
        };
        for task in tasks.flatten() {
            let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
                continue;
            };
            let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
                continue; // the thread ended meanwhile
            };
            let field = |key: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(key))
                    .map(str::trim)
            };
            let count = |key| field(key).and_then(|v| v.parse().ok()).unwrap_or(0);
            let name = field("Name:").unwrap_or("?").to_string();
            let counts = (
                name,
                count("voluntary_ctxt_switches:"),
                count("nonvoluntary_ctxt_switches:"),
            );
            all.insert(tid, counts);
        }
        Switches(all)
    }

    /// The switches since `before`; a thread started since counts from 0.
    pub(crate) fn since(&self, before: &Switches) -> Delta {
        let mut d = Delta::default();
        for (tid, (name, v, nv)) in &self.0 {
            let (v0, nv0) = before.0.get(tid).map_or((0, 0), |b| (b.1, b.2));
            let (v, nv) = (v.saturating_sub(v0), nv.saturating_sub(nv0));
            d.voluntary += v;
            d.nonvoluntary += nv;
            if v + nv > d.busiest.1 + d.busiest.2 {
                d.busiest = (name.clone(), v, nv);
            }
        }
        d
    }
}

impl fmt::Display for Delta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, v, nv) = &self.busiest;
        write!(
            f,
            "process {} voluntary / {} nonvoluntary; busiest thread {name} {v} / {nv}",
            self.voluntary, self.nonvoluntary
        )
    }
}
