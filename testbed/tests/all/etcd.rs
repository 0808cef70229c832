//! The etcd launcher against the real `etcd` (Debian `etcd-server`): a
//! three-member cluster forms, survives its leader's crash, elects another
//! leader, takes the member back, and stops and starts as a whole.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use testbed::http::get_ok as http_get;
use testbed::metrics::Metrics;
use testbed::Etcd;

fn ips(net: u8) -> Vec<IpAddr> {
    (11..=13)
        .map(|h| format!("127.0.{net}.{h}").parse().unwrap())
        .collect()
}

#[test]
fn three_members_survive_a_leader_crash_and_a_full_stop() {
    let mut etcd = Etcd::cluster(&ips(41)).expect("cluster starts");
    assert_eq!(etcd.endpoints().len(), 3);
    let leader = etcd.leader().expect("a leader");

    etcd.kill(leader);
    assert!(!etcd.is_running(leader));
    assert!(http_get(etcd.client_addr(leader), "/health").is_none());
    let t0 = Instant::now();
    let next = loop {
        if let Some(l) = etcd.leader() {
            break l;
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "no new leader");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_ne!(next, leader);
    etcd.start_member(leader).expect("member rejoins");
    assert!(etcd.is_running(leader));

    etcd.stop();
    assert!((0..3).all(|i| !etcd.is_running(i)));
    assert!(etcd.leader().is_none());
    etcd.start()
        .expect("whole cluster starts again on its data");
    assert!(etcd.leader().is_some());
    let m = etcd.metrics(0).expect("metrics");
    assert_eq!(Metrics::new(m).total("etcd_server_has_leader"), Some(1.0));
}
