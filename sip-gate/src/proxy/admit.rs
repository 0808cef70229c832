//! Overload admission of new work (R-OV-1, R-OV-2), before routing
//! spends anything on it: see [`crate::overload`]. What is new work is
//! [`crate::newwork`]'s judgement (R-SEC-4), made once in
//! [`super::request`].

use crate::newwork::Class;
use crate::overload::{Verdict, Why};
use crate::reply::Reply;

use super::request::Request;
use super::route::Decision;
use super::{Action, Core};

impl Core {
    /// `None`: `req` is not new work (R-SEC-4), or it is admitted; else
    /// what the gate does instead (a 503 with Retry-After, or nothing).
    pub(super) fn admit_new(&self, req: &Request<'_>) -> Option<Decision> {
        let class = req.class;
        if !class.is_new() {
            return None;
        }
        let peer = req.inbound.peer();
        // Configured instances and esg trunks carry many users' calls from
        // one address: never limited per source (a trunk is limited as its
        // account, and the gate's capacity still applies).
        let shared = req.origin.is_some() || req.site.policy.trunk(req.listener.leg, peer.ip());
        let source = (!shared).then_some(peer.ip());
        let account = if req.site.overload.limits_accounts() && req.from_instance.is_none() {
            req.site
                .policy
                .account(req.listener.leg, req.msg, peer.ip())
        } else {
            None
        };
        match req.site.overload.admit(
            req.behind,
            source,
            account,
            class == Class::Register,
            req.now,
        ) {
            Verdict::Pass => None,
            Verdict::Reject(why) => Some(Decision::Refuse {
                reply: overload_reply(why, req.site.overload.retry_after()),
                why: why.rule(),
            }),
            Verdict::Drop(why) => Some(Decision::Drop(why.rule())),
        }
    }

    /// The 503 of an overload refusal (already counted).
    pub(super) fn overloaded(&self, req: &Request<'_>, why: Why) -> Action {
        let reply = overload_reply(why, req.site.overload.retry_after());
        self.reply_to(req.inbound, req.msg, &reply, req.mname, why.rule())
    }
}

/// The 503 of an overload refusal, with the site's Retry-After.
fn overload_reply(why: Why, retry_after: u32) -> Reply<'static> {
    let reason = match why {
        Why::Source | Why::Account => "Rate Limited",
        Why::Deadline | Why::Capacity | Why::Registrations | Why::Transactions => "Overloaded",
    };
    Reply {
        code: 503,
        reason: Some(reason),
        retry_after: Some(retry_after),
        extra: &[],
    }
}
