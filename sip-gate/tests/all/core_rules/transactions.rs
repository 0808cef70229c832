//! Transactions: retransmissions, CANCEL and the ACK of a non-2xx follow the
//! first hop (R-SG-4).

use super::prelude::*;

#[test]
fn r_sg_4_retransmitted_invite_cancel_and_ack_follow_the_first_hop_across_a_drain() {
    let g = Gate::std();
    let call = call_id_for(&g, SG_B, "rtx");
    let invite = Req::ua("INVITE", &call, "z9hG4bKua-rtx").bytes();
    let first = forwarded(g.udp(L_SG_BAL, UA, &invite), L_SG_BAL, inst(SG_B));

    // The ring changes between the two copies: sg-b drains.
    g.drain_servers(&["srv-b"]);
    assert_ne!(
        g.drain
            .view()
            .pick(&ringsync::config::Service::Sg, call.as_bytes()),
        Some(SG_B)
    );
    let again = forwarded(g.udp(L_SG_BAL, UA, &invite), L_SG_BAL, inst(SG_B));
    assert_eq!(again.raw(), first.raw(), "the same bytes, the same branch");
    // Everything else drains too; still never a second instance.
    g.drain_servers(&["srv-b", "srv-c"]);
    for _ in 0..3 {
        forwarded(g.udp(L_SG_BAL, UA, &invite), L_SG_BAL, inst(SG_B));
    }

    // CANCEL (same branch) follows the INVITE, with the INVITE's downstream branch.
    let cancel = Req::ua("CANCEL", &call, "z9hG4bKua-rtx")
        .without("Contact")
        .bytes();
    let c = forwarded(g.udp(L_SG_BAL, UA, &cancel), L_SG_BAL, inst(SG_B));
    assert_eq!(c.top_via().unwrap().branch, first.top_via().unwrap().branch);
    assert!(rr_uris(&c).is_empty());
    assert_untouched(&cancel, &c);

    // The 200 to the CANCEL goes back to the UA and does not end the INVITE.
    let resp = response_to(&c, 200, "OK", "uas-rtx");
    let (out, r) = sent(g.udp(L_SG_BAL, INSTANCE_ADDR[SG_B], &resp));
    assert_eq!(out, udp_out(L_SG_BAL, addr(UA)));
    assert_eq!(r.cseq_method_bytes(), Some(&b"CANCEL"[..]));
    let ringing = response_to(&first, 180, "Ringing", "uas-rtx");
    let (out, _) = sent(g.udp(L_SG_BAL, INSTANCE_ADDR[SG_B], &ringing));
    assert_eq!(out, udp_out(L_SG_BAL, addr(UA)), "INVITE still pending");
    // 487 for the INVITE, then the ACK of that non-2xx follows the INVITE.
    let resp = response_to(&first, 487, "Request Terminated", "uas-rtx");
    let (out, _) = sent(g.udp(L_SG_BAL, INSTANCE_ADDR[SG_B], &resp));
    assert_eq!(out, udp_out(L_SG_BAL, addr(UA)));
    let ack = Req::ua("ACK", &call, "z9hG4bKua-rtx")
        .tagged("uas-rtx")
        .without("Contact")
        .bytes();
    let a = forwarded(g.udp(L_SG_BAL, UA, &ack), L_SG_BAL, inst(SG_B));
    assert_eq!(a.top_via().unwrap().branch, first.top_via().unwrap().branch);
}

#[test]
fn r_sg_4_cancel_racing_the_drain_reaches_the_guarded_instance() {
    let g = Gate::std();
    let invite = Req::ua("INVITE", "race@ua", "z9hG4bKua-race").bytes();
    forwarded(g.udp(L_SG_GUARD, UA, &invite), L_SG_GUARD, inst(SG_A));
    // The drain is activated while the INVITE rings.
    g.drain_servers(&["srv-a"]);
    let cancel = Req::ua("CANCEL", "race@ua", "z9hG4bKua-race")
        .without("Contact")
        .bytes();
    forwarded(g.udp(L_SG_GUARD, UA, &cancel), L_SG_GUARD, inst(SG_A));
    // Also from a gate that has forgotten the INVITE (restart): CANCEL is no new work.
    let fresh = g.restarted();
    forwarded(
        handle(&fresh, L_SG_GUARD, UA, &cancel),
        L_SG_GUARD,
        inst(SG_A),
    );
    // ... while a new INVITE gets 503 from the same gate.
    let new = Req::ua("INVITE", "race2@ua", "z9hG4bKua-race2").bytes();
    replied(g.udp(L_SG_GUARD, UA, &new), L_SG_GUARD, UA, 503);
}
