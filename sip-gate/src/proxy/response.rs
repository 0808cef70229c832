//! Responses: only those answering something the gate sent travel back
//! (R-SEC-1), minus the gate's Via, to where [`response_out`] says: the
//! request's source while the transaction is known, else the next Via
//! (RFC 3261 18.2.2 with RFC 3581).

use std::net::SocketAddr;
use std::time::Instant;

use crate::branch::PROBE_PREFIX;
use crate::edit::Splice;
use crate::message::{Method, SipMessage};
use crate::metrics as m;
use crate::site::Site;
use crate::txn::{ConnId, Inbound, TxnEntry};
use crate::uri::host_ip;

use super::answer::response_out;
use super::forward::stream_length;
use super::{txn_span, Action, Core, Out};

impl Core {
    /// Relays one response.
    pub(super) fn response(
        &self,
        inbound: Inbound,
        site: &Site,
        msg: &SipMessage,
        now: Instant,
    ) -> Action {
        let Some(via) = msg.top_via() else {
            m::dropped("no_via");
            return Action::None;
        };
        let branch = via.branch.unwrap_or_default();
        let ours = via
            .port
            .zip(host_ip(via.host))
            .is_some_and(|(p, ip)| site.listeners.is_own(SocketAddr::new(ip, p)));
        if ours && branch.starts_with(PROBE_PREFIX.as_bytes()) {
            self.health.answer(&site.config, branch, inbound.peer());
            return Action::None;
        }
        // Only responses to what the gate sent travel back (R-SEC-1): the
        // branch carries a MAC, so a forged response cannot make the gate
        // relay it to the address in its second Via.
        let key = match self.branches.open(branch) {
            Some(k) if ours => k,
            _ => {
                m::response("not_ours");
                return Action::None;
            }
        };
        // A response whose only Via was the gate's answers nobody
        // (RFC 3261 16.7 step 3): it is not forwarded.
        let Some(next) = msg.second_via() else {
            m::dropped("no_next_via");
            return Action::None;
        };
        let span = txn_span(msg, next.branch);
        let _entered = span.enter();

        let entry = match self.track(site, msg, key, now) {
            Ok(entry) => entry,
            Err(action) => return action,
        };
        // RFC 3261 16.7 step 5: a stateful proxy never forwards a 100; it
        // concerns the hop only (the gate's own transaction state is kept
        // by `track` above).
        if msg.code() == Some(100) {
            m::response("trying");
            return Action::None;
        }
        if let Some(i) = entry.and_then(|e| e.hop.instance) {
            span.record("instance", site.instance_id(i));
            // R-FT-1 (amended): an instance that answers is alive.
            self.traffic.answered(i, now);
        }
        if let Some(Inbound::Tcp { conn, .. }) = entry.map(|e| e.inbound) {
            self.hold_flow(site, msg, conn, now);
        }

        let Some(out) = response_out(&next, entry.map(|e| e.inbound), inbound.listener()) else {
            m::dropped("bad_next_via");
            return Action::None;
        };
        // Drop our Via; the next one is the client's.
        let mut s = Splice::new(msg);
        if let Err(e) = s.remove_element(via.field_index, via.range.clone()) {
            tracing::debug!(error = %e, "cannot remove our Via");
            m::dropped("edit_conflict");
            return Action::None;
        }
        if matches!(out, Out::Tcp { .. }) {
            stream_length(&mut s);
        }
        let Ok(bytes) = s.finish() else {
            m::dropped("edit_conflict");
            return Action::None;
        };
        self.forwarded.response();
        self.carried(now);
        tracing::debug!(code = msg.code(), "response relayed");
        Action::Send(out, bytes)
    }

    /// A REGISTER 2xx going back on a subscriber's connection: the
    /// registrar keeps the subscriber reachable through it until the
    /// longest expiry the 2xx lists (capped at `[work] max_expires_s`), so
    /// the connection is kept open that long while idle.
    fn hold_flow(&self, site: &Site, msg: &SipMessage, conn: ConnId, now: Instant) {
        let code = msg.code().unwrap_or(0);
        if !(200..300).contains(&code) || msg.cseq().map(|c| c.1) != Some(Method::Register) {
            return;
        }
        let default = msg.expires();
        let secs = msg
            .contacts()
            .iter()
            .filter(|c| !c.star)
            .filter_map(|c| c.expires.or(default))
            .max()
            .unwrap_or(0)
            .min(site.config.work.max_expires_s);
        if secs > 0 {
            self.flow_table.hold(conn, now, secs);
        }
    }

    /// Updates the transaction (and the work book: R-ST-2) for a response to
    /// transaction `key`; returns its entry, or what to do instead.
    fn track(
        &self,
        site: &Site,
        msg: &SipMessage,
        key: u64,
        now: Instant,
    ) -> Result<Option<TxnEntry>, Action> {
        let code = msg.code().unwrap_or(0);
        let cseq_method = msg.cseq().map(|c| c.1);
        // CANCEL shares the INVITE's key; its responses must not end the INVITE.
        if cseq_method == Some(Method::Cancel) {
            return Ok(self.txns.get(key));
        }
        if code < 200 {
            let e = self.txns.get(key);
            // A provisional response after the final one (reordered on the
            // way, or a late retransmission) would confuse the UAC: like a
            // stateful proxy, do not forward it (RFC 3261 16.7 step 5).
            if e.is_some_and(|e| e.finished) {
                m::response("late_provisional");
                return Err(Action::None);
            }
            return Ok(e);
        }
        let before = self.txns.finish(key, now);
        let first = before.is_some_and(|e| !e.finished);
        // The first final response settles the INVITE transaction's work.
        if let Some(i) = before.filter(|e| first && e.invite).and_then(|e| e.owner) {
            self.work.invite_done(i);
        }
        self.work.final_response(msg, before.as_ref(), first, now);
        // R-SEC-3: an instance refused a client's credentials. Only the
        // first final response of a transaction counts, and only for a
        // request the gate took from a client to an instance.
        if let Some(e) = before.filter(|e| first && e.hop.instance.is_some()) {
            if matches!(code, 401 | 403 | 407) && site.origins.instance(e.inbound.peer()).is_none()
            {
                site.bans
                    .failure(e.inbound.listener(), e.inbound.peer().ip(), now);
            }
        }
        Ok(before)
    }
}
