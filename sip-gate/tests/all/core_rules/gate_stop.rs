//! The gate's own stop, on the core (R-GW-1): once stopping, new work gets
//! 503 with Retry-After on every listener and in either direction, and
//! everything else of the transactions and dialogs it already carries
//! flows as before.

use sip_gate::Phase;

use super::prelude::*;

/// A 503 of a stopping gate: Retry-After within the configured range, the
/// reason says why.
fn assert_stopping_503(a: Action, listener: usize, peer: &str, o: &SiteOpts) -> SipMessage {
    let r = replied(a, listener, peer, 503);
    assert!(
        text(r.raw()).starts_with("SIP/2.0 503 Service Unavailable (stopping)\r\n"),
        "{}",
        text(r.raw())
    );
    let ra: u32 = other_header(&r, "Retry-After")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!(
        (o.retry_after..=o.retry_after + o.jitter).contains(&ra),
        "{ra}"
    );
    r
}

#[test]
fn r_gw_1_a_stopping_gate_refuses_new_work_and_carries_what_it_has() {
    let o = SiteOpts::default();
    let g = Gate::new(&o);
    // In flight when the stop begins: an INVITE forwarded, not answered.
    let call = call_id_for(&g, SG_B, "gw1");
    let invite = Req::ua("INVITE", &call, "z9hG4bKgw1-inv").bytes();
    let first = forwarded(g.udp(L_SG_BAL, UA, &invite), L_SG_BAL, inst(SG_B));

    assert!(g.core.lifecycle().stop());
    assert_eq!(g.core.lifecycle().phase(), Phase::Stopping);

    // New work, on a balance and a guard listener: 503 + Retry-After.
    let mut refused_invite = None;
    for (n, method) in ["INVITE", "REGISTER", "SUBSCRIBE"].iter().enumerate() {
        for listener in [L_SG_BAL, L_SG_GUARD] {
            let req = Req::ua(
                method,
                &format!("gw1-new-{n}-{listener}@ua"),
                &format!("z9hG4bKgw1new{n}{listener}"),
            )
            .set("Expires", "3600")
            .bytes();
            let r = assert_stopping_503(g.udp(listener, UA, &req), listener, UA, &o);
            refused_invite.get_or_insert(r);
        }
    }
    // The ACK of that 503 ends at the gate.
    let tag = text(refused_invite.unwrap().to_tag().unwrap());
    let ack = Req::ua("ACK", "gw1-new-0-0@ua", "z9hG4bKgw1new00")
        .tagged(&tag)
        .bytes();
    assert_eq!(g.udp(L_SG_BAL, UA, &ack), Action::None);
    // A new dialog an instance starts outward: refused the same way.
    let out = Req::new(
        "INVITE",
        "sip:carol@198.18.0.9:5060",
        "gw1-out@sg-a",
        "SIP/2.0/UDP 127.0.1.1:5060;branch=z9hG4bKgw1-out",
    )
    .bytes();
    let _ = assert_stopping_503(
        g.udp(L_SG_GUARD, INSTANCE_ADDR[SG_A], &out),
        L_SG_GUARD,
        INSTANCE_ADDR[SG_A],
        &o,
    );

    // Not new work: removing a binding, an out-of-dialog OPTIONS or MESSAGE.
    let dereg = Req::ua("REGISTER", "gw1-dereg@ua", "z9hG4bKgw1-dereg")
        .set("Expires", "0")
        .bytes();
    forwarded(g.udp(L_SG_GUARD, UA, &dereg), L_SG_GUARD, inst(SG_A));
    for m in ["OPTIONS", "MESSAGE"] {
        let req = Req::ua(m, &format!("gw1-{m}@ua"), &format!("z9hG4bKgw1{m}")).bytes();
        forwarded(g.udp(L_SG_GUARD, UA, &req), L_SG_GUARD, inst(SG_A));
    }

    // The INVITE in flight: its retransmission and CANCEL follow it, its
    // responses go back.
    let again = forwarded(g.udp(L_SG_BAL, UA, &invite), L_SG_BAL, inst(SG_B));
    assert_eq!(again.raw(), first.raw());
    let cancel = Req::ua("CANCEL", &call, "z9hG4bKgw1-inv")
        .without("Contact")
        .bytes();
    forwarded(g.udp(L_SG_BAL, UA, &cancel), L_SG_BAL, inst(SG_B));
    let ok = response_to(&first, 200, "OK", "uas-gw1");
    let (to, _) = sent(g.udp(L_SG_BAL, INSTANCE_ADDR[SG_B], &ok));
    assert_eq!(to, udp_out(L_SG_BAL, addr(UA)));

    // In the dialog: ACK, re-INVITE and BYE by the gate's token.
    for (method, branch) in [
        ("ACK", "z9hG4bKgw1-ack"),
        ("INVITE", "z9hG4bKgw1-re"),
        ("BYE", "z9hG4bKgw1-bye"),
    ] {
        let req = Req::new(
            method,
            "sip:uas@127.0.1.2:5060",
            &call,
            &format!("SIP/2.0/UDP 203.0.113.10:5062;branch={branch};rport"),
        )
        .tagged("uas-gw1")
        .add_first("Route", &gate_route("sg-b", L_SG_BAL, &call))
        .bytes();
        forwarded(g.udp(L_SG_BAL, UA, &req), L_SG_BAL, inst(SG_B));
    }
    assert!(g.core.transactions() > 0);
}

#[test]
fn r_gw_1_options_is_new_work_for_a_stopping_gate_only_when_configured() {
    let o = SiteOpts {
        options_503: true,
        ..SiteOpts::default()
    };
    let g = Gate::new(&o);
    g.core.lifecycle().stop();
    let req = Req::ua("OPTIONS", "gw1-opt@ua", "z9hG4bKgw1-opt").bytes();
    let _ = assert_stopping_503(g.udp(L_SG_BAL, UA, &req), L_SG_BAL, UA, &o);
}
