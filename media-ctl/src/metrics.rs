//! Metric names and labels in one place. Labels are `&'static str` or
//! instance ids from the config, never client text, so a client cannot
//! grow the metric set.

/// Client commands by command and outcome (`relayed`, `pong`, `cached`,
/// `resent`, `absorbed`, `fanout`, `lookup`, `mg_down`, `no_mg`, refusals).
pub(crate) const COMMANDS: &str = "mediactl_commands_total";
/// New calls placed, by instance and reason (`bgmg`, `least_loaded`,
/// `ramp`, `queued_for_drain`, `found` for a call found by asking the pool).
pub(crate) const NEW_CALLS: &str = "mediactl_new_calls_total";
/// Offers from an sg/esg whose bgmg was passed over, by reason
/// (`local_draining`, `bgmg_down`).
pub(crate) const BGMG_SKIPPED: &str = "mediactl_bgmg_skipped_total";
/// ng `error` results media-ctl gave itself, by reason.
pub(crate) const ERRORS: &str = "mediactl_errors_total";
/// Datagrams dropped without an answer, by reason.
pub(crate) const DROPPED: &str = "mediactl_dropped_total";
/// HEP copies of ng traffic handed to each capture `collector` (`[capture]`).
pub(crate) const CAPTURE_SENT: &str = "mediactl_capture_sent_total";
/// HEP copies dropped, by `reason` (as `sipgate_capture_dropped_total`).
pub(crate) const CAPTURE_DROPPED: &str = "mediactl_capture_dropped_total";
/// SIGHUP reloads of the site file, by `result` (`applied`: its
/// `[capture]` is in force; `invalid`: it does not load, nothing changed).
pub(crate) const RELOADS: &str = "mediactl_config_reloads_total";
/// Answers from the mgs, by instance and result (`ok`, `error`, `other`).
pub(crate) const MG_ANSWERS: &str = "mediactl_mg_answers_total";
/// Commands an mg did not answer in time, by instance.
pub(crate) const MG_TIMEOUTS: &str = "mediactl_mg_timeouts_total";
/// Calls tracked per instance.
pub(crate) const CALLS: &str = "mediactl_calls";
/// Current weight for new calls per mg (0..1; R-MG-4).
pub(crate) const WEIGHT: &str = "mediactl_mg_weight";
/// State per instance, 1 for the current one (`up`, `down`, `draining`,
/// `drained`, `draining_down`, plus `queued_for_drain`).
pub(crate) const STATE: &str = "mediactl_instance_state";
/// Commands waiting for an mg's answer.
pub(crate) const PENDING: &str = "mediactl_pending";
/// Calls forgotten because their mg no longer knew them or was down when
/// they went idle.
pub(crate) const IDLE_FORGOTTEN: &str = "mediactl_idle_calls_forgotten_total";

/// Outcomes of client commands, in the order of their counter slots.
const OUTCOMES: [&str; 12] = [
    "relayed",
    "pong",
    "cached",
    "resent",
    "absorbed",
    "fanout",
    "lookup",
    "mg_down",
    "no_mg",
    "bad_bencode",
    "unknown_command",
    "other",
];

pub(crate) fn command(command: &'static str, outcome: &'static str) {
    // The counters of the common commands are registered on first use and
    // kept: the hot path pays one atomic add, not a registry lookup.
    static SLOTS: [[std::sync::OnceLock<metrics::Counter>; OUTCOMES.len()]; 5] =
        [const { [const { std::sync::OnceLock::new() }; OUTCOMES.len()] }; 5];
    let row = match command {
        "offer" => Some(0),
        "answer" => Some(1),
        "delete" => Some(2),
        "query" => Some(3),
        "ping" => Some(4),
        _ => None,
    };
    let col = OUTCOMES.iter().position(|o| *o == outcome);
    match (row, col) {
        (Some(r), Some(c)) => SLOTS[r][c]
            .get_or_init(|| metrics::counter!(COMMANDS, "command" => command, "outcome" => outcome))
            .increment(1),
        _ => metrics::counter!(COMMANDS, "command" => command, "outcome" => outcome).increment(1),
    }
}

pub(crate) fn error(reason: &'static str) {
    metrics::counter!(ERRORS, "reason" => reason).increment(1);
}

pub(crate) fn dropped(reason: &'static str) {
    metrics::counter!(DROPPED, "reason" => reason).increment(1);
}

/// The counters of one mg or bgmg, registered once: recording on the hot
/// path is one atomic add, no label lookup or allocation.
#[derive(Debug)]
pub(crate) struct PerInstance {
    new_calls: [metrics::Counter; 5],
    answers: [metrics::Counter; 3],
    pub(crate) timeouts: metrics::Counter,
}

const NEW_CALL_REASONS: [&str; 5] = ["bgmg", "least_loaded", "ramp", "queued_for_drain", "found"];
const RESULTS: [&str; 3] = ["ok", "error", "other"];

impl PerInstance {
    /// Counters for every member of the pool, indexed by instance index.
    pub(crate) fn for_pool(pool: &crate::pool::Pool, instances: usize) -> Vec<Option<PerInstance>> {
        let mut v: Vec<Option<PerInstance>> = (0..instances).map(|_| None).collect();
        for m in pool.members() {
            let id = m.id.clone();
            v[m.idx] = Some(PerInstance {
                new_calls: NEW_CALL_REASONS
                    .map(|r| metrics::counter!(NEW_CALLS, "instance" => id.clone(), "reason" => r)),
                answers: RESULTS.map(
                    |r| metrics::counter!(MG_ANSWERS, "instance" => id.clone(), "result" => r),
                ),
                timeouts: metrics::counter!(MG_TIMEOUTS, "instance" => id.clone()),
            });
        }
        v
    }

    pub(crate) fn new_call(&self, reason: &str) {
        if let Some(i) = NEW_CALL_REASONS.iter().position(|r| *r == reason) {
            self.new_calls[i].increment(1);
        }
    }

    pub(crate) fn answer(&self, result: Option<&[u8]>) {
        let i = match result {
            Some(b"ok") => 0,
            Some(b"error") => 1,
            _ => 2,
        };
        self.answers[i].increment(1);
    }
}
