//! What a chaos run recorded, in the one shape every invariant reads, and
//! the shape of a verdict: below the invariants, so none depends on another.

use std::collections::BTreeMap;

use serde::Serialize;

use super::ap_log::ApEvent;
use super::health_log::SawDown;
use super::operators::{AuditEntry, OpRecord};
use super::plan::Done;
use super::truth::{CallerCall, Held, Refusal};
use super::waits::WaitReturn;
use super::watch::StatusSample;
use crate::rehearsal::sampled::Sample;

/// Everything a run recorded, for the checker.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// What the instances held (their own logs).
    pub held: Vec<Held>,
    /// Every established call as its caller saw it, by Call-ID.
    pub calls: BTreeMap<String, CallerCall>,
    /// The faults as injected.
    pub faults: Vec<Done>,
    /// `ringsync status` every 250 ms.
    pub status: Vec<StatusSample>,
    /// Every change the operators asked for.
    pub ops: Vec<OpRecord>,
    /// The audit log at the end.
    pub audit: Vec<AuditEntry>,
    /// The store's profiles at the end, by name: active, servers.
    pub store_end: Option<BTreeMap<String, (bool, Vec<String>)>>,
    /// The site's own nodes once a second (media-ctl's mgs).
    pub samples: Vec<Sample>,
    /// sg/esg instances: id, service, server.
    pub instances: Vec<(String, String, String)>,
    /// Seconds a drain may take to reach every gate.
    pub bound_s: f64,
    /// When the run ended (seconds after its start).
    pub end_s: f64,
    /// Every 503 the callers were given.
    pub refusals: Vec<Refusal>,
    /// The Active-Passive agents' own record of leading and following.
    pub ap: Vec<ApEvent>,
    /// `ap_pace_s` of the site: the longest a group may be without a leader.
    pub ap_pace_s: f64,
    /// Every `ringsync wait drained` run for a server entering a drain.
    pub waits: Vec<WaitReturn>,
    /// When each gate held an instance down, by the gate's own log.
    pub gate_down: Vec<SawDown>,
}

/// One invariant's verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Invariant {
    /// Short name.
    pub name: &'static str,
    /// Held.
    pub pass: bool,
    /// The figures behind it.
    pub detail: String,
    /// The first counter-example, when it failed on one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counterexample: Option<String>,
}

/// A verdict that fails on `first`, its counter-example, when there is one.
pub fn verdict(name: &'static str, first: Option<String>, detail: String) -> Invariant {
    Invariant {
        name,
        pass: first.is_none(),
        detail,
        counterexample: first,
    }
}
