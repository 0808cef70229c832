//! Edge policy through the real `sip-gate` binary: the signature of the
//! gate's own responses (`[site] server_header`), the refusal of a flow
//! Route that does not come from an instance (R-SEC-1), and the listeners'
//! access lists (`[listener.access]`, with SIPp from two sources). The bans
//! of R-SEC-3 are in `edge_bans.rs`.
//!
//! Addresses: `127.86.N.0/24`, one `N` per test; the gate on `.1`, sg on
//! `.11`.., callers on `.100`.. and strangers on `.66`.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use crate::policy::{ip, sipp_calls, start_gate, udp, udp_within, write_site};
use testbed::{Scenario, Sipp};

/// An OPTIONS from `me` to the gate `g` with `Max-Forwards: 0`, which the
/// gate answers itself with 483.
fn options_max_forwards_0(me: SocketAddr, g: SocketAddr, id: &str) -> Vec<u8> {
    format!(
        "OPTIONS sip:sg@{g} SIP/2.0\r\n\
         Via: SIP/2.0/UDP {me};branch=z9hG4bK{id}\r\n\
         Max-Forwards: 0\r\n\
         From: <sip:probe@{ip}>;tag=p-{id}\r\n\
         To: <sip:sg@{g}>\r\n\
         Call-ID: {id}@probe\r\n\
         CSeq: 1 OPTIONS\r\n\
         Content-Length: 0\r\n\r\n",
        ip = me.ip(),
    )
    .into_bytes()
}

/// `[site] server_header`: the gate's own 483 carries the configured
/// `Server`, and none at all when it is empty.
#[test]
fn site_server_header_is_the_signature_of_the_gates_own_responses_or_none() {
    for (net, line, want) in [
        (
            1,
            "server_header = \"edge-42\"",
            Some("Server: edge-42\r\n"),
        ),
        (2, "server_header = \"\"", None),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let site = write_site(dir.path(), net, line, "");
        let mut gate = start_gate(&site, net);
        let g = SocketAddr::new(ip(net, 1), 5060);
        let me = SocketAddr::new(ip(net, 66), 5099);
        let answer = udp(me, g, &options_max_forwards_0(me, g, &format!("sh{net}")))
            .unwrap_or_else(|| panic!("no answer to a Max-Forwards 0\n{}", gate.log()));
        assert!(answer.starts_with("SIP/2.0 483 "), "{answer}");
        match want {
            Some(h) => assert!(answer.contains(h), "{answer}"),
            None => assert!(
                !answer.to_ascii_lowercase().contains("\nserver:"),
                "{answer}"
            ),
        }
        gate.stop(Duration::from_secs(5));
    }
}

/// Reads one datagram within `wait`.
fn recv(s: &UdpSocket, wait: Duration) -> Option<String> {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut buf = vec![0u8; 65_535];
    let n = s.recv(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// The value of header `name` in `msg`.
fn header<'m>(msg: &'m str, name: &str) -> Option<&'m str> {
    msg.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// An INVITE toward a subscriber's private Contact along `route`, sent
/// from `me`.
fn invite_along(me: SocketAddr, route: &str, id: &str) -> Vec<u8> {
    format!(
        "INVITE sip:sub@192.168.1.20:5060 SIP/2.0\r\n\
         Via: SIP/2.0/UDP {me};branch=z9hG4bK{id}\r\n\
         Route: {route}\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:caller@{ip}>;tag=c-{id}\r\n\
         To: <sip:sub@example.com>\r\n\
         Call-ID: {id}@caller\r\n\
         CSeq: 1 INVITE\r\n\
         Contact: <sip:caller@{me}>\r\n\
         Content-Length: 0\r\n\r\n",
        ip = me.ip(),
    )
    .into_bytes()
}

/// R-SEC-1: an INVITE whose Route is a subscriber's flow URI (the Path the
/// gate gave its REGISTER) from an address that is no instance gets 403,
/// is counted, reaches no instance (before, the gate dropped its own flow
/// Route and sent the INVITE to the sg: a loop) and is logged once per
/// source with the instances' addresses; from the sg it reaches the
/// subscriber.
#[test]
fn r_sec_1_a_flow_route_from_a_stranger_is_403_counted_and_logged_once() {
    let net = 3;
    let dir = tempfile::tempdir().unwrap();
    let site = write_site(dir.path(), net, "", "");
    let mut gate = start_gate(&site, net);
    let g = SocketAddr::new(ip(net, 1), 5060);
    let sg = UdpSocket::bind(SocketAddr::new(ip(net, 11), 5060)).unwrap();
    let sub_addr = SocketAddr::new(ip(net, 100), 5070);
    let sub = UdpSocket::bind(sub_addr).unwrap();

    // The subscriber registers; the sg sees the gate's Path.
    let register = format!(
        "REGISTER sip:example.com SIP/2.0\r\n\
         Via: SIP/2.0/UDP {sub_addr};branch=z9hG4bKreg1;rport\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:sub@example.com>;tag=r1\r\n\
         To: <sip:sub@example.com>\r\n\
         Call-ID: reg1@sub\r\n\
         CSeq: 1 REGISTER\r\n\
         Contact: <sip:sub@192.168.1.20:5060>\r\n\
         Expires: 300\r\n\
         Content-Length: 0\r\n\r\n"
    );
    sub.send_to(register.as_bytes(), g).unwrap();
    let at_sg = recv(&sg, Duration::from_secs(2))
        .unwrap_or_else(|| panic!("REGISTER not forwarded\n{}", gate.log()));
    let path = header(&at_sg, "Path")
        .unwrap_or_else(|| panic!("no Path: {at_sg}"))
        .to_owned();
    assert!(path.contains("f1."), "{path}");

    // A stranger uses the flow URI, twice: 403 both times, nothing at the sg.
    let stranger = SocketAddr::new(ip(net, 66), 5099);
    for n in 0..2 {
        let answer = udp(
            stranger,
            g,
            &invite_along(stranger, &path, &format!("s{n}")),
        )
        .unwrap_or_else(|| panic!("no answer to the stranger\n{}", gate.log()));
        assert!(answer.starts_with("SIP/2.0 403 "), "{answer}");
        if let Some(looped) = recv(&sg, Duration::from_millis(500)) {
            panic!("the stranger's INVITE reached the sg:\n{looped}");
        }
    }
    let refused = gate
        .metric(r#"sipgate_requests_total{method="INVITE",outcome="flow_from_stranger"}"#)
        .unwrap();
    assert_eq!(refused, 2.0);
    let log = gate.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("subscriber's flow from an address"))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(lines[0].contains(&ip(net, 66).to_string()), "{}", lines[0]);
    assert!(lines[0].contains("sg-0 sip"), "{}", lines[0]);

    // The sg itself still reaches the subscriber through the flow.
    let from_sg = SocketAddr::new(ip(net, 11), 5060);
    sg.send_to(&invite_along(from_sg, &path, "ok1"), g).unwrap();
    let at_sub = recv(&sub, Duration::from_secs(2)).unwrap_or_else(|| {
        panic!(
            "the sg's INVITE did not reach the subscriber\n{}",
            gate.log()
        )
    });
    assert!(at_sub.starts_with("INVITE "), "{at_sub}");
    gate.stop(Duration::from_secs(5));
}

/// `[listener.access]` on a listener: SIPp from an allowed source sets up
/// its calls through the gate to the SIPp sg; SIPp from a denied address
/// inside the allowed network gets 403 for each new call, counted, and
/// none reaches the sg; with `action = "drop"` a denied source's new
/// request gets no answer at all.
#[test]
fn listener_access_list_refuses_new_dialogs_from_denied_sources_with_403_or_silence() {
    let net = 4;
    let dir = tempfile::tempdir().unwrap();
    let access = format!(
        "\n[listener.access]\nallow = [\"127.86.{net}.0/24\"]\ndeny = [\"127.86.{net}.101/32\"]\n"
    );
    let site = write_site(dir.path(), net, "", "");
    let text = std::fs::read_to_string(&site).unwrap() + &access;
    std::fs::write(&site, text).unwrap();
    let mut gate = start_gate(&site, net);
    let g = SocketAddr::new(ip(net, 1), 5060);
    let sg = Sipp::new(Scenario::repo("uas_call"))
        .local(ip(net, 11), 5060)
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap();

    let allowed = sipp_calls("uac_call", ip(net, 100), g, 3);
    assert!(
        allowed.all_ok() && allowed.successful == 3,
        "{allowed:?}\n{}",
        gate.log()
    );
    let denied = sipp_calls("uac_call_expect_403", ip(net, 101), g, 3);
    assert!(
        denied.all_ok() && denied.successful == 3,
        "{denied:?}\n{}",
        gate.log()
    );
    let refused = gate
        .metric(r#"sipgate_requests_total{method="INVITE",outcome="access_denied"}"#)
        .unwrap();
    assert_eq!(refused, 3.0);
    // Only the allowed caller's INVITEs were handed to the sg.
    let new_work = gate
        .metric(r#"sipgate_new_work_total{instance="sg-0"}"#)
        .unwrap();
    assert_eq!(new_work, 3.0);
    gate.stop(Duration::from_secs(5));
    let _ = sg.stop();

    // action = "drop": silence for the denied source.
    let net = 5;
    let dir = tempfile::tempdir().unwrap();
    let site = write_site(dir.path(), net, "", "");
    let text = std::fs::read_to_string(&site).unwrap()
        + &format!("\n[listener.access]\ndeny = [\"127.86.{net}.66/32\"]\naction = \"drop\"\n");
    std::fs::write(&site, text).unwrap();
    let mut gate = start_gate(&site, net);
    let g = SocketAddr::new(ip(net, 1), 5060);
    let me = SocketAddr::new(ip(net, 66), 5099);
    let invite = invite_along(me, "<sip:elsewhere.example.com;lr>", "drop1");
    // Without its Route the INVITE would be a new call to the sg; the
    // Route makes any admitted answer a 403 foreign_route, never silence.
    assert_eq!(udp_within(me, g, &invite, Duration::from_secs(2)), None);
    let dropped = gate
        .metric(r#"sipgate_requests_total{method="INVITE",outcome="access_denied"}"#)
        .unwrap();
    assert_eq!(dropped, 1.0);
    let other = SocketAddr::new(ip(net, 67), 5099);
    let answer = udp(
        other,
        g,
        &invite_along(other, "<sip:elsewhere.example.com;lr>", "d2"),
    );
    assert!(answer.is_some_and(|a| a.starts_with("SIP/2.0 403 ")));
    gate.stop(Duration::from_secs(5));
}
