//! How long a TCP connection's reader waits for more bytes: until the
//! connection has been idle `[tcp] idle_s`, or, while part of a message is
//! buffered, until that message is `[tcp] frame_s` old (R-FT-4). A peer
//! that dribbles a byte a second resets no clock here: its message has to
//! complete in time, whatever the pace.

use std::time::{Duration, Instant};

/// The read deadlines of one connection.
#[derive(Debug)]
pub(super) struct ReadTimer {
    idle: Duration,
    frame: Duration,
    /// When the first byte of the incomplete message in the buffer came.
    partial_since: Option<Instant>,
}

/// Why a read timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Expired {
    /// Nothing buffered and nothing received for `idle`.
    Idle,
    /// A message started and did not complete within `frame`.
    Frame,
}

impl ReadTimer {
    pub(super) fn new(idle: Duration, frame: Duration) -> ReadTimer {
        ReadTimer {
            idle,
            frame,
            partial_since: None,
        }
    }

    /// After framing: `buffered` bytes of an incomplete message are left,
    /// `consumed` says whether a frame was just taken off (the bytes left
    /// then start a new message).
    pub(super) fn framed(&mut self, buffered: bool, consumed: bool, now: Instant) {
        self.partial_since = match (buffered, self.partial_since) {
            (false, _) => None,
            (true, Some(t)) if !consumed => Some(t),
            (true, _) => Some(now),
        };
    }

    /// How long the next read may wait, and what it means if it runs out.
    pub(super) fn wait(&self, now: Instant) -> (Duration, Expired) {
        match self.partial_since {
            Some(t) => {
                let left = (t + self.frame).saturating_duration_since(now);
                if left <= self.idle {
                    (left, Expired::Frame)
                } else {
                    (self.idle, Expired::Idle)
                }
            }
            None => (self.idle, Expired::Idle),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_started_message_has_frame_s_to_complete_however_it_trickles() {
        let t0 = Instant::now();
        let mut r = ReadTimer::new(600 * S, 10 * S);
        assert_eq!(r.wait(t0), (600 * S, Expired::Idle));
        r.framed(true, false, t0);
        assert_eq!(r.wait(t0), (10 * S, Expired::Frame));
        // A byte a second: the deadline stays where the message started.
        for k in 1..10 {
            r.framed(true, false, t0 + k * S);
            assert_eq!(r.wait(t0 + k * S), ((10 - k) * S, Expired::Frame));
        }
        assert_eq!(r.wait(t0 + 11 * S), (Duration::ZERO, Expired::Frame));
        // Complete, with the start of the next one: a new deadline.
        r.framed(true, true, t0 + 11 * S);
        assert_eq!(r.wait(t0 + 11 * S), (10 * S, Expired::Frame));
        r.framed(false, true, t0 + 12 * S);
        assert_eq!(r.wait(t0 + 12 * S), (600 * S, Expired::Idle));
    }

    #[test]
    fn an_idle_time_shorter_than_the_frame_time_still_applies() {
        let t0 = Instant::now();
        let mut r = ReadTimer::new(2 * S, 10 * S);
        r.framed(true, false, t0);
        assert_eq!(r.wait(t0), (2 * S, Expired::Idle));
        assert_eq!(r.wait(t0 + 9 * S), (S, Expired::Frame));
    }
}
