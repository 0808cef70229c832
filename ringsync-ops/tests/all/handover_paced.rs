//! The handover planner on paused time (R-AP-1..4, R-MN-3): the real
//! runner, the real embedded store and real agents with simulated members;
//! tokio's clock jumps from timer to timer, so a plan of minutes runs in
//! well under a second.

use std::sync::Arc;
use std::time::Duration;

use crate::common::handover::{ap_site, members, records, spawn_agents, MoveLog};
use crate::common::TestSite;
use ringsync::profile::{NewProfile, ProfilePatch, ProfileState};
use ringsync::state::DrainState;
use ringsync::store::{self, HandoverStore, Store};
use ringsync_ops::handover::record::{HandoverState, MoveKind};
use ringsync_ops::handover::status::GroupState;
use ringsync_ops::handover::{status, Clock, Planner};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const PACE_MS: u64 = 60_000;

struct Run {
    site: TestSite,
    store: Arc<dyn Store>,
    records: Arc<dyn HandoverStore>,
    drain: Arc<DrainState>,
    clock: Clock,
    shutdown: CancellationToken,
    planner: Option<(CancellationToken, JoinHandle<()>)>,
    log: MoveLog,
}

impl Run {
    async fn new(text: &str) -> Run {
        let site = TestSite::with_text(text);
        let store = store::open(&site.config).await.unwrap();
        let records = records(&store);
        let drain = DrainState::new(site.config.clone());
        let shutdown = CancellationToken::new();
        drain.follow(store.clone(), shutdown.clone());
        let log = MoveLog::follow(&records, &shutdown);
        Run {
            site,
            store,
            records,
            drain,
            clock: Clock::wall(),
            shutdown,
            planner: None,
            log,
        }
    }

    fn start_planner(&mut self, node: &str) {
        let p = Planner::new(
            self.site.config.clone(),
            self.drain.clone(),
            self.records.clone(),
            node,
            self.clock,
        );
        let token = self.shutdown.child_token();
        let task = tokio::spawn(p.run(token.clone()));
        self.planner = Some((token, task));
    }

    async fn stop_planner(&mut self) {
        let (token, task) = self.planner.take().unwrap();
        token.cancel();
        task.await.unwrap();
    }

    /// All members with agents, except `without`.
    fn agents(&self, without: &[&str]) -> crate::common::handover::SimLog {
        let who: Vec<_> = members(&self.site.config)
            .into_iter()
            .filter(|(_, m)| !without.contains(&m.as_str()))
            .collect();
        spawn_agents(&self.site.config, &self.records, &who, &self.shutdown).log
    }

    async fn drain(&self, name: &str, servers: &[&str]) {
        let new = NewProfile {
            name: name.into(),
            servers: servers.iter().map(|s| s.to_string()).collect(),
            state: ProfileState::Active,
            ..Default::default()
        };
        self.store.create(new).await.unwrap();
    }

    async fn set(&self, name: &str, state: ProfileState) {
        self.store.set_state(name, state).await.unwrap();
    }

    async fn state(&self) -> Arc<HandoverState> {
        self.records.read().await.unwrap()
    }

    /// Waits (paused time) until `done` holds; panics after `limit`.
    async fn until(&self, what: &str, limit: Duration, done: impl Fn(&HandoverState) -> bool) {
        let t0 = tokio::time::Instant::now();
        loop {
            if done(self.state().await.as_ref()) {
                return;
            }
            assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn status(&self, st: &HandoverState) -> ringsync_ops::handover::HandoverStatus {
        status(
            &self.site.config,
            &self.drain.view(),
            st,
            self.clock.now_ms(),
            true,
        )
    }
}

fn settled(st: &HandoverState, config: &ringsync::SiteConfig) -> bool {
    config.ap_groups.iter().all(|g| {
        let want = st.desired_leader(&g.name, &g.home);
        st.confirmed.get(&g.name).is_some_and(|c| c.leader == want)
    })
}

/// R-AP-2: publications at least one pace apart (and not much more, when
/// every move is confirmed at once).
fn assert_paced(times: &[u64]) {
    for w in times.windows(2) {
        let gap = w[1] - w[0];
        assert!(gap >= PACE_MS, "two moves {gap} ms apart: {times:?}");
        assert!(gap < PACE_MS + 2_000, "a pace lost: {gap} ms: {times:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn r_ap_1_r_ap_2_r_ap_3_five_groups_drain_one_a_pace_then_take_over_home() {
    let mut run = Run::new(&ap_site(5, 0, "")).await;
    let sims = run.agents(&[]);
    run.start_planner("n1");
    let config = run.site.config.clone();
    run.until("homes confirmed", Duration::from_secs(5), |s| {
        settled(s, &config)
    })
    .await;

    let t_drain = run.clock.now_ms();
    run.drain("maint-a", &["srv-a"]).await;
    run.until(
        "five handovers confirmed",
        Duration::from_secs(6 * 60),
        |s| s.desired.len() == 5 && settled(s, &config),
    )
    .await;
    let moves = run.log.all();
    assert_eq!(moves.len(), 5, "exactly one move per group: {moves:?}");
    let order: Vec<&str> = moves.iter().map(|(g, _)| g.as_str()).collect();
    assert_eq!(order, ["g1", "g2", "g3", "g4", "g5"]);
    for (g, d) in &moves {
        // R-AP-1: to a follower in the normal zone, balanced over srv-b and srv-c.
        assert_eq!(d.kind, MoveKind::Handover);
        assert!(
            d.leader.ends_with("-b") || d.leader.ends_with("-c"),
            "{g}: {d:?}"
        );
        assert_eq!((d.attempt, d.steps), (1, 5));
    }
    let to_b = moves
        .iter()
        .filter(|(_, d)| d.leader.ends_with("-b"))
        .count();
    assert_eq!(to_b, 3, "fewest leaders per server, then id");
    // Each old leader stepped down, each new one took over.
    let did = sims.lock().unwrap().clone();
    for (g, d) in &moves {
        assert!(did.contains(&(format!("{g}-a"), "follow", 0)), "{did:?}");
        assert!(did.contains(&(d.leader.clone(), "lead", d.seq)), "{did:?}");
    }
    let times: Vec<u64> = moves.iter().map(|(_, d)| d.at_ms).collect();
    assert!(times[0] - t_drain < 2_000, "the first move at once");
    assert_paced(&times);

    // R-AP-3: the drain is lifted: five takeovers, paced from the last move.
    run.set("maint-a", ProfileState::Inactive).await;
    run.until(
        "five takeovers confirmed",
        Duration::from_secs(6 * 60),
        |s| s.desired.values().all(|d| d.kind == MoveKind::Takeover) && settled(s, &config),
    )
    .await;
    let all = run.log.all();
    assert_eq!(all.len(), 10, "{all:?}");
    for (k, (g, d)) in all[5..].iter().enumerate() {
        assert_eq!(d.leader, format!("{g}-a"));
        assert_eq!(d.kind, MoveKind::Takeover);
        assert_eq!((d.step, d.steps), (k as u32 + 1, 5), "a new plan of five");
    }
    let times: Vec<u64> = all.iter().map(|(_, d)| d.at_ms).collect();
    assert_paced(&times);
    run.stop_planner().await;
}

/// Five groups led from srv-a, no agents, planner `n1`: srv-a drains and
/// the planner has made its first two moves.
async fn two_moves_into_a_drain_of_srv_a() -> Run {
    let mut run = Run::new(&ap_site(5, 0, "")).await;
    run.agents(&[]);
    run.start_planner("n1");
    run.drain("maint-a", &["srv-a"]).await;
    run.until("two moves", Duration::from_secs(3 * 60), |s| {
        s.planner.seq == 2
    })
    .await;
    run
}

#[tokio::test(start_paused = true)]
async fn r_ap_2_a_planner_restarted_mid_plan_keeps_the_pace() {
    let mut run = two_moves_into_a_drain_of_srv_a().await;
    // Restart right after the second move: the new planner reads the last
    // move's time from the store and waits out the pace.
    run.stop_planner().await;
    run.start_planner("n2");
    let config = run.site.config.clone();
    run.until("plan done", Duration::from_secs(6 * 60), |s| {
        s.desired.len() == 5 && settled(s, &config)
    })
    .await;
    let moves = run.log.all();
    assert_eq!(moves.len(), 5);
    let planners: Vec<&str> = moves.iter().map(|(_, d)| d.planner.as_str()).collect();
    assert_eq!(planners, ["n1", "n1", "n2", "n2", "n2"]);
    assert_paced(&moves.iter().map(|(_, d)| d.at_ms).collect::<Vec<_>>());
    assert_eq!(moves[2].1.step, 3, "the plan's progress carries over");
    run.stop_planner().await;
}

#[tokio::test(start_paused = true)]
async fn r_ap_4_a_group_without_a_normal_follower_is_blocked_and_the_others_move() {
    let mut run = Run::new(&ap_site(2, 1, "")).await;
    run.agents(&[]);
    run.start_planner("n1");
    run.drain("maint-ab", &["srv-a", "srv-b"]).await;
    let config = run.site.config.clone();
    run.until("g1, g2 moved", Duration::from_secs(3 * 60), |s| {
        s.desired.len() == 2 && settled(s, &config)
    })
    .await;
    let st = run.state().await;
    let status = run.status(&st);
    let h1 = status.groups.iter().find(|g| g.group == "h1").unwrap();
    assert_eq!(h1.state, GroupState::Blocked);
    assert_eq!(
        (h1.desired.as_str(), h1.confirmed.as_deref()),
        ("h1-a", Some("h1-a"))
    );
    let why = h1.blocked.as_deref().unwrap();
    assert!(why.contains("h1-b on srv-b draining"), "{why}");
    assert!(st.desired.values().all(|d| d.leader.ends_with("-c")));
    // Lifting srv-b's drain unblocks it.
    run.drain("maint-a", &["srv-a"]).await;
    run.set("maint-ab", ProfileState::Inactive).await;
    run.until("h1 moved to srv-b", Duration::from_secs(3 * 60), |s| {
        s.desired.get("h1").is_some_and(|d| d.leader == "h1-b") && settled(s, &config)
    })
    .await;
    run.stop_planner().await;
}

#[tokio::test(start_paused = true)]
async fn a_profile_change_mid_plan_replans_within_the_pace_and_moves_nothing_twice_for_nothing() {
    let mut run = two_moves_into_a_drain_of_srv_a().await;
    // g1 went to srv-b, g2 to srv-c; now srv-c drains as well.
    let patch = ProfilePatch {
        servers: Some(vec!["srv-a".into(), "srv-c".into()]),
        ..Default::default()
    };
    run.store.update("maint-a", patch).await.unwrap();
    let config = run.site.config.clone();
    run.until("replanned", Duration::from_secs(6 * 60), |s| {
        s.desired.len() == 5
            && s.desired.values().all(|d| d.leader.ends_with("-b"))
            && settled(s, &config)
    })
    .await;
    let moves = run.log.all();
    let groups: Vec<&str> = moves.iter().map(|(g, _)| g.as_str()).collect();
    assert_eq!(
        groups,
        ["g1", "g2", "g2", "g3", "g4", "g5"],
        "g1 stays on srv-b"
    );
    assert_eq!(moves[1].1.leader, "g2-c");
    assert_eq!(moves[2].1.from, "g2-c");
    assert_paced(&moves.iter().map(|(_, d)| d.at_ms).collect::<Vec<_>>());
    run.stop_planner().await;
}

#[tokio::test(start_paused = true)]
async fn r_ap_2_a_service_that_never_confirms_is_retried_at_the_pace_and_nothing_piles_up() {
    let mut run = Run::new(&ap_site(3, 0, "")).await;
    // g1's first target, g1-b, has no agent: nobody will confirm it.
    run.agents(&["g1-b"]);
    run.start_planner("n1");
    run.drain("maint-a", &["srv-a"]).await;
    run.until("four attempts", Duration::from_secs(5 * 60), |s| {
        s.desired.get("g1").is_some_and(|d| d.attempt == 4)
    })
    .await;
    let st = run.state().await;
    assert_eq!(
        st.desired.len(),
        1,
        "no other move while one is unconfirmed"
    );
    assert_eq!(
        st.confirmed["g1"].leader, "g1-a",
        "the old leader still leads"
    );
    let status = run.status(&st);
    let g1 = &status.groups[0];
    assert_eq!(g1.state, GroupState::Moving);
    assert_eq!(g1.unconfirmed.as_ref().unwrap().attempt, 4);
    assert_eq!(status.groups[1].state, GroupState::Planned);
    let times: Vec<u64> = run.log.all().iter().map(|(_, d)| d.at_ms).collect();
    assert_paced(&times);
    // The service comes up: it confirms, and the plan goes on at the pace.
    run.agents(&[
        "g1-a", "g1-c", "g2-a", "g2-b", "g2-c", "g3-a", "g3-b", "g3-c",
    ]);
    let config = run.site.config.clone();
    run.until("plan done", Duration::from_secs(5 * 60), |s| {
        s.desired.len() == 3 && settled(s, &config)
    })
    .await;
    let all = run.log.all();
    assert_eq!(
        all.len(),
        6,
        "four attempts for g1, one move each for g2, g3"
    );
    assert_paced(&all.iter().map(|(_, d)| d.at_ms).collect::<Vec<_>>());
    run.stop_planner().await;
}

#[tokio::test(start_paused = true)]
async fn r_mn_3_one_planner_per_embedded_store() {
    let mut run = Run::new(&ap_site(2, 0, "")).await;
    run.agents(&[]);
    run.start_planner("n1");
    run.until("n1 elected", Duration::from_secs(5), |s| {
        s.acting.as_deref() == Some("n1")
    })
    .await;
    // A second planner on the same files stands by.
    let second = Planner::new(
        run.site.config.clone(),
        run.drain.clone(),
        run.records.clone(),
        "n2",
        run.clock,
    );
    let stats = second.stats();
    let token = run.shutdown.child_token();
    let task = tokio::spawn(second.run(token.clone()));
    run.drain("maint-a", &["srv-a"]).await;
    let config = run.site.config.clone();
    run.until("moved", Duration::from_secs(3 * 60), |s| {
        s.desired.len() == 2 && settled(s, &config)
    })
    .await;
    assert!(!stats.acting());
    assert_eq!(stats.moves(), (0, 0, 0));
    assert!(run.log.all().iter().all(|(_, d)| d.planner == "n1"));
    assert_eq!(run.state().await.acting.as_deref(), Some("n1"));
    // n1 stops: n2 is elected and takes the drain's lift from there.
    run.stop_planner().await;
    run.set("maint-a", ProfileState::Inactive).await;
    run.until("home again", Duration::from_secs(3 * 60), |s| {
        s.desired.values().all(|d| d.kind == MoveKind::Takeover) && settled(s, &config)
    })
    .await;
    assert!(stats.acting());
    assert_eq!(stats.moves(), (0, 2, 0));
    assert_paced(
        &run.log
            .all()
            .iter()
            .map(|(_, d)| d.at_ms)
            .collect::<Vec<_>>(),
    );
    token.cancel();
    task.await.unwrap();
}
