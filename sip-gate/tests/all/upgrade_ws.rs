//! R-GW-3 with browsers (RFC 7118) over `ws` and over `wss`: two
//! subscribers registered before the upgrade (Kamailio the registrar
//! behind), each on its own WebSocket, each with a call set up before the
//! upgrade. After it, the first call is ended by the caller (its re-INVITE
//! and BYE reach the browser), the second by the browser (its BYE reaches
//! the caller); then a new call from the registrar's side reaches the first
//! browser through its flow, on the same WebSocket (the client's socket
//! never closed). A re-REGISTER begun in fragments before the upgrade is
//! finished after it and answered. Over `ws` the connections move to the new run like plain
//! TCP ones (their sockets, the bytes read and not yet framed): the old run
//! keeps none and exits at once. Over `wss` the old run keeps them (TLS
//! cannot leave its process) and the new run decides for them.
//!
//! On `127.139.16.0/24` (`ws`) and `127.139.17.0/24` (`wss`): the gate's
//! listener on `.1:5080`, Kamailio on `.11`, the SIPp callers on `.50` and `.51`.

use std::time::Duration;

use crate::common::ip;
use crate::upgrade::{logged, took_over, upgrade};
use crate::ws::{ua, Site};
use futures::SinkExt;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::Message;

const T: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_gw_3_ws_subscribers_keep_their_connections_and_calls() {
    across_an_upgrade((139, 16), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_gw_3_wss_subscribers_keep_their_connections_and_calls() {
    across_an_upgrade((139, 17), true).await;
}

async fn across_an_upgrade(net: (u8, u8), secure: bool) {
    let site = Site::new(net, secure);
    let kam = site.kamailio();
    let mut old = site.gate();
    let (mut alice, mut bob) = (site.open().await, site.open().await);
    for (ws, user, host) in [(&mut alice, "alice", "a1"), (&mut bob, "bob", "b1")] {
        ua::send(ws, &ua::register(user, host, 1, 600)).await;
        let ok = ua::recv(ws, T).await.expect("a REGISTER response");
        assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    }
    // Alice's call: up for 3 s, the caller ends it (after the upgrade).
    let first = site
        .caller("uac_call", "alice", "upgrade-ws-1-%u@sip-gate-test")
        .duration(Duration::from_secs(3))
        .spawn()
        .unwrap();
    let alice_side = tokio::spawn(async move {
        ua::answer_call(&mut alice, "a1", Duration::from_secs(10)).await;
        alice
    });
    // Bob's call: up until bob hangs up (after the upgrade).
    let second = site
        .caller(
            "uac_call_callee_hangs_up",
            "bob",
            "upgrade-ws-2-%u@sip-gate-test",
        )
        // Beside the first caller's SIPp.
        .local_ip(ip(net, 51))
        .arg("-key")
        .arg("uri_params")
        .arg("")
        .spawn()
        .unwrap();
    let Some(invite) = ua::recv(&mut bob, T).await else {
        let r = tokio::task::spawn_blocking(move || second.wait(Duration::from_secs(30)));
        panic!("bob's INVITE: {:?}\n{}", r.await, old.log());
    };
    assert!(invite.starts_with("INVITE "), "{invite}");
    ua::send(&mut bob, &ua::answer(&invite, "200 OK", "b1", ua::SDP)).await;
    let ack = ua::recv(&mut bob, T).await.expect("bob's ACK");
    assert!(ack.starts_with("ACK "), "{ack}");

    // Bob's re-REGISTER begun before the upgrade, in fragments: its
    // first part goes now, the rest after (what the old run had framed of
    // it goes along with the connection, or stays with the keeper).
    let rereg = ua::register("bob", "b1", 2, 600);
    let (first_part, rest) = rereg.split_at(rereg.len() / 2);
    fragment(&mut bob, first_part, OpCode::Data(Data::Text), false).await;

    let admin = old.admin();
    let site_file = site.path();
    let new = tokio::task::spawn_blocking(move || upgrade(&site_file, admin))
        .await
        .unwrap();
    if secure {
        assert_eq!(took_over(&old, "relayed"), Some(2));
    } else {
        // R-GW-3: both plain WebSockets moved, none is relayed, and the
        // old run holds none: it keeps nothing and ends.
        assert_eq!(took_over(&old, "relayed"), Some(0));
        assert_eq!(took_over(&old, "connections"), Some(2));
        let line = "handed over: keeping";
        old.wait_for(line, T, |g| g.log().contains(line).then_some(()))
            .unwrap();
        assert_eq!(logged(&old.log(), line, "kept"), Some(0), "{}", old.log());
        assert!(
            old.wait_exit(T).is_some(),
            "the old run ends: {}",
            old.log()
        );
    }
    // Alice's call is still up: its re-INVITE and BYE come after.
    assert!(!alice_side.is_finished());

    fragment(&mut bob, rest, OpCode::Data(Data::Continue), true).await;
    let ok = ua::recv(&mut bob, T)
        .await
        .expect("a response to the re-REGISTER begun before the upgrade");
    assert!(
        ok.starts_with("SIP/2.0 200") && ok.contains("CSeq: 2 REGISTER"),
        "{ok}"
    );

    ua::send(&mut bob, &bye_from_callee(&invite, "b1", secure)).await;
    let ok = ua::recv(&mut bob, T)
        .await
        .expect("a response to bob's BYE");
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    for (name, caller) in [("caller-ended", first), ("callee-ended", second)] {
        let r = tokio::task::spawn_blocking(move || caller.wait(Duration::from_secs(30)))
            .await
            .unwrap()
            .unwrap();
        assert!(r.all_ok() && r.successful == 1, "{name}: {r:?}");
    }
    let mut alice = alice_side.await.unwrap();

    // A new call into alice's flow after the upgrade: the same WebSocket.
    let third = site
        .caller("uac_call", "alice", "upgrade-ws-3-%u@sip-gate-test")
        .spawn()
        .unwrap();
    ua::answer_call(&mut alice, "a1", T).await;
    let r = tokio::task::spawn_blocking(move || third.wait(Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap();
    assert!(r.all_ok() && r.successful == 1, "{r:?}");
    // The browsers go: the old run has nothing left and exits (over `ws`
    // it already has).
    drop((alice, bob));
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

/// Sends `part` as one frame of a fragmented message (RFC 6455 5.4).
async fn fragment(ws: &mut ua::Ws, part: &str, op: OpCode, fin: bool) {
    let frame = Frame::message(part.as_bytes().to_vec(), op, fin);
    ws.send(Message::Frame(frame)).await.unwrap();
}

/// The BYE of the browser that answered `invite` (RFC 3261 12.2.1.1: to
/// the caller's Contact, through the route set as recorded, the From and To
/// of the dialog as the callee sees it, `ua::answer`'s tag).
fn bye_from_callee(invite: &str, host: &str, secure: bool) -> String {
    let contact = ua::header(invite, "Contact").unwrap_or_default();
    let target = contact
        .split_once('<')
        .and_then(|(_, r)| r.split_once('>'))
        .map_or(contact, |(uri, _)| uri);
    let routes: String = ua::headers(invite, "Record-Route")
        .iter()
        .map(|r| format!("Route: {r}\r\n"))
        .collect();
    let to = ua::header(invite, "To").unwrap_or_default();
    let from = ua::header(invite, "From").unwrap_or_default();
    let call_id = ua::header(invite, "Call-ID").unwrap_or_default();
    let transport = if secure { "WSS" } else { "WS" };
    format!(
        "BYE {target} SIP/2.0\r\nVia: SIP/2.0/{transport} {host}.invalid;branch=z9hG4bK-bye-{host}\r\n\
         Max-Forwards: 70\r\n{routes}From: {to};tag=ws-{host}\r\nTo: {from}\r\nCall-ID: {call_id}\r\n\
         CSeq: 1 BYE\r\nContent-Length: 0\r\n\r\n"
    )
}
