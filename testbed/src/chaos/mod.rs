//! `testbed chaos`: random faults from a seed against a whole site under
//! a mixed load, every promise checked against the far ends' own record
//! (docs/rehearsal.md, "Chaos"). The rehearsal's site, load and sampler
//! run it; the instances' SIPp logs and the callers' are the ground truth
//! ([`truth`]); [`invariants`] judge it.

pub mod ap;
pub mod ap_log;
pub mod evidence;
pub mod health_log;
pub mod inject;
pub mod invariants;
pub mod invariants_ops;
pub mod invariants_zone;
pub mod loss;
pub mod operators;
pub mod plan;
pub mod report;
pub mod rng;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_more;
pub mod truth;
pub mod waits;
pub mod watch;
pub mod zone;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::rehearsal::load::{self, LoadRun};
use crate::rehearsal::play::Played;
use crate::rehearsal::sample::{self, Recorder};
use crate::rehearsal::scenario::{Action, LoadKind};
use crate::site::{ringsync, BinDir, Site, StoreKind, Svc};
use crate::{Error, Result};

pub use report::ChaosReport;

/// How a chaos run runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The seed of the fault timeline and the operators' choices.
    pub seed: u64,
    /// Seconds of faults and load.
    pub duration_s: f64,
    /// Where the report and the site's files and logs go.
    pub out: PathBuf,
    /// No progress line.
    pub quiet: bool,
    /// Where the project's binaries are (default [`BinDir::locate`]).
    pub bins: Option<BinDir>,
    /// The run's `/24` (default: from the pid).
    pub net: Option<[u8; 3]>,
    /// Gate nodes (2 or 3).
    pub gates: usize,
    /// New calls per second.
    pub rate: u32,
    /// Seconds a drain may take to reach every gate.
    pub bound_s: f64,
    /// Break a promise on purpose: the last gate breaks it, to see the
    /// invariants catch it.
    pub breaks: Option<crate::site::Break>,
}

/// Operators changing profiles at once.
const OPERATORS: usize = 3;
/// Hold time of each call, registration and subscription.
const HOLD_S: f64 = 4.0;
/// Shortest and longest run.
pub const DURATION_S: (f64, f64) = (30.0, 7200.0);

/// Every invariant, in the report's order.
pub fn judge(e: &evidence::Evidence) -> Vec<evidence::Invariant> {
    vec![
        invariants::calls_survive(e),
        invariants::drained_means_empty(e),
        invariants_zone::no_new_work_past_bound(e),
        invariants_zone::none_refused_while_one_could_take_it(e),
        invariants_ops::last_mg_kept(e),
        ap::one_leader(e),
        invariants_ops::operators(e),
    ]
}

/// The chaos site: 3 sg, 2 mg, `gates` gate nodes, a three-member etcd
/// cluster, one Active-Passive group (so `ringsync serve` runs), short
/// timers.
fn builder(gates: usize) -> crate::site::SiteBuilder {
    Site::builder()
        .sg(3)
        .mg(2)
        .gates(gates)
        .ap_groups(1)
        .ap_pace_s(5)
        .store(StoreKind::Etcd)
        .gate_deadline_s(4)
        .mg_drain_window_s(4)
        .delay_fronts()
}

/// The fault timeline `seed` draws for a run of `duration_s` on the chaos
/// site of `gates` gate nodes.
pub fn timeline(seed: u64, duration_s: f64, gates: usize) -> Result<Vec<plan::Planned>> {
    let layout = builder(gates).layout()?;
    let menu = plan::Menu {
        gates,
        serve: !layout.ap().is_empty(),
        etcd: layout.store() == StoreKind::Etcd,
        instances: layout
            .instances()
            .into_iter()
            .filter(|i| matches!(i.svc, Svc::Sg | Svc::Esg))
            .map(|i| i.id)
            .collect(),
        agents: layout
            .ap_groups()
            .into_iter()
            .flat_map(|(_, m)| m.into_iter().map(|(id, _)| id))
            .collect(),
        delay: true,
    };
    Ok(plan::plan(seed, duration_s, &menu))
}

/// What the run recorded while it ran.
struct Recorded {
    faults: Vec<plan::Done>,
    loads: Vec<LoadRun>,
    samples: Vec<crate::rehearsal::sampled::Sample>,
    status: (Vec<watch::StatusSample>, usize),
    waits: Vec<waits::WaitReturn>,
    ops: Vec<operators::OpRecord>,
    epoch0: f64,
    end_s: f64,
}

/// Runs a chaos run: prints its fault timeline, builds the site, plays the
/// load, the faults and the operators, reads the far ends' logs, judges,
/// writes `report.md` and `report.json` into `opts.out`.
pub fn run(opts: &Options, stop: &Arc<AtomicBool>) -> Result<ChaosReport> {
    let timeline = timeline(opts.seed, opts.duration_s, opts.gates)?;
    eprint!("{}", plan::timeline_text(opts.seed, &timeline));
    let mut site = start_site(opts)?;
    let rec = play(&mut site, opts, &timeline, stop)?;
    let (audit, store_end) = read_store(&site, rec.epoch0);
    let layout = site.layout().clone();
    let logs: Vec<(String, Vec<PathBuf>)> = layout
        .instances()
        .iter()
        .filter(|i| matches!(i.svc, Svc::Sg | Svc::Esg))
        .map(|i| (i.id.clone(), site.uas_logs(&i.id)))
        .collect();
    let members: Vec<String> = layout
        .ap_groups()
        .into_iter()
        .flat_map(|(_, m)| m.into_iter().map(|(id, _)| id))
        .collect();
    let site_dir = site.dir().to_path_buf();
    // Everything stops: the instances' and agents' logs are whole after this.
    let relayed = site.relayed();
    drop(site);
    let ops = operators::resolve(&rec.ops, &audit);
    let calls = truth::callers(&rec.loads);
    let mut held = read_held(&layout, &logs, &rec);
    truth::end_at_callers_bye(&mut held, &calls);
    let evidence = evidence::Evidence {
        calls,
        held,
        faults: rec.faults.clone(),
        status: rec.status.0.clone(),
        ops,
        audit,
        store_end,
        samples: rec.samples.clone(),
        instances: layout
            .instances()
            .iter()
            .filter(|i| matches!(i.svc, Svc::Sg | Svc::Esg))
            .map(|i| (i.id.clone(), i.svc.as_str().to_owned(), i.server.clone()))
            .collect(),
        bound_s: opts.bound_s,
        end_s: rec.end_s,
        refusals: truth::refusals(&rec.loads, layout.gates(), |l| {
            layout
                .listener(l)
                .and_then(|l| l.pool)
                .map_or("sg", |p| p.as_str())
                .to_owned()
        }),
        ap: ap_log::read_agents(&site_dir, &members, rec.epoch0, &agent_kills(&rec.faults)),
        ap_pace_s: f64::from(layout.ap_pace_s()),
        waits: rec.waits.clone(),
        gate_down: health_log::read_gates(&site_dir, layout.gates(), rec.epoch0, rec.end_s),
    };
    let report = build_report(opts, &layout, timeline, (rec, relayed), &evidence);
    write(&opts.out.join("report.md"), report.markdown())?;
    let json = serde_json::to_string_pretty(&report).map_err(std::io::Error::other)?;
    write(&opts.out.join("report.json"), json)?;
    Ok(report)
}

/// When each agent kill that happened struck, and whose agent.
fn agent_kills(faults: &[plan::Done]) -> Vec<(f64, String)> {
    faults
        .iter()
        .filter(|f| f.happened())
        .filter_map(|f| match &f.fault {
            plan::Fault::KillAgent { member } => Some((f.t, member.clone())),
            _ => None,
        })
        .collect()
}

/// Checks the options, empties the run's site directory and starts the
/// chaos site.
fn start_site(opts: &Options) -> Result<Site> {
    if !(DURATION_S.0..=DURATION_S.1).contains(&opts.duration_s) || !(2..=3).contains(&opts.gates) {
        return Err(Error::Command {
            command: "testbed chaos".into(),
            message: format!(
                "--minutes gives {} s: {} to {} s; --gates {}: 2 or 3",
                opts.duration_s, DURATION_S.0, DURATION_S.1, opts.gates
            ),
        });
    }
    let site_dir = opts.out.join("site");
    if site_dir.exists() {
        std::fs::remove_dir_all(&site_dir).map_err(|source| Error::File {
            path: site_dir.clone(),
            source,
        })?;
    }
    let mut b = builder(opts.gates)
        .dir(&site_dir)
        .lifetime(Duration::from_secs_f64(opts.duration_s + 120.0));
    if let Some(n) = opts.net {
        b = b.net(n);
    }
    if let Some(how) = opts.breaks {
        b = b.break_gate(opts.gates - 1, how);
    }
    if let Some(bins) = &opts.bins {
        b = b.bins(bins.clone());
    }
    b.run()
}

/// What every instance held, from its logs (one per run of its UAS).
fn read_held(
    layout: &crate::site::Layout,
    logs: &[(String, Vec<PathBuf>)],
    rec: &Recorded,
) -> Vec<truth::Held> {
    let gate_of = |ip| (0..layout.gates()).find(|k| layout.gate_ip(*k) == ip);
    let mut held: Vec<truth::Held> = Vec::new();
    let mut later = Vec::new();
    for (id, paths) in logs {
        // A run of the instance that was killed held nothing past its kill.
        let kills: Vec<f64> = rec
            .faults
            .iter()
            .filter(|f| matches!(&f.fault, plan::Fault::KillInstance { instance, .. } if instance == id))
            .map(|f| f.t)
            .collect();
        let mut earlier = std::collections::BTreeSet::new();
        for (k, path) in paths.iter().enumerate() {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            later.extend(truth::later_registers(id, &text, rec.epoch0));
            let run = truth::parse_uas(id, &text, rec.epoch0, gate_of);
            let mut run = truth::drop_calls_of_earlier_runs(&earlier, run);
            if let Some(t) = kills.get(k) {
                for h in &mut run {
                    h.to = Some(h.to.map_or(*t, |to| to.min(*t)));
                }
            }
            earlier.extend(run.iter().map(|h| h.id.clone()));
            held.extend(run);
        }
    }
    truth::moved_bindings(&mut held, &later);
    held
}

fn build_report(
    opts: &Options,
    layout: &crate::site::Layout,
    timeline: Vec<plan::Planned>,
    (rec, relayed): (Recorded, u64),
    e: &evidence::Evidence,
) -> ChaosReport {
    let played = Played {
        marks: Vec::new(),
        samples: Vec::new(),
        loads: rec.loads,
        gate_stops: Vec::new(),
    };
    use crate::rehearsal::report as r;
    ChaosReport {
        seed: opts.seed,
        duration_s: opts.duration_s,
        replay: format!(
            "testbed chaos --seed {} --minutes {} --gates {} --rate {} --bound-s {}{}",
            opts.seed,
            opts.duration_s / 60.0,
            opts.gates,
            opts.rate,
            opts.bound_s,
            opts.breaks
                .map_or(String::new(), |b| format!(" --break {}", b.name()))
        ),
        site: crate::rehearsal::site_map::words(layout),
        timeline,
        faults: rec.faults,
        invariants: judge(e),
        calls: r::calls(&played),
        registrations: r::registrations(&played),
        subscriptions: r::requests(&played, LoadKind::Subscribe),
        held: e.held.len(),
        status_samples: (rec.status.0.len(), rec.status.1),
        relayed,
        operator_changes: e.ops.clone(),
        samples: rec.samples,
        status_changes: report::status_changes(&e.status),
        waits: e.waits.clone(),
        ap: e.ap.clone(),
    }
}

/// The load, the samplers and the operators for `opts.duration_s`, the
/// faults at their instants; then everything the callers did.
fn play(
    site: &mut Site,
    opts: &Options,
    timeline: &[plan::Planned],
    stop: &Arc<AtomicBool>,
) -> Result<Recorded> {
    let start = Instant::now();
    let epoch0 = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    let (bins, file) = (site.bins().clone(), site.site_file().to_path_buf());
    let admins = site.gates().iter().map(|g| g.admin).collect();
    let rec = Arc::new(Mutex::new(Recorder::new(
        admins,
        site.media_admin(),
        Some((bins.clone(), file.clone())),
        start,
    )));
    let (sampling, watching, operating) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let sampler = sample::spawn(rec.clone(), sampling.clone(), opts.quiet);
    let waiters = waits::Waiters::new(bins.clone(), file.clone(), start);
    let servers = site
        .layout()
        .instances()
        .into_iter()
        .map(|i| (i.id, i.server))
        .collect();
    let watcher = watch::spawn(
        bins.clone(),
        file.clone(),
        start,
        watching.clone(),
        servers,
        waiters.clone(),
    );
    let ops =
        operators::Operators::start(OPERATORS, opts.seed, &bins, file, start, operating.clone());
    let callers = start_loads(site, opts, &rec)?;
    let (faults, interrupted) = inject_all(site, opts, timeline, start, stop);
    operating.store(true, Ordering::Relaxed);
    let ops = ops.finish();
    let loads = load::finish(callers, epoch0, interrupted);
    watching.store(true, Ordering::Relaxed);
    sampling.store(true, Ordering::Relaxed);
    let status = watcher.join().unwrap_or_default();
    let waits = waiters.finish();
    let _ = sampler.join();
    if interrupted {
        return Err(Error::Interrupted);
    }
    let samples = rec
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .samples()
        .to_vec();
    Ok(Recorded {
        faults,
        loads,
        samples,
        status,
        waits,
        ops,
        epoch0,
        end_s: start.elapsed().as_secs_f64(),
    })
}

/// The calls (failover callers), registrations and subscriptions, from
/// now until in time for their last ones to end before the run does; the
/// recorder follows the callers' logs (gate failovers).
fn start_loads(site: &Site, opts: &Options, rec: &Mutex<Recorder>) -> Result<Vec<load::Caller>> {
    let mut callers = Vec::new();
    let out = site.dir().to_path_buf();
    let load_s = (opts.duration_s - HOLD_S - 8.0).max(5.0);
    // Forgetful gates are seen on `drained` only where calls are all an sg
    // holds: registrations keep it draining to their expiry.
    let forgetful = opts.breaks == Some(crate::site::Break::ForgetfulGates);
    let others = if forgetful { 0 } else { 2 };
    for (kind, rate) in [
        (LoadKind::Call, opts.rate),
        (LoadKind::Register, others),
        (LoadKind::Subscribe, others),
    ] {
        if rate == 0 {
            continue;
        }
        let a = Action::Load {
            rate,
            duration_s: load_s,
            hold_s: HOLD_S,
            listener: "subscribers".into(),
            gate: None,
            kind,
            account: None,
        };
        load::start(site, &a, &out, &mut callers)?;
    }
    let mut r = rec.lock().unwrap_or_else(|e| e.into_inner());
    for c in &callers {
        r.follow_caller(c.log().to_path_buf());
    }
    Ok(callers)
}

/// Injects each fault of `timeline` at its instant until the run's end
/// (or `stop`); the faults as injected, and whether `stop` ended it.
fn inject_all(
    site: &mut Site,
    opts: &Options,
    timeline: &[plan::Planned],
    start: Instant,
    stop: &AtomicBool,
) -> (Vec<plan::Done>, bool) {
    let mut faults = Vec::new();
    let mut due = timeline.iter().peekable();
    while start.elapsed().as_secs_f64() < opts.duration_s {
        if stop.load(Ordering::Relaxed) {
            return (faults, true);
        }
        let now = start.elapsed().as_secs_f64();
        while let Some(p) = due.next_if(|p| p.at_s <= now) {
            faults.push(inject::inject(site, p, start));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (faults, false)
}

/// The audit log (every page) and the store's profiles at the end.
#[allow(clippy::type_complexity)]
fn read_store(
    site: &Site,
    epoch0: f64,
) -> (
    Vec<operators::AuditEntry>,
    Option<BTreeMap<String, (bool, Vec<String>)>>,
) {
    let (bins, file) = (site.bins(), site.site_file());
    let mut audit = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut args = vec!["audit", "--limit", "1000"];
        if let Some(a) = &after {
            args.extend(["--after", a.as_str()]);
        }
        let Ok(page) = ringsync(bins, file, &args) else {
            break;
        };
        for r in page["records"].as_array().into_iter().flatten() {
            audit.push(operators::AuditEntry {
                at_s: r["at_ms"].as_f64().unwrap_or(0.0) / 1000.0 - epoch0,
                action: r["action"].as_str().unwrap_or_default().to_owned(),
                profile: r["profile"]["name"].as_str().map(str::to_owned),
                status: r["status"].as_u64().unwrap_or(0) as u16,
                revision: r["revision"].as_u64(),
                before_revision: r["before"]["revision"].as_u64(),
            });
        }
        match page["next"].as_u64() {
            Some(n) => after = Some(n.to_string()),
            None => break,
        }
    }
    let end = ringsync(bins, file, &["profile", "list"]).ok().map(|list| {
        list.as_array()
            .or_else(|| list["profiles"].as_array())
            .into_iter()
            .flatten()
            .filter_map(|p| {
                let servers = p["servers"]
                    .as_array()?
                    .iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect();
                Some((
                    p["name"].as_str()?.to_owned(),
                    (p["state"] == "active", servers),
                ))
            })
            .collect()
    });
    (audit, end)
}

fn write(path: &Path, text: String) -> Result<()> {
    std::fs::write(path, text).map_err(|source| Error::File {
        path: path.to_path_buf(),
        source,
    })
}
