//! A request's way through the core: its checks ([`super::request`]), the
//! routing decision ([`super::route`]), then the transaction table.
//!
//! The decision is made before the transaction table is touched
//! ([`Core::decide`]; the short locks it may take are listed in
//! [`super::route`]); the transaction is then inserted if absent. When two
//! copies of a request race
//! (two worker threads, one datagram each), only one insert wins and both
//! copies go to the winner's hop, so a request is never routed to two
//! instances.

use std::time::Instant;

use ringsync::view::DrainView;

use crate::listener::ListenerCtx;
use crate::message::{Method, SipMessage};
use crate::metrics as m;
use crate::overload::Why;
use crate::site::Site;
use crate::txn::{Hop, Inbound, Insert, TxnEntry};

use super::forward::out;
use super::request::Request;
use super::route::{creates_dialog, Decision};
use super::source::Source;
use super::{txn_span, Action, Core, Received};

impl Core {
    /// Routes one request.
    pub(super) fn request(
        &self,
        inbound: Inbound,
        (site, listener, view): (&Site, &ListenerCtx, &DrainView),
        msg: &SipMessage,
        (now, how, source): (Instant, Received, Source),
    ) -> Action {
        let req = match self.check(inbound, (site, listener), msg, view, (now, how, source)) {
            Ok(req) => req,
            Err(action) => return action,
        };
        let span = txn_span(msg, req.top_via.branch);
        let _entered = span.enter();

        if matches!(req.method, Method::Ack | Method::Cancel) {
            if let Some(action) = self.follow_transaction(&req, now) {
                return action;
            }
            // Never remembered: an ACK has no response, a CANCEL's responses
            // follow the INVITE's entry (same branch) or the Via.
            let decision = self.decide(&req, view);
            return self.act(&req, decision, &span, now);
        }
        if let Some(e) = self.txns.get(req.key) {
            let hop = self.moved_hop(req.key, e.hop, now);
            return self.retransmission(&req, hop, now);
        }
        let decision = self.decide(&req, view);
        let Decision::Forward { hop, .. } = decision else {
            return self.act(&req, decision, &span, now);
        };
        let entry = TxnEntry {
            inbound,
            hop,
            invite: req.method == Method::Invite,
            initial: !req.to_tag,
            owner: hop.instance.or(req.from_instance),
            expires: now,
            finished: false,
        };
        match self.txns.insert(req.key, entry, now) {
            Insert::New => self.act(&req, decision, &span, now),
            // Another copy of this request won the race: follow its hop.
            Insert::Known(hop) => self.retransmission(&req, hop, now),
            Insert::Full => {
                req.site.overload.refused(Why::Transactions);
                self.overloaded(&req, Why::Transactions)
            }
        }
    }

    /// Carries out a decision for a request that is not a retransmission.
    fn act(
        &self,
        req: &Request<'_>,
        decision: Decision,
        span: &tracing::Span,
        now: Instant,
    ) -> Action {
        match decision {
            Decision::Forward {
                hop,
                record_route,
                on_purpose,
            } => {
                // Spliced first: a request that cannot go out is answered
                // and counts as no work handed to the instance.
                let bytes = match self.spliced(req, hop, record_route) {
                    Ok(bytes) => bytes,
                    Err(unsent) => return self.unsent(req, unsent, now),
                };
                if let Some(i) = hop.instance {
                    span.record("instance", req.site.instance_id(i));
                    // New work handed to an instance (what a drain stops).
                    if crate::policy::drain_refuses(req.msg, req.method, req.class, true) {
                        if let Some(Some(c)) = req.site.new_work.get(i) {
                            c.increment(1);
                        }
                        // Sent to a draining instance on purpose: why
                        // (R-ESG-5, R-SG-3, R-AA-4...), so what a drain let
                        // through by rule is told from a drain that leaks.
                        if let Some(why) = on_purpose {
                            m::new_work_draining(req.site.instance_id(i), why.as_str());
                        }
                    }
                }
                self.account(req, hop.instance.or(req.from_instance), now);
                if !req.class.is_new() {
                    self.carried(now);
                }
                self.forwarded.request(req.method);
                tracing::debug!(to = %hop.addr, tcp = hop.tcp, "forwarded");
                Action::Send(out(req.inbound, hop), bytes)
            }
            Decision::Resolve(query) => self.park(req, query),
            Decision::Drop(why) => {
                m::request(req.mname, why);
                Action::None
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

    /// The work a forwarded request starts or touches, in either direction
    /// (R-ST-2): an INVITE transaction, and a request inside a dialog (its
    /// age restarts; a BYE or NOTIFY may end it).
    fn account(&self, req: &Request<'_>, owner: Option<usize>, now: Instant) {
        let Some(i) = owner else { return };
        if req.method == Method::Invite {
            self.work.invite_started(i);
        }
        if req.to_tag {
            self.work.in_dialog(req.msg, req.method, i, now);
        }
    }

    /// A copy of a request the gate already routed: forwarded exactly as the
    /// first copy, Record-Route included, because if the first copy was lost,
    /// this one creates the dialog.
    fn retransmission(&self, req: &Request<'_>, hop: Hop, now: Instant) -> Action {
        m::request(req.mname, "retransmission");
        self.carried(now);
        tracing::debug!(to = %hop.addr, "retransmission, to the first copy's hop");
        let rr = (!req.to_tag && creates_dialog(req.method))
            .then(|| req.from_instance.or(hop.instance))
            .flatten();
        self.forward(req, hop, rr, now)
    }

    /// CANCEL and the ACK of a non-2xx follow their INVITE's hop; the ACK of
    /// a response the gate made itself ends here. `None`: neither applies.
    fn follow_transaction(&self, req: &Request<'_>, now: Instant) -> Option<Action> {
        // The ACK of a final response the gate generated itself (the 503
        // of a drain, 403, 483, the 503 of a next hop it could not reach)
        // ends that transaction here (RFC 3261 17.2.1): the instance never
        // saw the INVITE, so it must not get the ACK (a draining instance
        // would see one stray ACK per refusal), even when the transaction
        // is still known (the INVITE was forwarded, its connection failed).
        if req.method == Method::Ack && self.tags.is_ours(req.msg) {
            m::request(req.mname, "absorbed");
            return Some(Action::None);
        }
        if let Some(e) = self.txns.get(req.key) {
            // R-WS-2: its INVITE's flow has closed; the gate answers both.
            if let Some(action) = self.cancel_into_closed_flow(req, e, now) {
                return Some(action);
            }
            self.forwarded.request(req.method);
            self.carried(now);
            return Some(self.forward(req, e.hop, None, now));
        }
        None
    }
}
