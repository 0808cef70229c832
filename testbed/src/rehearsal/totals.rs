//! The totals over a run's callers, which both the report prints and the
//! verdicts judge.

use std::collections::BTreeMap;

use serde::Serialize;

/// Totals over the run's callers.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Calls {
    /// Calls the callers attempted (SIPp `TotalCallCreated`).
    pub attempted: u64,
    /// Established (200 to the INVITE).
    pub established: u64,
    /// Of those, ended normally.
    pub finished: u64,
    /// Of those, not ended normally (a failed BYE, re-INVITE, timeout).
    pub established_failed: u64,
    /// Refused with 503 (by every gate tried, when failing over).
    pub refused: u64,
    /// Calls a gate refused (503) or left unanswered that the caller sent
    /// to another gate.
    pub retried: u64,
    /// SIPp's failed calls (including those never answered).
    pub sipp_failed: u64,
    /// SIPp's failures by reason (`MaxUDPRetrans`, `UnexpectedMessage`,
    /// ...), all callers.
    pub failures: BTreeMap<String, u64>,
    /// The ng side of the calls (offer/answer/delete to media-ctl).
    pub media: super::media::MediaCalls,
    /// The end of a caller's error log when it had failures.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub errors: String,
}
