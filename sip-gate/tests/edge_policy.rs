//! Edge policy through the real `sip-gate` binary: the signature of the
//! gate's own responses (`[site] server_header`), the refusal of a flow
//! Route that does not come from an instance (R-SEC-1), and the listeners'
//! access lists (`[listener.access]`, with SIPp from two sources) and the
//! bans of sources that fail authentication (R-SEC-3, a SIPp registrar
//! answering 401; a banned source's calls set up before the ban go on).
//!
//! Addresses: `127.86.N.0/24`, one `N` per test; the gate on `.1`, sg on
//! `.11`.., callers on `.100`.. and strangers on `.66`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::Duration;

use testbed::bins::Node;
use testbed::{Scenario, Sipp, SippReport};

fn ip(net: u8, host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 86, net, host))
}

/// A site with one sg on `.11` and a guard listener on `.1:5060`, plus `site`
/// lines under `[site]` and `extra` at the end.
fn write_site(dir: &Path, net: u8, site: &str, extra: &str) -> PathBuf {
    let text = format!(
        "[site]\nname = \"policy-{net}\"\nsecret = \"policy-test-secret-0123456789\"\n{site}\n\
         [store]\nkind = \"embedded\"\npath = \"profiles.json\"\n\n[health]\ninterval_ms = 0\n\n\
         [[server]]\nname = \"srv-0\"\n[[instance]]\nid = \"sg-0\"\nservice = \"sg\"\n\
         server = \"srv-0\"\nsip = \"{sg}:5060\"\n{extra}\n\
         [[listener]]\nname = \"g\"\nbind = \"{g}:5060\"\nmode = \"guard\"\ninstance = \"sg-0\"\n\
         leg = \"subscriber\"\n",
        sg = ip(net, 11),
        g = ip(net, 1),
    );
    let path = dir.join("site.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn start_gate(site: &Path, net: u8) -> Node {
    let mut gate = Node::gate(site)
        .admin(SocketAddr::new(ip(net, 1), 9091))
        .args(["--node", "p"])
        .start()
        .unwrap();
    gate.wait_ready().unwrap();
    gate
}

/// Sends `bytes` from `from` to `to` in one datagram; the first answer
/// within a second, `None` for silence.
fn udp(from: SocketAddr, to: SocketAddr, bytes: &[u8]) -> Option<String> {
    let s = UdpSocket::bind(from).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    s.send_to(bytes, to).unwrap();
    let mut buf = vec![0u8; 65_535];
    let n = s.recv(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

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

/// `calls` SIPp calls of `scenario` from `from` to the gate `g`.
fn sipp_calls(scenario: &str, from: IpAddr, g: SocketAddr, calls: u64) -> SippReport {
    Sipp::new(Scenario::repo(scenario))
        .local_ip(from)
        .remote(g)
        .calls(calls)
        .rate(10)
        .timeout(Duration::from_secs(30))
        .spawn()
        .unwrap()
        .wait(Duration::from_secs(40))
        .unwrap()
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
    assert_eq!(udp(me, g, &invite), None);
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

/// A REGISTER from `me` (Call-ID `id`), its first answer within a second.
fn register(me: SocketAddr, g: SocketAddr, id: &str) -> Option<String> {
    let msg = format!(
        "REGISTER sip:example.com SIP/2.0\r\n\
         Via: SIP/2.0/UDP {me};branch=z9hG4bK{id};rport\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:150@example.com>;tag=r-{id}\r\n\
         To: <sip:150@example.com>\r\n\
         Call-ID: {id}@brute\r\n\
         CSeq: 1 REGISTER\r\n\
         Contact: <sip:150@{me}>\r\n\
         Expires: 60\r\n\
         Content-Length: 0\r\n\r\n"
    );
    udp(me, g, msg.as_bytes())
}

fn status_line(answer: Option<String>) -> String {
    answer.map_or_else(
        || "(nothing)".to_owned(),
        |a| a.lines().next().unwrap_or_default().to_owned(),
    )
}

/// R-SEC-3: a SIPp registrar answers 401 to every REGISTER. One source's
/// first `limit` REGISTERs reach it and get its 401; then the gate answers
/// 403 itself and the registrar sees no more of them, while a second
/// source still reaches the registrar. The admin endpoint lists the ban,
/// and the ban ends after `ban_s`; `DELETE /v1/bans/{ip}` lifts one early.
#[test]
fn r_sec_3_a_source_failing_authentication_is_banned_for_ban_s_while_others_pass() {
    let net = 6;
    let dir = tempfile::tempdir().unwrap();
    let site = write_site(dir.path(), net, "", "");
    let text = std::fs::read_to_string(&site).unwrap()
        + "\n[listener.auth_ban]\nlimit = 3\nwindow_s = 30\nban_s = 3\n";
    std::fs::write(&site, text).unwrap();
    let mut gate = start_gate(&site, net);
    let g = SocketAddr::new(ip(net, 1), 5060);
    let registrar = Sipp::new(Scenario::repo("uas_register_401"))
        .local(ip(net, 11), 5060)
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap();
    let brute = SocketAddr::new(ip(net, 66), 5099);
    let other = SocketAddr::new(ip(net, 67), 5099);

    for n in 0..3 {
        let got = status_line(register(brute, g, &format!("b{n}")));
        assert!(
            got.starts_with("SIP/2.0 401 "),
            "attempt {n}: {got}\n{}",
            gate.log()
        );
    }
    // Banned: the gate answers 403 itself, and no more reach the registrar.
    for n in 3..6 {
        let got = status_line(register(brute, g, &format!("b{n}")));
        assert!(got.starts_with("SIP/2.0 403 "), "attempt {n}: {got}");
    }
    let got = status_line(register(other, g, "o1"));
    assert!(got.starts_with("SIP/2.0 401 "), "second source: {got}");
    assert_eq!(
        gate.metric(r#"sipgate_requests_total{method="REGISTER",outcome="auth_banned"}"#)
            .unwrap(),
        3.0
    );
    assert_eq!(
        gate.metric(r#"sipgate_auth_bans_total{listener="g"}"#)
            .unwrap(),
        1.0
    );
    // 3 + 1 REGISTERs forwarded, 4 failures counted: the banned ones never
    // reached the registrar.
    assert_eq!(
        gate.metric(r#"sipgate_auth_failures_total{listener="g"}"#)
            .unwrap(),
        4.0
    );
    let listed: serde_json::Value = gate.get_json("/v1/bans").expect("GET /v1/bans");
    let listed = listed.as_array().expect("a list").clone();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["source"], brute.ip().to_string());
    assert_eq!(listed[0]["listener"], "g");

    // The ban ends after ban_s.
    std::thread::sleep(Duration::from_millis(3_200));
    let got = status_line(register(brute, g, "after"));
    assert!(got.starts_with("SIP/2.0 401 "), "after the ban: {got}");

    // Banned again, then lifted on the admin endpoint.
    for n in 0..3 {
        register(brute, g, &format!("again{n}"));
    }
    let got = status_line(register(brute, g, "still"));
    assert!(got.starts_with("SIP/2.0 403 "), "banned again: {got}");
    let admin = SocketAddr::new(ip(net, 1), 9091);
    let path = format!("/v1/bans/{}", brute.ip());
    let r = testbed::http::Request::new("DELETE", admin, &path)
        .send()
        .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    let got = status_line(register(brute, g, "lifted"));
    assert!(got.starts_with("SIP/2.0 401 "), "after the lift: {got}");
    gate.stop(Duration::from_secs(5));
    let _ = registrar.stop();
}

/// R-SEC-3: a ban refuses new dialogs only. A source sets up two calls
/// through the gate, then fails authentication past the limit (its
/// REGISTERs get the sg's 401, then the gate's 403): its new INVITE gets
/// 403, while its calls set up before the ban keep their re-INVITE, ACK
/// and BYE (SIPp's `uac_call` fails on any other answer).
#[test]
fn r_sec_3_calls_set_up_before_a_ban_keep_working_while_new_ones_get_403() {
    let net = 7;
    let dir = tempfile::tempdir().unwrap();
    let site = write_site(dir.path(), net, "", "");
    let text = std::fs::read_to_string(&site).unwrap()
        + "\n[listener.auth_ban]\nlimit = 3\nwindow_s = 30\nban_s = 60\n";
    std::fs::write(&site, text).unwrap();
    let mut gate = start_gate(&site, net);
    let g = SocketAddr::new(ip(net, 1), 5060);
    // One sg that takes calls and refuses every REGISTER with 401.
    let sg = Sipp::new(Scenario::repo("uas_call_register_401"))
        .local(ip(net, 11), 5060)
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap();
    let source = ip(net, 66);

    // Two calls from the source, held 5 s: up before the ban.
    let calls = std::thread::spawn(move || {
        Sipp::new(Scenario::repo("uac_call"))
            .local_ip(source)
            .remote(g)
            .calls(2)
            .rate(10)
            .duration(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .spawn()
            .unwrap()
            .wait(Duration::from_secs(40))
            .unwrap()
    });
    testbed::wait_for("2 calls up", Duration::from_secs(10), || {
        let w = gate.work()?;
        (w.instances.get("sg-0")?.counts.dialogs == 2).then_some(())
    })
    .unwrap();

    // The same source fails authentication past the limit: banned.
    let brute = SocketAddr::new(source, 5099);
    for n in 0..3 {
        let got = status_line(register(brute, g, &format!("p{n}")));
        assert!(got.starts_with("SIP/2.0 401 "), "attempt {n}: {got}");
    }
    let got = status_line(register(brute, g, "p3"));
    assert!(got.starts_with("SIP/2.0 403 "), "banned: {got}");

    // A new call from it: 403 from the gate, never handed to the sg.
    let refused = sipp_calls("uac_call_expect_403", source, g, 1);
    assert!(refused.all_ok() && refused.successful == 1, "{refused:?}");
    assert_eq!(
        gate.metric(r#"sipgate_requests_total{method="INVITE",outcome="auth_banned"}"#)
            .unwrap(),
        1.0
    );

    // The calls up before the ban ran to their end: re-INVITE, ACK, BYE.
    let calls = calls.join().unwrap();
    assert!(
        calls.all_ok() && calls.successful == 2,
        "{calls:?}\n{}",
        gate.log()
    );
    assert_eq!(
        gate.metric(r#"sipgate_new_work_total{instance="sg-0"}"#)
            .unwrap(),
        5.0,
        "the 2 INVITEs and 3 REGISTERs before the ban, nothing after"
    );
    gate.stop(Duration::from_secs(5));
    let _ = sg.stop();
}

/// `ringsync bans` (issue 30) through the real CLI and gate: with a SIPp
/// registrar answering 401, a source past the limit is banned; `ringsync
/// bans list --gate` shows it (table and `--json`), `ringsync bans lift IP
/// --gate` lifts it (the source's REGISTERs reach the registrar again), and
/// lifting a source that is not banned fails, naming it (R-SEC-3).
#[test]
fn r_sec_3_ringsync_bans_lists_and_lifts_a_gates_ban() {
    let net = 8;
    let dir = tempfile::tempdir().unwrap();
    let site = write_site(dir.path(), net, "", "");
    let toml = std::fs::read_to_string(&site).unwrap()
        + "\n[listener.auth_ban]\nlimit = 2\nwindow_s = 30\nban_s = 60\n";
    std::fs::write(&site, toml).unwrap();
    let mut gate = start_gate(&site, net);
    let g = SocketAddr::new(ip(net, 1), 5060);
    let admin = SocketAddr::new(ip(net, 1), 9091).to_string();
    let registrar = Sipp::new(Scenario::repo("uas_register_401"))
        .local(ip(net, 11), 5060)
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap();
    let brute = SocketAddr::new(ip(net, 66), 5099);

    let out = ringsync(&["bans", "list", "--gate", &admin]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("no bans"),
        "{}",
        text(&out.stdout)
    );
    for n in 0..2 {
        register(brute, g, &format!("b{n}"));
    }
    let got = status_line(register(brute, g, "banned"));
    assert!(got.starts_with("SIP/2.0 403 "), "banned: {got}");

    listed(&site, &admin, brute.ip());

    // Lifted: the source's REGISTERs reach the registrar (401) again.
    let ip_text = brute.ip().to_string();
    let out = ringsync(&["bans", "lift", &ip_text, "--gate", &admin]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("lifted 1 ban(s)"),
        "{}",
        text(&out.stdout)
    );
    let got = status_line(register(brute, g, "lifted"));
    assert!(got.starts_with("SIP/2.0 401 "), "after the lift: {got}");
    let out = ringsync(&["bans", "list", "--gate", &admin]);
    assert!(
        text(&out.stdout).starts_with("no bans"),
        "{}",
        text(&out.stdout)
    );

    // Not banned (any more): exit 1, naming it.
    let out = ringsync(&["bans", "lift", &ip_text, "--gate", &admin]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(&format!("{ip_text} is not banned")),
        "{}",
        text(&out.stderr)
    );
    gate.stop(Duration::from_secs(5));
    let _ = registrar.stop();
}

/// `ringsync ARGS`, run to its end.
fn ringsync(args: &[&str]) -> std::process::Output {
    std::process::Command::new(testbed::bins::BinDir::locate().program("ringsync").unwrap())
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `ringsync bans list` shows the ban of `source`: the table, and `--json`
/// in the gate's own shape.
fn listed(site: &Path, admin: &str, source: IpAddr) {
    let brute_ip = source;
    let out = ringsync(&["bans", "list", "--gate", admin]);
    let table = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let row = table.lines().nth(1).unwrap_or_default();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[..2], ["g", &brute_ip.to_string()], "{table}");
    // And as JSON, the gate's own shape (with the site file: it names the
    // gate's admin address, here given as --gate anyway).
    let out = ringsync(&[
        "--config",
        site.to_str().unwrap(),
        "--json",
        "bans",
        "list",
        "--gate",
        admin,
    ]);
    let bans: Vec<ringsync::bans::BanInfo> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
    assert_eq!(bans.len(), 1, "{bans:?}");
    assert_eq!((bans[0].listener.as_str(), bans[0].source), ("g", brute_ip));
    assert!(
        bans[0].remaining_s > 50 && bans[0].remaining_s <= 60,
        "{bans:?}"
    );
}
