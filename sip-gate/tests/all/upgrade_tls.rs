//! R-GW-3 with TLS and WebSocket clients, through the real `sip-gate`
//! binary: a TLS connection cannot move to the new run (a plain WebSocket
//! one does, as TCP); the old run keeps it and relays
//! its messages to the new run, which decides. A call set up before the
//! upgrade goes on over the same connection; once the client closes it the
//! old run exits. The old run killed after the hand-over closes what it
//! kept (as its crash would) and leaves the new run serving. The keeper's
//! memory per TLS connection is measured here too (printed).
//!
//! Addresses: `127.139.N.0/24` (N of `upgrade.rs`'s range, 6, 8, 9, 18 and 19):
//! the gate on `.1:5061` (UDP and TLS), the sg (SIPp, UDP) on `.11`; the
//! WebSocket test's own below.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::common::{ip, server_addr};
use crate::tls::peer::{self, header, record_routes, Client};
use crate::upgrade::{gate, took_over, upgrade};
use testbed::{Scenario, Sipp};

const T: Duration = Duration::from_secs(5);

/// A TLS site: the subscriber listener on `127.139.N.1:5061` (UDP and
/// TLS), a gate certificate from the test CA, the sg (SIPp, UDP) on `.11`.
fn tls_site(net: (u8, u8)) -> (tempfile::TempDir, PathBuf, crate::tls::peer::Ca) {
    let dir = tempfile::tempdir().unwrap();
    let ca = crate::tls::peer::Ca::new(dir.path(), "site");
    let (cert, key) = ca.issue(&ip(net, 1).to_string());
    std::fs::write(dir.path().join("gate-cert.pem"), cert).unwrap();
    std::fs::write(dir.path().join("gate-key.pem"), key).unwrap();
    let text = format!(
        "[site]\nname = \"upgrade-tls-{b}\"\nsecret = \"integration-test-secret-upgrade-tls-{b}\"\n\n\
         [health]\ninterval_ms = 0\n\n[tls]\ncert = \"gate-cert.pem\"\nkey = \"gate-key.pem\"\n\n\
         [[server]]\nname = \"srv-0\"\n[[instance]]\nid = \"sg-0\"\nservice = \"sg\"\nserver = \"srv-0\"\nsip = \"{sg}\"\n\n\
         [[listener]]\nname = \"subs\"\nbind = \"{gate}\"\ntransports = [\"udp\", \"tls\"]\nmode = \"balance\"\npool = \"sg\"\nleg = \"subscriber\"\n\n\
         [store]\nkind = \"embedded\"\npath = \"profiles.json\"\n",
        b = net.1,
        sg = server_addr(net, 0),
        gate = SocketAddr::new(ip(net, 1), 5061),
    );
    let path = dir.path().join("site.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path, ca)
}

/// One request of the TLS client in dialog `call`.
fn tls_request(
    local: SocketAddr,
    method: &str,
    uri: &str,
    (call, cseq): (&str, u32),
    extra: &str,
) -> String {
    let sdp = "v=0\r\no=alice 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 40000 RTP/AVP 0\r\n";
    let body = if method == "INVITE" { sdp } else { "" };
    format!(
        "{method} {uri} SIP/2.0\r\nVia: SIP/2.0/TLS {local};branch=z9hG4bK-{call}-{cseq}-{method};rport\r\n\
         Max-Forwards: 70\r\nFrom: <sips:alice@example.com>;tag=alice-{call}\r\n{extra}\
         Call-ID: {call}@upgrade-test\r\nCSeq: {cseq} {method}\r\nContact: <sips:alice@{local}>\r\n\
         Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// R-GW-3: a TLS connection cannot move, and is not cut: the old run keeps
/// it and relays its messages to the new run, which decides. A call set up
/// through the old run gets its re-INVITE and BYE answered on the same TLS
/// connection after the upgrade; once the client closes it, the old run
/// exits by itself.
#[test]
fn r_gw_3_a_tls_connection_stays_up_and_its_call_goes_on_across_an_upgrade() {
    let net = (139, 6);
    let (dir, site, ca) = tls_site(net);
    let admin = SocketAddr::new(ip(net, 1), 9091);
    let gw = SocketAddr::new(ip(net, 1), 5061);
    let mut old = gate(&site, admin, None);
    let uas = Sipp::new(Scenario::repo("uas_call"))
        .local(server_addr(net, 0).ip(), 5060)
        .calls(2)
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap();
    let t = T;
    let mut c = peer::connect(gw, &ca.pem);
    let local = c.local();
    let ruri = format!("sips:bob@{gw}");
    let to = "To: <sips:bob@example.com>\r\n";
    c.send(&tls_request(local, "INVITE", &ruri, ("u1", 1), to));
    let ok = c.recv_final(t);
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    let rr = record_routes(&ok);
    let route = format!("Route: <{}>, <{}>\r\n", rr[1], rr[0]);
    let target = header(&ok, "Contact")
        .unwrap()
        .trim_matches(|c| c == '<' || c == '>')
        .to_owned();
    let dialog = format!("{route}To: {}\r\n", header(&ok, "To").unwrap());
    c.send(&tls_request(local, "ACK", &target, ("u1", 1), &dialog));

    let _new = upgrade(&site, admin);
    let log = old.log();
    assert_eq!(took_over(&old, "relayed"), Some(1), "{log}");
    // The old run stays: it holds the TLS connection.
    std::thread::sleep(Duration::from_millis(500));
    assert!(old.running(), "{}", old.log());

    // In-dialog, after the upgrade, on the same connection: answered.
    c.send(&tls_request(local, "INVITE", &target, ("u1", 2), &dialog));
    let ok2 = c.recv_final(t);
    assert!(ok2.starts_with("SIP/2.0 200"), "{ok2}\n{}", old.log());
    // The new run decided (the old run relayed it): its own counter (the
    // admin endpoint is the new run's) has the re-INVITE.
    let forwarded = r#"sipgate_requests_total{method="INVITE",outcome="forwarded"}"#;
    assert_eq!(old.metric(forwarded).unwrap(), 1.0);
    c.send(&tls_request(local, "ACK", &target, ("u1", 2), &dialog));
    c.send(&tls_request(local, "BYE", &target, ("u1", 3), &dialog));
    let bye = c.recv_final(t);
    assert!(
        bye.starts_with("SIP/2.0 200") && bye.contains("CSeq: 3 BYE"),
        "{bye}"
    );

    // The client goes: the old run has nothing left and exits.
    drop(c);
    let status = old.wait_exit(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        old.log()
    );
    assert!(
        old.log().contains("keeper: no connection left"),
        "{}",
        old.log()
    );
    // The new run serves TLS itself.
    tls_call(&mut peer::connect(gw, &ca.pem), gw, "u2");
    let r = uas.wait(Duration::from_secs(10)).unwrap();
    assert_eq!((r.successful, r.failed), (2, 0), "{r:?}");
    drop(dir);
}

/// A whole call from `c` through the gate at `gw` (what `uas_call`
/// expects: INVITE, ACK, re-INVITE, ACK, BYE), each answered 200.
fn tls_call(c: &mut Client, gw: SocketAddr, call: &str) {
    let local = c.local();
    let ruri = format!("sips:bob@{gw}");
    let to = "To: <sips:bob@example.com>\r\n";
    c.send(&tls_request(local, "INVITE", &ruri, (call, 1), to));
    let ok = c.recv_final(T);
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    let rr = record_routes(&ok);
    let route = format!("Route: <{}>, <{}>\r\n", rr[1], rr[0]);
    let target = header(&ok, "Contact")
        .unwrap()
        .trim_matches(|c| c == '<' || c == '>')
        .to_owned();
    let dialog = format!("{route}To: {}\r\n", header(&ok, "To").unwrap());
    c.send(&tls_request(local, "ACK", &target, (call, 1), &dialog));
    c.send(&tls_request(local, "INVITE", &target, (call, 2), &dialog));
    assert!(c.recv_final(T).starts_with("SIP/2.0 200"));
    c.send(&tls_request(local, "ACK", &target, (call, 2), &dialog));
    c.send(&tls_request(local, "BYE", &target, (call, 3), &dialog));
    let bye = c.recv_final(T);
    assert!(bye.starts_with("SIP/2.0 200"), "{bye}");
}

/// R-GW-3: the old run killed (-9) after the hand-over: the TLS connection
/// it kept closes, as its crash would close it; the new run serves on,
/// TLS included.
#[test]
fn r_gw_3_the_old_run_killed_after_the_hand_over_leaves_the_new_serving() {
    let net = (139, 8);
    let (_dir, site, ca) = tls_site(net);
    let admin = SocketAddr::new(ip(net, 1), 9091);
    let gw = SocketAddr::new(ip(net, 1), 5061);
    let mut old = gate(&site, admin, None);
    let uas = Sipp::new(Scenario::repo("uas_call"))
        .local(server_addr(net, 0).ip(), 5060)
        .calls(1)
        .timeout(Duration::from_secs(60))
        .spawn()
        .unwrap();
    let mut kept = peer::connect(gw, &ca.pem);
    let _new = upgrade(&site, admin);
    assert_eq!(took_over(&old, "relayed"), Some(1));
    // Only the old run: the new one is its child.
    old.signal("KILL");
    assert!(old.wait_exit(Duration::from_secs(5)).is_some());
    assert!(kept.recv(T).is_none(), "the kept connection closes");
    let ended = "the old run ended: the connections it kept are closed";
    old.wait_for("the new run to see the old one gone", T, |g| {
        g.log().contains(ended).then_some(())
    })
    .unwrap();
    assert_eq!(
        testbed::http::get(admin, "/readyz").map(|r| r.status).ok(),
        Some(200)
    );
    tls_call(&mut peer::connect(gw, &ca.pem), gw, "k1");
    let r = uas.wait(Duration::from_secs(10)).unwrap();
    assert_eq!((r.successful, r.failed), (1, 0), "{r:?}");
}

/// R-GW-3 with a browser (RFC 7118): a WebSocket subscriber registered
/// before the upgrade keeps its connection (a plain `ws` one moves to the
/// new run like a TCP one; `upgrade_ws.rs` has `wss`, which the old run
/// keeps), and a call the registrar (Kamailio) routes into its flow after
/// the upgrade reaches it on the same WebSocket; the old run, holding
/// nothing, exits. On `127.139.9.0/24` (the gate's `ws` listener on
/// `.1:5080`, Kamailio on `.11`, the caller on `.50`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_gw_3_a_websocket_subscriber_keeps_its_connection_and_its_flow() {
    use crate::ws::ua;
    let net = (139, 9);
    let dir = tempfile::tempdir().unwrap();
    let (gw, sg) = (SocketAddr::new(ip(net, 1), 5080), server_addr(net, 0));
    let text = format!(
        "[site]\nname = \"upgrade-ws\"\nsecret = \"integration-test-secret-upgrade-ws\"\n\n\
         [health]\ninterval_ms = 0\n\n[overload]\nnew_dialog_deadline_ms = 10000\n\n\
         [[server]]\nname = \"srv-0\"\n[[instance]]\nid = \"sg-0\"\nservice = \"sg\"\nserver = \"srv-0\"\nsip = \"{sg}\"\n\n\
         [[listener]]\nname = \"web\"\nbind = \"{gw}\"\ntransports = [\"udp\", \"ws\"]\nmode = \"balance\"\npool = \"sg\"\n\
         leg = \"subscriber\"\nws_path = \"/sip\"\nws_origins = [\"https://app.example\"]\n\n\
         [store]\nkind = \"embedded\"\npath = \"profiles.json\"\n"
    );
    let site = dir.path().join("site.toml");
    std::fs::write(&site, text).unwrap();
    let admin = SocketAddr::new(ip(net, 1), 9091);
    let kam = testbed::Kamailio::new()
        .config(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kamailio/registrar.cfg"))
        .listen(sg)
        .start()
        .unwrap();
    let (s, a) = (site.clone(), admin);
    let mut old = tokio::task::spawn_blocking(move || gate(&s, a, None))
        .await
        .unwrap();
    let mut ws = ua::open(gw, "/sip", Some("sip"), Some("https://app.example"), None)
        .await
        .unwrap();
    ua::send(&mut ws, &ua::register("alice", "w1", 1, 600)).await;
    let ok = ua::recv(&mut ws, T).await.expect("a REGISTER response");
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");

    let (s, a) = (site.clone(), admin);
    let new = tokio::task::spawn_blocking(move || upgrade(&s, a))
        .await
        .unwrap();
    assert_eq!(took_over(&old, "relayed"), Some(0));
    assert_eq!(took_over(&old, "connections"), Some(1));
    let caller = Sipp::new(Scenario::repo("uac_call"))
        .local_ip(ip(net, 50))
        .remote(sg)
        .service("alice")
        .calls(1)
        .duration(Duration::from_millis(100))
        .timeout(Duration::from_secs(20))
        .arg("-cid_str")
        .arg("upgrade-ws-%u@sip-gate-test")
        .spawn()
        .unwrap();
    ua::answer_call(&mut ws, "w1", T).await;
    let r = tokio::task::spawn_blocking(move || caller.wait(Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap();
    assert!(r.all_ok() && r.successful == 1, "{r:?}");
    // The old run kept nothing: it has exited (or does now).
    drop(ws);
    let exit = tokio::task::spawn_blocking(move || {
        let status = old.wait_exit(Duration::from_secs(10));
        (status, old.log())
    })
    .await
    .unwrap();
    assert!(exit.0.is_some_and(|s| s.success()), "{exit:?}");
    drop(new);
    kam.stop();
}

/// The old run's resident memory (`VmRSS`, KiB) while it keeps TLS
/// connections after a hand-over.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Upgrades a TLS gate on `127.139.N.0/24` holding `conns` open TLS
/// connections and returns the old run's RSS once it only keeps them;
/// asserts that it kept every one, relayed each, and exits once they close.
fn keeper_rss(net: (u8, u8), conns: usize) -> u64 {
    let (_dir, site, ca) = tls_site(net);
    let admin = SocketAddr::new(ip(net, 1), 9091);
    let gw = SocketAddr::new(ip(net, 1), 5061);
    let mut old = gate(&site, admin, None);
    let clients: Vec<Client> = (0..conns).map(|_| peer::connect(gw, &ca.pem)).collect();
    let _new = upgrade(&site, admin);
    assert_eq!(
        took_over(&old, "relayed"),
        Some(conns as u64),
        "{}",
        old.log()
    );
    // The keeper settles (the hand-over's buffers freed) before the reading.
    std::thread::sleep(Duration::from_millis(500));
    assert!(old.running(), "{}", old.log());
    let rss = rss_kib(old.pid().unwrap());
    drop(clients);
    let status = old.wait_exit(Duration::from_secs(20));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        old.log()
    );
    rss
}

/// R-GW-3, issue 39's benchmark: what the keeper (the old run after the
/// hand-over, keeping only its TLS connections) costs per connection: two
/// gates, one upgraded holding 1 TLS connection and one holding
/// 1 + `UPGRADE_TLS_CONNS` (20 in the suite; the benchmark's figure in
/// docs/benchmarks.md, "sip-gate: upgrade hand-over", with 2,000 and the
/// release build). Printed, not asserted (memory depends on the build);
/// asserted: every connection kept, relayed, and the keeper gone once they
/// close.
#[test]
fn r_gw_3_the_keeper_holds_tls_connections_and_its_memory_is_measured() {
    let n: usize = std::env::var("UPGRADE_TLS_CONNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
        .clamp(1, 5_000);
    let one = keeper_rss((139, 18), 1);
    let many = keeper_rss((139, 19), 1 + n);
    println!(
        "keeper RSS: {one} KiB keeping 1 TLS connection, {many} KiB keeping {}: {:.1} KiB per connection",
        1 + n,
        many.saturating_sub(one) as f64 / n as f64
    );
}
