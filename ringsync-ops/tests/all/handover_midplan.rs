//! The handover's harder cases through the real binaries on the embedded
//! store (R-AP-1..3, R-MN-3): a service that never confirms, a profile
//! change in the middle of a plan, and a `ringsync serve` killed and
//! restarted in the middle of a plan. `ringsync serve` plans, `ringsync
//! agent` processes stand in for the services, the operator acts through
//! the CLI and reads `/v1/handover`, `handover status` and `/metrics`.

use std::path::Path;
use std::time::Duration;

use crate::common::handover::{
    agent, all_settled, ap_site, cli, get, handover_of, members, serve, terminate, wait_for,
};
use crate::common::TestSite;
use ringsync_ops::handover::record::{HandoverState, MoveKind};
use ringsync_ops::handover::status::GroupState;
use ringsync_ops::handover::HandoverStatus;
use testbed::bins::Node;

/// The records as the embedded store keeps them.
fn records(site: &TestSite) -> HandoverState {
    let path = site.dir.path().join("t1.profiles.json.handover");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// One `ringsync agent` per group member, except `without`.
fn agents(site: &TestSite, without: &[&str]) -> Vec<Node> {
    members(&site.config)
        .iter()
        .filter(|(_, m)| !without.contains(&m.as_str()))
        .map(|(g, m)| agent_for(site, g, m))
        .collect()
}

fn agent_for(site: &TestSite, group: &str, member: &str) -> Node {
    agent(&site.site_path(), group, member)
}

/// What member `m`'s agent printed.
fn said(site: &TestSite, m: &str) -> String {
    std::fs::read_to_string(site.site_path().with_file_name(format!("{m}.stdout")))
        .unwrap_or_default()
}

/// Waits (up to 30 s) until the records satisfy `done`.
async fn records_until(
    site: &TestSite,
    what: &str,
    done: impl Fn(&HandoverState) -> bool,
) -> HandoverState {
    wait_for(what, Duration::from_secs(30), || async {
        let st = records(site);
        done(&st).then_some(st)
    })
    .await
}

/// The value of a metric line `name value` in a Prometheus text page.
fn metric(page: &str, series: &str) -> Option<f64> {
    testbed::metrics::Metrics::new(page).value(series)
}

#[tokio::test]
async fn r_ap_2_a_service_that_never_confirms_is_retried_at_the_pace_and_blocks_no_one_else() {
    let site = TestSite::with_text(&ap_site(2, 0, "ap_pace_s = 1\nap_test_pace_allowed = true"));
    let path = site.site_path();
    let (serve, api) = serve(&path);
    // g1's first target, g1-b, runs no agent: its service never confirms.
    let _agents = agents(&site, &["g1-b"]);
    wait_for("homes confirmed", Duration::from_secs(20), || async {
        handover_of(api).await.filter(all_settled)
    })
    .await;
    drain(&path, "m", &["srv-a"]).await;
    let st = records_until(&site, "three attempts", |s| {
        s.desired.get("g1").is_some_and(|d| d.attempt >= 3)
    })
    .await;
    assert_eq!(st.desired["g1"].leader, "g1-b");
    assert!(!st.desired.contains_key("g2"), "nothing piles up: {st:?}");
    assert_eq!(st.confirmed["g1"].leader, "g1-a", "the old leader leads");
    assert_eq!(
        st.planner.seq,
        u64::from(st.desired["g1"].attempt),
        "one publication per pace"
    );

    // What the operator sees: g1 moving, retried at the pace; g2 waits.
    let hs: HandoverStatus =
        serde_json::from_str(&cli(&path, &["--json", "handover", "status"]).await).unwrap();
    assert_eq!(hs.groups[0].state, GroupState::Moving);
    assert_eq!(hs.groups[1].state, GroupState::Planned);
    let table = cli(&path, &["handover", "status"]).await;
    let g1 = table.lines().find(|l| l.starts_with("g1 ")).unwrap();
    assert!(
        g1.contains("retry -> g1-b") && g1.contains("not confirmed"),
        "{table}"
    );
    let (_, page) = get(api, "/metrics").await.unwrap();
    let retries = metric(&page, "ringsync_handover_moves_total{kind=\"retry\"}").unwrap();
    assert!(retries >= 2.0, "{page}");
    assert_eq!(
        metric(&page, "ringsync_handover_unconfirmed_groups"),
        Some(1.0)
    );
    let next = metric(&page, "ringsync_handover_next_move_seconds").unwrap();
    assert!((0.0..=1.0).contains(&next), "within one pace: {next}");

    // The service comes up: it confirms and the plan goes on.
    let _late = agent_for(&site, "g1", "g1-b");
    let done = wait_for("plan done", Duration::from_secs(20), || async {
        handover_of(api)
            .await
            .filter(|st| all_settled(st) && st.groups.iter().all(|g| g.desired != g.home))
    })
    .await;
    assert_eq!(done.groups[1].desired, "g2-c", "fewest leaders per server");
    let end = records(&site);
    let gap = end.desired["g2"].at_ms - end.desired["g1"].at_ms;
    assert!(gap >= 1_000, "R-AP-2: g2 {gap} ms after g1's last attempt");
    assert!(said(&site, "g1-b").contains("leading (seq"));
    assert!(terminate(serve).is_some_and(|s| s.success()));
}

#[tokio::test]
async fn r_ap_2_a_profile_change_then_a_killed_serve_mid_plan_keep_the_pace_and_move_nothing_twice()
{
    const PACE_MS: u64 = 3_000;
    let site = TestSite::with_text(&ap_site(4, 0, "ap_pace_s = 3\nap_test_pace_allowed = true"));
    let path = site.site_path();
    let (mut first, api) = serve(&path);
    let _agents = agents(&site, &[]);
    wait_for("homes confirmed", Duration::from_secs(20), || async {
        handover_of(api).await.filter(all_settled)
    })
    .await;
    drain(&path, "m", &["srv-a"]).await;

    // g1 went to srv-b, g2 to srv-c; now srv-c drains as well.
    let st = records_until(&site, "two moves", |s| s.planner.seq == 2).await;
    assert_eq!(
        (
            st.desired["g1"].leader.as_str(),
            st.desired["g2"].leader.as_str()
        ),
        ("g1-b", "g2-c")
    );
    cli(
        &path,
        &[
            "profile", "update", "m", "--server", "srv-a", "--server", "srv-c",
        ],
    )
    .await;
    // The re-plan moves g2 again first (its leader is draining); then the
    // planner is killed before its next move, and a new one starts.
    let before = records_until(&site, "g2 moved again", |s| s.planner.seq == 3).await;
    assert_eq!(before.desired["g2"].leader, "g2-b");
    assert_eq!(before.desired["g2"].from, "g2-c");
    first.kill();
    let (second, api) = serve(&path);
    let end = wait_for("plan done", Duration::from_secs(30), || async {
        handover_of(api)
            .await
            .filter(|st| all_settled(st) && st.groups.iter().all(|g| g.desired.ends_with("-b")))
    })
    .await;
    assert_eq!(end.planner.this_node_acting, Some(true));

    let after = records(&site);
    assert_eq!(
        after.planner.seq, 5,
        "four groups, g2 twice, nothing else: {after:?}"
    );
    assert_eq!(after.desired["g1"], st.desired["g1"], "g1 stays on srv-b");
    let mut times: Vec<u64> = after.desired.values().map(|d| d.at_ms).collect();
    times.push(st.desired["g2"].at_ms);
    times.sort_unstable();
    for w in times.windows(2) {
        assert!(w[1] - w[0] >= PACE_MS, "R-AP-2: {times:?}");
    }
    let resumed = after.desired["g3"].at_ms - before.desired["g2"].at_ms;
    assert!(resumed >= PACE_MS, "the restarted planner kept the pace");
    assert!(said(&site, "g2-c").contains("leading (seq 2)"));
    assert!(said(&site, "g2-b").contains("leading (seq 3)"));
    assert!(said(&site, "g2-c").contains("following (g2-b leads)"));

    lift_and_count_the_moves(&site, api).await;
    assert!(terminate(second).is_some_and(|s| s.success()));
}

/// Creates and activates a profile draining `servers`.
async fn drain(site: &Path, name: &str, servers: &[&str]) {
    let mut args = vec!["profile", "create", "--name", name];
    for s in servers {
        args.extend(["--server", s]);
    }
    cli(site, &args).await;
    cli(site, &["profile", "activate", name]).await;
}

/// Lift: every group home by takeover, counted by the node that moved them
/// (g3 and g4 went out after the restart, all four came home).
async fn lift_and_count_the_moves(site: &TestSite, api: std::net::SocketAddr) {
    cli(&site.site_path(), &["profile", "deactivate", "m"]).await;
    wait_for("home again", Duration::from_secs(30), || async {
        handover_of(api)
            .await
            .filter(|st| all_settled(st) && st.groups.iter().all(|g| g.desired == g.home))
    })
    .await;
    assert!(records(site)
        .desired
        .values()
        .all(|d| d.kind == MoveKind::Takeover));
    let (_, page) = get(api, "/metrics").await.unwrap();
    assert_eq!(
        metric(&page, "ringsync_handover_moves_total{kind=\"takeover\"}"),
        Some(4.0),
        "{page}"
    );
    assert_eq!(
        metric(&page, "ringsync_handover_moves_total{kind=\"handover\"}"),
        Some(2.0),
        "g3, g4 after the restart"
    );
    assert_eq!(metric(&page, "ringsync_handover_blocked_groups"), Some(0.0));
}
