//! What media-ctl tells operators: its own status (`/v1/status`, `media-ctl
//! status`) and the site-wide work report type (`/v1/work`, summed by
//! `ringsync status` with the gates' reports, R-ST-1..3).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Instant, SystemTime};

use ringsync::config::Service;
use ringsync::view::{DrainView, Health, InstanceState, Zone};
use ringsync::work::{unix_ms, InstanceWork, NodeKind, Unknown, WorkCounts, WorkReport};
use serde::{Deserialize, Serialize};

use crate::controller::Controller;
use crate::pool::{is_up, Member};
use crate::weights::Trend;

/// How an instance takes new calls right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Assign {
    /// mg in the normal zone at full weight.
    Normal,
    /// mg draining, its weight falling (R-MG-1, R-MG-4).
    RampingDown,
    /// mg back in the normal zone, its weight rising (R-MG-4).
    RampingUp,
    /// mg draining at weight 0: no new calls.
    Out,
    /// mg draining but the last one up: still assignable (R-MG-3).
    QueuedForDrain,
    /// Probe failing: no new calls; its calls get errors (R-MG-5).
    Down,
    /// bgmg taking the new calls of its local sg/esg (R-BG-1).
    Pinned,
    /// bgmg whose local sg/esg drains: no new calls (R-BG-3).
    Closed,
}

impl Assign {
    /// The name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Assign::Normal => "normal",
            Assign::RampingDown => "ramping_down",
            Assign::RampingUp => "ramping_up",
            Assign::Out => "out",
            Assign::QueuedForDrain => "queued_for_drain",
            Assign::Down => "down",
            Assign::Pinned => "pinned",
            Assign::Closed => "closed",
        }
    }
}

/// One mg or bgmg in the status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MgStatus {
    /// Instance id.
    pub id: String,
    /// `mg` or `bgmg`.
    pub service: Service,
    /// Its server.
    pub server: String,
    /// Its ng address.
    pub ng: SocketAddr,
    /// Its zone (bgmg: always normal, R-BG-1).
    pub zone: Zone,
    /// Ping result.
    pub health: Health,
    /// State (R-ST-1): `drained` only when media-ctl vouches for zero calls.
    pub state: InstanceState,
    /// How it takes new calls.
    pub assign: Assign,
    /// Weight for new calls (0..1).
    pub weight: f64,
    /// When the ramp ends (Unix ms), while ramping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp_ends_ms: Option<u64>,
    /// Calls media-ctl tracks on it.
    pub calls: u64,
    /// New calls it was given since media-ctl started.
    pub new_calls: u64,
    /// bgmg: may be turned off (R-BG-2, R-BG-3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stoppable: Option<bool>,
    /// Why the count cannot be vouched for, if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown: Option<String>,
}

/// media-ctl's status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// Site name.
    pub site: String,
    /// This node's name.
    pub node: String,
    /// Started (Unix ms).
    pub started_ms: u64,
    /// Made (Unix ms).
    pub generated_ms: u64,
    /// Profile revision of the drain view.
    pub revision: u64,
    /// Servers in the drain zone.
    pub drain_zone: Vec<String>,
    /// The drain ramp window, seconds.
    pub window_s: u64,
    /// Calls tracked.
    pub calls: u64,
    /// Commands waiting for an mg.
    pub pending: usize,
    /// Every mg and bgmg.
    pub instances: Vec<MgStatus>,
    /// Counters since start: `new_calls.<reason>`, `errors.<reason>`,
    /// `dropped.<reason>`, `bgmg_skipped.<reason>`, `idle_forgotten.<reason>`.
    pub counters: BTreeMap<String, u64>,
}

impl Controller {
    /// The status at `now`.
    pub fn status(&self, node: &str, now: Instant) -> Status {
        let view = self.drain.view();
        let sys = SystemTime::now();
        let instances = self
            .pool
            .members()
            .iter()
            .map(|m| self.member_status(m, &view, now, sys))
            .collect();
        Status {
            site: self.config.site.name.clone(),
            node: node.to_owned(),
            started_ms: unix_ms(self.started),
            generated_ms: unix_ms(sys),
            revision: view.revision(),
            drain_zone: view.drain_zone().iter().cloned().collect(),
            window_s: self.settings.window.as_secs(),
            calls: self.calls.total(),
            pending: self.pending(),
            instances,
            counters: self
                .counters
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|((group, label), n)| (format!("{group}.{label}"), *n))
                .collect(),
        }
    }

    fn member_status(
        &self,
        m: &Member,
        view: &DrainView,
        now: Instant,
        sys: SystemTime,
    ) -> MgStatus {
        let iv = &view.instances()[m.idx];
        let calls = self.calls.calls(m.idx);
        let unknown = self.unknown_reason(m.idx, calls);
        let work = unknown.is_none().then_some(calls);
        let (assign, weight, ramp_ends) = self.assignment(m, view, now);
        let stoppable = (m.service == Service::Bgmg).then(|| {
            // R-BG-2, R-BG-3: only when the local sg/esg drain and nothing is left.
            view.drain_zone().contains(&m.server) && work == Some(0)
        });
        MgStatus {
            id: m.id.clone(),
            service: m.service.clone(),
            server: m.server.clone(),
            ng: m.ng,
            zone: iv.zone,
            health: iv.health,
            state: InstanceState::of(iv.zone, iv.health, work),
            assign,
            weight,
            ramp_ends_ms: ramp_ends.map(|at| unix_ms(sys + at.saturating_duration_since(now))),
            calls,
            new_calls: self.lock_choosing().chooser.assigned(m.idx),
            stoppable,
            unknown,
        }
    }

    fn assignment(
        &self,
        m: &Member,
        view: &DrainView,
        now: Instant,
    ) -> (Assign, f64, Option<Instant>) {
        if !is_up(view, m.idx) {
            return (Assign::Down, 0.0, None);
        }
        if m.service == Service::Bgmg {
            return if view.drain_zone().contains(&m.server) {
                (Assign::Closed, 0.0, None)
            } else {
                (Assign::Pinned, 1.0, None)
            };
        }
        let window = self.settings.window;
        let st = self.lock_choosing();
        let Some(ramp) = st.ramps.get(m.idx) else {
            return (Assign::Normal, 1.0, None);
        };
        let weight = ramp.weight(now, window);
        let ends = (ramp.trend(now, window) != Trend::Steady).then(|| ramp.ends_at(window));
        if view.is_draining(m.idx) {
            let normal_up = self.pool.members().iter().any(|o| {
                o.service == Service::Mg && is_up(view, o.idx) && !view.is_draining(o.idx)
            });
            if !normal_up {
                return (Assign::QueuedForDrain, 1.0, None);
            }
            let a = if weight > 0.0 {
                Assign::RampingDown
            } else {
                Assign::Out
            };
            return (a, weight, ends);
        }
        let a = if weight < 1.0 {
            Assign::RampingUp
        } else {
            Assign::Normal
        };
        (a, weight, ends)
    }

    fn unknown_reason(&self, idx: usize, calls: u64) -> Option<String> {
        if self.census.vouched(idx) {
            return None;
        }
        Some(match self.census.sessions(idx) {
            Some(s) => format!(
                "media-ctl started at {} ms and tracks {calls} calls here, but the mg holds {s} sessions: calls placed before the start are not in its table",
                unix_ms(self.started)
            ),
            None => "the mg has not yet reported its sessions since media-ctl started".into(),
        })
    }

    /// Sets the per-instance gauges (calls, weight, state) from the status.
    pub fn publish_gauges(&self, now: Instant) {
        use crate::metrics as m;
        let st = self.status("", now);
        for i in &st.instances {
            metrics::gauge!(m::CALLS, "instance" => i.id.clone()).set(i.calls as f64);
            if i.service == Service::Mg {
                metrics::gauge!(m::WEIGHT, "instance" => i.id.clone()).set(i.weight);
            }
            for s in InstanceState::ALL {
                let on = s == i.state;
                metrics::gauge!(m::STATE, "instance" => i.id.clone(), "state" => s.as_str())
                    .set(if on { 1.0 } else { 0.0 });
            }
            let queued = i.assign == Assign::QueuedForDrain;
            metrics::gauge!(m::STATE, "instance" => i.id.clone(), "state" => "queued_for_drain")
                .set(if queued { 1.0 } else { 0.0 });
        }
        metrics::gauge!(m::PENDING).set(st.pending as f64);
    }

    /// The work report (`/v1/work`): calls per mg and bgmg, `stoppable` for
    /// bgmg, and why a count cannot be vouched for (R-ST-2, R-ST-3).
    pub fn work_report(&self, node: &str, now: Instant) -> WorkReport {
        let st = self.status(node, now);
        let view = self.drain.view();
        let instances = st
            .instances
            .into_iter()
            .map(|s| {
                let w = InstanceWork {
                    health: s.health,
                    counts: WorkCounts {
                        calls: s.calls,
                        ..WorkCounts::default()
                    },
                    unknown: s.unknown.map(|reason| Unknown {
                        reason,
                        until_ms: None,
                    }),
                    eta: Default::default(),
                    stoppable: s.stoppable,
                    weight: (s.service == Service::Mg).then_some(s.weight),
                    unreachable: Vec::new(),
                };
                (s.id, w)
            })
            .collect();
        WorkReport {
            backups: Vec::new(),
            run: None,
            site: st.site,
            node: st.node,
            kind: NodeKind::MediaCtl,
            scope: "calls media-ctl placed on each mg and bgmg (first offer to answered delete), or found there by asking the pool, since it started".into(),
            started_ms: st.started_ms,
            generated_ms: st.generated_ms,
            revision: view.revision(),
            generation: view.generation(),
            site_hash: view.config().hash.clone(),
            instances,
        }
    }
}

/// The status as a table for a terminal.
pub fn render(s: &Status, now_ms: u64) -> String {
    let mut out = format!(
        "site {}  node {}  revision {}  drain zone [{}]  window {}s  calls {}  pending {}\n",
        s.site,
        s.node,
        s.revision,
        s.drain_zone.join(", "),
        s.window_s,
        s.calls,
        s.pending
    );
    out.push_str(&format!(
        "{:<12} {:<5} {:<8} {:<14} {:<17} {:>6} {:>7} {:>9}  {}\n",
        "INSTANCE", "SVC", "SERVER", "STATE", "ASSIGN", "WEIGHT", "CALLS", "NEW", "NOTE"
    ));
    for i in &s.instances {
        let mut note = Vec::new();
        if let Some(st) = i.stoppable {
            note.push(format!("stoppable={st}"));
        }
        if let Some(at) = i.ramp_ends_ms {
            note.push(format!(
                "ramp ends {}",
                ringsync::work::in_words(at, now_ms)
            ));
        }
        if let Some(u) = &i.unknown {
            note.push(format!("count unknown: {u}"));
        }
        out.push_str(&format!(
            "{:<12} {:<5} {:<8} {:<14} {:<17} {:>6.2} {:>7} {:>9}  {}\n",
            i.id,
            i.service.as_str(),
            i.server,
            i.state.as_str(),
            i.assign.as_str(),
            i.weight,
            i.calls,
            i.new_calls,
            note.join("; ")
        ));
    }
    if !s.counters.is_empty() {
        out.push_str("counters:");
        for (k, v) in &s.counters {
            out.push_str(&format!(" {k}={v}"));
        }
        out.push('\n');
    }
    out
}
