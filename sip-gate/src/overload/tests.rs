//! The classifier and the admission order of R-OV-1/R-OV-2.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use bytes::Bytes;
use proptest::prelude::*;
use ringsync::config::{LimitAction, OverloadConfig};

use super::*;
use crate::message::SipMessage;

fn scan(text: &str) -> SipMessage {
    SipMessage::scan(Bytes::from(text.replace('\n', "\r\n"))).expect("scans")
}

fn request(method: &str, to_tag: Option<&str>) -> String {
    let tag = to_tag.map(|t| format!(";tag={t}")).unwrap_or_default();
    format!(
        "{method} sip:bob@example.com SIP/2.0\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK-1\nFrom: <sip:alice@example.com>;tag=a1\nTo: <sip:bob@example.com>{tag}\nCall-ID: c1\nCSeq: 1 {method}\nMax-Forwards: 70\nContent-Length: 0\n\n"
    )
}

#[test]
fn r_ov_1_classifies_new_dialogs_last_and_everything_else_first() {
    for m in ["INVITE", "SUBSCRIBE", "OPTIONS", "MESSAGE", "PUBLISH"] {
        assert_eq!(class_of(&scan(&request(m, None))), Class::NewDialog, "{m}");
        assert!(Class::NewDialog.is_new());
        assert_eq!(
            class_of(&scan(&request(m, Some("b2")))),
            Class::InDialog,
            "{m}"
        );
    }
    // R-OV-1 for REGISTER: new work of its own class.
    assert_eq!(class_of(&scan(&request("REGISTER", None))), Class::Register);
    assert!(Class::Register.is_new());
    assert!(!Class::InDialog.is_new() && !Class::Response.is_new());
    for m in ["BYE", "NOTIFY", "INFO", "UPDATE", "PRACK", "REFER"] {
        assert_eq!(
            class_of(&scan(&request(m, Some("b2")))),
            Class::InDialog,
            "{m}"
        );
    }
    // R-SEC-4: REGISTER is new work whatever its To tag says.
    assert_eq!(
        class_of(&scan(&request("REGISTER", Some("b2")))),
        Class::Register
    );
    // CANCEL never has a To tag, and an ACK belongs to its INVITE.
    assert_eq!(class_of(&scan(&request("CANCEL", None))), Class::InDialog);
    assert_eq!(class_of(&scan(&request("ACK", None))), Class::InDialog);
    let response = "SIP/2.0 200 OK\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK-1\nFrom: <sip:alice@example.com>;tag=a1\nTo: <sip:bob@example.com>\nCall-ID: c1\nCSeq: 1 INVITE\nContent-Length: 0\n\n";
    assert_eq!(class_of(&scan(response)), Class::Response);
}

proptest! {
    /// R-OV-1: whatever the method, a request with a To tag (but REGISTER),
    /// an ACK, a CANCEL and every response is ordered first in a batch (the
    /// core still judges each request, R-SEC-4).
    #[test]
    fn r_ov_1_only_requests_without_to_tag_are_new_dialogs(
        method in "[A-Z]{3,10}",
        tag in proptest::option::of("[a-z0-9]{1,12}"),
    ) {
        let msg = scan(&request(&method, tag.as_deref()));
        let class = class_of(&msg);
        let new = method == "REGISTER" || (tag.is_none() && method != "ACK" && method != "CANCEL");
        prop_assert_eq!(class.is_new(), new, "{} {:?}", method, tag);
        prop_assert_eq!(class == Class::Register, method == "REGISTER");
        let response = format!("SIP/2.0 180 Ringing\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK-1\nFrom: <sip:a@x>;tag=a1\nTo: <sip:b@x>\nCall-ID: c1\nCSeq: 1 {method}\nContent-Length: 0\n\n");
        prop_assert_eq!(class_of(&scan(&response)), Class::Response);
    }
}

fn config(f: impl FnOnce(&mut OverloadConfig)) -> OverloadConfig {
    let mut c = OverloadConfig::default();
    f(&mut c);
    c
}

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));

#[test]
fn r_ov_1_a_worker_behind_refuses_new_dialogs_without_spending_tokens() {
    let o = Overload::new(&config(|c| c.per_source_burst = 1), 0, Instant::now());
    let now = Instant::now();
    assert_eq!(
        o.admit(true, Some(A), None, false, now),
        Verdict::Reject(Why::Deadline)
    );
    assert_eq!(o.admit(false, Some(A), None, false, now), Verdict::Pass);
}

#[test]
fn r_ov_1_the_gate_capacity_is_shared_and_refills() {
    let c = config(|c| {
        c.new_dialogs_per_s = 10;
        c.new_dialogs_burst = 2;
        c.per_source_rate = 0;
    });
    let now = Instant::now();
    let o = Overload::new(&c, 0, now);
    assert_eq!(o.admit(false, Some(A), None, false, now), Verdict::Pass);
    assert_eq!(o.admit(false, Some(B), None, false, now), Verdict::Pass);
    assert_eq!(
        o.admit(false, None, None, false, now),
        Verdict::Reject(Why::Capacity)
    );
    let later = now + Duration::from_millis(100);
    assert_eq!(o.admit(false, None, None, false, later), Verdict::Pass);
}

#[test]
fn r_ov_2_one_source_over_its_limit_leaves_the_others_their_share() {
    let c = config(|c| {
        c.per_source_rate = 1;
        c.per_source_burst = 3;
        c.new_dialogs_per_s = 10;
        c.new_dialogs_burst = 5;
    });
    let now = Instant::now();
    let o = Overload::new(&c, 0, now);
    let a: Vec<_> = (0..10)
        .map(|_| o.admit(false, Some(A), None, false, now))
        .collect();
    assert_eq!(a.iter().filter(|v| **v == Verdict::Pass).count(), 3);
    assert!(a[3..].iter().all(|v| *v == Verdict::Reject(Why::Source)));
    // B still gets the gate's remaining capacity: A's refusals took none.
    assert_eq!(o.admit(false, Some(B), None, false, now), Verdict::Pass);
    assert_eq!(o.admit(false, Some(B), None, false, now), Verdict::Pass);
    // Instances (no source) are never limited per source.
    assert_eq!(
        o.admit(false, None, None, false, now),
        Verdict::Reject(Why::Capacity)
    );
}

#[test]
fn r_ov_2_accounts_have_their_own_limit_and_drop_is_silent() {
    let c = config(|c| {
        c.per_account_rate = 1;
        c.per_account_burst = 2;
        c.action = LimitAction::Drop;
    });
    let now = Instant::now();
    let o = Overload::new(&c, 2, now);
    assert!(o.limits_accounts());
    let v: Vec<_> = (0..3)
        .map(|i| {
            o.admit(
                false,
                Some(IpAddr::V4(Ipv4Addr::from(i))),
                Some(1),
                false,
                now,
            )
        })
        .collect();
    assert_eq!(
        v,
        [Verdict::Pass, Verdict::Pass, Verdict::Drop(Why::Account)]
    );
    assert_eq!(o.admit(false, Some(A), Some(0), false, now), Verdict::Pass);
    // The deadline is R-OV-1's: always a 503, never a silent drop.
    assert_eq!(
        o.admit(true, Some(A), Some(0), false, now),
        Verdict::Reject(Why::Deadline)
    );
}

#[test]
fn r_ov_1_the_intake_meter_is_behind_past_the_deadline_or_after_an_overflow() {
    let mut m = IntakeMeter::new(Duration::from_millis(200));
    let t0 = Instant::now();
    m.dropped(None, t0);
    assert!(!m.behind(None, t0));
    assert!(!m.behind(Some(Duration::from_millis(150)), t0));
    assert!(m.behind(Some(Duration::from_millis(250)), t0));
    // The kernel dropped datagrams: behind for one deadline.
    m.dropped(Some(7), t0);
    assert!(m.behind(Some(Duration::ZERO), t0));
    m.dropped(Some(7), t0 + Duration::from_millis(100));
    assert!(m.behind(None, t0 + Duration::from_millis(100)));
    assert!(!m.behind(None, t0 + Duration::from_millis(201)));
}

#[test]
fn r_ov_1_responses_ack_cancel_and_in_dialog_requests_go_first_in_a_batch() {
    let msg = |start: &str, to: &str, call: &str| {
        let method = start.split(' ').next().unwrap();
        scan(&format!(
            "{start}\nVia: SIP/2.0/UDP 127.0.0.1;branch=z9hG4bK1\nFrom: <sip:a@x>;tag=1\nTo: {to}\nCall-ID: {call}\nCSeq: 1 {method}\nMax-Forwards: 70\nContent-Length: 0\n\n"
        ))
    };
    let req = |method: &str, to: &str| msg(&format!("{method} sip:b@x SIP/2.0"), to, "c");
    let none: [&SipMessage; 0] = [];
    assert!(first(&msg("SIP/2.0 200 OK", "<sip:b@x>;tag=2", "c"), none));
    assert!(first(&req("BYE", "<sip:b@x>;tag=2"), none));
    assert!(first(&req("INVITE", "<sip:b@x>;tag=2"), none));
    assert!(first(&req("ACK", "<sip:b@x>"), none));
    assert!(first(&req("CANCEL", "<sip:b@x>"), none));
    assert!(!first(&req("INVITE", "<sip:b@x>"), none));
    assert!(!first(&req("OPTIONS", "<sip:b@x>"), none));
    // Put off behind a new dialog of its own call, not of another call.
    let put_off = [msg("INVITE sip:b@x SIP/2.0", "<sip:b@x>", "other")];
    assert!(first(&req("ACK", "<sip:b@x>;tag=2"), &put_off));
    let put_off = [msg("INVITE sip:b@x SIP/2.0", "<sip:b@x>", "c")];
    assert!(!first(&req("ACK", "<sip:b@x>;tag=2"), &put_off));
    assert!(!first(
        &msg("SIP/2.0 200 OK", "<sip:b@x>;tag=2", "c"),
        &put_off
    ));
}

#[test]
fn r_ov_1_batch_sizes_are_counted_in_powers_of_two_up_to_the_bound() {
    let labels: Vec<_> = [1, 2, 3, 4, 31, 32, 63, MAX_BATCH]
        .map(BatchSizes::label)
        .to_vec();
    assert_eq!(
        labels,
        ["1", "2-3", "2-3", "4-7", "16-31", "32-63", "32-63", "64"]
    );
}

#[test]
fn r_ov_1_intake_waits_are_counted_in_the_bucket_that_bounds_them() {
    let l = |us| IntakeWaits::label(Duration::from_micros(us));
    assert_eq!(l(0), "0.1");
    assert_eq!(l(100), "0.1");
    assert_eq!(l(101), "0.25");
    assert_eq!(l(999), "1");
    assert_eq!(l(1_000), "1");
    assert_eq!(l(1_001), "2.5");
    assert_eq!(l(250_000), "250");
    assert_eq!(l(250_001), "+Inf");
    assert_eq!(IntakeWaits::label(Duration::MAX), "+Inf");
}

#[test]
fn r_ov_1_overload_retry_after_is_spread_over_the_jitter() {
    let now = Instant::now();
    let o = Overload::new(
        &config(|c| {
            c.retry_after_s = 5;
            c.retry_after_jitter_s = 5;
        }),
        0,
        now,
    );
    let seen: std::collections::BTreeSet<u32> = (0..400).map(|_| o.retry_after()).collect();
    // Every value from 5 to 10 turns up in 400 draws (each is missed with
    // a chance of (5/6)^400), and none outside.
    assert_eq!(seen, (5..=10).collect());
    let fixed = Overload::new(&config(|c| c.retry_after_jitter_s = 0), 0, now);
    assert!((0..50).all(|_| fixed.retry_after() == 5));
}

#[test]
fn r_ov_1_registers_have_their_own_capacity_and_leave_new_dialogs_theirs() {
    let c = config(|c| {
        c.new_dialogs_per_s = 10;
        c.new_dialogs_burst = 2;
        c.registers_per_s = 10;
        c.registers_burst = 3;
        c.per_source_rate = 0;
        c.per_source_register_rate = 0;
    });
    let now = Instant::now();
    let o = Overload::new(&c, 0, now);
    // An avalanche of REGISTERs uses up the REGISTER capacity...
    let regs: Vec<_> = (0..10)
        .map(|i| o.admit(false, Some(IpAddr::V4(Ipv4Addr::from(i))), None, true, now))
        .collect();
    assert_eq!(regs.iter().filter(|v| **v == Verdict::Pass).count(), 3);
    assert!(regs[3..]
        .iter()
        .all(|v| *v == Verdict::Reject(Why::Registrations)));
    // ...and new calls still have all of theirs.
    assert_eq!(o.admit(false, Some(A), None, false, now), Verdict::Pass);
    assert_eq!(o.admit(false, Some(B), None, false, now), Verdict::Pass);
    assert_eq!(
        o.admit(false, Some(A), None, false, now),
        Verdict::Reject(Why::Capacity)
    );
    // The deadline refuses REGISTERs as it does new dialogs.
    assert_eq!(
        o.admit(true, Some(A), None, true, now + Duration::from_secs(1)),
        Verdict::Reject(Why::Deadline)
    );
}

#[test]
fn r_ov_2_an_office_nat_registers_past_the_new_dialog_limit_of_its_address() {
    // 100 phones behind one address re-register at once: over the
    // address's new-dialog burst (5), within its REGISTER allowance (120);
    // its calls keep their own five.
    let c = config(|c| {
        c.per_source_rate = 5;
        c.per_source_burst = 5;
        c.per_source_register_rate = 60;
        c.per_source_register_burst = 120;
    });
    let now = Instant::now();
    let o = Overload::new(&c, 0, now);
    assert!((0..100).all(|_| o.admit(false, Some(A), None, true, now) == Verdict::Pass));
    let calls: Vec<_> = (0..6)
        .map(|_| o.admit(false, Some(A), None, false, now))
        .collect();
    assert_eq!(&calls[..5], &[Verdict::Pass; 5]);
    assert_eq!(calls[5], Verdict::Reject(Why::Source));
    // Past its REGISTER allowance the address is refused per source too.
    let more: Vec<_> = (0..30)
        .map(|_| o.admit(false, Some(A), None, true, now))
        .collect();
    assert_eq!(more.iter().filter(|v| **v == Verdict::Pass).count(), 20);
    assert_eq!(more[29], Verdict::Reject(Why::Source));
}

#[test]
fn r_ov_1_put_off_new_dialogs_go_before_put_off_registers_each_call_in_order() {
    let msg = |method: &str, call: &str, to_tag: &str| {
        scan(&format!(
            "{method} sip:b@x SIP/2.0\nVia: SIP/2.0/UDP 127.0.0.1;branch=z9hG4bK1\nFrom: <sip:a@x>;tag=1\nTo: <sip:b@x>{to_tag}\nCall-ID: {call}\nCSeq: 1 {method}\nMax-Forwards: 70\nContent-Length: 0\n\n"
        ))
    };
    let none: [&SipMessage; 0] = [];
    assert!(!first(&msg("REGISTER", "r", ""), none));
    assert!(!before_registers(&msg("REGISTER", "r", ""), none));
    assert!(before_registers(&msg("INVITE", "c", ""), none));
    assert!(before_registers(&msg("SUBSCRIBE", "c", ""), none));
    let regs = [msg("REGISTER", "r", "")];
    assert!(before_registers(&msg("INVITE", "c", ""), &regs));
    // A message of a put-off REGISTER's call stays behind it.
    assert!(!before_registers(&msg("OPTIONS", "r", ""), &regs));
}
