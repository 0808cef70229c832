//! Requests to host names (RFC 3263): parked while the transport resolves
//! the name, routed once the answer is cached, and moved to the next target
//! when the one they went to cannot be reached (`undelivered.rs` hands
//! them here).

use std::net::SocketAddr;
use std::time::Instant;

use crate::dns::cache::Park;
use crate::dns::{DnsQuery, DnsResult};
use crate::message::SipMessage;
use crate::metrics as m;
use crate::reply::Reply;
use crate::txn::{Hop, TxnEntry};

use super::forward::out;
use super::request::Request;
use super::{Action, Core};

impl Core {
    /// Parks a request until `query` resolves: the first one for a name
    /// asks the transport for a lookup, later ones wait with it. Nothing is
    /// routed or counted yet; that happens once, when it comes back.
    pub(super) fn park(&self, req: &Request<'_>, query: DnsQuery) -> Action {
        match self.dns.park(&query, (req.inbound, req.msg.raw().clone())) {
            Park::First => {
                tracing::debug!(%query, "resolving");
                Action::Resolve(query)
            }
            Park::Queued => Action::None,
            Park::Full => self.reply_to(
                req.inbound,
                req.msg,
                &Reply::reason(503, "DNS Busy"),
                req.mname,
                "dns_busy",
            ),
        }
    }

    /// The answer to an [`Action::Resolve`]: cached (per its TTL, a negative
    /// one too), and the messages that waited for it routed on it; returns
    /// what to send for them.
    pub fn resolved(&self, query: DnsQuery, result: DnsResult, now: Instant) -> Vec<Action> {
        m::dns_lookup(match &result {
            Ok(_) => "answer",
            Err(crate::dns::DnsFailure::NotFound { .. }) => "not_found",
            Err(crate::dns::DnsFailure::Unavailable) => "unavailable",
        });
        if let Err(e) = &result {
            tracing::info!(%query, ?e, "name does not resolve");
        }
        self.dns.insert(query.clone(), result, now);
        self.dns
            .take_parked(&query)
            .into_iter()
            .map(|(inbound, data)| self.handle_as(inbound, data, now, super::Received::Resumed))
            .collect()
    }

    /// An ICMP error came back for a datagram sent to `addr` (port or host
    /// unreachable): it is passed over like a failed TCP connect. The
    /// datagram itself is not resent (the error carries only its start);
    /// the client's next retransmission moves on ([`Core::moved_hop`]).
    pub fn unreachable(&self, addr: SocketAddr, now: Instant) {
        tracing::debug!(%addr, "unreachable (ICMP)");
        self.dns.hold(addr, now);
    }

    /// The hop a retransmission of transaction `key` goes to: its first
    /// hop, unless that is a DNS target found unreachable since, then the
    /// next target of the answer (and the transaction follows it).
    pub(super) fn moved_hop(&self, key: u64, hop: Hop, now: Instant) -> Hop {
        let Some(answer) = hop.dns.filter(|_| self.dns.held(hop.addr, now)) else {
            return hop;
        };
        let Some(next) = self.dns.fail_over(answer, hop.addr, key, now) else {
            return hop;
        };
        m::dns_failover("next_target");
        tracing::info!(failed = %hop.addr, %next, "next DNS target");
        let moved = Hop { addr: next, ..hop };
        self.txns.set_hop(key, moved);
        moved
    }

    /// A request that went to a target of a DNS answer and could not be
    /// delivered there: that target is passed over for a while (`[dns]
    /// failover_hold_s`) and the same bytes go to the next target in RFC
    /// 2782 order, which the rest of the transaction (CANCEL, ACK) then
    /// follows. `None` when none is left.
    pub(super) fn next_target(
        &self,
        msg: &SipMessage,
        sent: (u64, TxnEntry),
        to: SocketAddr,
        now: Instant,
    ) -> Option<Action> {
        let (key, entry) = sent;
        let answer = entry.hop.dns?;
        let Some(next) = self.dns.fail_over(answer, to, key, now) else {
            m::dns_failover("none_left");
            return None;
        };
        let hop = Hop {
            addr: next,
            ..entry.hop
        };
        self.txns.set_hop(key, hop);
        m::dns_failover("next_target");
        tracing::info!(failed = %to, next = %next, "next DNS target");
        Some(Action::Send(out(entry.inbound, hop), msg.raw().clone()))
    }
}
