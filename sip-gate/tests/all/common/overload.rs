//! Shared pieces of the overload tests through the real `sip-gate` binary
//! (`sipp_overload.rs`, `tcp_overload.rs`, `udp_workers.rs`): their site,
//! their SIPp sg and callers, the callers' outcomes, and the gate's UDP
//! worker threads as `/proc` shows them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use testbed::bins::Node;
use testbed::fixture::Mode;
use testbed::{Scenario, Sipp, SippHandle, SippReport, Transport};

use super::{ip, server_addr};

/// A site with one sg behind a balance listener `subs` on
/// `127.N.M.1:5060` (`listener_lines`: more lines of it, e.g. its
/// `transports`),
/// an embedded store, and the `[overload]` section given. Returns the
/// directory holding it, its path, the listener's and the admin's
/// (`.1:9091`) addresses.
pub fn site(
    net: (u8, u8),
    listener_lines: &str,
    overload: &str,
) -> (tempfile::TempDir, PathBuf, SocketAddr, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let listener = SocketAddr::new(ip(net, 1), 5060);
    let admin = SocketAddr::new(ip(net, 1), 9091);
    let path = super::site_file(net, 1)
        .listener(
            "subs",
            listener,
            Mode::Balance("sg"),
            "subscriber",
            listener_lines,
        )
        .section("overload", overload)
        .write(dir.path());
    (dir, path, listener, admin)
}

/// The gate binary on [`site`], ready: the directory holding the site, the
/// gate and its listener's address.
pub fn ready_gate(
    net: (u8, u8),
    listener_lines: &str,
    overload: &str,
) -> (tempfile::TempDir, Node, SocketAddr) {
    let (dir, site, listener, admin) = site(net, listener_lines, overload);
    let mut gate = Node::gate(&site).admin(admin).start().unwrap();
    gate.wait_ready().unwrap();
    (dir, gate, listener)
}

/// One `uac_call` from `127.N.M.host` through `to` over `transport`, the
/// call a test places once the gate has caught up: its report.
pub fn call_after(net: (u8, u8), host: u8, to: SocketAddr, transport: Transport) -> SippReport {
    let after = Sipp::new(Scenario::repo("uac_call"))
        .local_ip(ip(net, host))
        .remote(to)
        .transport(transport)
        .calls(1)
        .duration(Duration::from_millis(100))
        .timeout(Duration::from_secs(20))
        .spawn()
        .expect("uac starts");
    wait(after, "the call after the stall")
}

/// The sg: SIPp `uas_call` on `.11:5060` over `transport`, for 120 s at
/// the most.
pub fn sg(net: (u8, u8), transport: Transport) -> SippHandle {
    Sipp::new(Scenario::repo("uas_call"))
        .local(server_addr(net, 0).ip(), 5060)
        .transport(transport)
        .timeout(Duration::from_secs(120))
        .spawn()
        .expect("uas starts")
}

/// `uac_call_or_503` from `127.N.M.host` over `transport`, its outcomes
/// logged to `log`.
pub fn caller(net: (u8, u8), host: u8, to: SocketAddr, transport: Transport, log: &Path) -> Sipp {
    Sipp::new(Scenario::repo("uac_call_or_503"))
        .local_ip(ip(net, host))
        .remote(to)
        .transport(transport)
        .timeout(Duration::from_secs(90))
        .arg("-trace_logs")
        .arg("-log_file")
        .arg(log)
}

/// Calls by outcome in a `uac_call_or_503` log: (refused, up, ended).
pub fn outcomes(log: &Path) -> (u64, u64, u64) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let count = |what: &str| text.lines().filter(|l| l.starts_with(what)).count() as u64;
    (count("ev refused "), count("ev up "), count("ev end "))
}

/// Waits at most 90 s for `sipp` to end; its report (`what` names it in the
/// panic if it does not end).
pub fn wait(sipp: SippHandle, what: &str) -> SippReport {
    sipp.wait(Duration::from_secs(90))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// The names of the gate's UDP worker threads (`udp-LISTENER-WORKER`).
pub fn udp_worker_threads(gate: &Node) -> Vec<String> {
    let tasks =
        std::fs::read_dir(format!("/proc/{}/task", gate.pid().expect("running"))).expect("tasks");
    let mut names: Vec<String> = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .filter(|n| n.starts_with("udp-"))
        .collect();
    names.sort();
    names
}

/// Waits until every thread of `pid` is stopped (state `T`): `kill`
/// returns once the signal is sent, a thread may still run a moment.
pub fn wait_stopped(pid: u32) {
    let stopped = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .flatten()
            .all(|t| {
                let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
                // The state follows the command name's closing parenthesis.
                stat.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('T'))
            })
    };
    let t0 = std::time::Instant::now();
    while !stopped() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the gate did not stop"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}
