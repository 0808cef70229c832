//! The forwarding core: one received message in, at most one message out.
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

use std::collections::HashMap;
use std::hash::Hasher;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use ringsync::config::{Leg, ListenerMode, Service, SiteConfig, Transport};
use ringsync::state::DrainState;
use ringsync::view::{DrainView, InstanceState};
use siphasher::sip::SipHasher13;

use crate::edit::Splice;
use crate::message::{HeaderName, Method, ParseError, SipMessage};
use crate::metrics as m;
use crate::policy::{Admission, Policy};
use crate::reply::{self, Reply};
use crate::token::TokenKey;
use crate::txn::{Begin, ConnId, Hop, Inbound, TxnEntry, TxnTable};
use crate::uri::{host_ip, SipUri};
use crate::work::WorkBook;

/// Our branches start with the RFC 3261 magic cookie and a marker, so a
/// response can be recognised as answering something the gate sent.
const BRANCH_PREFIX: &str = "z9hG4bK-g";
/// Branch marker of the gate's own health probes.
pub(crate) const PROBE_PREFIX: &str = "z9hG4bK-p";
/// Max-Forwards a proxy adds when the request has none (RFC 3261 16.6 step 3).
const DEFAULT_MAX_FORWARDS: u32 = 70;
/// Bound on remembered transactions (see [`TxnTable`]).
const TXN_CAPACITY: usize = 1 << 20;

/// A routing decision: the hop, and the instance to name in a Record-Route;
/// or the reply to send instead, with the rule or reason for metrics.
type Decision = Result<(Hop, Option<usize>), (Reply<'static>, &'static str)>;

/// Where a message goes out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    /// A datagram from this listener's UDP socket.
    Udp {
        /// Listener index.
        listener: usize,
        /// Destination.
        to: SocketAddr,
    },
    /// Over TCP: on `conn` if it is still open, else on any connection to
    /// `to`, else a new connection from this listener.
    Tcp {
        /// Listener index.
        listener: usize,
        /// Preferred connection.
        conn: Option<ConnId>,
        /// Destination.
        to: SocketAddr,
    },
}

/// What to do with a received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send these bytes.
    Send(Out, Bytes),
    /// Nothing to send (dropped, absorbed, or a probe answer).
    None,
}

/// What the core knows of a listener.
#[derive(Debug, Clone)]
pub struct ListenerCtx {
    /// Name from the config.
    pub name: String,
    /// Address written into Via and Record-Route.
    pub advertise: SocketAddr,
    /// Balance or guard.
    pub mode: Mode,
    /// Side it faces.
    pub leg: Leg,
    /// Serves UDP.
    pub udp: bool,
    /// Serves TCP.
    pub tcp: bool,
    host: String,
}

/// A listener's mode, resolved to indexes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// New dialogs go to a member of this service's ring.
    Balance(Service),
    /// Everything goes to this instance (index into the config's instances).
    Guard(usize),
}

/// The forwarding core shared by all transport tasks.
pub struct Core {
    config: Arc<SiteConfig>,
    drain: Arc<DrainState>,
    listeners: Vec<ListenerCtx>,
    own: Vec<SocketAddr>,
    tokens: TokenKey,
    branch_keys: (u64, u64),
    txns: TxnTable,
    inside_by_addr: HashMap<SocketAddr, usize>,
    inside_by_ip: HashMap<IpAddr, usize>,
    policy: Policy,
    work: Arc<WorkBook>,
    health: crate::health::HealthBook,
    /// `sipgate_new_work_total{instance}`, registered once: no label
    /// allocation per request.
    new_work: Vec<Option<metrics::Counter>>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("listeners", &self.listeners)
            .finish_non_exhaustive()
    }
}

/// Why the core refused to build.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// A listener names an instance that is not configured.
    #[error("listener `{0}`: unknown instance")]
    UnknownInstance(String),
}

impl Core {
    /// Builds the core for a validated site.
    pub fn new(config: Arc<SiteConfig>, drain: Arc<DrainState>) -> Result<Core, CoreError> {
        let mut listeners = Vec::new();
        for l in &config.listeners {
            let mode = match &l.mode {
                ListenerMode::Balance { pool } => Mode::Balance(pool.clone()),
                ListenerMode::Guard { instance } => Mode::Guard(
                    config
                        .instances
                        .iter()
                        .position(|i| &i.id == instance)
                        .ok_or_else(|| CoreError::UnknownInstance(l.name.clone()))?,
                ),
            };
            // SocketAddr's Display writes IPv6 in brackets, as SIP wants.
            let host = l.advertise.to_string();
            listeners.push(ListenerCtx {
                name: l.name.clone(),
                advertise: l.advertise,
                mode,
                leg: l.leg,
                udp: l.transports.contains(&Transport::Udp),
                tcp: l.transports.contains(&Transport::Tcp),
                host,
            });
        }
        let mut own: Vec<SocketAddr> = config
            .listeners
            .iter()
            .flat_map(|l| [l.advertise, l.bind])
            .collect();
        own.sort();
        own.dedup();
        let mut inside_by_addr = HashMap::new();
        let mut ip_count: HashMap<IpAddr, (usize, usize)> = HashMap::new();
        for (idx, inst) in config.instances.iter().enumerate() {
            if let Some(sip) = inst.sip {
                inside_by_addr.insert(sip, idx);
                let e = ip_count.entry(sip.ip()).or_insert((idx, 0));
                e.1 += 1;
            }
        }
        // An IP shared by several instances cannot tell which one sent a
        // request from an ephemeral port; only exact address matches count then.
        let inside_by_ip = ip_count
            .into_iter()
            .filter(|(_, (_, n))| *n == 1)
            .map(|(ip, (idx, _))| (ip, idx))
            .collect();
        let mut bk0 = SipHasher13::new_with_keys(1, 2);
        bk0.write(config.site.secret.as_bytes());
        let mut bk1 = SipHasher13::new_with_keys(3, 4);
        bk1.write(config.site.secret.as_bytes());
        let work = Arc::new(WorkBook::new(config.instances.len()));
        let config_len = config.instances.len();
        // Only SIP instances take new work through the gate.
        let new_work = config
            .instances
            .iter()
            .map(|i| {
                i.service
                    .is_sip()
                    .then(|| metrics::counter!(m::NEW_WORK, "instance" => i.id.clone()))
            })
            .collect();
        Ok(Core {
            tokens: TokenKey::new(&config.site.secret),
            branch_keys: (bk0.finish(), bk1.finish()),
            txns: TxnTable::new(TXN_CAPACITY),
            policy: Policy::new(&config),
            config,
            drain,
            listeners,
            own,
            inside_by_addr,
            inside_by_ip,
            health: crate::health::HealthBook::new(config_len),
            new_work,
            work,
        })
    }

    /// The listeners, in config order.
    pub fn listeners(&self) -> &[ListenerCtx] {
        &self.listeners
    }

    /// The drain state this core consults.
    pub fn drain(&self) -> &Arc<DrainState> {
        &self.drain
    }

    /// Work the gate holds per instance.
    pub fn work(&self) -> &Arc<WorkBook> {
        &self.work
    }

    pub(crate) fn health_book(&self) -> &crate::health::HealthBook {
        &self.health
    }

    /// Hands the work counts to the drain state (so it can tell `draining`
    /// from `drained`) and to the metrics; call about once a second.
    pub fn publish_work(&self) {
        let view = self.drain.view();
        for (iv, inst) in view.instances().iter().zip(&self.config.instances) {
            for state in [
                InstanceState::Up,
                InstanceState::Down,
                InstanceState::Draining,
                InstanceState::Drained,
                InstanceState::DrainingDown,
            ] {
                let v = if iv.state == state { 1.0 } else { 0.0 };
                metrics::gauge!(m::INSTANCE_STATE, "instance" => inst.id.clone(), "state" => state.as_str()).set(v);
            }
        }
        for (i, inst) in self.config.instances.iter().enumerate() {
            if !inst.service.is_sip() {
                continue;
            }
            let w = self.work.get(i);
            self.drain.set_work(i, w.total());
            metrics::gauge!(m::INSTANCE_WORK, "instance" => inst.id.clone(), "kind" => "invites")
                .set(w.invites as f64);
            metrics::gauge!(m::INSTANCE_WORK, "instance" => inst.id.clone(), "kind" => "dialogs")
                .set(w.dialogs as f64);
        }
        self.work.sweep(Instant::now());
    }

    /// Number of remembered transactions.
    pub fn transactions(&self) -> usize {
        self.txns.len()
    }

    /// Forgets expired transactions; call about once a second.
    pub fn sweep(&self, now: Instant) {
        for e in self.txns.sweep(now) {
            if e.invite {
                if let Some(i) = e.hop.instance {
                    self.work.invite_done(i);
                }
            }
        }
        m::transactions(self.txns.len());
    }

    /// Handles one received message.
    pub fn handle(&self, inbound: Inbound, data: Bytes, now: Instant) -> Action {
        let msg = match SipMessage::scan(data) {
            Ok(msg) => msg,
            Err(_) => {
                m::dropped("unparseable");
                return Action::None;
            }
        };
        if let Err(e) = msg.validate() {
            return self.bad_message(inbound, &msg, e);
        }
        if msg.is_request() {
            self.request(inbound, &msg, now)
        } else {
            self.response(inbound, &msg, now)
        }
    }

    // === requests ===

    fn request(&self, inbound: Inbound, msg: &SipMessage, now: Instant) -> Action {
        let method = msg.method().unwrap_or(Method::Other);
        let mname = m::method_label(method);
        let Some(top_via) = msg.top_via() else {
            m::dropped("no_via");
            return Action::None;
        };
        if msg.call_id().is_none()
            || msg.cseq().is_none()
            || msg.fields(HeaderName::From).next().is_none()
            || msg.fields(HeaderName::To).next().is_none()
        {
            return self.reply_to(
                inbound,
                msg,
                &Reply::reason(400, "Missing Mandatory Header"),
                mname,
                "bad_request",
            );
        }
        if let Some((_, cseq_method)) = msg.cseq() {
            if cseq_method != method && method != Method::Other {
                return self.reply_to(
                    inbound,
                    msg,
                    &Reply::reason(400, "CSeq Method Mismatch"),
                    mname,
                    "bad_request",
                );
            }
        }

        // Max-Forwards (RFC 3261 16.3 step 3, 16.6 step 3).
        let max_forwards = match msg.max_forwards() {
            None => None,
            Some(Ok(n)) => Some(n),
            Some(Err(_)) => {
                return self.reply_to(
                    inbound,
                    msg,
                    &Reply::reason(400, "Bad Max-Forwards"),
                    mname,
                    "bad_request",
                )
            }
        };
        if max_forwards == Some(0) {
            if method == Method::Ack {
                m::dropped("max_forwards");
                return Action::None;
            }
            return self.reply_to(inbound, msg, &Reply::new(483), mname, "too_many_hops");
        }

        let key = self.txn_key(msg, &top_via);
        let listener = &self.listeners[inbound.listener()];
        let view = self.drain.view();
        // Only an instance this listener fronts (a member of its pool, or the
        // guarded instance) sends outward through it. Any other instance, e.g.
        // an sg calling out through the esg's inside leg, is a client here:
        // its new dialogs are new work for the listener's instances.
        let inside = self
            .inside_instance(inbound.peer())
            .filter(|&(i, _)| match &listener.mode {
                Mode::Balance(pool) => self.config.instances[i].service == *pool,
                Mode::Guard(g) => i == *g,
            });

        // The gate's own Routes at the top of the route set (we insert one
        // Record-Route, but a UA may also preload the gate as outbound proxy).
        let routes = msg.routes();
        let mut ours = 0;
        let mut token_instance: Option<Result<usize, ()>> = None;
        for r in &routes {
            let Some(uri) = msg.raw().get(r.uri.clone()).and_then(SipUri::parse) else {
                break;
            };
            if !self.is_own(&uri) {
                break;
            }
            ours += 1;
            if let Some(user) = uri.user {
                if token_instance.is_none() {
                    token_instance = Some(
                        self.tokens
                            .open(user)
                            .ok()
                            .and_then(|id| view.index_of(id))
                            .ok_or(()),
                    );
                }
            }
        }
        let next_route = routes.get(ours);
        // A match by IP alone (only over TCP: an instance's own connection
        // comes from an ephemeral port) is weaker than where the request is going: a
        // request whose next hop is the gate itself or a configured instance
        // comes from a client that shares the instance's address (one IPv6
        // loopback, a UA on an sg's host), not from the instance.
        let inside = inside
            .filter(|&(_, exact)| {
                // Over UDP an instance sends from the address it listens on.
                exact
                    || matches!(inbound, Inbound::Tcp { .. }) && {
                        let target = match next_route {
                            Some(r) => msg.raw().get(r.uri.clone()),
                            None => msg.request_uri(),
                        };
                        let target = target.and_then(SipUri::parse).and_then(|u| u.socket_addr());
                        !target.is_some_and(|a| {
                            self.own.contains(&a) || self.inside_by_addr.contains_key(&a)
                        })
                    }
            })
            .map(|(i, _)| i);

        // Retransmissions, CANCEL and the ACK of a non-2xx follow the first hop.
        if matches!(method, Method::Ack | Method::Cancel) {
            if let Some(e) = self.txns.get(key) {
                m::request(mname, "forwarded");
                return self.forward(
                    inbound,
                    msg,
                    &top_via,
                    max_forwards,
                    &routes[..ours],
                    e.hop,
                    None,
                    key,
                );
            }
            // The ACK of a final response the gate generated itself (the 503
            // of a drain, 403, 483...) ends that transaction here (RFC 3261
            // 17.2.1): the instance never saw the INVITE, so it must not get
            // the ACK (a draining instance would see one stray ACK per refusal).
            if method == Method::Ack
                && msg
                    .to_tag()
                    .is_some_and(|t| t.starts_with(b"gw") && t == reply::to_tag(msg).as_bytes())
            {
                m::request(mname, "absorbed");
                return Action::None;
            }
        }

        let to_tag = msg.to_tag().is_some();
        let mut decided: Option<Decision> = None;
        let decide = || -> Decision {
            if let Some(src) = inside {
                // From a configured instance toward the outside: along the
                // route set, or to the Request-URI.
                let target = match next_route {
                    Some(r) => msg.raw().get(r.uri.clone()),
                    None => msg.request_uri(),
                };
                let hop = target
                    .and_then(SipUri::parse)
                    .and_then(|u| self.outside_hop(&u, inbound))
                    .ok_or((Reply::reason(404, "Unroutable Request-URI"), "unroutable"))?;
                // Dialogs an instance starts through the gate come back to it.
                let rr = (!to_tag && creates_dialog(method)).then_some(src);
                return Ok((hop, rr));
            }
            if to_tag {
                // In-dialog from outside: the gate's token names the instance (R-SEC-1).
                let idx = match token_instance {
                    Some(Ok(idx)) => idx,
                    Some(Err(())) => {
                        return Err((Reply::reason(403, "Bad Route Token"), "bad_token"))
                    }
                    None if ours > 0 || next_route.is_some() => {
                        return Err((Reply::reason(403, "Route Not Allowed"), "foreign_route"))
                    }
                    // A UA that does not keep route sets (SIPp's stock uac): the
                    // guarded instance, or the ring by Call-ID, as the INVITE went.
                    None => match &listener.mode {
                        Mode::Guard(idx) => *idx,
                        // The call this gate saw set up (its work book), so a
                        // drain since then does not move it (R-SG-4); only
                        // when the gate has not seen it (another node, a
                        // restart), the ring by Call-ID as the INVITE went.
                        Mode::Balance(pool) => match self.work.dialog_instance(msg) {
                            Some(idx) => idx,
                            None => view.pick(pool, msg.call_id().unwrap_or_default()).ok_or((
                                Reply::reason(503, "No Instance Available"),
                                "no_instance",
                            ))?,
                        },
                    },
                };
                if let Some(r) = next_route {
                    // After the gate's Route, only the instance's own may follow.
                    let to_instance = msg
                        .raw()
                        .get(r.uri.clone())
                        .and_then(SipUri::parse)
                        .and_then(|u| u.socket_addr())
                        .is_some_and(|a| Some(a) == self.config.instances[idx].sip);
                    if !to_instance {
                        return Err((Reply::reason(403, "Route Not Allowed"), "foreign_route"));
                    }
                }
                return self.instance_hop(idx, inbound).map(|h| (h, None));
            }
            // A new dialog or out-of-dialog request from outside. Nothing the
            // client wrote decides where it goes (R-SEC-2).
            if next_route.is_some() {
                return Err((Reply::reason(403, "Route Not Allowed"), "foreign_route"));
            }
            let idx = match &listener.mode {
                Mode::Guard(idx) => *idx,
                Mode::Balance(pool) => {
                    match self
                        .policy
                        .home_instance(listener, msg, inbound.peer().ip())
                    {
                        // R-ESG-5: a single-instance account stays on its home esg.
                        Some(home) => home,
                        None => {
                            let k = match method {
                                Method::Register | Method::Subscribe | Method::Publish => {
                                    msg.to_uri().unwrap_or_default()
                                }
                                _ => msg.call_id().unwrap_or_default(),
                            };
                            view.pick(pool, k).ok_or((
                                Reply::reason(503, "No Instance Available"),
                                "no_instance",
                            ))?
                        }
                    }
                }
            };
            if let Admission::Refuse { reply, rule } = self
                .policy
                .admit(&view, inbound, listener, idx, msg, method)
            {
                return Err((reply, rule));
            }
            let hop = self.instance_hop(idx, inbound)?;
            Ok((hop, creates_dialog(method).then_some(idx)))
        };

        let begin = if method == Method::Ack || method == Method::Cancel {
            // Never remembered: an ACK has no response, a CANCEL's responses
            // follow the INVITE's entry (same branch) or the Via.
            decided = Some(decide());
            Begin::New
        } else {
            self.txns.begin(key, now, || {
                let d = decide();
                let entry = d.as_ref().ok().map(|(hop, _)| TxnEntry {
                    inbound,
                    hop: *hop,
                    invite: method == Method::Invite,
                    initial: !to_tag,
                    expires: now,
                    finished: false,
                });
                decided = Some(d);
                entry
            })
        };
        match begin {
            Begin::Full => self.reply_to(
                inbound,
                msg,
                &Reply::reason(503, "Overloaded"),
                mname,
                "overload",
            ),
            Begin::Known(hop) => {
                m::request(mname, "retransmission");
                // Forwarded exactly as the first copy, Record-Route included:
                // if the first copy was lost, this one creates the dialog.
                let rr = (!to_tag && creates_dialog(method))
                    .then(|| inside.or(hop.instance))
                    .flatten();
                self.forward(
                    inbound,
                    msg,
                    &top_via,
                    max_forwards,
                    &routes[..ours],
                    hop,
                    rr,
                    key,
                )
            }
            Begin::New => match decided {
                Some(Ok((hop, rr))) => {
                    if let Some(i) = hop.instance {
                        if method == Method::Invite {
                            self.work.invite_started(i);
                        }
                        // New work handed to an instance (what a drain stops).
                        if !to_tag && crate::policy::is_new_work(msg, method, true) {
                            if let Some(Some(c)) = self.new_work.get(i) {
                                c.increment(1);
                            }
                        }
                    }
                    m::request(mname, "forwarded");
                    self.forward(
                        inbound,
                        msg,
                        &top_via,
                        max_forwards,
                        &routes[..ours],
                        hop,
                        rr,
                        key,
                    )
                }
                Some(Err((reply, rule))) => {
                    if method == Method::Ack {
                        m::dropped(rule);
                        return Action::None;
                    }
                    self.reply_to(inbound, msg, &reply, mname, rule)
                }
                None => Action::None,
            },
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        inbound: Inbound,
        msg: &SipMessage,
        top_via: &crate::message::Via<'_>,
        max_forwards: Option<u32>,
        own_routes: &[crate::message::NameAddr],
        hop: Hop,
        record_route: Option<usize>,
        key: u64,
    ) -> Action {
        let listener = &self.listeners[inbound.listener()];
        let mut s = Splice::new(msg);
        let at = msg.headers_start();

        // Record-Route and Max-Forwards first, then our Via right above the
        // client's: the Via stack stays contiguous, so a UAS that copies the
        // INVITE's Via lines as one block (uas_cancel.xml's 487) keeps them all.
        let mut head = String::with_capacity(160);
        if let Some(idx) = record_route {
            head.push_str("Record-Route: <sip:");
            head.push_str(&self.tokens.seal(&self.config.instances[idx].id));
            head.push('@');
            head.push_str(&listener.host);
            if matches!(inbound, Inbound::Tcp { .. }) {
                head.push_str(";transport=tcp");
            }
            head.push_str(";lr>\r\n");
        }
        if max_forwards.is_none() {
            head.push_str("Max-Forwards: ");
            head.push_str(&DEFAULT_MAX_FORWARDS.to_string());
            head.push_str("\r\n");
        }
        // Our Via on top of the Via stack, with a branch derived from the
        // client's, so a retransmission or CANCEL carries the same branch downstream.
        head.push_str(if hop.tcp {
            "Via: SIP/2.0/TCP "
        } else {
            "Via: SIP/2.0/UDP "
        });
        head.push_str(&listener.host);
        head.push_str(";branch=");
        head.push_str(BRANCH_PREFIX);
        push_hex(&mut head, key);
        push_hex(&mut head, self.branch_mac(key));
        head.push_str(";rport\r\n");
        // Right above the client's top Via line, wherever that line is.
        let via_at = msg
            .headers()
            .get(top_via.field_index)
            .map_or(at, |f| f.line.start);
        if via_at == at {
            s.insert(at, Bytes::from(head));
        } else {
            let via_line = head.split_off(head.rfind("Via: ").unwrap_or(0));
            s.insert(at, Bytes::from(head));
            s.insert(via_at, Bytes::from(via_line));
        }

        // received / rport on the client's Via (RFC 3261 18.2.1, RFC 3581).
        let peer = inbound.peer();
        let sent_by_ip = host_ip(top_via.host);
        if top_via.rport.is_some() || sent_by_ip != Some(peer.ip()) {
            if let Some(raw) = msg.raw().get(top_via.range.clone()) {
                let stamped =
                    reply::stamp_via(&String::from_utf8_lossy(raw), top_via.rport.is_some(), peer);
                s.replace(top_via.range.clone(), Bytes::from(stamped));
            }
        }

        if let Some(n) = max_forwards {
            if let Some(f) = msg.fields(HeaderName::MaxForwards).next() {
                s.replace(f.value.clone(), Bytes::from((n - 1).to_string()));
            }
        }
        for r in own_routes {
            if s.remove_element(r.field_index, r.range.clone()).is_err() {
                m::dropped("edit_conflict");
                return Action::None;
            }
        }
        match s.finish() {
            Ok(bytes) => Action::Send(self.out(inbound, hop), bytes),
            Err(_) => {
                m::dropped("edit_conflict");
                Action::None
            }
        }
    }

    fn out(&self, inbound: Inbound, hop: Hop) -> Out {
        if hop.tcp {
            Out::Tcp {
                listener: inbound.listener(),
                conn: None,
                to: hop.addr,
            }
        } else {
            Out::Udp {
                listener: inbound.listener(),
                to: hop.addr,
            }
        }
    }

    /// The hop to a configured instance, over the transport the request came in on.
    fn instance_hop(
        &self,
        idx: usize,
        inbound: Inbound,
    ) -> Result<Hop, (Reply<'static>, &'static str)> {
        let addr = self
            .config
            .instances
            .get(idx)
            .and_then(|i| i.sip)
            .ok_or((Reply::reason(503, "No Instance Available"), "no_instance"))?;
        Ok(Hop {
            instance: Some(idx),
            addr,
            tcp: matches!(inbound, Inbound::Tcp { .. }),
        })
    }

    /// A hop toward the outside (requests sent by an instance).
    fn outside_hop(&self, uri: &SipUri<'_>, inbound: Inbound) -> Option<Hop> {
        let addr = uri.socket_addr()?;
        if self.own.contains(&addr) {
            return None; // a loop through ourselves
        }
        let listener = &self.listeners[inbound.listener()];
        let tcp = if uri.wants_tcp() {
            listener.tcp
        } else {
            !listener.udp
        };
        Some(Hop {
            instance: None,
            addr,
            tcp,
        })
    }

    fn is_own(&self, uri: &SipUri<'_>) -> bool {
        uri.socket_addr().is_some_and(|a| self.own.contains(&a))
    }

    /// The instance a message comes from, and whether by its exact address
    /// (`true`) or by IP alone (`false`).
    fn inside_instance(&self, peer: SocketAddr) -> Option<(usize, bool)> {
        match self.inside_by_addr.get(&peer) {
            Some(&i) => Some((i, true)),
            None => self.inside_by_ip.get(&peer.ip()).map(|&i| (i, false)),
        }
    }

    /// The transaction key: RFC 3261 branch when the client sent one with the
    /// magic cookie (17.2.3), else the RFC 2543 matching fields. ACK and
    /// CANCEL of an INVITE share the INVITE's key, as they share its branch.
    fn txn_key(&self, msg: &SipMessage, via: &crate::message::Via<'_>) -> u64 {
        let mut h = SipHasher13::new_with_keys(self.branch_keys.0, self.branch_keys.1);
        match via.branch {
            Some(b) if b.len() > 7 && b[..7].eq_ignore_ascii_case(b"z9hG4bK") => {
                h.write(b);
                h.write_u8(0xff);
                h.write(via.host);
                h.write_u16(via.port.unwrap_or(0));
            }
            _ => {
                h.write(msg.raw().get(via.range.clone()).unwrap_or_default());
                h.write(msg.call_id().unwrap_or_default());
                h.write(msg.from_tag().unwrap_or_default());
                h.write(msg.to_tag().unwrap_or_default());
                h.write_u32(msg.cseq().map_or(0, |c| c.0));
            }
        }
        h.finish()
    }

    /// MAC of a branch key (see [`Core::response`]).
    fn branch_mac(&self, key: u64) -> u64 {
        let mut h = SipHasher13::new_with_keys(self.branch_keys.1, self.branch_keys.0);
        h.write_u64(key);
        h.finish()
    }

    fn reply_to(
        &self,
        inbound: Inbound,
        msg: &SipMessage,
        r: &Reply<'_>,
        mname: &'static str,
        outcome: &'static str,
    ) -> Action {
        m::request(mname, outcome);
        if msg.method() == Some(Method::Ack) {
            return Action::None; // never answer an ACK
        }
        if msg.top_via().is_none() {
            // A response the client cannot match to its request helps nobody.
            m::dropped("unanswerable");
            return Action::None;
        }
        let bytes = reply::build(msg, inbound.peer(), r);
        Action::Send(self.back(inbound), bytes)
    }

    /// Where a reply to something received goes: on the same connection, or
    /// to the datagram's source (which is what rport asks for, and what works
    /// through NAT).
    fn back(&self, inbound: Inbound) -> Out {
        match inbound {
            Inbound::Udp { listener, peer } => Out::Udp { listener, to: peer },
            Inbound::Tcp {
                listener,
                conn,
                peer,
            } => Out::Tcp {
                listener,
                conn: Some(conn),
                to: peer,
            },
        }
    }

    fn bad_message(&self, inbound: Inbound, msg: &SipMessage, e: ParseError) -> Action {
        // A request that still has what a response needs gets 400 with the
        // reason; anything else is dropped and counted.
        match msg {
            msg if msg.is_request() && msg.has_mandatory() => {
                let mname = m::method_label(msg.method().unwrap_or(Method::Other));
                let code = if e == ParseError::UnsupportedVersion {
                    505
                } else {
                    400
                };
                self.reply_to(
                    inbound,
                    msg,
                    &Reply::reason(code, e.reason()),
                    mname,
                    "bad_request",
                )
            }
            _ => {
                m::dropped("unparseable");
                Action::None
            }
        }
    }

    // === responses ===

    fn response(&self, inbound: Inbound, msg: &SipMessage, now: Instant) -> Action {
        let Some(via) = msg.top_via() else {
            m::dropped("no_via");
            return Action::None;
        };
        let code = msg.code().unwrap_or(0);
        let branch = via.branch.unwrap_or_default();
        let ours = via
            .port
            .zip(host_ip(via.host))
            .is_some_and(|(p, ip)| self.own.contains(&SocketAddr::new(ip, p)));
        if ours && branch.starts_with(PROBE_PREFIX.as_bytes()) {
            crate::health::probe_answer(self, branch, inbound.peer());
            return Action::None;
        }
        // Only responses to what the gate sent travel back (R-SEC-1): the
        // branch carries a MAC, so a forged response cannot make the gate
        // relay it to the address in its second Via.
        let key = match branch.strip_prefix(BRANCH_PREFIX.as_bytes()).and_then(|b| {
            let (k, mac) = (b.get(..16)?, b.get(16..)?);
            let k = parse_hex(k)?;
            (parse_hex(mac)? == self.branch_mac(k)).then_some(k)
        }) {
            Some(k) if ours => k,
            _ => {
                m::response("not_ours");
                return Action::None;
            }
        };
        let cseq_method = msg.cseq().map(|c| c.1);
        let entry = if code >= 200 {
            // CANCEL shares the INVITE's key; its 200 must not end the INVITE.
            if cseq_method == Some(Method::Cancel) {
                self.txns.get(key)
            } else {
                let before = self.txns.finish(key, now);
                if let Some(e) = before.filter(|e| !e.finished) {
                    if let Some(i) = e.hop.instance {
                        if e.invite {
                            self.work.invite_done(i);
                        }
                        if e.initial && e.invite && (200..300).contains(&code) {
                            self.work.dialog_started(i, msg);
                        }
                        if cseq_method == Some(Method::Bye) {
                            self.work.dialog_ended(i, msg);
                        }
                    }
                }
                before
            }
        } else {
            let e = self.txns.get(key);
            // A provisional response after the final one (reordered on the
            // way, or a late retransmission) would confuse the UAC: like a
            // stateful proxy, do not forward it (RFC 3261 16.7 step 5).
            if e.is_some_and(|e| e.finished) && cseq_method != Some(Method::Cancel) {
                m::response("late_provisional");
                return Action::None;
            }
            e
        };

        // Drop our Via; the next one says where the response goes.
        let mut s = Splice::new(msg);
        let edited = s
            .remove_element(via.field_index, via.range.clone())
            .and_then(|()| s.finish());
        let Ok(bytes) = edited else {
            m::dropped("edit_conflict");
            return Action::None;
        };
        let out = match entry {
            Some(e) => self.back(e.inbound),
            None => {
                // No state (the gate restarted, or the entry expired): the Via.
                let Some(next) = msg.vias().nth(1) else {
                    m::dropped("no_next_via");
                    return Action::None;
                };
                let Some(to) = via_destination(&next) else {
                    m::dropped("bad_next_via");
                    return Action::None;
                };
                let tcp = next.transport.eq_ignore_ascii_case(b"TCP");
                if tcp {
                    Out::Tcp {
                        listener: inbound.listener(),
                        conn: None,
                        to,
                    }
                } else {
                    Out::Udp {
                        listener: inbound.listener(),
                        to,
                    }
                }
            }
        };
        m::response("forwarded");
        Action::Send(out, bytes)
    }

    /// Token key, for the health prober's own requests.
    pub(crate) fn config(&self) -> &Arc<SiteConfig> {
        &self.config
    }

    /// Current view (cheap).
    pub fn view(&self) -> Arc<DrainView> {
        self.drain.view()
    }
}

/// Requests that create a dialog the gate must stay in (RFC 3261 12.1, RFC 6665).
fn creates_dialog(m: Method) -> bool {
    matches!(m, Method::Invite | Method::Subscribe | Method::Refer)
}

/// RFC 3261 18.2.2 with RFC 3581: `received` and `rport` when present, else sent-by.
fn via_destination(v: &crate::message::Via<'_>) -> Option<SocketAddr> {
    let ip = host_ip(v.received.unwrap_or(v.host))?;
    let port = match v.rport {
        Some(Some(p)) => p,
        _ => v.port.unwrap_or(5060),
    };
    Some(SocketAddr::new(ip, port))
}

fn push_hex(s: &mut String, v: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for i in (0..16).rev() {
        s.push(HEX[((v >> (i * 4)) & 0xf) as usize] as char);
    }
}

fn parse_hex(b: &[u8]) -> Option<u64> {
    if b.len() != 16 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(b).ok()?, 16).ok()
}
