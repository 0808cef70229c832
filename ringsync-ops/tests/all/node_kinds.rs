//! Which nodes status expects (issue 38): a site with no media gateway
//! (no `mg`, no `bgmg`) has no media-ctl to ask, so neither `ringsync
//! status` nor `ringsync serve` (its `/v1/status`, the page's data, its
//! log) names one missing.

use std::time::Duration;
use testbed::fixture::SiteFile;

use crate::common::served::{local, ok, remote, Served};
use crate::common::{holds, report, stand_in, TestSite};
use ringsync::view::Health;
use ringsync::work::{NodeKind, WorkCounts};
use serde_json::Value;

/// A site of two sg instances; its gate at `gate`.
fn sg_only(gate: std::net::SocketAddr) -> TestSite {
    let local = |port: u16| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let admin =
        format!("bind = \"127.0.0.1:0\"\ngate_bind = \"{gate}\"\nmedia_bind = \"127.0.0.1:7\"");
    TestSite::with_text(
        SiteFile::new("t1")
            .health("")
            .store_path("t1.profiles.json")
            .section("admin", &admin)
            .servers(&["srv-a", "srv-b"])
            .pool("sg", "sip", &[("a", local(15060)), ("b", local(15061))])
            .text(),
    )
}

/// The kinds of the nodes a status asked.
fn kinds(st: &Value) -> Vec<&str> {
    st["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["kind"].as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_without_media_gateways_expects_no_media_ctl() {
    let idle = || holds(Health::Up, WorkCounts::default());
    let (gate, _) = stand_in(report(
        NodeKind::Gate,
        "gate-1",
        &[("sg-a", idle()), ("sg-b", idle())],
    ))
    .await;
    let site = sg_only(gate);
    tokio::task::block_in_place(|| {
        // The CLI asks the nodes itself.
        let st: Value = serde_json::from_str(&ok(&local(&site, &["--json", "status"]))).unwrap();
        assert_eq!(kinds(&st), ["gate"], "{st}");
        assert!(st["nodes"][0]["error"].is_null(), "{st}");
        let text = ok(&local(&site, &["status"]));
        assert!(!text.contains("media_ctl"), "{text}");
        assert!(!text.contains("no work report"), "{text}");

        // serve: its status (the page reads the same) and its log.
        let served = Served::start(&site, &[]);
        std::thread::sleep(Duration::from_millis(1500));
        let st: Value =
            serde_json::from_str(&ok(&remote(&served.url, None, &["--json", "status"]))).unwrap();
        assert_eq!(kinds(&st), ["gate"], "{st}");
        assert_eq!(st["nodes"][0]["node"], "gate-1", "{st}");
        let log = served.node.log();
        assert!(!log.contains("media_ctl"), "{log}");
        assert!(!log.contains("no work report"), "{log}");
    });
}
