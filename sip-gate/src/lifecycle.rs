//! The gate's own lifecycle (R-GW-1): `starting` → `serving` → `stopping`
//! → `stopped`.
//!
//! One value, read three ways: the core loads it (one relaxed atomic load,
//! out-of-dialog requests only) to decide whether new work is admitted;
//! `/readyz` and the `sipgate_phase` metric show it to whatever balances
//! traffic onto the gate; tests and the binary wait on its watch channel
//! instead of sleeping (pingora's `ExecutionPhase` is the model).
//!
//! A gate serves once its listeners are bound and its drain view is loaded;
//! until then, and from the moment it starts stopping, new work gets 503.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::metrics as m;

/// Where the gate is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Listeners not bound yet or drain view not loaded: new work gets 503.
    Starting,
    /// Taking new work.
    Serving,
    /// Stopping (R-GW-1): new work gets 503, everything else flows until no
    /// transaction is left or the drain deadline.
    Stopping,
    /// Sockets closed.
    Stopped,
}

impl Phase {
    const ALL: [Phase; 4] = [
        Phase::Starting,
        Phase::Serving,
        Phase::Stopping,
        Phase::Stopped,
    ];

    /// The lower-case name (`/readyz`, metrics, logs).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Serving => "serving",
            Phase::Stopping => "stopping",
            Phase::Stopped => "stopped",
        }
    }

    fn from_u8(v: u8) -> Phase {
        Phase::ALL
            .get(usize::from(v))
            .copied()
            .unwrap_or(Phase::Stopped)
    }
}

/// The gate's phase and the conditions it is made of, shared by the core,
/// the wiring ([`crate::Gate`]) and the admin endpoint.
#[derive(Debug)]
pub struct Lifecycle {
    /// The [`Phase`] as `u8`: what the hot path reads.
    phase: AtomicU8,
    listeners_bound: AtomicBool,
    view_loaded: AtomicBool,
    tx: watch::Sender<Phase>,
    /// Serialises transitions, so the atomic, the channel and the metric
    /// never disagree; readers never take it.
    transition: Mutex<()>,
}

impl Lifecycle {
    /// A gate that has done nothing yet: `starting`.
    pub(crate) fn new() -> Arc<Lifecycle> {
        let (tx, _) = watch::channel(Phase::Starting);
        let l = Lifecycle {
            phase: AtomicU8::new(Phase::Starting as u8),
            listeners_bound: AtomicBool::new(false),
            view_loaded: AtomicBool::new(false),
            tx,
            transition: Mutex::new(()),
        };
        l.publish(Phase::Starting);
        Arc::new(l)
    }

    /// Serving at once: a core used without sockets has nothing to wait for.
    pub(crate) fn serving() -> Arc<Lifecycle> {
        let l = Lifecycle::new();
        l.listeners_bound();
        l.view_loaded();
        l
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Relaxed))
    }

    /// Every phase change, as it happens.
    pub fn subscribe(&self) -> watch::Receiver<Phase> {
        self.tx.subscribe()
    }

    /// Whether new work is admitted: the one load the core pays, on
    /// out-of-dialog requests only.
    #[inline]
    pub(crate) fn admits_new_work(&self) -> bool {
        self.phase.load(Ordering::Relaxed) == Phase::Serving as u8
    }

    /// The listeners are bound and read.
    pub(crate) fn listeners_bound(&self) {
        self.listeners_bound.store(true, Ordering::Relaxed);
        self.advance(None);
    }

    /// Whether the drain view is loaded ([`Lifecycle::view_loaded`]).
    pub fn is_view_loaded(&self) -> bool {
        self.view_loaded.load(Ordering::Relaxed)
    }

    /// The drain view is loaded from the profile store: from now on the
    /// policy decides with the operator's profiles, so new work is taken.
    pub fn view_loaded(&self) {
        self.view_loaded.store(true, Ordering::Relaxed);
        self.advance(None);
    }

    /// Starts the stop (R-GW-1): `/readyz` fails and new work gets 503 from
    /// now on. False when the gate was already stopping or stopped.
    pub fn stop(&self) -> bool {
        self.advance(Some(Phase::Stopping))
    }

    /// The sockets are closed.
    pub(crate) fn stopped(&self) {
        self.advance(Some(Phase::Stopped));
    }

    /// The phase and why the gate is not ready, one line per cause (none
    /// when it serves), read together.
    pub fn readiness(&self) -> (Phase, Vec<&'static str>) {
        let phase = self.phase();
        let why = match phase {
            Phase::Serving => Vec::new(),
            Phase::Stopping => vec!["stopping: new work is refused until the gate exits"],
            Phase::Stopped => vec!["stopped"],
            Phase::Starting => {
                let mut why = Vec::new();
                if !self.listeners_bound.load(Ordering::Relaxed) {
                    why.push("listeners not bound");
                }
                if !self.view_loaded.load(Ordering::Relaxed) {
                    why.push("drain view not loaded");
                }
                why
            }
        };
        (phase, why)
    }

    /// Moves to `to` (a stop), or to whatever the conditions make a
    /// starting gate; never back from stopping or stopped. True if the phase
    /// changed.
    fn advance(&self, to: Option<Phase>) -> bool {
        let _held = self.transition.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.phase();
        let next = match (now, to) {
            (Phase::Stopped, _) => Phase::Stopped,
            (_, Some(Phase::Stopped)) => Phase::Stopped,
            (Phase::Stopping, _) => Phase::Stopping,
            (_, Some(stop)) => stop,
            (_, None)
                if self.listeners_bound.load(Ordering::Relaxed)
                    && self.view_loaded.load(Ordering::Relaxed) =>
            {
                Phase::Serving
            }
            (_, None) => Phase::Starting,
        };
        if next == now {
            return false;
        }
        self.phase.store(next as u8, Ordering::Relaxed);
        self.tx.send_replace(next);
        self.publish(next);
        tracing::debug!(from = now.as_str(), to = next.as_str(), "gate phase");
        true
    }

    fn publish(&self, current: Phase) {
        for p in Phase::ALL {
            let v = if p == current { 1.0 } else { 0.0 };
            metrics::gauge!(m::PHASE, "phase" => p.as_str()).set(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_once_bound_and_loaded_and_never_comes_back_from_a_stop() {
        let l = Lifecycle::new();
        let rx = l.subscribe();
        assert_eq!(l.phase(), Phase::Starting);
        assert_eq!(
            l.readiness().1,
            ["listeners not bound", "drain view not loaded"]
        );
        l.listeners_bound();
        assert_eq!(
            l.readiness(),
            (Phase::Starting, vec!["drain view not loaded"])
        );
        assert!(!l.admits_new_work());
        l.view_loaded();
        assert_eq!((l.phase(), *rx.borrow()), (Phase::Serving, Phase::Serving));
        assert!(l.admits_new_work() && l.readiness().1.is_empty());

        assert!(l.stop(), "the first stop starts it");
        assert!(!l.stop(), "a second one changes nothing");
        assert_eq!(*rx.borrow(), Phase::Stopping);
        assert!(!l.admits_new_work());
        assert_eq!(l.readiness().1.len(), 1);
        l.view_loaded();
        assert_eq!(l.phase(), Phase::Stopping, "conditions do not undo a stop");
        l.stopped();
        assert_eq!(*rx.borrow(), Phase::Stopped);
        assert!(!l.stop());
        assert_eq!(l.phase(), Phase::Stopped);
    }

    #[test]
    fn a_gate_stopped_while_starting_goes_to_stopping() {
        let l = Lifecycle::new();
        assert!(l.stop());
        assert_eq!(l.phase(), Phase::Stopping);
        assert!(!l.admits_new_work());
    }
}
