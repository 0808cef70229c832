//! The node registry on a real etcd (R-ST-1, R-ST-3): nodes publish their
//! work under a lease; a node that stops cleanly with work left, or whose
//! lease expires, is named with the reason and keeps its instances
//! `draining`; an idle node writes nothing but keep-alives.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::etcd::{eventually, ip, node};
use ringsync::node::{Liveness, NodeIdentity, NodeRole};
use ringsync::profile::{NewProfile, ProfileState};
use ringsync::state::DrainState;
use ringsync::store::Store;
use ringsync::view::InstanceState;
use ringsync::work::{self, InstanceWork, NodeKind, WorkCounts, WorkReport};
use testbed::Etcd;
use tokio_util::sync::CancellationToken;

fn report(node: &str, dialogs: u64) -> WorkReport {
    let mut instances = BTreeMap::new();
    for id in ["sg-a", "sg-b", "sg-c"] {
        instances.insert(
            id.to_owned(),
            InstanceWork {
                counts: WorkCounts {
                    dialogs: if id == "sg-a" { dialogs } else { 0 },
                    ..Default::default()
                },
                ..Default::default()
            },
        );
    }
    WorkReport {
        site_hash: String::new(),
        backups: Vec::new(),
        run: None,
        site: "t1".into(),
        node: node.into(),
        kind: NodeKind::Gate,
        scope: "test".into(),
        started_ms: 1,
        generated_ms: work::now_ms(),
        revision: crate::common::STAND_IN_REVISION,
        generation: 0,
        instances,
    }
}

fn identity(node: &str) -> NodeIdentity {
    NodeIdentity {
        node: node.into(),
        role: NodeRole::Gate,
        address: format!("{node}:9091"),
        started_ms: 1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_st_3_nodes_publish_work_and_are_never_silently_dropped() {
    let etcd = tokio::task::block_in_place(|| Etcd::single(ip(66, 11))).expect("etcd");
    let eps = etcd.endpoints();
    let dir = tempfile::tempdir().unwrap();
    let prefix = "/t/nodes";
    let config = crate::common::etcd::etcd_site(dir.path(), &eps, prefix);
    let admin = node(&config, &eps, prefix, dir.path().join("admin.cache"))
        .await
        .unwrap();
    drain_a(&admin).await;

    // Three gate nodes, each with its own store connection and work.
    let mut nodes = Vec::new();
    for (name, dialogs) in [("g1", 2u64), ("g2", 0), ("g3", 1)] {
        let store: Arc<dyn Store> = Arc::new(
            node(
                &config,
                &eps,
                prefix,
                dir.path().join(format!("{name}.cache")),
            )
            .await
            .unwrap(),
        );
        let state = DrainState::new(config.clone());
        let stop = CancellationToken::new();
        state.follow(store.clone(), stop.clone());
        let work = Arc::new(AtomicU64::new(dialogs));
        let w = work.clone();
        let publisher = ringsync::publish::spawn(
            store.clone(),
            state.clone(),
            identity(name),
            move || Some(report(name, w.load(Ordering::Relaxed))),
            stop.clone(),
        );
        nodes.push((name, store, stop, work, publisher));
    }
    let status = |entries: &[ringsync::node::NodeEntry]| {
        let state = DrainState::new(config.clone());
        state.set_profiles(admin.watch().borrow().clone());
        ringsync_ops::sum::sum(
            &state.view(),
            &ringsync::node::outcomes(entries, work::now_ms()),
        )
    };
    eventually("three live nodes", Duration::from_secs(5), || async {
        let e = admin.nodes().await.unwrap().unwrap();
        e.len() == 3
            && e.iter()
                .all(|n| matches!(n.liveness, Liveness::Live { .. }))
    })
    .await;
    let s = status(&admin.nodes().await.unwrap().unwrap());
    assert_eq!(s[0].state, InstanceState::Draining);
    assert_eq!(s[0].work, Some(3), "2 + 0 + 1 across the nodes");

    // The calls end on g1 and g3: drained only when every node says zero.
    nodes[0].3.store(0, Ordering::Relaxed);
    eventually(
        "one node still holds work",
        Duration::from_secs(3),
        || async { status(&admin.nodes().await.unwrap().unwrap())[0].work == Some(1) },
    )
    .await;
    nodes[2].3.store(0, Ordering::Relaxed);
    eventually("drained", Duration::from_secs(3), || async {
        status(&admin.nodes().await.unwrap().unwrap())[0].state == InstanceState::Drained
    })
    .await;

    // g2 stops cleanly holding work: named as departed; the instance is not drained.
    nodes[1].3.store(5, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    nodes[1].2.cancel();
    let _ = (&mut nodes[1].4).await;
    let entries = admin.nodes().await.unwrap().unwrap();
    let g2 = entries.iter().find(|e| e.id.node == "g2").unwrap();
    assert!(matches!(g2.liveness, Liveness::Left { departure } if departure.work == 5));
    let s = status(&entries);
    assert_eq!(s[0].state, InstanceState::Draining);
    assert!(
        s[0].unknown
            .iter()
            .any(|u| u.contains("g2") && u.contains("stopped")),
        "{:?}",
        s[0].unknown
    );
    assert!(admin.forget_node("g2").await.unwrap());
    assert!(!admin.forget_node("g2").await.unwrap());

    // g3 dies without a word (its tasks and connection gone): after the
    // lease TTL it is named as expired, and nothing is drained on its word.
    let (_, store3, stop3, _, publisher3) = nodes.pop().unwrap();
    publisher3.abort();
    let _ = publisher3.await;
    stop3.cancel(); // ends its follower, the last holder of its store
    drop(store3);
    eventually("g3's lease expires", Duration::from_secs(15), || async {
        admin
            .nodes()
            .await
            .unwrap()
            .unwrap()
            .iter()
            .any(|e| e.id.node == "g3" && e.liveness == Liveness::Expired)
    })
    .await;
    let s = status(&admin.nodes().await.unwrap().unwrap());
    assert_eq!(s[0].state, InstanceState::Draining);
    assert!(s[0]
        .unknown
        .iter()
        .any(|u| u.contains("g3") && u.contains("lease expired")));
}

/// `ringsync status --json` (the binary) on `site`: sg-a's state, work and
/// unknown reasons.
async fn sg_a(site: &std::path::Path) -> serde_json::Value {
    let path = site.to_owned();
    let out = tokio::task::spawn_blocking(move || {
        crate::common::served::at(&path, &["--json", "status"])
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == "sg-a")
        .unwrap()
        .clone()
}

/// Issue 40 (seed 2026's chaos hour): a gate's published record lags its
/// book by up to `publish::CHECK_EVERY` plus a write; `status` summing
/// only the record said sg-a `drained` while it held a call set up since
/// (every sg was in the drain zone, so new calls still reached it, R-SG-2).
/// Here the record says 0 and the node's admin address says 1: status asks
/// the live node now. A node that cannot be asked now vouches for nothing.
/// Addresses: etcd on 127.0.76.11.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_st_3_status_asks_live_nodes_now_a_lagging_record_never_says_drained() {
    let etcd = tokio::task::block_in_place(|| Etcd::single(ip(76, 11))).expect("etcd");
    let eps = etcd.endpoints();
    let dir = tempfile::tempdir().unwrap();
    let prefix = "/t/lag";
    let config = crate::common::etcd::etcd_site(dir.path(), &eps, prefix);
    let site = dir.path().join("site.toml");
    let admin = node(&config, &eps, prefix, dir.path().join("admin.cache"))
        .await
        .unwrap();
    drain_a(&admin).await;
    // The gate's book now: a call on sg-a, set up after its last record.
    let (addr, served) = crate::common::stand_in(report("g1", 1)).await;
    let store: Arc<dyn Store> = Arc::new(
        node(&config, &eps, prefix, dir.path().join("g1.cache"))
            .await
            .unwrap(),
    );
    let state = DrainState::new(config.clone());
    let stop = CancellationToken::new();
    state.follow(store.clone(), stop.clone());
    let publisher = ringsync::publish::spawn(
        store.clone(),
        state.clone(),
        NodeIdentity {
            address: addr.to_string(),
            ..identity("g1")
        },
        || Some(report("g1", 0)),
        stop.clone(),
    );
    eventually("g1 published", Duration::from_secs(5), || async {
        admin
            .nodes()
            .await
            .unwrap()
            .unwrap()
            .iter()
            .any(|n| matches!(&n.liveness, Liveness::Live { record } if record.report.is_some()))
    })
    .await;
    let a = sg_a(&site).await;
    assert_eq!(
        (&a["state"], &a["work"]),
        (&"draining".into(), &1.into()),
        "{a}"
    );

    // Its address answers for another node: the record's 0 vouches for nothing.
    served.lock().unwrap().node = "g9".into();
    let a = sg_a(&site).await;
    assert_eq!(a["state"], "draining", "{a}");
    assert!(a["work"].is_null(), "{a}");
    assert!(
        a["unknown"].to_string().contains("was not asked now"),
        "{a}"
    );
    stop.cancel();
    let _ = publisher.await;
}

/// The profile `drain-a`, active: srv-a in the drain zone.
async fn drain_a(admin: &impl Store) {
    admin
        .create(NewProfile {
            name: "drain-a".into(),
            description: String::new(),
            servers: vec!["srv-a".into()],
            state: ProfileState::Active,
        })
        .await
        .unwrap();
}
