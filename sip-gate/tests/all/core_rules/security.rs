//! Not an open relay (R-SEC-1) and nothing a client writes steers new work
//! (R-SEC-2): tokens, foreign Routes, forged branches, who counts as an instance.

use super::prelude::*;

#[test]
fn r_sec_2_forged_token_or_other_secret_is_403() {
    let g = Gate::std();
    let key = TokenKey::new(SECRET);
    let call = b"forged@ua";
    let good = key.seal("sg-a", call);
    let other_site = TokenKey::new("another-site-secret-value-xyz").seal("sg-a", call);
    let grafted = good.replace("sg-a", "sg-b");
    let unknown = key.seal("sg-zz", call); // authentic, but no such instance
    let other_dialog = key.seal("sg-a", b"another-call@ua"); // authentic, another Call-ID
    for token in [
        other_site,
        grafted,
        unknown,
        other_dialog,
        "g2.sg-a.00000000000000000000".to_string(),
        "garbage".into(),
    ] {
        let input = Req::ua("BYE", "forged@ua", "z9hG4bKua-forged")
            .tagged("t")
            .add_first("Route", &format!("<sip:{token}@127.0.0.1:5060;lr>"))
            .bytes();
        let r = replied(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, UA, 403);
        assert!(
            text(r.raw()).starts_with("SIP/2.0 403 Bad Route Token\r\n"),
            "{token}"
        );
    }
    // The authentic one works.
    let input = Req::ua("BYE", "forged@ua", "z9hG4bKua-good")
        .tagged("t")
        .add_first("Route", &format!("<sip:{good}@127.0.0.1:5060;lr>"))
        .bytes();
    forwarded(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, inst(SG_A));
}

#[test]
fn r_sec_1_foreign_route_is_403() {
    let g = Gate::std();
    // In-dialog toward somewhere else through the gate.
    let input = Req::ua("BYE", "foreign@ua", "z9hG4bKua-foreign")
        .tagged("t")
        .add_first("Route", "<sip:198.18.7.7:5060;lr>")
        .bytes();
    let r = replied(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, UA, 403);
    assert!(text(r.raw()).starts_with("SIP/2.0 403 Route Not Allowed\r\n"));
    // Our token followed by a foreign hop.
    let input = Req::ua("BYE", "foreign@ua", "z9hG4bKua-foreign2")
        .tagged("t")
        .add_first(
            "Route",
            &format!(
                "{}, <sip:198.18.7.7:5060;lr>",
                gate_route("sg-a", L_SG_BAL, "foreign@ua")
            ),
        )
        .bytes();
    replied(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, UA, 403);
    // A new dialog with a foreign preloaded Route: open relay refused.
    let input = Req::ua("INVITE", "foreign3@ua", "z9hG4bKua-foreign3")
        .add_first("Route", "<sip:relay.example.net;lr>")
        .bytes();
    replied(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, UA, 403);
    // ... also after the gate's own Route.
    let input = Req::ua("INVITE", "foreign4@ua", "z9hG4bKua-foreign4")
        .add_first("Route", "<sip:127.0.0.1:5060;lr>, <sip:198.18.7.7;lr>")
        .bytes();
    replied(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, UA, 403);
    // A bad-token ACK is dropped, never answered.
    let ack = Req::ua("ACK", "foreign5@ua", "z9hG4bKua-foreign5")
        .tagged("t")
        .add_first("Route", "<sip:198.18.7.7:5060;lr>")
        .bytes();
    assert_eq!(g.udp(L_SG_BAL, UA, &ack), Action::None);
}

#[test]
fn r_sec_2_preloaded_gate_route_on_new_dialog_is_stripped_and_policy_decides() {
    let g = Gate::std();
    g.drain_servers(&["srv-a"]);
    // A token naming the draining sg-a, preloaded on a new INVITE: ignored.
    for n in 0..40 {
        let input = Req::ua(
            "INVITE",
            &format!("preload-{n}@ua"),
            &format!("z9hG4bKpre{n}"),
        )
        .add_first(
            "Route",
            &gate_route("sg-a", L_SG_BAL, &format!("preload-{n}@ua")),
        )
        .bytes();
        let (out, m) = sent(g.udp(L_SG_BAL, UA, &input));
        assert_ne!(
            out,
            udp_out(L_SG_BAL, inst(SG_A)),
            "the ring decides, not the token"
        );
        assert!(
            route_uris(&m).is_empty(),
            "the preloaded gate Route is stripped"
        );
        let rr = rr_uris(&m);
        assert!(
            rr == [gate_rr("sg-b", L_SG_BAL, &format!("preload-{n}@ua"))]
                || rr == [gate_rr("sg-c", L_SG_BAL, &format!("preload-{n}@ua"))],
            "{rr:?}"
        );
    }
    // On the guard listener the token lets nothing past the drain.
    let input = Req::ua("INVITE", "preload-g@ua", "z9hG4bKpreg")
        .add_first("Route", &gate_route("sg-a", L_SG_GUARD, "preload-g@ua"))
        .bytes();
    replied(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, UA, 503);
    let input = Req::ua("REGISTER", "preload-r@ua", "z9hG4bKprer")
        .add_first("Route", "<sip:127.0.0.1:5061;lr>")
        .bytes();
    replied(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, UA, 503);
}

#[test]
fn r_sec_1_request_from_instance_goes_outward_by_route_or_request_uri() {
    let g = Gate::std();
    // sg-a notifies a subscriber: Route = the gate's token, Request-URI = the UA's contact.
    let mut notify = Req::new(
        "NOTIFY",
        "sip:alice@203.0.113.10:5062",
        "sub-1@ua",
        "SIP/2.0/UDP 127.0.1.1:5060;branch=z9hG4bKsga-n1",
    )
    .add_first("Route", &gate_route("sg-a", L_SG_BAL, "sub-1@ua"))
    .set("From", "<sip:bob@example.com>;tag=uas")
    .set("To", "<sip:alice@example.com>;tag=a1")
    .set("Event", "presence")
    .set("Subscription-State", "active;expires=3600");
    notify.headers.retain(|(n, _)| n != "Contact");
    let input = notify
        .clone()
        .set("Contact", "<sip:127.0.1.1:5060>")
        .bytes();
    let m = forwarded(
        g.udp(L_SG_BAL, INSTANCE_ADDR[SG_A], &input),
        L_SG_BAL,
        addr("203.0.113.10:5062"),
    );
    assert_gate_via(&m, L_SG_BAL);
    assert!(route_uris(&m).is_empty());
    assert!(rr_uris(&m).is_empty());
    assert_eq!(
        via_values(&m)[1],
        "SIP/2.0/UDP 127.0.1.1:5060;branch=z9hG4bKsga-n1"
    );
    assert_untouched(&input, &m);

    // With a route set beyond the gate: to the next Route, which is kept.
    let input = notify
        .clone()
        .set("Via", "SIP/2.0/UDP 127.0.1.1:5060;branch=z9hG4bKsga-n2")
        .set(
            "Route",
            &format!(
                "{}, <sip:198.18.0.1:5070;lr>",
                gate_route("sg-a", L_SG_BAL, "sub-1@ua")
            ),
        )
        .bytes();
    let m = forwarded(
        g.udp(L_SG_BAL, INSTANCE_ADDR[SG_A], &input),
        L_SG_BAL,
        addr("198.18.0.1:5070"),
    );
    assert_eq!(route_uris(&m), ["sip:198.18.0.1:5070;lr"]);

    // A new INVITE an instance starts through the gate is record-routed to it.
    let input = Req::new(
        "INVITE",
        "sip:alice@203.0.113.10:5062",
        "out-1@sg",
        "SIP/2.0/UDP 127.0.1.2:5060;branch=z9hG4bKsgb-i1",
    )
    .bytes();
    let m = forwarded(
        g.udp(L_SG_BAL, INSTANCE_ADDR[SG_B], &input),
        L_SG_BAL,
        addr("203.0.113.10:5062"),
    );
    assert_eq!(rr_uris(&m), [gate_rr("sg-b", L_SG_BAL, "out-1@sg")]);

    // An instance cannot loop a request through the gate itself.
    let input = Req::new(
        "MESSAGE",
        "sip:x@127.0.0.1:5060",
        "out-2@sg",
        "SIP/2.0/UDP 127.0.1.2:5060;branch=z9hG4bKsgb-i2",
    )
    .bytes();
    replied(
        g.udp(L_SG_BAL, INSTANCE_ADDR[SG_B], &input),
        L_SG_BAL,
        INSTANCE_ADDR[SG_B],
        404,
    );
}

#[test]
fn r_sec_1_response_with_a_forged_branch_mac_is_dropped() {
    let g = Gate::std();
    let input = Req::ua("INVITE", "mac-1@ua", "z9hG4bKua-mac1").bytes();
    let (out, fwd) = sent(g.udp(L_SG_BAL, UA, &input));
    let Out::Udp { to: instance, .. } = out else {
        panic!()
    };
    let resp = response_to(&fwd, 180, "Ringing", "uasm");
    // The branch the gate made: prefix, 16 hex digits of key, 16 of MAC.
    let branch = fwd.top_via().unwrap().branch.map(text).unwrap();
    assert_eq!(branch.len(), "z9hG4bK-g".len() + 32, "{branch}");
    let last = branch.chars().last().unwrap();
    let flipped = format!(
        "{}{}",
        &branch[..branch.len() - 1],
        if last == '0' { '1' } else { '0' }
    );
    let forged = Bytes::from(text(&resp).replace(&branch, &flipped));
    assert_eq!(
        handle(&g.core, L_SG_BAL, &instance.to_string(), &forged),
        Action::None
    );
    // A restarted gate (no transaction) still recognises its own branch.
    let fresh = g.restarted();
    let (out, _) = sent(handle(&fresh, L_SG_BAL, &instance.to_string(), &resp));
    assert_eq!(out, udp_out(L_SG_BAL, addr(UA)));
}

#[test]
fn r_sec_1_a_client_sharing_an_instances_ip_is_still_a_client() {
    let g = Gate::std();
    // sg-a listens on INSTANCE_ADDR[0]; a UA on the same host, another port.
    let ip = addr(INSTANCE_ADDR[SG_A]).ip();
    let ua = std::net::SocketAddr::new(ip, 40_123).to_string();
    let call = call_id_for(&g, SG_B, "shared-ip");
    let invite = Req::ua("INVITE", &call, "z9hG4bKshared").bytes();
    // A new dialog addressed to the gate goes by policy, not "outward" by its
    // Request-URI (which is the gate itself).
    forwarded(g.udp(L_SG_BAL, &ua, &invite), L_SG_BAL, inst(SG_B));
}

/// A TCP request from `peer` on `listener`, on connection 9.
fn tcp(g: &Gate, listener: usize, peer: &str, msg: &Bytes) -> Action {
    let inbound = Inbound::Tcp {
        listener,
        conn: 9,
        peer: addr(peer),
    };
    g.core.handle(inbound, msg.clone(), Instant::now())
}

/// Where a request went (over UDP or TCP).
fn sent_to(a: Action) -> std::net::SocketAddr {
    match sent(a) {
        (Out::Tcp { to, .. } | Out::Udp { to, .. }, m) if m.is_request() => to,
        (out, m) => panic!("{out:?}: {}", text(m.raw())),
    }
}

#[test]
fn r_sec_1_a_client_on_an_instances_ip_over_tcp_is_a_client() {
    let g = Gate::std();
    // A UA on sg-a's host, connected from an ephemeral port: not sg-a.
    let ua = format!("{}:40124", addr(INSTANCE_ADDR[SG_A]).ip());
    // A new call to an outside address: an instance's would go there
    // (outward), a client's meets the policy and goes to an sg.
    let call = call_id_for(&g, SG_C, "tcp-shared");
    let mut invite = Req::ua("INVITE", &call, "z9hG4bKtcpshared");
    invite.start = "INVITE sip:bob@198.18.0.5:5060 SIP/2.0".into();
    assert_eq!(sent_to(tcp(&g, L_SG_BAL, &ua, &invite.bytes())), inst(SG_C));
    // An in-dialog NOTIFY with sg-a's token: routed to sg-a by the token,
    // not outward by its Request-URI.
    let notify = Req::new(
        "NOTIFY",
        "sip:alice@198.18.0.6:5062",
        "tcp-shared-2@ua",
        "SIP/2.0/TCP 127.0.1.1:40124;branch=z9hG4bKtcpshared2",
    )
    .tagged("t")
    .add_first("Route", &gate_route("sg-a", L_SG_BAL, "tcp-shared-2@ua"))
    .bytes();
    assert_eq!(sent_to(tcp(&g, L_SG_BAL, &ua, &notify)), inst(SG_A));
}

#[test]
fn r_sec_1_the_instance_over_its_own_connection_or_source_range_goes_outward() {
    let g = Gate::new(&SiteOpts {
        sg_b_sources: r#"["10.9.0.0/24"]"#,
        ..SiteOpts::default()
    });
    let outward = |peer: &str, branch: &str, over_tcp: bool| {
        let mut req = Req::new(
            "INVITE",
            "sip:alice@198.18.0.7:5062",
            &format!("{branch}@sg"),
            &format!("SIP/2.0/TCP 10.9.0.7:5060;branch={branch}"),
        );
        req.start = "INVITE sip:alice@198.18.0.7:5062 SIP/2.0".into();
        let input = req.bytes();
        if over_tcp {
            sent_to(tcp(&g, L_SG_BAL, peer, &input))
        } else {
            sent_to(g.udp(L_SG_BAL, peer, &input))
        }
    };
    let ua = addr("198.18.0.7:5062");
    // On the connection the gate opened to sg-a (its remote address is
    // sg-a's configured one): the instance, so outward.
    assert_eq!(outward(INSTANCE_ADDR[SG_A], "z9hG4bKown1", true), ua);
    // From sg-b's configured source range, any port, TCP or UDP: sg-b.
    assert_eq!(outward("10.9.0.7:34567", "z9hG4bKown2", true), ua);
    assert_eq!(outward("10.9.0.200:5070", "z9hG4bKown3", false), ua);
    // The record-route names the instance that placed the call; TCP from
    // the instance, UDP to the callee: one for each leg (RFC 5658).
    let mut req = Req::new(
        "INVITE",
        "sip:alice@198.18.0.7:5062",
        "own-rr@sg",
        "SIP/2.0/TCP 10.9.0.7:5060;branch=z9hG4bKown4",
    );
    req.start = "INVITE sip:alice@198.18.0.7:5062 SIP/2.0".into();
    let (_, m) = sent(tcp(&g, L_SG_BAL, "10.9.0.7:34568", &req.bytes()));
    let udp = gate_rr("sg-b", L_SG_BAL, "own-rr@sg");
    let tcp = udp.replace(";lr", ";transport=tcp;lr");
    assert_eq!(rr_uris(&m), [udp, tcp]);
    // Outside the range: a client, so to an sg, not outward.
    let to = outward("10.9.1.7:34567", "z9hG4bKown5", true);
    assert!(INSTANCE_ADDR[..3].iter().any(|a| addr(a) == to), "{to}");
}

#[test]
fn r_sec_1_a_token_copied_from_another_dialog_is_403_and_counted() {
    let g = Gate::std();
    // Dialog A is set up through the gate: its Record-Route holds a token.
    let call_a = call_id_for(&g, SG_B, "dlg-a");
    let invite = Req::ua("INVITE", &call_a, "z9hG4bKdlga").bytes();
    let fwd = forwarded(g.udp(L_SG_BAL, UA, &invite), L_SG_BAL, inst(SG_B));
    let rr = rr_uris(&fwd);
    assert_eq!(rr.len(), 1);
    let route = format!("<{}>", rr[0]);
    let bye = |call: &str, branch: &str| {
        Req::ua("BYE", call, branch)
            .tagged("uas-a")
            .set("CSeq", "2 BYE")
            .add_first("Route", &route)
            .bytes()
    };
    // The same token in another dialog (another Call-ID): 403, counted.
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let counted = recorder.handle();
    let a = metrics::with_local_recorder(&recorder, || {
        g.udp(L_SG_BAL, UA, &bye("dlg-b@ua", "z9hG4bKdlgb"))
    });
    let r = replied(a, L_SG_BAL, UA, 403);
    assert!(text(r.raw()).starts_with("SIP/2.0 403 Bad Route Token\r\n"));
    let metrics = counted.render();
    assert!(
        metrics.contains(r#"sipgate_requests_total{method="BYE",outcome="bad_token"} 1"#),
        "{metrics}"
    );
    // In its own dialog it opens, on this gate and on one that restarted
    // (same site secret, R-GW-2).
    forwarded(
        g.udp(L_SG_BAL, UA, &bye(&call_a, "z9hG4bKdlga2")),
        L_SG_BAL,
        inst(SG_B),
    );
    let fresh = g.restarted();
    forwarded(
        handle(&fresh, L_SG_BAL, UA, &bye(&call_a, "z9hG4bKdlga3")),
        L_SG_BAL,
        inst(SG_B),
    );
}
