//! The RFC 3261 edges a proxy gets wrong most often, each test named by the
//! section it proves: message framing in datagrams (18.3), where responses
//! go (18.2.2, RFC 3581), transaction matching (17.2.3).

use sip_gate::frame::{self, Frame};

use super::prelude::*;

/// A request an instance (sg-a) sends outward through the sg balance
/// listener, to `uri`.
fn from_sg_a(method: &str, uri: &str, call_id: &str, branch: &str) -> Req {
    Req::new(
        method,
        uri,
        call_id,
        &format!("SIP/2.0/UDP 127.0.1.1:5060;branch={branch}"),
    )
}

fn bytes_of(a: &Action) -> Bytes {
    match a {
        Action::Send(_, b) => b.clone(),
        other => panic!("expected a message, got {other:?}"),
    }
}

/// The whole of `b` is one stream frame: what a TCP next hop would read.
fn assert_one_frame(b: &Bytes) {
    assert_eq!(
        frame::check(b, 65_535),
        Ok(Some(Frame::Message { len: b.len() })),
        "{}",
        text(b)
    );
}

#[test]
fn rfc3261_18_3_udp_bytes_past_content_length_are_never_forwarded() {
    let g = Gate::std();
    let sdp = b"v=0\r\no=- 1 1 IN IP4 203.0.113.10\r\n";
    let smuggled = b"BYE sip:victim@127.0.1.2 SIP/2.0\r\nVia: SIP/2.0/TCP 6.6.6.6;branch=z9hG4bKevil\r\n\
From: <sip:e@x>;tag=1\r\nTo: <sip:v@y>;tag=2\r\nCall-ID: evil\r\nCSeq: 1 BYE\r\nContent-Length: 0\r\n\r\n";

    // From a client to an instance over UDP.
    let exact = Req::ua("INVITE", "cl-1@ua", "z9hG4bKcl1")
        .body("application/sdp", sdp)
        .bytes();
    let mut padded = exact.to_vec();
    padded.extend_from_slice(smuggled);
    let a = g.udp(L_SG_BAL, UA, &Bytes::from(padded));
    let out = bytes_of(&a);
    assert!(out.ends_with(sdp), "{}", text(&out));
    assert!(!text(&out).contains("victim"), "{}", text(&out));
    assert_untouched(&exact, &sent(a).1);

    // From an instance to a TCP next hop: the extra bytes would be a second
    // message on that stream.
    let exact = from_sg_a(
        "MESSAGE",
        "sip:bob@198.51.100.7:5060;transport=tcp",
        "cl-2@sg",
        "z9hG4bKcl2",
    )
    .body("text/plain", b"hello")
    .bytes();
    let mut padded = exact.to_vec();
    padded.extend_from_slice(smuggled);
    let a = g.udp(L_SG_BAL, INSTANCE_ADDR[SG_A], &Bytes::from(padded));
    let Action::Send(Out::Tcp { to, .. }, out) = &a else {
        panic!("expected TCP out: {a:?}")
    };
    assert_eq!(*to, addr("198.51.100.7:5060"));
    assert_one_frame(out);
    assert!(out.ends_with(b"\r\n\r\nhello"), "{}", text(out));
    assert!(!text(out).contains("victim"));

    // A response with trailing bytes is cut the same way.
    let (_, fwd) = sent(g.udp(L_SG_BAL, UA, &exact_invite("cl-3@ua", "z9hG4bKcl3")));
    let mut resp = response_to(&fwd, 180, "Ringing", "uas-cl").to_vec();
    resp.extend_from_slice(smuggled);
    let a = handle(&g.core, L_SG_BAL, INSTANCE_ADDR[SG_A], &Bytes::from(resp));
    let out = bytes_of(&a);
    assert!(
        out.ends_with(b"Content-Length: 0\r\n\r\n"),
        "{}",
        text(&out)
    );
}

fn exact_invite(call_id: &str, branch: &str) -> Bytes {
    Req::ua("INVITE", call_id, branch).bytes()
}

#[test]
fn rfc3261_18_3_datagram_without_content_length_gets_one_on_a_stream() {
    let g = Gate::std();
    let req = from_sg_a(
        "MESSAGE",
        "sip:bob@198.51.100.7:5060;transport=tcp",
        "cl-4@sg",
        "z9hG4bKcl4",
    )
    .body("text/plain", b"no length here");
    // Req::bytes always writes Content-Length; take it out again.
    let raw = text(&req.bytes()).replace("Content-Length: 14\r\n", "");
    let a = g.udp(L_SG_BAL, INSTANCE_ADDR[SG_A], &Bytes::from(raw));
    let Action::Send(Out::Tcp { .. }, out) = &a else {
        panic!("expected TCP out: {a:?}")
    };
    assert_one_frame(out);
    let m = SipMessage::parse(out.clone()).unwrap();
    assert_eq!(header(&m, HeaderName::ContentLength).as_deref(), Some("14"));
    assert_eq!(m.body(), b"no length here");
}

#[test]
fn rfc3261_18_3_datagram_shorter_than_content_length_is_400_or_dropped() {
    let g = Gate::std();
    let req = Req::ua("MESSAGE", "cl-5@ua", "z9hG4bKcl5").body("text/plain", b"0123456789");
    let short =
        Bytes::from(text(&req.bytes()).replace("Content-Length: 10", "Content-Length: 100"));
    let r = replied_scan(g.udp(L_SG_BAL, UA, &short), L_SG_BAL, UA, 400);
    assert!(
        text(r.raw()).starts_with("SIP/2.0 400 Body Shorter Than Content-Length\r\n"),
        "{}",
        text(r.raw())
    );
    // A response has nobody to answer: dropped (and counted, `short_body`).
    let (_, fwd) = sent(g.udp(L_SG_BAL, UA, &exact_invite("cl-6@ua", "z9hG4bKcl6")));
    let resp = text(&response_to(&fwd, 180, "Ringing", "uas-cl6"))
        .replace("Content-Length: 0", "Content-Length: 5");
    assert_eq!(
        handle(&g.core, L_SG_BAL, INSTANCE_ADDR[SG_A], &Bytes::from(resp)),
        Action::None
    );
}

/// Sends `input` from the UA on the sg guard listener, answers it from
/// sg-a, and returns where the response goes from this gate and from one
/// that restarted in between (no transaction).
fn response_outs(g: &Gate, peer: &str, input: &Bytes) -> (Out, Out) {
    let (_, fwd) = sent(g.udp(L_SG_GUARD, peer, input));
    let resp = response_to(&fwd, 200, "OK", "uas-dst");
    let known = sent(handle(&g.core, L_SG_GUARD, INSTANCE_ADDR[SG_A], &resp)).0;
    let fresh = g.restarted();
    let unknown = sent(handle(&fresh, L_SG_GUARD, INSTANCE_ADDR[SG_A], &resp)).0;
    (known, unknown)
}

#[test]
fn rfc3261_18_2_2_rfc3581_udp_responses_go_to_the_same_place_known_transaction_or_not() {
    let g = Gate::std();
    // (the client's Via, where every response to it goes)
    let cases = [
        // rport: the source address and port (a NAT's mapping).
        ("SIP/2.0/UDP 203.0.113.10:5062;rport", UA),
        // No rport: the source address, the sent-by port.
        ("SIP/2.0/UDP 203.0.113.10:5062", "203.0.113.10:5062"),
        ("SIP/2.0/UDP ua.example.com:5099", "203.0.113.10:5099"),
        ("SIP/2.0/UDP ua.example.com", "203.0.113.10:5060"),
        // A `received` the client wrote itself is not believed.
        (
            "SIP/2.0/UDP 203.0.113.10:5062;received=192.0.2.66",
            "203.0.113.10:5062",
        ),
    ];
    for (n, (via, want)) in cases.into_iter().enumerate() {
        let input = Req::new(
            "OPTIONS",
            "sip:bob@example.com",
            &format!("dst-{n}@ua"),
            &format!("{via};branch=z9hG4bKdst{n}"),
        )
        .bytes();
        let (known, unknown) = response_outs(&g, UA, &input);
        assert_eq!(known, udp_out(L_SG_GUARD, addr(want)), "{via}");
        assert_eq!(unknown, known, "{via}: the same with no transaction");
        // The gate's own replies follow the same rule.
        let refused = Req::new(
            "OPTIONS",
            "sip:bob@example.com",
            &format!("dst-mf-{n}@ua"),
            &format!("{via};branch=z9hG4bKdstmf{n}"),
        )
        .set("Max-Forwards", "0")
        .bytes();
        let (out, _) = sent(g.udp(L_SG_GUARD, UA, &refused));
        assert_eq!(out, known, "{via}: the gate's 483");
    }
}

#[test]
fn rfc3261_18_2_2_tcp_response_whose_connection_closed_goes_to_the_sent_by_port() {
    let g = Gate::std();
    // The client connected from an ephemeral port; its Via names the port
    // it listens on.
    let peer = addr("203.0.113.10:41234");
    let inbound = Inbound::Tcp {
        listener: L_SG_GUARD,
        conn: 9,
        peer,
    };
    let input = Req::new(
        "INVITE",
        "sip:bob@example.com",
        "tcp-closed@ua",
        "SIP/2.0/TCP 203.0.113.10:5062;branch=z9hG4bKtcpclosed",
    )
    .bytes();
    let (_, fwd) = sent(g.core.handle(inbound, input.clone(), Instant::now()));
    let resp = response_to(&fwd, 180, "Ringing", "uas-tcp");
    // Known: on connection 9 while it is open; if it closed, a new
    // connection to the source address and the sent-by port.
    let want = Out::Tcp {
        listener: L_SG_GUARD,
        conn: Some(9),
        to: addr("203.0.113.10:5062"),
    };
    let from_sg = Inbound::Tcp {
        listener: L_SG_GUARD,
        conn: 10,
        peer: inst(SG_A),
    };
    assert_eq!(
        sent(g.core.handle(from_sg, resp.clone(), Instant::now())).0,
        want
    );
    // A gate that restarted has no connection to offer: the same address.
    let fresh = g.restarted();
    assert_eq!(
        sent(fresh.handle(from_sg, resp, Instant::now())).0,
        Out::Tcp {
            listener: L_SG_GUARD,
            conn: None,
            to: addr("203.0.113.10:5062"),
        }
    );
    // The gate's own reply on that connection: the same rule.
    let refused = Req::new(
        "INVITE",
        "sip:bob@example.com",
        "tcp-closed-2@ua",
        "SIP/2.0/TCP 203.0.113.10:5062;branch=z9hG4bKtcpclosed2",
    )
    .set("Max-Forwards", "0")
    .bytes();
    assert_eq!(
        sent(g.core.handle(inbound, refused, Instant::now())).0,
        want
    );
}

#[test]
fn rfc3261_17_2_3_invite_reusing_an_options_branch_is_a_new_transaction_and_meets_the_drain() {
    let g = Gate::std();
    let options = Req::ua("OPTIONS", "reuse@ua", "z9hG4bKreused").bytes();
    let o = forwarded(g.udp(L_SG_GUARD, UA, &options), L_SG_GUARD, inst(SG_A));
    // Not draining: the INVITE is forwarded as a transaction of its own,
    // with its own branch downstream.
    let invite = Req::ua("INVITE", "reuse@ua", "z9hG4bKreused").bytes();
    let i = forwarded(g.udp(L_SG_GUARD, UA, &invite), L_SG_GUARD, inst(SG_A));
    assert!(i.raw().starts_with(b"INVITE "), "{}", text(i.raw()));
    assert_ne!(i.top_via().unwrap().branch, o.top_via().unwrap().branch);
    // Its CANCEL follows the INVITE, not the OPTIONS.
    let cancel = Req::ua("CANCEL", "reuse@ua", "z9hG4bKreused")
        .without("Contact")
        .bytes();
    let c = forwarded(g.udp(L_SG_GUARD, UA, &cancel), L_SG_GUARD, inst(SG_A));
    assert_eq!(c.top_via().unwrap().branch, i.top_via().unwrap().branch);

    // Draining: an OPTIONS is remembered, then an INVITE reusing its
    // branch is new work and gets the drain's 503, not the OPTIONS' hop.
    let g = Gate::std();
    forwarded(g.udp(L_SG_GUARD, UA, &options), L_SG_GUARD, inst(SG_A));
    g.drain_servers(&["srv-a"]);
    let r = replied(g.udp(L_SG_GUARD, UA, &invite), L_SG_GUARD, UA, 503);
    assert!(
        other_header(&r, "Retry-After").is_some(),
        "{}",
        text(r.raw())
    );
    // The OPTIONS' own retransmission still follows its first hop.
    forwarded(g.udp(L_SG_GUARD, UA, &options), L_SG_GUARD, inst(SG_A));
}

#[test]
fn rfc3261_16_4_a_strict_router_upstream_request_uri_is_the_gates_record_route() {
    let g = Gate::std();
    let call = call_id_for(&g, SG_C, "strict");
    let invite = Req::ua("INVITE", &call, "z9hG4bKstrict").bytes();
    let fwd = forwarded(g.udp(L_SG_BAL, UA, &invite), L_SG_BAL, inst(SG_C));
    let rr = rr_uris(&fwd).remove(0);
    // sg-c drains meanwhile: in-dialog requests still reach it (R-SG-4).
    g.drain_servers(&["srv-c"]);

    // A strict router puts the first route into the Request-URI and the
    // remote target last in Route (RFC 3261 12.2.1.1, 16.4).
    let strict = |branch: &str, ruri: &str, cseq: u32| {
        let mut req = Req::ua("BYE", &call, branch)
            .tagged("uas-strict")
            .set("CSeq", &format!("{cseq} BYE"))
            .add_first("Route", "<sip:bob@127.0.1.3:5060>");
        req.start = format!("BYE {ruri} SIP/2.0");
        req.bytes()
    };
    let input = strict("z9hG4bKstrict1", &rr, 2);
    let m = forwarded(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, inst(SG_C));
    assert!(
        m.raw()
            .starts_with(b"BYE sip:bob@127.0.1.3:5060 SIP/2.0\r\n"),
        "{}",
        text(m.raw())
    );
    assert!(route_uris(&m).is_empty(), "{}", text(m.raw()));
    assert!(rr_uris(&m).is_empty());
    assert_eq!(header(&m, HeaderName::MaxForwards).as_deref(), Some("69"));

    // Token checks are unchanged (R-SEC-1/2): another dialog's token in the
    // Request-URI opens nothing, so the request is refused as before.
    let other = gate_rr("sg-a", L_SG_BAL, "another-dialog@ua");
    let r = replied(
        g.udp(L_SG_BAL, UA, &strict("z9hG4bKstrict2", &other, 3)),
        L_SG_BAL,
        UA,
        403,
    );
    assert_eq!(r.call_id(), Some(call.as_bytes()));

    // A Request-URI that merely names the gate (no token) with a preloaded
    // Route is no strict routing: the Request-URI stays as written.
    let own = "sip:bob@127.0.0.1:5060";
    let mut req = Req::ua("MESSAGE", "strict-no@ua", "z9hG4bKstrict3")
        .add_first("Route", "<sip:127.0.0.1:5060;lr>");
    req.start = format!("MESSAGE {own} SIP/2.0");
    let (_, m) = sent(g.udp(L_SG_BAL, UA, &req.bytes()));
    assert!(m
        .raw()
        .starts_with(b"MESSAGE sip:bob@127.0.0.1:5060 SIP/2.0\r\n"));
    assert!(route_uris(&m).is_empty());
}

#[test]
fn rfc3261_16_4_a_strict_router_on_the_instance_side_goes_outward() {
    let g = Gate::std();
    let invite = from_sg_a(
        "INVITE",
        "sip:bob@198.51.100.7:5060",
        "strict-out@sg",
        "z9hG4bKstrictout",
    )
    .bytes();
    let (_, fwd) = sent(g.udp(L_SG_BAL, INSTANCE_ADDR[SG_A], &invite));
    let rr = rr_uris(&fwd).remove(0);
    let mut bye = from_sg_a("BYE", &rr, "strict-out@sg", "z9hG4bKstrictout2")
        .tagged("callee")
        .set("CSeq", "2 BYE")
        .add_first("Route", "<sip:bob@198.51.100.7:5060>");
    bye.start = format!("BYE {rr} SIP/2.0");
    let (out, m) = sent(g.udp(L_SG_BAL, INSTANCE_ADDR[SG_A], &bye.bytes()));
    assert_eq!(out, udp_out(L_SG_BAL, addr("198.51.100.7:5060")));
    assert!(m
        .raw()
        .starts_with(b"BYE sip:bob@198.51.100.7:5060 SIP/2.0\r\n"));
    assert!(route_uris(&m).is_empty());
}

#[test]
fn rfc5658_two_record_routes_when_the_legs_differ_and_in_dialog_from_either_side() {
    let g = Gate::std();
    let call = "double-rr@sg";
    // sg-a over UDP places a call to a callee that wants TCP.
    let invite = from_sg_a(
        "INVITE",
        "sip:bob@198.51.100.7:5060;transport=tcp",
        call,
        "z9hG4bKdouble",
    )
    .bytes();
    let (out, fwd) = sent(g.udp(L_SG_BAL, INSTANCE_ADDR[SG_A], &invite));
    let callee = addr("198.51.100.7:5060");
    assert!(
        matches!(out, Out::Tcp { to, .. } if to == callee),
        "{out:?}"
    );
    // Top: the callee's side (TCP); below: the instance's side (UDP).
    let udp = gate_rr("sg-a", L_SG_BAL, call);
    let tcp = udp.replace(";lr", ";transport=tcp;lr");
    assert_eq!(rr_uris(&fwd), [tcp.clone(), udp.clone()]);

    // The callee's in-dialog request, over TCP, with its route set in
    // Record-Route order on one line: to sg-a over UDP.
    let from_callee = Inbound::Tcp {
        listener: L_SG_BAL,
        conn: 21,
        peer: callee,
    };
    let mut bye = Req::new(
        "BYE",
        "sip:alice@127.0.1.1:5060",
        call,
        "SIP/2.0/TCP 198.51.100.7:5060;branch=z9hG4bKcalleebye",
    )
    .tagged("callee")
    .set("CSeq", "1 BYE")
    .add_first("Route", &format!("<{tcp}>, <{udp}>"));
    bye.start = "BYE sip:alice@127.0.1.1:5060 SIP/2.0".into();
    let (out, m) = sent(g.core.handle(from_callee, bye.bytes(), Instant::now()));
    assert_eq!(out, udp_out(L_SG_BAL, inst(SG_A)));
    assert_eq!(text(m.top_via().unwrap().transport), "UDP");
    assert!(route_uris(&m).is_empty(), "{}", text(m.raw()));

    // The instance's in-dialog request over UDP, its route set reversed:
    // to the callee over TCP, also when its Contact names no transport.
    for (n, ruri) in [
        "sip:bob@198.51.100.7:5060;transport=tcp",
        "sip:bob@198.51.100.7:5060",
    ]
    .into_iter()
    .enumerate()
    {
        let mut req = from_sg_a("INFO", ruri, call, &format!("z9hG4bKsginfo{n}"))
            .tagged("callee")
            .set("CSeq", &format!("{} INFO", n + 2))
            .add_first("Route", &format!("<{udp}>, <{tcp}>"));
        req.start = format!("INFO {ruri} SIP/2.0");
        let (out, m) = sent(g.udp(L_SG_BAL, INSTANCE_ADDR[SG_A], &req.bytes()));
        assert!(
            matches!(out, Out::Tcp { to, .. } if to == callee),
            "{ruri}: {out:?}"
        );
        assert_eq!(text(m.top_via().unwrap().transport), "TCP");
        assert!(route_uris(&m).is_empty(), "{}", text(m.raw()));
    }

    // Both legs UDP: one Record-Route, as always.
    let same = from_sg_a(
        "INVITE",
        "sip:bob@198.51.100.7:5060",
        "single-rr@sg",
        "z9hG4bKsingle",
    )
    .bytes();
    let (_, fwd) = sent(g.udp(L_SG_BAL, INSTANCE_ADDR[SG_A], &same));
    assert_eq!(rr_uris(&fwd), [gate_rr("sg-a", L_SG_BAL, "single-rr@sg")]);
}

/// RFC 3261 16.9, 8.1.3.1: a request the transport could not deliver (its
/// connection failed) counts as a 503 from the next hop. The client gets
/// 503 with Retry-After on its transaction, which ends there (R-ST-2: the
/// INVITE is no longer the instance's work); the ACK of that 503 is
/// absorbed, never sent on to the instance; an INVITE that waited past
/// Timer B gets 408; a CANCEL that could not be delivered gets 200.
#[test]
fn rfc3261_16_9_an_undeliverable_request_is_answered_and_its_transaction_ends() {
    let g = Gate::std();
    let t0 = Instant::now();
    let invite = Req::ua("INVITE", "undeliv-1@ua", "z9hG4bKundeliv1").bytes();
    let (out, fwd) = sent(g.udp(L_SG_BAL, UA, &invite));
    let Out::Udp { to, .. } = out else {
        panic!("{out:?}")
    };
    let idx = INSTANCE_ADDR.iter().position(|a| addr(a) == to).unwrap();
    assert_eq!(g.core.work().get(idx).transactions, 1);
    let r = replied(
        g.core.undeliverable(to, fwd.raw().clone(), t0),
        L_SG_BAL,
        UA,
        503,
    );
    let retry: u32 = other_header(&r, "Retry-After").unwrap().parse().unwrap();
    assert!((30..=40).contains(&retry), "{}", text(r.raw()));
    assert_eq!(r.vias().count(), 1, "the client's Via only");
    assert_eq!(g.core.work().get(idx).transactions, 0, "R-ST-2");
    let tag = String::from_utf8(r.to_tag().unwrap().to_vec()).unwrap();
    let ack = Req::ua("ACK", "undeliv-1@ua", "z9hG4bKundeliv1")
        .tagged(&tag)
        .bytes();
    assert_eq!(g.udp(L_SG_BAL, UA, &ack), Action::None, "absorbed");
    // Nothing to answer for an ACK that could not be delivered.
    let fwd_ack = Req::new(
        "ACK",
        "sip:bob@example.com",
        "undeliv-1@ua",
        &via_values(&fwd).join(", "),
    )
    .bytes();
    assert_eq!(g.core.undeliverable(to, fwd_ack, t0), Action::None);

    // Past Timer B (32 s) the INVITE gets 408, a timeout.
    let late = Req::ua("INVITE", "undeliv-2@ua", "z9hG4bKundeliv2").bytes();
    let (out, fwd) = sent(g.udp(L_SG_BAL, UA, &late));
    let Out::Udp { to, .. } = out else {
        panic!("{out:?}")
    };
    let past_b = Instant::now() + TIMER_B + std::time::Duration::from_secs(1);
    // The CANCEL of it, forwarded and not delivered either: 200.
    let cancel = Req::ua("CANCEL", "undeliv-2@ua", "z9hG4bKundeliv2").bytes();
    let (_, fwd_cancel) = sent(g.udp(L_SG_BAL, UA, &cancel));
    replied(
        g.core.undeliverable(to, fwd_cancel.raw().clone(), past_b),
        L_SG_BAL,
        UA,
        200,
    );
    replied(
        g.core.undeliverable(to, fwd.raw().clone(), past_b),
        L_SG_BAL,
        UA,
        408,
    );
}

/// RFC 3261 17.1.1.2: 64 * T1.
const TIMER_B: std::time::Duration = std::time::Duration::from_secs(32);
