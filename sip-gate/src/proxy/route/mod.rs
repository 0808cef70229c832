//! The routing decision: where a request goes, or what the gate answers
//! instead, from the request, the drain view and the site config. It never
//! touches the transaction table, which is only changed after it returns
//! ([`super::transaction`]). It is not free of shared state: admitting a
//! new dialog takes the overload limits' locks (`overload/`: the gate's
//! token bucket, the per-source and per-account tables), a request to a
//! host name takes the DNS cache's lock (`dns/cache.rs`), and a new dialog
//! over a stream reads the transport holds (`reach.rs`, atomics), and a
//! new dialog for a pool with a `[[pool]]` table takes that pool's state
//! lock (`backup.rs`, R-HT-1). Each lock is held for one table operation,
//! never across another lock or I/O.

use ringsync::config::AccessAction;
use ringsync::view::{DrainView, Health};

use crate::dns::cache::Cached;
use crate::dns::{DnsFailure, DnsQuery};
use crate::flow::{self, Flow};
use crate::listener::Mode;
use crate::metrics as m;
use crate::policy::{Admission, OnPurpose};
use crate::txn::{FlowOut, Hop};
use crate::uri::SipUri;

use super::request::Request;
mod parts;

use super::Core;
pub(in crate::proxy) use parts::{creates_dialog, Decision};
use parts::{
    instance_down, instance_stream, instance_stream_kind, no_instance, ring_key, ws_not_connected,
};

impl Core {
    /// Decides where `req` goes in `view`. New work (R-SEC-4, judged once in
    /// [`super::request`]) meets every rule that refuses, in this order:
    /// the source (access list, ban: a refused source learns nothing else,
    /// not even that the gate is stopping), the gate's phase (R-GW-1), the
    /// overload limits (R-OV-1, R-OV-2), then routing and the drain.
    pub(super) fn decide(&self, req: &Request<'_>, view: &DrainView) -> Decision {
        if req.class.is_new() {
            if let Some(r) = req.source.refused {
                self.log_refusal(req.listener, req.inbound.peer(), r, req.now);
                return match r.action {
                    AccessAction::Reject => Decision::Refuse {
                        reply: r.reply(),
                        why: r.why,
                    },
                    AccessAction::Drop => Decision::Drop(r.why),
                };
            }
            // R-GW-1: a gate that is starting or stopping takes no new work,
            // in either direction.
            if !self.lifecycle.admits_new_work() {
                let phase = self.lifecycle.phase();
                if let Admission::Refuse { reply, rule } = req
                    .site
                    .policy
                    .not_serving(phase, req.msg, req.method, req.class)
                {
                    return Decision::Refuse { reply, why: rule };
                }
            }
            // R-OV-1, R-OV-2: new work over a limit, before routing it.
            if let Some(refused) = self.admit_new(req) {
                return refused;
            }
        }
        if let Some(src) = req.from_instance {
            self.outward(req, src)
        } else if req.class.is_new() {
            self.new_work(req, view)
        } else {
            self.in_dialog(req, view)
        }
    }

    /// From a configured instance toward the outside: along the route set,
    /// or to the Request-URI.
    fn outward(&self, req: &Request<'_>, src: usize) -> Decision {
        match &req.flow {
            Some(Ok(flow)) => return self.to_flow(req, flow, src),
            // R-SEC-2: nothing is sent along a flow the gate did not name.
            Some(Err(_)) => {
                m::flow_failure("bad_token");
                return Decision::refuse(403, "Bad Flow Token", "bad_flow_token");
            }
            None => {}
        }
        // Another gate node's flow (its address in the URI): only that node
        // holds the connection, and a relay through this one would reach it
        // as a client's request.
        if req.next_route().is_some_and(|r| {
            req.msg
                .raw()
                .get(r.uri.clone())
                .and_then(SipUri::parse)
                .and_then(|u| u.user)
                .is_some_and(|u| u.starts_with(flow::PREFIX))
        }) {
            m::flow_failure("other_node");
            return Decision::refuse(430, "Flow Failed", "flow_failed");
        }
        let Some(uri) = req.target() else {
            return Decision::refuse(404, "Unroutable Request-URI", "unroutable");
        };
        if uri.wants_ws() {
            return ws_not_connected();
        }
        match self.outside_hop(&uri, req) {
            // A WebSocket listener's stream toward no connection: the same.
            Ok(hop) if hop.tcp && req.listener.ws.is_some() => ws_not_connected(),
            Ok(hop) => {
                // Dialogs an instance starts through the gate come back to it.
                let record_route = (!req.to_tag && creates_dialog(req.method)).then_some(src);
                Decision::Forward {
                    hop,
                    record_route,
                    on_purpose: None,
                }
            }
            Err(decision) => decision,
        }
    }

    /// From an instance into a subscriber's flow (RFC 5626 5.3): over TCP on
    /// the subscriber's own connection, over UDP to the address and port its
    /// REGISTER came from; the Request-URI (its Contact, often a private
    /// address) is left as it is. A flow that is gone gets 430, so the
    /// instance can try the subscriber's other bindings.
    fn to_flow(&self, req: &Request<'_>, flow: &Flow, src: usize) -> Decision {
        let failed = |why: &'static str| {
            m::flow_failure(why);
            tracing::debug!(why, peer = %flow.peer, "flow failed");
            Decision::refuse(430, "Flow Failed", "flow_failed")
        };
        let Some(listener) = req.site.listeners.get(flow.listener) else {
            return failed("unknown_listener");
        };
        let conn = match flow.tcp {
            // Connection ids of an earlier run of the gate name nothing now.
            Some((_, epoch)) if epoch != self.flow_table.epoch() => return failed("restarted"),
            Some((conn, _)) if !self.flow_table.is_open(conn, flow.listener, flow.peer) => {
                return failed("closed")
            }
            Some((conn, _)) => Some(conn),
            None if listener.udp => None,
            None => return failed("unknown_listener"),
        };
        let record_route = (!req.to_tag && creates_dialog(req.method)).then_some(src);
        Decision::Forward {
            hop: Hop {
                instance: None,
                addr: flow.peer,
                tcp: conn.is_some(),
                dns: None,
                flow: Some(FlowOut {
                    listener: flow.listener,
                    conn,
                }),
            },
            record_route,
            on_purpose: None,
        }
    }

    /// In-dialog from outside, proven (R-SEC-4): the gate's token names the
    /// instance (R-SEC-1), else the work book's entry for the dialog, which
    /// stays where this gate saw it set up whatever a drain did since
    /// (R-SG-4).
    fn in_dialog(&self, req: &Request<'_>, view: &DrainView) -> Decision {
        let idx = match req.token {
            Some(Ok(idx)) => idx,
            Some(Err(())) => return Decision::refuse(403, "Bad Route Token", "bad_token"),
            None if req.ours > 0 || req.next_route().is_some() => {
                return Decision::refuse(403, "Route Not Allowed", "foreign_route")
            }
            // Proven by the work book, or sent by a configured instance
            // that keeps no route set: where the book says, else the
            // guarded instance, else the ring by Call-ID as the INVITE went.
            None => match (req.dialog, &req.listener.mode) {
                (Some(idx), _) => idx,
                (None, Mode::Guard(idx)) => *idx,
                // No SIP reaches the core from a ws pool (it passes bytes).
                (None, Mode::WsPool { .. }) => return no_instance(),
                (None, Mode::Balance(pool)) => match self
                    .work
                    .dialog_instance(req.msg)
                    .or_else(|| view.pick(pool, req.msg.call_id().unwrap_or_default()))
                {
                    Some(idx) => idx,
                    None => return no_instance(),
                },
            },
        };
        if let Some(r) = req.next_route() {
            // After the gate's Route, only the instance's own may follow.
            let to_instance = req
                .msg
                .raw()
                .get(r.uri.clone())
                .and_then(SipUri::parse)
                .and_then(|u| u.socket_addr())
                .is_some_and(|a| Some(a) == req.site.config.instances[idx].sip);
            if !to_instance {
                return Decision::refuse(403, "Route Not Allowed", "foreign_route");
            }
        }
        if view
            .instances()
            .get(idx)
            .is_some_and(|v| v.health == Health::Down)
            && !self.traffic.alive(idx)
        {
            return instance_down();
        }
        // The transport the dialog's instance leg was recorded with (RFC
        // 5658); a UA without a route set gets the transport it came in on.
        let tcp = req.leg_tcp.unwrap_or_else(|| instance_stream(req));
        self.to_instance(req, idx, tcp, None, None)
    }

    /// A new dialog or out-of-dialog request from outside. Nothing the
    /// client wrote decides where it goes (R-SEC-2): the listener's mode, the
    /// account's home (R-ESG-5) or the ring, then the drain policy.
    fn new_work(&self, req: &Request<'_>, view: &DrainView) -> Decision {
        if req.flow.is_some() {
            return self.flow_from_stranger(req);
        }
        // A token that does not open (forged, another site's, another
        // dialog's) routes nothing (R-SEC-2).
        if matches!(req.token, Some(Err(()))) {
            return Decision::refuse(403, "Bad Route Token", "bad_token");
        }
        if req.next_route().is_some() {
            return Decision::refuse(403, "Route Not Allowed", "foreign_route");
        }
        let (msg, peer) = (req.msg, req.inbound.peer());
        // Why a balancer's choice is a draining instance: the account's
        // home (R-ESG-5), or a ring of draining members only (R-AA-4).
        let (idx, routed) = match &req.listener.mode {
            Mode::Guard(idx) => (self.guard_to_backup(req, view, *idx), None),
            Mode::WsPool { .. } => return no_instance(),
            // R-ESG-5: a single-instance account stays on its home esg.
            Mode::Balance(pool) => {
                match req.site.policy.home_instance(req.listener, msg, peer.ip()) {
                    Some(home) => (home, Some(OnPurpose::SingleInstanceAccount)),
                    None => {
                        let key = ring_key(req);
                        // R-HT-1: the pool, or its backup while it is under
                        // its threshold.
                        let pool = self.backups.target(pool.as_str(), view, req.now);
                        match view.pick_in_pool(pool, key) {
                            Some(idx) => (
                                self.reachable(req, view, pool, key, idx),
                                Some(OnPurpose::AllDraining),
                            ),
                            None => {
                                return Decision::refuse(
                                    503,
                                    "No Instance Available",
                                    "no_instance",
                                )
                            }
                        }
                    }
                }
            }
        };
        let admitted = match req.site.policy.admit(
            view,
            req.inbound,
            req.listener,
            idx,
            (msg, req.method, req.class),
        ) {
            Admission::Refuse { reply, rule } => return Decision::Refuse { reply, why: rule },
            Admission::Pass(why) => why,
        };
        let on_purpose = if view.is_draining(idx) {
            admitted.or(routed)
        } else {
            None
        };
        // A request with a To tag that nothing proved creates no dialog the
        // gate must stay in: no Record-Route for it.
        let record_route = (!req.to_tag && creates_dialog(req.method)).then_some(idx);
        self.to_instance(req, idx, instance_stream(req), record_route, on_purpose)
    }

    /// R-HT-1 on a guard listener (`guard_to_backup`): a new dialog the
    /// guard would refuse with 503 (its instance draining, R-SG-1) goes to
    /// the backup of the instance's pool while that pool is under its
    /// threshold; anything else stays with the guarded instance.
    fn guard_to_backup(&self, req: &Request<'_>, view: &DrainView, idx: usize) -> usize {
        let Some(pool) = req.site.config.instances.get(idx).map(|i| i.pool.as_str()) else {
            return idx;
        };
        if !self.backups.guards_to_backup(pool)
            || req
                .site
                .policy
                .verdict(
                    view,
                    req.inbound,
                    req.listener,
                    idx,
                    (req.msg, req.method, req.class),
                )
                .is_ok()
        {
            return idx;
        }
        let target = self.backups.target(pool, view, req.now);
        if target == pool {
            return idx;
        }
        view.pick_in_pool(target, ring_key(req)).unwrap_or(idx)
    }

    /// R-SEC-1: a new request along one of the gate's flow URIs that no
    /// instance the listener fronts sent (see [`super::stranger`]): 403,
    /// and the source logged once with where instances are accepted from.
    fn flow_from_stranger(&self, req: &Request<'_>) -> Decision {
        let peer = req.inbound.peer();
        if self.strangers.first(peer.ip(), req.now) {
            tracing::warn!(
                %peer,
                listener = %req.listener.advertise,
                expected = %super::stranger::hint(&req.site.config, req.listener),
                "a request into a subscriber's flow from an address that is no instance of \
                 this listener: refused with 403; if it is an instance, add this address \
                 to its `sources` (R-SEC-1)"
            );
        }
        Decision::refuse(403, "Flow Route Not From An Instance", "flow_from_stranger")
    }

    /// R-AA-1 with the transport holds: the ring's pick, unless the gate
    /// could not reach it lately over the stream this request would use
    /// (RFC 3261 16.9, `reach.rs`); then one of the ring's other members
    /// that it can reach, chosen by the key's hash (so a request and its
    /// retransmission on another worker agree). When the gate cannot reach
    /// any of them that way the pick stands: the next connect tries again.
    fn reachable(
        &self,
        req: &Request<'_>,
        view: &DrainView,
        pool: &str,
        key: &[u8],
        idx: usize,
    ) -> usize {
        let Some(stream) = instance_stream_kind(req) else {
            return idx;
        };
        if !self.held(idx, stream, req.now) {
            return idx;
        }
        let Some(ring) = view.pool_ring(pool) else {
            return idx;
        };
        let others: Vec<usize> = ring
            .members()
            .iter()
            .copied()
            .filter(|&i| !self.held(i, stream, req.now))
            .collect();
        if others.is_empty() {
            return idx;
        }
        let mut h = std::hash::DefaultHasher::new();
        std::hash::Hasher::write(&mut h, key);
        let at = std::hash::Hasher::finish(&h) % others.len() as u64;
        let moved = others[usize::try_from(at).unwrap_or(0)];
        tracing::debug!(
            from = %req.site.instance_id(idx),
            to = %req.site.instance_id(moved),
            transport = stream.as_str(),
            "instance unreachable over this transport: new dialog moved"
        );
        moved
    }

    /// Forward to a configured instance, over TCP or UDP.
    fn to_instance(
        &self,
        req: &Request<'_>,
        idx: usize,
        tcp: bool,
        record_route: Option<usize>,
        on_purpose: Option<OnPurpose>,
    ) -> Decision {
        match req.site.config.instances.get(idx).and_then(|i| i.sip) {
            Some(addr) => Decision::Forward {
                hop: Hop {
                    instance: Some(idx),
                    addr,
                    tcp,
                    dns: None,
                    flow: None,
                },
                record_route,
                on_purpose,
            },
            None => Decision::refuse(503, "No Instance Available", "no_instance"),
        }
    }

    /// A hop toward the outside (requests sent by an instance), or what to
    /// do instead: refuse a URI that loops back to the gate or cannot be
    /// used, resolve a host name first. The transport: the URI's `transport`
    /// parameter, else the one the dialog's outside leg was recorded with,
    /// else UDP when the listener serves it (a host name: RFC 3263 decides).
    fn outside_hop(&self, uri: &SipUri<'_>, req: &Request<'_>) -> Result<Hop, Decision> {
        let unroutable = || Decision::refuse(404, "Unroutable Request-URI", "unroutable");
        let listener = req
            .site
            .listeners
            .get(req.inbound.listener())
            .ok_or_else(unroutable)?;
        let explicit = uri.names_transport().then(|| uri.wants_tcp());
        if uri.wants_tls() && !listener.tls {
            // RFC 3261 26.2.2: a `sips:` hop is reached over TLS or not at
            // all, and this listener has no TLS to reach it with.
            return Err(Decision::refuse(
                416,
                "TLS Not Served Here",
                "tls_not_served",
            ));
        }
        let Some(addr) = uri.socket_addr() else {
            return self.named_hop(uri, req, explicit.or(req.leg_tcp));
        };
        if req.site.listeners.is_own(addr) {
            return Err(unroutable()); // a loop through ourselves
        }
        let want_tcp = explicit.or(req.leg_tcp).unwrap_or(false);
        Ok(Hop {
            instance: None,
            addr,
            tcp: if want_tcp {
                listener.tcp
            } else {
                !listener.udp
            },
            dns: None,
            flow: None,
        })
    }

    /// A hop to a host name (RFC 3263) from the DNS cache; on a miss, the
    /// lookup to make first (unless this request already waited for one).
    fn named_hop(
        &self,
        uri: &SipUri<'_>,
        req: &Request<'_>,
        tcp: Option<bool>,
    ) -> Result<Hop, Decision> {
        let listener = req.listener;
        let Some(host) = std::str::from_utf8(uri.host).ok().filter(|_| !uri.secure) else {
            return Err(Decision::refuse(
                404,
                "Unroutable Request-URI",
                "unroutable",
            ));
        };
        let query = DnsQuery {
            host: host.trim_end_matches('.').to_ascii_lowercase(),
            port: uri.port,
            tcp,
            udp_ok: listener.udp,
            tcp_ok: listener.tcp,
            v6: listener.advertise.is_ipv6(),
        };
        match self.dns.get(&query, req.key, req.now, req.resumed) {
            Cached::Hit { key, addr, tcp } => Ok(Hop {
                instance: None,
                addr,
                tcp,
                dns: Some(key),
                flow: None,
            }),
            Cached::Failed(DnsFailure::NotFound { .. }) => {
                Err(Decision::refuse(404, "Host Not Found", "dns_not_found"))
            }
            Cached::Failed(DnsFailure::Unavailable) => Err(Decision::refuse(
                503,
                "DNS Lookup Failed",
                "dns_unavailable",
            )),
            // Evicted between the lookup and now (a cache far too small).
            Cached::Miss if req.resumed => {
                Err(Decision::refuse(503, "DNS Answer Not Kept", "dns_evicted"))
            }
            Cached::Miss => Err(Decision::Resolve(query)),
        }
    }
}
