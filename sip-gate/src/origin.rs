//! Which configured instance a message comes from.
//!
//! Requests from an instance that a listener fronts go outward (by their
//! Route or Request-URI); everything else is a client's and meets the
//! routing policy. So this decides who may use the gate as a relay
//! (R-SEC-1), and it never guesses: an instance is recognised by
//!
//! - its configured `sip` address, exactly (IP and port), over UDP or TCP.
//!   Over TCP this covers the connections the gate opens to the instance
//!   (their remote address is the configured one) and a connection the
//!   instance opens from its listening port;
//! - a source network the operator configured on the instance (`sources`),
//!   for an instance whose own connections come from ephemeral ports.
//!
//! A client that merely shares an instance's IP (another port on the same
//! host, one IPv6 loopback) is a client.

use std::collections::HashMap;
use std::net::SocketAddr;

use ipnet::IpNet;
use ringsync::config::SiteConfig;

/// The instances' addresses and source networks.
#[derive(Debug, Clone, Default)]
pub(crate) struct Origins {
    /// Looked up for every message. Filled from the config only, so a peer
    /// cannot crowd it whatever the hasher: foldhash (seeded per process),
    /// several times cheaper than SipHash on an address.
    by_addr: HashMap<SocketAddr, usize, foldhash::fast::RandomState>,
    /// Configured `sources`; the config loader refuses overlaps, so at most
    /// one network matches.
    nets: Vec<(IpNet, usize)>,
}

impl Origins {
    /// The SIP addresses and source networks of a site's instances.
    pub(crate) fn new(config: &SiteConfig) -> Origins {
        let mut o = Origins::default();
        for (idx, inst) in config.instances.iter().enumerate() {
            if let Some(sip) = inst.sip {
                o.by_addr.insert(sip, idx);
            }
            o.nets.extend(inst.sources.iter().map(|n| (*n, idx)));
        }
        o
    }

    /// The instance a message from `peer` comes from, if any.
    pub(crate) fn instance(&self, peer: SocketAddr) -> Option<usize> {
        if let Some(&i) = self.by_addr.get(&peer) {
            return Some(i);
        }
        self.nets
            .iter()
            .find(|(net, _)| net.contains(&peer.ip()))
            .map(|&(_, i)| i)
    }
}
