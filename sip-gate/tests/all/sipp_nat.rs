//! Subscribers behind NAT through the gate, with real peers only: a SIPp
//! subscriber whose Contact names a private address nobody listens on
//! registers through the gate to a real registrar (Kamailio with
//! `registrar`, `usrloc` and `path`, the sg of the site), and a call placed
//! by another SIPp to the subscriber's AoR goes caller -> Kamailio -> gate
//! -> subscriber, along the Path the gate added (RFC 3327), on UDP to the
//! address the REGISTER came from and on TCP over the subscriber's own
//! connection (RFC 5626 5.3). Once that connection is closed, the next call
//! gets 430 Flow Failed from the gate, relayed by the registrar.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::common::*;
use testbed::fixture::SiteFile;
use testbed::{Kamailio, KamailioHandle, Scenario, Sipp, SippReport, Transport};

const AOR_USER: &str = "alice";

fn registrar_cfg() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kamailio/registrar.cfg")
}

/// Kamailio as the site's only sg, and a gate whose subscriber listener
/// fronts it. Kamailio's own TCP connections come from ephemeral ports, so
/// its address is also a configured source network.
async fn site_with_registrar(net: (u8, u8)) -> (KamailioHandle, sip_gate::Gate, SocketAddr) {
    let kam_addr = server_addr(net, 0);
    let kam = tokio::task::spawn_blocking(move || {
        Kamailio::new()
            .config(registrar_cfg())
            .listen(kam_addr)
            .start()
            .expect("kamailio starts")
    })
    .await
    .expect("kamailio task");
    let sg = format!("sip = \"{kam_addr}\"\nsources = [\"{}/32\"]", kam_addr.ip());
    let site = SiteFile::new(&format!("nat-{}-{}", net.0, net.1))
        .servers(&["srv-0"])
        .instance_with("sg-0", "sg", "srv-0", &sg)
        .subscribers("subs", SocketAddr::new(ip(net, 1), 0), &[]);
    let (gate, _drain) = start_gate(config(site.text())).await;
    let gw = listener_addr(&gate, "subs");
    (kam, gate, gw)
}

/// The subscriber: registers through the gate, then answers one call.
fn subscriber(net: (u8, u8), gw: SocketAddr, transport: Transport, cid: &str) -> Sipp {
    Sipp::new(Scenario::repo("uac_register_answer_nat"))
        .local_ip(ip(net, 100))
        .remote(gw)
        .transport(transport)
        .service(AOR_USER)
        .calls(1)
        .timeout(Duration::from_secs(30))
        .arg("-cid_str")
        .arg(cid)
}

/// A caller placing one call to the AoR at the registrar, over UDP. The
/// call is held 100 ms before its re-INVITE: sent right behind the ACK,
/// the re-INVITE can overtake it in Kamailio (its UDP workers are separate
/// processes), and the subscriber's scenario, waiting for the ACK, aborts
/// on it (the caller then got Kamailio's 408 after 30 s, once in 14 runs).
fn caller(net: (u8, u8), kam: SocketAddr, scenario: &str, cid: &str) -> Sipp {
    Sipp::new(Scenario::repo(scenario))
        .local_ip(ip(net, 50))
        .remote(kam)
        .service(AOR_USER)
        .calls(1)
        .duration(Duration::from_millis(100))
        .timeout(Duration::from_secs(30))
        .arg("-cid_str")
        .arg(cid)
}

async fn finish(h: testbed::SippHandle) -> SippReport {
    tokio::task::spawn_blocking(move || h.wait(Duration::from_secs(60)).expect("sipp report"))
        .await
        .expect("sipp task")
}

/// Registers, waits for the binding, then calls; returns both reports.
async fn register_and_call(
    net: (u8, u8),
    kam: SocketAddr,
    gw: SocketAddr,
    transport: Transport,
) -> (SippReport, SippReport) {
    // SIPp maps the incoming INVITE to the subscriber's call by Call-ID:
    // both runs share it.
    let cid = "nat-%u@sip-gate-test";
    let sub = subscriber(net, gw, transport, cid)
        .spawn()
        .expect("subscriber starts");
    // The REGISTER takes a few ms on loopback; the call must come after it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let call = run(caller(net, kam, "uac_call", cid)).await;
    (call, finish(sub).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nat_udp_call_from_the_registrar_reaches_the_subscriber_through_its_flow() {
    let net = (76, 1);
    let (kam, gate, gw) = site_with_registrar(net).await;
    let (call, sub) = register_and_call(net, kam.addr(), gw, Transport::Udp).await;
    assert_all_ok("caller (uac_call)", &call, 1);
    assert!(
        sub.all_ok() && sub.successful == 1,
        "subscriber: {sub:?}\nkamailio: {}",
        kam.log_tail(4000)
    );
    assert!(gate.shutdown(Duration::from_secs(5)).await);
    kam.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nat_tcp_call_uses_the_subscribers_connection_then_430_once_it_closed() {
    let net = (76, 2);
    let (kam, gate, gw) = site_with_registrar(net).await;
    let (call, sub) = register_and_call(net, kam.addr(), gw, Transport::Tcp).await;
    assert_all_ok("caller (uac_call)", &call, 1);
    assert!(
        sub.all_ok() && sub.successful == 1,
        "subscriber: {sub:?}\nkamailio: {}",
        kam.log_tail(4000)
    );
    // The subscriber exited: its connection is closed, its binding (with
    // the gate's Path) still at the registrar. The gate answers 430.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = run(caller(
        net,
        kam.addr(),
        "uac_call_expect_430",
        "nat-gone-%u@sip-gate-test",
    ))
    .await;
    assert_all_ok("caller (uac_call_expect_430)", &r, 1);
    assert!(gate.shutdown(Duration::from_secs(5)).await);
    kam.stop();
}
