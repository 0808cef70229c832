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

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use ringsync::config::SiteConfig;
use ringsync::state::DrainState;
use sip_gate::{Action, Core, Inbound, TokenKey};

mod common;
use common::{invite, SITE};

fn tokens(c: &mut Criterion) {
    let key = TokenKey::new("bench-site-secret-0123456789");
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
        Arc::new(SiteConfig::from_str_at(SITE, Path::new("bench.toml")).expect("bench site"));
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

/// The bytes of a 200 answering `fwd` (a request as the gate forwarded it),
/// from its next hop: every Via, To tagged `uas`.
fn ok_to(fwd: &Bytes) -> Bytes {
    let text = std::str::from_utf8(fwd).unwrap();
    let head = text.split("\r\n\r\n").next().unwrap();
    let mut out = String::from("SIP/2.0 200 OK\r\n");
    for line in head.lines().skip(1) {
        let name = line.split(':').next().unwrap_or("").to_ascii_lowercase();
        match name.as_str() {
            "via" | "from" | "call-id" | "cseq" | "record-route" => {
                out.push_str(line);
                out.push_str("\r\n");
            }
            "to" if line.contains(";tag=") => {
                out.push_str(line);
                out.push_str("\r\n");
            }
            "to" => out.push_str(&format!("{line};tag=uas\r\n")),
            _ => {}
        }
    }
    out.push_str("Content-Length: 0\r\n\r\n");
    Bytes::from(out)
}

/// An in-dialog request of the UA in call `n`, routed by the gate's token.
fn in_dialog(method: &str, n: u64, cseq: u32, route: &str) -> Bytes {
    Bytes::from(format!(
        "{method} sip:bob@127.0.1.1:5060 SIP/2.0\r\n\
Via: SIP/2.0/UDP 203.0.113.10:5062;branch=z9hG4bKbench-{n}-{cseq};rport\r\n\
Route: <{route}>\r\n\
Max-Forwards: 70\r\n\
From: \"Alice\" <sip:alice@example.com>;tag=a1\r\n\
To: <sip:bob@example.com>;tag=uas\r\n\
Call-ID: bench-{n}@203.0.113.10\r\n\
CSeq: {cseq} {method}\r\n\
Content-Length: 0\r\n\r\n"
    ))
}

fn sent(a: Action) -> (std::net::SocketAddr, Bytes) {
    match a {
        Action::Send(sip_gate::Out::Udp { to, .. }, b) => (to, b),
        other => panic!("{other:?}"),
    }
}

/// The five messages of call `n`, and where its responses come from.
fn call_messages(scratch: &Core, n: u64, inbound: Inbound, now: Instant) -> Vec<(Inbound, Bytes)> {
    let invite = invite(n);
    let (sg, fwd) = sent(scratch.handle(inbound, invite.clone(), now));
    let from_sg = Inbound::Udp {
        listener: 0,
        peer: sg,
    };
    let ok = ok_to(&fwd);
    let key = TokenKey::new("bench-site-secret-0123456789");
    let id = match sg.ip().to_string().as_str() {
        "127.0.1.1" => "sg-a",
        "127.0.1.2" => "sg-b",
        _ => "sg-c",
    };
    let call_id = format!("bench-{n}@203.0.113.10");
    let route = format!("sip:{}@127.0.0.1:5060;lr", key.seal(id, call_id.as_bytes()));
    let ack = in_dialog("ACK", n, 1, &route);
    let bye = in_dialog("BYE", n, 2, &route);
    let (_, bye_fwd) = sent(scratch.handle(inbound, bye.clone(), now));
    let bye_ok = ok_to(&bye_fwd);
    vec![
        (inbound, invite),
        (from_sg, ok),
        (inbound, ack),
        (inbound, bye),
        (from_sg, bye_ok),
    ]
}

fn call(c: &mut Criterion) {
    let config =
        Arc::new(SiteConfig::from_str_at(SITE, Path::new("bench.toml")).expect("bench site"));
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

criterion_group!(benches, tokens, handle, call);
criterion_main!(benches);
