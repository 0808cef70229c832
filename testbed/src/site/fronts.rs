//! Delaying relays in front of the gates (`testbed chaos`'s delay fault):
//! one per gate and UDP listener, on the run's host `240 + gate`, the
//! listener's port. The callers send there instead of to the gate; the
//! gate still sees each caller's IP. No delay until one is set.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::Layout;
use crate::delay::DelayRelay;
use crate::Result;

/// The first host number of the relays.
const HOST: u8 = 240;

/// The relays of a site, by gate and listener name.
#[derive(Debug)]
pub(crate) struct Fronts(BTreeMap<(usize, String), DelayRelay>);

impl Fronts {
    /// A relay in front of every UDP listener of every gate.
    pub(crate) fn start(l: &Layout) -> Result<Self> {
        let mut m = BTreeMap::new();
        for k in 0..l.gates() {
            for lsn in l.listeners().iter().filter(|x| x.udp) {
                let Some(gate) = l.gate_listener(k, &lsn.name) else {
                    continue;
                };
                let host = HOST + u8::try_from(k).unwrap_or(0);
                let listen = SocketAddr::new(l.ip(host), lsn.port);
                m.insert((k, lsn.name.clone()), DelayRelay::start(listen, gate)?);
            }
        }
        Ok(Self(m))
    }

    /// Where callers of gate `k`'s `listener` send.
    pub(crate) fn addr(&self, k: usize, listener: &str) -> Option<SocketAddr> {
        self.0.get(&(k, listener.to_owned())).map(DelayRelay::addr)
    }

    /// Sets the delay of every relay in front of gate `k`; false without one.
    pub(crate) fn set_delay(&self, k: usize, d: Duration) -> bool {
        let mut any = false;
        for ((g, _), r) in &self.0 {
            if *g == k {
                r.set_delay(d);
                any = true;
            }
        }
        any
    }

    /// Datagrams all the relays carried, both ways.
    pub(crate) fn relayed(&self) -> u64 {
        self.0.values().map(DelayRelay::relayed).sum()
    }
}
