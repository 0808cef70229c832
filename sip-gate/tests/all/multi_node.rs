//! Several nodes, one truth (R-PR-2, R-PR-4, R-ST-3, R-MN-1, R-MN-2), with
//! real parts only: a three-member etcd cluster, three `sip-gate`
//! binaries in front of two sg instances (SIPp UAS), SIPp UACs calling
//! through every gate, and the ringsync admin API (the code `ringsync
//! serve` runs) on its own etcd connection. One cluster for the whole
//! story, to keep start-up out of CI time:
//!
//! 1. a drain activated through the API reaches all three gates within 1 s
//!    (R-MN-1); no new call goes to the drained sg afterwards; every call
//!    already up ends normally; the site-wide status sums the gates'
//!    reports and shows the sg `draining` until the calls on every gate
//!    end, then `drained` (R-ST-3);
//! 2. the etcd leader is killed during a change: the change is acknowledged
//!    and applied exactly once on every gate;
//! 3. the whole cluster stops for 30 s under load: no failed call, no view
//!    change, every gate says it is stale, `/readyz` stays ready; a gate
//!    restarted meanwhile starts from its view cache and says so; when the
//!    cluster returns every gate is current again without re-applying
//!    anything, and follows the next change (R-MN-2).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{ip, server_addr};
use ringsync::state::DrainState;
use ringsync::store::{EtcdStore, Store};
use ringsync::view::InstanceState;
use ringsync_ops::api::{self, AdminApi};
use ringsync_ops::status::NodeBoard;
use testbed::bins::{BinDir, Node};
use testbed::fixture::SiteFile;
use testbed::http::get_ok as http_get;
use testbed::metrics::Metrics;
use testbed::{Etcd, Scenario, Sipp, SippHandle, SippReport, Transport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

const NET: (u8, u8) = (73, 1);
const GATE: &str = env!("CARGO_BIN_EXE_sip-gate");
const PREFIX: &str = "/drain/mn";

// === the site ===

fn gate_sip(k: u8) -> SocketAddr {
    SocketAddr::new(ip(NET, 1 + k), 5060)
}

fn gate_admin(k: u8) -> SocketAddr {
    SocketAddr::new(ip(NET, 1 + k), 9091)
}

/// The site of gate `k` (its listener on [`gate_sip`]), two sg, on the
/// etcd at `endpoints`: every gate's file says the same but its listener.
fn site(k: u8, endpoints: &[String]) -> SiteFile {
    SiteFile::new(&format!("t{}-{}", NET.0, NET.1))
        .section("timers", "retry_after_s = 30\nretry_after_jitter_s = 0")
        .sgs(&[("0", server_addr(NET, 0)), ("1", server_addr(NET, 1))])
        .subscribers("subs", gate_sip(k), &[])
        .etcd(endpoints, PREFIX)
        .section("work", "max_expires_s = 2\nmax_call_age_s = 6")
}

/// A gate binary with its own site file and view cache directory, run by
/// testbed's launcher (killed when dropped).
struct GateProc {
    node: Node,
    admin: SocketAddr,
}

impl GateProc {
    /// Starts gate `k` and waits until its admin endpoint answers (its view
    /// may still be loading: see [`GateProc::wait_ready`]).
    fn start(k: u8, dir: &Path, endpoints: &[String]) -> GateProc {
        let home = dir.join(format!("g{k}"));
        std::fs::create_dir_all(&home).unwrap();
        let file = site(k, endpoints).write(&home);
        let bins = BinDir::at(Path::new(GATE).parent().expect("the binary's directory"));
        let mut node = Node::gate(&file)
            .bins(bins)
            .admin(gate_admin(k))
            .args(["--node".to_owned(), format!("g{k}")])
            .env("RUST_LOG", "info")
            .start()
            .unwrap_or_else(|e| panic!("gate g{k}: {e}"));
        node.wait_up()
            .unwrap_or_else(|e| panic!("gate g{k} did not come up: {e}"));
        GateProc {
            node,
            admin: gate_admin(k),
        }
    }

    /// Waits until its `/readyz` says ready: its view is loaded and its
    /// instance states are published, so it no longer answers `(starting)`.
    fn wait_ready(&mut self) {
        self.node
            .wait_ready()
            .unwrap_or_else(|e| panic!("gate never ready: {e}"));
    }

    fn metrics(&self) -> Option<String> {
        http_get(self.admin, "/metrics")
    }

    fn metric(&self, name: &str) -> f64 {
        self.metrics()
            .and_then(|m| Metrics::new(m).total(name))
            .unwrap_or(-1.0)
    }

    fn new_work(&self, instance: &str) -> f64 {
        let m = Metrics::new(self.metrics().unwrap_or_default());
        m.sum(
            "sipgate_new_work_total",
            &[&format!("instance=\"{instance}\"")],
        )
    }

    fn log(&self) -> String {
        self.node.log()
    }
}

/// The state of the whole site, as `ringsync status` computes it.
struct Site {
    gates: Vec<GateProc>,
    store: Arc<EtcdStore>,
    state: Arc<DrainState>,
    api: SocketAddr,
    _shutdown: tokio_util::sync::DropGuard,
}

impl Site {
    /// The gates' view revisions.
    fn revisions(&self) -> Vec<f64> {
        self.gates
            .iter()
            .map(|g| g.metric("ringsync_view_revision"))
            .collect()
    }

    fn updates(&self) -> Vec<f64> {
        self.gates
            .iter()
            .map(|g| g.metric("ringsync_profile_updates_applied_total"))
            .collect()
    }

    fn stale(&self) -> Vec<f64> {
        self.gates
            .iter()
            .map(|g| g.metric("ringsync_store_stale"))
            .collect()
    }

    /// What the gates say about lost or refused messages, for a failure message.
    fn diagnose(&self) -> String {
        let mut out = String::new();
        for (k, g) in self.gates.iter().enumerate() {
            let m = g.metrics().unwrap_or_default();
            for l in m.lines().filter(|l| {
                !l.starts_with('#')
                    && (l.contains("dropped")
                        || l.contains("outcome=\"bad")
                        || l.contains("not_ours")
                        || l.contains("refus"))
            }) {
                out.push_str(&format!("g{k}: {l}\n"));
            }
            for l in g
                .log()
                .lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            {
                out.push_str(&format!("g{k} log: {l}\n"));
            }
        }
        out
    }

    /// Time until every gate shows `revision`, polled every 5 ms.
    fn until_all_at(&self, revision: f64, limit: Duration) -> Duration {
        let t0 = Instant::now();
        loop {
            if self.revisions().iter().all(|r| *r == revision) {
                return t0.elapsed();
            }
            assert!(
                t0.elapsed() < limit,
                "gates at {:?}, want {revision} within {limit:?}",
                self.revisions()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// sg-0's site-wide state and summed work (R-ST-3).
    /// sg-0's state, summed work, why it is unknown, and what the gates
    /// counted (a lower bound while a gate cannot vouch: R-ST-3).
    async fn sg0(&self) -> (InstanceState, Option<u64>, Vec<String>, u64) {
        let set = self.store.list().await.unwrap();
        self.state.set_profiles(set.clone());
        let round = ringsync_ops::sitewide::round(self.store.as_ref())
            .await
            .unwrap()
            .expect("etcd keeps a registry");
        let s = round.status(&self.state.view());
        let i = &s.instances[0];
        (i.state, i.work, i.unknown.clone(), i.counts.total())
    }

    async fn post(&self, path: &str, body: &str) -> (u16, String) {
        http(self.api, "POST", path, body).await
    }
}

async fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    let code = buf
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = buf
        .split_once("\r\n\r\n")
        .map(|x| x.1)
        .unwrap_or("")
        .to_owned();
    (code, body)
}

fn uas(i: u8) -> SippHandle {
    let a = server_addr(NET, i);
    Sipp::new(Scenario::repo("uas_call"))
        .local(a.ip(), a.port())
        .transport(Transport::Udp)
        .timeout(Duration::from_secs(240))
        .spawn()
        .expect("uas starts")
}

/// A UAC through gate `k`: `calls` calls at `rate`/s held `hold` each.
fn calls_through(
    k: u8,
    calls: u64,
    rate: u32,
    hold: Duration,
) -> tokio::task::JoinHandle<SippReport> {
    let sipp = Sipp::new(Scenario::repo("uac_call"))
        .local_ip(ip(NET, 21 + k))
        .remote(gate_sip(k))
        .transport(Transport::Udp)
        .calls(calls)
        .rate(rate)
        .duration(hold)
        .timeout(Duration::from_secs(120));
    tokio::task::spawn_blocking(move || {
        sipp.spawn()
            .expect("uac starts")
            .wait(Duration::from_secs(150))
            .expect("uac report")
    })
}

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

async fn start_site(dir: &Path, etcd: &Etcd) -> Site {
    let eps = etcd.endpoints();
    let gates: Vec<GateProc> = blocking(|| (0..3).map(|k| GateProc::start(k, dir, &eps)).collect());
    let admin_home = dir.join("admin");
    std::fs::create_dir_all(&admin_home).unwrap();
    let file = site(9, &eps).write(&admin_home);
    let config = Arc::new(ringsync::SiteConfig::load(&file).unwrap());
    let store = Arc::new(EtcdStore::open(config.clone()).await.expect("api store"));
    let state = DrainState::new(config.clone());
    let shutdown = CancellationToken::new();
    state.follow(store.clone(), shutdown.clone());
    let listener = tokio::net::TcpListener::bind((ip(NET, 30), 0))
        .await
        .unwrap();
    let api_addr = listener.local_addr().unwrap();
    let board = NodeBoard::from_registry("mn", store.clone());
    tokio::spawn(board.clone().run(Duration::from_secs(5), shutdown.clone()));
    let api = AdminApi::new(store.clone(), state.clone(), board);
    tokio::spawn(api::serve(listener, api, shutdown.clone()));
    Site {
        gates,
        store,
        state: DrainState::new(config),
        api: api_addr,
        _shutdown: shutdown.drop_guard(),
    }
}

fn assert_no_failed(what: &str, r: &SippReport, calls: u64) {
    assert_eq!(r.failed, 0, "{what}: {r:?}");
    assert_eq!(r.successful, calls, "{what}: {r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gates_one_truth_through_drain_leader_loss_and_outage() {
    let ips: Vec<_> = (41..=43).map(|h| ip(NET, h)).collect();
    let mut etcd = blocking(|| Etcd::cluster(&ips)).expect("etcd cluster");
    let dir = tempfile::tempdir().unwrap();
    let _uas = [uas(0), uas(1)];
    let site = start_site(dir.path(), &etcd).await;

    let (code, body) = site
        .post("/v1/profiles", r#"{"name":"srv-0","servers":["srv-0"]}"#)
        .await;
    assert_eq!(code, 201, "{body}");
    blocking(|| site.until_all_at(1.0, Duration::from_secs(5)));

    // === 1. drain under traffic through all three gates ===
    let uacs: Vec<_> = (0..3)
        .map(|k| calls_through(k, 30, 5, Duration::from_secs(3)))
        .collect();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        site.gates.iter().all(|g| g.new_work("sg-0") > 0.0),
        "every gate sent calls to sg-0 before the drain"
    );
    let (code, body) = site.post("/v1/profiles/srv-0/activate", "").await;
    assert_eq!(code, 200, "{body}");
    let applied = blocking(|| site.until_all_at(2.0, Duration::from_secs(1)));
    eprintln!(
        "R-MN-1: activation applied on all three gates {applied:?} after its acknowledgement"
    );
    let sent: Vec<f64> = site.gates.iter().map(|g| g.new_work("sg-0")).collect();
    let (state, work, why, counted) = site.sg0().await;
    assert_eq!(
        state,
        InstanceState::Draining,
        "calls are up on sg-0: {work:?} {why:?}"
    );

    // The gates vouch for their counts 6 s after they start (`[work]`);
    // what they counted shows the calls either way.
    let mut saw_work = counted > 0;
    let t0 = Instant::now();
    loop {
        let (state, work, why, counted) = site.sg0().await;
        if state == InstanceState::Drained {
            assert_eq!(work, Some(0));
            break;
        }
        assert_eq!(state, InstanceState::Draining, "{why:?}");
        saw_work |= counted > 0;
        assert!(
            t0.elapsed() < Duration::from_secs(40),
            "never drained: {work:?} {why:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        saw_work,
        "the sum showed the calls still up before `drained`"
    );
    for (k, u) in uacs.into_iter().enumerate() {
        assert_no_failed(&format!("gate {k}"), &u.await.unwrap(), 30);
    }
    let after: Vec<f64> = site.gates.iter().map(|g| g.new_work("sg-0")).collect();
    assert_eq!(
        sent, after,
        "R-AA-1: no new call to sg-0 on any gate after the view changed"
    );

    // === 2. the leader dies during a change ===
    let updates = site.updates();
    let leader = etcd.leader().expect("leader");
    let change = {
        let api = site.api;
        tokio::spawn(async move { http(api, "POST", "/v1/profiles/srv-0/deactivate", "").await })
    };
    let killed = Instant::now();
    blocking(|| etcd.kill(leader));
    let (code, body) = change.await.unwrap();
    eprintln!(
        "leader killed: change answered {code} after {:?}",
        killed.elapsed()
    );
    if code != 200 {
        for i in 0..etcd.len() {
            eprintln!("etcd member {i}:\n{}", etcd.log_tail(i));
        }
    }
    assert_eq!(code, 200, "acknowledged despite the leader's death: {body}");
    let applied = blocking(|| site.until_all_at(3.0, Duration::from_secs(10)));
    eprintln!(
        "leader killed: deactivation applied on all gates {applied:?} after its acknowledgement"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let once: Vec<f64> = updates.iter().map(|u| u + 1.0).collect();
    assert_eq!(site.updates(), once, "applied exactly once on every gate");
    blocking(|| etcd.start_member(leader)).expect("member back");

    // === 3. the whole cluster stops for 30 s under load ===
    let (code, body) = site.post("/v1/profiles/srv-0/activate", "").await;
    assert_eq!(code, 200, "{body}");
    blocking(|| site.until_all_at(4.0, Duration::from_secs(2)));
    let uacs: Vec<_> = (0..3)
        .map(|k| calls_through(k, 120, 3, Duration::from_secs(2)))
        .collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let revisions = site.revisions();
    let sent: Vec<f64> = site.gates.iter().map(|g| g.new_work("sg-0")).collect();
    blocking(|| etcd.stop());
    let stopped = Instant::now();
    let t0 = Instant::now();
    while site.stale().iter().any(|s| *s != 1.0) {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "gates not stale: {:?}",
            site.stale()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, ready) = http(site.api, "GET", "/readyz", "").await;
    assert_eq!(code, 200, "R-MN-2: still ready while stale");
    assert!(ready.contains("store: stale since"), "{ready}");
    let (_, status) = http(site.api, "GET", "/v1/status", "").await;
    assert!(status.contains("\"stale_since_ms\""), "{status}");
    // A gate restarted during the outage starts from its view cache, says
    // so, and keeps the drain (R-MN-2).
    let mut site = site;
    let eps = etcd.endpoints();
    let mut g2 = blocking(|| {
        drop(site.gates.pop());
        GateProc::start(2, dir.path(), &eps)
    });
    // Its admin endpoint answers before the store is opened: the view
    // comes once etcd has failed to answer, a few seconds later.
    let t0 = Instant::now();
    while !g2.log().contains("drain view loaded") {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the restarted gate never loaded a view: {}",
            g2.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = g2.log();
    assert!(log.contains("view cache"), "{log}");
    assert_eq!(g2.metric("ringsync_store_stale"), 1.0);
    assert_eq!(
        g2.metric("ringsync_view_revision"),
        4.0,
        "the cached drain holds"
    );
    // Ready before it counts as one of the site's gates: until its instance
    // states are published it answers new dialogs `503 (starting)`.
    let g2 = blocking(move || {
        g2.wait_ready();
        g2
    });
    site.gates.push(g2);
    let updates: Vec<f64> = site.updates();
    while stopped.elapsed() < Duration::from_secs(30) {
        assert_eq!(
            site.revisions(),
            revisions,
            "no view change during the outage"
        );
        assert_eq!(site.updates(), updates, "no view change during the outage");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    blocking(|| etcd.start()).expect("cluster back");
    let t0 = Instant::now();
    while site.stale().iter().any(|s| *s != 0.0) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "gates still stale: {:?}",
            site.stale()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "R-MN-2: all gates current {:?} after the cluster was healthy again",
        t0.elapsed()
    );
    assert_eq!(site.updates(), updates, "resync applies nothing twice");
    let held: Vec<f64> = site.gates.iter().map(|g| g.new_work("sg-0")).collect();
    assert_eq!(
        held[..2],
        sent[..2],
        "sg-0 stayed drained on every gate through the outage"
    );
    assert!(
        held[2] <= 0.0,
        "the restarted gate sent nothing to sg-0: {held:?}"
    );
    let (code, body) = site.post("/v1/profiles/srv-0/deactivate", "").await;
    assert_eq!(code, 200, "{body}");
    blocking(|| site.until_all_at(5.0, Duration::from_secs(2)));
    let once: Vec<f64> = updates.iter().map(|u| u + 1.0).collect();
    assert_eq!(site.updates(), once, "the next change is applied once");
    for (k, u) in uacs.into_iter().enumerate() {
        let r = u.await.unwrap();
        if r.failed > 0 {
            eprintln!("{}", site.diagnose());
        }
        assert_no_failed(&format!("outage, gate {k}"), &r, 120);
    }
}
