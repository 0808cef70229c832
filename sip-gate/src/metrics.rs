//! Metric names and labels in one place, so dashboards have one list to read.
//!
//! Label values are `&'static str`, so no label string is copied; the
//! `metrics` macros still build each call's key (a small vector of labels)
//! and the recorder looks the counter up by it. That is fine for rare
//! events; the counters every call moves ([`Forwarded`]) and those known at
//! start (per instance) are registered once instead and kept as handles.

use std::sync::OnceLock;

use ringsync::view::InstanceState;
use ringsync::work::WorkCounts;

use crate::message::Method;

/// Requests by method and outcome (`forwarded`, `retransmission`,
/// `R-SG-1`, `stopping`, `starting`, `bad_request`, `bad_token`,
/// `foreign_route`, ...).
pub(crate) const REQUESTS: &str = "sipgate_requests_total";
/// Responses relayed or refused (`forwarded`, `not_ours`), or not relayed
/// on purpose: `trying` (a 100, which a stateful proxy never forwards,
/// RFC 3261 16.7 step 5), `late_provisional` (a provisional response after
/// the final one).
pub(crate) const RESPONSES: &str = "sipgate_responses_total";
/// Batches read by the UDP workers, by `size` (datagrams, in powers of two).
pub(crate) const UDP_BATCHES: &str = "sipgate_udp_batches_total";
/// UDP worker threads of each `listener` (issue 29: one at start unless
/// `[overload] udp_workers` fixes the count, more while they are busy).
pub(crate) const UDP_WORKERS: &str = "sipgate_udp_workers";
/// The share of the last second a `listener`'s UDP workers were on CPU,
/// their mean (0 to 1): what the automatic worker count is decided on.
pub(crate) const UDP_WORKER_BUSY: &str = "sipgate_udp_worker_busy_ratio";
/// Datagrams by how long they waited in a UDP worker's queue, from the
/// kernel's receive timestamp to their handling, by `class` (`response`,
/// `in_dialog`, `new_dialog`) and `upto_ms` (the bucket's upper bound).
pub(crate) const UDP_INTAKE_WAIT: &str = "sipgate_udp_intake_wait_total";
/// Messages dropped without an answer, by reason.
pub(crate) const DROPPED: &str = "sipgate_dropped_total";
/// HEP copies handed to each capture `collector` (`[capture]`).
pub(crate) const CAPTURE_SENT: &str = "sipgate_capture_sent_total";
/// HEP copies dropped, by `reason`: `queue_full` (the sender is behind),
/// `collector_slow` (its socket or queue is full), `collector_down` (not
/// connected, or its port closed), `too_big` (past 64 KiB with headers).
pub(crate) const CAPTURE_DROPPED: &str = "sipgate_capture_dropped_total";
/// Drain refusals (503) by the rule that decided them.
pub(crate) const DRAIN_REFUSALS: &str = "sipgate_drain_refusals_total";
/// New dialogs refused or dropped under overload, by `rule` (`R-OV-1`,
/// `R-OV-2`), `limit` (`deadline`, `capacity`, `transactions`, `source`,
/// `account`) and `action` (`reject`: 503 with Retry-After; `drop`).
pub(crate) const OVERLOAD_REFUSALS: &str = "sipgate_overload_refusals_total";
/// Source addresses in the per-source limit table (R-OV-2).
pub(crate) const OVERLOAD_SOURCES: &str = "sipgate_overload_sources";
/// New work (REGISTER, new SUBSCRIBE, new INVITE, out-of-dialog OPTIONS)
/// forwarded to each instance: a draining instance's counter stops moving.
pub(crate) const NEW_WORK: &str = "sipgate_new_work_total";
/// Of [`NEW_WORK`], what went to an instance draining in the gate's view
/// on purpose, by `instance` and `reason` (`single_instance_account`,
/// `exception`, `all_draining`, `inside_leg`, `not_refused`;
/// [`crate::policy::OnPurpose`]).
pub(crate) const NEW_WORK_DRAINING: &str = "sipgate_new_work_draining_total";
/// 1 while a `pool` is under its health threshold and its new dialogs go
/// to its backup (R-HT-1), else 0.
pub(crate) const POOL_BACKUP: &str = "sipgate_pool_backup";
/// A pool's changes, by `pool` and `to` (`backup`: it went under its
/// threshold; `pool`: it was back at it for `hold_s`).
pub(crate) const POOL_BACKUP_CHANGES: &str = "sipgate_pool_backup_changes_total";
/// New dialogs for a `pool` that went to its backup (R-HT-1).
pub(crate) const POOL_BACKUP_DIALOGS: &str = "sipgate_pool_backup_dialogs_total";
/// Live entries in the transaction table.
pub(crate) const TRANSACTIONS: &str = "sipgate_transactions";
/// Work per instance by `kind`: `transactions` (open INVITE transactions),
/// `dialogs` (calls), `registrations`, `subscriptions` (R-ST-2).
pub(crate) const INSTANCE_WORK: &str = "sipgate_instance_work";
/// 1 while the gate can vouch for an instance's work counts, 0 while not
/// (it restarted, or a table was full; R-ST-3).
pub(crate) const INSTANCE_WORK_KNOWN: &str = "sipgate_instance_work_known";
/// Work the book could not take because its table was full, by `table`.
pub(crate) const WORK_TABLE_FULL: &str = "sipgate_work_table_full_total";
/// Registration or subscription expiries granted above `[work] max_expires_s`.
pub(crate) const WORK_EXPIRY_OVER_MAX: &str = "sipgate_work_expiry_over_max_total";
/// Drain state per instance, 1 for the current state.
pub(crate) const INSTANCE_STATE: &str = "sipgate_instance_state";
/// 1 while the gate holds an instance unreachable over a `transport`
/// (`tcp`, `tls`): a connect or handshake to it failed less than `[dns]
/// failover_hold_s` ago, and no connection succeeded since.
pub(crate) const INSTANCE_UNREACHABLE: &str = "sipgate_instance_unreachable";
/// DNS lookups the gate made (RFC 3263), by result (`answer`, `not_found`,
/// `unavailable`).
pub(crate) const DNS_LOOKUPS: &str = "sipgate_dns_lookups_total";
/// Requests moved off a DNS target that could not be reached, by outcome
/// (`next_target`, `none_left`).
pub(crate) const DNS_FAILOVERS: &str = "sipgate_dns_failovers_total";
/// Requests from instances that could not be sent into a subscriber's
/// flow, by `reason`: `closed`, `restarted`, `unknown_listener`,
/// `other_node` (each answered 430 Flow Failed) and `bad_token` (403).
pub(crate) const FLOW_FAILURES: &str = "sipgate_flow_failures_total";
/// Path headers the gate added to subscribers' REGISTERs, by `transport`
/// (`udp`, `tcp`: TLS included, `ws`: WSS included).
pub(crate) const FLOW_PATHS: &str = "sipgate_flow_paths_total";
/// Subscribers' TCP connections open (`state="open"`) and, of those, the
/// ones a registration uses (`state="registered"`).
pub(crate) const FLOWS: &str = "sipgate_flows";
/// Open TCP connections (TLS ones included; WebSocket ones are counted in
/// [`WS_CONNECTIONS`] instead). Both share `[tcp] max_connections`.
pub(crate) const TCP_CONNECTIONS: &str = "sipgate_tcp_connections";
/// Open WebSocket connections (`ws`/`wss` listeners, RFC 7118), from the
/// accept: the upgrade not yet done included.
pub(crate) const WS_CONNECTIONS: &str = "sipgate_ws_connections";
/// WebSocket upgrades by `result`: `ok`, or why one was refused (the HTTP
/// status in brackets): `bad_request` (400, not HTTP or a head past 8 KiB),
/// `bad_method` (405), `bad_path` (404), `not_upgrade` (426),
/// `bad_version` (426), `bad_key` (400), `bad_origin` (403),
/// `no_subprotocol` (400: no `sip` in `Sec-WebSocket-Protocol`), or not
/// answered: `timeout` (not done within `[tcp] frame_s`), `closed`.
pub(crate) const WS_HANDSHAKES: &str = "sipgate_ws_handshakes_total";
/// Close frames the gate sent to end a WebSocket connection, by `code`
/// (RFC 6455 7.4.1; `1000`: idle past `[tcp] idle_s`, `1001`: the gate
/// stops, `1002`: a protocol error, `1008`: a message not complete within
/// `[tcp] frame_s`, `1009`: a message over the size bound). Not the echo
/// of a client's close, nor an end the gate did not start.
pub(crate) const WS_CLOSES: &str = "sipgate_ws_closes_total";
/// WebSocket connections the client ended, by `how`: `close` (its Close
/// frame), `eof` (the TCP connection ended without one), `reset` (a TCP
/// reset), `error` (another read error).
pub(crate) const WS_PEER_CLOSES: &str = "sipgate_ws_peer_closes_total";
/// TLS handshakes by `side` (`server`: accepted, `client`: opened by the
/// gate) and `result` (`ok`, `error`, `timeout`: not finished within
/// `[tls] handshake_timeout_ms`, `no_ca`: no `[tls] ca` to verify with).
pub(crate) const TLS_HANDSHAKES: &str = "sipgate_tls_handshakes_total";
/// Certificate reloads (file change or SIGHUP) by `result` (`ok`, `error`:
/// the new pair did not load and the old one stays in force).
pub(crate) const TLS_RELOADS: &str = "sipgate_tls_reloads_total";
/// Authentication failures (401/407/403 from an instance) counted per
/// listener for bans (R-SEC-3).
pub(crate) const AUTH_FAILURES: &str = "sipgate_auth_failures_total";
/// Sources banned, per listener (R-SEC-3).
pub(crate) const AUTH_BANS: &str = "sipgate_auth_bans_total";
/// Failures of new sources not counted because the ban table was full.
pub(crate) const AUTH_BAN_TABLE_FULL: &str = "sipgate_auth_ban_table_full_total";
/// How late the stream transports' lag probe last woke, in seconds: the
/// delay a message read on a TCP, TLS or WebSocket connection meets before
/// the gate handles it (R-OV-1).
pub(crate) const RUNTIME_LAG: &str = "sipgate_runtime_lag_seconds";
/// The gate's own phase (`starting`, `serving`, `stopping`, `stopped`), 1
/// for the current one (R-GW-1).
pub(crate) const PHASE: &str = "sipgate_phase";

pub(crate) fn request(method: &'static str, outcome: &'static str) {
    metrics::counter!(REQUESTS, "method" => method, "outcome" => outcome).increment(1);
}

pub(crate) fn response(outcome: &'static str) {
    metrics::counter!(RESPONSES, "outcome" => outcome).increment(1);
}

pub(crate) fn tls_handshake(side: &'static str, result: &'static str) {
    metrics::counter!(TLS_HANDSHAKES, "side" => side, "result" => result).increment(1);
}

pub(crate) fn ws_handshake(result: &'static str) {
    metrics::counter!(WS_HANDSHAKES, "result" => result).increment(1);
}

pub(crate) fn ws_close(code: &'static str) {
    metrics::counter!(WS_CLOSES, "code" => code).increment(1);
}

pub(crate) fn ws_peer_close(how: &'static str) {
    metrics::counter!(WS_PEER_CLOSES, "how" => how).increment(1);
}

pub(crate) fn runtime_lag(lag: std::time::Duration) {
    metrics::gauge!(RUNTIME_LAG).set(lag.as_secs_f64());
}

pub(crate) fn tls_reload(result: &'static str) {
    metrics::counter!(TLS_RELOADS, "result" => result).increment(1);
}

pub(crate) fn dropped(reason: &'static str) {
    metrics::counter!(DROPPED, "reason" => reason).increment(1);
}

pub(crate) fn dropped_n(reason: &'static str, n: u64) {
    metrics::counter!(DROPPED, "reason" => reason).increment(n);
}

pub(crate) fn overload_sources(n: usize) {
    metrics::gauge!(OVERLOAD_SOURCES).set(n as f64);
}

/// Every `rule` a drain refusal is counted under ([`refused`]).
const REFUSAL_RULES: [&str; 4] = ["R-SG-1", "R-ESG-1", "R-GW-1", "starting"];

pub(crate) fn refused(rule: &'static str) {
    debug_assert!(REFUSAL_RULES.contains(&rule), "{rule}");
    metrics::counter!(DRAIN_REFUSALS, "rule" => rule).increment(1);
}

/// Series that a dashboard or an alert reads but that would otherwise
/// appear only at their first event, exported at 0 from the start: a
/// counter Prometheus first sees at 1 shows no `increase()`, so the first
/// refusals would be missing, and a panel on a name that is not exported
/// yet cannot be told from a wrong name (`deploy/`, checked by
/// testbed/tests/all/observability.rs).
pub(crate) fn register_at_start() {
    for rule in REFUSAL_RULES {
        metrics::counter!(DRAIN_REFUSALS, "rule" => rule).increment(0);
    }
    metrics::gauge!(TCP_CONNECTIONS).increment(0.0);
}

/// Only while an instance drains, so the key built per call is no cost
/// on the path every call takes.
pub(crate) fn new_work_draining(instance: &str, reason: &'static str) {
    metrics::counter!(NEW_WORK_DRAINING, "instance" => instance.to_owned(), "reason" => reason)
        .increment(1);
}

pub(crate) fn pool_backup_change(pool: &str, to: &'static str) {
    metrics::counter!(POOL_BACKUP_CHANGES, "pool" => pool.to_owned(), "to" => to).increment(1);
}

pub(crate) fn dns_lookup(result: &'static str) {
    metrics::counter!(DNS_LOOKUPS, "result" => result).increment(1);
}

pub(crate) fn dns_failover(outcome: &'static str) {
    metrics::counter!(DNS_FAILOVERS, "outcome" => outcome).increment(1);
}

pub(crate) fn flow_failure(reason: &'static str) {
    metrics::counter!(FLOW_FAILURES, "reason" => reason).increment(1);
}

/// `transport`: `udp`, `tcp` (TLS included), `ws` (WSS included).
pub(crate) fn flow_path(transport: &'static str) {
    metrics::counter!(FLOW_PATHS, "transport" => transport).increment(1);
}

pub(crate) fn flows(open: usize, registered: usize) {
    metrics::gauge!(FLOWS, "state" => "open").set(open as f64);
    metrics::gauge!(FLOWS, "state" => "registered").set(registered as f64);
}

pub(crate) fn transactions(n: usize) {
    metrics::gauge!(TRANSACTIONS).set(n as f64);
}

/// A bounded label for a method: extension methods share one label so a
/// client cannot blow up the metric cardinality.
pub(crate) fn method_label(m: Method) -> &'static str {
    m.as_str().unwrap_or("other")
}

/// The two counters every message of a call moves (requests forwarded, by
/// method, and responses forwarded), each registered the first time it
/// moves and then incremented through its handle: the `counter!` macro
/// would build the key (a vector of labels) and look it up in the
/// recorder's registry for every message.
#[derive(Debug)]
pub(crate) struct Forwarded {
    requests: [OnceLock<metrics::Counter>; METHODS],
    response: OnceLock<metrics::Counter>,
}

/// One counter per [`Method`], `Other` (the last) included.
const METHODS: usize = Method::Other as usize + 1;

impl Forwarded {
    pub(crate) fn new() -> Forwarded {
        Forwarded {
            requests: [const { OnceLock::new() }; METHODS],
            response: OnceLock::new(),
        }
    }

    /// `sipgate_requests_total{method, outcome="forwarded"}` + 1.
    pub(crate) fn request(&self, method: Method) {
        match self.requests.get(method as usize) {
            Some(c) => c
                .get_or_init(|| {
                    metrics::counter!(REQUESTS, "method" => method_label(method), "outcome" => "forwarded")
                })
                .increment(1),
            None => request(method_label(method), "forwarded"),
        }
    }

    /// `sipgate_responses_total{outcome="forwarded"}` + 1.
    pub(crate) fn response(&self) {
        self.response
            .get_or_init(|| metrics::counter!(RESPONSES, "outcome" => "forwarded"))
            .increment(1);
    }
}

/// The gauges of one SIP instance's work and state, registered once (no
/// label allocation when they are set).
#[derive(Debug)]
pub(crate) struct InstanceGauges {
    work: [metrics::Gauge; 5],
    known: metrics::Gauge,
    states: [(InstanceState, metrics::Gauge); 5],
    /// `tcp`, `tls`.
    unreachable: [metrics::Gauge; 2],
}

impl InstanceGauges {
    pub(crate) fn new(instance: &str) -> InstanceGauges {
        let id = instance.to_owned();
        let work = [
            "transactions",
            "dialogs",
            "registrations",
            "subscriptions",
            "connections",
        ]
        .map(|kind| metrics::gauge!(INSTANCE_WORK, "instance" => id.clone(), "kind" => kind));
        let states = [
            InstanceState::Up,
            InstanceState::Down,
            InstanceState::Draining,
            InstanceState::Drained,
            InstanceState::DrainingDown,
        ]
        .map(|s| {
            let g =
                metrics::gauge!(INSTANCE_STATE, "instance" => id.clone(), "state" => s.as_str());
            (s, g)
        });
        let unreachable = ["tcp", "tls"].map(
            |t| metrics::gauge!(INSTANCE_UNREACHABLE, "instance" => id.clone(), "transport" => t),
        );
        InstanceGauges {
            work,
            known: metrics::gauge!(INSTANCE_WORK_KNOWN, "instance" => id),
            states,
            unreachable,
        }
    }

    /// Whether the instance is held unreachable over `[tcp, tls]`.
    pub(crate) fn set_unreachable(&self, held: [bool; 2]) {
        for (g, h) in self.unreachable.iter().zip(held) {
            g.set(if h { 1.0 } else { 0.0 });
        }
    }

    /// Sets the work gauges, and the state gauges when `state` is known
    /// (they stay as they were otherwise: all 0 before the first state).
    pub(crate) fn set(&self, c: &WorkCounts, known: bool, state: Option<InstanceState>) {
        let values = [
            c.transactions,
            c.dialogs,
            c.registrations,
            c.subscriptions,
            c.connections,
        ];
        for (g, v) in self.work.iter().zip(values) {
            g.set(v as f64);
        }
        self.known.set(if known { 1.0 } else { 0.0 });
        let Some(state) = state else { return };
        for (s, g) in &self.states {
            g.set(if *s == state { 1.0 } else { 0.0 });
        }
    }
}
