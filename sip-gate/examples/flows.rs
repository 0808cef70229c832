//! Handles N messages (default 100000) of one kind through the routing core
//! and prints the time per message: the flow token's cost as instruction
//! counts, side by side (docs/benchmarks.md).
//!
//! Kinds: `register-path` (a subscriber's REGISTER, which gets a Path: one
//! flow token sealed), `register-inside` (the same REGISTER on an inside
//! listener: no Path), `invite-flow` (an instance's INVITE routed by that
//! Path into the flow: one token opened, two Record-Routes, one of them a
//! flow token sealed), `invite-address` (the same INVITE routed to the
//! subscriber's address by a plain Route: one Record-Route).
//!
//! ```console
//! $ cargo build --release -p sip-gate --example flows
//! $ valgrind --tool=callgrind target/release/examples/flows register-path 20000
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
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_else(|| "register-path".into());
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let config = Arc::new(
        SiteConfig::from_str_at(&common::flow_site(), Path::new("bench.toml")).expect("site"),
    );
    let core = Core::new(config.clone(), DrainState::new(config)).expect("core");
    let now = Instant::now();
    let sub: std::net::SocketAddr = common::SUBSCRIBER.parse().expect("address");
    let sg = Inbound::Udp {
        listener: 0,
        peer: "127.0.1.1:5060".parse().expect("address"),
    };
    let path = common::path_of(&core, now);
    let (inbound, msgs): (Inbound, Vec<Bytes>) = match kind.as_str() {
        "register-path" | "register-inside" => (
            Inbound::Udp {
                listener: usize::from(kind == "register-inside"),
                peer: sub,
            },
            (1..=n).map(common::register).collect(),
        ),
        "invite-flow" => (
            sg,
            (1..=n).map(|i| common::invite_from_sg(i, &path)).collect(),
        ),
        "invite-address" => (
            sg,
            (1..=n)
                .map(|i| common::invite_from_sg(i, "<sip:203.0.113.10:40000;lr>"))
                .collect(),
        ),
        other => {
            eprintln!("unknown kind `{other}`");
            std::process::exit(2);
        }
    };
    let start = Instant::now();
    let sent = msgs
        .into_iter()
        .filter(|m| matches!(core.handle(inbound, m.clone(), now), Action::Send(..)))
        .count();
    let per = start.elapsed() / u32::try_from(n.max(1)).unwrap_or(u32::MAX);
    eprintln!("{kind}: {sent} of {n} forwarded, {per:?} per message");
}
