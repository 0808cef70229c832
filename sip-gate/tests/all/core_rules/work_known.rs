//! What the gate can vouch for (R-ST-3): a gate that started recently, or
//! whose table was full, reports why and until when, and its drain state
//! never says `drained` meanwhile; a snapshot from a graceful stop carries
//! the knowledge over a planned restart. And the drain ETA.

use ringsync::view::InstanceState;
use sip_gate::admin::{report, NodeInfo, SCOPE};
use sip_gate::{Core, SnapshotError, WorkSnapshot};

use super::prelude::*;
use super::work_flow::*;

/// The longer of the default `max_expires_s` (1 h) and `max_call_age_s` (12 h).
const WINDOW: u64 = 12 * 3600;

fn state_of(g: &Gate, i: usize) -> InstanceState {
    g.drain.view().instances()[i].state
}

#[test]
fn r_st_3_a_gate_that_just_started_cannot_vouch_until_its_window_has_passed() {
    let t0 = Instant::now();
    let g = Gate::std();
    g.drain_servers(&["srv-a"]);
    let u = g.core.work().unknown(at(t0, 10)).expect("unknown at first");
    assert!(
        u.reason.starts_with("gate started at ")
            && u.reason.ends_with(
                "registrations, subscriptions and calls set up before then are not known"
            ),
        "{}",
        u.reason
    );
    let started = ringsync::work::now_ms();
    let until = u.until_ms.expect("says when");
    assert!(until.abs_diff(started + WINDOW * 1000) < 2_000, "{until}");
    // Nothing seen: still not drained, on the gate's own drain state too.
    g.core.publish_work(at(t0, 10));
    assert_eq!(state_of(&g, SG_A), InstanceState::Draining);
    assert_eq!(g.drain.view().instances()[SG_A].work, None);
    // The /v1/work report says it for every SIP instance, with no zeros claimed.
    let node = NodeInfo {
        name: "g1".into(),
        started_ms: started,
        run: None,
    };
    let r = report(&g.core, &node);
    assert_eq!(r.scope, SCOPE);
    assert_eq!(r.instances.len(), 5, "sg and esg only");
    assert!(r.instances.values().all(|w| w.unknown.as_ref() == Some(&u)));
    // The window passed: it knows, and sg-a (no work) is drained.
    let later = at(t0, WINDOW + 2);
    assert_eq!(g.core.work().unknown(later), None);
    g.core.publish_work(later);
    assert_eq!(state_of(&g, SG_A), InstanceState::Drained);
}

/// The window is the longer of `max_expires_s` and `max_call_age_s`.
#[test]
fn r_st_3_the_window_follows_the_configured_lives() {
    let t0 = Instant::now();
    let g = Gate::new(&SiteOpts {
        work: "max_expires_s = 300\nmax_call_age_s = 120",
        ..SiteOpts::default()
    });
    assert!(g.core.work().unknown(at(t0, 299)).is_some());
    assert!(g.core.work().unknown(at(t0, 302)).is_none());
}

/// A full table: the gate cannot count what it could not take, so it says
/// so until that work would have ended, and is never drained meanwhile.
#[test]
fn r_st_3_a_full_table_is_unknown_not_a_lie() {
    let g = fresh("max_calls = 1\nmax_call_age_s = 600");
    let t0 = Instant::now();
    call_in(&g.core, "one", t0);
    call_in(&g.core, "two", t0);
    g.drain_servers(&["srv-a"]);
    assert_eq!(sg_a(&g.core).dialogs, 1, "the second did not fit");
    let u = g.core.work().unknown(at(t0, 1)).expect("cannot vouch");
    assert!(
        u.reason.contains("call table was full (1 entries"),
        "{}",
        u.reason
    );
    let bye = through(&g.core, UA, &ua_in_dialog("BYE", "one", 2), at(t0, 5));
    answer(&g.core, &bye, 200, "", SG_A_PEER, at(t0, 5));
    g.core.publish_work(at(t0, 5));
    assert_eq!(sg_a(&g.core).total(), 0);
    assert_eq!(
        state_of(&g, SG_A),
        InstanceState::Draining,
        "zero, but unsure"
    );
    assert!(g.core.work().unknown(at(t0, 601)).is_none());
    g.core.publish_work(at(t0, 601));
    assert_eq!(state_of(&g, SG_A), InstanceState::Drained);
}

/// A planned restart: the stopped gate's book, read by the new one, keeps
/// its calls, registrations and subscriptions and its knowledge.
#[test]
fn r_st_3_a_work_snapshot_carries_the_book_over_a_graceful_restart() {
    let g = fresh("");
    let t0 = Instant::now();
    call_in(&g.core, "kept", t0);
    call_out(&g.core, "kept-out", t0);
    let reg = through(
        &g.core,
        UA,
        &register("sip:alice@example.com", "z9hG4bKsnap", 1, &[]),
        t0,
    );
    let contact = "Contact: <sip:alice@203.0.113.10:5062>;expires=600\r\n";
    answer_with(&g.core, &reg, 200, "r", contact, SG_A_PEER, t0);
    let before = sg_a(&g.core);
    assert_eq!((before.dialogs, before.registrations), (2, 1));

    let snap = g.core.work_snapshot(at(t0, 1)).expect("nothing in flight");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("work.json");
    snap.save(&path).unwrap();
    let read = WorkSnapshot::take(&path).unwrap().expect("there");
    assert!(!path.exists(), "read once");
    assert!(WorkSnapshot::take(&path).unwrap().is_none());

    let fresh_core = g.restarted();
    fresh_core.restore_work(&read, at(t0, 2)).unwrap();
    assert_eq!(
        fresh_core.work().unknown(at(t0, 2)),
        None,
        "knows as before"
    );
    assert_eq!(sg_a(&fresh_core), before);
    // The restored calls end as any other: by the answer to a BYE.
    let bye = through(&fresh_core, UA, &ua_in_dialog("BYE", "kept", 2), at(t0, 3));
    answer(&fresh_core, &bye, 200, "", SG_A_PEER, at(t0, 3));
    assert_eq!(sg_a(&fresh_core).dialogs, 1);
    fresh_core.sweep(at(t0, 599));
    assert_eq!(sg_a(&fresh_core).registrations, 1);
    // (The two books anchor their clocks apart by up to a millisecond.)
    fresh_core.sweep(at(t0, 601));
    assert_eq!(sg_a(&fresh_core).registrations, 0, "expired on time");
}

/// A snapshot of a book that was itself blind passes the blindness on; one
/// of another site or secret, or from the future, is refused.
#[test]
fn r_st_3_a_snapshot_never_claims_more_than_its_book_knew() {
    let blind = Gate::std();
    let t0 = Instant::now();
    let snap = blind.core.work_snapshot(t0).unwrap();
    let next = blind.restarted();
    next.restore_work(&snap, at(t0, 60)).unwrap();
    let u = next.work().unknown(at(t0, 60)).expect("still blind");
    assert!(
        u.reason
            .contains("with a work snapshot that covers work set up since"),
        "{}",
        u.reason
    );

    let other_secret = Gate::new(&SiteOpts::default());
    let text = serde_json::to_string(&other_secret.core.work_snapshot(t0).unwrap())
        .unwrap()
        .replace("\"site\":\"core-rules\"", "\"site\":\"elsewhere\"");
    let foreign: WorkSnapshot = serde_json::from_str(&text).unwrap();
    let e = blind.restarted().restore_work(&foreign, t0).unwrap_err();
    assert!(e.to_string().contains("of site `elsewhere`"), "{e}");

    let cfg = super::site::site_toml(&SiteOpts::default())
        .replace(SECRET, "another-secret-for-the-same-site");
    let other = Core::new(
        std::sync::Arc::new(
            ringsync::config::SiteConfig::from_str_at(&cfg, std::path::Path::new("/x.toml"))
                .unwrap(),
        ),
        blind.drain.clone(),
    )
    .unwrap();
    let e = other.restore_work(&snap, t0).unwrap_err();
    assert!(e.to_string().contains("another site secret"), "{e}");

    let future = blind.core.work_snapshot(at(t0, 3600)).unwrap();
    let e = blind.restarted().restore_work(&future, t0).unwrap_err();
    assert!(
        matches!(e, SnapshotError::Mismatch(_)) && e.to_string().contains("after now"),
        "{e}"
    );
}

/// No snapshot while a transaction waits for its answer (the answer could
/// set up work the next gate would never see); a corrupt file is an error,
/// and is gone.
#[test]
fn r_st_3_no_snapshot_with_a_transaction_in_flight_and_corrupt_files_refused() {
    let g = fresh("");
    let t0 = Instant::now();
    let fwd = invite_in(&g.core, "ringing", "z9hG4bKringing", t0);
    let e = g.core.work_snapshot(t0).unwrap_err();
    assert!(e.to_string().contains("1 transactions still wait"), "{e}");
    answer(&g.core, &fwd, 486, "uas", SG_A_PEER, t0);
    assert!(g.core.work_snapshot(t0).is_ok());

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("work.json");
    std::fs::write(&path, b"{\"version\":1,").unwrap();
    let e = WorkSnapshot::take(&path).unwrap_err();
    assert!(matches!(e, SnapshotError::Format { .. }), "{e}");
    assert!(!path.exists());
}

/// The drain ETA: the latest registration or subscription expiry, and for
/// calls the hold times seen on this gate (the typical one without history).
#[test]
fn r_st_2_eta_from_expiries_and_hold_times() {
    let g = fresh("typical_call_s = 100");
    let t0 = Instant::now();
    let eta = |now| g.core.work().instance_work(SG_A, now).eta;
    let now_ms = || ringsync::work::now_ms();
    call_in(&g.core, "eta-0", t0);
    g.core.sweep(at(t0, 5));
    let calls = eta(at(t0, 5)).calls_until_ms.expect("an estimate");
    // No history: the typical hold time from the call's start...
    let want = now_ms() + 100_000;
    assert!(calls.abs_diff(want) < 2_000, "{calls} vs {want}");
    // ...which stays put as the call goes on: the ETA counts down (issue
    // 38: it stood at "in 29s" for 15 s when it was "typical from now").
    g.core.sweep(at(t0, 20));
    let later = eta(at(t0, 20)).calls_until_ms.unwrap();
    assert!(later.abs_diff(calls) < 100, "{later} vs {calls}");
    // Twenty calls of 60 s end on this gate: a young call is expected to
    // last about as long.
    for n in 0..20 {
        let call = format!("eta-h{n}");
        call_in(&g.core, &call, t0);
        let bye = through(&g.core, UA, &ua_in_dialog("BYE", &call, 2), at(t0, 60));
        answer(&g.core, &bye, 200, "", SG_A_PEER, at(t0, 60));
    }
    g.core.sweep(at(t0, 5));
    let calls = eta(at(t0, 5)).calls_until_ms.unwrap();
    let want = now_ms() + 60_000;
    assert!(calls.abs_diff(want) < 8_000, "{calls} vs {want}");
    // A subscription until 300 s and a registration until 600 s: the later.
    let sub = Req::ua("SUBSCRIBE", "eta-sub", "z9hG4bKeta-s")
        .set("Event", "presence")
        .bytes();
    let fwd = through(&g.core, UA, &sub, t0);
    answer_with(&g.core, &fwd, 202, "uas", "Expires: 300\r\n", SG_A_PEER, t0);
    let reg = through(
        &g.core,
        UA,
        &register("sip:eta@example.com", "z9hG4bKeta-r", 1, &[]),
        t0,
    );
    answer_with(
        &g.core,
        &reg,
        200,
        "r",
        "Contact: <sip:eta@203.0.113.10>;expires=600\r\n",
        SG_A_PEER,
        t0,
    );
    g.core.sweep(t0);
    let regs = eta(t0).registrations_until_ms.unwrap();
    assert!(regs.abs_diff(now_ms() + 600_000) < 2_000, "{regs}");
}

/// The scope the admin API documents is the one the gate serves.
#[test]
fn r_st_3_the_documented_scope_is_the_served_one() {
    let api = include_str!("../../../../docs/api.md");
    assert!(
        api.contains(&format!("\"scope\":\"{SCOPE}\"")),
        "docs/api.md"
    );
}
