//! The socket layer against raw peers: TCP keep-alives (RFC 5626 3.5.1),
//! a stream that loses its framing, and garbage datagrams that must not
//! disturb service.

use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::time::Duration;

use crate::common::*;

fn request(gate: std::net::SocketAddr, branch: &str) -> String {
    format!(
        "OPTIONS sip:service@{gate} SIP/2.0\r\nVia: SIP/2.0/UDP 127.23.1.100:5099;branch=z9hG4bK{branch}\r\n\
         Max-Forwards: 70\r\nFrom: <sip:probe@example.com>;tag=t1\r\nTo: <sip:service@example.com>\r\n\
         Call-ID: {branch}@transport-test\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_ping_gets_a_pong_and_broken_framing_closes_the_connection() {
    let net = (23, 1);
    let (gate, _drain) = start_gate(config(&site(net, 1, &balance_sg(net)))).await;
    let addr = listener_addr(&gate, "subs");
    tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        // Double CRLF ping -> single CRLF pong.
        s.write_all(b"\r\n\r\n").unwrap();
        let mut pong = [0u8; 2];
        s.read_exact(&mut pong).unwrap();
        assert_eq!(&pong, b"\r\n");
        // A request without Content-Length cannot be framed on a stream
        // (RFC 3261 18.3): the gate closes the connection.
        s.write_all(b"OPTIONS sip:x@example.com SIP/2.0\r\nVia: SIP/2.0/TCP 127.23.1.100;branch=z9hG4bKnocl\r\n\r\n").unwrap();
        let mut rest = Vec::new();
        let n = s.read_to_end(&mut rest).unwrap();
        assert_eq!(n, 0, "expected the gate to close: {:?}", String::from_utf8_lossy(&rest));
    })
    .await
    .unwrap();
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_garbage_is_dropped_and_service_goes_on() {
    let net = (23, 2);
    let (gate, _drain) = start_gate(config(&site(net, 1, &balance_sg(net)))).await;
    let gw = listener_addr(&gate, "subs");
    let sg = server_addr(net, 0);
    tokio::task::spawn_blocking(move || {
        let instance = UdpSocket::bind(sg).unwrap();
        instance
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        let client = UdpSocket::bind((ip(net, 100), 5099)).unwrap();
        client
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        for junk in [
            &b"\x00\xff\x13garbage"[..],
            b"INVITE",
            b"SIP/2.0 200 OK\r\n\r\n",
            b"\r\n\r\n",
            &[0xffu8; 1400],
        ] {
            client.send_to(junk, gw).unwrap();
        }
        // Nothing comes back for garbage (no Via to answer to)...
        let mut buf = [0u8; 2048];
        assert!(client.recv_from(&mut buf).is_err(), "gate answered garbage");
        // ...and the next real request is forwarded as usual.
        client
            .send_to(request(gw, "after-junk").as_bytes(), gw)
            .unwrap();
        let (n, from) = instance.recv_from(&mut buf).unwrap();
        assert_eq!(from, gw);
        let got = String::from_utf8_lossy(&buf[..n]);
        assert!(got.starts_with("OPTIONS sip:service@"), "{got}");
        assert!(got.contains("branch=z9hG4bKafter-junk"), "{got}");
    })
    .await
    .unwrap();
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

/// `[tcp] idle_s` closes an idle connection, except a subscriber's whose
/// registration (a REGISTER 2xx relayed back on it) still lasts: the
/// registrar reaches the subscriber only over it (RFC 5626 5.3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_idle_connection_closes_unless_a_registration_uses_it() {
    let net = (23, 3);
    let sg = server_addr(net, 0);
    let _registrar = uas("uas_register", sg, testbed::Transport::Tcp);
    let text = site(net, 1, &balance_sg(net)) + "\n[tcp]\nidle_s = 1\n";
    let (gate, _drain) = start_gate(config(&text)).await;
    let addr = listener_addr(&gate, "subs");
    tokio::task::spawn_blocking(move || {
        let registered = TcpStream::connect(addr).unwrap();
        let idle = TcpStream::connect(addr).unwrap();
        for s in [&registered, &idle] {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        let local = registered.local_addr().unwrap();
        let register = format!(
            "REGISTER sip:{addr} SIP/2.0\r\nVia: SIP/2.0/TCP {local};branch=z9hG4bKidlereg\r\n\
             Max-Forwards: 70\r\nFrom: <sip:bob@example.com>;tag=r1\r\nTo: <sip:bob@example.com>\r\n\
             Call-ID: idle-reg@transport-test\r\nCSeq: 1 REGISTER\r\n\
             Contact: <sip:bob@192.168.1.20:5060;transport=tcp>\r\nExpires: 600\r\nContent-Length: 0\r\n\r\n"
        );
        (&registered).write_all(register.as_bytes()).unwrap();
        let mut buf = [0u8; 2048];
        let n = (&registered).read(&mut buf).unwrap();
        let reply = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(reply.starts_with("SIP/2.0 200"), "{reply}");
        // Well past the idle time.
        std::thread::sleep(Duration::from_millis(3500));
        let mut rest = Vec::new();
        assert_eq!((&idle).read_to_end(&mut rest).unwrap(), 0, "idle one closed");
        (&registered).write_all(b"\r\n\r\n").unwrap();
        let mut pong = [0u8; 2];
        (&registered).read_exact(&mut pong).unwrap();
        assert_eq!(&pong, b"\r\n", "the registered one is still open");
    })
    .await
    .unwrap();
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}
