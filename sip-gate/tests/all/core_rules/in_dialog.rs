//! In-dialog requests reach the instance that serves the dialog, drained or
//! not (R-SG-4): by the Record-Route token, or by Call-ID for UAs that keep no
//! route set.

use super::prelude::*;

#[test]
fn r_sg_4_in_dialog_goes_to_the_token_instance_even_when_draining() {
    let g = Gate::std();
    let call = call_id_for(&g, SG_C, "dlg");
    let invite = Req::ua("INVITE", &call, "z9hG4bKua-dlg").bytes();
    let fwd = forwarded(g.udp(L_SG_BAL, UA, &invite), L_SG_BAL, inst(SG_C));
    let rr = rr_uris(&fwd);
    assert_eq!(rr, [gate_rr("sg-c", L_SG_BAL, &call)]);

    g.drain_servers(&["srv-c"]);
    for (n, method) in ["INVITE", "UPDATE", "INFO", "PRACK", "BYE"]
        .iter()
        .enumerate()
    {
        let input = Req::ua(method, &call, &format!("z9hG4bKua-dlg{n}"))
            .tagged("uas-dlg")
            .set("CSeq", &format!("{} {method}", n + 2))
            .add_first("Route", &format!("<{}>", rr[0]))
            .bytes();
        let m = forwarded(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, inst(SG_C));
        assert!(route_uris(&m).is_empty(), "{method}: own Route removed");
        assert!(
            rr_uris(&m).is_empty(),
            "{method}: in-dialog, no new Record-Route"
        );
        assert_eq!(header(&m, HeaderName::MaxForwards).as_deref(), Some("69"));
        assert_untouched(&input, &m);
    }
    // Any gate node of the site, also one that just restarted.
    let fresh = g.restarted();
    let bye = Req::ua("BYE", &call, "z9hG4bKua-dlg-bye2")
        .tagged("uas-dlg")
        .set("CSeq", "9 BYE")
        .add_first("Route", &format!("<{}>", rr[0]))
        .bytes();
    forwarded(handle(&fresh, L_SG_BAL, UA, &bye), L_SG_BAL, inst(SG_C));
    // The instance's own Route after the gate's is allowed and kept.
    let bye = Req::ua("BYE", &call, "z9hG4bKua-dlg-bye3")
        .tagged("uas-dlg")
        .set("CSeq", "10 BYE")
        .add_first("Route", &format!("<{}>, <sip:127.0.1.3:5060;lr>", rr[0]))
        .bytes();
    let m = forwarded(g.udp(L_SG_BAL, UA, &bye), L_SG_BAL, inst(SG_C));
    assert_eq!(route_uris(&m), ["sip:127.0.1.3:5060;lr"]);
}

#[test]
fn r_sg_4_in_dialog_without_route_balance_by_call_id_guard_to_instance() {
    let g = Gate::std();
    // Balance: a UA that keeps no route set; the ring by Call-ID, as the INVITE went.
    for target in [SG_A, SG_B, SG_C] {
        let call = call_id_for(&g, target, "noroute");
        let invite = Req::ua("INVITE", &call, &format!("z9hG4bKnr{target}")).bytes();
        assert_eq!(dest(g.udp(L_SG_BAL, UA, &invite), L_SG_BAL), target);
        let bye = Req::ua("BYE", &call, &format!("z9hG4bKnrb{target}"))
            .tagged("uas")
            .set("CSeq", "2 BYE")
            .bytes();
        let m = forwarded(g.udp(L_SG_BAL, UA, &bye), L_SG_BAL, inst(target));
        assert!(rr_uris(&m).is_empty());
    }
    // Guard: to the guarded instance, also while it drains (R-SG-4).
    g.drain_servers(&["srv-a"]);
    let bye = Req::ua("BYE", "noroute-g@ua", "z9hG4bKnrg")
        .tagged("uas")
        .set("CSeq", "2 BYE")
        .bytes();
    forwarded(g.udp(L_SG_GUARD, UA, &bye), L_SG_GUARD, inst(SG_A));
}

#[test]
fn r_sg_4_route_less_bye_of_a_call_set_up_before_the_drain_reaches_its_instance() {
    let g = Gate::std();
    let call = call_id_for(&g, SG_B, "rl-drain");
    let invite = Req::ua("INVITE", &call, "z9hG4bKrl-inv").bytes();
    let fwd = forwarded(g.udp(L_SG_BAL, UA, &invite), L_SG_BAL, inst(SG_B));
    let ok = response_to(&fwd, 200, "OK", "uas-rl");
    sent(handle(&g.core, L_SG_BAL, INSTANCE_ADDR[SG_B], &ok));
    // sg-b drains: the ring would now send this Call-ID elsewhere...
    g.drain_servers(&["srv-b"]);
    assert_ne!(
        g.drain
            .view()
            .pick(&ringsync::config::Service::Sg, call.as_bytes()),
        Some(SG_B)
    );
    // ...but the BYE of a UA that keeps no route set still reaches sg-b.
    let bye = Req::ua("BYE", &call, "z9hG4bKrl-bye")
        .tagged("uas-rl")
        .set("CSeq", "2 BYE")
        .bytes();
    forwarded(g.udp(L_SG_BAL, UA, &bye), L_SG_BAL, inst(SG_B));
}

/// R-FT-1: an in-dialog request to an instance the probes marked `down` gets
/// 408 at once (not silence until Timer F); its ACK is dropped; a request to
/// a live instance is untouched, and one up again is forwarded again.
#[test]
fn r_ft_1_in_dialog_to_a_down_instance_is_408_at_once_and_its_ack_dropped() {
    let g = Gate::std();
    let call = call_id_for(&g, SG_C, "down");
    let invite = Req::ua("INVITE", &call, "z9hG4bKua-down").bytes();
    let rr = rr_uris(&forwarded(
        g.udp(L_SG_BAL, UA, &invite),
        L_SG_BAL,
        inst(SG_C),
    ));
    let live = call_id_for(&g, SG_A, "live");
    let invite = Req::ua("INVITE", &live, "z9hG4bKua-live").bytes();
    let live_rr = rr_uris(&forwarded(
        g.udp(L_SG_BAL, UA, &invite),
        L_SG_BAL,
        inst(SG_A),
    ));
    let in_dialog = |call: &str, rr: &str, method: &str, branch: &str| {
        Req::ua(method, call, branch)
            .tagged("uas-down")
            .set("CSeq", &format!("2 {method}"))
            .add_first("Route", &format!("<{rr}>"))
            .bytes()
    };
    g.health(SG_C, Health::Down);
    for method in ["BYE", "INVITE", "UPDATE", "INFO"] {
        let req = in_dialog(&call, &rr[0], method, &format!("z9hG4bKd-{method}"));
        let r = replied(g.udp(L_SG_BAL, UA, &req), L_SG_BAL, UA, 408);
        assert!(
            r.raw().starts_with(b"SIP/2.0 408 Instance Down\r\n"),
            "{method}"
        );
    }
    let ack = in_dialog(&call, &rr[0], "ACK", "z9hG4bKd-ack");
    assert_eq!(g.udp(L_SG_BAL, UA, &ack), Action::None);
    // Another instance's dialog is not affected.
    let bye = in_dialog(&live, &live_rr[0], "BYE", "z9hG4bKl-bye");
    forwarded(g.udp(L_SG_BAL, UA, &bye), L_SG_BAL, inst(SG_A));
    // Up again: forwarded again.
    g.health(SG_C, Health::Up);
    let bye = in_dialog(&call, &rr[0], "BYE", "z9hG4bKd-bye-up");
    forwarded(g.udp(L_SG_BAL, UA, &bye), L_SG_BAL, inst(SG_C));
}

/// R-FT-1 (amended), traffic outranks probes: a dialog the instance
/// answered keeps its in-dialog requests while the probes call the
/// instance `down`; once a request forwarded to it times out (the sweep
/// finds it expired without a final response), the next ones get 408.
#[test]
fn r_ft_1_a_down_instance_that_answers_traffic_keeps_its_dialogs_until_traffic_fails() {
    let g = Gate::std();
    let call = call_id_for(&g, SG_C, "answers");
    let invite = Req::ua("INVITE", &call, "z9hG4bKua-ans").bytes();
    let fwd = forwarded(g.udp(L_SG_BAL, UA, &invite), L_SG_BAL, inst(SG_C));
    let rr = rr_uris(&fwd);
    let ok = response_to(&fwd, 200, "OK", "uas-ans");
    sent(handle(&g.core, L_SG_BAL, INSTANCE_ADDR[SG_C], &ok));
    g.health(SG_C, Health::Down);
    let in_dialog = |cseq: u32, branch: &str| {
        Req::ua("INFO", &call, branch)
            .tagged("uas-ans")
            .set("CSeq", &format!("{cseq} INFO"))
            .add_first("Route", &format!("<{}>", rr[0]))
            .bytes()
    };
    // Answered since: forwarded though the probe says down.
    forwarded(
        g.udp(L_SG_BAL, UA, &in_dialog(2, "z9hG4bKa-info2")),
        L_SG_BAL,
        inst(SG_C),
    );
    // That INFO is never answered: past Timer F it counts as a failure.
    g.core
        .sweep(std::time::Instant::now() + std::time::Duration::from_secs(33));
    let r = replied(
        g.udp(L_SG_BAL, UA, &in_dialog(3, "z9hG4bKa-info3")),
        L_SG_BAL,
        UA,
        408,
    );
    assert!(r.raw().starts_with(b"SIP/2.0 408 Instance Down\r\n"));
}
