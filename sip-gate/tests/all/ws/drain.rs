//! R-WS-2 with R-SG-4 through the real binaries: the sg of a WebSocket
//! subscriber in a call is drained; the call stays on its connection and
//! the re-REGISTER moves to the other sg with the same flow.
//!
//! Under load: this test once waited 20 s for an INVITE that never came on
//! a machine at load average ~15. The likeliest cause: the gate's
//! new-dialog deadline (R-OV-1, 200 ms by default) sheds an INVITE or
//! REGISTER with 503 when the debug gate's runtime (or its UDP worker) runs
//! that late, and the test's own call then ends at the caller instead of
//! reaching the browser: a message lost for good, which no longer wait
//! brings back. The site raises the
//! deadline ([`OVERLOAD`]: this is no overload test), every wait
//! polls for what it needs within [`LOADED`], and a missing message's
//! panic shows the gate's refusals.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use testbed::bins::Node;
use testbed::fixture::{Mode, SiteFile};
use testbed::{Kamailio, KamailioHandle, Scenario, Sipp, SippHandle};

use super::{assert_all_ok, ip, metric, ua, ORIGIN, OVERLOAD, T};
use crate::common::cli_drain;

/// The bound of every wait here: generous, as each one polls for its state
/// and returns as soon as it is there; the debug binaries, SIPp and
/// Kamailio start and answer slowly on a loaded 2-core machine.
const LOADED: Duration = Duration::from_secs(30);

/// A site of two Kamailio registrars (sg-0 on `.11`, sg-1 on `.12`, on
/// srv-0 and srv-1), the embedded store, the gate's admin on `.1:9091`,
/// and the `ws` subscriber listener balancing over them.
fn two_sg_site(net: (u8, u8)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let g = ip(net, 1);
    SiteFile::gate(
        &format!("ws-drain-{}", net.1),
        g,
        &[("0", ip(net, 11)), ("1", ip(net, 12))],
    )
    .raw(OVERLOAD)
    .listener(
        "web",
        SocketAddr::new(g, 5080),
        Mode::Balance("sg"),
        "subscriber",
        r#"transports = ["udp", "ws"]"#,
    )
    .write(dir.path());
    dir
}

/// Registrations the gate counts on each sg (R-ST-2).
fn registrations(gate: &Node) -> [u64; 2] {
    let r = gate.work().expect("a work report");
    ["sg-0", "sg-1"].map(|id| r.instances[id].counts.registrations)
}

/// Polls [`registrations`] until `ok` holds (or [`LOADED`] passes: the
/// caller's assertion then shows the last counts).
fn wait_registrations(gate: &Node, ok: impl Fn(&[u64; 2]) -> bool) -> [u64; 2] {
    let last = std::cell::Cell::new([0; 2]);
    let found = testbed::wait_for("the gate's registration counts", LOADED, || {
        let n = registrations(gate);
        last.set(n);
        ok(&n).then_some(n)
    });
    found.unwrap_or_else(|_| last.get())
}

/// What the gate refused, for the message of a wait that ended empty.
fn refusals(gate: &Node) -> String {
    match gate.metrics() {
        Ok(m) => format!(
            "overload refusals {}, drain refusals {}, dropped {}",
            m.sum("sipgate_overload_refusals_total", &[]),
            m.sum("sipgate_drain_refusals_total", &[]),
            m.sum("sipgate_dropped_total", &[]),
        ),
        Err(e) => format!("no metrics: {e}"),
    }
}

/// Handles one message from the gate as a browser would: answers INVITE
/// (200 with SDP) and BYE (200), takes ACK; returns it, with whether it was
/// a BYE.
async fn browser_step(ws: &mut ua::Ws, host: &str, gate: &Node) -> (String, bool) {
    let Some(msg) = ua::recv(ws, LOADED).await else {
        panic!(
            "no message from the gate in {LOADED:?}; the gate: {}",
            refusals(gate)
        );
    };
    let bye = msg.starts_with("BYE ");
    if msg.starts_with("INVITE ") {
        ua::send(ws, &ua::answer(&msg, "200 OK", host, ua::SDP)).await;
    } else if bye {
        ua::send(ws, &ua::answer(&msg, "200 OK", host, "")).await;
    }
    (msg, bye)
}

/// Kamailio registrars on `.11` and `.12` of `net` (sg-0, sg-1).
fn registrars(net: (u8, u8)) -> Vec<KamailioHandle> {
    let cfg = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kamailio/registrar.cfg");
    [11, 12]
        .map(|h| {
            Kamailio::new()
                .config(cfg.clone())
                .listen(SocketAddr::new(ip(net, h), 5060))
                .ready_timeout(LOADED)
                .start()
                .expect("kamailio starts")
        })
        .into()
}

/// Opens carol's WebSocket to the gate of `net` and REGISTERs her; the
/// connection and the sg the gate counts her registration on.
async fn register_carol(net: (u8, u8), gate: &Node) -> (ua::Ws, usize) {
    let gw = SocketAddr::new(ip(net, 1), 5080);
    let mut ws = ua::open(gw, "/", Some("sip"), Some(ORIGIN), None)
        .await
        .expect("upgrade accepted");
    ua::send(&mut ws, &ua::register("carol", "c1", 1, 600)).await;
    let ok = browser_step(&mut ws, "c1", gate).await.0;
    assert!(ok.starts_with("SIP/2.0 200"), "REGISTER answered: {ok}");
    assert!(
        ok.contains("Via: SIP/2.0/WS c1.invalid"),
        "the client's own Via comes back on top: {ok}"
    );
    match wait_registrations(gate, |n| n.iter().sum::<u64>() == 1) {
        [1, 0] => (ws, 0),
        [0, 1] => (ws, 1),
        other => panic!("one registration on one sg: {other:?}"),
    }
}

/// A SIPp caller placing one call to carol at `sg`, held `hold_ms`
/// before its re-INVITE.
fn caller(net: (u8, u8), sg: SocketAddr, cid: &str, hold_ms: u64) -> SippHandle {
    Sipp::new(Scenario::repo("uac_call"))
        .local_ip(ip(net, 50))
        .remote(sg)
        .service("carol")
        .calls(1)
        .duration(Duration::from_millis(hold_ms))
        .timeout(Duration::from_secs(30))
        .arg("-cid_str")
        .arg(cid)
        .spawn()
        .unwrap()
}

/// Waits for `call` to end and asserts its one call went well.
async fn ended_well(call: SippHandle, what: &str) {
    let report = tokio::task::spawn_blocking(move || call.wait(Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap();
    assert_all_ok(what, &report, 1);
}

/// R-WS-2 with R-SG-4 through the real binaries: a WebSocket subscriber
/// registered on sg X is in a call when X's server is drained (`ringsync
/// profile activate`). The call stays up over the same connection (the
/// caller's re-INVITE and BYE arrive and are answered); the subscriber's
/// re-REGISTER is balanced to the other sg with the same Path, and a new
/// call through that sg reaches it on the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_ws_2_a_drained_sg_keeps_the_ws_call_and_the_reregister_moves_with_its_flow() {
    let net = (43, 5);
    let dir = two_sg_site(net);
    let site = dir.path().join("site.toml");
    let kams = registrars(net);
    let mut gate = Node::gate(&site)
        .admin(SocketAddr::new(ip(net, 1), 9091))
        .start()
        .unwrap();
    gate.wait_ready().unwrap();
    let (mut ws, from) = register_carol(net, &gate).await;
    let to = 1 - from;

    // A call through sg X, held 3 s before its re-INVITE.
    let call = caller(net, kams[from].addr(), "ws-drain-1-%u@sip-gate-test", 3000);
    let (invite, _) = browser_step(&mut ws, "c1", &gate).await;
    assert!(invite.starts_with("INVITE "), "{invite}");
    let (ack, _) = browser_step(&mut ws, "c1", &gate).await;
    assert!(ack.starts_with("ACK "), "{ack}");

    cli_drain(&site, gate.admin(), &format!("srv-{from}"), LOADED);

    // The re-REGISTER goes to the other sg; the call goes on meanwhile.
    ua::send(&mut ws, &ua::register("carol", "c1", 2, 600)).await;
    let mut registered = false;
    let mut ended = false;
    while !(registered && ended) {
        let (msg, bye) = browser_step(&mut ws, "c1", &gate).await;
        if msg.starts_with("SIP/2.0 ") {
            assert!(
                msg.starts_with("SIP/2.0 200") && msg.contains("CSeq: 2 REGISTER"),
                "the re-REGISTER answered: {msg}"
            );
            registered = true;
        }
        ended |= bye;
    }
    ended_well(call, "the call through the drained sg").await;
    let after = wait_registrations(&gate, |n| n[to] == 1);
    assert_eq!(after[to], 1, "the re-REGISTER went to sg-{to}: {after:?}");

    // The other sg reaches the subscriber through the same connection.
    let call = caller(net, kams[to].addr(), "ws-drain-2-%u@sip-gate-test", 100);
    while !browser_step(&mut ws, "c1", &gate).await.1 {}
    ended_well(call, "the call through the other sg").await;
    assert_eq!(
        metric(&gate, "sipgate_ws_connections"),
        1.0,
        "one connection all along"
    );
    gate.stop(T);
    for k in kams {
        k.stop();
    }
}
