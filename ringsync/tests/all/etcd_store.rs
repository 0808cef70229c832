//! The etcd store against a real etcd (Debian `etcd-server`) on loopback:
//! R-PR-1 unchanged, R-PR-2 across nodes, compare-and-swap writes (one
//! success and one conflict, never a lost update), fail-static with
//! resync (R-MN-2), re-list after a compaction, start from the view cache.

use ringsync::store::{BackendError, Refusal};
use std::sync::Arc;
use std::time::Duration;

use crate::etcd_common::{eventually, ip, node};
use ringsync::profile::{NewProfile, ProfilePatch, ProfileState};
use ringsync::state::DrainState;
use ringsync::store::{EtcdStore, Store, StoreError};
use ringsync::SiteConfig;
use testbed::{Etcd, TcpPartition};
use tokio::sync::Barrier;
use tokio_util::sync::CancellationToken;

fn new(name: &str, servers: &[&str]) -> NewProfile {
    NewProfile {
        name: name.into(),
        description: String::new(),
        servers: servers.iter().map(|s| s.to_string()).collect(),
        state: ProfileState::Inactive,
    }
}

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// One etcd on `127.0.<net>.11` and the common test site on it under
/// `prefix`, its files (site, view caches) in a temp dir.
struct OnEtcd {
    etcd: Etcd,
    eps: Vec<String>,
    dir: tempfile::TempDir,
    prefix: &'static str,
    config: Arc<SiteConfig>,
}

impl OnEtcd {
    fn start(net: u8, prefix: &'static str) -> OnEtcd {
        let etcd = blocking(|| Etcd::single(ip(net, 11))).expect("etcd");
        let eps = etcd.endpoints();
        let dir = tempfile::tempdir().unwrap();
        let config = crate::etcd_common::etcd_site(dir.path(), &eps, prefix);
        OnEtcd {
            etcd,
            eps,
            dir,
            prefix,
            config,
        }
    }

    /// A node reaching etcd at `eps`, its view cache `cache` in the dir.
    async fn open(&self, eps: &[String], cache: &str) -> Result<EtcdStore, StoreError> {
        let cache = self.dir.path().join(cache);
        node(&self.config, eps, self.prefix, cache).await
    }

    /// A node on the etcd, its view cache `cache` in the dir.
    async fn node(&self, cache: &str) -> EtcdStore {
        self.open(&self.eps, cache).await.unwrap()
    }

    /// `n` nodes, each with its own view cache.
    async fn nodes(&self, n: usize) -> Vec<Arc<EtcdStore>> {
        let mut nodes = Vec::new();
        for i in 0..n {
            nodes.push(Arc::new(self.node(&format!("{i}.cache")).await));
        }
        nodes
    }

    /// A drain state following `store` (as a node's does) until the token
    /// is cancelled.
    fn follow(&self, store: Arc<dyn Store>) -> (Arc<DrainState>, CancellationToken) {
        let state = DrainState::new(self.config.clone());
        let shutdown = CancellationToken::new();
        // Detached: it ends with `shutdown`.
        drop(state.follow(store, shutdown.clone()));
        (state, shutdown)
    }
}

/// Runs `write(i, node)` for every node at one instant (they wait at one
/// barrier first); the results in the nodes' order.
async fn at_once<T, F, Fut>(nodes: &[Arc<EtcdStore>], write: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize, Arc<EtcdStore>) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(nodes.len()));
    let mut tasks = Vec::new();
    for (i, s) in nodes.iter().enumerate() {
        let (barrier, write) = (barrier.clone(), write(i, s.clone()));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            write.await
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    results
}

/// Waits until `state` says its store is stale.
async fn stale(state: &DrainState) {
    eventually("stale", Duration::from_secs(5), || {
        let f = state.freshness();
        async move { f.is_stale() }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audited_writes_and_stale_revisions_on_etcd() {
    let site = OnEtcd::start(68, "/t/audit");
    crate::common::audited_writes(&site.node("a.cache").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_pr_1_and_r_pr_2_across_nodes() {
    let site = OnEtcd::start(61, "/t/crud");
    let (a, b) = (site.node("a.cache").await, site.node("b.cache").await);
    assert!(a.list().await.unwrap().profiles.is_empty());

    // R-PR-1: an unknown server is refused and nothing is stored.
    let e = a.create(new("bad", &["srv-a", "srv-x"])).await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Refused(Refusal::UnknownServer { server, .. }) if server == "srv-x"),
        "{e}"
    );
    assert_eq!(a.list().await.unwrap().revision, 0);

    let p = a.create(new("maint-a", &["srv-a"])).await.unwrap();
    assert!(matches!(
        b.create(new("maint-a", &["srv-b"])).await,
        Err(StoreError::Refused(Refusal::DuplicateName { .. }))
    ));
    // R-PR-2: the other node sees the activation without restarting.
    let (state, shutdown) = site.follow(Arc::new(b));
    a.set_state("maint-a", ProfileState::Active).await.unwrap();
    eventually(
        "node b applies the activation",
        Duration::from_secs(2),
        || {
            let v = state.view();
            async move { v.is_draining(0) }
        },
    )
    .await;
    assert_eq!(state.view().revision(), 2);
    let u = a
        .update(
            &p.id,
            ProfilePatch {
                servers: Some(vec!["srv-a".into(), "srv-b".into()]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(u.servers, ["srv-a", "srv-b"]);
    a.delete(&p.id).await.unwrap();
    assert!(matches!(
        a.delete(&p.id).await,
        Err(StoreError::Refused(Refusal::NotFound { .. }))
    ));
    eventually("node b applies the delete", Duration::from_secs(2), || {
        let v = state.view();
        async move { !v.is_draining(0) && v.revision() == 4 }
    })
    .await;
    assert!(!state.freshness().is_stale());
    assert_eq!(state.freshness().store_revision, {
        // The store revision is etcd's, not the set's.
        let f = state.freshness().store_revision;
        assert!(f >= 4, "{f}");
        f
    });
    shutdown.cancel();
}

/// Eight writers change one profile at the same instant: each gets either
/// success or a clear conflict, and every success is in the history (the
/// set's revision counts them all: no lost update). Writers of different
/// profiles at the same instant all succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_one_wins_the_others_conflict() {
    let site = OnEtcd::start(62, "/t/cas");
    let nodes = site.nodes(8).await;
    nodes[0].create(new("shared", &["srv-a"])).await.unwrap();
    for (i, s) in nodes.iter().enumerate() {
        s.create(new(&format!("own-{i}"), &["srv-b"]))
            .await
            .unwrap();
    }
    let before = nodes[0].list().await.unwrap().revision;

    let results = at_once(&nodes, |i, s| async move {
        let patch = ProfilePatch {
            description: Some(format!("writer {i}")),
            ..Default::default()
        };
        s.update("shared", patch).await
    })
    .await;
    let (mut ok, mut conflicts) = (Vec::new(), 0);
    for (i, result) in results.into_iter().enumerate() {
        match result {
            Ok(p) => {
                assert_eq!(p.description, format!("writer {i}"));
                ok.push(i);
            }
            Err(StoreError::Refused(Refusal::Conflict { id, .. })) => {
                assert!(id.starts_with("p-"), "{id}");
                conflicts += 1;
            }
            Err(e) => panic!("writer {i}: unexpected {e}"),
        }
    }
    assert!(!ok.is_empty(), "someone wins");
    assert!(
        conflicts >= 1,
        "eight writers at one instant: at least one conflict"
    );
    let after = nodes[0].list().await.unwrap();
    assert_eq!(
        after.revision - before,
        ok.len() as u64,
        "every acknowledged write is in the history, nothing else"
    );
    let last = &after.find("shared").unwrap().description;
    assert!(ok.iter().any(|i| *last == format!("writer {i}")), "{last}");

    // Different profiles at one instant: no conflict, all applied.
    let results = at_once(&nodes, |i, s| async move {
        s.set_state(&format!("own-{i}"), ProfileState::Active).await
    })
    .await;
    for result in results {
        result.expect("writes to different profiles never conflict");
    }
    let set = nodes[0].list().await.unwrap();
    assert_eq!(set.active_count(), 8);
    assert_eq!(set.revision, after.revision + 8);
}

/// R-PR-4: eight operators make the same change with the same revision at
/// one instant (`profile deactivate shared --revision N`): one is made and
/// audited; every other is refused as stale and audited as refused. Found
/// by `testbed chaos --seed 2026 --minutes 10`: two operators racing
/// `deactivate chaos-a --revision 6` were both told it was made
/// (`"changed": true`, revision 8) and the audit log held it once, since a
/// writer that lost the swap to an identical document took it for its own
/// earlier attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_pr_4_the_same_change_at_once_is_made_once_and_the_others_are_stale() {
    use ringsync::store::{Actor, AuditQuery, Op, WriteRequest};
    let site = OnEtcd::start(75, "/t/same");
    let nodes = site.nodes(8).await;
    nodes[0].create(new("shared", &["srv-a"])).await.unwrap();
    let mut made = 0;
    for round in 0..6 {
        let state = if round % 2 == 0 {
            ProfileState::Active
        } else {
            ProfileState::Inactive
        };
        let set = nodes[0].list().await.unwrap();
        let rev = set.find("shared").unwrap().revision;
        let results = at_once(&nodes, |_, s| {
            let op = Op::SetState {
                id: "shared".into(),
                state,
            };
            let audit = Some(Actor::local().record_op(&op, Some(rev)));
            async move {
                s.write(WriteRequest {
                    op,
                    expect: Some(rev),
                    audit,
                })
                .await
            }
        })
        .await;
        let (mut ok, mut stale) = (0, 0);
        for result in results {
            match result {
                Ok(w) => {
                    assert!(w.committed.changed, "round {round}: {w:?}");
                    ok += 1;
                }
                Err(StoreError::Refused(Refusal::Stale { .. })) => stale += 1,
                Err(e) => panic!("round {round}: unexpected {e}"),
            }
        }
        assert_eq!(
            (ok, stale),
            (1, 7),
            "round {round}: one made, the others stale"
        );
        made += ok;
    }
    let log = nodes[0]
        .audit_log(AuditQuery {
            limit: Some(1000),
            ..Default::default()
        })
        .await
        .unwrap();
    let done = log
        .records
        .iter()
        .filter(|r| r.status == 200 && matches!(r.action.as_str(), "activate" | "deactivate"))
        .count();
    assert_eq!(done, made, "each change made is audited once");
}

/// R-MN-2: etcd stops; the node keeps its view, says it is stale and since
/// when; etcd returns; the node is current again without re-applying
/// anything, and follows the next change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_mn_2_fail_static_then_resync_once() {
    let mut site = OnEtcd::start(63, "/t/static");
    let writer = site.node("w.cache").await;
    let (state, shutdown) = site.follow(Arc::new(site.node("f.cache").await));
    writer.create(new("m", &["srv-a"])).await.unwrap();
    writer.set_state("m", ProfileState::Active).await.unwrap();
    eventually("applied", Duration::from_secs(2), || {
        let v = state.view();
        async move { v.is_draining(0) }
    })
    .await;
    let (updates, generation) = (state.profile_updates(), state.view().generation());

    blocking(|| site.etcd.stop());
    stale(&state).await;
    let f = state.freshness();
    assert!(f
        .describe(ringsync::work::now_ms())
        .starts_with("store: stale since "));
    assert!(matches!(
        writer.set_state("m", ProfileState::Inactive).await,
        Err(StoreError::Backend(BackendError::Unavailable { .. }))
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(state.view().is_draining(0), "fail-static: the drain holds");
    assert_eq!(state.view().generation(), generation, "no view change");

    blocking(|| site.etcd.start()).expect("etcd back");
    eventually("fresh again", Duration::from_secs(8), || {
        let f = state.freshness();
        async move { !f.is_stale() }
    })
    .await;
    assert_eq!(state.profile_updates(), updates, "nothing applied twice");
    writer.set_state("m", ProfileState::Inactive).await.unwrap();
    eventually("next change followed", Duration::from_secs(2), || {
        let v = state.view();
        async move { !v.is_draining(0) }
    })
    .await;
    assert_eq!(state.profile_updates(), updates + 1);
    shutdown.cancel();
}

/// The node is cut off (a partition: etcd stays up for others) while other
/// writers change the profiles and compact the history past where it left
/// off: on reconnect it cannot resume, so it lists again, and ends current.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_during_a_watch_relists() {
    let site = OnEtcd::start(64, "/t/compact");
    let relay = TcpPartition::start((ip(64, 21), 0).into(), site.etcd.client_addr(0)).unwrap();
    let via = vec![format!("http://{}", relay.addr())];
    let writer = site.node("w.cache").await;
    let cut_off = Arc::new(site.open(&via, "n.cache").await.unwrap());
    let (state, shutdown) = site.follow(cut_off.clone());
    writer.create(new("m", &["srv-a"])).await.unwrap();
    eventually("created", Duration::from_secs(2), || {
        let v = state.view();
        async move { v.revision() == 1 }
    })
    .await;

    relay.cut();
    stale(&state).await;
    writer.set_state("m", ProfileState::Active).await.unwrap();
    writer.create(new("n", &["srv-b"])).await.unwrap();
    writer.set_state("n", ProfileState::Active).await.unwrap();
    let mut client = etcd_client::Client::connect(&site.eps, None).await.unwrap();
    let rev = client
        .get("/t/compact/profiles", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    client.compact(rev, None).await.unwrap();
    assert_eq!(cut_off.relists(), 0);

    relay.restore();
    eventually("current after re-listing", Duration::from_secs(8), || {
        let (v, f) = (state.view(), state.freshness());
        async move { v.revision() == 4 && v.is_draining(0) && v.is_draining(1) && !f.is_stale() }
    })
    .await;
    assert_eq!(cut_off.relists(), 1);
    shutdown.cancel();
}

/// A node restarted while etcd is down starts from its view cache and says
/// so; a node without a cache refuses to start with an empty view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_during_outage_starts_from_the_cache() {
    let mut site = OnEtcd::start(65, "/t/cache");
    let cache = site.dir.path().join("node.cache");
    {
        let n = site.node("node.cache").await;
        n.create(new("m", &["srv-a"])).await.unwrap();
        n.set_state("m", ProfileState::Active).await.unwrap();
        let c = cache.clone();
        eventually("cache written", Duration::from_secs(2), move || {
            let c = c.clone();
            async move {
                ringsync::store::cache::load(&c)
                    .ok()
                    .flatten()
                    .is_some_and(|v| v.profiles.active_count() == 1)
            }
        })
        .await;
    }
    blocking(|| site.etcd.stop());

    let n = site
        .open(&site.eps, "node.cache")
        .await
        .expect("starts from the cache");
    let f = n.freshness().borrow().clone();
    assert!(f.is_stale());
    let said = f.describe(ringsync::work::now_ms());
    assert!(
        said.contains("view cache") && said.contains("node.cache"),
        "{said}"
    );
    assert_eq!(n.watch().borrow().active_count(), 1, "the drain holds");

    let e = site
        .open(&site.eps, "none.cache")
        .await
        .err()
        .expect("no cache: refuses");
    assert!(e.to_string().contains("no view cache"), "{e}");

    blocking(|| site.etcd.start()).expect("etcd back");
    let mut fresh = n.freshness();
    eventually("confirmed by etcd", Duration::from_secs(8), || {
        let f = fresh.borrow_and_update().clone();
        async move { !f.is_stale() && f.from_cache.is_none() }
    })
    .await;
}
