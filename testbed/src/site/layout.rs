//! Where everything of a rehearsal site lives, and the site files that say
//! so. A layout is built from a site file, always: either the operator's own
//! ([`Layout::from_file`]) or one written from counts
//! ([`Layout::from_counts`], `counts`). Both go through ringsync's
//! own config loader and the same mapping onto loopback ([`super::own`]), so
//! the rest of the rehearsal sees one description.
//!
//! One `/24` of loopback per run (`127.A.B.0/24`); every instance gets its
//! own address, so a capture or a log line names the instance:
//!
//! | hosts | what |
//! |---|---|
//! | `.1`–`.4` | gate nodes (the site's listeners, each on its own port; admin 9091) |
//! | `.8` | media-ctl (ng 2223, admin 9092), `ringsync serve` (8080) |
//! | `.9` | SIPp callers that belong to no esg account |
//! | `.11`–`.13` | etcd members |
//! | `.20`+ | sg, `.40`+ esg, `.60`+ mg, `.80`+ bgmg, in site-file order |
//! | `.100`+ | the callers of esg account 1, 2, ... in site-file order |

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

/// The most instances of one service (and servers) a layout holds.
pub const MAX_PER_SERVICE: usize = 20;
/// The most gate nodes.
pub const MAX_GATES: usize = 4;
/// The most esg accounts (each gets its own callers' address).
pub const MAX_ACCOUNTS: usize = 50;

/// Store of the rehearsal site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    /// ringsync's embedded file store next to the site file.
    #[default]
    Embedded,
    /// A three-member etcd cluster started for the run.
    Etcd,
}

/// How the rehearsal runs a site, whatever its description: the run's
/// network, gate nodes, store, and the timers a scenario may shorten.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSpec {
    /// `127.A.B` of the run's `/24`.
    pub net: [u8; 3],
    /// Gate nodes.
    pub gates: usize,
    /// Where profiles live during the run.
    pub store: StoreKind,
    /// Seconds a gate sent SIGTERM keeps serving its transactions before it
    /// exits regardless (`sip-gate --drain-deadline-s`, R-GW-1).
    pub gate_deadline_s: u32,
    /// `timers.mg_drain_window_s` (default: the site file's).
    pub mg_drain_window_s: Option<u32>,
    /// `timers.ap_pace_s` (default: the site file's); below 60 the run's
    /// site file allows a test pace.
    pub ap_pace_s: Option<u32>,
}

/// A service of the layout's instances that runs a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Svc {
    /// Subscriber SIP gateway.
    Sg,
    /// External SIP gateway.
    Esg,
    /// Media gateway.
    Mg,
    /// Media gateway bound to its server's sg/esg.
    Bgmg,
}

impl Svc {
    /// The service name in the site file.
    pub fn as_str(self) -> &'static str {
        match self {
            Svc::Sg => "sg",
            Svc::Esg => "esg",
            Svc::Mg => "mg",
            Svc::Bgmg => "bgmg",
        }
    }

    pub(super) fn base_host(self) -> u8 {
        match self {
            Svc::Sg => 20,
            Svc::Esg => 40,
            Svc::Mg => 60,
            Svc::Bgmg => 80,
        }
    }
}

/// One instance of the layout that the run starts a process for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inst {
    /// The site file's id (`sg-a`, `sg-nyc-2`, ...).
    pub id: String,
    /// Its service.
    pub svc: Svc,
    /// Its server.
    pub server: String,
    /// Its own address: SIP on port 5060 (sg, esg) or ng on 22222.
    pub ip: IpAddr,
}

impl Inst {
    /// SIP address (sg, esg) or ng address (mg, bgmg).
    pub fn addr(&self) -> SocketAddr {
        let port = match self.svc {
            Svc::Sg | Svc::Esg => 5060,
            Svc::Mg | Svc::Bgmg => 22222,
        };
        SocketAddr::new(self.ip, port)
    }
}

/// A SIP listener of the gate nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lsn {
    /// The site file's name.
    pub name: String,
    /// Its port on every gate node's address.
    pub port: u16,
    /// The service it balances (`balance`), or `None` for a guard.
    pub pool: Option<Svc>,
    /// The instance it guards (`guard`).
    pub guard: Option<String>,
    /// `subscriber`, `provider` or `inside`.
    pub leg: String,
    /// It serves UDP (the callers' transport).
    pub udp: bool,
}

/// An esg account and where its callers come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acct {
    /// The site file's name.
    pub name: String,
    /// Served by several esg (R-ESG-2).
    pub multi: bool,
    /// Home esg of a single-instance account (R-ESG-5).
    pub home: Option<String>,
    /// The address its rehearsal callers send from (its `match.source`).
    pub caller: IpAddr,
}

/// An Active-Passive group: `(member id, server)` in order, and its home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApGroup {
    /// Group name.
    pub name: String,
    /// Members and their servers.
    pub members: Vec<(String, String)>,
    /// The home leader (R-AP-3).
    pub home: String,
}

/// One address of the site file and the loopback address standing in for it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Mapped {
    /// What it is: `instance sg-nyc-1 sip`, `listener subscribers`, ...
    pub what: String,
    /// As the site file has it.
    pub site: String,
    /// In the rehearsal.
    pub rehearsal: String,
}

/// Everything the rehearsal needs to know about a site: names, services,
/// addresses on the run's loopback `/24`, and the site file to write.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// How the run treats the site.
    pub run: RunSpec,
    /// The operator's site file, when the site is not built from counts.
    pub source: Option<PathBuf>,
    pub(super) servers: Vec<String>,
    pub(super) instances: Vec<Inst>,
    pub(super) ap: Vec<ApGroup>,
    pub(super) listeners: Vec<Lsn>,
    pub(super) accounts: Vec<Acct>,
    pub(super) profiles: Vec<(String, Vec<String>)>,
    pub(super) mapping: Vec<Mapped>,
    pub(super) notes: Vec<String>,
    pub(super) timers: (u32, u32),
    /// The site file with the run's addresses; per gate node,
    /// [`Layout::site_toml`] sets its listeners, admin address and store.
    pub(super) body: toml::Table,
}

impl Layout {
    /// `127.A.B.host`.
    pub fn ip(&self, host: u8) -> IpAddr {
        let [a, b, c] = self.run.net;
        IpAddr::V4(Ipv4Addr::new(a, b, c, host))
    }

    /// Gate nodes.
    pub fn gates(&self) -> usize {
        self.run.gates
    }

    /// The profile store of the run.
    pub fn store(&self) -> StoreKind {
        self.run.store
    }

    /// `timers.mg_drain_window_s` of the run.
    pub fn mg_drain_window_s(&self) -> u32 {
        self.timers.0
    }

    /// `timers.ap_pace_s` of the run.
    pub fn ap_pace_s(&self) -> u32 {
        self.timers.1
    }

    /// Servers, in site-file order.
    pub fn servers(&self) -> Vec<String> {
        self.servers.clone()
    }

    /// Every instance with a process (sg, esg, mg, bgmg), in site-file order.
    pub fn instances(&self) -> Vec<Inst> {
        self.instances.clone()
    }

    /// Instances of one service.
    pub fn count(&self, svc: Svc) -> usize {
        self.instances.iter().filter(|i| i.svc == svc).count()
    }

    /// `(group, members)` of the Active-Passive groups; members are
    /// `(id, server)`.
    pub fn ap_groups(&self) -> Vec<(String, Vec<(String, String)>)> {
        self.ap
            .iter()
            .map(|g| (g.name.clone(), g.members.clone()))
            .collect()
    }

    /// The Active-Passive groups with their homes.
    pub fn ap(&self) -> &[ApGroup] {
        &self.ap
    }

    /// The gate nodes' SIP listeners.
    pub fn listeners(&self) -> &[Lsn] {
        &self.listeners
    }

    /// The listener called `name`.
    pub fn listener(&self, name: &str) -> Option<&Lsn> {
        self.listeners.iter().find(|l| l.name == name)
    }

    /// The esg accounts.
    pub fn accounts(&self) -> &[Acct] {
        &self.accounts
    }

    /// Profiles found in the operator's store: `(name, servers)`. The run
    /// creates them (inactive) in its own store.
    pub fn profiles(&self) -> &[(String, Vec<String>)] {
        &self.profiles
    }

    /// Every address of the site file and what stands in for it.
    pub fn mapping(&self) -> &[Mapped] {
        &self.mapping
    }

    /// What the run changed in the site besides addresses, and why.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// `ringsync serve`'s address (the handover planner, `admin.bind`).
    pub fn serve_addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip(8), 8080)
    }

    /// Gate node `k`'s address (SIP listeners and admin).
    pub fn gate_ip(&self, k: usize) -> IpAddr {
        self.ip(1 + u8::try_from(k).unwrap_or(0))
    }

    /// Gate node `k`'s admin address (`/metrics`, `/v1/work`, `/readyz`).
    pub fn gate_admin(&self, k: usize) -> SocketAddr {
        SocketAddr::new(self.gate_ip(k), 9091)
    }

    /// Gate node `k`'s listener called `listener`.
    pub fn gate_listener(&self, k: usize, listener: &str) -> Option<SocketAddr> {
        self.listener(listener)
            .map(|l| SocketAddr::new(self.gate_ip(k), l.port))
    }

    /// media-ctl's admin address.
    pub fn media_admin(&self) -> SocketAddr {
        SocketAddr::new(self.ip(8), 9092)
    }

    /// media-ctl's ng address (`ng_bind`), where the sg/esg's rtpengine
    /// modules would send their commands.
    pub fn media_ng(&self) -> SocketAddr {
        SocketAddr::new(self.ip(8), 2223)
    }

    /// The address of callers that belong to no esg account.
    pub fn caller_ip(&self) -> IpAddr {
        self.ip(9)
    }

    /// The account a load names: `multi` (the first multi-instance
    /// account), `single` (the first single-instance one), or its name.
    pub fn account(&self, name: &str) -> Option<&Acct> {
        match name {
            "multi" => self.accounts.iter().find(|a| a.multi),
            "single" => self.accounts.iter().find(|a| !a.multi),
            n => self.accounts.iter().find(|a| a.name == n),
        }
    }

    /// etcd members' addresses.
    pub fn etcd_ips(&self) -> [IpAddr; 3] {
        [11, 12, 13].map(|h| self.ip(h))
    }

    /// Checks what the run itself bounds (the site was checked when built).
    pub fn check(&self) -> Result<(), String> {
        let r = &self.run;
        if r.gates == 0 || r.gates > MAX_GATES {
            return Err(format!("gates = {}: 1 to {MAX_GATES}", r.gates));
        }
        if !(1..=60).contains(&r.gate_deadline_s) {
            return Err(format!("gate_deadline_s = {}: 1 to 60", r.gate_deadline_s));
        }
        if r.net[0] != 127 {
            return Err(format!("net {:?}: must be in 127.0.0.0/8", r.net));
        }
        if self.timers.1 == 0 {
            return Err("ap_pace_s = 0: at least 1".into());
        }
        Ok(())
    }
}
