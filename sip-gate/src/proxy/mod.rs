//! The forwarding core: one received message in, at most one message out
//! (two when one message ends two transactions: [`Action::SendTwo`]).
//!
//! No sockets here: the transport layer hands in bytes with where they came
//! from, and executes the [`Action`] it gets back. That keeps every routing
//! rule testable without a network.
//!
//! Requests are forwarded byte for byte except the headers a proxy must edit
//! (RFC 3261 16.6): a new top Via, Max-Forwards decremented, the gate's own
//! Route removed (loose routing, 16.4), a Record-Route inserted on requests
//! that create dialogs, `received`/`rport` stamped on the top Via (18.2.1,
//! RFC 3581). Responses lose the gate's Via and follow the next one.
//!
//! One step per module, each adding methods to [`Core`]. They call one
//! another through it, so the list below is the order a request takes,
//! not a layering: [`route`] asks [`admit`] and [`undelivered`], and
//! [`admit`] answers in [`route`]'s terms; [`undelivered`] fails over
//! through [`resolved`]; [`transaction`] calls most of the others.
//! [`request`] checks a request and works out where it stands (sender, route
//! set, token; [`source`] and [`validity`] hold its refusals); [`route`]
//! decides where it goes from the request, the drain view and the site;
//! [`admit`] applies the overload limits to new dialogs before routing
//! spends anything on them (R-OV-1, R-OV-2); [`forward`] splices the edits;
//! [`answer`] builds the gate's own replies; [`transaction`] runs a request
//! through these with the transaction table; [`resolved`] parks requests to
//! host names while the transport resolves them (RFC 3263) and fails over
//! between targets; [`undelivered`] answers what the transport could not
//! deliver (RFC 3261 16.9) and holds unreachable instances' transports;
//! [`flow_gone`] answers a CANCEL whose INVITE went into a flow that has
//! closed (R-WS-2); [`response`] sends responses back. Beside the steps,
//! [`action`] holds what the core hands back and [`span`] the tracing span
//! of a transaction.

mod action;
mod admit;
mod answer;
mod flow_gone;
mod forward;
mod handover;
mod request;
mod resolved;
mod response;
mod route;
mod source;
mod span;
mod stranger;
mod transaction;
mod undelivered;
mod validity;
mod ws_pool;

use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use bytes::Bytes;
use ringsync::config::{Leg, SiteConfig};
use ringsync::state::DrainState;
use ringsync::view::DrainView;

use crate::branch::BranchKey;
use crate::dns::cache::DnsCache;
use crate::flow::{FlowKey, FlowTable};
use crate::health::{HealthBook, Prober, Traffic};
use crate::lifecycle::Lifecycle;
use crate::message::{Method, SipMessage};
use crate::metrics::{self as m, Forwarded};
use crate::reach::Reach;
use crate::reply::TagKey;
use crate::site::Site;
use crate::token::TokenKey;
use crate::txn::{ConnId, Inbound, TxnTable};
use crate::work::{SnapshotError, WorkBook, WorkSnapshot};

pub use action::{Action, Out};
use span::txn_span;

/// How many instances a reload may add to those the gate started with:
/// the per-instance counters (work book, health, reach) are allocated for
/// them at start, as counters that move under concurrent increments
/// cannot be copied into a longer array without losing some.
pub(crate) const SPARE_INSTANCES: usize = 64;

/// Why the core refused to build.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// A listener names an instance that is not configured.
    #[error("listener `{0}`: unknown instance")]
    UnknownInstance(String),
    /// A reload names more instances than the gate has room for.
    #[error(
        "{instances} instances: this gate has room for {slots} (those it started with and {SPARE_INSTANCES} more); restart it to add more"
    )]
    NoRoom {
        /// Instances the reloaded file names.
        instances: usize,
        /// Room the gate's counters have.
        slots: usize,
    },
}

/// The forwarding core shared by all transport tasks.
pub struct Core {
    /// What the site file makes of the core, swapped whole by a reload
    /// ([`Core::swap_site`]); a message loads it once ([`crate::site`]).
    site: ArcSwap<Site>,
    drain: Arc<DrainState>,
    tokens: TokenKey,
    /// Flow tokens of subscribers' flows (RFC 5626, RFC 3327).
    flows: FlowKey,
    /// The subscribers' open TCP connections.
    flow_table: FlowTable,
    branches: BranchKey,
    tags: TagKey,
    txns: TxnTable,
    work: Arc<WorkBook>,
    health: Arc<HealthBook>,
    /// What traffic says of each instance: answers and failures, which
    /// outrank the probes for in-dialog requests (R-FT-1 amended).
    traffic: Traffic,
    /// Instances a TCP connect or TLS handshake to failed lately, per
    /// transport (RFC 3261 16.9): passed over for new dialogs meanwhile.
    reach: Reach,
    dns: DnsCache,
    /// The gate's phase: new work is admitted only while serving (R-GW-1).
    lifecycle: Arc<Lifecycle>,
    /// How many instances the per-instance state (work book, health,
    /// reach) has room for: a reload may add instances up to it.
    slots: usize,
    /// The counters every forwarded message moves, registered once.
    forwarded: Forwarded,
    /// Sources already logged for a flow Route they may not use (R-SEC-1).
    strangers: stranger::Strangers,
    /// Refused sources logged lately (`source::log_refusal`).
    refusals_logged: stranger::LoggedLately,
    /// Pools under their health threshold send new dialogs to their
    /// backup (R-HT-1).
    backups: crate::backup::Backups,
    /// While stopping: when the gate last carried a message of a dialog or
    /// transaction it holds, in ms after `born` (R-GW-1, [`Core::is_quiet`]).
    carried_ms: std::sync::atomic::AtomicU64,
    born: Instant,
    /// Copies of every message to the `[capture]` collectors, swapped
    /// with the site.
    capture: Arc<ringsync::capture::Capture>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("listeners", &self.site.load().listeners)
            .finish_non_exhaustive()
    }
}

impl Core {
    /// Builds the core for a validated site, serving at once (its
    /// [`Lifecycle`] has nothing to wait for); the transaction table holds
    /// `[overload] max_transactions`.
    pub fn new(config: Arc<SiteConfig>, drain: Arc<DrainState>) -> Result<Core, CoreError> {
        let capacity = config.overload.max_transactions;
        Core::with_txn_capacity(config, drain, capacity)
    }

    /// The same, with a transaction table bounded to `capacity` entries
    /// (when it is full, new transactions get 503 with Retry-After; R-OV-1).
    pub fn with_txn_capacity(
        config: Arc<SiteConfig>,
        drain: Arc<DrainState>,
        capacity: usize,
    ) -> Result<Core, CoreError> {
        Core::build(config, drain, capacity, Lifecycle::serving())
    }

    /// The core of a gate, whose phase the gate moves.
    pub(crate) fn build(
        config: Arc<SiteConfig>,
        drain: Arc<DrainState>,
        capacity: usize,
        lifecycle: Arc<Lifecycle>,
    ) -> Result<Core, CoreError> {
        let now = Instant::now();
        let slots = config.instances.len() + SPARE_INSTANCES;
        let site =
            Site::build(config.clone(), None, now).map_err(|e| CoreError::UnknownInstance(e.0))?;
        m::register_at_start();
        let capture = Arc::new(ringsync::capture::Capture::new(ringsync::capture::Names {
            sent: m::CAPTURE_SENT,
            dropped: m::CAPTURE_DROPPED,
        }));
        capture.apply(&config);
        Ok(Core {
            capture,
            tokens: TokenKey::new(&config.site.secret),
            flows: FlowKey::new(&config.site.secret),
            flow_table: FlowTable::new(),
            branches: BranchKey::new(&config.site.secret),
            tags: TagKey::new(&config.site.secret),
            txns: TxnTable::new(capacity),
            drain,
            work: Arc::new(WorkBook::new(&config, slots, now)),
            health: Arc::new(HealthBook::new(slots)),
            traffic: Traffic::new(slots, now),
            reach: Reach::new(
                slots,
                std::time::Duration::from_secs(config.dns.failover_hold_s.into()),
                now,
            ),
            dns: DnsCache::new(&config.dns),
            lifecycle,
            slots,
            forwarded: Forwarded::new(),
            strangers: stranger::Strangers::default(),
            refusals_logged: stranger::LoggedLately::every(source::REFUSAL_LOG_EVERY),
            site: ArcSwap::from_pointee(site),
            backups: crate::backup::Backups::new(&config),
            carried_ms: std::sync::atomic::AtomicU64::new(0),
            born: now,
        })
    }

    /// The site tables in force: one lock-free load. A message loads them
    /// once, after the drain view (see [`Core::swap_site`] for why that order).
    pub(crate) fn site(&self) -> arc_swap::Guard<Arc<Site>> {
        self.site.load()
    }

    /// The site file in force.
    pub fn config(&self) -> Arc<SiteConfig> {
        self.site.load().config.clone()
    }

    /// Puts a reloaded site file in force, which `crate::reload` checked
    /// (only what may change live changed; instances only added after the
    /// last one). All or nothing: an error leaves the site in force whole.
    ///
    /// The order is what keeps a message that reads across the swap
    /// consistent: the work book learns the new instances, then the site
    /// tables are swapped, then the drain view is rebuilt. A message loads
    /// the view first and the site second, so the site it reads has every
    /// instance its view has (an index the view picks is always in the
    /// site), and existing instances and listeners keep their index, so
    /// the two loads never disagree on one.
    pub(crate) fn swap_site(&self, config: Arc<SiteConfig>) -> Result<(), CoreError> {
        let n = config.instances.len();
        if n > self.slots {
            return Err(CoreError::NoRoom {
                instances: n,
                slots: self.slots,
            });
        }
        let site = Site::build(config.clone(), Some(&self.site.load()), Instant::now())
            .map_err(|e| CoreError::UnknownInstance(e.0))?;
        self.work.set_instances(&config);
        self.site.store(Arc::new(site));
        self.capture.apply(&config);
        self.drain.set_config(config);
        Ok(())
    }

    /// The capture of messages to HEP collectors (`[capture]`).
    pub fn capture(&self) -> &Arc<ringsync::capture::Capture> {
        &self.capture
    }

    /// The pools this gate sends to their backup, and why (R-HT-1).
    pub(crate) fn backups_report(&self) -> Vec<ringsync::work::PoolBackup> {
        self.backups.report()
    }

    /// How host names are resolved (`[dns]`, read at start only).
    pub(crate) fn dns_config(&self) -> ringsync::config::DnsConfig {
        self.site.load().config.dns.clone()
    }

    /// How long a new dialog may wait in a UDP worker's intake (R-OV-1).
    pub(crate) fn overload_deadline(&self) -> std::time::Duration {
        self.site.load().config.overload.new_dialog_deadline()
    }

    /// The bound of each TCP connection's send queue, in messages.
    pub(crate) fn tcp_queue(&self) -> usize {
        self.site.load().config.overload.tcp_queue_messages
    }

    /// The TCP connection settings in force (`[tcp]`), for a new
    /// connection.
    pub(crate) fn tcp_config(&self) -> ringsync::config::TcpConfig {
        self.site.load().config.tcp.clone()
    }

    /// The gate's phase (R-GW-1).
    pub fn lifecycle(&self) -> &Arc<Lifecycle> {
        &self.lifecycle
    }

    /// Work the gate holds per instance.
    pub fn work(&self) -> &Arc<WorkBook> {
        &self.work
    }

    /// What the health prober needs, probing from listener `listener`.
    pub(crate) fn prober(&self, listener: usize) -> Option<Prober> {
        Some(Prober {
            drain: self.drain.clone(),
            book: self.health.clone(),
            from: self.site.load().listeners.get(listener)?.advertise,
        })
    }

    /// Whether the store the view follows is current (R-MN-2).
    pub(crate) fn store_freshness(&self) -> Arc<ringsync::store::Freshness> {
        self.drain.freshness()
    }

    /// Current view (cheap).
    pub fn view(&self) -> Arc<DrainView> {
        self.drain.view()
    }

    /// Number of remembered transactions: an INVITE until its final
    /// response (at most 200 s) and 32 s after it, any other request 32 s
    /// (the RFC 3261 timers in `txn.rs`: the time in which retransmissions,
    /// the ACK of a non-2xx and 2xx retransmissions may still arrive).
    pub fn transactions(&self) -> usize {
        self.txns.len()
    }

    /// Transactions the gate forwarded that still wait for a final
    /// response: a stopping gate waits for this to reach zero (R-GW-1).
    /// A completed transaction kept for its retransmissions (Timer J/K,
    /// Timer D) does not count: once the gate is gone they meet the next
    /// run's stateless path (the Record-Route token, the Via), which needs
    /// no table.
    pub fn in_flight(&self) -> usize {
        self.txns.unfinished()
    }

    /// A message of a dialog or transaction the gate holds was carried at
    /// `now` (an in-dialog request, an ACK or CANCEL that follows its
    /// INVITE, a relayed response). Noted only while stopping: the one
    /// relaxed load every such message pays otherwise.
    pub(crate) fn carried(&self, now: Instant) {
        if self.lifecycle.phase() == crate::lifecycle::Phase::Stopping {
            let ms = u64::try_from(now.saturating_duration_since(self.born).as_millis())
                .unwrap_or(u64::MAX)
                .max(1);
            self.carried_ms
                .fetch_max(ms, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether a stopping gate that began its stop at `since` has been
    /// quiet for `quiet` at `now`: no message of a dialog or transaction it
    /// holds carried for that long (counted from the stop's start while a
    /// call it carries is up, so the call's next message finds it). A gate
    /// whose calls still talk through it (a 2xx and its ACK, a BYE after a
    /// short call) stays for them (R-GW-1, R-GW-2: a call that was up must
    /// not fail because the gate left between two of its messages); one
    /// with no call up and nothing going on leaves at once.
    pub fn is_quiet(&self, since: Instant, now: Instant, quiet: std::time::Duration) -> bool {
        // Only a stopping gate notes traffic, and later than `born`: 0 is
        // "nothing since the stop began".
        let last = match self.carried_ms.load(std::sync::atomic::Ordering::Relaxed) {
            0 if !self.work.calls_up() => return true,
            0 => since,
            ms => self.born + std::time::Duration::from_millis(ms),
        };
        now.saturating_duration_since(last) >= quiet
    }

    /// Forgets expired transactions and ends the work that timed out
    /// (R-ST-2); the transport calls it about once a second.
    pub fn sweep(&self, now: Instant) {
        for e in self.txns.sweep(now) {
            // R-FT-1 (amended): a request forwarded to an instance that
            // expired without a final response timed out there, a traffic
            // failure as of when it was sent.
            if let (Some(i), Some(sent)) = (e.hop.instance, e.sent_at()) {
                self.traffic.failed(i, sent);
            }
            // Timer C passed without a final response.
            if e.invite {
                if let Some(i) = e.owner {
                    self.work.invite_done(i);
                }
            }
        }
        self.work.sweep(now);
        // R-HT-1: a pool whose hold is over comes back without traffic.
        self.backups.check_all(&self.view(), now);
        m::transactions(self.txns.len());
        let (open, registered) = self.flow_table.counts(now);
        m::flows(open, registered);
        m::overload_sources(self.site.load().overload.sources());
    }

    /// Hands the work counts to the drain state, so it can tell `draining`
    /// from `drained`, and to the metrics; the transport calls it about once
    /// a second, after [`Core::sweep`]. While the book cannot vouch for its
    /// counts the drain state gets none: never `drained` (R-ST-3). The
    /// instance states (`sipgate_instance_state`) are published only once
    /// the drain view is loaded: before, every instance would show `up`
    /// whatever the operator's profiles say.
    pub fn publish_work(&self, now: Instant) {
        self.publish(now, self.lifecycle.is_view_loaded());
    }

    /// The drain view is loaded: the instance states are published from it,
    /// then the gate says ready, so whoever sees it ready on `/readyz` also
    /// sees its view in `/metrics` (the sweeper's next turn may be a second
    /// away).
    pub(crate) fn view_loaded(&self, now: Instant) {
        self.publish(now, true);
        self.lifecycle.view_loaded();
    }

    fn publish(&self, now: Instant, states: bool) {
        let known = |i| self.work.unknown_for(i, now).is_none();
        // The view first, then the site: the site then has every instance
        // the view has (see `Core::swap_site`).
        let view = self.drain.view();
        let site = self.site.load();
        let sip = || {
            site.gauges
                .iter()
                .enumerate()
                .filter_map(|(i, g)| Some((i, g.as_ref()?)))
        };
        for (i, _) in sip() {
            if known(i) {
                self.drain.set_work(i, self.work.get(i).total());
            } else {
                self.drain.clear_work(i);
            }
        }
        for (i, g) in sip() {
            if let Some(iv) = view.instances().get(i) {
                g.set(&self.work.get(i), known(i), states.then_some(iv.state));
                g.set_unreachable(self.reach.held_each(i, now));
            }
        }
    }

    /// The work book as it stands, for a graceful stop to save (R-ST-3).
    /// Refused while a transaction is in flight: its answer, which would
    /// set up or change work, would be missed.
    pub fn work_snapshot(&self, now: Instant) -> Result<WorkSnapshot, SnapshotError> {
        match self.txns.unfinished() {
            0 => Ok(self.work.snapshot(now)),
            n => Err(SnapshotError::NotNow(format!(
                "{n} transactions still wait for a final response"
            ))),
        }
    }

    /// Takes a snapshot saved by this gate's last graceful stop into the
    /// work book: it then knows the work set up since that book did.
    pub fn restore_work(&self, snapshot: &WorkSnapshot, now: Instant) -> Result<(), SnapshotError> {
        self.work.restore(snapshot, now)
    }

    /// A TCP connection was accepted (`inbound` names it): one on a
    /// `subscriber` listener is a flow requests can be sent into.
    pub fn tcp_opened(&self, inbound: Inbound) {
        let Inbound::Tcp {
            listener,
            conn,
            peer,
        } = inbound
        else {
            return;
        };
        if self
            .site
            .load()
            .listeners
            .get(listener)
            .is_some_and(|l| l.leg == Leg::Subscriber)
        {
            self.flow_table.opened(conn, listener, peer);
        }
    }

    /// A TCP connection closed: its flow is gone (430 from now on).
    pub fn tcp_closed(&self, conn: ConnId) {
        self.flow_table.closed(conn);
    }

    /// Whether a registration still uses subscriber connection `conn`, so
    /// the transport keeps it open while it is idle.
    pub fn tcp_held(&self, conn: ConnId, now: Instant) -> bool {
        self.flow_table.held(conn, now)
    }

    /// Handles one received message.
    pub fn handle(&self, inbound: Inbound, data: Bytes, now: Instant) -> Action {
        self.handle_as(inbound, data, now, Received::Fresh)
    }

    /// [`Core::handle`] for a message read from a stream (TCP, TLS,
    /// WebSocket) while the runtime was `behind` its intake deadline
    /// (R-OV-1): if it is a new dialog, it gets 503.
    pub(crate) fn handle_stream(
        &self,
        inbound: Inbound,
        data: Bytes,
        now: Instant,
        behind: bool,
    ) -> Action {
        let how = if behind {
            Received::Behind
        } else {
            Received::Fresh
        };
        self.handle_as(inbound, data, now, how)
    }

    /// [`Core::handle`] for a message its UDP worker already scanned (to
    /// order its batch, R-OV-1), read `behind`: past the intake deadline, or
    /// just after its queue overflowed. If it is a new dialog, it gets 503;
    /// anything else is handled as usual.
    pub(crate) fn handle_scanned(
        &self,
        inbound: Inbound,
        msg: SipMessage,
        now: Instant,
        behind: bool,
    ) -> Action {
        let how = if behind {
            Received::Behind
        } else {
            Received::Fresh
        };
        self.handle_message(inbound, &msg, now, how)
    }

    /// [`Core::handle`], for a message received as `how` says.
    fn handle_as(&self, inbound: Inbound, data: Bytes, now: Instant, how: Received) -> Action {
        // Borrowed where it was scanned: the view is some hundred bytes,
        // which a move out of the `Result` would copy.
        let scanned = SipMessage::scan(data);
        match &scanned {
            Ok(msg) => self.handle_message(inbound, msg, now, how),
            Err(_) => {
                m::dropped("unparseable");
                Action::None
            }
        }
    }

    fn handle_message(
        &self,
        inbound: Inbound,
        msg: &SipMessage,
        now: Instant,
        how: Received,
    ) -> Action {
        // The view first, then the site, once each (see `Core::swap_site`).
        let view = self.drain.view();
        let site = self.site.load();
        let Some(listener) = site.listeners.get(inbound.listener()) else {
            m::dropped("unknown_listener");
            return Action::None;
        };
        if !msg.is_request() {
            if let Err(e) = msg.validate() {
                return self.bad_message(inbound, msg, e);
            }
            return self.response(inbound, &site, msg, now);
        }
        // Who is asking, before anything is parsed further or answered
        // (R-SEC-4): a refused source gets its refusal, never a parser's
        // 400 or 505.
        let source = self.source(&site, listener, inbound, now);
        if let Err(e) = msg.validate() {
            return match source.refused {
                Some(r) => {
                    let mname = m::method_label(msg.method().unwrap_or(Method::Other));
                    self.refuse_source(inbound, msg, r, mname)
                }
                None => self.bad_message(inbound, msg, e),
            };
        }
        self.request(inbound, (&site, listener, &view), msg, (now, how, source))
    }
}

/// How a message reached the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Received {
    /// From the network, in time.
    Fresh,
    /// From the network, read by a worker that is behind (R-OV-1).
    Behind,
    /// Handed back after the lookup it waited for: it routes on that answer
    /// even if its TTL has run out meanwhile, is never parked twice, and
    /// was admitted already.
    Resumed,
}
