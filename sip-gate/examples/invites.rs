//! Handles N new INVITEs (default 100000) through the routing core and
//! prints the time per message: a fixed workload for instruction counts,
//! which the shared machines measure exactly where wall time is noisy.
//!
//! ```console
//! $ cargo build --release -p sip-gate --example invites
//! $ valgrind --tool=callgrind target/release/examples/invites 20000
//! $ callgrind_annotate --inclusive=yes callgrind.out.* | grep 'Core::handle \['
//! ```

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use ringsync::config::SiteConfig;
use ringsync::state::DrainState;
use sip_gate::{Action, Core, Inbound};

#[path = "../benches/common/mod.rs"]
mod common;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let config =
        Arc::new(SiteConfig::from_str_at(&common::site(), Path::new("bench.toml")).expect("site"));
    let core = Core::new(config.clone(), DrainState::new(config)).expect("core");
    let inbound = Inbound::Udp {
        listener: 0,
        peer: "203.0.113.10:40000".parse().expect("address"),
    };
    let msgs: Vec<Bytes> = (0..n).map(common::invite).collect();
    let (now, start) = (Instant::now(), Instant::now());
    let sent = msgs
        .into_iter()
        .filter(|m| matches!(core.handle(inbound, m.clone(), now), Action::Send(..)))
        .count();
    let per = start.elapsed() / u32::try_from(n.max(1)).unwrap_or(u32::MAX);
    eprintln!("{sent} of {n} forwarded, {per:?} per message");
}
