//! The other half of the core: answers from the mgs, and what the clock
//! brings (timeouts, idle calls, health rounds, the census).

use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;

use crate::command::{Command, Request};
use crate::controller::{client_form, query_payload, Controller, Decision, Out};
use crate::fanout::{result_of, Fan, FanKind};
use crate::metrics as m;
use crate::ng::{error_reply, join_cookie, split_cookie, NgMessage, Value};
use crate::pool::is_up;
use crate::upstream::{Origin, Pending, Tag};

/// Most idle calls checked per sweep (the rest wait for the next one).
const IDLE_CHECKS_PER_SWEEP: usize = 2000;

impl Controller {
    /// Handles a datagram that arrived on the upstream socket. Only answers
    /// from a configured mg's own address, under a cookie media-ctl made,
    /// are used; anything else is dropped and counted.
    pub fn on_mg_datagram(&self, from: SocketAddr, datagram: &[u8], now: Instant) -> Vec<Out> {
        let Some(member) = self.pool.by_addr(from) else {
            m::dropped("not_from_an_mg");
            return Vec::new();
        };
        let idx = member.idx;
        let Ok((cookie, payload)) = split_cookie(datagram) else {
            m::dropped("mg_no_cookie");
            return Vec::new();
        };
        match self.upstream.tag(cookie) {
            Some(Tag::Ping { idx: pinged, seq }) if pinged == idx => {
                if result_of(payload) == Some(&b"pong"[..]) {
                    self.pinger.pong(idx, seq);
                }
                Vec::new()
            }
            Some(Tag::Command(id)) => match self.upstream.take(id) {
                Some(p) if p.mg == idx => self.answered(p, payload, now),
                Some(p) => {
                    // Not from the mg it was sent to: keep waiting for that one.
                    m::dropped("answer_from_another_mg");
                    self.upstream.restore(id, p);
                    Vec::new()
                }
                None => {
                    m::dropped("late_answer");
                    Vec::new()
                }
            },
            _ => {
                m::dropped("unknown_cookie");
                Vec::new()
            }
        }
    }

    fn answered(&self, p: Pending, payload: &[u8], now: Instant) -> Vec<Out> {
        let result = result_of(payload);
        let ok = result == Some(&b"ok"[..]);
        if let Some(Some(m)) = self.per_instance.get(p.mg) {
            m.answer(result);
        }
        match p.origin {
            Origin::Client { addr, cookie, json } => {
                if let Some(call) = &p.call {
                    self.calls.answered(call, p.command, ok, now);
                }
                let reply = Bytes::from(join_cookie(&cookie, payload));
                self.cache.done(addr, &cookie, reply.clone(), now);
                vec![Out::Client(addr, client_form(reply, json))]
            }
            Origin::Part { fan, part } => {
                self.part_done(fan, part, Ok(Bytes::copy_from_slice(payload)), now)
            }
            Origin::IdleCheck => {
                if let Some(call) = &p.call {
                    if result == Some(&b"error"[..]) && self.calls.forget(call) {
                        metrics::counter!(m::IDLE_FORGOTTEN, "reason" => "unknown_to_mg")
                            .increment(1);
                        self.bump("idle_forgotten", "unknown_to_mg");
                    }
                }
                Vec::new()
            }
            Origin::Census => {
                if let Some(s) = crate::census::sessions_of(payload) {
                    self.census.observe(p.mg, s, self.calls.calls(p.mg));
                }
                Vec::new()
            }
        }
    }

    fn part_done(
        &self,
        fan: u64,
        part: usize,
        answer: Result<Bytes, String>,
        now: Instant,
    ) -> Vec<Out> {
        let done = {
            let mut fans = self.lock_fans();
            let Some(f) = fans.get_mut(&fan) else {
                return Vec::new();
            };
            if let Some(p) = f.parts.get_mut(part) {
                p.answer.get_or_insert(answer);
            }
            if !f.complete() {
                return Vec::new();
            }
            fans.remove(&fan)
        };
        done.map_or_else(Vec::new, |f| self.finish_fan(f, now))
    }

    fn finish_fan(&self, fan: Fan, now: Instant) -> Vec<Out> {
        let FanKind::Lookup {
            command,
            call,
            payload,
        } = &fan.kind
        else {
            let reply = Bytes::from(fan.reply());
            self.cache.done(fan.client, &fan.cookie, reply.clone(), now);
            return vec![Out::Client(fan.client, client_form(reply, fan.json))];
        };
        let req = Request {
            cookie: &fan.cookie,
            command: *command,
            call_id: Some(call),
            to_tag: None,
            limit: None,
            payload,
            json: fan.json,
        };
        let decision = match fan.found() {
            // R-MG-2: the call lives there; so does every command of it.
            Ok(Some(mg)) => {
                let mg = self.calls.adopt(call, mg, now);
                self.new_call_counted(mg, "found");
                self.forward(fan.client, &req, mg, now)
            }
            Ok(None) if command.creates_call() => {
                let view = self.drain.view();
                self.new_call(fan.client, &req, &view, now)
            }
            // What rtpengine answers to a delete of a call it does not know.
            Ok(None) if *command == Command::Delete => {
                let mut d = std::collections::BTreeMap::new();
                d.insert(b"result".to_vec(), Value::str("ok"));
                d.insert(
                    b"warning".to_vec(),
                    Value::str("Call-ID not found or tags didn't match"),
                );
                let msg = NgMessage {
                    cookie: fan.cookie.to_vec(),
                    dict: d,
                };
                Decision::Reply(Bytes::from(msg.to_bytes()))
            }
            Ok(None) => self.refuse(&fan.cookie, "unknown_call", "Unknown call-id"),
            // R-MG-5: it may live on an mg that did not answer; never guess.
            Err(silent) => self.refuse(
                &fan.cookie,
                "lookup_incomplete",
                &format!(
                    "Unknown call-id here; {} did not answer, so the call may live there (not moved)",
                    silent.join(", ")
                ),
            ),
        };
        match decision {
            Decision::Reply(reply) => {
                self.cache.done(fan.client, &fan.cookie, reply.clone(), now);
                vec![Out::Client(fan.client, client_form(reply, fan.json))]
            }
            Decision::Send(sends) => sends.into_iter().map(|(a, d)| Out::Mg(a, d)).collect(),
            Decision::Drop(_) => Vec::new(),
        }
    }

    /// Commands the mgs did not answer in time: the client gets an ng
    /// error naming the mg. Also expires the retransmission cache.
    pub fn tick(&self, now: Instant) -> Vec<Out> {
        let timeout = self.settings.mg_timeout;
        let mut out = Vec::new();
        for p in self.upstream.expired(now, timeout) {
            let id = self.pool.member(p.mg).map_or("?", |m| m.id.as_str());
            if let Some(Some(m)) = self.per_instance.get(p.mg) {
                m.timeouts.increment(1);
            }
            let why = format!(
                "media gateway {id} did not answer within {} ms",
                timeout.as_millis()
            );
            match p.origin {
                Origin::Client { addr, cookie, json } => {
                    if let (Some(call), true) = (&p.call, p.command.creates_call()) {
                        self.calls.abandon_setup(call, p.mg);
                    }
                    m::error("mg_timeout");
                    self.bump("errors", "mg_timeout");
                    let reply = Bytes::from(error_reply(&cookie, &why));
                    self.cache.done(addr, &cookie, reply.clone(), now);
                    out.push(Out::Client(addr, client_form(reply, json)));
                }
                Origin::Part { fan, part } => out.extend(self.part_done(fan, part, Err(why), now)),
                Origin::IdleCheck | Origin::Census => {}
            }
        }
        self.cache.expire(now);
        out
    }

    /// Calls idle for the idle timeout: `query` to their mg (forgotten if
    /// it no longer knows them), or forgotten at once if their mg is down.
    pub fn sweep(&self, now: Instant) -> Vec<Out> {
        let view = self.drain.view();
        let mut out = Vec::new();
        for (call, mg) in self
            .calls
            .sweep(now, self.settings.idle, IDLE_CHECKS_PER_SWEEP)
        {
            let Some(member) = self.pool.member(mg) else {
                continue;
            };
            if !is_up(&view, mg) {
                if self.calls.forget(&call) {
                    metrics::counter!(m::IDLE_FORGOTTEN, "reason" => "mg_down").increment(1);
                    self.bump("idle_forgotten", "mg_down");
                }
                continue;
            }
            let (_, d) = self.upstream.send(
                Origin::IdleCheck,
                Command::Query,
                Some(&call),
                mg,
                &query_payload(&call),
                now,
            );
            out.push(Out::Mg(member.ng, d));
        }
        out
    }

    /// Health round `seq`: a `ping` to every mg and bgmg (if `ping`), and
    /// a `statistics` to each whose count media-ctl cannot vouch for yet.
    pub fn ping_round(&self, seq: u64, ping: bool, now: Instant) -> Vec<Out> {
        let mut out = Vec::new();
        for m in self.pool.members() {
            if ping {
                out.push(Out::Mg(m.ng, self.upstream.ping(m.idx, seq)));
            }
            if !self.census.vouched(m.idx) {
                let (_, d) = self.upstream.send(
                    Origin::Census,
                    Command::Statistics,
                    None,
                    m.idx,
                    b"d7:command10:statisticse",
                    now,
                );
                out.push(Out::Mg(m.ng, d));
            }
        }
        out
    }

    /// After round `seq`'s timeout: records the health of every mg and
    /// bgmg in the drain state (a down mg takes no new calls, R-MG-5).
    pub fn ping_verdict(&self, seq: u64) {
        let view = self.drain.view();
        for (idx, h) in self.pinger.evaluate(seq) {
            let was = view.instances().get(idx).map(|v| v.health);
            if was != Some(h) {
                let id = self.pool.member(idx).map_or("?", |m| m.id.as_str());
                match h {
                    ringsync::view::Health::Down => {
                        tracing::warn!(
                            instance = id,
                            "no pong: down (no new calls; its calls get ng errors)"
                        )
                    }
                    _ => tracing::info!(instance = id, health = h.as_str(), "answers ping"),
                }
            }
            self.drain.set_health(idx, h);
        }
    }

    /// Commands waiting for an mg.
    pub fn pending(&self) -> usize {
        self.upstream.len()
    }
}
