//! `[capture]` through the `sip-gate` binary with real receivers: sngrep
//! as the HEP collector (it decodes each packet and writes the message it
//! carries with the packet's addresses, ports and time), tshark capturing
//! the loopback wire beside it, and tshark reading both. SIPp calls over
//! UDP and a TLS client's call: every message of each call on both legs,
//! byte for byte and in the order the wire saw, every HEP field the gate
//! sets readable with no malformed packet, and a collector gone in the
//! middle of load costs no call (R-CAP-1).
//!
//! Debian's tshark (Wireshark 4.0) has no HEP dissector, so its HEP fields
//! are read with testbed's `hep3.lua` ([`testbed::hep::hep_args`]), a
//! dissector of the HEP v3 chunks that flags a chunk of the wrong size or
//! past the packet as malformed.
//!
//! Addresses: `127.63.N.0/24`, one N per test; the gate on `.1` (port
//! 5060, TLS 5061), the instance's SIPp on `.11`, callers on `.100`, the
//! collector on `.50:9060`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::ip;
use testbed::bins::Node;
use testbed::fixture::SiteFile;
use testbed::hep::{fields, hep_args, Sngrep, TsharkCapture};
use testbed::{wait_for, Scenario, Sipp, Transport};

mod streams;
mod tcp;
mod tls;

const COLLECTOR_PORT: u16 = 9060;

fn collector(net: (u8, u8)) -> SocketAddr {
    SocketAddr::new(ip(net, 50), COLLECTOR_PORT)
}

/// A site with one sg on `.11:5060` behind a UDP balance listener on
/// `.1:5060`, capturing to the collector, node `gate-a` with agent id 2002.
fn site(net: (u8, u8)) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let capture = format!(
        "collectors = [\"udp:{}\"]\nagent_id = 2001\nagents = {{ gate-a = 2002 }}",
        collector(net)
    );
    let path = SiteFile::new(&format!("cap-{}", net.1))
        .section("capture", &capture)
        .sgs(&[("0", SocketAddr::new(ip(net, 11), 5060))])
        .subscribers("subs", SocketAddr::new(ip(net, 1), 5060), &["udp"])
        .write(dir.path());
    (dir, path)
}

fn gate(site: &Path, net: (u8, u8)) -> Node {
    let mut g = Node::gate(site)
        .admin(SocketAddr::new(ip(net, 1), 9091))
        .args(["--node", "gate-a"])
        .start()
        .unwrap();
    g.wait_ready().unwrap();
    g
}

/// One SIP message as a capture shows it.
#[derive(Debug, Clone, PartialEq)]
struct Msg {
    src: String,
    dst: String,
    /// Hex, as tshark prints `udp.payload`.
    payload: String,
    time: f64,
    call_id: String,
}

/// The SIP messages of `pcap` (frames whose UDP ports are not the
/// collector's), in capture order.
fn messages(pcap: &Path) -> Vec<Msg> {
    let display = format!("sip && !(udp.port == {COLLECTOR_PORT})");
    let f = [
        "ip.src",
        "udp.srcport",
        "ip.dst",
        "udp.dstport",
        "udp.payload",
        "frame.time_epoch",
        "sip.Call-ID",
    ];
    fields(pcap, &[], &display, &f)
        .unwrap()
        .into_iter()
        .map(|r| Msg {
            src: format!("{}:{}", r[0], r[1]),
            dst: format!("{}:{}", r[2], r[3]),
            payload: r[4].clone(),
            time: r[5].parse().unwrap(),
            call_id: r[6].clone(),
        })
        .collect()
}

/// Messages grouped by call and hop (the two ends, in either direction),
/// each call's messages on each hop in order, without their times. Calls
/// that overlap on a hop interleave as the gate's threads read and send
/// them, so only each call's own order is the wire's.
type Hops = BTreeMap<(String, String, String), Vec<(String, String)>>;

fn by_hop(msgs: &[Msg]) -> Hops {
    let mut hops: Hops = BTreeMap::new();
    for m in msgs {
        let key = if m.src < m.dst {
            (m.call_id.clone(), m.src.clone(), m.dst.clone())
        } else {
            (m.call_id.clone(), m.dst.clone(), m.src.clone())
        };
        hops.entry(key)
            .or_default()
            .push((m.src.clone(), m.payload.clone()));
    }
    hops
}

/// No frame of `pcap` is malformed, HEP decoded on the collector's port.
fn assert_not_malformed(pcap: &Path) {
    let args = hep_args(COLLECTOR_PORT);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let bad = fields(
        pcap,
        &args,
        "_ws.malformed || _ws.expert.severity == error",
        &["frame.number"],
    )
    .unwrap();
    assert!(bad.is_empty(), "malformed frames: {bad:?}");
}

/// The HEP fields of every HEP packet in `pcap`: agent id, correlation id,
/// the Call-ID of the SIP payload, protocol type, IP protocol, family.
fn hep_fields(pcap: &Path) -> Vec<Vec<String>> {
    let args = hep_args(COLLECTOR_PORT);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fields(
        pcap,
        &args,
        "hep3",
        &[
            "hep3.agent_id",
            "hep3.correlation_id",
            "sip.Call-ID",
            "hep3.proto_type",
            "hep3.ip_proto",
            "hep3.ip_family",
            "hep3.ts_sec",
        ],
    )
    .unwrap()
}

/// SIPp calls over UDP through the gate: the collector's pcap holds every
/// message the wire carried on both legs (UAC-gate, gate-sg), byte for
/// byte, each call's on each hop in the wire's order, at the wire's time
/// (within 200 ms); every HEP packet carries the node's agent id, the Call-ID as
/// correlation id, protocol type SIP over UDP/IPv4, and none is malformed.
#[test]
fn r_cap_1_udp_calls_both_legs_byte_for_byte_to_sngrep() {
    let net = (63, 1);
    let (_dir, site) = site(net);
    let sngrep = Sngrep::collect(collector(net)).unwrap();
    let wire = TsharkCapture::start("lo", &format!("net 127.{}.{}.0/24", net.0, net.1)).unwrap();
    let gate = gate(&site, net);
    let uas = Sipp::new(Scenario::repo("uas_call"))
        .local(ip(net, 11), 5060)
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap();
    let report = Sipp::new(Scenario::repo("uac_call"))
        .local_ip(ip(net, 100))
        .remote(SocketAddr::new(ip(net, 1), 5060))
        .calls(10)
        .rate(10)
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap()
        .wait(Duration::from_secs(60))
        .unwrap();
    assert_eq!((report.successful, report.failed), (10, 0), "{report:?}");
    drop(uas);
    let sent = r#"sipgate_capture_sent_total{collector="udp:127.63.1.50:9060"}"#;
    let hep_total = wait_for("copies sent", Duration::from_secs(5), || {
        let n = gate.metric(sent).ok()?;
        let again = {
            std::thread::sleep(Duration::from_millis(300));
            gate.metric(sent).ok()?
        };
        (n > 0.0 && n == again).then_some(n)
    })
    .unwrap();
    let hep = sngrep.stop().unwrap();
    let wire = wire.stop().unwrap();

    let on_wire = messages(wire.path());
    let captured = messages(hep.path());
    // 10 calls of INVITE/100/180/200/ACK, re-INVITE/200/ACK, BYE/200 on
    // two legs (the gate's own 100 on the first): at least 150 messages.
    assert!(on_wire.len() >= 150, "{} on the wire", on_wire.len());
    assert_eq!(captured.len(), on_wire.len(), "every message captured once");
    let hops = by_hop(&on_wire);
    assert_eq!(
        hops.len(),
        2 * 10,
        "two legs of ten calls: {:?}",
        hops.keys()
    );
    let captured_hops = by_hop(&captured);
    for (key, wire) in &hops {
        let copies = captured_hops.get(key).map(Vec::as_slice);
        assert_eq!(
            copies,
            Some(wire.as_slice()),
            "{key:?} byte for byte, in order"
        );
    }
    // At the wire's time: each copy against the same message on the wire.
    let mut times: BTreeMap<(&str, &str, &str), Vec<f64>> = BTreeMap::new();
    for w in on_wire.iter().rev() {
        let key = (w.src.as_str(), w.dst.as_str(), w.payload.as_str());
        times.entry(key).or_default().push(w.time);
    }
    for c in &captured {
        let key = (c.src.as_str(), c.dst.as_str(), c.payload.as_str());
        let wire_time = times.get_mut(&key).and_then(Vec::pop).expect("on the wire");
        assert!(
            (wire_time - c.time).abs() < 0.2,
            "{c:?} on the wire at {wire_time}"
        );
    }
    assert_eq!(hep_total as usize, captured.len());
    let dropped = r#"sipgate_capture_dropped_total{reason="queue_full"}"#;
    assert_eq!(gate.metric(dropped).unwrap(), 0.0);

    let packets = hep_fields(wire.path());
    assert_eq!(packets.len(), captured.len());
    for p in &packets {
        assert_eq!(p[0], "2002", "the agent id of node gate-a: {p:?}");
        assert!(
            !p[1].is_empty() && p[1] == p[2],
            "correlation id = Call-ID: {p:?}"
        );
        assert_eq!(&p[3..6], ["1", "17", "2"], "SIP, UDP, IPv4: {p:?}");
    }
    assert_not_malformed(wire.path());
    assert_not_malformed(hep.path());
}

/// The collector goes away in the middle of load and comes back: no call
/// fails, the copies meanwhile are counted as dropped (`collector_down`:
/// the kernel reports its port closed), and capture resumes: calls made
/// after it is back are in its new pcap. The gate started while nothing
/// listened on the collector's address (not an error).
#[test]
fn r_cap_1_a_collector_gone_costs_no_call_and_capture_resumes() {
    let net = (63, 2);
    let (_dir, site) = site(net);
    let gate = gate(&site, net);
    let _uas = Sipp::new(Scenario::repo("uas_call"))
        .local(ip(net, 11), 5060)
        .timeout(Duration::from_secs(90))
        .spawn()
        .unwrap();
    let first = Sngrep::collect(collector(net)).unwrap();
    let uac = Sipp::new(Scenario::repo("uac_call"))
        .local_ip(ip(net, 100))
        .remote(SocketAddr::new(ip(net, 1), 5060))
        .transport(Transport::Udp)
        .calls(80)
        .rate(20)
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let first = first.stop().unwrap();
    let down = r#"sipgate_capture_dropped_total{reason="collector_down"}"#;
    wait_for("copies dropped", Duration::from_secs(5), || {
        (gate.metric(down).ok()? > 0.0).then_some(())
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let second = Sngrep::collect(collector(net)).unwrap();
    let report = uac.wait(Duration::from_secs(60)).unwrap();
    assert_eq!((report.successful, report.failed), (80, 0), "{report:?}");
    std::thread::sleep(Duration::from_millis(500));
    let second = second.stop().unwrap();
    let before = messages(first.path());
    let after = messages(second.path());
    assert!(!before.is_empty(), "captured before the collector went");
    assert!(
        after.len() > 50,
        "capture resumed: {} messages",
        after.len()
    );
    let dropped = gate.metric(down).unwrap();
    assert!(dropped > 0.0, "{dropped}");
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}
/// A request the gate answers itself (`483`: Max-Forwards 0), from a raw
/// UDP socket acting as the UA.
fn refused_invite(call: &str, ua: &std::net::UdpSocket, gate: SocketAddr) -> (String, String) {
    let (req, answer) = answered("INVITE", call, ua, gate);
    assert!(answer.starts_with("SIP/2.0 483"), "{answer}");
    (req, answer)
}

/// A `method` request with Max-Forwards 0 (the gate answers it itself)
/// from `ua`: the request and the answer.
fn answered(
    method: &str,
    call: &str,
    ua: &std::net::UdpSocket,
    gate: SocketAddr,
) -> (String, String) {
    let local = ua.local_addr().unwrap();
    let req = format!(
        "{method} sip:bob@{gate} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK-{call}\r\n\
         Max-Forwards: 0\r\nFrom: <sip:alice@{local}>;tag=a-{call}\r\nTo: <sip:bob@{gate}>\r\n\
         Call-ID: {call}\r\nCSeq: 1 {method}\r\nContact: <sip:alice@{local}>\r\nContent-Length: 0\r\n\r\n"
    );
    ua.send_to(req.as_bytes(), gate).unwrap();
    let mut buf = [0u8; 4096];
    let (n, _) = ua.recv_from(&mut buf).expect("an answer");
    let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(answer.starts_with("SIP/2.0 "), "{answer}");
    (req, answer)
}

/// The filters: only the listeners named (`subs`, not `other`), only the
/// methods named (INVITE and REGISTER, not OPTIONS; a response as its
/// CSeq's), and no REGISTER at a sample of 0.
#[test]
fn r_cap_1_filters_by_listener_method_and_register_sample() {
    let net = (63, 7);
    let (_dir, site) = site(net);
    let text = std::fs::read_to_string(&site).unwrap();
    let text = text.replace(
        "agent_id = 2001\n",
        "agent_id = 2001\nlisteners = [\"subs\"]\nmethods = [\"INVITE\", \"REGISTER\"]\nregister_sample = 0.0\n",
    ) + &format!(
        "\n[[listener]]\nname = \"other\"\nbind = \"{}\"\ntransports = [\"udp\"]\nmode = \"balance\"\npool = \"sg\"\nleg = \"subscriber\"\n",
        SocketAddr::new(ip(net, 1), 5070)
    );
    std::fs::write(&site, text).unwrap();
    let ua = std::net::UdpSocket::bind(SocketAddr::new(ip(net, 100), 0)).unwrap();
    ua.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let sngrep = Sngrep::collect(collector(net)).unwrap();
    let _gate = gate(&site, net);
    let (subs, other) = (
        SocketAddr::new(ip(net, 1), 5060),
        SocketAddr::new(ip(net, 1), 5070),
    );
    let (req, answer) = answered("INVITE", "kept", &ua, subs);
    answered("INVITE", "other-listener", &ua, other);
    answered("OPTIONS", "other-method", &ua, subs);
    answered("REGISTER", "unsampled", &ua, subs);
    std::thread::sleep(Duration::from_millis(500));
    let hep = sngrep.stop().unwrap();
    let captured: Vec<(String, String)> = messages(hep.path())
        .into_iter()
        .map(|m| (m.call_id, m.payload))
        .collect();
    assert_eq!(
        captured,
        [
            ("kept".to_owned(), hex(&req)),
            ("kept".to_owned(), hex(&answer))
        ]
    );
}

/// `[capture]` follows reloads: a gate started without it captures
/// nothing; SIGHUP with it added captures what follows, the answers the
/// gate makes itself (483) and its health probes included, byte for byte;
/// SIGHUP with it removed stops.
#[test]
fn r_cap_1_applies_on_reload_with_the_gates_own_answers_and_probes() {
    let net = (63, 4);
    let (dir, site) = site(net);
    let with = std::fs::read_to_string(&site).unwrap();
    let without = with.replace("[capture]", "[unused]").replace(
        "[unused]\ncollectors = [\"udp:127.63.4.50:9060\"]\nagent_id = 2001\nagents = { gate-a = 2002 }\n",
        "",
    );
    assert!(!without.contains("collectors"), "{without}");
    // Probes every 200 ms to the instance, a raw socket here.
    let probing = |t: &str| t.replace("interval_ms = 0", "interval_ms = 200");
    std::fs::write(&site, probing(&without)).unwrap();
    let sg = std::net::UdpSocket::bind(SocketAddr::new(ip(net, 11), 5060)).unwrap();
    sg.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let ua = std::net::UdpSocket::bind(SocketAddr::new(ip(net, 100), 0)).unwrap();
    ua.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let sngrep = Sngrep::collect(collector(net)).unwrap();
    let gate = gate(&site, net);
    let to = SocketAddr::new(ip(net, 1), 5060);
    refused_invite("before-capture", &ua, to);

    std::fs::write(&site, probing(&with)).unwrap();
    crate::reload::sighup(&gate, "applied");
    let (req, answer) = refused_invite("with-capture", &ua, to);
    let mut probes = Vec::new();
    let mut buf = [0u8; 4096];
    while probes.len() < 3 {
        let (n, _) = sg.recv_from(&mut buf).expect("a probe");
        probes.push(hex(&String::from_utf8_lossy(&buf[..n])));
    }
    std::fs::write(&site, probing(&without)).unwrap();
    crate::reload::sighup(&gate, "applied");
    refused_invite("after-capture", &ua, to);
    std::thread::sleep(Duration::from_millis(500));
    let hep = sngrep.stop().unwrap();
    drop(dir);

    let captured = messages(hep.path());
    let ua_addr = ua.local_addr().unwrap().to_string();
    let ua_leg: Vec<(bool, String)> = captured
        .iter()
        .filter(|m| m.src == ua_addr || m.dst == ua_addr)
        .map(|m| (m.src == ua_addr, m.payload.clone()))
        .collect();
    assert_eq!(
        ua_leg,
        [(true, hex(&req)), (false, hex(&answer))],
        "only the exchange while [capture] was in force"
    );
    let sg_addr = SocketAddr::new(ip(net, 11), 5060).to_string();
    let captured_probes: Vec<&Msg> = captured.iter().filter(|m| m.dst == sg_addr).collect();
    assert!(!captured_probes.is_empty(), "the probes are captured");
    for p in &captured_probes {
        assert_eq!(p.src, to.to_string(), "sent from the listener");
    }
    assert!(
        probes
            .iter()
            .any(|p| captured_probes.iter().any(|c| &c.payload == p)),
        "a probe as the instance received it"
    );
}
