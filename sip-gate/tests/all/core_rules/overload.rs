//! R-OV-1 and R-OV-2 on the core: which requests the limits refuse, what
//! the refusal looks like, and who is limited as what.

use super::prelude::*;

fn invite(n: &str, via_host: &str) -> Req {
    Req::new(
        "INVITE",
        "sip:+15551234567@gate.example",
        &format!("ov-{n}@p"),
        &format!("SIP/2.0/UDP {via_host};branch=z9hG4bKov{n};rport"),
    )
}

#[test]
fn r_ov_2_over_the_source_limit_503_rate_limited_with_retry_after_in_dialog_still_passes() {
    let o = SiteOpts {
        overload: "per_source_rate = 1\nper_source_burst = 2\nretry_after_s = 9\nretry_after_jitter_s = 0\n",
        ..SiteOpts::default()
    };
    let g = Gate::new(&o);
    for n in ["a", "b"] {
        dest(
            g.udp(L_SG_BAL, UA, &invite(n, "203.0.113.10:5062").bytes()),
            L_SG_BAL,
        );
    }
    let r = replied(
        g.udp(L_SG_BAL, UA, &invite("c", "203.0.113.10:5062").bytes()),
        L_SG_BAL,
        UA,
        503,
    );
    assert_eq!(other_header(&r, "Retry-After").as_deref(), Some("9"));
    assert!(String::from_utf8_lossy(r.raw()).starts_with("SIP/2.0 503 Rate Limited\r\n"));
    // The same source, inside a dialog (the gate's token proves it,
    // R-SEC-4): a re-INVITE and a BYE pass.
    for (m, n) in [("INVITE", "d"), ("BYE", "e")] {
        let req = Req::ua(m, "ov-a@p", &format!("z9hG4bKov{n}"))
            .tagged("callee")
            .add_first("Route", &gate_route("sg-a", L_SG_BAL, "ov-a@p"));
        dest(g.udp(L_SG_BAL, UA, &req.bytes()), L_SG_BAL);
    }
    // An invented To tag proves nothing: a re-INVITE without the token is
    // new work over the limit.
    let forged = Req::ua("INVITE", "ov-b@p", "z9hG4bKovg").tagged("callee");
    replied(g.udp(L_SG_BAL, UA, &forged.bytes()), L_SG_BAL, UA, 503);
    // Another source has its own bucket.
    dest(
        g.udp(
            L_SG_BAL,
            "203.0.113.99:5060",
            &invite("f", "203.0.113.99:5060").bytes(),
        ),
        L_SG_BAL,
    );
}

/// R-OV-1 for REGISTER: an office NAT (many phones behind one address)
/// re-registering at once is let through past its address's new-dialog
/// limit, within the REGISTER allowance of its own; its calls keep theirs;
/// past the allowance, 503 Rate Limited with Retry-After.
#[test]
fn r_ov_1_an_office_nat_re_registers_within_its_own_allowance_and_its_calls_keep_theirs() {
    let o = SiteOpts {
        overload: "per_source_rate = 1\nper_source_burst = 1\nper_source_register_rate = 1\nper_source_register_burst = 20\nretry_after_s = 9\nretry_after_jitter_s = 0\n",
        ..SiteOpts::default()
    };
    let g = Gate::new(&o);
    let register = |n: u32| {
        Req::new(
            "REGISTER",
            "sip:example.com",
            &format!("reg-{n}@office"),
            &format!("SIP/2.0/UDP 203.0.113.10:5062;branch=z9hG4bKreg{n};rport"),
        )
        .to(&format!("sip:phone{n}@example.com"))
        .set("Contact", &format!("<sip:phone{n}@10.0.0.{n}:5060>"))
        .set("Expires", "600")
        .bytes()
    };
    // Twenty phones behind one address: all forwarded.
    for n in 0..20 {
        dest(g.udp(L_SG_BAL, UA, &register(n)), L_SG_BAL);
    }
    // The address's calls have their own bucket: one call (its burst).
    dest(
        g.udp(L_SG_BAL, UA, &invite("nat", "203.0.113.10:5062").bytes()),
        L_SG_BAL,
    );
    // The twenty-first REGISTER is over the allowance.
    let r = replied(g.udp(L_SG_BAL, UA, &register(20)), L_SG_BAL, UA, 503);
    assert_eq!(other_header(&r, "Retry-After").as_deref(), Some("9"));
    assert!(String::from_utf8_lossy(r.raw()).starts_with("SIP/2.0 503 Rate Limited\r\n"));
}

#[test]
fn r_ov_2_an_esg_trunk_is_limited_as_its_account_not_per_source_address() {
    let o = SiteOpts {
        overload: "per_source_rate = 1\nper_source_burst = 1\nper_account_rate = 1\nper_account_burst = 3\n",
        ..SiteOpts::default()
    };
    let g = Gate::new(&o);
    // carrier-x's trunk (its source network): three calls, the account's
    // burst, though one address; the fourth is over the account's limit.
    for n in 0..3 {
        let req = invite(&format!("x{n}"), "192.0.2.10:5060");
        dest(g.udp(L_ESG_BAL, CARRIER_X, &req.bytes()), L_ESG_BAL);
    }
    replied(
        g.udp(
            L_ESG_BAL,
            CARRIER_X,
            &invite("x3", "192.0.2.10:5060").bytes(),
        ),
        L_ESG_BAL,
        CARRIER_X,
        503,
    );
    // carrier-y has its own account bucket.
    dest(
        g.udp(
            L_ESG_BAL,
            CARRIER_Y,
            &invite("y", "198.51.100.5:5060").bytes(),
        ),
        L_ESG_BAL,
    );
    // Any other source on the provider leg is limited per address.
    let other = "198.18.9.9:5060";
    dest(
        g.udp(L_ESG_BAL, other, &invite("o1", other).bytes()),
        L_ESG_BAL,
    );
    replied(
        g.udp(L_ESG_BAL, other, &invite("o2", other).bytes()),
        L_ESG_BAL,
        other,
        503,
    );
}

#[test]
fn r_ov_2_drop_answers_nothing_and_cancel_ack_are_never_limited() {
    let o = SiteOpts {
        overload: "per_source_rate = 1\nper_source_burst = 1\naction = \"drop\"\n",
        ..SiteOpts::default()
    };
    let g = Gate::new(&o);
    dest(
        g.udp(L_SG_BAL, UA, &invite("a", "203.0.113.10:5062").bytes()),
        L_SG_BAL,
    );
    assert_eq!(
        g.udp(L_SG_BAL, UA, &invite("b", "203.0.113.10:5062").bytes()),
        Action::None
    );
    // The CANCEL of the admitted INVITE (no To tag) follows it.
    let cancel = invite("a", "203.0.113.10:5062")
        .set("CSeq", "1 CANCEL")
        .bytes();
    let cancel = Bytes::from(String::from_utf8_lossy(&cancel).replacen("INVITE", "CANCEL", 1));
    dest(g.udp(L_SG_BAL, UA, &cancel), L_SG_BAL);
}
