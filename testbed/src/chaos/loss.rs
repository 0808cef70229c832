//! Packet loss on loopback: a random share of one leg's packets dropped
//! by `iptables -m statistic --mode random` for a few seconds (`tc netem`
//! does not work on these machines: `sch_netem` is missing). Only ever in
//! a network namespace of the run's own: the host's firewall is never
//! touched.

use std::net::IpAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::plan::Leg;
use crate::site::{Layout, Svc};
use crate::{Error, Result};

/// The chain the loss rules go into, jumped to from `INPUT` on `lo`: one
/// flush and delete removes them all.
const CHAIN: &str = "TESTBED_CHAOS_LOSS";

/// Why this process's network namespace is not one of the run's own
/// (`None`: it is, and rules there touch nothing else). Its namespace must
/// differ from PID 1's, or where PID 1's cannot be read (no ptrace right
/// over it), from that of the farthest ancestor that can be read (the
/// shell that ran `unshare -n`); and it must hold only `lo`, as a new one
/// does.
pub fn not_own_namespace() -> Option<String> {
    let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/net")).ok();
    let Some(own) = ns("self") else {
        return Some("this process's network namespace cannot be read".into());
    };
    let other = ns("1").map(|n| ("PID 1", n)).or_else(|| {
        ancestors()
            .into_iter()
            .rev()
            .find_map(|p| ns(&p.to_string()).map(|n| ("the farthest readable ancestor", n)))
    });
    match other {
        None => return Some("no other process's network namespace can be read".into()),
        Some((who, n)) if n == own => {
            return Some(format!(
                "the run shares its network namespace with {who} ({})",
                own.display()
            ))
        }
        Some(_) => {}
    }
    // /proc/self/net/dev lists this namespace's interfaces (/sys/class/net
    // is the mount's, the host's, after a bare `unshare -n`).
    let links: Vec<String> = std::fs::read_to_string("/proc/self/net/dev")
        .unwrap_or_default()
        .lines()
        .skip(2)
        .filter_map(|l| Some(l.split_once(':')?.0.trim().to_owned()))
        .collect();
    (links != ["lo"]).then(|| {
        format!(
            "the run's network namespace has other interfaces than lo ({})",
            links.join(", ")
        )
    })
}

/// This process's ancestors, nearest first, up to (not including) PID 1.
fn ancestors() -> Vec<u32> {
    let ppid = |pid: &str| -> Option<u32> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        s.lines()
            .find_map(|l| l.strip_prefix("PPid:"))?
            .trim()
            .parse()
            .ok()
    };
    let mut out = Vec::new();
    let mut p = ppid("self");
    while let Some(pid) = p.filter(|p| *p > 1 && out.len() < 64) {
        out.push(pid);
        p = ppid(&pid.to_string());
    }
    out
}

/// The sources and destinations of `leg` on the site: callers (those of
/// no account and each account's) to the gates, or the gates to the
/// sg/esg instances.
pub fn addresses(l: &Layout, leg: Leg) -> (Vec<IpAddr>, Vec<IpAddr>) {
    let gates: Vec<IpAddr> = (0..l.gates()).map(|k| l.gate_ip(k)).collect();
    match leg {
        Leg::CallerToGate => {
            let mut callers = vec![l.caller_ip()];
            callers.extend(l.accounts().iter().map(|a| a.caller));
            (callers, gates)
        }
        Leg::GateToInstance => (
            gates,
            l.instances()
                .into_iter()
                .filter(|i| matches!(i.svc, Svc::Sg | Svc::Esg))
                .map(|i| i.ip)
                .collect(),
        ),
    }
}

/// What came of a loss.
#[derive(Debug, Clone, PartialEq)]
pub enum Lost {
    /// Skipped, and why: outside a namespace of the run's own.
    Skipped(String),
    /// Dropped from `on` (the rule in place) to `off` (the rule flushed),
    /// seconds after the run's start.
    Dropped {
        /// When the rule was in place.
        on: f64,
        /// When it was gone.
        off: f64,
    },
}

/// Drops `share` of `leg`'s packets for `for_s`, then removes the rule;
/// times counted from `start`.
pub fn lose(l: &Layout, leg: Leg, share: f64, for_s: f64, start: Instant) -> Result<Lost> {
    if let Some(why) = not_own_namespace() {
        return Ok(Lost::Skipped(format!("packet loss skipped: {why}")));
    }
    let (from, to) = addresses(l, leg);
    let list = |v: &[IpAddr]| {
        v.iter()
            .map(|a| format!("{a}/32"))
            .collect::<Vec<_>>()
            .join(",")
    };
    // A chain left by a run killed mid-loss is emptied first.
    let _ = iptables(&["-N", CHAIN]);
    iptables(&["-F", CHAIN])?;
    if iptables(&["-C", "INPUT", "-i", "lo", "-j", CHAIN]).is_err() {
        iptables(&["-I", "INPUT", "-i", "lo", "-j", CHAIN])?;
    }
    let p = format!("{share:.4}");
    let added = iptables(&[
        "-A",
        CHAIN,
        "-s",
        &list(&from),
        "-d",
        &list(&to),
        "-m",
        "statistic",
        "--mode",
        "random",
        "--probability",
        &p,
        "-j",
        "DROP",
    ]);
    let on = start.elapsed().as_secs_f64();
    if added.is_ok() {
        std::thread::sleep(Duration::from_secs_f64(for_s));
    }
    let flushed = iptables(&["-F", CHAIN]);
    let off = start.elapsed().as_secs_f64();
    let removed = flushed.and_then(|()| remove());
    added.and(removed).map(|()| Lost::Dropped { on, off })
}

/// Removes the (flushed) loss chain.
fn remove() -> Result<()> {
    iptables(&["-D", "INPUT", "-i", "lo", "-j", CHAIN])?;
    iptables(&["-X", CHAIN])
}

fn iptables(args: &[&str]) -> Result<()> {
    let bin = ["/usr/sbin/iptables", "/sbin/iptables"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("iptables");
    let out = Command::new(bin)
        .arg("-w")
        .args(args)
        .output()
        .map_err(|e| Error::Command {
            command: format!("iptables {}", args.join(" ")),
            message: e.to_string(),
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Command {
            command: format!("iptables {}", args.join(" ")),
            message: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_leg_names_the_chaos_sites_own_addresses() {
        let l = super::super::builder(3).net([127, 96, 1]).layout().unwrap();
        let ip = |h: u8| IpAddr::from([127, 96, 1, h]);
        let (from, to) = addresses(&l, Leg::CallerToGate);
        assert_eq!((from, to), (vec![ip(9)], vec![ip(1), ip(2), ip(3)]));
        let (from, to) = addresses(&l, Leg::GateToInstance);
        assert_eq!(
            (from, to),
            (vec![ip(1), ip(2), ip(3)], vec![ip(20), ip(21), ip(22)])
        );
    }
}
