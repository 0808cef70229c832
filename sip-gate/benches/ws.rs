//! `ws`: SIP over WebSocket against SIP over TCP through the `sip-gate`
//! binary (issue 25, R-WS-2), in one run, with real peers on loopback
//! (`127.79.0.0/24`).
//!
//! 1. **Calls.** The same call load (INVITE, 180, 200, ACK, BYE, 200; no
//!    hold) at `--rate` calls/s for `--seconds`, in interleaved rounds, three
//!    ways: over WebSocket by this program's client (`ws_load`: what a
//!    browser sends, `.invalid` Via and Contact, `transport=ws`, the route
//!    set) to the gate's `ws` listener on `--rate / 10` connections, each
//!    placing its share of the calls one after the other at a fixed pace;
//!    over TCP by the same client, the same messages on as many
//!    connections to the gate's `tcp` listener (like for like: only the
//!    framing differs); and over TCP by SIPp's stock `uac` (`-t t1`, one
//!    connection carrying every call). The sg is SIPp's stock `uas`, over
//!    TCP for the TCP loads (a TCP listener's instance side is TCP) and over
//!    UDP for the WebSocket load (a WebSocket listener's instance side is
//!    UDP). The gate's CPU (user + sys of its process from `/proc`, before
//!    and after each run) per call, side by side, and the ratios to TCP.
//! 2. **Idle.** `--idle` WSS connections (TLS from a certificate made for
//!    the run), and `--idle-plain` plain WS ones and `--idle-tcp` TCP ones
//!    (the bench's client) each on a gate of their own, each registered (REGISTER through the gate to SIPp's `uas_register`,
//!    Expires 3600): the gate's RSS before and after, per connection, and
//!    its CPU over `--idle-seconds` while they idle (the gate sends no
//!    keep-alive of its own; the clients send none).
//!
//! `--perf DIR` records a `perf record -g` profile of the gate during each
//! load into DIR (`LABEL-LOAD.data`): a profiling run, whose CPU figures
//! perf inflates.
//!
//! With `--gate LABEL=DIR`, repeated (each DIR holding a `sip-gate`
//! binary, say one built from the commit before a change and one after),
//! every measurement runs on each of those gates in the same rounds, so a
//! change is measured before and after under the same load of the machine.
//!
//! ```text
//! cargo bench -p sip-gate --bench ws -- --rate 50 --seconds 10 --rounds 2 --idle 200
//! ```
//!
//! Bounds (the machine is shared): rate 1..=1000, seconds 1..=60, idle
//! 0..=20000 (the gate and this program each need that many descriptors).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustls::pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use testbed::bins::{BinDir, Node};
use testbed::fixture::SiteFile;
use testbed::{ProcStats, Scenario, Sipp, SippHandle, Transport};

mod ws_load;

use ws_load::Conn;

fn ip(host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 79, 0, host))
}

const SG: u8 = 11;

struct Opts {
    rate: u32,
    seconds: u32,
    rounds: u32,
    idle: u32,
    idle_plain: u32,
    idle_tcp: u32,
    idle_seconds: u32,
    /// `--gate LABEL=DIR`, repeated: the gates measured.
    gates: Vec<(String, PathBuf)>,
    perf: Option<PathBuf>,
}

fn opts() -> Opts {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let get = |name: &str| arg(name).and_then(|v| v.parse::<u32>().ok());
    Opts {
        rate: get("--rate").unwrap_or(50).clamp(1, 1000),
        seconds: get("--seconds").unwrap_or(10).clamp(1, 60),
        rounds: get("--rounds").unwrap_or(2).clamp(1, 10),
        idle: get("--idle").unwrap_or(200).min(20_000),
        idle_plain: get("--idle-plain").unwrap_or(0).min(20_000),
        idle_tcp: get("--idle-tcp").unwrap_or(0).min(20_000),
        idle_seconds: get("--idle-seconds").unwrap_or(10).clamp(1, 120),
        gates: args
            .windows(2)
            .filter(|w| w[0] == "--gate")
            .filter_map(|w| w[1].split_once('='))
            .map(|(l, d)| (l.to_owned(), PathBuf::from(d)))
            .collect(),
        perf: arg("--perf").map(PathBuf::from),
    }
}

/// The site: one sg, a `tcp` listener on `.1:5060`, a `ws` one on
/// `.1:5080`, a `wss` one on `.1:5443`; limits that the bench's own load
/// would meet (one source for all calls) are lifted.
fn site(dir: &std::path::Path, connections: u32) -> std::path::PathBuf {
    testbed::tls::self_signed(dir, &ip(1).to_string()).unwrap();
    let g = |port: u16| SocketAddr::new(ip(1), port);
    SiteFile::new("ws-bench")
        .section("tcp", &format!("max_connections = {}", connections + 1000))
        .section(
            "overload",
            "per_source_rate = 0\nper_source_register_rate = 0",
        )
        .tls("cert.pem", "key.pem")
        .sgs(&[("0", SocketAddr::new(ip(SG), 5060))])
        .subscribers("tcp", g(5060), &["tcp"])
        .subscribers("ws", g(5080), &["udp", "ws"])
        .subscribers("wss", g(5443), &["udp", "wss"])
        .write(dir)
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

/// The gates measured: those of `--gate LABEL=DIR`, else this build's.
fn gates(o: &Opts) -> Vec<(&str, Option<BinDir>)> {
    if o.gates.is_empty() {
        return vec![("current", None)];
    }
    o.gates
        .iter()
        .map(|(l, d)| (l.as_str(), Some(BinDir::at(d))))
        .collect()
}

fn start_gate(site: &Path, bins: &Option<BinDir>, label: &str) -> Node {
    let mut b = Node::gate(site)
        .admin(SocketAddr::new(ip(1), 9091))
        .label(format!("sip-gate-{label}"));
    if let Some(dir) = bins {
        b = b.bins(dir.clone());
    }
    let mut gate = b.start().expect("the gate starts");
    gate.wait_ready().expect("the gate is ready");
    gate
}

/// The call loads compared.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Load {
    /// SIPp's uac over TCP: one connection for every call.
    Sipp,
    /// The bench's client over TCP, `rate / 10` connections.
    Tcp,
    /// The bench's client over WebSocket, `rate / 10` connections.
    Ws,
}

impl Load {
    fn name(self) -> &'static str {
        match self {
            Load::Sipp => "TCP (SIPp uac, 1 connection)",
            Load::Tcp => "TCP (bench client)",
            Load::Ws => "WS (bench client)",
        }
    }
}

/// One SIPp TCP run: the calls that completed.
fn sipp_run(o: &Opts) -> u64 {
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

/// One run of the bench's client (`load` WS or TCP): the calls that
/// completed.
async fn client_run(o: &Opts, load: Load) -> u64 {
    let conns = (o.rate / 10).max(1);
    let per = o.rate * o.seconds / conns;
    let gap = Duration::from_secs_f64(f64::from(conns) / f64::from(o.rate));
    let tasks: Vec<_> = (0..conns)
        .map(|c| {
            tokio::spawn(async move {
                let from = ip(100 + u8::try_from(c % 100).unwrap_or(0));
                let mut conn = if load == Load::Ws {
                    Conn::Ws(ws_load::open_ws(from, SocketAddr::new(ip(1), 5080), None).await)
                } else {
                    ws_load::open_tcp(from, SocketAddr::new(ip(1), 5060)).await
                };
                let start =
                    tokio::time::Instant::now() + gap.mul_f64(f64::from(c) / f64::from(conns));
                let mut done = 0u64;
                for n in 0..per {
                    tokio::time::sleep_until(start + gap * n).await;
                    done += u64::from(ws_load::call(&mut conn, c, n).await);
                }
                conn.close().await;
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

/// The idle connections measured: how many, and of which kind.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Idle {
    Wss,
    Ws,
    Tcp,
}

/// Idle registered connections of `kind`: RSS per connection and idle
/// CPU, printed as a table row.
async fn idle(
    o: &Opts,
    (kind, n): (Idle, u32),
    gate: &Node,
    cert: &CertificateDer<'static>,
    label: &str,
) {
    let before = cpu(gate);
    let mut refused = 0u32;
    let mut conns = Vec::with_capacity(n as usize);
    for i in 0..n {
        let from = ip(100 + u8::try_from(i % 100).unwrap_or(0));
        let mut conn = match kind {
            Idle::Wss => {
                Conn::Ws(ws_load::open_ws(from, SocketAddr::new(ip(1), 5443), Some(cert)).await)
            }
            Idle::Ws => Conn::Ws(ws_load::open_ws(from, SocketAddr::new(ip(1), 5080), None).await),
            Idle::Tcp => ws_load::open_tcp(from, SocketAddr::new(ip(1), 5060)).await,
        };
        // A REGISTER refused (the gate's overload 503 on a loaded
        // machine) is counted; the connection still idles.
        if !ws_load::register(&mut conn, i).await {
            refused += 1;
        }
        conns.push(conn);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let open = cpu(gate);
    tokio::time::sleep(Duration::from_secs(u64::from(o.idle_seconds))).await;
    let after = cpu(gate);
    let per_kib = (open.rss_kb.saturating_sub(before.rss_kb)) as f64 / f64::from(n.max(1));
    let idle_cpu = after.cpu_since(&open).as_secs_f64() / f64::from(o.idle_seconds) * 100.0;
    println!(
        "| {label} | idle registered {kind:?} connections | {n} ({refused} REGISTERs not answered 200) | gate RSS {} -> {} KiB: {per_kib:.1} KiB per connection | gate CPU while idle {idle_cpu:.2} % of a core over {} s |",
        before.rss_kb, open.rss_kb, o.idle_seconds
    );
    drop(conns);
}

/// `perf record -g` on the gate while `load` runs (`--perf DIR`: for a
/// profile, not for the figures, which it inflates).
fn perf(dir: &Path, gate: &Node, label: &str, load: Load) -> std::process::Child {
    let out = dir.join(format!("{label}-{load:?}.data"));
    let child = std::process::Command::new("perf")
        .args([
            "record",
            "-q",
            "-F",
            "299",
            "--call-graph",
            "dwarf,8192",
            "-o",
        ])
        .arg(&out)
        .args(["-p", &gate.pid().expect("the gate runs").to_string()])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("perf starts");
    // Let perf attach before the load begins.
    std::thread::sleep(Duration::from_millis(500));
    child
}

/// The call rounds: every load on every gate, interleaved; the rows
/// (gate, load, µs per call, calls).
fn calls<'o>(o: &'o Opts, site: &Path, rt: &tokio::runtime::Runtime) -> Vec<(&'o str, Load, f64)> {
    let mut rows = Vec::new();
    for round in 0..o.rounds {
        for (label, bins) in gates(o) {
            for load in [Load::Sipp, Load::Tcp, Load::Ws] {
                let _sg = if load == Load::Ws {
                    sg(Scenario::builtin("uas"), Transport::Udp)
                } else {
                    sg(Scenario::builtin("uas"), Transport::Tcp)
                };
                let mut gate = start_gate(site, &bins, label);
                let profile = o.perf.as_deref().map(|dir| perf(dir, &gate, label, load));
                let t0 = cpu(&gate);
                let started = Instant::now();
                let done = match load {
                    Load::Sipp => sipp_run(o),
                    _ => rt.block_on(client_run(o, load)),
                };
                let t1 = cpu(&gate);
                if let Some(mut p) = profile {
                    // SIGINT: perf writes its data and exits.
                    let _ = std::process::Command::new("kill")
                        .args(["-INT", &p.id().to_string()])
                        .status();
                    let _ = p.wait();
                }
                let us = t1.cpu_since(&t0).as_micros() as f64 / done.max(1) as f64;
                println!(
                    "round {round} {label} {}: {done} calls in {:.1} s, gate CPU {us:.0} µs per call",
                    load.name(),
                    started.elapsed().as_secs_f64()
                );
                rows.push((label, load, us));
                gate.stop(Duration::from_secs(10));
            }
        }
    }
    rows
}

fn main() {
    let o = opts();
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path(), o.idle.max(o.idle_plain).max(o.idle_tcp));
    let cert = CertificateDer::from_pem_file(dir.path().join("cert.pem")).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();

    // 1. Calls: the loads interleaved, on each gate.
    let rows = calls(&o, &site, &rt);
    // testbed::stats, as every benchmark of the project (docs/benchmarks.md).
    let median = |label: &str, load: Load| {
        testbed::stats::median(
            rows.iter()
                .filter(|r| r.0 == label && r.1 == load)
                .map(|r| r.2)
                .collect(),
        )
    };
    println!("| gate | load | calls/s | s | rounds | gate CPU per call (median) | / TCP (bench client) |");
    println!("|---|---|---|---|---|---|---|");
    for (label, _) in gates(&o) {
        let tcp = median(label, Load::Tcp);
        for load in [Load::Sipp, Load::Tcp, Load::Ws] {
            let us = median(label, load);
            println!(
                "| {label} | {} | {} | {} | {} | {us:.0} µs | {:.2}x |",
                load.name(),
                o.rate,
                o.seconds,
                o.rounds,
                us / tcp
            );
        }
    }

    // 2. Idle connections, registered through the gate: WSS, then plain
    // WS and TCP (what TLS, and what WebSocket, add).
    let kinds = [
        (Idle::Wss, o.idle),
        (Idle::Ws, o.idle_plain),
        (Idle::Tcp, o.idle_tcp),
    ];
    for (kind, n) in kinds {
        if n == 0 {
            continue;
        }
        for (label, bins) in gates(&o) {
            // A TCP listener's instance side is TCP.
            let t = if kind == Idle::Tcp {
                Transport::Tcp
            } else {
                Transport::Udp
            };
            let _sg = sg(Scenario::repo("uas_register"), t);
            let mut gate = start_gate(&site, &bins, label);
            rt.block_on(idle(&o, (kind, n), &gate, &cert, label));
            gate.stop(Duration::from_secs(10));
        }
    }
}
