//! Replies the gate sends itself (400, 403, 404, 483, 503, 505), and where
//! any response goes ([`response_out`]).

use std::net::SocketAddr;

use crate::message::{Method, ParseError, SipMessage, Via};
use crate::metrics as m;
use crate::reply::{self, Reply};
use crate::txn::Inbound;
use crate::uri::host_ip;

use super::{Action, Core, Out};

/// The port of a sent-by without one (RFC 3261 18.2.2), TLS's (19.1.2).
const DEFAULT_PORT: u16 = 5060;
const DEFAULT_TLS_PORT: u16 = 5061;

impl Core {
    /// Answers `msg` with `r`, counting the request under `outcome`. An ACK
    /// is never answered, nor a request without a usable top Via.
    pub(super) fn reply_to(
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
        // Without a Via the client cannot match a response to its request.
        let Some(out) = msg
            .top_via()
            .and_then(|v| response_out(&v, Some(inbound), inbound.listener()))
        else {
            m::dropped("unanswerable");
            return Action::None;
        };
        let site = self.site();
        let bytes = reply::build(msg, inbound.peer(), r, &self.tags, site.server_header());
        Action::Send(out, bytes)
    }

    /// A message that scans but does not validate: a request that still has
    /// what a response needs gets 400 (or 505) with the reason; anything
    /// else is dropped and counted.
    pub(super) fn bad_message(&self, inbound: Inbound, msg: &SipMessage, e: ParseError) -> Action {
        if msg.is_request() && msg.has_mandatory() {
            let mname = m::method_label(msg.method().unwrap_or(Method::Other));
            let code = if e == ParseError::UnsupportedVersion {
                505
            } else {
                400
            };
            return self.reply_to(
                inbound,
                msg,
                &Reply::reason(code, e.reason()),
                mname,
                "bad_request",
            );
        }
        m::dropped(if e == ParseError::BodyTooShort {
            "short_body"
        } else {
            "unparseable"
        });
        Action::None
    }
}

/// Where a response goes (RFC 3261 18.2.2, RFC 3581 4): the one rule for
/// the responses the gate relays and those it makes. `via` is the client's
/// Via (as the gate stamped it when relaying, as received when answering);
/// `from` is where the request came from, while the gate knows it;
/// `listener` sends when it does not.
///
/// - Over TCP or TLS: on the request's connection while it is open, else on a new
///   connection to the source address and the sent-by port (5060, for TLS 5061, if none),
///   not the connection's ephemeral port.
/// - Over WebSocket: on the request's connection only (the transport opens
///   none toward a WebSocket listener's peer); without a known transaction,
///   nowhere.
/// - Over UDP: to the source address (`received`), at the source port when
///   the client asked for `rport`, else at the sent-by port.
///
/// A known transaction takes the address from the request's source, never
/// from what the Via claims; without one, the stamped Via is all there is.
/// `None`: the Via names no address (a host name without `received`).
pub(super) fn response_out(via: &Via<'_>, from: Option<Inbound>, listener: usize) -> Option<Out> {
    let tls = via.transport.eq_ignore_ascii_case(b"TLS");
    let sent_by = via
        .port
        .unwrap_or(if tls { DEFAULT_TLS_PORT } else { DEFAULT_PORT });
    let Some(from) = from else {
        // A WebSocket client's sent-by is made up (`.invalid`, RFC 7118
        // 5.2): only the connection it came in on reaches it.
        if via.transport.eq_ignore_ascii_case(b"WS") || via.transport.eq_ignore_ascii_case(b"WSS") {
            return None;
        }
        let ip = via
            .received
            .and_then(host_ip)
            .or_else(|| host_ip(via.host))?;
        return Some(if tls || via.transport.eq_ignore_ascii_case(b"TCP") {
            Out::Tcp {
                listener,
                conn: None,
                to: SocketAddr::new(ip, sent_by),
            }
        } else {
            let port = match via.rport {
                Some(Some(p)) => p,
                _ => sent_by,
            };
            Out::Udp {
                listener,
                to: SocketAddr::new(ip, port),
            }
        });
    };
    Some(match from {
        Inbound::Udp { listener, peer } => Out::Udp {
            listener,
            to: if via.rport.is_some() {
                peer
            } else {
                SocketAddr::new(peer.ip(), sent_by)
            },
        },
        Inbound::Tcp {
            listener,
            conn,
            peer,
        } => Out::Tcp {
            listener,
            conn: Some(conn),
            to: SocketAddr::new(peer.ip(), sent_by),
        },
    })
}
