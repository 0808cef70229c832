//! Forwarding a request: the received bytes with the edits a proxy must
//! make (RFC 3261 16.6), declared on a [`Splice`] and applied once.

use bytes::Bytes;

use crate::edit::Splice;
use crate::message::HeaderName;
use crate::metrics as m;
use crate::reply;
use crate::txn::{Hop, Inbound};
use crate::uri::host_ip;

use super::request::{Request, DEFAULT_MAX_FORWARDS};
use super::{Action, Core, Out};

impl Core {
    /// Forwards `req` to `hop`, with a Record-Route naming instance
    /// `record_route` when there is one.
    pub(super) fn forward(
        &self,
        req: &Request<'_>,
        hop: Hop,
        record_route: Option<usize>,
    ) -> Action {
        let msg = req.msg;
        let mut s = Splice::new(msg);
        let at = msg.headers_start();

        // Record-Route and Max-Forwards first, then our Via right above the
        // client's: the Via stack stays contiguous, so a UAS that copies the
        // INVITE's Via lines as one block (uas_cancel.xml's 487) keeps them all.
        let mut head = String::with_capacity(160);
        if let Some(idx) = record_route {
            self.push_record_route(&mut head, req, idx);
        }
        if req.max_forwards.is_none() {
            head.push_str("Max-Forwards: ");
            head.push_str(&DEFAULT_MAX_FORWARDS.to_string());
            head.push_str("\r\n");
        }
        // Our Via on top of the Via stack, with a branch derived from the
        // client's, so a retransmission or CANCEL carries the same branch downstream.
        head.push_str(if hop.tcp {
            "Via: SIP/2.0/TCP "
        } else {
            "Via: SIP/2.0/UDP "
        });
        head.push_str(&req.listener.host);
        head.push_str(";branch=");
        self.branches.write(req.key, &mut head);
        head.push_str(";rport\r\n");
        // Right above the client's top Via line, wherever that line is.
        let via_at = msg
            .headers()
            .get(req.top_via.field_index)
            .map_or(at, |f| f.line.start);
        if via_at == at {
            s.insert(at, Bytes::from(head));
        } else {
            let via_line = head.split_off(head.rfind("Via: ").unwrap_or(0));
            s.insert(at, Bytes::from(head));
            s.insert(via_at, Bytes::from(via_line));
        }

        // received / rport on the client's Via (RFC 3261 18.2.1, RFC 3581).
        let (via, peer) = (&req.top_via, req.inbound.peer());
        if via.rport.is_some() || host_ip(via.host) != Some(peer.ip()) {
            if let Some(raw) = msg.raw().get(via.range.clone()) {
                let stamped =
                    reply::stamp_via(&String::from_utf8_lossy(raw), via.rport.is_some(), peer);
                s.replace(via.range.clone(), Bytes::from(stamped));
            }
        }

        if let Some(n) = req.max_forwards {
            if let Some(f) = msg.fields(HeaderName::MaxForwards).next() {
                s.replace(f.value.clone(), Bytes::from((n - 1).to_string()));
            }
        }
        for r in req.own_routes() {
            if s.remove_element(r.field_index, r.range.clone()).is_err() {
                m::dropped("edit_conflict");
                return Action::None;
            }
        }
        match s.finish() {
            Ok(bytes) => Action::Send(out(req.inbound, hop), bytes),
            Err(_) => {
                m::dropped("edit_conflict");
                Action::None
            }
        }
    }

    /// `Record-Route: <sip:TOKEN@gate;lr>` naming instance `idx` for this
    /// request's dialog (its Call-ID), with `transport=tcp` when the request
    /// came over TCP.
    fn push_record_route(&self, head: &mut String, req: &Request<'_>, idx: usize) {
        head.push_str("Record-Route: <sip:");
        let call_id = req.msg.call_id().unwrap_or_default();
        head.push_str(&self.tokens.seal(&self.config.instances[idx].id, call_id));
        head.push('@');
        head.push_str(&req.listener.host);
        if matches!(req.inbound, Inbound::Tcp { .. }) {
            head.push_str(";transport=tcp");
        }
        head.push_str(";lr>\r\n");
    }
}

/// Where a request forwarded to `hop` goes out: from the listener it came in on.
fn out(inbound: Inbound, hop: Hop) -> Out {
    if hop.tcp {
        Out::Tcp {
            listener: inbound.listener(),
            conn: None,
            to: hop.addr,
        }
    } else {
        Out::Udp {
            listener: inbound.listener(),
            to: hop.addr,
        }
    }
}
