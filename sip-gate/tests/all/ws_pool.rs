//! R-WS-3 through the real binaries: a ws pool listener of the `sip-gate`
//! binary passes WebSocket connections whole to two `ws` instances (small
//! WebSocket echo servers in the test, each on its own address, answering
//! every message with its own name in front), and the real `ringsync` CLI
//! drains one of their servers: new connections go to the other instance,
//! the open ones keep passing messages, and `ringsync status` reads the
//! drained instance `draining` while they are open and `drained` once the
//! test closes them.
//!
//! An instance that refuses the connect: the client gets 502, the instance
//! is held unreachable (status says so) and the next connection goes to
//! the other one.
//!
//! Addresses: `127.43.10.0/24` (and `127.43.13.0/24` for the refused
//! connect): the gate on `.1` (ws pool on 8443, admin 9091), ws-0 on
//! `.21:8080`, ws-1 on `.22:8080`, clients from `.101` onward (the pool's
//! key is the client's address).
//!
//! `ws_upstream = "wss"` (the pool reaching its instances over TLS) is in
//! `ws/pool_tls.rs`, on `127.88.N.0/24`.

mod pool_tls;

use crate::tls::peer;
use crate::ws::ua;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{ip, ringsync, status_of};
use futures::{SinkExt, StreamExt};
use serde_json::Value;
use testbed::bins::{BinDir, Node};
use testbed::fixture::{Mode, SiteFile};
use testbed::wait_for;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::{Error, Message};
use tokio_tungstenite::WebSocketStream;

const NET: (u8, u8) = (43, 10);
const T: Duration = Duration::from_secs(15);

type Ws = WebSocketStream<TcpStream>;

/// Two servers with a `ws` instance each, the pool listener in front.
fn site(dir: &Path, net: (u8, u8)) -> PathBuf {
    let [g, w0, w1] = [1, 21, 22].map(|h| ip(net, h));
    SiteFile::new("ws-pool")
        .admin(SocketAddr::new(g, 9091), SocketAddr::new(g, 9092))
        .servers(&["srv-0", "srv-1"])
        .pool(
            "ws",
            "ws",
            &[
                ("0", SocketAddr::new(w0, 8080)),
                ("1", SocketAddr::new(w1, 8080)),
            ],
        )
        .listener(
            "web",
            SocketAddr::new(g, 8443),
            Mode::WsPool("ws"),
            "subscriber",
            "transports = [\"ws\"]\nws_path = \"/sip\"",
        )
        .write(dir)
}

/// A `ws` instance: accepts WebSocket upgrades (answering the `sip`
/// subprotocol when asked, as a SIP WebSocket server would) and echoes
/// every text message as `NAME:text`, until the test ends.
async fn echo_server(name: &'static str, at: SocketAddr) {
    let listener = TcpListener::bind(at).await.expect("echo server binds");
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if let Message::Text(t) = msg {
                        let back = Message::text(format!("{name}:{t}"));
                        if ws.send(back).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
}

/// A client connection through the gate of `net` from `from`, or the
/// HTTP status the upgrade was refused with.
async fn try_open(net: (u8, u8), from: IpAddr) -> Result<Ws, u16> {
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::new(from, 0)).unwrap();
    let tcp = sock
        .connect(SocketAddr::new(ip(net, 1), 8443))
        .await
        .unwrap();
    let url = format!("ws://{}:8443/sip", ip(net, 1));
    match tokio_tungstenite::client_async(url, tcp).await {
        Ok((ws, resp)) => {
            assert_eq!(resp.status(), 101);
            Ok(ws)
        }
        Err(Error::Http(r)) => Err(r.status().as_u16()),
        Err(e) => panic!("the upgrade through the gate: {e}"),
    }
}

/// A client connection through the gate from `from`.
async fn open(from: IpAddr) -> Ws {
    try_open(NET, from)
        .await
        .expect("the upgrade passes through the gate to an instance")
}

/// Sends `text` and returns the name of the instance that echoed it.
async fn which(ws: &mut Ws, text: &str) -> String {
    ws.send(Message::text(text)).await.unwrap();
    let msg = tokio::time::timeout(T, ws.next())
        .await
        .expect("an echo in time")
        .expect("the connection is open")
        .expect("a message");
    let back = msg.into_text().unwrap().to_string();
    let (name, echoed) = back.split_once(':').expect("NAME:text");
    assert_eq!(echoed, text, "the bytes pass unchanged both ways");
    name.to_owned()
}

/// Polls `ringsync status` until `id` reads `state`; that instance.
fn wait_state(site: &Path, id: &str, state: &str) -> Value {
    wait_for(&format!("{id} {state}"), T, || {
        Some(status_of(site, id)).filter(|i| i["state"] == state)
    })
    .unwrap()
}

/// The open connections the gate counts on each instance (R-ST-2).
fn connections(gate: &Node) -> [u64; 2] {
    let r = gate.work().expect("a work report");
    ["ws-0", "ws-1"].map(|id| r.instances[id].counts.connections)
}

/// R-WS-3 (with R-WS-1, R-ST-2, R-ST-3) through the `sip-gate` binary and
/// the `ringsync` CLI: clients from several addresses spread over both `ws`
/// instances; `ringsync profile activate` drains srv-0; every new
/// connection (from the same addresses) then goes to ws-1, the connections
/// open on ws-0 keep passing messages, `ringsync status` reads ws-0
/// `draining` with their count while they are open and `drained` once
/// they are closed, and ws-1 stays `up`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_ws_3_a_drained_ws_takes_no_new_connections_and_keeps_its_open_ones() {
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path(), NET);
    echo_server("ws-0", SocketAddr::new(ip(NET, 21), 8080)).await;
    echo_server("ws-1", SocketAddr::new(ip(NET, 22), 8080)).await;
    let mut gate = Node::gate(&site)
        .admin(SocketAddr::new(ip(NET, 1), 9091))
        .start()
        .unwrap();
    gate.wait_ready().unwrap();

    // Clients until both instances hold some (the ring by address).
    let mut open_on: [Vec<(Ws, IpAddr)>; 2] = [Vec::new(), Vec::new()];
    for h in 101..=130u8 {
        let from = ip(NET, h);
        let mut ws = open(from).await;
        let on = which(&mut ws, "hello").await;
        let i = usize::from(on == "ws-1");
        open_on[i].push((ws, from));
        if open_on.iter().all(|v| v.len() >= 3) {
            break;
        }
    }
    let n = open_on.each_ref().map(|v| v.len() as u64);
    assert!(n[0] >= 3 && n[1] >= 3, "the ring spreads clients: {n:?}");
    assert_eq!(
        connections(&gate),
        n,
        "each open connection is its instance's work"
    );
    assert_eq!(status_of(&site, "ws-0")["state"], "up");

    ringsync(
        &site,
        &["profile", "create", "--name", "m", "--server", "srv-0"],
    );
    ringsync(&site, &["profile", "activate", "m"]);
    wait_for("the gate to apply the drain", T, || {
        gate.work().filter(|r| r.revision >= 2)
    })
    .unwrap();
    let draining = wait_state(&site, "ws-0", "draining");
    assert_eq!(draining["counts"]["connections"], n[0], "{draining}");

    // New connections, from every address the drained instance had too:
    // all on ws-1.
    let mut fresh = Vec::new();
    for (_, from) in open_on.iter().flatten() {
        let mut ws = open(*from).await;
        assert_eq!(which(&mut ws, "new").await, "ws-1", "from {from}");
        fresh.push(ws);
    }
    // The open ones stay where they are and keep passing messages.
    for (i, name) in ["ws-0", "ws-1"].iter().enumerate() {
        for (ws, _) in open_on[i].iter_mut() {
            assert_eq!(which(ws, "still there").await, *name);
        }
    }
    assert_eq!(connections(&gate), [n[0], n[1] + fresh.len() as u64]);
    assert_eq!(status_of(&site, "ws-0")["state"], "draining");

    // The test closes ws-0's connections: drained; ws-1 stays up.
    for (mut ws, _) in std::mem::take(&mut open_on[0]) {
        ws.close(None).await.unwrap();
        // Until the far end has closed too.
        while let Ok(Some(Ok(_))) = tokio::time::timeout(T, ws.next()).await {}
    }
    let drained = wait_state(&site, "ws-0", "drained");
    assert_eq!(drained["work"], 0, "{drained}");
    assert_eq!(status_of(&site, "ws-1")["state"], "up");
    gate.stop(Duration::from_secs(10));
}

/// A `ws` instance's health in the gate's `/v1/work` and in `ringsync
/// status` (its health and state): one view (issue 37, R-ST-4). Returns
/// the health.
fn same_health(gate: &Node, site: &Path, id: &str) -> Value {
    let work = gate.work().expect("a work report");
    let reported = serde_json::to_value(work.instances[id].health).unwrap();
    let status = status_of(site, id);
    assert_eq!(status["health"], reported, "{id}: /v1/work and status");
    let state = match reported.as_str() {
        Some("up") => "up",
        Some("down") => "down",
        _ => "unknown",
    };
    assert_eq!(status["state"], state, "{id}: {status}");
    reported
}

/// R-WS-3 with the hold of an unreachable instance (R-AA-1): nothing
/// listens at ws-0's address. The first client the ring gives ws-0 gets
/// `502` (counted as `upstream_failed`), ws-0 is held unreachable over
/// tcp, which `ringsync status` shows, and the next connection from the
/// same address goes to ws-1.
///
/// R-ST-4 (issue 37): nothing probes a `ws`; the gate knows it by its
/// connects. Before any, both are `unknown` in `/v1/work` and in `ringsync
/// status` (before, status read them `up`); once reached, ws-1 is `up`;
/// ws-0, held unreachable, `down` in both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_ws_3_an_instance_that_refuses_the_connect_is_passed_over() {
    // Built first: the hold ([dns] failover_hold_s, 30 s) must not pass
    // while cargo builds a stale `ringsync` for the status below.
    BinDir::locate().program("ringsync").unwrap();
    let net = (43, 13);
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path(), net);
    echo_server("ws-1", SocketAddr::new(ip(net, 22), 8080)).await;
    let mut gate = Node::gate(&site)
        .admin(SocketAddr::new(ip(net, 1), 9091))
        .start()
        .unwrap();
    gate.wait_ready().unwrap();
    for id in ["ws-0", "ws-1"] {
        assert_eq!(
            same_health(&gate, &site, id),
            "unknown",
            "{id} never reached"
        );
    }

    let mut refused = None;
    for h in 101..=140u8 {
        match try_open(net, ip(net, h)).await {
            Ok(mut ws) => assert_eq!(which(&mut ws, "hi").await, "ws-1"),
            Err(status) => {
                assert_eq!(status, 502, "the instance refused the connect");
                refused = Some(ip(net, h));
                break;
            }
        }
    }
    let from = refused.expect("the ring gives ws-0 some of 40 addresses");
    let mut ws = try_open(net, from).await.expect("passed to ws-1 now");
    assert_eq!(which(&mut ws, "again").await, "ws-1");
    let failed = r#"sipgate_ws_handshakes_total{result="upstream_failed"}"#;
    assert_eq!(gate.metric(failed).unwrap(), 1.0);
    let ws0 = status_of(&site, "ws-0");
    assert_eq!(ws0["unreachable"][0]["transport"], "tcp", "{ws0}");
    assert_eq!(same_health(&gate, &site, "ws-0"), "down");
    assert_eq!(same_health(&gate, &site, "ws-1"), "up");
    gate.stop(Duration::from_secs(10));
}
