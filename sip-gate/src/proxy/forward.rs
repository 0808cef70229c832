//! Forwarding a request: the received bytes with the edits a proxy must
//! make (RFC 3261 16.6), declared on a [`Splice`] and applied once.

use std::cell::Cell;
use std::ops::Range;
use std::time::Instant;

use bytes::Bytes;
use smallvec::SmallVec;

use ringsync::config::Leg;

use crate::digits::{self, AsciiOut as _};
use crate::edit::{EditError, Splice};
use crate::flow::Flow;
use crate::listener::ListenerCtx;
use crate::message::{HeaderName, Method, SipMessage, StartLine};
use crate::metrics as m;
use crate::reply::{self, Reply};
use crate::token::TokenKey;
use crate::txn::{FlowOut, Hop, Inbound};
use crate::uri::{host_ip, SipUri};

use super::request::{Request, DEFAULT_MAX_FORWARDS};
use super::{Action, Core, Out};

impl Core {
    /// Forwards `req` to `hop`, with Record-Routes naming instance
    /// `record_route` when there is one; what cannot be sent is answered
    /// ([`Core::unsent`]).
    pub(super) fn forward(
        &self,
        req: &Request<'_>,
        hop: Hop,
        record_route: Option<usize>,
        now: Instant,
    ) -> Action {
        match self.spliced(req, hop, record_route) {
            Ok(bytes) => Action::Send(out(req.inbound, hop), bytes),
            Err(unsent) => self.unsent(req, unsent, now),
        }
    }

    /// A request the gate could not send on: one too large for a datagram
    /// gets `513 Message Too Large` (RFC 3261 21.5.14; project rule R-FT-6)
    /// instead of being lost at the socket, and its transaction is finished
    /// so a retransmission gets the same answer; an ACK is dropped. A splice
    /// that failed is dropped and counted.
    pub(super) fn unsent(&self, req: &Request<'_>, unsent: Unsent, now: Instant) -> Action {
        match unsent {
            Unsent::TooLarge => {
                self.txns.finish(req.key, now);
                let reply = Reply::reason(513, "Message Too Large");
                self.reply_to(req.inbound, req.msg, &reply, req.mname, "too_large")
            }
            Unsent::Edit(e) => {
                tracing::debug!(error = %e, "cannot splice the forward");
                m::dropped("edit_conflict");
                Action::None
            }
        }
    }

    /// The bytes `req` is forwarded to `hop` as: the received ones with the
    /// edits of RFC 3261 16.6 spliced in.
    pub(super) fn spliced(
        &self,
        req: &Request<'_>,
        hop: Hop,
        record_route: Option<usize>,
    ) -> Result<Bytes, Unsent> {
        let msg = req.msg;
        let mut s = Splice::new(msg);
        let at = msg.headers_start();

        // Record-Route and Max-Forwards first, then our Via right above the
        // client's: the Via stack stays contiguous, so a UAS that copies the
        // INVITE's Via lines as one block (uas_cancel.xml's 487) keeps them all.
        // Right above the client's top Via line, wherever that line is.
        let via_at = msg
            .headers()
            .get(req.top_via.field_index)
            .map_or(at, |f| f.line.start);
        s.replace_with(at..at, |head| {
            if let Some(idx) = record_route {
                self.push_record_routes(head, req, idx, hop);
            }
            self.push_path(head, req, hop);
            if req.max_forwards.is_none() {
                head.push_str("Max-Forwards: ");
                head.push_str(DEFAULT_MAX_FORWARDS);
                head.push_str("\r\n");
            }
            if via_at == at {
                self.push_via_line(head, req, hop);
            }
        });
        if via_at != at {
            s.replace_with(via_at..via_at, |line| self.push_via_line(line, req, hop));
        }

        // received / rport on the client's Via (RFC 3261 18.2.1, RFC 3581);
        // a `received` the client wrote itself is replaced, so the Via a
        // response follows always names the real source.
        let (via, peer) = (&req.top_via, req.inbound.peer());
        if via.rport.is_some() || via.received.is_some() || host_ip(via.host) != Some(peer.ip()) {
            if let Some(raw) = msg.raw().get(via.range.clone()) {
                s.replace_with(via.range.clone(), |out| {
                    reply::stamp_via_into(raw, via.rport.is_some(), peer, out);
                });
            }
        }

        if let Some(n) = req.max_forwards {
            if let Some(f) = msg.first_field(HeaderName::MaxForwards) {
                s.replace_with(f.value.clone(), |value| {
                    digits::push_decimal(value, u64::from(n.saturating_sub(1)));
                });
            }
        }
        if hop.tcp {
            stream_length(&mut s);
        }
        let bytes = route_edits(req, &mut s)
            .and_then(|()| s.finish())
            .map_err(Unsent::Edit)?;
        if !hop.tcp && bytes.len() > max_datagram(hop.addr) {
            return Err(Unsent::TooLarge);
        }
        Ok(bytes)
    }

    /// Appends the gate's Via line, with a branch derived from the client's, so a
    /// retransmission or CANCEL carries the same branch downstream; its
    /// address is the listener the request leaves from.
    fn push_via_line(&self, line: &mut Vec<u8>, req: &Request<'_>, hop: Hop) {
        let out = self.out_listener(req, hop);
        line.push_str("Via: SIP/2.0/");
        line.push_str(if hop.tcp { out.stream_via() } else { "UDP" });
        line.push(b' ');
        line.push_str(&out.host);
        line.push_str(";branch=");
        self.branches.write(req.key, line);
        line.push_str(";rport\r\n");
    }

    /// `Record-Route: <sip:TOKEN@gate;lr>` naming instance `idx` for this
    /// request's dialog (its Call-ID), with `transport=tcp` on a TCP leg and
    /// `transport=tls` on a TLS leg (`sips:` when the Request-URI is, RFC
    /// 3261 16.6 step 4), so in-dialog requests come back over TLS.
    ///
    /// When the two legs differ (UDP in, TCP out or the reverse), two of them
    /// (RFC 5658): the top one for the next hop's side, the other for the
    /// sender's, so each side's route set starts with a URI it can reach, and
    /// an in-dialog request names, in the gate's last Route, the transport of
    /// the leg it goes on.
    fn push_record_routes(&self, head: &mut Vec<u8>, req: &Request<'_>, idx: usize, hop: Hop) {
        let token = Token {
            key: &self.tokens,
            instance: &req.site.config.instances[idx].id,
            call_id: req.msg.call_id().unwrap_or_default(),
            at: Cell::new(None),
        };
        let inbound_tcp = matches!(req.inbound, Inbound::Tcp { .. });
        // Parsed only when it can be `sips:` (a URI that does not parse is
        // taken as not secure, as before).
        let sips = req
            .msg
            .request_uri()
            .filter(|u| crate::uri::is_sips(u))
            .and_then(SipUri::parse)
            .is_some_and(|u| u.secure);
        let push_rr = |head: &mut Vec<u8>, token: RrUser<'_>, l: &ListenerCtx, stream: bool| {
            push_rr(head, token, l, stream, sips)
        };
        if let Some(flow) = hop.flow {
            // Into a subscriber's flow: the subscriber's side (top) names
            // the instance, the instance's side the flow, so the instance's
            // in-dialog requests come back into it (RFC 5626 5.3).
            let out = self.out_listener(req, hop);
            let f = self.flow_of_hop(hop, flow);
            push_rr(head, RrUser::Dialog(&token), out, hop.tcp);
            let ft = self.flows.seal(&f, req.listener.advertise);
            push_rr(head, RrUser::Flow(&ft), req.listener, inbound_tcp);
            return;
        }
        // A WebSocket client is reached through its flow or not at all
        // (its Contact host is `.invalid`, RFC 7118 5.2), so its dialogs
        // get the flow with or without `ob` (R-WS-2).
        if let Some(f) = self
            .subscriber_flow(req, hop)
            .filter(|_| wants_outbound(req.msg) || req.listener.ws.is_some())
        {
            // From a subscriber's flow, asked for with `ob` (RFC 5626 5.3):
            // the instance's side (top) names the flow, the subscriber's
            // side the instance.
            let ft = self.flows.seal(&f, req.listener.advertise);
            push_rr(head, RrUser::Flow(&ft), req.listener, hop.tcp);
            push_rr(head, RrUser::Dialog(&token), req.listener, inbound_tcp);
            return;
        }
        let legs: &[bool] = if hop.tcp == inbound_tcp {
            &[inbound_tcp]
        } else {
            &[hop.tcp, inbound_tcp]
        };
        for &tcp in legs {
            push_rr(head, RrUser::Dialog(&token), req.listener, tcp);
        }
    }

    /// `Path: <sip:FLOW@gate;lr>` on a subscriber's REGISTER to an instance
    /// (RFC 3327, RFC 5626 5.2): the registrar sends the subscriber's
    /// requests to the gate with that Route, and the gate sends them into
    /// the flow. Above any Path already present, as a proxy adds its own.
    fn push_path(&self, head: &mut Vec<u8>, req: &Request<'_>, hop: Hop) {
        if req.method != Method::Register {
            return;
        }
        let Some(f) = self.subscriber_flow(req, hop) else {
            return;
        };
        m::flow_path(match (f.tcp, &req.listener.ws) {
            (None, _) => "udp",
            (Some(_), None) => "tcp",
            (Some(_), Some(_)) => "ws",
        });
        head.push_str("Path: <sip:");
        head.push_str(&self.flows.seal(&f, req.listener.advertise));
        head.push(b'@');
        head.push_str(&req.listener.host);
        if hop.tcp {
            head.push_str(req.listener.stream_param());
        }
        head.push_str(";lr>\r\n");
    }

    /// The flow a request from a subscriber came in on: a client's request
    /// on a `subscriber` listener, going to an instance.
    fn subscriber_flow(&self, req: &Request<'_>, hop: Hop) -> Option<Flow> {
        if req.listener.leg != Leg::Subscriber
            || req.from_instance.is_some()
            || hop.instance.is_none()
        {
            return None;
        }
        Some(match req.inbound {
            Inbound::Udp { listener, peer } => Flow {
                listener,
                peer,
                tcp: None,
            },
            Inbound::Tcp {
                listener,
                conn,
                peer,
            } => Flow {
                listener,
                peer,
                tcp: Some((conn, self.flow_table.epoch())),
            },
        })
    }

    /// The flow a hop into a flow uses, as its token names it.
    fn flow_of_hop(&self, hop: Hop, out: FlowOut) -> Flow {
        Flow {
            listener: out.listener,
            peer: hop.addr,
            tcp: out.conn.map(|c| (c, self.flow_table.epoch())),
        }
    }

    /// The listener a request to `hop` leaves from: the flow's, else the
    /// one it came in on.
    fn out_listener<'a>(&'a self, req: &Request<'a>, hop: Hop) -> &'a ListenerCtx {
        hop.flow
            .and_then(|f| req.site.listeners.get(f.listener))
            .unwrap_or(req.listener)
    }
}

/// Whether the Contact URI carries `ob` (RFC 5626 4.2.1): the UA asks that
/// requests inside the dialog reach it over the flow it sent this one on.
fn wants_outbound(msg: &SipMessage) -> bool {
    msg.first_contact().is_some_and(|c| {
        msg.raw().get(c.uri.clone()).is_some_and(|uri| {
            uri.split(|&b| b == b';').skip(1).any(|p| {
                let name = p.split(|&b| b == b'=').next().unwrap_or_default();
                name.eq_ignore_ascii_case(b"ob")
            })
        })
    })
}

/// One `Record-Route: <sip:TOKEN@host[;transport=tcp|tls];lr>` line for
/// listener `l`; on a TLS leg of a `sips:` request, `<sips:TOKEN@host;lr>`.
fn push_rr(head: &mut Vec<u8>, user: RrUser<'_>, l: &ListenerCtx, stream: bool, sips: bool) {
    // `sips:` belongs to SIP over TLS; a WSS leg says `transport=wss`.
    let sips = sips && stream && l.tls && l.ws.is_none();
    head.push_str(if sips {
        "Record-Route: <sips:"
    } else {
        "Record-Route: <sip:"
    });
    match user {
        RrUser::Dialog(t) => t.write(head),
        RrUser::Flow(f) => head.push_str(f),
    }
    head.push(b'@');
    head.push_str(&l.host);
    if stream && !sips {
        head.push_str(l.stream_param());
    }
    head.push_str(";lr>\r\n");
}

/// The dialog token of a Record-Route, sealed where it is first written (no
/// `String` of its own); a second Record-Route copies those bytes.
struct Token<'a> {
    key: &'a TokenKey,
    instance: &'a str,
    call_id: &'a [u8],
    /// Where in the buffer it was first written.
    at: Cell<Option<(usize, usize)>>,
}

impl Token<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        if let Some((start, end)) = self.at.get() {
            out.extend_from_within(start..end);
            return;
        }
        let start = out.len();
        self.key.seal_into(self.instance, self.call_id, out);
        self.at.set(Some((start, out.len())));
    }
}

/// The user part of a Record-Route the gate writes.
#[derive(Clone, Copy)]
enum RrUser<'a> {
    /// The dialog token naming an instance.
    Dialog(&'a Token<'a>),
    /// A sealed flow token.
    Flow(&'a str),
}

/// The Route edits: the gate's own Routes go, and under a strict router
/// upstream (RFC 3261 16.4) the last Route goes too and becomes the
/// Request-URI. Routes on one line go in one edit, so they never overlap.
fn route_edits(req: &Request<'_>, s: &mut Splice<'_>) -> Result<(), EditError> {
    // A few Routes (the gate's one or two, a strict router's last): held
    // inline, grouped by line in order.
    let mut gone: SmallVec<[(usize, Range<usize>); 4]> = req
        .own_routes()
        .iter()
        .chain(&req.strict)
        .map(|r| (r.field_index, r.range.clone()))
        .collect();
    gone.sort_by_key(|(field, _)| *field);
    for line in gone.chunk_by(|a, b| a.0 == b.0) {
        let ranges: SmallVec<[Range<usize>; 4]> = line.iter().map(|(_, r)| r.clone()).collect();
        if let Some(&(field, _)) = line.first() {
            s.remove_elements(field, &ranges)?;
        }
    }
    if let (Some(last), StartLine::Request { uri, .. }) = (&req.strict, req.msg.start_line()) {
        s.replace(uri.clone(), req.msg.slice(last.uri.clone()));
    }
    Ok(())
}

/// Where a request forwarded to `hop` goes out: into a subscriber's flow,
/// else from the listener it came in on.
pub(super) fn out(inbound: Inbound, hop: Hop) -> Out {
    if let Some(f) = hop.flow {
        return match f.conn {
            Some(conn) => Out::Flow {
                listener: f.listener,
                conn,
                to: hop.addr,
            },
            None => Out::Udp {
                listener: f.listener,
                to: hop.addr,
            },
        };
    }
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

/// Why a request was not sent on ([`Core::unsent`]).
#[derive(Debug)]
pub(super) enum Unsent {
    /// Larger, with the gate's edits, than a UDP datagram can carry.
    TooLarge,
    /// The edits could not be spliced.
    Edit(EditError),
}

/// The largest UDP payload to `to`: the IP datagram limit less the IPv4
/// and UDP headers (IPv6's fixed header is not counted in its limit).
fn max_datagram(to: std::net::SocketAddr) -> usize {
    if to.is_ipv4() {
        65_507
    } else {
        65_527
    }
}

/// A message forwarded onto a stream must say where it ends (RFC 3261
/// 18.3); a datagram may leave Content-Length out (its body is the rest of
/// the datagram), so the gate adds it when relaying such a message to TCP.
pub(super) fn stream_length(s: &mut Splice<'_>) {
    let msg = s.message();
    if msg.first_field(HeaderName::ContentLength).is_none() {
        let at = msg.header_end();
        let len = msg.body().len();
        s.replace_with(at..at, |line| {
            line.extend_from_slice(b"Content-Length: ");
            digits::push_decimal(line, u64::try_from(len).unwrap_or(u64::MAX));
            line.extend_from_slice(b"\r\n");
        });
    }
}
