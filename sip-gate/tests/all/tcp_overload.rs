//! R-OV-1 over TCP through the real `sip-gate` binary: new dialogs read
//! from a connection after the gate fell behind get 503 with Retry-After at
//! once, while the in-dialog requests of calls up over TCP go on. A stream
//! has no receive timestamp per message, so the gate reads its lag from the
//! runtime that serves every connection (`overload/lag.rs`).
//!
//! `127.46.1.0/24`: the gate's listener and admin on `.1`, the sg (a SIPp
//! UAS over TCP) on `.11`, the callers on `.22`, `.23` and `.24`. Every SIPp run is bounded.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::common::ip;
use crate::common::overload::{self, outcomes, wait, wait_stopped};
use testbed::Transport;

/// A TCP connection from `from` (port chosen by the kernel) to `to`.
fn connect_from(from: std::net::IpAddr, to: SocketAddr) -> TcpStream {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&SocketAddr::new(from, 0).into()).unwrap();
    sock.connect(&to.into()).expect("the gate accepts");
    sock.into()
}

/// A new INVITE over the TCP connection `stream`.
fn invite(stream: &mut TcpStream, to: SocketAddr, n: u32) {
    let me = stream.local_addr().unwrap();
    let text = format!(
        "INVITE sip:bob@{to};transport=tcp SIP/2.0\r\nVia: SIP/2.0/TCP {me};branch=z9hG4bK-tcpstall-{n}\r\nFrom: <sip:alice@{me}>;tag=tcpstall-{n}\r\nTo: <sip:bob@{to}>\r\nCall-ID: tcpstall-{n}@{me}\r\nCSeq: 1 INVITE\r\nContact: <sip:alice@{me};transport=tcp>\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
    );
    stream.write_all(text.as_bytes()).unwrap();
}

/// One response read from a SIP stream: its start line and headers.
fn response(r: &mut BufReader<TcpStream>) -> String {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line)
            .expect("a response on the connection");
        if line == "\r\n" {
            break;
        }
        assert!(!line.is_empty(), "connection closed after {head:?}");
        head.push_str(&line);
    }
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).unwrap();
    head
}

#[test]
fn r_ov_1_over_tcp_new_dialogs_read_behind_get_503_while_in_dialog_requests_go_on() {
    let net = (46, 1);
    let (dir, gate, listener) = overload::ready_gate(
        net,
        "transports = [\"udp\", \"tcp\"]\n",
        "new_dialog_deadline_ms = 200\nretry_after_s = 4\nretry_after_jitter_s = 4\n",
    );
    let uas = overload::sg(net, Transport::Tcp);

    // 10 calls over one TCP connection, placed in the first second, each up
    // for 1 s, then a re-INVITE and a BYE: many of those fall in the stall.
    let log = dir.path().join("calls.log");
    let calls = overload::caller(net, 22, listener, Transport::Tcp, &log)
        .calls(10)
        .rate(10)
        .duration(Duration::from_secs(1))
        .spawn()
        .expect("calls start");
    let mut client = connect_from(ip(net, 24), listener);
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    std::thread::sleep(Duration::from_millis(1300));

    // The gate stalls for 600 ms (SIGSTOP): what arrives meanwhile waits in
    // the connections' socket buffers. Three new INVITEs arrive at its start.
    gate.signal("STOP");
    wait_stopped(gate.pid().expect("running"));
    for n in 0..3 {
        invite(&mut client, listener, n);
    }
    std::thread::sleep(Duration::from_millis(600));
    gate.signal("CONT");

    // Read behind: each gets 503 with Retry-After, on its connection,
    // spread over `retry_after_s` + `retry_after_jitter_s`.
    let mut reader = BufReader::new(client);
    for _ in 0..3 {
        let head = response(&mut reader);
        assert!(head.starts_with("SIP/2.0 503 Overloaded\r\n"), "{head}");
        let after: u32 = head
            .lines()
            .find_map(|l| l.strip_prefix("Retry-After: "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no Retry-After: {head}"));
        assert!((4..=8).contains(&after), "{head}");
    }
    // The calls' re-INVITEs and BYEs that waited with them went on.
    let calls = wait(calls, "calls");
    assert!(calls.all_ok(), "{calls:?}");
    assert_eq!(outcomes(&log), (0, 10, 10), "{calls:?}");
    let deadline = gate
        .metrics()
        .expect("/metrics")
        .sum("sipgate_overload_refusals_total", &["limit=\"deadline\""]);
    assert_eq!(deadline, 3.0);
    let lag = gate
        .metrics()
        .unwrap()
        .value("sipgate_runtime_lag_seconds")
        .expect("the lag gauge");
    assert!(lag < 0.2, "the probe runs on time again: {lag} s");

    // Caught up: a new call over TCP goes through at once.
    let after = overload::call_after(net, 23, listener, Transport::Tcp);
    assert!(after.all_ok(), "{after:?}");
    let sg = uas.stop().expect("uas report");
    assert_eq!((sg.successful, sg.failed), (11, 0), "{sg:?}");
}
