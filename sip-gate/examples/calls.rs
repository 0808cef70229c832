//! Handles N whole calls (default 20000) through the routing core, five
//! messages each (INVITE, its 200, ACK, BYE, its 200), prepared beforehand:
//! routing plus the work book's accounting of a call, as a fixed workload
//! for instruction counts (docs/benchmarks.md).
//!
//! ```console
//! $ cargo build --release -p sip-gate --example calls
//! $ valgrind --tool=callgrind target/release/examples/calls 10000
//! $ callgrind_annotate --inclusive=yes callgrind.out.* | grep 'calls::play'
//! ```
//!
//! `play` is the measured part: the messages are made beforehand by a second
//! core, whose cost is not in it. The gate's Prometheus recorder is
//! installed, as in the binary, so what the metrics cost is counted too.

use std::time::Instant;

use sip_gate::{Action, Core, Inbound};

#[path = "../benches/common/mod.rs"]
mod common;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("metrics recorder");
    let (core, scratch, inbound) = common::cores();
    let now = Instant::now();
    let calls: Vec<_> = (0..n)
        .map(|i| common::call_messages(&scratch, i, inbound, now))
        .collect();
    if std::env::args().nth(2).as_deref() == Some("cold") {
        return cold(&core, calls, now);
    }
    let start = Instant::now();
    let sent = play(&core, calls, now);
    let per = start.elapsed() / u32::try_from(5 * n.max(1)).unwrap_or(u32::MAX);
    let up: u64 = (0..3).map(|i| core.work().get(i).dialogs).sum();
    eprintln!(
        "{sent} of {} forwarded, {per:?} per message, {up} calls left up",
        5 * n
    );
}

/// Feeds every call's messages to `core`; how many it sent on.
#[inline(never)]
fn play(core: &Core, calls: Vec<Vec<(Inbound, bytes::Bytes)>>, now: Instant) -> usize {
    let mut sent = 0;
    for msgs in calls {
        for (from, m) in msgs {
            sent += usize::from(matches!(core.handle(from, m, now), Action::Send(..)));
        }
    }
    sent
}

/// MiB written between two messages in `cold` mode unless the third
/// argument says otherwise: several times a core's L2, as SIPp and the
/// kernel run between two datagrams at 1000 calls/s.
const EVICT_MIB: usize = 32;

/// `calls N cold`: each message meets caches another program has used (the
/// gate's case at low rates, when it sleeps between datagrams); prints the
/// median and 90th percentile time of one `handle`, eviction excluded.
fn cold(core: &Core, calls: Vec<Vec<(Inbound, bytes::Bytes)>>, now: Instant) {
    let mib = std::env::args()
        .nth(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(EVICT_MIB);
    let mut junk = vec![0u8; mib << 20];
    let mut times = Vec::new();
    for msgs in calls {
        for (from, m) in msgs {
            for b in junk.iter_mut().step_by(64) {
                *b = b.wrapping_add(1);
            }
            std::hint::black_box(&junk);
            let t = Instant::now();
            std::hint::black_box(core.handle(from, m, now));
            times.push(t.elapsed());
        }
    }
    times.sort();
    let at = |q: usize| {
        times
            .get(times.len() * q / 100)
            .copied()
            .unwrap_or_default()
    };
    eprintln!("cold: median {:?}, p90 {:?} per message", at(50), at(90));
}
