//! R-WS-2, RFC 5626 5.3 through the `sip-gate` binary: a subscriber's
//! phone (TCP) or browser (WebSocket) registers through the gate; the sg
//! (a raw UDP socket here, so every message it gets is seen) sends an
//! INVITE into the subscriber's flow; the client reads it and closes its
//! connection; the sg's CANCEL then gets `200 OK` and the INVITE
//! `487 Request Terminated`, both from the gate, and the ACK of the 487 is
//! absorbed. Before, the CANCEL followed the INVITE into the closed
//! connection and was dropped (`sipgate_dropped_total{reason="flow_closed"}`):
//! the sg heard nothing until its own Timer C.
//!
//! Addresses: `127.57.N.0/24`, one N per test; the gate on `.1:5080`
//! (admin 9091), the sg on `.11:5060`, the TCP client from `.100`.

use crate::ws::ua;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use crate::common::{ip, server_addr};
use sip_gate::frame::{self, Frame};
use testbed::bins::Node;

const T: Duration = Duration::from_secs(5);
const ORIGIN: &str = "https://app.example";
const WS_PATH: &str = "/sip";

/// A site dir: one sg, a subscriber listener on `.1:5080` serving UDP and
/// `stream` (`tcp` or `ws`), health probes off.
fn site(net: (u8, u8), stream: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let ws = if stream == "ws" {
        format!("ws_path = \"{WS_PATH}\"\nws_origins = [\"{ORIGIN}\"]\n")
    } else {
        String::new()
    };
    let listener = format!(
        "[overload]\nnew_dialog_deadline_ms = 10000\n\n\
         [[listener]]\nname = \"sub\"\nbind = \"{}\"\ntransports = [\"udp\", \"{stream}\"]\n\
         mode = \"balance\"\npool = \"sg\"\nleg = \"subscriber\"\n{ws}",
        gate_sip(net)
    );
    let text = crate::common::site(net, 1, &listener);
    std::fs::write(dir.path().join("site.toml"), text).unwrap();
    dir
}

fn gate_sip(net: (u8, u8)) -> SocketAddr {
    SocketAddr::new(ip(net, 1), 5080)
}

fn start(dir: &tempfile::TempDir, net: (u8, u8)) -> Node {
    let mut g = Node::gate(dir.path().join("site.toml"))
        .admin(SocketAddr::new(ip(net, 1), 9091))
        .start()
        .unwrap();
    g.wait_ready().unwrap();
    g
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The next datagram on the sg's socket within [`T`].
fn recv_udp(sock: &UdpSocket) -> String {
    sock.set_read_timeout(Some(T)).unwrap();
    let mut buf = [0u8; 65_535];
    let (n, _) = sock
        .recv_from(&mut buf)
        .expect("the sg gets a message within 5 s");
    text(&buf[..n])
}

/// Reads one whole SIP message from a TCP stream within [`T`].
fn read_message(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(T)).unwrap();
    let mut buf = Vec::new();
    loop {
        if let Ok(Some(Frame::Message { len })) = frame::check(&buf, 65_535) {
            buf.truncate(len);
            return text(&buf);
        }
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).expect("a whole message within 5 s");
        assert!(n > 0, "closed before a whole message");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The registrar's 200 to a REGISTER as the gate forwarded it.
fn register_ok(reg: &str) -> String {
    let copy = |name: &str| {
        ua::headers(reg, name)
            .iter()
            .map(|v| format!("{name}: {v}\r\n"))
            .collect::<String>()
    };
    let to = ua::header(reg, "To").unwrap();
    let contact = ua::header(reg, "Contact").unwrap();
    format!(
        "SIP/2.0 200 OK\r\n{}{}To: {to};tag=registrar\r\n{}{}Contact: {contact}\r\nPath: {}\r\nExpires: 600\r\nContent-Length: 0\r\n\r\n",
        copy("Via"),
        copy("From"),
        copy("Call-ID"),
        copy("CSeq"),
        ua::header(reg, "Path").unwrap()
    )
}

/// The URI of the gate's Path in a forwarded REGISTER (the flow).
fn path_uri(reg: &str) -> String {
    let path = ua::header(reg, "Path").unwrap_or_else(|| panic!("a Path: {reg}"));
    path.trim_start_matches('<')
        .split('>')
        .next()
        .unwrap()
        .to_owned()
}

/// The URI of the Contact in a REGISTER.
fn contact_uri(reg: &str) -> String {
    let c = ua::header(reg, "Contact").unwrap();
    c.trim_start_matches('<')
        .split('>')
        .next()
        .unwrap()
        .to_owned()
}

/// An INVITE (or its CANCEL, or the ACK of its non-2xx with `to_tag`)
/// the sg sends to `target` along the gate's `route` (the flow).
fn sg_request(
    method: &str,
    target: &str,
    route: &str,
    sg: SocketAddr,
    to_tag: Option<&str>,
) -> String {
    let to_tag = to_tag.map(|t| format!(";tag={t}")).unwrap_or_default();
    format!(
        "{method} {target} SIP/2.0\r\n\
         Via: SIP/2.0/UDP {sg};branch=z9hG4bK-sg-flow-cancel;rport\r\n\
         Route: <{route}>\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:alice@example.com>;tag=sg-caller\r\n\
         To: <sip:bob@example.com>{to_tag}\r\n\
         Call-ID: flow-cancel@sg\r\n\
         CSeq: 1 {method}\r\n\
         Contact: <sip:alice@{sg}>\r\n\
         Content-Length: 0\r\n\r\n"
    )
}

/// The To tag of a response.
fn to_tag(resp: &str) -> String {
    let to = ua::header(resp, "To").unwrap();
    to.split(";tag=").nth(1).unwrap().to_owned()
}

/// The sg's side once the client has the INVITE and its connection is
/// closed at the gate: CANCEL, then the 200 and the 487 (in either order),
/// then the ACK of the 487, which the gate absorbs; the INVITE no longer
/// counts as the sg's work.
fn cancel_into_the_closed_flow(
    gate: &Node,
    net: (u8, u8),
    sg: &UdpSocket,
    target: &str,
    route: &str,
) {
    let me = sg.local_addr().unwrap();
    let cancel = sg_request("CANCEL", target, route, me, None);
    sg.send_to(cancel.as_bytes(), gate_sip(net)).unwrap();
    let (a, b) = (recv_udp(sg), recv_udp(sg));
    let (ok, terminated) = if a.contains("CSeq: 1 CANCEL") {
        (a, b)
    } else {
        (b, a)
    };
    assert!(ok.starts_with("SIP/2.0 200 OK\r\n"), "{ok}");
    assert!(ok.contains("CSeq: 1 CANCEL\r\n"), "{ok}");
    assert!(
        terminated.starts_with("SIP/2.0 487 Request Terminated\r\n"),
        "{terminated}"
    );
    assert!(terminated.contains("CSeq: 1 INVITE\r\n"), "{terminated}");
    assert!(
        terminated.contains("branch=z9hG4bK-sg-flow-cancel"),
        "{terminated}"
    );
    let ack = sg_request("ACK", target, route, me, Some(&to_tag(&terminated)));
    sg.send_to(ack.as_bytes(), gate_sip(net)).unwrap();
    testbed::wait_for("the ACK of the 487 absorbed", T, || {
        (gate
            .metric(r#"sipgate_requests_total{method="ACK",outcome="absorbed"}"#)
            .unwrap()
            == 1.0)
            .then_some(())
    })
    .unwrap();
    let work = gate.work().expect("the work report");
    assert_eq!(
        work.instances["sg-0"].counts.transactions, 0,
        "the INVITE transaction ended with the gate's 487"
    );
    assert_eq!(
        gate.metric(r#"sipgate_dropped_total{reason="flow_closed"}"#)
            .unwrap(),
        0.0,
        "nothing went into the closed flow"
    );
}

/// A TCP connection from an ephemeral port on `local` to `to`.
fn connect_from(local: std::net::IpAddr, to: SocketAddr) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::new(local, 0).into()).unwrap();
    s.connect(&to.into()).unwrap();
    s.into()
}

/// Waits until the gate has seen the client's connection close.
fn wait_closed(gate: &Node, gauge: &str) {
    testbed::wait_for("the client's connection closed at the gate", T, || {
        (gate.metric(gauge).unwrap() == 0.0).then_some(())
    })
    .unwrap();
}

/// R-WS-2 over TCP (RFC 5626 5.3): the phone closes its connection with
/// the INVITE ringing; the sg's CANCEL gets 200 and the INVITE 487.
#[test]
fn r_ws_2_a_cancel_into_a_closed_tcp_flow_gets_200_and_the_invite_487() {
    let net = (57, 1);
    let dir = site(net, "tcp");
    let sg_addr = server_addr(net, 0);
    let sg = UdpSocket::bind(sg_addr).unwrap();
    let sg_tcp = TcpListener::bind(sg_addr).unwrap();
    let gate = start(&dir, net);

    // The phone registers over TCP; the gate forwards over TCP to the sg.
    let mut phone = connect_from(ip(net, 100), gate_sip(net));
    let local = phone.local_addr().unwrap();
    let reg = format!(
        "REGISTER sip:example.com SIP/2.0\r\n\
         Via: SIP/2.0/TCP {local};branch=z9hG4bK-reg-tcp;rport\r\n\
         Max-Forwards: 70\r\n\
         To: <sip:bob@example.com>\r\n\
         From: <sip:bob@example.com>;tag=reg-tcp\r\n\
         Call-ID: reg-tcp@flow-cancel\r\n\
         CSeq: 1 REGISTER\r\n\
         Contact: <sip:bob@{local};transport=tcp;ob>;reg-id=1;+sip.instance=\"<urn:uuid:00000000-0000-0000-0000-000000000057>\"\r\n\
         Expires: 600\r\n\
         Supported: path, outbound\r\n\
         Content-Length: 0\r\n\r\n"
    );
    phone.write_all(reg.as_bytes()).unwrap();
    sg_tcp.set_nonblocking(false).unwrap();
    let (mut to_sg, _) = sg_tcp.accept().unwrap();
    let fwd = read_message(&mut to_sg);
    assert!(fwd.starts_with("REGISTER "), "{fwd}");
    to_sg.write_all(register_ok(&fwd).as_bytes()).unwrap();
    let ok = read_message(&mut phone);
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");

    // The sg calls the phone through its flow; the phone has the INVITE,
    // then goes away.
    let (target, route) = (contact_uri(&fwd), path_uri(&fwd));
    let invite = sg_request("INVITE", &target, &route, sg_addr, None);
    sg.send_to(invite.as_bytes(), gate_sip(net)).unwrap();
    let got = read_message(&mut phone);
    assert!(got.starts_with("INVITE "), "{got}");
    assert_eq!(
        gate.work().unwrap().instances["sg-0"].counts.transactions,
        1
    );
    drop(phone);
    testbed::wait_for("the phone's connection closed at the gate", T, || {
        // The gate's own connection to the sg stays.
        (gate.metric("sipgate_tcp_connections").unwrap() == 1.0).then_some(())
    })
    .unwrap();

    cancel_into_the_closed_flow(&gate, net, &sg, &target, &route);
    drop(to_sg);
}

/// R-WS-2 over WebSocket (RFC 7118, RFC 5626 5.3): the browser closes its
/// WebSocket with the INVITE ringing; the sg's CANCEL gets 200 and the
/// INVITE 487.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_ws_2_a_cancel_into_a_closed_ws_flow_gets_200_and_the_invite_487() {
    let net = (57, 2);
    let dir = site(net, "ws");
    let sg_addr = server_addr(net, 0);
    let sg = UdpSocket::bind(sg_addr).unwrap();
    let gate = start(&dir, net);

    let mut ws = ua::open(gate_sip(net), WS_PATH, Some("sip"), Some(ORIGIN), None)
        .await
        .expect("upgrade accepted");
    ua::send(&mut ws, &ua::register("bob", "b1", 1, 600)).await;
    let fwd = {
        let sg = sg.try_clone().unwrap();
        tokio::task::spawn_blocking(move || recv_udp(&sg))
            .await
            .unwrap()
    };
    assert!(fwd.starts_with("REGISTER "), "{fwd}");
    sg.send_to(register_ok(&fwd).as_bytes(), gate_sip(net))
        .unwrap();
    let ok = ua::recv(&mut ws, T).await.expect("the REGISTER's 200");
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");

    let (target, route) = (contact_uri(&fwd), path_uri(&fwd));
    let invite = sg_request("INVITE", &target, &route, sg_addr, None);
    sg.send_to(invite.as_bytes(), gate_sip(net)).unwrap();
    let got = ua::recv(&mut ws, T).await.expect("the INVITE");
    assert!(got.starts_with("INVITE "), "{got}");
    ws.close(None).await.unwrap();
    drop(ws);

    tokio::task::spawn_blocking(move || {
        wait_closed(&gate, "sipgate_ws_connections");
        cancel_into_the_closed_flow(&gate, net, &sg, &target, &route);
    })
    .await
    .unwrap();
}
