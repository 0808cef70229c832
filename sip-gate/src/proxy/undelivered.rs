//! What the transport could not deliver: a TCP connect refused or timed
//! out, a TLS handshake that failed. RFC 3261 16.9: a transport error on a
//! forwarded request counts as a 503 from the next hop, so the client hears
//! at once instead of waiting for its timer (32 s of silence otherwise).
//!
//! A request to a target of a DNS answer moves to the next target first
//! ([`super::resolved`]); with none left, or for any other hop, the gate
//! answers the client on the request's transaction: 503 with Retry-After,
//! 408 for an INVITE whose Timer B ran out meanwhile, 200 for a CANCEL (its
//! INVITE gets the answer), nothing for an ACK. A configured instance the
//! connection went to is held unreachable over that transport
//! ([`crate::reach`]), so new dialogs of its pool go to the others while
//! the hold lasts.

use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;

use crate::edit::Splice;
use crate::message::{Method, SipMessage};
use crate::metrics as m;
use crate::reach::{Change, Stream};
use crate::reply::{self, Reply};
use crate::txn::TxnEntry;

use super::answer::response_out;
use super::{Action, Core};

/// `sipgate_dropped_total{reason}` of a message that met a failed
/// connection and could not be answered (an ACK, a response, a request
/// whose transaction is gone).
const DROPPED: &str = "tcp_connect_failed";

impl Core {
    /// A connection the gate opened to `to` failed (`why`: the connect or
    /// handshake error). Every configured instance at that address is held
    /// unreachable over `stream` for `[dns] failover_hold_s`. Call it
    /// before handing the messages that waited for the connection to
    /// [`Core::undeliverable`].
    pub(crate) fn connect_failed(&self, to: SocketAddr, stream: Stream, why: &str, now: Instant) {
        let config = self.config();
        for (idx, inst) in config.instances.iter().enumerate() {
            if inst.sip != Some(to) {
                continue;
            }
            // R-FT-1 (amended): a transport error is a traffic failure.
            self.traffic.failed(idx, now);
            let reason = format!("{} connect to {to}: {why}", stream.as_str());
            if self.reach.failed(idx, stream, reason, now) == Change::Down {
                tracing::warn!(
                    instance = %inst.id,
                    transport = stream.as_str(),
                    %to,
                    error = why,
                    hold_s = config.dns.failover_hold_s,
                    "instance unreachable: its requests get 503, new dialogs go to the other instances of its pool until the hold ends"
                );
            }
        }
    }

    /// A connection the gate opened to `to` over `stream` is up: an
    /// instance there held unreachable that way is reachable again.
    pub(crate) fn connected(&self, to: SocketAddr, stream: Stream, now: Instant) {
        for (idx, inst) in self.config().instances.iter().enumerate() {
            if inst.sip == Some(to) && self.reach.connected(idx, stream, now) == Change::Up {
                tracing::info!(
                    instance = %inst.id,
                    transport = stream.as_str(),
                    %to,
                    "instance reachable again: it takes new dialogs over this transport"
                );
            }
        }
    }

    /// The transports instance `idx` is held unreachable over at `now`, as
    /// its work report names them.
    pub(crate) fn unreachable_over(
        &self,
        idx: usize,
        now: Instant,
    ) -> Vec<ringsync::work::Unreachable> {
        self.reach.report(idx, now)
    }

    /// Whether instance `idx` is held unreachable over `stream` at `now`.
    pub(super) fn held(&self, idx: usize, stream: Stream, now: Instant) -> bool {
        self.reach.held(idx, stream, now)
    }

    /// A message the transport could not deliver to `to` (the connection
    /// it waited for failed): what to send instead, if anything.
    pub fn undeliverable(&self, to: SocketAddr, data: Bytes, now: Instant) -> Action {
        let Some(msg) = SipMessage::scan(data).ok().filter(SipMessage::is_request) else {
            m::dropped(DROPPED);
            return Action::None;
        };
        let Some(sent) = self.sent_to(&msg, to) else {
            m::dropped(DROPPED);
            return Action::None;
        };
        if let Some(action) = self.next_target(&msg, sent, to, now) {
            return action;
        }
        self.transport_error(&msg, sent, now)
    }

    /// The transaction of a request the gate forwarded to `to`.
    fn sent_to(&self, msg: &SipMessage, to: SocketAddr) -> Option<(u64, TxnEntry)> {
        let key = self.branches.open(msg.top_via()?.branch?)?;
        let entry = self.txns.get(key).filter(|e| e.hop.addr == to)?;
        Some((key, entry))
    }

    /// RFC 3261 16.9: the answer the client gets for a request the gate
    /// forwarded and could not deliver; the transaction ends with it.
    fn transport_error(&self, msg: &SipMessage, sent: (u64, TxnEntry), now: Instant) -> Action {
        let (key, entry) = sent;
        let site = self.site();
        let Some(client) = client_request(msg) else {
            m::dropped(DROPPED);
            return Action::None;
        };
        let method = client.method().unwrap_or(Method::Other);
        let reply = match method {
            Method::Ack => {
                m::dropped(DROPPED);
                return Action::None;
            }
            // RFC 3261 16.10: the CANCEL matched a transaction here; the
            // INVITE it cancels gets the error answer.
            Method::Cancel => Reply::new(200),
            _ if entry.invite_timed_out(now) => Reply::reason(408, "Next Hop Timeout"),
            _ => site.policy.unavailable("Next Hop Unreachable"),
        };
        if method != Method::Cancel {
            self.settle(key, now);
        }
        let Some(back) = client
            .top_via()
            .and_then(|v| response_out(&v, Some(entry.inbound), entry.inbound.listener()))
        else {
            m::dropped("unanswerable");
            return Action::None;
        };
        m::request(m::method_label(method), "transport_error");
        tracing::debug!(code = reply.code, to = %entry.hop.addr, "next hop unreachable: answered");
        let bytes = reply::build(
            &client,
            entry.inbound.peer(),
            &reply,
            &self.tags,
            site.server_header(),
        );
        Action::Send(back, bytes)
    }

    /// Ends transaction `key` on a final answer the gate made itself: its
    /// INVITE no longer counts as the instance's work (R-ST-2).
    pub(super) fn settle(&self, key: u64, now: Instant) {
        let before = self.txns.finish(key, now);
        if let Some(i) = before
            .filter(|e| e.invite && !e.finished)
            .and_then(|e| e.owner)
        {
            self.work.invite_done(i);
        }
    }
}

/// The request as the client sent it: the forwarded bytes without the
/// gate's top Via.
fn client_request(forwarded: &SipMessage) -> Option<SipMessage> {
    let mut s = Splice::new(forwarded);
    s.remove_top_via().ok()?;
    SipMessage::scan(s.finish().ok()?).ok()
}
