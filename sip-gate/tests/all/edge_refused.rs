//! R-SEC-4 through the real `sip-gate` binary: a source refused by the
//! listener's access list or banned for failing authentication (R-SEC-3)
//! gets nothing past the gate, whatever it writes (a To tag, a Route that
//! is foreign, a forged token, another dialog's valid token, any method,
//! malformed bytes), and with `action = "drop"` no byte comes back to it,
//! over UDP and TCP. With `reject`, it learns only its 403, never what the
//! parser found.
//!
//! The sg is a raw UDP socket on `.11:5060` that records every datagram the
//! gate hands it (and answers REGISTER 401, for the ban); an allowed caller
//! on `.100` proves the way to it is open. Addresses: `127.86.N.0/24`,
//! N = 9, 10, 11.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::policy::{ip, start_gate, udp, write_site};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use sip_gate::TokenKey;
use testbed::bins::Node;

/// The secret of `policy::write_site`'s site.
const SECRET: &str = "policy-test-secret-0123456789";

/// What a refused source may write in a Route.
#[derive(Debug, Clone)]
enum RouteKind {
    None,
    Foreign,
    ForgedToken,
    OtherDialogsToken,
}

/// How a message is broken.
#[derive(Debug, Clone)]
enum Malformed {
    No,
    MaxForwards0,
    Version3,
    ShortBody,
    CSeqMismatch,
    NoCallId,
    Garbage,
    /// RFC 3261 16.3 step 5: 420 for anyone else.
    ProxyRequire,
    /// RFC 3261 19.1.1: 400 for anyone else.
    UriHeaders,
}

#[derive(Debug, Clone)]
struct Case {
    method: &'static str,
    to_tag: Option<String>,
    route: RouteKind,
    malformed: Malformed,
}

fn case() -> impl Strategy<Value = Case> {
    let method = prop::sample::select(vec![
        "INVITE",
        "REGISTER",
        "BYE",
        "ACK",
        "CANCEL",
        "OPTIONS",
        "SUBSCRIBE",
        "NOTIFY",
        "MESSAGE",
        "INFO",
        "UPDATE",
        "FROBNICATE",
    ]);
    let route = prop_oneof![
        Just(RouteKind::None),
        Just(RouteKind::Foreign),
        Just(RouteKind::ForgedToken),
        Just(RouteKind::OtherDialogsToken),
    ];
    let malformed = prop_oneof![
        4 => Just(Malformed::No),
        1 => Just(Malformed::MaxForwards0),
        1 => Just(Malformed::Version3),
        1 => Just(Malformed::ShortBody),
        1 => Just(Malformed::CSeqMismatch),
        1 => Just(Malformed::NoCallId),
        1 => Just(Malformed::Garbage),
        1 => Just(Malformed::ProxyRequire),
        1 => Just(Malformed::UriHeaders),
    ];
    (
        method,
        proptest::option::of("[a-z0-9]{1,10}"),
        route,
        malformed,
    )
        .prop_map(|(method, to_tag, route, malformed)| Case {
            method,
            to_tag,
            route,
            malformed,
        })
}

/// `n` cases, the same on every run (a deterministic runner).
fn cases(n: usize) -> Vec<Case> {
    let mut runner = TestRunner::deterministic();
    (0..n)
        .map(|_| case().new_tree(&mut runner).unwrap().current())
        .collect()
}

/// The bytes of `c` from `me` to the gate `g`; `tcp` names the transport
/// in the Via.
fn bytes(c: &Case, me: SocketAddr, g: SocketAddr, id: &str, tcp: bool) -> Vec<u8> {
    if matches!(c.malformed, Malformed::Garbage) {
        return format!("{} \x00\x01\r\n\r\nnot sip {id}\r\n", c.method).into_bytes();
    }
    let call_id = format!("{id}@refused");
    let route = match c.route {
        RouteKind::None => String::new(),
        RouteKind::Foreign => "Route: <sip:elsewhere.example.com;lr>\r\n".into(),
        RouteKind::ForgedToken => format!("Route: <sip:AAAAforged{id}@{g};lr>\r\n"),
        RouteKind::OtherDialogsToken => format!(
            "Route: <sip:{}@{g};lr>\r\n",
            TokenKey::new(SECRET).seal("sg-0", b"another-dialog@ua")
        ),
    };
    let tag = c
        .to_tag
        .as_ref()
        .map(|t| format!(";tag={t}"))
        .unwrap_or_default();
    let version = match c.malformed {
        Malformed::Version3 => "SIP/3.0",
        _ => "SIP/2.0",
    };
    let max_forwards = match c.malformed {
        Malformed::MaxForwards0 => 0,
        _ => 70,
    };
    let cseq_method = match c.malformed {
        Malformed::CSeqMismatch => "OPTIONS",
        _ => c.method,
    };
    let call_id_line = match c.malformed {
        Malformed::NoCallId => String::new(),
        _ => format!("Call-ID: {call_id}\r\n"),
    };
    let (length, body) = match c.malformed {
        Malformed::ShortBody => (40, "v=0\r\n"),
        _ => (0, ""),
    };
    let transport = if tcp { "TCP" } else { "UDP" };
    let (uri_headers, proxy_require) = match c.malformed {
        Malformed::UriHeaders => ("?Route=%3Csip:example.com%3E", ""),
        Malformed::ProxyRequire => ("", "Proxy-Require: sec-agree\r\n"),
        _ => ("", ""),
    };
    format!(
        "{m} sip:166@{g}{uri_headers} {version}\r\n\
         Via: SIP/2.0/{transport} {me};branch=z9hG4bK{id};rport\r\n\
         {route}{proxy_require}\
         Max-Forwards: {max_forwards}\r\n\
         From: <sip:166@example.com>;tag=f-{id}\r\n\
         To: <sip:166@example.com>{tag}\r\n\
         {call_id_line}\
         CSeq: 1 {cseq_method}\r\n\
         Contact: <sip:166@{me}>\r\n\
         Content-Length: {length}\r\n\r\n{body}",
        m = c.method,
    )
    .into_bytes()
}

/// The sg: records every datagram, answers REGISTER 401 (so a source can
/// earn a ban), until the test ends.
struct Sg {
    got: Arc<AtomicUsize>,
    log: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Sg {
    fn start(addr: SocketAddr) -> Sg {
        let sock = UdpSocket::bind(addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let got = Arc::new(AtomicUsize::new(0));
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (g2, l2) = (got.clone(), log.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_535];
            // Bounded: the test is over long before this.
            let end = std::time::Instant::now() + Duration::from_secs(120);
            while std::time::Instant::now() < end {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                g2.fetch_add(1, Ordering::SeqCst);
                if text.starts_with("REGISTER ") {
                    let _ = sock.send_to(unauthorized(&text).as_bytes(), from);
                }
                l2.lock().unwrap().push(text);
            }
        });
        Sg { got, log }
    }

    fn count(&self) -> usize {
        self.got.load(Ordering::SeqCst)
    }

    fn seen(&self) -> String {
        self.log.lock().unwrap().join("\n----\n")
    }
}

/// A 401 to `req`: its Vias, From, To (tagged), Call-ID and CSeq.
fn unauthorized(req: &str) -> String {
    let mut out = String::from("SIP/2.0 401 Unauthorized\r\n");
    for line in req.split("\r\n").skip(1) {
        let name = line
            .split(':')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        match name.as_str() {
            "via" | "from" | "call-id" | "cseq" => out.push_str(&format!("{line}\r\n")),
            "to" => out.push_str(&format!("{line};tag=sg401\r\n")),
            _ => {}
        }
    }
    out.push_str("WWW-Authenticate: Digest realm=\"example.com\", nonce=\"n\"\r\n");
    out.push_str("Content-Length: 0\r\n\r\n");
    out
}

/// Sends every case over UDP from `me` and over one TCP connection each,
/// then returns what came back within 2 s: UDP datagrams and TCP bytes.
fn fire(cases: &[Case], me: SocketAddr, g: SocketAddr, tag: &str) -> Vec<String> {
    let sock = policy_socket(me);
    for (n, c) in cases.iter().enumerate() {
        sock.send_to(&bytes(c, me, g, &format!("{tag}u{n}"), false), g)
            .unwrap();
    }
    let mut back = Vec::new();
    for (n, c) in cases.iter().enumerate().take(8) {
        // A connection from the refused source: closed at accept under
        // `drop`; under `reject` it carries its 403s.
        let Some(mut s) = tcp_from(me, g) else {
            continue;
        };
        let _ = s.write_all(&bytes(
            c,
            s.local_addr().unwrap(),
            g,
            &format!("{tag}t{n}"),
            true,
        ));
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        if !buf.is_empty() {
            back.push(String::from_utf8_lossy(&buf).into_owned());
        }
    }
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = vec![0u8; 65_535];
    while let Ok(n) = sock.recv(&mut buf) {
        back.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        sock.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
    }
    back
}

/// A TCP connection from `me`'s address (any port) to `g`; `None` when the
/// gate closed it before it was up.
fn tcp_from(me: SocketAddr, g: SocketAddr) -> Option<TcpStream> {
    let s = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
    .unwrap();
    s.bind(&SocketAddr::new(me.ip(), 0).into()).unwrap();
    s.connect_timeout(&g.into(), Duration::from_secs(2)).ok()?;
    Some(s.into())
}

fn policy_socket(me: SocketAddr) -> UdpSocket {
    let s = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )
    .unwrap();
    s.set_reuse_address(true).unwrap();
    s.bind(&me.into()).unwrap();
    s.into()
}

/// An allowed caller's INVITE reaches the sg: the way is open, so the
/// silence the refused source met is the gate's doing.
fn assert_way_open(sg: &Sg, net: u8, g: SocketAddr) {
    let before = sg.count();
    let me = SocketAddr::new(ip(net, 100), 5099);
    let c = Case {
        method: "INVITE",
        to_tag: None,
        route: RouteKind::None,
        malformed: Malformed::No,
    };
    let _ = crate::policy::udp_within(
        me,
        g,
        &bytes(&c, me, g, "allowed", false),
        Duration::from_secs(1),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while sg.count() == before && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(sg.count() > before, "an allowed INVITE must reach the sg");
}

/// The gate of `net` on `policy::write_site`'s site, with `site` under
/// `[site]` and `tail` at the end, the recording sg, the gate's address and
/// the refused source's.
fn refused_gate(
    net: u8,
    site: &str,
    tail: &str,
) -> (tempfile::TempDir, Sg, Node, SocketAddr, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let path = write_site(dir.path(), net, site, "");
    let text = std::fs::read_to_string(&path).unwrap() + tail;
    std::fs::write(&path, text).unwrap();
    let sg = Sg::start(SocketAddr::new(ip(net, 11), 5060));
    let gate = start_gate(&path, net);
    let g = SocketAddr::new(ip(net, 1), 5060);
    let me = SocketAddr::new(ip(net, 66), 5099);
    (dir, sg, gate, g, me)
}

/// Nothing of `back` reached the source, the sg saw no more than
/// `before`, and the gate counted refusals under `outcome`.
fn assert_silent(back: &[String], sg: &Sg, before: usize, gate: &Node, outcome: &str) {
    assert!(back.is_empty(), "the refused source heard: {back:?}");
    assert_eq!(sg.count(), before, "reached the sg:\n{}", sg.seen());
    let label = format!("outcome=\"{outcome}\"");
    assert!(
        gate.metrics()
            .unwrap()
            .sum("sipgate_requests_total", &[label.as_str()])
            > 0.0,
        "{}",
        gate.log()
    );
}

/// R-SEC-4 with `[listener.access] action = "drop"`: for 120 messages of
/// any shape from the denied source, over UDP and TCP, nothing reaches the
/// sg and not one byte comes back.
#[test]
fn r_sec_4_a_denied_source_gets_nothing_through_and_nothing_back() {
    let net = 9;
    let tail = format!("\n[listener.access]\ndeny = [\"127.86.{net}.66/32\"]\naction = \"drop\"\n");
    let (_dir, sg, mut gate, g, me) = refused_gate(net, "", &tail);
    let back = fire(&cases(140), me, g, "acl");
    assert_silent(&back, &sg, 0, &gate, "access_denied");
    assert_way_open(&sg, net, g);
    gate.stop(Duration::from_secs(5));
}

/// R-SEC-4 with R-SEC-3 (`action = "drop"`): once banned, the brute force's
/// source gets nothing more to the registrar and nothing back, whatever it
/// sends.
#[test]
fn r_sec_4_a_banned_source_gets_nothing_through_and_nothing_back() {
    let net = 10;
    let tail = "\n[listener.auth_ban]\nlimit = 2\nwindow_s = 30\nban_s = 120\naction = \"drop\"\n";
    let (_dir, sg, mut gate, g, me) = refused_gate(net, "", tail);
    let register = Case {
        method: "REGISTER",
        to_tag: None,
        route: RouteKind::None,
        malformed: Malformed::No,
    };
    for n in 0..2 {
        let got = udp(me, g, &bytes(&register, me, g, &format!("brute{n}"), false));
        assert!(
            got.as_deref()
                .is_some_and(|a| a.starts_with("SIP/2.0 401 ")),
            "{got:?}\n{}",
            gate.log()
        );
    }
    let before = sg.count();
    let back = fire(&cases(140), me, g, "ban");
    assert_silent(&back, &sg, before, &gate, "auth_banned");
    assert_way_open(&sg, net, g);
    gate.stop(Duration::from_secs(5));
}

/// R-SEC-4 with `action = "reject"` and the product hidden (`server_header
/// = ""`): the denied source gets 403 or nothing, never a 400, 483 or 505
/// that would show it the parser, and no To tag that names the gate.
#[test]
fn r_sec_4_a_rejected_source_learns_only_its_403() {
    let net = 11;
    let tail = format!("\n[listener.access]\ndeny = [\"127.86.{net}.66/32\"]\n");
    let (_dir, sg, mut gate, g, me) = refused_gate(net, "server_header = \"\"", &tail);

    let back = fire(&cases(140), me, g, "rej");
    assert!(!back.is_empty(), "reject answers with 403");
    for answer in &back {
        for status in answer.lines().filter(|l| l.starts_with("SIP/2.0 ")) {
            assert!(status.starts_with("SIP/2.0 403 "), "{answer}");
        }
        assert!(!answer.contains(";tag=gw"), "{answer}");
        assert!(
            !answer.to_ascii_lowercase().contains("\nserver:"),
            "{answer}"
        );
    }
    assert_eq!(sg.count(), 0, "reached the sg:\n{}", sg.seen());
    assert_way_open(&sg, net, g);
    gate.stop(Duration::from_secs(5));
}

/// docs/operator-guide.md: a refusal is logged at `info`, once per refused
/// source per minute with the listener and the reason: a denied source
/// sending three INVITEs gets three 403s and one log line (before, an
/// access-list 403 was logged at `debug` only).
#[test]
fn r_sec_4_a_denied_source_is_logged_once_at_info_for_three_requests() {
    let net = 12;
    let dir = tempfile::tempdir().unwrap();
    let site = write_site(dir.path(), net, "", "");
    let text = std::fs::read_to_string(&site).unwrap()
        + &format!("\n[listener.access]\ndeny = [\"127.86.{net}.66/32\"]\n");
    std::fs::write(&site, text).unwrap();
    let mut gate = start_gate(&site, net);
    let g = SocketAddr::new(ip(net, 1), 5060);
    let me = SocketAddr::new(ip(net, 66), 5099);
    for n in 0..3 {
        let invite = format!(
            "INVITE sip:bob@{g} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-log{n}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:a@{me}>;tag=a{n}\r\nTo: <sip:bob@{g}>\r\n\
             Call-ID: log-{n}\r\nCSeq: 1 INVITE\r\nContact: <sip:a@{me}>\r\nContent-Length: 0\r\n\r\n"
        );
        let answer = udp(me, g, invite.as_bytes()).expect("an answer");
        assert!(answer.starts_with("SIP/2.0 403 "), "{answer}");
    }
    let log = gate.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("refused source") && l.contains(&me.ip().to_string()))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains("INFO") && lines[0].contains("access_denied"),
        "{}",
        lines[0]
    );
    gate.stop(Duration::from_secs(5));
}
