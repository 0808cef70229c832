//! The `sip-gate` binary when its file descriptors run out before `[tcp]
//! max_connections` (issue 29, R-OV-1): started under a descriptor limit
//! far below it, it warns at start that the limit is short; once the
//! descriptors are gone it logs the failed accepts and goes on serving: the
//! open connections answer their keep-alives, UDP is served, and a client
//! left waiting in the kernel's backlog is taken as soon as descriptors
//! are free again.
//!
//! `127.82.2.0/24`: the gate on `.1`, the sg (SIPp `uas_register` over UDP)
//! on `.11`, the clients on `.22`.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use testbed::bins::Node;
use testbed::fixture::{Mode, SiteFile};
use testbed::{wait_listening, Scenario, Sipp, Transport};

fn ip(host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 82, 2, host))
}

/// The descriptors the gate may have: its own (runtime, sockets, store,
/// logs) take a few dozen, the rest go to connections.
const NOFILE: u32 = 96;

/// One sg behind a UDP and TCP listener on `.1:5060`; no per-source limit
/// (one source opens every connection), one UDP worker, and a nameserver
/// on the gate's own address.
fn site(dir: &std::path::Path) -> std::path::PathBuf {
    SiteFile::new("fd-limit")
        .section("dns", &format!("nameservers = [\"{}:53\"]", ip(1)))
        .section("overload", "per_source_rate = 0\nudp_workers = 1")
        .sgs(&[("0", SocketAddr::new(ip(11), 5060))])
        .listener(
            "subs",
            SocketAddr::new(ip(1), 5060),
            Mode::Balance("sg"),
            "subscriber",
            r#"transports = ["udp", "tcp"]"#,
        )
        .write(dir)
}

/// A CRLF keep-alive on `c` (RFC 5626 3.5.1): whether its pong came within
/// `wait`.
fn ping(c: &mut TcpStream, wait: Duration) -> bool {
    c.set_read_timeout(Some(wait)).unwrap();
    if c.write_all(b"\r\n\r\n").is_err() {
        return false;
    }
    let mut pong = [0u8; 2];
    c.read_exact(&mut pong).is_ok() && &pong == b"\r\n"
}

fn connect() -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::new(ip(22), 0).into()).unwrap();
    s.connect_timeout(&SocketAddr::new(ip(1), 5060).into(), Duration::from_secs(2))
        .expect("the kernel completes the handshake, accepted or not");
    s.into()
}

/// A REGISTER over UDP from `.22`: whether its 200 came back.
fn udp_register(n: u32) -> bool {
    let sock = UdpSocket::bind(SocketAddr::new(ip(22), 0)).unwrap();
    let local = sock.local_addr().unwrap();
    let msg = format!(
        "REGISTER sip:example.com SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK-fd-{n};rport\r\n\
         Max-Forwards: 70\r\nTo: <sip:fd{n}@example.com>\r\nFrom: <sip:fd{n}@example.com>;tag=fd{n}\r\n\
         Call-ID: fd-{n}@fd-limit\r\nCSeq: 1 REGISTER\r\nContact: <sip:fd{n}@{local}>\r\n\
         Expires: 60\r\nContent-Length: 0\r\n\r\n"
    );
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    sock.send_to(msg.as_bytes(), SocketAddr::new(ip(1), 5060))
        .unwrap();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(4);
    while Instant::now() < deadline {
        if let Ok(n) = sock.recv(&mut buf) {
            if buf[..n].starts_with(b"SIP/2.0 200") {
                return true;
            }
        }
    }
    false
}

/// The gate under `prlimit` with soft = hard = [`NOFILE`] (it cannot
/// raise it), its log in `dir`; once it listens.
fn start_gate(dir: &std::path::Path) -> Node {
    let site = site(dir);
    let gate = Node::gate(&site)
        .wrapper([
            "prlimit".into(),
            format!("--nofile={NOFILE}:{NOFILE}"),
            "--".into(),
        ])
        .admin(SocketAddr::new(ip(1), 9093))
        .env("RUST_LOG", "info")
        .start()
        .expect("prlimit runs the gate");
    assert!(
        wait_listening(
            SocketAddr::new(ip(1), 5060),
            Transport::Tcp,
            Duration::from_secs(20)
        ),
        "the gate listens"
    );
    gate
}

#[test]
fn r_ov_1_out_of_descriptors_the_gate_logs_keeps_serving_and_takes_the_backlog_once_they_free() {
    let _sg = Sipp::new(Scenario::repo("uas_register"))
        .local(ip(11), 5060)
        .transport(Transport::Udp)
        .timeout(Duration::from_secs(120))
        .spawn()
        .expect("the registrar starts");
    let dir = tempfile::tempdir().unwrap();
    let gate = start_gate(dir.path());
    let text = || gate.log();
    assert!(
        text().contains("descriptor limit below [tcp] max_connections"),
        "no warning at start:\n{}",
        text()
    );

    // Open connections until one gets no pong: the gate could not accept
    // it (more than NOFILE is impossible).
    let mut open = Vec::new();
    let waiting = loop {
        assert!(open.len() < NOFILE as usize, "every connection was served");
        let mut c = connect();
        if !ping(&mut c, Duration::from_millis(500)) {
            break c;
        }
        open.push(c);
    };
    assert!(
        open.len() > 10,
        "only {} connections before EMFILE",
        open.len()
    );
    assert!(text().contains("tcp accept failed"), "{}", text());

    // Still serving: UDP, and every connection it holds.
    assert!(
        udp_register(1),
        "UDP REGISTER not answered out of descriptors"
    );
    for (i, c) in open.iter_mut().enumerate().take(5) {
        assert!(
            ping(c, Duration::from_secs(2)),
            "open connection {i} lost its pong"
        );
    }

    // Descriptors back: the client in the backlog is taken, and pinged
    // again, it gets both pongs.
    drop(open.drain(..5));
    let mut waiting = waiting;
    let mut pong = [0u8; 4];
    waiting
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    waiting.write_all(b"\r\n\r\n").unwrap();
    waiting
        .read_exact(&mut pong)
        .expect("the backlog's connection is taken");
    assert_eq!(&pong, b"\r\n\r\n");
}
