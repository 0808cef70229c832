//! One sample of a site: the data the recorder ([`super::sample`]) fills
//! and every reader (rates, chart, verdicts) takes, in a module of its own
//! so the readers do not depend on the recorder.

use std::collections::BTreeMap;

use serde::Serialize;

/// The site at one moment.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Sample {
    /// Seconds since the run started, when the gates' counters were read
    /// (after their `/metrics` answered, so a slow answer does not put a
    /// late count at an early time).
    pub t: f64,
    /// New work forwarded to each sg/esg since the start, all gates.
    pub new_work: BTreeMap<String, u64>,
    /// Drain and stop refusals (503) since the start, by rule.
    pub refusals: BTreeMap<String, u64>,
    /// Calls up (dialogs) the gates count, summed.
    pub calls_up: u64,
    /// Gates that answered.
    pub gates_up: usize,
    /// Gates that answered and had published their instance states (every
    /// sg/esg with one `sipgate_instance_state` at 1): a gate that has just
    /// (re)started says ready before it has, and until then its view is
    /// not known. Only these count in the verdicts and in
    /// [`Sample::gates_draining`] and [`Sample::gates_stale`].
    pub gates_ready: usize,
    /// Of [`Sample::new_work`], what the gates sent to an instance draining
    /// in their view on purpose, since the start, per instance and reason
    /// (`sipgate_new_work_draining_total`: `single_instance_account`,
    /// `exception`, `all_draining`, `inside_leg`, `not_refused`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub on_purpose: BTreeMap<String, BTreeMap<String, u64>>,
    /// Weight of each mg/bgmg for new calls (0..1).
    pub mg_weight: BTreeMap<String, f64>,
    /// New calls media-ctl placed on each mg/bgmg since it started.
    pub mg_new_calls: BTreeMap<String, u64>,
    /// Per sg/esg, how many of the gates that answered had it in a drain
    /// state (`sipgate_instance_state{state="draining"|"drained"|...}`):
    /// the gates' own view, so a verdict knows when a change was applied.
    pub gates_draining: BTreeMap<String, usize>,
    /// The servers media-ctl had in its drain zone (its `/v1/status`).
    pub mg_drain_zone: Vec<String>,
    /// How each mg/bgmg took new calls (`normal`, `ramping_down`, `out`,
    /// `queued_for_drain`, `pinned`, `closed`, ...: media-ctl's `assign`).
    pub mg_assign: BTreeMap<String, String>,
    /// Calls media-ctl tracked on each mg/bgmg.
    pub mg_calls: BTreeMap<String, u64>,
    /// Per bgmg, whether media-ctl reported it stoppable (R-BG-2, R-BG-3).
    pub bgmg_stoppable: BTreeMap<String, bool>,
    /// Gates that said their view of the store was stale
    /// (`ringsync_store_stale 1`, R-MN-2).
    pub gates_stale: usize,
    /// Per Active-Passive group, the member its service confirmed leads
    /// (`ringsync handover status`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub ap_leader: BTreeMap<String, String>,
    /// Per Active-Passive group the planner reported blocked, why (R-AP-4).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub ap_blocked: BTreeMap<String, String>,
    /// When the planner last published a move (Unix ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ap_last_move_ms: Option<u64>,
    /// Active-Passive leader changes confirmed since the start.
    pub ap_handovers: u64,
    /// Calls the callers sent to another gate after a 503 or no answer
    /// (gate failover), since the start.
    pub failovers: u64,
}

/// The last sample taken at or before `t` (the first if none).
pub fn at(samples: &[Sample], t: f64) -> Option<&Sample> {
    samples
        .iter()
        .take_while(|s| s.t <= t)
        .last()
        .or_else(|| samples.first())
}

/// `b - a` per key.
pub fn delta(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    b.iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(a.get(k).copied().unwrap_or(0))))
        .collect()
}
