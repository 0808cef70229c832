//! Which configured instance a message comes from.
//!
//! Requests from an instance that a listener fronts go outward (by their
//! Route or Request-URI); everything else is a client's and meets the
//! routing policy, so this decides who may use the gate as a relay (R-SEC-1).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use ringsync::config::SiteConfig;

/// The instances' addresses, for recognising them as senders.
#[derive(Debug, Clone, Default)]
pub(crate) struct Origins {
    by_addr: HashMap<SocketAddr, usize>,
    by_ip: HashMap<IpAddr, usize>,
}

impl Origins {
    /// The SIP addresses of a site's instances.
    pub(crate) fn new(config: &SiteConfig) -> Origins {
        let mut by_addr = HashMap::new();
        let mut ip_count: HashMap<IpAddr, (usize, usize)> = HashMap::new();
        for (idx, inst) in config.instances.iter().enumerate() {
            if let Some(sip) = inst.sip {
                by_addr.insert(sip, idx);
                let e = ip_count.entry(sip.ip()).or_insert((idx, 0));
                e.1 += 1;
            }
        }
        // An IP shared by several instances cannot tell which one sent a
        // request from an ephemeral port; only exact address matches count then.
        let by_ip = ip_count
            .into_iter()
            .filter(|(_, (_, n))| *n == 1)
            .map(|(ip, (idx, _))| (ip, idx))
            .collect();
        Origins { by_addr, by_ip }
    }

    /// The instance a message comes from, and whether by its exact address
    /// (`true`) or by IP alone (`false`).
    pub(crate) fn lookup(&self, peer: SocketAddr) -> Option<(usize, bool)> {
        match self.by_addr.get(&peer) {
            Some(&i) => Some((i, true)),
            None => self.by_ip.get(&peer.ip()).map(|&i| (i, false)),
        }
    }

    /// Whether `addr` is an instance's configured SIP address.
    pub(crate) fn is_instance(&self, addr: SocketAddr) -> bool {
        self.by_addr.contains_key(&addr)
    }
}
