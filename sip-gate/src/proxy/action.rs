//! What the core hands back to the transport: where a message goes out
//! ([`Out`]) and what to do with a received message ([`Action`]).

use std::net::SocketAddr;

use bytes::Bytes;

use crate::dns::DnsQuery;
use crate::txn::ConnId;

/// Where a message goes out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    /// A datagram from this listener's UDP socket.
    Udp {
        /// Listener index.
        listener: usize,
        /// Destination.
        to: SocketAddr,
    },
    /// Over TCP: on `conn` if it is still open, else on any connection to
    /// `to`, else a new connection from this listener.
    Tcp {
        /// Listener index.
        listener: usize,
        /// Preferred connection.
        conn: Option<ConnId>,
        /// Destination.
        to: SocketAddr,
    },
    /// Into a subscriber's TCP flow (RFC 5626 5.3): on `conn` only. If it
    /// has closed meanwhile the message is dropped: a new connection toward
    /// an address behind NAT reaches nobody.
    Flow {
        /// Listener index.
        listener: usize,
        /// The subscriber's connection.
        conn: ConnId,
        /// Its remote address.
        to: SocketAddr,
    },
}

/// What to do with a received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send these bytes.
    Send(Out, Bytes),
    /// Send both, in order: the gate answers two transactions for one
    /// message (a CANCEL whose INVITE went into a flow that has closed: the
    /// CANCEL's 200, then the INVITE's final response; R-WS-2). Boxed: it
    /// is rare, and keeps every other action small.
    SendTwo(Box<[(Out, Bytes); 2]>),
    /// Resolve this name (RFC 3263) and hand the answer to
    /// [`super::Core::resolved`]: the message that needs it is parked in the core
    /// until then.
    Resolve(DnsQuery),
    /// Nothing to send (dropped, absorbed, or a probe answer).
    None,
}
