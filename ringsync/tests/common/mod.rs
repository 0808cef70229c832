//! Test helpers: a small site in a temporary directory, and stand-in nodes
//! serving work reports over real HTTP.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use ringsync::view::Health;
use ringsync::work::{InstanceWork, NodeKind, WorkCounts, WorkReport, WORK_PATH};
use ringsync::SiteConfig;

pub mod etcd;
pub mod handover;

/// A site file with three servers, sg on each, an mg and a bgmg on srv-a,
/// and its embedded store next to it. Nothing listens at the admin
/// addresses of the gate and media-ctl (ports 9 and 7 are closed on loopback).
pub const SITE: &str = r#"
[site]
name = "t1"

[store]
kind = "embedded"
path = "t1.profiles.json"

[admin]
bind = "127.0.0.1:0"
gate_bind = "127.0.0.1:9"
media_bind = "127.0.0.1:7"

[[server]]
name = "srv-a"
[[server]]
name = "srv-b"
[[server]]
name = "srv-c"

[[instance]]
id = "sg-a"
service = "sg"
server = "srv-a"
sip = "127.0.0.1:5001"
[[instance]]
id = "sg-b"
service = "sg"
server = "srv-b"
sip = "127.0.0.1:5002"
[[instance]]
id = "sg-c"
service = "sg"
server = "srv-c"
sip = "127.0.0.1:5003"
[[instance]]
id = "bgmg-a"
service = "bgmg"
server = "srv-a"
ng = "127.0.0.1:6001"
[[instance]]
id = "mg-a"
service = "mg"
server = "srv-a"
ng = "127.0.0.1:6002"
"#;

/// A temp dir holding `site.toml`.
pub struct TestSite {
    pub dir: tempfile::TempDir,
    pub config: Arc<SiteConfig>,
}

impl TestSite {
    pub fn new() -> TestSite {
        Self::with_text(SITE)
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

/// A node's report for site `t1`.
pub fn report(kind: NodeKind, node: &str, work: &[(&str, InstanceWork)]) -> WorkReport {
    WorkReport {
        site: "t1".into(),
        node: node.into(),
        kind,
        scope: "stand-in".into(),
        started_ms: ringsync::work::now_ms() - 60_000,
        generated_ms: ringsync::work::now_ms(),
        revision: 0,
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
