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
/// rounds hits both sides of each ratio alike.
fn same_round(runs: &[Run], o: &Opts) -> String {
    let mut t = String::from("\nSame-round ratios to the relay (median; each round):\n");
    for &rate in &o.rates {
        for &s in o.systems.iter().filter(|s| s.is_gate()) {
            let ratios: Vec<f64> = (1..=o.rounds)
                .filter_map(|round| {
                    let cpu = |sys: System| {
                        runs.iter()
                            .find(|r| r.rate == rate && r.round == round && r.system == sys)
                            .map(|r| r.cpu_us_per_call)
                    };
                    Some(cpu(s)? / cpu(System::Relay).filter(|&c| c > 0.0)?)
                })
                .collect();
            if ratios.is_empty() {
                continue;
            }
            let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
            let _ = writeln!(
                t,
                "* {rate} calls/s, {}: {:.2}x ({})",
                s.name(),
                median(ratios.clone()),
                each.join(", ")
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
    out.push_str(&knees(runs, o));
    println!("{out}");
    if std::fs::create_dir_all(&o.out).is_ok() {
        let _ = std::fs::write(o.out.join("results.md"), &out);
        let mut csv =
            String::from("run_index,round,rate,system,ok,failed,cpu_us_per_call,peak_rss_kb,drops_proxy,drops_servers,drops_other\n");
        for (i, r) in runs.iter().enumerate() {
            let _ = writeln!(
                csv,
                "{i},{},{},{},{},{},{:.2},{},{},{},{}",
                r.round,
                r.rate,
                r.system.name(),
                r.ok,
                r.failed,
                r.cpu_us_per_call,
                r.peak_rss_kb,
                r.drops.proxy,
                r.drops.servers,
                r.drops.other
            );
        }
        let _ = std::fs::write(o.out.join("runs.csv"), csv);
    }
}
