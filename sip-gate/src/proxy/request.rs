//! A request's way through the core: the checks a proxy makes before
//! routing (RFC 3261 16.3), what the gate needs to know about the request
//! (who sent it, the gate's own Routes and token), then the routing decision
//! and the transaction table.
//!
//! The decision is made without any lock held ([`Core::decide`]); the
//! transaction is then inserted if absent. When two copies of a request race
//! (two worker threads, one datagram each), only one insert wins and both
//! copies go to the winner's hop, so a request is never routed to two
//! instances.

use std::time::Instant;

use ringsync::view::DrainView;

use crate::listener::ListenerCtx;
use crate::message::{HeaderName, Method, NameAddr, SipMessage, Via};
use crate::metrics as m;
use crate::reply::Reply;
use crate::txn::{Hop, Inbound, Insert, TxnEntry};
use crate::uri::SipUri;

use super::route::{creates_dialog, Decision};
use super::{txn_span, Action, Core};

/// Max-Forwards a proxy adds when the request has none (RFC 3261 16.6 step 3).
pub(super) const DEFAULT_MAX_FORWARDS: u32 = 70;

/// A request as the routing steps see it: the message and what the checks
/// found out about it.
pub(super) struct Request<'a> {
    pub(super) inbound: Inbound,
    pub(super) listener: &'a ListenerCtx,
    pub(super) msg: &'a SipMessage,
    pub(super) method: Method,
    /// Metrics label of the method.
    pub(super) mname: &'static str,
    pub(super) top_via: Via<'a>,
    /// `None` when the request has none (the gate adds one).
    pub(super) max_forwards: Option<u32>,
    /// Transaction key (see [`crate::branch::BranchKey::txn_key`]).
    pub(super) key: u64,
    pub(super) routes: Vec<NameAddr>,
    /// How many Routes at the top name the gate itself.
    pub(super) ours: usize,
    /// The instance the first token in the gate's Routes names: `Err` when
    /// the token does not open (forged, another site's, or another dialog's:
    /// the MAC covers the Call-ID) or names no instance.
    pub(super) token: Option<Result<usize, ()>>,
    /// The configured instance that sent it, when it is one this listener
    /// fronts (such a request goes outward).
    pub(super) from_instance: Option<usize>,
    /// To tag present: inside a dialog.
    pub(super) to_tag: bool,
}

impl<'a> Request<'a> {
    /// The first Route after the gate's own.
    pub(super) fn next_route(&self) -> Option<&NameAddr> {
        self.routes.get(self.ours)
    }

    /// The gate's own Routes, which the forward removes.
    pub(super) fn own_routes(&self) -> &[NameAddr] {
        self.routes.get(..self.ours).unwrap_or_default()
    }

    /// Where the request asks to go next: the next Route, else the Request-URI.
    pub(super) fn target(&self) -> Option<SipUri<'a>> {
        let raw = match self.routes.get(self.ours) {
            Some(r) => self.msg.raw().get(r.uri.clone()),
            None => self.msg.request_uri(),
        };
        raw.and_then(SipUri::parse)
    }
}

impl Core {
    /// Routes one request.
    pub(super) fn request(
        &self,
        inbound: Inbound,
        listener: &ListenerCtx,
        msg: &SipMessage,
        now: Instant,
    ) -> Action {
        let view = self.drain.view();
        let req = match self.check(inbound, listener, msg, &view) {
            Ok(req) => req,
            Err(action) => return action,
        };
        let span = txn_span(msg, req.top_via.branch);
        let _entered = span.enter();

        if matches!(req.method, Method::Ack | Method::Cancel) {
            if let Some(action) = self.follow_transaction(&req) {
                return action;
            }
            // Never remembered: an ACK has no response, a CANCEL's responses
            // follow the INVITE's entry (same branch) or the Via.
            let decision = self.decide(&req, &view);
            return self.act(&req, decision, &span);
        }
        if let Some(e) = self.txns.get(req.key) {
            return self.retransmission(&req, e.hop);
        }
        let decision = self.decide(&req, &view);
        let Decision::Forward { hop, .. } = decision else {
            return self.act(&req, decision, &span);
        };
        let entry = TxnEntry {
            inbound,
            hop,
            invite: req.method == Method::Invite,
            initial: !req.to_tag,
            expires: now,
            finished: false,
        };
        match self.txns.insert(req.key, entry, now) {
            Insert::New => self.act(&req, decision, &span),
            // Another copy of this request won the race: follow its hop.
            Insert::Known(hop) => self.retransmission(&req, hop),
            Insert::Full => self.reply_to(
                inbound,
                msg,
                &Reply::reason(503, "Overloaded"),
                req.mname,
                "overload",
            ),
        }
    }

    /// Carries out a decision for a request that is not a retransmission.
    fn act(&self, req: &Request<'_>, decision: Decision, span: &tracing::Span) -> Action {
        match decision {
            Decision::Forward { hop, record_route } => {
                if let Some(i) = hop.instance {
                    span.record("instance", self.config.instances[i].id.as_str());
                    if req.method == Method::Invite {
                        self.work.invite_started(i);
                    }
                    // New work handed to an instance (what a drain stops).
                    if !req.to_tag && crate::policy::is_new_work(req.msg, req.method, true) {
                        if let Some(Some(c)) = self.new_work.get(i) {
                            c.increment(1);
                        }
                    }
                }
                m::request(req.mname, "forwarded");
                tracing::debug!(to = %hop.addr, tcp = hop.tcp, "forwarded");
                self.forward(req, hop, record_route)
            }
            Decision::Refuse { reply, why } => {
                tracing::debug!(why, code = reply.code, "refused");
                if req.method == Method::Ack {
                    m::dropped(why);
                    return Action::None;
                }
                self.reply_to(req.inbound, req.msg, &reply, req.mname, why)
            }
        }
    }

    /// A copy of a request the gate already routed: forwarded exactly as the
    /// first copy, Record-Route included, because if the first copy was lost,
    /// this one creates the dialog.
    fn retransmission(&self, req: &Request<'_>, hop: Hop) -> Action {
        m::request(req.mname, "retransmission");
        tracing::debug!(to = %hop.addr, "retransmission, to the first copy's hop");
        let rr = (!req.to_tag && creates_dialog(req.method))
            .then(|| req.from_instance.or(hop.instance))
            .flatten();
        self.forward(req, hop, rr)
    }

    /// CANCEL and the ACK of a non-2xx follow their INVITE's hop; the ACK of
    /// a response the gate made itself ends here. `None`: neither applies.
    fn follow_transaction(&self, req: &Request<'_>) -> Option<Action> {
        if let Some(e) = self.txns.get(req.key) {
            m::request(req.mname, "forwarded");
            return Some(self.forward(req, e.hop, None));
        }
        // The ACK of a final response the gate generated itself (the 503
        // of a drain, 403, 483...) ends that transaction here (RFC 3261
        // 17.2.1): the instance never saw the INVITE, so it must not get
        // the ACK (a draining instance would see one stray ACK per refusal).
        if req.method == Method::Ack && self.tags.is_ours(req.msg) {
            m::request(req.mname, "absorbed");
            return Some(Action::None);
        }
        None
    }

    /// RFC 3261 16.3 checks, then what routing needs to know; `Err` holds
    /// what to do instead (a 400 or 483, or nothing).
    fn check<'a>(
        &self,
        inbound: Inbound,
        listener: &'a ListenerCtx,
        msg: &'a SipMessage,
        view: &DrainView,
    ) -> Result<Request<'a>, Action> {
        let method = msg.method().unwrap_or(Method::Other);
        let mname = m::method_label(method);
        let Some(top_via) = msg.top_via() else {
            m::dropped("no_via");
            return Err(Action::None);
        };
        let bad = |reason| {
            self.reply_to(
                inbound,
                msg,
                &Reply::reason(400, reason),
                mname,
                "bad_request",
            )
        };
        if msg.call_id().is_none()
            || msg.cseq().is_none()
            || msg.fields(HeaderName::From).next().is_none()
            || msg.fields(HeaderName::To).next().is_none()
        {
            return Err(bad("Missing Mandatory Header"));
        }
        if let Some((_, cseq_method)) = msg.cseq() {
            if cseq_method != method && method != Method::Other {
                return Err(bad("CSeq Method Mismatch"));
            }
        }
        // Max-Forwards (RFC 3261 16.3 step 3, 16.6 step 3).
        let max_forwards = match msg.max_forwards() {
            None => None,
            Some(Ok(n)) => Some(n),
            Some(Err(_)) => return Err(bad("Bad Max-Forwards")),
        };
        if max_forwards == Some(0) {
            if method == Method::Ack {
                m::dropped("max_forwards");
                return Err(Action::None);
            }
            return Err(self.reply_to(inbound, msg, &Reply::new(483), mname, "too_many_hops"));
        }
        let mut req = Request {
            inbound,
            listener,
            msg,
            method,
            mname,
            key: self.branches.txn_key(msg, &top_via),
            top_via,
            max_forwards,
            routes: msg.routes(),
            ours: 0,
            token: None,
            from_instance: None,
            to_tag: msg.to_tag().is_some(),
        };
        self.own_routes(&mut req, view);
        req.from_instance = self.sender(&req);
        Ok(req)
    }

    /// Counts the gate's own Routes at the top of the route set (the gate
    /// inserts one Record-Route, but a UA may also preload the gate as its
    /// outbound proxy) and opens the first token among them.
    fn own_routes(&self, req: &mut Request<'_>, view: &DrainView) {
        for r in &req.routes {
            let Some(uri) = req.msg.raw().get(r.uri.clone()).and_then(SipUri::parse) else {
                break;
            };
            if !uri.socket_addr().is_some_and(|a| self.listeners.is_own(a)) {
                break;
            }
            req.ours += 1;
            if let Some(user) = uri.user {
                if req.token.is_none() {
                    req.token = Some(
                        self.tokens
                            .open(user, req.msg.call_id().unwrap_or_default())
                            .ok()
                            .and_then(|id| view.index_of(id))
                            .ok_or(()),
                    );
                }
            }
        }
    }

    /// The instance that sent the request, when it is one this listener
    /// fronts (a member of its pool, or the guarded instance). Any other
    /// instance, e.g. an sg calling out through the esg's inside leg, is a
    /// client here: its new dialogs are new work for the listener's instances.
    fn sender(&self, req: &Request<'_>) -> Option<usize> {
        let idx = self.origins.instance(req.inbound.peer())?;
        let service = &self.config.instances.get(idx)?.service;
        req.listener.mode.fronts(idx, service).then_some(idx)
    }
}
