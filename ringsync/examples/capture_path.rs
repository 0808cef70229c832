//! What the message path pays for `[capture]`: N copies (default 100000)
//! handed to a running capture in bursts of 14 (a call's copies), with a
//! UDP collector on loopback that reads them. `play` is the message path's
//! part, for instruction counts (R-CAP-1):
//!
//! ```console
//! $ cargo build --release -p ringsync --example capture_path
//! $ valgrind --tool=callgrind --toggle-collect='capture_path::play*' \
//!     target/release/examples/capture_path 100000 on|scan|off
//! ```
//!
//! `on` hands each copy with its Call-ID and method, as sip-gate does for
//! a UDP message it scanned; `scan` without, as for a message it did not
//! (the sender reads them from the bytes); `off` runs the same loop
//! without `[capture]` (the one branch). The sender's part:
//! `--toggle-collect='*capture::send::Sender::encode*'
//! --toggle-collect='*capture::send::send_batch*'`.

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ringsync::capture::{Capture, Fields, Names, Transport};
use ringsync::config::SiteConfig;

const SITE: &str = r#"[site]
name = "capture-path"
secret = "capture-path-example-secret-capture-path"

[[server]]
name = "srv-0"
[[instance]]
id = "sg-0"
service = "sg"
server = "srv-0"
sip = "127.0.0.1:5060"

[[listener]]
name = "subs"
bind = "127.0.0.1:5060"
transports = ["udp"]
mode = "balance"
pool = "sg"
leg = "subscriber"
"#;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let mode = args.next();
    let on = mode.as_deref() != Some("off");
    let fallback = mode.as_deref() == Some("scan");
    let collector = UdpSocket::bind("127.0.0.1:0").expect("a collector socket");
    let at = collector.local_addr().expect("its address");
    collector
        // Long enough that a sender slowed by valgrind is still read.
        .set_read_timeout(Some(Duration::from_secs(3)))
        .expect("a timeout");
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        let mut got = 0usize;
        while collector.recv(&mut buf).is_ok() {
            got += 1;
        }
        got
    });
    let text = if on {
        format!("{SITE}\n[capture]\ncollectors = [\"udp:{at}\"]\n")
    } else {
        SITE.to_owned()
    };
    let config = Arc::new(SiteConfig::from_str_at(&text, Path::new("site.toml")).expect("a site"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let capture = Capture::new(Names {
        sent: "capture_sent_total",
        dropped: "capture_dropped_total",
    });
    runtime.block_on(async { capture.apply(&config) });
    let msg = Bytes::from_static(
        b"INVITE sip:bob@example.com SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK1\r\n\
          From: <sip:alice@example.com>;tag=1\r\nTo: <sip:bob@example.com>\r\nCall-ID: path-1@10.0.0.1\r\n\
          CSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n",
    );
    let ends: (SocketAddr, SocketAddr) = (
        "10.0.0.1:5060".parse().unwrap(),
        "10.0.0.2:5060".parse().unwrap(),
    );
    // What the gate hands with a message it scanned (`fallback`: none, as
    // for one it did not, which the sender scans).
    let at = memchr::memmem::find(&msg, b"path-1@").expect("a Call-ID");
    let fields = (!fallback).then(|| Fields {
        call_id: Some(msg.slice(at..at + b"path-1@10.0.0.1".len())),
        method: Some(Bytes::from_static(b"INVITE")),
    });
    for _ in 0..n / 14 {
        play(&capture, &msg, ends, fields.as_ref());
        std::thread::sleep(Duration::from_micros(500));
    }
    drop(capture);
    drop(runtime);
    println!(
        "copies: {} sent, collector got {}",
        n / 14 * 14,
        reader.join().unwrap_or(0)
    );
}

/// A call's 14 copies through the message path's hook.
#[inline(never)]
fn play(capture: &Capture, msg: &Bytes, ends: (SocketAddr, SocketAddr), fields: Option<&Fields>) {
    for _ in 0..14 {
        // The gate reads them (once a message, and hands them on) only
        // while capture is on: a clone is what making them costs (two
        // `Bytes` of the message), an upper bound.
        let fields = if capture.is_on() {
            fields.cloned()
        } else {
            None
        };
        capture.sip(0, Transport::Udp, std::hint::black_box(ends), msg, fields);
    }
}
