//! Where everything of a rehearsal site lives, and the site file that says
//! so: a pure function of the counts, so it is tested without a process.
//!
//! One `/24` of loopback per run (`127.A.B.0/24`); every server's instances
//! get their own address, so a capture or a log line names the instance:
//!
//! | hosts | what |
//! |---|---|
//! | `.1`–`.4` | gate nodes (SIP 5060 subscribers, 5070 providers, 5080 inside; admin 9091) |
//! | `.8` | media-ctl (ng 2223, admin 9092) |
//! | `.9` | SIPp callers (UAC); `.10` the callers of a single-instance esg account |
//! | `.11`–`.13` | etcd members |
//! | `.20`+ | sg, `.40`+ esg, `.60`+ mg, `.80`+ bgmg (one per server, `a`, `b`, ...) |

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// The most instances of one service (and servers) a layout holds.
pub const MAX_PER_SERVICE: usize = 20;
/// The most gate nodes.
pub const MAX_GATES: usize = 4;

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

/// Counts and timers of a site; every address follows from them.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// `127.A.B` of the run's `/24`.
    pub net: [u8; 3],
    /// sg instances, one per server from `srv-a`.
    pub sg: usize,
    /// esg instances, one per server from `srv-a`.
    pub esg: usize,
    /// mg instances, one per server from `srv-a`.
    pub mg: usize,
    /// A bgmg on every server that has an sg or esg.
    pub bgmg: bool,
    /// Gate nodes.
    pub gates: usize,
    /// Where profiles live.
    pub store: StoreKind,
    /// `timers.mg_drain_window_s`.
    pub mg_drain_window_s: u32,
    /// `timers.retry_after_s`.
    pub retry_after_s: u32,
    /// Seconds a gate sent SIGTERM keeps serving its transactions before it
    /// exits regardless (`sip-gate --drain-deadline-s`, R-GW-1).
    pub gate_deadline_s: u32,
    /// Active-Passive groups (`ap-1`, ...): a member on every server, homed
    /// on `srv-a`.
    pub ap_groups: usize,
    /// `timers.ap_pace_s`: seconds between two leader moves (R-AP-2).
    pub ap_pace_s: u32,
}

/// A service of the layout's instances.
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

    fn base_host(self) -> u8 {
        match self {
            Svc::Sg => 20,
            Svc::Esg => 40,
            Svc::Mg => 60,
            Svc::Bgmg => 80,
        }
    }
}

/// One instance of the layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inst {
    /// `sg-a`, `mg-b`, ...
    pub id: String,
    /// Its service.
    pub svc: Svc,
    /// `srv-a`, ...
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

/// The letter of server `i`: `a`, `b`, ...
fn letter(i: usize) -> char {
    char::from(b'a' + u8::try_from(i % 26).unwrap_or(0))
}

impl Layout {
    /// `127.A.B.host`.
    pub fn ip(&self, host: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(self.net[0], self.net[1], self.net[2], host))
    }

    /// Checks the counts; the message says which is out of range.
    pub fn check(&self) -> Result<(), String> {
        for (what, n) in [("sg", self.sg), ("esg", self.esg), ("mg", self.mg)] {
            if n > MAX_PER_SERVICE {
                return Err(format!("{what} = {n}: at most {MAX_PER_SERVICE}"));
            }
        }
        if self.sg + self.esg == 0 {
            return Err("a site needs at least one sg or esg".into());
        }
        if self.gates == 0 || self.gates > MAX_GATES {
            return Err(format!("gates = {}: 1 to {MAX_GATES}", self.gates));
        }
        if self.ap_groups > MAX_PER_SERVICE {
            return Err(format!(
                "ap_groups = {}: at most {MAX_PER_SERVICE}",
                self.ap_groups
            ));
        }
        if self.ap_groups > 0 && self.servers().len() < 2 {
            return Err("ap_groups needs at least two servers (a leader and a follower)".into());
        }
        if self.ap_pace_s == 0 {
            return Err("ap_pace_s = 0: at least 1".into());
        }
        if !(1..=60).contains(&self.gate_deadline_s) {
            return Err(format!(
                "gate_deadline_s = {}: 1 to 60",
                self.gate_deadline_s
            ));
        }
        if self.net[0] != 127 {
            return Err(format!("net {:?}: must be in 127.0.0.0/8", self.net));
        }
        Ok(())
    }

    /// Servers: as many as the largest service count.
    pub fn servers(&self) -> Vec<String> {
        let n = self.sg.max(self.esg).max(self.mg).max(1);
        (0..n).map(|i| format!("srv-{}", letter(i))).collect()
    }

    /// Every instance, sg first, then esg, mg, bgmg.
    pub fn instances(&self) -> Vec<Inst> {
        let mut out = Vec::new();
        let mut add = |svc: Svc, i: usize| {
            out.push(Inst {
                id: format!("{}-{}", svc.as_str(), letter(i)),
                svc,
                server: format!("srv-{}", letter(i)),
                ip: self.ip(svc.base_host() + u8::try_from(i).unwrap_or(0)),
            })
        };
        (0..self.sg).for_each(|i| add(Svc::Sg, i));
        (0..self.esg).for_each(|i| add(Svc::Esg, i));
        (0..self.mg).for_each(|i| add(Svc::Mg, i));
        if self.bgmg {
            (0..self.sg.max(self.esg)).for_each(|i| add(Svc::Bgmg, i));
        }
        out
    }

    /// `(group, members)` of the Active-Passive groups: `ap-1` with
    /// `ap1-a` (its home, on `srv-a`), `ap1-b`, ...
    pub fn ap_groups(&self) -> Vec<(String, Vec<(String, String)>)> {
        (1..=self.ap_groups)
            .map(|g| {
                let members = self
                    .servers()
                    .iter()
                    .map(|srv| {
                        let l = srv.trim_start_matches("srv-");
                        (format!("ap{g}-{l}"), srv.clone())
                    })
                    .collect();
                (format!("ap-{g}"), members)
            })
            .collect()
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
        let port = match listener {
            "subscribers" if self.sg > 0 => 5060,
            "providers" if self.esg > 0 => 5070,
            "inside" if self.esg > 0 => 5080,
            _ => return None,
        };
        Some(SocketAddr::new(self.gate_ip(k), port))
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

    /// The SIPp callers' address.
    pub fn caller_ip(&self) -> IpAddr {
        self.ip(9)
    }

    /// The address of the callers of the single-instance esg account
    /// (`rehearsal-single`, home `esg-a`, R-ESG-5): the gate tells the
    /// accounts apart by source address.
    pub fn single_caller_ip(&self) -> IpAddr {
        self.ip(10)
    }

    /// etcd members' addresses.
    pub fn etcd_ips(&self) -> [IpAddr; 3] {
        [11, 12, 13].map(|h| self.ip(h))
    }

    /// The site file of gate node `k` (node 0's is the one every other tool
    /// reads): the same site, with that node's listeners and admin address.
    pub fn site_toml(&self, k: usize, etcd: &[String]) -> String {
        let mut t = self.head(k, etcd);
        for s in self.servers() {
            let _ = writeln!(t, "[[server]]\nname = \"{s}\"");
        }
        for i in self.instances() {
            let key = match i.svc {
                Svc::Sg | Svc::Esg => "sip",
                Svc::Mg | Svc::Bgmg => "ng",
            };
            let _ = writeln!(
                t,
                "\n[[instance]]\nid = \"{}\"\nservice = \"{}\"\nserver = \"{}\"\n{key} = \"{}\"",
                i.id,
                i.svc.as_str(),
                i.server,
                i.addr()
            );
        }
        self.ap_toml(&mut t);
        if self.esg > 0 {
            let _ = writeln!(
                t,
                "\n[[account]]\nname = \"rehearsal-carrier\"\nmulti_instance = true\nmatch = {{ source = [\"{}/32\"] }}",
                self.caller_ip()
            );
            let _ = writeln!(
                t,
                "\n[[account]]\nname = \"rehearsal-single\"\nmulti_instance = false\nhome = \"esg-a\"\nmatch = {{ source = [\"{}/32\"] }}",
                self.single_caller_ip()
            );
        }
        self.listeners(k, &mut t);
        t
    }

    fn head(&self, k: usize, etcd: &[String]) -> String {
        let [a, b, c] = self.net;
        let store = match self.store {
            StoreKind::Embedded => "kind = \"embedded\"\npath = \"profiles.json\"".to_string(),
            StoreKind::Etcd => format!(
                "kind = \"etcd\"\nendpoints = [{}]\nprefix = \"/drain/rehearsal\"\ncache = \"gate-{k}.view-cache.json\"",
                etcd.iter()
                    .map(|e| format!("\"{e}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        format!(
            "# Written by testbed for one rehearsal run on {a}.{b}.{c}.0/24.\n\
             [site]\nname = \"rehearsal\"\nsecret = \"rehearsal-secret-{a}-{b}-{c}-0123456789\"\n\n\
             [store]\n{store}\n\n\
             [timers]\nretry_after_s = {ra}\nretry_after_jitter_s = 0\nmg_drain_window_s = {w}\nap_pace_s = {pace}\nap_test_pace_allowed = {test_pace}\n\n\
             [health]\ninterval_ms = 500\ntimeout_ms = 300\nfailures = 2\n\n\
             [work]\nmax_expires_s = 10\nmax_call_age_s = 60\ntypical_call_s = 10\n\n\
             [admin]\nbind = \"{m}:8080\"\ngate_bind = \"{g}\"\nmedia_bind = \"{ma}\"\n\n\
             [media]\nng_bind = \"{m}:2223\"\nping_interval_ms = 500\nping_timeout_ms = 300\nping_failures = 2\n\n",
            ra = self.retry_after_s,
            w = self.mg_drain_window_s,
            pace = self.ap_pace_s,
            test_pace = self.ap_pace_s < 60,
            m = self.ip(8),
            g = self.gate_admin(k),
            ma = self.media_admin(),
        )
    }

    fn ap_toml(&self, t: &mut String) {
        for (g, members) in self.ap_groups() {
            for (id, srv) in &members {
                let _ = writeln!(
                    t,
                    "\n[[instance]]\nid = \"{id}\"\nservice = \"ap\"\nserver = \"{srv}\""
                );
            }
            let ids: Vec<String> = members.iter().map(|m| format!("\"{}\"", m.0)).collect();
            let _ = writeln!(
                t,
                "\n[[ap_group]]\nname = \"{g}\"\nmembers = [{}]\nhome = {}",
                ids.join(", "),
                ids[0]
            );
        }
    }

    fn listeners(&self, k: usize, t: &mut String) {
        let mut add = |name: &str, pool: &str, leg: &str| {
            if let Some(bind) = self.gate_listener(k, name) {
                let _ = writeln!(
                    t,
                    "\n[[listener]]\nname = \"{name}\"\nbind = \"{bind}\"\ntransports = [\"udp\"]\nmode = \"balance\"\npool = \"{pool}\"\nleg = \"{leg}\""
                );
            }
        };
        add("subscribers", "sg", "subscriber");
        add("providers", "esg", "provider");
        add("inside", "esg", "inside");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            net: [127, 61, 2],
            sg: 3,
            esg: 2,
            mg: 3,
            bgmg: true,
            gates: 2,
            store: StoreKind::Embedded,
            mg_drain_window_s: 10,
            retry_after_s: 5,
            gate_deadline_s: 20,
            ap_groups: 2,
            ap_pace_s: 5,
        }
    }

    #[test]
    fn every_instance_has_its_own_address_on_the_run_network() {
        let l = layout();
        let inst = l.instances();
        assert_eq!(inst.len(), 3 + 2 + 3 + 3);
        let mut ips: Vec<_> = inst.iter().map(|i| i.ip).collect();
        ips.sort();
        ips.dedup();
        assert_eq!(ips.len(), inst.len());
        assert_eq!(inst[0].id, "sg-a");
        assert_eq!(inst[0].addr(), "127.61.2.20:5060".parse().unwrap());
        assert_eq!(inst[5].addr(), "127.61.2.60:22222".parse().unwrap());
        assert_eq!(l.servers(), ["srv-a", "srv-b", "srv-c"]);
    }

    #[test]
    fn the_site_file_loads_with_ringsync() {
        let l = layout();
        for k in 0..2 {
            let text = l.site_toml(k, &[]);
            let c = ringsync::config::SiteConfig::from_str_at(&text, "site.toml".as_ref())
                .unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(c.instances.len(), 11 + 2 * 3);
            assert!(text.contains("home = \"ap1-a\""), "{text}");
            assert_eq!(c.ap_groups.len(), 2);
            // The two esg accounts, told apart by the callers' address.
            assert_eq!(c.accounts.len(), 2);
            assert!(c.accounts[0].multi_instance);
            assert_eq!(c.accounts[1].home.as_deref(), Some("esg-a"));
            assert_eq!(
                c.listener("subscribers").unwrap().bind,
                l.gate_listener(k, "subscribers").unwrap()
            );
        }
        let etcd = Layout {
            store: StoreKind::Etcd,
            ..l
        };
        let text = etcd.site_toml(1, &["http://127.61.2.11:2379".into()]);
        ringsync::config::SiteConfig::from_str_at(&text, "site.toml".as_ref())
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
    }

    #[test]
    fn out_of_range_counts_are_refused_with_the_field() {
        let l = Layout { sg: 21, ..layout() };
        assert!(l.check().unwrap_err().contains("sg = 21"));
        let l = Layout {
            gates: 0,
            ..layout()
        };
        assert!(l.check().unwrap_err().contains("gates"));
    }
}
