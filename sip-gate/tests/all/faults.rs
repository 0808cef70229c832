//! Faults, through the real `sip-gate` binary and real SIPp peers:
//!
//! - traffic outranks probes (R-FT-1 amended): an sg that answers calls
//!   but not the probes keeps its calls' BYEs; one killed while calls are
//!   up (down by probe, and its traffic failed: a refused connect) gets its
//!   in-dialog requests answered 408 at once, not silence until Timer F; a
//!   call on a live sg is not affected;
//! - a probe storm: a hundred configured instances that never answer (half
//!   with nothing listening, half blackholed), probed five times a second:
//!   calls to the live sg go on completing normally (R-FT-2);
//! - a gate killed with `kill -9` while another gate of the site takes over
//!   its address: the call's later requests reach the second gate, which
//!   routes them by the Record-Route token to the same sg (R-GW-2).
//!
//! Addresses: `127.97.N.0/24`, one `N` per test (1 to 4); gates on `.1`-`.3`, the sg
//! on `.11`/`.12`, callers on `.100`/`.101`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use testbed::bins::Node;
use testbed::fixture::{Mode, SiteFile, UDP};
use testbed::wait_for;
use testbed::{Scenario, Sipp, SippHandle, SippReport, Transport};

fn ip(net: u8, host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 97, net, host))
}

fn at(net: u8, host: u8, port: u16) -> SocketAddr {
    SocketAddr::new(ip(net, host), port)
}

/// A site: `sg` instances `(id, address)` each on its own server
/// `srv-ID`, `health` as the `[health]` body; the listeners are the test's.
fn site(net: u8, sg: &[(String, SocketAddr)], health: &str) -> SiteFile {
    let mut site = SiteFile::new(&format!("faults-{net}")).health(health);
    for (id, addr) in sg {
        let server = format!("srv-{id}");
        site = site.servers(&[&server]).instance(id, "sg", &server, *addr);
    }
    site
}

/// A guarding listener's `extra`: UDP and TCP.
const UDP_TCP: &str = r#"transports = ["udp", "tcp"]"#;

/// Probes every 200 ms, down after two misses of 150 ms.
const PROBES: &str = "interval_ms = 200\ntimeout_ms = 150\nfailures = 2";

/// An sg: SIPp answering calls, and the gate's OPTIONS probes (`-aa`).
fn uas(addr: SocketAddr) -> SippHandle {
    Sipp::new(Scenario::repo("uas_call"))
        .local(addr.ip(), addr.port())
        .arg("-aa")
        .timeout(Duration::from_secs(90))
        .spawn()
        .expect("uas starts")
}

fn caller(scenario: &str, local: IpAddr, gate: SocketAddr, calls: u64, hold: Duration) -> Sipp {
    Sipp::new(Scenario::repo(scenario))
        .local_ip(local)
        .remote(gate)
        .transport(Transport::Udp)
        .calls(calls)
        .rate(10)
        .duration(hold)
        .timeout(Duration::from_secs(60))
}

fn kill9(pid: u32) {
    let ok = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill runs")
        .success();
    assert!(ok, "kill -9 {pid}");
}

fn assert_all_ok(what: &str, r: &SippReport, calls: u64) {
    assert!(r.all_ok() && r.successful == calls, "{what}: {r:?}");
}

fn dialogs(gate: &Node, id: &str) -> u64 {
    gate.work().map_or(0, |r| r.instances[id].counts.dialogs)
}

fn state_is(gate: &Node, id: &str, state: &str) -> bool {
    in_state(&metrics(gate), id, state)
}

/// One sample of the gate's `/metrics`.
fn metrics(gate: &Node) -> String {
    let m = gate.metrics().expect("/metrics answers");
    m.text().to_owned()
}

/// Whether instance `id` is in `state` in a `/metrics` sample.
fn in_state(metrics: &str, id: &str, state: &str) -> bool {
    let series = format!("sipgate_instance_state{{instance=\"{id}\",state=\"{state}\"}} 1");
    metrics.lines().any(|l| l == series)
}

/// No panic in what the gate logged, and it still runs.
fn assert_alive(gate: &mut Node) {
    assert!(gate.wait_exit(Duration::ZERO).is_none(), "{}", gate.log());
    assert!(!gate.log().contains("panicked"), "{}", gate.log());
}

/// An sg answering calls over TCP only: the gate's OPTIONS probes (UDP)
/// meet nothing there and call it `down` while it answers every call.
fn tcp_uas(addr: SocketAddr) -> SippHandle {
    Sipp::new(Scenario::repo("uas_call"))
        .local(addr.ip(), addr.port())
        .transport(Transport::Tcp)
        .timeout(Duration::from_secs(90))
        .spawn()
        .expect("uas starts")
}

fn tcp_caller(scenario: &str, local: IpAddr, gate: SocketAddr, calls: u64, hold: Duration) -> Sipp {
    caller(scenario, local, gate, calls, hold).transport(Transport::Tcp)
}

/// R-FT-1 (amended), traffic outranks probes: sg-0 answers calls (over
/// TCP) and never the gate's probes (over UDP), so the probes call it
/// `down` the whole time. Calls set up through the gate then end normally:
/// their BYEs reach sg-0 and its 200s come back, none answered 408.
/// Before the amendment every BYE got `408 Instance Down` and the calls
/// stayed up at the sg.
#[test]
fn r_ft_1_an_instance_down_by_probe_that_answers_calls_gets_their_byes() {
    let dir = tempfile::tempdir().unwrap();
    let sg = [("sg-0".to_string(), at(4, 11, 5060))];
    let site = site(4, &sg, PROBES)
        .listener(
            "g0",
            at(4, 1, 5060),
            Mode::Guard("sg-0"),
            "subscriber",
            UDP_TCP,
        )
        .write(dir.path());
    let mut gate = Node::gate(&site)
        .admin(at(4, 1, 9091))
        .args(["--node", "g1"])
        .start()
        .unwrap();
    gate.wait_ready().unwrap();
    let sg0 = tcp_uas(sg[0].1);
    wait_for(
        "the probes to call sg-0 down",
        Duration::from_secs(5),
        || state_is(&gate, "sg-0", "down").then_some(()),
    )
    .unwrap();

    let r = tcp_caller(
        "uac_call",
        ip(4, 100),
        at(4, 1, 5060),
        3,
        Duration::from_secs(1),
    )
    .spawn()
    .unwrap()
    .wait(Duration::from_secs(40))
    .unwrap();
    assert_all_ok("calls to the probe-down sg, BYEs included", &r, 3);
    assert!(state_is(&gate, "sg-0", "down"), "down by probe throughout");
    assert_eq!(
        gate.metric("sipgate_requests_total{method=\"BYE\",outcome=\"instance_down\"}")
            .unwrap(),
        0.0
    );
    assert_alive(&mut gate);
    let _ = sg0.stop();
}

/// R-FT-1 (amended), the other side: sg-0 (over TCP, down by probe as
/// above) is killed with two calls up. The first call's BYE meets the
/// refused connect (RFC 3261 16.9: 503 at once), a traffic failure since
/// the calls' answers; the second call's BYE then gets `408 Instance Down`
/// at once (the whole call ends seconds after its hold, where Timer F
/// alone is 32 s), counted. A call on sg-1 (UDP, answering its probes)
/// through the same gate completes normally: the port unreachables the
/// probes to sg-0 draw cost sg-1 neither a probe nor a forwarded message
/// (R-FT-2; a send used to return them and send nothing).
#[test]
fn r_ft_1_an_instance_killed_mid_call_gets_its_bye_answered_408_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let sg = [
        ("sg-0".to_string(), at(1, 11, 5060)),
        ("sg-1".to_string(), at(1, 12, 5060)),
    ];
    let site = site(1, &sg, PROBES)
        .listener(
            "g0",
            at(1, 1, 5060),
            Mode::Guard("sg-0"),
            "subscriber",
            UDP_TCP,
        )
        .listener("g1", at(1, 1, 5070), Mode::Guard("sg-1"), "subscriber", UDP)
        .write(dir.path());
    let mut gate = Node::gate(&site)
        .admin(at(1, 1, 9091))
        .args(["--node", "g1"])
        .start()
        .unwrap();
    gate.wait_ready().unwrap();
    let (sg0, sg1) = (tcp_uas(sg[0].1), uas(sg[1].1));
    wait_for(
        "sg-0 down by probe, sg-1 up",
        Duration::from_secs(5),
        || (state_is(&gate, "sg-0", "down") && state_is(&gate, "sg-1", "up")).then_some(()),
    )
    .unwrap();

    let started = Instant::now();
    let (hold, later) = (Duration::from_secs(3), Duration::from_secs(5));
    let first = tcp_caller("uac_call_bye_503", ip(1, 100), at(1, 1, 5060), 1, hold)
        .spawn()
        .unwrap();
    let second = tcp_caller("uac_call_bye_408", ip(1, 102), at(1, 1, 5060), 1, later)
        .spawn()
        .unwrap();
    let live = caller("uac_call", ip(1, 101), at(1, 1, 5070), 1, later)
        .spawn()
        .unwrap();
    wait_for("the three calls up", Duration::from_secs(3), || {
        (dialogs(&gate, "sg-0") == 2 && dialogs(&gate, "sg-1") == 1).then_some(())
    })
    .unwrap();
    assert!(
        started.elapsed() < hold,
        "up before the first BYE: the test's premise"
    );
    kill9(sg0.pid());

    assert_all_ok(
        "the first BYE meets the refused connect: 503",
        &first.wait(Duration::from_secs(40)).unwrap(),
        1,
    );
    let r = second.wait(Duration::from_secs(40)).unwrap();
    let took = started.elapsed();
    assert_all_ok("the second BYE gets 408", &r, 1);
    // Set-up and the hold, then one round trip: far under hold + Timer F.
    assert!(took < later + Duration::from_secs(6), "took {took:?}");
    assert_eq!(
        gate.metric("sipgate_requests_total{method=\"BYE\",outcome=\"instance_down\"}")
            .unwrap(),
        1.0,
        "one BYE, no retransmission needed"
    );
    assert_all_ok(
        "the call on sg-1",
        &live.wait(Duration::from_secs(30)).unwrap(),
        1,
    );
    assert_alive(&mut gate);
    let _ = sg1.stop();
}

/// R-FT-2: 120 instances that never answer a probe (60 addresses with
/// nothing listening, so the kernel returns ICMP errors to the gate's
/// forwarding socket; 60 bound by sockets that never read, so probes
/// vanish), probed every 100 ms with a 50 ms timeout. The storm is real
/// (they are all marked down), and 40 calls to the live sg complete as
/// they do without it, within a generous bound.
#[test]
fn r_ft_2_a_probe_timeout_storm_does_not_stall_forwarding() {
    let dir = tempfile::tempdir().unwrap();
    let mut sg = vec![("live".to_string(), at(2, 11, 5060))];
    let mut holes = Vec::new();
    for h in 0..120u8 {
        let addr = at(2, 130 + h, 5060);
        if h % 2 == 1 {
            holes.push(UdpSocket::bind(addr).expect("blackhole binds"));
        }
        sg.push((format!("dead-{h}"), addr));
    }
    let site = site(2, &sg, "interval_ms = 100\ntimeout_ms = 50\nfailures = 1")
        .listener("g", at(2, 1, 5060), Mode::Guard("live"), "subscriber", UDP)
        .write(dir.path());
    let mut gate = Node::gate(&site)
        .admin(at(2, 1, 9091))
        .args(["--node", "g1"])
        .start()
        .unwrap();
    gate.wait_ready().unwrap();
    let live = uas(sg[0].1);
    wait_for("every dead instance down", Duration::from_secs(5), || {
        let m = metrics(&gate);
        let down = (0..120).all(|h| in_state(&m, &format!("dead-{h}"), "down"));
        (down && in_state(&m, "live", "up")).then_some(())
    })
    .unwrap();

    let started = Instant::now();
    let r = caller("uac_call", ip(2, 100), at(2, 1, 5060), 40, Duration::ZERO)
        .spawn()
        .unwrap()
        .wait(Duration::from_secs(60))
        .unwrap();
    let took = started.elapsed();
    assert_all_ok("calls to the live sg in the storm", &r, 40);
    // 40 calls at 10/s: about 4 s of pacing plus set-up. A generous bound
    // (the machine is shared): forwarding behind the probes' waits would
    // take a probe round per message, and Timer B/F per call lost.
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert!(state_is(&gate, "live", "up"), "the storm went on");
    assert_alive(&mut gate);
    drop(holes);
    let _ = live.stop();
}

/// R-GW-2: gate A serves the site's address; a call is set up through it;
/// gate B starts on the same address (`SO_REUSEPORT`, as a standby taking
/// over a VIP would); gate A is killed with `kill -9`. The caller's
/// re-INVITE and BYE now reach gate B, which has never seen the call and
/// routes them by the Record-Route token to the same sg: the call ends
/// normally.
#[test]
fn r_gw_2_a_gate_killed_9_while_another_takes_over_its_address() {
    let dir = tempfile::tempdir().unwrap();
    let sg = [
        ("sg-0".to_string(), at(3, 11, 5060)),
        ("sg-1".to_string(), at(3, 12, 5060)),
    ];
    let vip = at(3, 1, 5060);
    let site = site(3, &sg, "interval_ms = 0")
        .subscribers("vip", vip, &["udp"])
        .write(dir.path());
    let mut a = Node::gate(&site)
        .admin(at(3, 2, 9091))
        .args(["--node", "a"])
        .start()
        .unwrap();
    a.wait_ready().unwrap();
    let (sg0, sg1) = (uas(sg[0].1), uas(sg[1].1));
    let call = caller("uac_call", ip(3, 100), vip, 1, Duration::from_secs(4))
        .spawn()
        .unwrap();
    wait_for("the call up through gate A", Duration::from_secs(3), || {
        let on = |id| dialogs(&a, id);
        (on("sg-0") + on("sg-1") == 1).then_some(())
    })
    .unwrap();
    let serving = if dialogs(&a, "sg-0") == 1 {
        "sg-0"
    } else {
        "sg-1"
    };

    let mut b = Node::gate(&site)
        .admin(at(3, 3, 9091))
        .args(["--node", "b"])
        .start()
        .unwrap();
    b.wait_ready().unwrap();
    a.signal("KILL");
    assert!(a.wait_exit(Duration::from_secs(2)).is_some(), "gate A gone");

    let r = call.wait(Duration::from_secs(40)).unwrap();
    assert_all_ok("the call set up through A, ended through B", &r, 1);
    let forwarded = |method: &str| {
        b.metric(&format!(
            "sipgate_requests_total{{method=\"{method}\",outcome=\"forwarded\"}}"
        ))
        .unwrap()
    };
    assert_eq!(forwarded("BYE"), 1.0, "the BYE went through gate B");
    assert!(forwarded("INVITE") >= 1.0, "the re-INVITE too");
    // The sg that answered the INVITE also answered the re-INVITE and BYE
    // (its scenario completes only then), the other saw nothing.
    let (r0, r1) = (sg0.stop().unwrap(), sg1.stop().unwrap());
    assert_eq!(
        (r0.successful, r1.successful),
        if serving == "sg-0" { (1, 0) } else { (0, 1) },
        "the whole call on one sg: {r0:?} {r1:?}"
    );
    assert_alive(&mut b);
}
