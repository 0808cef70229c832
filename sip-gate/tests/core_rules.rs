//! Every routing and drain rule, proved on the forwarding core itself.
//!
//! No sockets and no SIPp: each test builds a small site from TOML, drains
//! servers by setting profiles on a [`DrainState`], sets health, then feeds
//! hand-written SIP messages to [`Core::handle`] and checks the [`Action`] it
//! returns: where the message goes and the exact bytes (parsed back with
//! [`SipMessage::parse`]: Via, Route, Record-Route, Max-Forwards, body).
//!
//! Test names carry the rule id they prove (see
//! ../shared/design/drain-rules.md); `fwd_*` tests prove the proxy behaviour
//! of issue 2 (RFC 3261 16.6, RFC 3581).
//!
//! The site (indexes as in the file):
//!
//! | # | instance | server | sip            |
//! |---|----------|--------|----------------|
//! | 0 | sg-a     | srv-a  | 127.0.1.1:5060 |
//! | 1 | sg-b     | srv-b  | 127.0.1.2:5060 |
//! | 2 | sg-c     | srv-c  | 127.0.1.3:5060 |
//! | 3 | esg-a    | srv-a  | 127.0.2.1:5060 |
//! | 4 | esg-b    | srv-b  | 127.0.2.2:5060 |
//!
//! | # | listener    | bind           | mode             | leg        |
//! |---|-------------|----------------|------------------|------------|
//! | 0 | sg-bal      | 127.0.0.1:5060 | balance sg       | subscriber |
//! | 1 | sg-a-guard  | 127.0.0.1:5061 | guard sg-a       | subscriber |
//! | 2 | esg-bal     | 127.0.0.1:5070 | balance esg      | provider   |
//! | 3 | esg-a-guard | 127.0.0.1:5071 | guard esg-a      | provider   |
//! | 4 | esg-a-in    | 127.0.0.1:5072 | guard esg-a      | inside     |
//!
//! esg accounts: `carrier-x` (multi-instance, 192.0.2.0/24, exception for the
//! user `noc`), `carrier-y` (single-instance, 198.51.100.0/24, home esg-a).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use ringsync::config::SiteConfig;
use ringsync::state::DrainState;
use ringsync::view::Health;
use ringsync::{Profile, ProfileSet, ProfileState};
use sip_gate::{Action, Core, HeaderName, Inbound, Out, SipMessage, TokenKey};

// === the site ===

const SECRET: &str = "core-rules-test-secret-0123456789";

const SG_A: usize = 0;
const SG_B: usize = 1;
const SG_C: usize = 2;
const ESG_A: usize = 3;
const ESG_B: usize = 4;

const L_SG_BAL: usize = 0;
const L_SG_GUARD: usize = 1;
const L_ESG_BAL: usize = 2;
const L_ESG_GUARD: usize = 3;
const L_ESG_IN: usize = 4;

/// Advertised address of each listener (what goes into Via and Record-Route).
const LISTENER_HOST: [&str; 5] = [
    "127.0.0.1:5060",
    "127.0.0.1:5061",
    "127.0.0.1:5070",
    "127.0.0.1:5071",
    "127.0.0.1:5072",
];

const INSTANCE_ADDR: [&str; 5] = [
    "127.0.1.1:5060",
    "127.0.1.2:5060",
    "127.0.1.3:5060",
    "127.0.2.1:5060",
    "127.0.2.2:5060",
];

/// A subscriber UA (behind a NAT: it writes 5062 in Via, sends from 40000).
const UA: &str = "203.0.113.10:40000";
/// A provider of the multi-instance account carrier-x.
const CARRIER_X: &str = "192.0.2.10:5060";
/// A provider of the single-instance account carrier-y.
const CARRIER_Y: &str = "198.51.100.5:5060";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn inst(i: usize) -> SocketAddr {
    addr(INSTANCE_ADDR[i])
}

/// Knobs of the per-test site.
#[derive(Clone)]
struct SiteOpts {
    /// TOML array of sg-a's exceptions.
    sg_a_exceptions: &'static str,
    /// TOML array of esg-a's exceptions.
    esg_a_exceptions: &'static str,
    options_503: bool,
    retry_after: u32,
    jitter: u32,
}

impl Default for SiteOpts {
    fn default() -> Self {
        SiteOpts {
            sg_a_exceptions: "[]",
            esg_a_exceptions: r#"[{ source = "192.0.2.77/32" }]"#,
            options_503: false,
            retry_after: 30,
            jitter: 10,
        }
    }
}

fn site_toml(o: &SiteOpts) -> String {
    format!(
        r#"
[site]
name = "core-rules"
secret = "{SECRET}"

[timers]
retry_after_s = {ra}
retry_after_jitter_s = {jit}

[drain]
options_503 = {opt}

[health]
interval_ms = 0

[[server]]
name = "srv-a"
[[server]]
name = "srv-b"
[[server]]
name = "srv-c"

[[instance]]
id = "sg-a"
service = "sg"
server = "srv-a"
sip = "127.0.1.1:5060"
exceptions = {sgx}

[[instance]]
id = "sg-b"
service = "sg"
server = "srv-b"
sip = "127.0.1.2:5060"

[[instance]]
id = "sg-c"
service = "sg"
server = "srv-c"
sip = "127.0.1.3:5060"

[[instance]]
id = "esg-a"
service = "esg"
server = "srv-a"
sip = "127.0.2.1:5060"
exceptions = {esgx}

[[instance]]
id = "esg-b"
service = "esg"
server = "srv-b"
sip = "127.0.2.2:5060"

[[account]]
name = "carrier-x"
multi_instance = true
match = {{ source = ["192.0.2.0/24"], domain = ["carrier-x.example"] }}
exceptions = [{{ user = "noc" }}]

[[account]]
name = "carrier-y"
multi_instance = false
home = "esg-a"
match = {{ source = ["198.51.100.0/24"] }}

[[listener]]
name = "sg-bal"
bind = "127.0.0.1:5060"
transports = ["udp", "tcp"]
mode = "balance"
pool = "sg"
leg = "subscriber"

[[listener]]
name = "sg-a-guard"
bind = "127.0.0.1:5061"
transports = ["udp", "tcp"]
mode = "guard"
instance = "sg-a"
leg = "subscriber"

[[listener]]
name = "esg-bal"
bind = "127.0.0.1:5070"
transports = ["udp", "tcp"]
mode = "balance"
pool = "esg"
leg = "provider"

[[listener]]
name = "esg-a-guard"
bind = "127.0.0.1:5071"
transports = ["udp", "tcp"]
mode = "guard"
instance = "esg-a"
leg = "provider"

[[listener]]
name = "esg-a-in"
bind = "127.0.0.1:5072"
transports = ["udp", "tcp"]
mode = "guard"
instance = "esg-a"
leg = "inside"
"#,
        ra = o.retry_after,
        jit = o.jitter,
        opt = o.options_503,
        sgx = o.sg_a_exceptions,
        esgx = o.esg_a_exceptions,
    )
}

/// A gate on a site: the core and the drain state it reads.
struct Gate {
    core: Core,
    drain: Arc<DrainState>,
    config: Arc<SiteConfig>,
}

impl Gate {
    fn new(o: &SiteOpts) -> Gate {
        let config = Arc::new(
            SiteConfig::from_str_at(&site_toml(o), Path::new("/nonexistent/core-rules.toml"))
                .expect("site config"),
        );
        let drain = DrainState::new(config.clone());
        let core = Core::new(config.clone(), drain.clone()).expect("core");
        Gate {
            core,
            drain,
            config,
        }
    }

    fn std() -> Gate {
        Gate::new(&SiteOpts::default())
    }

    /// The same site and drain state, a fresh core: a gate that restarted
    /// (no transaction table).
    fn restarted(&self) -> Core {
        Core::new(self.config.clone(), self.drain.clone()).expect("core")
    }

    /// Drains exactly these servers (one active profile; empty lifts all).
    fn drain_servers(&self, servers: &[&str]) {
        let rev = self.drain.view().revision() + 1;
        self.drain.set_profiles(Arc::new(ProfileSet {
            revision: rev,
            profiles: vec![
                Profile {
                    id: "p-1".into(),
                    name: "maintenance".into(),
                    description: String::new(),
                    servers: servers.iter().map(|s| s.to_string()).collect(),
                    state: if servers.is_empty() {
                        ProfileState::Inactive
                    } else {
                        ProfileState::Active
                    },
                },
                // Stored but not applied: must change nothing.
                Profile {
                    id: "p-2".into(),
                    name: "next-week".into(),
                    description: String::new(),
                    servers: vec!["srv-a".into(), "srv-b".into(), "srv-c".into()],
                    state: ProfileState::Inactive,
                },
            ],
        }));
    }

    fn health(&self, idx: usize, h: Health) {
        self.drain.set_health(idx, h);
    }

    fn udp(&self, listener: usize, peer: &str, msg: &Bytes) -> Action {
        handle(&self.core, listener, peer, msg)
    }
}

fn handle(core: &Core, listener: usize, peer: &str, msg: &Bytes) -> Action {
    core.handle(
        Inbound::Udp {
            listener,
            peer: addr(peer),
        },
        msg.clone(),
        Instant::now(),
    )
}

// === messages ===

/// A request under construction: start line, header lines in order, body.
#[derive(Clone)]
struct Req {
    start: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Req {
    /// A request with the usual headers. `via` is the client's whole Via value.
    fn new(method: &str, uri: &str, call_id: &str, via: &str) -> Req {
        Req {
            start: format!("{method} {uri} SIP/2.0"),
            headers: vec![
                ("Via".into(), via.into()),
                ("Max-Forwards".into(), "70".into()),
                (
                    "From".into(),
                    "\"Alice\" <sip:alice@example.com>;tag=a1".into(),
                ),
                ("To".into(), "<sip:bob@example.com>".into()),
                ("Call-ID".into(), call_id.into()),
                ("CSeq".into(), format!("1 {method}")),
                ("Contact".into(), "<sip:alice@203.0.113.10:5062>".into()),
            ],
            body: Vec::new(),
        }
    }

    /// A request from the subscriber UA (Via with rport, sent-by 5062).
    fn ua(method: &str, call_id: &str, branch: &str) -> Req {
        Req::new(
            method,
            "sip:bob@example.com",
            call_id,
            &format!("SIP/2.0/UDP 203.0.113.10:5062;branch={branch};rport"),
        )
    }

    /// Sets (replacing every header of that name) or adds a header.
    fn set(mut self, name: &str, value: &str) -> Req {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Adds a header line at the end, keeping others of that name.
    fn add(mut self, name: &str, value: &str) -> Req {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Adds a header line right after the Via lines (where Route usually is).
    fn add_first(mut self, name: &str, value: &str) -> Req {
        self.headers.insert(1, (name.into(), value.into()));
        self
    }

    fn without(mut self, name: &str) -> Req {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    fn tagged(self, tag: &str) -> Req {
        self.set("To", &format!("<sip:bob@example.com>;tag={tag}"))
    }

    fn from(self, uri: &str) -> Req {
        self.set("From", &format!("<{uri}>;tag=f1"))
    }

    fn to(self, uri: &str) -> Req {
        self.set("To", &format!("<{uri}>"))
    }

    fn body(mut self, ctype: &str, body: &[u8]) -> Req {
        self.body = body.to_vec();
        self.set("Content-Type", ctype)
    }

    fn bytes(&self) -> Bytes {
        let mut s = format!("{}\r\n", self.start);
        for (n, v) in &self.headers {
            s.push_str(&format!("{n}: {v}\r\n"));
        }
        s.push_str(&format!("Content-Length: {}\r\n\r\n", self.body.len()));
        let mut v = s.into_bytes();
        v.extend_from_slice(&self.body);
        Bytes::from(v)
    }
}

/// A response to a request as an instance received it (the gate's forward):
/// every Via copied, To tagged, `Content-Length: 0`.
fn response_to(req: &SipMessage, code: u16, reason: &str, to_tag: &str) -> Bytes {
    let mut s = format!("SIP/2.0 {code} {reason}\r\n");
    for f in req.fields(HeaderName::Via) {
        s.push_str(&format!("Via: {}\r\n", text(req.value(f))));
    }
    let f = req.fields(HeaderName::From).next().unwrap();
    s.push_str(&format!("From: {}\r\n", text(req.value(f))));
    let t = req.fields(HeaderName::To).next().unwrap();
    let mut to = text(req.value(t));
    if req.to_tag().is_none() {
        to.push_str(&format!(";tag={to_tag}"));
    }
    s.push_str(&format!("To: {to}\r\n"));
    s.push_str(&format!("Call-ID: {}\r\n", text(req.call_id().unwrap())));
    let c = req.fields(HeaderName::CSeq).next().unwrap();
    s.push_str(&format!("CSeq: {}\r\n", text(req.value(c))));
    s.push_str("Content-Length: 0\r\n\r\n");
    Bytes::from(s)
}

/// A branch never used before in this test binary (so no request is taken
/// for a retransmission of another).
fn fresh_branch() -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("z9hG4bKfresh-{}", N.fetch_add(1, Ordering::Relaxed))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

// === looking at what came out ===

/// The message the action sends and where; panics on `Action::None`.
fn sent(a: Action) -> (Out, SipMessage) {
    match a {
        Action::Send(out, bytes) => {
            let msg = SipMessage::parse(bytes.clone())
                .unwrap_or_else(|e| panic!("output does not parse ({e}): {}", text(&bytes)));
            (out, msg)
        }
        Action::None => panic!("expected a message, got Action::None"),
    }
}

fn udp_out(listener: usize, to: SocketAddr) -> Out {
    Out::Udp { listener, to }
}

/// A request forwarded over UDP on `listener` to `to`.
fn forwarded(a: Action, listener: usize, to: SocketAddr) -> SipMessage {
    let (out, msg) = sent(a);
    assert_eq!(out, udp_out(listener, to), "{}", text(msg.raw()));
    assert!(msg.is_request(), "{}", text(msg.raw()));
    msg
}

/// The instance a forwarded request went to (by its address).
fn dest(a: Action, listener: usize) -> usize {
    let (out, msg) = sent(a);
    let Out::Udp { listener: l, to } = out else {
        panic!("expected UDP out: {out:?}");
    };
    assert_eq!(l, listener);
    assert!(msg.is_request(), "{}", text(msg.raw()));
    INSTANCE_ADDR
        .iter()
        .position(|a| addr(a) == to)
        .unwrap_or_else(|| panic!("sent to {to}, not an instance"))
}

/// A response the gate generated, sent back to `peer` on `listener`.
fn replied(a: Action, listener: usize, peer: &str, code: u16) -> SipMessage {
    let (out, msg) = sent(a);
    assert_eq!(out, udp_out(listener, addr(peer)), "{}", text(msg.raw()));
    assert_eq!(msg.code(), Some(code), "{}", text(msg.raw()));
    msg
}

/// Like [`replied`] for replies to broken requests: they copy the broken
/// header as it was, so they are only scanned, not validated.
fn replied_scan(a: Action, listener: usize, peer: &str, code: u16) -> SipMessage {
    let Action::Send(out, bytes) = a else {
        panic!("expected a reply, got Action::None");
    };
    assert_eq!(out, udp_out(listener, addr(peer)));
    let m = SipMessage::scan(bytes).expect("reply scans");
    assert_eq!(m.code(), Some(code), "{}", text(m.raw()));
    m
}

fn via_values(m: &SipMessage) -> Vec<String> {
    m.vias().map(|v| text(&m.raw()[v.range])).collect()
}

fn route_uris(m: &SipMessage) -> Vec<String> {
    m.routes()
        .into_iter()
        .map(|r| text(&m.raw()[r.uri]))
        .collect()
}

fn rr_uris(m: &SipMessage) -> Vec<String> {
    m.record_routes()
        .into_iter()
        .map(|r| text(&m.raw()[r.uri]))
        .collect()
}

fn header(m: &SipMessage, name: HeaderName) -> Option<String> {
    m.fields(name).next().map(|f| text(m.value(f)))
}

fn other_header(m: &SipMessage, name: &str) -> Option<String> {
    m.headers()
        .iter()
        .find(|f| {
            m.slice(f.name_range.clone())
                .eq_ignore_ascii_case(name.as_bytes())
        })
        .map(|f| text(m.value(f)))
}

/// The Record-Route URI the gate writes for `instance` on `listener`.
fn gate_rr(instance: &str, listener: usize) -> String {
    format!(
        "sip:{}@{};lr",
        TokenKey::new(SECRET).seal(instance),
        LISTENER_HOST[listener]
    )
}

/// The Route the UA sends back in-dialog for `instance`.
fn gate_route(instance: &str, listener: usize) -> String {
    format!("<{}>", gate_rr(instance, listener))
}

/// Checks the gate's new top Via: our address and a `z9hG4bK` branch.
fn assert_gate_via(m: &SipMessage, listener: usize) {
    let top = m.top_via().expect("top via");
    assert_eq!(text(top.transport), "UDP");
    assert_eq!(
        format!("{}:{}", text(top.host), top.port.unwrap()),
        LISTENER_HOST[listener]
    );
    let branch = text(top.branch.expect("branch"));
    assert!(branch.starts_with("z9hG4bK"), "{branch}");
    assert!(branch.len() > "z9hG4bK".len() + 8, "{branch}");
}

/// Header lines other than the ones a proxy edits are copied verbatim and
/// in order; the request line and the body are the same bytes.
fn assert_untouched(input: &Bytes, output: &SipMessage) {
    let input = SipMessage::parse(input.clone()).expect("input parses");
    let edited = [
        HeaderName::Via,
        HeaderName::MaxForwards,
        HeaderName::Route,
        HeaderName::RecordRoute,
    ];
    let lines = |m: &SipMessage| -> Vec<Vec<u8>> {
        m.headers()
            .iter()
            .filter(|f| !edited.contains(&f.name))
            .map(|f| m.slice(f.line.clone()).to_vec())
            .collect()
    };
    assert_eq!(lines(&input), lines(output));
    let first_line = |m: &SipMessage| {
        let raw = m.raw();
        raw[..raw.iter().position(|&b| b == b'\r').unwrap()].to_vec()
    };
    assert_eq!(first_line(&input), first_line(output));
    assert_eq!(input.body(), output.body());
}

/// A Call-ID the sg ring gives to `want` in the current view of `g`.
fn call_id_for(g: &Gate, want: usize, tag: &str) -> String {
    let view = g.drain.view();
    (0..10_000)
        .map(|n| format!("{tag}-{n}@ua"))
        .find(|c| view.pick(&ringsync::config::Service::Sg, c.as_bytes()) == Some(want))
        .expect("a key for the instance")
}

// === forwarding (issue 2; RFC 3261 16.6, RFC 3581) ===

#[test]
fn fwd_invite_new_via_max_forwards_record_route_and_rport() {
    let g = Gate::std();
    let input = Req::ua("INVITE", "fwd-1@ua", "z9hG4bKua-fwd1")
        .add("Via", "SIP/2.0/TCP 198.18.0.1:5060;branch=z9hG4bKupstream")
        .body("application/sdp", b"v=0\r\no=- 1 1 IN IP4 203.0.113.10\r\n")
        .bytes();
    let a = g.udp(L_SG_BAL, UA, &input);
    let (out, m) = sent(a);
    let Out::Udp { listener, to } = out else {
        panic!("{out:?}")
    };
    assert_eq!(listener, L_SG_BAL);
    let idx = INSTANCE_ADDR.iter().position(|a| addr(a) == to).unwrap();
    assert!(idx <= SG_C, "an sg");
    assert_gate_via(&m, L_SG_BAL);
    // RFC 3581: the client asked for rport; received and rport stamped.
    assert_eq!(
        via_values(&m)[1..],
        [
            "SIP/2.0/UDP 203.0.113.10:5062;branch=z9hG4bKua-fwd1;received=203.0.113.10;rport=40000"
                .to_string(),
            "SIP/2.0/TCP 198.18.0.1:5060;branch=z9hG4bKupstream".to_string(),
        ]
    );
    assert_eq!(header(&m, HeaderName::MaxForwards).as_deref(), Some("69"));
    let id = &g.config.instances[idx].id;
    assert_eq!(rr_uris(&m), [gate_rr(id, L_SG_BAL)]);
    assert!(route_uris(&m).is_empty());
    assert_untouched(&input, &m);
}

#[test]
fn fwd_via_without_rport_from_its_sent_by_is_not_stamped() {
    let g = Gate::std();
    let input = Req::new(
        "OPTIONS",
        "sip:bob@example.com",
        "fwd-2@ua",
        "SIP/2.0/UDP 203.0.113.10:40000;branch=z9hG4bKua-fwd2",
    )
    .bytes();
    let m = sent(g.udp(L_SG_BAL, UA, &input)).1;
    assert_eq!(
        via_values(&m)[1],
        "SIP/2.0/UDP 203.0.113.10:40000;branch=z9hG4bKua-fwd2"
    );
    // RFC 3261 18.2.1: sent-by differs from the source: received only.
    let input = Req::new(
        "OPTIONS",
        "sip:bob@example.com",
        "fwd-3@ua",
        "SIP/2.0/UDP ua.example.com:5062;branch=z9hG4bKua-fwd3",
    )
    .bytes();
    let m = sent(g.udp(L_SG_BAL, UA, &input)).1;
    assert_eq!(
        via_values(&m)[1],
        "SIP/2.0/UDP ua.example.com:5062;branch=z9hG4bKua-fwd3;received=203.0.113.10"
    );
    // OPTIONS does not create a dialog: no Record-Route.
    assert!(rr_uris(&m).is_empty());
}

#[test]
fn fwd_missing_max_forwards_gets_70() {
    let g = Gate::std();
    let input = Req::ua("MESSAGE", "fwd-mf@ua", "z9hG4bKua-mf")
        .without("Max-Forwards")
        .bytes();
    let m = sent(g.udp(L_SG_BAL, UA, &input)).1;
    assert_eq!(header(&m, HeaderName::MaxForwards).as_deref(), Some("70"));
    assert_eq!(m.fields(HeaderName::MaxForwards).count(), 1);
    assert_untouched(&input, &m);
}

#[test]
fn fwd_max_forwards_zero_is_483_and_ack_is_dropped() {
    let g = Gate::std();
    let input = Req::ua("INVITE", "fwd-mf0@ua", "z9hG4bKua-mf0")
        .set("Max-Forwards", "0")
        .bytes();
    let r = replied(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, UA, 483);
    assert!(text(r.raw()).starts_with("SIP/2.0 483 Too Many Hops\r\n"));
    assert_eq!(r.call_id(), Some(&b"fwd-mf0@ua"[..]));
    // Max-Forwards 1 still goes out, as 0.
    let input = Req::ua("INVITE", "fwd-mf1@ua", "z9hG4bKua-mf1")
        .set("Max-Forwards", "1")
        .bytes();
    let m = sent(g.udp(L_SG_BAL, UA, &input)).1;
    assert_eq!(header(&m, HeaderName::MaxForwards).as_deref(), Some("0"));
    // An ACK is never answered.
    let ack = Req::ua("ACK", "fwd-mf0b@ua", "z9hG4bKua-mf0b")
        .tagged("t1")
        .set("Max-Forwards", "0")
        .bytes();
    assert_eq!(g.udp(L_SG_BAL, UA, &ack), Action::None);
}

#[test]
fn fwd_own_route_removed_and_record_route_only_on_invite_and_subscribe() {
    let g = Gate::std();
    // Preloaded outbound-proxy Route naming the gate: removed (loose routing).
    for (method, rr) in [
        ("INVITE", true),
        ("SUBSCRIBE", true),
        ("REGISTER", false),
        ("OPTIONS", false),
        ("MESSAGE", false),
        ("PUBLISH", false),
    ] {
        let input = Req::ua(
            method,
            &format!("rr-{method}@ua"),
            &format!("z9hG4bKrr{method}"),
        )
        .add_first("Route", "<sip:127.0.0.1:5060;lr>")
        .bytes();
        let m = sent(g.udp(L_SG_BAL, UA, &input)).1;
        assert!(route_uris(&m).is_empty(), "{method}: {}", text(m.raw()));
        assert_eq!(rr_uris(&m).len(), usize::from(rr), "{method}");
        if rr {
            assert!(rr_uris(&m)[0].starts_with("sip:g1.sg-"), "{method}");
            assert!(rr_uris(&m)[0].ends_with("@127.0.0.1:5060;lr"), "{method}");
        }
        assert_untouched(&input, &m);
    }
}

#[test]
fn fwd_binary_body_with_crlf_via_inside_is_untouched() {
    let g = Gate::std();
    let body: &[u8] =
        b"\x00\xff\xfebin\r\n\r\nVia: SIP/2.0/UDP evil.example;branch=z9hG4bKevil\r\nMax-Forwards: 0\r\n\r\n\x80\x00";
    let input = Req::ua("INVITE", "bin@ua", "z9hG4bKua-bin")
        .body("application/octet-stream", body)
        .bytes();
    let a = g.udp(L_SG_BAL, UA, &input);
    let Action::Send(_, bytes) = a.clone() else {
        panic!("not sent")
    };
    assert!(bytes.ends_with(body));
    let m = sent(a).1;
    assert_eq!(m.body(), body);
    assert_eq!(m.vias().count(), 2, "the Via inside the body is no header");
    assert_eq!(header(&m, HeaderName::MaxForwards).as_deref(), Some("69"));
    assert_untouched(&input, &m);
}

#[test]
fn fwd_extension_method_and_tel_uri_are_forwarded() {
    let g = Gate::std();
    let input = Req::ua("FOOBAR", "ext@ua", "z9hG4bKua-ext").bytes();
    let m = sent(g.udp(L_SG_BAL, UA, &input)).1;
    assert!(m
        .raw()
        .starts_with(b"FOOBAR sip:bob@example.com SIP/2.0\r\n"));
    assert!(rr_uris(&m).is_empty());
    assert_untouched(&input, &m);

    let mut req = Req::ua("INVITE", "tel@ua", "z9hG4bKua-tel");
    req.start = "INVITE tel:+15551234567;phone-context=example.com SIP/2.0".into();
    let input = req.set("To", "<tel:+15551234567>").bytes();
    let m = sent(g.udp(L_SG_BAL, UA, &input)).1;
    assert!(m
        .raw()
        .starts_with(b"INVITE tel:+15551234567;phone-context=example.com SIP/2.0\r\n"));
    assert_eq!(rr_uris(&m).len(), 1);
    assert_untouched(&input, &m);
}

#[test]
fn fwd_tcp_record_route_names_tcp_and_goes_out_tcp() {
    let g = Gate::std();
    let input = Req::new(
        "INVITE",
        "sip:bob@example.com",
        "tcp@ua",
        "SIP/2.0/TCP 203.0.113.10:5062;branch=z9hG4bKua-tcp",
    )
    .bytes();
    let a = g.core.handle(
        Inbound::Tcp {
            listener: L_SG_BAL,
            conn: 7,
            peer: addr("203.0.113.10:5062"),
        },
        input,
        Instant::now(),
    );
    let (out, m) = sent(a);
    let Out::Tcp { listener, conn, to } = out else {
        panic!("{out:?}")
    };
    assert_eq!((listener, conn), (L_SG_BAL, None));
    assert!(INSTANCE_ADDR[..3].iter().any(|a| addr(a) == to));
    assert_eq!(text(m.top_via().unwrap().transport), "TCP");
    assert!(rr_uris(&m)[0].ends_with("@127.0.0.1:5060;transport=tcp;lr"));
    // The response goes back on the connection the request came in on
    // (RFC 3261 18.2.2), whatever the instance answered over.
    let resp = response_to(&m, 180, "Ringing", "uas-tcp");
    let (out, r) = sent(handle(&g.core, L_SG_BAL, &to.to_string(), &resp));
    assert_eq!(
        out,
        Out::Tcp {
            listener: L_SG_BAL,
            conn: Some(7),
            to: addr("203.0.113.10:5062"),
        }
    );
    assert_eq!(via_values(&r), via_values(&m)[1..]);
}

// === responses ===

#[test]
fn resp_our_via_removed_and_back_to_the_source_by_txn() {
    let g = Gate::std();
    let input = Req::ua("INVITE", "resp-1@ua", "z9hG4bKua-r1").bytes();
    let (out, fwd) = sent(g.udp(L_SG_BAL, UA, &input));
    let Out::Udp { to: instance, .. } = out else {
        panic!()
    };
    for (code, reason) in [(100, "Trying"), (180, "Ringing"), (200, "OK")] {
        let resp = response_to(&fwd, code, reason, "uas1");
        let (out, m) = sent(handle(&g.core, L_SG_BAL, &instance.to_string(), &resp));
        assert_eq!(out, udp_out(L_SG_BAL, addr(UA)), "{code}");
        assert_eq!(m.code(), Some(code));
        // Only the client's Via is left, as the gate stamped it.
        assert_eq!(via_values(&m), via_values(&fwd)[1..], "{code}");
        // The rest is byte for byte what the instance sent.
        let tail = |b: &[u8]| b[b.windows(5).position(|w| w == b"From:").unwrap()..].to_vec();
        assert_eq!(tail(m.raw()), tail(&resp));
    }
}

#[test]
fn resp_without_txn_entry_follows_next_via_received_rport() {
    let g = Gate::std();
    let input = Req::ua("INVITE", "resp-2@ua", "z9hG4bKua-r2")
        .add("Via", "SIP/2.0/UDP 198.18.0.1:5060;branch=z9hG4bKup2")
        .bytes();
    let (out, fwd) = sent(g.udp(L_SG_BAL, UA, &input));
    let Out::Udp { to: instance, .. } = out else {
        panic!()
    };
    // The gate restarted: no transaction table, the Via decides
    // (RFC 3261 18.2.2 with RFC 3581: received + rport = the NAT's address).
    let fresh = g.restarted();
    let resp = response_to(&fwd, 486, "Busy Here", "uas2");
    let (out, m) = sent(handle(&fresh, L_SG_BAL, &instance.to_string(), &resp));
    assert_eq!(out, udp_out(L_SG_BAL, addr(UA)));
    assert_eq!(via_values(&m), via_values(&fwd)[1..]);

    // A client Via without rport but with received: received and sent-by port.
    let input = Req::new(
        "OPTIONS",
        "sip:bob@example.com",
        "resp-3@ua",
        "SIP/2.0/UDP ua.example.com:5099;branch=z9hG4bKua-r3",
    )
    .bytes();
    let (out, fwd) = sent(g.udp(L_SG_BAL, UA, &input));
    let Out::Udp { to: instance, .. } = out else {
        panic!()
    };
    let resp = response_to(&fwd, 200, "OK", "uas3");
    let (out, _) = sent(handle(&fresh, L_SG_BAL, &instance.to_string(), &resp));
    assert_eq!(out, udp_out(L_SG_BAL, addr("203.0.113.10:5099")));
}

#[test]
fn resp_top_via_not_ours_is_dropped_r_sec_1() {
    let g = Gate::std();
    // Top Via of somebody else: the gate is no relay for it.
    let mut resp = String::from("SIP/2.0 200 OK\r\n");
    resp.push_str("Via: SIP/2.0/UDP 198.18.0.99:5060;branch=z9hG4bK-g0123456789abcdef\r\n");
    resp.push_str(
        "Via: SIP/2.0/UDP 203.0.113.10:5062;branch=z9hG4bKx;received=203.0.113.10;rport=40000\r\n",
    );
    resp.push_str("From: <sip:a@example.com>;tag=1\r\nTo: <sip:b@example.com>;tag=2\r\n");
    resp.push_str("Call-ID: notours@ua\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n");
    let resp = Bytes::from(resp);
    assert_eq!(g.udp(L_SG_BAL, INSTANCE_ADDR[0], &resp), Action::None);
    // Our address but a branch the gate never made.
    let forged = Bytes::from(text(&resp).replace(
        "198.18.0.99:5060;branch=z9hG4bK-g0123456789abcdef",
        "127.0.0.1:5060;branch=z9hG4bKclient-made",
    ));
    assert_eq!(g.udp(L_SG_BAL, INSTANCE_ADDR[0], &forged), Action::None);
    // A response with only our Via has nowhere to go.
    let lone = Bytes::from(text(&resp).replace(
        "Via: SIP/2.0/UDP 203.0.113.10:5062;branch=z9hG4bKx;received=203.0.113.10;rport=40000\r\n",
        "",
    ).replace("198.18.0.99:5060", "127.0.0.1:5060"));
    assert_eq!(g.udp(L_SG_BAL, INSTANCE_ADDR[0], &lone), Action::None);
}

// === transactions: retransmission, CANCEL, ACK (R-SG-4) ===

#[test]
fn r_sg_4_retransmitted_invite_cancel_and_ack_follow_the_first_hop_across_a_drain() {
    let g = Gate::std();
    let call = call_id_for(&g, SG_B, "rtx");
    let invite = Req::ua("INVITE", &call, "z9hG4bKua-rtx").bytes();
    let first = forwarded(g.udp(L_SG_BAL, UA, &invite), L_SG_BAL, inst(SG_B));

    // The ring changes between the two copies: sg-b drains.
    g.drain_servers(&["srv-b"]);
    assert_ne!(
        g.drain
            .view()
            .pick(&ringsync::config::Service::Sg, call.as_bytes()),
        Some(SG_B)
    );
    let again = forwarded(g.udp(L_SG_BAL, UA, &invite), L_SG_BAL, inst(SG_B));
    assert_eq!(again.raw(), first.raw(), "the same bytes, the same branch");
    // Everything else drains too; still never a second instance.
    g.drain_servers(&["srv-b", "srv-c"]);
    for _ in 0..3 {
        forwarded(g.udp(L_SG_BAL, UA, &invite), L_SG_BAL, inst(SG_B));
    }

    // CANCEL (same branch) follows the INVITE, with the INVITE's downstream branch.
    let cancel = Req::ua("CANCEL", &call, "z9hG4bKua-rtx")
        .without("Contact")
        .bytes();
    let c = forwarded(g.udp(L_SG_BAL, UA, &cancel), L_SG_BAL, inst(SG_B));
    assert_eq!(c.top_via().unwrap().branch, first.top_via().unwrap().branch);
    assert!(rr_uris(&c).is_empty());
    assert_untouched(&cancel, &c);

    // The 200 to the CANCEL goes back to the UA and does not end the INVITE.
    let resp = response_to(&c, 200, "OK", "uas-rtx");
    let (out, r) = sent(g.udp(L_SG_BAL, INSTANCE_ADDR[SG_B], &resp));
    assert_eq!(out, udp_out(L_SG_BAL, addr(UA)));
    assert_eq!(r.cseq_method_bytes(), Some(&b"CANCEL"[..]));
    let ringing = response_to(&first, 180, "Ringing", "uas-rtx");
    let (out, _) = sent(g.udp(L_SG_BAL, INSTANCE_ADDR[SG_B], &ringing));
    assert_eq!(out, udp_out(L_SG_BAL, addr(UA)), "INVITE still pending");
    // 487 for the INVITE, then the ACK of that non-2xx follows the INVITE.
    let resp = response_to(&first, 487, "Request Terminated", "uas-rtx");
    let (out, _) = sent(g.udp(L_SG_BAL, INSTANCE_ADDR[SG_B], &resp));
    assert_eq!(out, udp_out(L_SG_BAL, addr(UA)));
    let ack = Req::ua("ACK", &call, "z9hG4bKua-rtx")
        .tagged("uas-rtx")
        .without("Contact")
        .bytes();
    let a = forwarded(g.udp(L_SG_BAL, UA, &ack), L_SG_BAL, inst(SG_B));
    assert_eq!(a.top_via().unwrap().branch, first.top_via().unwrap().branch);
}

#[test]
fn r_sg_4_cancel_racing_the_drain_reaches_the_guarded_instance() {
    let g = Gate::std();
    let invite = Req::ua("INVITE", "race@ua", "z9hG4bKua-race").bytes();
    forwarded(g.udp(L_SG_GUARD, UA, &invite), L_SG_GUARD, inst(SG_A));
    // The drain is activated while the INVITE rings.
    g.drain_servers(&["srv-a"]);
    let cancel = Req::ua("CANCEL", "race@ua", "z9hG4bKua-race")
        .without("Contact")
        .bytes();
    forwarded(g.udp(L_SG_GUARD, UA, &cancel), L_SG_GUARD, inst(SG_A));
    // Also from a gate that has forgotten the INVITE (restart): CANCEL is no new work.
    let fresh = g.restarted();
    forwarded(
        handle(&fresh, L_SG_GUARD, UA, &cancel),
        L_SG_GUARD,
        inst(SG_A),
    );
    // ... while a new INVITE gets 503 from the same gate.
    let new = Req::ua("INVITE", "race2@ua", "z9hG4bKua-race2").bytes();
    replied(g.udp(L_SG_GUARD, UA, &new), L_SG_GUARD, UA, 503);
}

// === in-dialog routing by token (R-SG-4, R-SEC-1, R-SEC-2) ===

#[test]
fn r_sg_4_in_dialog_goes_to_the_token_instance_even_when_draining() {
    let g = Gate::std();
    let call = call_id_for(&g, SG_C, "dlg");
    let invite = Req::ua("INVITE", &call, "z9hG4bKua-dlg").bytes();
    let fwd = forwarded(g.udp(L_SG_BAL, UA, &invite), L_SG_BAL, inst(SG_C));
    let rr = rr_uris(&fwd);
    assert_eq!(rr, [gate_rr("sg-c", L_SG_BAL)]);

    g.drain_servers(&["srv-c"]);
    for (n, method) in ["INVITE", "UPDATE", "INFO", "PRACK", "BYE"]
        .iter()
        .enumerate()
    {
        let input = Req::ua(method, &call, &format!("z9hG4bKua-dlg{n}"))
            .tagged("uas-dlg")
            .set("CSeq", &format!("{} {method}", n + 2))
            .add_first("Route", &format!("<{}>", rr[0]))
            .bytes();
        let m = forwarded(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, inst(SG_C));
        assert!(route_uris(&m).is_empty(), "{method}: own Route removed");
        assert!(
            rr_uris(&m).is_empty(),
            "{method}: in-dialog, no new Record-Route"
        );
        assert_eq!(header(&m, HeaderName::MaxForwards).as_deref(), Some("69"));
        assert_untouched(&input, &m);
    }
    // Any gate node of the site, also one that just restarted.
    let fresh = g.restarted();
    let bye = Req::ua("BYE", &call, "z9hG4bKua-dlg-bye2")
        .tagged("uas-dlg")
        .set("CSeq", "9 BYE")
        .add_first("Route", &format!("<{}>", rr[0]))
        .bytes();
    forwarded(handle(&fresh, L_SG_BAL, UA, &bye), L_SG_BAL, inst(SG_C));
    // The instance's own Route after the gate's is allowed and kept.
    let bye = Req::ua("BYE", &call, "z9hG4bKua-dlg-bye3")
        .tagged("uas-dlg")
        .set("CSeq", "10 BYE")
        .add_first("Route", &format!("<{}>, <sip:127.0.1.3:5060;lr>", rr[0]))
        .bytes();
    let m = forwarded(g.udp(L_SG_BAL, UA, &bye), L_SG_BAL, inst(SG_C));
    assert_eq!(route_uris(&m), ["sip:127.0.1.3:5060;lr"]);
}

#[test]
fn r_sec_2_forged_token_or_other_secret_is_403() {
    let g = Gate::std();
    let key = TokenKey::new(SECRET);
    let good = key.seal("sg-a");
    let other_site = TokenKey::new("another-site-secret-value-xyz").seal("sg-a");
    let grafted = good.replace("sg-a", "sg-b");
    let unknown = key.seal("sg-zz"); // authentic, but no such instance
    for token in [
        other_site,
        grafted,
        unknown,
        "g1.sg-a.0000000000000000".to_string(),
        "garbage".into(),
    ] {
        let input = Req::ua("BYE", "forged@ua", "z9hG4bKua-forged")
            .tagged("t")
            .add_first("Route", &format!("<sip:{token}@127.0.0.1:5060;lr>"))
            .bytes();
        let r = replied(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, UA, 403);
        assert!(
            text(r.raw()).starts_with("SIP/2.0 403 Bad Route Token\r\n"),
            "{token}"
        );
    }
    // The authentic one works.
    let input = Req::ua("BYE", "forged@ua", "z9hG4bKua-good")
        .tagged("t")
        .add_first("Route", &format!("<sip:{good}@127.0.0.1:5060;lr>"))
        .bytes();
    forwarded(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, inst(SG_A));
}

#[test]
fn r_sec_1_foreign_route_is_403() {
    let g = Gate::std();
    // In-dialog toward somewhere else through the gate.
    let input = Req::ua("BYE", "foreign@ua", "z9hG4bKua-foreign")
        .tagged("t")
        .add_first("Route", "<sip:198.18.7.7:5060;lr>")
        .bytes();
    let r = replied(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, UA, 403);
    assert!(text(r.raw()).starts_with("SIP/2.0 403 Route Not Allowed\r\n"));
    // Our token followed by a foreign hop.
    let input = Req::ua("BYE", "foreign@ua", "z9hG4bKua-foreign2")
        .tagged("t")
        .add_first(
            "Route",
            &format!("{}, <sip:198.18.7.7:5060;lr>", gate_route("sg-a", L_SG_BAL)),
        )
        .bytes();
    replied(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, UA, 403);
    // A new dialog with a foreign preloaded Route: open relay refused.
    let input = Req::ua("INVITE", "foreign3@ua", "z9hG4bKua-foreign3")
        .add_first("Route", "<sip:relay.example.net;lr>")
        .bytes();
    replied(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, UA, 403);
    // ... also after the gate's own Route.
    let input = Req::ua("INVITE", "foreign4@ua", "z9hG4bKua-foreign4")
        .add_first("Route", "<sip:127.0.0.1:5060;lr>, <sip:198.18.7.7;lr>")
        .bytes();
    replied(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, UA, 403);
    // A bad-token ACK is dropped, never answered.
    let ack = Req::ua("ACK", "foreign5@ua", "z9hG4bKua-foreign5")
        .tagged("t")
        .add_first("Route", "<sip:198.18.7.7:5060;lr>")
        .bytes();
    assert_eq!(g.udp(L_SG_BAL, UA, &ack), Action::None);
}

#[test]
fn r_sec_2_preloaded_gate_route_on_new_dialog_is_stripped_and_policy_decides() {
    let g = Gate::std();
    g.drain_servers(&["srv-a"]);
    // A token naming the draining sg-a, preloaded on a new INVITE: ignored.
    for n in 0..40 {
        let input = Req::ua(
            "INVITE",
            &format!("preload-{n}@ua"),
            &format!("z9hG4bKpre{n}"),
        )
        .add_first("Route", &gate_route("sg-a", L_SG_BAL))
        .bytes();
        let (out, m) = sent(g.udp(L_SG_BAL, UA, &input));
        assert_ne!(
            out,
            udp_out(L_SG_BAL, inst(SG_A)),
            "the ring decides, not the token"
        );
        assert!(
            route_uris(&m).is_empty(),
            "the preloaded gate Route is stripped"
        );
        let rr = rr_uris(&m);
        assert!(
            rr == [gate_rr("sg-b", L_SG_BAL)] || rr == [gate_rr("sg-c", L_SG_BAL)],
            "{rr:?}"
        );
    }
    // On the guard listener the token lets nothing past the drain.
    let input = Req::ua("INVITE", "preload-g@ua", "z9hG4bKpreg")
        .add_first("Route", &gate_route("sg-a", L_SG_GUARD))
        .bytes();
    replied(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, UA, 503);
    let input = Req::ua("REGISTER", "preload-r@ua", "z9hG4bKprer")
        .add_first("Route", "<sip:127.0.0.1:5061;lr>")
        .bytes();
    replied(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, UA, 503);
}

#[test]
fn r_sg_4_in_dialog_without_route_balance_by_call_id_guard_to_instance() {
    let g = Gate::std();
    // Balance: a UA that keeps no route set; the ring by Call-ID, as the INVITE went.
    for target in [SG_A, SG_B, SG_C] {
        let call = call_id_for(&g, target, "noroute");
        let invite = Req::ua("INVITE", &call, &format!("z9hG4bKnr{target}")).bytes();
        assert_eq!(dest(g.udp(L_SG_BAL, UA, &invite), L_SG_BAL), target);
        let bye = Req::ua("BYE", &call, &format!("z9hG4bKnrb{target}"))
            .tagged("uas")
            .set("CSeq", "2 BYE")
            .bytes();
        let m = forwarded(g.udp(L_SG_BAL, UA, &bye), L_SG_BAL, inst(target));
        assert!(rr_uris(&m).is_empty());
    }
    // Guard: to the guarded instance, also while it drains (R-SG-4).
    g.drain_servers(&["srv-a"]);
    let bye = Req::ua("BYE", "noroute-g@ua", "z9hG4bKnrg")
        .tagged("uas")
        .set("CSeq", "2 BYE")
        .bytes();
    forwarded(g.udp(L_SG_GUARD, UA, &bye), L_SG_GUARD, inst(SG_A));
}

#[test]
fn r_sec_1_request_from_instance_goes_outward_by_route_or_request_uri() {
    let g = Gate::std();
    // sg-a notifies a subscriber: Route = the gate's token, Request-URI = the UA's contact.
    let mut notify = Req::new(
        "NOTIFY",
        "sip:alice@203.0.113.10:5062",
        "sub-1@ua",
        "SIP/2.0/UDP 127.0.1.1:5060;branch=z9hG4bKsga-n1",
    )
    .add_first("Route", &gate_route("sg-a", L_SG_BAL))
    .set("From", "<sip:bob@example.com>;tag=uas")
    .set("To", "<sip:alice@example.com>;tag=a1")
    .set("Event", "presence")
    .set("Subscription-State", "active;expires=3600");
    notify.headers.retain(|(n, _)| n != "Contact");
    let input = notify
        .clone()
        .set("Contact", "<sip:127.0.1.1:5060>")
        .bytes();
    let m = forwarded(
        g.udp(L_SG_BAL, INSTANCE_ADDR[SG_A], &input),
        L_SG_BAL,
        addr("203.0.113.10:5062"),
    );
    assert_gate_via(&m, L_SG_BAL);
    assert!(route_uris(&m).is_empty());
    assert!(rr_uris(&m).is_empty());
    assert_eq!(
        via_values(&m)[1],
        "SIP/2.0/UDP 127.0.1.1:5060;branch=z9hG4bKsga-n1"
    );
    assert_untouched(&input, &m);

    // With a route set beyond the gate: to the next Route, which is kept.
    let input = notify
        .clone()
        .set("Via", "SIP/2.0/UDP 127.0.1.1:5060;branch=z9hG4bKsga-n2")
        .set(
            "Route",
            &format!("{}, <sip:198.18.0.1:5070;lr>", gate_route("sg-a", L_SG_BAL)),
        )
        .bytes();
    let m = forwarded(
        g.udp(L_SG_BAL, INSTANCE_ADDR[SG_A], &input),
        L_SG_BAL,
        addr("198.18.0.1:5070"),
    );
    assert_eq!(route_uris(&m), ["sip:198.18.0.1:5070;lr"]);

    // A new INVITE an instance starts through the gate is record-routed to it.
    let input = Req::new(
        "INVITE",
        "sip:alice@203.0.113.10:5062",
        "out-1@sg",
        "SIP/2.0/UDP 127.0.1.2:5060;branch=z9hG4bKsgb-i1",
    )
    .bytes();
    let m = forwarded(
        g.udp(L_SG_BAL, INSTANCE_ADDR[SG_B], &input),
        L_SG_BAL,
        addr("203.0.113.10:5062"),
    );
    assert_eq!(rr_uris(&m), [gate_rr("sg-b", L_SG_BAL)]);

    // An instance cannot loop a request through the gate itself.
    let input = Req::new(
        "MESSAGE",
        "sip:x@127.0.0.1:5060",
        "out-2@sg",
        "SIP/2.0/UDP 127.0.1.2:5060;branch=z9hG4bKsgb-i2",
    )
    .bytes();
    replied(
        g.udp(L_SG_BAL, INSTANCE_ADDR[SG_B], &input),
        L_SG_BAL,
        INSTANCE_ADDR[SG_B],
        404,
    );
}

// === Active-Active balance (R-AA-*) ===

fn sg_spread(g: &Gate, prefix: &str, n: usize) -> Vec<usize> {
    (0..n)
        .map(|i| {
            let input = Req::ua("INVITE", &format!("{prefix}-{i}@ua"), &fresh_branch()).bytes();
            dest(g.udp(L_SG_BAL, UA, &input), L_SG_BAL)
        })
        .collect()
}

#[test]
fn r_aa_1_balance_never_picks_a_draining_member() {
    let g = Gate::std();
    g.drain_servers(&["srv-b"]);
    let got = sg_spread(&g, "aa1", 300);
    assert!(!got.contains(&SG_B), "no new dialog on the draining sg-b");
    assert!(
        got.contains(&SG_A) && got.contains(&SG_C),
        "both others serve"
    );
    // REGISTER / SUBSCRIBE go by AOR; none to sg-b either.
    for i in 0..100 {
        for method in ["REGISTER", "SUBSCRIBE"] {
            let input = Req::ua(method, &format!("aa1r-{i}@ua"), &fresh_branch())
                .to(&format!("sip:user{i}@example.com"))
                .bytes();
            assert_ne!(dest(g.udp(L_SG_BAL, UA, &input), L_SG_BAL), SG_B);
        }
    }
    // A down member is out too.
    g.health(SG_C, Health::Down);
    let got = sg_spread(&g, "aa1d", 100);
    assert!(got.iter().all(|&i| i == SG_A), "{got:?}");
}

#[test]
fn r_aa_3_lifting_the_drain_brings_the_keys_back() {
    let g = Gate::std();
    let before = sg_spread(&g, "aa3", 300);
    assert!(before.contains(&SG_B));
    g.drain_servers(&["srv-b"]);
    let during = sg_spread(&g, "aa3", 300);
    for (b, d) in before.iter().zip(&during) {
        // R-AA-2: only sg-b's keys moved.
        if *b != SG_B {
            assert_eq!(b, d);
        } else {
            assert_ne!(*d, SG_B);
        }
    }
    g.drain_servers(&[]);
    let after = sg_spread(&g, "aa3", 300);
    assert_eq!(before, after, "every key back where it was");
}

#[test]
fn r_aa_4_all_draining_still_served_no_503() {
    let g = Gate::std();
    g.drain_servers(&["srv-a", "srv-b", "srv-c"]);
    let got = sg_spread(&g, "aa4", 60);
    assert!(got.iter().all(|&i| i <= SG_C));
    assert!(got.contains(&SG_A) && got.contains(&SG_B) && got.contains(&SG_C));
    // Also when some of the draining ones are down: the others serve.
    g.health(SG_A, Health::Down);
    let got = sg_spread(&g, "aa4d", 60);
    assert!(!got.contains(&SG_A));
    // And esg on the balance listener.
    for i in 0..20 {
        let input = Req::ua("INVITE", &format!("aa4e-{i}@x"), &fresh_branch()).bytes();
        let d = dest(g.udp(L_ESG_BAL, CARRIER_X, &input), L_ESG_BAL);
        assert!(d == ESG_A || d == ESG_B);
    }
}

#[test]
fn r_esg_5_single_instance_account_stays_on_home_drain_or_not() {
    let g = Gate::std();
    let esg_spread = |g: &Gate, src: &str, prefix: &str| -> Vec<usize> {
        (0..100)
            .map(|i| {
                let input = Req::ua("INVITE", &format!("{prefix}-{i}@p"), &fresh_branch()).bytes();
                dest(g.udp(L_ESG_BAL, src, &input), L_ESG_BAL)
            })
            .collect()
    };
    let y = esg_spread(&g, CARRIER_Y, "e5y");
    assert!(
        y.iter().all(|&i| i == ESG_A),
        "carrier-y always on its home esg-a"
    );
    let x = esg_spread(&g, CARRIER_X, "e5x");
    assert!(
        x.contains(&ESG_A) && x.contains(&ESG_B),
        "carrier-x is balanced"
    );

    g.drain_servers(&["srv-a"]);
    let y = esg_spread(&g, CARRIER_Y, "e5y2");
    assert!(y.iter().all(|&i| i == ESG_A), "home, drain or not");
    let x = esg_spread(&g, CARRIER_X, "e5x2");
    assert!(x.iter().all(|&i| i == ESG_B), "multi-instance moves away");
}

// === sg guard (R-SG-1 .. R-SG-5) ===

fn assert_drain_503(r: &SipMessage, req: &Bytes, o: &SiteOpts) {
    let req = SipMessage::parse(req.clone()).unwrap();
    let raw = text(r.raw());
    assert!(raw.starts_with("SIP/2.0 503 "), "{raw}");
    // R-SG-5: Retry-After in [retry_after, retry_after + jitter].
    let ra: u32 = other_header(r, "Retry-After")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!(
        (o.retry_after..=o.retry_after + o.jitter).contains(&ra),
        "{ra}"
    );
    // To tag added, the rest of To as sent.
    let to_req = header(&req, HeaderName::To).unwrap();
    let to = header(r, HeaderName::To).unwrap();
    assert!(to.starts_with(&format!("{to_req};tag=")), "{to}");
    assert!(r.to_tag().is_some_and(|t| !t.is_empty()));
    // Every Via in order, the top one stamped (RFC 3581).
    let mut want = via_values(&req);
    want[0] = format!(
        "{};received=203.0.113.10;rport=40000",
        want[0].trim_end_matches(";rport")
    );
    assert_eq!(via_values(r), want);
    assert_eq!(r.call_id(), req.call_id());
    assert_eq!(header(r, HeaderName::From), header(&req, HeaderName::From));
    assert_eq!(header(r, HeaderName::CSeq), header(&req, HeaderName::CSeq));
    assert_eq!(header(r, HeaderName::ContentLength).as_deref(), Some("0"));
    assert!(r.body().is_empty());
}

#[test]
fn r_sg_1_r_sg_5_register_new_subscribe_new_invite_get_503_with_retry_after() {
    let o = SiteOpts::default();
    let g = Gate::new(&o);
    g.drain_servers(&["srv-a"]);
    for method in ["REGISTER", "SUBSCRIBE", "INVITE"] {
        for n in 0..5 {
            let input = Req::ua(
                method,
                &format!("sg1-{method}-{n}@ua"),
                &format!("z9hG4bKsg1{method}{n}"),
            )
            .add("Via", "SIP/2.0/UDP 198.18.0.1:5060;branch=z9hG4bKup1")
            .add("Via", "SIP/2.0/TCP 198.18.0.2;branch=z9hG4bKup2")
            .set("Expires", "3600")
            .body("application/sdp", b"v=0\r\n")
            .bytes();
            let r = replied(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, UA, 503);
            assert_drain_503(&r, &input, &o);
        }
    }
    // Without jitter, exactly retry_after.
    let o = SiteOpts {
        retry_after: 120,
        jitter: 0,
        ..SiteOpts::default()
    };
    let g = Gate::new(&o);
    g.drain_servers(&["srv-a"]);
    let input = Req::ua("INVITE", "sg1-nj@ua", "z9hG4bKsg1nj").bytes();
    let r = replied(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, UA, 503);
    assert_eq!(other_header(&r, "Retry-After").as_deref(), Some("120"));
    assert_drain_503(&r, &input, &o);
    // Not draining: all three pass.
    g.drain_servers(&[]);
    for method in ["REGISTER", "SUBSCRIBE", "INVITE"] {
        let input = Req::ua(
            method,
            &format!("sg1-nd-{method}@ua"),
            &format!("z9hG4bKnd{method}"),
        )
        .bytes();
        forwarded(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, inst(SG_A));
    }
}

#[test]
fn r_sg_1_draining_other_instance_does_not_refuse_for_the_guarded_one() {
    let g = Gate::std();
    g.drain_servers(&["srv-b"]);
    let input = Req::ua("INVITE", "sg1-other@ua", "z9hG4bKsg1o").bytes();
    forwarded(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, inst(SG_A));
}

#[test]
fn r_sg_2_no_503_when_no_other_sg_is_up_in_the_normal_zone() {
    let g = Gate::std();
    let invite =
        |n: &str| Req::ua("INVITE", &format!("sg2-{n}@ua"), &format!("z9hG4bKsg2{n}")).bytes();
    // Every other sg draining too.
    g.drain_servers(&["srv-a", "srv-b", "srv-c"]);
    forwarded(g.udp(L_SG_GUARD, UA, &invite("1")), L_SG_GUARD, inst(SG_A));
    // sg-b drains, sg-c is down.
    g.drain_servers(&["srv-a", "srv-b"]);
    g.health(SG_C, Health::Down);
    forwarded(g.udp(L_SG_GUARD, UA, &invite("2")), L_SG_GUARD, inst(SG_A));
    // sg-c back up: 503 again.
    g.health(SG_C, Health::Up);
    replied(g.udp(L_SG_GUARD, UA, &invite("3")), L_SG_GUARD, UA, 503);
    // Both others down, none draining.
    g.drain_servers(&["srv-a"]);
    g.health(SG_B, Health::Down);
    g.health(SG_C, Health::Down);
    forwarded(g.udp(L_SG_GUARD, UA, &invite("4")), L_SG_GUARD, inst(SG_A));
    // Only an esg is up elsewhere: another service does not count.
    assert!(!g.drain.view().is_draining(ESG_B));
    forwarded(g.udp(L_SG_GUARD, UA, &invite("5")), L_SG_GUARD, inst(SG_A));
}

#[test]
fn r_sg_3_exceptions_by_source_aor_user_domain_method() {
    let o = SiteOpts {
        sg_a_exceptions: r#"[
            { source = "10.0.0.0/8" },
            { aor = "sip:112@example.com" },
            { user = "vip" },
            { domain = "exempt.example" },
            { method = "SUBSCRIBE" },
            { user = "both", source = "172.16.0.0/12" },
        ]"#,
        ..SiteOpts::default()
    };
    let g = Gate::new(&o);
    g.drain_servers(&["srv-a"]);
    let pass = |peer: &str, req: Req| {
        forwarded(
            g.udp(L_SG_GUARD, peer, &req.bytes()),
            L_SG_GUARD,
            inst(SG_A),
        );
    };
    let refuse = |peer: &str, req: Req| {
        replied(g.udp(L_SG_GUARD, peer, &req.bytes()), L_SG_GUARD, peer, 503);
    };
    let inv = |n: &str| Req::ua("INVITE", &format!("sg3-{n}@ua"), &format!("z9hG4bKsg3{n}"));
    let reg = |n: &str| {
        Req::ua(
            "REGISTER",
            &format!("sg3-{n}@ua"),
            &format!("z9hG4bKsg3{n}"),
        )
    };
    // Source network.
    pass("10.1.2.3:5060", inv("src"));
    refuse("11.1.2.3:5060", inv("src-no"));
    // AOR: the To of REGISTER, the From of INVITE; scheme/host case-insensitive, params ignored.
    pass(UA, reg("aor").to("sip:112@EXAMPLE.com;transport=udp"));
    pass(UA, inv("aor-inv").from("SIP:112@example.com"));
    refuse(UA, reg("aor-no").to("sip:113@example.com"));
    refuse(UA, reg("aor-no2").to("sip:112@example.net"));
    // User.
    pass(UA, reg("user").to("sip:vip@anywhere.example"));
    refuse(UA, reg("user-no").to("sip:VIP@anywhere.example"));
    // Domain.
    pass(UA, inv("dom").from("sip:anyone@Exempt.Example"));
    refuse(UA, inv("dom-no").from("sip:anyone@not-exempt.example"));
    // Method.
    pass(UA, Req::ua("SUBSCRIBE", "sg3-m@ua", "z9hG4bKsg3m"));
    refuse(UA, Req::ua("INVITE", "sg3-m2@ua", "z9hG4bKsg3m2"));
    // Every field of one exception must match.
    pass("172.16.5.5:5060", reg("both").to("sip:both@example.com"));
    refuse(UA, reg("both-no").to("sip:both@example.com"));
    refuse(
        "172.16.5.5:5060",
        reg("both-no2").to("sip:other@example.com"),
    );

    // `all`: the instance is exempt from drain refusals altogether.
    let g = Gate::new(&SiteOpts {
        sg_a_exceptions: "[{ all = true }]",
        ..SiteOpts::default()
    });
    g.drain_servers(&["srv-a"]);
    for method in ["REGISTER", "SUBSCRIBE", "INVITE"] {
        let input = Req::ua(
            method,
            &format!("sg3-all-{method}@ua"),
            &format!("z9hG4bKall{method}"),
        )
        .bytes();
        forwarded(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, inst(SG_A));
    }
}

#[test]
fn r_sg_4_in_dialog_requests_pass_the_drain() {
    let g = Gate::std();
    g.drain_servers(&["srv-a"]);
    let methods = [
        "BYE",
        "INVITE",
        "UPDATE",
        "PRACK",
        "INFO",
        "NOTIFY",
        "SUBSCRIBE",
        "REFER",
        "MESSAGE",
        "ACK",
    ];
    for (n, method) in methods.iter().enumerate() {
        for with_route in [false, true] {
            let mut req = Req::ua(method, "sg4@ua", &format!("z9hG4bKsg4{n}{with_route}"))
                .tagged("uas-sg4")
                .set("CSeq", &format!("{} {method}", n + 2));
            if with_route {
                req = req.add_first("Route", &gate_route("sg-a", L_SG_GUARD));
            }
            let input = req.bytes();
            let m = forwarded(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, inst(SG_A));
            assert!(rr_uris(&m).is_empty(), "{method}");
            assert!(route_uris(&m).is_empty(), "{method}");
            assert_untouched(&input, &m);
        }
    }
}

#[test]
fn r_sg_1_deregister_passes() {
    let g = Gate::std();
    g.drain_servers(&["srv-a"]);
    let reg = |n: &str| {
        Req::ua(
            "REGISTER",
            &format!("dereg-{n}@ua"),
            &format!("z9hG4bKdr{n}"),
        )
    };
    let pass = |req: Req| {
        forwarded(g.udp(L_SG_GUARD, UA, &req.bytes()), L_SG_GUARD, inst(SG_A));
    };
    pass(reg("1").set("Expires", "0"));
    pass(reg("2").set("Contact", "<sip:alice@203.0.113.10:5062>;expires=0"));
    pass(reg("3").set(
        "Contact",
        "<sip:alice@203.0.113.10:5062>;expires=0, <sip:alice@[2001:db8::1]>;expires=0",
    ));
    pass(reg("4").set("Contact", "*").set("Expires", "0"));
    // A binding added (the contact's own expires wins over Expires: 0): new work.
    let input = reg("5")
        .set("Contact", "<sip:alice@203.0.113.10:5062>;expires=3600")
        .set("Expires", "0")
        .bytes();
    replied(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, UA, 503);
    // One of two contacts stays: new work.
    let input = reg("6")
        .set(
            "Contact",
            "<sip:alice@203.0.113.10:5062>;expires=0, <sip:alice@203.0.113.11>",
        )
        .bytes();
    replied(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, UA, 503);
    // An unsubscribe (Expires: 0) is cleanup too.
    let input = Req::ua("SUBSCRIBE", "unsub@ua", "z9hG4bKunsub")
        .set("Expires", "0")
        .bytes();
    forwarded(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, inst(SG_A));
}

#[test]
fn r_sg_1_options_passes_unless_options_503() {
    let g = Gate::std();
    g.drain_servers(&["srv-a"]);
    let input = Req::ua("OPTIONS", "opt@ua", "z9hG4bKopt").bytes();
    forwarded(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, inst(SG_A));

    let o = SiteOpts {
        options_503: true,
        ..SiteOpts::default()
    };
    let g = Gate::new(&o);
    g.drain_servers(&["srv-a"]);
    let r = replied(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, UA, 503);
    assert_drain_503(&r, &input, &o);
    // In-dialog OPTIONS still passes.
    let input = Req::ua("OPTIONS", "opt2@ua", "z9hG4bKopt2")
        .tagged("t")
        .bytes();
    forwarded(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, inst(SG_A));
    // Not draining: passes.
    g.drain_servers(&["srv-b"]);
    let input = Req::ua("OPTIONS", "opt3@ua", "z9hG4bKopt3").bytes();
    forwarded(g.udp(L_SG_GUARD, UA, &input), L_SG_GUARD, inst(SG_A));
}

// === esg guard (R-ESG-1 .. R-ESG-4) ===

#[test]
fn r_esg_1_2_3_esg_guard_refuses_only_multi_instance_on_provider_leg() {
    let o = SiteOpts::default();
    let g = Gate::new(&o);
    g.drain_servers(&["srv-a"]);
    let inv = |n: &str| {
        Req::new(
            "INVITE",
            "sip:+15551234567@gate.example",
            &format!("esg-{n}@p"),
            &format!("SIP/2.0/UDP 203.0.113.10:5062;branch=z9hG4bKesg{n};rport"),
        )
    };
    // R-ESG-1/2: a multi-instance account on the provider leg: 503.
    for method in ["INVITE", "REGISTER", "SUBSCRIBE"] {
        let input = Req::new(
            method,
            "sip:+15551234567@gate.example",
            &format!("esg-m-{method}@p"),
            "SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bKesgm;rport",
        )
        .bytes();
        let r = replied(
            g.udp(L_ESG_GUARD, CARRIER_X, &input),
            L_ESG_GUARD,
            CARRIER_X,
            503,
        );
        let ra: u32 = other_header(&r, "Retry-After").unwrap().parse().unwrap();
        assert!((30..=40).contains(&ra));
        assert!(r.to_tag().is_some());
    }
    // Matched by From domain from an unlisted source: still carrier-x.
    let input = inv("dom").from("sip:trunk@carrier-x.example").bytes();
    replied(g.udp(L_ESG_GUARD, UA, &input), L_ESG_GUARD, UA, 503);
    // R-ESG-2: single-instance account: passes.
    forwarded(
        g.udp(L_ESG_GUARD, CARRIER_Y, &inv("y").bytes()),
        L_ESG_GUARD,
        inst(ESG_A),
    );
    // No account at all: passes.
    forwarded(
        g.udp(L_ESG_GUARD, "198.18.9.9:5060", &inv("none").bytes()),
        L_ESG_GUARD,
        inst(ESG_A),
    );
    // R-ESG-3: an account exception (user `noc`) and an instance exception
    // (source 192.0.2.77) let a multi-instance request through.
    forwarded(
        g.udp(
            L_ESG_GUARD,
            CARRIER_X,
            &inv("noc").from("sip:noc@carrier-x.example").bytes(),
        ),
        L_ESG_GUARD,
        inst(ESG_A),
    );
    forwarded(
        g.udp(L_ESG_GUARD, "192.0.2.77:5060", &inv("exc").bytes()),
        L_ESG_GUARD,
        inst(ESG_A),
    );
    // R-ESG-1/3: the inside leg keeps taking new work, same account.
    forwarded(
        g.udp(L_ESG_IN, CARRIER_X, &inv("in").bytes()),
        L_ESG_IN,
        inst(ESG_A),
    );
    let input = inv("in2")
        .set("Via", "SIP/2.0/UDP 198.18.1.1:5060;branch=z9hG4bKin2")
        .bytes();
    forwarded(
        g.udp(L_ESG_IN, "198.18.1.1:5060", &input),
        L_ESG_IN,
        inst(ESG_A),
    );
    // R-ESG-4 (R-SG-4): in-dialog passes on the provider leg.
    let input = Req::new(
        "BYE",
        "sip:+15551234567@gate.example",
        "esg-dlg@p",
        "SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bKesgdlg",
    )
    .tagged("t")
    .add_first("Route", &gate_route("esg-a", L_ESG_GUARD))
    .bytes();
    forwarded(
        g.udp(L_ESG_GUARD, CARRIER_X, &input),
        L_ESG_GUARD,
        inst(ESG_A),
    );
    // R-ESG-4 (R-SG-2): with esg-b draining too, no 503.
    g.drain_servers(&["srv-a", "srv-b"]);
    let input = Req::new(
        "INVITE",
        "sip:+15551234567@gate.example",
        "esg-all@p",
        "SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bKesgall",
    )
    .bytes();
    forwarded(
        g.udp(L_ESG_GUARD, CARRIER_X, &input),
        L_ESG_GUARD,
        inst(ESG_A),
    );
}

#[test]
fn r_esg_1_inside_leg_request_from_an_sg_reaches_the_esg() {
    // An sg (a configured instance of another service) sends a new call to
    // the esg's inside leg: it is new work for the esg, not a request the
    // esg sends outward.
    let g = Gate::std();
    g.drain_servers(&["srv-a"]);
    let input = Req::new(
        "INVITE",
        "sip:+15551234567@127.0.0.1:5072",
        "sg-to-esg@sg",
        "SIP/2.0/UDP 127.0.1.2:5060;branch=z9hG4bKsg2esg",
    )
    .bytes();
    let m = forwarded(
        g.udp(L_ESG_IN, INSTANCE_ADDR[SG_B], &input),
        L_ESG_IN,
        inst(ESG_A),
    );
    assert_eq!(rr_uris(&m), [gate_rr("esg-a", L_ESG_IN)]);
}

// === bad input ===

#[test]
fn bad_empty_call_id_is_400_with_reason_missing_call_id_header_is_dropped() {
    let g = Gate::std();
    // Every mandatory header present, Call-ID empty: answerable, 400 with the reason.
    // (The reply copies the empty Call-ID, so it is itself incomplete: scan it.)
    let input = Req::ua("INVITE", "", "z9hG4bKbad1").bytes();
    let r = replied_scan(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, UA, 400);
    assert!(
        text(r.raw()).starts_with("SIP/2.0 400 Missing Call-ID\r\n"),
        "{}",
        text(r.raw())
    );
    assert_eq!(r.top_via().unwrap().branch, Some(&b"z9hG4bKbad1"[..]));
    assert!(r.to_tag().is_some());
    // No Call-ID header at all: a response could not copy it (issue 2:
    // "anything else is dropped and counted").
    let input = Req::ua("INVITE", "x", "z9hG4bKbad2")
        .without("Call-ID")
        .bytes();
    assert_eq!(g.udp(L_SG_BAL, UA, &input), Action::None);
    // Other broken requests that can be answered: 400 naming the problem.
    for (req, reason) in [
        (
            Req::ua("INVITE", "bad3@ua", "z9hG4bKbad3").set("Max-Forwards", "abc"),
            "Bad Max-Forwards",
        ),
        (
            Req::ua("INVITE", "bad4@ua", "z9hG4bKbad4").set("CSeq", "1 BYE"),
            "CSeq Method Mismatch",
        ),
        (
            Req::ua("INVITE", "bad5@ua", "z9hG4bKbad5").set("CSeq", "x INVITE"),
            "Bad CSeq",
        ),
        (
            Req::ua("INVITE", "bad6@ua", "z9hG4bKbad6").add("To", "<sip:c@d>"),
            "Duplicate To",
        ),
    ] {
        let input = req.bytes();
        let r = replied_scan(g.udp(L_SG_BAL, UA, &input), L_SG_BAL, UA, 400);
        assert_eq!(
            r.call_id(),
            SipMessage::scan(input.clone()).unwrap().call_id()
        );
        assert!(
            text(r.raw()).starts_with(&format!("SIP/2.0 400 {reason}\r\n")),
            "{}",
            text(r.raw())
        );
    }
}

#[test]
fn bad_sip_3_0_is_505() {
    let g = Gate::std();
    let mut req = Req::ua("INVITE", "v3@ua", "z9hG4bKv3");
    req.start = "INVITE sip:bob@example.com SIP/3.0".into();
    let r = replied(g.udp(L_SG_BAL, UA, &req.bytes()), L_SG_BAL, UA, 505);
    assert!(text(r.raw()).starts_with("SIP/2.0 505 Version Not Supported\r\n"));
    assert_eq!(r.call_id(), Some(&b"v3@ua"[..]));
}

#[test]
fn bad_garbage_is_dropped() {
    let g = Gate::std();
    for junk in [
        &b""[..],
        b"\r\n\r\n",
        b"hello world",
        b"\x00\x01\x02\x03\xff\xfe",
        b"INVITE sip:a@b SIP/2.0\r\nVia: x\r\n",
        b"SIP/2.0 2000 OK\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    ] {
        assert_eq!(
            g.udp(L_SG_BAL, UA, &Bytes::copy_from_slice(junk)),
            Action::None,
            "{}",
            text(junk)
        );
    }
}

/// Hostile messages after RFC 4475 and tests/torture.rs, on every listener,
/// from a UA and from an instance, over UDP and TCP: nothing panics, and
/// whatever the gate sends parses.
#[test]
fn bad_torture_inputs_never_panic() {
    let g = Gate::std();
    g.drain_servers(&["srv-a"]);
    let sdp = b"v=0\r\no=- 1 1 IN IP4 192.0.2.3\r\ns=-\r\nc=IN IP4 192.0.2.4\r\nt=0 0\r\n";
    let cl = |head: &str, body: &[u8]| -> Bytes {
        let mut v = head
            .replace("{CL}", &body.len().to_string())
            .replace('\n', "\r\n")
            .into_bytes();
        v.extend_from_slice(body);
        Bytes::from(v)
    };
    let mut inputs: Vec<Bytes> = vec![
        // wsinv: folding, odd whitespace, compact forms.
        cl("INVITE sip:vivekg@chair-dnrc.example.com;unknownparam SIP/2.0\n\
TO :\n sip:vivekg@chair-dnrc.example.com ;   tag    = 1918181833n\n\
from   : \"J Rosenberg \\\\\\\"\"       <sip:jdrosen@example.com>\n  ;\n  tag = 98asjd8\n\
MaX-fOrWaRdS: 0068\n\
Call-ID: wsinv.ndaksdj@192.0.2.1\n\
Content-Length   : {CL}\n\
cseq: 0009\n  INVITE\n\
Via  : SIP  /   2.0\n /UDP\n    192.0.2.2;rport;branch=390skdjuw\n\
s :\n\
NewFangledHeader:   newfangled value\n continued newfangled value\n\
Route:\n <sip:services.example.com;lr;unknownwith=value;unknown-no-value>\n\
v:  SIP  / 2.0  / TCP     spindle.example.com   ;\n  branch  =   z9hG4bK9ikj8  ,\n SIP  /    2.0   / UDP  192.168.255.111   ; branch=\n z9hG4bK30239\n\
m:\"Quoted string \\\"\\\"\" <sip:jdrosen@example.com> ; newparam =\n      newvalue ;\n  secondparam ; q = 0.33\n\n", sdp),
        // intmeth-like: an extension method full of token characters.
        cl("!interesting-Method0123456789_*+`.%indeed'~ sip:1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*:&it+has=1,weird!*pas$wo~d_too.(doesn't-it)@example.com SIP/2.0\n\
Via: SIP/2.0/TCP host1.example.com;branch=z9hG4bK-.!%66*_+`'~\n\
To: \"BEL:\\\x07 NUL:\\\x00 DEL:\\\x7F\" <sip:1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*@example.com>\n\
From: token1~` token2'+_ token3*%!.- <sip:mundane@example.com>;fromParam''~+*_!.-%=\"работающий\";tag=_token~1'+`*%!-.\n\
Call-ID: intmeth.word%ZK-!.*_+'@word`~)(><:\\/\"][?}{\n\
CSeq: 139122385 !interesting-Method0123456789_*+`.%indeed'~\n\
Max-Forwards: 255\n\
extensionHeader-!.%*+_`'~:\u{FEFF}大停電\n\
Content-Length: 0\n\n", b""),
        // Max-Forwards 0 on OPTIONS, IPv6 Via.
        cl("OPTIONS sip:[2001:db8::10] SIP/2.0\nTo: sip:user@example.com\nFrom: sip:user@example.com;tag=3ghi\nCall-ID: zeromf\nCSeq: 1 OPTIONS\nMax-Forwards: 0\nVia: SIP/2.0/UDP [2001:db8::9:1];branch=z9hG4bKas3-111\nl: 0\n\n", b""),
        // Negative and huge Content-Length.
        cl("INVITE sip:a@b SIP/2.0\nVia: SIP/2.0/UDP 192.0.2.15;branch=z9hG4bKk\nFrom: <sip:c@d>;tag=1\nTo: <sip:a@b>\nCall-ID: ncl\nCSeq: 1 INVITE\nContent-Length: -999\n\n", sdp),
        cl("INVITE sip:a@b SIP/2.0\nVia: SIP/2.0/UDP 192.0.2.15;branch=z9hG4bKk\nFrom: <sip:c@d>;tag=1\nTo: <sip:a@b>\nCall-ID: hcl\nCSeq: 1 INVITE\nContent-Length: 99999999999999999999999\n\n", sdp),
        // Unterminated quote, bad Via, extraneous separators.
        cl("INVITE sip:a@b SIP/2.0\nVia: SIP/2.0/UDP 192.0.2.15;;,;,,\nFrom: \"Bell <sip:c@d>;tag=1\nTo: <sip:a@b>\nCall-ID: q\nCSeq: 1 INVITE\nl: {CL}\n\n", sdp),
        // A response with a Via of ours whose branch is almost ours.
        cl("SIP/2.0 200 OK\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bK-gzzzzzzzzzzzzzzzz\nVia: SIP/2.0/UDP [::1\nFrom: <sip:c@d>;tag=1\nTo: <sip:a@b>;tag=2\nCall-ID: r\nCSeq: 1 INVITE\nl: 0\n\n", b""),
        cl("SIP/2.0 200 OK\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bK-g0000000000000000\nVia: SIP/2.0/UDP 203.0.113.1:99999;received=;rport=\nFrom: <sip:c@d>;tag=1\nTo: <sip:a@b>;tag=2\nCall-ID: r\nCSeq: 1 INVITE\nl: 0\n\n", b""),
        // Routes that look like ours with odd tokens.
        cl("BYE sip:a@b SIP/2.0\nVia: SIP/2.0/UDP 192.0.2.15;branch=z9hG4bKrt\nRoute: <sip:g1.@127.0.0.1:5060;lr>, <sip:@127.0.0.1:5060>\nFrom: <sip:c@d>;tag=1\nTo: <sip:a@b>;tag=2\nCall-ID: rt\nCSeq: 2 BYE\nl: 0\n\n", b""),
        cl("BYE sip:a@b SIP/2.0\nVia: SIP/2.0/UDP 192.0.2.15;branch=z9hG4bKrt2\nRoute: <sip:127.0.0.1:99999;lr>\nRoute: <sips:[::1]:5060>\nFrom: <sip:c@d>;tag=1\nTo: <sip:a@b>;tag=2\nCall-ID: rt2\nCSeq: 2 BYE\nl: 0\n\n", b""),
        // Contact * with expires, comma-joined everything.
        cl("REGISTER sip:example.com SIP/2.0\nv: SIP/2.0/UDP 192.0.2.15;branch=z9hG4bKreg, SIP/2.0/TCP [2001:db8::1]:5070;branch=z9hG4bKx\nf: <sip:c@example.com>;tag=1\nt: <sip:c@example.com>\ni: reg\nCSeq: 1 REGISTER\nm: *;expires=0, <sip:a@b>\nExpires: 99999999999999\nl: 0\n\n", b""),
        // Binary body, no Content-Length (UDP: the rest of the datagram).
        cl("MESSAGE sip:a@b SIP/2.0\nVia: SIP/2.0/UDP 192.0.2.15;branch=z9hG4bKbin\nFrom: <sip:c@d>;tag=1\nTo: <sip:a@b>\nCall-ID: bin\nCSeq: 1 MESSAGE\n\n", b"\x00\xff\r\n\r\nVia: x\r\n\r\n"),
    ];
    // Every prefix of a good INVITE (truncated datagrams).
    let good = Req::ua("INVITE", "trunc@ua", "z9hG4bKtrunc")
        .add_first("Route", &gate_route("sg-a", L_SG_BAL))
        .body("application/sdp", sdp)
        .bytes();
    for n in 0..good.len() {
        inputs.push(good.slice(..n));
    }
    // Single-byte corruptions of it.
    for n in (0..good.len()).step_by(3) {
        for b in [b'\0', b' ', b',', b';', b'<', b'"', b'\n', 0xff] {
            let mut v = good.to_vec();
            v[n] = b;
            inputs.push(Bytes::from(v));
        }
    }
    let peers = [UA, INSTANCE_ADDR[SG_A], CARRIER_X, "[2001:db8::5]:5060"];
    for input in &inputs {
        for listener in 0..LISTENER_HOST.len() {
            for peer in peers {
                for tcp in [false, true] {
                    let inbound = if tcp {
                        Inbound::Tcp {
                            listener,
                            conn: 1,
                            peer: addr(peer),
                        }
                    } else {
                        Inbound::Udp {
                            listener,
                            peer: addr(peer),
                        }
                    };
                    let Action::Send(_, out) =
                        g.core.handle(inbound, input.clone(), Instant::now())
                    else {
                        continue;
                    };
                    // A forwarded message parses; a reply the gate made to a
                    // broken request copies what it could and at least scans.
                    let ok = match SipMessage::scan(out.clone()) {
                        Ok(m) if m.is_request() => SipMessage::parse(out.clone()).is_ok(),
                        Ok(m) => {
                            m.code().is_some_and(|c| c >= 400)
                                || SipMessage::parse(out.clone()).is_ok()
                        }
                        Err(_) => false,
                    };
                    assert!(
                        ok,
                        "bad output:\n{}\nfrom input:\n{}",
                        text(&out),
                        text(input)
                    );
                }
            }
        }
    }
}

// === follow-ups: branch MAC, route-less BYE under drain, callee exceptions ===

#[test]
fn r_sec_1_response_with_a_forged_branch_mac_is_dropped() {
    let g = Gate::std();
    let input = Req::ua("INVITE", "mac-1@ua", "z9hG4bKua-mac1").bytes();
    let (out, fwd) = sent(g.udp(L_SG_BAL, UA, &input));
    let Out::Udp { to: instance, .. } = out else {
        panic!()
    };
    let resp = response_to(&fwd, 180, "Ringing", "uasm");
    // The branch the gate made: prefix, 16 hex digits of key, 16 of MAC.
    let branch = fwd.top_via().unwrap().branch.map(text).unwrap();
    assert_eq!(branch.len(), "z9hG4bK-g".len() + 32, "{branch}");
    let last = branch.chars().last().unwrap();
    let flipped = format!(
        "{}{}",
        &branch[..branch.len() - 1],
        if last == '0' { '1' } else { '0' }
    );
    let forged = Bytes::from(text(&resp).replace(&branch, &flipped));
    assert_eq!(
        handle(&g.core, L_SG_BAL, &instance.to_string(), &forged),
        Action::None
    );
    // A restarted gate (no transaction) still recognises its own branch.
    let fresh = g.restarted();
    let (out, _) = sent(handle(&fresh, L_SG_BAL, &instance.to_string(), &resp));
    assert_eq!(out, udp_out(L_SG_BAL, addr(UA)));
}

#[test]
fn r_sg_4_route_less_bye_of_a_call_set_up_before_the_drain_reaches_its_instance() {
    let g = Gate::std();
    let call = call_id_for(&g, SG_B, "rl-drain");
    let invite = Req::ua("INVITE", &call, "z9hG4bKrl-inv").bytes();
    let fwd = forwarded(g.udp(L_SG_BAL, UA, &invite), L_SG_BAL, inst(SG_B));
    let ok = response_to(&fwd, 200, "OK", "uas-rl");
    sent(handle(&g.core, L_SG_BAL, INSTANCE_ADDR[SG_B], &ok));
    // sg-b drains: the ring would now send this Call-ID elsewhere...
    g.drain_servers(&["srv-b"]);
    assert_ne!(
        g.drain
            .view()
            .pick(&ringsync::config::Service::Sg, call.as_bytes()),
        Some(SG_B)
    );
    // ...but the BYE of a UA that keeps no route set still reaches sg-b.
    let bye = Req::ua("BYE", &call, "z9hG4bKrl-bye")
        .tagged("uas-rl")
        .set("CSeq", "2 BYE")
        .bytes();
    forwarded(g.udp(L_SG_BAL, UA, &bye), L_SG_BAL, inst(SG_B));
}

#[test]
fn r_sg_3_aor_exception_matches_the_callee_of_an_invite() {
    let g = Gate::new(&SiteOpts {
        sg_a_exceptions: r#"[{ aor = "sip:112@example.com" }]"#,
        ..SiteOpts::default()
    });
    g.drain_servers(&["srv-a"]);
    // A call to the emergency number passes the draining sg-a...
    let to_112 = Req::ua("INVITE", "em-1@ua", "z9hG4bKem1").to("sip:112@example.com");
    forwarded(
        g.udp(L_SG_GUARD, UA, &to_112.bytes()),
        L_SG_GUARD,
        inst(SG_A),
    );
    // ...a call to anyone else does not, and neither does a REGISTER of
    // another AOR whose From happens to be 112 (REGISTER is about its To).
    let other = Req::ua("INVITE", "em-2@ua", "z9hG4bKem2").to("sip:113@example.com");
    replied(g.udp(L_SG_GUARD, UA, &other.bytes()), L_SG_GUARD, UA, 503);
    let reg = Req::ua("REGISTER", "em-3@ua", "z9hG4bKem3")
        .from("sip:112@example.com")
        .to("sip:alice@example.com");
    replied(g.udp(L_SG_GUARD, UA, &reg.bytes()), L_SG_GUARD, UA, 503);
}

#[test]
fn fwd_gate_via_sits_right_above_the_clients_via_wherever_it_is() {
    let g = Gate::std();
    // A client that writes Via after other headers: move the Via line last.
    let req = Req::ua("INVITE", "via-pos@ua", "z9hG4bKviapos");
    let via = req
        .headers
        .iter()
        .find(|(n, _)| n == "Via")
        .cloned()
        .unwrap();
    let req = req.without("Via").add("Via", &via.1);
    let input = req.bytes();
    let (_, fwd) = sent(g.udp(L_SG_BAL, UA, &input));
    let out = fwd.raw().clone();
    let text = text(&out);
    let lines: Vec<&str> = text.split("\r\n").collect();
    let ours = lines
        .iter()
        .position(|l| l.starts_with("Via: SIP/2.0/UDP ") && l.contains("branch=z9hG4bK-g"))
        .unwrap();
    assert!(
        lines[ours + 1].starts_with("Via: ") && lines[ours + 1].contains("z9hG4bKviapos"),
        "{text}"
    );
    // Record-Route is still the first header line.
    assert!(lines[1].starts_with("Record-Route: <sip:g1."), "{text}");
}

#[test]
fn a_client_sharing_an_instances_ip_is_still_a_client() {
    let g = Gate::std();
    // sg-a listens on INSTANCE_ADDR[0]; a UA on the same host, another port.
    let ip = addr(INSTANCE_ADDR[SG_A]).ip();
    let ua = std::net::SocketAddr::new(ip, 40_123).to_string();
    let call = call_id_for(&g, SG_B, "shared-ip");
    let invite = Req::ua("INVITE", &call, "z9hG4bKshared").bytes();
    // A new dialog addressed to the gate goes by policy, not "outward" by its
    // Request-URI (which is the gate itself).
    forwarded(g.udp(L_SG_BAL, &ua, &invite), L_SG_BAL, inst(SG_B));
}
