//! R-GW-3: a subscriber registered over a raw TCP connection (Kamailio the
//! registrar behind) keeps that connection and its flow across an upgrade.
//! Its net: `127.139.3.0/24` (see `upgrade.rs`).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use testbed::{Kamailio, Scenario, Sipp};

use super::{gate, site, took_over, upgrade};
use crate::common::{ip, server_addr};

/// Reads one SIP message (headers only: these have no body) from `r`.
fn read_message(r: &mut BufReader<TcpStream>) -> String {
    let mut msg = String::new();
    loop {
        let mut line = String::new();
        let n = r.read_line(&mut line).unwrap();
        assert!(n > 0, "the connection closed; read so far: {msg}");
        if line == "\r\n" && !msg.trim().is_empty() {
            return msg;
        }
        if line != "\r\n" {
            msg.push_str(&line);
        }
    }
}

/// The 200 to `req`: its Via, From, To (tagged), Call-ID and CSeq.
fn ok_to(req: &str) -> String {
    let mut resp = String::from("SIP/2.0 200 OK\r\n");
    for line in req.lines().skip(1) {
        let name = line.split(':').next().unwrap_or("").to_ascii_lowercase();
        match name.as_str() {
            "via" | "v" | "from" | "f" | "call-id" | "i" | "cseq" => {
                resp.push_str(line);
                resp.push_str("\r\n");
            }
            "to" | "t" => resp.push_str(&format!("{line};tag=sub-1\r\n")),
            _ => {}
        }
    }
    resp.push_str("Content-Length: 0\r\n\r\n");
    resp
}

/// R-GW-3: a subscriber's TCP connection and its flow survive an upgrade:
/// the MESSAGE the registrar sends into the flow afterwards arrives on the
/// same socket, and its 200 goes back the same way to the caller.
#[test]
fn r_gw_3_a_tcp_subscriber_keeps_its_connection_and_its_flow() {
    let net = (139, 3);
    let (_dir, site, listener, admin) = site(net, true);
    let kam = Kamailio::new()
        .config(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kamailio/registrar.cfg"))
        .listen(server_addr(net, 0))
        .start()
        .unwrap();
    let mut old = gate(&site, admin, None);

    // The subscriber: one TCP connection from .100, a Contact nobody
    // listens on (as behind a NAT).
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::new(ip(net, 100), 0).into()).unwrap();
    s.connect_timeout(&listener.into(), Duration::from_secs(3))
        .unwrap();
    let sock: TcpStream = s.into();
    sock.set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let local = sock.local_addr().unwrap();
    let register = format!(
        "REGISTER sip:{listener} SIP/2.0\r\nVia: SIP/2.0/TCP {local};branch=z9hG4bK-up-reg1\r\n\
         From: <sip:alice@{ip}>;tag=reg-1\r\nTo: <sip:alice@{ip}>\r\nCall-ID: up-reg-1@test\r\n\
         CSeq: 1 REGISTER\r\nContact: <sip:alice@192.168.1.20:5060;transport=tcp>\r\n\
         Expires: 600\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n",
        ip = listener.ip()
    );
    (&sock).write_all(register.as_bytes()).unwrap();
    let mut reader = BufReader::new(sock.try_clone().unwrap());
    let reply = read_message(&mut reader);
    assert!(reply.starts_with("SIP/2.0 200"), "{reply}");

    let _new = upgrade(&site, admin);
    let status = old.wait_exit(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        old.log()
    );
    // The subscriber's connection and the gate's to the registrar (the
    // REGISTER came over TCP, so it went on over TCP).
    assert_eq!(took_over(&old, "connections"), Some(2), "{}", old.log());

    // A MESSAGE to alice, through the registrar, into her flow.
    let started = Instant::now();
    let caller = Sipp::new(Scenario::repo("uac_message"))
        .local_ip(ip(net, 21))
        .remote(kam.addr())
        .service("alice")
        .calls(1)
        .timeout(Duration::from_secs(30))
        .spawn()
        .unwrap();
    let msg = read_message(&mut reader);
    assert!(msg.starts_with("MESSAGE sip:alice@"), "{msg}");
    (&sock).write_all(ok_to(&msg).as_bytes()).unwrap();
    let r = caller.wait(Duration::from_secs(30)).unwrap();
    assert!(
        r.all_ok() && r.successful == 1,
        "{r:?} after {:?}\n{}",
        started.elapsed(),
        kam.log_tail(3000)
    );
    kam.stop();
}
