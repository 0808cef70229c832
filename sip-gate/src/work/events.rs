//! What each SIP message the core forwards means for the work book: the
//! core calls these as requests and responses pass (see the module docs of
//! [`super`] for the rules).

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::lex::{find_param, parse_decimal, take_while};
use crate::message::{HeaderName, Method, SipMessage};
use crate::txn::{TxnEntry, NON_INVITE_LIFETIME};

use super::dialogs::{Added, Dialog};
use super::hash::Usage;
use super::{millis, WorkBook};

/// How long an unanswered BYE leaves its call up: Timer F, after which the
/// UAC itself considers the dialog gone (RFC 3261 15.1.1).
fn bye_wait_ms() -> u64 {
    millis(NON_INVITE_LIFETIME)
}

/// What a NOTIFY says of its subscription (RFC 6665 4.1.3, 8.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SubState {
    /// `terminated`: the subscription is over.
    Terminated,
    /// `active` or `pending`, with the `expires` parameter if given.
    Alive(Option<u32>),
    /// No Subscription-State header.
    Absent,
}

fn subscription_state(msg: &SipMessage) -> SubState {
    let Some(f) = msg.first_field(HeaderName::SubscriptionState) else {
        return SubState::Absent;
    };
    let raw: &[u8] = msg.raw();
    let v = f.value.clone();
    let state_end = take_while(raw, v.start, v.end, crate::lex::is_token);
    if raw[v.start..state_end].eq_ignore_ascii_case(b"terminated") {
        return SubState::Terminated;
    }
    let expires = find_param(raw, state_end..v.end, b"expires")
        .and_then(|p| p.value)
        .and_then(|r| parse_decimal(raw.get(r)?))
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    SubState::Alive(expires)
}

/// Requests whose presence in a dialog says it is a call (RFC 3261 14,
/// RFC 3311, RFC 3262, RFC 6086, RFC 3515): a call this gate did not see
/// set up is learned from them.
fn marks_a_call(m: Method) -> bool {
    matches!(
        m,
        Method::Invite | Method::Update | Method::Prack | Method::Info | Method::Refer
    )
}

impl WorkBook {
    /// An INVITE transaction of instance `i` was forwarded.
    pub(crate) fn invite_started(&self, i: usize) {
        if let Some(c) = self.invites.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An INVITE transaction of instance `i` got its final response, or
    /// passed Timer C without one.
    pub(crate) fn invite_done(&self, i: usize) {
        if let Some(c) = self.invites.get(i) {
            c.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The instance serving the dialog of `msg` (a call, else a
    /// subscription), if this gate saw it set up or learned it.
    pub(crate) fn dialog_instance(&self, msg: &SipMessage) -> Option<usize> {
        let call = self.hashes.dialog(Usage::Call, msg);
        call.and_then(|k| self.calls.instance(k)).or_else(|| {
            let sub = self.hashes.dialog(Usage::Subscription, msg)?;
            self.subs.instance(sub)
        })
    }

    fn add(&self, usage: Usage, key: u64, d: Dialog) {
        let (table, which) = match usage {
            Usage::Call => (&self.calls, 0),
            Usage::Subscription => (&self.subs, 2),
        };
        if table.add(key, d) == Added::Full {
            self.counters.full[which].increment(1);
        }
    }

    /// A request inside a dialog was forwarded; `owner` is the instance on
    /// the gate's side of the dialog.
    pub(crate) fn in_dialog(&self, msg: &SipMessage, method: Method, owner: usize, now: Instant) {
        let now_ms = self.clock.ms(now);
        match method {
            Method::Notify => self.notify(msg, owner, now_ms),
            Method::Subscribe => {
                if let Some(k) = self.hashes.dialog(Usage::Subscription, msg) {
                    self.subs.update(k, |d| d.seen_ms = now_ms);
                }
            }
            _ => self.call_request(msg, method, owner, now_ms),
        }
    }

    fn call_request(&self, msg: &SipMessage, method: Method, owner: usize, now_ms: u64) {
        let Some(key) = self.hashes.dialog(Usage::Call, msg) else {
            return;
        };
        let bye = method == Method::Bye;
        let known = self.calls.update(key, |d| {
            d.seen_ms = now_ms;
            if bye && d.until_ms == 0 {
                d.until_ms = now_ms.saturating_add(bye_wait_ms());
            }
        });
        if known.is_none() && marks_a_call(method) {
            self.add(Usage::Call, key, Dialog::new(owner, now_ms, 0, true));
        }
    }

    fn notify(&self, msg: &SipMessage, owner: usize, now_ms: u64) {
        let Some(key) = self.hashes.dialog(Usage::Subscription, msg) else {
            return;
        };
        let expires = match subscription_state(msg) {
            SubState::Terminated => {
                self.subs.end_or_bury(key, owner, now_ms);
                return;
            }
            SubState::Alive(e) => e.map(|s| self.expiry(now_ms, s)),
            SubState::Absent => None,
        };
        let known = self.subs.update(key, |d| {
            d.seen_ms = now_ms;
            if let Some(u) = expires {
                d.until_ms = u;
            }
        });
        if known.is_none() {
            let until = expires.unwrap_or_else(|| self.expiry(now_ms, self.limits.max_expires_s));
            self.add(
                Usage::Subscription,
                key,
                Dialog::new(owner, now_ms, until, true),
            );
        }
    }

    /// The end of a registration or subscription granted `secs` from
    /// `now_ms`; an expiry above `max_expires_s` is counted as granted and
    /// noted (the restart window assumes none is longer).
    fn expiry(&self, now_ms: u64, secs: u32) -> u64 {
        if secs > self.limits.max_expires_s {
            self.counters.over_max.increment(1);
            tracing::warn!(
                expires = secs,
                max = self.limits.max_expires_s,
                "expiry granted above [work] max_expires_s"
            );
        }
        now_ms.saturating_add(u64::from(secs) * 1000)
    }

    /// A final response was relayed. `txn` is its transaction as it was
    /// before this response (`None` when the gate no longer knows it),
    /// `first` true for the transaction's first final response.
    pub(crate) fn final_response(
        &self,
        msg: &SipMessage,
        txn: Option<&TxnEntry>,
        first: bool,
        now: Instant,
    ) {
        let now_ms = self.clock.ms(now);
        let code = msg.code().unwrap_or(0);
        let ok = (200..300).contains(&code);
        let in_dialog = txn.is_some_and(|e| !e.initial);
        match msg.cseq().map(|c| c.1) {
            Some(Method::Invite) => self.invite_final(msg, code, txn, now_ms),
            Some(Method::Bye) => self.bye_final(msg, code, now_ms),
            Some(Method::Register) if ok && first => self.register_ok(msg, txn, now_ms),
            Some(Method::Subscribe) => self.subscribe_final(msg, code, txn, now_ms),
            Some(Method::Notify) if code == 481 => self.end(Usage::Subscription, msg, now_ms),
            // RFC 3261 12.2.1.2: the dialog does not exist (any more).
            _ if code == 481 && in_dialog => self.end(Usage::Call, msg, now_ms),
            _ => {}
        }
    }

    fn end(&self, usage: Usage, msg: &SipMessage, now_ms: u64) {
        if let Some(k) = self.hashes.dialog(usage, msg) {
            match usage {
                Usage::Call => self.calls.end(k, now_ms),
                Usage::Subscription => self.subs.end(k, now_ms),
            };
        }
    }

    fn invite_final(&self, msg: &SipMessage, code: u16, txn: Option<&TxnEntry>, now_ms: u64) {
        let Some(e) = txn else {
            return;
        };
        if (200..300).contains(&code) && e.initial {
            // Every 2xx: a fork is another dialog; a retransmission finds its own.
            if let (Some(i), Some(k)) = (e.owner, self.hashes.dialog(Usage::Call, msg)) {
                self.add(Usage::Call, k, Dialog::new(i, now_ms, 0, false));
            }
        } else if code == 481 && !e.initial {
            self.end(Usage::Call, msg, now_ms);
        }
    }

    fn bye_final(&self, msg: &SipMessage, code: u16, now_ms: u64) {
        let Some(key) = self.hashes.dialog(Usage::Call, msg) else {
            return;
        };
        match code {
            200..=299 | 408 | 481 => {
                if let Some(d) = self.calls.end(key, now_ms) {
                    if code < 300 && !d.learned {
                        self.holds.record(now_ms.saturating_sub(d.since_ms));
                    }
                }
            }
            // Challenged or refused: the call goes on.
            _ => {
                self.calls.update(key, |d| d.until_ms = 0);
            }
        }
    }

    fn register_ok(&self, msg: &SipMessage, txn: Option<&TxnEntry>, now_ms: u64) {
        // Only REGISTERs routed to an instance (its registrar) count.
        let (Some(i), Some(aor)) = (txn.and_then(|e| e.hop.instance), msg.to_uri()) else {
            return;
        };
        let contacts = msg.contacts();
        if contacts.len() != contact_elements(msg) {
            // A Contact it cannot read: removing what it may still list
            // would be a guess, so the 2xx changes nothing.
            tracing::debug!("REGISTER 2xx with an unreadable Contact: bindings unchanged");
            return;
        }
        let default = msg.expires();
        let listed: Vec<(u64, u64)> = contacts
            .iter()
            .filter(|c| !c.star)
            .filter_map(|c| {
                let secs = c.expires.or(default).unwrap_or(self.limits.max_expires_s);
                let uri = msg.raw().get(c.uri.clone())?;
                (secs > 0).then(|| (self.hashes.contact(uri), self.expiry(now_ms, secs)))
            })
            .collect();
        let before = self.regs.tally().full_at_ms();
        self.regs.confirm(self.hashes.aor(aor), i, &listed, now_ms);
        if self.regs.tally().full_at_ms() != before {
            self.counters.full[1].increment(1);
        }
    }

    fn subscribe_final(&self, msg: &SipMessage, code: u16, txn: Option<&TxnEntry>, now_ms: u64) {
        let Some(key) = self.hashes.dialog(Usage::Subscription, msg) else {
            return;
        };
        let initial = txn.is_some_and(|e| e.initial);
        if !(200..300).contains(&code) {
            // A refused SUBSCRIBE sets nothing up; 481: it is gone.
            if code == 481 || initial {
                self.subs.end(key, now_ms);
            }
            return;
        }
        // RFC 6665 4.1.2.1: the 2xx says the duration; without one, the
        // longest the site grants.
        let secs = msg.expires().unwrap_or(self.limits.max_expires_s);
        if secs == 0 {
            self.subs.end(key, now_ms);
            return;
        }
        let until = self.expiry(now_ms, secs);
        let known = self.subs.update(key, |d| {
            d.until_ms = until;
            d.seen_ms = now_ms;
        });
        if known.is_none() {
            if let Some(i) = txn.and_then(|e| e.owner) {
                self.add(
                    Usage::Subscription,
                    key,
                    Dialog::new(i, now_ms, until, !initial),
                );
            }
        }
    }
}

/// How many comma-separated elements the Contact lines hold; an unsplittable
/// line counts one more than [`SipMessage::contacts`] can read.
fn contact_elements(msg: &SipMessage) -> usize {
    msg.headers()
        .iter()
        .enumerate()
        .filter(|(_, f)| f.name == HeaderName::Contact)
        .map(|(i, _)| msg.elements(i).map_or(usize::MAX / 2, Iterator::count))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn notify(state: &str) -> SipMessage {
        SipMessage::parse(Bytes::from(format!(
            "NOTIFY sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\n\
             From: <sip:a@b>;tag=1\r\nTo: <sip:c@d>;tag=2\r\nCall-ID: n\r\n\
             CSeq: 1 NOTIFY\r\nEvent: presence\r\n{state}Content-Length: 0\r\n\r\n"
        )))
        .unwrap()
    }

    #[test]
    fn subscription_state_header() {
        let s = |h: &str| subscription_state(&notify(h));
        assert_eq!(s(""), SubState::Absent);
        assert_eq!(
            s("Subscription-State: terminated;reason=timeout\r\n"),
            SubState::Terminated
        );
        assert_eq!(
            s("subscription-state: TERMINATED\r\n"),
            SubState::Terminated
        );
        assert_eq!(
            s("Subscription-State: active;expires=600\r\n"),
            SubState::Alive(Some(600))
        );
        assert_eq!(s("Subscription-State: pending\r\n"), SubState::Alive(None));
        assert_eq!(
            s("Subscription-State: active ; expires = 99999999999\r\n"),
            SubState::Alive(Some(u32::MAX))
        );
    }
}
