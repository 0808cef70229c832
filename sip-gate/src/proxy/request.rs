//! A request as the routing steps see it, and how the core builds that
//! view: the checks a proxy makes before routing (RFC 3261 16.3), then what
//! routing needs to know (who sent it, the gate's own Routes and the token
//! in them).

use std::time::Instant;

use ringsync::view::DrainView;

use crate::flow::{self, Flow, FlowTokenError};
use crate::listener::ListenerCtx;
use crate::message::{HeaderName, Method, NameAddr, SipMessage, Via};
use crate::metrics as m;
use crate::newwork::{self, Class, Proof};
use crate::reply::Reply;
use crate::site::Site;
use crate::txn::Inbound;
use crate::uri::SipUri;

use super::source::Source;
use super::{Action, Core, Received};

/// Max-Forwards a proxy adds when the request has none (RFC 3261 16.6 step 3).
pub(super) const DEFAULT_MAX_FORWARDS: &str = "70";

/// A request as the routing steps see it: the message and what the checks
/// found out about it.
pub(super) struct Request<'a> {
    /// The site tables this request is routed with, loaded once.
    pub(super) site: &'a Site,
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
    /// The route set; under a strict router, without its last value (which
    /// is the Request-URI to forward with, `strict`).
    pub(super) routes: &'a [NameAddr],
    /// How many Routes at the top name the gate itself.
    pub(super) ours: usize,
    /// A strict router upstream put the gate's Record-Route into the
    /// Request-URI (RFC 3261 16.4): the last Route, which replaces it.
    pub(super) strict: Option<NameAddr>,
    /// The instance the first token in the gate's URIs (the Request-URI
    /// under a strict router, then its Routes) names: `Err` when the token
    /// does not open (forged, another site's, or another dialog's: the MAC
    /// covers the Call-ID) or names no instance.
    pub(super) token: Option<Result<usize, ()>>,
    /// Whether the last of the gate's token URIs asks for TCP: the transport
    /// of the dialog's leg on the far side of the gate (with two
    /// Record-Routes, RFC 5658, the one toward the next hop).
    pub(super) leg_tcp: Option<bool>,
    /// The first flow token among the gate's Routes (a subscriber's flow,
    /// from the Path or a Record-Route the gate wrote): `Err` when it does
    /// not open (forged, another site's).
    pub(super) flow: Option<Result<Flow, FlowTokenError>>,
    /// The configured instance that sent it, when it is one this listener
    /// fronts (such a request goes outward).
    pub(super) from_instance: Option<usize>,
    /// The configured instance at its source address, fronted or not (not
    /// limited per source: R-OV-2).
    pub(super) origin: Option<usize>,
    /// To tag present: it claims a dialog (proves nothing by itself).
    pub(super) to_tag: bool,
    /// What it is to every rule (R-SEC-4): new work unless proven
    /// inside a dialog.
    pub(super) class: Class,
    /// The instance the work book holds its dialog on, when it has a To tag
    /// and no valid token of the gate's (only looked up then).
    pub(super) dialog: Option<usize>,
    /// Who sent it: a configured instance, a refused source (R-SEC-4).
    pub(super) source: Source,
    /// When it was received.
    pub(super) now: Instant,
    /// Handed back after a DNS lookup (see [`Core::resolved`]).
    pub(super) resumed: bool,
    /// Read by a UDP worker that is behind (R-OV-1).
    pub(super) behind: bool,
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

    /// Where the request asks to go next: the next Route, else the
    /// Request-URI (under a strict router, the one it gets from the last Route).
    pub(super) fn target(&self) -> Option<SipUri<'a>> {
        let raw = match (self.routes.get(self.ours), &self.strict) {
            (Some(r), _) | (None, Some(r)) => self.msg.raw().get(r.uri.clone()),
            (None, None) => self.msg.request_uri(),
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
        (site, listener): (&'a Site, &'a ListenerCtx),
        msg: &'a SipMessage,
        view: &DrainView,
        (now, how, source): (Instant, Received, Source),
    ) -> Result<Request<'a>, Action> {
        let method = msg.method().unwrap_or(Method::Other);
        let mname = m::method_label(method);
        let Some(top_via) = msg.top_via() else {
            m::dropped("no_via");
            return Err(Action::None);
        };
        // A refused source learns nothing from the checks (R-SEC-4): it
        // gets its refusal, never what the checks found.
        let answer = |reply: &Reply<'_>, outcome| match source.refused {
            Some(r) => self.refuse_source(inbound, msg, r, mname),
            None => self.reply_to(inbound, msg, reply, mname, outcome),
        };
        let bad = |reason| answer(&Reply::reason(400, reason), "bad_request");
        if msg.call_id().is_none()
            || msg.cseq().is_none()
            || msg.first_field(HeaderName::From).is_none()
            || msg.first_field(HeaderName::To).is_none()
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
            return Err(answer(&Reply::new(483), "too_many_hops"));
        }
        self.validity(inbound, msg, method, (mname, source.refused))?; // RFC 3261 16.3 steps 1 and 5
        let mut req = Request {
            site,
            inbound,
            listener,
            msg,
            method,
            mname,
            key: self.branches.txn_key(msg, &top_via),
            top_via,
            max_forwards,
            routes: msg.route_set(),
            ours: 0,
            strict: None,
            token: None,
            leg_tcp: None,
            flow: None,
            from_instance: None,
            origin: source.origin,
            to_tag: msg.to_tag().is_some(),
            class: Class::NewDialog,
            dialog: None,
            source,
            now,
            resumed: how == Received::Resumed,
            behind: how == Received::Behind,
        };
        self.strict_route(&mut req, view);
        self.own_routes(&mut req, view);
        req.from_instance = self.sender(&req);
        req.class = self.judge(&mut req);
        Ok(req)
    }

    /// R-SEC-4: whether `req` is new work. Without a To tag it always is
    /// (a token preloaded on a new INVITE decides nothing, R-SEC-2); with
    /// one, only the gate's valid token, a dialog in the work book or a
    /// configured instance as its sender proves a dialog. The work book is
    /// looked up only when nothing cheaper proved it.
    fn judge(&self, req: &mut Request<'_>) -> Class {
        if !req.to_tag {
            return newwork::judge(Some(req.method), false);
        }
        let mut proof = Proof {
            token: matches!(req.token, Some(Ok(_))),
            instance: req.origin.is_some(),
            dialog: false,
        };
        if !proof.any() && req.method != Method::Register {
            req.dialog = self.work.dialog_instance(req.msg);
            proof.dialog = req.dialog.is_some();
        }
        newwork::judge(Some(req.method), proof.any())
    }

    /// RFC 3261 16.4: a Request-URI that is a Record-Route the gate wrote
    /// (its address, a token that opens for this dialog) comes from a strict
    /// router upstream; the last Route is the real Request-URI. A URI that
    /// merely names the gate (a UA addressing it, a token that does not
    /// open) is no such value, and routing treats it as before.
    fn strict_route(&self, req: &mut Request<'_>, view: &DrainView) {
        // Only a request with a route set came through a strict router;
        // checked first, as most requests (every new INVITE) have none.
        if req.routes.is_empty() {
            return;
        }
        // A token of the gate's is the URI's user part, right after its
        // scheme: a Request-URI without one (nearly every in-dialog
        // request's) is no Record-Route of the gate's, unparsed.
        let Some(raw) = req.msg.request_uri() else {
            return;
        };
        if !crate::uri::after_sip_scheme(raw).is_some_and(crate::token::may_be_token) {
            return;
        }
        let Some(uri) = SipUri::parse(raw) else {
            return;
        };
        if !uri
            .socket_addr()
            .is_some_and(|a| req.site.listeners.is_own(a))
        {
            return;
        }
        if let Some(Ok(idx)) = uri.user.map(|user| self.open_token(req.msg, user, view)) {
            if let Some((last, rest)) = req.routes.split_last() {
                req.strict = Some(last.clone());
                req.routes = rest;
            }
            req.token = Some(Ok(idx));
            req.leg_tcp = Some(uri.wants_tcp());
        }
    }

    /// Counts the gate's own Routes at the top of the route set (the gate
    /// inserts one or two Record-Routes, and a UA may also preload the gate
    /// as its outbound proxy), opens the first token and the first flow
    /// token among them and notes the transport of the last one with a token.
    fn own_routes(&self, req: &mut Request<'_>, view: &DrainView) {
        for r in req.routes {
            let Some(uri) = req.msg.raw().get(r.uri.clone()).and_then(SipUri::parse) else {
                break;
            };
            let Some(node) = uri.socket_addr().filter(|a| req.site.listeners.is_own(*a)) else {
                break;
            };
            req.ours += 1;
            if let Some(user) = uri.user {
                if user.starts_with(flow::PREFIX) {
                    if req.flow.is_none() {
                        req.flow = Some(self.flows.open(user, node));
                    }
                } else if req.token.is_none() {
                    req.token = Some(self.open_token(req.msg, user, view));
                }
                req.leg_tcp = Some(uri.wants_tcp());
            }
        }
    }

    /// The instance a token in one of the gate's URIs names, for this dialog.
    fn open_token(&self, msg: &SipMessage, user: &[u8], view: &DrainView) -> Result<usize, ()> {
        self.tokens
            .open(user, msg.call_id().unwrap_or_default())
            .ok()
            .and_then(|id| view.index_of(id))
            .ok_or(())
    }

    /// The instance that sent the request, when it is one this listener
    /// fronts (a member of its pool, or the guarded instance). Any other
    /// instance, e.g. an sg calling out through the esg's inside leg, is a
    /// client here: its new dialogs are new work for the listener's instances.
    fn sender(&self, req: &Request<'_>) -> Option<usize> {
        let idx = req.origin?;
        let service = &req.site.config.instances.get(idx)?.service;
        req.listener.mode.fronts(idx, service).then_some(idx)
    }
}
