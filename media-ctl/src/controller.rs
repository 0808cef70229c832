//! The controller core: one datagram in, a decision out.
//!
//! No sockets here: the transport hands in a client's datagram with where
//! it came from and the time, and sends what it gets back. Answers from the
//! mgs come in the same way ([`Controller::on_mg_datagram`], in
//! `answers.rs`), and so do the clock's turns ([`Controller::tick`]). The
//! monotonic time every decision depends on (ramps, timeouts, the reply
//! cache, idle calls) is passed in, so tests drive them with synthetic
//! instants. Only wall-clock stamps for reports are read from the system
//! clock here: the start time ([`Controller::new`]) and when a status is
//! made (`status.rs`).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use ringsync::config::SiteConfig;
use ringsync::state::DrainState;
use ringsync::view::DrainView;

use crate::cache::{ReplyCache, Slot};
use crate::calls::CallTable;
use crate::chooser::Chooser;
use crate::command::{Command, Refusal, Request, MAX_DATAGRAM};
use crate::fanout::{Fan, FanKind, Part};
use crate::health::Pinger;
use crate::metrics as m;
use crate::ng::{error_reply, join_cookie, result_reply, split_cookie, Value};
use crate::ng_json;
use crate::pool::{is_up, Pool};
use crate::upstream::{Origin, Upstream};
use crate::weights::Ramps;

/// rtpengine's default `limit` of `list`.
const LIST_DEFAULT_LIMIT: usize = 32;

/// What to do with a client's datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Answer the client with this datagram.
    Reply(Bytes),
    /// Send these datagrams to these mgs (one for a call's command, one per
    /// mg for `list`, `statistics` and the search for an unknown call).
    Send(Vec<(SocketAddr, Bytes)>),
    /// Nothing to send; the reason is counted.
    Drop(&'static str),
}

/// A datagram to send, from the answer and timer paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    /// To a client, from the ng socket.
    Client(SocketAddr, Bytes),
    /// To an mg, from the upstream socket.
    Mg(SocketAddr, Bytes),
}

/// Timers the core needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// The drain ramp (R-MG-1).
    pub window: Duration,
    /// Idle time after which a call is checked with `query`.
    pub idle: Duration,
    /// How long to wait for an mg's answer.
    pub mg_timeout: Duration,
}

impl Settings {
    /// The settings of a site file.
    pub fn of(config: &SiteConfig) -> Settings {
        Settings {
            window: config.timers.mg_drain_window(),
            idle: config.media.call_idle_timeout(),
            mg_timeout: config.media.mg_timeout(),
        }
    }
}

pub(crate) struct Choosing {
    pub(crate) ramps: Ramps,
    pub(crate) chooser: Chooser,
}

/// The mg controller.
pub struct Controller {
    pub(crate) config: Arc<SiteConfig>,
    pub(crate) drain: Arc<DrainState>,
    pub(crate) settings: Settings,
    pub(crate) pool: Pool,
    pub(crate) calls: CallTable,
    pub(crate) upstream: Upstream,
    pub(crate) cache: ReplyCache,
    pub(crate) choosing: Mutex<Choosing>,
    pub(crate) fans: Mutex<HashMap<u64, Fan>>,
    next_fan: AtomicU64,
    pub(crate) pinger: Pinger,
    pub(crate) census: crate::census::Census,
    pub(crate) started: SystemTime,
    pub(crate) counters: Mutex<HashMap<(&'static str, &'static str), u64>>,
    pub(crate) per_instance: Vec<Option<m::PerInstance>>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("pool", &self.pool.members())
            .field("calls", &self.calls.total())
            .finish_non_exhaustive()
    }
}

impl Controller {
    /// A controller for the site `drain` follows, with its settings.
    pub fn new(drain: Arc<DrainState>, settings: Settings, now: Instant) -> Controller {
        let config = drain.config().clone();
        let pool = Pool::new(&config);
        let view = drain.view();
        let n = config.instances.len();
        let targets = pool.members().iter().map(|m| m.idx).collect();
        Controller {
            pinger: Pinger::new(targets, n, config.media.ping_failures),
            census: crate::census::Census::new(&pool),
            choosing: Mutex::new(Choosing {
                ramps: Ramps::new(&view, now),
                chooser: Chooser::default(),
            }),
            calls: CallTable::new(n),
            upstream: Upstream::random(),
            cache: ReplyCache::new(),
            fans: Mutex::new(HashMap::new()),
            next_fan: AtomicU64::new(1),
            started: SystemTime::now(),
            counters: Mutex::new(HashMap::new()),
            per_instance: m::PerInstance::for_pool(&pool, n),
            settings,
            pool,
            drain,
            config,
        }
    }

    /// The site configuration.
    pub fn config(&self) -> &Arc<SiteConfig> {
        &self.config
    }

    /// The drain state it follows.
    pub fn drain(&self) -> &Arc<DrainState> {
        &self.drain
    }

    /// The media gateways.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Calls tracked on instance `idx`.
    pub fn calls(&self, idx: usize) -> u64 {
        self.calls.calls(idx)
    }

    /// The instance a call lives on.
    pub fn call_mg(&self, call_id: &[u8]) -> Option<usize> {
        self.calls.get(call_id).map(|c| c.mg as usize)
    }

    /// Follows the current view: mgs whose zone changed start their ramp
    /// at `now` (the transport calls this on every new view, so a ramp
    /// starts when the profile changes, not at the next call).
    pub fn observe(&self, now: Instant) {
        let view = self.drain.view();
        self.lock_choosing()
            .ramps
            .observe(&view, now, self.settings.window);
    }

    /// Handles a client's datagram, in either form of the ng protocol.
    pub fn handle(&self, from: SocketAddr, datagram: &[u8], now: Instant) -> Decision {
        let Ok((cookie, payload)) = split_cookie(datagram) else {
            return self.dropped("no_cookie");
        };
        if !ng_json::is_json(payload) {
            return self.handle_bencode(from, datagram, false, now);
        }
        let decision = if datagram.len() > MAX_DATAGRAM {
            m::command("invalid", Refusal::Oversized.label());
            self.refuse(
                cookie,
                Refusal::Oversized.label(),
                &Refusal::Oversized.to_string(),
            )
        } else {
            match ng_json::to_bencode(payload) {
                Ok(dict) => self.handle_bencode(from, &join_cookie(cookie, &dict), true, now),
                Err(why) => {
                    m::command("invalid", why.label());
                    self.refuse(cookie, why.label(), &why.to_string())
                }
            }
        };
        match decision {
            Decision::Reply(reply) => Decision::Reply(client_form(reply, true)),
            other => other,
        }
    }

    /// Handles a bencoded datagram; `json` says how the client asked, for
    /// the answers that come later.
    fn handle_bencode(
        &self,
        from: SocketAddr,
        datagram: &[u8],
        json: bool,
        now: Instant,
    ) -> Decision {
        let Ok((cookie, _)) = split_cookie(datagram) else {
            return self.dropped("no_cookie");
        };
        // A retransmission: same cookie from the same client.
        if let Some(slot) = self.cache.lookup(from, cookie) {
            return self.retransmission(slot);
        }
        let req = match Request::parse(datagram) {
            Ok(r) => Request { json, ..r },
            Err((Some(cookie), why)) => {
                m::command("invalid", why.label());
                return self.refuse(cookie, why.label(), &why.to_string());
            }
            Err((None, why)) => return self.dropped(why.label()),
        };
        match req.command {
            Command::Ping => {
                m::command("ping", "pong");
                Decision::Reply(Bytes::from(result_reply(req.cookie, "pong")))
            }
            Command::List | Command::Statistics => self.fan_out(from, &req, now),
            _ => self.call_command(from, &req, now),
        }
    }

    fn retransmission(&self, slot: Slot) -> Decision {
        match slot {
            Slot::Done(reply) => {
                m::command("retransmission", "cached");
                Decision::Reply(reply)
            }
            // Still waiting: send the same datagram (same cookie) again, in
            // case the first was lost; rtpengine runs a cookie once.
            Slot::Pending(Some(id)) => match self.upstream.resend(id) {
                Some((mg, d)) => match self.pool.member(mg) {
                    Some(member) => {
                        m::command("retransmission", "resent");
                        Decision::Send(vec![(member.ng, d)])
                    }
                    None => self.dropped("retransmission"),
                },
                None => self.dropped("retransmission"),
            },
            Slot::Pending(None) => {
                m::command("retransmission", "absorbed");
                Decision::Drop("retransmission")
            }
        }
    }

    fn call_command(&self, from: SocketAddr, req: &Request<'_>, now: Instant) -> Decision {
        let call = req.call_id.unwrap_or_default();
        let view = self.drain.view();
        match self.calls.get(call) {
            Some(c) => {
                let mg = c.mg as usize;
                if !is_up(&view, mg) {
                    // R-MG-5: the call stays where it is; the client hears why.
                    if req.command == Command::Delete {
                        self.calls.answered(call, Command::Delete, true, now);
                    }
                    m::command(req.command.name(), "mg_down");
                    let id = self.pool.member(mg).map_or("?", |m| m.id.as_str());
                    return self.refuse(
                        req.cookie,
                        "mg_down",
                        &format!(
                            "media gateway {id} of this call is down; the call is not moved to another one"
                        ),
                    );
                }
                self.calls.touch(call, now);
                self.forward(from, req, mg, now)
            }
            // A new call: an offer with no dialog yet.
            None if req.command.creates_call() && req.to_tag.is_none() => {
                self.new_call(from, req, &view, now)
            }
            // Unknown here but perhaps not to the pool (media-ctl restarted,
            // or an offer in a reply): ask before placing anything.
            None => self.lookup(from, req, &view, now),
        }
    }

    /// Places a new call and relays its first command.
    pub(crate) fn new_call(
        &self,
        from: SocketAddr,
        req: &Request<'_>,
        view: &DrainView,
        now: Instant,
    ) -> Decision {
        let call = req.call_id.unwrap_or_default();
        let local = self.pool.local(from.ip(), view, &self.calls);
        let choice = {
            let mut st = self.lock_choosing();
            st.ramps.observe(view, now, self.settings.window);
            let mgs = self
                .pool
                .mgs(view, &st.ramps, &self.calls, now, self.settings.window);
            st.chooser.choose(local.as_ref(), &mgs)
        };
        let choice = match choice {
            Ok(c) => c,
            Err(e) => {
                m::command(req.command.name(), "no_mg");
                return self.refuse(req.cookie, e.label(), &e.to_string());
            }
        };
        if let Some(skip) = choice.skipped {
            metrics::counter!(m::BGMG_SKIPPED, "reason" => skip.label()).increment(1);
            self.bump("bgmg_skipped", skip.label());
        }
        let mg = match self.calls.claim(call, choice.mg, now) {
            Ok(()) => {
                self.new_call_counted(choice.mg, choice.reason.label());
                choice.mg
            }
            // Another datagram placed the call meanwhile: follow it (R-MG-2).
            Err(existing) => existing.mg as usize,
        };
        self.forward(from, req, mg, now)
    }

    /// Relays a client's command to instance `mg`.
    pub(crate) fn forward(
        &self,
        from: SocketAddr,
        req: &Request<'_>,
        mg: usize,
        now: Instant,
    ) -> Decision {
        let Some(member) = self.pool.member(mg) else {
            return self.refuse(req.cookie, "internal", "media gateway not configured");
        };
        let origin = Origin::Client {
            addr: from,
            cookie: Box::from(req.cookie),
            json: req.json,
        };
        let (id, datagram) =
            self.upstream
                .send(origin, req.command, req.call_id, mg, req.payload, now);
        self.cache.pending(from, req.cookie, Some(id), now);
        m::command(req.command.name(), "relayed");
        Decision::Send(vec![(member.ng, datagram)])
    }

    fn fan_out(&self, from: SocketAddr, req: &Request<'_>, now: Instant) -> Decision {
        let limit = req
            .limit
            .and_then(|l| usize::try_from(l).ok())
            .unwrap_or(LIST_DEFAULT_LIMIT);
        let kind = if req.command == Command::List {
            FanKind::List { limit }
        } else {
            FanKind::Statistics
        };
        m::command(req.command.name(), "fanout");
        self.start_fan(from, req, kind, req.command, req.payload, now)
    }

    fn lookup(
        &self,
        from: SocketAddr,
        req: &Request<'_>,
        view: &DrainView,
        now: Instant,
    ) -> Decision {
        let call = req.call_id.unwrap_or_default();
        if !self.pool.members().iter().any(|m| is_up(view, m.idx)) {
            m::command(req.command.name(), "no_mg");
            return self.refuse(req.cookie, "no_mg_up", "no media gateway is up");
        }
        m::command(req.command.name(), "lookup");
        let kind = FanKind::Lookup {
            command: req.command,
            call: Box::from(call),
            payload: Bytes::copy_from_slice(req.payload),
        };
        let query = query_payload(call);
        self.start_fan(from, req, kind, Command::Query, &query, now)
    }

    /// Sends `payload` as `command` to every instance that is up, for the
    /// client's request `req`.
    fn start_fan(
        &self,
        from: SocketAddr,
        req: &Request<'_>,
        kind: FanKind,
        command: Command,
        payload: &[u8],
        now: Instant,
    ) -> Decision {
        let view = self.drain.view();
        let fan_id = self.next_fan.fetch_add(1, Ordering::Relaxed);
        let targets: Vec<_> = self
            .pool
            .members()
            .iter()
            .filter(|m| is_up(&view, m.idx))
            .collect();
        let call = match &kind {
            FanKind::Lookup { call, .. } => Some(call.clone()),
            _ => None,
        };
        let cookie = req.cookie;
        let mut fan = Fan {
            client: from,
            cookie: Box::from(cookie),
            json: req.json,
            kind,
            parts: targets
                .iter()
                .map(|m| Part {
                    mg: m.idx,
                    id: m.id.clone(),
                    answer: None,
                })
                .collect(),
        };
        if fan.parts.is_empty() {
            fan.parts = self
                .pool
                .members()
                .iter()
                .map(|m| Part {
                    mg: m.idx,
                    id: m.id.clone(),
                    answer: Some(Err("down".into())),
                })
                .collect();
            return Decision::Reply(Bytes::from(fan.reply()));
        }
        let sends = targets
            .iter()
            .enumerate()
            .map(|(part, m)| {
                let origin = Origin::Part { fan: fan_id, part };
                let (_, d) =
                    self.upstream
                        .send(origin, command, call.as_deref(), m.idx, payload, now);
                (m.ng, d)
            })
            .collect();
        self.lock_fans().insert(fan_id, fan);
        self.cache.pending(from, cookie, None, now);
        Decision::Send(sends)
    }

    /// Answers the client with an ng error and counts it.
    pub(crate) fn refuse(&self, cookie: &[u8], label: &'static str, reason: &str) -> Decision {
        m::error(label);
        self.bump("errors", label);
        Decision::Reply(Bytes::from(error_reply(cookie, reason)))
    }

    fn dropped(&self, reason: &'static str) -> Decision {
        m::dropped(reason);
        self.bump("dropped", reason);
        Decision::Drop(reason)
    }

    /// Counts an event for the status page (`new_calls.ramp`, `errors.mg_down`...).
    pub(crate) fn bump(&self, group: &'static str, label: &'static str) {
        let mut c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        *c.entry((group, label)).or_default() += 1;
    }

    /// A new call placed on `mg` for `reason` (status and metrics).
    pub(crate) fn new_call_counted(&self, mg: usize, reason: &'static str) {
        self.bump("new_calls", reason);
        if let Some(Some(p)) = self.per_instance.get(mg) {
            p.new_call(reason);
        }
    }

    pub(crate) fn lock_choosing(&self) -> MutexGuard<'_, Choosing> {
        self.choosing.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn lock_fans(&self) -> MutexGuard<'_, HashMap<u64, Fan>> {
        self.fans.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `query` of one call.
/// A reply to a client in the form it asked in (the core works in bencode).
pub(crate) fn client_form(reply: Bytes, json: bool) -> Bytes {
    if json {
        Bytes::from(ng_json::reply_to_json(&reply))
    } else {
        reply
    }
}

pub(crate) fn query_payload(call: &[u8]) -> Vec<u8> {
    let mut d = BTreeMap::new();
    d.insert(b"command".to_vec(), Value::str("query"));
    d.insert(b"call-id".to_vec(), Value::Bytes(call.to_vec()));
    let mut out = Vec::with_capacity(40 + call.len());
    Value::Dict(d).encode_into(&mut out);
    out
}
