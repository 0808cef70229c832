//! The edge's first question: who is asking (R-SEC-4). Decided from the
//! source address alone, before the gate parses further or answers
//! anything: a configured instance, a source the listener's access list
//! refuses, a source banned for failing authentication (R-SEC-3).
//!
//! A refused source gets its refusal for every request that is new work
//! ([`crate::newwork`]) and for every message the checks would have
//! answered (a 400, 483 or 505 would tell it which parser it talks to):
//! with `action = "drop"` no byte goes back to it at all. Only what the gate
//! can tell belongs to a dialog or transaction it already carries passes
//! (a ban refuses new dialogs, not calls that are up).

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use ringsync::config::AccessAction;

use crate::listener::ListenerCtx;
use crate::message::SipMessage;
use crate::metrics as m;
use crate::reply::Reply;
use crate::site::Site;
use crate::txn::Inbound;

use super::{Action, Core};

/// Who sent a request, as far as the address tells.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Source {
    /// The configured instance at the source address, fronted or not:
    /// never refused here, never limited per source (R-OV-2).
    pub(super) origin: Option<usize>,
    /// The access list or a ban refuses new work from it.
    pub(super) refused: Option<Refusal>,
}

/// Why a source is refused, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Refusal {
    /// 403, or silence.
    pub(super) action: AccessAction,
    /// The outcome label: `access_denied` or `auth_banned`.
    pub(super) why: &'static str,
}

impl Refusal {
    /// The 403 of a `reject` refusal.
    pub(super) fn reply(self) -> Reply<'static> {
        match self.why {
            "access_denied" => Reply::reason(403, "Source Not Allowed"),
            _ => Reply::reason(403, "Forbidden"),
        }
    }
}

impl Core {
    /// Who `inbound`'s sender is on `listener` at `now`. The access list
    /// comes before the ban: a source the list refuses is refused whatever
    /// its authentication did.
    pub(super) fn source(
        &self,
        site: &Site,
        listener: &ListenerCtx,
        inbound: Inbound,
        now: Instant,
    ) -> Source {
        let origin = site.origins.instance(inbound.peer());
        if origin.is_some() {
            return Source {
                origin,
                refused: None,
            };
        }
        let ip = inbound.peer().ip();
        Source {
            origin,
            refused: refused(site, listener, inbound.listener(), ip, now),
        }
    }

    /// Whether a connection from `peer` to `listener` is closed at once:
    /// its source would get silence for every message (`drop`), so it gets
    /// no TLS handshake or WebSocket upgrade either, which would show it
    /// the gate's certificate or server (R-SEC-4).
    pub(crate) fn drops_connection(&self, listener: usize, peer: SocketAddr, now: Instant) -> bool {
        let site = self.site();
        let Some(ctx) = site.listeners.get(listener) else {
            return false;
        };
        if site.origins.instance(peer).is_some() {
            return false;
        }
        refused(&site, ctx, listener, peer.ip(), now)
            .is_some_and(|r| r.action == AccessAction::Drop)
    }

    /// What a refused source gets for `msg`: 403, or nothing. Counted as
    /// `sipgate_requests_total{outcome="access_denied"|"auth_banned"}`;
    /// a malformed message gets the 403 only when it has what a response
    /// needs.
    pub(super) fn refuse_source(
        &self,
        inbound: Inbound,
        msg: &SipMessage,
        r: Refusal,
        mname: &'static str,
    ) -> Action {
        if let Some(ctx) = self.site().listeners.get(inbound.listener()) {
            self.log_refusal(ctx, inbound.peer(), r, Instant::now());
        }
        match r.action {
            AccessAction::Reject if msg.has_mandatory() => {
                self.reply_to(inbound, msg, &r.reply(), mname, r.why)
            }
            _ => {
                m::request(mname, r.why);
                Action::None
            }
        }
    }
}

impl Core {
    /// A refused source's line at `info` (docs/operator-guide.md): one per
    /// source per [`REFUSAL_LOG_EVERY`], with the listener and the reason,
    /// so a scanner sending thousands of requests costs one line a minute.
    pub(super) fn log_refusal(
        &self,
        listener: &ListenerCtx,
        peer: SocketAddr,
        r: Refusal,
        now: Instant,
    ) {
        if self.refusals_logged.first(peer.ip(), now) {
            tracing::info!(
                %peer,
                listener = %listener.advertise,
                why = r.why,
                action = ?r.action,
                "new work from a refused source (R-SEC-4); further refusals of it are not \
                 logged for a minute, only counted in sipgate_requests_total"
            );
        }
    }
}

/// How often one refused source is logged at most.
pub(super) const REFUSAL_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// The access list's or a ban's refusal of `ip` on `listener`, if any.
fn refused(
    site: &Site,
    ctx: &ListenerCtx,
    listener: usize,
    ip: IpAddr,
    now: Instant,
) -> Option<Refusal> {
    let access = &ctx.access;
    if !access.is_open() && !access.admits(ip) {
        return Some(Refusal {
            action: access.action,
            why: "access_denied",
        });
    }
    // R-SEC-3: a source banned for failing authentication.
    site.bans.banned(listener, ip, now).map(|action| Refusal {
        action,
        why: "auth_banned",
    })
}
