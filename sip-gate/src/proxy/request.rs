//! A request as the routing steps see it, and how the core builds that
//! view: the checks a proxy makes before routing (RFC 3261 16.3), then what
//! routing needs to know (who sent it, the gate's own Routes and the token
//! in them).

use ringsync::view::DrainView;

use crate::listener::ListenerCtx;
use crate::message::{HeaderName, Method, NameAddr, SipMessage, Via};
use crate::metrics as m;
use crate::reply::Reply;
use crate::txn::Inbound;
use crate::uri::SipUri;

use super::{Action, Core};

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
    /// RFC 3261 16.3 checks, then what routing needs to know; `Err` holds
    /// what to do instead (a 400 or 483, or nothing).
    pub(super) fn check<'a>(
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
