//! `ws`: SIP over WebSocket against SIP over TCP through the `sip-gate`
//! binary (issue 25, R-WS-2), in one run, with real peers on loopback
//! (`127.79.0.0/24`).
//!
//! 1. **Calls.** The same call load (INVITE, 180, 200, ACK, BYE, 200; no
//!    hold) at `--rate` calls/s for `--seconds`, in interleaved rounds:
//!    over TCP by SIPp's stock `uac` (`-t t1`) to the gate's `tcp`
//!    listener, and over WebSocket by this program's client (what a browser
//!    sends: `.invalid` Via and Contact, `transport=ws`, the route set) to
//!    the gate's `ws` listener, `--rate / 10` connections, each placing its
//!    share of the calls one after the other at a fixed pace. The sg is
//!    SIPp's stock `uas`, over TCP for the TCP load (a TCP listener's
//!    instance side is TCP) and over UDP for the WebSocket load (a
//!    WebSocket listener's instance side is UDP). The gate's CPU (user +
//!    sys of its process from `/proc`, before and after each run) per
//!    call, side by side, and the WS/TCP ratio.
//! 2. **Idle.** `--idle` WSS connections (TLS from a certificate made for
//!    the run), each registered (REGISTER through the gate to SIPp's
//!    `uas_register`, Expires 3600): the gate's RSS before and after, per
//!    connection, and its CPU over `--idle-seconds` while they idle (the
//!    gate sends no keep-alive of its own; the clients send none).
//!
//! ```text
//! cargo bench -p sip-gate --bench ws -- --rate 50 --seconds 10 --rounds 2 --idle 200
//! ```
//!
//! Bounds (the machine is shared): rate 1..=1000, seconds 1..=60, idle
//! 0..=20000 (the gate and this program each need that many descriptors).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls_pki_types::pem::PemObject;
use testbed::bins::Node;
use testbed::{ProcStats, Scenario, Sipp, SippHandle, Transport};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

fn ip(host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 79, 0, host))
}

const SG: u8 = 11;

struct Opts {
    rate: u32,
    seconds: u32,
    rounds: u32,
    idle: u32,
    idle_seconds: u32,
}

fn opts() -> Opts {
    let mut o = Opts {
        rate: 50,
        seconds: 10,
        rounds: 2,
        idle: 200,
        idle_seconds: 10,
    };
    let args: Vec<String> = std::env::args().collect();
    let get = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<u32>().ok())
    };
    o.rate = get("--rate").unwrap_or(o.rate).clamp(1, 1000);
    o.seconds = get("--seconds").unwrap_or(o.seconds).clamp(1, 60);
    o.rounds = get("--rounds").unwrap_or(o.rounds).clamp(1, 10);
    o.idle = get("--idle").unwrap_or(o.idle).min(20_000);
    o.idle_seconds = get("--idle-seconds")
        .unwrap_or(o.idle_seconds)
        .clamp(1, 120);
    o
}

/// The site: one sg, a `tcp` listener on `.1:5060`, a `ws` one on
/// `.1:5080`, a `wss` one on `.1:5443`; limits that the bench's own load
/// would meet (one source for all calls) are lifted.
fn site(dir: &std::path::Path, connections: u32) -> std::path::PathBuf {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![ip(1).to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
    let text = format!(
        r#"[site]
name = "ws-bench"
secret = "ws-bench-secret-0123456789abcdef"

[health]
interval_ms = 0

[tcp]
max_connections = {max}

[overload]
per_source_rate = 0

[tls]
cert = "cert.pem"
key = "key.pem"

[[server]]
name = "srv-0"
[[instance]]
id = "sg-0"
service = "sg"
server = "srv-0"
sip = "{sg}:5060"

[[listener]]
name = "tcp"
bind = "{g}:5060"
transports = ["tcp"]
mode = "balance"
pool = "sg"
leg = "subscriber"

[[listener]]
name = "ws"
bind = "{g}:5080"
transports = ["udp", "ws"]
mode = "balance"
pool = "sg"
leg = "subscriber"

[[listener]]
name = "wss"
bind = "{g}:5443"
transports = ["udp", "wss"]
mode = "balance"
pool = "sg"
leg = "subscriber"
"#,
        max = connections + 1000,
        sg = ip(SG),
        g = ip(1),
    );
    let path = dir.join("site.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn sg(scenario: Scenario, t: Transport) -> SippHandle {
    Sipp::new(scenario)
        .local(ip(SG), 5060)
        .transport(t)
        .timeout(Duration::from_secs(3600))
        .spawn()
        .expect("SIPp starts as the sg")
}

fn cpu(gate: &Node) -> ProcStats {
    ProcStats::sample(gate.pid().expect("the gate runs")).expect("/proc of the gate")
}

/// One TCP run: SIPp's uac; the calls that completed.
fn tcp_run(o: &Opts) -> u64 {
    let calls = u64::from(o.rate) * u64::from(o.seconds);
    let r = Sipp::new(Scenario::builtin("uac"))
        .local_ip(ip(100))
        .remote(SocketAddr::new(ip(1), 5060))
        .transport(Transport::Tcp)
        .calls(calls)
        .rate(o.rate)
        .timeout(Duration::from_secs(u64::from(o.seconds) + 30))
        .spawn()
        .expect("uac starts")
        .wait(Duration::from_secs(u64::from(o.seconds) + 60))
        .expect("uac report");
    if r.failed > 0 {
        eprintln!("tcp run: {} failed: {:?}", r.failed, r.failures);
    }
    r.successful
}

type Ws = WebSocketStream<Box<dyn Io>>;
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// A WebSocket (`sip` subprotocol) from `from` to `to`, over TLS when
/// `tls` holds the certificate to trust.
async fn open(from: IpAddr, to: SocketAddr, tls: Option<&CertificateDer<'static>>) -> Ws {
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::new(from, 0)).unwrap();
    let tcp: TcpStream = sock.connect(to).await.expect("connect to the gate");
    let _ = tcp.set_nodelay(true);
    let io: Box<dyn Io> = match tls {
        None => Box::new(tcp),
        Some(cert) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(cert.clone()).unwrap();
            let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
            let name = ServerName::IpAddress(to.ip().into());
            let s = tokio_rustls::TlsConnector::from(Arc::new(cfg))
                .connect(name, tcp)
                .await
                .expect("TLS to the gate");
            Box::new(s)
        }
    };
    let scheme = if tls.is_some() { "wss" } else { "ws" };
    let mut req = format!("{scheme}://{to}/").into_client_request().unwrap();
    req.headers_mut()
        .insert("Sec-WebSocket-Protocol", HeaderValue::from_static("sip"));
    tokio_tungstenite::client_async(req, io)
        .await
        .expect("the upgrade")
        .0
}

async fn recv(ws: &mut Ws) -> Option<String> {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .ok()??
            .ok()?;
        if let Message::Text(t) = m {
            return Some(t.to_string());
        }
    }
}

fn header<'a>(msg: &'a str, name: &str) -> Vec<&'a str> {
    msg.split("\r\n")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then_some(v.trim())
        })
        .collect()
}

const SDP: &str = "v=0\r\no=ws 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 40000 RTP/AVP 0\r\n";

/// One call as a browser places it: INVITE, its 200, ACK and BYE along the
/// route set, the BYE's 200. Whether it completed.
async fn call(ws: &mut Ws, c: u32, n: u32) -> bool {
    let (host, cid) = (format!("c{c}"), format!("ws-bench-{c}-{n}"));
    let invite = format!(
        "INVITE sip:bench@example.com SIP/2.0\r\nVia: SIP/2.0/WS {host}.invalid;branch=z9hG4bK-{cid}\r\n\
         Max-Forwards: 70\r\nTo: <sip:bench@example.com>\r\nFrom: <sip:{host}@example.com>;tag=t-{cid}\r\n\
         Call-ID: {cid}\r\nCSeq: 1 INVITE\r\nContact: <sip:{host}@{host}.invalid;transport=ws;ob>\r\n\
         Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{SDP}",
        SDP.len()
    );
    if ws.send(Message::text(invite)).await.is_err() {
        return false;
    }
    let ok = loop {
        let Some(r) = recv(ws).await else {
            return false;
        };
        if r.starts_with("SIP/2.0 1") {
            continue;
        }
        if !r.starts_with("SIP/2.0 200") {
            return false;
        }
        break r;
    };
    let to = header(&ok, "To")
        .first()
        .copied()
        .unwrap_or_default()
        .to_owned();
    let target = header(&ok, "Contact")
        .first()
        .map(|c| {
            c.trim_start_matches('<')
                .split('>')
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .unwrap_or_default();
    let mut rr: Vec<&str> = header(&ok, "Record-Route")
        .iter()
        .flat_map(|v| v.split(", "))
        .collect();
    rr.reverse();
    let routes: String = rr.iter().map(|r| format!("Route: {r}\r\n")).collect();
    let in_dialog = |method: &str, cseq: u32, branch: &str| {
        format!(
            "{method} {target} SIP/2.0\r\nVia: SIP/2.0/WS {host}.invalid;branch=z9hG4bK-{branch}-{cid}\r\n\
             Max-Forwards: 70\r\n{routes}To: {to}\r\nFrom: <sip:{host}@example.com>;tag=t-{cid}\r\n\
             Call-ID: {cid}\r\nCSeq: {cseq} {method}\r\nContent-Length: 0\r\n\r\n"
        )
    };
    if ws
        .send(Message::text(in_dialog("ACK", 1, "ack")))
        .await
        .is_err()
        || ws
            .send(Message::text(in_dialog("BYE", 2, "bye")))
            .await
            .is_err()
    {
        return false;
    }
    recv(ws).await.is_some_and(|r| r.starts_with("SIP/2.0 200"))
}

/// One WebSocket run: the calls that completed.
async fn ws_run(o: &Opts) -> u64 {
    let conns = (o.rate / 10).max(1);
    let per = o.rate * o.seconds / conns;
    let gap = Duration::from_secs_f64(f64::from(conns) / f64::from(o.rate));
    let tasks: Vec<_> = (0..conns)
        .map(|c| {
            tokio::spawn(async move {
                let from = ip(100 + u8::try_from(c % 100).unwrap_or(0));
                let mut ws = open(from, SocketAddr::new(ip(1), 5080), None).await;
                let start =
                    tokio::time::Instant::now() + gap.mul_f64(f64::from(c) / f64::from(conns));
                let mut done = 0u64;
                for n in 0..per {
                    tokio::time::sleep_until(start + gap * n).await;
                    done += u64::from(call(&mut ws, c, n).await);
                }
                let _ = ws.close(None).await;
                done
            })
        })
        .collect();
    let mut done = 0;
    for t in tasks {
        done += t.await.unwrap_or(0);
    }
    done
}

/// Idle registered WSS connections: RSS per connection and idle CPU.
async fn idle(o: &Opts, gate: &Node, cert: &CertificateDer<'static>) {
    let before = cpu(gate);
    let mut conns = Vec::with_capacity(o.idle as usize);
    for i in 0..o.idle {
        let from = ip(100 + u8::try_from(i % 100).unwrap_or(0));
        let mut ws = open(from, SocketAddr::new(ip(1), 5443), Some(cert)).await;
        let reg = format!(
            "REGISTER sip:example.com SIP/2.0\r\nVia: SIP/2.0/WSS r{i}.invalid;branch=z9hG4bK-reg-{i}\r\n\
             Max-Forwards: 70\r\nTo: <sip:u{i}@example.com>\r\nFrom: <sip:u{i}@example.com>;tag=r{i}\r\n\
             Call-ID: reg-{i}@ws-bench\r\nCSeq: 1 REGISTER\r\n\
             Contact: <sip:u{i}@r{i}.invalid;transport=ws;ob>;reg-id=1;+sip.instance=\"<urn:uuid:00000000-0000-0000-0000-{i:012}>\"\r\n\
             Expires: 3600\r\nSupported: path,outbound\r\nContent-Length: 0\r\n\r\n"
        );
        ws.send(Message::text(reg)).await.unwrap();
        let ok = recv(&mut ws).await.unwrap_or_default();
        assert!(ok.starts_with("SIP/2.0 200"), "REGISTER {i}: {ok}");
        conns.push(ws);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let open = cpu(gate);
    tokio::time::sleep(Duration::from_secs(u64::from(o.idle_seconds))).await;
    let after = cpu(gate);
    let per_kib = (open.rss_kb.saturating_sub(before.rss_kb)) as f64 / f64::from(o.idle.max(1));
    let idle_cpu = after.cpu_since(&open).as_secs_f64() / f64::from(o.idle_seconds) * 100.0;
    println!(
        "| idle registered WSS connections | {} | gate RSS {} -> {} KiB: {per_kib:.1} KiB per connection | gate CPU while idle {idle_cpu:.2} % of a core over {} s |",
        o.idle, before.rss_kb, open.rss_kb, o.idle_seconds
    );
    drop(conns);
}

fn main() {
    let o = opts();
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path(), o.idle);
    let cert = CertificateDer::from_pem_file(dir.path().join("cert.pem")).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();

    // 1. Calls, TCP and WS interleaved.
    let mut rows = Vec::new();
    for round in 0..o.rounds {
        for ws in [false, true] {
            let _sg = if ws {
                sg(Scenario::builtin("uas"), Transport::Udp)
            } else {
                sg(Scenario::builtin("uas"), Transport::Tcp)
            };
            let mut gate = Node::gate(&site)
                .admin(SocketAddr::new(ip(1), 9091))
                .start()
                .unwrap();
            gate.wait_ready().unwrap();
            let t0 = cpu(&gate);
            let started = Instant::now();
            let done = if ws {
                rt.block_on(ws_run(&o))
            } else {
                tcp_run(&o)
            };
            let t1 = cpu(&gate);
            let us = t1.cpu_since(&t0).as_micros() as f64 / done.max(1) as f64;
            let name = if ws { "ws" } else { "tcp" };
            println!(
                "round {round} {name}: {done} calls in {:.1} s, gate CPU {us:.0} µs per call",
                started.elapsed().as_secs_f64()
            );
            rows.push((ws, us, done));
            gate.stop(Duration::from_secs(10));
        }
    }
    // testbed::stats, as every benchmark of the project (docs/benchmarks.md).
    let median =
        |ws: bool| testbed::stats::median(rows.iter().filter(|r| r.0 == ws).map(|r| r.1).collect());
    let (tcp, ws) = (median(false), median(true));
    println!("| transport | calls/s | s | rounds | gate CPU per call (median) |");
    println!("|---|---|---|---|---|");
    println!(
        "| TCP (SIPp uac) | {} | {} | {} | {tcp:.0} µs |",
        o.rate, o.seconds, o.rounds
    );
    println!(
        "| WS (bench client) | {} | {} | {} | {ws:.0} µs ({:.2}x TCP) |",
        o.rate,
        o.seconds,
        o.rounds,
        ws / tcp
    );

    // 2. Idle WSS connections, registered through the gate.
    if o.idle > 0 {
        let _sg = sg(Scenario::repo("uas_register"), Transport::Udp);
        let mut gate = Node::gate(&site)
            .admin(SocketAddr::new(ip(1), 9091))
            .start()
            .unwrap();
        gate.wait_ready().unwrap();
        rt.block_on(idle(&o, &gate, &cert));
        gate.stop(Duration::from_secs(10));
    }
}
