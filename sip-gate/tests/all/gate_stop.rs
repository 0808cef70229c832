//! The gate's own stop (R-GW-1), through the real `sip-gate` binary with
//! SIPp on both sides: SIGTERM mid-load fails `/readyz` at once, new calls
//! get 503 with Retry-After, every INVITE already forwarded gets its final
//! response through the stopping gate, and the gate exits by itself as soon
//! as nothing it forwarded waits for one: completed transactions, kept in
//! its table for their retransmissions, do not hold it (the calls' ACK,
//! re-INVITE and BYE then pass the gate's next run, by its Record-Route
//! token). A gate with only completed transactions exits at once; a ringing
//! call holds it until answered. The drain deadline cuts a stop short, and
//! a second signal ends it at once. And the other end of a gate's life:
//! until its drain view is loaded it is not ready and refuses new work.
//!
//! Each test has its own `127.24.N.0/24`: the gate's listener and admin on
//! `.1`, the sg (a SIPp UAS) on `.11`, the callers on `.21` and `.22`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::{ip, one_sg_site, server_addr};
use serde_json::Value;
use sip_gate::Phase;
use testbed::bins::Node;
use testbed::wait_for;
use testbed::{Scenario, Sipp, SippHandle, Transport};

/// sg-0's work as the gate reports it: (open INVITE transactions, calls).
fn sg_work(gate: &Node) -> Option<(u64, u64)> {
    let c = gate.work()?.instances.get("sg-0")?.counts;
    Some((c.transactions, c.dialogs))
}

fn uac(scenario: &str, net: (u8, u8), host: u8, to: SocketAddr) -> Sipp {
    Sipp::new(Scenario::repo(scenario))
        .local_ip(ip(net, host))
        .remote(to)
        .transport(Transport::Udp)
        .timeout(Duration::from_secs(120))
}

/// `calls` calls of `uac_call` from `.21` at `rate` a second, each held
/// `hold`, through `listener`.
fn calls_of(net: (u8, u8), listener: SocketAddr, calls: u64, rate: u32, hold: Duration) -> Sipp {
    uac("uac_call", net, 21, listener)
        .calls(calls)
        .rate(rate)
        .duration(hold)
}

/// sg-0's SIPp: `uas_call_ringing`, which rings `ring` before it answers,
/// ending by `timeout`.
fn ringing_sg0(net: (u8, u8), ring: Duration, timeout: Duration) -> SippHandle {
    Sipp::new(Scenario::repo("uas_call_ringing"))
        .local(server_addr(net, 0).ip(), 5060)
        .duration(ring)
        .timeout(timeout)
        .spawn()
        .expect("uas starts")
}

/// The value of `key=N` on the log line that contains `what`.
fn logged(log: &str, what: &str, key: &str) -> Option<u64> {
    let line = log.lines().find(|l| l.contains(what))?;
    let at = line.find(&format!("{key}="))? + key.len() + 1;
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The gate on `site`, stopping within `deadline_s` (`--drain-deadline-s`),
/// ready.
fn ready_gate(site: &std::path::Path, admin: std::net::SocketAddr, deadline_s: &str) -> Node {
    let mut gate = Node::gate(site)
        .admin(admin)
        .args(["--drain-deadline-s", deadline_s])
        .start()
        .unwrap();
    gate.wait_ready().unwrap();
    gate
}

#[test]
fn r_gw_1_sigterm_mid_load_completes_every_forwarded_call_refuses_new_ones_and_exits_when_idle() {
    let net = (24, 1);
    let (_dir, site, listener, admin) = one_sg_site(net);
    let deadline_s = 120;
    let mut gate = ready_gate(&site, admin, "120");

    // The sg rings 5 s before answering (the stopping gate runs that long,
    // time for the refused calls below); callers hold 3 s, re-INVITE, BYE.
    let uas = ringing_sg0(net, Duration::from_secs(5), Duration::from_secs(150));
    let load = calls_of(net, listener, 10_000, 20, Duration::from_secs(3))
        .control()
        .spawn()
        .expect("load starts");
    // Calls in every stage: some held, more ringing.
    wait_for("calls established", Duration::from_secs(20), || {
        sg_work(&gate).filter(|&(ringing, up)| up >= 10 && ringing > 0)
    })
    .unwrap();

    // The callers start no new call: what the gate forwarded is what must
    // complete. Their counter settles once the last INVITE is through.
    load.finish_calls().unwrap();
    let new_work = "sipgate_new_work_total{instance=\"sg-0\"}";
    let forwarded = wait_for("the load to stop", Duration::from_secs(5), || {
        let before = gate.metric(new_work).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        (gate.metric(new_work).unwrap() == before).then_some(before)
    })
    .unwrap();

    gate.signal("TERM");
    let sigterm = Instant::now();
    // /readyz fails at once, and says why.
    let (code, ready) = wait_for("/readyz to fail", Duration::from_secs(5), || {
        gate.readyz().filter(|(code, _)| *code != 200)
    })
    .unwrap();
    assert!(sigterm.elapsed() < Duration::from_secs(2));
    assert_eq!(code, 503);
    assert_eq!(ready["ready"], false, "{ready}");
    assert_eq!(ready["phase"], "stopping", "{ready}");
    assert!(ready["why"][0].as_str().unwrap().starts_with("stopping"));
    assert!(ready["transactions"].as_u64().unwrap() > 0, "{ready}");
    assert!(ready["in_flight"].as_u64().unwrap() > 0, "{ready}");
    // INVITE transactions in flight when the stop began.
    let (ringing, up) = sg_work(&gate).unwrap();
    assert!(ringing > 0 && up > 0, "{ringing} ringing, {up} up");

    // New calls: 503 with Retry-After (the scenario checks the header).
    let refused = uac("uac_call_expect_503", net, 22, listener)
        .calls(20)
        .rate(20)
        .spawn()
        .expect("uac starts")
        .wait(Duration::from_secs(60))
        .expect("uac report");
    assert_eq!(refused.successful, 20, "{refused:?}");
    assert!(refused.all_ok(), "{refused:?}");
    let outcome = "sipgate_requests_total{method=\"INVITE\",outcome=\"stopping\"}";
    assert_eq!(gate.metric(outcome).unwrap(), 20.0);
    assert_eq!(
        gate.metric("sipgate_phase{phase=\"stopping\"}").unwrap(),
        1.0
    );

    // The gate exits by itself once the last INVITE it forwarded has its
    // final response (the sg rings 5 s), while calls are still up: their
    // completed transactions do not hold it.
    let status = gate
        .wait_exit(Duration::from_secs(deadline_s))
        .expect("the gate exits by itself");
    let stopped = sigterm.elapsed();
    assert!(status.success(), "{status:?}");
    let log = gate.log();
    assert!(
        log.contains("stopped: no transaction left in flight"),
        "{log}"
    );
    // Well before the 120 s deadline: it left when idle (about 5-7 s: the
    // ring, then the quiet window), with room for a loaded machine.
    assert!(stopped < Duration::from_secs(20), "{stopped:?}");

    // Its next run takes the rest of the calls (ACK, re-INVITE, BYE) by
    // the Record-Route token: every call forwarded before the stop
    // completes, none failed, and every one the callers made had been
    // forwarded.
    gate.restart().unwrap();
    gate.wait_ready().unwrap();
    let calls = load.wait(Duration::from_secs(60)).expect("load report");
    let calls_done = sigterm.elapsed();
    assert!(calls.created >= 10, "{calls:?}");
    assert_eq!(calls.successful, calls.created, "{calls:?}");
    assert!(calls.all_ok(), "{calls:?}");
    assert_eq!(calls.created as f64, forwarded, "{calls:?}");
    assert!(stopped < calls_done, "{stopped:?} {calls_done:?}");
    eprintln!(
        "{} calls completed across the stop and the next run; exited {:.1} s after SIGTERM ({:.1} s before the last call ended)",
        calls.created,
        stopped.as_secs_f64(),
        (calls_done - stopped).as_secs_f64()
    );
    let sg = uas.stop().expect("uas report");
    assert_eq!(sg.successful, calls.created, "{sg:?}");
    assert_eq!(sg.failed, 0, "{sg:?}");
}

/// A gate with 5 calls ringing (the sg answers after 60 s) through it,
/// to be stopped with `--drain-deadline-s deadline`: their INVITEs are in
/// flight, which holds a stopping gate.
fn gate_with_calls_ringing(
    net: (u8, u8),
    deadline: &str,
) -> (tempfile::TempDir, Node, SippHandle, SippHandle) {
    let (dir, site, listener, admin) = one_sg_site(net);
    let gate = ready_gate(&site, admin, deadline);
    let uas = ringing_sg0(net, Duration::from_secs(60), Duration::from_secs(90));
    let calls = calls_of(net, listener, 5, 10, Duration::from_secs(60))
        .timeout(Duration::from_secs(90))
        .spawn()
        .expect("uac starts");
    wait_for("5 calls ringing", Duration::from_secs(10), || {
        sg_work(&gate).filter(|&(ringing, _)| ringing == 5)
    })
    .unwrap();
    (dir, gate, uas, calls)
}

#[test]
fn r_gw_1_the_drain_deadline_cuts_a_stop_short() {
    let (_dir, mut gate, _uas, _calls) = gate_with_calls_ringing((24, 2), "3");
    gate.signal("TERM");
    let sigterm = Instant::now();
    let status = gate
        .wait_exit(Duration::from_secs(30))
        .expect("the gate exits at the deadline");
    let stopped = sigterm.elapsed();
    assert!(status.success(), "{status:?}");
    // At the deadline, not before; the join that follows is bounded too.
    assert!(
        (Duration::from_secs(3)..Duration::from_secs(8)).contains(&stopped),
        "{stopped:?}"
    );
    let log = gate.log();
    let left = logged(&log, "drain deadline reached", "in_flight");
    assert!(left.is_some_and(|n| n > 0), "{log}");
    assert!(!log.contains("no transaction left"), "{log}");
}

#[test]
fn r_gw_1_a_second_signal_stops_at_once() {
    let (_dir, mut gate, _uas, _calls) = gate_with_calls_ringing((24, 3), "60");
    gate.signal("TERM");
    let (_, ready): (u16, Value) = wait_for("stopping", Duration::from_secs(5), || {
        gate.readyz().filter(|(_, r)| r["phase"] == "stopping")
    })
    .unwrap();
    assert!(ready["in_flight"].as_u64().unwrap() > 0, "{ready}");
    gate.signal("INT");
    let second = Instant::now();
    let status = gate
        .wait_exit(Duration::from_secs(10))
        .expect("the gate exits on the second signal");
    assert!(status.success(), "{status:?}");
    assert!(
        second.elapsed() < Duration::from_secs(5),
        "{:?}",
        second.elapsed()
    );
    let log = gate.log();
    assert!(log.contains("stopped at once: second signal"), "{log}");
    assert!(log.contains("signal=\"SIGINT\""), "{log}");
}

/// Completed transactions do not hold a stopping gate (R-GW-1): calls
/// through it that ended (INVITE, ACK, BYE answered) leave their
/// transactions in its table for Timer D/J/K, up to 32 s, yet after SIGTERM
/// it exits at once.
#[test]
fn r_gw_1_completed_transactions_do_not_hold_a_stopping_gate() {
    let net = (24, 5);
    let (_dir, site, listener, admin) = one_sg_site(net);
    let mut gate = ready_gate(&site, admin, "60");
    let _uas = Sipp::new(Scenario::repo("uas_call"))
        .local(server_addr(net, 0).ip(), 5060)
        .timeout(Duration::from_secs(60))
        .spawn()
        .expect("uas starts");
    let calls = calls_of(net, listener, 3, 10, Duration::from_millis(100))
        .spawn()
        .expect("uac starts")
        .wait(Duration::from_secs(30))
        .expect("uac report");
    assert_eq!(calls.successful, 3, "{calls:?}");
    // The table still holds the completed transactions; none is in flight.
    let (_, ready) = gate.readyz().expect("/readyz");
    assert!(ready["transactions"].as_u64().unwrap() > 0, "{ready}");
    assert_eq!(ready["in_flight"], 0, "{ready}");

    gate.signal("TERM");
    let sigterm = Instant::now();
    let status = gate
        .wait_exit(Duration::from_secs(40))
        .expect("the gate exits");
    let stopped = sigterm.elapsed();
    assert!(status.success(), "{status:?}");
    let log = gate.log();
    assert!(
        log.contains("stopped: no transaction left in flight"),
        "{log}"
    );
    eprintln!(
        "completed transactions only: exited {} ms after SIGTERM",
        stopped.as_millis()
    );
    assert!(stopped < Duration::from_secs(3), "{stopped:?}");
}

/// A ringing call holds a stopping gate (R-GW-1): its INVITE waits for a
/// final response. The gate keeps running until the sg answers, then exits
/// promptly; the call completes through its next run.
#[test]
fn r_gw_1_a_ringing_call_holds_the_stop_until_it_is_answered() {
    let net = (24, 6);
    let ring = Duration::from_secs(4);
    let (_dir, site, listener, admin) = one_sg_site(net);
    let mut gate = ready_gate(&site, admin, "60");
    let uas = ringing_sg0(net, ring, Duration::from_secs(60));
    let call = calls_of(net, listener, 1, 1, Duration::from_millis(500))
        .timeout(Duration::from_secs(60))
        .spawn()
        .expect("uac starts");
    wait_for("the call ringing", Duration::from_secs(5), || {
        sg_work(&gate).filter(|&(ringing, _)| ringing == 1)
    })
    .unwrap();
    // The sg answers `ring` after the INVITE reached it, at the latest
    // `ring` from now.
    let answered_by = Instant::now() + ring;

    gate.signal("TERM");
    let sigterm = Instant::now();
    let ringing = answered_by - ring / 2;
    assert!(
        gate.wait_exit(ringing.saturating_duration_since(sigterm))
            .is_none(),
        "exited while ringing"
    );
    let (_, ready) = gate.readyz().expect("/readyz while ringing");
    assert_eq!(ready["phase"], "stopping", "{ready}");
    assert_eq!(ready["in_flight"], 1, "{ready}");
    let status = gate
        .wait_exit(Duration::from_secs(20))
        .expect("the gate exits once the call is answered");
    let stopped = sigterm.elapsed();
    assert!(status.success(), "{status:?}");
    let answered = answered_by - sigterm;
    eprintln!(
        "ringing call: exited {} ms after SIGTERM, the sg answered at most {} ms after it",
        stopped.as_millis(),
        answered.as_millis()
    );
    // The answer, its ACK, then the two quiet seconds in which the call's
    // next message would still find this run (R-GW-1, `gate::QUIET`).
    assert!(
        stopped < answered + Duration::from_millis(5000),
        "{stopped:?}"
    );
    assert!(gate
        .log()
        .contains("stopped: no transaction left in flight"));

    // The ACK and the BYE meet the gate's next run.
    gate.restart().unwrap();
    gate.wait_ready().unwrap();
    let report = call.wait(Duration::from_secs(40)).expect("uac report");
    assert_eq!(report.successful, 1, "{report:?}");
    let sg = uas.stop().expect("uas report");
    assert_eq!(sg.successful, 1, "{sg:?}");
}

/// Until its drain view is loaded a gate is `starting`: not ready, and new
/// work gets 503 (the binary binds first, then reads the store); once
/// loaded it serves. In-process, with the library's entry point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_gw_1_a_starting_gate_refuses_new_work_until_its_view_is_loaded() {
    let net = (24, 4);
    let text = crate::common::site(net, 1, &crate::common::balance_sg(net));
    let config = crate::common::config(&text);
    let drain = ringsync::state::DrainState::new(std::sync::Arc::new(config.clone()));
    let gate = sip_gate::Gate::start_awaiting_view(
        config,
        drain,
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .expect("gate starts");
    let listener = crate::common::listener_addr(&gate, "subs");
    let ready = sip_gate::admin::readiness(gate.core());
    assert_eq!(ready.phase, Phase::Starting);
    assert!(!ready.ready);
    assert_eq!(ready.why, ["drain view not loaded"]);

    let refused = crate::common::run(crate::common::uac(
        Scenario::repo("uac_call_expect_503"),
        ip(net, 21),
        listener,
        Transport::Udp,
        3,
        10,
    ))
    .await;
    crate::common::assert_all_ok("starting: 503", &refused, 3);

    let mut phases = gate.lifecycle().subscribe();
    gate.lifecycle().view_loaded();
    phases
        .wait_for(|p| *p == Phase::Serving)
        .await
        .expect("serving");
    assert!(sip_gate::admin::readiness(gate.core()).ready);
    let _uas = crate::common::uas("uas_call", server_addr(net, 0), Transport::Udp);
    let served = crate::common::run(crate::common::uac(
        Scenario::repo("uac_call"),
        ip(net, 21),
        listener,
        Transport::Udp,
        3,
        10,
    ))
    .await;
    crate::common::assert_all_ok("serving", &served, 3);
    gate.shutdown(Duration::from_secs(5)).await;
}
