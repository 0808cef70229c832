//! The automatic UDP worker count (issue 29) through the real `sip-gate`
//! binary with SIPp on both sides: an idle listener keeps its one worker;
//! under sustained load the supervisor adds one (its threshold set low by
//! `[overload] udp_worker_busy_percent`, so a small bounded load crosses it
//! whatever the machine), and no call fails across the switch, while the
//! kernel moves some peers to the new socket.
//!
//! Its own `127.39.1.0/24`: the gate's listener and admin on `.1`, the sg
//! (a SIPp UAS) on `.11`, the callers on `.21` to `.23`. Every SIPp run is
//! bounded in calls, rate and time.

use std::time::{Duration, Instant};

use crate::common::overload::{self, outcomes, udp_worker_threads};
use testbed::bins::Node;
use testbed::Transport;

const NET: (u8, u8) = (39, 1);

fn workers_gauge(gate: &Node) -> f64 {
    let metrics = gate.metrics().expect("/metrics");
    metrics.sum("sipgate_udp_workers", &["listener=\"subs\""])
}

/// Issue 29: one worker while idle; a second added under sustained load
/// (capped at `udp_workers_max = 2`), and every call placed before, across
/// and after the addition completes.
#[test]
fn the_supervisor_adds_a_worker_under_sustained_load_and_no_call_fails_across_the_switch() {
    let (dir, gate, listener) = overload::ready_gate(
        NET,
        "",
        "udp_workers_max = 2\nudp_worker_busy_percent = 1\nper_source_rate = 1000\nper_source_burst = 1000\n",
    );

    // Idle for longer than the supervisor's three ticks: still one worker.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(udp_worker_threads(&gate), ["udp-0-0"]);
    assert_eq!(workers_gauge(&gate), 1.0);

    let uas = overload::sg(NET, Transport::Udp);
    // Three callers (three peers the kernel hashes over the sockets), 30
    // calls/s each for 12 s: a load well within one worker, above the
    // threshold of 1% of a core.
    let callers: Vec<_> = (21..24)
        .map(|host| {
            let log = dir.path().join(format!("calls-{host}.log"));
            let sipp = overload::caller(NET, host, listener, Transport::Udp, &log)
                .calls(360)
                .rate(30)
                .duration(Duration::from_millis(200))
                .spawn()
                .expect("caller starts");
            (log, sipp)
        })
        .collect();

    // The second worker comes while the load runs.
    let until = Instant::now() + Duration::from_secs(12);
    while udp_worker_threads(&gate).len() < 2 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(udp_worker_threads(&gate), ["udp-0-0", "udp-0-1"]);

    for (log, sipp) in callers {
        let report = sipp.wait(Duration::from_secs(90)).expect("caller ends");
        assert!(report.all_ok(), "{report:?}");
        assert_eq!(outcomes(&log), (0, 360, 360), "{report:?}");
    }
    let sg = uas.stop().expect("uas report");
    assert_eq!((sg.successful, sg.failed), (1080, 0), "{sg:?}");
    // Capped at udp_workers_max, and the gauge says so.
    assert_eq!(udp_worker_threads(&gate), ["udp-0-0", "udp-0-1"]);
    assert_eq!(workers_gauge(&gate), 2.0);
}
