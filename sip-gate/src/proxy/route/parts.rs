//! The pieces of a routing decision that need no core: the [`Decision`]
//! itself, the gate's own refusals, which transport a request takes toward
//! an instance and what it is placed on a ring by.

use crate::dns::DnsQuery;
use crate::message::Method;
use crate::metrics as m;
use crate::policy::OnPurpose;
use crate::reach::Stream;
use crate::reply::Reply;
use crate::txn::{Hop, Inbound};

use super::super::request::Request;

/// Where a request goes, or the reply the gate sends instead.
#[derive(Debug, Clone)]
pub(in crate::proxy) enum Decision {
    /// Forward to `hop`; name `record_route` in a Record-Route. New work
    /// to an instance draining in the gate's view says why it goes there
    /// anyway (`on_purpose`, counted by reason).
    Forward {
        hop: Hop,
        record_route: Option<usize>,
        on_purpose: Option<OnPurpose>,
    },
    /// Answer with `reply`; `why` is the metrics outcome (`foreign_route`,
    /// `R-SG-1`, ...).
    Refuse {
        reply: Reply<'static>,
        why: &'static str,
    },
    /// The next hop is a host name the DNS cache does not hold yet.
    Resolve(DnsQuery),
    /// Say nothing; the metrics outcome (R-OV-2 with `action = "drop"`).
    Drop(&'static str),
}

impl Decision {
    pub(super) fn refuse(code: u16, reason: &'static str, why: &'static str) -> Decision {
        Decision::Refuse {
            reply: Reply::reason(code, reason),
            why,
        }
    }
}

/// An in-dialog request to an instance the probes found `down` and whose
/// traffic does not show it alive (R-FT-1 amended: traffic outranks
/// probes): the gate answers at once instead of forwarding into silence
/// until Timer F (32 s) or B. Precisely: 408 when the probe says `down`
/// and the instance's latest traffic evidence is not an answer, i.e. no
/// response from it was received after its last traffic failure (a
/// transport error toward it, or a request forwarded to it that timed out,
/// dated when it was sent), or none was received at all since the gate
/// started (then the probe decides alone). A dialog the gate set up with
/// the instance had its answer, so its requests go through unless the
/// instance failed traffic since ([`crate::health::Traffic`]). 408, not 503: the probes timed out, and RFC 3261 8.1.3.1
/// has a timeout treated as a 408 (a transport error would be a 503); a 408
/// to a request inside a dialog also ends that dialog at the UA (RFC 3261
/// 12.2.1.2), which is right when the instance holding it died, where a
/// 503 would keep the UA retrying a dialog nobody holds. The ACK of a 2xx
/// has no response: [`super::transaction`] drops it.
/// Counted as `sipgate_requests_total{outcome="instance_down"}`.
pub(super) fn instance_down() -> Decision {
    Decision::refuse(408, "Instance Down", "instance_down")
}

/// Whether a request came in over TCP.
pub(super) fn inbound_tcp(inbound: Inbound) -> bool {
    matches!(inbound, Inbound::Tcp { .. })
}

/// The transport toward the instance for a request from outside: the one
/// it came in on, except that TLS ends at the gate when the listener also
/// serves UDP (TLS protects the public leg; instances sit inside the
/// platform and are reached over the listener's UDP). WebSocket always
/// ends at the gate (an instance speaks none; a `ws`/`wss` listener serves
/// UDP, the config checks it): RFC 7118 from the browser, UDP inside.
pub(super) fn instance_stream(req: &Request<'_>) -> bool {
    inbound_tcp(req.inbound)
        && !((req.listener.tls || req.listener.ws.is_some()) && req.listener.udp)
}

/// The stream toward the instance for a request from outside, if it goes
/// over one: TLS from a TLS listener (the transport connects with TLS on
/// it), else TCP.
pub(super) fn instance_stream_kind(req: &Request<'_>) -> Option<Stream> {
    instance_stream(req).then_some(if req.listener.tls {
        Stream::Tls
    } else {
        Stream::Tcp
    })
}

/// What a new request is placed on a ring by: the address of record of a
/// registration or subscription, the Call-ID of anything else.
pub(super) fn ring_key<'m>(req: &Request<'m>) -> &'m [u8] {
    match req.method {
        Method::Register | Method::Subscribe | Method::Publish => {
            req.msg.to_uri().unwrap_or_default()
        }
        _ => req.msg.call_id().unwrap_or_default(),
    }
}

/// Requests that create a dialog the gate must stay in (RFC 3261 12.1, RFC 6665).
pub(in crate::proxy) fn creates_dialog(m: Method) -> bool {
    matches!(m, Method::Invite | Method::Subscribe | Method::Refer)
}

/// 503 for a request no instance of the listener can take.
pub(super) fn no_instance() -> Decision {
    Decision::refuse(503, "No Instance Available", "no_instance")
}

/// A request an instance sends toward a WebSocket client without its flow
/// (a `transport=ws`/`wss` target, or a WebSocket listener's stream with no
/// connection named): the gate never opens a WebSocket connection, so the
/// client cannot be reached (RFC 7118 5). 430 is for a flow that is gone
/// (RFC 5626 5.3) and 503 would tell the instance the gate itself is out
/// of service (RFC 3261 21.5.4, RFC 3263 4.3); 480 says this callee is
/// not reachable now, so the instance tries the AoR's other bindings.
pub(super) fn ws_not_connected() -> Decision {
    m::flow_failure("ws_not_connected");
    Decision::refuse(480, "WebSocket Client Not Connected", "ws_not_connected")
}
