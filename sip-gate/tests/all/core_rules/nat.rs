//! Subscribers behind NAT: the Path and flow token on a subscriber's
//! REGISTER (RFC 3327, RFC 5626 5.2), requests from an instance sent into
//! that flow (RFC 5626 5.3) or answered 430 Flow Failed, forged tokens
//! refused (R-SEC-2), and flows across a drain (R-SG-4).

use std::net::SocketAddr;

use sip_gate::{ConnId, Core};

use super::prelude::*;

/// Where the subscriber's NAT maps it (what the gate sees).
const NAT: &str = "203.0.113.10:40000";
/// The Request-URI an instance writes: the subscriber's Contact, a private
/// address nobody outside its NAT reaches.
const PRIVATE_CONTACT: &str = "sip:alice@192.168.1.20:5060";

fn tcp(core: &Core, listener: usize, conn: ConnId, peer: &str, msg: &Bytes) -> Action {
    core.handle(
        Inbound::Tcp {
            listener,
            conn,
            peer: addr(peer),
        },
        msg.clone(),
        Instant::now(),
    )
}

fn register(call_id: &str) -> Bytes {
    Req::ua("REGISTER", call_id, &fresh_branch())
        .set("Expires", "600")
        .bytes()
}

/// The gate's Path on a forwarded REGISTER, and where the REGISTER went.
fn path_of(a: Action) -> (String, SocketAddr, SipMessage) {
    let (out, m) = sent(a);
    assert!(m.is_request(), "{}", text(m.raw()));
    let to = match out {
        Out::Udp { to, .. } | Out::Tcp { to, .. } => to,
        other => panic!("REGISTER into a flow: {other:?}"),
    };
    let paths: Vec<String> = m
        .headers()
        .iter()
        .filter(|f| f.name == HeaderName::Path)
        .map(|f| text(m.value(f)))
        .collect();
    assert_eq!(paths.len(), 1, "{}", text(m.raw()));
    (paths[0].clone(), to, m)
}

/// A request an instance at `from` sends toward the subscriber, routed
/// by `route` (the stored Path, or a dialog's route set).
fn from_instance(method: &str, call_id: &str, from: SocketAddr, route: &str) -> Bytes {
    let mut r = Req::new(
        method,
        PRIVATE_CONTACT,
        call_id,
        &format!("SIP/2.0/UDP {from};branch={};rport", fresh_branch()),
    )
    .add_first("Route", route);
    if method != "INVITE" {
        r = r.tagged("sg-tag");
    }
    r.bytes()
}

fn instance_index(a: SocketAddr) -> usize {
    (0..5).find(|&i| inst(i) == a).expect("an instance")
}

#[test]
fn nat_path_only_on_subscriber_listeners_and_only_on_register() {
    let g = Gate::std();
    // UDP on the balancing subscriber listener.
    let input = register("path-1@ua");
    let (path, _, m) = path_of(g.udp(L_SG_BAL, NAT, &input));
    assert!(path.starts_with("<sip:f1."), "{path}");
    assert!(path.ends_with("@127.0.0.1:5060;lr>"), "{path}");
    assert_untouched(&input, &m);
    // Same flow, same token (a re-REGISTER keeps one binding's Path).
    let (again, _, _) = path_of(g.udp(L_SG_BAL, NAT, &register("path-1@ua")));
    assert_eq!(again, path);
    // Another source port is another flow.
    let (other, _, _) = path_of(g.udp(L_SG_BAL, "203.0.113.10:40001", &register("path-2@ua")));
    assert_ne!(other, path);
    // The guard listener (also `subscriber`) names itself.
    let (guard, to, _) = path_of(g.udp(L_SG_GUARD, NAT, &register("path-3@ua")));
    assert!(guard.ends_with("@127.0.0.1:5061;lr>"), "{guard}");
    assert_eq!(to, inst(SG_A));
    // TCP: the hop to the instance is TCP, and the Path says so.
    let (t, _, _) = path_of(tcp(&g.core, L_SG_BAL, 9, NAT, &register("path-4@ua")));
    assert!(t.ends_with("@127.0.0.1:5060;transport=tcp;lr>"), "{t}");
    // Not a REGISTER: no Path.
    for method in ["INVITE", "OPTIONS", "SUBSCRIBE"] {
        let input = Req::ua(method, &format!("path-{method}@ua"), &fresh_branch()).bytes();
        let m = sent(g.udp(L_SG_BAL, NAT, &input)).1;
        assert!(m.fields(HeaderName::Path).next().is_none(), "{method}");
    }
    // A provider listener: no Path.
    let input = Req::ua("REGISTER", "path-esg@ua", &fresh_branch())
        .set("Via", "SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bKesgpath")
        .bytes();
    let m = sent(g.udp(L_ESG_BAL, CARRIER_X, &input)).1;
    assert!(m.is_request(), "{}", text(m.raw()));
    assert!(m.fields(HeaderName::Path).next().is_none());
}

#[test]
fn nat_udp_flow_request_reaches_the_registered_source_and_the_dialog_follows() {
    let g = Gate::std();
    let (path, sg, _) = path_of(g.udp(L_SG_BAL, NAT, &register("udp-reg@ua")));
    let sg_i = instance_index(sg);
    let sg_peer = INSTANCE_ADDR[sg_i];
    // The instance calls the subscriber through the gate's Path.
    let invite = from_instance("INVITE", "nat-call-1@sg", sg, &path);
    let m = forwarded(g.udp(L_SG_BAL, sg_peer, &invite), L_SG_BAL, addr(NAT));
    assert!(route_uris(&m).is_empty(), "{}", text(m.raw()));
    // The Request-URI is the Contact as registered.
    assert_eq!(m.request_uri(), Some(PRIVATE_CONTACT.as_bytes()));
    assert_gate_via(&m, L_SG_BAL);
    // Subscriber's side first (names the instance), then the instance's
    // side (names the flow).
    let rr = rr_uris(&m);
    assert_eq!(rr.len(), 2, "{rr:?}");
    let sg_id = &g.config.instances[sg_i].id;
    assert_eq!(rr[0], gate_rr(sg_id, L_SG_BAL, "nat-call-1@sg"));
    assert!(rr[1].starts_with("sip:f1."), "{rr:?}");
    // The subscriber's 200 goes back to the instance.
    let ok = response_to(&m, 200, "OK", "sub-tag");
    let (out, r) = sent(g.udp(L_SG_BAL, NAT, &ok));
    assert_eq!(out, udp_out(L_SG_BAL, sg));
    assert_eq!(r.code(), Some(200));
    // The instance's BYE (its route set is the Record-Route reversed).
    let bye = from_instance(
        "BYE",
        "nat-call-1@sg",
        sg,
        &format!("<{}>, <{}>", rr[1], rr[0]),
    );
    let m = forwarded(g.udp(L_SG_BAL, sg_peer, &bye), L_SG_BAL, addr(NAT));
    assert!(route_uris(&m).is_empty(), "{}", text(m.raw()));
    // The subscriber's BYE (route set in Record-Route order) reaches the instance.
    let bye = Req::ua("BYE", "nat-call-1@sg", &fresh_branch())
        .tagged("sg-tag")
        .add_first("Route", &format!("<{}>, <{}>", rr[0], rr[1]))
        .bytes();
    let m = forwarded(g.udp(L_SG_BAL, NAT, &bye), L_SG_BAL, sg);
    assert!(route_uris(&m).is_empty(), "{}", text(m.raw()));
}

#[test]
fn nat_tcp_flow_uses_the_subscribers_connection_and_430_once_it_is_gone() {
    let g = Gate::std();
    let conn: ConnId = 41;
    let inbound = Inbound::Tcp {
        listener: L_SG_BAL,
        conn,
        peer: addr(NAT),
    };
    g.core.tcp_opened(inbound);
    let (path, sg, reg) = path_of(tcp(&g.core, L_SG_BAL, conn, NAT, &register("tcp-reg@ua")));
    let sg_peer = INSTANCE_ADDR[instance_index(sg)];
    // The registrar's 2xx holds the connection while it is idle.
    let now = Instant::now();
    assert!(!g.core.tcp_held(conn, now));
    let ok = Bytes::from(text(&response_to(&reg, 200, "OK", "reg-tag")).replace(
        "Content-Length: 0",
        "Contact: <sip:alice@192.168.1.20:5060>;expires=600\r\nContent-Length: 0",
    ));
    let (out, _) = sent(g.udp(L_SG_BAL, sg_peer, &ok));
    assert!(
        matches!(out, Out::Tcp { conn: Some(c), .. } if c == conn),
        "{out:?}"
    );
    assert!(g.core.tcp_held(conn, now));
    assert!(!g
        .core
        .tcp_held(conn, now + std::time::Duration::from_secs(601)));

    // Into the subscriber's own connection, never a new one.
    let invite = from_instance("INVITE", "tcp-call@sg", sg, &path);
    let (out, m) = sent(g.udp(L_SG_BAL, sg_peer, &invite));
    assert_eq!(
        out,
        Out::Flow {
            listener: L_SG_BAL,
            conn,
            to: addr(NAT)
        }
    );
    assert_eq!(text(m.top_via().unwrap().transport), "TCP");
    // A restarted gate has no such connection (its ids start again).
    let restarted = g.restarted();
    restarted.tcp_opened(inbound);
    let r = replied(
        handle(
            &restarted,
            L_SG_BAL,
            sg_peer,
            &from_instance("INVITE", "tcp-call-2@sg", sg, &path),
        ),
        L_SG_BAL,
        sg_peer,
        430,
    );
    assert!(text(r.raw()).starts_with("SIP/2.0 430 Flow Failed\r\n"));
    // The connection closed: 430, nothing sent toward the subscriber.
    g.core.tcp_closed(conn);
    assert!(!g.core.tcp_held(conn, now));
    let r = replied(
        g.udp(
            L_SG_BAL,
            sg_peer,
            &from_instance("INVITE", "tcp-call-3@sg", sg, &path),
        ),
        L_SG_BAL,
        sg_peer,
        430,
    );
    assert!(text(r.raw()).starts_with("SIP/2.0 430 Flow Failed\r\n"));
    // A connection on a provider listener is no flow.
    g.core.tcp_opened(Inbound::Tcp {
        listener: L_ESG_BAL,
        conn: 42,
        peer: addr(NAT),
    });
    assert!(!g.core.tcp_held(42, now));
}

#[test]
fn r_sec_2_forged_flow_token_is_403_and_nothing_forwarded() {
    let g = Gate::std();
    let (path, sg, _) = path_of(g.udp(L_SG_BAL, NAT, &register("forged-reg@ua")));
    let sg_peer = INSTANCE_ADDR[instance_index(sg)];
    let token = path
        .trim_start_matches("<sip:")
        .split('@')
        .next()
        .unwrap()
        .to_string();
    // The token of another site, for the same flow.
    let other_site = {
        let o =
            site_toml(&SiteOpts::default()).replace(SECRET, "another-site-secret-0123456789xyz");
        let config = std::sync::Arc::new(
            ringsync::config::SiteConfig::from_str_at(&o, std::path::Path::new("/x/o.toml"))
                .unwrap(),
        );
        let core = Core::new(config.clone(), ringsync::state::DrainState::new(config)).unwrap();
        path_of(handle(&core, L_SG_BAL, NAT, &register("forged-reg@ua"))).0
    };
    assert_ne!(other_site, path);
    // One flipped digit in the flow (another port), the MAC kept.
    let flipped = {
        let mut b = token.clone().into_bytes();
        let i = "f1.".len() + 18;
        b[i] = if b[i] == b'0' { b'1' } else { b'0' };
        String::from_utf8(b).unwrap()
    };
    for route in [
        other_site,
        format!("<sip:{flipped}@127.0.0.1:5060;lr>"),
        // Moved onto another listener's URI (another node's address works alike).
        format!("<sip:{token}@127.0.0.1:5061;lr>"),
        "<sip:f1.00000004cb0071079c40.00000000000000000000@127.0.0.1:5060;lr>".into(),
        "<sip:f1.garbage@127.0.0.1:5060;lr>".into(),
    ] {
        let r = replied(
            g.udp(
                L_SG_BAL,
                sg_peer,
                &from_instance("INVITE", "forged@sg", sg, &route),
            ),
            L_SG_BAL,
            sg_peer,
            403,
        );
        assert!(
            text(r.raw()).starts_with("SIP/2.0 403 Bad Flow Token\r\n"),
            "{route}"
        );
    }
    // A client that copies a Path into its own request steers nothing: only
    // an instance sends into a flow, so it gets 403 and nothing is
    // forwarded (R-SEC-1; routed as new work it went back to an sg, a loop
    // through the gate when the sender was an sg missing from `sources`).
    let input = Req::ua("INVITE", "copied-path@ua", &fresh_branch())
        .add_first("Route", &path)
        .bytes();
    let r = replied(
        g.udp(L_SG_BAL, "198.18.9.9:5060", &input),
        L_SG_BAL,
        "198.18.9.9:5060",
        403,
    );
    assert!(
        text(r.raw()).starts_with("SIP/2.0 403 Flow Route Not From An Instance\r\n"),
        "{}",
        text(r.raw())
    );
}

#[test]
fn nat_a_flow_of_another_gate_node_is_430_here() {
    let g = Gate::std();
    let (path, sg, _) = path_of(g.udp(L_SG_BAL, NAT, &register("node-reg@ua")));
    let sg_peer = INSTANCE_ADDR[instance_index(sg)];
    // The same token under another node's address: that node holds the flow.
    let elsewhere = path.replace("@127.0.0.1:5060", "@127.0.9.9:5060");
    let r = replied(
        g.udp(
            L_SG_BAL,
            sg_peer,
            &from_instance("INVITE", "node@sg", sg, &elsewhere),
        ),
        L_SG_BAL,
        sg_peer,
        430,
    );
    assert!(text(r.raw()).starts_with("SIP/2.0 430 Flow Failed\r\n"));
}

#[test]
fn r_sg_4_flows_to_a_draining_sg_stay_usable_and_a_reregister_keeps_its_flow() {
    let g = Gate::std();
    let (path, sg, _) = path_of(g.udp(L_SG_BAL, NAT, &register("drain-reg@ua")));
    let sg_i = instance_index(sg);
    let sg_peer = INSTANCE_ADDR[sg_i];
    let server = ["srv-a", "srv-b", "srv-c"][sg_i];
    g.drain_servers(&[server]);
    // The draining sg still reaches its registered subscriber.
    let invite = from_instance("INVITE", "drain-call@sg", sg, &path);
    forwarded(g.udp(L_SG_BAL, sg_peer, &invite), L_SG_BAL, addr(NAT));
    // The guard of a draining sg answers a re-REGISTER 503 (R-SG-1) ...
    if sg_i == SG_A {
        replied(
            g.udp(L_SG_GUARD, NAT, &register("drain-reg@ua")),
            L_SG_GUARD,
            NAT,
            503,
        );
    }
    // ... and the balancer moves it to another sg, with the same flow.
    let (moved, to, _) = path_of(g.udp(L_SG_BAL, NAT, &register("drain-reg@ua")));
    assert_ne!(to, sg);
    assert_eq!(moved, path);
    let new_peer = INSTANCE_ADDR[instance_index(to)];
    let invite = from_instance("INVITE", "drain-call-2@sg", to, &moved);
    forwarded(g.udp(L_SG_BAL, new_peer, &invite), L_SG_BAL, addr(NAT));
}

#[test]
fn nat_subscriber_with_ob_gets_its_flow_in_the_record_route() {
    let g = Gate::std();
    // RFC 5626 4.2.1: `ob` in the Contact asks for the flow in the dialog.
    let input = Req::ua("INVITE", "ob-call@ua", &fresh_branch())
        .set("Contact", "<sip:alice@192.168.1.20:5060;ob>")
        .bytes();
    let (out, m) = sent(g.udp(L_SG_BAL, NAT, &input));
    let Out::Udp { to: sg, .. } = out else {
        panic!("{out:?}")
    };
    let sg_i = instance_index(sg);
    let rr = rr_uris(&m);
    assert_eq!(rr.len(), 2, "{rr:?}");
    // The instance's side (top) names the flow, the subscriber's the instance.
    assert!(rr[0].starts_with("sip:f1."), "{rr:?}");
    assert_eq!(
        rr[1],
        gate_rr(&g.config.instances[sg_i].id, L_SG_BAL, "ob-call@ua")
    );
    // The instance's BYE (route set in Record-Route order, it is the UAS)
    // reaches the subscriber's NAT address, not its private Contact.
    let bye = from_instance(
        "BYE",
        "ob-call@ua",
        sg,
        &format!("<{}>, <{}>", rr[0], rr[1]),
    );
    forwarded(
        g.udp(L_SG_BAL, INSTANCE_ADDR[sg_i], &bye),
        L_SG_BAL,
        addr(NAT),
    );
    // The subscriber's BYE (reversed) reaches the instance.
    let bye = Req::ua("BYE", "ob-call@ua", &fresh_branch())
        .tagged("sg-tag")
        .add_first("Route", &format!("<{}>, <{}>", rr[1], rr[0]))
        .bytes();
    forwarded(g.udp(L_SG_BAL, NAT, &bye), L_SG_BAL, sg);
}
