//! CPU time and memory of a process tree, read from `/proc`, for benchmarks
//! that compare sip-gate with Kamailio (which forks workers) or a relay.

use std::{collections::HashMap, fs, process::Command, sync::OnceLock, time::Duration};

use crate::{Error, Result};

/// Resource use of a process and all its descendants at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcStats {
    /// CPU time in microseconds, summed over the tree: every thread of every
    /// live process (nanosecond run time from `/proc/<pid>/task/*/schedstat`,
    /// clock ticks from `stat` where that is missing), plus children already
    /// reaped by them (`cutime + cstime`, clock ticks).
    pub cpu_us: u64,
    /// Sum of each process's peak resident set (`VmHWM`), in KiB. Shared
    /// memory (Kamailio's shm) is counted once per process that touched it,
    /// so this over-states a forking server; it is an upper bound.
    pub peak_rss_kb: u64,
    /// Sum of current resident sets (`VmRSS`), in KiB.
    pub rss_kb: u64,
    /// Sum of proportional set sizes (`Pss` in `smaps_rollup`), in KiB: each
    /// shared page is split among the processes that map it, so a forking
    /// server's shared memory counts once. Current, not peak (the kernel
    /// keeps no peak PSS); 0 where the kernel does not expose it.
    pub pss_kb: u64,
    /// Number of processes in the tree.
    pub processes: usize,
}

impl ProcStats {
    /// Samples `pid` and every descendant (found by walking the `ppid` of
    /// all `/proc/*/stat`). Fails if `pid` itself is gone; descendants that
    /// exit during the walk are skipped.
    pub fn sample(pid: u32) -> Result<Self> {
        let mut stats = Self::default();
        let root = read_one(pid)?;
        stats.add(root);
        for child in descendants(pid) {
            if let Ok(one) = read_one(child) {
                stats.add(one);
            }
        }
        Ok(stats)
    }

    /// CPU time spent between `earlier` and `self`.
    pub fn cpu_since(&self, earlier: &ProcStats) -> Duration {
        Duration::from_micros(self.cpu_us.saturating_sub(earlier.cpu_us))
    }

    fn add(&mut self, one: One) {
        self.cpu_us += one.cpu_us;
        self.peak_rss_kb += one.hwm_kb;
        self.rss_kb += one.rss_kb;
        self.pss_kb += one.pss_kb;
        self.processes += 1;
    }
}

struct One {
    cpu_us: u64,
    hwm_kb: u64,
    rss_kb: u64,
    pss_kb: u64,
}

fn read_one(pid: u32) -> Result<One> {
    let err = |reason: String| Error::Proc { pid, reason };
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| err(e.to_string()))?;
    let fields = stat_fields(&stat).ok_or_else(|| err("unparsable stat".into()))?;
    // After the command name: state is field 3, utime..cstime are 14..17.
    let num = |i: usize| -> Result<u64> {
        fields
            .get(i - 3)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| err(format!("stat field {i} missing")))
    };
    let ticks_to_us = |t: u64| t * 1_000_000 / clock_ticks();
    // Ticks are 10 ms: a worker that handled a few calls shows 0. The
    // scheduler's run time is exact, so prefer it for live threads.
    let own_us = match run_time_ns(pid) {
        Some(ns) => ns / 1_000,
        None => ticks_to_us(num(14)? + num(15)?),
    };
    let cpu_us = own_us + ticks_to_us(num(16)? + num(17)?);
    let status =
        fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| err(e.to_string()))?;
    Ok(One {
        cpu_us,
        hwm_kb: status_kb(&status, "VmHWM:"),
        rss_kb: status_kb(&status, "VmRSS:"),
        pss_kb: fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
            .map(|t| status_kb(&t, "Pss:"))
            .unwrap_or(0),
    })
}

/// Sum of the on-CPU time (first `schedstat` field, ns) of every thread.
fn run_time_ns(pid: u32) -> Option<u64> {
    let first = |path: String| -> Option<u64> {
        fs::read_to_string(path)
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0;
    let mut any = false;
    for task in tasks.flatten() {
        let tid = task.file_name();
        if let Some(ns) = first(format!(
            "/proc/{pid}/task/{}/schedstat",
            tid.to_string_lossy()
        )) {
            total += ns;
            any = true;
        }
    }
    any.then_some(total)
}

/// Fields after `pid (comm)`; comm may hold spaces and parentheses.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let close = stat.rfind(')')?;
    Some(stat[close + 1..].split_whitespace().collect())
}

fn status_kb(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0) // kernel threads and zombies have no Vm* lines
}

/// All descendants of `pid` (children, grandchildren, ...), not `pid`.
pub(crate) fn descendants(pid: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(dir) = fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(p) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = fs::read_to_string(format!("/proc/{p}/stat")) else {
                continue;
            };
            if let Some(ppid) =
                stat_fields(&stat).and_then(|f| f.get(1).and_then(|v| v.parse::<u32>().ok()))
            {
                children.entry(ppid).or_default().push(p);
            }
        }
    }
    let mut out = Vec::new();
    let mut stack = vec![pid];
    while let Some(p) = stack.pop() {
        if let Some(kids) = children.get(&p) {
            out.extend(kids);
            stack.extend(kids);
        }
    }
    out
}

/// USER_HZ: 100 on every Linux we run on, asked once via getconf to be sure.
fn clock_ticks() -> u64 {
    static HZ: OnceLock<u64> = OnceLock::new();
    *HZ.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .filter(|hz| *hz > 0)
            .unwrap_or(100)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_command_names() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 1 2 20 0 1 0";
        let f = stat_fields(stat).unwrap();
        assert_eq!(f[0], "S");
        assert_eq!(f[1], "1");
        assert_eq!(f[14 - 3], "7");
        assert_eq!(f[17 - 3], "2");
    }

    #[test]
    fn samples_own_process_tree() {
        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        // Busy loop so the sample has CPU time to show.
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        let me = std::process::id();
        assert!(descendants(me).contains(&child.id()));
        let s = ProcStats::sample(me).unwrap();
        assert!(s.processes >= 2, "{s:?}");
        assert!(s.peak_rss_kb >= s.rss_kb / 2 && s.peak_rss_kb > 0, "{s:?}");
        assert!(s.cpu_us > 0, "{s:?}");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn missing_process_is_an_error() {
        assert!(matches!(
            ProcStats::sample(u32::MAX - 1),
            Err(Error::Proc { .. })
        ));
    }
}
