//! `mg-bench`: what media-ctl costs in front of a real rtpengine.
//!
//! **Cycles.** Offer/answer/delete cycles (each a new call with an audio
//! SDP) at `--rate` cycles/s for `--seconds`, in `--rounds` rounds; every
//! round runs the same load straight at one rtpengine and then through
//! media-ctl to the same rtpengine, so machine noise hits both alike. Per
//! run: cycles ok/failed, the CPU per cycle of rtpengine and of media-ctl
//! (on-CPU time of each process over the run, from schedstat), and the
//! round-trip latency of every command (p50, p99). The table gives medians
//! over rounds, media-ctl's CPU as a share of rtpengine's in the same run,
//! and the p99 media-ctl adds.
//!
//! For scale, every round also runs the load through `floor`: a minimal
//! correct ng relay (this binary with `--floor LISTEN UPSTREAM`: two
//! threads, one blocking receive per datagram, the client remembered by
//! cookie, nothing else). On loopback a relay pays for every datagram it
//! sends twice (its own send and the receiver's wake-up run on its CPU
//! time), so `floor` shows what any relay costs here; media-ctl's own
//! work is the difference.
//!
//! **Held calls.** `--held N` sets up N calls through media-ctl and keeps
//! them (a stand-in mg in this process answers every offer with `ok`; a
//! real rtpengine would need four media ports per call), then reports
//! media-ctl's resident memory with N tracked calls.
//!
//! ```text
//! cargo build --release -p media-ctl -p testbed
//! netns-run target/release/mg-bench --rate 2000 --seconds 10 --rounds 3 --held 100000
//! ```
#![forbid(unsafe_code)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use testbed::{ProcStats, Rtpengine};

/// The benchmark's own loopback network: 127.76.0.0/24.
fn ip(host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 76, 0, host))
}

/// What media-ctl costs in front of a real rtpengine: offer/answer/delete
/// cycles straight at rtpengine, through a floor relay and through
/// media-ctl, in interleaved rounds (medians); then media-ctl's memory with
/// many calls held.
#[derive(Debug, Clone, Parser)]
#[command(name = "mg-bench", version)]
struct Opts {
    /// Offer/answer/delete cycles per second (1..=5000: the machine is shared).
    #[arg(long, value_name = "N", default_value_t = 2000,
          value_parser = clap::value_parser!(u32).range(1..=5000))]
    rate: u32,
    /// Seconds of load per run (1..=60); each run makes rate x seconds cycles.
    #[arg(long, value_name = "S", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=60))]
    seconds: u32,
    /// Rounds: every path is measured once per round, paths interleaved,
    /// so machine noise hits them alike; the table shows medians.
    #[arg(long, value_name = "N", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Client threads, each one command at a time (1..=64).
    #[arg(long, value_name = "N", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    workers: u32,
    /// Then set up this many calls through media-ctl, keep them, and
    /// report its resident memory (0: skip; at most 1000000).
    #[arg(long, value_name = "N", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    held: u32,
    /// The media-ctl binary (default: `media-ctl` next to this one).
    #[arg(long, value_name = "PATH")]
    media_ctl: Option<PathBuf>,
    /// Internal: run as the floor relay between LISTEN and UPSTREAM.
    #[arg(long, num_args = 2, value_names = ["LISTEN", "UPSTREAM"], hide = true)]
    floor: Option<Vec<SocketAddr>>,
}

impl Opts {
    fn media_ctl(&self) -> PathBuf {
        self.media_ctl.clone().unwrap_or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(|d| d.join("media-ctl")))
                .unwrap_or_else(|| PathBuf::from("media-ctl"))
        })
    }
}

// === ng messages, by hand (testbed does not depend on media-ctl) ===

fn bstr(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(s.len().to_string().as_bytes());
    out.push(b':');
    out.extend_from_slice(s);
}

/// `<cookie> d...e` with the pairs sorted by key, as bencode requires.
fn ng(cookie: &str, pairs: &mut [(&str, &str)]) -> Vec<u8> {
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = Vec::with_capacity(400);
    out.extend_from_slice(cookie.as_bytes());
    out.extend_from_slice(b" d");
    for (k, v) in pairs.iter() {
        bstr(&mut out, k.as_bytes());
        bstr(&mut out, v.as_bytes());
    }
    out.push(b'e');
    out
}

fn sdp(port: u16) -> String {
    format!(
        "v=0\r\no=- 1545997027 1 IN IP4 10.10.0.{h}\r\ns=bench\r\nc=IN IP4 10.10.0.{h}\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP 0 8 101\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:8 PCMA/8000\r\n\
         a=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-16\r\na=ptime:20\r\na=sendrecv\r\n",
        h = port % 200 + 1
    )
}

// === the cycle load ===

#[derive(Default)]
struct Load {
    ok: u64,
    failed: u64,
    /// Round trip of every answered command, microseconds.
    lat_us: Vec<u32>,
}

/// One command; its round trip, or None if no `ok` came within 1 s.
fn exchange(
    sock: &UdpSocket,
    to: SocketAddr,
    d: &[u8],
    cookie: &str,
    buf: &mut [u8],
) -> Option<u32> {
    let t0 = Instant::now();
    sock.send_to(d, to).ok()?;
    loop {
        let n = sock.recv(buf).ok()?;
        let r = &buf[..n];
        if r.len() > cookie.len() && r.starts_with(cookie.as_bytes()) && r[cookie.len()] == b' ' {
            let ok = r.windows(12).any(|w| w == b"6:result2:ok");
            let us = u32::try_from(t0.elapsed().as_micros()).unwrap_or(u32::MAX);
            return ok.then_some(us);
        }
        if t0.elapsed() > Duration::from_secs(1) {
            return None;
        }
    }
}

/// Runs `rate × seconds` cycles toward `to` with `workers` threads; cycle
/// `i` starts at `i / rate` seconds.
fn cycles(to: SocketAddr, tag: &str, o: &Opts) -> Load {
    let total = u64::from(o.rate) * u64::from(o.seconds);
    let start = Instant::now() + Duration::from_millis(50);
    let handles: Vec<_> = (0..o.workers)
        .map(|w| {
            let tag = tag.to_owned();
            let (rate, workers) = (u64::from(o.rate), u64::from(o.workers));
            thread::spawn(move || {
                let sock = UdpSocket::bind(SocketAddr::new(ip(100 + w as u8), 0)).expect("bind");
                sock.set_read_timeout(Some(Duration::from_secs(1)))
                    .expect("timeout");
                let mut buf = vec![0u8; 65_536];
                let mut load = Load::default();
                let mut i = u64::from(w);
                while i < total {
                    let at = start + Duration::from_micros(i * 1_000_000 / rate);
                    if let Some(d) = at.checked_duration_since(Instant::now()) {
                        thread::sleep(d);
                    }
                    let call = format!("{tag}-{i}@bench");
                    let offer_sdp = sdp(4000 + (i % 20000) as u16 * 2);
                    let answer_sdp = sdp(40000 + (i % 10000) as u16 * 2);
                    let steps: [Vec<(&str, &str)>; 3] = [
                        vec![
                            ("command", "offer"),
                            ("call-id", &call),
                            ("from-tag", "ft"),
                            ("sdp", &offer_sdp),
                        ],
                        vec![
                            ("command", "answer"),
                            ("call-id", &call),
                            ("from-tag", "ft"),
                            ("to-tag", "tt"),
                            ("sdp", &answer_sdp),
                        ],
                        vec![
                            ("command", "delete"),
                            ("call-id", &call),
                            ("from-tag", "ft"),
                            ("to-tag", "tt"),
                        ],
                    ];
                    let mut ok = true;
                    for (s, mut pairs) in steps.into_iter().enumerate() {
                        // Unique per run: rtpengine answers a cookie it has
                        // seen from its cache, without doing the work.
                        let cookie = format!("{tag}.{w}.{i}.{s}");
                        let d = ng(&cookie, &mut pairs);
                        match exchange(&sock, to, &d, &cookie, &mut buf) {
                            Some(us) => load.lat_us.push(us),
                            None => {
                                ok = false;
                                break;
                            }
                        }
                    }
                    if ok {
                        load.ok += 1;
                    } else {
                        load.failed += 1;
                    }
                    i += workers;
                }
                load
            })
        })
        .collect();
    let mut all = Load::default();
    for h in handles {
        let l = h.join().unwrap_or_default();
        all.ok += l.ok;
        all.failed += l.failed;
        all.lat_us.extend(l.lat_us);
    }
    all.lat_us.sort_unstable();
    all
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i]) / 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

// === media-ctl under test ===

struct MediaCtl {
    child: Child,
    ng: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for MediaCtl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_media_ctl(o: &Opts, mg: SocketAddr, idle_s: u32) -> Result<MediaCtl, String> {
    let dir = tempfile::Builder::new()
        .prefix("mg-bench-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let ng = SocketAddr::new(ip(2), 2223);
    let site = format!(
        "[site]\nname = \"mg-bench\"\n[admin]\nmedia_bind = \"{}:9092\"\n[media]\nng_bind = \"{ng}\"\ncall_idle_timeout_s = {idle_s}\n\
         [[server]]\nname = \"srv-a\"\n[[instance]]\nid = \"mg-a\"\nservice = \"mg\"\nserver = \"srv-a\"\nng = \"{mg}\"\n",
        ip(2)
    );
    let path = dir.path().join("site.toml");
    std::fs::write(&path, site).map_err(|e| e.to_string())?;
    let child = Command::new(o.media_ctl())
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| {
            format!(
                "starting {}: {e} (cargo build --release -p media-ctl)",
                o.media_ctl().display()
            )
        })?;
    let m = MediaCtl {
        child,
        ng,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !testbed::rtpengine::ping(ng, Duration::from_millis(100)) {
        if Instant::now() > deadline {
            return Err("media-ctl did not answer ping".into());
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok(m)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Route {
    Direct,
    Floor,
    MediaCtl,
}

impl Route {
    fn name(self) -> &'static str {
        match self {
            Route::Direct => "direct to rtpengine",
            Route::Floor => "via floor relay",
            Route::MediaCtl => "via media-ctl",
        }
    }
}

struct Run {
    path: Route,
    ok: u64,
    failed: u64,
    rtp_us: f64,
    mc_us: f64,
    p50: f64,
    p99: f64,
}

fn run_once(
    o: &Opts,
    round: u32,
    path: Route,
    rtp: &testbed::RtpengineHandle,
    relays: &Relays,
) -> Run {
    let (to, pid) = match path {
        Route::Direct => (rtp.ng(), None),
        Route::Floor => (relays.floor_ng, Some(relays.floor.id())),
        Route::MediaCtl => (relays.mc.ng, Some(relays.mc.child.id())),
    };
    let tag = format!("r{round}{path:?}");
    let sample = || {
        (
            rtp.stats().ok(),
            pid.and_then(|p| ProcStats::sample(p).ok()),
        )
    };
    let (r0, m0) = sample();
    let load = cycles(to, &tag, o);
    let (r1, m1) = sample();
    let per = |a: Option<ProcStats>, b: Option<ProcStats>| match (a, b) {
        (Some(a), Some(b)) if load.ok > 0 => b.cpu_since(&a).as_secs_f64() * 1e6 / load.ok as f64,
        _ => f64::NAN,
    };
    Run {
        path,
        ok: load.ok,
        failed: load.failed,
        rtp_us: per(r0, r1),
        mc_us: per(m0, m1),
        p50: pct(&load.lat_us, 0.50),
        p99: pct(&load.lat_us, 0.99),
    }
}

/// The relays under test.
struct Relays {
    mc: MediaCtl,
    floor: Child,
    floor_ng: SocketAddr,
}

impl Drop for Relays {
    fn drop(&mut self) {
        let _ = self.floor.kill();
        let _ = self.floor.wait();
    }
}

fn bench_cycles(o: &Opts) -> Result<(), String> {
    // No delete delay: at 2000 cycles/s rtpengine would otherwise keep
    // 60 000 deleted calls and their ports for 30 s.
    let rtp = Rtpengine::new(ip(11))
        .ports(20_000, 59_999)
        .arg("--delete-delay=0")
        .start()
        .map_err(|e| e.to_string())?;
    let mc = start_media_ctl(o, rtp.ng(), 3600)?;
    let floor_ng = SocketAddr::new(ip(3), 2223);
    let floor = Command::new(std::env::current_exe().map_err(|e| e.to_string())?)
        .args(["--floor", &floor_ng.to_string(), &rtp.ng().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting the floor relay: {e}"))?;
    let relays = Relays {
        mc,
        floor,
        floor_ng,
    };
    let warm = Opts {
        seconds: 1,
        ..o.clone()
    };
    cycles(relays.mc.ng, "warm", &warm);
    cycles(relays.floor_ng, "warmf", &warm);
    let mut runs = Vec::new();
    for round in 0..o.rounds {
        for path in [Route::Direct, Route::Floor, Route::MediaCtl] {
            let r = run_once(o, round, path, &rtp, &relays);
            eprintln!(
                "round {round} {:<20} ok {:>6} failed {:>3}  rtpengine {:>6.1} µs/cycle  relay {:>6.1} µs/cycle  p50 {:.3} ms  p99 {:.3} ms",
                path.name(), r.ok, r.failed, r.rtp_us, r.mc_us, r.p50, r.p99
            );
            runs.push(r);
        }
    }
    let of = |path: Route| runs.iter().filter(move |r| r.path == path);
    let pick = |path: Route, f: &dyn Fn(&Run) -> f64| median(of(path).map(f).collect());
    let share = |path: Route| median(of(path).map(|r| r.mc_us / r.rtp_us).collect());
    println!(
        "\n{} cycles/s × {} s × {} rounds (medians of rounds)\n",
        o.rate, o.seconds, o.rounds
    );
    println!("| path | cycles ok | failed | rtpengine CPU µs/cycle | relay CPU µs/cycle | relay / rtpengine (same run) | command p50 ms | command p99 ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for path in [Route::Direct, Route::Floor, Route::MediaCtl] {
        let relay = |v: f64| {
            if path == Route::Direct {
                "—".to_string()
            } else {
                format!("{v:.1}")
            }
        };
        println!(
            "| {} | {} | {} | {:.1} | {} | {} | {:.3} | {:.3} |",
            path.name(),
            of(path).map(|r| r.ok).sum::<u64>(),
            of(path).map(|r| r.failed).sum::<u64>(),
            pick(path, &|r| r.rtp_us),
            relay(pick(path, &|r| r.mc_us)),
            if path == Route::Direct {
                "—".to_string()
            } else {
                format!("{:.1}%", share(path) * 100.0)
            },
            pick(path, &|r| r.p50),
            pick(path, &|r| r.p99),
        );
    }
    let added = pick(Route::MediaCtl, &|r| r.p99) - pick(Route::Direct, &|r| r.p99);
    println!(
        "\nmedia-ctl CPU / rtpengine CPU (same run, median): {:.1}%  (target ≤ 25%)",
        share(Route::MediaCtl) * 100.0
    );
    println!(
        "media-ctl's own work over the floor relay: {:.1} µs/cycle",
        pick(Route::MediaCtl, &|r| r.mc_us) - pick(Route::Floor, &|r| r.mc_us)
    );
    println!(
        "added p99 per command (median p99 via media-ctl − direct): {added:.3} ms  (target < 1 ms)"
    );
    drop(relays);
    rtp.stop();
    Ok(())
}

/// The floor relay: what any ng relay must do and nothing more.
fn floor_relay(listen: SocketAddr, upstream: SocketAddr) -> Result<(), String> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    let client = Arc::new(UdpSocket::bind(listen).map_err(|e| format!("{listen}: {e}"))?);
    let up = Arc::new(UdpSocket::bind(SocketAddr::new(listen.ip(), 0)).map_err(|e| e.to_string())?);
    let who: Arc<Mutex<HashMap<Vec<u8>, SocketAddr>>> = Arc::default();
    let back = {
        let (client, up, who) = (client.clone(), up.clone(), who.clone());
        thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            while let Ok((n, _)) = up.recv_from(&mut buf) {
                let d = &buf[..n];
                let Some(sp) = d.iter().position(|&b| b == b' ') else {
                    continue;
                };
                let to = who.lock().map(|mut m| m.remove(&d[..sp])).ok().flatten();
                if let Some(to) = to {
                    let _ = client.send_to(d, to);
                }
            }
        })
    };
    let mut buf = vec![0u8; 65_536];
    while let Ok((n, from)) = client.recv_from(&mut buf) {
        let d = &buf[..n];
        let Some(sp) = d.iter().position(|&b| b == b' ') else {
            continue;
        };
        if let Ok(mut m) = who.lock() {
            m.insert(d[..sp].to_vec(), from);
        }
        let _ = up.send_to(d, upstream);
    }
    let _ = back.join();
    Ok(())
}

// === held calls ===

/// A stand-in mg: answers `ping` with `pong` and everything else with `ok`
/// (and a one-line SDP for offers and answers), as fast as it can.
fn fake_mg(addr: SocketAddr, stop: Arc<AtomicBool>) -> Result<thread::JoinHandle<()>, String> {
    let sock = UdpSocket::bind(addr).map_err(|e| format!("fake mg {addr}: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(|e| e.to_string())?;
    Ok(thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        while !stop.load(Ordering::Relaxed) {
            let Ok((n, from)) = sock.recv_from(&mut buf) else {
                continue;
            };
            let d = &buf[..n];
            let Some(sp) = d.iter().position(|&b| b == b' ') else {
                continue;
            };
            let mut out = d[..sp].to_vec();
            if d.windows(14).any(|w| w == b"7:command4:pin") {
                out.extend_from_slice(b" d6:result4:ponge");
            } else if d.windows(12).any(|w| w == b"7:command5:o")
                || d.windows(12).any(|w| w == b"7:command6:a")
            {
                let sdp = b"v=0\r\nc=IN IP4 127.76.0.21\r\n";
                out.extend_from_slice(format!(" d3:sdp{}:", sdp.len()).as_bytes());
                out.extend_from_slice(sdp);
                out.extend_from_slice(b"6:result2:oke");
            } else {
                out.extend_from_slice(b" d6:result2:oke");
            }
            let _ = sock.send_to(&out, from);
        }
    }))
}

fn bench_held(o: &Opts) -> Result<(), String> {
    let mg = SocketAddr::new(ip(21), 22222);
    let stop = Arc::new(AtomicBool::new(false));
    let fake = fake_mg(mg, stop.clone())?;
    let mc = start_media_ctl(o, mg, 86_400)?;
    thread::sleep(Duration::from_millis(300));
    let before = ProcStats::sample(mc.child.id()).map_err(|e| e.to_string())?;
    let sock = UdpSocket::bind(SocketAddr::new(ip(99), 0)).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(1)))
        .map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 65_536];
    let t0 = Instant::now();
    let mut failed = 0u64;
    let offer_sdp = sdp(4000);
    // 64 in flight at a time: fast, but no burst the socket buffers drop.
    let mut i = 0u32;
    while i < o.held {
        let batch = (o.held - i).min(64);
        for k in 0..batch {
            let n = i + k;
            let call = format!("held-{n}-3f8a1c2e9b7d@10.10.0.1");
            let d = ng(
                &format!("h{n}"),
                &mut [
                    ("command", "offer"),
                    ("call-id", &call),
                    ("from-tag", "as9d8f7g6h"),
                    ("sdp", &offer_sdp),
                ],
            );
            let _ = sock.send_to(&d, mc.ng);
        }
        let mut got = 0;
        while got < batch {
            match sock.recv(&mut buf) {
                Ok(_) => got += 1,
                Err(_) => {
                    failed += u64::from(batch - got);
                    break;
                }
            }
        }
        i += batch;
    }
    let took = t0.elapsed();
    thread::sleep(Duration::from_millis(500));
    let after = ProcStats::sample(mc.child.id()).map_err(|e| e.to_string())?;
    let status = http_status(SocketAddr::new(ip(2), 9092));
    println!(
        "\nheld calls: {} offers in {:.1} s ({failed} unanswered); media-ctl tracks {}",
        o.held,
        took.as_secs_f64(),
        status.unwrap_or_else(|| "?".into())
    );
    println!("| media-ctl | RSS MiB | peak RSS MiB |\n|---|---:|---:|");
    println!(
        "| started, no calls | {:.1} | {:.1} |",
        before.rss_kb as f64 / 1024.0,
        before.peak_rss_kb as f64 / 1024.0
    );
    println!(
        "| {} calls tracked | {:.1} | {:.1} |",
        o.held,
        after.rss_kb as f64 / 1024.0,
        after.peak_rss_kb as f64 / 1024.0
    );
    println!("target: < 64 MiB with 100000 calls");
    drop(mc);
    stop.store(true, Ordering::Relaxed);
    let _ = fake.join();
    Ok(())
}

/// `"calls":N` from media-ctl's status.
fn http_status(addr: SocketAddr) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /v1/status HTTP/1.0\r\n\r\n").ok()?;
    let mut b = String::new();
    s.read_to_string(&mut b).ok()?;
    let at = b.find("\"calls\":")? + 8;
    Some(b[at..].chars().take_while(char::is_ascii_digit).collect())
}

fn main() -> ExitCode {
    let o = Opts::parse();
    if let Some(f) = &o.floor {
        return match floor_relay(f[0], f[1]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("floor relay: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let mut r = bench_cycles(&o);
    if r.is_ok() && o.held > 0 {
        r = bench_held(&o);
    }
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mg-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
