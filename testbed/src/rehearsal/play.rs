//! Plays a scenario's timeline on a running site: every step at its time,
//! loads as bounded SIPp callers, the recorder sampling meanwhile. Ctrl-C
//! (or SIGTERM) ends the run early; the caller then drops the site, which
//! stops everything.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::site::{Site, StopPoll, StopSeen};
use crate::{Error, Result};

use super::load;
pub use super::load::{CallEvent, LoadRun};
use super::sample::{self, Recorder, Sample};
use super::scenario::{Action, Scenario};

/// A step as it happened.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Mark {
    /// Seconds after the start.
    pub t: f64,
    /// What it did.
    pub label: String,
    /// Why it failed, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The action.
    #[serde(skip)]
    pub action: Action,
}

/// Everything a run produced, for the report.
#[derive(Debug)]
pub struct Played {
    /// Steps as they happened.
    pub marks: Vec<Mark>,
    /// Samples, once a second.
    pub samples: Vec<Sample>,
    /// The loads' callers.
    pub loads: Vec<LoadRun>,
    /// Every gate stop (`sigterm_gate`, `restart_gate`) as seen from outside.
    pub gate_stops: Vec<GateStop>,
}

/// A gate's stop: when its SIGTERM went and what followed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GateStop {
    /// Gate number.
    pub gate: usize,
    /// Seconds after the start of the SIGTERM.
    pub t: f64,
    /// Restarted after it (`restart_gate`).
    pub restart: bool,
    /// What followed, in seconds after the SIGTERM.
    #[serde(flatten)]
    pub seen: StopSeen,
}

/// How long past the deadline the site gives a stopping gate its exit is
/// watched for.
const STOP_WATCH_SLACK_S: f64 = 5.0;

/// Plays `scenario` on `site`; `stop` is set by a signal handler.
pub fn play(
    scenario: &Scenario,
    site: &mut Site,
    out: &Path,
    quiet: bool,
    stop: &Arc<AtomicBool>,
) -> Result<Played> {
    let start = Instant::now();
    let epoch0 = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    let rec = Arc::new(Mutex::new(recorder(site, start)));
    let sampling = Arc::new(AtomicBool::new(false));
    let sampler = sample::spawn(rec.clone(), sampling.clone(), quiet);

    let mut steps: Vec<_> = scenario.steps.iter().collect();
    steps.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    let mut steps = steps.into_iter().peekable();
    let mut deferred: Vec<(f64, Action)> = Vec::new();
    let (mut marks, mut callers, mut stops) = (Vec::new(), Vec::new(), Vec::new());
    let end = scenario.end_s();
    let mut interrupted = false;
    loop {
        let now = start.elapsed().as_secs_f64();
        if stop.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        while let Some(s) = steps.next_if(|s| s.at_s <= now) {
            let mut cx = StepCtx {
                out,
                callers: &mut callers,
                deferred: &mut deferred,
                stops: &mut stops,
                now,
            };
            marks.push(step_now(site, &s.action, &rec, &mut cx));
        }
        end_deferred(site, &mut deferred, now);
        watch_stops(site, &mut stops, now);
        if now >= end && steps.peek().is_none() && deferred.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if !interrupted {
        watch_to_exit(site, &mut stops, start, stop);
    }
    let loads = load::finish(callers, epoch0, interrupted);
    sampling.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    if interrupted {
        return Err(Error::Interrupted);
    }
    let mut rec = rec.lock().unwrap_or_else(|e| e.into_inner());
    rec.sample();
    Ok(Played {
        marks,
        samples: rec.samples().to_vec(),
        loads,
        gate_stops: stops,
    })
}

/// Runs a step that is due and returns its mark: a sample at the step
/// itself first, so phases cut exactly there, and the callers it started
/// followed by the recorder.
fn step_now(site: &mut Site, action: &Action, rec: &Mutex<Recorder>, cx: &mut StepCtx<'_>) -> Mark {
    if !matches!(action, Action::Load { .. }) {
        rec.lock().unwrap_or_else(|e| e.into_inner()).sample();
    }
    let before = cx.callers.len();
    let error = run_step(site, action, cx).err().map(|e| e.to_string());
    let mut r = rec.lock().unwrap_or_else(|e| e.into_inner());
    for c in cx.callers.get(before..).unwrap_or_default() {
        r.follow_caller(c.log().to_path_buf());
    }
    Mark {
        t: cx.now,
        label: action.label(),
        error,
        action: action.clone(),
    }
}

/// Ends the steps that last a while (an etcd outage) once their time is up.
fn end_deferred(site: &mut Site, deferred: &mut Vec<(f64, Action)>, now: f64) {
    deferred.retain(|(at, a)| {
        if *at <= now {
            if let (Action::StopEtcd { .. }, Some(e)) = (a, site.etcd_mut()) {
                let _ = e.start();
            }
            false
        } else {
            true
        }
    });
}

/// The site's sampler: every gate, media-ctl, and the handover status when
/// the site has Active-Passive groups.
fn recorder(site: &Site, start: Instant) -> Recorder {
    let admins = site.gates().iter().map(|g| g.admin).collect();
    let ap = (!site.layout().ap().is_empty())
        .then(|| (site.bins().clone(), site.site_file().to_path_buf()));
    Recorder::new(admins, site.media_admin(), ap, start)
}

/// A gate sent SIGTERM is watched to its exit (or its deadline), so R-GW-1
/// is judged on the whole stop, however short the timeline.
fn watch_to_exit(site: &mut Site, stops: &mut [GateStop], start: Instant, stop: &AtomicBool) {
    let watch_s = f64::from(site.layout().run.gate_deadline_s) + STOP_WATCH_SLACK_S;
    while !stop.load(Ordering::Relaxed)
        && stops.iter().any(|s| {
            !s.restart && s.seen.exited.is_none() && start.elapsed().as_secs_f64() - s.t <= watch_s
        })
    {
        watch_stops(site, stops, start.elapsed().as_secs_f64());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One look at every `sigterm_gate` node still watched: `/readyz` failing
/// while it runs, then its exit.
fn watch_stops(site: &mut Site, stops: &mut [GateStop], now: f64) {
    for st in stops.iter_mut() {
        let watch_s = f64::from(site.layout().run.gate_deadline_s) + STOP_WATCH_SLACK_S;
        if st.restart || st.seen.exited.is_some() || now - st.t > watch_s {
            continue;
        }
        let Some(g) = site.gate_mut(st.gate) else {
            continue;
        };
        match g.poll_stop() {
            StopPoll::NotReady => {
                st.seen.not_ready.get_or_insert(now - st.t);
            }
            StopPoll::Exited => st.seen.exited = Some(now - st.t),
            StopPoll::Ready => st.seen.ready = Some(now - st.t),
            StopPoll::Silent => {}
        }
    }
}

/// What a step may change besides the site.
struct StepCtx<'a> {
    out: &'a Path,
    callers: &'a mut Vec<load::Caller>,
    deferred: &'a mut Vec<(f64, Action)>,
    stops: &'a mut Vec<GateStop>,
    now: f64,
}

fn run_step(site: &mut Site, action: &Action, cx: &mut StepCtx<'_>) -> Result<()> {
    let now = cx.now;
    match action {
        Action::Load { .. } => load::start(site, action, cx.out, cx.callers),
        Action::Activate { profile, servers } => {
            // A profile of the site's store is there already (seeded).
            let s: Vec<&str> = servers.iter().map(String::as_str).collect();
            site.activate(profile, &s)
        }
        Action::Deactivate { profile } => site.deactivate(profile),
        Action::SigtermGate { gate } => {
            gate_of(site, *gate)?.sigterm();
            cx.stops.push(GateStop {
                gate: *gate,
                t: now,
                restart: false,
                seen: StopSeen::default(),
            });
            Ok(())
        }
        Action::RestartGate { gate } => {
            // Past the node's own deadline, so it is seen to keep it.
            let g = gate_of(site, *gate)?;
            let wait = Duration::from_secs(u64::from(g.deadline_s()) + 5);
            let seen = g.restart(wait)?;
            cx.stops.push(GateStop {
                gate: *gate,
                t: now,
                restart: true,
                seen,
            });
            Ok(())
        }
        Action::KillInstance { instance } => site.kill_instance(instance),
        Action::StopEtcd { for_s } => {
            let e = site.etcd_mut().ok_or(Error::Command {
                command: "stop_etcd".into(),
                message: "the site has no etcd".into(),
            })?;
            e.stop();
            cx.deferred.push((now + for_s, action.clone()));
            Ok(())
        }
    }
}

fn gate_of(site: &mut Site, k: usize) -> Result<&mut crate::site::GateNode> {
    site.gate_mut(k).ok_or(Error::Command {
        command: format!("gate {k}"),
        message: "no such gate".into(),
    })
}
