//! Cost per message of the routing core and of its MACs.
//!
//! `cargo bench -p sip-gate --bench core` (docs/benchmarks.md). The INVITE
//! case gives every iteration a fresh branch, so each one is a new
//! transaction that is routed, record-routed and spliced, as on the wire.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use ringsync::config::SiteConfig;
use ringsync::state::DrainState;
use sip_gate::{Action, Core, Inbound, TokenKey};

const SITE: &str = r#"
[site]
name = "bench"
secret = "bench-site-secret-0123456789"

[health]
interval_ms = 0

[[server]]
name = "srv-a"
[[server]]
name = "srv-b"
[[server]]
name = "srv-c"

[[instance]]
id = "sg-a"
service = "sg"
server = "srv-a"
sip = "127.0.1.1:5060"
[[instance]]
id = "sg-b"
service = "sg"
server = "srv-b"
sip = "127.0.1.2:5060"
[[instance]]
id = "sg-c"
service = "sg"
server = "srv-c"
sip = "127.0.1.3:5060"

[[listener]]
name = "subs"
bind = "127.0.0.1:5060"
mode = "balance"
pool = "sg"
leg = "subscriber"
"#;

fn invite(n: u64) -> Bytes {
    Bytes::from(format!(
        "INVITE sip:bob@example.com SIP/2.0\r\n\
Via: SIP/2.0/UDP 203.0.113.10:5062;branch=z9hG4bKbench-{n};rport\r\n\
Max-Forwards: 70\r\n\
From: \"Alice\" <sip:alice@example.com>;tag=a1\r\n\
To: <sip:bob@example.com>\r\n\
Call-ID: bench-{n}@203.0.113.10\r\n\
CSeq: 1 INVITE\r\n\
Contact: <sip:alice@203.0.113.10:5062>\r\n\
Content-Type: application/sdp\r\n\
Content-Length: 129\r\n\r\n\
v=0\r\no=- 1 1 IN IP4 203.0.113.10\r\ns=-\r\nc=IN IP4 203.0.113.10\r\nt=0 0\r\n\
m=audio 4000 RTP/AVP 0 8\r\na=rtpmap:0 PCMU/8000\r\na=sendrecv\r\n"
    ))
}

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

criterion_group!(benches, tokens, handle);
criterion_main!(benches);
