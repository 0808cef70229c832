//! Helpers for handover tests: a site of Active-Passive groups, simulated
//! members behind real agents, and a log of every move published.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use ringsync::store::{HandoverStore, Store};
use ringsync::SiteConfig;
use ringsync_ops::handover::agent::{Agent, Member};
use ringsync_ops::handover::record::{Desired, HandoverState};
use testbed::bins::{BinDir, Node};
use testbed::fixture::SiteFile;
use tokio_util::sync::CancellationToken;

/// A site with servers srv-a..srv-c, `groups` groups `g1..gN` with a member
/// on every server (`g1-a`, `g1-b`, `g1-c`; home on srv-a), plus `blocked`
/// groups `h1..` with members on srv-a and srv-b only. `[timers]` text as given.
pub fn ap_site(groups: usize, two_server_groups: usize, timers: &str) -> String {
    let local = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    let mut site = SiteFile::new("t1")
        .store_path("t1.profiles.json")
        .admin(local(9), local(7))
        .admin_lines("bind = \"127.0.0.1:0\"")
        .section("timers", timers)
        .servers(&["srv-a", "srv-b", "srv-c"]);
    let mut all: Vec<(String, &[&str])> = (1..=groups)
        .map(|g| (format!("g{g}"), &["a", "b", "c"][..]))
        .collect();
    all.extend((1..=two_server_groups).map(|h| (format!("h{h}"), &["a", "b"][..])));
    for (name, servers) in &all {
        for s in *servers {
            let (id, server) = (format!("{name}-{s}"), format!("srv-{s}"));
            site = site.instance_with(&id, "billing", &server, "");
        }
        let members: Vec<String> = servers.iter().map(|s| format!("\"{name}-{s}\"")).collect();
        site = site.raw(&format!(
            "[[ap_group]]\nname = \"{name}\"\nmembers = [{}]\nhome = \"{name}-a\"\n",
            members.join(", ")
        ));
    }
    site.text().to_owned()
}

/// Every (group, member) of the site.
pub fn members(config: &SiteConfig) -> Vec<(String, String)> {
    config
        .ap_groups
        .iter()
        .flat_map(|g| g.members.iter().map(move |m| (g.name.clone(), m.clone())))
        .collect()
}

/// What simulated members did: `(member, "lead"|"follow", seq)`.
pub type SimLog = Arc<Mutex<Vec<(String, &'static str, u64)>>>;

/// A member that leads and follows at once, and remembers what it did.
#[derive(Clone, Default)]
pub struct Sim {
    pub log: SimLog,
    pub name: String,
}

impl Member for Sim {
    fn lead(&mut self, seq: u64) -> BoxFuture<'_, Result<(), String>> {
        self.log
            .lock()
            .unwrap()
            .push((self.name.clone(), "lead", seq));
        Box::pin(async { Ok(()) })
    }

    fn follow(&mut self, _leader: &str) -> BoxFuture<'_, ()> {
        self.log
            .lock()
            .unwrap()
            .push((self.name.clone(), "follow", 0));
        Box::pin(async {})
    }
}

/// Starts an agent with a [`Sim`] member for each `(group, member)`.
pub fn spawn_agents(
    config: &SiteConfig,
    store: &Arc<dyn HandoverStore>,
    who: &[(String, String)],
    shutdown: &CancellationToken,
) -> Sim {
    let sim = Sim::default();
    for (g, m) in who {
        let agent = Agent::new(config, store.clone(), g, m).unwrap();
        let mut member = Sim {
            log: sim.log.clone(),
            name: m.clone(),
        };
        let token = shutdown.clone();
        tokio::spawn(async move { agent.run(&mut member, token).await });
    }
    sim
}

/// Every desired record ever published, by publication number.
#[derive(Clone, Default)]
pub struct MoveLog(pub Arc<Mutex<BTreeMap<u64, (String, Desired)>>>);

impl MoveLog {
    /// Follows `store`'s records until `shutdown`.
    pub fn follow(store: &Arc<dyn HandoverStore>, shutdown: &CancellationToken) -> MoveLog {
        let log = MoveLog::default();
        let mut rx = store.watch();
        let (out, token) = (log.clone(), shutdown.clone());
        tokio::spawn(async move {
            loop {
                let st: Arc<HandoverState> = rx.borrow_and_update().clone();
                {
                    let mut map = out.0.lock().unwrap();
                    for (g, d) in &st.desired {
                        map.entry(d.seq).or_insert_with(|| (g.clone(), d.clone()));
                    }
                }
                tokio::select! {
                    _ = token.cancelled() => return,
                    r = rx.changed() => if r.is_err() { return },
                }
            }
        });
        log
    }

    /// The publications so far, in order: `(group, record)`.
    pub fn all(&self) -> Vec<(String, Desired)> {
        self.0.lock().unwrap().values().cloned().collect()
    }
}

/// The handover records of a store.
pub fn records(store: &Arc<dyn Store>) -> Arc<dyn HandoverStore> {
    store.handover().expect("the store keeps handover records")
}

// === real processes ===

/// The `ringsync` binary.
pub const BIN: &str = env!("CARGO_BIN_EXE_ringsync");

/// Where [`BIN`] is: the binaries cargo built for this test.
fn bins() -> BinDir {
    BinDir::at(Path::new(BIN).parent().expect("the binary's directory"))
}

/// How long a SIGTERM'd process may take to exit before [`terminate`]
/// kills it.
const STOP: Duration = Duration::from_secs(30);

/// SIGTERM, then its exit status (SIGKILL after [`STOP`]; `None` if it was
/// not running).
pub fn terminate(mut node: Node) -> Option<ExitStatus> {
    node.stop(STOP)
}

/// `ringsync serve` on `site` (binding 127.0.0.1:0), and its API address,
/// once it says where it listens. Each one has its own log files (two
/// serves may share a site directory).
pub fn serve(site: &Path) -> (Node, SocketAddr) {
    static STARTED: AtomicU32 = AtomicU32::new(0);
    let n = STARTED.fetch_add(1, Ordering::Relaxed);
    let node = Node::serve(site)
        .bins(bins())
        .admin(([127, 0, 0, 1], 0).into())
        .label(format!("ringsync-serve-{n}"))
        .start()
        .unwrap_or_else(|e| panic!("ringsync serve: {e}"));
    let api = node.admin();
    (node, api)
}

/// `ringsync agent` for one member; what it prints is [`Node::stdout`]
/// (`MEMBER.stdout` beside the site file).
pub fn agent(site: &Path, group: &str, member: &str) -> Node {
    Node::agent(site)
        .bins(bins())
        .args(["--group", group, "--member", member])
        .label(member)
        .start()
        .unwrap_or_else(|e| panic!("ringsync agent {member}: {e}"))
}

/// `ringsync ARGS` off the async runtime; stdout, or a panic with stderr.
pub async fn cli(site: &std::path::Path, args: &[&str]) -> String {
    let site = site.to_owned();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let o = tokio::task::spawn_blocking(move || {
        std::process::Command::new(BIN)
            .arg("--config")
            .arg(site)
            .args(args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        o.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// `GET path` over HTTP/1.0: status code and body.
pub async fn get(api: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(api).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

/// `/v1/handover` of a serve node.
pub async fn handover_of(
    api: std::net::SocketAddr,
) -> Option<ringsync_ops::handover::HandoverStatus> {
    let (code, body) = get(api, "/v1/handover").await?;
    (code == 200).then(|| serde_json::from_str(&body).ok())?
}

/// Polls `check` every 100 ms until it gives a value; panics with `what` after `limit`.
pub async fn wait_for<T, F, Fut>(what: &str, limit: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let t0 = std::time::Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// True when every group's service confirmed the leader the planner wants
/// and nothing is planned (blocked groups included).
pub fn all_settled(st: &ringsync_ops::handover::HandoverStatus) -> bool {
    use ringsync_ops::handover::status::GroupState;
    st.groups.iter().all(|g| {
        g.confirmed.as_deref() == Some(g.desired.as_str())
            && matches!(g.state, GroupState::Settled | GroupState::Blocked)
    })
}
