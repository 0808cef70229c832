//! The `[overload]` section: sip-gate's bounds and admission limits
//! (R-OV-1, R-OV-2). Every table and queue the gate fills from the network
//! has its bound here, with a default sized for a busy site, so a flood
//! meets a limit it was told about instead of the machine's memory.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::error::ConfigError;
use super::validator::Validator;

/// What the gate does with a new dialog over a per-source or per-account
/// limit (R-OV-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LimitAction {
    /// Answer `503` with `Retry-After` (the default): a well-behaved client
    /// backs off or tries another node.
    #[default]
    Reject,
    /// Say nothing: a scanner learns nothing and costs one receive.
    Drop,
}

/// sip-gate's overload protection (R-OV-1) and per-source limits (R-OV-2).
///
/// Rates are new dialogs per second (INVITE, SUBSCRIBE, OPTIONS and any
/// other request that is neither in a dialog nor an ACK or CANCEL), except
/// REGISTER, which has limits of its own (`registers_per_s`,
/// `per_source_register_rate`): a registration avalanche (every phone of a
/// site re-registering after a failover) then neither uses up the capacity
/// for new calls nor refuses an office NAT. In-dialog requests and
/// responses are never limited. A rate of 0 turns that limit off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OverloadConfig {
    /// The gate's capacity for new dialogs, all sources together; beyond it
    /// they get 503 (R-OV-1). Default 10000 (the gate handles a whole call
    /// in about 100 µs of one core, docs/benchmarks.md, the load benchmark).
    pub new_dialogs_per_s: u32,
    /// New dialogs let through at once above that rate. Default 20000.
    pub new_dialogs_burst: u32,
    /// A new dialog that waited longer than this in a UDP worker's receive
    /// queue (the kernel's receive timestamp against the time it is read)
    /// gets 503: the worker is behind, and in-dialog traffic goes first.
    /// A queue that overflowed (the kernel dropped datagrams) counts as
    /// behind for this long too. Default 200.
    pub new_dialog_deadline_ms: u32,
    /// Bound of each UDP worker's receive queue in bytes (the socket's
    /// `SO_RCVBUF`; the kernel caps it at `net.core.rmem_max`). Default 4 MiB.
    pub udp_rcvbuf_bytes: usize,
    /// A fixed count of UDP worker threads per listener, each with its own
    /// socket on the listener's address (`SO_REUSEPORT`: the kernel keeps
    /// each peer on one of them, so its messages stay in order). Unset (the
    /// default): the count is automatic, see [`OverloadConfig::udp_workers_max`].
    /// 1 to 64; not with `udp_workers_max`.
    pub udp_workers: Option<usize>,
    /// The automatic worker count's ceiling (when `udp_workers` is unset):
    /// each listener starts with one worker, and gets another, up to this
    /// many, when its workers were on CPU more than
    /// `udp_worker_busy_percent` of the time for a few seconds in a row.
    /// One worker costs less CPU per call while it keeps up (fewer threads
    /// wake and switch for the same datagrams, docs/benchmarks.md, the load
    /// benchmark's sixth pass); more spread a load one core cannot carry.
    /// Unset: one per core, at most 8. 1 to 64.
    pub udp_workers_max: Option<usize>,
    /// The share of the time (percent) a listener's UDP workers must be on
    /// CPU, on average, for the automatic count to add one. Default 75. 1
    /// to 99.
    pub udp_worker_busy_percent: u32,
    /// Bound of each TCP (or TLS) connection's send queue, in messages; a
    /// message beyond it is dropped (`sipgate_dropped_total{reason=
    /// "tcp_queue_full"}`), as a peer that does not read is not waited for.
    /// Default 1024.
    pub tcp_queue_messages: usize,
    /// Bound of the transaction table; a new transaction beyond it gets 503.
    /// Default 1048576 (an entry lives 32 s: room for 32000 new
    /// transactions per second).
    pub max_transactions: usize,
    /// The `Retry-After` seconds of every overload 503. Default 5.
    pub retry_after_s: u32,
    /// Up to this many seconds added at random to each overload 503's
    /// `Retry-After`, so the clients refused in one burst (phones
    /// re-registering together after a failover) come back spread over
    /// this many seconds instead of in one wave. Default 5; 0 turns the
    /// spread off.
    pub retry_after_jitter_s: u32,
    /// New dialogs per second from one source address (R-OV-2); configured
    /// instances are exempt. Default 50: ten times the 5 a second of a busy
    /// source (an office of a hundred phones behind one NAT address, its
    /// calls and subscriptions together).
    pub per_source_rate: u32,
    /// New dialogs one source may send at once. Default 100.
    pub per_source_burst: u32,
    /// REGISTERs per second the gate admits, all sources together
    /// (R-OV-1), counted apart from `new_dialogs_per_s`: beyond it they get
    /// 503 with Retry-After, and new calls keep their own capacity.
    /// Default 5000 (a site of 300,000 phones re-registering within a
    /// minute).
    pub registers_per_s: u32,
    /// REGISTERs let through at once above that rate. Default 10000.
    pub registers_burst: u32,
    /// REGISTERs per second from one source address (R-OV-2), counted apart
    /// from its new dialogs: an office NAT re-registering all its phones
    /// at once is let through while the source's calls keep their own
    /// limit. Default 200 (4,000 phones behind one address re-registering
    /// within 20 s).
    pub per_source_register_rate: u32,
    /// REGISTERs one source may send at once. Default 400.
    pub per_source_register_burst: u32,
    /// New dialogs per second of one esg account (R-OV-2). Default 200 (ten
    /// times a trunk's 20 calls/s).
    pub per_account_rate: u32,
    /// New dialogs one account may send at once. Default 400.
    pub per_account_burst: u32,
    /// Bound of the per-source table: source addresses tracked at once. A
    /// source idle long enough to have its whole burst back is forgotten;
    /// when the table is full the oldest entries make room. Default 65536.
    pub max_sources: usize,
    /// Over a per-source or per-account limit: `reject` (503 with
    /// Retry-After, the default) or `drop` (no answer).
    pub action: LimitAction,
}

impl Default for OverloadConfig {
    fn default() -> Self {
        OverloadConfig {
            new_dialogs_per_s: 10_000,
            new_dialogs_burst: 20_000,
            new_dialog_deadline_ms: 200,
            udp_rcvbuf_bytes: 4 << 20,
            udp_workers: None,
            udp_workers_max: None,
            udp_worker_busy_percent: 75,
            tcp_queue_messages: 1024,
            max_transactions: 1 << 20,
            retry_after_s: 5,
            retry_after_jitter_s: 5,
            per_source_rate: 50,
            per_source_burst: 100,
            registers_per_s: 5_000,
            registers_burst: 10_000,
            per_source_register_rate: 200,
            per_source_register_burst: 400,
            per_account_rate: 200,
            per_account_burst: 400,
            max_sources: 65_536,
            action: LimitAction::Reject,
        }
    }
}

impl OverloadConfig {
    /// The intake deadline of a new dialog.
    pub fn new_dialog_deadline(&self) -> Duration {
        Duration::from_millis(self.new_dialog_deadline_ms.into())
    }
}

/// Most UDP workers a listener may have.
const MAX_UDP_WORKERS: usize = 64;

/// Checks `[overload]`: every bound positive, every burst room for at least
/// one request when its rate is on. Errors name the field and point at the
/// section.
pub(super) fn validate(
    v: &Validator<'_>,
    raw: Option<Spanned<OverloadConfig>>,
) -> Result<OverloadConfig, ConfigError> {
    let Some(table) = raw else {
        return Ok(OverloadConfig::default());
    };
    let span = table.span();
    let c = table.into_inner();
    let bad = |field: &str, what: &str| {
        Err(v.err(span.clone(), format!("overload.{field}"), what.to_string()))
    };
    let positive = [
        ("new_dialog_deadline_ms", c.new_dialog_deadline_ms as usize),
        ("udp_rcvbuf_bytes", c.udp_rcvbuf_bytes),
        ("tcp_queue_messages", c.tcp_queue_messages),
        ("max_transactions", c.max_transactions),
        ("retry_after_s", c.retry_after_s as usize),
        ("max_sources", c.max_sources),
    ];
    if let Some((field, _)) = positive.iter().find(|(_, n)| *n == 0) {
        return bad(field, "must be positive");
    }
    if c.udp_rcvbuf_bytes < 65_536 {
        return bad(
            "udp_rcvbuf_bytes",
            "must be at least 65536 (one largest datagram)",
        );
    }
    let workers = [
        ("udp_workers", c.udp_workers),
        ("udp_workers_max", c.udp_workers_max),
    ];
    if let Some((field, _)) = workers
        .iter()
        .find(|(_, n)| n.is_some_and(|n| !(1..=MAX_UDP_WORKERS).contains(&n)))
    {
        return bad(field, &format!("must be from 1 to {MAX_UDP_WORKERS}"));
    }
    if c.udp_workers.is_some() && c.udp_workers_max.is_some() {
        return bad(
            "udp_workers_max",
            "is the automatic worker count's ceiling: set it or udp_workers (a fixed count), not both",
        );
    }
    if !(1..=99).contains(&c.udp_worker_busy_percent) {
        return bad("udp_worker_busy_percent", "must be from 1 to 99");
    }
    let bursts = [
        (
            "new_dialogs_burst",
            c.new_dialogs_per_s,
            c.new_dialogs_burst,
        ),
        ("per_source_burst", c.per_source_rate, c.per_source_burst),
        ("registers_burst", c.registers_per_s, c.registers_burst),
        (
            "per_source_register_burst",
            c.per_source_register_rate,
            c.per_source_register_burst,
        ),
        ("per_account_burst", c.per_account_rate, c.per_account_burst),
    ];
    for (field, rate, burst) in bursts {
        if rate > 0 && burst == 0 {
            return bad(field, "must be at least 1 while its rate is on");
        }
    }
    Ok(c)
}
