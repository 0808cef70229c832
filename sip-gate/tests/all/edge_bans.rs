//! R-SEC-3 through the real `sip-gate` binary: a source that keeps failing
//! authentication at the registrar (a SIPp registrar answering 401) is
//! banned for `ban_s` on its listener while other sources pass; its calls
//! set up before the ban go on; `ringsync bans` lists and lifts a ban.
//!
//! Addresses: `127.86.N.0/24` (shared with `edge_policy.rs`, other `N`).

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use crate::policy::{ban_gate, ip, sipp_calls, udp, BanGate};
use testbed::{Scenario, Sipp};

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
    let BanGate {
        mut gate,
        g,
        sg: registrar,
        ..
    } = ban_gate(dir.path(), net, 3, 3, "uas_register_401");
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
    // One sg that takes calls and refuses every REGISTER with 401.
    let BanGate {
        mut gate, g, sg, ..
    } = ban_gate(dir.path(), net, 3, 60, "uas_call_register_401");
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
    let BanGate {
        mut gate,
        site,
        g,
        sg: registrar,
    } = ban_gate(dir.path(), net, 2, 60, "uas_register_401");
    let admin = SocketAddr::new(ip(net, 1), 9091).to_string();
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
