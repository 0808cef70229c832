//! Shared pieces of the controller tests: a site with three mgs and a
//! bgmg, and a stand-in pool that answers the core's datagrams the way
//! rtpengine does (same cookie, `c=` the mg's address), so the core's
//! rules can be driven without sockets and with synthetic time.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use media_ctl::ng::{split_cookie, DictView, NgMessage, Value};
use media_ctl::{Controller, Decision, Out, Settings};
use ringsync::config::SiteConfig;
use ringsync::profile::{Profile, ProfileSet, ProfileState};
use ringsync::state::DrainState;
use ringsync::view::Health;
use testbed::fixture::SiteFile;

/// sg-a on srv-a sends from 127.0.1.1, sg-b on srv-b from 127.0.1.2; an
/// mg on each of the three servers and a bgmg on srv-a.
pub fn site() -> String {
    let at = |s: &str| s.parse().unwrap();
    let mg = |x: &'static str, h: u8| (x, at(&format!("127.0.3.{h}:22222")));
    SiteFile::new("core")
        .section("timers", "mg_drain_window_s = 100")
        .media(
            at("127.0.0.1:0"),
            "call_idle_timeout_s = 600\nmg_timeout_ms = 1000",
        )
        .servers(&["srv-a", "srv-b", "srv-c"])
        .pool(
            "sg",
            "sip",
            &[("a", at("127.0.1.1:5060")), ("b", at("127.0.1.2:5060"))],
        )
        .pool("mg", "ng", &[mg("a", 1), mg("b", 2), mg("c", 3)])
        .pool("bgmg", "ng", &[("a", at("127.0.4.1:22222"))])
        .text()
        .to_owned()
}

/// Instance indexes in [`site`].
pub const MG_A: usize = 2;
pub const MG_B: usize = 3;
pub const MG_C: usize = 4;
pub const BGMG_A: usize = 5;

/// A client that is no sg (no bgmg for it).
pub fn client() -> SocketAddr {
    "127.0.9.9:5000".parse().unwrap()
}
/// sg-a's ng source.
pub fn sg_a() -> SocketAddr {
    "127.0.1.1:40000".parse().unwrap()
}

/// An ng datagram from string pairs.
pub fn ng(cookie: &str, pairs: &[(&str, &str)]) -> Vec<u8> {
    let dict: BTreeMap<Vec<u8>, Value> = pairs
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), Value::str(v)))
        .collect();
    NgMessage {
        cookie: cookie.as_bytes().to_vec(),
        dict,
    }
    .to_bytes()
}

/// `(result, the c= address of the SDP, error-reason)` of an answer.
pub fn read(reply: &[u8]) -> (String, Option<String>, Option<String>) {
    let (_, payload) = split_cookie(reply).unwrap();
    let d = DictView::parse(payload).unwrap();
    let s = |k| d.bytes(k).map(|b| String::from_utf8_lossy(b).into_owned());
    let c = s("sdp").and_then(|sdp| {
        sdp.lines()
            .find_map(|l| l.strip_prefix("c=IN IP4 ").map(str::to_owned))
    });
    (s("result").unwrap_or_default(), c, s("error-reason"))
}

/// One simulated rtpengine.
#[derive(Debug, Default)]
pub struct FakeMg {
    pub calls: HashSet<Vec<u8>>,
    pub alive: bool,
    pub commands: u64,
}

/// The controller, the simulated pool and a synthetic clock.
pub struct Harness {
    pub c: Controller,
    pub drain: Arc<DrainState>,
    pub mgs: HashMap<SocketAddr, FakeMg>,
    pub t: Instant,
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with(&site())
    }

    pub fn with(text: &str) -> Harness {
        let config = SiteConfig::from_str_at(text, Path::new("core.toml")).unwrap();
        let drain = DrainState::new(Arc::new(config.clone()));
        let t = Instant::now();
        let c = Controller::new(drain.clone(), Settings::of(&config), t);
        let mgs = config
            .instances
            .iter()
            .filter_map(|i| i.ng)
            .map(|a| {
                (
                    a,
                    FakeMg {
                        alive: true,
                        ..FakeMg::default()
                    },
                )
            })
            .collect();
        Harness { c, drain, mgs, t }
    }

    /// Moves the clock.
    pub fn advance(&mut self, d: Duration) {
        self.t += d;
    }

    /// Applies one active profile draining `servers` (none: lifted).
    pub fn drain_servers(&self, revision: u64, servers: &[&str]) {
        let profiles = if servers.is_empty() {
            vec![]
        } else {
            vec![Profile {
                id: "p-t".into(),
                name: "t".into(),
                description: String::new(),
                revision: 0,
                servers: servers.iter().map(|s| s.to_string()).collect(),
                state: ProfileState::Active,
            }]
        };
        self.drain
            .set_profiles(Arc::new(ProfileSet { revision, profiles }));
        self.c.observe(self.t);
    }

    /// Marks an instance's health as the pinger would.
    pub fn health(&self, idx: usize, h: Health) {
        self.drain.set_health(idx, h);
    }

    /// Sends a client datagram through the core and the simulated pool;
    /// returns the client's answer (None: dropped or no mg answered).
    pub fn send(&mut self, from: SocketAddr, d: &[u8]) -> Option<Vec<u8>> {
        match self.c.handle(from, d, self.t) {
            Decision::Reply(r) => Some(r.to_vec()),
            Decision::Drop(_) => None,
            Decision::Send(sends) => self.deliver(sends),
        }
    }

    /// Lets the simulated mgs answer datagrams; follows up on what the
    /// core sends next (a search of the pool is followed by the command).
    pub fn deliver(&mut self, mut sends: Vec<(SocketAddr, bytes::Bytes)>) -> Option<Vec<u8>> {
        let mut reply = None;
        while !sends.is_empty() {
            let mut next = Vec::new();
            for (to, d) in sends.drain(..) {
                let Some(answer) = self.answer(to, &d) else {
                    continue;
                };
                for out in self.c.on_mg_datagram(to, &answer, self.t) {
                    match out {
                        Out::Client(_, r) => reply = Some(r.to_vec()),
                        Out::Mg(a, d) => next.push((a, d)),
                    }
                }
            }
            sends = next;
        }
        reply
    }

    /// A call's offer, answer or delete from `from`; returns the answer.
    pub fn call(&mut self, from: SocketAddr, cookie: &str, cmd: &str, call: &str) -> Vec<u8> {
        let sdp = "v=0\r\nc=IN IP4 10.0.0.1\r\nm=audio 4000 RTP/AVP 0\r\n";
        let d = match cmd {
            "offer" => ng(
                cookie,
                &[
                    ("command", "offer"),
                    ("call-id", call),
                    ("from-tag", "ft"),
                    ("sdp", sdp),
                ],
            ),
            "answer" => ng(
                cookie,
                &[
                    ("command", "answer"),
                    ("call-id", call),
                    ("from-tag", "ft"),
                    ("to-tag", "tt"),
                    ("sdp", sdp),
                ],
            ),
            other => ng(
                cookie,
                &[
                    ("command", other),
                    ("call-id", call),
                    ("from-tag", "ft"),
                    ("to-tag", "tt"),
                ],
            ),
        };
        self.send(from, &d).expect("an answer")
    }

    /// A new call (offer and answer); returns the mg address in its SDP.
    pub fn new_call(&mut self, from: SocketAddr, call: &str) -> String {
        let (r, c, e) = read(&self.call(from, &format!("o-{call}"), "offer", call));
        assert_eq!(r, "ok", "{e:?}");
        let (r, c2, _) = read(&self.call(from, &format!("a-{call}"), "answer", call));
        assert_eq!(r, "ok");
        assert_eq!(c, c2, "R-MG-2: answer on the offer's mg");
        c.unwrap()
    }

    /// What a simulated rtpengine answers (None: it is dead).
    fn answer(&mut self, to: SocketAddr, d: &[u8]) -> Option<Vec<u8>> {
        let mg = self.mgs.get_mut(&to)?;
        if !mg.alive {
            return None;
        }
        mg.commands += 1;
        let (cookie, payload) = split_cookie(d).ok()?;
        let req = DictView::parse(payload).ok()?;
        let call = req.bytes("call-id").map(<[u8]>::to_vec);
        let mut out: BTreeMap<Vec<u8>, Value> = BTreeMap::new();
        let mut ok = true;
        match req.bytes("command")? {
            b"ping" => {
                out.insert(b"result".to_vec(), Value::str("pong"));
                ok = false;
            }
            b"offer" | b"answer" => {
                let call = call?;
                if req.bytes("command")? == b"answer" && !mg.calls.contains(&call) {
                    ok = false;
                    out.insert(b"result".to_vec(), Value::str("error"));
                    out.insert(b"error-reason".to_vec(), Value::str("Unknown call-id"));
                } else {
                    mg.calls.insert(call);
                    let sdp = format!("v=0\r\nc=IN IP4 {}\r\nm=audio 30000 RTP/AVP 0\r\n", to.ip());
                    out.insert(b"sdp".to_vec(), Value::str(&sdp));
                }
            }
            b"delete" => {
                mg.calls.remove(&call?);
            }
            b"query" if !mg.calls.contains(&call?) => {
                ok = false;
                out.insert(b"result".to_vec(), Value::str("error"));
                out.insert(b"error-reason".to_vec(), Value::str("Unknown call-id"));
            }
            b"list" => {
                let l = mg.calls.iter().map(|c| Value::Bytes(c.clone())).collect();
                out.insert(b"calls".to_vec(), Value::List(l));
            }
            b"statistics" => {
                let mut cur = BTreeMap::new();
                cur.insert(b"sessionstotal".to_vec(), Value::Int(mg.calls.len() as i64));
                let mut s = BTreeMap::new();
                s.insert(b"currentstatistics".to_vec(), Value::Dict(cur));
                out.insert(b"statistics".to_vec(), Value::Dict(s));
            }
            _ => {}
        }
        if ok {
            out.insert(b"result".to_vec(), Value::str("ok"));
        }
        Some(
            NgMessage {
                cookie: cookie.to_vec(),
                dict: out,
            }
            .to_bytes(),
        )
    }

    /// Runs a health round with the simulated pool (dead mgs stay silent);
    /// the verdict needs `failures` rounds to mark one down.
    pub fn health_round(&mut self, seq: u64) {
        let outs = self.c.ping_round(seq, true, self.t);
        for out in outs {
            if let Out::Mg(to, d) = out {
                if let Some(a) = self.answer(to, &d) {
                    self.c.on_mg_datagram(to, &a, self.t);
                }
            }
        }
        self.c.ping_verdict(seq);
    }
}

/// The mg address of instance `idx` in [`site`], as it appears in `c=`.
pub fn ip_of(idx: usize) -> &'static str {
    match idx {
        MG_A => "127.0.3.1",
        MG_B => "127.0.3.2",
        MG_C => "127.0.3.3",
        BGMG_A => "127.0.4.1",
        _ => "?",
    }
}
