//! RFC 3261 edges through the real gate and raw sockets: datagram framing
//! onto a stream (18.3), a TCP response whose connection closed (18.2.2).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use crate::common::*;
use sip_gate::frame::{self, Frame};
use sip_gate::SipMessage;
use testbed::{Scenario, Sipp, Transport};

const TIMEOUT: Duration = Duration::from_secs(5);

/// Reads from `s` until it holds one whole SIP message; returns it and
/// whatever else had arrived with it.
fn read_message(s: &mut TcpStream) -> (Vec<u8>, Vec<u8>) {
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut buf = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Ok(Some(Frame::Message { len })) = frame::check(&buf, 65_535) {
            let rest = buf.split_off(len);
            return (buf, rest);
        }
        assert!(Instant::now() < deadline, "no whole message: {buf:?}");
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).expect("read");
        assert!(n > 0, "closed before a whole message");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A TCP connection from an ephemeral port on `local` to `to`.
fn connect_from(local: std::net::IpAddr, to: SocketAddr) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::new(local, 0).into()).unwrap();
    s.connect(&to.into()).unwrap();
    s.into()
}

/// A connection to `l` within [`TIMEOUT`], or the test fails (never hangs).
fn accept_within(l: &TcpListener) -> (TcpStream, SocketAddr) {
    l.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match l.accept() {
            Ok((s, from)) => {
                s.set_nonblocking(false).unwrap();
                return (s, from);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline, "nobody connected to {l:?}");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// Whatever else arrives on `s` within `wait`.
fn read_more(s: &mut TcpStream, wait: Duration) -> Vec<u8> {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut rest = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(n) = s.read(&mut chunk) {
        if n == 0 {
            break;
        }
        rest.extend_from_slice(&chunk[..n]);
    }
    rest
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc3261_18_3_udp_bytes_past_content_length_never_reach_a_tcp_next_hop() {
    let net = (29, 1);
    let (gate, _drain) = start_gate(config(&site(net, 1, &balance_sg(net)))).await;
    let gw = listener_addr(&gate, "subs");
    let instance = server_addr(net, 0);
    let next_hop = SocketAddr::new(ip(net, 50), 5060);
    tokio::task::spawn_blocking(move || {
        let hop = TcpListener::bind(next_hop).unwrap();
        let sg = UdpSocket::bind(instance).unwrap();
        // The instance sends outward, to a URI that asks for TCP, and its
        // datagram carries a second message past Content-Length.
        let msg = format!(
            "MESSAGE sip:bob@{next_hop};transport=tcp SIP/2.0\r\n\
             Via: SIP/2.0/UDP {instance};branch=z9hG4bKsmuggle\r\nMax-Forwards: 70\r\n\
             From: <sip:alice@example.com>;tag=a\r\nTo: <sip:bob@example.com>\r\n\
             Call-ID: smuggle@sg\r\nCSeq: 1 MESSAGE\r\nContent-Type: text/plain\r\n\
             Content-Length: 5\r\n\r\nhello\
             BYE sip:victim@{next_hop} SIP/2.0\r\nVia: SIP/2.0/TCP 192.0.2.6;branch=z9hG4bKevil\r\n\
             From: <sip:e@x>;tag=1\r\nTo: <sip:v@y>;tag=2\r\nCall-ID: evil\r\nCSeq: 1 BYE\r\n\
             Content-Length: 0\r\n\r\n"
        );
        sg.send_to(msg.as_bytes(), gw).unwrap();
        let (mut conn, _) = accept_within(&hop);
        let (first, rest) = read_message(&mut conn);
        let m = SipMessage::parse(first.into()).expect("the forwarded MESSAGE parses");
        assert_eq!(m.body(), b"hello");
        let rest = [rest, read_more(&mut conn, Duration::from_millis(500))].concat();
        assert!(
            rest.is_empty(),
            "a second message on the stream: {}",
            text(&rest)
        );
    })
    .await
    .unwrap();
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc3261_18_2_2_response_for_a_closed_tcp_connection_opens_one_to_the_sent_by_port() {
    let net = (29, 2);
    let (gate, _drain) = start_gate(config(&site(net, 1, &balance_sg(net)))).await;
    let gw = listener_addr(&gate, "subs");
    let instance = server_addr(net, 0);
    let sent_by = SocketAddr::new(ip(net, 100), 5099);
    tokio::task::spawn_blocking(move || {
        let sg = TcpListener::bind(instance).unwrap();
        let client_listens = TcpListener::bind(sent_by).unwrap();
        // The client connects from an ephemeral port, sends, and closes.
        let mut client = connect_from(ip(net, 100), gw);
        let invite = format!(
            "INVITE sip:bob@example.com SIP/2.0\r\n\
             Via: SIP/2.0/TCP {sent_by};branch=z9hG4bKclosed\r\nMax-Forwards: 70\r\n\
             From: <sip:alice@example.com>;tag=a\r\nTo: <sip:bob@example.com>\r\n\
             Call-ID: closed@ua\r\nCSeq: 1 INVITE\r\nContact: <sip:alice@{sent_by};transport=tcp>\r\n\
             Content-Length: 0\r\n\r\n"
        );
        client.write_all(invite.as_bytes()).unwrap();
        let (mut up, _) = accept_within(&sg);
        let (req, _) = read_message(&mut up);
        drop(client);
        // Let the gate see the close before the instance answers.
        std::thread::sleep(Duration::from_millis(300));
        let req = SipMessage::parse(req.into()).unwrap();
        let mut resp = String::from("SIP/2.0 486 Busy Here\r\n");
        for f in req.fields(sip_gate::HeaderName::Via) {
            resp.push_str(&format!("Via: {}\r\n", text(req.value(f))));
        }
        resp.push_str(
            "From: <sip:alice@example.com>;tag=a\r\nTo: <sip:bob@example.com>;tag=b\r\n\
             Call-ID: closed@ua\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n",
        );
        up.write_all(resp.as_bytes()).unwrap();
        // The gate connects to the client's sent-by address and port.
        let (mut back, from) = accept_within(&client_listens);
        assert_eq!(from.ip(), gw.ip(), "from the gate");
        let (got, _) = read_message(&mut back);
        let got = SipMessage::parse(got.into()).unwrap();
        assert_eq!(got.code(), Some(486));
        assert_eq!(got.vias().count(), 1, "only the client's Via");
        assert_eq!(got.top_via().unwrap().branch, Some(&b"z9hG4bKclosed"[..]));
    })
    .await
    .unwrap();
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

/// One sg instance that also calls out: its TCP connections come from
/// ephemeral ports, so it is recognised by its source address (R-SEC-1).
fn outbound_site(net: (u8, u8)) -> String {
    site(net, 1, &balance_sg(net)).replace(
        "sip = \"",
        &format!("sources = [\"{}/32\"]\nsip = \"", ip(net, 11)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc5658_sipp_calls_between_a_tcp_instance_and_a_udp_callee_and_the_reverse() {
    let net = (29, 3);
    let (gate, _drain) = start_gate(config(&outbound_site(net))).await;
    let gw = listener_addr(&gate, "subs");
    let instance = server_addr(net, 0);

    // The instance calls over TCP; the callee is on UDP. The instance's
    // ACK, re-INVITE and BYE follow its route set (both of the gate's
    // Record-Routes) and leave the gate over UDP.
    let callee = SocketAddr::new(ip(net, 50), 5060);
    let uas1 = uas("uas_call", callee, Transport::Udp);
    let uac1 = uac(
        Scenario::repo("uac_call"),
        instance.ip(),
        callee,
        Transport::Tcp,
        3,
        10,
    )
    .arg("-rsa")
    .arg(gw.to_string());
    let r = run(uac1).await;
    assert_all_ok("instance over TCP -> callee over UDP", &r, 3);
    drop(uas1);

    // The reverse: the instance on UDP calls a callee that asks for TCP,
    // and the callee ends the call: its BYE follows its route set back to
    // the instance over UDP.
    let callee = SocketAddr::new(ip(net, 51), 5060);
    let log = tempfile::tempdir().unwrap();
    let messages = log.path().join("callee-messages.log");
    let uas2 = Sipp::new(Scenario::repo("uas_call_hangs_up"))
        .local(callee.ip(), callee.port())
        .transport(Transport::Tcp)
        .timeout(Duration::from_secs(60))
        .arg("-trace_msg")
        .arg("-message_file")
        .arg(&messages)
        .spawn()
        .expect("callee starts");
    let uac2 = Sipp::new(Scenario::repo("uac_call_callee_hangs_up"))
        .local(instance.ip(), instance.port())
        .remote(callee)
        .transport(Transport::Udp)
        .calls(3)
        .rate(10)
        .timeout(Duration::from_secs(60))
        .arg("-rsa")
        .arg(gw.to_string())
        .arg("-key")
        .arg("uri_params")
        .arg(";transport=tcp");
    let r = run(uac2).await;
    assert_all_ok(
        "instance over UDP -> callee over TCP, callee hangs up",
        &r,
        3,
    );
    let report = tokio::task::spawn_blocking(move || uas2.stop())
        .await
        .unwrap()
        .expect("callee report");
    assert_eq!(
        report.successful, 3,
        "the callee's BYEs were answered: {report:?}"
    );
    // The callee got both of the gate's URIs, its own side's (TCP) on top.
    let seen = std::fs::read_to_string(&messages).expect("callee's message log");
    let invite = &seen[seen.find("INVITE sip:").expect("an INVITE")..];
    let rr: Vec<&str> = invite
        .lines()
        .take_while(|l| !l.is_empty())
        .filter(|l| l.starts_with("Record-Route:"))
        .collect();
    assert_eq!(rr.len(), 2, "{invite}");
    assert!(rr[0].ends_with(";transport=tcp;lr>"), "{rr:?}");
    assert!(rr[1].ends_with(&format!("@{gw};lr>")), "{rr:?}");
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}
