//! Calls as work (R-ST-2): counted in both directions from the 2xx of the
//! initial INVITE, ended by the answer to a BYE from either side, a 481, a
//! final non-2xx or CANCEL, or a timeout; on synthetic time.

use super::prelude::*;
use super::work_flow::*;

#[test]
fn r_st_2_a_received_call_ends_with_the_callee_s_own_bye() {
    let g = fresh("");
    let t0 = Instant::now();
    let fwd = invite_in(&g.core, "callee-bye", "z9hG4bKcb-inv", t0);
    assert_eq!((sg_a(&g.core).transactions, sg_a(&g.core).dialogs), (1, 0));
    answer(&g.core, &fwd, 180, "uas", SG_A_PEER, t0);
    assert_eq!(
        sg_a(&g.core).dialogs,
        0,
        "an early dialog is not a call yet"
    );
    answer(&g.core, &fwd, 200, "uas", SG_A_PEER, t0);
    assert_eq!((sg_a(&g.core).transactions, sg_a(&g.core).dialogs), (0, 1));
    // The 200 retransmitted (the ACK was lost): still one call.
    answer(&g.core, &fwd, 200, "uas", SG_A_PEER, at(t0, 1));
    assert_eq!(sg_a(&g.core).dialogs, 1);
    through(
        &g.core,
        UA,
        &ua_in_dialog("ACK", "callee-bye", 1),
        at(t0, 1),
    );

    // sg-a hangs up: its BYE goes out to the UA...
    let bye = through(
        &g.core,
        SG_A_PEER,
        &sg_in_dialog("BYE", "callee-bye", 1),
        at(t0, 60),
    );
    assert_eq!(
        sg_a(&g.core).dialogs,
        1,
        "counted until the BYE is answered"
    );
    // ...and the UA's 200 ends the call.
    answer(&g.core, &bye, 200, "", UA, at(t0, 60));
    assert_eq!(sg_a(&g.core).dialogs, 0);
    // A 200 of the INVITE retransmitted after the BYE does not bring it back.
    answer(&g.core, &fwd, 200, "uas", SG_A_PEER, at(t0, 61));
    assert_eq!(sg_a(&g.core).total(), 0);
}

#[test]
fn r_st_2_a_call_the_instance_places_is_its_work_until_either_side_hangs_up() {
    let g = fresh("");
    let t0 = Instant::now();
    call_out(&g.core, "placed-1", t0);
    assert_eq!((sg_a(&g.core).transactions, sg_a(&g.core).dialogs), (0, 1));
    // The far party hangs up: back to sg-a by the gate's Record-Route.
    let bye = sent(send(
        &g.core,
        FAR,
        &far_in_dialog("BYE", "placed-1", 1),
        at(t0, 30),
    ));
    assert_eq!(bye.0, udp_out(L_SG_GUARD, inst(SG_A)));
    answer(&g.core, &bye.1, 200, "", SG_A_PEER, at(t0, 30));
    assert_eq!(sg_a(&g.core).total(), 0);

    // Another one that sg-a ends itself.
    let invite = call_out(&g.core, "placed-2", at(t0, 40));
    let bye = Req::new(
        "BYE",
        &format!("sip:carol@{FAR}"),
        "placed-2",
        &format!("SIP/2.0/UDP {SG_A_PEER};branch=z9hG4bKplaced-2-bye"),
    )
    .set("From", "<sip:bob@example.com>;tag=b1")
    .set("To", "<sip:carol@example.net>;tag=far")
    .set("CSeq", "2 BYE")
    .add_first("Route", &gate_route("sg-a", L_SG_GUARD, "placed-2"))
    .bytes();
    assert_eq!(rr_uris(&invite), [gate_rr("sg-a", L_SG_GUARD, "placed-2")]);
    let fwd = through(&g.core, SG_A_PEER, &bye, at(t0, 50));
    answer(&g.core, &fwd, 200, "", FAR, at(t0, 50));
    assert_eq!(sg_a(&g.core).total(), 0);
}

#[test]
fn r_st_2_a_final_non_2xx_or_cancel_never_makes_a_call() {
    let g = fresh("");
    let t0 = Instant::now();
    let fwd = invite_in(&g.core, "busy", "z9hG4bKbusy", t0);
    answer(&g.core, &fwd, 486, "uas", SG_A_PEER, t0);
    assert_eq!(sg_a(&g.core).total(), 0);

    let fwd = invite_in(&g.core, "cancelled", "z9hG4bKcancelled", t0);
    let cancel = Req::ua("CANCEL", "cancelled", "z9hG4bKcancelled").bytes();
    let c = through(&g.core, UA, &cancel, at(t0, 2));
    answer(&g.core, &c, 200, "uas", SG_A_PEER, at(t0, 2));
    assert_eq!(
        sg_a(&g.core).transactions,
        1,
        "the INVITE is open until its 487"
    );
    answer(&g.core, &fwd, 487, "uas", SG_A_PEER, at(t0, 2));
    assert_eq!(sg_a(&g.core).total(), 0);
}

#[test]
fn r_st_2_an_invite_never_answered_ends_after_timer_c() {
    let g = fresh("");
    let t0 = Instant::now();
    invite_in(&g.core, "silent", "z9hG4bKsilent", t0);
    g.core.sweep(at(t0, 190));
    assert_eq!(sg_a(&g.core).transactions, 1);
    g.core.sweep(at(t0, 201));
    assert_eq!(sg_a(&g.core).transactions, 0);
}

/// An established call with nothing seen for `max_call_age_s` is gone; a
/// request in it (a session-timer refresh) restarts its age.
#[test]
fn r_st_2_an_idle_call_ends_after_the_maximum_age_and_refreshes_restart_it() {
    let g = fresh("max_call_age_s = 600");
    let t0 = Instant::now();
    call_in(&g.core, "idle", t0);
    call_in(&g.core, "refreshed", t0);
    // A session refresh (UPDATE) 500 s in, from the UA.
    let upd = through(
        &g.core,
        UA,
        &ua_in_dialog("UPDATE", "refreshed", 2),
        at(t0, 500),
    );
    answer(&g.core, &upd, 200, "", SG_A_PEER, at(t0, 500));
    g.core.sweep(at(t0, 599));
    assert_eq!(sg_a(&g.core).dialogs, 2);
    g.core.sweep(at(t0, 600));
    assert_eq!(sg_a(&g.core).dialogs, 1, "the idle call is gone");
    g.core.sweep(at(t0, 1099));
    assert_eq!(sg_a(&g.core).dialogs, 1);
    g.core.sweep(at(t0, 1100));
    assert_eq!(sg_a(&g.core).dialogs, 0);
}

/// RFC 3261 15.1.1: a BYE challenged (407) leaves the call up; one that
/// gets no answer at all ends it after Timer F; 481 and 408 end it too.
#[test]
fn r_st_2_bye_challenged_unanswered_481_and_408() {
    let g = fresh("");
    let t0 = Instant::now();
    call_in(&g.core, "challenged", t0);
    let bye = through(
        &g.core,
        UA,
        &ua_in_dialog("BYE", "challenged", 2),
        at(t0, 10),
    );
    answer(&g.core, &bye, 407, "", SG_A_PEER, at(t0, 10));
    g.core.sweep(at(t0, 100));
    assert_eq!(sg_a(&g.core).dialogs, 1, "still up after the challenge");
    // The BYE again, never answered.
    through(
        &g.core,
        UA,
        &ua_in_dialog("BYE", "challenged", 3),
        at(t0, 200),
    );
    g.core.sweep(at(t0, 231));
    assert_eq!(sg_a(&g.core).dialogs, 1);
    g.core.sweep(at(t0, 232));
    assert_eq!(sg_a(&g.core).dialogs, 0, "gone after Timer F");

    for (n, code) in [(0, 481), (1, 408)] {
        let call = format!("bye-{code}");
        call_in(&g.core, &call, t0);
        let bye = through(&g.core, UA, &ua_in_dialog("BYE", &call, 2), at(t0, 10 + n));
        answer(&g.core, &bye, code, "", SG_A_PEER, at(t0, 10 + n));
        assert_eq!(sg_a(&g.core).dialogs, 0, "{code}");
    }
    // A 481 to a re-INVITE: the dialog does not exist at the instance.
    call_in(&g.core, "reinvite-481", t0);
    let re = through(
        &g.core,
        UA,
        &ua_in_dialog("INVITE", "reinvite-481", 2),
        at(t0, 20),
    );
    answer(&g.core, &re, 481, "", SG_A_PEER, at(t0, 20));
    assert_eq!(sg_a(&g.core).total(), 0);
}

/// Each 2xx of a forked INVITE is a dialog of its own (To tags differ).
#[test]
fn r_st_2_forked_answers_are_two_calls() {
    let g = fresh("");
    let t0 = Instant::now();
    let fwd = invite_in(&g.core, "forked", "z9hG4bKforked", t0);
    answer(&g.core, &fwd, 200, "fork-1", SG_A_PEER, t0);
    answer(&g.core, &fwd, 200, "fork-2", SG_A_PEER, t0);
    answer(&g.core, &fwd, 200, "fork-1", SG_A_PEER, t0);
    assert_eq!(sg_a(&g.core).dialogs, 2);
}

/// A gate that did not see a call set up (it started since) learns it from
/// the first request in it, and counts it until it ends (R-ST-2, R-ST-3).
#[test]
fn r_st_2_a_call_set_up_before_the_gate_started_is_learned_from_its_traffic() {
    let g = fresh("");
    let t0 = Instant::now();
    // The ACK and BYE alone teach nothing (they end or belong to a transaction).
    through(&g.core, UA, &ua_in_dialog("ACK", "before", 1), t0);
    assert_eq!(sg_a(&g.core).dialogs, 0);
    let re = through(&g.core, UA, &ua_in_dialog("INVITE", "before", 2), at(t0, 5));
    assert_eq!(sg_a(&g.core).dialogs, 1, "learned from the re-INVITE");
    answer(&g.core, &re, 200, "", SG_A_PEER, at(t0, 5));
    assert_eq!(sg_a(&g.core).dialogs, 1, "its 2xx does not count it again");
    let bye = through(
        &g.core,
        SG_A_PEER,
        &sg_in_dialog("BYE", "before", 3),
        at(t0, 9),
    );
    answer(&g.core, &bye, 200, "", UA, at(t0, 9));
    assert_eq!(sg_a(&g.core).total(), 0);
}
