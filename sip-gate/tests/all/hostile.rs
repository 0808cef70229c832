//! A corpus of hostile input sent to the real `sip-gate` binary over UDP and
//! TCP (R-FT-3, R-FT-4): oversized headers, 10 000 Via values,
//! a request that would not fit a datagram once the gate's headers are in
//! (513), Content-Length lies, NUL bytes, truncated streams, a slowloris peer and a
//! connection that never sends. Each gets the right answer: 400 where a
//! response is possible, the connection closed where the framing is lost,
//! silence for a datagram that cannot be answered. Afterwards the gate is
//! still running, logged no panic, and forwards normal calls over both
//! transports (SIPp through the gate to a SIPp sg).
//!
//! Addresses: `127.98.1.0/24`; the gate on `.1`, the sg on `.11`, callers on
//! `.100`, the hostile peer on `.66`.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

use testbed::bins::Node;
use testbed::fixture::{Mode, SiteFile};
use testbed::{Scenario, Sipp, Transport};

fn ip(host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 98, 1, host))
}

const GATE: (u8, u16) = (1, 5060);

fn gate_addr() -> SocketAddr {
    SocketAddr::new(ip(GATE.0), GATE.1)
}

fn write_site(dir: &Path) -> std::path::PathBuf {
    SiteFile::new("hostile")
        .section("tcp", "idle_s = 3\nframe_s = 2")
        .servers(&["srv-0"])
        .instance("sg-0", "sg", "srv-0", SocketAddr::new(ip(11), 5060))
        .listener("g", gate_addr(), Mode::Guard("sg-0"), "subscriber", "")
        .write(dir)
}

/// An OPTIONS with `extra` header lines (CRLF-terminated each) and `body`;
/// `cl` is the Content-Length header line(s) to write, `None` for the true one.
fn options(branch: &str, extra: &str, cl: Option<&str>, body: &[u8]) -> Vec<u8> {
    let cl = cl.map_or_else(
        || format!("Content-Length: {}\r\n", body.len()),
        str::to_owned,
    );
    let mut m = format!(
        "OPTIONS sip:sg@{g} SIP/2.0\r\n\
         Via: SIP/2.0/UDP {me}:5099;branch=z9hG4bK{branch}\r\n\
         {extra}Max-Forwards: 70\r\n\
         From: <sip:hostile@{me}>;tag=h-{branch}\r\n\
         To: <sip:sg@{g}>\r\n\
         Call-ID: {branch}@hostile\r\n\
         CSeq: 1 OPTIONS\r\n\
         {cl}\r\n",
        g = gate_addr(),
        me = ip(66),
    )
    .into_bytes();
    m.extend_from_slice(body);
    m
}

/// Sends `bytes` in one datagram; the status line of the first answer
/// within `wait`, `None` for silence.
fn udp(bytes: &[u8], wait: Duration) -> Option<String> {
    let s = UdpSocket::bind(SocketAddr::new(ip(66), 5099)).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    s.send_to(bytes, gate_addr()).unwrap();
    let mut buf = vec![0u8; 65_535];
    let n = s.recv(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf[..n]);
    Some(text.lines().next().unwrap_or_default().to_owned())
}

/// What a TCP peer saw: the status lines it got, and whether (and after how
/// long) the gate closed the connection.
struct TcpSeen {
    statuses: Vec<String>,
    closed_after: Option<Duration>,
}

/// Connects, sends `chunks` (pausing `gap` between them), then reads until
/// the gate closes or `wait` passes.
fn tcp(chunks: &[&[u8]], gap: Duration, wait: Duration) -> TcpSeen {
    let started = Instant::now();
    let mut s = TcpStream::connect(gate_addr()).unwrap();
    for (n, c) in chunks.iter().enumerate() {
        if n > 0 {
            std::thread::sleep(gap);
        }
        if s.write_all(c).is_err() {
            break; // closed under us: reported below
        }
    }
    let until = Instant::now() + wait;
    let mut got = Vec::new();
    let mut closed_after = None;
    let mut buf = [0u8; 4096];
    while Instant::now() < until {
        s.set_read_timeout(Some(until - Instant::now())).unwrap();
        match s.read(&mut buf) {
            Ok(0) => {
                closed_after = Some(started.elapsed());
                break;
            }
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
            Err(_) => {
                closed_after = Some(started.elapsed());
                break;
            }
        }
    }
    let statuses = String::from_utf8_lossy(&got)
        .lines()
        .filter(|l| l.starts_with("SIP/2.0 "))
        .map(str::to_owned)
        .collect();
    TcpSeen {
        statuses,
        closed_after,
    }
}

fn status(code: u16) -> impl Fn(&str) -> bool {
    move |l: &str| l.starts_with(&format!("SIP/2.0 {code} "))
}

const SHORT: Duration = Duration::from_millis(700);

fn hostile_udp() {
    // A 60 KB header value still fits a datagram: the sg answers it.
    let big = format!("X-Big: {}\r\n", "a".repeat(60_000));
    let got = udp(&options("big", &big, None, b""), Duration::from_secs(3));
    assert!(
        got.as_deref().is_some_and(status(200)),
        "oversized header: {got:?}"
    );
    // 65 480 bytes fit a datagram to the gate, but not with the gate's Via
    // and `received` on the way out: 513 Message Too Large (R-FT-6), where
    // the send used to fail and the client heard nothing.
    let base = options("huge", "X-Big: \r\n", None, b"").len();
    let huge = format!("X-Big: {}\r\n", "a".repeat(65_480 - base));
    let got = udp(&options("huge", &huge, None, b""), Duration::from_secs(3));
    assert!(
        got.as_deref().is_some_and(status(513)),
        "past the datagram limit: {got:?}"
    );
    // Content-Length lies.
    for (name, cl, want) in [
        ("too-large", "Content-Length: 500\r\n", 400),
        ("negative", "Content-Length: -4\r\n", 400),
        ("not-a-number", "Content-Length: 4x\r\n", 400),
        (
            "duplicated",
            "Content-Length: 4\r\nContent-Length: 9\r\n",
            400,
        ),
    ] {
        let got = udp(&options(name, "", Some(cl), b"abcd"), SHORT);
        assert!(got.as_deref().is_some_and(status(want)), "{name}: {got:?}");
    }
    // Too small: the bytes after it are discarded (RFC 3261 18.3), the
    // request goes on with a 2-byte body and the sg answers.
    let got = udp(
        &options("too-small", "", Some("Content-Length: 2\r\n"), b"abcd"),
        Duration::from_secs(3),
    );
    assert!(
        got.as_deref().is_some_and(status(200)),
        "too small: {got:?}"
    );
    // NUL bytes in a header value, in a header name, and a datagram of NULs.
    let got = udp(&options("nul-value", "Subject: a\0b\r\n", None, b""), SHORT);
    assert!(
        got.as_deref().is_some_and(status(400)),
        "NUL in a value: {got:?}"
    );
    let got = udp(&options("nul-name", "Sub\0ject: ab\r\n", None, b""), SHORT);
    assert!(
        got.as_deref().is_some_and(status(400)),
        "NUL in a name: {got:?}"
    );
    assert_eq!(udp(&[0u8; 512], SHORT), None, "NULs: silence");
    // Unparseable: silence, no amplification toward a forged source.
    assert_eq!(udp(b"\xff\xfe garbage \x01\x02\r\n\r\n", SHORT), None);
    let start_only = b"OPTIONS sip:sg@x SIP/2.0\r\n".to_vec();
    assert_eq!(udp(&start_only, SHORT), None, "no header section end");
}

fn many_vias(n: usize) -> String {
    let mut v = String::with_capacity(n * 40);
    for k in 0..n {
        v.push_str(&format!(
            "Via: SIP/2.0/UDP 10.{}.{}.1;branch=z9hG4bKv{k}\r\n",
            k / 250,
            k % 250
        ));
    }
    v
}

fn hostile_tcp() {
    // 10 000 Via values: far past the 64 KB a message may have: closed.
    let seen = tcp(
        &[&options("vias", &many_vias(10_000), None, b"")],
        SHORT,
        SHORT * 3,
    );
    assert!(seen.closed_after.is_some(), "10k Vias: closed");
    // Content-Length lies a stream cannot survive: closed, nothing answered.
    for (name, cl) in [
        ("negative", "Content-Length: -4\r\n"),
        ("duplicated", "Content-Length: 4\r\nContent-Length: 9\r\n"),
        ("missing", ""),
    ] {
        let seen = tcp(&[&options(name, "", Some(cl), b"abcd")], SHORT, SHORT * 3);
        assert!(seen.closed_after.is_some(), "{name}: closed");
        assert!(seen.statuses.is_empty(), "{name}: {:?}", seen.statuses);
    }
    // A malformed message that frames: 400 on the same connection.
    let seen = tcp(
        &[&options("nul-name", "Sub\0ject: ab\r\n", None, b"")],
        SHORT,
        SHORT,
    );
    assert!(
        seen.statuses.iter().any(|l| status(400)(l)),
        "{:?}",
        seen.statuses
    );
    // Content-Length too large, then the peer stops: the message never
    // completes and the connection closes at frame_s (2 s).
    let seen = tcp(
        &[&options(
            "truncated",
            "",
            Some("Content-Length: 500\r\n"),
            b"abcd",
        )],
        SHORT,
        Duration::from_secs(6),
    );
    let after = seen.closed_after.expect("truncated stream closed");
    assert!(after >= Duration::from_millis(1_500), "{after:?}");
    // Slowloris: a byte a second never completes a message; closed at
    // frame_s although the connection is never idle for idle_s (3 s).
    let msg = options("slow", "", None, b"");
    let bytes: Vec<&[u8]> = msg.chunks(1).take(8).collect();
    let seen = tcp(&bytes, Duration::from_secs(1), Duration::from_secs(4));
    let after = seen.closed_after.expect("slowloris closed");
    assert!(after < Duration::from_secs(5), "closed after {after:?}");
    // A connection that never sends: closed after idle_s.
    let seen = tcp(&[], SHORT, Duration::from_secs(8));
    let after = seen.closed_after.expect("silent connection closed");
    assert!(after >= Duration::from_millis(2_500), "{after:?}");
}

fn calls_go_through(transport: Transport) {
    let r = Sipp::new(Scenario::repo("uac_call"))
        .local_ip(ip(100))
        .remote(gate_addr())
        .transport(transport)
        .calls(3)
        .rate(10)
        .duration(Duration::from_millis(100))
        .timeout(Duration::from_secs(30))
        .spawn()
        .unwrap()
        .wait(Duration::from_secs(40))
        .unwrap();
    assert!(r.all_ok() && r.successful == 3, "{transport:?}: {r:?}");
}

/// R-FT-3, R-FT-4: the hostile corpus over both transports, then normal
/// calls over both, through the same gate process.
#[test]
fn r_ft_3_hostile_input_gets_the_right_answer_and_the_gate_keeps_forwarding() {
    let dir = tempfile::tempdir().unwrap();
    let site = write_site(dir.path());
    let mut gate = Node::gate(&site)
        .admin(SocketAddr::new(ip(1), 9091))
        .args(["--node", "h"])
        .start()
        .unwrap();
    gate.wait_ready().unwrap();
    let sg = Sipp::new(Scenario::repo("uas_call"))
        .local(ip(11), 5060)
        .arg("-aa")
        .timeout(Duration::from_secs(120))
        .spawn()
        .unwrap();
    let sg_tcp = Sipp::new(Scenario::repo("uas_call"))
        .local(ip(11), 5060)
        .transport(Transport::Tcp)
        .arg("-aa")
        .timeout(Duration::from_secs(120))
        .spawn()
        .unwrap();

    hostile_udp();
    hostile_tcp();

    calls_go_through(Transport::Udp);
    calls_go_through(Transport::Tcp);
    assert!(gate.wait_exit(Duration::ZERO).is_none(), "{}", gate.log());
    let log = gate.log();
    assert!(!log.contains("panicked"), "{log}");
    assert!(
        gate.metric("sipgate_dropped_total{reason=\"tcp_frame_timeout\"}")
            .unwrap()
            >= 2.0
    );
    let _ = (sg.stop(), sg_tcp.stop());
}
