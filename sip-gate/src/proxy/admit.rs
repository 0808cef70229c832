//! Overload admission of new dialogs (R-OV-1, R-OV-2), before routing
//! spends anything on them: see [`crate::overload`].

use ringsync::config::AccessAction;

use crate::overload::{classify, Class, Verdict, Why};
use crate::reply::Reply;

use super::request::Request;
use super::route::Decision;
use super::{Action, Core};

impl Core {
    /// The listener's access list (`[listener.access]`): `None` when `req`
    /// is no new dialog, comes from a configured instance, or its source is
    /// admitted; else 403 or silence, counted as
    /// `sipgate_requests_total{outcome="access_denied"}`. In-dialog
    /// requests are never judged here: the dialog's token routes them.
    pub(super) fn access(&self, req: &Request<'_>) -> Option<Decision> {
        let access = &req.listener.access;
        if access.is_open()
            || req.origin.is_some()
            || !classify(Some(req.method), req.to_tag).is_new()
            || access.admits(req.inbound.peer().ip())
        {
            return None;
        }
        Some(match access.action {
            AccessAction::Reject => Decision::Refuse {
                reply: Reply::reason(403, "Source Not Allowed"),
                why: "access_denied",
            },
            AccessAction::Drop => Decision::Drop("access_denied"),
        })
    }

    /// R-SEC-3: a new dialog from a source banned on this listener for
    /// failing authentication gets 403 or silence, counted as
    /// `sipgate_requests_total{outcome="auth_banned"}`; in-dialog requests
    /// and configured instances are never banned.
    pub(super) fn banned(&self, req: &Request<'_>) -> Option<Decision> {
        if req.origin.is_some() || !classify(Some(req.method), req.to_tag).is_new() {
            return None;
        }
        let peer = req.inbound.peer().ip();
        Some(
            match req
                .site
                .bans
                .banned(req.inbound.listener(), peer, req.now)?
            {
                AccessAction::Reject => Decision::Refuse {
                    reply: Reply::reason(403, "Forbidden"),
                    why: "auth_banned",
                },
                AccessAction::Drop => Decision::Drop("auth_banned"),
            },
        )
    }

    /// `None`: `req` is not a new dialog, or it is admitted; else what the
    /// gate does instead (a 503 with Retry-After, or nothing).
    pub(super) fn admit_new(&self, req: &Request<'_>) -> Option<Decision> {
        let class = classify(Some(req.method), req.to_tag);
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
