//! Registrations and subscriptions as work (R-ST-2): registrations per
//! binding until they expire, move or are removed; subscriptions per dialog
//! until they expire or terminate; on synthetic time.

use super::prelude::*;
use super::work_flow::*;

const AOR: &str = "sip:alice@example.com";
const C1: &str = "<sip:alice@203.0.113.10:5062>";
const C2: &str = "<sip:alice@203.0.113.11:5062>";

/// Registers on sg-a through its guard; sg-a's registrar answers 200 with
/// `reply` (its Contact lines, Expires...).
fn registered(g: &Gate, n: u32, request: &[(&str, &str)], reply: &str, now: Instant) {
    let fwd = through(
        &g.core,
        UA,
        &register(AOR, &format!("z9hG4bKreg-{n}"), n, request),
        now,
    );
    answer_with(&g.core, &fwd, 200, "reg", reply, SG_A_PEER, now);
}

#[test]
fn r_st_2_a_registration_counts_until_the_expiry_the_registrar_granted() {
    let g = fresh("");
    let t0 = Instant::now();
    // Asked for 3600, granted 60 (the Contact parameter wins over Expires).
    registered(
        &g,
        1,
        &[("Contact", C1), ("Expires", "3600")],
        &format!("Contact: {C1};expires=60\r\nExpires: 3600\r\n"),
        t0,
    );
    assert_eq!(sg_a(&g.core).registrations, 1);
    // The same 200 retransmitted: still one binding.
    registered(&g, 1, &[], &format!("Contact: {C1};expires=60\r\n"), t0);
    g.core.sweep(at(t0, 59));
    assert_eq!(sg_a(&g.core).registrations, 1);
    let eta = g.core.work().instance_work(SG_A, at(t0, 59)).eta;
    let expiry = ringsync::work::now_ms() + 60_000;
    let until = eta.registrations_until_ms.expect("an expiry");
    assert!(until.abs_diff(expiry) < 2_000, "{until} vs {expiry}");
    // A binding keeps its expiry to the whole second above it (a binding
    // is 16 bytes, issue 29): gone by the sweep a second after the grant.
    g.core.sweep(at(t0, 61));
    assert_eq!(sg_a(&g.core).registrations, 0);

    // No parameter: the Expires header of the 2xx.
    registered(
        &g,
        2,
        &[("Contact", C1)],
        &format!("Contact: {C1}\r\nExpires: 30\r\n"),
        t0,
    );
    g.core.sweep(at(t0, 29));
    assert_eq!(sg_a(&g.core).registrations, 1);
    g.core.sweep(at(t0, 31));
    assert_eq!(sg_a(&g.core).registrations, 0);
}

/// A binding removed with `expires=0`, with `Contact: *`, or no longer
/// listed by the registrar's 2xx is gone.
#[test]
fn r_st_2_registrations_removed_by_expires_0_star_or_no_longer_listed() {
    let g = fresh("");
    let t0 = Instant::now();
    let both = format!("Contact: {C1};expires=600, {C2};expires=600\r\n");
    registered(&g, 1, &[("Contact", C1), ("Contact", C2)], &both, t0);
    assert_eq!(sg_a(&g.core).registrations, 2);
    // C1 unregistered: the 2xx lists C2 only.
    registered(
        &g,
        2,
        &[("Contact", &format!("{C1};expires=0"))],
        &format!("Contact: {C2};expires=590\r\n"),
        at(t0, 10),
    );
    assert_eq!(sg_a(&g.core).registrations, 1);
    // A registrar that echoes the removed one with expires=0.
    let echoed = format!("Contact: {C2};expires=589, {C1};expires=0\r\n");
    registered(&g, 3, &[], &echoed, at(t0, 11));
    assert_eq!(sg_a(&g.core).registrations, 1);
    // Contact: * with Expires: 0: the 2xx lists nothing.
    registered(&g, 4, &[("Contact", "*"), ("Expires", "0")], "", at(t0, 20));
    assert_eq!(sg_a(&g.core).total(), 0);
    // A 2xx whose Contact cannot be read changes nothing (no guess; the
    // gate does not even relay it).
    registered(
        &g,
        5,
        &[("Contact", C1)],
        &format!("Contact: {C1};expires=60\r\n"),
        at(t0, 30),
    );
    let fwd = through(
        &g.core,
        UA,
        &register(AOR, "z9hG4bKreg-6", 6, &[]),
        at(t0, 31),
    );
    let broken = response_extra(&fwd, 200, "reg", "Contact: <sip:broken\r\n");
    send(&g.core, SG_A_PEER, &broken, at(t0, 31));
    assert_eq!(sg_a(&g.core).registrations, 1);
}

/// A binding refreshed through another instance (the ring moved it: its
/// instance drains) moves there: the draining instance is left with none.
#[test]
fn r_st_2_a_registration_refreshed_through_another_instance_moves() {
    let g = fresh("");
    let t0 = Instant::now();
    let reg = |n: u32, now| {
        let a = send_on(
            &g.core,
            L_SG_BAL,
            UA,
            &register(AOR, &format!("z9hG4bKmove-{n}"), n, &[("Contact", C1)]),
            now,
        );
        let (Out::Udp { to, .. }, fwd) = sent(a) else {
            panic!("udp")
        };
        let i = INSTANCE_ADDR.iter().position(|a| addr(a) == to).unwrap();
        let ok = response_extra(&fwd, 200, "reg", &format!("Contact: {C1};expires=600\r\n"));
        sent(send_on(&g.core, L_SG_BAL, INSTANCE_ADDR[i], &ok, now));
        i
    };
    let first = reg(1, t0);
    assert_eq!(g.core.work().get(first).registrations, 1);
    g.drain_servers(&[["srv-a", "srv-b", "srv-c"][first]]);
    let second = reg(2, at(t0, 300));
    assert_ne!(first, second);
    assert_eq!(g.core.work().get(first).registrations, 0, "moved away");
    assert_eq!(g.core.work().get(second).registrations, 1);
}

/// Registrations sg-a itself sends out (a trunk registering upstream) are
/// not routed to it: not its work here.
#[test]
fn r_st_2_a_register_the_instance_sends_out_is_not_counted() {
    let g = fresh("");
    let t0 = Instant::now();
    let out = Req::new(
        "REGISTER",
        &format!("sip:{FAR}"),
        "trunk-reg",
        &format!("SIP/2.0/UDP {SG_A_PEER};branch=z9hG4bKtrunk"),
    )
    .bytes();
    let fwd = through(&g.core, SG_A_PEER, &out, t0);
    answer_with(
        &g.core,
        &fwd,
        200,
        "p",
        &format!("Contact: <sip:sg@{SG_A_PEER}>;expires=600\r\n"),
        FAR,
        t0,
    );
    assert_eq!(sg_a(&g.core).total(), 0);
}

/// A SUBSCRIBE of the UA to sg-a, accepted with `expires` seconds.
fn subscribed(g: &Gate, call: &str, expires: u32, now: Instant) {
    let sub = Req::ua("SUBSCRIBE", call, &format!("z9hG4bK{call}-sub"))
        .set("Event", "presence")
        .set("Expires", "600")
        .bytes();
    let fwd = through(&g.core, UA, &sub, now);
    answer_with(
        &g.core,
        &fwd,
        202,
        "uas",
        &format!("Expires: {expires}\r\n"),
        SG_A_PEER,
        now,
    );
}

/// sg-a's NOTIFY in subscription `call` with this Subscription-State.
fn notify(g: &Gate, call: &str, cseq: u32, state: &str, now: Instant) -> SipMessage {
    let text = text(&sg_in_dialog("NOTIFY", call, cseq)).replacen(
        "Content-Length: 0",
        &format!("Event: presence\r\nSubscription-State: {state}\r\nContent-Length: 0"),
        1,
    );
    through(&g.core, SG_A_PEER, &Bytes::from(text), now)
}

#[test]
fn r_st_2_a_subscription_counts_until_it_expires_or_is_refreshed_to_0() {
    let g = fresh("");
    let t0 = Instant::now();
    subscribed(&g, "sub-exp", 60, t0);
    assert_eq!(sg_a(&g.core).subscriptions, 1);
    assert_eq!(sg_a(&g.core).dialogs, 0, "a subscription is not a call");
    g.core.sweep(at(t0, 59));
    assert_eq!(sg_a(&g.core).subscriptions, 1);
    g.core.sweep(at(t0, 60));
    assert_eq!(sg_a(&g.core).subscriptions, 0);

    // Refreshed in-dialog: the 2xx's Expires is the new end; Expires 0 ends it.
    subscribed(&g, "sub-ref", 60, t0);
    let refresh = |n: u32, exp: u32, now| {
        let text = text(&ua_in_dialog("SUBSCRIBE", "sub-ref", n)).replacen(
            "Content-Length: 0",
            &format!("Event: presence\r\nExpires: {exp}\r\nContent-Length: 0"),
            1,
        );
        let fwd = through(&g.core, UA, &Bytes::from(text), now);
        answer_with(
            &g.core,
            &fwd,
            200,
            "",
            &format!("Expires: {exp}\r\n"),
            SG_A_PEER,
            now,
        );
    };
    refresh(2, 300, at(t0, 50));
    g.core.sweep(at(t0, 100));
    assert_eq!(sg_a(&g.core).subscriptions, 1, "refreshed");
    refresh(3, 0, at(t0, 120));
    assert_eq!(sg_a(&g.core).subscriptions, 0, "unsubscribed");
}

#[test]
fn r_st_2_a_terminating_notify_ends_a_subscription() {
    let g = fresh("");
    let t0 = Instant::now();
    subscribed(&g, "sub-term", 600, t0);
    let n = notify(&g, "sub-term", 1, "active;expires=600", t0);
    answer(&g.core, &n, 200, "", UA, t0);
    assert_eq!(sg_a(&g.core).subscriptions, 1);
    let n = notify(
        &g,
        "sub-term",
        2,
        "terminated;reason=deactivated",
        at(t0, 5),
    );
    assert_eq!(sg_a(&g.core).subscriptions, 0, "ended when sent");
    answer(&g.core, &n, 200, "", UA, at(t0, 5));
    assert_eq!(sg_a(&g.core).subscriptions, 0);

    // A NOTIFY `terminated` racing ahead of the 202: the 202 sets nothing up.
    let sub = Req::ua("SUBSCRIBE", "sub-race", "z9hG4bKsub-race")
        .set("Event", "presence")
        .bytes();
    let fwd = through(&g.core, UA, &sub, t0);
    notify(&g, "sub-race", 1, "terminated;reason=rejected", t0);
    answer_with(&g.core, &fwd, 202, "uas", "Expires: 600\r\n", SG_A_PEER, t0);
    assert_eq!(sg_a(&g.core).total(), 0);
}
