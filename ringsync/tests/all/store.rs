//! Embedded store: R-PR-1, R-PR-2, R-PR-4.

use ringsync::store::{BackendError, Refusal};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::TestSite;
use ringsync::profile::{NewProfile, ProfilePatch, ProfileSet, ProfileState};
use ringsync::state::DrainState;
use ringsync::store::{self, Store, StoreError};
use ringsync::view::InstanceState;
use tokio_util::sync::CancellationToken;

fn new(name: &str, servers: &[&str]) -> NewProfile {
    NewProfile {
        name: name.into(),
        description: "test".into(),
        servers: servers.iter().map(|s| s.to_string()).collect(),
        state: ProfileState::Inactive,
    }
}

#[tokio::test]
async fn audited_writes_and_stale_revisions_on_the_embedded_store() {
    let site = TestSite::new();
    let s = store::open(&site.config).await.unwrap();
    crate::common::audited_writes(s.as_ref()).await;
    let log = std::fs::read_to_string(site.dir.path().join("t1.profiles.json.audit.jsonl"));
    assert_eq!(
        log.unwrap().lines().count(),
        5,
        "one line a record, next to the store"
    );
}

#[tokio::test]
async fn missing_file_is_an_empty_set_created_on_first_write() {
    let site = TestSite::new();
    let s = store::open(&site.config).await.unwrap();
    assert_eq!(*s.list().await.unwrap(), ProfileSet::default());
    assert!(!site.store_path().exists());
    let p = s.create(new("maint-a", &["srv-a"])).await.unwrap();
    assert!(p.id.starts_with("p-") && p.id.len() == 10, "{}", p.id);
    let on_disk: ProfileSet =
        serde_json::from_slice(&std::fs::read(site.store_path()).unwrap()).unwrap();
    assert_eq!(on_disk.revision, 1);
    assert_eq!(on_disk.profiles, vec![p]);
}

#[tokio::test]
async fn crud_by_id_or_name_each_audited_r_pr_4() {
    let site = TestSite::new();
    let s = store::open(&site.config).await.unwrap();
    let p = s.create(new("maint-a", &["srv-a"])).await.unwrap();
    let a = s.set_state("maint-a", ProfileState::Active).await.unwrap();
    assert_eq!(a.state, ProfileState::Active);
    let patch = ProfilePatch {
        name: Some("maint-ab".into()),
        servers: Some(vec!["srv-a".into(), "srv-b".into()]),
        ..Default::default()
    };
    let u = s.update(&p.id, patch).await.unwrap();
    assert_eq!((u.name.as_str(), u.servers.len()), ("maint-ab", 2));
    assert!(matches!(
        s.create(new("maint-ab", &["srv-c"])).await,
        Err(StoreError::Refused(Refusal::DuplicateName { .. }))
    ));
    let d = s.delete("maint-ab").await.unwrap();
    assert_eq!(d.id, p.id);
    assert!(matches!(
        s.delete(&p.id).await,
        Err(StoreError::Refused(Refusal::NotFound { .. }))
    ));
    assert_eq!(s.list().await.unwrap().revision, 4);

    // R-PR-4: the store's own create/update/delete/set_state are audited
    // too, by this process's OS user, refusals included.
    let page = s.audit_log(store::AuditQuery::default()).await.unwrap();
    let got = crate::common::actions(&page);
    assert_eq!(
        got,
        [
            ("create", 201),
            ("activate", 200),
            ("update", 200),
            ("create", 409),
            ("delete", 200),
            ("delete", 404)
        ]
    );
    let me = store::Actor::local();
    assert!(
        page.records
            .iter()
            .all(|r| r.who == me.who && r.from == "local"),
        "{:?}",
        page.records
    );
}

#[tokio::test]
async fn r_pr_1_unknown_server_refused_nothing_stored() {
    let site = TestSite::new();
    let s = store::open(&site.config).await.unwrap();
    let e = s
        .create(new("bad", &["srv-a", "srv-zz"]))
        .await
        .unwrap_err();
    assert!(e.is_client_error());
    assert!(e.to_string().contains("unknown server `srv-zz`"), "{e}");
    assert!(!site.store_path().exists(), "nothing written");
    s.create(new("good", &["srv-a"])).await.unwrap();
    let before = std::fs::read(site.store_path()).unwrap();
    let patch = ProfilePatch {
        servers: Some(vec!["srv-zz".into()]),
        ..Default::default()
    };
    assert!(s.update("good", patch).await.is_err());
    assert!(s.create(new("empty", &[])).await.is_err());
    assert_eq!(
        std::fs::read(site.store_path()).unwrap(),
        before,
        "file unchanged"
    );
}

#[test]
fn r_pr_4_concurrent_writers_lose_nothing() {
    // 8 threads, each with its own runtime and its own store handle (as
    // separate processes would have), 20 creates each.
    let site = TestSite::new();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let config = site.config.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Runtime::new().unwrap();
                rt.block_on(async move {
                    let s = store::open(&config).await.unwrap();
                    for i in 0..20 {
                        s.create(new(&format!("t{t}-{i}"), &["srv-b"]))
                            .await
                            .unwrap();
                    }
                })
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let set: ProfileSet =
        serde_json::from_slice(&std::fs::read(site.store_path()).unwrap()).unwrap();
    assert_eq!(set.profiles.len(), 160);
    assert_eq!(set.revision, 160);
    let mut ids: Vec<_> = set.profiles.iter().map(|p| &p.id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 160, "ids unique");
}

#[tokio::test]
async fn r_pr_4_malformed_file_is_a_clear_error_and_is_not_overwritten() {
    let site = TestSite::new();
    let garbage = b"{ \"revision\": 3, \"profiles\": [ {\"id\": ";
    std::fs::write(site.store_path(), garbage).unwrap();
    let e = match store::open(&site.config).await {
        Err(e) => e,
        Ok(_) => panic!("a malformed store must not open"),
    };
    assert!(matches!(
        e,
        StoreError::Backend(BackendError::Corrupt { .. })
    ));
    let msg = e.to_string();
    assert!(
        msg.contains("t1.profiles.json") && msg.contains("corrupt"),
        "{msg}"
    );
    assert_eq!(std::fs::read(site.store_path()).unwrap(), garbage);

    // A store opened before the file went bad refuses writes too.
    std::fs::remove_file(site.store_path()).unwrap();
    let s = store::open(&site.config).await.unwrap();
    std::fs::write(site.store_path(), garbage).unwrap();
    assert!(matches!(
        s.create(new("x", &["srv-a"])).await,
        Err(StoreError::Backend(BackendError::Corrupt { .. }))
    ));
    assert_eq!(std::fs::read(site.store_path()).unwrap(), garbage);
}

/// R-MN-2: an etcd site whose etcd cannot be reached, on a node with no
/// view cache, refuses to start rather than serve an empty view.
#[tokio::test]
async fn etcd_unreachable_without_a_cache_is_refused_clearly() {
    let text = crate::common::site().replace(
        "kind = \"embedded\"\npath = \"t1.profiles.json\"",
        "kind = \"etcd\"\nendpoints = [\"http://127.0.0.1:9\"]",
    );
    let site = TestSite::with_text(&text);
    let e = store::open(&site.config).await.err().expect("refused");
    assert!(
        matches!(e, StoreError::Backend(BackendError::Unavailable { .. })),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("127.0.0.1:9") && msg.contains("no view cache"),
        "{msg}"
    );
}

#[tokio::test]
async fn r_pr_2_follower_sees_another_handles_change_within_1s() {
    let site = TestSite::new();
    let gate_store = store::open(&site.config).await.unwrap();
    let state = DrainState::new(site.config.clone());
    let shutdown = CancellationToken::new();
    let task = state.follow(gate_store, shutdown.clone());
    let mut views = state.subscribe();

    // The operator's handle: a separate store, as the CLI would open.
    let operator = store::open(&site.config).await.unwrap();
    let p = operator.create(new("maint-b", &["srv-b"])).await.unwrap();
    let t0 = Instant::now();
    operator
        .set_state(&p.id, ProfileState::Active)
        .await
        .unwrap();
    let sg_b = state.view().index_of("sg-b").unwrap();
    tokio::time::timeout(Duration::from_secs(1), async {
        while !views.borrow_and_update().is_draining(sg_b) {
            views.changed().await.unwrap();
        }
    })
    .await
    .expect("R-PR-2: drain applied within 1 s");
    println!("drain seen after {:?}", t0.elapsed());
    assert_eq!(
        state.view().instances()[sg_b].state,
        InstanceState::Draining
    );

    operator
        .set_state(&p.id, ProfileState::Inactive)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(1), async {
        while views.borrow_and_update().is_draining(sg_b) {
            views.changed().await.unwrap();
        }
    })
    .await
    .expect("R-PR-2: drain lifted within 1 s");
    shutdown.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn watch_sees_own_writes_once() {
    let site = TestSite::new();
    let s: Arc<dyn Store> = store::open(&site.config).await.unwrap();
    let mut rx = s.watch();
    s.create(new("a", &["srv-a"])).await.unwrap();
    assert!(rx.has_changed().unwrap());
    assert_eq!(rx.borrow_and_update().revision, 1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !rx.has_changed().unwrap(),
        "poller does not republish our own write"
    );
}
