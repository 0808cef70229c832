//! The engine drivers measured through the real binaries (R-EX-1): one
//! `ringsync serve` drives two real Kamailio dispatchers and two real
//! HAProxy backends. Per write: the profile write sent to the admin API →
//! all four engines hold it, read from the engines themselves
//! (`dispatcher.list`, `show servers state`, polled every 2 ms). Then
//! Kamailio killed (-9) and started again, with the default `resync_ms`
//! (2000), at spread points of the driver's period: its JSON-RPC answering
//! → the drain re-applied.
//!
//! ```sh
//! cargo bench -p ringsync-ops --bench engines            # 20 writes, 5 restarts
//! cargo bench -p ringsync-ops --bench engines -- 40 3    # writes, restarts
//! ```
//!
//! Addresses: 127.0.89.x (Kamailio), 127.0.90.x and 127.0.91.x (HAProxy).

// The bench takes a part of the tests' helpers.
#[allow(dead_code)]
#[path = "../tests/all/common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::engines::*;
use common::served::{call, local, ok, wait_until, Served};
use common::TestSite;
use testbed::free_port;
use testbed::stats::percentile;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let writes = args.first().copied().unwrap_or(20);
    let restarts = args.get(1).copied().unwrap_or(5);

    let mut kams = Vec::new();
    for host in ["127.0.89.30", "127.0.89.31"] {
        let h = ip(host);
        let sip = SocketAddr::new(h, free_port(h).unwrap());
        let rpc_at = SocketAddr::new(h, free_port(h).unwrap());
        let k = kamailio(sip, rpc_at);
        let handle = start_kamailio(&k, rpc_at);
        kams.push((k, rpc_at, Some(handle)));
    }
    let (hap1, admin1, _, _) = haproxy_site("127.0.90.40");
    let (hap2, admin2, _, _) = haproxy_site("127.0.91.40");
    let engines = [
        kamailio_engine("kam-1", kams[0].1),
        kamailio_engine("kam-2", kams[1].1),
        haproxy_engine("hap-1", &admin1.to_string()),
        haproxy_engine("hap-2", &admin2.to_string()),
    ]
    .concat()
    .replace("resync_ms = 500\n", "");
    let site = TestSite::with_text(&base_site(&engines));
    ok(&local(
        &site,
        &[
            "profile", "create", "--name", "maint-a", "--server", "srv-a",
        ],
    ));
    let served = Served::start(&site, &[]);
    wait_until(Duration::from_secs(10), || {
        let st = status_json(&served.url);
        ["kam-1", "kam-2", "hap-1", "hap-2"]
            .iter()
            .all(|n| engine(&st, n)["revision"].is_u64())
    });
    let rpcs = [kams[0].1, kams[1].1];
    let admins = [admin1, admin2];
    let held = |drain: bool| {
        rpcs.iter()
            .all(|r| flags(*r, UAS_A).is_some_and(|f| f.starts_with('D') == drain))
            && admins
                .iter()
                .all(|a| admin_bits(*a, "be_sg", "sg-a").is_some_and(|b| (b & 8 != 0) == drain))
    };

    let mut applied = Vec::new();
    for i in 0..writes {
        let drain = i % 2 == 0;
        let what = if drain { "activate" } else { "deactivate" };
        let t0 = Instant::now();
        let (code, body) = call(
            served.addr,
            "POST",
            &format!("/v1/profiles/maint-a/{what}"),
            None,
            "",
        );
        assert_eq!(code, 200, "{body}");
        while !held(drain) {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "write {i} not applied within 5 s"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        applied.push(t0.elapsed().as_secs_f64() * 1000.0);
        std::thread::sleep(Duration::from_millis(50));
    }

    // Restarts while sg-a drains.
    let (code, _) = call(
        served.addr,
        "POST",
        "/v1/profiles/maint-a/activate",
        None,
        "",
    );
    assert!(code == 200, "activate: {code}");
    wait_until(Duration::from_secs(2), || held(true));
    let mut reapplied = Vec::new();
    for r in 0..restarts {
        // Kill at different points of the driver's 2 s resync period: right
        // after a correction the next read is a whole period away.
        std::thread::sleep(Duration::from_millis((r as u64 * 700) % 2000));
        let (k, rpc_at, handle) = &mut kams[0];
        handle.take().unwrap().kill();
        let h = k.clone().start().unwrap();
        while rpc(*rpc_at, "dispatcher.list").is_none() {
            std::thread::sleep(Duration::from_millis(2));
        }
        let up = Instant::now();
        while !flags(*rpc_at, UAS_A).is_some_and(|f| f.starts_with('D')) {
            assert!(
                up.elapsed() < Duration::from_secs(10),
                "not re-applied within 10 s"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        reapplied.push(up.elapsed().as_secs_f64() * 1000.0);
        *handle = Some(h);
    }

    let row = |name: &str, mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let q = |x| percentile(&v, x).unwrap_or(f64::NAN);
        println!(
            "| {name} | {} | {:.1} | {:.1} | {:.1} |",
            v.len(),
            q(0.5),
            q(0.99),
            q(1.0)
        );
    };
    println!("| figure | n | p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|");
    row("profile write → 2 Kamailio + 2 HAProxy applied", applied);
    row(
        "Kamailio kill -9 + start → drain re-applied (resync 2 s)",
        reapplied,
    );
    drop((hap1, hap2));
}
