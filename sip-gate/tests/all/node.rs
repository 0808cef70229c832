//! What the `sip-gate` binary runs around its gate, called in-process
//! (`sip_gate::node`): the work snapshot over a graceful restart (R-ST-3)
//! and the stop sequence (R-GW-1), on gates bound to 127.24.7.0/24 and
//! 127.24.8.0/24.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ringsync::signals::{Signal, Signals};
use ringsync::state::DrainState;
use ringsync::work::RunInfo;
use sip_gate::{node, Gate, Phase};
use tokio_util::sync::CancellationToken;

use crate::common::{balance_sg, config, ip, site, start_gate, start_gate_restarted};

/// The snapshot is written only after a clean stop, read once, and makes a
/// restarted gate know its work again; one that cannot be read is left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_st_3_the_work_snapshot_is_saved_when_clean_and_restored_once() {
    let net = (24, 7);
    let cfg = config(&site(net, 1, &balance_sg(net)));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("work.json");

    let (gate, _) = start_gate(cfg.clone()).await;
    node::save_snapshot(gate.core(), Some(&path), false);
    assert!(!path.exists(), "written although the stop was not clean");
    node::save_snapshot(gate.core(), Some(&path), true);
    assert!(path.exists(), "not written after a clean stop");
    assert!(gate.shutdown(Duration::from_secs(5)).await);

    let (next, _) = start_gate_restarted(cfg.clone()).await;
    assert!(
        next.core().work().unknown(Instant::now()).is_some(),
        "a restarted gate cannot vouch for its work"
    );
    let snapshot = node::take_snapshot(&path);
    assert!(snapshot.is_some(), "the snapshot written is read");
    assert!(!path.exists(), "read once");
    assert!(node::take_snapshot(&path).is_none());
    node::restore_snapshot(next.core(), snapshot);
    assert_eq!(
        next.core().work().unknown(Instant::now()),
        None,
        "restored: knows as before the restart"
    );
    assert!(next.shutdown(Duration::from_secs(5)).await);

    std::fs::write(&path, "not a snapshot").unwrap();
    assert!(node::take_snapshot(&path).is_none());
    let (blind, _) = start_gate_restarted(cfg).await;
    node::restore_snapshot(blind.core(), None);
    assert!(blind.core().work().unknown(Instant::now()).is_some());
    assert!(blind.shutdown(Duration::from_secs(5)).await);
}

/// The stop sequence: the gate stops (nothing in flight: at once), its
/// admin endpoint then closes, and the work snapshot is written last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_gw_1_the_stop_sequence_stops_the_gate_closes_its_admin_and_saves_its_work() {
    let net = (24, 8);
    let cfg = config(&site(net, 1, &balance_sg(net)));
    let shutdown = CancellationToken::new();
    let drain = DrainState::new(Arc::new(cfg.clone()));
    let gate = Gate::start(cfg, drain, shutdown.clone()).await.unwrap();
    gate.core().work().assume_fresh_site();
    let admin_at = std::net::SocketAddr::new(ip(net, 1), 0);
    let admin = node::serve_admin(
        &gate,
        admin_at,
        Some("gate-a".into()),
        RunInfo::this_process("test", 7, None),
        None,
        &shutdown,
    )
    .await
    .unwrap();
    let addr = admin.addr;
    assert_eq!(
        (admin.node.name.as_str(), admin.node.started_ms),
        ("gate-a", 7)
    );
    let ready = tokio::task::spawn_blocking(move || testbed::http::get(addr, "/readyz"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ready.status, 200, "{ready:?}");

    let core = gate.core().clone();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("work.json");
    // No second signal can come: the drain ends the stop.
    let mut none = Signals::new(&[]).unwrap();
    let started = Instant::now();
    let clean = node::shut_down(
        gate,
        admin,
        None,
        &mut none,
        Signal::Terminate,
        Duration::from_secs(10),
        Some(&path),
    )
    .await;
    assert!(clean, "threads and tasks ended in time");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "nothing in flight: {:?}",
        started.elapsed()
    );
    assert_eq!(core.lifecycle().phase(), Phase::Stopped);
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "the admin endpoint still accepts connections"
    );
    assert!(path.exists(), "no work snapshot after a clean stop");
    assert!(node::take_snapshot(&path).is_some());
}
