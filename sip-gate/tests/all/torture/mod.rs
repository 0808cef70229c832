//! Hostile messages in the spirit of RFC 4475 (SIP torture tests), and
//! (`wire.rs`) the RFC's own messages, bit-exact, through the binary.
//!
//! The messages follow the RFC's examples (names kept: wsinv, intmeth, ...)
//! with LF line ends in the source turned into CRLF and Content-Length
//! computed from the body written here, so the tests check the parser rather
//! than transcription of the RFC's byte counts.
//!
//! `valid.rs`: messages RFC 4475 3.1.1 calls valid however odd they look,
//! and a TCP stream of them framed byte by byte; `invalid.rs`: the 3.1.2
//! messages that must be refused (with a 400 where one can be answered).

use bytes::Bytes;
use sip_gate::frame::{self, Frame};
use sip_gate::{ParseError, SipMessage};

mod invalid;
mod valid;
mod wire;

/// `head` uses LF line ends and may contain `{CL}`; returns CRLF text plus
/// `body`.
pub(crate) fn msg(head: &str, body: &[u8]) -> Bytes {
    let head = head.replace("{CL}", &body.len().to_string());
    let mut v = head.replace('\n', "\r\n").into_bytes();
    v.extend_from_slice(body);
    Bytes::from(v)
}

pub(crate) fn parse(b: &Bytes) -> SipMessage {
    match SipMessage::parse(b.clone()) {
        Ok(m) => m,
        Err(e) => panic!("{e}: {}", String::from_utf8_lossy(b)),
    }
}

pub(crate) fn err(b: &Bytes) -> ParseError {
    SipMessage::parse(b.clone()).expect_err("message must be rejected")
}

/// Frames `stream` byte by byte, as the worst possible TCP peer would send
/// it, and returns the messages (keep-alives dropped).
pub(crate) fn frame_bytewise(stream: &[u8]) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    for &b in stream {
        buf.push(b);
        while let Some(f) = frame::check(&buf, 1 << 20).expect("framing error") {
            let rest = buf.split_off(f.len());
            if let Frame::Message { .. } = f {
                out.push(Bytes::from(std::mem::replace(&mut buf, rest)));
            } else {
                buf = rest;
            }
        }
    }
    assert!(buf.is_empty() || buf == b"\r\n", "left over: {buf:?}");
    out
}

/// The SDP body of RFC 4475's INVITE examples.
pub(crate) const SDP: &[u8] = b"v=0\r\no=mhandley 29739 7272939 IN IP4 192.0.2.3\r\ns=-\r\nc=IN IP4 192.0.2.4\r\nt=0 0\r\nm=audio 49217 RTP/AVP 0 12\r\nm=video 3227 RTP/AVP 31\r\na=rtpmap:31 LPC\r\n";
