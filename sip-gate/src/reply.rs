//! Responses the gate generates itself (400, 403, 404, 483, 503, 505), built
//! with rsip's typed headers.
//!
//! Forwarded messages never go through rsip: it would re-serialise them. A
//! generated response is new text, so there rsip is the right tool.

use std::net::SocketAddr;

use crate::digits;
use crate::keys::{self, Key, Purpose};
use crate::message::{HeaderName, SipMessage};
use bytes::Bytes;
use rsip::headers::{self, UntypedHeader};
use rsip::{Header, Headers, Response, StatusCode, Version};

/// A response to generate.
#[derive(Debug, Clone)]
pub(crate) struct Reply<'r> {
    /// Status code.
    pub(crate) code: u16,
    /// Reason phrase; the standard one for the code when `None`.
    pub(crate) reason: Option<&'r str>,
    /// `Retry-After` seconds (R-SG-5).
    pub(crate) retry_after: Option<u32>,
    /// Extra header lines, `Name: value`, without CRLF.
    pub(crate) extra: &'r [(&'r str, String)],
}

/// The `Server` header of the gate's own responses when `[site]
/// server_header` is not set.
pub(crate) const DEFAULT_SERVER: &str = concat!("sip-gate/", env!("CARGO_PKG_VERSION"));

impl<'r> Reply<'r> {
    /// A response with the standard reason phrase and nothing extra.
    pub(crate) fn new(code: u16) -> Self {
        Reply {
            code,
            reason: None,
            retry_after: None,
            extra: &[],
        }
    }
    /// The same with a reason phrase.
    pub(crate) fn reason(code: u16, reason: &'r str) -> Self {
        Reply {
            code,
            reason: Some(reason),
            retry_after: None,
            extra: &[],
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Makes the To tags of the responses the gate generates.
#[derive(Clone, Debug)]
pub(crate) struct TagKey(Key);

/// Tags the gate makes start with this while it names itself in `Server`,
/// so most tags are told apart without computing anything; a site that
/// hides the product (`[site] server_header` set) gets tags of the MAC
/// alone, which look like any UA's random tag.
const TAG_PREFIX: &str = "gw";

impl TagKey {
    /// Derives the key from the site secret ([`crate::keys`]).
    pub(crate) fn new(secret: &str) -> TagKey {
        TagKey(Key::derive(secret, Purpose::ReplyTag))
    }

    fn mac(&self, msg: &SipMessage) -> [u8; 6] {
        let call_id = msg.call_id().unwrap_or_default();
        let from_tag = msg.from_tag().unwrap_or_default();
        let cseq = msg.cseq().map_or(0, |c| c.0);
        let branch = msg.top_via().and_then(|v| v.branch).unwrap_or_default();
        // Lengths first, so no two field sets hash the same bytes.
        let lens = [call_id.len(), from_tag.len(), branch.len()].map(|n| n as u32);
        let mut head = [0u8; 16];
        for (chunk, n) in head.chunks_exact_mut(4).zip(lens.iter().chain([&cseq])) {
            chunk.copy_from_slice(&n.to_be_bytes());
        }
        self.0.mac(&[&head, call_id, from_tag, branch])
    }

    /// A To tag that is the same for every retransmission of the request, so
    /// a UAC that sees the response twice sees one dialog (RFC 3261 8.2.6.2).
    /// The ACK of a non-2xx keeps the INVITE's Call-ID, From tag, CSeq number
    /// and branch (RFC 3261 17.1.1.3), so it carries this same tag: that is
    /// how the core recognises the ACK of a response it generated.
    /// `named`: the gate names itself (the default `Server`), and its tags
    /// say so too.
    pub(crate) fn tag(&self, msg: &SipMessage, named: bool) -> String {
        let mut t = String::with_capacity(TAG_PREFIX.len() + 12);
        if named {
            t.push_str(TAG_PREFIX);
        }
        keys::push_hex(&mut t, &self.mac(msg));
        t
    }

    /// Whether `msg` (an ACK) carries the To tag of a response the gate
    /// generated for its transaction; the MAC is compared in constant time.
    /// Tags with and without the prefix are both taken, so a reload that
    /// changes `server_header` does not strand the ACKs of earlier answers.
    pub(crate) fn is_ours(&self, msg: &SipMessage) -> bool {
        let Some(tag) = msg.to_tag() else {
            return false;
        };
        let hex = tag.strip_prefix(TAG_PREFIX.as_bytes()).unwrap_or(tag);
        keys::parse_hex::<6>(hex).is_some_and(|mac| keys::same(&mac, &self.mac(msg)))
    }
}

/// Builds the response to `req`, received from `source`: every Via copied in
/// order (the top one with `received`/`rport` per RFC 3581), From, To (with a
/// tag added when the request had none), Call-ID, CSeq, `Server` (when
/// `server` is not empty: scanners fingerprint it, so a site may change or
/// drop it), `Content-Length: 0`.
pub(crate) fn build(
    req: &SipMessage,
    source: SocketAddr,
    reply: &Reply<'_>,
    tags: &TagKey,
    server: &str,
) -> Bytes {
    build_as(req, source, reply, tags, server, None)
}

/// The response to the INVITE that `cancel` cancels, built from the CANCEL
/// alone: RFC 3261 9.1 has a CANCEL carry its INVITE's Request-URI, Call-ID,
/// From, To, CSeq number and top Via, so only the CSeq method differs. The
/// To tag is the one [`build`] gives the CANCEL itself (the tag's MAC takes
/// neither method), so the ACK of this response is recognised as the gate's
/// ([`TagKey::is_ours`]).
pub(crate) fn build_for_invite(
    cancel: &SipMessage,
    source: SocketAddr,
    reply: &Reply<'_>,
    tags: &TagKey,
    server: &str,
) -> Bytes {
    let cseq = cancel.cseq().map_or(0, |c| c.0);
    build_as(
        cancel,
        source,
        reply,
        tags,
        server,
        Some(format!("{cseq} INVITE")),
    )
}

/// [`build`], with `cseq` as the CSeq value instead of the request's.
fn build_as(
    req: &SipMessage,
    source: SocketAddr,
    reply: &Reply<'_>,
    tags: &TagKey,
    server: &str,
    cseq: Option<String>,
) -> Bytes {
    let mut hs: Vec<Header> = Vec::with_capacity(10);
    for (i, via) in req.vias().enumerate() {
        let raw = req.raw().get(via.range.clone()).unwrap_or_default();
        let value = if i == 0 {
            text(&stamp_via(raw, via.rport.is_some(), source))
        } else {
            text(raw)
        };
        hs.push(headers::Via::new(value).into());
    }
    for f in req.fields(HeaderName::From).take(1) {
        hs.push(headers::From::new(text(req.value(f))).into());
    }
    for f in req.fields(HeaderName::To).take(1) {
        let mut to = text(req.value(f));
        if req.to_tag().is_none() && reply.code > 100 {
            to.push_str(";tag=");
            to.push_str(&tags.tag(req, server == DEFAULT_SERVER));
        }
        hs.push(headers::To::new(to).into());
    }
    if let Some(id) = req.call_id() {
        hs.push(headers::CallId::new(text(id)).into());
    }
    match cseq {
        Some(value) => hs.push(headers::CSeq::new(value).into()),
        None => {
            for f in req.fields(HeaderName::CSeq).take(1) {
                hs.push(headers::CSeq::new(text(req.value(f))).into());
            }
        }
    }
    if let Some(secs) = reply.retry_after {
        hs.push(headers::RetryAfter::new(secs.to_string()).into());
    }
    for (name, value) in reply.extra {
        hs.push(Header::Other((*name).to_owned(), value.clone()));
    }
    if !server.is_empty() {
        hs.push(headers::Server::new(server).into());
    }
    hs.push(headers::ContentLength::new("0").into());
    // Always our own phrase: rsip prints its known codes as Rust names
    // ("ServiceUnavailable"), which is not the RFC 3261 reason phrase.
    let reason = reply.reason.unwrap_or_else(|| standard_reason(reply.code));
    let status_code = StatusCode::Other(reply.code, reason.to_owned());
    let resp = Response {
        status_code,
        version: Version::V2,
        headers: Headers::from(hs),
        body: Vec::new(),
    };
    Bytes::from(resp.to_string())
}

/// RFC 3261 21 reason phrases of the codes the gate generates.
fn standard_reason(code: u16) -> &'static str {
    match code {
        100 => "Trying",
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        430 => "Flow Failed",
        487 => "Request Terminated",
        481 => "Call/Transaction Does Not Exist",
        483 => "Too Many Hops",
        500 => "Server Internal Error",
        503 => "Service Unavailable",
        505 => "Version Not Supported",
        _ => "Unknown",
    }
}

/// Adds `received` (when the source differs from sent-by) and fills `rport`
/// (when the client asked for it), RFC 3261 18.2.1 and RFC 3581 4.
pub(crate) fn stamp_via(raw: &[u8], wants_rport: bool, source: SocketAddr) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len().saturating_add(48));
    stamp_via_into(raw, wants_rport, source, &mut out);
    out
}

/// [`stamp_via`] appended to `out` (a forward writes it into its splice).
pub(crate) fn stamp_via_into(raw: &[u8], wants_rport: bool, source: SocketAddr, out: &mut Vec<u8>) {
    // Drop an empty `;rport` (to be filled) and any stale `received`. The
    // `;`s are found with memchr: this runs on every forwarded request.
    let mut params = memchr::memchr_iter(b';', raw).chain(std::iter::once(raw.len()));
    let first_end = params.next().unwrap_or(raw.len());
    out.extend_from_slice(raw.get(..first_end).unwrap_or_default().trim_ascii_end());
    let mut start = first_end.saturating_add(1);
    for end in params {
        let p = raw.get(start..end).unwrap_or_default().trim_ascii();
        start = end.saturating_add(1);
        let name_end = memchr::memchr(b'=', p).unwrap_or(p.len());
        let name = p.get(..name_end).unwrap_or_default().trim_ascii();
        if name.eq_ignore_ascii_case(b"rport") || name.eq_ignore_ascii_case(b"received") {
            continue;
        }
        out.push(b';');
        out.extend_from_slice(p);
    }
    out.extend_from_slice(b";received=");
    digits::push_ip(out, source.ip());
    if wants_rport {
        out.extend_from_slice(b";rport=");
        digits::push_decimal(out, u64::from(source.port()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `stamp_via` as first written (split and trim), the reference for
    /// the memchr walk.
    fn stamp_via_split(raw: &[u8], wants_rport: bool, source: SocketAddr) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, part) in raw.split(|&b| b == b';').enumerate() {
            if i == 0 {
                out.extend_from_slice(part.trim_ascii_end());
                continue;
            }
            let p = part.trim_ascii();
            let name = p
                .split(|&b| b == b'=')
                .next()
                .unwrap_or_default()
                .trim_ascii();
            if name.eq_ignore_ascii_case(b"rport") || name.eq_ignore_ascii_case(b"received") {
                continue;
            }
            out.push(b';');
            out.extend_from_slice(p);
        }
        out.extend_from_slice(b";received=");
        digits::push_ip(&mut out, source.ip());
        if wants_rport {
            out.extend_from_slice(b";rport=");
            digits::push_decimal(&mut out, u64::from(source.port()));
        }
        out
    }

    proptest! {
        #[test]
        fn stamp_via_walk_matches_the_split(
            raw in proptest::collection::vec(
                prop::sample::select(&b"SIP/2.0 UDP;=rportRECEIVEDbranch \t1.:"[..]), 0..60),
            rport: bool,
        ) {
            let src: SocketAddr = "192.0.2.9:40000".parse().unwrap();
            prop_assert_eq!(stamp_via(&raw, rport, src), stamp_via_split(&raw, rport, src));
        }
    }

    #[test]
    fn stamp_via_replaces_received_and_fills_rport() {
        let src: SocketAddr = "192.0.2.9:40000".parse().unwrap();
        let raw = b"SIP/2.0/UDP 10.0.0.1:5060 ; branch=z9hG4bK1;rport; Received=1.2.3.4;x";
        assert_eq!(
            stamp_via(raw, true, src),
            b"SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK1;x;received=192.0.2.9;rport=40000".to_vec()
        );
    }

    fn tags() -> TagKey {
        TagKey::new("a-long-enough-site-secret")
    }

    const INVITE: &[u8] = b"INVITE sip:bob@example.com SIP/2.0\r\n\
v: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK1;rport\r\n\
Via: SIP/2.0/UDP 10.0.0.2;branch=z9hG4bK0, SIP/2.0/TCP 10.0.0.3;branch=z9hG4bKx\r\n\
f: Alice <sip:alice@example.com>;tag=a1\r\n\
To: <sip:bob@example.com>\r\n\
i: abc@10.0.0.1\r\n\
CSeq: 7 INVITE\r\n\
Max-Forwards: 70\r\n\
l: 4\r\n\r\nbody";

    #[test]
    fn copies_vias_and_adds_to_tag_and_retry_after() {
        let req = SipMessage::parse(Bytes::from_static(INVITE)).unwrap();
        let src: SocketAddr = "192.0.2.9:40000".parse().unwrap();
        let out = build(
            &req,
            src,
            &Reply {
                code: 503,
                reason: None,
                retry_after: Some(30),
                extra: &[],
            },
            &tags(),
            DEFAULT_SERVER,
        );
        let text = std::str::from_utf8(&out).unwrap();
        assert!(
            text.starts_with("SIP/2.0 503 Service Unavailable\r\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "Via: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK1;received=192.0.2.9;rport=40000\r\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("Via: SIP/2.0/UDP 10.0.0.2;branch=z9hG4bK0\r\n"),
            "{text}"
        );
        assert!(
            text.contains("Via: SIP/2.0/TCP 10.0.0.3;branch=z9hG4bKx\r\n"),
            "{text}"
        );
        assert!(text.contains("To: <sip:bob@example.com>;tag=gw"), "{text}");
        assert!(
            text.contains("From: Alice <sip:alice@example.com>;tag=a1\r\n"),
            "{text}"
        );
        assert!(text.contains("Call-ID: abc@10.0.0.1\r\n"), "{text}");
        assert!(text.contains("CSeq: 7 INVITE\r\n"), "{text}");
        assert!(text.contains("Retry-After: 30\r\n"), "{text}");
        assert!(text.contains("Server: sip-gate/"), "{text}");
        assert!(text.ends_with("Content-Length: 0\r\n\r\n"), "{text}");
        // The response parses with our own scanner, and the tag is stable.
        let resp = SipMessage::parse(out.clone()).unwrap();
        assert_eq!(resp.code(), Some(503));
        let again = build(
            &req,
            src,
            &Reply {
                code: 503,
                reason: None,
                retry_after: Some(30),
                extra: &[],
            },
            &tags(),
            DEFAULT_SERVER,
        );
        assert_eq!(out, again);
    }

    #[test]
    fn custom_reason() {
        let req = SipMessage::parse(Bytes::from_static(INVITE)).unwrap();
        let out = build(
            &req,
            "10.0.0.1:5060".parse().unwrap(),
            &Reply::reason(400, "Bad CSeq"),
            &tags(),
            DEFAULT_SERVER,
        );
        assert!(out.starts_with(b"SIP/2.0 400 Bad CSeq\r\n"));
    }

    #[test]
    fn server_header_as_configured_or_none() {
        let req = SipMessage::parse(Bytes::from_static(INVITE)).unwrap();
        let src = "10.0.0.1:5060".parse().unwrap();
        let set = build(&req, src, &Reply::new(483), &tags(), "edge");
        assert!(std::str::from_utf8(&set)
            .unwrap()
            .contains("\r\nServer: edge\r\n"));
        let none = build(&req, src, &Reply::new(483), &tags(), "");
        assert!(!std::str::from_utf8(&none).unwrap().contains("Server:"));
    }

    /// R-SEC-4: a site that hides the product gets To tags that do not
    /// name it either, and the ACK of such an answer is still recognised.
    #[test]
    fn hidden_server_hides_the_tag_prefix_too() {
        let req = SipMessage::parse(Bytes::from_static(INVITE)).unwrap();
        let src = "10.0.0.1:5060".parse().unwrap();
        for (server, prefixed) in [(DEFAULT_SERVER, true), ("edge", false), ("", false)] {
            let out = build(&req, src, &Reply::new(486), &tags(), server);
            let resp = SipMessage::parse(out).unwrap();
            let tag = resp.to_tag().unwrap().to_vec();
            assert_eq!(tag.starts_with(b"gw"), prefixed, "{server:?}");
            assert_eq!(tag.len(), if prefixed { 14 } else { 12 }, "{server:?}");
            let ack = String::from_utf8_lossy(INVITE)
                .replacen("INVITE sip", "ACK sip", 1)
                .replace("CSeq: 7 INVITE", "CSeq: 7 ACK")
                .replace(
                    "To: <sip:bob@example.com>",
                    &format!(
                        "To: <sip:bob@example.com>;tag={}",
                        String::from_utf8_lossy(&tag)
                    ),
                );
            let ack = SipMessage::parse(Bytes::from(ack)).unwrap();
            assert!(tags().is_ours(&ack), "{server:?}");
        }
    }
}
