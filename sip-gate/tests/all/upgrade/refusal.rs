//! R-GW-3: the hand-overs that do not happen: a new run of another version
//! refuses (the old run serves on), a new run killed between `Ready` and
//! `Done` leaves the old run serving; both old runs upgrade afterwards.
//! Their nets: `127.139.4.0/24` and `127.139.5.0/24` (see `upgrade.rs`).

use std::time::Duration;

use testbed::wait_for;

use super::{calls_pass, gate, new_run_ready, site, upgrade, upgrade_cli, NewRun};

/// R-GW-3: a new run that cannot read the old run's hand-over (another
/// version) refuses it; the old run logs why and serves on. SIGUSR2 is
/// the trigger.
#[test]
fn r_gw_3_a_new_run_of_another_version_is_refused_and_the_old_serves_on() {
    let net = (139, 4);
    let (_dir, site, listener, admin) = site(net, false);
    // The new run inherits the old one's environment: it speaks version 99.
    let mut old = gate(&site, admin, Some(("SIP_GATE_UPGRADE_VERSION", "99")));
    old.signal("USR2");
    let why = wait_for("the refusal in the log", Duration::from_secs(15), || {
        let log = old.log();
        let line = log.lines().find(|l| l.contains("refused the hand-over"))?;
        Some(line.to_owned())
    })
    .unwrap();
    assert!(
        why.contains(&format!(
            "hands over at version {}, this run reads version 99",
            sip_gate::upgrade::VERSION
        )),
        "{why}"
    );
    assert!(old.running(), "{}", old.log());
    assert_eq!(old.readyz().map(|r| r.0), Some(200));
    calls_pass(net, listener, 10);
    // Through the CLI too: it says why, non-zero.
    let out = upgrade_cli(&site, admin);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refused the hand-over"), "{err}");
    assert!(old.running());
}

/// R-GW-3: a new run killed after it said it was ready, while the old run
/// hands over (the new run holds there: `SIP_GATE_UPGRADE_HOLD_MS`), leaves
/// the old run serving: it reads the listeners again. The next upgrade
/// goes through.
#[test]
fn r_gw_3_a_new_run_killed_mid_hand_over_leaves_the_old_serving() {
    let net = (139, 5);
    let (_dir, site, listener, admin) = site(net, false);
    let mut old = gate(&site, admin, Some(("SIP_GATE_UPGRADE_HOLD_MS", "2000")));
    old.signal("USR2");
    let pid = new_run_ready(&old);
    drop(NewRun(pid as u32));
    let why = old
        .wait_for("the failure in the log", Duration::from_secs(10), |g| {
            let log = g.log();
            let line = log.lines().find(|l| l.contains("upgrade not done"))?;
            Some(line.to_owned())
        })
        .unwrap();
    assert!(why.contains("this run serves on"), "{why}");
    assert!(
        old.log().contains("reading the listeners again"),
        "{}",
        old.log()
    );
    assert!(old.running(), "{}", old.log());
    assert_eq!(old.readyz().map(|r| r.0), Some(200));
    calls_pass(net, listener, 10);
    // The next upgrade goes through, and the new run serves calls.
    let _new = upgrade(&site, admin);
    let status = old.wait_exit(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        old.log()
    );
    calls_pass(net, listener, 10);
}
