//! Helpers for handover tests: a site of Active-Passive groups, simulated
//! members behind real agents, and a log of every move published.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use ringsync::handover::agent::{Agent, Member};
use ringsync::handover::record::{Desired, HandoverState};
use ringsync::store::{HandoverStore, Store};
use ringsync::SiteConfig;
use tokio_util::sync::CancellationToken;

/// A site with servers srv-a..srv-c, `groups` groups `g1..gN` with a member
/// on every server (`g1-a`, `g1-b`, `g1-c`; home on srv-a), plus `blocked`
/// groups `h1..` with members on srv-a and srv-b only. `[timers]` text as given.
pub fn ap_site(groups: usize, two_server_groups: usize, timers: &str) -> String {
    let mut t = format!(
        "[site]\nname = \"t1\"\n[store]\nkind = \"embedded\"\npath = \"t1.profiles.json\"\n\
         [admin]\nbind = \"127.0.0.1:0\"\ngate_bind = \"127.0.0.1:9\"\nmedia_bind = \"127.0.0.1:7\"\n\
         [timers]\n{timers}\n"
    );
    for s in ["a", "b", "c"] {
        t.push_str(&format!("[[server]]\nname = \"srv-{s}\"\n"));
    }
    let mut group = |name: String, servers: &[&str]| {
        for s in servers {
            t.push_str(&format!(
                "[[instance]]\nid = \"{name}-{s}\"\nservice = \"billing\"\nserver = \"srv-{s}\"\n"
            ));
        }
        let members: Vec<String> = servers.iter().map(|s| format!("\"{name}-{s}\"")).collect();
        t.push_str(&format!(
            "[[ap_group]]\nname = \"{name}\"\nmembers = [{}]\nhome = \"{name}-a\"\n",
            members.join(", ")
        ));
    };
    for g in 1..=groups {
        group(format!("g{g}"), &["a", "b", "c"]);
    }
    for h in 1..=two_server_groups {
        group(format!("h{h}"), &["a", "b"]);
    }
    t
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
