//! The work book: what the gate still routes to each SIP instance (R-ST-2),
//! and whether it can vouch for that (R-ST-3).
//!
//! Four kinds of work, each counted per instance:
//! * **transactions**: INVITE transactions forwarded in either direction
//!   that have neither a final response nor passed Timer C;
//! * **dialogs** (calls): an INVITE dialog, received by the instance or
//!   placed by it through the gate, from the 2xx of its initial INVITE
//!   (one per To tag: forks count apart; a retransmitted 2xx never twice)
//!   until the final response to a BYE from either side (2xx, 481, 408; a
//!   BYE without one ends it after Timer F), a 481 to any request in it, or
//!   [`WorkConfig::max_call_age_s`] without a request seen in it;
//! * **registrations**: bindings (AoR and contact) of REGISTERs routed to
//!   the instance, from what the registrar's 2xx lists ([`bindings`]);
//! * **subscriptions**: per dialog, from the 2xx of the SUBSCRIBE (its
//!   Expires) until they expire, are refreshed to `Expires: 0`, a NOTIFY
//!   says `Subscription-State: terminated`, or a 481 answers a request in it;
//! * **connections** (`ws` instances, R-WS-3): WebSocket connections a ws
//!   pool passed to the instance, from the connect until either side
//!   closes. The gate holds each one itself, and a gate that stops closes
//!   them, so these are always known: no restart window applies.
//!
//! The BYE ends a call when it is answered, not when it is forwarded: a BYE
//! challenged for credentials (401/407) or refused leaves the call up, and
//! only the answer says which (RFC 3261 15.1.1).
//!
//! What the gate cannot see it reports as unknown, never as zero: for
//! [`WorkConfig::blind_window`] after it started (work set up before then
//! may still be alive), and after a table filled up. Calls and subscriptions
//! set up before it started are learned from the first request seen in them,
//! so a session refreshed after a restart is counted from then on.
//!
//! Times are Unix ms, from the `now` the core is given ([`Clock`]), so tests
//! run on synthetic time.

mod bindings;
mod dialogs;
mod events;
mod hash;
mod holds;
mod snapshot;
mod tally;
mod ws;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;

use arc_swap::ArcSwap;
use std::time::{Duration, Instant};

use ringsync::config::{SiteConfig, WorkConfig};
use ringsync::time::rfc3339;
use ringsync::view::Health;
use ringsync::work::{Eta, InstanceWork, Unknown, WorkCounts};

use crate::metrics as m;

use bindings::Bindings;
use dialogs::Dialogs;
use hash::Hashes;
use holds::Holds;

pub use snapshot::{SnapshotError, WorkSnapshot};
use ws::WsReached;

/// Converts the core's `Instant`s to Unix ms, anchored when the book starts.
#[derive(Debug, Clone, Copy)]
struct Clock {
    origin: Instant,
    origin_ms: u64,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            origin: Instant::now(),
            origin_ms: ringsync::work::now_ms(),
        }
    }

    fn ms(&self, t: Instant) -> u64 {
        match t.checked_duration_since(self.origin) {
            Some(d) => self.origin_ms.saturating_add(millis(d)),
            None => self
                .origin_ms
                .saturating_sub(millis(self.origin.duration_since(t))),
        }
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The `[work]` settings in ms.
#[derive(Debug, Clone, Copy)]
struct Limits {
    max_expires_s: u32,
    max_expires_ms: u64,
    max_call_age_ms: u64,
    typical_ms: u64,
    blind_ms: u64,
}

impl Limits {
    fn new(w: &WorkConfig) -> Limits {
        Limits {
            max_expires_s: w.max_expires_s,
            max_expires_ms: u64::from(w.max_expires_s) * 1000,
            max_call_age_ms: u64::from(w.max_call_age_s) * 1000,
            typical_ms: u64::from(w.typical_call_s) * 1000,
            blind_ms: millis(w.blind_window()),
        }
    }
}

/// Metrics the book counts into, registered once.
#[derive(Debug)]
struct Counters {
    /// Adds refused by a full table: calls, registrations, subscriptions.
    full: [metrics::Counter; 3],
    /// Expiries granted above `max_expires_s`.
    over_max: metrics::Counter,
}

/// Work per instance, and what the gate cannot vouch for.
#[derive(Debug)]
pub struct WorkBook {
    clock: Clock,
    hashes: Hashes,
    limits: Limits,
    site: String,
    /// Instance ids, in config order (snapshots name instances by id).
    ids: ArcSwap<Vec<String>>,
    invites: Box<[AtomicI64]>,
    /// Open ws pool connections per instance (R-WS-3).
    ws_conns: Box<[AtomicU64]>,
    /// Which instances are `ws` (their counts are always known).
    is_ws: Box<[bool]>,
    /// When a ws pool last connected to each `ws` instance: its health.
    ws_reached: WsReached,
    calls: Dialogs,
    subs: Dialogs,
    regs: Bindings,
    holds: Holds,
    started_ms: u64,
    /// Since when every piece of work routed through this gate is in the book.
    known_since_ms: AtomicU64,
    /// A work snapshot was taken in.
    restored: AtomicBool,
    /// Drain ETAs per instance, as of the last sweep.
    etas: Mutex<Vec<Eta>>,
    counters: Counters,
}

impl WorkBook {
    /// An empty book for the site's instances: it knows the work set up
    /// from `now` on.
    /// `slots` (at least the site's instance count) is how many instances
    /// its counters have room for: a reload adds instances up to it.
    pub(crate) fn new(config: &SiteConfig, slots: usize, now: Instant) -> WorkBook {
        let clock = Clock::new();
        let n = slots.max(config.instances.len());
        let w = &config.work;
        let started_ms = clock.ms(now);
        WorkBook {
            clock,
            hashes: Hashes::new(&config.site.secret),
            limits: Limits::new(w),
            site: config.site.name.clone(),
            ids: ArcSwap::from_pointee(config.instances.iter().map(|i| i.id.clone()).collect()),
            invites: (0..n).map(|_| AtomicI64::new(0)).collect(),
            ws_conns: (0..n).map(|_| AtomicU64::new(0)).collect(),
            ws_reached: WsReached::new(n, now),
            is_ws: config
                .instances
                .iter()
                .map(|i| i.service == ringsync::config::Service::Ws)
                .collect(),
            calls: Dialogs::new(n, w.max_calls as usize),
            subs: Dialogs::new(n, w.max_subscriptions as usize),
            regs: Bindings::new(n, w.max_registrations as usize),
            holds: Holds::default(),
            started_ms,
            known_since_ms: AtomicU64::new(started_ms),
            restored: AtomicBool::new(false),
            etas: Mutex::new(vec![Eta::default(); config.instances.len()]),
            counters: Counters {
                full: ["calls", "registrations", "subscriptions"]
                    .map(|t| metrics::counter!(m::WORK_TABLE_FULL, "table" => t)),
                over_max: metrics::counter!(m::WORK_EXPIRY_OVER_MAX),
            },
        }
    }

    /// Declares that nothing was routed to the site's instances before this
    /// book started (a harness that starts the gate before its peers have
    /// any work), so the restart window (R-ST-3) does not apply. Never true
    /// of a gate in service that restarted: there, use a work snapshot.
    pub fn assume_fresh_site(&self) {
        self.known_since_ms.store(0, Ordering::Relaxed);
    }

    /// The instances of a reloaded site file, whose first ones are those
    /// the book numbers its work by (`restart_only` checked that), within
    /// [`WorkBook::slots`]: snapshots name the new ones too.
    pub(crate) fn set_instances(&self, config: &SiteConfig) {
        let ids = config.instances.iter().map(|i| i.id.clone()).collect();
        self.ids.store(std::sync::Arc::new(ids));
    }

    /// Whether a call this gate carries is up (R-GW-1: a stopping gate
    /// gives its calls' next messages a moment before it leaves).
    pub(crate) fn calls_up(&self) -> bool {
        self.calls_live() > 0
    }

    /// The calls this gate carries that are up, every instance together.
    pub fn calls_live(&self) -> u64 {
        self.calls.tally().live_total()
    }

    /// The counts of instance `i`.
    pub fn get(&self, i: usize) -> WorkCounts {
        let invites = self.invites.get(i).map_or(0, |c| c.load(Ordering::Relaxed));
        WorkCounts {
            transactions: u64::try_from(invites).unwrap_or(0),
            dialogs: self.calls.tally().live(i),
            registrations: self.regs.tally().live(i),
            subscriptions: self.subs.tally().live(i),
            calls: 0,
            groups: 0,
            connections: self
                .ws_conns
                .get(i)
                .map_or(0, |c| c.load(Ordering::Relaxed)),
        }
    }

    /// A ws pool connection to instance `i` opened (`up`) or closed.
    pub(crate) fn ws_connection(&self, i: usize, up: bool) {
        if let Some(c) = self.ws_conns.get(i) {
            if up {
                c.fetch_add(1, Ordering::Relaxed);
            } else {
                c.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// A ws pool connected to `ws` instance `i` at `now` (R-WS-3).
    pub(crate) fn ws_reached(&self, i: usize, now: Instant) {
        self.ws_reached.reached(i, now);
    }

    /// The health of `ws` instance `i` at `now` as the gate's connects to
    /// it tell ([`ws::WsReached::health`], R-ST-4): `held` when a failed
    /// connect holds it unreachable, `hold` the `[dns] failover_hold_s`
    /// a connect is vouched for.
    pub fn ws_health(&self, i: usize, held: bool, hold: Duration, now: Instant) -> Health {
        let open = self
            .ws_conns
            .get(i)
            .map_or(0, |c| c.load(Ordering::Relaxed));
        self.ws_reached.health(i, (held, open), hold, now)
    }

    /// Whether the counts of instance `i` can be vouched for at `now`: a
    /// `ws` instance's always (its connections live in this gate), the
    /// others' unless [`WorkBook::unknown`] says why not.
    pub fn unknown_for(&self, i: usize, now: Instant) -> Option<Unknown> {
        if self.is_ws.get(i).copied().unwrap_or(false) {
            return None;
        }
        self.unknown(now)
    }

    /// Why the counts cannot be vouched for at `now`, and until when; `None`
    /// when they can. The same for every instance: a gate that restarted or
    /// lost entries cannot tell whose work it missed.
    pub fn unknown(&self, now: Instant) -> Option<Unknown> {
        let now_ms = self.clock.ms(now);
        let mut why: Vec<String> = Vec::new();
        let mut until = 0u64;
        let mut note = |since: u64, window: u64, text: &dyn Fn() -> String| {
            let end = since.saturating_add(window);
            if now_ms < end {
                why.push(text());
                until = until.max(end);
            }
        };
        let l = self.limits;
        let since = self.known_since_ms.load(Ordering::Relaxed);
        note(since, l.blind_ms, &|| self.blind_reason(since));
        for (tally, window, what, plural) in [
            (self.calls.tally(), l.max_call_age_ms, "call", "calls"),
            (
                self.regs.tally(),
                l.max_expires_ms,
                "registration",
                "registrations",
            ),
            (
                self.subs.tally(),
                l.max_expires_ms,
                "subscription",
                "subscriptions",
            ),
        ] {
            if let Some(t) = tally.full_at_ms() {
                note(t, window, &|| {
                    full_reason(what, tally.capacity(), t, plural)
                });
            }
        }
        (!why.is_empty()).then(|| Unknown {
            reason: why.join("; "),
            until_ms: Some(until),
        })
    }

    fn blind_reason(&self, since: u64) -> String {
        if !self.restored.load(Ordering::Relaxed) {
            format!(
                "gate started at {}; registrations, subscriptions and calls set up before then are not known",
                rfc3339(since)
            )
        } else {
            format!(
                "gate started at {} with a work snapshot that covers work set up since {}; \
                 registrations, subscriptions and calls set up before then are not known",
                rfc3339(self.started_ms),
                rfc3339(since)
            )
        }
    }

    /// What the book says of instance `i` at `now` (health left unknown:
    /// the caller knows it).
    pub fn instance_work(&self, i: usize, now: Instant) -> InstanceWork {
        let eta = self
            .etas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(i)
            .copied()
            .unwrap_or_default();
        InstanceWork {
            counts: self.get(i),
            unknown: self.unknown_for(i, now),
            eta,
            ..InstanceWork::default()
        }
    }

    /// Ends what has timed out at `now` (calls idle past the maximum age or
    /// whose BYE went unanswered, expired registrations and subscriptions,
    /// old tombstones) and, in the same pass, updates the drain ETAs per
    /// instance: the latest expiry of its registrations and subscriptions,
    /// and the expected end of its last call ([`holds`]). The core calls it
    /// about once a second.
    pub(crate) fn sweep(&self, now: Instant) {
        fn later(slot: &mut Option<u64>, t: u64) {
            *slot = Some(slot.map_or(t, |s| s.max(t)));
        }
        let now_ms = self.clock.ms(now);
        let age = self.limits.max_call_age_ms;
        let est = self.holds.estimator(self.limits.typical_ms);
        let mut etas = vec![Eta::default(); self.ids.load().len()];
        self.calls.sweep(now_ms, |d| {
            let bye_unanswered = d.until_ms != 0 && now_ms >= d.until_ms;
            let over = now_ms >= d.seen_ms.saturating_add(age) || bye_unanswered;
            if let (false, Some(e)) = (over, etas.get_mut(d.instance as usize)) {
                let end = match d.until_ms {
                    0 => est.end_ms(d.since_ms, now_ms),
                    bye => bye,
                };
                later(&mut e.calls_until_ms, end);
            }
            over
        });
        self.subs.sweep(now_ms, |d| {
            let over = now_ms >= d.until_ms;
            if let (false, Some(e)) = (over, etas.get_mut(d.instance as usize)) {
                later(&mut e.registrations_until_ms, d.until_ms);
            }
            over
        });
        self.regs.sweep(now_ms, |b| {
            if let Some(e) = etas.get_mut(b.instance as usize) {
                later(&mut e.registrations_until_ms, b.expires_ms());
            }
        });
        *self.etas.lock().unwrap_or_else(|e| e.into_inner()) = etas;
    }
}

fn full_reason(what: &str, capacity: usize, at_ms: u64, plural: &str) -> String {
    format!(
        "its {what} table was full ({capacity} entries, [work] max_{plural}) at {}; \
         {plural} set up then are not all counted",
        rfc3339(at_ms)
    )
}
