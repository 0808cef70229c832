//! `sip-bench`: the load benchmark of sip-gate against Kamailio and a blind
//! UDP relay, side by side on the same SIPp load, in one run.
//!
//! For every rate, every system gets the same stock SIPp `uac` load (calls
//! for `--seconds` at the rate) toward three stock `uas` servers, in rounds
//! that interleave the systems so machine noise hits them alike. For each
//! run it records calls ok/failed, the proxy's CPU per call (user+sys of its
//! whole process tree over the run, divided by the calls), its peak RSS
//! (summed per process: an upper bound for Kamailio, whose workers share
//! memory) and its PSS at the end of the run (shared pages counted once);
//! the table reports medians over rounds and the ratios to the relay and
//! to Kamailio. A run that cannot finish is reported and left out.
//!
//! Systems: `relay` (the floor: one recv and one send per datagram; it
//! reads only the Call-ID, to keep each call on one of the same three
//! servers), `kamailio` (bench/kamailio/kamailio.cfg: tm + rr + dispatcher),
//! `sip-gate` (the default configuration: one UDP worker, more only while
//! it is busy), `sip-gate+drain` (the same with one of the three sg in an
//! active drain profile), `sip-gate-1` (`[overload] udp_workers = 1`, a
//! fixed worker), `sip-gate-per-core` (`udp_workers` fixed at the core
//! count) and `sip-gate-before` (the default configuration run from the
//! binary `--gate-before` names: a change against the build before it).
//!
//! Each run also reads the context switches of the proxy's threads
//! (`/proc/PID/task/*/status`): of the process, and of its busiest thread.
//!
//! ```text
//! cargo build --release -p sip-gate -p testbed
//! target/release/sip-bench --rates 1000,2000 --seconds 10 --rounds 3
//! # a change against main's binary, copied aside before the change:
//! target/release/sip-bench --systems relay,sip-gate,sip-gate-before \
//!     --gate-before /path/to/sip-gate-of-main
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use testbed::net::UdpDrops;
use testbed::{wait_listening, Kamailio, ProcStats, Scenario, Sipp, SippHandle, Transport};

mod report;
mod switches;
mod system;

use switches::Switches;
use system::{gate_site, ip, uas_addr, System, SERVERS};

/// SIPp's socket buffers, bytes (the kernel caps them at
/// `net.core.rmem_max`). With SIPp's default of 64 KiB the caller's receive
/// queue overflowed (25 datagrams in one run at 5000 calls/s, none at the
/// proxy or the servers) and a call failed for the load generator's sake.
const SIPP_BUFFER: &str = "4194304";

/// The load benchmark: the same stock SIPp call load through each proxy in
/// turn, in interleaved rounds, reporting CPU per call, memory and failed
/// calls side by side (medians, and the ratio to Kamailio).
#[derive(Debug, Parser)]
#[command(name = "sip-bench", version)]
struct Opts {
    /// Call rates to measure, in calls per second (comma-separated, each
    /// 1..=5000: the machine is shared).
    #[arg(long, value_name = "N,...", value_delimiter = ',', default_value = "1000,2000",
          value_parser = clap::value_parser!(u32).range(1..=5000))]
    rates: Vec<u32>,
    /// Seconds of load per run (1..=60); each run places rate x seconds calls.
    #[arg(long, value_name = "S", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=60))]
    seconds: u32,
    /// Rounds: every system is measured once per round, systems interleaved,
    /// so machine noise hits them alike; the table shows medians.
    #[arg(long, value_name = "N", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Systems to measure, comma-separated.
    #[arg(
        long,
        value_name = "SYSTEM,...",
        value_delimiter = ',',
        default_value = "relay,kamailio,sip-gate,sip-gate+drain,sip-gate-1,sip-gate-per-core"
    )]
    systems: Vec<System>,
    /// The sip-gate binary (default: `sip-gate` next to this one).
    #[arg(long, value_name = "PATH")]
    gate: Option<PathBuf>,
    /// The sip-gate binary the `sip-gate-before` system runs (required for
    /// it).
    #[arg(long, value_name = "PATH")]
    gate_before: Option<PathBuf>,
    /// The blind-relay binary (default: `blind-relay` next to this one).
    #[arg(long, value_name = "PATH")]
    relay: Option<PathBuf>,
    /// Directory for results.md (the table) and runs.csv (every run).
    #[arg(long, value_name = "DIR", default_value = "bench-out")]
    out: PathBuf,
}

impl Opts {
    /// A binary named `name` in the directory of this one.
    fn sibling(name: &str) -> PathBuf {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join(name)))
            .unwrap_or_else(|| PathBuf::from(name))
    }

    fn gate(&self) -> PathBuf {
        self.gate
            .clone()
            .unwrap_or_else(|| Opts::sibling("sip-gate"))
    }

    fn relay(&self) -> PathBuf {
        self.relay
            .clone()
            .unwrap_or_else(|| Opts::sibling("blind-relay"))
    }
}

/// One measured run.
#[derive(Clone, Debug)]
struct Run {
    system: System,
    rate: u32,
    /// The round it ran in (from 1): ratios are taken within a round.
    round: u32,
    ok: u64,
    failed: u64,
    cpu_us_per_call: f64,
    peak_rss_kb: u64,
    pss_kb: u64,
    /// New calls per sg as the gate counted them (gate systems only).
    spread: String,
    /// SIPp's failure reasons, when any call failed.
    why: String,
    /// Datagrams dropped at full receive queues during the run.
    drops: Drops,
    /// The proxy's context switches during the run.
    switches: switches::Delta,
}

/// Where datagrams were dropped for a full receive queue during a run:
/// which side lost what, when a call fails.
#[derive(Debug, Default, Clone, Copy)]
struct Drops {
    /// At the proxy's sockets.
    proxy: u64,
    /// At the three servers' sockets.
    servers: u64,
    /// Elsewhere in the namespace: the caller (whose socket is closed by the
    /// time the run is read) or any other.
    other: u64,
}

impl Drops {
    fn any(&self) -> bool {
        self.proxy + self.servers + self.other > 0
    }

    /// Between two readings around a run of the proxy at `proxy`.
    fn between(before: &UdpDrops, after: &UdpDrops, proxy: SocketAddr) -> Drops {
        let proxy = after.at_since(before, proxy);
        let servers = (0..SERVERS)
            .map(|i| after.at_since(before, uas_addr(i)))
            .sum();
        Drops {
            proxy,
            servers,
            other: after.total_since(before).saturating_sub(proxy + servers),
        }
    }
}

/// A proxy process under test; killed on drop.
struct Proxy {
    child: Option<Child>,
    kamailio: Option<testbed::KamailioHandle>,
    _dir: tempfile::TempDir,
    /// The HEP collector of `sip-gate+capture`.
    _sink: Option<system::Sink>,
}

impl Proxy {
    fn pid(&self) -> u32 {
        match (&self.child, &self.kamailio) {
            (Some(c), _) => c.id(),
            (None, Some(k)) => k.pid(),
            _ => 0,
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(k) = self.kamailio.take() {
            k.stop();
        }
    }
}

/// Starts a proxy binary with its output discarded; the error names the
/// binary and the package that builds it.
fn spawn_quiet(mut cmd: Command, package: &str) -> Result<Child, String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            format!(
                "starting {}: {e} (cargo build --release -p {package})",
                cmd.get_program().to_string_lossy()
            )
        })
}

fn start(system: System, o: &Opts) -> Result<Proxy, String> {
    let dir = tempfile::Builder::new()
        .prefix("sip-bench-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let addr = system.addr();
    let (child, kamailio) = match system {
        System::Relay => {
            // The same three servers as the gate and Kamailio: a relay to one
            // of them would have fewer processes to wake on the same cores.
            let mut args = vec!["--listen".to_string(), addr.to_string()];
            for i in 0..SERVERS {
                args.extend(["--upstream".to_string(), uas_addr(i).to_string()]);
            }
            let mut c = Command::new(o.relay());
            c.args(&args);
            (Some(spawn_quiet(c, "testbed")?), None)
        }
        System::Kamailio => {
            // 1 GB of shared and 64 MB of private memory: tm keeps every
            // transaction for its 5 s wait timer, ~40k at 2000 calls/s, and
            // with the 64 MB default t_relay answers "500 ... (1/SL)"
            // (out of memory) for a good share of the calls.
            let mut k = Kamailio::new()
                .listen(addr)
                .transports(&[Transport::Udp])
                .workers(2)
                .arg("-m")
                .arg("1024")
                .arg("-M")
                .arg("64");
            for i in 0..SERVERS {
                k = k.destination(uas_addr(i), Transport::Udp);
            }
            (
                None,
                Some(k.start().map_err(|e| format!("starting kamailio: {e}"))?),
            )
        }
        System::Gate
        | System::GateDrain
        | System::GateOne
        | System::GatePerCore
        | System::GateBefore
        | System::GateCapture => {
            let site = gate_site(dir.path(), addr, system)?;
            let bin = match system {
                System::GateBefore => o.gate_before.clone().unwrap_or_default(),
                _ => o.gate(),
            };
            let mut c = Command::new(bin);
            c.arg("--config").arg(&site).env("RUST_LOG", "warn");
            (Some(spawn_quiet(c, "sip-gate")?), None)
        }
    };
    let sink = match system {
        System::GateCapture => Some(system::Sink::start()?),
        _ => None,
    };
    let proxy = Proxy {
        child,
        kamailio,
        _dir: dir,
        _sink: sink,
    };
    if !wait_listening(addr, Transport::Udp, Duration::from_secs(10)) {
        return Err(format!("{} did not listen on {addr}", system.name()));
    }
    // Let the gate read its profiles and probe its instances once.
    std::thread::sleep(Duration::from_millis(1500));
    Ok(proxy)
}

fn servers() -> Result<Vec<SippHandle>, String> {
    (0..SERVERS)
        .map(|i| {
            // -aa: answer the gate's OPTIONS health probes with 200, as a
            // real sg does; unanswered, every sg would be `down` and the
            // view would fall back to all members, draining ones included.
            Sipp::new(Scenario::builtin("uas"))
                .local(uas_addr(i).ip(), uas_addr(i).port())
                .arg("-aa")
                .arg("-buff_size")
                .arg(SIPP_BUFFER)
                .timeout(Duration::from_secs(600))
                .spawn()
                .map_err(|e| format!("starting uas {i}: {e}"))
        })
        .collect()
}

fn measure(system: System, (rate, round): (u32, u32), o: &Opts) -> Result<Run, String> {
    let proxy = start(system, o)?;
    let calls = u64::from(rate) * u64::from(o.seconds);
    let drops_before = UdpDrops::read();
    let before = ProcStats::sample(proxy.pid()).map_err(|e| e.to_string())?;
    let switches_before = Switches::read(proxy.pid());
    let report = Sipp::new(Scenario::builtin("uac"))
        .local_ip(ip(100))
        .arg("-buff_size")
        .arg(SIPP_BUFFER)
        .remote(system.addr())
        .calls(calls)
        .rate(rate)
        .timeout(Duration::from_secs(u64::from(o.seconds) + 30))
        .spawn()
        .map_err(|e| format!("starting uac: {e}"))?
        .wait(Duration::from_secs(u64::from(o.seconds) + 60))
        .map_err(|e| format!("uac: {e}"))?;
    let after = ProcStats::sample(proxy.pid()).map_err(|e| e.to_string())?;
    let switches = Switches::read(proxy.pid()).since(&switches_before);
    let drops_after = UdpDrops::read();
    // Where the gate sent new calls: proves the drain steered (sg-1 gets none).
    let spread = if system.is_gate() {
        new_work_spread(SocketAddr::new(system.addr().ip(), 19091))
    } else {
        String::new()
    };
    let done = report.successful + report.failed;
    Ok(Run {
        system,
        rate,
        round,
        ok: report.successful,
        failed: report.failed.max(calls.saturating_sub(done)),
        cpu_us_per_call: after.cpu_since(&before).as_micros() as f64 / calls as f64,
        drops: Drops::between(&drops_before, &drops_after, system.addr()),
        switches,
        peak_rss_kb: after.peak_rss_kb,
        pss_kb: after.pss_kb,
        spread,
        why: if report.failed > 0 || report.successful < calls {
            format!(
                "created={} exit={:?} {:?} retrans={} {}",
                report.created,
                report.exit_code,
                report.failures,
                report.retransmissions,
                report.errors.chars().take(600).collect::<String>()
            )
        } else {
            String::new()
        },
    })
}

/// `sg-0 n0 / sg-1 n1 / sg-2 n2` from the gate's `sipgate_new_work_total`,
/// then its UDP worker count at the end of the run (`sipgate_udp_workers`).
fn new_work_spread(admin: SocketAddr) -> String {
    use std::io::{Read, Write};
    let Ok(mut conn) = std::net::TcpStream::connect_timeout(&admin, Duration::from_secs(2)) else {
        return "metrics unreachable".into();
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n");
    let mut body = String::new();
    let _ = conn.read_to_string(&mut body);
    let spread = (0..SERVERS)
        .map(|i| {
            let key = format!("sipgate_new_work_total{{instance=\"sg-{i}\"}} ");
            let n = body
                .lines()
                .find_map(|l| l.strip_prefix(key.as_str()))
                .unwrap_or("0");
            format!("sg-{i} {n}")
        })
        .collect::<Vec<_>>()
        .join(" / ");
    let workers = body
        .lines()
        .find_map(|l| l.strip_prefix("sipgate_udp_workers{listener=\"subs\"} "))
        .unwrap_or("?");
    format!("{spread}; {workers} udp workers")
}

/// Every run of every round, systems interleaved, with progress on stderr.
fn run_all(o: &Opts) -> Result<Vec<Run>, String> {
    let total = o.rates.len() * o.systems.len() * o.rounds as usize;
    let (mut runs, mut started) = (Vec::new(), 0);
    for round in 1..=o.rounds {
        for &rate in &o.rates {
            for &system in &o.systems {
                started += 1;
                eprint!(
                    "[{started}/{total}] round {round}, {rate} calls/s x {} s, {:<15} ",
                    o.seconds,
                    system.name()
                );
                // A run that cannot finish (on a loaded machine SIPp may
                // outlive its deadline) is reported and left out of the
                // medians; the other runs still count.
                let r = match measure(system, (rate, round), o) {
                    Ok(r) => r,
                    Err(e) => {
                        eprintln!("error: {e} (run left out)");
                        continue;
                    }
                };
                eprintln!(
                    "ok {:>6} failed {:>4}  {:>7.1} µs/call  peak {:>6} KiB",
                    r.ok, r.failed, r.cpu_us_per_call, r.peak_rss_kb
                );
                if !r.spread.is_empty() {
                    eprintln!("    new calls: {}", r.spread);
                }
                eprintln!("    context switches: {}", r.switches);
                if !r.why.is_empty() {
                    eprintln!("    failures: {}", r.why);
                }
                if r.drops.any() {
                    let d = r.drops;
                    eprintln!(
                        "    datagrams dropped at full receive queues: proxy {}, servers {}, caller or other {}",
                        d.proxy, d.servers, d.other
                    );
                }
                runs.push(r);
            }
        }
    }
    Ok(runs)
}

fn main() -> ExitCode {
    let o = Opts::parse();
    if o.systems.contains(&System::GateBefore) && o.gate_before.is_none() {
        eprintln!("sip-bench: sip-gate-before needs --gate-before PATH");
        return ExitCode::FAILURE;
    }
    let before = o.gate_before.clone().unwrap_or_else(|| o.gate());
    for (what, path) in [
        ("sip-gate", &o.gate()),
        ("blind-relay", &o.relay()),
        ("the --gate-before binary", &before),
    ] {
        if !path.exists() {
            eprintln!(
                "sip-bench: {what} not found at {} (cargo build --release -p sip-gate -p testbed)",
                path.display()
            );
            return ExitCode::FAILURE;
        }
    }
    let servers = match servers() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sip-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let started = Instant::now();
    let Ok(runs) = run_all(&o) else {
        return ExitCode::FAILURE;
    };
    drop(servers);
    report::write_results(&o, &runs, started);
    let failed: u64 = runs.iter().map(|r| r.failed).sum();
    if failed > 0 {
        eprintln!("sip-bench: {failed} failed calls in total");
    }
    ExitCode::SUCCESS
}
