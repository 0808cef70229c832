//! One UDP worker's intake (R-OV-1): which of a batch of queued messages go
//! first, whether the worker is behind, and how large its batches are.

use std::time::{Duration, Instant};

use crate::message::SipMessage;
use crate::metrics as m;

use super::Class;

/// A scanned message's class as it claims it (R-OV-1), which orders a batch
/// and nothing more: the core judges each request (R-SEC-4).
pub(crate) fn class_of(msg: &SipMessage) -> Class {
    crate::newwork::claimed(msg)
}

/// Whether `msg`, read in a batch after the new dialogs in `later` were put
/// off, is handled in the batch's first pass: responses, ACK, CANCEL and
/// in-dialog requests go before new dialogs (R-OV-1), unless a message of
/// their call was put off, so that each call's messages keep the order they
/// came in (a retransmitted INVITE stays ahead of the 200's ACK, and of
/// the response that ends its transaction). Each pass is in arrival order.
pub(crate) fn first<'a>(msg: &SipMessage, later: impl IntoIterator<Item = &'a SipMessage>) -> bool {
    if class_of(msg).is_new() {
        return false;
    }
    // Looked up once, not once per deferred message.
    let call_id = msg.call_id();
    later.into_iter().all(|m| m.call_id() != call_id)
}

/// Whether `msg`, one of a batch's put-off messages, is handled before the
/// REGISTERs put off in `registers` (R-OV-1 for REGISTER): new dialogs go
/// before REGISTERs, a caller waiting in person where a phone has its
/// binding's lifetime and a Retry-After; anything of a put-off REGISTER's
/// call stays behind it. Each pass is in arrival order.
pub(crate) fn before_registers<'a>(
    msg: &SipMessage,
    registers: impl IntoIterator<Item = &'a SipMessage>,
) -> bool {
    if class_of(msg) == Class::Register {
        return false;
    }
    let call_id = msg.call_id();
    registers.into_iter().all(|m| m.call_id() != call_id)
}

/// One UDP worker's view of its intake queue: whether a datagram is
/// handled behind (R-OV-1).
#[derive(Debug)]
pub(crate) struct IntakeMeter {
    deadline: Duration,
    /// The kernel's count of datagrams this socket dropped, last seen.
    drops: u32,
    /// Behind until then: the queue overflowed.
    overflowed_until: Option<Instant>,
}

impl IntakeMeter {
    pub(crate) fn new(deadline: Duration) -> IntakeMeter {
        IntakeMeter {
            deadline,
            drops: 0,
            overflowed_until: None,
        }
    }

    /// The kernel's drop count delivered with a datagram, in the order the
    /// datagrams were queued (the kernel sends none while it is 0). The
    /// count rides on the datagrams queued after a drop, so the worker
    /// learns of an overflow once it has read what was queued before it;
    /// refusing new dialogs for one deadline from then gives the queue time
    /// to drain before the next burst fills it.
    pub(crate) fn dropped(&mut self, drops: Option<u32>, now: Instant) {
        if let Some(d) = drops.filter(|&d| d != self.drops) {
            m::dropped_n("udp_queue_full", u64::from(d.wrapping_sub(self.drops)));
            self.drops = d;
            self.overflowed_until = Some(now + self.deadline);
        }
    }

    /// Whether a datagram handled at `now`, `waited` after the kernel
    /// queued it (when the kernel stamped it), is handled behind: past the
    /// deadline, or while the queue has just overflowed.
    pub(crate) fn behind(&self, waited: Option<Duration>, now: Instant) -> bool {
        waited.is_some_and(|w| w > self.deadline) || self.overflowed_until.is_some_and(|t| now < t)
    }
}

/// The most datagrams a UDP worker reads at once: enough to reorder a
/// backlog by priority, few enough that a batch is handled within a
/// millisecond or two.
pub(crate) const MAX_BATCH: usize = 64;

/// `sipgate_udp_batches_total{size}`: the batches UDP workers read, by
/// number of datagrams, in powers of two up to [`MAX_BATCH`]. Registered
/// once; one counter moves per batch.
#[derive(Debug)]
pub(crate) struct BatchSizes {
    counters: [metrics::Counter; 7],
}

impl BatchSizes {
    const LABELS: [&'static str; 7] = ["1", "2-3", "4-7", "8-15", "16-31", "32-63", "64"];

    pub(crate) fn new() -> BatchSizes {
        BatchSizes {
            counters: Self::LABELS.map(|size| metrics::counter!(m::UDP_BATCHES, "size" => size)),
        }
    }

    /// Counts a batch of `n` datagrams.
    pub(crate) fn record(&self, n: usize) {
        if let Some(c) = self.counters.get(Self::bucket(n)) {
            c.increment(1);
        }
    }

    /// The label a batch of `n` datagrams is counted under.
    #[cfg(test)]
    pub(crate) fn label(n: usize) -> &'static str {
        Self::LABELS[Self::bucket(n)]
    }

    /// floor(log2(n)), capped at the last label.
    fn bucket(n: usize) -> usize {
        let log2 = usize::BITS - n.max(1).leading_zeros() - 1;
        (log2 as usize).min(Self::LABELS.len() - 1)
    }
}

/// `sipgate_udp_intake_wait_total{class, upto_ms}`: how long each datagram
/// a UDP worker handled waited in its queue (R-OV-1: in-dialog traffic
/// should not wait behind a flood), by class and in buckets of a 1-2.5-5
/// series. Counters, not a histogram: registered once per worker, one
/// moves per datagram, and nothing accumulates between scrapes.
#[derive(Debug)]
pub(crate) struct IntakeWaits {
    counters: [[metrics::Counter; IntakeWaits::UPTO_US.len()]; 4],
}

impl IntakeWaits {
    /// Each bucket's upper bound, µs; the last takes the rest.
    const UPTO_US: [u64; 12] = [
        100,
        250,
        500,
        1_000,
        2_500,
        5_000,
        10_000,
        25_000,
        50_000,
        100_000,
        250_000,
        u64::MAX,
    ];
    const LABELS: [&'static str; 12] = [
        "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "25", "50", "100", "250", "+Inf",
    ];
    const CLASSES: [&'static str; 4] = ["response", "in_dialog", "new_dialog", "register"];

    pub(crate) fn new() -> IntakeWaits {
        IntakeWaits {
            counters: Self::CLASSES.map(|class| {
                Self::LABELS
                    .map(|upto| metrics::counter!(m::UDP_INTAKE_WAIT, "class" => class, "upto_ms" => upto))
            }),
        }
    }

    /// Counts a `class` datagram that waited `waited` (nothing when the
    /// kernel did not stamp it).
    pub(crate) fn record(&self, class: Class, waited: Option<Duration>) {
        let Some(waited) = waited else { return };
        let row = match class {
            Class::Response => 0,
            Class::InDialog => 1,
            Class::NewDialog => 2,
            Class::Register => 3,
        };
        let bucket = Self::bucket(waited);
        if let Some(c) = self.counters.get(row).and_then(|r| r.get(bucket)) {
            c.increment(1);
        }
    }

    /// The `upto_ms` label a wait is counted under.
    #[cfg(test)]
    pub(crate) fn label(waited: Duration) -> &'static str {
        Self::LABELS[Self::bucket(waited)]
    }

    /// The first bucket whose bound is at least `waited` (the last one's
    /// bound is `u64::MAX` µs, so there always is one).
    fn bucket(waited: Duration) -> usize {
        let us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        Self::UPTO_US.partition_point(|&upto| upto < us)
    }
}
