//! Forwarding (RFC 3261 16.6, RFC 3581): the received bytes plus the edits a
//! proxy must make, and nothing else.

use super::prelude::*;

#[test]
fn fwd_invite_new_via_max_forwards_record_route_and_rport() {
    let g = Gate::std();
    let input = Req::ua("INVITE", "fwd-1@ua", "z9hG4bKua-fwd1")
        .add("Via", "SIP/2.0/TCP 198.18.0.1:5060;branch=z9hG4bKupstream")
        .body("application/sdp", b"v=0\r\no=- 1 1 IN IP4 203.0.113.10\r\n")
        .bytes();
    let a = g.udp(L_SG_BAL, UA, &input);
    let (out, m) = sent(a);
    let Out::Udp { listener, to } = out else {
        panic!("{out:?}")
    };
    assert_eq!(listener, L_SG_BAL);
    let idx = INSTANCE_ADDR.iter().position(|a| addr(a) == to).unwrap();
    assert!(idx <= SG_C, "an sg");
    assert_gate_via(&m, L_SG_BAL);
    // RFC 3581: the client asked for rport; received and rport stamped.
    assert_eq!(
        via_values(&m)[1..],
        [
            "SIP/2.0/UDP 203.0.113.10:5062;branch=z9hG4bKua-fwd1;received=203.0.113.10;rport=40000"
                .to_string(),
            "SIP/2.0/TCP 198.18.0.1:5060;branch=z9hG4bKupstream".to_string(),
        ]
    );
    assert_eq!(header(&m, HeaderName::MaxForwards).as_deref(), Some("69"));
    let id = &g.config.instances[idx].id;
    assert_eq!(rr_uris(&m), [gate_rr(id, L_SG_BAL, "fwd-1@ua")]);
    assert!(route_uris(&m).is_empty());
    assert_untouched(&input, &m);
}

#[test]
fn fwd_via_without_rport_from_its_sent_by_is_not_stamped() {
    let g = Gate::std();
    let input = Req::new(
        "OPTIONS",
        "sip:bob@example.com",
        "fwd-2@ua",
        "SIP/2.0/UDP 203.0.113.10:40000;branch=z9hG4bKua-fwd2",
    )
    .bytes();
    let m = sent(g.udp(L_SG_BAL, UA, &input)).1;
    assert_eq!(
        via_values(&m)[1],
        "SIP/2.0/UDP 203.0.113.10:40000;branch=z9hG4bKua-fwd2"
    );
    // RFC 3261 18.2.1: sent-by differs from the source: received only.
    let input = Req::new(
        "OPTIONS",
        "sip:bob@example.com",
        "fwd-3@ua",
        "SIP/2.0/UDP ua.example.com:5062;branch=z9hG4bKua-fwd3",
    )
    .bytes();
    let m = sent(g.udp(L_SG_BAL, UA, &input)).1;
    assert_eq!(
        via_values(&m)[1],
        "SIP/2.0/UDP ua.example.com:5062;branch=z9hG4bKua-fwd3;received=203.0.113.10"
    );
    // OPTIONS does not create a dialog: no Record-Route.
    assert!(rr_uris(&m).is_empty());
}

#[test]
fn fwd_missing_max_forwards_gets_70() {
    let g = Gate::std();
    let input = Req::ua("MESSAGE", "fwd-mf@ua", "z9hG4bKua-mf")
        .without("Max-Forwards")
        .bytes();
    let m = sent(g.udp(L_SG_BAL, UA, &input)).1;
    assert_eq!(header(&m, HeaderName::MaxForwards).as_deref(), Some("70"));
    assert_eq!(m.fields(HeaderName::MaxForwards).count(), 1);
    assert_untouched(&input, &m);
}

#[test]
fn fwd_max_forwards_zero_is_483_and_ack_is_dropped() {
    let g = Gate::std();
    let input = Req::ua("INVITE", "fwd-mf0@ua", "z9hG4bKua-mf0")
        .set("Max-Forwards", "0")
        .bytes();
    let r = replied(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, UA, 483);
    assert!(text(r.raw()).starts_with("SIP/2.0 483 Too Many Hops\r\n"));
    assert_eq!(r.call_id(), Some(&b"fwd-mf0@ua"[..]));
    // Max-Forwards 1 still goes out, as 0.
    let input = Req::ua("INVITE", "fwd-mf1@ua", "z9hG4bKua-mf1")
        .set("Max-Forwards", "1")
        .bytes();
    let m = sent(g.udp(L_SG_BAL, UA, &input)).1;
    assert_eq!(header(&m, HeaderName::MaxForwards).as_deref(), Some("0"));
    // An ACK is never answered.
    let ack = Req::ua("ACK", "fwd-mf0b@ua", "z9hG4bKua-mf0b")
        .tagged("t1")
        .set("Max-Forwards", "0")
        .bytes();
    assert_eq!(g.udp(L_SG_BAL, UA, &ack), Action::None);
}

#[test]
fn fwd_own_route_removed_and_record_route_only_on_invite_and_subscribe() {
    let g = Gate::std();
    // Preloaded outbound-proxy Route naming the gate: removed (loose routing).
    for (method, rr) in [
        ("INVITE", true),
        ("SUBSCRIBE", true),
        ("REGISTER", false),
        ("OPTIONS", false),
        ("MESSAGE", false),
        ("PUBLISH", false),
    ] {
        let input = Req::ua(
            method,
            &format!("rr-{method}@ua"),
            &format!("z9hG4bKrr{method}"),
        )
        .add_first("Route", "<sip:127.0.0.1:5060;lr>")
        .bytes();
        let m = sent(g.udp(L_SG_BAL, UA, &input)).1;
        assert!(route_uris(&m).is_empty(), "{method}: {}", text(m.raw()));
        assert_eq!(rr_uris(&m).len(), usize::from(rr), "{method}");
        if rr {
            assert!(rr_uris(&m)[0].starts_with("sip:g2.sg-"), "{method}");
            assert!(rr_uris(&m)[0].ends_with("@127.0.0.1:5060;lr"), "{method}");
        }
        assert_untouched(&input, &m);
    }
}

#[test]
fn fwd_binary_body_with_crlf_via_inside_is_untouched() {
    let g = Gate::std();
    let body: &[u8] =
        b"\x00\xff\xfebin\r\n\r\nVia: SIP/2.0/UDP evil.example;branch=z9hG4bKevil\r\nMax-Forwards: 0\r\n\r\n\x80\x00";
    let input = Req::ua("INVITE", "bin@ua", "z9hG4bKua-bin")
        .body("application/octet-stream", body)
        .bytes();
    let a = g.udp(L_SG_BAL, UA, &input);
    let Action::Send(_, bytes) = a.clone() else {
        panic!("not sent")
    };
    assert!(bytes.ends_with(body));
    let m = sent(a).1;
    assert_eq!(m.body(), body);
    assert_eq!(m.vias().count(), 2, "the Via inside the body is no header");
    assert_eq!(header(&m, HeaderName::MaxForwards).as_deref(), Some("69"));
    assert_untouched(&input, &m);
}

#[test]
fn fwd_extension_method_and_tel_uri_are_forwarded() {
    let g = Gate::std();
    let input = Req::ua("FOOBAR", "ext@ua", "z9hG4bKua-ext").bytes();
    let m = sent(g.udp(L_SG_BAL, UA, &input)).1;
    assert!(m
        .raw()
        .starts_with(b"FOOBAR sip:bob@example.com SIP/2.0\r\n"));
    assert!(rr_uris(&m).is_empty());
    assert_untouched(&input, &m);

    let mut req = Req::ua("INVITE", "tel@ua", "z9hG4bKua-tel");
    req.start = "INVITE tel:+15551234567;phone-context=example.com SIP/2.0".into();
    let input = req.set("To", "<tel:+15551234567>").bytes();
    let m = sent(g.udp(L_SG_BAL, UA, &input)).1;
    assert!(m
        .raw()
        .starts_with(b"INVITE tel:+15551234567;phone-context=example.com SIP/2.0\r\n"));
    assert_eq!(rr_uris(&m).len(), 1);
    assert_untouched(&input, &m);
}

#[test]
fn fwd_tcp_record_route_names_tcp_and_goes_out_tcp() {
    let g = Gate::std();
    let input = Req::new(
        "INVITE",
        "sip:bob@example.com",
        "tcp@ua",
        "SIP/2.0/TCP 203.0.113.10:5062;branch=z9hG4bKua-tcp",
    )
    .bytes();
    let a = g.core.handle(
        Inbound::Tcp {
            listener: L_SG_BAL,
            conn: 7,
            peer: addr("203.0.113.10:5062"),
        },
        input,
        Instant::now(),
    );
    let (out, m) = sent(a);
    let Out::Tcp { listener, conn, to } = out else {
        panic!("{out:?}")
    };
    assert_eq!((listener, conn), (L_SG_BAL, None));
    assert!(INSTANCE_ADDR[..3].iter().any(|a| addr(a) == to));
    assert_eq!(text(m.top_via().unwrap().transport), "TCP");
    assert!(rr_uris(&m)[0].ends_with("@127.0.0.1:5060;transport=tcp;lr"));
    // The response goes back on the connection the request came in on
    // (RFC 3261 18.2.2), whatever the instance answered over.
    let resp = response_to(&m, 180, "Ringing", "uas-tcp");
    let (out, r) = sent(handle(&g.core, L_SG_BAL, &to.to_string(), &resp));
    assert_eq!(
        out,
        Out::Tcp {
            listener: L_SG_BAL,
            conn: Some(7),
            to: addr("203.0.113.10:5062"),
        }
    );
    assert_eq!(via_values(&r), via_values(&m)[1..]);
}

#[test]
fn fwd_gate_via_sits_right_above_the_clients_via_wherever_it_is() {
    let g = Gate::std();
    // A client that writes Via after other headers: move the Via line last.
    let req = Req::ua("INVITE", "via-pos@ua", "z9hG4bKviapos");
    let via = req
        .headers
        .iter()
        .find(|(n, _)| n == "Via")
        .cloned()
        .unwrap();
    let req = req.without("Via").add("Via", &via.1);
    let input = req.bytes();
    let (_, fwd) = sent(g.udp(L_SG_BAL, UA, &input));
    let out = fwd.raw().clone();
    let text = text(&out);
    let lines: Vec<&str> = text.split("\r\n").collect();
    let ours = lines
        .iter()
        .position(|l| l.starts_with("Via: SIP/2.0/UDP ") && l.contains("branch=z9hG4bK-g"))
        .unwrap();
    assert!(
        lines[ours + 1].starts_with("Via: ") && lines[ours + 1].contains("z9hG4bKviapos"),
        "{text}"
    );
    // Record-Route is still the first header line.
    assert!(lines[1].starts_with("Record-Route: <sip:g2."), "{text}");
}
