//! Every UAC/UAS pair of sipp-scenarios/ back to back, no proxy between:
//! proves the scenarios themselves are sound before anything is measured
//! through them.

use std::{net::IpAddr, time::Duration};

use testbed::{Scenario, Sipp, SippReport, Transport};

const UAC_IP: &str = "127.0.0.10";
const UAS_IP: &str = "127.0.0.20";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Runs `uac` against `uas` for `calls` calls and returns both reports.
fn run_pair(uac: &str, uas: &str, transport: Transport, calls: u64) -> (SippReport, SippReport) {
    let server = Sipp::new(Scenario::repo(uas))
        .local_ip(ip(UAS_IP))
        .transport(transport)
        .calls(calls)
        .timeout(Duration::from_secs(30))
        .spawn()
        .unwrap_or_else(|e| panic!("{uas} over {transport}: {e}"));
    let client = Sipp::new(Scenario::repo(uac))
        .local_ip(ip(UAC_IP))
        .remote(server.local_addr())
        .transport(transport)
        .calls(calls)
        .rate(20)
        .duration(Duration::from_millis(100))
        .timeout(Duration::from_secs(30))
        .spawn()
        .unwrap_or_else(|e| panic!("{uac} over {transport}: {e}"));
    let c = client.wait(Duration::from_secs(40)).unwrap();
    let s = server.wait(Duration::from_secs(10)).unwrap();
    (c, s)
}

fn assert_all_ok(what: &str, calls: u64, (uac, uas): (SippReport, SippReport)) {
    assert_eq!(uac.successful, calls, "{what} uac: {uac:#?}");
    assert_eq!(uac.failed, 0, "{what} uac: {uac:#?}");
    assert!(uac.all_ok(), "{what} uac: {uac:#?}");
    assert_eq!(uas.successful, calls, "{what} uas: {uas:#?}");
    assert!(uas.all_ok(), "{what} uas: {uas:#?}");
}

#[test]
fn call_pair_over_udp() {
    assert_all_ok(
        "call/udp",
        20,
        run_pair("uac_call", "uas_call", Transport::Udp, 20),
    );
}

#[test]
fn call_pair_over_tcp() {
    assert_all_ok(
        "call/tcp",
        20,
        run_pair("uac_call", "uas_call", Transport::Tcp, 20),
    );
}

#[test]
fn other_pairs_over_udp_and_tcp() {
    let pairs = [
        ("uac_register", "uas_register"),
        ("uac_unregister", "uas_register"),
        ("uac_subscribe", "uas_subscribe"),
        ("uac_options", "uas_options"),
        ("uac_options_ping", "uas_options"),
        ("uac_cancel", "uas_cancel"),
        ("uac_call", "uas_call_ringing"),
        ("uac_call_callee_bye", "uas_call_bye"),
        ("uac_register_short", "uas_register"),
        ("uac_subscribe_until_terminated", "uas_subscribe_terminate"),
    ];
    for transport in [Transport::Udp, Transport::Tcp] {
        for (uac, uas) in pairs {
            let what = format!("{uac}/{uas} over {transport}");
            assert_all_ok(&what, 5, run_pair(uac, uas, transport, 5));
        }
    }
}

/// `finish_calls` (SIPp's `q`): no new call after it, and the run ends by
/// itself once the calls in progress are done, every one of them complete.
#[test]
fn finish_calls_ends_the_run_once_the_calls_in_progress_end() {
    let server = Sipp::new(Scenario::repo("uas_call"))
        .local_ip(ip(UAS_IP))
        .timeout(Duration::from_secs(30))
        .spawn()
        .unwrap();
    let client = Sipp::new(Scenario::repo("uac_call"))
        .local_ip(ip(UAC_IP))
        .remote(server.local_addr())
        .calls(10_000)
        .rate(20)
        .duration(Duration::from_millis(1500))
        .timeout(Duration::from_secs(30))
        .control()
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    client.finish_calls().unwrap();
    let c = client.wait(Duration::from_secs(20)).unwrap();
    assert!((10..10_000).contains(&c.created), "{c:#?}");
    assert_eq!(c.successful, c.created, "{c:#?}");
    assert!(c.all_ok(), "{c:#?}");
    let s = server.stop().unwrap();
    assert_eq!(s.successful, c.created, "{s:#?}");

    // A SIPp without a control port says so.
    let plain = Sipp::new(Scenario::repo("uas_call"))
        .local_ip(ip(UAS_IP))
        .timeout(Duration::from_secs(5))
        .spawn()
        .unwrap();
    assert!(matches!(
        plain.finish_calls(),
        Err(testbed::Error::NoControlPort { .. })
    ));
}

#[test]
fn builtin_scenarios_and_failure_reporting() {
    // Stock SIPp uac against nothing: every call must be reported failed,
    // which is what makes the zero-failure assertions above meaningful.
    let nobody = std::net::UdpSocket::bind((ip(UAS_IP), 0)).unwrap();
    let uac = Sipp::new(Scenario::builtin("uac"))
        .local_ip(ip(UAC_IP))
        .remote(nobody.local_addr().unwrap())
        .calls(2)
        .rate(20)
        .arg("-max_retrans")
        .arg("1")
        .timeout(Duration::from_secs(20))
        .spawn()
        .unwrap();
    let report = uac.wait(Duration::from_secs(30)).unwrap();
    assert_eq!(report.failed, 2, "{report:#?}");
    assert_eq!(report.exit_code, Some(1), "{report:#?}");
    assert_eq!(
        report.failures.get("MaxUDPRetrans"),
        Some(&2),
        "{report:#?}"
    );
    assert!(report.retransmissions > 0, "{report:#?}");
}

/// A niced SIPp (a load generator that must not take the cores from what
/// it measures) runs at that niceness and still plays its calls.
#[test]
fn a_niced_sipp_runs_at_its_niceness_and_plays_its_calls() {
    let server = Sipp::new(Scenario::repo("uas_call"))
        .local_ip(ip(UAS_IP))
        .calls(5)
        .nice(19)
        .timeout(Duration::from_secs(30))
        .spawn()
        .unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", server.pid())).unwrap();
    // Field 19 is the nice value; fields after the `(comm)` are split here.
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    let nice: i32 = after_comm.split(' ').nth(16).unwrap().parse().unwrap();
    assert_eq!(nice, 19, "{stat}");
    let client = Sipp::new(Scenario::repo("uac_call"))
        .local_ip(ip(UAC_IP))
        .remote(server.local_addr())
        .calls(5)
        .rate(20)
        .duration(Duration::from_millis(100))
        .timeout(Duration::from_secs(30))
        .spawn()
        .unwrap();
    assert_all_ok(
        "niced uas",
        5,
        (
            client.wait(Duration::from_secs(40)).unwrap(),
            server.wait(Duration::from_secs(10)).unwrap(),
        ),
    );
}
