//! How a WebSocket connection ends (R-WS-2, R-GW-1, issue 37), through the
//! `sip-gate` binary: the gate sends a Close frame before it drops a
//! connection (RFC 6455 7.4.1 codes: 1000 at `[tcp] idle_s`, 1001 when it
//! stops), over `ws` and `wss`; and a client that resets its connection, or
//! closes it without a Close frame, is counted in
//! `sipgate_ws_peer_closes_total`, never as a close frame the gate sent
//! (`sipgate_ws_closes_total`).
//!
//! Addresses: `127.43.14.0/24` (idle, ws), `127.43.15.0/24` (stop),
//! `127.43.16.0/24` (resets), `127.43.17.0/24` (idle, wss).

use std::time::{Duration, Instant};

use std::net::SocketAddr;

use futures::StreamExt;
use testbed::bins::Node;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

use super::{ip, metric, register, ua, Site, ORIGIN, PATH, T};

/// Reads until the connection ends; the Close frame the gate sent, if
/// one came first (a client that reads a Close and then the end of the
/// connection saw a clean close; tungstenite gives `None` on a bare drop).
async fn close_frame(ws: &mut ua::Ws, within: Duration) -> Option<CloseFrame> {
    let end = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(end, ws.next()).await {
            Ok(Some(Ok(Message::Close(f)))) => return f,
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(_))) | Ok(None) => return None,
            Err(_) => panic!("the connection still open after {within:?}"),
        }
    }
}

/// R-WS-2 (idle rule as over TCP): a connection with no message for `[tcp]
/// idle_s` and no registration holding it gets a Close frame 1000 (RFC
/// 6455 7.4.1: a normal closure, nothing went wrong) before the gate drops
/// it, counted; before issue 37 the TCP connection just ended (1006 in a
/// browser).
async fn idle_close(site: &Site) {
    let mut gate = site.gate();
    let mut ws = site.open().await;
    let opened = Instant::now();
    let frame = close_frame(&mut ws, Duration::from_secs(8))
        .await
        .expect("a Close frame before the connection ends");
    assert_eq!(frame.code, CloseCode::Normal, "{frame:?}");
    assert!(
        opened.elapsed() >= Duration::from_millis(1500),
        "closed at idle_s (2 s), not before: {:?}",
        opened.elapsed()
    );
    assert_eq!(
        metric(&gate, r#"sipgate_ws_closes_total{code="1000"}"#),
        1.0
    );
    gate.stop(T);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_ws_2_an_idle_connection_gets_a_close_frame_1000() {
    idle_close(&Site::with((43, 14), false, "idle_s = 2")).await;
}

/// The same over `wss`: the Close frame goes through TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_ws_2_an_idle_wss_connection_gets_a_close_frame_1000() {
    idle_close(&Site::with((43, 17), true, "idle_s = 2")).await;
}

/// R-GW-1 with R-WS-2: SIGTERM to a gate with two WebSocket clients, one
/// registered (Kamailio as the sg), one not: each reads a Close frame 1001
/// (going away) before its connection ends, and the gate exits. The
/// connections stay open while the gate drains (in-dialog requests still
/// reach them): the drain deadline is short here so the REGISTER's
/// transaction does not hold the stop for its RFC 3261 lifetime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_gw_1_a_stopping_gate_sends_its_websocket_clients_close_1001() {
    let site = Site::new((43, 15), false);
    let kam = site.kamailio();
    let mut gate = Node::gate(site.dir.path().join("site.toml"))
        .admin(SocketAddr::new(ip(site.net, 1), 9091))
        .args(["--drain-deadline-s", "2"])
        .start()
        .unwrap();
    gate.wait_ready().unwrap();
    let mut registered = site.open().await;
    register(&mut registered, "carol", "c1").await;
    let mut bare = site.open().await;
    gate.signal("TERM");
    for (what, ws) in [("registered", &mut registered), ("bare", &mut bare)] {
        let frame = close_frame(ws, Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("the {what} client gets a Close frame"));
        assert_eq!(frame.code, CloseCode::Away, "{what}: {frame:?}");
    }
    assert!(
        gate.wait_exit(Duration::from_secs(10)).is_some(),
        "the gate exits: {}",
        gate.log()
    );
    kam.stop();
}

/// A WebSocket to the gate; with `reset`, its socket resets the
/// connection when dropped (SO_LINGER 0) instead of closing it.
async fn open_raw(site: &Site, reset: bool) -> ua::Ws {
    let tcp = TcpStream::connect(site.sip()).await.unwrap();
    if reset {
        socket2::SockRef::from(&tcp)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
    }
    let mut req = format!("ws://{}{PATH}", site.sip())
        .into_client_request()
        .unwrap();
    let h = req.headers_mut();
    h.insert("Sec-WebSocket-Protocol", HeaderValue::from_static("sip"));
    h.insert("Origin", HeaderValue::from_static(ORIGIN));
    let io: Box<dyn ua::Io> = Box::new(tcp);
    tokio_tungstenite::client_async(req, io).await.unwrap().0
}

/// R-WS-2: a client that resets its connection (SO_LINGER 0) and one that
/// closes it without a Close frame are counted under `reset` and `eof` of
/// `sipgate_ws_peer_closes_total`, one that sends a Close frame under
/// `close`; none is a close frame the gate sent: `sipgate_ws_closes_total`
/// stays empty (before issue 37 the bare close counted as 1002).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_ws_2_resets_and_bare_closes_are_counted_as_the_peers() {
    let site = Site::new((43, 16), false);
    let mut gate = site.gate();
    let peer = |how: &str| format!(r#"sipgate_ws_peer_closes_total{{how="{how}"}}"#);
    let wait = |what: &str, series: &str| {
        testbed::wait_for(what, T, || (gate.metric(series).ok()? == 1.0).then_some(())).unwrap()
    };

    let resetting = open_raw(&site, true).await;
    drop(resetting);
    wait("the reset counted", &peer("reset"));

    // A bare close: the TCP connection ends (FIN) with no Close frame.
    let bare = open_raw(&site, false).await;
    drop(bare);
    wait("the bare close counted", &peer("eof"));

    let mut clean = open_raw(&site, false).await;
    clean.close(None).await.unwrap();
    while let Ok(Some(Ok(_))) = tokio::time::timeout(T, clean.next()).await {}
    wait("the clean close counted", &peer("close"));

    let sent = gate.metrics().unwrap();
    let series: Vec<_> = sent
        .series()
        .filter(|(s, _)| s.starts_with("sipgate_ws_closes_total"))
        .collect();
    assert!(series.is_empty(), "no close frame of the gate: {series:?}");
    assert_eq!(metric(&gate, "sipgate_ws_connections"), 0.0);
    gate.stop(T);
}
