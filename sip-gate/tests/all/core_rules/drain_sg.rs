//! The sg guard: 503 with Retry-After for new work on a draining sg, under
//! R-SG-1 .. R-SG-5.

use super::prelude::*;

fn assert_drain_503(r: &SipMessage, req: &Bytes, o: &SiteOpts) {
    let req = SipMessage::parse(req.clone()).unwrap();
    let raw = text(r.raw());
    assert!(raw.starts_with("SIP/2.0 503 "), "{raw}");
    // R-SG-5: Retry-After in [retry_after, retry_after + jitter].
    let ra: u32 = other_header(r, "Retry-After")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!(
        (o.retry_after..=o.retry_after + o.jitter).contains(&ra),
        "{ra}"
    );
    // To tag added, the rest of To as sent.
    let to_req = header(&req, HeaderName::To).unwrap();
    let to = header(r, HeaderName::To).unwrap();
    assert!(to.starts_with(&format!("{to_req};tag=")), "{to}");
    assert!(r.to_tag().is_some_and(|t| !t.is_empty()));
    // Every Via in order, the top one stamped (RFC 3581).
    let mut want = via_values(&req);
    want[0] = format!(
        "{};received=203.0.113.10;rport=40000",
        want[0].trim_end_matches(";rport")
    );
    assert_eq!(via_values(r), want);
    assert_eq!(r.call_id(), req.call_id());
    assert_eq!(header(r, HeaderName::From), header(&req, HeaderName::From));
    assert_eq!(header(r, HeaderName::CSeq), header(&req, HeaderName::CSeq));
    assert_eq!(header(r, HeaderName::ContentLength).as_deref(), Some("0"));
    assert!(r.body().is_empty());
}

#[test]
fn r_sg_1_r_sg_5_register_new_subscribe_new_invite_get_503_with_retry_after() {
    let o = SiteOpts::default();
    let g = Gate::new(&o);
    g.drain_servers(&["srv-a"]);
    for method in ["REGISTER", "SUBSCRIBE", "INVITE"] {
        for n in 0..5 {
            let input = Req::ua(
                method,
                &format!("sg1-{method}-{n}@ua"),
                &format!("z9hG4bKsg1{method}{n}"),
            )
            .add("Via", "SIP/2.0/UDP 198.18.0.1:5060;branch=z9hG4bKup1")
            .add("Via", "SIP/2.0/TCP 198.18.0.2;branch=z9hG4bKup2")
            .set("Expires", "3600")
            .body("application/sdp", b"v=0\r\n")
            .bytes();
            let r = replied(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, UA, 503);
            assert_drain_503(&r, &input, &o);
        }
    }
    // Without jitter, exactly retry_after.
    let o = SiteOpts {
        retry_after: 120,
        jitter: 0,
        ..SiteOpts::default()
    };
    let g = Gate::new(&o);
    g.drain_servers(&["srv-a"]);
    let input = Req::ua("INVITE", "sg1-nj@ua", "z9hG4bKsg1nj").bytes();
    let r = replied(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, UA, 503);
    assert_eq!(other_header(&r, "Retry-After").as_deref(), Some("120"));
    assert_drain_503(&r, &input, &o);
    // Not draining: all three pass.
    g.drain_servers(&[]);
    for method in ["REGISTER", "SUBSCRIBE", "INVITE"] {
        let input = Req::ua(
            method,
            &format!("sg1-nd-{method}@ua"),
            &format!("z9hG4bKnd{method}"),
        )
        .bytes();
        forwarded(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, inst(SG_A));
    }
}

#[test]
fn r_sg_1_draining_other_instance_does_not_refuse_for_the_guarded_one() {
    let g = Gate::std();
    g.drain_servers(&["srv-b"]);
    let input = Req::ua("INVITE", "sg1-other@ua", "z9hG4bKsg1o").bytes();
    forwarded(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, inst(SG_A));
}

#[test]
fn r_sg_2_no_503_when_no_other_sg_is_up_in_the_normal_zone() {
    let g = Gate::std();
    let invite =
        |n: &str| Req::ua("INVITE", &format!("sg2-{n}@ua"), &format!("z9hG4bKsg2{n}")).bytes();
    // Every other sg draining too.
    g.drain_servers(&["srv-a", "srv-b", "srv-c"]);
    forwarded(g.udp(L_SG_GUARD, UA, &invite("1")), L_SG_GUARD, inst(SG_A));
    // sg-b drains, sg-c is down.
    g.drain_servers(&["srv-a", "srv-b"]);
    g.health(SG_C, Health::Down);
    forwarded(g.udp(L_SG_GUARD, UA, &invite("2")), L_SG_GUARD, inst(SG_A));
    // sg-c back up: 503 again.
    g.health(SG_C, Health::Up);
    replied(g.udp(L_SG_GUARD, UA, &invite("3")), L_SG_GUARD, UA, 503);
    // Both others down, none draining.
    g.drain_servers(&["srv-a"]);
    g.health(SG_B, Health::Down);
    g.health(SG_C, Health::Down);
    forwarded(g.udp(L_SG_GUARD, UA, &invite("4")), L_SG_GUARD, inst(SG_A));
    // Only an esg is up elsewhere: another service does not count.
    assert!(!g.drain.view().is_draining(ESG_B));
    forwarded(g.udp(L_SG_GUARD, UA, &invite("5")), L_SG_GUARD, inst(SG_A));
}

#[test]
fn r_sg_3_exceptions_by_source_aor_user_domain_method() {
    let o = SiteOpts {
        sg_a_exceptions: r#"[
            { source = "10.0.0.0/8" },
            { aor = "sip:112@example.com" },
            { user = "vip" },
            { domain = "exempt.example" },
            { method = "SUBSCRIBE" },
            { user = "both", source = "172.16.0.0/12" },
        ]"#,
        ..SiteOpts::default()
    };
    let g = Gate::new(&o);
    g.drain_servers(&["srv-a"]);
    let pass = |peer: &str, req: Req| {
        forwarded(
            g.udp(L_SG_GUARD, peer, &req.bytes()),
            L_SG_GUARD,
            inst(SG_A),
        );
    };
    let refuse = |peer: &str, req: Req| {
        replied(g.udp(L_SG_GUARD, peer, &req.bytes()), L_SG_GUARD, peer, 503);
    };
    let inv = |n: &str| Req::ua("INVITE", &format!("sg3-{n}@ua"), &format!("z9hG4bKsg3{n}"));
    let reg = |n: &str| {
        Req::ua(
            "REGISTER",
            &format!("sg3-{n}@ua"),
            &format!("z9hG4bKsg3{n}"),
        )
    };
    // Source network.
    pass("10.1.2.3:5060", inv("src"));
    refuse("11.1.2.3:5060", inv("src-no"));
    // AOR: the To of REGISTER, the From of INVITE; scheme/host case-insensitive, params ignored.
    pass(UA, reg("aor").to("sip:112@EXAMPLE.com;transport=udp"));
    pass(UA, inv("aor-inv").from("SIP:112@example.com"));
    refuse(UA, reg("aor-no").to("sip:113@example.com"));
    refuse(UA, reg("aor-no2").to("sip:112@example.net"));
    // User.
    pass(UA, reg("user").to("sip:vip@anywhere.example"));
    refuse(UA, reg("user-no").to("sip:VIP@anywhere.example"));
    // Domain.
    pass(UA, inv("dom").from("sip:anyone@Exempt.Example"));
    refuse(UA, inv("dom-no").from("sip:anyone@not-exempt.example"));
    // Method.
    pass(UA, Req::ua("SUBSCRIBE", "sg3-m@ua", "z9hG4bKsg3m"));
    refuse(UA, Req::ua("INVITE", "sg3-m2@ua", "z9hG4bKsg3m2"));
    // Every field of one exception must match.
    pass("172.16.5.5:5060", reg("both").to("sip:both@example.com"));
    refuse(UA, reg("both-no").to("sip:both@example.com"));
    refuse(
        "172.16.5.5:5060",
        reg("both-no2").to("sip:other@example.com"),
    );

    // `all`: the instance is exempt from drain refusals altogether.
    let g = Gate::new(&SiteOpts {
        sg_a_exceptions: "[{ all = true }]",
        ..SiteOpts::default()
    });
    g.drain_servers(&["srv-a"]);
    for method in ["REGISTER", "SUBSCRIBE", "INVITE"] {
        let input = Req::ua(
            method,
            &format!("sg3-all-{method}@ua"),
            &format!("z9hG4bKall{method}"),
        )
        .bytes();
        forwarded(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, inst(SG_A));
    }
}

#[test]
fn r_sg_3_aor_exception_matches_the_callee_of_an_invite() {
    let g = Gate::new(&SiteOpts {
        sg_a_exceptions: r#"[{ aor = "sip:112@example.com" }]"#,
        ..SiteOpts::default()
    });
    g.drain_servers(&["srv-a"]);
    // A call to the emergency number passes the draining sg-a...
    let to_112 = Req::ua("INVITE", "em-1@ua", "z9hG4bKem1").to("sip:112@example.com");
    forwarded(
        g.udp(L_SG_GUARD, UA, &to_112.bytes()),
        L_SG_GUARD,
        inst(SG_A),
    );
    // ...a call to anyone else does not, and neither does a REGISTER of
    // another AOR whose From happens to be 112 (REGISTER is about its To).
    let other = Req::ua("INVITE", "em-2@ua", "z9hG4bKem2").to("sip:113@example.com");
    replied(g.udp(L_SG_GUARD, UA, &other.bytes()), L_SG_GUARD, UA, 503);
    let reg = Req::ua("REGISTER", "em-3@ua", "z9hG4bKem3")
        .from("sip:112@example.com")
        .to("sip:alice@example.com");
    replied(g.udp(L_SG_GUARD, UA, &reg.bytes()), L_SG_GUARD, UA, 503);
}

#[test]
fn r_sg_4_in_dialog_requests_pass_the_drain() {
    let g = Gate::std();
    // R-SEC-4: a dialog is proven by the gate's token (the Route) or by the
    // work book, which saw this call set up before the drain.
    super::work_flow::call_in(&g.core, "sg4@ua", std::time::Instant::now());
    g.drain_servers(&["srv-a"]);
    let methods = [
        "BYE",
        "INVITE",
        "UPDATE",
        "PRACK",
        "INFO",
        "NOTIFY",
        "SUBSCRIBE",
        "REFER",
        "MESSAGE",
        "ACK",
    ];
    for (n, method) in methods.iter().enumerate() {
        for with_route in [false, true] {
            let mut req = Req::ua(method, "sg4@ua", &format!("z9hG4bKsg4{n}{with_route}"))
                .tagged("uas")
                .set("CSeq", &format!("{} {method}", n + 2));
            if with_route {
                req = req.add_first("Route", &gate_route("sg-a", L_SG_GUARD, "sg4@ua"));
            }
            let input = req.bytes();
            let m = forwarded(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, inst(SG_A));
            assert!(rr_uris(&m).is_empty(), "{method}");
            assert!(route_uris(&m).is_empty(), "{method}");
            assert_untouched(&input, &m);
        }
    }
}

/// R-SEC-4 with R-SG-1: a To tag the gate cannot place in a dialog (no
/// token of its own, no dialog in its work book) proves nothing: an INVITE,
/// SUBSCRIBE or REGISTER carrying one is new work and a draining guard
/// answers it 503, where the other methods, which a drain does not refuse,
/// still pass.
#[test]
fn r_sec_4_an_invented_to_tag_does_not_pass_the_drain() {
    let o = SiteOpts::default();
    let g = Gate::new(&o);
    g.drain_servers(&["srv-a"]);
    for (n, method) in ["INVITE", "SUBSCRIBE", "REGISTER"].iter().enumerate() {
        let input = Req::ua(method, "forged@ua", &format!("z9hG4bKforged{n}"))
            .tagged("x1")
            .set("CSeq", &format!("1 {method}"))
            .bytes();
        let r = replied(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, UA, 503);
        assert!(other_header(&r, "Retry-After").is_some(), "{method}");
        // The To tag stays the one sent: the gate adds none to a tagged To.
        assert_eq!(r.to_tag(), Some(&b"x1"[..]), "{method}");
    }
    let input = Req::ua("BYE", "forged@ua", "z9hG4bKforgedbye")
        .tagged("x1")
        .set("CSeq", "2 BYE")
        .bytes();
    forwarded(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, inst(SG_A));
}

#[test]
fn r_sg_1_deregister_passes() {
    let g = Gate::std();
    g.drain_servers(&["srv-a"]);
    let reg = |n: &str| {
        Req::ua(
            "REGISTER",
            &format!("dereg-{n}@ua"),
            &format!("z9hG4bKdr{n}"),
        )
    };
    let pass = |req: Req| {
        forwarded(g.udp(L_SG_GUARD, UA, &req.bytes()), L_SG_GUARD, inst(SG_A));
    };
    pass(reg("1").set("Expires", "0"));
    pass(reg("2").set("Contact", "<sip:alice@203.0.113.10:5062>;expires=0"));
    pass(reg("3").set(
        "Contact",
        "<sip:alice@203.0.113.10:5062>;expires=0, <sip:alice@[2001:db8::1]>;expires=0",
    ));
    pass(reg("4").set("Contact", "*").set("Expires", "0"));
    // A binding added (the contact's own expires wins over Expires: 0): new work.
    let input = reg("5")
        .set("Contact", "<sip:alice@203.0.113.10:5062>;expires=3600")
        .set("Expires", "0")
        .bytes();
    replied(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, UA, 503);
    // One of two contacts stays: new work.
    let input = reg("6")
        .set(
            "Contact",
            "<sip:alice@203.0.113.10:5062>;expires=0, <sip:alice@203.0.113.11>",
        )
        .bytes();
    replied(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, UA, 503);
    // An unsubscribe (Expires: 0) is cleanup too.
    let input = Req::ua("SUBSCRIBE", "unsub@ua", "z9hG4bKunsub")
        .set("Expires", "0")
        .bytes();
    forwarded(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, inst(SG_A));
}

#[test]
fn r_sg_1_options_passes_unless_options_503() {
    let g = Gate::std();
    g.drain_servers(&["srv-a"]);
    let input = Req::ua("OPTIONS", "opt@ua", "z9hG4bKopt").bytes();
    forwarded(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, inst(SG_A));

    let o = SiteOpts {
        options_503: true,
        ..SiteOpts::default()
    };
    let g = Gate::new(&o);
    g.drain_servers(&["srv-a"]);
    let r = replied(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, UA, 503);
    assert_drain_503(&r, &input, &o);
    // In-dialog OPTIONS (the gate's token proves the dialog, R-SEC-4)
    // still passes.
    let input = Req::ua("OPTIONS", "opt2@ua", "z9hG4bKopt2")
        .tagged("t")
        .add_first("Route", &gate_route("sg-a", L_SG_GUARD, "opt2@ua"))
        .bytes();
    forwarded(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, inst(SG_A));
    // Not draining: passes.
    g.drain_servers(&["srv-b"]);
    let input = Req::ua("OPTIONS", "opt3@ua", "z9hG4bKopt3").bytes();
    forwarded(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, inst(SG_A));
}
