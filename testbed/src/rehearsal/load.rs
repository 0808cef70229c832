//! The callers of `load` steps: one SIPp UAC per gate the load goes
//! through (the rate split between them), each bounded by its call count
//! and a global timeout, with an ng caller beside a load of calls
//! ([`super::media`]). On a site of several gates a load that names no gate
//! plays the failover call (`uac_rehearsal_call_failover.xml`): a 503 or a
//! silent gate sends the call to the next gate, as a user agent would.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::site::{Acct, Layout, Site, Svc};
use crate::{Error, Result, Scenario as SippScenario, Sipp, SippHandle, SippReport, Transport};

use super::media::{self, MediaCalls};
use super::scenario::{AccountKind, Action, LoadKind};

/// The SIPp scenario of a `load` step of calls.
pub const UAC_SCENARIO: &str = "uac_rehearsal_call";
/// The SIPp scenario of a `load` step of calls on a site of several gates
/// when the load names no gate: it fails over to the next gate.
pub const UAC_FAILOVER: &str = "uac_rehearsal_call_failover";
/// The SIPp scenario of a `load` step of registrations.
pub const UAC_REGISTER: &str = "uac_rehearsal_register";
/// The SIPp scenario of a `load` step of subscriptions.
pub const UAC_SUBSCRIBE: &str = "uac_rehearsal_subscribe";
/// The SIPp scenario of a `load` step of OPTIONS.
pub const UAC_OPTIONS: &str = "uac_rehearsal_options";

/// What a caller logged about one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallEvent {
    /// 200 to the INVITE.
    Up,
    /// 200 to the BYE.
    End,
    /// 503 to the INVITE (from every gate tried, when failing over).
    Refused,
    /// A gate refused or did not answer: the call went to the next gate.
    Retry,
    /// 200 to a first REGISTER.
    RegUp,
    /// 200 to the de-REGISTER.
    RegEnd,
    /// 503 to a first REGISTER.
    RegRefused,
    /// 200 to a first SUBSCRIBE.
    SubUp,
    /// The subscription removed (200 and NOTIFY terminated).
    SubEnd,
    /// 503 to a first SUBSCRIBE.
    SubRefused,
    /// 200 to an OPTIONS.
    OptOk,
    /// 503 to an OPTIONS.
    OptRefused,
    /// A failover caller's attempt N (1: its own gate, 2: the next, ...)
    /// got a 503 (`ev 503 CALL-ID N`).
    GateRefused(u8),
}

/// One load's caller: its SIPp report and per-call events.
#[derive(Debug, Clone)]
pub struct LoadRun {
    /// The step's label and gate.
    pub label: String,
    /// The gate it called first (its own).
    pub gate: usize,
    /// The gate listener it called.
    pub listener: String,
    /// The kind of esg account of its calls.
    pub account: AccountKind,
    /// The esg account of its calls, by name (none: the callers match no
    /// account).
    pub account_name: Option<String>,
    /// SIPp's counters (`None` if it could not be read).
    pub report: Option<SippReport>,
    /// What its "calls" are.
    pub kind: LoadKind,
    /// The ng caller beside it (calls only).
    pub media: Option<MediaCalls>,
    /// `(t, event, call-id)` from its log.
    pub events: Vec<(f64, CallEvent, String)>,
    /// Per established call, the address in its answer's SDP: the sg/esg
    /// instance that took it.
    pub answered: BTreeMap<String, IpAddr>,
    /// Per `(call, attempt)` a gate refused, the 503's reason phrase.
    pub refused_why: BTreeMap<(String, u8), String>,
}

/// A running caller.
pub(crate) struct Caller {
    label: String,
    gate: usize,
    listener: String,
    account: Option<Acct>,
    kind: LoadKind,
    media: Option<(Arc<AtomicBool>, std::thread::JoinHandle<MediaCalls>)>,
    log: PathBuf,
    handle: SippHandle,
    bound: Duration,
}

/// Starts the callers of a `load` step.
pub(crate) fn start(
    site: &Site,
    action: &Action,
    out: &Path,
    callers: &mut Vec<Caller>,
) -> Result<()> {
    let Action::Load {
        rate,
        duration_s,
        hold_s,
        listener,
        gate,
        kind,
        account,
    } = action
    else {
        return Ok(());
    };
    let l = site.layout();
    let gates: Vec<usize> = match gate {
        Some(g) => vec![*g],
        None => (0..l.gates()).collect(),
    };
    let failover = gate.is_none() && l.gates() > 1 && *kind == LoadKind::Call;
    let account = load_account(l, listener, account.as_deref());
    let n = u32::try_from(gates.len()).unwrap_or(1).max(1);
    for (j, k) in gates.iter().enumerate() {
        let share = rate / n + u32::from((j as u32) < rate % n);
        if share == 0 {
            continue;
        }
        let bound = Duration::from_secs_f64(duration_s + hold_s + 20.0);
        let log = out.join(format!("caller-{}-gate-{k}.log", callers.len()));
        // The ng caller follows this file from its start: none of an
        // earlier run's lines.
        let _ = std::fs::remove_file(&log);
        let from = account.as_ref().map_or(l.caller_ip(), |a| a.caller);
        let handle = sipp(site, action, *k, share, failover, from, &log)?
            .timeout(bound)
            .spawn()?;
        let media = (*kind == LoadKind::Call).then(|| {
            let done = Arc::new(AtomicBool::new(false));
            let t = media::follow(log.clone(), l.media_ng(), done.clone());
            (done, t)
        });
        callers.push(Caller {
            label: format!("{} via gate-{k}", action.label()),
            gate: *k,
            listener: listener.clone(),
            account: account.clone(),
            kind: *kind,
            media,
            log,
            handle,
            bound,
        });
    }
    Ok(())
}

/// The SIPp caller of a load's `share` through gate `k`, logging to `log`;
/// with `failover`, the next gates are given as its alternatives.
fn sipp(
    site: &Site,
    action: &Action,
    k: usize,
    share: u32,
    failover: bool,
    from: IpAddr,
    log: &Path,
) -> Result<Sipp> {
    let Action::Load {
        duration_s,
        hold_s,
        listener,
        kind,
        ..
    } = action
    else {
        return Err(Error::Command {
            command: action.label(),
            message: "not a load".into(),
        });
    };
    let l = site.layout();
    let to = |g: usize| -> Result<SocketAddr> {
        site.caller_target(g % l.gates(), listener)
            .ok_or(Error::Command {
                command: action.label(),
                message: format!("no listener {listener}"),
            })
    };
    let xml = match (kind, failover) {
        (LoadKind::Register, _) => UAC_REGISTER,
        (LoadKind::Subscribe, _) => UAC_SUBSCRIBE,
        (LoadKind::Options, _) => UAC_OPTIONS,
        (LoadKind::Call, true) => UAC_FAILOVER,
        (LoadKind::Call, false) => UAC_SCENARIO,
    };
    let mut sipp = Sipp::new(SippScenario::repo(xml))
        .local_ip(from)
        .remote(to(k)?)
        .transport(Transport::Udp)
        .calls((f64::from(share) * duration_s).ceil() as u64)
        .rate(share)
        .duration(Duration::from_secs_f64(*hold_s))
        .arg("-trace_logs")
        .arg("-log_file")
        .arg(log);
    if failover {
        // The next gates, in order, wrapping round.
        // The caller knows four gates, the most a site has (MAX_GATES).
        for (i, name) in [(1, "gate2"), (2, "gate3"), (3, "gate4")] {
            let next = to(k + i)?;
            sipp = sipp
                .arg("-key")
                .arg(format!("{name}_ip"))
                .arg(next.ip().to_string())
                .arg("-key")
                .arg(format!("{name}_port"))
                .arg(next.port().to_string());
        }
    }
    Ok(sipp)
}

/// The account a load's callers belong to: the one it names, or on a
/// listener in front of the esg the site's first multi-instance account.
fn load_account(l: &Layout, listener: &str, name: Option<&str>) -> Option<Acct> {
    let esg = l.listener(listener).is_some_and(|x| {
        x.pool == Some(Svc::Esg)
            || x.guard.as_ref().is_some_and(|g| {
                l.instances()
                    .iter()
                    .any(|i| &i.id == g && i.svc == Svc::Esg)
            })
    });
    match name {
        Some(n) => l.account(n).cloned(),
        None if esg => l.account("multi").cloned(),
        None => None,
    }
}

impl Caller {
    /// Its SIPp log (the `ev` lines).
    pub(crate) fn log(&self) -> &Path {
        &self.log
    }
}

impl LoadRun {
    /// A load of calls (INVITE dialogs with media).
    pub fn is_call(&self) -> bool {
        self.kind == LoadKind::Call
    }
}

/// Waits for every caller (or stops it, when the run was interrupted) and
/// reads what it logged.
pub(crate) fn finish(callers: Vec<Caller>, epoch0: f64, interrupted: bool) -> Vec<LoadRun> {
    callers
        .into_iter()
        .map(|c| {
            let report = if interrupted {
                c.handle.stop().ok()
            } else {
                c.handle.wait(c.bound).ok()
            };
            let media = c.media.and_then(|(done, t)| {
                done.store(true, Ordering::Relaxed);
                t.join().ok()
            });
            let text = std::fs::read_to_string(&c.log).unwrap_or_default();
            LoadRun {
                label: c.label,
                gate: c.gate,
                listener: c.listener,
                account: match &c.account {
                    Some(a) if !a.multi => AccountKind::Single,
                    _ => AccountKind::Multi,
                },
                account_name: c.account.map(|a| a.name),
                kind: c.kind,
                media,
                report,
                events: parse_events(&text, epoch0),
                answered: parse_answers(&text),
                refused_why: parse_reasons(&text),
            }
        })
        .collect()
}

/// `ev up|end|refused|retry CALL-ID ... UNIX-SECONDS` (and `ev 503 CALL-ID
/// N ...`) lines of a caller's log.
pub(super) fn parse_events(text: &str, epoch0: f64) -> Vec<(f64, CallEvent, String)> {
    text.lines()
        .filter_map(|line| {
            let mut w = line.split_whitespace();
            (w.next()? == "ev").then_some(())?;
            let ev = match w.next()? {
                "up" => CallEvent::Up,
                "end" => CallEvent::End,
                "refused" => CallEvent::Refused,
                "retry" => CallEvent::Retry,
                "regup" => CallEvent::RegUp,
                "regend" => CallEvent::RegEnd,
                "regrefused" => CallEvent::RegRefused,
                "subup" => CallEvent::SubUp,
                "subend" => CallEvent::SubEnd,
                "subrefused" => CallEvent::SubRefused,
                "optok" => CallEvent::OptOk,
                "optrefused" => CallEvent::OptRefused,
                "503" => CallEvent::GateRefused(0),
                _ => return None,
            };
            let call = w.next()?.to_owned();
            let ev = match ev {
                CallEvent::GateRefused(_) => CallEvent::GateRefused(w.next()?.parse().ok()?),
                ev => ev,
            };
            let at: f64 = line.split_whitespace().last()?.parse().ok()?;
            Some(((at - epoch0).max(0.0), ev, call))
        })
        .collect()
}

/// `ev 503 CALL-ID N REASON... TIME` lines (a failover caller's attempt N)
/// and `ev regrefused|subrefused CALL-ID 503 REASON... TIME` (attempt 0):
/// each refusal's reason phrase.
pub(super) fn parse_reasons(text: &str) -> BTreeMap<(String, u8), String> {
    text.lines()
        .filter_map(|line| {
            let w: Vec<&str> = line.split_whitespace().collect();
            if w.len() < 4 || w[0] != "ev" {
                return None;
            }
            let (attempt, from) = match w[1] {
                "503" => (w.get(3)?.parse().ok()?, 4),
                "regrefused" | "subrefused" => (0, 3),
                _ => return None,
            };
            // The reason runs up to the timestamp's three fields (date,
            // time, Unix seconds).
            let why = w[from.min(w.len())..w.len().saturating_sub(3).max(from)].join(" ");
            // The REGISTER and SUBSCRIBE callers log the status line from
            // its code on (`503 Service Unavailable`).
            let why = why.strip_prefix("503 ").map_or(why.clone(), str::to_owned);
            Some(((w[2].to_owned(), attempt), why))
        })
        .collect()
}

/// `media CALL-ID answer ADDRESS` lines: who answered each call.
pub(super) fn parse_answers(text: &str) -> BTreeMap<String, IpAddr> {
    text.lines()
        .filter_map(|line| {
            let mut w = line.split_whitespace();
            (w.next()? == "media").then_some(())?;
            let call = w.next()?;
            (w.next()? == "answer").then_some(())?;
            Some((call.to_owned(), w.next()?.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_logs_become_timed_events_and_answers() {
        let log = "ev up 1-2@x 2026-11-30\t20:01:36.282307\t1000.5\n\
                   media 1-2@x answer 127.0.0.20\n\
                   media 1-2@x reanswer 127.0.0.21\n\
                   ev end 1-2@x 2026-11-30\t20:01:40.0\t1004.0\n\
                   ev 503 2-2@x 2 No Instance Available 2026-11-30\t20:01:40.5\t1004.5\n\
                   ev retry 2-2@x 2026-11-30\t20:01:40.5\t1004.5\n\
                   ev refused 2-2@x 2026-11-30\t20:01:41.0\t1005.25\n\
                   ev regrefused 3-2@x 503 Service Unavailable (starting) 2026-11-30\t20:01:42.0\t1006.0\n";
        let e = parse_events(log, 1000.0);
        assert_eq!(
            e,
            [
                (0.5, CallEvent::Up, "1-2@x".to_string()),
                (4.0, CallEvent::End, "1-2@x".to_string()),
                (4.5, CallEvent::GateRefused(2), "2-2@x".to_string()),
                (4.5, CallEvent::Retry, "2-2@x".to_string()),
                (5.25, CallEvent::Refused, "2-2@x".to_string()),
                (6.0, CallEvent::RegRefused, "3-2@x".to_string()),
            ]
        );
        assert_eq!(
            parse_reasons(log),
            [
                (
                    ("2-2@x".to_string(), 2),
                    "No Instance Available".to_string()
                ),
                (
                    ("3-2@x".to_string(), 0),
                    "Service Unavailable (starting)".to_string()
                ),
            ]
            .into()
        );
        let a = parse_answers(log);
        assert_eq!(a.len(), 1);
        assert_eq!(a["1-2@x"], "127.0.0.20".parse::<IpAddr>().unwrap());
    }
}
