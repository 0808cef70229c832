//! The media gateways of a site as media-ctl sees them: the mg and bgmg
//! instances with their ng addresses, and which server an ng command comes
//! from (the `ng_source` of the site's sg and esg instances, R-BG-*).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use ringsync::config::{Service, SiteConfig};
use ringsync::view::{DrainView, Health};

use crate::calls::CallTable;
use crate::chooser::{Candidate, Local};
use crate::weights::Ramps;

/// One mg or bgmg.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Instance index in the site config.
    pub idx: usize,
    /// Instance id.
    pub id: String,
    /// `mg` or `bgmg`.
    pub service: Service,
    /// Its server.
    pub server: String,
    /// Its ng address.
    pub ng: SocketAddr,
}

/// The site's media gateways.
#[derive(Debug, Clone)]
pub struct Pool {
    members: Vec<Member>,
    by_addr: HashMap<SocketAddr, usize>,
    by_idx: HashMap<usize, usize>,
    sources: HashMap<IpAddr, String>,
    ambiguous: Vec<IpAddr>,
}

impl Pool {
    /// The pool of a site.
    pub fn new(config: &SiteConfig) -> Pool {
        let members: Vec<Member> = config
            .instances
            .iter()
            .enumerate()
            .filter(|(_, i)| matches!(i.service, Service::Mg | Service::Bgmg))
            .filter_map(|(idx, i)| {
                Some(Member {
                    idx,
                    id: i.id.clone(),
                    service: i.service.clone(),
                    server: i.server.clone(),
                    ng: i.ng?,
                })
            })
            .collect();
        let by_addr = members.iter().enumerate().map(|(p, m)| (m.ng, p)).collect();
        let by_idx = members
            .iter()
            .enumerate()
            .map(|(p, m)| (m.idx, p))
            .collect();
        // An address claimed by instances on two servers names neither:
        // such commands get no bgmg (the config check refuses explicit
        // ones; defaults such as 127.0.0.1 for every sg can collide).
        let mut sources: HashMap<IpAddr, String> = HashMap::new();
        let mut ambiguous = Vec::new();
        for i in config.instances.iter().filter(|i| i.service.is_sip()) {
            let Some(ip) = i.ng_source else { continue };
            match sources.get(&ip) {
                Some(s) if *s != i.server => ambiguous.push(ip),
                _ => {
                    sources.insert(ip, i.server.clone());
                }
            }
        }
        for ip in &ambiguous {
            sources.remove(ip);
        }
        ambiguous.sort();
        ambiguous.dedup();
        Pool {
            members,
            by_addr,
            by_idx,
            sources,
            ambiguous,
        }
    }

    /// Every member, in config order.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The member with instance index `idx`.
    pub fn member(&self, idx: usize) -> Option<&Member> {
        self.by_idx.get(&idx).map(|&p| &self.members[p])
    }

    /// The member whose ng address is `addr`.
    pub fn by_addr(&self, addr: SocketAddr) -> Option<&Member> {
        self.by_addr.get(&addr).map(|&p| &self.members[p])
    }

    /// The server whose sg/esg sends ng commands from `ip`.
    pub fn server_of_source(&self, ip: IpAddr) -> Option<&str> {
        self.sources.get(&ip).map(String::as_str)
    }

    /// Source addresses that several servers claim (logged at start).
    pub fn ambiguous_sources(&self) -> &[IpAddr] {
        &self.ambiguous
    }

    /// The mg candidates for a new call.
    pub fn mgs(
        &self,
        view: &DrainView,
        ramps: &Ramps,
        calls: &CallTable,
        now: Instant,
        window: Duration,
    ) -> Vec<Candidate> {
        self.members
            .iter()
            .filter(|m| m.service == Service::Mg)
            .map(|m| Candidate {
                idx: m.idx,
                up: is_up(view, m.idx),
                draining: view.is_draining(m.idx),
                weight: ramps.get(m.idx).map_or(1.0, |r| r.weight(now, window)),
                calls: calls.calls(m.idx),
            })
            .collect()
    }

    /// The sender's server and its bgmgs, for a command from `source`.
    pub fn local(&self, source: IpAddr, view: &DrainView, calls: &CallTable) -> Option<Local> {
        let server = self.server_of_source(source)?;
        Some(Local {
            draining: view.drain_zone().contains(server),
            bgmgs: self
                .members
                .iter()
                .filter(|m| m.service == Service::Bgmg && m.server == server)
                .map(|m| Candidate {
                    idx: m.idx,
                    up: is_up(view, m.idx),
                    draining: false,
                    weight: 1.0,
                    calls: calls.calls(m.idx),
                })
                .collect(),
        })
    }
}

/// Not known to be down (unknown health counts as up, as in the view).
pub(crate) fn is_up(view: &DrainView, idx: usize) -> bool {
    view.instances()
        .get(idx)
        .is_some_and(|v| v.health != Health::Down)
}
