//! The handover on a real etcd (R-AP-1..3, R-MN-3): the lease election and
//! its fence at the store level, then two `ringsync serve` planners and one
//! agent process per group member: only one plans; killing it hands the
//! plan to the other, which keeps the pace from the last move.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::common::etcd::ip;
use crate::common::handover::{
    agent, all_settled, ap_site, cli, handover_of, members, serve, terminate, wait_for,
};
use ringsync::store::{self, Campaign, HandoverStore, Published, Store};
use ringsync::SiteConfig;
use ringsync_ops::handover::record::{Desired, HandoverState, MoveKind, PlannerRecord};
use testbed::bins::Node;
use testbed::Etcd;

const PACE_MS: u64 = 6_000;

/// The AP test site on etcd at `endpoint`, written to `dir/site.toml`.
fn etcd_site(dir: &Path, endpoint: &str, groups: usize) -> PathBuf {
    let text = ap_site(groups, 0, "ap_pace_s = 6\nap_test_pace_allowed = true").replace(
        "[store]\nkind = \"embedded\"\npath = \"t1.profiles.json\"\n",
        &format!(
            "[store]\nkind = \"etcd\"\nendpoints = [\"{endpoint}\"]\nprefix = \"/drain/t1\"\n"
        ),
    );
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("site.toml");
    std::fs::write(&path, text).unwrap();
    path
}

async fn open(site: &Path) -> (Arc<dyn Store>, Arc<dyn HandoverStore>) {
    let config = SiteConfig::load(site).unwrap();
    let s = store::open(&config).await.unwrap();
    let h = s.handover().unwrap();
    (s, h)
}

fn desired(seq: u64) -> (Desired, PlannerRecord) {
    let d = Desired {
        leader: "g1-b".into(),
        from: "g1-a".into(),
        kind: MoveKind::Handover,
        seq,
        attempt: 1,
        at_ms: seq,
        step: 1,
        steps: 1,
        reason: "test".into(),
        planner: "x".into(),
    };
    let r = PlannerRecord {
        node: "x".into(),
        last_move_ms: Some(seq),
        seq,
        done: 1,
        remaining: 0,
    };
    (d, r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_mn_3_one_elected_planner_and_a_lost_lease_writes_no_move() {
    let etcd = tokio::task::block_in_place(|| Etcd::single(ip(68, 11))).expect("etcd");
    let ep = etcd.endpoints()[0].clone();
    let dir = tempfile::tempdir().unwrap();
    let site = etcd_site(dir.path(), &ep, 1);
    let (_s1, a) = open(&site).await;
    let (_s2, b) = open(&site).await;

    let Campaign::Elected(lead) = a.campaign("a").await.unwrap() else {
        panic!("a not elected on an empty store");
    };
    let Campaign::Held { by } = b.campaign("b").await.unwrap() else {
        panic!("two planners elected");
    };
    assert_eq!(by.as_deref(), Some("a"));
    let (d, r) = desired(1);
    assert_eq!(a.publish(&lead, "g1", d, r).await.unwrap(), Published::Done);
    assert_eq!(b.read().await.unwrap().acting.as_deref(), Some("a"));

    // The lease goes (a pause, a partition): the very next write is refused
    // by etcd even before `a` notices, and `a` learns it soon after.
    let mut raw = etcd_client::Client::connect([ep.as_str()], None)
        .await
        .unwrap();
    raw.lease_revoke(lead.fence()).await.unwrap();
    let (d, r) = desired(2);
    assert_eq!(
        a.publish(&lead, "g1", d, r).await.unwrap(),
        Published::NotPlanner
    );
    tokio::time::timeout(Duration::from_secs(5), lead.lost())
        .await
        .expect("a notices its lost lease");
    let Campaign::Elected(lead_b) = b.campaign("b").await.unwrap() else {
        panic!("b not elected after a's lease went");
    };
    let (d, r) = desired(3);
    assert_eq!(
        b.publish(&lead_b, "g1", d, r).await.unwrap(),
        Published::Done
    );
    let st: Arc<HandoverState> = a.read().await.unwrap();
    assert_eq!((st.planner.seq, st.acting.as_deref()), (3, Some("b")));
    // Resigning frees the election at once.
    lead_b.resign().await;
    assert!(matches!(
        a.campaign("a").await.unwrap(),
        Campaign::Elected(_)
    ));
}

/// Desired records in publication order.
async fn moves(h: &Arc<dyn HandoverStore>) -> Vec<(String, Desired)> {
    let st = h.read().await.unwrap();
    let mut m: Vec<_> = st
        .desired
        .iter()
        .map(|(g, d)| (g.clone(), d.clone()))
        .collect();
    m.sort_by_key(|(_, d)| d.seq);
    m
}

fn assert_paced(m: &[(String, Desired)]) {
    for w in m.windows(2) {
        let gap = w[1].1.at_ms - w[0].1.at_ms;
        assert!(gap >= PACE_MS, "R-AP-2: two moves {gap} ms apart: {m:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_serve_planners_one_acts_and_killing_it_hands_over_without_a_double_move() {
    let etcd = tokio::task::block_in_place(|| Etcd::single(ip(69, 11))).expect("etcd");
    let ep = etcd.endpoints()[0].clone();
    let dir = tempfile::tempdir().unwrap();
    let site = etcd_site(&dir.path().join("ops"), &ep, 3);
    let (_store, records) = open(&site).await;
    let (mut a, api_a) = serve(&etcd_site(&dir.path().join("a"), &ep, 3));
    wait_for("a elected", Duration::from_secs(10), || async {
        handover_of(api_a)
            .await
            .filter(|st| st.planner.this_node_acting == Some(true))
    })
    .await;
    let (b, api_b) = serve(&etcd_site(&dir.path().join("b"), &ep, 3));
    let st = wait_for("b stands by", Duration::from_secs(10), || async {
        handover_of(api_b).await
    })
    .await;
    assert_eq!(st.planner.this_node_acting, Some(false));
    assert_eq!(st.planner.acting, Some(api_a.to_string()));
    let config = SiteConfig::load(&site).unwrap();
    let _agents: Vec<Node> = members(&config)
        .iter()
        .map(|(g, m)| agent(&site, g, m))
        .collect();
    wait_for("homes confirmed", Duration::from_secs(15), || async {
        handover_of(api_b).await.filter(all_settled)
    })
    .await;

    cli(
        &site,
        &["profile", "create", "--name", "m", "--server", "srv-a"],
    )
    .await;
    cli(&site, &["profile", "activate", "m"]).await;
    wait_for("first move", Duration::from_secs(10), || async {
        (moves(&records).await.len() == 1).then_some(())
    })
    .await;
    a.kill();
    let done = wait_for("plan done by b", Duration::from_secs(40), || async {
        handover_of(api_b).await.filter(|st| {
            all_settled(st)
                && st
                    .groups
                    .iter()
                    .all(|g| g.desired.ends_with("-b") || g.desired.ends_with("-c"))
        })
    })
    .await;
    assert_eq!(done.planner.acting, Some(api_b.to_string()));
    let m = moves(&records).await;
    let who: Vec<String> = m.iter().map(|(_, d)| d.planner.clone()).collect();
    assert_eq!(
        who,
        [api_a.to_string(), api_b.to_string(), api_b.to_string()]
    );
    assert_paced(&m);
    let handoff = m[1].1.at_ms - m[0].1.at_ms;
    eprintln!(
        "moves by a then b, ms apart: {:?}",
        m.windows(2)
            .map(|w| w[1].1.at_ms - w[0].1.at_ms)
            .collect::<Vec<_>>()
    );
    assert!(
        handoff < PACE_MS + 3_000,
        "b kept the pace from a's last move: {handoff} ms"
    );

    lift_and_go_home(&site, api_b, &records, m).await;
    assert!(terminate(b).is_some_and(|s| s.success()));
}

/// Lift: the acting planner takes every group home, at the pace from the
/// moves `before`.
async fn lift_and_go_home(
    site: &Path,
    api: std::net::SocketAddr,
    records: &Arc<dyn HandoverStore>,
    before: Vec<(String, Desired)>,
) {
    cli(site, &["profile", "deactivate", "m"]).await;
    wait_for("home again", Duration::from_secs(40), || async {
        handover_of(api)
            .await
            .filter(|st| all_settled(st) && st.groups.iter().all(|g| g.desired == g.home))
    })
    .await;
    let mut all = before;
    all.extend(moves(records).await);
    assert!(all[3..].iter().all(|(_, d)| d.kind == MoveKind::Takeover));
    assert_paced(&all);
}
