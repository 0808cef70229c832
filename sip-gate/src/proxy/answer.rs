//! Replies the gate sends itself (400, 403, 404, 483, 503, 505), back to
//! where the request came from.

use crate::message::{Method, ParseError, SipMessage};
use crate::metrics as m;
use crate::reply::{self, Reply};
use crate::txn::Inbound;

use super::{Action, Core, Out};

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
        if msg.top_via().is_none() {
            // A response the client cannot match to its request helps nobody.
            m::dropped("unanswerable");
            return Action::None;
        }
        let bytes = reply::build(msg, inbound.peer(), r, &self.tags);
        Action::Send(back(inbound), bytes)
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
        m::dropped("unparseable");
        Action::None
    }
}

/// Where a reply to something received goes: on the same connection, or
/// to the datagram's source (which is what rport asks for, and what works
/// through NAT).
pub(super) fn back(inbound: Inbound) -> Out {
    match inbound {
        Inbound::Udp { listener, peer } => Out::Udp { listener, to: peer },
        Inbound::Tcp {
            listener,
            conn,
            peer,
        } => Out::Tcp {
            listener,
            conn: Some(conn),
            to: peer,
        },
    }
}
