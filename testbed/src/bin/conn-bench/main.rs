//! `conn-bench`: tens of thousands of registered TCP and TLS subscribers
//! held open through sip-gate (issue 29): what each connection costs the
//! gate in memory, what they cost it in CPU while they idle, and how long
//! the gate takes to accept and register them all.
//!
//! One run, real peers on loopback (`127.82.NET.0/24` for the servers,
//! `127.83.NET.0/24` for the clients' source addresses, at most 1000
//! connections each): a release sip-gate with a TCP and a TLS subscriber
//! listener (TLS from a certificate made for the run), SIPp's
//! `uas_register` behind it over UDP as the registrar (200, Expires 3600),
//! dnsmasq on loopback as the gate's resolver. This program is the
//! subscribers (tokio), in four phases:
//!
//! 1. **baseline**: no connection; the gate's CPU over `--quiet-seconds`
//!    and its RSS.
//! 2. **open**: `--tcp` TCP subscribers at `--rate` connections a second,
//!    then `--tls` TLS ones at `--tls-rate`, each registered through its
//!    connection (`;ob`, `reg-id`, `+sip.instance`: the gate holds the
//!    connection as the subscriber's flow, RFC 5626). The time from the
//!    first connect to the last 200, and the gate's RSS after each set: RSS
//!    per connection, TCP and TLS apart.
//! 3. **quiet**: every connection held, no traffic, `--quiet-seconds`: the
//!    gate's CPU, against the baseline (an idle connection should cost no
//!    wake-up).
//! 4. **keep-alives**: each connection sends a CRLF keep-alive every
//!    `--keepalive-s` (spread evenly) for `--idle-seconds` and waits for
//!    its pong (RFC 5626 3.5.1): the gate's CPU, pings sent and answered.
//!
//! ```text
//! cargo build --release -p sip-gate -p testbed
//! target/release/conn-bench --tcp 50000 --tls 10000
//! target/release/conn-bench --tcp 500 --tls 100 --quiet-seconds 2 --idle-seconds 4 --keepalive-s 2
//! ```
//!
//! It raises its descriptor limit (root: up to `fs.nr_open`) to hold every
//! connection; the gate, started by it, inherits the limit, and its
//! `[tcp] max_connections` is set above the total. Exit status 0 only when
//! every subscriber registered and every keep-alive got its pong.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tokio::sync::watch;

mod client;
mod report;
mod setup;

use client::{Cx, Kind, Plan, Tally};
use report::{Phase, Report, SetRow};

/// Registered TCP and TLS subscribers held open through sip-gate: gate
/// RSS per connection, CPU while idle, time to accept them all.
#[derive(Debug, Parser)]
#[command(name = "conn-bench", version)]
pub(crate) struct Opts {
    /// TCP subscribers (0..=100000).
    #[arg(long, value_name = "N", default_value_t = 50_000,
          value_parser = clap::value_parser!(u32).range(0..=100_000))]
    tcp: u32,
    /// TLS subscribers (0..=20000).
    #[arg(long, value_name = "N", default_value_t = 10_000,
          value_parser = clap::value_parser!(u32).range(0..=20_000))]
    tls: u32,
    /// New TCP connections a second, each registered at once (1..=5000).
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..=5000))]
    rate: u32,
    /// New TLS connections a second (1..=5000): each handshake costs the
    /// gate a signature and a key exchange on the runtime that serves
    /// every connection, and past what the machine can take the gate
    /// answers the REGISTERs read meanwhile with 503 (R-OV-1).
    #[arg(long, value_name = "N", default_value_t = 250,
          value_parser = clap::value_parser!(u32).range(1..=5000))]
    tls_rate: u32,
    /// Seconds between one connection's keep-alives (1..=300); all
    /// connections together send (tcp + tls) / this many a second, at most
    /// 10,000 a second.
    #[arg(long, value_name = "S", default_value_t = 30,
          value_parser = clap::value_parser!(u32).range(1..=300))]
    keepalive_s: u32,
    /// Seconds of keep-alives (1..=600).
    #[arg(long, value_name = "S", default_value_t = 60,
          value_parser = clap::value_parser!(u32).range(1..=600))]
    idle_seconds: u32,
    /// Seconds of the baseline and of the quiet phase (1..=300).
    #[arg(long, value_name = "S", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=300))]
    quiet_seconds: u32,
    /// The third octet of the run's addresses (127.82.NET.x servers,
    /// 127.83.NET.x clients), so two runs do not meet.
    #[arg(long, value_name = "NET", default_value_t = 0)]
    pub(crate) net: u8,
    /// The directory of a sip-gate binary (default: this program's);
    /// given more than once, the gates are measured one after the other in
    /// every round, and compared.
    #[arg(long, value_name = "DIR")]
    pub(crate) bins: Vec<PathBuf>,
    /// Rounds (1..=5): every gate once a round; the comparison shows
    /// medians.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=5))]
    rounds: u32,
}

impl Opts {
    fn check(&self) -> Result<(), String> {
        let total = self.tcp + self.tls;
        if total == 0 {
            return Err("no connection to open (--tcp 0 --tls 0)".into());
        }
        if total / self.keepalive_s > 10_000 {
            return Err(format!(
                "{total} connections every {} s is over 10,000 keep-alives a second: \
                 raise --keepalive-s",
                self.keepalive_s
            ));
        }
        if total.div_ceil(setup::PER_SOURCE) > 254 {
            return Err("more connections than the source addresses hold".into());
        }
        Ok(())
    }

    /// An upper bound of the run's length, for the peers' own timeouts.
    fn lifetime(&self) -> Duration {
        let open = u64::from(self.tcp) / u64::from(self.rate)
            + u64::from(self.tls) / u64::from(self.tls_rate);
        Duration::from_secs(
            open + 2 * u64::from(self.quiet_seconds) + u64::from(self.idle_seconds) + 300,
        )
    }
}

/// The gate's CPU over `secs` from now, % of one core.
async fn cpu_over(peers: &setup::Peers, secs: u32) -> Result<f64, String> {
    let before = peers.sample()?;
    tokio::time::sleep(Duration::from_secs(u64::from(secs))).await;
    let after = peers.sample()?;
    Ok(after.cpu_since(&before).as_secs_f64() / f64::from(secs) * 100.0)
}

/// Opens one set and measures it.
async fn open_measured(
    cx: &Arc<Cx>,
    peers: &setup::Peers,
    (kind, first, count, rate): (Kind, u32, u32, u32),
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<SetRow, String> {
    let before = peers.sample()?;
    let reg_before = Tally::get(&cx.tally.registered);
    let (refused, no_ok) = (Tally::get(&cx.tally.refused), Tally::get(&cx.tally.no_ok));
    let t0 = tokio::time::Instant::now();
    client::open_set(cx, kind, (first, count), rate, tasks).await;
    let took = t0.elapsed();
    // Let the allocator and the gate's tables settle before reading RSS.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = peers.sample()?;
    Ok(SetRow {
        kind,
        count,
        registered: Tally::get(&cx.tally.registered) - reg_before,
        refused: Tally::get(&cx.tally.refused) - refused,
        no_ok: Tally::get(&cx.tally.no_ok) - no_ok,
        took,
        rss_before_kb: before.rss_kb,
        rss_after_kb: after.rss_kb,
    })
}

/// One run on the gate in `bins` (this program's directory if `None`).
async fn run(o: &Opts, bins: Option<&Path>) -> Result<Report, String> {
    let (_dir, dir) = setup::workdir()?;
    let cert = setup::make_cert(&dir, setup::server_ip(o.net, 1))?;
    let peers = setup::Peers::start(o, &dir, bins, o.lifetime())?;
    let (plan_tx, plan_rx) = watch::channel(None);
    let cx = Arc::new(Cx {
        net: o.net,
        gate: setup::server_ip(o.net, 1),
        tls: Arc::new(Cx::tls_config(cert)?),
        tally: Tally::default(),
        plan: plan_rx,
    });
    let label = bins.map_or_else(|| "sip-gate".to_owned(), |b| b.display().to_string());
    let mut report = Report::new(label);
    report.baseline_rss_kb = peers.sample()?.rss_kb;
    let cpu = cpu_over(&peers, o.quiet_seconds).await?;
    report
        .phases
        .push(Phase::new("baseline: no connection", o.quiet_seconds, cpu));

    let mut tasks = Vec::new();
    let sets = [
        (Kind::Tcp, 0, o.tcp, o.rate),
        (Kind::Tls, o.tcp, o.tls, o.tls_rate),
    ];
    for (kind, first, count, rate) in sets {
        if count > 0 {
            eprintln!("opening {count} {kind:?} subscribers at {rate}/s ...");
            let row = open_measured(&cx, &peers, (kind, first, count, rate), &mut tasks).await?;
            eprintln!("{}", row.line());
            report.sets.push(row);
        }
    }
    report.flows_registered = peers.metric("sipgate_flows{state=\"registered\"}");
    report.tcp_connections = peers.metric("sipgate_tcp_connections");

    let held = Tally::get(&cx.tally.registered);
    let now = tokio::time::Instant::now();
    let quiet_until = now + Duration::from_secs(u64::from(o.quiet_seconds));
    let plan = Plan {
        quiet_until,
        interval: Duration::from_secs(u64::from(o.keepalive_s)),
        pings_until: quiet_until + Duration::from_secs(u64::from(o.idle_seconds)),
        total: o.tcp + o.tls,
    };
    let _ = plan_tx.send(Some(plan));
    eprintln!("{held} connections held: quiet {} s ...", o.quiet_seconds);
    let cpu = cpu_over(&peers, o.quiet_seconds).await?;
    report.phases.push(Phase::new(
        "quiet: every connection held, no traffic",
        o.quiet_seconds,
        cpu,
    ));
    eprintln!("keep-alives {} s ...", o.idle_seconds);
    let cpu = cpu_over(&peers, o.idle_seconds).await?;
    let per_s = f64::from(o.tcp + o.tls) / f64::from(o.keepalive_s);
    report.phases.push(Phase::new(
        &format!(
            "keep-alives: each connection every {} s ({per_s:.0}/s)",
            o.keepalive_s
        ),
        o.idle_seconds,
        cpu,
    ));
    report.rss_end_kb = peers.sample()?.rss_kb;
    // The last keep-alives' pongs, then every connection closes.
    let wait = tokio::time::Instant::now() + Duration::from_secs(15);
    for t in tasks {
        let _ = tokio::time::timeout_at(wait, t).await;
    }
    report.take_tally(&cx.tally);
    Ok(report)
}

fn main() -> ExitCode {
    let o = Opts::parse();
    if let Err(e) = o.check() {
        eprintln!("conn-bench: {e}");
        return ExitCode::from(2);
    }
    match setup::raise_nofile(o.tcp + o.tls) {
        Ok(n) => eprintln!("RLIMIT_NOFILE {n} (this program and the gate)"),
        Err(e) => {
            eprintln!("conn-bench: {e}");
            return ExitCode::FAILURE;
        }
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("conn-bench: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let gates: Vec<Option<&Path>> = if o.bins.is_empty() {
        vec![None]
    } else {
        o.bins.iter().map(|b| Some(b.as_path())).collect()
    };
    let mut reports = Vec::new();
    for round in 1..=o.rounds {
        for gate in &gates {
            let name = gate.map_or("sip-gate".into(), |g| g.display().to_string());
            eprintln!("round {round}/{}: {name}", o.rounds);
            match rt.block_on(run(&o, *gate)) {
                Ok(report) => {
                    println!("{}", report.markdown());
                    println!("{}", report.summary());
                    reports.push(report);
                }
                Err(e) => {
                    eprintln!("conn-bench: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    if gates.len() > 1 || o.rounds > 1 {
        println!("{}", report::compare(&reports));
    }
    if reports.iter().all(Report::all_ok) {
        ExitCode::SUCCESS
    } else {
        eprintln!("conn-bench: not every subscriber registered, or a keep-alive went unanswered");
        ExitCode::FAILURE
    }
}
