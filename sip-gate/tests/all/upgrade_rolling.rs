//! A rolling upgrade of a site's three gates on etcd under load (issue 39,
//! R-GW-3, R-GW-2's rolling restart), through the real binaries: a real
//! etcd, three `sip-gate` binaries in front of one sg (SIPp UAS), a SIPp
//! UAC calling through each gate at a bounded rate, and `sip-gate upgrade`
//! on each gate in turn while calls are up. No call fails, and the real
//! `ringsync status` (reading the node registry) shows each gate on its new
//! run, upgraded from the one it started on.
//!
//! Addresses: `127.139.12.0/24` (UDP) and `127.139.14.0/24` (TCP): gate k's listener and admin on `.1+k`, the
//! sg on `.11`, gate k's caller on `.21+k`, etcd on `.41`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use testbed::bins::{BinDir, Node};
use testbed::{wait_for, Etcd, Scenario, Sipp, Transport};

use crate::common::{ip, server_addr};
use crate::upgrade::{took_over, upgrade, NewRun};

const GATES: u8 = 3;

fn gate_sip(net: (u8, u8), k: u8) -> SocketAddr {
    SocketAddr::new(ip(net, 1 + k), 5060)
}

fn gate_admin(net: (u8, u8), k: u8) -> SocketAddr {
    SocketAddr::new(ip(net, 1 + k), 9091)
}

/// Gate k's site file (its own listener; the one etcd for all).
fn site_file(dir: &Path, net: (u8, u8), k: u8, endpoints: &[String]) -> PathBuf {
    let text = crate::common::site_file(net, 1)
        .etcd(endpoints, "/drain/rolling")
        .raw(&format!(
            "[[listener]]\nname = \"subs\"\nbind = \"{}\"\nmode = \"balance\"\npool = \"sg\"\nleg = \"subscriber\"\n",
            gate_sip(net, k)
        ))
        .text()
        .to_owned();
    let home = dir.join(format!("g{k}"));
    std::fs::create_dir_all(&home).unwrap();
    let path = home.join("site.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Each gate node's run as `ringsync status --json` shows it, by node name.
fn runs(site: &Path) -> BTreeMap<String, Value> {
    let st = testbed::bins::ringsync(&BinDir::locate(), site, &["status"]).unwrap();
    st["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| n["kind"] == "gate" && n["run"].is_object())
        .filter_map(|n| Some((n["node"].as_str()?.to_owned(), n["run"].clone())))
        .collect()
}

/// Each of three gates upgraded in turn while a SIPp UAC calls through
/// every gate over `transport` (10 calls/s each, held 2 s, then a
/// re-INVITE and a BYE): no call fails, over TCP the callers' and the
/// gates' connections to the sg move (none closed), and status shows each
/// gate's new run.
fn rolling_upgrade(net: (u8, u8), transport: Transport) {
    let etcd = Etcd::single(ip(net, 41)).expect("etcd");
    let eps = etcd.endpoints();
    let dir = tempfile::tempdir().unwrap();
    let sites: Vec<PathBuf> = (0..GATES)
        .map(|k| site_file(dir.path(), net, k, &eps))
        .collect();
    let mut olds: Vec<Node> = (0..GATES)
        .map(|k| {
            let mut g = Node::gate(&sites[k as usize])
                .admin(gate_admin(net, k))
                .args(["--node".to_owned(), format!("g{k}")])
                .start()
                .unwrap_or_else(|e| panic!("gate g{k}: {e}"));
            g.wait_ready().unwrap_or_else(|e| panic!("gate g{k}: {e}"));
            g
        })
        .collect();
    let first = wait_for(
        "status to show the three gates' runs",
        Duration::from_secs(10),
        || {
            let r = runs(&sites[0]);
            (r.len() == usize::from(GATES)).then_some(r)
        },
    )
    .unwrap();
    let uas = Sipp::new(Scenario::repo("uas_call"))
        .local(server_addr(net, 0).ip(), 5060)
        .transport(transport)
        .timeout(Duration::from_secs(120))
        .spawn()
        .unwrap();
    // 200 calls at 10/s: 20 s of load, across which the three upgrades run.
    let calls = 200;
    let uacs: Vec<_> = (0..GATES)
        .map(|k| {
            Sipp::new(Scenario::repo("uac_call"))
                .local_ip(ip(net, 21 + k))
                .remote(gate_sip(net, k))
                .transport(transport)
                .calls(calls)
                .rate(10)
                .duration(Duration::from_secs(2))
                .timeout(Duration::from_secs(120))
                .spawn()
                .unwrap()
        })
        .collect();
    let mut news: Vec<NewRun> = Vec::new();
    for (k, old) in olds.iter_mut().enumerate() {
        // Calls are up through this gate when it is upgraded.
        wait_for("calls up through the gate", Duration::from_secs(10), || {
            let up = old.work()?.instances.get("sg-0")?.counts.dialogs;
            (up >= 5).then_some(())
        })
        .unwrap();
        let new = upgrade(&sites[k], gate_admin(net, k as u8));
        let status = old.wait_exit(Duration::from_secs(10));
        assert!(
            status.is_some_and(|s| s.success()),
            "g{k}'s old run: {status:?}\n{}",
            old.log()
        );
        // Over TCP the caller's connection and the gate's to the sg moved.
        let moved = took_over(old, "connections");
        let want = if transport == Transport::Tcp { 2 } else { 0 };
        assert_eq!(moved, Some(want), "g{k}: {}", old.log());
        news.push(new);
        std::thread::sleep(Duration::from_secs(2));
    }
    for (k, uac) in uacs.into_iter().enumerate() {
        let r = uac.wait(Duration::from_secs(120)).unwrap();
        assert!(
            r.all_ok() && r.successful == calls && r.failed == 0,
            "calls through g{k}: {r:?}\n{}",
            olds[k].log()
        );
    }
    let u = uas.stop().unwrap();
    assert_eq!(u.failed, 0, "{u:?}");
    // Every gate on its new run, upgraded from the one it started on.
    let now = runs(&sites[0]);
    for k in 0..GATES {
        let name = format!("g{k}");
        let (was, is) = (&first[&name], &now[&name]);
        let pid = news[usize::from(k)].0;
        assert!(
            is["id"]
                .as_str()
                .is_some_and(|id| id.starts_with(&format!("{pid}-"))),
            "{name}: {is}"
        );
        assert_eq!(is["upgraded_from"]["id"], was["id"], "{name}: {is}");
        assert_eq!(is["version"], env!("CARGO_PKG_VERSION"), "{name}: {is}");
    }
}

/// R-GW-3, R-GW-2: the rolling upgrade with calls over UDP.
#[test]
fn r_gw_3_rolling_upgrade_of_three_gates_on_etcd_fails_no_call() {
    rolling_upgrade((139, 12), Transport::Udp);
}

/// R-GW-3, R-GW-2: the rolling upgrade with calls over TCP: no connection
/// of the callers or of the gates to the sg is closed.
#[test]
fn r_gw_3_rolling_upgrade_over_tcp_keeps_every_connection() {
    rolling_upgrade((139, 14), Transport::Tcp);
}
