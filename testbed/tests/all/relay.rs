//! The blind UDP relay between stock SIPp uac and uas, in-process and as
//! the `blind-relay` binary: the floor sip-gate is benchmarked against must
//! carry calls without loss.

use std::{
    net::{IpAddr, SocketAddr},
    process::{Child, Command, Stdio},
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

/// The `blind-relay` binary on a free port of `addr`, relaying to
/// `upstreams`, once it listens; it stops by itself after 30 s.
fn relay_binary(addr: &str, upstreams: &[SocketAddr]) -> (Child, SocketAddr) {
    let relay_ip = ip(addr);
    let listen = SocketAddr::new(relay_ip, free_port(relay_ip).unwrap());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_blind-relay"));
    cmd.arg("--listen").arg(listen.to_string());
    for u in upstreams {
        cmd.arg("--upstream").arg(u.to_string());
    }
    let relay = cmd
        .args(["--seconds", "30"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_listening(
        listen,
        Transport::Udp,
        Duration::from_secs(5)
    ));
    (relay, listen)
}

#[test]
fn stock_call_through_the_in_process_relay() {
    let server = uas("127.0.78.20");
    // Port 0: the kernel picks a free one atomically.
    let relay =
        BlindRelay::start("127.0.78.30:0".parse().unwrap(), &[server.local_addr()]).unwrap();
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
    let (mut relay, listen) = relay_binary("127.0.78.31", &[server.local_addr()]);
    let report = uac("127.0.78.11", listen);
    let cpu = ProcStats::sample(relay.id()).unwrap();
    relay.kill().unwrap();
    relay.wait().unwrap();
    assert_eq!(report.successful, 20, "{report:#?}");
    assert!(report.all_ok(), "{report:#?}");
    assert_eq!(cpu.processes, 1, "{cpu:?}");
    assert!(cpu.peak_rss_kb > 0, "{cpu:?}");
}

#[test]
fn the_relay_binary_keeps_each_call_on_one_of_several_upstreams() {
    let servers: Vec<_> = ["127.0.78.22", "127.0.78.23", "127.0.78.24"]
        .iter()
        .map(|a| {
            Sipp::new(Scenario::builtin("uas"))
                .local_ip(ip(a))
                .timeout(Duration::from_secs(60))
                .spawn()
                .unwrap()
        })
        .collect();
    let upstreams: Vec<SocketAddr> = servers.iter().map(|s| s.local_addr()).collect();
    let (mut relay, listen) = relay_binary("127.0.78.32", &upstreams);
    let report = uac("127.0.78.12", listen);
    relay.kill().unwrap();
    relay.wait().unwrap();
    // Every call completed: its ACK and BYE reached the server that took
    // its INVITE (another would answer the BYE with 481).
    assert_eq!(report.successful, 20, "{report:#?}");
    assert!(report.all_ok(), "{report:#?}");
    let per_server: Vec<u64> = servers
        .into_iter()
        .map(|s| s.stop().unwrap().successful)
        .collect();
    assert_eq!(per_server.iter().sum::<u64>(), 20, "{per_server:?}");
    assert!(per_server.iter().all(|&n| n > 0), "{per_server:?}");
}
