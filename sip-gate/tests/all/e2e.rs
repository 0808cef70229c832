//! End to end through the real binaries: the operator's `ringsync` CLI
//! drains a server in the embedded store, the `sip-gate` binary (a guard
//! listener in front of sg-a) refuses SIPp's new calls and registrations
//! with 503 and Retry-After while the calls already up finish, and
//! `ringsync status --json` goes `draining` → `drained` as they end
//! (R-PR-2, R-SG-1, R-SG-4, R-SG-5, R-ST-1). Then R-SG-2 through real
//! OPTIONS probes: with the other sg's SIPp stopped, the probes mark it
//! down and the guard forwards instead of refusing; with it back, the guard
//! refuses again. Last, the gate's own stop (R-GW-1) keeps probing.
//!
//! Addresses: `127.25.1.0/24`; the gate on `.1`, sg-a's and sg-b's SIPp on
//! `.11` and `.12`, callers from `.21`.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::common::{calls_through, ip, ringsync, status_of};
use serde_json::Value;
use testbed::bins::Node;
use testbed::fixture::SiteFile;
use testbed::wait_for;
use testbed::{Scenario, Sipp, SippHandle, SippReport};

const NET: (u8, u8) = (25, 1);

/// [`SiteFile::drain_pair`]: the guard of sg-a, fast probes, a short
/// restart window (calls are held 4 s, well under its call age).
fn site_file() -> SiteFile {
    let [gate, sg_a, sg_b] = [1, 11, 12].map(|h| ip(NET, h));
    SiteFile::drain_pair("e2e", gate, sg_a, sg_b)
        .section("timers", "retry_after_s = 30\nretry_after_jitter_s = 5")
}

/// sg-b: SIPp's stock UAS, which with `-aa` answers the gate's OPTIONS
/// probes.
fn sg_b() -> SippHandle {
    Sipp::new(Scenario::builtin("uas"))
        .local(ip(NET, 12), 5060)
        .arg("-aa")
        .timeout(Duration::from_secs(120))
        .spawn()
        .expect("sg-b starts")
}

/// Runs a UAC from `.21` through the guard to the end.
fn call(scenario: &str, calls: u64, hold: Duration, guard: SocketAddr) -> SippReport {
    calls_through(scenario, ip(NET, 21), guard, calls, hold)
}

/// Polls `ringsync status` until `id` has `field` = `want`; that instance.
fn wait_status(site: &Path, id: &str, field: &str, want: &str) -> Value {
    wait_for(
        &format!("{id} {field} {want}"),
        Duration::from_secs(15),
        || Some(status_of(site, id)).filter(|i| i[field] == want),
    )
    .unwrap()
}

#[test]
fn ringsync_drains_sg_a_the_gate_binary_refuses_new_work_and_status_goes_draining_to_drained() {
    let dir = tempfile::tempdir().unwrap();
    let site = site_file().write(dir.path());
    let guard = SocketAddr::new(ip(NET, 1), 5060);
    let mut gate = Node::gate(&site)
        .admin(SocketAddr::new(ip(NET, 1), 9091))
        .start()
        .unwrap();
    // sg-a: full calls, and OPTIONS probes answered (-aa).
    let _sg_a = Sipp::new(Scenario::repo("uas_call"))
        .local(ip(NET, 11), 5060)
        .arg("-aa")
        .timeout(Duration::from_secs(120))
        .spawn()
        .expect("sg-a starts");
    let sg_b = sg_b();
    gate.wait_ready().unwrap();
    // Both answer the gate's probes.
    for id in ["sg-a", "sg-b"] {
        let i = wait_status(&site, id, "health", "up");
        assert_eq!(i["state"], "up", "{i}");
    }

    // Five calls up on sg-a, held 4 s.
    let up = std::thread::spawn(move || call("uac_call", 5, Duration::from_secs(4), guard));
    wait_for("5 calls up", Duration::from_secs(10), || {
        let w = gate.work()?;
        (w.instances.get("sg-a")?.counts.dialogs == 5).then_some(())
    })
    .unwrap();

    // The operator drains srv-a.
    let p = ringsync(
        &site,
        &[
            "profile", "create", "--name", "maint-a", "--server", "srv-a",
        ],
    );
    assert_eq!(p["state"], "inactive", "{p}");
    let p = ringsync(&site, &["profile", "activate", "maint-a"]);
    assert_eq!(p["state"], "active", "{p}");
    let a = wait_status(&site, "sg-a", "state", "draining");
    assert_eq!(a["zone"], "drain", "{a}");
    assert_eq!(a["counts"]["dialogs"], 5, "{a}");
    // Within the gate's restart window `work` is null (the counts are a
    // lower bound and `unknown` says why); after it, the count itself.
    assert!(
        a["work"].is_null() || a["work"].as_u64().is_some_and(|w| w >= 5),
        "{a}"
    );
    // `status` may read the drain before the gate has applied it (R-SG-1):
    // the gate's own view, as its state gauge shows it, decides the 503.
    // Its gauges are set about once a second; drained counts too, should
    // the held calls end meanwhile.
    wait_for(
        "the gate's view: sg-a draining",
        Duration::from_secs(10),
        || {
            let state = |s| {
                gate.metric(&format!(
                    r#"sipgate_instance_state{{instance="sg-a",state="{s}"}}"#
                ))
                .unwrap()
            };
            (state("draining") + state("drained") == 1.0).then_some(())
        },
    )
    .unwrap();

    // New work gets 503 + Retry-After from the gate (the scenarios check
    // the header); the calls up carry on (re-INVITE, BYE).
    let refused = call("uac_call_expect_503", 3, Duration::ZERO, guard);
    assert!(refused.all_ok() && refused.successful == 3, "{refused:?}");
    let refused = call("uac_register_expect_503", 3, Duration::ZERO, guard);
    assert!(refused.all_ok() && refused.successful == 3, "{refused:?}");
    let calls = up.join().unwrap();
    assert_eq!(calls.successful, 5, "{calls:?}");
    assert!(calls.all_ok(), "{calls:?}");

    // Their end is the end of sg-a's work.
    let a = wait_status(&site, "sg-a", "state", "drained");
    assert_eq!(a["work"], 0, "{a}");

    // R-SG-2: sg-b's SIPp stops; the probes mark it down, and the guard
    // forwards a new call to the draining sg-a instead of refusing it.
    sg_b.stop().expect("sg-b stops");
    let b = wait_status(&site, "sg-b", "health", "down");
    assert_eq!(b["state"], "down", "{b}");
    let served = call("uac_call", 1, Duration::ZERO, guard);
    assert!(served.all_ok() && served.successful == 1, "{served:?}");

    // sg-b back: the guard refuses again.
    let _sg_b = self::sg_b();
    wait_status(&site, "sg-b", "state", "up");
    let refused = call("uac_call_expect_503", 1, Duration::ZERO, guard);
    assert!(refused.all_ok() && refused.successful == 1, "{refused:?}");

    // R-GW-1: the gate stops. The last call's transactions are complete
    // (kept in its table only for retransmissions), so nothing holds it:
    // it exits at once (the stop while something is in flight, the 503s
    // meanwhile and a second signal are `tests/all/gate_stop.rs`'s).
    gate.signal("TERM");
    let sigterm = std::time::Instant::now();
    let status = gate
        .wait_exit(Duration::from_secs(10))
        .expect("the gate exits with nothing in flight");
    assert!(
        sigterm.elapsed() < Duration::from_secs(3),
        "{:?}",
        sigterm.elapsed()
    );
    assert!(status.success(), "{status:?}");
}
