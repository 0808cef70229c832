//! R-WS-3 with `ws_upstream = "wss"` through the real binaries: the ws
//! pool gate reaches its `ws` instance over TLS, checking the instance's
//! certificate for its IP address against `[tls] ca` (a CA the test makes
//! with rcgen). The `ws` instance is a second `sip-gate` binary with a
//! `wss` subscriber listener (R-WS-2) in front of a Kamailio registrar, so
//! what crosses the pool is real SIP over WebSocket: the client speaks WSS
//! to the pool, the pool WSS to the instance.
//!
//! Addresses: `127.88.N.0/24`, one N per test: the pool gate on `.1`
//! (`wss` on 8443, admin 9091), the instance gate on `.21` (UDP and `wss`
//! on 5080, admin 9091), Kamailio on `.11:5060`, the SIPp caller on `.50`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use testbed::bins::{BinDir, Node};
use testbed::fixture::{Mode, SiteFile};
use testbed::{Kamailio, Scenario, Sipp};

use super::{ip, peer, status_of, ua, T};

const ORIGIN: &str = "https://app.example";

/// The `ws` instance: a gate with a `wss` subscriber listener on `.21:5080`
/// balancing to the sg on `.11:5060`, its certificate for `.21` issued by
/// `ca`; without `ca`, a plain `ws` listener (no TLS at all). Its site
/// file.
fn instance_site(dir: &Path, net: (u8, u8), ca: Option<&peer::Ca>) -> PathBuf {
    let (tls, ws) = match ca {
        Some(ca) => {
            let (cert, key) = ca.issue(&ip(net, 21).to_string());
            std::fs::write(dir.join("cert.pem"), cert).unwrap();
            std::fs::write(dir.join("key.pem"), key).unwrap();
            (Some(("cert.pem", "key.pem")), "wss")
        }
        None => (None, "ws"),
    };
    let [sg, w] = [11, 21].map(|h| ip(net, h));
    let mut site = SiteFile::new(&format!("ws-instance-{}", net.1));
    if let Some((cert, key)) = tls {
        site = site.tls(cert, key);
    }
    // No overload test: R-OV-1's 200 ms deadline would shed this test's own
    // REGISTER or INVITE with 503 when the debug gate runs late on a loaded
    // machine (tests/all/ws.rs says more).
    site.section("overload", "new_dialog_deadline_ms = 10000")
        .servers(&["srv-0"])
        .instance("sg-0", "sg", "srv-0", SocketAddr::new(sg, 5060))
        .listener(
            "web",
            SocketAddr::new(w, 5080),
            Mode::Balance("sg"),
            "subscriber",
            &format!("transports = [\"udp\", \"{ws}\"]\nws_path = \"/sip\""),
        )
        .write(dir)
}

/// The pool: a `wss` ws pool listener on `.1:8443` whose one `ws` instance
/// is `.21:5080`, reached over TLS (`ws_upstream = "wss"`) and checked
/// against `ca`, which also issued the pool's own certificate. Its site
/// file.
fn pool_site(dir: &Path, net: (u8, u8), ca: &peer::Ca) -> PathBuf {
    let (cert, key) = ca.issue(&ip(net, 1).to_string());
    std::fs::write(dir.join("cert.pem"), cert).unwrap();
    std::fs::write(dir.join("key.pem"), key).unwrap();
    let [g, w] = [1, 21].map(|h| ip(net, h));
    let tls = format!(
        "cert = \"cert.pem\"\nkey = \"key.pem\"\nca = \"{}\"",
        ca.pem.display()
    );
    SiteFile::new(&format!("ws-pool-tls-{}", net.1))
        .admin(SocketAddr::new(g, 9091), SocketAddr::new(g, 9092))
        .section("tls", &tls)
        .servers(&["srv-0"])
        .pool("ws", "ws", &[("0", SocketAddr::new(w, 5080))])
        .listener(
            "web",
            SocketAddr::new(g, 8443),
            Mode::WsPool("ws"),
            "subscriber",
            "transports = [\"wss\"]\nws_path = \"/sip\"\nws_upstream = \"wss\"",
        )
        .write(dir)
}

/// A gate from `site`, its admin on `admin`, ready.
fn gate(site: &Path, admin: SocketAddr) -> Node {
    let mut g = Node::gate(site).admin(admin).start().unwrap();
    g.wait_ready().unwrap();
    g
}

fn metric(gate: &Node, series: &str) -> f64 {
    gate.metric(series).unwrap()
}

/// A WebSocket through the pool gate of `net`, over TLS trusting `ca`,
/// bounded by `T` so a gate that never answers fails the test.
async fn open(
    net: (u8, u8),
    ca: &peer::Ca,
) -> Result<ua::Ws, tokio_tungstenite::tungstenite::Error> {
    let pool = SocketAddr::new(ip(net, 1), 8443);
    let opened = ua::open(pool, "/sip", Some("sip"), Some(ORIGIN), Some(&ca.pem));
    tokio::time::timeout(T, opened)
        .await
        .expect("the pool answers the upgrade in time, one way or the other")
}

/// R-WS-3 over a TLS upstream: a browser-like client opens WSS to the
/// pool; the pool opens TLS to the instance gate (verified against the
/// site CA) and passes the connection whole; the client REGISTERs through
/// it to Kamailio, and a SIPp call to its AoR comes back along the
/// instance's Path over the same two TLS legs, with the instance's
/// `Via: SIP/2.0/WSS`; re-INVITE and BYE follow. The pool counts one
/// client handshake and one passed connection, the connection is the
/// instance's work while open, and nothing of it once closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_ws_3_a_sip_dialog_flows_through_a_ws_pool_over_tls() {
    let net = (88, 1);
    let dir = tempfile::tempdir().unwrap();
    let ca = peer::Ca::new(dir.path(), "site");
    let (inst_dir, pool_dir) = (dir.path().join("instance"), dir.path().join("pool"));
    std::fs::create_dir_all(&inst_dir).unwrap();
    std::fs::create_dir_all(&pool_dir).unwrap();
    let kam = Kamailio::new()
        .config(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kamailio/registrar.cfg"))
        .listen(SocketAddr::new(ip(net, 11), 5060))
        .start()
        .expect("kamailio starts");
    let mut instance = gate(
        &instance_site(&inst_dir, net, Some(&ca)),
        SocketAddr::new(ip(net, 21), 9091),
    );
    let mut pool = gate(
        &pool_site(&pool_dir, net, &ca),
        SocketAddr::new(ip(net, 1), 9091),
    );

    let mut ws = open(net, &ca).await.expect("passed to the instance");
    ua::send(&mut ws, &ua::register("alice", "a1", 1, 600)).await;
    let ok = ua::recv(&mut ws, T).await.expect("a REGISTER response");
    assert!(ok.starts_with("SIP/2.0 200"), "REGISTER answered: {ok}");
    let tls_ok = r#"sipgate_tls_handshakes_total{side="client",result="ok"}"#;
    assert_eq!(metric(&pool, tls_ok), 1.0, "one TLS connection upstream");
    let passed = r#"sipgate_ws_handshakes_total{result="passed"}"#;
    assert_eq!(metric(&pool, passed), 1.0);
    assert_eq!(metric(&instance, "sipgate_ws_connections"), 1.0);
    let work = pool.work().expect("a work report");
    assert_eq!(work.instances["ws-0"].counts.connections, 1);

    let caller = Sipp::new(Scenario::repo("uac_call"))
        .local_ip(ip(net, 50))
        .remote(SocketAddr::new(ip(net, 11), 5060))
        .service("alice")
        .calls(1)
        .duration(Duration::from_millis(100))
        .timeout(Duration::from_secs(20))
        .arg("-cid_str")
        .arg("ws-pool-tls-%u@sip-gate-test")
        .spawn()
        .unwrap();
    let invite = ua::answer_call(&mut ws, "a1", T).await;
    let report = tokio::task::spawn_blocking(move || caller.wait(Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap();
    crate::common::assert_all_ok("caller (uac_call)", &report, 1);
    let via = format!("Via: SIP/2.0/WSS {}:5080;branch=", ip(net, 21));
    assert!(invite.contains(&via), "the instance's WSS Via: {invite}");

    ws.close(None).await.unwrap();
    while ua::next(&mut ws, T).await.is_some() {}
    testbed::wait_for("the connection gone from the instance's work", T, || {
        pool.work()
            .filter(|r| r.instances["ws-0"].counts.connections == 0)
    })
    .unwrap();
    pool.stop(T);
    instance.stop(T);
    kam.stop();
}

/// R-WS-3 over a TLS upstream, the instance's certificate issued by a CA
/// the pool does not trust: the pool refuses its TLS handshake, so the
/// instance gets no WebSocket connection (its gate counts a failed server
/// handshake and no upgrade); the client gets `502` at once, not a hang;
/// the pool counts `upstream_failed` and a client TLS error, logs the
/// instance unreachable with the certificate error, and `ringsync status`
/// shows it unreachable over `tls` with that reason (R-AA-1's hold).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_ws_3_an_instance_whose_certificate_does_not_verify_gets_no_connection() {
    BinDir::locate().program("ringsync").unwrap();
    let net = (88, 2);
    let dir = tempfile::tempdir().unwrap();
    let ca = peer::Ca::new(dir.path(), "site");
    let rogue = peer::Ca::new(dir.path(), "rogue");
    let (inst_dir, pool_dir) = (dir.path().join("instance"), dir.path().join("pool"));
    std::fs::create_dir_all(&inst_dir).unwrap();
    std::fs::create_dir_all(&pool_dir).unwrap();
    let mut instance = gate(
        &instance_site(&inst_dir, net, Some(&rogue)),
        SocketAddr::new(ip(net, 21), 9091),
    );
    let site = pool_site(&pool_dir, net, &ca);
    let mut pool = gate(&site, SocketAddr::new(ip(net, 1), 9091));

    let e = open(net, &ca).await.err().expect("no connection through");
    assert_eq!(ua::refused_status(&e), Some(502), "{e}");
    let failed = r#"sipgate_ws_handshakes_total{result="upstream_failed"}"#;
    assert_eq!(metric(&pool, failed), 1.0);
    let tls_error = r#"sipgate_tls_handshakes_total{side="client",result="error"}"#;
    assert_eq!(metric(&pool, tls_error), 1.0);
    let passed = r#"sipgate_ws_handshakes_total{result="passed"}"#;
    assert_eq!(metric(&pool, passed), 0.0);

    // The instance saw a TLS handshake that did not finish, and nothing
    // after it.
    let server_error = r#"sipgate_tls_handshakes_total{side="server",result="error"}"#;
    testbed::wait_for("the instance's failed handshake counted", T, || {
        (metric(&instance, server_error) >= 1.0).then_some(())
    })
    .unwrap();
    assert_eq!(
        metric(&instance, r#"sipgate_ws_handshakes_total{result="ok"}"#),
        0.0
    );
    assert_eq!(metric(&instance, "sipgate_ws_connections"), 0.0);

    let ws0 = status_of(&site, "ws-0");
    let held = &ws0["unreachable"][0];
    assert_eq!(held["transport"], "tls", "{ws0}");
    let reason = held["reason"].as_str().unwrap_or_default();
    // rustls's words; the kind (here BadSignature: both test CAs have the
    // same empty name, so the rogue certificate's issuer is found by name
    // and its signature fails) is rustls's business.
    let why = "invalid peer certificate";
    assert!(reason.contains(why), "the reason says why: {ws0}");
    let log = pool.log();
    assert!(
        log.contains("ws instance unreachable") && log.contains(why),
        "the pool logs the instance and the certificate error: {log}"
    );
    pool.stop(T);
    instance.stop(T);
}

/// R-WS-3 over a TLS upstream, the instance speaking no TLS at all (a
/// plain `ws` listener where the pool expects `wss`): the pool's handshake
/// ends at `[tls] handshake_timeout_ms` (5 s), it does not hang; the client
/// gets `502`, the instance no WebSocket connection, and the pool counts
/// the handshake's `timeout` and `upstream_failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_ws_3_an_instance_without_tls_behind_a_wss_upstream_gets_no_connection() {
    let net = (88, 3);
    let dir = tempfile::tempdir().unwrap();
    let ca = peer::Ca::new(dir.path(), "site");
    let (inst_dir, pool_dir) = (dir.path().join("instance"), dir.path().join("pool"));
    std::fs::create_dir_all(&inst_dir).unwrap();
    std::fs::create_dir_all(&pool_dir).unwrap();
    let mut instance = gate(
        &instance_site(&inst_dir, net, None),
        SocketAddr::new(ip(net, 21), 9091),
    );
    let mut pool = gate(
        &pool_site(&pool_dir, net, &ca),
        SocketAddr::new(ip(net, 1), 9091),
    );

    let e = open(net, &ca).await.err().expect("no connection through");
    assert_eq!(ua::refused_status(&e), Some(502), "{e}");
    let failed = r#"sipgate_ws_handshakes_total{result="upstream_failed"}"#;
    assert_eq!(metric(&pool, failed), 1.0);
    // The instance reads the ClientHello as the start of an upgrade
    // request and waits for the rest: the pool's handshake deadline ends it.
    let timeout = r#"sipgate_tls_handshakes_total{side="client",result="timeout"}"#;
    assert_eq!(metric(&pool, timeout), 1.0);
    assert_eq!(
        metric(&instance, r#"sipgate_ws_handshakes_total{result="ok"}"#),
        0.0
    );
    assert_eq!(metric(&instance, "sipgate_ws_connections"), 0.0);
    pool.stop(T);
    instance.stop(T);
}
