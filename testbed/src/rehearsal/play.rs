//! Plays a scenario's timeline on a running site: every step at its time,
//! loads as bounded SIPp callers, the recorder sampling meanwhile. Ctrl-C
//! (or SIGTERM) ends the run early; the caller then drops the site, which
//! stops everything.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::site::{Site, StopPoll, StopSeen};
use crate::{Error, Result, Scenario as SippScenario, Sipp, SippHandle, SippReport, Transport};

use super::media::{self, MediaCalls};
use super::sample::{self, Recorder, Sample};
use super::scenario::{Action, LoadKind, Scenario};

/// The SIPp scenario of a `load` step of calls.
pub const UAC_SCENARIO: &str = "uac_rehearsal_call";
/// The SIPp scenario of a `load` step of registrations.
pub const UAC_REGISTER: &str = "uac_rehearsal_register";

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

/// What a caller logged about one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallEvent {
    /// 200 to the INVITE.
    Up,
    /// 200 to the BYE.
    End,
    /// 503 to the INVITE.
    Refused,
    /// 200 to a first REGISTER.
    RegUp,
    /// 200 to the de-REGISTER.
    RegEnd,
    /// 503 to a first REGISTER.
    RegRefused,
}

/// One load's caller: its SIPp report and per-call events.
#[derive(Debug, Clone)]
pub struct LoadRun {
    /// The step's label and gate.
    pub label: String,
    /// SIPp's counters (`None` if it could not be read).
    pub report: Option<SippReport>,
    /// Registrations, not calls.
    pub register: bool,
    /// The ng caller beside it (calls only).
    pub media: Option<MediaCalls>,
    /// `(t, event, call-id)` from its log.
    pub events: Vec<(f64, CallEvent, String)>,
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

/// How long a `sigterm_gate`'s node is watched for its exit: the deadline
/// the site gives it (20 s) and some.
const STOP_WATCH_S: f64 = 25.0;

struct Caller {
    label: String,
    register: bool,
    media: Option<std::thread::JoinHandle<MediaCalls>>,
    log: PathBuf,
    handle: SippHandle,
    bound: Duration,
}

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
    let admins = site.gates().iter().map(|g| g.admin).collect();
    let rec = Arc::new(Mutex::new(Recorder::new(admins, site.media_admin(), start)));
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
            if !matches!(s.action, Action::Load { .. }) {
                // A sample at the step itself, so phases cut exactly there.
                rec.lock().unwrap_or_else(|e| e.into_inner()).sample();
            }
            let mut cx = StepCtx {
                out,
                callers: &mut callers,
                deferred: &mut deferred,
                stops: &mut stops,
                now,
            };
            let error = run_step(site, &s.action, &mut cx)
                .err()
                .map(|e| e.to_string());
            marks.push(Mark {
                t: now,
                label: s.action.label(),
                error,
                action: s.action.clone(),
            });
        }
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
        watch_stops(site, &mut stops, now);
        if now >= end && steps.peek().is_none() && deferred.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // A gate sent SIGTERM is watched to its exit (or its deadline), so
    // R-GW-1 is judged on the whole stop, however short the timeline.
    while !interrupted
        && !stop.load(Ordering::Relaxed)
        && stops.iter().any(|s| {
            !s.restart
                && s.seen.exited.is_none()
                && start.elapsed().as_secs_f64() - s.t <= STOP_WATCH_S
        })
    {
        watch_stops(site, &mut stops, start.elapsed().as_secs_f64());
        std::thread::sleep(Duration::from_millis(50));
    }
    let loads = finish_callers(callers, epoch0, interrupted);
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

/// One look at every `sigterm_gate` node still watched: `/readyz` failing
/// while it runs, then its exit.
fn watch_stops(site: &mut Site, stops: &mut [GateStop], now: f64) {
    for st in stops.iter_mut() {
        if st.restart || st.seen.exited.is_some() || now - st.t > STOP_WATCH_S {
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
    callers: &'a mut Vec<Caller>,
    deferred: &'a mut Vec<(f64, Action)>,
    stops: &'a mut Vec<GateStop>,
    now: f64,
}

fn run_step(site: &mut Site, action: &Action, cx: &mut StepCtx<'_>) -> Result<()> {
    let now = cx.now;
    match action {
        Action::Load { .. } => start_load(site, action, cx.out, cx.callers),
        Action::Activate { profile, servers } => {
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
            let seen = gate_of(site, *gate)?.restart(Duration::from_secs(25))?;
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

/// One SIPp caller per gate the load goes through, the rate split
/// between them; each bounded by its call count and a global timeout.
fn start_load(site: &Site, action: &Action, out: &Path, callers: &mut Vec<Caller>) -> Result<()> {
    let Action::Load {
        rate,
        duration_s,
        hold_s,
        listener,
        gate,
        kind,
    } = action
    else {
        return Ok(());
    };
    let l = site.layout();
    let gates: Vec<usize> = match gate {
        Some(g) => vec![*g],
        None => (0..l.gates).collect(),
    };
    let n = u32::try_from(gates.len()).unwrap_or(1).max(1);
    for (j, k) in gates.iter().enumerate() {
        let share = rate / n + u32::from((j as u32) < rate % n);
        if share == 0 {
            continue;
        }
        let to: SocketAddr = l.gate_listener(*k, listener).ok_or(Error::Command {
            command: action.label(),
            message: format!("no listener {listener}"),
        })?;
        let calls = (f64::from(share) * duration_s).ceil() as u64;
        let bound = Duration::from_secs_f64(duration_s + hold_s + 20.0);
        let label = format!("{} via gate-{k}", action.label());
        let log = out.join(format!("caller-{}-gate-{k}.log", callers.len()));
        let xml = match kind {
            LoadKind::Call => UAC_SCENARIO,
            LoadKind::Register => UAC_REGISTER,
        };
        let handle = Sipp::new(SippScenario::repo(xml))
            .local_ip(l.caller_ip())
            .remote(to)
            .transport(Transport::Udp)
            .calls(calls)
            .rate(share)
            .duration(Duration::from_secs_f64(*hold_s))
            .timeout(bound)
            .arg("-trace_logs")
            .arg("-log_file")
            .arg(&log)
            .spawn()?;
        let media = (*kind == LoadKind::Call).then(|| {
            media::spawn(
                l.caller_ip(),
                l.media_ng(),
                format!("c{}-g{k}", callers.len()),
                share,
                Duration::from_secs_f64(*duration_s),
                Duration::from_secs_f64(*hold_s),
            )
        });
        callers.push(Caller {
            label,
            register: *kind == LoadKind::Register,
            media,
            log,
            handle,
            bound,
        });
    }
    Ok(())
}

fn finish_callers(callers: Vec<Caller>, epoch0: f64, interrupted: bool) -> Vec<LoadRun> {
    callers
        .into_iter()
        .map(|c| {
            let report = if interrupted {
                c.handle.stop().ok()
            } else {
                c.handle.wait(c.bound).ok()
            };
            let text = std::fs::read_to_string(&c.log).unwrap_or_default();
            LoadRun {
                label: c.label,
                register: c.register,
                media: c.media.and_then(|m| m.join().ok()),
                report,
                events: parse_events(&text, epoch0),
            }
        })
        .collect()
}

/// `ev up|end|refused CALL-ID ... UNIX-SECONDS` lines of a caller's log.
fn parse_events(text: &str, epoch0: f64) -> Vec<(f64, CallEvent, String)> {
    text.lines()
        .filter_map(|line| {
            let mut w = line.split_whitespace();
            (w.next()? == "ev").then_some(())?;
            let ev = match w.next()? {
                "up" => CallEvent::Up,
                "end" => CallEvent::End,
                "refused" => CallEvent::Refused,
                "regup" => CallEvent::RegUp,
                "regend" => CallEvent::RegEnd,
                "regrefused" => CallEvent::RegRefused,
                _ => return None,
            };
            let call = w.next()?.to_owned();
            let at: f64 = line.split_whitespace().last()?.parse().ok()?;
            Some(((at - epoch0).max(0.0), ev, call))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_logs_become_timed_events() {
        let log = "ev up 1-2@x 2026-11-30\t20:01:36.282307\t1000.5\n\
                   media 1-2@x answer 127.0.0.1\n\
                   ev end 1-2@x 2026-11-30\t20:01:40.0\t1004.0\n\
                   ev refused 2-2@x 2026-11-30\t20:01:41.0\t1005.25\n";
        let e = parse_events(log, 1000.0);
        assert_eq!(
            e,
            [
                (0.5, CallEvent::Up, "1-2@x".to_string()),
                (4.0, CallEvent::End, "1-2@x".to_string()),
                (5.25, CallEvent::Refused, "2-2@x".to_string()),
            ]
        );
    }
}
