//! R-ST-3 through the real binaries: the `sip-gate` binary restarted in the
//! middle of a drain, with real SIPp calls up and the real `ringsync status
//! --json` reading its work report.
//!
//! Restarted without a work snapshot (killed), the gate cannot know what was
//! set up before it started: status shows the sg `draining` with the reason
//! and `known_at_ms`, and never `drained`, even once the call has ended.
//! Restarted gracefully with `--work-snapshot`, it keeps its knowledge: the
//! call is still counted, and the sg reads `drained` when it ends.
//!
//! Addresses: `127.27.N.0/24`; the gate's listener and admin on `.1`, sg-0
//! and sg-1 on `.11` and `.12`, the caller on `.100`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{cli_drain, ringsync};
use ringsync::work::{WorkReport, WORK_PATH};
use serde_json::Value;
use testbed::bins::{BinDir, Node};
use testbed::fixture::{Mode, SiteFile};
use testbed::{wait_for, Scenario, Sipp, SippHandle, Transport};

fn ip(net: u8, host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 27, net, host))
}

/// A site of two sg, a guard listener in front of sg-0, the gate's admin on
/// `.1:9091`, the embedded store in `dir`; `work` is its `[work]` section.
fn site(dir: &Path, net: u8, work: &str) -> PathBuf {
    let sip = |h| SocketAddr::new(ip(net, h), 5060);
    SiteFile::new(&format!("restart-{net}"))
        .admin(
            SocketAddr::new(ip(net, 1), 9091),
            SocketAddr::new(ip(net, 1), 9092),
        )
        .section("work", work)
        .servers(&["srv-0", "srv-1"])
        .instance("sg-0", "sg", "srv-0", sip(11))
        .instance("sg-1", "sg", "srv-1", sip(12))
        .listener("g0", sip(1), Mode::Guard("sg-0"), "subscriber", "")
        .write(dir)
}

/// The gate binary on `site`, once its admin endpoint answers.
/// The gate restarts here while a call is up: its stop waits 1 s at most
/// for the transactions in flight (R-GW-1), so the call goes on through the
/// next gate instead of ending through this one.
fn start_gate(site: &Path, admin: SocketAddr, extra: &[&str]) -> Node {
    let gate = Node::gate(site)
        .admin(admin)
        .args(["--node", "g1", "--drain-deadline-s", "1"])
        .args(extra)
        .start()
        .unwrap();
    gate.wait_for(
        "the gate's work report",
        Duration::from_secs(10),
        Node::work,
    )
    .unwrap();
    gate
}

/// The gate's work report, as it serves it.
fn work_report(admin: SocketAddr) -> Option<WorkReport> {
    testbed::http::get_json(admin, WORK_PATH)
}

/// sg-0 as `ringsync status --json` shows it.
fn sg0_status(site: &Path) -> Value {
    let v = ringsync(site, &["status"]);
    v["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == "sg-0")
        .cloned()
        .unwrap()
}

/// sg-0's answering SIPp and one call through the gate, held `hold`.
fn one_call(net: u8, hold: Duration) -> (SippHandle, SippHandle) {
    let sg0 = Sipp::new(Scenario::repo("uas_call"))
        .local(ip(net, 11), 5060)
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap();
    let caller = Sipp::new(Scenario::repo("uac_call"))
        .local_ip(ip(net, 100))
        .remote(SocketAddr::new(ip(net, 1), 5060))
        .transport(Transport::Udp)
        .calls(1)
        .rate(1)
        .duration(hold)
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap();
    (sg0, caller)
}

fn sg0_dialogs(admin: SocketAddr) -> u64 {
    work_report(admin).map_or(0, |r| r.instances["sg-0"].counts.dialogs)
}

/// R-ST-3: a gate killed and started again mid-drain cannot know the work
/// set up before it started: sg-0 reads `draining` with the reason and the
/// time it will know, and never `drained`, even after its call has ended.
#[test]
fn r_st_3_a_gate_restarted_mid_drain_says_why_and_is_never_drained() {
    BinDir::locate().program("ringsync").unwrap(); // built before any timing starts
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path(), 1, "");
    let admin: SocketAddr = "127.27.1.1:9091".parse().unwrap();
    let mut gate = start_gate(&site, admin, &[]);
    let (sg0, caller) = one_call(1, Duration::from_secs(5));
    wait_for("the call up", Duration::from_secs(5), || {
        (sg0_dialogs(admin) == 1).then_some(())
    })
    .unwrap();
    cli_drain(&site, admin, "srv-0", Duration::from_secs(3));

    gate.kill();
    let started = ringsync::work::now_ms();
    let mut gate = start_gate(&site, admin, &[]);
    let st = sg0_status(&site);
    assert_eq!(st["state"], "draining", "{st}");
    assert!(st["work"].is_null(), "{st}");
    let why = st["unknown"][0].as_str().unwrap();
    assert!(
        why.starts_with("gate g1: gate started at ")
            && why.ends_with(
                "registrations, subscriptions and calls set up before then are not known"
            ),
        "{why}"
    );
    // Known once the longest life (12 h by default) has passed since the start.
    let known_at = st["known_at_ms"].as_u64().unwrap();
    assert!(known_at.abs_diff(started + 12 * 3_600_000) < 5_000, "{st}");

    // The call ends through the new gate (its Record-Route token routes it).
    let r = caller.wait(Duration::from_secs(30)).unwrap();
    assert!(r.all_ok() && r.successful == 1, "{r:?}");
    let st = sg0_status(&site);
    assert_eq!(st["state"], "draining", "still not known: {st}");
    assert_eq!(st["counts"]["dialogs"], 0, "{st}");
    gate.stop(Duration::from_secs(10));
    let _ = sg0.stop();
}

/// R-ST-3: a graceful restart with `--work-snapshot` keeps the knowledge:
/// the new gate counts the call the old one saw set up, and sg-0 reads
/// `drained` once it ends. The snapshot is read once (deleted at start).
#[test]
fn r_st_3_a_graceful_restart_with_a_work_snapshot_keeps_the_call() {
    BinDir::locate().program("ringsync").unwrap(); // built before any timing starts
    let dir = tempfile::tempdir().unwrap();
    // Short lives: the first gate vouches for its book after 8 s.
    let site = site(dir.path(), 2, "max_expires_s = 3\nmax_call_age_s = 8");
    let admin: SocketAddr = "127.27.2.1:9091".parse().unwrap();
    let snapshot = dir.path().join("work.json");
    let args = ["--work-snapshot", snapshot.to_str().unwrap()];
    let mut gate = start_gate(&site, admin, &args);
    wait_for("the first gate to know", Duration::from_secs(12), || {
        work_report(admin).filter(|r| r.instances["sg-0"].unknown.is_none())
    })
    .unwrap();
    let (sg0, caller) = one_call(2, Duration::from_secs(5));
    wait_for("the call up", Duration::from_secs(5), || {
        (sg0_dialogs(admin) == 1).then_some(())
    })
    .unwrap();
    cli_drain(&site, admin, "srv-0", Duration::from_secs(3));
    assert_eq!(sg0_status(&site)["state"], "draining");

    gate.stop(Duration::from_secs(10));
    assert!(snapshot.exists(), "written on the graceful stop");
    let mut gate = start_gate(&site, admin, &args);
    assert!(!snapshot.exists(), "read once");
    let st = sg0_status(&site);
    assert_eq!(
        (st["state"].as_str(), st["work"].as_u64()),
        (Some("draining"), Some(1)),
        "{st}"
    );
    assert!(st.get("unknown").is_none(), "{st}");

    let r = caller.wait(Duration::from_secs(30)).unwrap();
    assert!(r.all_ok() && r.successful == 1, "{r:?}");
    wait_for("sg-0 drained", Duration::from_secs(3), || {
        (sg0_status(&site)["state"] == "drained").then_some(())
    })
    .unwrap();
    gate.stop(Duration::from_secs(10));
    let _ = sg0.stop();
}
