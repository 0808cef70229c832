//! SIP over TLS through the `sip-gate` binary (RFC 3261 26, RFC 5630):
//! a call from a TLS client to a SIPp UAS behind the gate over UDP, both
//! directions of in-dialog requests; a request from an instance to a
//! `sips:` URI over a TLS connection the gate opens and verifies; the
//! certificate reloaded on SIGHUP while a connection stays up, and a bad
//! one refused; handshakes that never finish cut at the deadline (R-OV-1:
//! they hold a bounded slot only that long); garbage on the TLS port.
//!
//! Addresses: `127.41.N.0/24`, one N per test; the gate on `.1` (TLS and
//! UDP on port 5061), the instance on `.11`, TLS clients from anywhere,
//! an outside TLS server on `.31`.

pub(crate) mod peer;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::ip;
use peer::{header, record_routes, Ca};
use testbed::bins::Node;
use testbed::fixture::{Mode, SiteFile};
use testbed::wait_for;
use testbed::{Scenario, Sipp, Transport};

const T: Duration = Duration::from_secs(5);

/// A site dir with a gate certificate from `ca` and a `[tls]` section.
pub(crate) struct Site {
    dir: tempfile::TempDir,
    pub(crate) ca: Ca,
    pub(crate) net: (u8, u8),
}

impl Site {
    fn new(net: (u8, u8), reload_poll_ms: u32) -> Site {
        Site::with(net, reload_poll_ms, "")
    }

    /// [`Site::new`] with `extra` TOML (sections) at the end.
    pub(crate) fn with(net: (u8, u8), reload_poll_ms: u32, extra: &str) -> Site {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new(dir.path(), "site");
        ca.issue_gate(dir.path(), &ip(net, 1).to_string());
        let tls = format!(
            "cert = \"gate-cert.pem\"\nkey = \"gate-key.pem\"\nca = \"site-ca.pem\"\n\
             handshake_timeout_ms = 1000\nreload_poll_ms = {reload_poll_ms}"
        );
        let text = SiteFile::new(&format!("tls-{}", net.1))
            .section("tls", &tls)
            .sgs(&[("0", SocketAddr::new(ip(net, 11), 5060))])
            .listener(
                "subs",
                SocketAddr::new(ip(net, 1), 5061),
                Mode::Balance("sg"),
                "subscriber",
                r#"transports = ["udp", "tls"]"#,
            )
            .raw(extra)
            .text()
            .to_owned();
        std::fs::write(dir.path().join("site.toml"), text).unwrap();
        Site { dir, ca, net }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn gate(&self) -> Node {
        let mut g = Node::gate(self.path("site.toml"))
            .admin(SocketAddr::new(ip(self.net, 1), 9091))
            .start()
            .unwrap();
        g.wait_ready().unwrap();
        g
    }

    pub(crate) fn sip(&self) -> SocketAddr {
        SocketAddr::new(ip(self.net, 1), 5061)
    }
}

fn tls_metric(gate: &Node, side: &str, result: &str) -> f64 {
    gate.metric(&format!(
        r#"sipgate_tls_handshakes_total{{side="{side}",result="{result}"}}"#
    ))
    .unwrap()
}

/// One request of the test UA (alice, over TLS) in dialog `call`.
pub(crate) fn request(
    c: &peer::Client,
    method: &str,
    uri: &str,
    call: &str,
    cseq: u32,
    extra: &str,
) -> String {
    let local = c.local();
    let sdp = "v=0\r\no=alice 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 40000 RTP/AVP 0\r\n";
    let body = if method == "INVITE" { sdp } else { "" };
    let cseq_method = if method == "ACK" { "ACK" } else { method };
    format!(
        "{method} {uri} SIP/2.0\r\nVia: SIP/2.0/TLS {local};branch=z9hG4bK-{call}-{cseq}-{method};rport\r\n\
         Max-Forwards: 70\r\nFrom: <sips:alice@example.com>;tag=alice-{call}\r\n{extra}\
         Call-ID: {call}@tls-test\r\nCSeq: {cseq} {cseq_method}\r\nContact: <sips:alice@{local}>\r\n\
         Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// A call from a TLS client through the gate to a SIPp UAS over UDP
/// (`uas_call`: INVITE, ACK, re-INVITE, ACK, BYE from the caller), then a
/// second one whose BYE comes from the UAS (`uas_call_hangs_up`) and
/// reaches the client over its TLS connection.
#[test]
fn call_over_tls_end_to_end_with_a_udp_uas_behind_the_gate() {
    let site = Site::new((41, 1), 1000);
    let gate = site.gate();
    let uas = Sipp::new(Scenario::repo("uas_call"))
        .local(ip(site.net, 11), 5060)
        .transport(Transport::Udp)
        .calls(1)
        .timeout(Duration::from_secs(30))
        .spawn()
        .expect("uas starts");
    let mut c = peer::connect(site.sip(), &site.ca.pem);
    let to = "To: <sips:bob@example.com>\r\n";
    let ruri = format!("sips:bob@{}", site.sip());
    c.send(&request(&c, "INVITE", &ruri, "c1", 1, to));
    let ok = c.recv_final(T);
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    // The client's side of the route set is sips: (RFC 3261 16.6 step 4),
    // the instance's side plain sip (over UDP).
    let rr = record_routes(&ok);
    assert_eq!(rr.len(), 2, "{ok}");
    assert!(
        rr[1].starts_with("sips:") && rr[1].contains(&site.sip().to_string()),
        "{rr:?}"
    );
    assert!(
        rr[0].starts_with("sip:") && !rr[0].contains("transport"),
        "{rr:?}"
    );
    // In-dialog requests along the reversed route set, to the UAS's Contact.
    let route = format!("Route: <{}>, <{}>\r\n", rr[1], rr[0]);
    let target = header(&ok, "Contact")
        .unwrap()
        .trim_matches(|c| c == '<' || c == '>')
        .to_owned();
    let to_tag = header(&ok, "To").unwrap().to_owned();
    let dialog = format!("{route}To: {to_tag}\r\n");
    c.send(&request(&c, "ACK", &target, "c1", 1, &dialog));
    c.send(&request(&c, "INVITE", &target, "c1", 2, &dialog));
    let ok2 = c.recv_final(T);
    assert!(ok2.starts_with("SIP/2.0 200"), "{ok2}");
    c.send(&request(&c, "ACK", &target, "c1", 2, &dialog));
    c.send(&request(&c, "BYE", &target, "c1", 3, &dialog));
    let bye_ok = c.recv_final(T);
    assert!(
        bye_ok.starts_with("SIP/2.0 200") && bye_ok.contains("CSeq: 3 BYE"),
        "{bye_ok}"
    );
    let report = uas.wait(Duration::from_secs(10)).expect("uas report");
    assert_eq!((report.successful, report.failed), (1, 0), "{report:?}");

    // The UAS hangs up: its BYE reaches alice on her TLS connection.
    let uas = Sipp::new(Scenario::repo("uas_call_hangs_up"))
        .local(ip(site.net, 11), 5060)
        .transport(Transport::Udp)
        .calls(1)
        .timeout(Duration::from_secs(30))
        .spawn()
        .expect("uas starts");
    c.send(&request(&c, "INVITE", &ruri, "c2", 1, to));
    let ok = c.recv_final(T);
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    let rr = record_routes(&ok);
    let target = header(&ok, "Contact")
        .unwrap()
        .trim_matches(|c| c == '<' || c == '>')
        .to_owned();
    let dialog = format!(
        "Route: <{}>, <{}>\r\nTo: {}\r\n",
        rr[1],
        rr[0],
        header(&ok, "To").unwrap()
    );
    c.send(&request(&c, "ACK", &target, "c2", 1, &dialog));
    let bye = c.recv(T).expect("the UAS's BYE over TLS");
    assert!(
        bye.starts_with(&format!("BYE sips:alice@{}", c.local())),
        "{bye}"
    );
    let via = header(&bye, "Via").unwrap();
    assert!(via.starts_with("SIP/2.0/TLS"), "{bye}");
    // 200 to the BYE: its Via stack copied.
    let vias: String = bye
        .lines()
        .filter(|l| l.starts_with("Via:"))
        .map(|l| format!("{l}\r\n"))
        .collect();
    let copy = |h: &str| format!("{h}: {}\r\n", header(&bye, h).unwrap());
    c.send(&format!(
        "SIP/2.0 200 OK\r\n{vias}{}{}{}{}Content-Length: 0\r\n\r\n",
        copy("From"),
        copy("To"),
        copy("Call-ID"),
        copy("CSeq")
    ));
    let report = uas.wait(Duration::from_secs(10)).expect("uas report");
    assert_eq!((report.successful, report.failed), (1, 0), "{report:?}");
    assert!(tls_metric(&gate, "server", "ok") >= 1.0);
}

/// An instance sends OPTIONS to a `sips:` URI: the gate opens a TLS
/// connection, verifies the server against `[tls] ca`, and relays the
/// answer; a server whose certificate the CA did not sign gets nothing.
#[test]
fn gate_opens_verified_tls_to_a_sips_next_hop() {
    let site = Site::new((41, 2), 1000);
    let gate = site.gate();
    let far = SocketAddr::new(ip(site.net, 31), 5061);
    let listener = std::net::TcpListener::bind(far).unwrap();
    let instance = UdpSocket::bind(SocketAddr::new(ip(site.net, 11), 5060)).unwrap();
    instance.set_read_timeout(Some(T)).unwrap();
    let options = |branch: &str| {
        format!(
            "OPTIONS sips:carol@{far} SIP/2.0\r\nVia: SIP/2.0/UDP {}:5060;branch=z9hG4bK{branch}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:sg@example.com>;tag=sg1\r\nTo: <sips:carol@{far}>\r\n\
             Call-ID: {branch}@tls-test\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n",
            ip(site.net, 11)
        )
    };
    instance
        .send_to(options("out1").as_bytes(), site.sip())
        .unwrap();
    let (cert, key) = site.ca.issue(&far.ip().to_string());
    let mut s = peer::accept(&listener, &cert, &key);
    let got = s.recv(T).expect("OPTIONS over TLS");
    assert!(got.starts_with("OPTIONS sips:carol@"), "{got}");
    assert!(
        header(&got, "Via").unwrap().starts_with("SIP/2.0/TLS"),
        "{got}"
    );
    let vias: String = got
        .lines()
        .filter(|l| l.starts_with("Via:"))
        .map(|l| format!("{l}\r\n"))
        .collect();
    s.send(&format!(
        "SIP/2.0 200 OK\r\n{vias}From: <sip:sg@example.com>;tag=sg1\r\nTo: <sips:carol@{far}>;tag=c1\r\n\
         Call-ID: out1@tls-test\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
    ));
    let mut buf = [0u8; 4096];
    let (n, _) = instance.recv_from(&mut buf).expect("200 relayed");
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("SIP/2.0 200"), "{answer}");
    assert_eq!(tls_metric(&gate, "client", "ok"), 1.0);
    drop(s);

    // Another CA's certificate at another address: the handshake fails.
    let rogue = SocketAddr::new(ip(site.net, 32), 5061);
    let rogue_listener = std::net::TcpListener::bind(rogue).unwrap();
    let other = Ca::new(site.dir.path(), "other");
    let (cert, key) = other.issue(&rogue.ip().to_string());
    instance
        .send_to(
            options("out2")
                .replace(&far.to_string(), &rogue.to_string())
                .as_bytes(),
            site.sip(),
        )
        .unwrap();
    let mut s = peer::accept(&rogue_listener, &cert, &key);
    assert!(
        s.recv(T).is_none(),
        "a request reached an unverified server"
    );
    wait_for("the failed client handshake counted", T, || {
        (tls_metric(&gate, "client", "error") == 1.0).then_some(())
    })
    .unwrap();
}

/// SIGHUP: the next handshake gets the new certificate, a connection open
/// before keeps working, and a pair that does not load keeps the one in
/// force (counted).
#[test]
fn certificate_reloads_on_sighup_without_dropping_connections() {
    // A poll interval of an hour: only the signal reloads here.
    let site = Site::new((41, 3), 3_600_000);
    let gate = site.gate();
    let cert_a = std::fs::read_to_string(site.path("gate-cert.pem")).unwrap();
    let mut before = peer::connect(site.sip(), &site.ca.pem);
    assert_eq!(before.peer_cert(), peer::der(&cert_a));

    let (cert_b, key_b) = site.ca.issue(&ip(site.net, 1).to_string());
    std::fs::write(site.path("gate-key.pem"), &key_b).unwrap();
    std::fs::write(site.path("gate-cert.pem"), &cert_b).unwrap();
    gate.signal("HUP");
    wait_for("reload counted", T, || {
        (gate
            .metric(r#"sipgate_tls_reloads_total{result="ok"}"#)
            .unwrap()
            == 1.0)
            .then_some(())
    })
    .unwrap();
    let after = peer::connect(site.sip(), &site.ca.pem);
    assert_eq!(after.peer_cert(), peer::der(&cert_b));
    // The connection from before still carries SIP: a ping gets its pong.
    before.s.write_all(b"\r\n\r\n").unwrap();
    before.s.flush().unwrap();
    let mut pong = [0u8; 2];
    let until = Instant::now() + T;
    loop {
        match before.s.read(&mut pong) {
            Ok(2) => break,
            Ok(n) => panic!("connection from before the reload: read {n}"),
            Err(_) => assert!(Instant::now() < until, "no pong on the old connection"),
        }
    }
    assert_eq!(&pong, b"\r\n");

    // A broken certificate file: refused, B stays.
    std::fs::write(site.path("gate-cert.pem"), "not a certificate").unwrap();
    gate.signal("HUP");
    wait_for("reload error counted", T, || {
        (gate
            .metric(r#"sipgate_tls_reloads_total{result="error"}"#)
            .unwrap()
            == 1.0)
            .then_some(())
    })
    .unwrap();
    let again = peer::connect(site.sip(), &site.ca.pem);
    assert_eq!(again.peer_cert(), peer::der(&cert_b));
    assert!(gate.log().contains("TLS certificate not reloaded"));
}

/// Clients that open a connection and never finish the handshake are cut
/// at `handshake_timeout_ms` (counted) and, meanwhile, hold slots of the
/// bounded connection table (R-OV-1: one more is refused at once); garbage
/// instead of a ClientHello closes the connection; the gate serves TLS
/// after both.
#[test]
fn r_ov_1_stalled_handshakes_are_bounded_and_cut_and_garbage_does_not_hurt() {
    let site = Site::with((41, 4), 1000, "[tcp]\nmax_connections = 3\n");
    let mut gate = site.gate();
    let stalled: Vec<TcpStream> = (0..3)
        .map(|_| {
            let s = TcpStream::connect(site.sip()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s
        })
        .collect();
    let start = Instant::now();
    wait_for("three slots taken", T, || {
        (gate.metric("sipgate_tcp_connections").unwrap() == 3.0).then_some(())
    })
    .unwrap();
    // The table is full: the next one is closed at once, not at the deadline.
    let mut over = TcpStream::connect(site.sip()).unwrap();
    over.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut b = [0u8; 16];
    assert!(matches!(over.read(&mut b), Ok(0) | Err(_)));
    assert_eq!(
        gate.metric(r#"sipgate_dropped_total{reason="tcp_connection_limit"}"#)
            .unwrap(),
        1.0
    );
    for mut s in stalled {
        let mut b = [0u8; 16];
        // Closed by the gate: end of stream (or a reset), not our timeout.
        match s.read(&mut b) {
            Ok(0) => {}
            Err(e) => assert_ne!(e.kind(), std::io::ErrorKind::WouldBlock, "not closed"),
            Ok(n) => panic!("read {n} bytes before any handshake"),
        }
    }
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(8),
        "{waited:?}"
    );
    wait_for("timeouts counted", T, || {
        (tls_metric(&gate, "server", "timeout") == 3.0).then_some(())
    })
    .unwrap();

    for junk in [
        &b"INVITE sip:bob@example.com SIP/2.0\r\nContent-Length: 0\r\n\r\n"[..],
        &[0x16, 0x03, 0x01, 0xff, 0xff, 0x01][..],
        &[0u8; 3000][..],
    ] {
        let mut s = TcpStream::connect(site.sip()).unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        let _ = s.write_all(junk);
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        assert!(
            !String::from_utf8_lossy(&rest).contains("SIP/2.0"),
            "answered garbage in clear"
        );
    }
    wait_for("bad handshakes counted", T, || {
        (tls_metric(&gate, "server", "error") >= 3.0).then_some(())
    })
    .unwrap();
    let ok = peer::connect(site.sip(), &site.ca.pem);
    drop(ok);
    assert!(
        gate.wait_exit(Duration::from_millis(100)).is_none(),
        "the gate exited"
    );
    wait_for("every slot released", T, || {
        (gate.metric("sipgate_tcp_connections").unwrap() == 0.0).then_some(())
    })
    .unwrap();
}

/// Without a signal: a renewed pair is picked up when the files change
/// (`reload_poll_ms`), from the next handshake on.
#[test]
fn certificate_reloads_when_its_files_change() {
    let site = Site::new((41, 5), 200);
    let gate = site.gate();
    let cert_a = std::fs::read_to_string(site.path("gate-cert.pem")).unwrap();
    assert_eq!(
        peer::connect(site.sip(), &site.ca.pem).peer_cert(),
        peer::der(&cert_a)
    );
    let (cert_b, key_b) = site.ca.issue(&ip(site.net, 1).to_string());
    // Written aside and renamed in, as a certificate manager does.
    std::fs::write(site.path("new-key.pem"), &key_b).unwrap();
    std::fs::write(site.path("new-cert.pem"), &cert_b).unwrap();
    std::fs::rename(site.path("new-key.pem"), site.path("gate-key.pem")).unwrap();
    std::fs::rename(site.path("new-cert.pem"), site.path("gate-cert.pem")).unwrap();
    wait_for("the new certificate served", T, || {
        let c = peer::connect(site.sip(), &site.ca.pem);
        (c.peer_cert() == peer::der(&cert_b)).then_some(())
    })
    .unwrap();
    assert!(
        gate.metric(r#"sipgate_tls_reloads_total{result="ok"}"#)
            .unwrap()
            >= 1.0
    );
}
