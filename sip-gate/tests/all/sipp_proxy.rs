//! The forwarding core against real SIPp: UAC -> sip-gate -> UAS, over UDP
//! and TCP, calls with re-INVITE, REGISTER, SUBSCRIBE/NOTIFY, CANCEL, SIPp's
//! stock scenarios (no route sets), and an in-dialog BYE routed by its Route
//! header through a freshly restarted gate (which then cannot vouch for its
//! work: R-ST-3).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::*;
use testbed::fixture::SiteFile;
use testbed::{Scenario, Transport};

const UDP: Transport = Transport::Udp;
const TCP: Transport = Transport::Tcp;

/// Calls with a re-INVITE and BYE through a balance listener to three sg.
async fn calls(net: (u8, u8), transport: Transport) {
    let cfg = config(&site(net, 3, &balance_sg(net)));
    let servers: Vec<_> = (0..3)
        .map(|i| uas("uas_call", server_addr(net, i), transport))
        .collect();
    let (gate, _drain) = start_gate(cfg).await;
    let gw = listener_addr(&gate, "subs");
    let r = run(uac(
        Scenario::repo("uac_call"),
        ip(net, 100),
        gw,
        transport,
        30,
        30,
    )
    .duration(Duration::from_millis(100)))
    .await;
    assert_all_ok("uac_call", &r, 30);
    // The ring spread the calls: every sg answered some (30 Call-IDs over 3 members).
    let mut total = 0;
    for s in servers {
        let rep = s.stop().expect("uas report");
        assert!(rep.successful > 0, "an sg got no call: {rep:?}");
        assert_eq!(rep.failed, 0, "{rep:?}");
        total += rep.successful;
    }
    assert_eq!(total, 30);
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_over_udp() {
    calls((21, 1), UDP).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_over_tcp() {
    calls((21, 2), TCP).await;
}

async fn registers(net: (u8, u8), transport: Transport) {
    let cfg = config(&site(net, 2, &balance_sg(net)));
    let _servers: Vec<_> = (0..2)
        .map(|i| uas("uas_register", server_addr(net, i), transport))
        .collect();
    let (gate, _drain) = start_gate(cfg).await;
    let gw = listener_addr(&gate, "subs");
    let r = run(uac(
        Scenario::repo("uac_register"),
        ip(net, 100),
        gw,
        transport,
        20,
        20,
    ))
    .await;
    assert_all_ok("uac_register", &r, 20);
    let r = run(uac(
        Scenario::repo("uac_unregister"),
        ip(net, 100),
        gw,
        transport,
        10,
        20,
    ))
    .await;
    assert_all_ok("uac_unregister", &r, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_over_udp() {
    registers((21, 3), UDP).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_over_tcp() {
    registers((21, 4), TCP).await;
}

/// SIPp's built-in uac/uas keep no route set (the uas does not even echo
/// Record-Route): the ACK and BYE come with no Route, and the balance
/// listener sends them where the INVITE went, by Call-ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_scenarios_without_route_sets() {
    let net = (21, 5);
    let cfg = config(&site(net, 3, &balance_sg(net)));
    let _servers: Vec<_> = (0..3)
        .map(|i| {
            testbed::Sipp::new(Scenario::builtin("uas"))
                .local(server_addr(net, i).ip(), 5060)
                .timeout(Duration::from_secs(90))
                .spawn()
                .expect("uas")
        })
        .collect();
    let (gate, _drain) = start_gate(cfg).await;
    let gw = listener_addr(&gate, "subs");
    let r = run(uac(Scenario::builtin("uac"), ip(net, 100), gw, UDP, 50, 50)).await;
    assert_all_ok("stock uac", &r, 50);
}

/// `calls` of a UAC scenario through a balance listener to two sg running
/// the matching UAS scenario; every call must succeed.
async fn through_gate(net: (u8, u8), uas_scenario: &str, uac_scenario: &str, calls: u64) {
    through_gate_over(net, uas_scenario, uac_scenario, calls, UDP).await;
}

/// [`through_gate`] over `transport`.
async fn through_gate_over(
    net: (u8, u8),
    uas_scenario: &str,
    uac_scenario: &str,
    calls: u64,
    transport: Transport,
) {
    let cfg = config(&site(net, 2, &balance_sg(net)));
    let _servers: Vec<_> = (0..2)
        .map(|i| uas(uas_scenario, server_addr(net, i), transport))
        .collect();
    let (gate, _drain) = start_gate(cfg).await;
    let gw = listener_addr(&gate, "subs");
    let r = run(uac(
        Scenario::repo(uac_scenario),
        ip(net, 100),
        gw,
        transport,
        calls,
        10,
    ))
    .await;
    assert_all_ok(uac_scenario, &r, calls);
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

/// SUBSCRIBE through the gate; the notifier's NOTIFYs come back through it
/// along the Record-Route (from an instance, outward to the subscriber).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_and_notify() {
    through_gate((21, 6), "uas_subscribe", "uac_subscribe", 10).await;
}

/// The same over TCP: the notifier's NOTIFYs come in on the connection the
/// gate opened to it, whose remote address is the notifier's configured one,
/// so the gate takes them for the instance's and sends them outward
/// (R-SEC-1: an instance is recognised by its configured address).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_and_notify_over_tcp_r_sec_1() {
    through_gate_over((21, 10), "uas_subscribe", "uac_subscribe", 10, TCP).await;
}

/// CANCEL follows the INVITE to the same instance; 487 and ACK complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel() {
    through_gate((21, 7), "uas_cancel", "uac_cancel", 10).await;
}

/// OPTIONS out of dialog through the gate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options() {
    through_gate((21, 8), "uas_options", "uac_options", 10).await;
}

/// The gate keeps no dialog table: a call set up through one gate process is
/// finished (re-INVITE, BYE) through a freshly started one, routed by the
/// Route header alone. The new gate starts with the serving instance
/// draining, so its ring would send a new dialog elsewhere: only the token
/// can bring the re-INVITE and BYE back to it (R-SG-4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bye_through_a_restarted_gate() {
    let net = (21, 9);
    let cfg = config(&site(net, 2, &balance_sg(net)));
    let servers: Vec<_> = (0..2)
        .map(|i| uas("uas_call", server_addr(net, i), UDP))
        .collect();
    let (gate, _drain) = start_gate(cfg).await;
    let gw = listener_addr(&gate, "subs");
    let bound = (**gate.config()).clone();

    // One call that holds for 4 s after the ACK before its re-INVITE and BYE.
    let call = uac(Scenario::repo("uac_call"), ip(net, 100), gw, UDP, 1, 1)
        .duration(Duration::from_secs(4))
        .spawn()
        .expect("uac");

    // Wait until the gate has seen the 200 OK: the call is up on one sg.
    let start = Instant::now();
    let serving = loop {
        let book = gate.core().work();
        if let Some(i) = (0..2).find(|&i| book.get(i).dialogs > 0) {
            break i;
        }
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "call did not come up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        gate.shutdown(Duration::from_secs(5)).await,
        "first gate stops"
    );

    // A new gate on the same address, knowing nothing of the call, with the
    // serving instance's server draining.
    let (gate2, drain2) = start_gate_restarted(bound).await;
    drain(&drain2, 1, &[&format!("srv-{serving}")]);
    assert!(drain2.view().is_draining(serving));

    let report = tokio::task::spawn_blocking(move || {
        call.wait(Duration::from_secs(30)).expect("uac report")
    })
    .await
    .expect("join");
    assert_all_ok("call across a gate restart", &report, 1);
    // R-ST-3: the new gate learnt the call from its re-INVITE and saw it end,
    // but it cannot know what else was set up before it started: the serving
    // sg stays `draining`, with the reason.
    assert_eq!(gate2.core().work().get(serving).total(), 0);
    let now = Instant::now();
    let why = gate2
        .core()
        .work()
        .unknown(now)
        .expect("a restarted gate cannot vouch");
    assert!(why.reason.starts_with("gate started at"), "{}", why.reason);
    gate2.core().publish_work(now);
    assert_eq!(
        drain2.view().instances()[serving].state,
        ringsync::view::InstanceState::Draining
    );
    let mut reports: Vec<_> = servers
        .into_iter()
        .map(|s| s.stop().expect("uas report"))
        .collect();
    let serving_report = reports.remove(serving);
    assert_eq!(
        serving_report.successful, 1,
        "the serving sg finished the call: {serving_report:?}"
    );
    assert_eq!(
        reports[0].successful + reports[0].failed,
        0,
        "the other sg saw nothing: {:?}",
        reports[0]
    );
    assert!(gate2.shutdown(Duration::from_secs(5)).await);
}

/// The same calls over IPv6 (UDP and TCP). The only IPv6 loopback address
/// is ::1, so the simulated servers differ by port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_over_ipv6() {
    let v6: std::net::IpAddr = "::1".parse().unwrap();
    if std::net::UdpSocket::bind((v6, 0)).is_err() {
        // Every Debian kernel has ::1; a machine without IPv6 cannot run this.
        panic!("no IPv6 loopback on this machine");
    }
    for transport in [UDP, TCP] {
        let ports: Vec<u16> = (0..2).map(|_| testbed::free_port(v6).unwrap()).collect();
        let sgs = [
            ("0", SocketAddr::new(v6, ports[0])),
            ("1", SocketAddr::new(v6, ports[1])),
        ];
        let site = SiteFile::new("v6")
            .sgs(&sgs)
            .subscribers("subs", SocketAddr::new(v6, 0), &[]);
        let servers: Vec<_> = ports
            .iter()
            .map(|&p| uas("uas_call", SocketAddr::new(v6, p), transport))
            .collect();
        let (gate, _drain) = start_gate(config(site.text())).await;
        let gw = listener_addr(&gate, "subs");
        assert!(gw.is_ipv6());
        let r = run(uac(Scenario::repo("uac_call"), v6, gw, transport, 10, 10)
            .duration(Duration::from_millis(100)))
        .await;
        assert_all_ok(&format!("uac_call over IPv6/{transport}"), &r, 10);
        let answered: u64 = servers
            .into_iter()
            .map(|s| s.stop().expect("uas report").successful)
            .sum();
        assert_eq!(answered, 10);
        assert!(gate.shutdown(Duration::from_secs(5)).await);
    }
}
