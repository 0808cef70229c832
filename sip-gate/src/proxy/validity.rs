//! Two RFC 3261 16.3 request checks the core makes before routing, kept
//! apart from [`Core::check`](super::Core) so that one stays about routing:
//! a Request-URI carrying URI headers (step 1, reasonable syntax: RFC 3261
//! 19.1.1 allows none in a Request-URI; RFC 4475 3.1.2.11 `escruri`) gets
//! 400, and a `Proxy-Require` naming an option the gate does not support
//! (step 5; RFC 4475 3.3.4 `bext01`) gets `420 Bad Extension` with an
//! `Unsupported` header listing them. The gate supports no extension that
//! needs a proxy's support, so every option-tag in `Proxy-Require` is
//! unsupported.

use crate::message::{HeaderName, Method, SipMessage};
use crate::reply::Reply;
use crate::txn::Inbound;
use crate::uri;

use super::source::Refusal;
use super::{Action, Core};

impl Core {
    /// `Err` with the answer when the request fails one of the checks; every
    /// request a proxy handles meets them (in-dialog ones, and those from a
    /// configured instance, too), except that an ACK or a CANCEL is never
    /// refused for its `Proxy-Require` (as a UAS never does for `Require`,
    /// RFC 3261 8.2.2.3): refusing either would break the call it belongs to.
    pub(super) fn validity(
        &self,
        inbound: Inbound,
        msg: &SipMessage,
        method: Method,
        (mname, refused): (&'static str, Option<Refusal>),
    ) -> Result<(), Action> {
        // A refused source gets its refusal, never the check's answer
        // (R-SEC-4).
        let answer = |reply: &Reply<'_>, outcome| match refused {
            Some(r) => self.refuse_source(inbound, msg, r, mname),
            None => self.reply_to(inbound, msg, reply, mname, outcome),
        };
        if msg.request_uri().is_some_and(uri::has_headers) {
            return Err(answer(
                &Reply::reason(400, "Headers Not Allowed In Request-URI"),
                "bad_request",
            ));
        }
        if matches!(method, Method::Ack | Method::Cancel) {
            return Ok(());
        }
        let tags = proxy_require(msg);
        if tags.is_empty() {
            return Ok(());
        }
        let extra = [("Unsupported", tags.join(", "))];
        let reply = Reply {
            extra: &extra,
            ..Reply::reason(420, "Bad Extension")
        };
        Err(answer(&reply, "bad_extension"))
    }
}

/// The option-tags of every `Proxy-Require` line, in order, as text.
fn proxy_require(msg: &SipMessage) -> Vec<String> {
    msg.fields(HeaderName::ProxyRequire)
        .flat_map(|f| msg.value(f).split(|&b| b == b','))
        .map(|t| t.trim_ascii())
        .filter(|t| !t.is_empty())
        .map(|t| String::from_utf8_lossy(t).into_owned())
        .collect()
}
