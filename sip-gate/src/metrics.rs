//! Metric names and labels in one place, so dashboards have one list to read.
//!
//! Label values are `&'static str`, so no label string is copied; the
//! `metrics` macros still build each call's key (a small vector of labels)
//! and the recorder looks the counter up by it. Counters known at start
//! (per instance) are registered once instead ([`crate::proxy::Core`]).

use crate::message::Method;

/// Requests by method and outcome (`forwarded`, `retransmission`,
/// `drain_503`, `bad_request`, `bad_token`, `foreign_route`, ...).
pub(crate) const REQUESTS: &str = "sipgate_requests_total";
/// Responses relayed or refused (`forwarded`, `not_ours`).
pub(crate) const RESPONSES: &str = "sipgate_responses_total";
/// Messages dropped without an answer, by reason.
pub(crate) const DROPPED: &str = "sipgate_dropped_total";
/// Drain refusals (503) by the rule that decided them.
pub(crate) const DRAIN_REFUSALS: &str = "sipgate_drain_refusals_total";
/// New work (REGISTER, new SUBSCRIBE, new INVITE, out-of-dialog OPTIONS)
/// forwarded to each instance: a draining instance's counter stops moving.
pub(crate) const NEW_WORK: &str = "sipgate_new_work_total";
/// Live entries in the transaction table.
pub(crate) const TRANSACTIONS: &str = "sipgate_transactions";
/// Work per instance: `kind` = `invites` (open INVITE transactions) or `dialogs`.
pub(crate) const INSTANCE_WORK: &str = "sipgate_instance_work";
/// Drain state per instance, 1 for the current state.
pub(crate) const INSTANCE_STATE: &str = "sipgate_instance_state";
/// Open TCP connections.
pub(crate) const TCP_CONNECTIONS: &str = "sipgate_tcp_connections";

pub(crate) fn request(method: &'static str, outcome: &'static str) {
    metrics::counter!(REQUESTS, "method" => method, "outcome" => outcome).increment(1);
}

pub(crate) fn response(outcome: &'static str) {
    metrics::counter!(RESPONSES, "outcome" => outcome).increment(1);
}

pub(crate) fn dropped(reason: &'static str) {
    metrics::counter!(DROPPED, "reason" => reason).increment(1);
}

pub(crate) fn refused(rule: &'static str) {
    metrics::counter!(DRAIN_REFUSALS, "rule" => rule).increment(1);
}

pub(crate) fn transactions(n: usize) {
    metrics::gauge!(TRANSACTIONS).set(n as f64);
}

/// A bounded label for a method: extension methods share one label so a
/// client cannot blow up the metric cardinality.
pub(crate) fn method_label(m: Method) -> &'static str {
    m.as_str().unwrap_or("other")
}
