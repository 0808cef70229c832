//! The Active-Passive handover measured through the real binaries
//! (R-AP-1..3, R-MN-3): one `ringsync serve` plans, one `ringsync agent`
//! process per group member stands in for the services; the embedded store
//! and a real etcd side by side, in interleaved rounds. Per round: drain
//! srv-a (every group hands over), then lift it (every group takes over).
//! Then, on etcd, the acting `serve` is killed (-9) after the first move
//! and a second `serve` finishes the plan.
//!
//! ```sh
//! cargo bench -p ringsync-ops --bench handover --no-run
//! netns-run cargo bench -p ringsync-ops --bench handover            # 8 groups, 3 rounds
//! netns-run cargo bench -p ringsync-ops --bench handover -- 4 1     # groups, rounds
//! ```

#[allow(dead_code)]
#[path = "../tests/all/common/handover.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::{agent, ap_site, handover_of, members, serve, terminate, wait_for};
use ringsync::profile::{NewProfile, ProfileState};
use ringsync::store::{self, HandoverStore, Store};
use ringsync::SiteConfig;
use ringsync_ops::handover::record::HandoverState;
use testbed::bins::Node;
use testbed::Etcd;

/// The pace of the runs (a test pace: the planner's overshoot and the
/// confirmation latency do not depend on it).
const PACE_MS: u64 = 1_000;
const TIMERS: &str = "ap_pace_s = 1\nap_test_pace_allowed = true";

/// Figures of one plan (a drain or a lift), in ms.
#[derive(Default)]
struct Figures {
    /// Profile write sent (or the pace from the previous plan's last
    /// move, if later) → first move published.
    first: Vec<f64>,
    /// Gap between consecutive moves, minus the pace.
    overshoot: Vec<f64>,
    /// Move published → its service's confirmation written.
    confirm: Vec<f64>,
}

impl Figures {
    /// Adds a settled plan; `prev` is the plan before it, if any (its last
    /// move holds the first move back by the pace).
    fn add(&mut self, changed_ms: u64, st: &HandoverState, prev: Option<&HandoverState>) {
        let mut at: Vec<u64> = st.desired.values().map(|d| d.at_ms).collect();
        at.sort_unstable();
        let paced = prev
            .and_then(|p| p.planner.last_move_ms)
            .map_or(0, |t| t + PACE_MS);
        self.first.push(at[0] as f64 - changed_ms.max(paced) as f64);
        for w in at.windows(2) {
            self.overshoot.push((w[1] - w[0]) as f64 - PACE_MS as f64);
        }
        for (g, d) in &st.desired {
            let c = &st.confirmed[g];
            assert_eq!(c.leader, d.leader, "{g} confirmed");
            self.confirm.push(c.at_ms as f64 - d.at_ms as f64);
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let groups: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let etcd = Etcd::single("127.0.0.21".parse().unwrap()).expect("etcd (Debian etcd-server)");
    let endpoint = etcd.endpoints()[0].clone();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let mut by: [(&str, Figures); 2] = [
            ("embedded", Figures::default()),
            ("etcd", Figures::default()),
        ];
        for round in 0..rounds {
            for (k, (name, figures)) in by.iter_mut().enumerate() {
                let prefix = format!("/drain/r{round}");
                let site = site_file(
                    &dir.path().join(format!("{name}{round}")),
                    groups,
                    match k {
                        0 => None,
                        _ => Some((endpoint.as_str(), prefix.as_str())),
                    },
                );
                drain_and_lift(&site, figures).await;
            }
        }
        println!("{groups} groups x 3 members, pace {PACE_MS} ms, {rounds} rounds of drain + lift");
        report(&by[0].1, &by[1].1);
        let site = site_file(
            &dir.path().join("handoff"),
            groups,
            Some((&endpoint, "/drain/h")),
        );
        let gap = crash_handoff(&site).await;
        println!(
            "etcd, acting serve killed (-9) after the first move: \
             next move {gap} ms later (pace {PACE_MS} ms)"
        );
    });
}

/// The site of `groups` three-member groups (home on srv-a), on the
/// embedded store or on etcd at `(endpoint, prefix)`.
fn site_file(dir: &Path, groups: usize, etcd: Option<(&str, &str)>) -> PathBuf {
    let mut text = ap_site(groups, 0, TIMERS);
    if let Some((ep, prefix)) = etcd {
        text = text.replace(
            "[store]\nkind = \"embedded\"\npath = \"t1.profiles.json\"\n",
            &format!("[store]\nkind = \"etcd\"\nendpoints = [\"{ep}\"]\nprefix = \"{prefix}\"\n"),
        );
    }
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("site.toml");
    std::fs::write(&path, text).unwrap();
    path
}

async fn open(site: &Path) -> (Arc<dyn Store>, Arc<dyn HandoverStore>) {
    let config = Arc::new(SiteConfig::load(site).unwrap());
    let s = store::open(&config).await.unwrap();
    let h = s.handover().unwrap();
    (s, h)
}

/// Sets profile `m` to `state` (creating it on srv-a first); returns when
/// the write was sent (Unix ms).
async fn set_m(s: &Arc<dyn Store>, state: ProfileState) -> u64 {
    if s.list().await.unwrap().profiles.is_empty() {
        let new = NewProfile {
            name: "m".into(),
            servers: vec!["srv-a".into()],
            ..Default::default()
        };
        s.create(new).await.unwrap();
    }
    let sent = ringsync::work::now_ms();
    s.set_state("m", state).await.unwrap();
    sent
}

fn agents(site: &Path) -> Vec<Node> {
    let config = SiteConfig::load(site).unwrap();
    members(&config)
        .iter()
        .map(|(g, m)| agent(site, g, m))
        .collect()
}

/// Waits until every group's service confirmed a leader for which `want`
/// holds, and returns the records.
async fn settled(h: &Arc<dyn HandoverStore>, want: fn(&str) -> bool) -> HandoverState {
    wait_for("settled", Duration::from_secs(120), || async {
        let st = h.read().await.ok()?;
        let done = st.confirmed.len() == st.desired.len()
            && !st.desired.is_empty()
            && st.desired.iter().all(|(g, d)| {
                want(&d.leader) && st.confirmed.get(g).is_some_and(|c| c.leader == d.leader)
            });
        done.then(|| st.as_ref().clone())
    })
    .await
}

async fn drain_and_lift(site: &Path, figures: &mut Figures) {
    let (planner, api) = serve(site);
    let _agents = agents(site);
    wait_for("planner elected", Duration::from_secs(20), || async {
        handover_of(api)
            .await
            .filter(|st| st.planner.this_node_acting == Some(true))
    })
    .await;
    let (s, h) = open(site).await;
    let changed = set_m(&s, ProfileState::Active).await;
    let out = settled(&h, |l| !l.ends_with("-a")).await;
    figures.add(changed, &out, None);
    let changed = set_m(&s, ProfileState::Inactive).await;
    let home = settled(&h, |l| l.ends_with("-a")).await;
    figures.add(changed, &home, Some(&out));
    assert!(terminate(planner).is_some_and(|s| s.success()));
}

/// Two planners on etcd; the acting one is killed right after the first
/// move: how long until the other makes the next one.
async fn crash_handoff(site: &Path) -> u64 {
    let (mut first, api) = serve(site);
    wait_for("first elected", Duration::from_secs(20), || async {
        handover_of(api)
            .await
            .filter(|st| st.planner.this_node_acting == Some(true))
    })
    .await;
    let (second, _) = serve(site);
    let _agents = agents(site);
    let (s, h) = open(site).await;
    set_m(&s, ProfileState::Active).await;
    let one = wait_for("first move", Duration::from_secs(20), || async {
        let st = h.read().await.ok()?;
        (st.planner.seq == 1).then(|| st.planner.last_move_ms.unwrap())
    })
    .await;
    first.kill();
    let two = wait_for("second move", Duration::from_secs(30), || async {
        let st = h.read().await.ok()?;
        (st.planner.seq == 2).then(|| st.planner.last_move_ms.unwrap())
    })
    .await;
    assert!(terminate(second).is_some_and(|s| s.success()));
    two - one
}

/// The table: embedded and etcd side by side.
fn report(embedded: &Figures, etcd: &Figures) {
    println!("| measure (ms) | embedded p50 / max | etcd p50 / max |");
    println!("|---|---|---|");
    let rows = [
        (
            "profile write sent (or the pace from the last move, if later) → first move published",
            [&embedded.first, &etcd.first],
        ),
        (
            "gap between moves − pace (planner overshoot)",
            [&embedded.overshoot, &etcd.overshoot],
        ),
        (
            "move published → service confirmed",
            [&embedded.confirm, &etcd.confirm],
        ),
    ];
    for (what, [a, b]) in rows {
        println!("| {what} | {} | {} |", p50_max(a), p50_max(b));
    }
}

/// `p50 / max` of `v` (nearest rank, `testbed::stats`), in ms with one
/// decimal.
fn p50_max(v: &[f64]) -> String {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let p = |q| testbed::stats::percentile(&v, q).unwrap_or(f64::NAN);
    format!("{:.1} / {:.1} (n={})", p(0.5), p(1.0), v.len())
}
