//! Anycast for gate nodes (R-EX-2) through the real binaries: ExaBGP runs
//! `sip-gate announce` as its process and peers over loopback with a real
//! BIRD router. BIRD has the gate's prefix while the gate is ready; on
//! SIGTERM the route leaves BIRD's table within a second while the gate
//! still completes the call it holds (R-GW-1's first step); a new gate
//! announces again. And the announcer alone, fed garbage, silence or
//! nothing by the admin address: the route stays withdrawn, the log says
//! why, nothing crashes.
//!
//! Each test has its own `127.91.N.0/24`: the gate's listener and admin on
//! `.1`, BIRD on `.2` (port 1790), ExaBGP on `.3`, the sg (a SIPp UAS) on
//! `.11`, the caller on `.21`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::{ip, one_sg_site, server_addr};
use testbed::bins::Node;
use testbed::{wait_for, Bird, BirdHandle, ExaBgp, ExaBgpHandle};
use testbed::{Scenario, Sipp, Transport};

const GATE: &str = env!("CARGO_BIN_EXE_sip-gate");

fn v4(net: (u8, u8), host: u8) -> std::net::Ipv4Addr {
    match ip(net, host) {
        std::net::IpAddr::V4(a) => a,
        std::net::IpAddr::V6(_) => unreachable!("ip() builds 127.a.b.host"),
    }
}

/// BIRD on `.2` and ExaBGP on `.3` running `sip-gate announce` for
/// `prefix` against `admin`, the session up.
fn bgp(net: (u8, u8), admin: SocketAddr, prefix: &str) -> (BirdHandle, ExaBgpHandle) {
    let bird = Bird::new(v4(net, 2), 1790, v4(net, 3))
        .start()
        .expect("bird starts");
    let process = [
        GATE,
        "announce",
        "--admin",
        &admin.to_string(),
        "--prefix",
        prefix,
    ]
    .map(String::from)
    .to_vec();
    let exabgp = ExaBgp::new(v4(net, 3), bird.addr(), process)
        .start()
        .expect("exabgp starts");
    let up = wait_for("the BGP session", Duration::from_secs(20), || {
        bird.established().unwrap_or(false).then_some(())
    });
    assert!(
        up.is_ok(),
        "bird: {}\nexabgp: {}",
        bird.log_tail(2000),
        exabgp.log_tail(4000)
    );
    (bird, exabgp)
}

fn has_route(bird: &BirdHandle, prefix: &str) -> bool {
    bird.has_route(prefix).expect("birdc answers")
}

/// Waits (up to 10 s) for BIRD's table to hold `prefix` or not.
fn wait_route(bird: &BirdHandle, exabgp: &ExaBgpHandle, prefix: &str, present: bool) {
    let what = if present {
        "the route in BIRD"
    } else {
        "the route gone from BIRD"
    };
    let r = wait_for(what, Duration::from_secs(10), || {
        (has_route(bird, prefix) == present).then_some(())
    });
    assert!(
        r.is_ok(),
        "{what}: {}\nexabgp: {}",
        bird.routes().unwrap_or_default(),
        exabgp.log_tail(4000)
    );
}

/// How long after `since` BIRD's table first lacks `prefix` (polled every
/// few ms, each poll one `birdc`); `None` after 5 s.
fn gone_after(bird: &BirdHandle, prefix: &str, since: Instant) -> Option<Duration> {
    while since.elapsed() < Duration::from_secs(5) {
        if !has_route(bird, prefix) {
            return Some(since.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// The sg's open INVITE transactions as the gate reports them.
fn sg_transactions(gate: &Node) -> Option<u64> {
    Some(gate.work()?.instances.get("sg-0")?.counts.transactions)
}

#[test]
fn r_ex_2_sigterm_withdraws_the_route_within_a_second_while_the_gate_finishes_its_call() {
    let net = (91, 1);
    let prefix = "198.51.100.91/32";
    let (_dir, site, listener, admin) = one_sg_site(net);
    let mut gate = Node::gate(&site)
        .admin(admin)
        .args(["--drain-deadline-s", "60"])
        .start()
        .unwrap();
    gate.wait_ready().unwrap();
    let (bird, exabgp) = bgp(net, admin, prefix);

    // Ready gate: the route is in the router's table.
    wait_route(&bird, &exabgp, prefix, true);
    assert_eq!(gate.readyz().map(|(code, _)| code), Some(200));

    // One call that rings 2 s at the sg: its INVITE transaction is open
    // across the stop.
    let uas = Sipp::new(Scenario::repo("uas_call_ringing"))
        .local(server_addr(net, 0).ip(), 5060)
        .duration(Duration::from_secs(2))
        .timeout(Duration::from_secs(60))
        .spawn()
        .expect("uas starts");
    let call = Sipp::new(Scenario::repo("uac_call"))
        .local_ip(ip(net, 21))
        .remote(listener)
        .transport(Transport::Udp)
        .calls(1)
        .duration(Duration::from_millis(200))
        .timeout(Duration::from_secs(60))
        .spawn()
        .expect("uac starts");
    wait_for("the call ringing", Duration::from_secs(10), || {
        sg_transactions(&gate).filter(|&t| t > 0)
    })
    .unwrap();

    gate.signal("TERM");
    let sigterm = Instant::now();
    let gone = gone_after(&bird, prefix, sigterm).expect("the route leaves BIRD");
    // R-EX-2: within a second, and before the gate let go of its call.
    assert!(
        gone < Duration::from_secs(1),
        "withdrawn {gone:?} after SIGTERM"
    );
    assert!(gate.running(), "the gate still runs when the route is gone");
    let (code, ready) = gate.readyz().expect("the stopping gate still answers");
    assert_eq!(code, 503, "{ready}");
    assert_eq!(ready["phase"], "stopping", "{ready}");
    assert!(ready["transactions"].as_u64().unwrap() > 0, "{ready}");

    // The withdrawn gate carries the INVITE it held to its final response,
    // then exits (R-GW-1: nothing it forwarded waits for an answer).
    let status = gate
        .wait_exit(Duration::from_secs(60))
        .expect("the gate exits");
    assert!(status.success(), "{status:?}");
    assert!(!has_route(&bird, prefix));
    eprintln!(
        "gate SIGTERM -> route gone in BIRD: {} ms",
        gone.as_millis()
    );

    // A new gate on the node: announced again once it is ready. The call
    // completes through it (its ACK and BYE by the Record-Route token).
    gate.restart().unwrap();
    gate.wait_ready().unwrap();
    let report = call.wait(Duration::from_secs(30)).expect("uac report");
    assert_eq!(report.successful, 1, "{report:?}");
    assert!(report.all_ok(), "{report:?}");
    wait_route(&bird, &exabgp, prefix, true);
    // Why it withdrew is logged: the stopping gate said so for the 2 s
    // its call lasted. (Whether a probe also fell in the moment between
    // the old gate's exit and the new one's listen is luck; the
    // unreachable reason has its own test below.)
    let log = exabgp.log_tail(8000);
    assert!(
        log.contains("not ready (stopping)"),
        "the reasons are logged: {log}"
    );
    drop(uas);
}

/// The figure in docs/benchmarks.md: gate SIGTERM → route gone from BIRD,
/// over several stops of an idle gate (it exits at once, so /readyz goes
/// from 503 to refused).
#[test]
fn r_ex_2_sigterm_to_route_gone_in_bird_over_runs() {
    let net = (91, 2);
    let prefix = "198.51.100.92/32";
    let runs: usize = std::env::var("ANYCAST_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let (_dir, site, _listener, admin) = one_sg_site(net);
    let mut gate = Node::gate(&site).admin(admin).start().unwrap();
    gate.wait_ready().unwrap();
    let (bird, exabgp) = bgp(net, admin, prefix);
    let mut ms = Vec::new();
    for run in 0..runs {
        if run > 0 {
            gate.restart().unwrap();
            gate.wait_ready().unwrap();
        }
        wait_route(&bird, &exabgp, prefix, true);
        // Stops fall anywhere between two polls of /readyz.
        std::thread::sleep(Duration::from_millis(150 + 37 * run as u64));
        gate.signal("TERM");
        let sigterm = Instant::now();
        let gone = gone_after(&bird, prefix, sigterm).expect("the route leaves BIRD");
        ms.push(gone.as_secs_f64() * 1000.0);
        gate.wait_exit(Duration::from_secs(10))
            .expect("the idle gate exits");
    }
    let median = testbed::stats::median(ms.clone());
    let max = ms.iter().cloned().fold(0.0, f64::max);
    eprintln!("gate SIGTERM -> route gone in BIRD over {runs} runs: median {median:.0} ms, max {max:.0} ms ({ms:.0?})");
    assert!(max < 1000.0, "{ms:?}");
}

// === the announcer alone ===

/// `sip-gate announce` against `admin`, stdin and stdout piped; its stdout
/// lines arrive on the channel.
fn announcer(admin: SocketAddr) -> (Child, ChildStdin, mpsc::Receiver<String>) {
    let mut child = Command::new(GATE)
        .args(["announce", "--admin", &admin.to_string()])
        .args([
            "--prefix",
            "198.51.100.93",
            "--interval-ms",
            "50",
            "--timeout-ms",
            "300",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sip-gate announce starts");
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, stdin, rx)
}

/// Runs the announcer against `admin` for a second: it says withdraw once,
/// never announce, keeps running, logs `reason`, and exits 0 when stdin
/// closes (ExaBGP gone).
fn stays_withdrawn(admin: SocketAddr, reason: &str) {
    let (mut child, stdin, lines) = announcer(admin);
    let first = lines
        .recv_timeout(Duration::from_secs(5))
        .expect("a first line");
    assert_eq!(first, "withdraw route 198.51.100.93/32 next-hop self");
    std::thread::sleep(Duration::from_secs(1));
    assert!(lines.try_recv().is_err(), "one command only, on change");
    assert!(child.try_wait().unwrap().is_none(), "still running");
    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "exits when stdin closes");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(log.contains(reason), "{reason:?} in: {log}");
    assert_eq!(
        log.matches("not ready:").count(),
        1,
        "one line per reason: {log}"
    );
}

#[test]
fn r_ex_2_an_admin_address_that_answers_garbage_silence_or_nothing_keeps_the_route_withdrawn() {
    let net = (91, 3);
    // Garbage: an HTTP answer that is not /readyz's.
    let garbage = TcpListener::bind((ip(net, 1), 0)).unwrap();
    let garbage_addr = garbage.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut s in garbage.incoming().map_while(Result::ok) {
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello");
        }
    });
    stays_withdrawn(garbage_addr, "answered garbage");

    // Silence: accepts, never answers.
    let silent = TcpListener::bind((ip(net, 2), 0)).unwrap();
    let silent_addr = silent.local_addr().unwrap();
    std::thread::spawn(move || {
        let held: Vec<_> = silent.incoming().map_while(Result::ok).collect();
        drop(held);
    });
    stays_withdrawn(silent_addr, "gave no answer within 300 ms");

    // Nothing listening.
    let nothing = SocketAddr::new(ip(net, 3), 9091);
    stays_withdrawn(nothing, "unreachable");
}
