//! The results of a `sip-bench` run: the table of medians and ratios, each
//! system's failure knee, and the files in `--out`.

use std::fmt::Write as _;
use std::time::Instant;

use testbed::stats::median;

use super::{Opts, Run, System};

fn table(runs: &[Run], o: &Opts) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "| rate (calls/s) | system | runs | calls ok | failed | CPU µs/call (median) | min..max | vs relay | vs Kamailio | peak RSS (MiB) | PSS at end (MiB) | new calls per sg (last round) |");
    let _ = writeln!(
        t,
        "|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|"
    );
    for &rate in &o.rates {
        let med = |s: System| {
            median(
                runs.iter()
                    .filter(|r| r.rate == rate && r.system == s)
                    .map(|r| r.cpu_us_per_call)
                    .collect(),
            )
        };
        let kam = med(System::Kamailio);
        let relay = med(System::Relay);
        let ratio = |cpu: f64, base: f64| {
            if base.is_finite() && base > 0.0 {
                format!("{:.2}x", cpu / base)
            } else {
                "-".into()
            }
        };
        for &s in &o.systems {
            let rs: Vec<&Run> = runs
                .iter()
                .filter(|r| r.rate == rate && r.system == s)
                .collect();
            if rs.is_empty() {
                continue;
            }
            let ok: u64 = rs.iter().map(|r| r.ok).sum();
            let failed: u64 = rs.iter().map(|r| r.failed).sum();
            let cpu = med(s);
            let lo = rs
                .iter()
                .map(|r| r.cpu_us_per_call)
                .fold(f64::INFINITY, f64::min);
            let hi = rs.iter().map(|r| r.cpu_us_per_call).fold(0.0, f64::max);
            let (vs_relay, vs_kam) = (ratio(cpu, relay), ratio(cpu, kam));
            let rss = rs.iter().map(|r| r.peak_rss_kb).max().unwrap_or(0) as f64 / 1024.0;
            let pss = rs.iter().map(|r| r.pss_kb).max().unwrap_or(0) as f64 / 1024.0;
            let spread = rs.last().map_or("", |r| r.spread.as_str());
            let _ = writeln!(t, "| {rate} | {} | {} | {ok} | {failed} | {cpu:.1} | {lo:.1}..{hi:.1} | {vs_relay} | {vs_kam} | {rss:.1} | {pss:.1} | {spread} |", s.name(), rs.len());
        }
    }
    t
}

/// The failure knee of each system: the highest rate of `--rates` up to
/// which every run of every round had zero failed calls (issue 12 compares
/// the gate's to the relay's). "below R" when the lowest rate failed.
fn knees(runs: &[Run], o: &Opts) -> String {
    let mut rates = o.rates.clone();
    rates.sort_unstable();
    let mut t =
        String::from("\nFailure knee (highest rate with zero failed calls in every run up to it):");
    for &s in &o.systems {
        let clean = |rate: u32| {
            let rs: Vec<&Run> = runs
                .iter()
                .filter(|r| r.rate == rate && r.system == s)
                .collect();
            !rs.is_empty() && rs.iter().all(|r| r.failed == 0)
        };
        let knee = rates.iter().take_while(|&&r| clean(r)).last();
        let shown = match (knee, rates.first()) {
            (Some(k), _) if Some(k) == rates.last() => {
                format!("{k} calls/s or more (the highest rate tried)")
            }
            (Some(k), _) => format!("{k} calls/s"),
            (None, Some(lo)) => format!("below {lo} calls/s"),
            (None, None) => "-".into(),
        };
        let _ = write!(t, " {}: {shown};", s.name());
    }
    t.push('\n');
    t
}

/// Each gate configuration's CPU per call over the relay's in the same
/// round, every round and their median: the machine's drift between
/// rounds hits both sides of each ratio alike. With `sip-gate-before`,
/// also `sip-gate` over it (the change against the build before it).
fn same_round(runs: &[Run], o: &Opts) -> String {
    let mut t = String::from("\nSame-round ratios to the relay (median; each round):\n");
    for &rate in &o.rates {
        for &s in o.systems.iter().filter(|s| s.is_gate()) {
            t.push_str(&ratio_line(runs, o, rate, (s, System::Relay)));
        }
    }
    if o.systems.contains(&System::GateBefore) {
        t.push_str("\nSame-round ratios of sip-gate to sip-gate-before (median; each round):\n");
        for &rate in &o.rates {
            t.push_str(&ratio_line(
                runs,
                o,
                rate,
                (System::Gate, System::GateBefore),
            ));
        }
    }
    t
}

/// `* RATE calls/s, A: median (each round)` of A's CPU per call over B's.
fn ratio_line(runs: &[Run], o: &Opts, rate: u32, (a, b): (System, System)) -> String {
    let ratios: Vec<f64> = (1..=o.rounds)
        .filter_map(|round| {
            let cpu = |sys: System| {
                runs.iter()
                    .find(|r| r.rate == rate && r.round == round && r.system == sys)
                    .map(|r| r.cpu_us_per_call)
            };
            Some(cpu(a)? / cpu(b).filter(|&c| c > 0.0)?)
        })
        .collect();
    if ratios.is_empty() {
        return String::new();
    }
    let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    format!(
        "* {rate} calls/s, {}: {:.2}x ({})\n",
        a.name(),
        median(ratios.clone()),
        each.join(", ")
    )
}

/// Context switches per 1000 calls, medians over rounds: of the whole
/// process, and of its busiest thread (issue 29).
fn switches(runs: &[Run], o: &Opts) -> String {
    let mut t = String::from("\nContext switches per 1000 calls (median over rounds): process voluntary / nonvoluntary; busiest thread voluntary / nonvoluntary\n");
    for &rate in &o.rates {
        for &s in &o.systems {
            let rs: Vec<&Run> = runs
                .iter()
                .filter(|r| r.rate == rate && r.system == s)
                .collect();
            let Some(last) = rs.last() else { continue };
            let per = |f: &dyn Fn(&Run) -> u64| {
                median(
                    rs.iter()
                        .map(|r| f(r) as f64 * 1000.0 / (r.ok + r.failed).max(1) as f64)
                        .collect(),
                )
            };
            let _ = writeln!(
                t,
                "* {rate} calls/s, {}: {:.0} / {:.0}; {} {:.0} / {:.0}",
                s.name(),
                per(&|r| r.switches.voluntary),
                per(&|r| r.switches.nonvoluntary),
                last.switches.busiest.0,
                per(&|r| r.switches.busiest.1),
                per(&|r| r.switches.busiest.2),
            );
        }
    }
    t
}

/// The table on stdout and in `OUT/results.md`, every run in `OUT/runs.csv`.
pub(crate) fn write_results(o: &Opts, runs: &[Run], started: Instant) {
    let cmd = std::env::args().collect::<Vec<_>>().join(" ");
    let mut out = format!(
        "Command: `{cmd}` ({:.0} s, {} cores)\n\n",
        started.elapsed().as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    out.push_str(&table(runs, o));
    out.push_str(&same_round(runs, o));
    out.push_str(&switches(runs, o));
    out.push_str(&knees(runs, o));
    println!("{out}");
    if std::fs::create_dir_all(&o.out).is_ok() {
        let _ = std::fs::write(o.out.join("results.md"), &out);
        let mut csv =
            String::from("run_index,round,rate,system,ok,failed,cpu_us_per_call,peak_rss_kb,drops_proxy,drops_servers,drops_other,switches_voluntary,switches_nonvoluntary,busiest_thread,busiest_voluntary,busiest_nonvoluntary\n");
        for (i, r) in runs.iter().enumerate() {
            let _ = writeln!(
                csv,
                "{i},{},{},{},{},{},{:.2},{},{},{},{},{},{},{},{},{}",
                r.round,
                r.rate,
                r.system.name(),
                r.ok,
                r.failed,
                r.cpu_us_per_call,
                r.peak_rss_kb,
                r.drops.proxy,
                r.drops.servers,
                r.drops.other,
                r.switches.voluntary,
                r.switches.nonvoluntary,
                r.switches.busiest.0,
                r.switches.busiest.1,
                r.switches.busiest.2
            );
        }
        let _ = std::fs::write(o.out.join("runs.csv"), csv);
    }
}
