//! Calls, registrations and subscriptions played through the core on
//! synthetic time, for the work accounting tests (R-ST-2, R-ST-3).
//!
//! The UA talks to sg-a through its guard listener; sg-a talks back and
//! places calls through the same listener; the far party of a call sg-a
//! places is `FAR`.

use std::time::{Duration, Instant};

use ringsync::work::WorkCounts;
use sip_gate::Core;

use super::prelude::*;

/// Where the calls sg-a places go.
pub const FAR: &str = "198.51.100.7:5070";
/// sg-a's address as a peer.
pub const SG_A_PEER: &str = INSTANCE_ADDR[SG_A];

/// `t0 + secs`.
pub fn at(t0: Instant, secs: u64) -> Instant {
    t0 + Duration::from_secs(secs)
}

/// A gate whose work book knows everything since it started (no restart
/// window), with `work` as its `[work]` section.
pub fn fresh(work: &'static str) -> Gate {
    let g = Gate::new(&SiteOpts {
        work,
        ..SiteOpts::default()
    });
    g.core.work().assume_fresh_site();
    g
}

/// sg-a's counts.
pub fn sg_a(core: &Core) -> WorkCounts {
    core.work().get(SG_A)
}

/// `msg` from `peer` on sg-a's guard listener at `now`.
pub fn send(core: &Core, peer: &str, msg: &Bytes, now: Instant) -> Action {
    send_on(core, L_SG_GUARD, peer, msg, now)
}

/// `msg` from `peer` on `listener` at `now`.
pub fn send_on(core: &Core, listener: usize, peer: &str, msg: &Bytes, now: Instant) -> Action {
    core.handle(
        Inbound::Udp {
            listener,
            peer: addr(peer),
        },
        msg.clone(),
        now,
    )
}

/// Sends `msg` and returns what the gate forwarded (panics if nothing).
pub fn through(core: &Core, peer: &str, msg: &Bytes, now: Instant) -> SipMessage {
    sent(send(core, peer, msg, now)).1
}

/// The answer `code` of the peer a request was forwarded to, relayed.
pub fn answer(core: &Core, fwd: &SipMessage, code: u16, tag: &str, peer: &str, now: Instant) {
    answer_with(core, fwd, code, tag, "", peer, now);
}

/// The same with extra header lines (`Name: value\r\n` each).
pub fn answer_with(
    core: &Core,
    fwd: &SipMessage,
    code: u16,
    tag: &str,
    extra: &str,
    peer: &str,
    now: Instant,
) {
    let a = send(core, peer, &response_extra(fwd, code, tag, extra), now);
    assert!(matches!(a, Action::Send(..)), "response relayed");
}

/// A response to `fwd` with extra header lines.
pub fn response_extra(fwd: &SipMessage, code: u16, tag: &str, extra: &str) -> Bytes {
    let plain = response_to(fwd, code, "Reason", tag);
    let text = text(&plain).replacen("Content-Length: 0", &format!("{extra}Content-Length: 0"), 1);
    Bytes::from(text)
}

/// The UA's INVITE of `call` to sg-a, forwarded at `now`.
pub fn invite_in(core: &Core, call: &str, branch: &str, now: Instant) -> SipMessage {
    through(core, UA, &Req::ua("INVITE", call, branch).bytes(), now)
}

/// A call from the UA that sg-a answered 200 (To tag `uas`) at `now`.
pub fn call_in(core: &Core, call: &str, now: Instant) -> SipMessage {
    let fwd = invite_in(core, call, &format!("z9hG4bK{call}-inv"), now);
    answer(core, &fwd, 200, "uas", SG_A_PEER, now);
    fwd
}

/// A REGISTER of the UA for `aor` with these Contact lines (and headers).
pub fn register(aor: &str, branch: &str, cseq: u32, headers: &[(&str, &str)]) -> Bytes {
    let mut r = Req::ua("REGISTER", "reg@ua", branch)
        .to(aor)
        .set("CSeq", &format!("{cseq} REGISTER"))
        .without("Contact");
    for (n, v) in headers {
        r = r.add(n, v);
    }
    r.bytes()
}

/// A request of the UA inside `call` (tags a1/uas), routed by the gate's
/// token.
pub fn ua_in_dialog(method: &str, call: &str, cseq: u32) -> Bytes {
    Req::ua(method, call, &format!("z9hG4bK{call}-{method}-{cseq}"))
        .tagged("uas")
        .set("CSeq", &format!("{cseq} {method}"))
        .add_first("Route", &gate_route("sg-a", L_SG_GUARD, call))
        .bytes()
}

/// A request sg-a sends inside a call the UA placed (sg-a is the callee:
/// From carries its tag `uas`), toward the UA's contact.
pub fn sg_in_dialog(method: &str, call: &str, cseq: u32) -> Bytes {
    Req::new(
        method,
        "sip:alice@203.0.113.10:5062",
        call,
        &format!("SIP/2.0/UDP {SG_A_PEER};branch=z9hG4bK{call}-sg{method}{cseq}"),
    )
    .set("From", "<sip:bob@example.com>;tag=uas")
    .set("To", "\"Alice\" <sip:alice@example.com>;tag=a1")
    .set("CSeq", &format!("{cseq} {method}"))
    .add_first("Route", &gate_route("sg-a", L_SG_GUARD, call))
    .bytes()
}

/// A call sg-a places through the gate to [`FAR`], answered 200 (To tag
/// `far`) at `now`; returns the INVITE as forwarded.
pub fn call_out(core: &Core, call: &str, now: Instant) -> SipMessage {
    let invite = Req::new(
        "INVITE",
        &format!("sip:carol@{FAR}"),
        call,
        &format!("SIP/2.0/UDP {SG_A_PEER};branch=z9hG4bK{call}-out"),
    )
    .set("From", "<sip:bob@example.com>;tag=b1")
    .set("To", "<sip:carol@example.net>")
    .set("Contact", &format!("<sip:bob@{SG_A_PEER}>"))
    .bytes();
    let fwd = through(core, SG_A_PEER, &invite, now);
    assert_eq!(sg_a(core).transactions, 1, "sg-a's own INVITE is its work");
    answer(core, &fwd, 200, "far", FAR, now);
    fwd
}

/// A request of the far party inside a call sg-a placed, back through the
/// gate's Record-Route to sg-a.
pub fn far_in_dialog(method: &str, call: &str, cseq: u32) -> Bytes {
    Req::new(
        method,
        &format!("sip:bob@{SG_A_PEER}"),
        call,
        &format!("SIP/2.0/UDP {FAR};branch=z9hG4bK{call}-far{method}{cseq}"),
    )
    .set("From", "<sip:carol@example.net>;tag=far")
    .set("To", "<sip:bob@example.com>;tag=b1")
    .set("CSeq", &format!("{cseq} {method}"))
    .add_first("Route", &gate_route("sg-a", L_SG_GUARD, call))
    .bytes()
}
