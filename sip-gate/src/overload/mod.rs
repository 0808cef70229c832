//! Overload protection (R-OV-1) and per-source limits (R-OV-2).
//!
//! The intake of a UDP worker is its socket's receive queue: bounded by
//! `[overload] udp_rcvbuf_bytes` and read by the one thread that owns it,
//! a batch at a time: what is queued when the worker wakes, up to a bound.
//! Within a batch, responses and in-dialog requests are handled before new
//! dialogs ([`first`]), so under a backlog a BYE does not wait behind the
//! INVITEs queued before it. How far behind the worker is shows in how long
//! each datagram waited from its arrival to its handling (the kernel's
//! receive timestamp) and in the kernel's count of datagrams it dropped
//! because the queue was full ([`IntakeMeter`]).
//!
//! REGISTER is new work of its own class ([`Class::Register`], R-OV-1 for
//! REGISTER): handled after the new dialogs of its batch, since a phone
//! re-registering has its binding's remaining lifetime and a Retry-After to
//! wait on while a caller waits in person; admitted against a capacity of
//! its own (`registers_per_s`) so a registration avalanche does not take
//! the new calls' share; and limited per source with an allowance of its
//! own (`per_source_register_rate`) so an office NAT re-registering all its
//! phones at once is let through while that address's calls keep their
//! own limit.
//!
//! Only new work is ever refused (R-SEC-4, [`crate::newwork`]): while a worker is
//! behind, while the gate is above its capacity for new dialogs, or while
//! their source or account is above its limit, they get a stateless 503
//! with Retry-After (R-OV-2 may drop them instead). Responses, ACK, CANCEL
//! and in-dialog requests pass untouched, and the check costs nothing for
//! them: it runs where the core has already judged the request.

mod bucket;
mod intake;
mod lag;
mod sources;

use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use ringsync::config::{LimitAction, OverloadConfig};

use crate::metrics as m;

pub(crate) use bucket::{Bucket, Limit};
pub(crate) use intake::{
    before_registers, class_of, first, BatchSizes, IntakeMeter, IntakeWaits, MAX_BATCH,
};
pub(crate) use lag::RuntimeLag;
use sources::SourceTable;

pub(crate) use crate::newwork::Class;

/// Why a new dialog is refused: the `limit` label of
/// `sipgate_overload_refusals_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// R-OV-1: it waited past the deadline in the intake queue, or that
    /// queue overflowed just now.
    Deadline,
    /// R-OV-1: the gate is above its capacity for new dialogs.
    Capacity,
    /// R-OV-1: the gate is above its capacity for REGISTERs.
    Registrations,
    /// R-OV-1: the transaction table is full.
    Transactions,
    /// R-OV-2: its source address is above its limit.
    Source,
    /// R-OV-2: its esg account is above its limit.
    Account,
}

impl Why {
    const ALL: [Why; 6] = [
        Why::Deadline,
        Why::Capacity,
        Why::Registrations,
        Why::Transactions,
        Why::Source,
        Why::Account,
    ];

    pub(crate) fn rule(self) -> &'static str {
        match self {
            Why::Deadline | Why::Capacity | Why::Registrations | Why::Transactions => "R-OV-1",
            Why::Source | Why::Account => "R-OV-2",
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Why::Deadline => "deadline",
            Why::Capacity => "capacity",
            Why::Registrations => "registrations",
            Why::Transactions => "transactions",
            Why::Source => "source",
            Why::Account => "account",
        }
    }
}

/// The verdict on a new dialog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Go on routing it.
    Pass,
    /// Answer 503 with Retry-After.
    Reject(Why),
    /// Say nothing (R-OV-2 with `action = "drop"`).
    Drop(Why),
}

/// The limits of one gate, shared by every transport thread.
#[derive(Debug)]
pub(crate) struct Overload {
    retry_after: u32,
    retry_after_jitter: u32,
    action: LimitAction,
    capacity: Limit,
    gate: Mutex<Bucket>,
    register_capacity: Limit,
    registers: Mutex<Bucket>,
    source_limit: Limit,
    source_register_limit: Limit,
    sources: SourceTable,
    account_limit: Limit,
    accounts: Vec<Mutex<Bucket>>,
    /// `sipgate_overload_refusals_total{rule, limit, action}`, registered
    /// once: [reject, drop] per [`Why`].
    refusals: [[metrics::Counter; 2]; 6],
}

impl Overload {
    /// The limits of `[overload]`, for a site with `accounts` esg accounts.
    pub(crate) fn new(c: &OverloadConfig, accounts: usize, now: Instant) -> Overload {
        let capacity = Limit {
            rate: c.new_dialogs_per_s,
            burst: c.new_dialogs_burst,
        };
        let account_limit = Limit {
            rate: c.per_account_rate,
            burst: c.per_account_burst,
        };
        let source_limit = Limit {
            rate: c.per_source_rate,
            burst: c.per_source_burst,
        };
        let register_capacity = Limit {
            rate: c.registers_per_s,
            burst: c.registers_burst,
        };
        let source_register_limit = Limit {
            rate: c.per_source_register_rate,
            burst: c.per_source_register_burst,
        };
        Overload {
            retry_after: c.retry_after_s,
            retry_after_jitter: c.retry_after_jitter_s,
            action: c.action,
            capacity,
            gate: Mutex::new(Bucket::full(capacity, now)),
            register_capacity,
            registers: Mutex::new(Bucket::full(register_capacity, now)),
            source_limit,
            source_register_limit,
            sources: SourceTable::new([source_limit, source_register_limit], c.max_sources),
            account_limit,
            accounts: (0..accounts)
                .map(|_| Mutex::new(Bucket::full(account_limit, now)))
                .collect(),
            refusals: Why::ALL.map(|w| {
                ["reject", "drop"].map(|action| {
                    metrics::counter!(m::OVERLOAD_REFUSALS, "rule" => w.rule(), "limit" => w.label(), "action" => action)
                })
            }),
        }
    }

    /// The Retry-After of an overload 503: `retry_after_s` plus up to
    /// `retry_after_jitter_s` at random, so what one burst had refused comes
    /// back spread out (R-OV-1).
    pub(crate) fn retry_after(&self) -> u32 {
        if self.retry_after_jitter == 0 {
            return self.retry_after;
        }
        let jitter = rand::Rng::random_range(&mut rand::rng(), 0..=self.retry_after_jitter);
        self.retry_after.saturating_add(jitter)
    }

    /// Whether the account limit is on (the account lookup is skipped
    /// when it is not).
    pub(crate) fn limits_accounts(&self) -> bool {
        self.account_limit.is_on() && !self.accounts.is_empty()
    }

    /// Decides on new work (a new dialog, or a REGISTER when `register`).
    /// `behind`: its worker read it past the deadline; `source`: its
    /// address, `None` for a configured instance (never limited per
    /// source); `account`: the esg account it belongs to. The per-source
    /// and per-account limits come before the gate's capacity, so one
    /// flooding source does not use up everyone's share. A REGISTER takes
    /// from its source's REGISTER allowance and the gate's REGISTER
    /// capacity, never from what new dialogs have (R-OV-1).
    pub(crate) fn admit(
        &self,
        behind: bool,
        source: Option<IpAddr>,
        account: Option<usize>,
        register: bool,
        now: Instant,
    ) -> Verdict {
        if behind {
            return self.refuse(Why::Deadline, LimitAction::Reject);
        }
        let kind = usize::from(register);
        if let Some(ip) = source.filter(|_| self.sources_on(register)) {
            if !self.sources.take(ip, kind, now) {
                return self.refuse(Why::Source, self.action);
            }
        }
        if let Some(b) = account.and_then(|a| self.accounts.get(a)) {
            if self.account_limit.is_on() && !lock(b).take(self.account_limit, now) {
                return self.refuse(Why::Account, self.action);
            }
        }
        if register {
            if self.register_capacity.is_on()
                && !lock(&self.registers).take(self.register_capacity, now)
            {
                return self.refuse(Why::Registrations, LimitAction::Reject);
            }
        } else if self.capacity.is_on() && !lock(&self.gate).take(self.capacity, now) {
            return self.refuse(Why::Capacity, LimitAction::Reject);
        }
        Verdict::Pass
    }

    /// Counts a refusal that was decided elsewhere (the transaction table
    /// was full).
    pub(crate) fn refused(&self, why: Why) {
        self.count(why, LimitAction::Reject);
    }

    fn sources_on(&self, register: bool) -> bool {
        if register {
            self.source_register_limit.is_on()
        } else {
            self.source_limit.is_on()
        }
    }

    fn refuse(&self, why: Why, action: LimitAction) -> Verdict {
        self.count(why, action);
        match action {
            LimitAction::Reject => Verdict::Reject(why),
            LimitAction::Drop => Verdict::Drop(why),
        }
    }

    fn count(&self, why: Why, action: LimitAction) {
        let a = usize::from(action == LimitAction::Drop);
        if let Some(c) = self.refusals.get(why as usize).and_then(|r| r.get(a)) {
            c.increment(1);
        }
    }

    /// Sources in the per-source table.
    pub(crate) fn sources(&self) -> usize {
        self.sources.len()
    }
}

fn lock(b: &Mutex<Bucket>) -> std::sync::MutexGuard<'_, Bucket> {
    b.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;
