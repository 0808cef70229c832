//! The drain in the real browser (R-WS-2 with R-SG-4 and R-AA-1): SIP.js
//! registered through the gate's WSS listener to one of two Kamailio
//! registrars is in a call when that registrar's server is drained with
//! the real `ringsync` CLI; the call goes on (the caller's re-INVITE and
//! BYE reach the browser), and its next re-REGISTER goes to the other
//! registrar over the same WebSocket, which then reaches it too.
//!
//! Addresses: `127.43.12.0/24`: the gate on `.1` (UDP and WSS on 5080,
//! admin 9091), the page on `.1:8000`, Kamailio on `.11` (sg-0, srv-0) and
//! `.12` (sg-1, srv-1), SIPp from `.50`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use testbed::bins::Node;
use testbed::fixture::{Mode, SiteFile};
use testbed::{Kamailio, KamailioHandle, Scenario, Sipp};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Notify};

use super::{assert_all_ok, http, ip, page, peer, run, sipjs, wait_event, Browser, ONE_BROWSER, T};
use crate::common::cli_drain;

const NET: (u8, u8) = (43, 12);

/// Two sg (Kamailio registrars) on two servers, the embedded store for the
/// `ringsync` CLI, the gate's admin, and the WSS listener balancing over
/// them.
fn site(dir: &Path, gate: SocketAddr, web: SocketAddr) -> PathBuf {
    let ca = peer::Ca::new(dir, "site");
    ca.issue_gate(dir, &ip(NET, 1).to_string());
    let g = ip(NET, 1);
    SiteFile::gate(
        "ws-browser-drain",
        g,
        &[("0", ip(NET, 11)), ("1", ip(NET, 12))],
    )
    .tls("gate-cert.pem", "gate-key.pem")
    .listener(
        "webrtc",
        gate,
        Mode::Balance("sg"),
        "subscriber",
        &format!(
            "transports = [\"udp\", \"wss\"]\nws_path = \"/sip\"\nws_origins = [\"http://{web}\"]"
        ),
    )
    .write(dir)
}

/// Registrations the gate counts on each sg (R-ST-2).
fn registrations(gate: &Node) -> [u64; 2] {
    let r = gate.work().expect("a work report");
    ["sg-0", "sg-1"].map(|id| r.instances[id].counts.registrations)
}

/// The two Kamailio registrars, and the gate, ready.
fn peers(site: &Path) -> (Vec<KamailioHandle>, Node) {
    let cfg = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kamailio/registrar.cfg");
    let kams: Vec<KamailioHandle> = [11, 12]
        .map(|h| {
            Kamailio::new()
                .config(cfg.clone())
                .listen(SocketAddr::new(ip(NET, h), 5060))
                .start()
                .expect("kamailio starts")
        })
        .into();
    let mut gate = Node::gate(site)
        .admin(SocketAddr::new(ip(NET, 1), 9091))
        .start()
        .unwrap();
    gate.wait_ready().unwrap();
    (kams, gate)
}

/// SIP.js in headless Chromium registers over WSS to sg X (the ring by its
/// AoR); a SIPp call to it through X is answered in the browser; X's
/// server is drained with `ringsync profile create` / `activate` in the
/// middle of the call. The caller's re-INVITE and BYE still reach the
/// browser through X (R-SG-4); the browser's re-REGISTER is balanced to
/// the other sg (R-AA-1), over the same WebSocket connection, with the
/// gate's Path: a MESSAGE sent to that sg then reaches the browser.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_ws_2_a_drained_sg_keeps_the_browsers_call_and_its_reregister_moves() {
    let _one = ONE_BROWSER.lock().await;
    let lib = tokio::task::spawn_blocking(sipjs).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gate_sip = SocketAddr::new(ip(NET, 1), 5080);
    let web = SocketAddr::new(ip(NET, 1), 8000);
    let site = site(dir.path(), gate_sip, web);
    let (kams, mut gate) = peers(&site);

    let (tx, mut events) = mpsc::unbounded_channel();
    let cmd = Arc::new(Notify::new());
    let server = TcpListener::bind(web).await.unwrap();
    let http_task = tokio::spawn(http(server, page(gate_sip), lib, (tx, cmd.clone())));
    let browser = Browser::start(&format!("http://{web}/"));
    let mut seen = Vec::new();
    wait_event(&mut events, "registration:Registered", &mut seen).await;
    let (from, to) = match registrations(&gate) {
        [1, 0] => (0, 1),
        [0, 1] => (1, 0),
        other => panic!("one registration on one sg: {other:?}"),
    };

    // A call through sg X, held 6 s before its re-INVITE and BYE.
    let call = Sipp::new(Scenario::repo("uac_call_webrtc"))
        .local_ip(ip(NET, 50))
        .remote(kams[from].addr())
        .service("dave")
        .calls(1)
        .duration(Duration::from_millis(6000))
        .timeout(Duration::from_secs(40))
        .spawn()
        .unwrap();
    wait_event(&mut events, "call:Established", &mut seen).await;

    cli_drain(&site, gate.admin(), &format!("srv-{from}"), T);

    // The browser's re-REGISTER, during the call: to the other sg.
    cmd.notify_one();
    wait_event(&mut events, "reregistered", &mut seen).await;
    let after = registrations(&gate);
    assert_eq!(
        (after[from], after[to]),
        (0, 1),
        "the re-REGISTER went to sg-{to}"
    );

    // The call through the drained sg ends normally: its re-INVITE and BYE
    // passed the drain.
    let report = tokio::task::spawn_blocking(move || call.wait(Duration::from_secs(40)))
        .await
        .unwrap()
        .unwrap();
    assert_all_ok("the browser's call through the drained sg", &report, 1);
    wait_event(&mut events, "call:Terminated", &mut seen).await;

    // The new registrar reaches the browser through the gate's Path, on
    // the same connection.
    let r = run(Sipp::new(Scenario::repo("uac_message"))
        .local_ip(ip(NET, 50))
        .remote(kams[to].addr())
        .service("dave")
        .calls(1)
        .timeout(Duration::from_secs(20)))
    .await;
    assert_all_ok("MESSAGE through the other sg", &r, 1);
    wait_event(&mut events, "message:", &mut seen).await;
    let m = |s: &str| gate.metric(s).unwrap();
    assert_eq!(m("sipgate_ws_connections"), 1.0, "one connection all along");
    assert_eq!(m(r#"sipgate_ws_handshakes_total{result="ok"}"#), 1.0);

    drop(browser);
    http_task.abort();
    gate.stop(T);
    for k in kams {
        k.stop();
    }
}
