//! The routing decision: where a request goes, or what the gate answers
//! instead. A plain function of the request, the drain view and the site
//! config: it holds no lock and changes nothing but metrics and logs, so the
//! transaction table is only touched after it returns (see [`super::request`]).

use ringsync::view::DrainView;

use crate::listener::Mode;
use crate::message::Method;
use crate::policy::Admission;
use crate::reply::Reply;
use crate::txn::{Hop, Inbound};
use crate::uri::SipUri;

use super::request::Request;
use super::Core;

/// Where a request goes, or the reply the gate sends instead.
#[derive(Debug, Clone)]
pub(super) enum Decision {
    /// Forward to `hop`; name `record_route` in a Record-Route.
    Forward {
        hop: Hop,
        record_route: Option<usize>,
    },
    /// Answer with `reply`; `why` is the metrics outcome (`foreign_route`,
    /// `R-SG-1`, ...).
    Refuse {
        reply: Reply<'static>,
        why: &'static str,
    },
}

impl Decision {
    fn refuse(code: u16, reason: &'static str, why: &'static str) -> Decision {
        Decision::Refuse {
            reply: Reply::reason(code, reason),
            why,
        }
    }
}

/// Requests that create a dialog the gate must stay in (RFC 3261 12.1, RFC 6665).
pub(super) fn creates_dialog(m: Method) -> bool {
    matches!(m, Method::Invite | Method::Subscribe | Method::Refer)
}

impl Core {
    /// Decides where `req` goes in `view`.
    pub(super) fn decide(&self, req: &Request<'_>, view: &DrainView) -> Decision {
        if let Some(src) = req.from_instance {
            self.outward(req, src)
        } else if req.to_tag {
            self.in_dialog(req, view)
        } else {
            self.new_work(req, view)
        }
    }

    /// From a configured instance toward the outside: along the route set,
    /// or to the Request-URI.
    fn outward(&self, req: &Request<'_>, src: usize) -> Decision {
        let Some(hop) = req.target().and_then(|u| self.outside_hop(&u, req.inbound)) else {
            return Decision::refuse(404, "Unroutable Request-URI", "unroutable");
        };
        // Dialogs an instance starts through the gate come back to it.
        let record_route = (!req.to_tag && creates_dialog(req.method)).then_some(src);
        Decision::Forward { hop, record_route }
    }

    /// In-dialog from outside: the gate's token names the instance (R-SEC-1).
    fn in_dialog(&self, req: &Request<'_>, view: &DrainView) -> Decision {
        let idx = match req.token {
            Some(Ok(idx)) => idx,
            Some(Err(())) => return Decision::refuse(403, "Bad Route Token", "bad_token"),
            None if req.ours > 0 || req.next_route().is_some() => {
                return Decision::refuse(403, "Route Not Allowed", "foreign_route")
            }
            // A UA that does not keep route sets (SIPp's stock uac): the
            // guarded instance, or the ring by Call-ID, as the INVITE went.
            None => match &req.listener.mode {
                Mode::Guard(idx) => *idx,
                // The call this gate saw set up (its work book), so a drain
                // since then does not move it (R-SG-4); only when the gate
                // has not seen it (another node, a restart), the ring by
                // Call-ID as the INVITE went.
                Mode::Balance(pool) => match self.work.dialog_instance(req.msg) {
                    Some(idx) => idx,
                    None => match view.pick(pool, req.msg.call_id().unwrap_or_default()) {
                        Some(idx) => idx,
                        None => {
                            return Decision::refuse(503, "No Instance Available", "no_instance")
                        }
                    },
                },
            },
        };
        if let Some(r) = req.next_route() {
            // After the gate's Route, only the instance's own may follow.
            let to_instance = req
                .msg
                .raw()
                .get(r.uri.clone())
                .and_then(SipUri::parse)
                .and_then(|u| u.socket_addr())
                .is_some_and(|a| Some(a) == self.config.instances[idx].sip);
            if !to_instance {
                return Decision::refuse(403, "Route Not Allowed", "foreign_route");
            }
        }
        self.to_instance(idx, req.inbound, None)
    }

    /// A new dialog or out-of-dialog request from outside. Nothing the
    /// client wrote decides where it goes (R-SEC-2): the listener's mode, the
    /// account's home (R-ESG-5) or the ring, then the drain policy.
    fn new_work(&self, req: &Request<'_>, view: &DrainView) -> Decision {
        if req.next_route().is_some() {
            return Decision::refuse(403, "Route Not Allowed", "foreign_route");
        }
        let (msg, peer) = (req.msg, req.inbound.peer());
        let idx = match &req.listener.mode {
            Mode::Guard(idx) => *idx,
            // R-ESG-5: a single-instance account stays on its home esg.
            Mode::Balance(pool) => match self.policy.home_instance(req.listener, msg, peer.ip()) {
                Some(home) => home,
                None => {
                    let key = match req.method {
                        Method::Register | Method::Subscribe | Method::Publish => {
                            msg.to_uri().unwrap_or_default()
                        }
                        _ => msg.call_id().unwrap_or_default(),
                    };
                    match view.pick(pool, key) {
                        Some(idx) => idx,
                        None => {
                            return Decision::refuse(503, "No Instance Available", "no_instance")
                        }
                    }
                }
            },
        };
        let admission = self
            .policy
            .admit(view, req.inbound, req.listener, idx, msg, req.method);
        if let Admission::Refuse { reply, rule } = admission {
            return Decision::Refuse { reply, why: rule };
        }
        let record_route = creates_dialog(req.method).then_some(idx);
        self.to_instance(idx, req.inbound, record_route)
    }

    /// Forward to a configured instance, over the transport the request
    /// came in on.
    fn to_instance(&self, idx: usize, inbound: Inbound, record_route: Option<usize>) -> Decision {
        match self.config.instances.get(idx).and_then(|i| i.sip) {
            Some(addr) => Decision::Forward {
                hop: Hop {
                    instance: Some(idx),
                    addr,
                    tcp: matches!(inbound, Inbound::Tcp { .. }),
                },
                record_route,
            },
            None => Decision::refuse(503, "No Instance Available", "no_instance"),
        }
    }

    /// A hop toward the outside (requests sent by an instance); `None` for
    /// a URI that is no IP address or that loops back to the gate.
    fn outside_hop(&self, uri: &SipUri<'_>, inbound: Inbound) -> Option<Hop> {
        let addr = uri.socket_addr()?;
        if self.listeners.is_own(addr) {
            return None; // a loop through ourselves
        }
        let listener = self.listeners.get(inbound.listener())?;
        let tcp = if uri.wants_tcp() {
            listener.tcp
        } else {
            !listener.udp
        };
        Some(Hop {
            instance: None,
            addr,
            tcp,
        })
    }
}
