//! Readiness, status and watchdog to the service manager (systemd's
//! `sd_notify(3)` protocol, for `Type=notify` units), shared by every
//! daemon: `sip-gate`, `media-ctl`, `ringsync serve` and `ringsync agent`.
//!
//! Each daemon says `READY=1` once its sockets are bound and its drain view
//! is loaded (what its `/readyz` waits for too), `RELOADING=1` then
//! `READY=1` around a reload of the site file, `STOPPING=1` when a signal
//! starts its stop, and keeps `STATUS=` to its phase and the drain view
//! revision it runs (`systemctl status` shows that line). When the unit sets
//! `WatchdogSec=`, a task sends `WATCHDOG=1` every half `WATCHDOG_USEC`
//! while the runtime runs its tasks, so a wedged runtime gets restarted.
//!
//! Without `NOTIFY_SOCKET` (not started by systemd) every call is a no-op.
//! A send never waits (see [`send`]), and one that fails is logged once and
//! never stops the daemon: a service manager that went away or stopped
//! reading must not take the data plane with it. The socket must be a path
//! (systemd's `/run/systemd/notify`); an abstract address (`@...`) fails
//! like any other send. The `sd-notify` crate gives the message fields and
//! the `WATCHDOG_USEC`/`WATCHDOG_PID` reading.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sd_notify::NotifyState;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::state::DrainState;

/// A daemon's line to its service manager; cheap to clone.
#[derive(Clone, Default)]
pub struct Notifier {
    inner: Arc<Inner>,
}

/// [`Inner::revision`] before [`Notifier::follow_view`].
const NO_VIEW: u64 = u64::MAX;

struct Inner {
    /// The phase `STATUS=` shows (`starting`, `serving`, `stopping`...).
    phase: Mutex<String>,
    /// The drain view revision, once a view is loaded ([`NO_VIEW`]: none
    /// yet; an empty store's view is revision 0).
    revision: AtomicU64,
    /// Set once a send failed (logged once, not per send).
    failed: AtomicBool,
}

impl Default for Inner {
    fn default() -> Inner {
        Inner {
            phase: Mutex::default(),
            revision: AtomicU64::new(NO_VIEW),
            failed: AtomicBool::default(),
        }
    }
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("status", &self.status_line())
            .finish()
    }
}

impl Notifier {
    /// A notifier for this process (its messages go where `NOTIFY_SOCKET`
    /// says, if anywhere).
    pub fn new() -> Notifier {
        Notifier::default()
    }

    /// `STATUS=` with `phase` (and the view revision, once known).
    pub fn phase(&self, phase: impl Into<String>) {
        self.set_phase(phase.into());
        self.send(&[]);
    }

    /// `READY=1` and `STATUS=` with `phase`: call once the sockets are
    /// bound and the drain view is loaded.
    pub fn ready(&self, phase: impl Into<String>) {
        self.set_phase(phase.into());
        self.send(&[NotifyState::Ready]);
    }

    /// `MAINPID=` (this process), `READY=1` and `STATUS=` with `phase`:
    /// a process that took over the service from its main process (the
    /// gate's upgrade, R-GW-3) says it is the main process now. systemd
    /// takes it from a process other than the main one only with
    /// `NotifyAccess=all`.
    pub fn ready_as_main(&self, phase: impl Into<String>) {
        self.set_phase(phase.into());
        self.send(&[NotifyState::MainPid(std::process::id()), NotifyState::Ready]);
    }

    /// `RELOADING=1` (with `MONOTONIC_USEC=`, which systemd wants with it)
    /// and `STATUS=` with `phase`: call when a reload of the site file
    /// begins, and [`Notifier::ready`] when it ended, applied or not.
    pub fn reloading(&self, phase: impl Into<String>) {
        self.set_phase(phase.into());
        match NotifyState::monotonic_usec_now() {
            Ok(now) => self.send(&[NotifyState::Reloading, now]),
            Err(_) => self.send(&[NotifyState::Reloading]),
        }
    }

    /// `STOPPING=1` and `STATUS=` with `phase`: call when the stop begins,
    /// before the drain, so the manager shows the unit deactivating.
    pub fn stopping(&self, phase: impl Into<String>) {
        self.set_phase(phase.into());
        self.send(&[NotifyState::Stopping]);
    }

    /// [`Notifier::stopping`] with `phase` once `shutdown` is cancelled:
    /// for a daemon whose signal handler only cancels a token.
    pub fn stopping_on(&self, shutdown: CancellationToken, phase: String) -> JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            shutdown.cancelled().await;
            me.stopping(phase);
        })
    }

    /// The `STATUS=` line as it is now: `PHASE; drain view revision N`.
    pub fn status_line(&self) -> String {
        let phase = self
            .inner
            .phase
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match self.inner.revision.load(Ordering::Relaxed) {
            NO_VIEW => phase,
            r => format!("{phase}; drain view revision {r}"),
        }
    }

    /// Keeps `STATUS=` to the revision of `drain`'s view: sent again with
    /// the current phase at each new view, until `shutdown`.
    pub fn follow_view(
        &self,
        drain: &Arc<DrainState>,
        shutdown: CancellationToken,
    ) -> JoinHandle<()> {
        let mut views = drain.subscribe();
        let me = self.clone();
        me.inner
            .revision
            .store(drain.view().revision(), Ordering::Relaxed);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    changed = views.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        let r = views.borrow_and_update().revision();
                        me.inner.revision.store(r, Ordering::Relaxed);
                        me.send(&[]);
                    }
                }
            }
        })
    }

    /// When the unit asks for a watchdog (`WATCHDOG_USEC`, for this
    /// process), sends `WATCHDOG=1` every half of it until `shutdown`;
    /// `None` when it does not.
    pub fn watchdog(&self, shutdown: CancellationToken) -> Option<JoinHandle<()>> {
        let every = sd_notify::watchdog_enabled()? / 2;
        // A zero period would spin; systemd's own minimum is far above 2 µs.
        let every = every.max(Duration::from_millis(1));
        tracing::info!(
            every_ms = every.as_millis() as u64,
            "systemd watchdog: pinging"
        );
        let me = self.clone();
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = tick.tick() => me.send_states(&[NotifyState::Watchdog]),
                }
            }
        }))
    }

    fn set_phase(&self, phase: String) {
        *self.inner.phase.lock().unwrap_or_else(|e| e.into_inner()) = phase;
    }

    /// `extra` and the current `STATUS=` in one datagram.
    fn send(&self, extra: &[NotifyState<'_>]) {
        let status = self.status_line();
        let mut states: Vec<NotifyState<'_>> = extra.to_vec();
        states.push(NotifyState::Status(&status));
        self.send_states(&states);
    }

    fn send_states(&self, states: &[NotifyState<'_>]) {
        if let Err(e) = send(states) {
            if !self.inner.failed.swap(true, Ordering::Relaxed) {
                let socket = std::env::var_os("NOTIFY_SOCKET").unwrap_or_default();
                tracing::warn!(
                    socket = %socket.to_string_lossy(),
                    "cannot notify the service manager: {e} (further failures are not logged)"
                );
            }
        }
    }
}

/// One datagram of `states` to `NOTIFY_SOCKET`, if set, without ever
/// waiting. `sd_notify::notify` sends on a blocking socket: a manager that
/// does not read (a busy systemd; the kernel queues only
/// `net.unix.max_dgram_qlen` datagrams, 10 by default) would then stall
/// the runtime thread that sends, and with it a current-thread daemon's
/// data plane. A datagram that finds the queue full is dropped and the
/// failure reported instead: the next status or ping says the same again.
fn send(states: &[NotifyState<'_>]) -> std::io::Result<()> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(());
    };
    let msg: String = states.iter().map(|s| format!("{s}\n")).collect();
    let socket = std::os::unix::net::UnixDatagram::unbound()?;
    socket.set_nonblocking(true)?;
    socket.connect(&path)?;
    let sent = socket.send(msg.as_bytes())?;
    if sent == msg.len() {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            format!("{sent} of {} bytes sent", msg.len()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_names_the_phase_then_the_revision_once_known() {
        let n = Notifier::new();
        n.set_phase("starting".into());
        assert_eq!(n.status_line(), "starting");
        n.inner.revision.store(0, Ordering::Relaxed);
        n.set_phase("serving".into());
        assert_eq!(n.status_line(), "serving; drain view revision 0");
    }
}
