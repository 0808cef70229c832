//! The handover through the real binaries on the embedded store: `ringsync
//! serve` plans, one `ringsync agent` process per group member stands in
//! for the services, the operator drains and lifts through the CLI, and
//! reads `handover status`, `/v1/handover`, `status` and `/metrics`
//! (R-AP-1..4, R-MN-3, R-ST-3). A test pace of one second.

use std::time::Duration;

use crate::common::handover::{
    agent, all_settled, ap_site, cli, get, handover_of, members, serve, terminate, wait_for,
};
use crate::common::TestSite;
use ringsync::view::InstanceState;
use ringsync_ops::handover::record::{HandoverState, MoveKind};
use ringsync_ops::handover::status::GroupState;
use ringsync_ops::handover::HandoverStatus;
use ringsync_ops::status::SiteStatus;
use testbed::bins::Node;

const TEST_PACE: &str = "ap_pace_s = 1\nap_test_pace_allowed = true";

/// The records as the embedded store keeps them.
fn records(site: &TestSite) -> HandoverState {
    let path = site.dir.path().join("t1.profiles.json.handover");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Desired records in publication order: `(at_ms, group, leader, kind)`.
fn moves(st: &HandoverState) -> Vec<(u64, String, String, MoveKind)> {
    let mut m: Vec<_> = st
        .desired
        .iter()
        .map(|(g, d)| (d.at_ms, g.clone(), d.leader.clone(), d.kind))
        .collect();
    m.sort();
    m
}

fn assert_paced(m: &[(u64, String, String, MoveKind)]) {
    for w in m.windows(2) {
        assert!(w[1].0 - w[0].0 >= 1_000, "R-AP-2: {m:?}");
    }
}

#[tokio::test]
async fn r_ap_1_to_4_drain_and_lift_through_the_cli_with_real_agents() {
    // g3 goes first: a lower priority value moves earlier, then the name.
    let text = ap_site(3, 1, TEST_PACE).replace("name = \"g3\"\n", "name = \"g3\"\npriority = 5\n");
    let site = TestSite::with_text(&text);
    let path = site.site_path();
    let (serve, api) = serve(&path);
    let _agents: Vec<Node> = members(&site.config)
        .iter()
        .map(|(g, m)| agent(&path, g, m))
        .collect();
    let settled = |what: &'static str, done: fn(&HandoverStatus) -> bool| {
        wait_for(what, Duration::from_secs(20), move || async move {
            handover_of(api)
                .await
                .filter(|st| done(st) && all_settled(st))
        })
    };
    let st = settled("homes confirmed", |st| {
        st.groups.iter().all(|g| g.desired == g.home)
    })
    .await;
    assert_eq!(st.planner.this_node_acting, Some(true));
    assert_eq!(st.planner.acting, st.planner.this_node, "R-MN-3");

    // Drain srv-a and srv-b: g1..g3 move to srv-c, h1 (srv-a, srv-b only) is blocked.
    cli(
        &path,
        &[
            "profile", "create", "--name", "m", "--server", "srv-a", "--server", "srv-b",
        ],
    )
    .await;
    cli(&path, &["profile", "activate", "m"]).await;
    let st = settled("three handovers confirmed", |st| {
        st.groups
            .iter()
            .filter(|g| g.desired.ends_with("-c"))
            .count()
            == 3
    })
    .await;
    let h1 = st.groups.iter().find(|g| g.group == "h1").unwrap();
    assert_eq!(h1.state, GroupState::Blocked, "R-AP-4");
    assert!(h1
        .blocked
        .as_deref()
        .unwrap()
        .contains("no follower in the normal zone"));
    let m = moves(&records(&site));
    let order: Vec<&str> = m.iter().map(|(_, g, _, _)| g.as_str()).collect();
    assert_eq!(order, ["g3", "g1", "g2"], "priority, then name");
    assert!(m
        .iter()
        .all(|(_, _, to, kind)| to.ends_with("-c") && *kind == MoveKind::Handover));
    assert_paced(&m);

    operator_views_while_drained(&path, api).await;
    let said = std::fs::read_to_string(path.with_file_name("g1-c.stdout")).unwrap();
    assert!(said.contains("agent g1/g1-c: leading (seq"), "{said}");

    // Lift: three takeovers home, paced; h1 was never moved.
    cli(&path, &["profile", "deactivate", "m"]).await;
    settled("home again", |st| {
        st.groups.iter().all(|g| g.desired == g.home)
    })
    .await;
    let m = moves(&records(&site));
    assert_eq!(m.len(), 3);
    assert!(m
        .iter()
        .all(|(_, g, to, kind)| *to == format!("{g}-a") && *kind == MoveKind::Takeover));
    assert_paced(&m);
    assert_eq!(
        records(&site).planner.seq,
        6,
        "three moves out, three home, no retry"
    );
    let json = cli(&path, &["--json", "handover", "status"]).await;
    let st: HandoverStatus = serde_json::from_str(&json).unwrap();
    assert_eq!(st.planner.next, "idle");
    assert!(st.groups.iter().all(|g| g.state == GroupState::Settled));
    assert!(terminate(serve).is_some_and(|s| s.success()));
}

#[tokio::test]
async fn r_mn_3_a_second_serve_on_the_same_store_stands_by_until_the_first_dies() {
    let site = TestSite::with_text(&ap_site(1, 0, TEST_PACE));
    let path = site.site_path();
    let (mut first, api1) = serve(&path);
    wait_for("first elected", Duration::from_secs(10), || async {
        handover_of(api1)
            .await
            .filter(|st| st.planner.this_node_acting == Some(true))
    })
    .await;
    let (second, api2) = serve(&path);
    let st = wait_for("second answers", Duration::from_secs(10), || async {
        handover_of(api2).await
    })
    .await;
    assert_eq!(st.planner.this_node_acting, Some(false));
    assert_eq!(st.planner.acting, Some(api1.to_string()));
    // kill -9: the kernel drops the file lock; the second is elected.
    first.kill();
    wait_for("second elected", Duration::from_secs(10), || async {
        handover_of(api2)
            .await
            .filter(|st| st.planner.this_node_acting == Some(true))
    })
    .await;
    assert!(terminate(second).is_some_and(|s| s.success()));
}

/// The operator's views with srv-a and srv-b drained: the table, the status
/// sum (R-ST-3), the metrics.
async fn operator_views_while_drained(path: &std::path::Path, api: std::net::SocketAddr) {
    let table = cli(path, &["handover", "status"]).await;
    assert!(table.contains("pace 1 s"), "{table}");
    let h1_row = table.lines().find(|l| l.starts_with("h1 ")).unwrap();
    assert!(
        h1_row.contains("blocked") && h1_row.contains("h1-b on srv-b draining"),
        "{table}"
    );
    let sum: SiteStatus = serde_json::from_str(&cli(path, &["--json", "status"]).await).unwrap();
    let state_of = |id: &str| sum.instances.iter().find(|i| i.id == id).unwrap();
    // R-ST-3: g1-a leads nothing now; h1-a still leads h1.
    assert_eq!(
        (state_of("g1-a").state, state_of("g1-a").work),
        (InstanceState::Drained, Some(0))
    );
    assert_eq!(
        (state_of("h1-a").state, state_of("h1-a").work),
        (InstanceState::Draining, Some(1))
    );
    assert_eq!(state_of("g1-c").counts.groups, 1);
    let (_, metrics) = get(api, "/metrics").await.unwrap();
    assert!(
        metrics.contains("ringsync_handover_moves_total{kind=\"handover\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ringsync_handover_blocked_groups 1"),
        "{metrics}"
    );
    assert!(metrics.contains("ringsync_handover_acting 1"), "{metrics}");
}

#[test]
fn r_ap_2_a_pace_under_a_minute_is_refused_unless_the_site_allows_a_test_pace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("site.toml");
    std::fs::write(&path, ap_site(1, 0, "ap_pace_s = 1")).unwrap();
    let o = std::process::Command::new(crate::common::handover::BIN)
        .arg("--config")
        .arg(&path)
        .args(["handover", "status"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("timers.ap_pace_s") && err.contains("ap_test_pace_allowed"),
        "{err}"
    );
}

/// R-ST-4 through the binaries: `ringsync serve` publishes g1's move off
/// srv-a and no agent confirms it, so g1-a may still lead: `ringsync
/// status` keeps it `draining` (one group) while `handover status` says the
/// move is not confirmed. Once the new leader's agent confirms, g1-a is
/// `drained`.
#[tokio::test]
async fn r_st_4_an_ap_member_is_draining_until_its_move_is_confirmed() {
    let site = TestSite::with_text(&ap_site(1, 0, TEST_PACE));
    let path = site.site_path();
    let (serve, api) = serve(&path);
    cli(
        &path,
        &["profile", "create", "--name", "m", "--server", "srv-a"],
    )
    .await;
    cli(&path, &["profile", "activate", "m"]).await;
    let target = wait_for("the move published", Duration::from_secs(20), || async {
        let st = handover_of(api).await?;
        let g1 = st.groups.iter().find(|g| g.group == "g1")?;
        (g1.state == GroupState::Moving && g1.desired != "g1-a").then(|| g1.desired.clone())
    })
    .await;
    let g1a = |json: &str| {
        let sum: SiteStatus = serde_json::from_str(json).unwrap();
        let a = sum.instances.into_iter().find(|i| i.id == "g1-a").unwrap();
        (a.state, a.work)
    };
    let table = cli(&path, &["handover", "status"]).await;
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("g1 ") && l.contains("moving")),
        "{table}"
    );
    let json = cli(&path, &["--json", "status"]).await;
    assert_eq!(
        g1a(&json),
        (InstanceState::Draining, Some(1)),
        "R-ST-4: not drained before the move is confirmed: {json}"
    );
    let (_, body) = get(api, "/v1/status").await.unwrap();
    assert_eq!(g1a(&body), (InstanceState::Draining, Some(1)), "{body}");

    let _agent = agent(&path, "g1", &target);
    let json = wait_for("g1-a drained", Duration::from_secs(20), || {
        let path = path.clone();
        async move {
            let json = cli(&path, &["--json", "status"]).await;
            (g1a(&json).0 == InstanceState::Drained).then_some(json)
        }
    })
    .await;
    assert_eq!(g1a(&json), (InstanceState::Drained, Some(0)), "{json}");
    assert!(terminate(serve).is_some_and(|s| s.success()));
}
