//! R-GW-3's failure list: `kill -9` of the old run between the new run's
//! `Ready` and its `Done` (the new run holds there:
//! `SIP_GATE_UPGRADE_HOLD_MS`) loses at most what a crash of the old run
//! would: the new run serves alone, once, on the listening sockets it took
//! (it does not start reading them twice), and what the old run had passed
//! before it died is the new run's, a plain TCP connection included.
//!
//! On `127.139.15.0/24`: the gate's listener and admin on `.1`, the sg
//! (SIPp) on `.11`, callers on `.21`, the TCP client on `.100`.

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::common::ip;
use crate::upgrade::{calls_pass, gate, new_run_ready, site, NewRun};

#[test]
fn r_gw_3_the_old_run_killed_between_ready_and_done_leaves_the_new_serving() {
    let net = (139, 15);
    let (_dir, site, listener, admin) = site(net, false);
    let mut old = gate(&site, admin, Some(("SIP_GATE_UPGRADE_HOLD_MS", "1500")));
    // A plain TCP connection open before: the old run passes its socket.
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::new(ip(net, 100), 0).into()).unwrap();
    s.connect(&listener.into()).unwrap();
    let client = TcpStream::from(s);
    old.signal("USR2");
    let pid = new_run_ready(&old);
    let _new = NewRun(pid as u32);
    // The old run passes the state and the sockets within milliseconds of
    // the `Ready`, then waits for the `Done`; the new run holds 1.5 s
    // before it reads any of it. The old one dies in between.
    std::thread::sleep(Duration::from_millis(500));
    old.signal("KILL");
    assert!(old.wait_exit(Duration::from_secs(5)).is_some());
    let line = "upgrade: the old run went before it was done: serving alone";
    old.wait_for("the new run to serve alone", Duration::from_secs(10), |g| {
        g.log().contains(line).then_some(())
    })
    .unwrap();
    let log = old.log();
    assert!(
        log.contains("took over from the running gate: serving"),
        "{log}"
    );
    assert!(!log.contains("Error: taking over"), "{log}");
    assert_eq!(
        testbed::http::get(admin, "/readyz").map(|r| r.status).ok(),
        Some(200)
    );
    // It reads the listeners once: one UDP worker thread, not two.
    let workers = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "udp-0-0")
        .count();
    assert_eq!(workers, 1, "{log}");
    calls_pass(net, listener, 10);
    // What the old run had passed before it died: the connection is open.
    client.set_nonblocking(true).unwrap();
    let r = (&client).read(&mut [0u8; 1]);
    assert!(
        matches!(&r, Err(e) if e.kind() == ErrorKind::WouldBlock),
        "the client's connection: {r:?}\n{log}"
    );
}
