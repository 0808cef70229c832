//! One measured phase: a fresh sip-gate, the call load through it, and in
//! the avalanche phase the REGISTER generator beside it; what the gate
//! spent and what the callers and the generator saw.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use testbed::callbench::{
    all_latencies, caller, queue_wait_p99_ms, refusals, save_metrics, share, timed, BenchNet,
    BenchPhase, GateCost, GateMeter, GateProcess, Outcomes,
};
use testbed::SippHandle;

use crate::gen::GenCounts;
use crate::standin::StandIns;
use crate::Opts;

/// The benchmark's own loopback network: 127.82.0.0/24.
const NET: BenchNet = BenchNet(82);

pub(crate) fn ip(host: u8) -> IpAddr {
    NET.ip(host)
}

/// The three sg stand-ins (127.82.0.11-13).
pub(crate) fn instance_addrs() -> Vec<SocketAddr> {
    (0..3u8)
        .map(|i| SocketAddr::new(ip(11 + i), 5060))
        .collect()
}

/// The gate's admin port (metrics), on its listener's address.
const ADMIN_PORT: u16 = 19093;
/// The first of the avalanche's source addresses (127.82.0.150 on).
pub(crate) const FIRST_SOURCE: u8 = 150;
/// The first of the normal callers' addresses (127.82.0.100 on).
const FIRST_CALLER: u8 = 100;

/// What runs beside the call load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// The call load alone.
    Unloaded,
    /// The call load and the registration avalanche.
    Avalanche,
}

impl BenchPhase for Phase {
    const ROUND: [Phase; 2] = [Phase::Unloaded, Phase::Avalanche];

    fn name(self) -> &'static str {
        match self {
            Phase::Unloaded => "unloaded",
            Phase::Avalanche => "avalanche",
        }
    }
}

/// One measured phase of one round.
#[derive(Clone, Debug)]
pub(crate) struct Run {
    pub(crate) round: u32,
    pub(crate) phase: Phase,
    /// The callers' calls, all sources together.
    pub(crate) calls: Outcomes,
    /// Calls SIPp counted as failed: established calls that failed, and
    /// calls that never got a final answer.
    pub(crate) sipp_failed: u64,
    /// The generator's REGISTER transactions by outcome (zero unloaded).
    pub(crate) regs: GenCounts,
    /// REGISTERs (retransmissions included) the stand-ins answered.
    pub(crate) reached: u64,
    /// The gate's 503s by limit.
    pub(crate) refusals: BTreeMap<String, u64>,
    /// p99 of the in-dialog and of the REGISTER datagrams' wait in the
    /// gate's UDP queues, ms (the upper bound of its bucket; NaN: none).
    pub(crate) queue_p99_ms: f64,
    pub(crate) register_queue_p99_ms: f64,
    /// What the gate spent from the first call placed until the callers
    /// and the generator were done.
    pub(crate) gate: GateCost,
    /// Response times of the calls' re-INVITEs and BYEs, µs, sorted.
    pub(crate) latency_us: Vec<u64>,
}

impl Run {
    /// REGISTER transactions the gate answered or forwarded (the lost ones
    /// left out).
    pub(crate) fn registers_handled(&self) -> u64 {
        self.regs.ok + self.regs.refused + self.regs.other
    }

    /// The gate's whole CPU over the phase per REGISTER handled, µs (the
    /// calls' share included); NaN without REGISTERs.
    pub(crate) fn cpu_us_per_register(&self) -> f64 {
        match self.registers_handled() {
            0 => f64::NAN,
            n => self.gate.cpu_us as f64 / n as f64,
        }
    }
}

/// The site: three sg (the stand-ins) behind a balance listener, and the
/// `[overload]` limits the flags set (the gate's defaults otherwise).
fn site_toml(o: &Opts, listen: SocketAddr) -> String {
    let mut t =
        testbed::callbench::site_head("reg-avalanche", SocketAddr::new(listen.ip(), ADMIN_PORT));
    let _ = writeln!(t, "[overload]");
    if let Some(n) = o.register_capacity {
        let _ = writeln!(
            t,
            "registers_per_s = {n}\nregisters_burst = {}",
            (n / 10).max(1)
        );
    }
    if let Some(n) = o.per_source_register {
        let _ = writeln!(
            t,
            "per_source_register_rate = {n}\nper_source_register_burst = {}",
            (n / 10).max(1)
        );
    }
    for i in 0..3u8 {
        let _ = writeln!(t, "\n[[server]]\nname = \"srv-{i}\"");
    }
    for (i, a) in instance_addrs().iter().enumerate() {
        let _ = writeln!(
            t,
            "[[instance]]\nid = \"sg-{i}\"\nservice = \"sg\"\nserver = \"srv-{i}\"\nsip = \"{a}\""
        );
    }
    let _ = writeln!(t, "[[listener]]\nname = \"subs\"\nbind = \"{listen}\"\ntransports = [\"udp\"]\nmode = \"balance\"\npool = \"sg\"\nleg = \"subscriber\"");
    t
}

/// The call load: `uac_call_or_503` from `--normal-sources` addresses,
/// `--rate` calls/s together for `--seconds`, each held `--hold-ms`,
/// timed with `-trace_shortmsg`.
fn start_callers(o: &Opts, to: SocketAddr, dir: &Path) -> Result<Vec<SippHandle>, String> {
    (0..o.normal_sources)
        .map(|i| {
            let rate = share(o.rate, o.normal_sources, i);
            let from = ip(FIRST_CALLER + i as u8);
            let log = dir.join(format!("calls-{i}.log"));
            let sipp = caller(from, to, u64::from(rate * o.seconds), rate, o.seconds, &log)
                .duration(Duration::from_millis(o.hold_ms.into()));
            timed(sipp, &dir.join(format!("calls-{i}.msg")))
                .spawn()
                .map_err(|e| format!("starting caller {i}: {e}"))
        })
        .collect()
}

/// The generator process (`reg-avalanche gen`), at `--gen-nice`.
fn start_generator(o: &Opts, to: SocketAddr) -> Result<std::process::Child, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = if o.gen_nice > 0 {
        let mut c = Command::new("nice");
        c.arg("-n").arg(o.gen_nice.to_string()).arg(&me);
        c
    } else {
        Command::new(&me)
    };
    let sources: Vec<String> = (0..o.sources)
        .map(|i| ip(FIRST_SOURCE + i as u8).to_string())
        .collect();
    cmd.arg("gen")
        .arg("--to")
        .arg(to.to_string())
        .arg("--sources")
        .arg(sources.join(","))
        .arg("--subscribers")
        .arg(o.subscribers.to_string())
        .arg("--seconds")
        .arg(o.seconds.to_string())
        .arg("--retries")
        .arg(o.retries.to_string())
        .arg("--txn-timeout-s")
        .arg(o.txn_timeout_s.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the generator: {e}"))
}

/// Waits for the generator (at most `limit`) and reads its counts.
fn wait_generator(mut child: std::process::Child, limit: Duration) -> Result<GenCounts, String> {
    let until = Instant::now() + limit;
    loop {
        if child.try_wait().map_err(|e| e.to_string())?.is_some() {
            break;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            return Err("the generator did not finish in time (killed)".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).map_err(|e| {
        format!(
            "the generator's counts ({e}): {text} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Runs one phase on a fresh gate and measures it.
pub(crate) fn measure(o: &Opts, phase: Phase, round: u32, sg: &StandIns) -> Result<Run, String> {
    let addr = phase.gate_addr(NET);
    let gate = GateProcess::start(
        &o.gate(),
        &site_toml(o, addr),
        addr,
        Duration::from_millis(1500),
    )?;
    let dir = tempfile::Builder::new()
        .prefix("reg-avalanche-logs-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let reached_before = sg.registers();
    let meter = GateMeter::start(&gate)?;
    let callers = start_callers(o, addr, dir.path())?;
    let generator = match phase {
        Phase::Avalanche => Some(start_generator(o, addr)?),
        Phase::Unloaded => None,
    };
    let mut errors = Vec::new();
    let mut sipp_failed = 0;
    for c in callers {
        match c.wait(Duration::from_secs(u64::from(o.seconds) + 60)) {
            Ok(r) => {
                sipp_failed += r.failed;
                if r.failed > 0 {
                    errors.push(format!("caller: {} failed {:?}", r.failed, r.failures));
                }
            }
            Err(e) => errors.push(format!("a caller did not finish: {e}")),
        }
    }
    let regs = match generator {
        Some(g) => wait_generator(g, o.generator_limit())?,
        None => GenCounts::default(),
    };
    let (gate, metrics) = meter.finish(gate, SocketAddr::new(addr.ip(), ADMIN_PORT))?;
    save_metrics(&o.out, round, phase.name(), &metrics, &mut errors);
    for e in &errors {
        eprintln!("    {e}");
    }
    let logs: Vec<PathBuf> = (0..o.normal_sources)
        .map(|i| dir.path().join(format!("calls-{i}.log")))
        .collect();
    let latency_us =
        all_latencies((0..o.normal_sources).map(|i| dir.path().join(format!("calls-{i}.msg"))));
    Ok(Run {
        round,
        phase,
        calls: Outcomes::read(&logs),
        sipp_failed,
        regs,
        reached: sg.registers().saturating_sub(reached_before),
        refusals: refusals(&metrics),
        queue_p99_ms: queue_wait_p99_ms(&metrics, "in_dialog"),
        register_queue_p99_ms: queue_wait_p99_ms(&metrics, "register"),
        gate,
        latency_us,
    })
}
