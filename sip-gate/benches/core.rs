//! Cost per message of the routing core and of its MACs.
//!
//! `cargo bench -p sip-gate --bench core` (docs/benchmarks.md). The INVITE
//! case gives every iteration a fresh branch, so each one is a new
//! transaction that is routed, record-routed and spliced, as on the wire.
//! The call case plays a whole call's five messages (INVITE, its 200, ACK,
//! BYE, its 200) per iteration: routing plus the work book's accounting.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use ringsync::config::SiteConfig;
use ringsync::state::DrainState;
use sip_gate::{Action, Core, Inbound, TokenKey};

mod common;
use common::{
    call_messages, flow_site, invite, invite_from_sg, path_of, register, site, SECRET, SUBSCRIBER,
};

fn tokens(c: &mut Criterion) {
    let key = TokenKey::new(SECRET);
    let call_id = b"a84b4c76e66710@pc33.example.com";
    let token = key.seal("sg-a", call_id);
    c.bench_function("token/seal", |b| {
        b.iter(|| black_box(key.seal(black_box("sg-a"), black_box(call_id))))
    });
    c.bench_function("token/open", |b| {
        b.iter(|| {
            black_box(
                key.open(black_box(token.as_bytes()), black_box(call_id))
                    .is_ok(),
            )
        })
    });
}

fn handle(c: &mut Criterion) {
    let config =
        Arc::new(SiteConfig::from_str_at(&site(), Path::new("bench.toml")).expect("bench site"));
    let core = Core::new(config.clone(), DrainState::new(config)).expect("core");
    let peer = "203.0.113.10:40000".parse().unwrap();
    let inbound = Inbound::Udp { listener: 0, peer };
    let start = Instant::now();
    let mut n = 0u64;
    c.bench_function("core/handle_invite", |b| {
        b.iter_batched(
            || {
                n += 1;
                if n.is_multiple_of(100_000) {
                    // Keep the table small: forget every transaction so far.
                    core.sweep(start + Duration::from_secs(3600));
                }
                invite(n)
            },
            |msg| {
                let a = core.handle(inbound, msg, start);
                assert!(matches!(a, Action::Send(..)));
                a
            },
            BatchSize::SmallInput,
        )
    });
}

fn call(c: &mut Criterion) {
    let config =
        Arc::new(SiteConfig::from_str_at(&site(), Path::new("bench.toml")).expect("bench site"));
    let core = Core::new(config.clone(), DrainState::new(config.clone())).expect("core");
    let scratch = Core::new(config.clone(), DrainState::new(config)).expect("core");
    let peer = "203.0.113.10:40000".parse().unwrap();
    let inbound = Inbound::Udp { listener: 0, peer };
    let start = Instant::now();
    // The messages do what they say: one call up after the 200, none after
    // the BYE's 200 (the book counts them).
    let msgs = call_messages(&scratch, 0, inbound, start);
    let calls = |core: &Core| (0..3).map(|i| core.work().get(i).dialogs).sum::<u64>();
    for (k, (from, m)) in msgs.into_iter().enumerate() {
        assert!(matches!(core.handle(from, m, start), Action::Send(..)));
        assert_eq!(
            calls(&core),
            u64::from((1..4).contains(&k)),
            "after message {k}"
        );
    }
    let mut n = 0u64;
    c.bench_function("core/call_5_messages", |b| {
        b.iter_batched(
            || {
                n += 1;
                if n.is_multiple_of(20_000) {
                    core.sweep(start + Duration::from_secs(3600));
                    scratch.sweep(start + Duration::from_secs(3600));
                }
                call_messages(&scratch, 1_000_000_000 + n, inbound, start)
            },
            |msgs| {
                for (from, m) in msgs {
                    black_box(core.handle(from, m, start));
                }
            },
            BatchSize::SmallInput,
        )
    });
}

/// The flow token's cost, side by side: a REGISTER with and without the
/// Path the gate adds on a `subscriber` listener (sealing a token), and an
/// INVITE from an instance sent into a subscriber's flow (opening one)
/// against the same INVITE routed to a plain outside address.
fn flows(c: &mut Criterion) {
    let config =
        Arc::new(SiteConfig::from_str_at(&flow_site(), Path::new("bench.toml")).expect("site"));
    let core = Core::new(config.clone(), DrainState::new(config)).expect("core");
    let start = Instant::now();
    let sub = SUBSCRIBER.parse().unwrap();
    let sg = Inbound::Udp {
        listener: 0,
        peer: "127.0.1.1:5060".parse().unwrap(),
    };
    let path = path_of(&core, start);
    let mut n = 0u64;
    let mut fresh = |core: &Core| {
        n += 1;
        if n.is_multiple_of(100_000) {
            core.sweep(start + Duration::from_secs(3600));
        }
        n
    };
    let mut group = c.benchmark_group("flow");
    for (name, listener) in [("register_with_path", 0), ("register_no_path", 1)] {
        let inbound = Inbound::Udp {
            listener,
            peer: sub,
        };
        group.bench_function(name, |b| {
            b.iter_batched(
                || register(fresh(&core)),
                |msg| {
                    let a = core.handle(inbound, msg, start);
                    assert!(matches!(a, Action::Send(..)));
                    a
                },
                BatchSize::SmallInput,
            )
        });
    }
    for (name, route) in [
        ("invite_into_flow", path.as_str()),
        ("invite_to_address", "<sip:203.0.113.10:40000;lr>"),
    ] {
        group.bench_function(name, |b| {
            b.iter_batched(
                || invite_from_sg(fresh(&core), route),
                |msg| {
                    let a = core.handle(sg, msg, start);
                    assert!(matches!(a, Action::Send(..)), "{a:?}");
                    a
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, tokens, handle, call, flows);
criterion_main!(benches);
