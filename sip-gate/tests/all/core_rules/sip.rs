//! Writing requests and responses, and looking at what the gate sent.

use std::net::SocketAddr;

use bytes::Bytes;
use sip_gate::{Action, HeaderName, Out, SipMessage, TokenKey};

use super::site::{addr, Gate, INSTANCE_ADDR, LISTENER_HOST, SECRET};

/// A request under construction: start line, header lines in order, body.
#[derive(Clone)]
pub struct Req {
    pub start: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Req {
    /// A request with the usual headers. `via` is the client's whole Via value.
    pub fn new(method: &str, uri: &str, call_id: &str, via: &str) -> Req {
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
    pub fn ua(method: &str, call_id: &str, branch: &str) -> Req {
        Req::new(
            method,
            "sip:bob@example.com",
            call_id,
            &format!("SIP/2.0/UDP 203.0.113.10:5062;branch={branch};rport"),
        )
    }

    /// Sets (replacing every header of that name) or adds a header.
    pub fn set(mut self, name: &str, value: &str) -> Req {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Adds a header line at the end, keeping others of that name.
    pub fn add(mut self, name: &str, value: &str) -> Req {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Adds a header line right after the Via lines (where Route usually is).
    pub fn add_first(mut self, name: &str, value: &str) -> Req {
        self.headers.insert(1, (name.into(), value.into()));
        self
    }

    pub fn without(mut self, name: &str) -> Req {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    pub fn tagged(self, tag: &str) -> Req {
        self.set("To", &format!("<sip:bob@example.com>;tag={tag}"))
    }

    pub fn from(self, uri: &str) -> Req {
        self.set("From", &format!("<{uri}>;tag=f1"))
    }

    pub fn to(self, uri: &str) -> Req {
        self.set("To", &format!("<{uri}>"))
    }

    pub fn body(mut self, ctype: &str, body: &[u8]) -> Req {
        self.body = body.to_vec();
        self.set("Content-Type", ctype)
    }

    pub fn bytes(&self) -> Bytes {
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
pub fn response_to(req: &SipMessage, code: u16, reason: &str, to_tag: &str) -> Bytes {
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

/// A branch never used before in this test process (so no request is taken
/// for a retransmission of another).
pub fn fresh_branch() -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("z9hG4bKfresh-{}", N.fetch_add(1, Ordering::Relaxed))
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

// === looking at what came out ===

/// The message the action sends and where; panics on `Action::None`.
pub fn sent(a: Action) -> (Out, SipMessage) {
    match a {
        Action::Send(out, bytes) => {
            let msg = SipMessage::parse(bytes.clone())
                .unwrap_or_else(|e| panic!("output does not parse ({e}): {}", text(&bytes)));
            (out, msg)
        }
        other => panic!("expected a message, got {other:?}"),
    }
}

pub fn udp_out(listener: usize, to: SocketAddr) -> Out {
    Out::Udp { listener, to }
}

/// A request forwarded over UDP on `listener` to `to`.
pub fn forwarded(a: Action, listener: usize, to: SocketAddr) -> SipMessage {
    let (out, msg) = sent(a);
    assert_eq!(out, udp_out(listener, to), "{}", text(msg.raw()));
    assert!(msg.is_request(), "{}", text(msg.raw()));
    msg
}

/// The instance a forwarded request went to (by its address).
pub fn dest(a: Action, listener: usize) -> usize {
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
pub fn replied(a: Action, listener: usize, peer: &str, code: u16) -> SipMessage {
    let (out, msg) = sent(a);
    assert_eq!(out, udp_out(listener, addr(peer)), "{}", text(msg.raw()));
    assert_eq!(msg.code(), Some(code), "{}", text(msg.raw()));
    msg
}

/// Like [`replied`] for replies to broken requests: they copy the broken
/// header as it was, so they are only scanned, not validated.
pub fn replied_scan(a: Action, listener: usize, peer: &str, code: u16) -> SipMessage {
    let Action::Send(out, bytes) = a else {
        panic!("expected a reply, got Action::None");
    };
    assert_eq!(out, udp_out(listener, addr(peer)));
    let m = SipMessage::scan(bytes).expect("reply scans");
    assert_eq!(m.code(), Some(code), "{}", text(m.raw()));
    m
}

pub fn via_values(m: &SipMessage) -> Vec<String> {
    m.vias().map(|v| text(&m.raw()[v.range])).collect()
}

pub fn route_uris(m: &SipMessage) -> Vec<String> {
    m.routes()
        .into_iter()
        .map(|r| text(&m.raw()[r.uri]))
        .collect()
}

pub fn rr_uris(m: &SipMessage) -> Vec<String> {
    m.record_routes()
        .into_iter()
        .map(|r| text(&m.raw()[r.uri]))
        .collect()
}

pub fn header(m: &SipMessage, name: HeaderName) -> Option<String> {
    m.fields(name).next().map(|f| text(m.value(f)))
}

pub fn other_header(m: &SipMessage, name: &str) -> Option<String> {
    m.headers()
        .iter()
        .find(|f| {
            m.slice(f.name_range.clone())
                .eq_ignore_ascii_case(name.as_bytes())
        })
        .map(|f| text(m.value(f)))
}

/// The Record-Route URI the gate writes for `instance` on `listener`, in
/// the dialog with `call_id` (the token's MAC covers it).
pub fn gate_rr(instance: &str, listener: usize, call_id: &str) -> String {
    format!(
        "sip:{}@{};lr",
        TokenKey::new(SECRET).seal(instance, call_id.as_bytes()),
        LISTENER_HOST[listener]
    )
}

/// The Route the UA sends back in-dialog for `instance`, in the dialog
/// with `call_id`.
pub fn gate_route(instance: &str, listener: usize, call_id: &str) -> String {
    format!("<{}>", gate_rr(instance, listener, call_id))
}

/// Checks the gate's new top Via: our address and a `z9hG4bK` branch.
pub fn assert_gate_via(m: &SipMessage, listener: usize) {
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

/// Header lines other than the ones a proxy edits (or adds: the gate's
/// Path) are copied verbatim and in order; the request line and the body are the same bytes.
pub fn assert_untouched(input: &Bytes, output: &SipMessage) {
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
            // The Path a subscriber's REGISTER gets (RFC 3327), tested in `nat`.
            .filter(|l| !l.starts_with(b"Path: <sip:f1."))
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
pub fn call_id_for(g: &Gate, want: usize, tag: &str) -> String {
    let view = g.drain.view();
    (0..10_000)
        .map(|n| format!("{tag}-{n}@ua"))
        .find(|c| view.pick(&ringsync::config::Service::Sg, c.as_bytes()) == Some(want))
        .expect("a key for the instance")
}
