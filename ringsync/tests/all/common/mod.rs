//! Test helpers: a small site in a temporary directory, and stand-in nodes
//! serving work reports over real HTTP.
//!
//! ringsync-ops' tests include this module too (by path), and each crate's
//! tests use a part of it.
#![allow(dead_code)]

use ringsync::store::Refusal;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use ringsync::view::Health;
use ringsync::work::{InstanceWork, NodeKind, WorkCounts, WorkReport, WORK_PATH};
use ringsync::SiteConfig;
use testbed::fixture::SiteFile;

/// A site file with three servers, sg on each, an mg and a bgmg on srv-a,
/// and its embedded store next to it. Nothing listens at the admin
/// addresses of the gate and media-ctl (ports 9 and 7 are closed on loopback).
pub fn site() -> String {
    let local = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    SiteFile::new("t1")
        .store_path("t1.profiles.json")
        .section(
            "admin",
            "bind = \"127.0.0.1:0\"\ngate_bind = \"127.0.0.1:9\"\nmedia_bind = \"127.0.0.1:7\"",
        )
        .sgs(&[("a", local(5001)), ("b", local(5002)), ("c", local(5003))])
        .pool("bgmg", "ng", &[("a", local(6001))])
        .pool("mg", "ng", &[("a", local(6002))])
        .text()
        .to_owned()
}

/// Each record of an audit page as (action, status).
pub fn actions(page: &ringsync::store::AuditPage) -> Vec<(&str, u16)> {
    page.records
        .iter()
        .map(|r| (r.action.as_str(), r.status))
        .collect()
}

/// A temp dir holding `site.toml`.
pub struct TestSite {
    pub dir: tempfile::TempDir,
    pub config: Arc<SiteConfig>,
}

impl TestSite {
    pub fn new() -> TestSite {
        Self::with_text(&site())
    }

    pub fn with_text(text: &str) -> TestSite {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("site.toml");
        std::fs::write(&path, text).unwrap();
        let config = Arc::new(SiteConfig::load(&path).unwrap());
        TestSite { dir, config }
    }

    pub fn site_path(&self) -> PathBuf {
        self.dir.path().join("site.toml")
    }

    pub fn store_path(&self) -> PathBuf {
        self.dir.path().join("t1.profiles.json")
    }
}

/// A stand-in's profile revision: it routes by whatever the store holds,
/// so its revision is above any a test's store reaches (R-ST-3: a node
/// behind the revision summed vouches for nothing).
pub const STAND_IN_REVISION: u64 = 1_000_000;

/// A node's report for site `t1`.
pub fn report(kind: NodeKind, node: &str, work: &[(&str, InstanceWork)]) -> WorkReport {
    WorkReport {
        site_hash: String::new(),
        backups: Vec::new(),
        run: None,
        site: "t1".into(),
        node: node.into(),
        kind,
        scope: "stand-in".into(),
        started_ms: ringsync::work::now_ms() - 60_000,
        generated_ms: ringsync::work::now_ms(),
        revision: STAND_IN_REVISION,
        generation: 1,
        instances: work
            .iter()
            .map(|(id, w)| ((*id).to_owned(), w.clone()))
            .collect::<BTreeMap<_, _>>(),
    }
}

/// Work an instance holds, as a node reports it.
pub fn holds(health: Health, counts: WorkCounts) -> InstanceWork {
    InstanceWork {
        health,
        counts,
        ..InstanceWork::default()
    }
}

/// A stand-in node: a real HTTP server on loopback serving `report` at
/// `/v1/work` (the gate and media-ctl have their own tests of what they
/// serve). Change the report through the handle.
pub async fn stand_in(report: WorkReport) -> (SocketAddr, Arc<Mutex<WorkReport>>) {
    let shared = Arc::new(Mutex::new(report));
    let served = shared.clone();
    let app = axum::Router::new().route(
        WORK_PATH,
        axum::routing::get(move || {
            let r = served.lock().unwrap().clone();
            async move { axum::Json(r) }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await });
    (addr, shared)
}

/// An address on loopback where nothing listens.
pub fn closed_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// Audited writes and per-profile revisions, the same on every backend: a
/// stale revision is refused with the current profile and nothing changes;
/// every change, made or refused, is in the log in order, with who and the
/// profile before and after.
pub async fn audited_writes(s: &dyn ringsync::Store) {
    use ringsync::profile::{NewProfile, ProfileState};
    use ringsync::store::audit::Actor;
    use ringsync::store::{AuditQuery, Op, StoreError, WriteRequest};

    let alice = Actor {
        who: "alice".into(),
        role: Some("operate".into()),
        from: "127.0.0.1:4000".into(),
    };
    let ask = |op: Op, expect: Option<u64>| WriteRequest {
        audit: Some(alice.record_op(&op, expect)),
        op,
        expect,
    };
    let new = NewProfile {
        name: "maint-a".into(),
        servers: vec!["srv-a".into()],
        ..Default::default()
    };
    let made = s.write(ask(Op::Create(new), None)).await.unwrap();
    let rev = made.committed.profile.revision;
    assert_eq!(rev, made.revision);
    let activate = Op::SetState {
        id: "maint-a".into(),
        state: ProfileState::Active,
    };
    let done = s.write(ask(activate.clone(), Some(rev))).await.unwrap();
    assert!(done.committed.profile.revision > rev);
    let e = s.write(ask(activate.clone(), Some(rev))).await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Refused(Refusal::Stale { expected, current, .. })
            if *expected == rev && current.revision == done.committed.profile.revision),
        "{e}"
    );
    assert_eq!(e.status_code(), 409);
    assert_eq!(
        s.list().await.unwrap().revision,
        done.revision,
        "nothing changed"
    );
    let bad = Op::Update {
        id: "maint-a".into(),
        patch: ringsync::ProfilePatch {
            servers: Some(vec!["srv-q".into()]),
            ..Default::default()
        },
    };
    assert_eq!(
        s.write(ask(bad, None)).await.unwrap_err().status_code(),
        400
    );
    s.append_audit(alice.record("POST /v1/profiles", None))
        .await
        .unwrap();

    let page = s.audit_log(AuditQuery::default()).await.unwrap();
    let got = actions(&page);
    assert_eq!(
        got,
        [
            ("create", 201),
            ("activate", 200),
            ("activate", 409),
            ("update", 400),
            ("POST /v1/profiles", 0)
        ]
    );
    let r = &page.records;
    assert!(r.windows(2).all(|w| w[0].seq < w[1].seq), "{r:?}");
    assert_eq!((r[0].before.as_ref(), r[0].who.as_str()), (None, "alice"));
    assert_eq!(
        r[1].before.as_ref().map(|p| p.state),
        Some(ProfileState::Inactive)
    );
    assert_eq!(
        r[1].after.as_ref().map(|p| p.state),
        Some(ProfileState::Active)
    );
    assert_eq!(
        (r[1].revision, r[2].if_revision),
        (Some(done.revision), Some(rev))
    );
    assert!(r[2].error.as_deref().unwrap().contains("not"), "{:?}", r[2]);
    assert!(r[2].after.is_none() && r[2].before.is_some());
    // Paging: two at a time, from the cursor.
    let q = AuditQuery {
        limit: Some(2),
        ..Default::default()
    };
    let p1 = s.audit_log(q.clone()).await.unwrap();
    let p2 = s
        .audit_log(AuditQuery {
            after: p1.next,
            ..q
        })
        .await
        .unwrap();
    assert_eq!(p1.records[..], r[..2]);
    assert_eq!(p2.records[..], r[2..4]);
}
