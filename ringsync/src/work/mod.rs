//! Work reports: what one node (a gate, a media controller) still serves for
//! each instance it routes to (R-ST-2).
//!
//! One JSON shape for both ends: a gate or media-ctl serves a [`WorkReport`]
//! at [`WORK_PATH`] (or, with several nodes, publishes it in the store), and
//! `ringsync status` reads the same type back as a [`NodeOutcome`] and sums
//! the reports into one truthful state per instance (R-ST-3) with
//! `ringsync_ops::sum`, in the operator plane: no data-plane node sums.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::config::{Service, SiteConfig, Transport};
use crate::view::Health;

mod run;
pub use run::{RunInfo, RunRef};

/// The path a node serves its report on.
pub const WORK_PATH: &str = "/v1/work";

/// Milliseconds since the Unix epoch (what reports carry as time stamps).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> u64 {
    unix_ms(SystemTime::now())
}

/// What kind of node wrote a report; it says which instances the node counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// A sip-gate node: counts dialogs, registrations and subscriptions of
    /// the SIP instances (`sg`, `esg`), and on a site with a ws pool the
    /// WebSocket connections it passes to each `ws` instance (R-WS-3).
    Gate,
    /// A media-ctl node: counts the calls it placed on `mg` and `bgmg`.
    MediaCtl,
    /// The Active-Passive handover records: count the groups each instance
    /// of an Active-Passive service leads or is to lead.
    Handover,
}

impl NodeKind {
    /// The name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::Gate => "gate",
            NodeKind::MediaCtl => "media_ctl",
            NodeKind::Handover => "handover",
        }
    }

    /// True when nodes of this kind count the work of `service` on `site`:
    /// [`NodeKind::counts`], and a gate counts `ws` instances only where a
    /// ws pool fronts them (elsewhere nothing routes to them, R-WS-1).
    pub fn counts_on(self, site: &SiteConfig, service: &Service) -> bool {
        self.counts(service) && (*service != Service::Ws || site.ws_pooled())
    }

    /// True when nodes of this kind can count the work of `service` (a
    /// gate's `ws`: only behind a ws pool, [`NodeKind::counts_on`]).
    pub fn counts(self, service: &Service) -> bool {
        match self {
            NodeKind::Gate => service.is_sip() || *service == Service::Ws,
            NodeKind::MediaCtl => matches!(service, Service::Mg | Service::Bgmg),
            NodeKind::Handover => matches!(service, Service::Other(_)),
        }
    }
}

impl std::fmt::Display for NodeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One node's report (served at [`WORK_PATH`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkReport {
    /// Site name.
    pub site: String,
    /// The node's name (unique on the site; defaults to its admin address).
    pub node: String,
    /// Gate or media controller.
    pub kind: NodeKind,
    /// What the counts cover, in words (e.g. "dialogs, registrations and
    /// subscriptions routed through this gate since it started").
    pub scope: String,
    /// When the node started (Unix ms).
    pub started_ms: u64,
    /// When this report was made (Unix ms).
    pub generated_ms: u64,
    /// Profile revision of the node's drain view.
    pub revision: u64,
    /// Generation of the node's drain view.
    pub generation: u64,
    /// Every instance this node routes to, by id. An instance it does not
    /// route to is absent: a node never reports a zero it does not know.
    pub instances: BTreeMap<String, InstanceWork>,
    /// The short hash of the site file the node runs
    /// ([`crate::config::file_hash`]); empty from a node that predates it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub site_hash: String,
    /// The pools whose new dialogs this node sends to their backup (a
    /// gate, R-HT-1), and why. Absent from reports of nodes that route no
    /// new dialogs or know no backups: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backups: Vec<PoolBackup>,
    /// Which run of the node's binary made the report (issue 39: a gate
    /// upgraded in place changes runs, not name); absent from a node that
    /// predates it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunInfo>,
}

/// A pool under its health threshold, whose new dialogs a gate sends to
/// its backup (R-HT-1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolBackup {
    /// The pool.
    pub pool: String,
    /// Where its new dialogs go: the backup pool (`<pool>-backup` for the
    /// SIP destinations of `backup_sip`).
    pub backup: String,
    /// Why, in words (e.g. `1 of 3 instances up in the normal zone,
    /// threshold 2`).
    pub reason: String,
    /// Since when (Unix ms).
    pub since_ms: u64,
}

/// What one node knows of one instance.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InstanceWork {
    /// The node's health probe result.
    #[serde(default)]
    pub health: Health,
    /// Work held, by kind.
    #[serde(default)]
    pub counts: WorkCounts,
    /// Set while the node cannot vouch for `counts` (it restarted and may
    /// not have seen work set up before; its table overflowed...). The
    /// instance is then never `drained` on this node's word (R-ST-3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown: Option<Unknown>,
    /// When the node expects the work to be gone.
    #[serde(default, skip_serializing_if = "Eta::is_empty")]
    pub eta: Eta,
    /// bgmg only: whether it may be turned off (R-BG-2, R-BG-3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stoppable: Option<bool>,
    /// mg only: its weight for new calls, from 1 (takes its full share)
    /// to 0 (takes none), as the media controller ramps it (R-MG-1,
    /// R-MG-4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// Stream transports over which the node could not reach the instance
    /// lately (a TCP connect or TLS handshake failed), while it holds them
    /// down. The health probe goes over UDP, so an instance can be `up`
    /// and unreachable over TCP at once. Absent from reports of nodes that
    /// do not know of it (older gates, media-ctl): none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreachable: Vec<Unreachable>,
}

/// A transport over which a node could not reach an instance: the node
/// sends it no new work that way until `until_ms` (RFC 3261 16.9: a
/// transport error is a 503 for the request that met it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unreachable {
    /// `tcp` or `tls`.
    pub transport: Transport,
    /// What failed, in words (e.g. `connect to 127.0.1.1:5060: Connection
    /// refused (os error 111)`).
    pub reason: String,
    /// When it failed (Unix ms).
    pub since_ms: u64,
    /// Until when the node passes the instance over for new work on this
    /// transport (Unix ms), unless a connection succeeds before.
    pub until_ms: u64,
}

/// Work held for one instance, by kind (R-ST-2). Kinds a node does not
/// count stay zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkCounts {
    /// INVITE transactions forwarded and not yet answered with a final response.
    pub transactions: u64,
    /// Established dialogs (calls), in either direction.
    pub dialogs: u64,
    /// Registration bindings that have not expired or been removed.
    pub registrations: u64,
    /// Subscriptions that have not expired or terminated.
    pub subscriptions: u64,
    /// Media calls placed on an mg or bgmg.
    pub calls: u64,
    /// Active-Passive groups it leads, or is to lead (handover records).
    pub groups: u64,
    /// WebSocket connections a ws pool passed to a `ws` instance and that
    /// are still open (R-WS-3).
    pub connections: u64,
}

impl WorkCounts {
    /// Everything held.
    pub fn total(&self) -> u64 {
        self.transactions
            .saturating_add(self.dialogs)
            .saturating_add(self.registrations)
            .saturating_add(self.subscriptions)
            .saturating_add(self.calls)
            .saturating_add(self.groups)
            .saturating_add(self.connections)
    }

    /// Adds another node's counts.
    pub fn add(&mut self, o: &WorkCounts) {
        self.transactions = self.transactions.saturating_add(o.transactions);
        self.dialogs = self.dialogs.saturating_add(o.dialogs);
        self.registrations = self.registrations.saturating_add(o.registrations);
        self.subscriptions = self.subscriptions.saturating_add(o.subscriptions);
        self.calls = self.calls.saturating_add(o.calls);
        self.groups = self.groups.saturating_add(o.groups);
        self.connections = self.connections.saturating_add(o.connections);
    }
}

/// Why a count cannot be trusted yet, and when it can.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unknown {
    /// In words, for the operator.
    pub reason: String,
    /// When the node will know (Unix ms); absent when it cannot say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<u64>,
}

/// When the work of an instance is expected to be gone (a drain ETA).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Eta {
    /// The latest expiry among the registrations and subscriptions routed
    /// to it (Unix ms): by then they have all expired or moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registrations_until_ms: Option<u64>,
    /// Estimated end of its open calls (Unix ms), from their ages and the
    /// hold times seen on the site.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls_until_ms: Option<u64>,
}

impl Eta {
    /// True when nothing is estimated.
    pub fn is_empty(&self) -> bool {
        self.registrations_until_ms.is_none() && self.calls_until_ms.is_none()
    }

    /// The later of both estimates, field by field.
    pub fn merge(&mut self, o: &Eta) {
        self.registrations_until_ms = later(self.registrations_until_ms, o.registrations_until_ms);
        self.calls_until_ms = later(self.calls_until_ms, o.calls_until_ms);
    }

    /// When everything estimated is gone.
    pub fn until_ms(&self) -> Option<u64> {
        later(self.registrations_until_ms, self.calls_until_ms)
    }
}

fn later(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// A node that should report, and what came of asking it.
#[derive(Debug, Clone)]
pub struct NodeOutcome {
    /// The node's name (or the address it was asked at).
    pub node: String,
    /// Its kind: which instances it is expected to count.
    pub kind: NodeKind,
    /// Its report, or why there is none (unreachable, bad answer, lease
    /// expired...).
    pub report: Result<WorkReport, String>,
}

/// Formats a Unix-ms time as the time left from `now_ms`, e.g. `in 4m 10s`
/// (or `now` when it has passed): how operators read an ETA.
pub fn in_words(at_ms: u64, now_ms: u64) -> String {
    if at_ms <= now_ms {
        return "now".into();
    }
    let d = Duration::from_millis(at_ms - now_ms).as_secs();
    let (h, m, s) = (d / 3600, (d / 60) % 60, d % 60);
    match (h, m) {
        (0, 0) => format!("in {s}s"),
        (0, _) => format!("in {m}m {s}s"),
        _ => format!("in {h}h {m}m"),
    }
}

#[cfg(test)]
mod tests;
