//! Host names in the requests instances send (providers are often given by
//! name): RFC 3263 lookups, their answers cached per TTL, and failover
//! between the targets of an answer.
//!
//! The routing core stays synchronous and does no I/O. When a request needs
//! a name the [`cache`] does not hold, the core parks the message and
//! returns [`crate::Action::Resolve`]; the transport runs the lookup
//! ([`resolve`], on hickory-resolver) and hands the answer back with
//! [`crate::Core::resolved`], which caches it and routes the parked
//! messages. A message is routed (its transaction inserted, its metrics
//! counted) only then, once.
//!
//! [`order`] is RFC 2782's target order (priority, then weighted random).

pub(crate) mod cache;
pub(crate) mod order;
pub(crate) mod resolve;

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// What the gate asks DNS for one URI (RFC 3263 4): a host name, with the
/// URI's port and transport when it names them, and what the sending
/// listener can use.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DnsQuery {
    /// The host, lowercase, without a trailing dot.
    pub(crate) host: String,
    /// The URI's port: with one, only A/AAAA are asked (RFC 3263 4.2).
    pub(crate) port: Option<u16>,
    /// The URI's `transport` parameter (true: TCP): with one, no NAPTR.
    pub(crate) tcp: Option<bool>,
    /// The sending listener serves UDP.
    pub(crate) udp_ok: bool,
    /// The sending listener serves TCP.
    pub(crate) tcp_ok: bool,
    /// The sending listener is IPv6 (AAAA instead of A).
    pub(crate) v6: bool,
}

impl fmt::Display for DnsQuery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.host)?;
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        match self.tcp {
            Some(true) => f.write_str(";transport=tcp"),
            Some(false) => f.write_str(";transport=udp"),
            None => Ok(()),
        }
    }
}

/// One SRV target (or the host itself when there is no SRV), with the
/// addresses its name resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrvTarget {
    /// SRV priority: lower first.
    pub priority: u16,
    /// SRV weight: share of the traffic among targets of one priority.
    pub weight: u16,
    /// Addresses with the port to use.
    pub addrs: Vec<SocketAddr>,
}

/// A resolved URI: the transport chosen (RFC 3263 4.1) and the targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsAnswer {
    /// TCP (else UDP), the same for every target.
    pub tcp: bool,
    /// The targets, in no particular order ([`order`] orders them).
    pub targets: Vec<SrvTarget>,
    /// How long the answer may be used: the least TTL of the records it
    /// was built from.
    pub ttl: Duration,
}

/// Why a URI did not resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DnsFailure {
    /// The name does not exist or has no usable records (a negative
    /// answer, remembered for `ttl`): the request gets 404.
    NotFound {
        /// How long to remember it (the answer's own, capped by config).
        ttl: Duration,
    },
    /// No answer (timeouts, SERVFAIL, no name server): the request gets 503.
    Unavailable,
}

/// The outcome of a lookup.
pub type DnsResult = Result<DnsAnswer, DnsFailure>;
