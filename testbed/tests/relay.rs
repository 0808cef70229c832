//! The blind UDP relay between stock SIPp uac and uas, in-process and as
//! the `blind-relay` binary: the floor sip-gate is benchmarked against must
//! carry calls without loss.

use std::{
    net::{IpAddr, SocketAddr},
    process::{Command, Stdio},
    time::Duration,
};

use testbed::{free_port, relay::BlindRelay, wait_listening, ProcStats, Scenario, Sipp, Transport};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn uas(addr: &str) -> testbed::SippHandle {
    Sipp::new(Scenario::builtin("uas"))
        .local_ip(ip(addr))
        .calls(20)
        .timeout(Duration::from_secs(30))
        .spawn()
        .unwrap()
}

fn uac(addr: &str, relay: SocketAddr) -> testbed::SippReport {
    Sipp::new(Scenario::builtin("uac"))
        .local_ip(ip(addr))
        .remote(relay)
        .calls(20)
        .rate(20)
        .duration(Duration::from_millis(100))
        .timeout(Duration::from_secs(30))
        .spawn()
        .unwrap()
        .wait(Duration::from_secs(40))
        .unwrap()
}

#[test]
fn stock_call_through_the_in_process_relay() {
    let server = uas("127.0.78.20");
    // Port 0: the kernel picks a free one atomically.
    let relay = BlindRelay::start("127.0.78.30:0".parse().unwrap(), server.local_addr()).unwrap();
    let report = uac("127.0.78.10", relay.local_addr());
    assert_eq!(report.successful, 20, "{report:#?} {:?}", relay.counts());
    assert!(report.all_ok(), "{report:#?}");
    let s = server.wait(Duration::from_secs(10)).unwrap();
    assert_eq!(s.successful, 20, "{s:#?}");
    // At least INVITE, ACK, BYE per call up and 180, 200, 200 down; more
    // only if a slow machine made a side retransmit.
    let counts = relay.stop();
    assert!(counts.to_upstream >= 60, "{counts:?}");
    assert!(counts.to_client >= 60, "{counts:?}");
    assert!(
        counts.to_upstream <= 60 + report.retransmissions + s.retransmissions,
        "{counts:?}"
    );
}

#[test]
fn stock_call_through_the_blind_relay_binary() {
    let server = uas("127.0.78.21");
    let relay_ip = ip("127.0.78.31");
    let listen = SocketAddr::new(relay_ip, free_port(relay_ip).unwrap());
    let mut relay = Command::new(env!("CARGO_BIN_EXE_blind-relay"))
        .arg("--listen")
        .arg(listen.to_string())
        .arg("--upstream")
        .arg(server.local_addr().to_string())
        .arg("--seconds")
        .arg("30")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_listening(
        listen,
        Transport::Udp,
        Duration::from_secs(5)
    ));
    let report = uac("127.0.78.11", listen);
    let cpu = ProcStats::sample(relay.id()).unwrap();
    relay.kill().unwrap();
    relay.wait().unwrap();
    assert_eq!(report.successful, 20, "{report:#?}");
    assert!(report.all_ok(), "{report:#?}");
    assert_eq!(cpu.processes, 1, "{cpu:?}");
    assert!(cpu.peak_rss_kb > 0, "{cpu:?}");
}
