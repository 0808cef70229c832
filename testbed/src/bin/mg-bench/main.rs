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
//! **Before and after.** `--before PATH` adds a fourth path to every round:
//! a second media-ctl binary (say, one built from main) on its own address,
//! so a change to media-ctl is measured against the code it replaces in the
//! same run.
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

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use testbed::{ProcStats, Rtpengine};

mod load;
mod peers;

use load::{cycles, ip, ng, pct, sdp};
use peers::{fake_mg, floor_relay, http_status, start_media_ctl, MediaCtl};
use testbed::stats::median;

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
    /// Another media-ctl binary (e.g. built from main), measured as a
    /// fourth path in every round, for a before/after in one run.
    #[arg(long, value_name = "PATH")]
    before: Option<PathBuf>,
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

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Route {
    Direct,
    Floor,
    MediaCtl,
    Before,
}

impl Route {
    fn name(self) -> &'static str {
        match self {
            Route::Direct => "direct to rtpengine",
            Route::Floor => "via floor relay",
            Route::MediaCtl => "via media-ctl",
            Route::Before => "via media-ctl (--before)",
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
        Route::Before => match &relays.before {
            Some(b) => (b.ng, Some(b.child.id())),
            None => (rtp.ng(), None),
        },
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
    before: Option<MediaCtl>,
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
    let mc = start_media_ctl(&o.media_ctl(), 2, rtp.ng(), 3600)?;
    let before = match &o.before {
        Some(bin) => Some(start_media_ctl(bin, 4, rtp.ng(), 3600)?),
        None => None,
    };
    let floor_ng = SocketAddr::new(ip(3), 2223);
    let floor = Command::new(std::env::current_exe().map_err(|e| e.to_string())?)
        .args(["--floor", &floor_ng.to_string(), &rtp.ng().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting the floor relay: {e}"))?;
    let relays = Relays {
        mc,
        before,
        floor,
        floor_ng,
    };
    let warm = Opts {
        seconds: 1,
        ..o.clone()
    };
    cycles(relays.mc.ng, "warm", &warm);
    cycles(relays.floor_ng, "warmf", &warm);
    if let Some(b) = &relays.before {
        cycles(b.ng, "warmb", &warm);
    }
    let mut runs = Vec::new();
    for round in 0..o.rounds {
        for path in paths(o) {
            let r = run_once(o, round, path, &rtp, &relays);
            eprintln!(
                "round {round} {:<20} ok {:>6} failed {:>3}  rtpengine {:>6.1} µs/cycle  relay {:>6.1} µs/cycle  p50 {:.3} ms  p99 {:.3} ms",
                path.name(), r.ok, r.failed, r.rtp_us, r.mc_us, r.p50, r.p99
            );
            runs.push(r);
        }
    }
    report(o, &runs);
    drop(relays);
    rtp.stop();
    Ok(())
}

/// The paths every round measures, in order.
fn paths(o: &Opts) -> Vec<Route> {
    let mut p = vec![Route::Direct, Route::Floor, Route::MediaCtl];
    if o.before.is_some() {
        p.push(Route::Before);
    }
    p
}

/// The table of medians, and what it says against the targets.
fn report(o: &Opts, runs: &[Run]) {
    let of = |path: Route| runs.iter().filter(move |r| r.path == path);
    let pick = |path: Route, f: &dyn Fn(&Run) -> f64| median(of(path).map(f).collect());
    let share = |path: Route| median(of(path).map(|r| r.mc_us / r.rtp_us).collect());
    println!(
        "\n{} cycles/s × {} s × {} rounds (medians of rounds)\n",
        o.rate, o.seconds, o.rounds
    );
    println!("| path | cycles ok | failed | rtpengine CPU µs/cycle | relay CPU µs/cycle | relay / rtpengine (same run) | command p50 ms | command p99 ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for path in paths(o) {
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
    if o.before.is_some() {
        // Each round's two media-ctl runs against each other, then the median.
        let after: Vec<f64> = of(Route::MediaCtl).map(|r| r.mc_us / r.rtp_us).collect();
        let before: Vec<f64> = of(Route::Before).map(|r| r.mc_us / r.rtp_us).collect();
        let ratio = median(after.iter().zip(&before).map(|(a, b)| a / b).collect());
        println!(
            "--before: {:.1}% of rtpengine's CPU per cycle; media-ctl / --before (same round, median): {ratio:.3}",
            share(Route::Before) * 100.0
        );
    }
    println!(
        "added p99 per command (median p99 via media-ctl − direct): {added:.3} ms  (target < 1 ms)"
    );
}

// === held calls ===

fn bench_held(o: &Opts) -> Result<(), String> {
    let mg = SocketAddr::new(ip(21), 22222);
    let stop = Arc::new(AtomicBool::new(false));
    let fake = fake_mg(mg, stop.clone())?;
    let mc = start_media_ctl(&o.media_ctl(), 2, mg, 86_400)?;
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
