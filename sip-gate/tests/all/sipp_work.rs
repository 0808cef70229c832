//! Work accounting with real SIPp through the gate (R-ST-2, R-ST-1): what
//! an instance still serves keeps it `draining`, and nothing else does.
//! Calls the callee ends with its own BYE, calls the instance places through
//! the gate, registrations that expire by themselves, subscriptions the
//! notifier terminates.
//!
//! Each test has its own `127.26.N.0/24`: the gate's listener on `.1`, the
//! sg on `.11`, `.12` (port 5060), clients on `.100`, the far party of a call
//! an sg places on `.50`. Loads are a handful of calls; every SIPp run ends
//! by itself.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::common::*;
use ringsync::view::InstanceState;
use sip_gate::Gate;
use testbed::{Scenario, Sipp, SippHandle, SippReport, Transport};

const UDP: Transport = Transport::Udp;

/// A site of two sg with a guard listener in front of sg-0 on `.1`.
fn guarded_site(net: (u8, u8)) -> String {
    site(
        net,
        2,
        &format!(
            "[[listener]]\nname = \"g0\"\nbind = \"{}:0\"\nmode = \"guard\"\ninstance = \"sg-0\"\nleg = \"subscriber\"\n",
            ip(net, 1)
        ),
    )
}

/// A UAS playing `scenario` on `addr`, holding for `hold` where it pauses.
fn uas_holding(scenario: &str, addr: SocketAddr, hold: Duration) -> SippHandle {
    Sipp::new(Scenario::repo(scenario))
        .local(addr.ip(), addr.port())
        .transport(UDP)
        .duration(hold)
        .timeout(Duration::from_secs(60))
        .spawn()
        .expect("uas starts")
}

/// A UAC run of `scenario`: `calls` calls from `local` to `remote`.
fn client(scenario: &str, local: IpAddr, remote: SocketAddr, calls: u64) -> Sipp {
    uac(Scenario::repo(scenario), local, remote, UDP, calls, 10)
}

/// Polls `cond` every 20 ms until it holds; fails after `limit`.
async fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The state the gate's own drain state gives instance `i` now.
fn state(gate: &Gate, i: usize) -> InstanceState {
    gate.core().publish_work(Instant::now());
    gate.core().view().instances()[i].state
}

/// Waits until sg-`i` holds nothing on this gate, then checks it reads
/// `drained` (R-ST-1).
async fn drained(gate: &Gate, i: usize, limit: Duration) {
    let book = gate.core().work().clone();
    wait_until("the work to end", limit, || book.get(i).total() == 0).await;
    assert_eq!(state(gate, i), InstanceState::Drained);
}

async fn stop(h: SippHandle) -> SippReport {
    tokio::task::spawn_blocking(move || h.stop().expect("uas report"))
        .await
        .expect("stop task")
}

/// R-ST-2: calls that the callee (the sg) ends with its own BYE leave its
/// work when the caller answers the BYE. Before, such a call stayed counted
/// for 12 hours and kept the sg `draining`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_st_2_calls_the_callee_hangs_up_leave_its_work() {
    let net = (26, 1);
    let sg0 = uas_holding("uas_call_bye", server_addr(net, 0), Duration::from_secs(2));
    let (gate, drain_state) = start_gate(config(&guarded_site(net))).await;
    let gw = listener_addr(&gate, "g0");
    let book = gate.core().work().clone();
    let calls = tokio::spawn(run(client("uac_call_callee_bye", ip(net, 100), gw, 5)));
    wait_until("5 calls up", Duration::from_secs(5), || {
        book.get(0).dialogs == 5
    })
    .await;
    drain(&drain_state, 1, &["srv-0"]);
    assert_eq!(state(&gate, 0), InstanceState::Draining, "its calls are up");
    assert_all_ok("calls the callee ends", &calls.await.expect("uac"), 5);
    drained(&gate, 0, Duration::from_secs(3)).await;
    let r = stop(sg0).await;
    assert_eq!((r.successful, r.failed), (5, 0), "{r:?}");
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

/// R-ST-2: calls an sg places through the gate (SIPp at the sg's configured
/// address, sending via the gate to a party outside) are its work in the
/// same way, until their BYE is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_st_2_calls_the_instance_places_are_its_work() {
    let net = (26, 2);
    let far_addr = SocketAddr::new(ip(net, 50), 5060);
    let far = uas("uas_call", far_addr, UDP);
    let (gate, drain_state) = start_gate(config(&site(net, 2, &balance_sg(net)))).await;
    let gw = listener_addr(&gate, "subs");
    let book = gate.core().work().clone();
    // sg-0 calls out: Request-URI at the far party, sent to the gate (-rsa).
    let sg0 = server_addr(net, 0);
    let placing = Sipp::new(Scenario::repo("uac_call"))
        .local(sg0.ip(), sg0.port())
        .remote(far_addr)
        .arg("-rsa")
        .arg(gw.to_string())
        .transport(UDP)
        .calls(4)
        .rate(10)
        .duration(Duration::from_secs(2))
        .timeout(Duration::from_secs(60));
    let calls = tokio::spawn(run(placing));
    wait_until("4 calls up", Duration::from_secs(5), || {
        book.get(0).dialogs == 4
    })
    .await;
    assert_eq!(book.get(1).total(), 0, "sg-1 placed nothing");
    drain(&drain_state, 1, &["srv-0"]);
    assert_eq!(
        state(&gate, 0),
        InstanceState::Draining,
        "its own calls are up"
    );
    assert_all_ok("calls sg-0 placed", &calls.await.expect("uac"), 4);
    drained(&gate, 0, Duration::from_secs(3)).await;
    let r = stop(far).await;
    assert_eq!((r.successful, r.failed), (4, 0), "{r:?}");
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

/// R-ST-2: registrations routed to an sg are its work until the expiry its
/// registrar granted (2 s here), with nothing unregistering them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_st_2_registrations_count_until_they_expire() {
    let net = (26, 3);
    let registrar = uas("uas_register", server_addr(net, 0), UDP);
    let (gate, drain_state) = start_gate(config(&guarded_site(net))).await;
    let gw = listener_addr(&gate, "g0");
    let book = gate.core().work().clone();
    let r = run(client("uac_register_short", ip(net, 100), gw, 3)).await;
    assert_all_ok("REGISTER, Expires 2", &r, 3);
    let registered = Instant::now();
    assert_eq!(book.get(0).registrations, 3, "three AoRs bound");
    drain(&drain_state, 1, &["srv-0"]);
    assert_eq!(
        state(&gate, 0),
        InstanceState::Draining,
        "bindings are alive"
    );
    // Gone by their expiry (the gate sweeps once a second).
    drained(&gate, 0, Duration::from_secs(5)).await;
    assert!(
        registered.elapsed() >= Duration::from_millis(1500),
        "not before they expired"
    );
    let r = stop(registrar).await;
    assert_eq!((r.successful, r.failed), (3, 0), "{r:?}");
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

/// R-ST-2: a subscription is the notifier's work until its NOTIFY says
/// `terminated` (long before the 60 s it was granted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_st_2_subscriptions_count_until_the_notifier_terminates_them() {
    let net = (26, 4);
    let notifier = uas_holding(
        "uas_subscribe_terminate",
        server_addr(net, 0),
        Duration::from_secs(2),
    );
    let (gate, drain_state) = start_gate(config(&guarded_site(net))).await;
    let gw = listener_addr(&gate, "g0");
    let book = gate.core().work().clone();
    let subs = tokio::spawn(run(client(
        "uac_subscribe_until_terminated",
        ip(net, 100),
        gw,
        3,
    )));
    wait_until("3 subscriptions", Duration::from_secs(5), || {
        book.get(0).subscriptions == 3
    })
    .await;
    assert_eq!(book.get(0).dialogs, 0, "subscriptions are not calls");
    drain(&drain_state, 1, &["srv-0"]);
    assert_eq!(state(&gate, 0), InstanceState::Draining);
    assert_all_ok("terminated subscriptions", &subs.await.expect("uac"), 3);
    drained(&gate, 0, Duration::from_secs(2)).await;
    let r = stop(notifier).await;
    assert_eq!((r.successful, r.failed), (3, 0), "{r:?}");
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}
