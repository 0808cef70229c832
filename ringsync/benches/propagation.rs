//! R-MN-1 measured: how long a profile change takes from its acknowledgement
//! to being applied on the last of three nodes, and what an idle node costs
//! etcd. Real etcd (a three-member cluster on loopback), real clients: each
//! node is an `EtcdStore` with its own connection to its own member, a
//! `DrainState` following it, and the registry publisher a gate runs.
//!
//! ```sh
//! cargo bench -p ringsync --bench propagation            # 100 changes, 60 s idle
//! cargo bench -p ringsync --bench propagation -- 20 10   # quicker: 20 changes, 10 s idle
//! ```

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringsync::node::{NodeIdentity, NodeRole};
use ringsync::profile::{NewProfile, ProfileState};
use ringsync::state::DrainState;
use ringsync::store::{EtcdStore, Store};
use ringsync::work::{self, InstanceWork, NodeKind, WorkReport};
use ringsync::SiteConfig;
use testbed::metrics::Metrics;
use testbed::Etcd;
use tokio_util::sync::CancellationToken;

const SITE: &str =
    "[site]\nname = \"bench\"\n[[server]]\nname = \"srv-a\"\n[[server]]\nname = \"srv-b\"\n\
[[instance]]\nid = \"sg-a\"\nservice = \"sg\"\nserver = \"srv-a\"\nsip = \"127.0.0.1:5071\"\n\
[[instance]]\nid = \"sg-b\"\nservice = \"sg\"\nserver = \"srv-b\"\nsip = \"127.0.0.1:5072\"\n";
const PREFIX: &str = "/drain/bench";

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let changes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    let idle_s: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(60);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let ips: Vec<IpAddr> = (11..=13)
        .map(|h| format!("127.0.0.{h}").parse().unwrap())
        .collect();
    let etcd = Etcd::cluster(&ips).expect("etcd cluster (Debian etcd-server)");
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(run(&etcd, dir.path(), changes, idle_s));
}

async fn run(etcd: &Etcd, dir: &Path, changes: usize, idle_s: u64) {
    let path = dir.join("site.toml");
    std::fs::write(&path, SITE).unwrap();
    let config = Arc::new(SiteConfig::load(&path).unwrap());
    let all = etcd.endpoints();
    let open = |eps: Vec<String>, name: &str| {
        let cache = dir.join(format!("{name}.cache"));
        EtcdStore::open_with(config.clone(), eps, PREFIX.into(), cache)
    };
    let writer = open(all.clone(), "writer").await.unwrap();
    writer
        .create(NewProfile {
            name: "p".into(),
            servers: vec!["srv-a".into()],
            ..Default::default()
        })
        .await
        .unwrap();

    // Three nodes, each on its own member, as a gate runs them.
    let shutdown = CancellationToken::new();
    let mut nodes = Vec::new();
    for (k, member) in all.iter().enumerate() {
        let store: Arc<dyn Store> =
            Arc::new(open(vec![member.clone()], &format!("n{k}")).await.unwrap());
        let state = DrainState::new(config.clone());
        state.follow(store.clone(), shutdown.clone());
        let id = NodeIdentity {
            node: format!("n{k}"),
            role: NodeRole::Gate,
            address: format!("127.0.0.1:{}", 9100 + k),
            started_ms: work::now_ms(),
        };
        let node = id.node.clone();
        ringsync::publish::spawn(
            store.clone(),
            state.clone(),
            id,
            move || Some(idle_report(&node)),
            shutdown.clone(),
        );
        nodes.push(state);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    // === propagation ===
    let mut last_node = Vec::with_capacity(changes);
    let mut end_to_end = Vec::with_capacity(changes);
    for i in 0..changes {
        let mut rx: Vec<_> = nodes.iter().map(|s| s.subscribe()).collect();
        let state = if i % 2 == 0 {
            ProfileState::Active
        } else {
            ProfileState::Inactive
        };
        let want = writer.list().await.unwrap().revision + 1;
        let waits: Vec<_> = rx
            .iter_mut()
            .map(|r| {
                let mut r = r.clone();
                tokio::spawn(async move {
                    loop {
                        if r.borrow_and_update().revision() >= want {
                            return Instant::now();
                        }
                        if r.changed().await.is_err() {
                            return Instant::now();
                        }
                    }
                })
            })
            .collect();
        let sent = Instant::now();
        writer.set_state("p", state).await.unwrap();
        let acked = Instant::now();
        let mut latest = sent;
        for w in waits {
            latest = latest.max(w.await.unwrap());
        }
        // A node may apply before the writer has read its own answer: 0.
        last_node.push(latest.saturating_duration_since(acked));
        end_to_end.push(latest.saturating_duration_since(sent));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    last_node.sort();
    end_to_end.sort();
    let at = |v: &[Duration], q: f64| testbed::stats::percentile(v, q).unwrap_or_default();
    let pct = |p: f64| at(&last_node, p);
    let e2e = |p: f64| at(&end_to_end, p);

    // === idle load ===
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = grpc_messages(etcd);
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(idle_s)).await;
    let after = grpc_messages(etcd);
    let secs = t0.elapsed().as_secs_f64();
    shutdown.cancel();

    println!("| measure | value |");
    println!("|---|---|");
    println!("| changes | {changes} (activate/deactivate, one after another) |");
    println!(
        "| ack → applied on the last of 3 nodes, p50 | {:.1} ms |",
        ms(pct(0.50))
    );
    println!(
        "| ack → applied on the last of 3 nodes, p99 | {:.1} ms |",
        ms(pct(0.99))
    );
    println!(
        "| ack → applied on the last of 3 nodes, max | {:.1} ms |",
        ms(pct(1.0))
    );
    println!(
        "| request sent → applied on the last of 3 nodes (write + propagation), p50 / p99 | {:.1} / {:.1} ms |",
        ms(e2e(0.50)),
        ms(e2e(0.99))
    );
    println!("| idle window | {secs:.0} s |");
    for (method, n) in &after {
        let d = n - before.get(method).copied().unwrap_or(0.0);
        if d > 0.0 {
            println!(
                "| idle gRPC messages received, {method} | {:.3} /s for 3 nodes |",
                d / secs
            );
        }
    }
    let total: f64 = after.values().sum::<f64>() - before.values().sum::<f64>();
    println!(
        "| **idle load per node** | **{:.3} requests/s** |",
        total / secs / 3.0
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `grpc_server_msg_received_total` per method, summed over the members.
fn grpc_messages(etcd: &Etcd) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for i in 0..etcd.len() {
        let Some(text) = etcd.metrics(i) else {
            continue;
        };
        for line in text.lines() {
            if !line.starts_with("grpc_server_msg_received_total{") {
                continue;
            }
            let method = line
                .split("grpc_method=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("?")
                .to_owned();
            if let Some(v) = Metrics::new(line).total("grpc_server_msg_received_total") {
                *out.entry(method).or_insert(0.0) += v;
            }
        }
    }
    out
}

fn idle_report(node: &str) -> WorkReport {
    let instances = ["sg-a", "sg-b"]
        .iter()
        .map(|id| (id.to_string(), InstanceWork::default()))
        .collect();
    WorkReport {
        site_hash: String::new(),
        backups: Vec::new(),
        run: None,
        site: "bench".into(),
        node: node.into(),
        kind: NodeKind::Gate,
        scope: "bench".into(),
        started_ms: 0,
        generated_ms: work::now_ms(),
        revision: 0,
        generation: 0,
        instances,
    }
}
