//! Responses: the gate's Via removed, back by the transaction table or the
//! next Via (RFC 3261 18.2.2, RFC 3581).

use super::prelude::*;

#[test]
fn resp_our_via_removed_and_back_to_the_source_by_txn() {
    let g = Gate::std();
    let input = Req::ua("INVITE", "resp-1@ua", "z9hG4bKua-r1").bytes();
    let (out, fwd) = sent(g.udp(L_SG_BAL, UA, &input));
    let Out::Udp { to: instance, .. } = out else {
        panic!()
    };
    // RFC 3261 16.7 step 5: a stateful proxy never forwards a 100.
    let trying = response_to(&fwd, 100, "Trying", "uas1");
    assert_eq!(
        handle(&g.core, L_SG_BAL, &instance.to_string(), &trying),
        Action::None
    );
    for (code, reason) in [(180, "Ringing"), (200, "OK")] {
        let resp = response_to(&fwd, code, reason, "uas1");
        let (out, m) = sent(handle(&g.core, L_SG_BAL, &instance.to_string(), &resp));
        assert_eq!(out, udp_out(L_SG_BAL, addr(UA)), "{code}");
        assert_eq!(m.code(), Some(code));
        // Only the client's Via is left, as the gate stamped it.
        assert_eq!(via_values(&m), via_values(&fwd)[1..], "{code}");
        // The rest is byte for byte what the instance sent.
        let tail = |b: &[u8]| b[b.windows(5).position(|w| w == b"From:").unwrap()..].to_vec();
        assert_eq!(tail(m.raw()), tail(&resp));
    }
}

#[test]
fn resp_without_txn_entry_follows_next_via_received_rport() {
    let g = Gate::std();
    let input = Req::ua("INVITE", "resp-2@ua", "z9hG4bKua-r2")
        .add("Via", "SIP/2.0/UDP 198.18.0.1:5060;branch=z9hG4bKup2")
        .bytes();
    let (out, fwd) = sent(g.udp(L_SG_BAL, UA, &input));
    let Out::Udp { to: instance, .. } = out else {
        panic!()
    };
    // The gate restarted: no transaction table, the Via decides
    // (RFC 3261 18.2.2 with RFC 3581: received + rport = the NAT's address).
    let fresh = g.restarted();
    let resp = response_to(&fwd, 486, "Busy Here", "uas2");
    let (out, m) = sent(handle(&fresh, L_SG_BAL, &instance.to_string(), &resp));
    assert_eq!(out, udp_out(L_SG_BAL, addr(UA)));
    assert_eq!(via_values(&m), via_values(&fwd)[1..]);

    // A client Via without rport but with received: received and sent-by port.
    let input = Req::new(
        "OPTIONS",
        "sip:bob@example.com",
        "resp-3@ua",
        "SIP/2.0/UDP ua.example.com:5099;branch=z9hG4bKua-r3",
    )
    .bytes();
    let (out, fwd) = sent(g.udp(L_SG_BAL, UA, &input));
    let Out::Udp { to: instance, .. } = out else {
        panic!()
    };
    let resp = response_to(&fwd, 200, "OK", "uas3");
    let (out, _) = sent(handle(&fresh, L_SG_BAL, &instance.to_string(), &resp));
    assert_eq!(out, udp_out(L_SG_BAL, addr("203.0.113.10:5099")));
}

#[test]
fn resp_top_via_not_ours_is_dropped_r_sec_1() {
    let g = Gate::std();
    // Top Via of somebody else: the gate is no relay for it.
    let mut resp = String::from("SIP/2.0 200 OK\r\n");
    resp.push_str("Via: SIP/2.0/UDP 198.18.0.99:5060;branch=z9hG4bK-g0123456789abcdef\r\n");
    resp.push_str(
        "Via: SIP/2.0/UDP 203.0.113.10:5062;branch=z9hG4bKx;received=203.0.113.10;rport=40000\r\n",
    );
    resp.push_str("From: <sip:a@example.com>;tag=1\r\nTo: <sip:b@example.com>;tag=2\r\n");
    resp.push_str("Call-ID: notours@ua\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n");
    let resp = Bytes::from(resp);
    assert_eq!(g.udp(L_SG_BAL, INSTANCE_ADDR[0], &resp), Action::None);
    // Our address but a branch the gate never made.
    let forged = Bytes::from(text(&resp).replace(
        "198.18.0.99:5060;branch=z9hG4bK-g0123456789abcdef",
        "127.0.0.1:5060;branch=z9hG4bKclient-made",
    ));
    assert_eq!(g.udp(L_SG_BAL, INSTANCE_ADDR[0], &forged), Action::None);
    // A response with only our Via has nowhere to go (RFC 3261 16.7 step 3).
    let lone = Bytes::from(text(&resp).replace(
        "Via: SIP/2.0/UDP 203.0.113.10:5062;branch=z9hG4bKx;received=203.0.113.10;rport=40000\r\n",
        "",
    ).replace("198.18.0.99:5060", "127.0.0.1:5060"));
    assert_eq!(g.udp(L_SG_BAL, INSTANCE_ADDR[0], &lone), Action::None);
}

#[test]
fn resp_whose_only_via_is_the_gates_is_not_forwarded() {
    let g = Gate::std();
    let input = Req::ua("INVITE", "resp-lone@ua", "z9hG4bKua-lone").bytes();
    let (out, fwd) = sent(g.udp(L_SG_BAL, UA, &input));
    let Out::Udp { to: instance, .. } = out else {
        panic!()
    };
    // The instance answers with the gate's Via only (the client's lost, or
    // turned into another header): the transaction is known, but there is
    // nobody to send it to (RFC 3261 16.7 step 3).
    let resp = text(&response_to(&fwd, 180, "Ringing", "uas-lone"));
    let client_via = format!("Via: {}\r\n", via_values(&fwd)[1]);
    let lone = Bytes::from(resp.replace(&client_via, &format!("X-{client_via}")));
    assert_eq!(SipMessage::parse(lone.clone()).unwrap().vias().count(), 1);
    assert_eq!(
        handle(&g.core, L_SG_BAL, &instance.to_string(), &lone),
        Action::None
    );
    // With the client's Via, the same response goes back.
    let (out, _) = sent(handle(
        &g.core,
        L_SG_BAL,
        &instance.to_string(),
        &Bytes::from(resp),
    ));
    assert_eq!(out, udp_out(L_SG_BAL, addr(UA)));
}
