//! Kamailio with bench/kamailio/kamailio.cfg in front of two SIPp UAS: the
//! reference proxy the benchmarks compare sip-gate with must itself pass
//! every scenario, with no failed call.

use std::{
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use testbed::{free_port, Kamailio, KamailioHandle, Scenario, Sipp, SippHandle, Transport};

const UAC_IP: &str = "127.0.77.10";
const PROXY_IP: &str = "127.0.77.30";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Two UAS on their own addresses and Kamailio balancing over them.
fn site(
    uas: Scenario,
    transport: Transport,
    uas_ips: [&str; 2],
) -> (KamailioHandle, Vec<SippHandle>) {
    let servers: Vec<SippHandle> = uas_ips
        .iter()
        .map(|a| {
            Sipp::new(uas.clone())
                .local_ip(ip(a))
                .transport(transport)
                .timeout(Duration::from_secs(30))
                .spawn()
                .unwrap()
        })
        .collect();
    let proxy_ip = ip(PROXY_IP);
    // One worker: with two, Kamailio relays a NOTIFY and the 200 of its
    // SUBSCRIBE (or a 180 and its 200) out of order now and then, and SIPp
    // aborts the call. These tests check the launcher and the scenarios, not
    // that reordering (sip-bench measures Kamailio with two workers).
    let mut kamailio = Kamailio::new()
        .workers(1)
        .listen(SocketAddr::new(proxy_ip, free_port(proxy_ip).unwrap()));
    for s in &servers {
        kamailio = kamailio.destination(s.local_addr(), transport);
    }
    (kamailio.start().unwrap(), servers)
}

#[test]
fn stock_uac_through_kamailio_to_two_stock_uas() {
    let (proxy, servers) = site(
        Scenario::builtin("uas"),
        Transport::Udp,
        ["127.0.77.21", "127.0.77.22"],
    );
    let uac = Sipp::new(Scenario::builtin("uac"))
        .local_ip(ip(UAC_IP))
        .remote(proxy.addr())
        .calls(20)
        .rate(20)
        .duration(Duration::from_millis(100))
        .timeout(Duration::from_secs(30))
        .spawn()
        .unwrap();
    let report = uac.wait(Duration::from_secs(40)).unwrap();
    assert_eq!(
        report.successful,
        20,
        "{report:#?}\n{}",
        proxy.log_tail(2000)
    );
    assert_eq!(report.failed, 0, "{report:#?}");
    assert!(report.all_ok(), "{report:#?}");

    // Both pool members took calls (Call-ID hash spreads 20 calls), and
    // together exactly the 20 the UAC made. The stock uas ends each call
    // with a 4 s timewait, so count calls it received, not completed.
    let per_uas: Vec<u64> = servers
        .into_iter()
        .map(|s| {
            let r = s.stop().unwrap();
            assert_eq!(r.failed, 0, "{r:#?}");
            r.created
        })
        .collect();
    assert_eq!(per_uas.iter().sum::<u64>(), 20, "{per_uas:?}");
    assert!(per_uas.iter().all(|n| *n > 0), "{per_uas:?}");

    // The sampler sees the forked workers and the CPU they spent.
    let after = proxy.stats().unwrap();
    assert!(after.processes >= 3, "{after:?}");
    assert!(after.peak_rss_kb > 0, "{after:?}");
    assert!(after.cpu_us > 0, "{after:?}");
    proxy.stop();
}

/// Runs one repo UAC/UAS pair through Kamailio.
fn through_kamailio(uac: &str, uas: &str, transport: Transport, uas_ips: [&str; 2]) {
    let calls = 10;
    let (proxy, servers) = site(Scenario::repo(uas), transport, uas_ips);
    let client = Sipp::new(Scenario::repo(uac))
        .local_ip(ip(UAC_IP))
        .remote(proxy.addr())
        .transport(transport)
        .calls(calls)
        .rate(20)
        .duration(Duration::from_millis(100))
        .timeout(Duration::from_secs(30))
        .spawn()
        .unwrap();
    let report = client.wait(Duration::from_secs(40)).unwrap();
    let what = format!("{uac} over {transport}");
    assert_eq!(
        report.successful,
        calls,
        "{what}: {report:#?}\n{}",
        proxy.log_tail(2000)
    );
    assert!(report.all_ok(), "{what}: {report:#?}");
    // The UAC's last message may still be on its way to a UAS (the 200
    // for the final NOTIFY); stop() abandons calls in flight.
    std::thread::sleep(Duration::from_millis(500));
    let behind: u64 = servers
        .into_iter()
        .map(|s| {
            let r = s.stop().unwrap();
            assert_eq!(r.failed, 0, "{what} uas: {r:#?}");
            r.successful
        })
        .sum();
    if uac == "uac_options_ping" {
        // R-URI without user: the proxy answers itself, nothing reaches
        // the pool.
        assert_eq!(behind, 0, "{what}");
    } else {
        assert_eq!(behind, calls, "{what}");
    }
}

#[test]
fn repo_scenarios_through_kamailio_over_udp() {
    for (uac, uas) in [
        ("uac_call", "uas_call"),
        ("uac_subscribe", "uas_subscribe"),
        ("uac_cancel", "uas_cancel"),
        ("uac_register", "uas_register"),
        ("uac_options", "uas_options"),
        ("uac_options_ping", "uas_options"),
    ] {
        through_kamailio(uac, uas, Transport::Udp, ["127.0.77.41", "127.0.77.42"]);
    }
}

#[test]
fn repo_scenarios_through_kamailio_over_tcp() {
    for (uac, uas) in [
        ("uac_call", "uas_call"),
        ("uac_subscribe", "uas_subscribe"),
        ("uac_cancel", "uas_cancel"),
        ("uac_unregister", "uas_register"),
    ] {
        through_kamailio(uac, uas, Transport::Tcp, ["127.0.77.51", "127.0.77.52"]);
    }
}

#[test]
fn max_forwards_exhausted_is_answered_483() {
    let (proxy, _servers) = site(
        Scenario::builtin("uas"),
        Transport::Udp,
        ["127.0.77.61", "127.0.77.62"],
    );
    // A one-message scenario: OPTIONS with Max-Forwards: 0 must come back
    // 483 from the proxy itself (RFC 3261 16.3).
    let dir = tempfile::tempdir().unwrap();
    let xml = dir.path().join("mf0.xml");
    std::fs::write(
        &xml,
        r#"<?xml version="1.0" encoding="ISO-8859-1" ?>
<scenario name="mf0">
  <send retrans="500"><![CDATA[

      OPTIONS sip:x@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: <sip:t@[local_ip]>;tag=[call_number]
      To: <sip:x@[remote_ip]>
      Call-ID: [call_id]
      CSeq: 1 OPTIONS
      Max-Forwards: 0
      Content-Length: 0

  ]]></send>
  <recv response="483"/>
</scenario>
"#,
    )
    .unwrap();
    let report = Sipp::new(Scenario::file(&xml))
        .local_ip(ip(UAC_IP))
        .remote(proxy.addr())
        .calls(1)
        .timeout(Duration::from_secs(10))
        .spawn()
        .unwrap()
        .wait(Duration::from_secs(20))
        .unwrap();
    assert!(report.all_ok(), "{report:#?}");
}
