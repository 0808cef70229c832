//! The esg guard: 503 only on the provider leg, for multi-instance accounts,
//! without exceptions (R-ESG-1 .. R-ESG-4).

use super::prelude::*;

#[test]
fn r_esg_1_2_3_esg_guard_refuses_only_multi_instance_on_provider_leg() {
    let o = SiteOpts::default();
    let g = Gate::new(&o);
    g.drain_servers(&["srv-a"]);
    let inv = |n: &str| {
        Req::new(
            "INVITE",
            "sip:+15551234567@gate.example",
            &format!("esg-{n}@p"),
            &format!("SIP/2.0/UDP 203.0.113.10:5062;branch=z9hG4bKesg{n};rport"),
        )
    };
    // R-ESG-1/2: a multi-instance account on the provider leg: 503.
    for method in ["INVITE", "REGISTER", "SUBSCRIBE"] {
        let input = Req::new(
            method,
            "sip:+15551234567@gate.example",
            &format!("esg-m-{method}@p"),
            "SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bKesgm;rport",
        )
        .bytes();
        let r = replied(
            g.udp(L_ESG_GUARD, CARRIER_X, &input),
            L_ESG_GUARD,
            CARRIER_X,
            503,
        );
        let ra: u32 = other_header(&r, "Retry-After").unwrap().parse().unwrap();
        assert!((30..=40).contains(&ra));
        assert!(r.to_tag().is_some());
    }
    // Matched by From domain from an unlisted source: still carrier-x.
    let input = inv("dom").from("sip:trunk@carrier-x.example").bytes();
    replied(g.udp(L_ESG_GUARD, UA, &input), L_ESG_GUARD, UA, 503);
    // R-ESG-2: single-instance account: passes.
    forwarded(
        g.udp(L_ESG_GUARD, CARRIER_Y, &inv("y").bytes()),
        L_ESG_GUARD,
        inst(ESG_A),
    );
    // No account at all: passes.
    forwarded(
        g.udp(L_ESG_GUARD, "198.18.9.9:5060", &inv("none").bytes()),
        L_ESG_GUARD,
        inst(ESG_A),
    );
    // R-ESG-3: an account exception (user `noc`) and an instance exception
    // (source 192.0.2.77) let a multi-instance request through.
    forwarded(
        g.udp(
            L_ESG_GUARD,
            CARRIER_X,
            &inv("noc").from("sip:noc@carrier-x.example").bytes(),
        ),
        L_ESG_GUARD,
        inst(ESG_A),
    );
    forwarded(
        g.udp(L_ESG_GUARD, "192.0.2.77:5060", &inv("exc").bytes()),
        L_ESG_GUARD,
        inst(ESG_A),
    );
    // R-ESG-1/3: the inside leg keeps taking new work, same account.
    forwarded(
        g.udp(L_ESG_IN, CARRIER_X, &inv("in").bytes()),
        L_ESG_IN,
        inst(ESG_A),
    );
    let input = inv("in2")
        .set("Via", "SIP/2.0/UDP 198.18.1.1:5060;branch=z9hG4bKin2")
        .bytes();
    forwarded(
        g.udp(L_ESG_IN, "198.18.1.1:5060", &input),
        L_ESG_IN,
        inst(ESG_A),
    );
    // R-ESG-4 (R-SG-4): in-dialog passes on the provider leg.
    let input = Req::new(
        "BYE",
        "sip:+15551234567@gate.example",
        "esg-dlg@p",
        "SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bKesgdlg",
    )
    .tagged("t")
    .add_first("Route", &gate_route("esg-a", L_ESG_GUARD, "esg-dlg@p"))
    .bytes();
    forwarded(
        g.udp(L_ESG_GUARD, CARRIER_X, &input),
        L_ESG_GUARD,
        inst(ESG_A),
    );
    // R-ESG-4 (R-SG-2): with esg-b draining too, no 503.
    g.drain_servers(&["srv-a", "srv-b"]);
    let input = Req::new(
        "INVITE",
        "sip:+15551234567@gate.example",
        "esg-all@p",
        "SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bKesgall",
    )
    .bytes();
    forwarded(
        g.udp(L_ESG_GUARD, CARRIER_X, &input),
        L_ESG_GUARD,
        inst(ESG_A),
    );
}

#[test]
fn r_esg_1_inside_leg_request_from_an_sg_reaches_the_esg() {
    // An sg (a configured instance of another service) sends a new call to
    // the esg's inside leg: it is new work for the esg, not a request the
    // esg sends outward.
    let g = Gate::std();
    g.drain_servers(&["srv-a"]);
    let input = Req::new(
        "INVITE",
        "sip:+15551234567@127.0.0.1:5072",
        "sg-to-esg@sg",
        "SIP/2.0/UDP 127.0.1.2:5060;branch=z9hG4bKsg2esg",
    )
    .bytes();
    let m = forwarded(
        g.udp(L_ESG_IN, INSTANCE_ADDR[SG_B], &input),
        L_ESG_IN,
        inst(ESG_A),
    );
    assert_eq!(rr_uris(&m), [gate_rr("esg-a", L_ESG_IN, "sg-to-esg@sg")]);
}
