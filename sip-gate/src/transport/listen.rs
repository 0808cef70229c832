//! Reading the listeners: what a gate starts when it serves, and a run
//! that took over starts once it has the connections (R-GW-3).

use std::io;
use std::net::UdpSocket;
use std::sync::Arc;

use super::{accept_loop, workers, Net};

impl Net {
    /// Reads the listeners: an accept loop on each TCP one, the UDP workers
    /// (and their supervisor), the health prober; until the listening
    /// token, which the gate's stop or a hand-over cancels (R-GW-3).
    pub(super) fn listen(self: &Arc<Net>) -> io::Result<Vec<std::thread::JoinHandle<()>>> {
        let listen = self
            .listen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let tcp = self
            .tcp_listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for (idx, l) in tcp.into_iter().enumerate() {
            if let Some(l) = l {
                let _guard = self.runtime.enter();
                self.tracker
                    .spawn(accept_loop(self.clone(), idx, l, listen.clone()));
            }
        }
        let udp: Vec<(usize, Vec<Arc<UdpSocket>>)> = self
            .udp_all
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .enumerate()
            .collect();
        let probe = udp
            .iter()
            .find_map(|(idx, s)| s.first().map(|s| (*idx, s.clone())));
        let plan = workers::Plan::of(&self.core.config().overload);
        let threads = workers::start(self, udp, plan, &listen)?;
        if let Some((idx, sock)) = probe {
            if let Some(prober) = self.core.prober(idx) {
                // The probes are copied as sent from this listener's socket.
                let tap = self.udp_local[idx].map(|local| crate::health::Tap {
                    capture: self.core.capture().clone(),
                    listener: idx,
                    local,
                });
                let _guard = self.runtime.enter();
                self.tracker
                    .spawn(crate::health::run(prober, sock, tap, listen.clone()));
            }
        }
        Ok(threads)
    }
}
