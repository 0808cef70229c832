//! A CANCEL whose INVITE went into a subscriber's flow that has closed
//! since (R-WS-2, RFC 5626 5.3): the gate answers both transactions itself,
//! since nothing it could send into the flow would reach anyone.
//!
//! Without this the CANCEL followed its INVITE's hop into the closed
//! connection and was dropped (`sipgate_dropped_total{reason="flow_closed"}`):
//! the sg got no 200 for the CANCEL and no final response for the INVITE,
//! and its caller heard ringback until the sg's Timer C.

use std::time::Instant;

use crate::message::Method;
use crate::metrics as m;
use crate::reply::{self, Reply};
use crate::txn::{FlowOut, TxnEntry};

use super::answer::response_out;
use super::request::Request;
use super::{Action, Core};

impl Core {
    /// R-WS-2: `req` is a CANCEL of the INVITE transaction `entry`, which
    /// went into a subscriber's TCP or WebSocket flow that is no longer
    /// open: the CANCEL gets 200 (RFC 3261 16.10: it matched a transaction)
    /// and, unless the INVITE has its final response already, the INVITE
    /// gets `487 Request Terminated` from the gate, what a CANCEL leads to
    /// (RFC 3261 9.2), and its transaction ends here: its work is settled
    /// (R-ST-2), and the ACK of the 487 carries the gate's To tag, so it is
    /// absorbed ([`crate::reply::TagKey::is_ours`]). 487 rather than RFC
    /// 5626's 430 Flow Failed: the canceller asked for the INVITE to end
    /// and expects 487 for it; the flow's failure is told by the 430 the
    /// next request into it gets. `None`: anything else.
    pub(super) fn cancel_into_closed_flow(
        &self,
        req: &Request<'_>,
        entry: TxnEntry,
        now: Instant,
    ) -> Option<Action> {
        if req.method != Method::Cancel || !entry.invite {
            return None;
        }
        let Some(FlowOut {
            listener,
            conn: Some(conn),
        }) = entry.hop.flow
        else {
            return None;
        };
        if self.flow_table.is_open(conn, listener, entry.hop.addr) {
            return None;
        }
        m::flow_failure("closed");
        tracing::debug!(to = %entry.hop.addr, conn, "CANCEL into a closed flow: answered");
        let ok = self.reply_to(
            req.inbound,
            req.msg,
            &Reply::new(200),
            req.mname,
            "flow_closed",
        );
        if entry.finished {
            return Some(ok);
        }
        self.settle(req.key, now);
        // The INVITE's response goes where the INVITE came from, by the
        // top Via it shares with its CANCEL.
        let back = response_out(&req.top_via, Some(entry.inbound), entry.inbound.listener());
        // Neither without a usable Via (they share it): `reply_to` said so.
        let (Action::Send(ok_out, ok_bytes), Some(back)) = (&ok, back) else {
            return Some(ok);
        };
        let site = self.site();
        let terminated = reply::build_for_invite(
            req.msg,
            entry.inbound.peer(),
            &Reply::new(487),
            &self.tags,
            site.server_header(),
        );
        m::request(m::method_label(Method::Invite), "flow_closed");
        Some(Action::SendTwo(Box::new([
            (ok_out.clone(), ok_bytes.clone()),
            (back, terminated),
        ])))
    }
}
