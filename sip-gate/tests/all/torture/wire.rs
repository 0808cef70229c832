//! RFC 4475's messages, bit-exact from its Appendix A.1 archive
//! (`rfc4475/*.dat`, see the README there), through the real `sip-gate`
//! binary: a guard listener in front of one sg, the sg a raw UDP socket
//! that records what arrives, the client a raw UDP socket or one TCP
//! connection per message. Each message meets the outcome the RFC asks of a
//! proxy ([`CASES`], with the RFC section): a valid request is forwarded,
//! byte for byte but for the headers a proxy edits (Via, Max-Forwards,
//! Record-Route, Route, Content-Length); an invalid one gets its answer (400,
//! 420, 505...) or, when none can be made, is dropped. R-FT-3.
//!
//! Network `127.57.N.0/24`: the gate on `.1`, the sg on `.11`, the client
//! on `.21` (UDP, port 5060: the Vias name no port or 5060, and the gate
//! answers there) or `.22` (TCP).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sip_gate::frame::{self, Frame};
use sip_gate::SipMessage;
use testbed::bins::Node;
use testbed::fixture::{Mode, SiteFile};

/// What the gate does with one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Forwarded to the sg, this many messages (a stream may carry two).
    Fwd(usize),
    /// Answered with this status, nothing forwarded.
    Ans(u16),
    /// Neither answered nor forwarded.
    Drop,
}
use Outcome::{Ans, Drop, Fwd};

/// One archive member: its file, its RFC 4475 section, and the outcome over
/// UDP and over TCP.
struct Case {
    file: &'static str,
    section: &'static str,
    udp: Outcome,
    tcp: Outcome,
}

const fn case(file: &'static str, section: &'static str, udp: Outcome, tcp: Outcome) -> Case {
    Case {
        file,
        section,
        udp,
        tcp,
    }
}

/// Every member of the archive, with the RFC 4475 section that describes it
/// and what the gate does with it, over UDP and over TCP. Where the RFC
/// lets an element choose (or speaks of a UAS or registrar only), the row
/// says what a proxy in the gate's place does and why.
const CASES: &[Case] = &[
    // 3.1.1 valid messages: forwarded, unless the gate's own rules refuse
    // them (R-SEC-1: no open relay).
    // In a dialog (To tag) without the gate's Record-Route token: 403.
    case("wsinv.dat", "3.1.1.1", Ans(403), Ans(403)),
    case("intmeth.dat", "3.1.1.2", Fwd(1), Fwd(1)),
    case("esc01.dat", "3.1.1.3", Fwd(1), Fwd(1)),
    case("escnull.dat", "3.1.1.4", Fwd(1), Fwd(1)),
    case("esc02.dat", "3.1.1.5", Fwd(1), Fwd(1)),
    case("lwsdisp.dat", "3.1.1.6", Fwd(1), Fwd(1)),
    case("longreq.dat", "3.1.1.7", Fwd(1), Fwd(1)),
    // A datagram's bytes past Content-Length are noise (RFC 3261 18.3); on
    // a stream they are the next request, forwarded too.
    case("dblreq.dat", "3.1.1.8", Fwd(1), Fwd(2)),
    case("semiuri.dat", "3.1.1.9", Fwd(1), Fwd(1)),
    case("transports.dat", "3.1.1.10", Fwd(1), Fwd(1)),
    // Its Route names another host: 403 Route Not Allowed (R-SEC-1).
    case("mpart01.dat", "3.1.1.11", Ans(403), Ans(403)),
    // Responses to nothing the gate sent (R-SEC-1).
    case("unreason.dat", "3.1.1.12", Drop, Drop),
    case("noreason.dat", "3.1.1.13", Drop, Drop),
    // 3.1.2 invalid messages: 400 where a response can be made.
    // The malformed header is the Via, which a response is routed by.
    case("badinv01.dat", "3.1.2.1", Drop, Drop),
    // On a stream the body is still to come (the gate closes the
    // connection after `[tcp] frame_s`).
    case("clerr.dat", "3.1.2.2", Ans(400), Drop),
    // On a stream the framing is lost: the connection is closed.
    case("ncl.dat", "3.1.2.3", Ans(400), Drop),
    case("scalar02.dat", "3.1.2.4", Ans(400), Ans(400)),
    // A response (R-SEC-1, and invalid).
    case("scalarlg.dat", "3.1.2.5", Drop, Drop),
    case("quotbal.dat", "3.1.2.6", Ans(400), Ans(400)),
    case("ltgtruri.dat", "3.1.2.7", Ans(400), Ans(400)),
    case("lwsruri.dat", "3.1.2.8", Ans(400), Ans(400)),
    case("lwsstart.dat", "3.1.2.9", Ans(400), Ans(400)),
    case("trws.dat", "3.1.2.10", Ans(400), Ans(400)),
    // URI headers in the Request-URI (RFC 3261 19.1.1).
    case("escruri.dat", "3.1.2.11", Ans(400), Ans(400)),
    // The RFC: reject only if the Date matters; it does not to a proxy.
    case("baddate.dat", "3.1.2.12", Fwd(1), Fwd(1)),
    // The Contact of a REGISTER is the registrar's to judge.
    case("regbadct.dat", "3.1.2.13", Fwd(1), Fwd(1)),
    case("badaspec.dat", "3.1.2.14", Ans(400), Ans(400)),
    // The archive's copy has no empty line ending its header section (the
    // RFC's text has one): no whole message, so nothing to answer.
    case("baddn.dat", "3.1.2.15", Drop, Drop),
    case("badvers.dat", "3.1.2.16", Ans(505), Ans(505)),
    case("mismatch01.dat", "3.1.2.17", Ans(400), Ans(400)),
    // The RFC allows 400 for it.
    case("mismatch02.dat", "3.1.2.18", Ans(400), Ans(400)),
    case("bigcode.dat", "3.1.2.19", Drop, Drop),
    // 3.2 transaction layer: a bare magic cookie is still a branch.
    case("badbranch.dat", "3.2.1", Fwd(1), Fwd(1)),
    // 3.3 application layer.
    // No Call-ID, From or To: nothing a client could match a 400 to.
    case("insuf.dat", "3.3.1", Drop, Drop),
    // RFC 3261 16.3 step 2 says SHOULD 416; the gate routes new work by
    // its policy, not by the Request-URI, and leaves the scheme to the sg.
    case("unkscm.dat", "3.3.2", Fwd(1), Fwd(1)),
    case("novelsc.dat", "3.3.3", Fwd(1), Fwd(1)),
    case("unksm2.dat", "3.3.4", Fwd(1), Fwd(1)),
    // 420 with Unsupported (RFC 3261 16.3 step 5). Its Via asks for TLS:
    // a datagram's answer would need a TLS connection the gate cannot
    // open without `[tls] ca`, so over UDP nothing is answered.
    case("bext01.dat", "3.3.5", Drop, Ans(420)),
    case("invut.dat", "3.3.6", Fwd(1), Fwd(1)),
    case("regaut01.dat", "3.3.7", Fwd(1), Fwd(1)),
    case("multi01.dat", "3.3.8", Ans(400), Ans(400)),
    // On a stream two Content-Lengths lose the framing: closed.
    case("mcl01.dat", "3.3.9", Ans(400), Drop),
    case("bcast.dat", "3.3.10", Drop, Drop),
    case("zeromf.dat", "3.3.11", Ans(483), Ans(483)),
    case("cparam01.dat", "3.3.12", Fwd(1), Fwd(1)),
    case("cparam02.dat", "3.3.13", Fwd(1), Fwd(1)),
    case("regescrt.dat", "3.3.14", Fwd(1), Fwd(1)),
    case("sdp01.dat", "3.3.15", Fwd(1), Fwd(1)),
    // 3.4 RFC 2543 syntax: forwarded from a datagram; without a
    // Content-Length a stream cannot be framed (RFC 3261 18.3): closed.
    case("inv2543.dat", "3.4.1", Fwd(1), Drop),
    // In the archive, described by no section: no Via, nothing to answer.
    case("test.dat", "-", Drop, Drop),
];

/// How long a message's outcome is waited for.
const WINDOW: Duration = Duration::from_millis(300);

fn net_ip(net: u8, host: u8) -> std::net::IpAddr {
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 57, net, host))
}

fn data(file: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/all/torture/rfc4475")
        .join(file);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// sg-0: what reaches `addr` over UDP, or over TCP (the gate forwards a
/// request from a TCP client over TCP), whole messages in order of arrival.
struct Sg(mpsc::Receiver<Vec<u8>>);

impl Sg {
    fn bind(addr: SocketAddr) -> Sg {
        let (tx, rx) = mpsc::channel();
        let udp = UdpSocket::bind(addr).unwrap();
        let tcp = TcpListener::bind(addr).unwrap();
        let to = tx.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            while let Ok(n) = udp.recv(&mut buf) {
                if to.send(buf[..n].to_vec()).is_err() {
                    return;
                }
            }
        });
        std::thread::spawn(move || {
            while let Ok((mut conn, _)) = tcp.accept() {
                let to = tx.clone();
                std::thread::spawn(move || {
                    read_stream(&mut conn, Duration::from_secs(120), |m| {
                        let _ = to.send(m);
                    });
                });
            }
        });
        Sg(rx)
    }

    /// What arrived so far.
    fn arrived(&self) -> Vec<Vec<u8>> {
        self.0.try_iter().collect()
    }
}

/// The gate (binary) with a guard listener on `127.57.net.1:5060` in front
/// of sg-0 at `.11:5060`.
fn gate(net: u8) -> (tempfile::TempDir, Node, SocketAddr, Sg) {
    let dir = tempfile::tempdir().unwrap();
    let listener = SocketAddr::new(net_ip(net, 1), 5060);
    let sg = SocketAddr::new(net_ip(net, 11), 5060);
    let path = SiteFile::new(&format!("torture-{net}"))
        .secret(&format!("torture-wire-secret-{net}-0123456789"))
        .sgs(&[("0", sg)])
        .listener("g", listener, Mode::Guard("sg-0"), "subscriber", "")
        .write(dir.path());
    let sg_sock = Sg::bind(sg);
    let mut node = Node::gate(&path)
        .admin(SocketAddr::new(net_ip(net, 1), 9091))
        .start()
        .unwrap();
    node.wait_ready().unwrap();
    (dir, node, listener, sg_sock)
}

/// Datagrams on `s` within `wait`.
fn datagrams(s: &UdpSocket, wait: Duration) -> Vec<Vec<u8>> {
    let until = Instant::now() + wait;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65_536];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return out;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.recv(&mut buf) {
            Ok(n) => out.push(buf[..n].to_vec()),
            Err(_) => return out,
        }
    }
}

/// Whole messages read from `s` within `wait` (keep-alives skipped).
fn stream_messages(s: &mut TcpStream, wait: Duration) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    read_stream(s, wait, |m| out.push(m));
    out
}

/// Hands each whole message read from `s` within `wait` to `on` as it
/// comes (keep-alives skipped), until the peer closes.
fn read_stream(s: &mut TcpStream, wait: Duration, mut on: impl FnMut(Vec<u8>)) {
    let until = Instant::now() + wait;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        while let Ok(Some(f)) = frame::check(&buf, 1 << 20) {
            let rest = buf.split_off(f.len());
            if let Frame::Message { .. } = f {
                on(std::mem::replace(&mut buf, rest));
            } else {
                buf = rest;
            }
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The message's Call-ID, when it scans.
fn call_id(raw: &[u8]) -> Option<Vec<u8>> {
    let m = SipMessage::scan(Bytes::copy_from_slice(raw)).ok()?;
    m.call_id().map(<[u8]>::to_vec)
}

/// What a proxy may edit, by (lower-case) header name and compact form.
const EDITED: &[&str] = &[
    "via",
    "v",
    "max-forwards",
    "record-route",
    "route",
    "path",
    "content-length",
    "l",
];

/// The start line, the header lines a proxy leaves alone (folds kept,
/// byte for byte, in order), and the body up to Content-Length.
fn untouched(raw: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>, Vec<u8>) {
    let m = SipMessage::scan(Bytes::copy_from_slice(raw)).expect("scans");
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a header section");
    let head = &raw[..end + 2];
    let mut lines: Vec<Vec<u8>> = Vec::new();
    for line in head.split_inclusive(|&b| b == b'\n') {
        match (line.first(), lines.last_mut()) {
            (Some(b' ' | b'\t'), Some(last)) => last.extend_from_slice(line),
            _ => lines.push(line.to_vec()),
        }
    }
    let start = lines.remove(0);
    let kept = lines
        .into_iter()
        .filter(|l| {
            let name = l.split(|&b| b == b':').next().unwrap_or_default();
            let name = String::from_utf8_lossy(name).trim().to_ascii_lowercase();
            !EDITED.contains(&name.as_str())
        })
        .collect();
    (start, kept, m.body().to_vec())
}

/// The messages a transport carries from the file's bytes: a datagram is
/// one, a stream as many as it frames.
fn sent_messages(bytes: &[u8], tcp: bool) -> Vec<Vec<u8>> {
    if !tcp {
        return vec![bytes.to_vec()];
    }
    let (mut out, mut rest) = (Vec::new(), bytes);
    while let Ok(Some(f)) = frame::check(rest, 1 << 20) {
        if let Frame::Message { len } = f {
            out.push(rest[..len].to_vec());
        }
        rest = &rest[f.len()..];
    }
    out
}

/// Sends one message and reads what follows within [`WINDOW`].
fn outcome(
    bytes: &[u8],
    client: &Client,
    gw: SocketAddr,
    sg: &Sg,
    want: Outcome,
) -> (Outcome, Vec<Vec<u8>>, Vec<Vec<u8>>) {
    // The Call-IDs of what was sent: anything else is a late arrival for
    // an earlier message.
    let ids: Vec<Option<Vec<u8>>> = [call_id(bytes)]
        .into_iter()
        .chain(sent_messages(bytes, true).iter().map(|m| call_id(m)))
        .collect();
    let ours = |m: &Vec<u8>| ids[0].is_none() || ids.contains(&call_id(m));
    let answers = match client {
        Client::Udp(socks) => {
            socks[0].send_to(bytes, gw).unwrap();
            let mut got = datagrams(&socks[0], WINDOW);
            for s in &socks[1..] {
                got.extend(datagrams(s, Duration::from_millis(5)));
            }
            got
        }
        Client::Tcp(local) => {
            let s =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            s.bind(&SocketAddr::new(*local, 0).into()).unwrap();
            s.connect(&gw.into()).unwrap();
            let mut s: TcpStream = s.into();
            s.write_all(bytes).unwrap();
            stream_messages(&mut s, WINDOW)
        }
    };
    // What reaches the sg: within the window, or, when forwards are
    // expected, until they are all in (a loaded machine may be slow).
    let expected = match want {
        Fwd(n) => n,
        _ => 0,
    };
    let until = Instant::now() + Duration::from_secs(3);
    let mut forwarded: Vec<Vec<u8>> = Vec::new();
    loop {
        forwarded.extend(sg.arrived().into_iter().filter(ours));
        if forwarded.len() >= expected || Instant::now() >= until {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let answers: Vec<Vec<u8>> = answers.into_iter().filter(ours).collect();
    let got = match (forwarded.len(), answers.first()) {
        (0, None) => Drop,
        (0, Some(a)) => Ans(SipMessage::scan(Bytes::copy_from_slice(a))
            .expect("the gate's answer parses")
            .code()
            .unwrap_or(0)),
        (n, _) => Fwd(n),
    };
    (got, forwarded, answers)
}

/// The client: UDP sockets at the sent-by ports the archive's Vias name
/// (the gate answers a datagram at the Via's port, RFC 3261 18.2.2), the
/// first one sending; or TCP from this address, one connection a message.
enum Client {
    Udp(Vec<UdpSocket>),
    Tcp(std::net::IpAddr),
}

fn run(net: u8, tcp: bool) {
    let (_dir, _gate, gw, sg) = gate(net);
    let client = if tcp {
        Client::Tcp(net_ip(net, 22))
    } else {
        Client::Udp(
            [5060, 5050]
                .map(|port| UdpSocket::bind(SocketAddr::new(net_ip(net, 21), port)).unwrap())
                .into(),
        )
    };
    let mut files: Vec<String> = std::fs::read_dir(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/all/torture/rfc4475"),
    )
    .unwrap()
    .filter_map(|e| e.ok()?.file_name().into_string().ok())
    .filter(|f| f.ends_with(".dat"))
    .collect();
    files.sort();
    assert_eq!(files.len(), 50, "the archive's 50 members");
    assert_eq!(files.len(), CASES.len(), "one row per member");
    let mut wrong = Vec::new();
    for file in &files {
        let bytes = data(file);
        let want = CASES
            .iter()
            .find(|c| c.file == file.as_str())
            .map(|c| (c.section, if tcp { c.tcp } else { c.udp }));
        let (got, forwarded, answers) =
            outcome(&bytes, &client, gw, &sg, want.map_or(Drop, |w| w.1));
        let first = |m: &Vec<u8>| {
            String::from_utf8_lossy(m.split(|&b| b == b'\r').next().unwrap_or_default())
                .into_owned()
        };
        eprintln!(
            "{} {file}: {got:?} {:?}",
            if tcp { "tcp" } else { "udp" },
            answers.iter().map(first).collect::<Vec<_>>()
        );
        let Some((section, want)) = want else {
            wrong.push(format!("{file}: not in the table"));
            continue;
        };
        if want != got {
            wrong.push(format!(
                "{file} (RFC 4475 {section}): {got:?}, want {want:?}"
            ));
            continue;
        }
        // Forwarded: byte for byte but for what a proxy edits.
        for (sent, fwd) in sent_messages(&bytes, tcp).iter().zip(&forwarded) {
            let (start, kept, body) = untouched(sent);
            let (fstart, fkept, fbody) = untouched(fwd);
            if (start, kept, body) != (fstart, fkept, fbody) {
                wrong.push(format!(
                    "{file}: not forwarded byte for byte:\n{}",
                    String::from_utf8_lossy(fwd)
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn rfc4475_archive_over_udp_through_the_binary_r_ft_3() {
    run(1, false);
}

#[test]
fn rfc4475_archive_over_tcp_through_the_binary_r_ft_3() {
    run(2, true);
}
